//! The FM transport of a collective: messages to the reserved handler
//! [`COLLECTIVE`], each headed by its group and number, and receives that
//! take them from the endpoint's mailbox.

use super::mailbox::{header, COLLECTIVE};
use crate::{Endpoint, ErrorKind, FmError, Rank, Result};
use std::sync::Arc;

/// One collective's messages: its group, its number there, its members.
pub(crate) struct FmChannel {
    pub(crate) group: u64,
    pub(crate) seq: u32,
    pub(crate) members: Arc<[Rank]>,
}

/// A send (complete once handed to FM) or a receive's ticket.
#[derive(Clone, Copy)]
pub(crate) enum Request {
    Sent,
    Recv {
        from: Rank,
        ticket: u32,
        into: *mut u8,
        room: usize,
    },
}

impl fm_coll::Channel for FmChannel {
    type Net = Endpoint;
    type Error = FmError;
    type Request = Request;

    unsafe fn send(
        &mut self,
        ep: &mut Endpoint,
        to: usize,
        data: *const u8,
        len: usize,
    ) -> Result<Request> {
        let data = match len {
            0 => &[],
            // SAFETY: the schedule's span of `len` bytes.
            _ => std::slice::from_raw_parts(data, len),
        };
        let dest = self.members[to];
        ep.begin_message(dest, super::mailbox::HEADER + len, COLLECTIVE)?;
        ep.send_piece(&header(self.group, self.seq))?;
        ep.send_piece(data)?;
        ep.end_message()?;
        Ok(Request::Sent)
    }

    unsafe fn recv(
        &mut self,
        ep: &mut Endpoint,
        from: usize,
        into: *mut u8,
        room: usize,
    ) -> Result<Request> {
        let from = self.members[from];
        let ticket = ep.coll_mailbox.post((self.group, self.seq, from));
        Ok(Request::Recv {
            from,
            ticket,
            into,
            room,
        })
    }

    fn test(&mut self, ep: &mut Endpoint, r: Request) -> Option<Result<usize>> {
        let Request::Recv {
            from,
            ticket,
            into,
            room,
        } = r
        else {
            return Some(Ok(0));
        };
        let m = ep.coll_mailbox.take((self.group, self.seq, from), ticket)?;
        let len = m.len();
        if len <= room {
            // SAFETY: the receive's span holds `room` bytes until it
            // completes, which is now.
            unsafe { std::ptr::copy_nonoverlapping(m.as_ptr(), into, len) };
        }
        fm_coll::pool::give(m);
        Some(Ok(len))
    }

    fn mismatch(&self, from: usize, got: usize, want: usize) -> FmError {
        ErrorKind::CollectiveMismatch {
            rank: self.members[from],
            got,
            want,
        }
        .into()
    }
}
