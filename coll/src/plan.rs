//! A collective as a plan: the sends, receives and local steps one member
//! takes, in stages, over buffers the plan owns (or the program's own,
//! [`Plan::program`]). An algorithm writes a plan ([`crate::algorithms`]);
//! a [`crate::Schedule`] runs it over a transport.

use crate::pool;

/// Bytes `at..at + len` of the plan's buffer `buf`.
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

#[derive(Clone, Debug)]
pub enum Step {
    /// Send the span to member `to` (of the whole collective).
    Send {
        to: usize,
        data: Span,
    },
    /// Receive exactly `into.len` bytes from member `from`.
    Recv {
        from: usize,
        into: Span,
    },
    /// `higher = lower op higher` (`lower` holds the lower members'
    /// contribution); with `into_lower`, the result goes to `lower`
    /// instead: formed there for a commutative operation, else formed in
    /// `higher` and copied (`higher` is left as scratch either way).
    Reduce {
        lower: Span,
        higher: Span,
        into_lower: bool,
    },
    Copy {
        from: Span,
        to: Span,
    },
    /// Hand the span to the plan's output `to` ([`Plan::output`]).
    Output {
        from: Span,
        to: usize,
    },
    /// Wait for the stage's sends and receives before going on.
    Fence,
}

/// Where a result goes that is not the program's own contiguous memory:
/// the caller's library unpacks the bytes (MPI: into a derived datatype).
pub type Output = Box<dyn FnMut(&[u8]) + Send>;

/// A buffer a plan works on: its own, or the program's where the
/// caller's elements lie contiguous (no copy in or out; [`Plan::program`]).
pub(crate) enum Buf {
    Own(Vec<u8>),
    Program { at: *mut u8 },
}

impl Buf {
    /// Its first byte, to write through.
    pub(crate) fn start(&mut self) -> *mut u8 {
        match self {
            Buf::Own(v) => v.as_mut_ptr(),
            Buf::Program { at } => *at,
        }
    }

    /// Its first byte, to read.
    pub(crate) fn start_read(&self) -> *const u8 {
        match self {
            Buf::Own(v) => v.as_ptr(),
            Buf::Program { at } => *at,
        }
    }
}

/// A plan being written by an algorithm, combining with `R`.
///
/// An algorithm numbers the members it runs on `0..n` and is `me` among
/// them: the whole collective's members, or a group of them that
/// [`Plan::within`] names (the members of one host, or the hosts'
/// leaders), whose numbers its sends and receives translate.
pub struct Plan<R> {
    pub n: usize,
    pub me: usize,
    /// This member's number in the whole collective.
    pub rank: usize,
    /// The whole collective's numbers of the group the algorithm runs
    /// on, by its numbers (`None`: the whole collective).
    group: Option<Vec<usize>>,
    pub(crate) bufs: Vec<Buf>,
    pub(crate) steps: Vec<Step>,
    pub(crate) reduction: Option<R>,
    pub(crate) outputs: Vec<Output>,
}

/// How many pairs of lists `SPARE` keeps, and the longest list kept (a
/// huge all-to-all's is left to the allocator).
const SPARE_LISTS: usize = 8;
const SPARE_STEPS: usize = 4096;

thread_local! {
    /// The emptied buffer and step lists of ended schedules, kept for
    /// the next plans on this thread: a small collective then allocates
    /// neither (an 8 B allreduce spent a sixth of its instructions in
    /// the allocator, on these lists and their regrowth among others).
    static SPARE: std::cell::RefCell<Vec<(Vec<Buf>, Vec<Step>)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// Empty lists for a new plan: spare ones where this thread has some.
fn lists() -> (Vec<Buf>, Vec<Step>) {
    SPARE
        .try_with(|s| s.borrow_mut().pop())
        .ok()
        .flatten()
        .unwrap_or_default()
}

/// An ended schedule's lists, emptied, for the next plan.
pub(crate) fn give_lists(mut bufs: Vec<Buf>, mut steps: Vec<Step>) {
    bufs.clear();
    steps.clear();
    if steps.capacity() > SPARE_STEPS || bufs.capacity() > SPARE_STEPS {
        return;
    }
    let _ = SPARE.try_with(|s| {
        let mut s = s.borrow_mut();
        if s.len() < SPARE_LISTS {
            s.push((bufs, steps));
        }
    });
}

impl<R> Plan<R> {
    /// The plan of member `me` of `n`.
    pub fn new(n: usize, me: usize) -> Plan<R> {
        let (bufs, steps) = lists();
        Plan {
            n,
            me,
            rank: me,
            group: None,
            bufs,
            steps,
            reduction: None,
            outputs: Vec::new(),
        }
    }

    /// The operation this plan's `reduce` steps combine with.
    pub fn reducing(&mut self, r: R) {
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
    /// collective completes, and no other span of the plan overlaps them.
    pub unsafe fn program(&mut self, at: *mut u8, len: usize) -> Span {
        self.bufs.push(Buf::Program { at });
        Span {
            buf: self.bufs.len() - 1,
            at: 0,
            len,
        }
    }

    /// A buffer of `len` bytes to receive into; what it holds before is
    /// not defined ([`pool::scratch`]), so a plan writes a scratch span
    /// before it reads or outputs it.
    pub fn scratch(&mut self, len: usize) -> Span {
        self.buffer(pool::scratch(len))
    }

    /// Write the part of `f`, an algorithm, that this member takes in
    /// it when run on `members` only (numbers in the whole collective,
    /// numbered `0..members.len()` in this order); nothing if this member
    /// is not one of them.
    pub fn within(&mut self, members: &[usize], f: impl FnOnce(&mut Plan<R>)) {
        let Some(me) = members.iter().position(|&r| r == self.rank) else {
            return;
        };
        let whole = (self.n, self.me, self.group.take());
        (self.n, self.me, self.group) = (members.len(), me, Some(members.to_vec()));
        f(self);
        (self.n, self.me, self.group) = whole;
    }

    /// The whole collective's number of member `i` of the group under way.
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

    /// Hand `from`'s bytes, once reached, to `to`.
    pub fn output(&mut self, from: Span, to: Output) {
        if from.len > 0 {
            self.outputs.push(to);
            self.steps.push(Step::Output {
                from,
                to: self.outputs.len() - 1,
            });
        }
    }

    /// Its steps, the bytes of its buffers (all its own) and its
    /// operation: what the model of a collective runs (`model.rs`).
    #[cfg(test)]
    pub(crate) fn parts(self) -> (Vec<Step>, Vec<Vec<u8>>, Option<R>) {
        let bufs = (self.bufs.into_iter())
            .map(|b| match b {
                Buf::Own(v) => v,
                Buf::Program { .. } => panic!("the model runs plans over their own buffers"),
            })
            .collect();
        (self.steps, bufs, self.reduction)
    }
}

impl<R> Plan<R> {
    /// The members this plan sends to and receives from, in the order of
    /// its steps (each once).
    pub fn peers(&self) -> (Vec<usize>, Vec<usize>) {
        let (mut to, mut from) = (Vec::new(), Vec::new());
        for s in &self.steps {
            match *s {
                Step::Send { to: t, .. } if !to.contains(&t) => to.push(t),
                Step::Recv { from: f, .. } if !from.contains(&f) => from.push(f),
                _ => {}
            }
        }
        (to, from)
    }
}
