//! The one-sided messages, to the reserved handler [`ONE_SIDED`]: a
//! request (put, get, atomic) from an origin, and the target's answer.
//! Little-endian, fixed heads:
//!
//! ```text
//! request  0 u8 kind   8 u64 window  16 u64 operation number
//!         24 u64 offset  32 u64 a  40 u64 b        then a put's data
//!          (get: a = length; fetch-add, swap: a = operand;
//!           compare-swap: a = expected, b = new; flush: no offset)
//! ```
//!
//! Every request but a put is answered (a put's refusal comes back in
//! the answer to the origin's next flush to that target):
//!
//! ```text
//! answer   0 u8 DONE  1 u8 status  8 u64 window  16 u64 operation number
//!         24 u64 value (an atomic's old value)     then a get's data
//! ```

/// The reserved handler ID of one-sided messages.
pub(crate) const ONE_SIDED: u16 = crate::RESERVED_HANDLERS + 1;

pub(crate) const REQUEST: usize = 48;
pub(crate) const ANSWER: usize = 32;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Put = 1,
    Get = 2,
    FetchAdd = 3,
    Swap = 4,
    CompareSwap = 5,
    Done = 6,
    /// Answer once every put before this one is applied.
    Flush = 7,
}

impl Kind {
    fn of(b: u8) -> Option<Kind> {
        Some(match b {
            1 => Kind::Put,
            2 => Kind::Get,
            3 => Kind::FetchAdd,
            4 => Kind::Swap,
            5 => Kind::CompareSwap,
            6 => Kind::Done,
            7 => Kind::Flush,
            _ => return None,
        })
    }
}

/// What the target says of an operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Status {
    Ok = 0,
    /// The target has no window of that ID (never made, or freed).
    NoWindow = 1,
    /// The bytes named do not lie in the target's window.
    OutOfRange = 2,
    /// An atomic's word is not 8-byte aligned at the target.
    Misaligned = 3,
    /// A request fm cannot read.
    Malformed = 4,
}

impl Status {
    pub(crate) fn of(b: u8) -> Status {
        match b {
            0 => Status::Ok,
            1 => Status::NoWindow,
            2 => Status::OutOfRange,
            3 => Status::Misaligned,
            _ => Status::Malformed,
        }
    }
}

fn word(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

/// A request's head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Request {
    pub kind: Kind,
    pub window: u64,
    pub op: u64,
    pub offset: u64,
    pub a: u64,
    pub b: u64,
}

impl Request {
    pub fn bytes(&self) -> [u8; REQUEST] {
        let mut h = [0u8; REQUEST];
        h[0] = self.kind as u8;
        for (at, v) in [
            (8, self.window),
            (16, self.op),
            (24, self.offset),
            (32, self.a),
            (40, self.b),
        ] {
            h[at..at + 8].copy_from_slice(&v.to_le_bytes());
        }
        h
    }

    /// The head, whatever the bytes (`None`: not a request's kind).
    pub fn parse(h: &[u8; REQUEST]) -> Option<Request> {
        Some(Request {
            kind: Kind::of(h[0]).filter(|k| *k != Kind::Done)?,
            window: word(h, 8),
            op: word(h, 16),
            offset: word(h, 24),
            a: word(h, 32),
            b: word(h, 40),
        })
    }
}

/// An answer's head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Answer {
    pub status: Status,
    pub window: u64,
    pub op: u64,
    pub value: u64,
}

impl Answer {
    pub fn bytes(&self) -> [u8; ANSWER] {
        let mut h = [0u8; ANSWER];
        h[0] = Kind::Done as u8;
        h[1] = self.status as u8;
        h[8..16].copy_from_slice(&self.window.to_le_bytes());
        h[16..24].copy_from_slice(&self.op.to_le_bytes());
        h[24..32].copy_from_slice(&self.value.to_le_bytes());
        h
    }

    pub fn parse(h: &[u8; ANSWER]) -> Option<Answer> {
        (Kind::of(h[0]) == Some(Kind::Done)).then(|| Answer {
            status: Status::of(h[1]),
            window: word(h, 8),
            op: word(h, 16),
            value: word(h, 24),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heads_read_back_as_written_and_unknown_kinds_are_refused() {
        let r = Request {
            kind: Kind::CompareSwap,
            window: 7,
            op: u64::MAX,
            offset: 1 << 40,
            a: 3,
            b: 4,
        };
        assert_eq!(Request::parse(&r.bytes()), Some(r));
        let a = Answer {
            status: Status::OutOfRange,
            window: 9,
            op: 2,
            value: 5,
        };
        assert_eq!(Answer::parse(&a.bytes()), Some(a));
        let mut bad = r.bytes();
        bad[0] = 0;
        assert_eq!(Request::parse(&bad), None);
        bad[0] = Kind::Done as u8;
        assert_eq!(Request::parse(&bad), None);
        assert_eq!(
            Answer::parse(r.bytes().first_chunk().expect("32 bytes")),
            None
        );
    }
}
