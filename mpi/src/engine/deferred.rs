//! Sends that wait for no receiver: a non-blocking send's message that
//! matches in order (eager, synchronous eager, request to send) and finds
//! no credit towards its destination is queued, in order, and sent by
//! progress as credit returns ([`Engine::deferred`], docs/MPI.md).
//!
//! A queued message keeps its envelope and its send request, not a copy
//! of the data: the request completes only once the message is handed to
//! FM, and MPI keeps the data in place until then (a copy of a 64 KiB
//! message per send, and the memory it faulted in, cut streaming
//! bandwidth at the eager limit to a fifth).

use super::*;

/// A message waiting in [`Engine::deferred`]: its handler, its envelope
/// (`head`), and the send request whose data follows the envelope (if
/// `with_data`) and which completes once the message is handed to FM (if
/// `completes`; a synchronous send's completes on its acknowledgement).
pub(super) struct Deferred {
    handler: u16,
    head: [u8; RTS_LEN],
    head_len: usize,
    req: u32,
    with_data: bool,
    completes: bool,
}

impl Engine {
    /// Send a message that matches in order (`head`, then `data`, which
    /// is send request `req`'s data or nothing) to `to` if FM takes all of
    /// it without waiting for credit, completing `req` if `completes`;
    /// else queue it behind any already waiting for `to`
    /// ([`Engine::deferred`]).
    pub(super) fn send_or_defer(
        &mut self,
        to: Rank,
        handler: u16,
        head: &[u8],
        data: &[u8],
        req: u32,
        completes: bool,
    ) -> MpiResult<()> {
        if !self.deferred.contains_key(&to) && self.send_whole(to, handler, head, data, false)? {
            if completes {
                self.matching().complete(req, MpiStatus::proc_null());
            }
            return Ok(());
        }
        let mut d = Deferred {
            handler,
            head: [0; RTS_LEN],
            head_len: head.len(),
            req,
            with_data: !data.is_empty(),
            completes,
        };
        d.head[..head.len()].copy_from_slice(head);
        self.deferred.entry(to).or_default().push_back(d);
        Ok(())
    }

    /// Send `d` to `to` (`wait`: as [`Engine::send_whole`]), completing
    /// its request if it says so; whether it went.
    fn send_deferred_one(&mut self, to: Rank, d: &Deferred, wait: bool) -> MpiResult<bool> {
        // The data is read from the request each time: a blocking send
        // may have set it aside meanwhile (`Matching::set_aside`) and
        // returned, its own buffer gone.
        let (data, len) = match self.matching().get(d.req).map(|r| &r.op) {
            Some(Op::Send { data, len }) if d.with_data => (*data, *len),
            _ => (std::ptr::null(), 0),
        };
        // SAFETY: a send request's data lives until it completes, which
        // is no earlier than this message is sent.
        let bytes = unsafe { slice_or_empty(data, len) };
        if !self.send_whole(to, d.handler, &d.head[..d.head_len], bytes, wait)? {
            return Ok(false);
        }
        if d.completes {
            self.matching().complete(d.req, MpiStatus::proc_null());
        }
        Ok(true)
    }

    /// Send `head` then `data` to `to` as one message for `handler`. With
    /// `wait`, as FM's send does (waiting for credit as it goes);
    /// without, only if FM takes the whole message on the credit at hand
    /// (`Ok(false)` if not: nothing was sent), so that the send never
    /// waits part way, setting aside what arrives meanwhile. A message of
    /// one packet with a credit at hand is written straight into the
    /// packet; otherwise a few bytes are gathered into one piece (cheaper
    /// than FM's gather of two) and more go as two pieces, the data where
    /// it is.
    pub(super) fn send_whole(
        &mut self,
        to: Rank,
        handler: u16,
        head: &[u8],
        data: &[u8],
        wait: bool,
    ) -> MpiResult<bool> {
        // One packet with a credit at hand: written straight into it,
        // waiting or not (no gathering first).
        if self.fm.send_packet_now(to, handler, [head, data]) {
            return Ok(true);
        }
        let len = head.len() + data.len();
        if wait {
            self.fm.begin_message(to, len, handler)?;
        } else {
            if !self.fm.sends_whole(to, len) {
                return Ok(false);
            }
            match self.fm.try_begin_message(to, len, handler) {
                Err(e) if matches!(e.kind(), fm::ErrorKind::WouldBlock { .. }) => return Ok(false),
                r => r?,
            }
        }
        if len <= SMALL_GATHER {
            self.scratch.clear();
            self.scratch.extend_from_slice(head);
            self.scratch.extend_from_slice(data);
            self.fm.send_piece(&self.scratch)?;
        } else {
            self.fm.send_piece(head)?;
            self.fm.send_piece(data)?;
        }
        self.fm.end_message()?;
        Ok(true)
    }

    /// Send the deferred messages (those to `only`, if given), oldest
    /// first: with `wait_for` `None`, as far as FM takes them whole
    /// without waiting; with `Some(k)`, the first `k`, waiting for credit.
    pub(super) fn send_deferred(
        &mut self,
        only: Option<Rank>,
        wait_for: Option<usize>,
    ) -> MpiResult<()> {
        // The queues are taken out while they are sent from (sending needs
        // the engine), so that progress, which comes here on every poll
        // while credit is short, neither collects their keys nor hashes a
        // destination per message.
        let mut queues = std::mem::take(&mut self.deferred);
        let mut waits = wait_for.unwrap_or(0);
        let mut sent = Ok(());
        for (&to, q) in queues.iter_mut() {
            if only.is_some_and(|o| o != to) {
                continue;
            }
            sent = self.send_queue(to, q, wait_for.is_some(), &mut waits);
            if sent.is_err() {
                break;
            }
        }
        queues.retain(|_, q| !q.is_empty());
        // Nothing is deferred while sending (handlers only ask for answers,
        // which `act` sends), but should it be, it goes behind.
        for (to, later) in self.deferred.drain() {
            queues.entry(to).or_default().extend(later);
        }
        self.deferred = queues;
        sent
    }

    /// Send `to`'s deferred messages `q` from the oldest while FM takes
    /// them (`wait`: waiting for credit, at most `waits` of them).
    fn send_queue(
        &mut self,
        to: Rank,
        q: &mut VecDeque<Deferred>,
        wait: bool,
        waits: &mut usize,
    ) -> MpiResult<()> {
        while let Some(d) = q.front() {
            if wait && *waits == 0 {
                break;
            }
            if !self.send_deferred_one(to, d, wait)? {
                break;
            }
            *waits = waits.saturating_sub(1);
            q.pop_front();
        }
        Ok(())
    }
}
