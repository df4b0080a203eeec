//! Sends that wait for no receiver: a non-blocking send's message that
//! matches in order (eager, synchronous eager, request to send) and finds
//! no credit towards its destination is queued, in order, and sent by
//! progress as credit returns ([`Engine::deferred`], docs/MPI.md).

use super::*;

/// A message waiting in [`Engine::deferred`]: its handler and bytes, and
/// the send request it completes once handed to FM.
pub(super) struct Deferred {
    handler: u16,
    bytes: Vec<u8>,
    completes: Option<u32>,
}

impl Engine {
    /// Send a message that matches in order (`head`, then `data`) to
    /// `to` if FM takes it without waiting for credit, completing send
    /// request `completes`; else queue a copy behind any already waiting
    /// for `to` ([`Engine::deferred`]). Only the first packet is sure of
    /// its credit: a message longer than FM's packet may still wait for
    /// the rest.
    pub(super) fn send_or_defer(
        &mut self,
        to: Rank,
        handler: u16,
        head: &[u8],
        data: &[u8],
        completes: Option<u32>,
    ) -> MpiResult<()> {
        if !self.deferred.contains_key(&to) {
            match self
                .fm
                .try_begin_message(to, head.len() + data.len(), handler)
            {
                Ok(()) => {
                    // As `send_eager`: a few bytes are gathered into one
                    // piece (cheaper than two), more go where they are.
                    if head.len() + data.len() <= SMALL_GATHER {
                        self.scratch.clear();
                        self.scratch.extend_from_slice(head);
                        self.scratch.extend_from_slice(data);
                        self.fm.send_piece(&self.scratch)?;
                    } else {
                        self.fm.send_piece(head)?;
                        self.fm.send_piece(data)?;
                    }
                    self.fm.end_message()?;
                    if let Some(req) = completes {
                        self.matching().complete(req, MpiStatus::proc_null());
                    }
                    return Ok(());
                }
                Err(e) if !matches!(e.kind(), fm::ErrorKind::WouldBlock { .. }) => {
                    return Err(e.into())
                }
                Err(_) => {}
            }
        }
        self.deferred.entry(to).or_default().push_back(Deferred {
            handler,
            bytes: [head, data].concat(),
            completes,
        });
        Ok(())
    }

    /// Send the deferred messages (those to `only`, if given), oldest
    /// first: with `wait_for` `None`, as far as FM takes them without
    /// waiting; with `Some(k)`, the first `k`, waiting for credit.
    pub(super) fn send_deferred(
        &mut self,
        only: Option<Rank>,
        wait_for: Option<usize>,
    ) -> MpiResult<()> {
        let dests: Vec<Rank> = match only {
            Some(to) => vec![to],
            None => self.deferred.keys().copied().collect(),
        };
        let mut waits = wait_for.unwrap_or(0);
        for to in dests {
            while let Some(d) = self.deferred.get_mut(&to).and_then(VecDeque::pop_front) {
                if wait_for.is_some() && waits == 0 {
                    self.requeue(to, d);
                    break;
                }
                // (As `send_or_defer`: only the first packet is sure of
                // its credit; a longer message's later ones may wait.)
                let sent = if wait_for.is_some() {
                    waits -= 1;
                    self.fm.send(to, d.handler, &d.bytes).map(|()| true)
                } else {
                    match self.fm.try_begin_message(to, d.bytes.len(), d.handler) {
                        Err(e) if matches!(e.kind(), fm::ErrorKind::WouldBlock { .. }) => Ok(false),
                        r => r
                            .and_then(|()| self.fm.send_piece(&d.bytes))
                            .and_then(|()| self.fm.end_message())
                            .map(|()| true),
                    }
                };
                if !sent? {
                    self.requeue(to, d);
                    break;
                }
                if let Some(req) = d.completes {
                    self.matching().complete(req, MpiStatus::proc_null());
                }
            }
            if self.deferred.get(&to).is_some_and(VecDeque::is_empty) {
                self.deferred.remove(&to);
            }
        }
        Ok(())
    }

    /// `d` back at the head of `to`'s deferred messages.
    fn requeue(&mut self, to: Rank, d: Deferred) {
        self.deferred.entry(to).or_default().push_front(d);
    }
}
