//! How a job's launcher and processes prove they hold its token, and how
//! the GRM proves it was given the job, without the token, or anything
//! that lets its reader join, crossing the network (docs/SECURITY.md).
//!
//! From the token each side derives, with BLAKE3's key derivation:
//! - the job's **id**, 16 bytes, which names the job on the wire;
//! - the job's **signing key**, an Ed25519 key that never leaves the
//!   job's processes. Its public half is the job's **verifier**: the
//!   launcher hands it to the GRM when it registers the job, and the GRM
//!   checks every Join's signature with it. Reading it lets nobody join;
//! - the job's **welcome key**, which the launcher also hands to the GRM,
//!   so that the GRM can prove each Welcome (the node map) to the
//!   processes. Reading it lets nobody join either; it lets its reader
//!   hand out node maps in the GRM's place to processes it can answer.
//!
//! A connection starts with the GRM's `Challenge`, a fresh random nonce.
//! A `Register` and a `Join` are signed over the challenge and their own
//! encoding (with the signature field zero), so a recorded one is
//! worthless on any other connection and no field of it can be changed.
//! The `Welcome` carries a keyed hash, under the welcome key, over the
//! joiner's nonce and the Welcome's encoding. The packet key of the
//! network devices is derived from the token under yet another context,
//! so even the GRM cannot forge packets.

use ed25519_dalek::{Signer, SigningKey, VerifyingKey};

/// The public name of a job on the wire.
pub type JobId = [u8; 16];
/// A nonce's, a key's and a keyed hash's length.
pub type Proof = [u8; 32];
/// An Ed25519 signature.
pub type Signature = [u8; 64];

/// The job id of `token`.
pub fn job_id(token: &str) -> JobId {
    let k = blake3::derive_key("fm 2026-11 GRM job id", token.as_bytes());
    let mut id = [0; 16];
    id.copy_from_slice(&k[..16]);
    id
}

fn signing_key(token: &str) -> SigningKey {
    SigningKey::from_bytes(&blake3::derive_key(
        "fm 2026-12 GRM job signing key",
        token.as_bytes(),
    ))
}

/// The job's verifier: the public key its Registers and Joins are
/// checked with (public: it proves nothing by itself).
pub fn verifier(token: &str) -> Proof {
    signing_key(token).verifying_key().to_bytes()
}

/// The key of the Welcome's keyed hash, derived from the token.
pub fn welcome_key(token: &str) -> Proof {
    blake3::derive_key("fm 2026-12 GRM welcome key", token.as_bytes())
}

/// A fresh random nonce.
pub fn nonce() -> Proof {
    rand::random()
}

/// What a signature or a keyed hash covers: a label, the nonce it
/// answers and the message's bytes.
fn covered(what: &str, nonce: &Proof, message: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(what.len() + 1 + nonce.len() + message.len());
    v.extend_from_slice(what.as_bytes());
    v.push(0);
    v.extend_from_slice(nonce);
    v.extend_from_slice(message);
    v
}

/// The token's signature of `what` (a label), the nonce it answers and the
/// message's bytes.
pub fn sign(token: &str, what: &str, nonce: &Proof, message: &[u8]) -> Signature {
    signing_key(token)
        .sign(&covered(what, nonce, message))
        .to_bytes()
}

/// Is `signature` the signature, by the key whose public half is
/// `verifier`, of `what`, `nonce` and `message`? (A verifier that is no
/// valid key signs nothing.)
pub fn verify(
    verifier: &Proof,
    what: &str,
    nonce: &Proof,
    message: &[u8],
    signature: &Signature,
) -> bool {
    let Ok(key) = VerifyingKey::from_bytes(verifier) else {
        return false;
    };
    let sig = ed25519_dalek::Signature::from_bytes(signature);
    key.verify_strict(&covered(what, nonce, message), &sig)
        .is_ok()
}

/// The keyed hash, under `key`, of `what` (a label), the nonce it answers
/// and the message's bytes.
pub fn prove(key: &Proof, what: &str, nonce: &Proof, message: &[u8]) -> Proof {
    let mut h = blake3::Hasher::new_keyed(key);
    h.update(what.as_bytes());
    h.update(&[0]);
    h.update(nonce);
    h.update(message);
    *h.finalize().as_bytes()
}

/// Does `proof` prove `what`? (Compared in constant time.)
pub fn check(key: &Proof, what: &str, nonce: &Proof, message: &[u8], proof: &Proof) -> bool {
    blake3::Hash::from(prove(key, what, nonce, message)) == blake3::Hash::from(*proof)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proofs_bind_key_label_nonce_and_message() {
        let v = welcome_key("token-0123456789abcdef");
        let n = nonce();
        let p = prove(&v, "join", &n, b"message");
        assert!(check(&v, "join", &n, b"message", &p));
        assert!(!check(
            &welcome_key("other-token-0123456"),
            "join",
            &n,
            b"message",
            &p
        ));
        assert!(!check(&v, "welcome", &n, b"message", &p));
        assert!(!check(&v, "join", &nonce(), b"message", &p));
        assert!(!check(&v, "join", &n, b"messagf", &p));
        assert_ne!(job_id("a-token-0123456789"), job_id("b-token-0123456789"));
        assert_ne!(
            job_id("a-token-0123456789")[..],
            verifier("a-token-0123456789")[..16]
        );
    }

    /// A signature needs the token: the verifier and the welcome key,
    /// which the GRM holds and the wire carries, make none that verifies;
    /// nor does a signature of another label, nonce or message.
    #[test]
    fn signatures_need_the_token_and_bind_label_nonce_and_message() {
        let token = "token-0123456789abcdef";
        let v = verifier(token);
        let n = nonce();
        let s = sign(token, "join", &n, b"message");
        assert!(verify(&v, "join", &n, b"message", &s));
        assert!(!verify(&v, "register", &n, b"message", &s));
        assert!(!verify(&v, "join", &nonce(), b"message", &s));
        assert!(!verify(&v, "join", &n, b"messagf", &s));
        assert!(!verify(
            &verifier("other-token-0123456"),
            "join",
            &n,
            b"message",
            &s
        ));
        // What a holder of the verifier and the welcome key can try: use
        // them as if they were the token, or as a signing key's seed.
        for posing in [hex(&v), hex(&welcome_key(token))] {
            assert!(!verify(
                &v,
                "join",
                &n,
                b"message",
                &sign(&posing, "join", &n, b"message")
            ));
        }
        for seed in [v, welcome_key(token)] {
            let forged = SigningKey::from_bytes(&seed).sign(&covered("join", &n, b"message"));
            assert!(!verify(&v, "join", &n, b"message", &forged.to_bytes()));
        }
        let mut bent = s;
        bent[5] ^= 1;
        assert!(!verify(&v, "join", &n, b"message", &bent));
        assert!(
            !verify(&[0xff; 32], "join", &n, b"message", &s),
            "not a key"
        );
    }

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }
}
