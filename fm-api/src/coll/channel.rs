//! The FM transport of a collective: messages to the reserved handler
//! [`COLLECTIVE`], each headed by its group and number, and receives that
//! take them from the endpoint's mailbox (large ones by rendezvous:
//! `mailbox.rs`).

use super::mailbox::{header, Alive, Found, Kind, Landing, COLLECTIVE, HEADER, RENDEZVOUS_FROM};
use crate::{Endpoint, ErrorKind, FmError, Rank, Result};
use std::collections::HashMap;
use std::sync::Arc;

/// One collective's messages: its group, its number there, its members.
pub(crate) struct FmChannel {
    pub(crate) group: u64,
    pub(crate) seq: u32,
    pub(crate) members: Arc<[Rank]>,
    /// Messages sent to each member so far (their tickets there).
    pub(crate) sent: HashMap<Rank, u32>,
    /// Set while the collective is under way: its receives' landings
    /// (`mailbox.rs`) hold it.
    pub(crate) alive: Alive,
}

impl Drop for FmChannel {
    /// The collective's end (its `Pending` dropped, done or not): no
    /// handler writes into its receives' memory after this.
    fn drop(&mut self) {
        *self.alive.lock().unwrap_or_else(|e| e.into_inner()) = false;
    }
}

/// A send (complete once handed to FM), a rendezvous send waiting to be
/// cleared, or a receive's ticket.
#[derive(Clone, Copy)]
pub(crate) enum Request {
    Sent,
    Cleared {
        to: Rank,
        ticket: u32,
        data: *const u8,
        len: usize,
    },
    Recv {
        from: Rank,
        ticket: u32,
        into: *mut u8,
        room: usize,
    },
}

impl FmChannel {
    fn message(
        &self,
        ep: &mut Endpoint,
        to: Rank,
        kind: Kind,
        word: u32,
        data: &[u8],
    ) -> Result<()> {
        ep.begin_message(to, HEADER + data.len(), COLLECTIVE)?;
        ep.send_piece(&header(self.group, self.seq, kind, word))?;
        ep.send_piece(data)?;
        ep.end_message()
    }
}

/// `len` bytes at `p`.
///
/// # Safety
/// `p` holds `len` bytes, or `len` is 0.
unsafe fn bytes<'a>(p: *const u8, len: usize) -> &'a [u8] {
    match len {
        0 => &[],
        _ => std::slice::from_raw_parts(p, len),
    }
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
        let to = self.members[to];
        let n = self.sent.entry(to).or_insert(0);
        let ticket = *n;
        *n += 1;
        if len < RENDEZVOUS_FROM {
            self.message(ep, to, Kind::Eager, 0, bytes(data, len))?;
            return Ok(Request::Sent);
        }
        let claim = u32::try_from(len).unwrap_or(u32::MAX);
        self.message(ep, to, Kind::Ready, claim, &[])?;
        Ok(Request::Cleared {
            to,
            ticket,
            data,
            len,
        })
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
        match r {
            Request::Sent => Some(Ok(0)),
            Request::Cleared {
                to,
                ticket,
                data,
                len,
            } => {
                if !ep
                    .coll_mailbox
                    .take_clear((self.group, self.seq, to), ticket)
                {
                    return None;
                }
                // SAFETY: the send's span holds `len` bytes until it completes.
                let data = unsafe { bytes(data, len) };
                Some(self.message(ep, to, Kind::Bulk, ticket, data).map(|()| 0))
            }
            Request::Recv {
                from,
                ticket,
                into,
                room,
            } => match ep.coll_mailbox.take((self.group, self.seq, from), ticket) {
                Found::Nothing => None,
                Found::Clear => {
                    let key = (self.group, self.seq, from);
                    let alive = self.alive.clone();
                    let l = Landing { into, room, alive };
                    ep.coll_mailbox.land(key, ticket, l);
                    match self.message(ep, from, Kind::Clear, ticket, &[]) {
                        Ok(()) => None,
                        Err(e) => Some(Err(e)),
                    }
                }
                Found::Landed(len) => Some(Ok(len)),
                Found::Data(m) => {
                    let len = m.len();
                    if len <= room {
                        // SAFETY: the receive's span holds `room` bytes
                        // until it completes, which is now.
                        unsafe { std::ptr::copy_nonoverlapping(m.as_ptr(), into, len) };
                    }
                    fm_coll::pool::give(m);
                    Some(Ok(len))
                }
            },
        }
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
