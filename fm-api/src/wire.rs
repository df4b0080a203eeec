//! The FM packet header inside every device packet (16 bytes, little-endian).
//!
//! ```text
//! 0  kind     u8   DATA, REMOTE (piece left in the sender's memory), CREDIT, FIN
//! 1  flags    u8   FIRST (starts a message), LAST (ends it), ABORT (with LAST:
//!                   the sender gave the message up; the rest never comes)
//! 2  handler  u16  handler ID (FIRST only)
//! 4  credits  u32  credits returned to the packet's receiver (piggybacked)
//! 8  msg_len  u32  total message bytes (FIRST only)
//! 12 reserved u32  zero
//! ```
//! A REMOTE packet's payload is the piece's address and length (u64, u64) in
//! the sender, read by the receiver with a single copy; FIN tells the sender
//! it may reuse the memory.

pub const HEADER: usize = 16;
pub const REMOTE_PAYLOAD: usize = 16;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    Data = 1,
    Remote = 2,
    Credit = 3,
    Fin = 4,
}

pub const FIRST: u8 = 1;
pub const LAST: u8 = 2;
pub const ABORT: u8 = 4;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    pub kind: Kind,
    pub flags: u8,
    pub handler: u16,
    pub credits: u32,
    pub msg_len: u32,
}

/// Why a packet was not accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Malformed {
    Short,
    Kind,
    Reserved,
}

impl Header {
    #[inline(always)]
    pub fn decode(p: &[u8]) -> Result<Header, Malformed> {
        if p.len() < HEADER {
            return Err(Malformed::Short);
        }
        let kind = match p[0] {
            1 => Kind::Data,
            2 => Kind::Remote,
            3 => Kind::Credit,
            4 => Kind::Fin,
            _ => return Err(Malformed::Kind),
        };
        let u32_at = |i: usize| u32::from_le_bytes([p[i], p[i + 1], p[i + 2], p[i + 3]]);
        if u32_at(12) != 0 || p[1] & !(FIRST | LAST | ABORT) != 0 {
            return Err(Malformed::Reserved);
        }
        Ok(Header {
            kind,
            flags: p[1],
            handler: u16::from_le_bytes([p[2], p[3]]),
            credits: u32_at(4),
            msg_len: u32_at(8),
        })
    }

    #[inline(always)]
    pub fn encode(&self, p: &mut [u8]) {
        p[0] = self.kind as u8;
        p[1] = self.flags;
        p[2..4].copy_from_slice(&self.handler.to_le_bytes());
        p[4..8].copy_from_slice(&self.credits.to_le_bytes());
        p[8..12].copy_from_slice(&self.msg_len.to_le_bytes());
        p[12..16].copy_from_slice(&0u32.to_le_bytes());
    }

    pub fn first(&self) -> bool {
        self.flags & FIRST != 0
    }
    pub fn last(&self) -> bool {
        self.flags & LAST != 0
    }
    pub fn aborted(&self) -> bool {
        self.flags & ABORT != 0
    }
}

/// Decode a REMOTE payload: (address, length).
pub fn decode_remote(payload: &[u8]) -> Option<(u64, u64)> {
    if payload.len() != REMOTE_PAYLOAD {
        return None;
    }
    let addr = u64::from_le_bytes(payload[0..8].try_into().ok()?);
    let len = u64::from_le_bytes(payload[8..16].try_into().ok()?);
    Some((addr, len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_rejects() {
        let h = Header {
            kind: Kind::Remote,
            flags: FIRST | LAST,
            handler: 513,
            credits: 7,
            msg_len: 1 << 20,
        };
        let mut b = [0u8; HEADER];
        h.encode(&mut b);
        assert_eq!(Header::decode(&b), Ok(h));
        assert_eq!(Header::decode(&b[..15]), Err(Malformed::Short));
        let mut bad = b;
        bad[0] = 9;
        assert_eq!(Header::decode(&bad), Err(Malformed::Kind));
        let mut bad = b;
        bad[13] = 1;
        assert_eq!(Header::decode(&bad), Err(Malformed::Reserved));
        let mut bad = b;
        bad[1] = 0x80;
        assert_eq!(Header::decode(&bad), Err(Malformed::Reserved));
        let mut bad = b;
        bad[1] = 0x08;
        assert_eq!(Header::decode(&bad), Err(Malformed::Reserved));
    }

    /// Any bytes at all: a clear rejection, or a header that encodes back to
    /// exactly those bytes. Never a panic.
    #[test]
    fn random_bytes_decode_or_are_rejected() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut accepted = 0;
        for _ in 0..200_000 {
            let len = (next() % 40) as usize;
            let mut p: Vec<u8> = (0..len).map(|_| next() as u8).collect();
            // Bias towards plausible headers so the accept path is exercised too.
            if len >= HEADER && next() % 2 == 0 {
                p[0] = 1 + (next() % 4) as u8;
                p[1] &= FIRST | LAST | ABORT;
                p[12..16].fill(0);
            }
            if let Ok(h) = Header::decode(&p) {
                accepted += 1;
                let mut back = [0u8; HEADER];
                h.encode(&mut back);
                assert_eq!(&back[..], &p[..HEADER]);
            }
            let _ = decode_remote(&p);
        }
        assert!(
            accepted > 10_000,
            "accept path barely exercised: {accepted}"
        );
    }
}
