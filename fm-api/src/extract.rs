//! The receiving half of FM: `extract` takes arrived packets and runs the
//! handler of each message they begin; fm's own handlers (the barrier's);
//! and the stalled sender's way of consuming its stash (endpoint.rs, "The
//! stash and its bound").

use crate::endpoint::{Endpoint, Packet};
use crate::error::{ErrorKind, Result};
use crate::wait::Waiter;
use crate::wire::Kind;
use crate::Incoming;
use fm_devices::Rank;
use std::time::Duration;

/// Handler IDs from this one up are fm's own (its collectives, `coll`).
pub const RESERVED_HANDLERS: u16 = 0xFF00;

/// What running one message gave: its length, and its handler's result.
type Handled = Option<(usize, Result<()>)>;

impl Endpoint {
    /// FM_extract: run the handlers of arrived messages, until `max_bytes`
    /// bytes have been handled (a message counts as at least one byte, so a
    /// small budget ends the call even among empty messages) or nothing
    /// more has arrived. Returns the number of messages handled. A handler's error ends the call and is
    /// returned; the message it ran for is consumed. An error of a handler
    /// that a stalled sender ran (endpoint.rs) comes back from the next call.
    pub fn extract(&mut self, max_bytes: usize) -> Result<usize> {
        if self.in_handler {
            return Err(ErrorKind::Reentrant.into());
        }
        if let Some(dest) = self.open_message_dest() {
            return Err(ErrorKind::MessageOpen { dest }.into());
        }
        if let Some(e) = self.deferred_error.take() {
            return Err(e);
        }
        if let Some(o) = &self.outbox {
            o.owned_here();
            if o.pending() {
                self.send_outbox()?;
            }
        }
        self.flush_control();
        let mut bytes = 0usize;
        let mut messages = 0usize;
        while bytes < max_bytes {
            // One poll of the network per call: the next packets come from
            // what that poll took in, so the empty receive that ends a
            // batch is not paid between handling a message and returning.
            let p = if messages == 0 {
                self.next_packet()
            } else {
                self.next_packet_arrived()
            };
            let Some(p) = p else {
                break;
            };
            if let Some((len, result)) = self.dispatch(p)? {
                result?;
                bytes += len.max(1);
                messages += 1;
            }
        }
        Ok(messages)
    }

    /// Like [`Endpoint::extract`], but waits (spinning, then yielding) until
    /// at least one message was handled, or fails with
    /// [`ErrorKind::Timeout`] past the wait limit
    /// ([`Endpoint::set_wait_timeout`]).
    pub fn extract_wait(&mut self, max_bytes: usize) -> Result<usize> {
        let mut w = self.waiter("a message to arrive").sending_outbox();
        loop {
            let n = self.extract(max_bytes)?;
            if n > 0 {
                return Ok(n);
            }
            w.snooze(self)?;
        }
    }

    /// Like [`Endpoint::extract_wait`], but returns `Ok(0)` as soon as
    /// `go_on` returns `false` (before or without a message). Another
    /// thread that makes it return `false` then calls [`Waker::wake`]
    /// (from [`Endpoint::waker`]) so that a sleeping wait looks again: this
    /// is how a thread that holds the endpoint while it waits lets another
    /// thread have it (fm's MPI under `MPI_THREAD_MULTIPLE`). Another
    /// process on this host that changes what `go_on` reads (memory both
    /// map, such as a [`crate::coll::HostArea`]) wakes it with
    /// [`Endpoint::wake`].
    ///
    /// [`Waker::wake`]: crate::wait::Waker::wake
    ///
    /// ```
    /// use std::sync::atomic::{AtomicBool, Ordering};
    /// static GO_ON: AtomicBool = AtomicBool::new(true);
    /// let mut config = fm::Config::local(0, 1, fm::JobKey(7));
    /// config.wait = fm::wait::WaitMode::Block; // sleeps on the doorbell
    /// let mut fm = fm::Fm::builder().config(config).build()?;
    /// let waker = fm.waker();
    /// let other = std::thread::spawn(move || {
    ///     GO_ON.store(false, Ordering::SeqCst);
    ///     waker.wake();
    /// });
    /// // Nothing arrives: the wait ends because the other thread said so.
    /// assert_eq!(fm.extract_wait_while(usize::MAX, || GO_ON.load(Ordering::SeqCst))?, 0);
    /// other.join().expect("thread");
    /// # Ok::<(), fm::FmError>(())
    /// ```
    pub fn extract_wait_while(
        &mut self,
        max_bytes: usize,
        go_on: impl Fn() -> bool,
    ) -> Result<usize> {
        let mut w = self
            .waiter("a message to arrive")
            .sending_outbox()
            .while_(&go_on);
        loop {
            let n = self.extract(max_bytes)?;
            if n > 0 || w.stopped() {
                return Ok(n);
            }
            w.snooze(self)?;
        }
    }

    /// Like [`Endpoint::extract_wait`], but returns `Ok(0)` when no message
    /// arrived within `timeout`.
    ///
    /// ```no_run
    /// # let mut fm = fm::Fm::init()?;
    /// if fm.extract_wait_timeout(usize::MAX, std::time::Duration::from_millis(100))? == 0 {
    ///     println!("nothing for 100 ms");
    /// }
    /// # Ok::<(), fm::FmError>(())
    /// ```
    pub fn extract_wait_timeout(&mut self, max_bytes: usize, timeout: Duration) -> Result<usize> {
        let mut w = Waiter::new(self.wait, Some(timeout), "a message to arrive").sending_outbox();
        loop {
            let n = self.extract(max_bytes)?;
            if n > 0 {
                return Ok(n);
            }
            match w.snooze(self) {
                Err(e) if matches!(e.kind(), ErrorKind::Timeout { .. }) => return Ok(0),
                r => r?,
            }
        }
    }

    /// Handle one packet taken from the front of the queues. For a packet
    /// that began a message: its length and its handler's result (the outer
    /// error is fm's own: the job ended, a wait timed out). Inlined into
    /// `extract`, as this is every message's path; the rare cases are cold.
    #[inline(always)]
    pub(crate) fn dispatch(&mut self, p: Packet) -> Result<Handled> {
        let Some((p, h)) = self.open_packet(p) else {
            return Ok(None);
        };
        let src = p.src();
        if matches!(h.kind, Kind::Credit | Kind::Fin) {
            self.on_control(src, &h, p);
            return Ok(None);
        }
        if !h.first() {
            self.drop_malformed(p, "continuation without a message");
            return Ok(None);
        }
        let len = h.msg_len as usize;
        let id = h.handler;
        self.stats.messages_received += 1;
        let handler = match id < RESERVED_HANDLERS {
            true => self.handlers.get_mut(id as usize).and_then(Option::take),
            false => None,
        };
        let mut m = Incoming::new(self, src, &h);
        m.take_segment(p, &h);
        let result = match handler {
            Some(mut f) => {
                m.ep_mut().in_handler = true;
                let r = f(&mut m);
                let ep = m.ep_mut();
                ep.in_handler = false;
                ep.handlers[id as usize] = Some(f);
                r
            }
            None if id == crate::coll::COLLECTIVE => crate::coll::intake(&mut m),
            None if id == crate::window::ONE_SIDED => crate::window::intake(&mut m),
            None => {
                m.ep_mut().fm_handler(src, id, len);
                Ok(())
            }
        };
        // Handlers run only with no message open (extract checks, and so
        // does a stalled sender), so one open now was opened by the handler.
        let result = match m.ep_mut().open_message_dest() {
            Some(dest) => m.ep_mut().handler_left_open(id, dest, result)?,
            None => result,
        };
        m.finish()?;
        Ok(Some((len, result)))
    }

    /// A message for a handler ID nobody registered (or a reserved one
    /// fm does not use): dropped and counted.
    #[cold]
    fn fm_handler(&mut self, src: Rank, id: u16, len: usize) {
        self.stats.dropped_unknown_handler += 1;
        tracing::warn!(
            src,
            handler = id,
            len,
            "fm: dropped a message for a handler ID nobody registered"
        );
    }

    /// Handler `id` returned with its message to `dest` open: abort it, and
    /// make that the handler's error (unless it had one of its own).
    #[cold]
    fn handler_left_open(&mut self, id: u16, dest: Rank, result: Result<()>) -> Result<Result<()>> {
        tracing::warn!(
            handler = id,
            dest,
            "fm: a handler returned with a message open; aborting it"
        );
        self.abort_message()?;
        Ok(result.and(Err(
            ErrorKind::HandlerLeftMessageOpen { handler: id, dest }.into()
        )))
    }

    /// A stalled sender whose stash reached its bound runs the handler of
    /// the oldest set-aside message. Its handler's error is kept for the
    /// next extract. `false` when nothing is set aside.
    pub(crate) fn run_one_stashed(&mut self) -> Result<bool> {
        let Some(p) = self.next_stashed() else {
            return Ok(false);
        };
        if let Some((_, Err(e))) = self.dispatch(p)? {
            self.deferred_error.get_or_insert(e);
        }
        self.stats.handlers_run_while_sending += 1;
        Ok(true)
    }
}
