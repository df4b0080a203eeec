//! How a job's processes prove they hold its token, and how the GRM proves
//! it back, without the token crossing the network (docs/SECURITY.md).
//!
//! From the token each side derives, with BLAKE3's key derivation:
//! - the job's **id**, 16 bytes, which names the job on the wire;
//! - the job's **verifier**, the key of the proofs. The launcher hands it
//!   to the GRM when it registers the job (over loopback for fmrun's own
//!   GRM); the processes derive it themselves.
//!
//! A connection starts with the GRM's `Challenge`, a fresh random nonce.
//! A `Join` carries its own nonce and a proof: the keyed hash, under the
//! verifier, of the challenge and the Join's encoding (with the proof
//! field zero), so a recorded Join is worthless on any other connection
//! and no field of it can be changed. The `Welcome` carries a proof over
//! the joiner's nonce and the Welcome's encoding, so only a GRM that was
//! given the verifier can hand out a node map. The packet key of the
//! network devices is derived from the token under yet another context,
//! so even the GRM cannot forge packets.

/// The public name of a job on the wire.
pub type JobId = [u8; 16];
/// A proof's (and a nonce's) length.
pub type Proof = [u8; 32];

/// The job id of `token`.
pub fn job_id(token: &str) -> JobId {
    let k = blake3::derive_key("fm 2026-11 GRM job id", token.as_bytes());
    let mut id = [0; 16];
    id.copy_from_slice(&k[..16]);
    id
}

/// The key of the job's proofs, derived from its token.
pub fn verifier(token: &str) -> Proof {
    blake3::derive_key("fm 2026-11 GRM join verifier", token.as_bytes())
}

/// A fresh random nonce.
pub fn nonce() -> Proof {
    rand::random()
}

/// The proof of `what` (a label), the nonce it answers and the message's bytes.
pub fn prove(verifier: &Proof, what: &str, nonce: &Proof, message: &[u8]) -> Proof {
    let mut h = blake3::Hasher::new_keyed(verifier);
    h.update(what.as_bytes());
    h.update(&[0]);
    h.update(nonce);
    h.update(message);
    *h.finalize().as_bytes()
}

/// Does `proof` prove `what`? (Compared in constant time.)
pub fn check(verifier: &Proof, what: &str, nonce: &Proof, message: &[u8], proof: &Proof) -> bool {
    blake3::Hash::from(prove(verifier, what, nonce, message)) == blake3::Hash::from(*proof)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proofs_bind_key_label_nonce_and_message() {
        let v = verifier("token-0123456789abcdef");
        let n = nonce();
        let p = prove(&v, "join", &n, b"message");
        assert!(check(&v, "join", &n, b"message", &p));
        assert!(!check(
            &verifier("other-token-0123456"),
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
}
