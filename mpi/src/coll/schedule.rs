//! A collective as a schedule: the sends, receives and local steps one
//! member takes, in stages, over buffers the schedule owns.
//!
//! A stage's sends and receives are started together and the stage ends
//! when all of them are complete; the local steps (reduce, copy, unpack)
//! run when reached, so an algorithm puts a [`Step::Fence`] between a
//! receive and the step that reads what it received. Nothing in a
//! schedule blocks: [`Schedule::advance`] starts what it can and returns,
//! so one schedule serves the blocking call (advanced until done) and the
//! non-blocking one (advanced by every call's progress, `Engine::progress`).
//!
//! Messages go on the communicator's collective context (no user receive
//! matches them) with the collective's sequence number as the tag, so two
//! collectives in flight on one communicator never take each other's
//! messages, while FM's order per pair keeps the messages of one
//! collective between two members in the order they were sent.

use super::op::Reduction;
use crate::abi::*;
use crate::datatype::Layout;
use crate::engine::{err, Engine, MpiResult};
use fm::Rank;
use std::os::raw::c_int;
use std::sync::Arc;

/// Bit 29 of a context: collective operations' messages (bit 30 is the
/// library's own exchanges, `context.rs`).
pub const COLLECTIVE_OPERATIONS: u32 = 0x2000_0000;

/// Bytes `at..at + len` of the schedule's buffer `buf`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    pub buf: usize,
    pub at: usize,
    pub len: usize,
}

impl Span {
    /// Bytes `at..at + len` of this span.
    pub fn part(self, at: usize, len: usize) -> Span {
        debug_assert!(at + len <= self.len);
        Span {
            buf: self.buf,
            at: self.at + at,
            len,
        }
    }
}

/// The caller's elements a result is unpacked into when it is ready.
#[derive(Clone, Debug)]
pub struct Target {
    pub buf: *mut u8,
    pub count: usize,
    pub layout: Arc<Layout>,
}

#[derive(Clone, Debug)]
pub enum Step {
    /// Send the span to communicator rank `to`.
    Send {
        to: usize,
        data: Span,
    },
    /// Receive exactly `into.len` bytes from communicator rank `from`.
    Recv {
        from: usize,
        into: Span,
    },
    /// `higher = lower op higher` (`lower` holds the lower ranks'
    /// contribution); with `into_lower`, the result then goes to `lower`
    /// (and `higher` is left as scratch).
    Reduce {
        lower: Span,
        higher: Span,
        into_lower: bool,
    },
    Copy {
        from: Span,
        to: Span,
    },
    /// Unpack the span into the caller's elements.
    Unpack {
        from: Span,
        to: Target,
    },
    /// Wait for the stage's sends and receives before going on.
    Fence,
}

/// A buffer a schedule works on: its own, or the program's where the
/// caller's elements lie contiguous (no copy in or out; [`Plan::program`]).
enum Buf {
    Own(Vec<u8>),
    Program { at: *mut u8 },
}

impl Buf {
    /// Its first byte, to write through.
    fn start(&mut self) -> *mut u8 {
        match self {
            Buf::Own(v) => v.as_mut_ptr(),
            Buf::Program { at, .. } => *at,
        }
    }

    /// Its first byte, to read.
    fn start_read(&self) -> *const u8 {
        match self {
            Buf::Own(v) => v.as_ptr(),
            Buf::Program { at, .. } => *at,
        }
    }
}

/// One member's part of one collective.
pub struct Schedule {
    context: u32,
    tag: c_int,
    me: c_int,
    ranks: Arc<[Rank]>,
    bufs: Vec<Buf>,
    steps: Vec<Step>,
    next: usize,
    /// Sends and receives of the stage under way: the engine's request,
    /// and for a receive the bytes it must bring.
    open: Vec<(u32, Option<usize>)>,
    reduction: Option<Reduction>,
}

// SAFETY: the raw pointers are the caller's buffers, which MPI says stay
// valid until the collective completes; the schedule is used only under
// the library's lock.
unsafe impl Send for Schedule {}

/// A schedule being written by an algorithm.
///
/// An algorithm numbers the members it runs on `0..n` and is `me` among
/// them: the whole communicator, or a group of its members that
/// [`Plan::within`] names (the members of one host, or the hosts'
/// leaders), whose numbers its sends and receives translate.
pub struct Plan {
    pub n: usize,
    pub me: usize,
    /// This member's rank in the communicator.
    pub rank: usize,
    /// The communicator ranks of the group the algorithm runs on, by its
    /// numbers (`None`: the whole communicator).
    group: Option<Vec<usize>>,
    bufs: Vec<Buf>,
    steps: Vec<Step>,
    reduction: Option<Reduction>,
}

impl Plan {
    pub fn new(n: usize, me: usize) -> Plan {
        Plan {
            n,
            me,
            rank: me,
            group: None,
            bufs: Vec::new(),
            steps: Vec::new(),
            reduction: None,
        }
    }

    /// The operation this plan's `reduce` steps combine with.
    pub fn reducing(&mut self, r: Reduction) {
        self.reduction = Some(r);
    }

    /// A buffer holding `data`: a span of all of it.
    pub fn buffer(&mut self, data: Vec<u8>) -> Span {
        let len = data.len();
        self.bufs.push(Buf::Own(data));
        Span {
            buf: self.bufs.len() - 1,
            at: 0,
            len,
        }
    }

    /// The program's `len` bytes at `at` as a span the schedule reads and
    /// writes in place: the caller's elements when they lie contiguous.
    ///
    /// # Safety
    /// `at` holds `len` bytes the program does not touch until the
    /// collective completes (MPI's rule for its buffers), and no other
    /// span of the plan overlaps them.
    pub unsafe fn program(&mut self, at: *mut u8, len: usize) -> Span {
        self.bufs.push(Buf::Program { at });
        Span {
            buf: self.bufs.len() - 1,
            at: 0,
            len,
        }
    }

    /// A buffer of `len` bytes to receive into.
    pub fn scratch(&mut self, len: usize) -> Span {
        self.buffer(super::pool::zeroed(len))
    }

    /// Write the part of `f`, an algorithm, that this member takes in
    /// it when run on `members` only (communicator ranks, numbered
    /// `0..members.len()` in this order); nothing if this member is not
    /// one of them.
    pub fn within(&mut self, members: &[usize], f: impl FnOnce(&mut Plan)) {
        let Some(me) = members.iter().position(|&r| r == self.rank) else {
            return;
        };
        let whole = (self.n, self.me, self.group.take());
        (self.n, self.me, self.group) = (members.len(), me, Some(members.to_vec()));
        f(self);
        (self.n, self.me, self.group) = whole;
    }

    /// The communicator rank of member `i` of the group under way.
    fn member(&self, i: usize) -> usize {
        self.group.as_ref().map_or(i, |g| g[i])
    }

    pub fn send(&mut self, to: usize, data: Span) {
        let to = self.member(to);
        self.steps.push(Step::Send { to, data });
    }

    pub fn recv(&mut self, from: usize, into: Span) {
        let from = self.member(from);
        self.steps.push(Step::Recv { from, into });
    }

    pub fn fence(&mut self) {
        if !matches!(self.steps.last(), None | Some(Step::Fence)) {
            self.steps.push(Step::Fence);
        }
    }

    pub fn reduce(&mut self, lower: Span, higher: Span, into_lower: bool) {
        self.steps.push(Step::Reduce {
            lower,
            higher,
            into_lower,
        });
    }

    pub fn copy(&mut self, from: Span, to: Span) {
        if from != to && from.len > 0 {
            self.steps.push(Step::Copy { from, to });
        }
    }

    pub fn unpack(&mut self, from: Span, to: Target) {
        if from.len > 0 {
            self.steps.push(Step::Unpack { from, to });
        }
    }

    /// The plan as a schedule on context `context` (the communicator's)
    /// with tag `tag` (the collective's number on it).
    pub fn schedule(self, context: u32, tag: c_int, ranks: Arc<[Rank]>) -> Schedule {
        Schedule {
            context: context | COLLECTIVE_OPERATIONS,
            tag: tag & TAG_UB,
            me: self.rank as c_int,
            ranks,
            bufs: self.bufs,
            steps: self.steps,
            next: 0,
            open: Vec::new(),
            reduction: self.reduction,
        }
    }
}

#[cfg(test)]
impl Plan {
    /// Its steps, the bytes of its buffers (all its own) and its
    /// operation: what the model of a collective runs (`model.rs`).
    pub(super) fn parts(self) -> (Vec<Step>, Vec<Vec<u8>>, Option<Reduction>) {
        let bufs = (self.bufs.into_iter())
            .map(|b| match b {
                Buf::Own(v) => v,
                Buf::Program { .. } => panic!("the model runs plans over their own buffers"),
            })
            .collect();
        (self.steps, bufs, self.reduction)
    }
}

impl Schedule {
    /// The bytes of `span` (a result, once the schedule is done).
    pub fn bytes(&self, span: Span) -> &[u8] {
        let p = self.bufs[span.buf].start_read();
        // SAFETY: a span lies within its buffer.
        unsafe { crate::engine::slice_or_empty(p.wrapping_add(span.at), span.len) }
    }

    /// Start what can be started; `true` once every step is done.
    pub fn advance(&mut self, e: &mut Engine) -> MpiResult<bool> {
        loop {
            // Start the stage's sends and receives, and run its local
            // steps, up to its fence (or the end).
            while let Some(step) = self.steps.get(self.next).cloned() {
                if matches!(step, Step::Fence) {
                    break;
                }
                self.next += 1;
                self.run(e, step)?;
            }
            while let Some(&(id, want)) = self.open.last() {
                let Some(s) = e.test(id) else {
                    return Ok(false);
                };
                self.open.pop();
                if let Some(want) = want {
                    let got = s.bytes();
                    let (class, what) = match s.error {
                        MPI_SUCCESS if got == want as u64 => continue,
                        MPI_SUCCESS => (MPI_ERR_TRUNCATE, format!("{got} bytes")),
                        // The receive got what fits; more was sent.
                        MPI_ERR_TRUNCATE => (MPI_ERR_TRUNCATE, "more bytes".to_string()),
                        e => return err(e, format!("a receive from member {} failed", s.source)),
                    };
                    return err(
                        class,
                        format!(
                            "member {} sent {what} where {want} were expected: do all members pass matching counts and types (and the same root)?",
                            s.source
                        ),
                    );
                }
            }
            if self.next == self.steps.len() {
                return Ok(true);
            }
            self.next += 1; // past the fence
        }
    }

    fn run(&mut self, e: &mut Engine, step: Step) -> MpiResult<()> {
        match step {
            // A fence ends a stage in `advance`: nothing to run.
            Step::Fence => {}
            Step::Send { to, data } => {
                let route = crate::engine::Route {
                    context: self.context,
                    me: self.me,
                    to: Some(self.ranks[to]),
                };
                let p = self.bufs[data.buf].start().wrapping_add(data.at);
                // SAFETY: the buffer is the schedule's, never resized, and
                // lives until the send completes (a schedule ends only
                // when its stage's requests have; one dropped on an error
                // leaks its buffers, `Drop`).
                let id = unsafe { e.isend(route, self.tag, p, data.len, false)? };
                self.open.push((id, None));
            }
            Step::Recv { from, into } => {
                let p = self.bufs[into.buf].start().wrapping_add(into.at);
                // SAFETY: as for a send.
                let id = unsafe { e.irecv(self.context, from as c_int, self.tag, p, into.len)? };
                self.open.push((id, Some(into.len)));
            }
            Step::Reduce {
                lower,
                higher,
                into_lower,
            } => {
                let Some(r) = &self.reduction else {
                    return err(MPI_ERR_INTERN, "a reduction step without an operation");
                };
                let (a, b) = two(&mut self.bufs, lower, higher);
                r.combine(a, b)?;
                if into_lower {
                    self.run(
                        e,
                        Step::Copy {
                            from: higher,
                            to: lower,
                        },
                    )?;
                }
            }
            Step::Copy { from, to } => {
                let (a, b) = two(&mut self.bufs, from, to);
                b.copy_from_slice(a);
            }
            Step::Unpack { from, to } => {
                let data = self.bytes(from);
                // SAFETY: the caller's buffer holds `count` elements of
                // the layout until the collective completes.
                unsafe { to.layout.unpack(data, to.buf, to.count) };
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
        (
            crate::engine::slice_or_empty(pa, a.len),
            std::slice::from_raw_parts_mut(pb, b.len),
        )
    }
}

impl Drop for Schedule {
    /// A schedule ended by an error may have sends and receives still
    /// reading or writing its buffers: those are leaked, not freed.
    fn drop(&mut self) {
        if !self.open.is_empty() {
            std::mem::forget(std::mem::take(&mut self.bufs));
        }
        for b in self.bufs.drain(..) {
            if let Buf::Own(v) = b {
                super::pool::give(v);
            }
        }
    }
}
