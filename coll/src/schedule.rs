//! A plan run over a transport: [`Schedule::advance`] starts a stage's
//! sends and receives together and ends the stage when all of them are
//! complete; the local steps (reduce, copy, output) run when reached, so
//! an algorithm puts a [`crate::Step::Fence`] between a receive and the
//! step that reads what it received. Nothing here blocks: `advance`
//! starts what it can and returns, so one schedule serves a blocking
//! call (advanced until done) and a non-blocking one (advanced by the
//! library's progress).
//!
//! The transport is a [`Channel`]: one collective's way to its members.
//! It keeps one collective's messages from any other's (MPI: a context
//! and a tag; FM: a group and a sequence number), and one pair's
//! messages in the order they were sent.

use crate::plan::{Buf, Output, Plan, Span, Step};

/// What a reduction step does: `higher = lower op higher`, over packed
/// elements (`lower` holds the lower members' contribution, so an
/// operation that does not commute keeps member order).
pub trait Combine {
    type Error;
    fn combine(&self, lower: &[u8], higher: &mut [u8]) -> Result<(), Self::Error>;

    /// Whether `lower op higher` equals `higher op lower`, so that a
    /// result wanted in `lower` is formed there directly (else it forms
    /// in `higher` and is copied: a whole pass over the data).
    fn commutative(&self) -> bool {
        false
    }
}

impl<E> Combine for Box<dyn Combine<Error = E> + Send> {
    type Error = E;
    fn combine(&self, lower: &[u8], higher: &mut [u8]) -> Result<(), E> {
        (**self).combine(lower, higher)
    }
    fn commutative(&self) -> bool {
        (**self).commutative()
    }
}

/// One collective's messages to and from its members, over `Net`, the
/// library's engine, lent to each [`Schedule::advance`].
pub trait Channel {
    type Net;
    type Error;
    /// A send or receive under way.
    type Request: Copy;

    /// Start sending `len` bytes at `data` to member `to`.
    ///
    /// # Safety
    /// `data` holds `len` bytes until the request completes.
    unsafe fn send(
        &mut self,
        net: &mut Self::Net,
        to: usize,
        data: *const u8,
        len: usize,
    ) -> Result<Self::Request, Self::Error>;

    /// Start receiving up to `len` bytes from member `from` into `into`.
    ///
    /// # Safety
    /// `into` may be written, `len` bytes, until the request completes.
    unsafe fn recv(
        &mut self,
        net: &mut Self::Net,
        from: usize,
        into: *mut u8,
        len: usize,
    ) -> Result<Self::Request, Self::Error>;

    /// `None` while `r` is under way; when done, the bytes a receive
    /// brought (a send's: anything; a receive sent more than its room:
    /// any number above the room).
    fn test(&mut self, net: &mut Self::Net, r: Self::Request)
        -> Option<Result<usize, Self::Error>>;

    /// The error for a receive from `from` that brought `got` bytes where
    /// the plan expects `want`: the members disagree on the call.
    fn mismatch(&self, from: usize, got: usize, want: usize) -> Self::Error;
}

/// A send or receive of the stage under way, and for a receive its
/// source and the bytes it must bring.
type Open<C> = (<C as Channel>::Request, Option<(usize, usize)>);

/// One member's part of one collective, under way.
pub struct Schedule<R, C: Channel> {
    channel: C,
    bufs: Vec<Buf>,
    steps: Vec<Step>,
    next: usize,
    open: Vec<Open<C>>,
    reduction: Option<R>,
    outputs: Vec<Output>,
}

// SAFETY: the raw pointers are the program's buffers, which the caller
// keeps for the collective (`Plan::program`) and touches only through
// the schedule; the rest is owned. The library that advances a schedule
// does so from one thread at a time.
unsafe impl<R: Send, C: Channel + Send> Send for Schedule<R, C> {}

impl<R> Plan<R> {
    /// The plan as a schedule whose messages go through `channel`.
    pub fn schedule<C: Channel>(self, channel: C) -> Schedule<R, C> {
        Schedule {
            channel,
            bufs: self.bufs,
            steps: self.steps,
            next: 0,
            open: Vec::new(),
            reduction: self.reduction,
            outputs: self.outputs,
        }
    }
}

/// `len` bytes at `p` (none for a dangling pointer of an empty span).
///
/// # Safety
/// `p` holds `len` bytes, or `len` is 0.
unsafe fn bytes_at<'a>(p: *const u8, len: usize) -> &'a [u8] {
    if len == 0 {
        &[]
    } else {
        std::slice::from_raw_parts(p, len)
    }
}

impl<R, C> Schedule<R, C>
where
    R: Combine,
    C: Channel,
    C::Error: From<R::Error>,
{
    /// The channel the schedule's messages go through.
    pub fn channel(&self) -> &C {
        &self.channel
    }

    /// The bytes of `span` (a result, once the schedule is done).
    pub fn bytes(&self, span: Span) -> &[u8] {
        let p = self.bufs[span.buf].start_read();
        // SAFETY: a span lies within its buffer.
        unsafe { bytes_at(p.wrapping_add(span.at), span.len) }
    }

    /// Start what can be started; `true` once every step is done.
    pub fn advance(&mut self, net: &mut C::Net) -> Result<bool, C::Error> {
        loop {
            // Start the stage's sends and receives, and run its local
            // steps, up to its fence (or the end).
            while let Some(step) = self.steps.get(self.next).cloned() {
                if matches!(step, Step::Fence) {
                    break;
                }
                self.next += 1;
                self.run(net, step)?;
            }
            // Every request is tested on every advance, not only up to the
            // first still under way: a transport may act when tested (FM's
            // rendezvous clears a message then), and two members each
            // waiting on a different request must not wait on each other.
            let mut i = 0;
            while i < self.open.len() {
                let (r, recv) = self.open[i];
                let Some(got) = self.channel.test(net, r) else {
                    i += 1;
                    continue;
                };
                self.open.swap_remove(i);
                let got = got?;
                if let Some((from, want)) = recv {
                    if got != want {
                        return Err(self.channel.mismatch(from, got, want));
                    }
                }
            }
            if !self.open.is_empty() {
                return Ok(false);
            }
            if self.next == self.steps.len() {
                return Ok(true);
            }
            self.next += 1; // past the fence
        }
    }

    fn run(&mut self, net: &mut C::Net, step: Step) -> Result<(), C::Error> {
        match step {
            // A fence ends a stage in `advance`: nothing to run.
            Step::Fence => {}
            Step::Send { to, data } => {
                let p = self.bufs[data.buf].start().wrapping_add(data.at);
                // SAFETY: the buffer is the schedule's, never resized, and
                // lives until the send completes (a schedule ends only
                // when its stage's requests have; one dropped on an error
                // leaks its buffers, `Drop`).
                let r = unsafe { self.channel.send(net, to, p, data.len)? };
                self.open.push((r, None));
            }
            Step::Recv { from, into } => {
                let p = self.bufs[into.buf].start().wrapping_add(into.at);
                // SAFETY: as for a send.
                let r = unsafe { self.channel.recv(net, from, p, into.len)? };
                self.open.push((r, Some((from, into.len))));
            }
            Step::Reduce {
                lower,
                higher,
                into_lower,
            } => {
                let r = (self.reduction.as_ref())
                    .expect("a plan with reduce steps names its operation");
                if into_lower && r.commutative() {
                    let (a, b) = two(&mut self.bufs, higher, lower);
                    r.combine(a, b).map_err(C::Error::from)?;
                } else {
                    let (a, b) = two(&mut self.bufs, lower, higher);
                    r.combine(a, b).map_err(C::Error::from)?;
                    if into_lower {
                        let (a, b) = two(&mut self.bufs, higher, lower);
                        b.copy_from_slice(a);
                    }
                }
            }
            Step::Copy { from, to } => {
                let (a, b) = two(&mut self.bufs, from, to);
                b.copy_from_slice(a);
            }
            Step::Output { from, to } => {
                let p = self.bufs[from.buf].start_read().wrapping_add(from.at);
                // SAFETY: a span lies within its buffer.
                let data = unsafe { bytes_at(p, from.len) };
                (self.outputs[to])(data);
            }
        }
        Ok(())
    }
}

/// Span `a` to read and span `b` to write, which do not overlap (an
/// algorithm never reads and writes one span in one step, and program
/// spans overlap no other: [`Plan::program`]).
fn two(bufs: &mut [Buf], a: Span, b: Span) -> (&[u8], &mut [u8]) {
    let pa = bufs[a.buf].start().wrapping_add(a.at);
    let pb = bufs[b.buf].start().wrapping_add(b.at);
    // SAFETY: both spans lie within their buffers and do not overlap.
    unsafe {
        let b = if b.len == 0 {
            &mut []
        } else {
            std::slice::from_raw_parts_mut(pb, b.len)
        };
        (bytes_at(pa, a.len), b)
    }
}

impl<R, C: Channel> Drop for Schedule<R, C> {
    /// A schedule ended by an error may have sends and receives still
    /// reading or writing its buffers: those are leaked, not freed.
    fn drop(&mut self) {
        if !self.open.is_empty() {
            std::mem::forget(std::mem::take(&mut self.bufs));
        }
        for b in self.bufs.drain(..) {
            if let Buf::Own(v) = b {
                crate::pool::give(v);
            }
        }
        let (bufs, steps) = (
            std::mem::take(&mut self.bufs),
            std::mem::take(&mut self.steps),
        );
        crate::plan::give_lists(bufs, steps);
    }
}
