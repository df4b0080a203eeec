//! The protocol on the wire: FM handler IDs, envelopes and their sizes,
//! and the limits they set.

use super::*;

/// FM handler IDs of the protocol.
pub(crate) const EAGER: u16 = 1;
pub(crate) const RTS: u16 = 2;
pub(crate) const CTS: u16 = 3;
pub(crate) const DATA: u16 = 4;
pub(crate) const ACK: u16 = 5;
// 6 was a barrier of its own; barriers are collectives now (`coll`).
pub(crate) const EAGER_SYNC: u16 = 7;

/// The envelope of an eager message: context, the source's rank in the
/// communicator, tag. Twelve bytes, so that with FM's 16-byte header a
/// message of up to 20 bytes travels inside shared memory's 48-byte slot.
pub(crate) const ENVELOPE: usize = 12;
/// A synchronous eager message adds the sender's request, which the
/// receiver's acknowledgement names; a request to send adds the length.
pub(crate) const SYNC_ENVELOPE: usize = 16;
pub(crate) const RTS_LEN: usize = SYNC_ENVELOPE + 8;
/// A piece of a rendezvous message's data (`DATA`) begins with the
/// receive's request (4 bytes) and the piece's offset in the message (8).
pub(crate) const DATA_HEAD: usize = 12;
/// Flag: a synchronous send, acknowledged when matched.
pub(crate) const SYNC: u32 = 1;

/// Messages up to this many bytes are sent eagerly (`fm::settings::MPI_EAGER_LIMIT`).
pub const DEFAULT_EAGER_LIMIT: usize = 64 << 10;

/// Collectives' messages up to this many bytes are sent eagerly where
/// each rank has a CPU of its own (`fm::settings::COLL_EAGER_LIMIT`).
pub const COLL_EAGER_LIMIT: usize = 16 << 10;
/// `FM_COLL_SHM_BYTES`'s default: collectives of up to this many bytes
/// per member go through the host's area (docs/PERFORMANCE.md, "Small
/// collectives through shared memory").
pub const COLL_SHM_BYTES: usize = 4096;
/// And its bound: each member's area holds two slots of it.
pub const MAX_COLL_SHM_BYTES: usize = 1 << 20;

/// Data bytes an MPI message may have: it travels as one FM message, whose
/// length is 32 bits, with at most a 16-byte envelope before it.
pub const MAX_MESSAGE: usize = u32::MAX as usize - SYNC_ENVELOPE;

/// A send of `len` bytes is refused before anything is sent when it does
/// not fit one FM message (not half-sent, with its receiver waiting).
pub(crate) fn fits_one_message(len: usize) -> MpiResult<()> {
    if len > MAX_MESSAGE {
        return err(
            MPI_ERR_COUNT,
            format!("{len} bytes in one message: fm's MPI sends at most {MAX_MESSAGE}"),
        );
    }
    Ok(())
}

/// Data bytes of a message short enough to be gathered with its envelope
/// on the stack and sent as one FM packet (`Engine::send_short`).
pub const SHORT: usize = 64;

/// Bytes of blocking sends that may be copied aside
/// (`fm::settings::MPI_SET_ASIDE_LIMIT`).
pub const DEFAULT_SET_ASIDE_LIMIT: usize = 64 << 20;

/// Who a message is from and how it is labelled, as matching sees it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Envelope {
    pub(crate) context: u32,
    /// The sender's rank in the communicator.
    pub(crate) source: c_int,
    pub(crate) tag: c_int,
    pub(crate) flags: u32,
    /// The sender's request (rendezvous and synchronous sends).
    pub(crate) sender_req: u32,
}

impl Envelope {
    /// A standard send's envelope on `route`: no flags, and the request
    /// of a send already complete.
    pub(crate) fn standard(route: &Route, tag: c_int) -> Envelope {
        Envelope {
            context: route.context,
            source: route.me,
            tag,
            flags: 0,
            sender_req: super::matching::DONE_SEND,
        }
    }

    /// Its bytes: the short form into 12 bytes, with the sender's request
    /// into 16 or more.
    pub(crate) fn write(&self, out: &mut [u8]) {
        out[0..4].copy_from_slice(&self.context.to_le_bytes());
        out[4..8].copy_from_slice(&self.source.to_le_bytes());
        out[8..12].copy_from_slice(&self.tag.to_le_bytes());
        if out.len() >= SYNC_ENVELOPE {
            out[12..16].copy_from_slice(&self.sender_req.to_le_bytes());
        }
    }

    /// Read back what `write` wrote into `b` (12 or 16 bytes); `flags`
    /// says how it came.
    pub(crate) fn read(b: &[u8], flags: u32) -> Envelope {
        let w = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        Envelope {
            context: w(0),
            source: w(4) as c_int,
            tag: w(8) as c_int,
            flags,
            sender_req: if b.len() >= SYNC_ENVELOPE { w(12) } else { 0 },
        }
    }

    pub(crate) fn matches(&self, context: u32, source: c_int, tag: c_int) -> bool {
        self.context == context
            && (source == MPI_ANY_SOURCE || source == self.source)
            && (tag == MPI_ANY_TAG || tag == self.tag)
    }
}

pub(crate) fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An envelope reads back as written, in its short and its long form
    /// (negative tags and sources survive).
    #[test]
    fn an_envelope_reads_back_as_written() {
        let e = Envelope {
            context: 0xdead_beef,
            source: -3,
            tag: i32::MAX,
            flags: SYNC,
            sender_req: 77,
        };
        let mut long = [0u8; SYNC_ENVELOPE];
        e.write(&mut long);
        let r = Envelope::read(&long, SYNC);
        assert_eq!(
            (r.context, r.source, r.tag, r.flags, r.sender_req),
            (0xdead_beef, -3, i32::MAX, SYNC, 77)
        );
        let mut short = [0u8; ENVELOPE];
        e.write(&mut short);
        let r = Envelope::read(&short, 0);
        assert_eq!(
            (r.context, r.source, r.tag, r.sender_req),
            (0xdead_beef, -3, i32::MAX, 0)
        );
    }
}
