//! The reliable layer's packet header, 64 bytes, little-endian:
//!
//! ```text
//!  0  u16 magic "Fm"        2  u8 version      3  u8 kind (DATA ACK LOSE STOP GO)
//!  4  u64 job key           12 u32 source rank 16 u32 destination rank
//! 20  u32 source epoch      24 u32 destination epoch (as the source knows it)
//! 28  u32 sequence number (DATA) or the control message's number
//! 32  u32 cumulative ACK: last in-order sequence received from the destination
//! 36  u32 payload length    40 u32 CRC-32C of the header (this field zero),
//!                                 and of the payload when flag 1 is set
//! 44  u32 flags: 1 = the CRC covers the payload; 2 = a MAC is present;
//!                other bits zero
//! 48  16 bytes: the MAC (flag 2), else zero
//! ```
//!
//! A control packet (ACK LOSE STOP GO) carries 4 bytes after the header:
//! its sender's *control number*, which grows by one with every LOSE, STOP
//! and GO to a peer (an ACK carries the current one). A receiver acts on a
//! LOSE, STOP or GO only when its number is newer than the last one it
//! acted on from that peer: a captured control packet replayed later, or
//! one the network reordered behind a newer one, is a counted duplicate,
//! never an action (every other effect of a packet is idempotent: an ACK
//! or a DATA already seen changes nothing). The number is under the MAC.
//!
//! The header is always checked. The payload is covered when the path has
//! no checksum of its own to rely on: UDP's checksum protects payloads on
//! real links, so the ethernet device covers them only when asked
//! (`FM_ETH_CHECKSUM=full`) or when fault injection corrupts packets.
//!
//! The MAC authenticates the packet: 16 bytes under the job's [`MacKey`]
//! (SipHash-2-4-128 for short datagrams, keyed BLAKE3 for the rest), over
//! bytes 0..40 and 44..48 of the header and the whole payload. Only the job's ranks know the key (it is
//! derived from the job's token, which never crosses the network), so a
//! packet forged or altered by anyone else is dropped, whatever job key,
//! epoch and sequence it claims. The CRC, which covers the MAC field, is
//! checked first: garbage costs no MAC.
//!
//! An epoch is a random number drawn when a device opens: a packet of an
//! earlier incarnation of a process, or meant for one, carries another and
//! is dropped. [`Header::parse`] checks everything that can be checked
//! without state and never panics on any bytes.

pub const HEADER: usize = 64;
pub const MAGIC: u16 = u16::from_le_bytes(*b"Fm");
pub const VERSION: u8 = 3;
/// The payload of a control packet: its control number.
pub const CONTROL_LEN: u32 = 4;
/// Flag: the CRC covers the payload too.
pub const FLAG_PAYLOAD_CRC: u32 = 1;
/// Flag: bytes 48..64 hold the packet's MAC.
pub const FLAG_MAC: u32 = 2;
/// Where the MAC sits in the header, and its length.
const MAC_AT: usize = 48;
pub const MAC_LEN: usize = 16;

/// A job's keys for packet MACs: derived from the job's token by every
/// rank, so the token itself is never sent. Two functions, chosen by the
/// datagram's length (which the MAC covers, so a forger cannot choose):
/// SipHash-2-4 with 128-bit output for datagrams of up to [`SHORT_MAC`]
/// bytes (every control packet, small DATA: 30 ns where BLAKE3 takes 90,
/// and the 8 B latency pays it twice), keyed BLAKE3 above (6 GB/s here,
/// where SipHash does 1.5).
#[derive(Clone)]
pub struct MacKey {
    short: [u8; 16],
    long: [u8; 32],
}

/// Datagrams of at most this many bytes are authenticated by SipHash.
pub const SHORT_MAC: usize = 2 * HEADER;

impl std::fmt::Debug for MacKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MacKey(…)")
    }
}

impl MacKey {
    /// The packet keys of the job whose token is `token`.
    pub fn from_token(token: &str) -> MacKey {
        let derive = |what| blake3::derive_key(what, token.as_bytes());
        let mut short = [0u8; 16];
        short.copy_from_slice(&derive("fm 2026-11 reliable-layer short packet MAC")[..16]);
        MacKey {
            short,
            long: derive("fm 2026-11 reliable-layer packet MAC"),
        }
    }

    /// The MAC of a whole datagram (header and payload); the CRC and MAC
    /// fields are not covered.
    pub fn tag(&self, d: &[u8]) -> [u8; MAC_LEN] {
        let (head, flags, payload) = (&d[..40], &d[44..48], &d[HEADER.min(d.len())..]);
        let mut out = [0u8; MAC_LEN];
        if d.len() <= SHORT_MAC {
            use std::hash::Hasher;
            let mut h = siphasher::sip128::SipHasher24::new_with_key(&self.short);
            h.write(head);
            h.write(flags);
            h.write(payload);
            out = siphasher::sip128::Hasher128::finish128(&h).as_bytes();
        } else {
            // The payload first: whole chunks from its start go to the
            // SIMD path instead of being shifted behind the header bytes.
            let mut h = blake3::Hasher::new_keyed(&self.long);
            h.update(payload);
            h.update(head);
            h.update(flags);
            h.finalize_xof().fill(&mut out);
        }
        out
    }

    /// Does the datagram carry this key's MAC? (Compared in constant time.)
    pub fn verify(&self, d: &[u8]) -> bool {
        if d.len() < HEADER {
            return false;
        }
        let want = self.tag(d);
        let got = &d[MAC_AT..MAC_AT + MAC_LEN];
        want.iter().zip(got).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    Data = 1,
    /// Cumulative acknowledgement of `number`.
    Ack = 2,
    /// A gap: `number` is the last in-order sequence received; resend after it.
    Lose = 3,
    /// Receive pool full: `number` is the last sequence accepted; stop sending.
    Stop = 4,
    /// Room again: `number` is the next sequence expected; resume from it.
    Go = 5,
}

impl Kind {
    fn from_u8(v: u8) -> Option<Kind> {
        Some(match v {
            1 => Kind::Data,
            2 => Kind::Ack,
            3 => Kind::Lose,
            4 => Kind::Stop,
            5 => Kind::Go,
            _ => return None,
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub kind: Kind,
    pub job_key: u64,
    pub src: u32,
    pub dst: u32,
    pub src_epoch: u32,
    pub dst_epoch: u32,
    /// DATA: its sequence number; control: the number the message carries.
    pub number: u32,
    pub ack: u32,
    /// Payload length: [`CONTROL_LEN`] for a control packet.
    pub len: u32,
    /// A control packet's control number (its payload); 0 for DATA.
    pub control: u32,
    /// The checksum covers the payload (flag 1).
    pub payload_crc: bool,
    /// A MAC is present (flag 2); [`MacKey::verify`] checks it.
    pub mac: bool,
}

/// Why a datagram was dropped before it reached the protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Malformed {
    Short,
    Magic,
    Version,
    Kind,
    Length,
    Checksum,
    Reserved,
}

impl Header {
    /// Write the header into `out[..HEADER]` (and a control packet's
    /// number after it): the MAC under `key` when given (over
    /// `out[..HEADER + len]`), then the checksum.
    pub fn write(&self, out: &mut [u8], key: Option<&MacKey>) {
        out[0..2].copy_from_slice(&MAGIC.to_le_bytes());
        out[2] = VERSION;
        out[3] = self.kind as u8;
        out[4..12].copy_from_slice(&self.job_key.to_le_bytes());
        out[12..16].copy_from_slice(&self.src.to_le_bytes());
        out[16..20].copy_from_slice(&self.dst.to_le_bytes());
        out[20..24].copy_from_slice(&self.src_epoch.to_le_bytes());
        out[24..28].copy_from_slice(&self.dst_epoch.to_le_bytes());
        out[28..32].copy_from_slice(&self.number.to_le_bytes());
        out[32..36].copy_from_slice(&self.ack.to_le_bytes());
        out[36..40].copy_from_slice(&self.len.to_le_bytes());
        out[40..44].fill(0);
        let mut flags = 0;
        if self.payload_crc {
            flags |= FLAG_PAYLOAD_CRC;
        }
        if key.is_some() {
            flags |= FLAG_MAC;
        }
        out[44..48].copy_from_slice(&flags.to_le_bytes());
        if self.kind != Kind::Data {
            out[HEADER..HEADER + CONTROL_LEN as usize].copy_from_slice(&self.control.to_le_bytes());
        }
        let whole = HEADER + self.len as usize;
        out[MAC_AT..MAC_AT + MAC_LEN].fill(0);
        if let Some(k) = key {
            let tag = k.tag(&out[..whole]);
            out[MAC_AT..MAC_AT + MAC_LEN].copy_from_slice(&tag);
        }
        let covered = if self.payload_crc { whole } else { HEADER };
        let crc = checksum(&out[..covered]);
        out[40..44].copy_from_slice(&crc.to_le_bytes());
    }

    /// Parse and check a whole datagram.
    pub fn parse(d: &[u8]) -> Result<Header, Malformed> {
        if d.len() < HEADER {
            return Err(Malformed::Short);
        }
        let u32_at = |i: usize| u32::from_le_bytes([d[i], d[i + 1], d[i + 2], d[i + 3]]);
        if u16::from_le_bytes([d[0], d[1]]) != MAGIC {
            return Err(Malformed::Magic);
        }
        if d[2] != VERSION {
            return Err(Malformed::Version);
        }
        let kind = Kind::from_u8(d[3]).ok_or(Malformed::Kind)?;
        let len = u32_at(36);
        if len as usize != d.len() - HEADER || (kind != Kind::Data && len != CONTROL_LEN) {
            return Err(Malformed::Length);
        }
        let flags = u32_at(44);
        if flags & !(FLAG_PAYLOAD_CRC | FLAG_MAC) != 0 {
            return Err(Malformed::Reserved);
        }
        let payload_crc = flags & FLAG_PAYLOAD_CRC != 0;
        let mac = flags & FLAG_MAC != 0;
        let want = u32_at(40);
        let mut h = crc32c_update(0, &d[..40]);
        h = crc32c_update(h, &[0; 4]);
        h = crc32c_update(h, &d[44..if payload_crc { d.len() } else { HEADER }]);
        if h != want {
            return Err(Malformed::Checksum);
        }
        Ok(Header {
            kind,
            job_key: u64::from_le_bytes(d[4..12].try_into().map_err(|_| Malformed::Short)?),
            src: u32_at(12),
            dst: u32_at(16),
            src_epoch: u32_at(20),
            dst_epoch: u32_at(24),
            number: u32_at(28),
            ack: u32_at(32),
            len,
            control: if kind == Kind::Data {
                0
            } else {
                u32_at(HEADER)
            },
            payload_crc,
            mac,
        })
    }
}

/// CRC-32C of `b` (with the checksum field already zero).
pub fn checksum(b: &[u8]) -> u32 {
    crc32c_update(0, b)
}

fn crc32c_update(crc: u32, b: &[u8]) -> u32 {
    crc32c::crc32c_append(crc, b)
}

/// Serial-number arithmetic (RFC 1982) on u32 sequence numbers: `a` comes
/// before `b` when it is less than 2^31 behind it.
#[inline]
pub fn seq_lt(a: u32, b: u32) -> bool {
    (b.wrapping_sub(a) as i32) > 0
}

#[inline]
pub fn seq_le(a: u32, b: u32) -> bool {
    a == b || seq_lt(a, b)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// DATA with `len` bytes of payload; for 0, an ACK (with its control number).
    fn sample(len: u32) -> Header {
        Header {
            kind: if len > 0 { Kind::Data } else { Kind::Ack },
            control: if len > 0 { 0 } else { 0x5555_0001 },
            job_key: 0x1122_3344_5566_7788,
            src: 3,
            dst: 5,
            src_epoch: 7,
            dst_epoch: 9,
            number: u32::MAX,
            ack: 17,
            len: if len > 0 { len } else { CONTROL_LEN },
            payload_crc: true,
            mac: false,
        }
    }

    #[test]
    fn round_trips_and_detects_every_single_byte_change() {
        for len in [0u32, 1, 100] {
            let h = sample(len);
            let mut d = vec![0u8; HEADER + h.len as usize];
            for (i, b) in d[HEADER..].iter_mut().enumerate() {
                *b = i as u8;
            }
            h.write(&mut d, None);
            assert_eq!(Header::parse(&d), Ok(h));
            for i in 0..d.len() {
                for bit in 0..8 {
                    let mut e = d.clone();
                    e[i] ^= 1 << bit;
                    assert!(
                        Header::parse(&e).is_err(),
                        "flip of byte {i} bit {bit} accepted"
                    );
                }
            }
            for cut in 0..d.len() {
                assert!(Header::parse(&d[..cut]).is_err());
            }
        }
    }

    /// The fuzzer's seed corpus: a valid datagram of each kind.
    #[test]
    #[ignore = "run by hand to regenerate devices/fuzz/corpus/packet_header"]
    fn write_seed_corpus() {
        let dir =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/packet_header");
        std::fs::create_dir_all(&dir).unwrap();
        for (i, kind) in [Kind::Data, Kind::Ack, Kind::Lose, Kind::Stop, Kind::Go]
            .into_iter()
            .enumerate()
        {
            let mut h = sample(if kind == Kind::Data { 24 } else { 0 });
            h.kind = kind;
            let mut d = vec![7u8; HEADER + h.len as usize];
            h.write(&mut d, None);
            std::fs::write(dir.join(format!("seed-{i}-{kind:?}")), &d).unwrap();
        }
    }

    #[test]
    fn without_the_payload_flag_only_the_header_is_covered() {
        let mut h = sample(16);
        h.payload_crc = false;
        let mut d = vec![5u8; HEADER + 16];
        h.write(&mut d, None);
        assert_eq!(Header::parse(&d), Ok(h));
        d[HEADER + 3] ^= 1;
        assert_eq!(Header::parse(&d), Ok(h), "payload not covered");
        d[20] ^= 1;
        assert!(Header::parse(&d).is_err(), "header covered");
    }

    #[test]
    fn the_mac_covers_header_and_payload_and_needs_the_key() {
        let key = MacKey::from_token("token-of-this-job-0123456789");
        let other = MacKey::from_token("token-of-another-job-0123456");
        // Both MAC functions, at the boundary between them and beyond.
        for len in [0u32, 8, 63, 64, 65, 3000] {
            let mut h = sample(len);
            h.payload_crc = false;
            h.mac = true;
            let mut d = vec![3u8; HEADER + h.len as usize];
            h.write(&mut d, Some(&key));
            assert_eq!(Header::parse(&d), Ok(h));
            assert!(key.verify(&d), "len {len}");
            assert!(!other.verify(&d), "another job's key accepted, len {len}");
            for i in (0..d.len()).filter(|i| !(40..44).contains(i)) {
                let mut e = d.clone();
                e[i] ^= 0x10;
                assert!(!key.verify(&e), "len {len}: change at byte {i} accepted");
            }
            // A forger who fixes the CRC after changing the payload still fails.
            {
                let mut e = d.clone();
                e[HEADER] ^= 1;
                let crc = checksum(&{
                    let mut z = e[..HEADER].to_vec();
                    z[40..44].fill(0);
                    z
                });
                e[40..44].copy_from_slice(&crc.to_le_bytes());
                assert!(Header::parse(&e).is_ok() && !key.verify(&e));
            }
        }
        let mut d = vec![0u8; HEADER + CONTROL_LEN as usize];
        sample(0).write(&mut d, None);
        assert!(!key.verify(&d), "a packet without a MAC");
        assert!(!key.verify(&d[..10]));
    }

    #[test]
    fn serial_arithmetic_wraps() {
        assert!(seq_lt(u32::MAX, 0));
        assert!(seq_lt(u32::MAX - 5, 3));
        assert!(!seq_lt(3, u32::MAX - 5));
        assert!(seq_le(7, 7) && !seq_lt(7, 7));
    }
}
