//! Collective operations on intracommunicators.
//!
//! Each call is checked, its input packed into buffers of its own, and
//! written as a [`Plan`] by one of the algorithms ([`algorithms`]) chosen
//! by size and shape ([`tuning`]), in two levels where the communicator
//! spans hosts ([`hosts`]); the plan becomes a [`Schedule`] that
//! the blocking call advances until done and the non-blocking one leaves
//! to the engine's progress, completing its request. Results are unpacked
//! into the caller's buffers by the schedule's last steps.

pub use fm_coll::{algorithms, hosts, pool};
pub mod area;
pub mod inter;
pub mod op;
pub mod schedule;
pub mod tuning;

use crate::abi::*;
use crate::datatype::Layout;
use crate::engine::{err, Comm, MpiResult};
use crate::topo::Neighbors;
use hosts::Hosts;
use op::Reduction;
pub use schedule::{Plan, Schedule, Span};
use std::os::raw::c_int;
use std::sync::Arc;
pub use tuning::Tuning;

/// A collective under way: a schedule of messages, or a step through
/// the host's collective area ([`area`]).
pub enum Running {
    Messages(Schedule),
    Area(area::AreaOp),
}

impl Running {
    /// Go as far as possible without waiting; whether it is done.
    pub fn advance(&mut self, e: &mut crate::engine::Engine) -> MpiResult<bool> {
        match self {
            Running::Messages(s) => s.advance(e),
            Running::Area(a) => a.advance(e),
        }
    }

    /// What it waits for besides messages, if anything: a wait that may
    /// sleep looks at it too.
    pub fn watch(&self) -> Option<area::Watch> {
        match self {
            Running::Messages(_) => None,
            Running::Area(a) => a.watch(),
        }
    }
}

impl From<Schedule> for Running {
    fn from(s: Schedule) -> Running {
        Running::Messages(s)
    }
}

impl From<area::AreaOp> for Running {
    fn from(a: area::AreaOp) -> Running {
        Running::Area(a)
    }
}

/// `count` elements of a datatype at `buf` (the caller's).
#[derive(Clone, Debug)]
pub struct Elements {
    pub buf: *mut u8,
    pub count: usize,
    pub layout: Arc<Layout>,
}

// SAFETY: `buf` is the caller's, used only under the library's lock
// while the collective that holds it runs (MPI's rule for the buffers of
// non-blocking and persistent collectives).
unsafe impl Send for Elements {}

impl Elements {
    pub fn bytes(&self) -> usize {
        self.count * self.layout.size
    }

    /// Their data, packed.
    ///
    /// # Safety
    /// `buf` holds `count` elements of the layout.
    pub unsafe fn pack(&self) -> Vec<u8> {
        let mut v = pool::take(self.bytes());
        self.layout.pack(self.buf, self.count, &mut v);
        v
    }

    /// Whether `other` is these very elements (same buffer, count and
    /// type).
    pub fn same(&self, other: &Elements) -> bool {
        self.buf == other.buf
            && self.count == other.count
            && Arc::ptr_eq(&self.layout, &other.layout)
    }

    /// A plan's output that unpacks a result into these elements.
    pub fn output(&self) -> fm_coll::Output {
        let e = self.clone();
        Box::new(move |data| e.unpack(data))
    }

    /// `data` unpacked into the elements.
    fn unpack(&self, data: &[u8]) {
        // SAFETY: the caller's buffer holds `count` elements of the
        // layout until the collective completes (MPI's rule).
        unsafe { self.layout.unpack(data, self.buf, self.count) };
    }

    /// Where the elements lie as one run of bytes, if they do and hold
    /// any: the schedule then works in the program's buffer itself.
    fn contiguous(&self) -> Option<*mut u8> {
        let at = self.layout.contiguous_at()?;
        (self.bytes() > 0).then(|| self.buf.wrapping_offset(at))
    }

    /// `count` elements from `displacement` elements on.
    pub fn at(&self, displacement: isize, count: usize) -> Elements {
        Elements {
            buf: self
                .buf
                .wrapping_offset(displacement.wrapping_mul(self.layout.extent)),
            count,
            layout: self.layout.clone(),
        }
    }

    /// `count` elements from `bytes` bytes on.
    pub fn at_byte(&self, bytes: isize, count: usize) -> Elements {
        Elements {
            buf: self.buf.wrapping_offset(bytes),
            count,
            layout: self.layout.clone(),
        }
    }
}

/// Whether `buf` is `MPI_IN_PLACE`.
pub fn in_place<T>(buf: *const T) -> bool {
    buf as usize == IN_PLACE
}

/// The member of `comm` a rooted collective names, checked.
pub fn root(comm: &Comm, root: c_int) -> MpiResult<usize> {
    match usize::try_from(root) {
        Ok(r) if r < comm.ranks.len() => Ok(r),
        _ => err(
            MPI_ERR_ROOT,
            format!(
                "root {root} is not a rank of a communicator of {}",
                comm.ranks.len()
            ),
        ),
    }
}

/// An input the plan only reads: the program's buffer where the elements
/// lie contiguous, else a packed copy.
///
/// # Safety
/// As [`bcast`].
unsafe fn input(p: &mut Plan, e: &Elements) -> Span {
    match e.contiguous() {
        Some(at) => p.program(at, e.bytes()),
        None => p.buffer(e.pack()),
    }
}

/// Where a result goes: the program's buffer where the elements lie
/// contiguous, else a scratch buffer [`deliver`] unpacks.
///
/// # Safety
/// As [`bcast`].
unsafe fn output(p: &mut Plan, e: &Elements) -> Span {
    match e.contiguous() {
        Some(at) => p.program(at, e.bytes()),
        None => p.scratch(e.bytes()),
    }
}

/// A result in `span` to the caller's elements `e`: nothing to do where
/// [`output`] gave the program's own buffer.
fn deliver(p: &mut Plan, span: Span, e: &Elements) {
    if e.contiguous().is_none() {
        p.output(span, e.output());
    }
}

/// Where the results of `recv` go, one block each, one after another
/// (as the algorithms need them): in the program's buffer where every
/// block lies contiguous and each follows the one before, else in a
/// scratch buffer ([`delivered`] says which).
///
/// # Safety
/// As [`bcast`].
unsafe fn outputs(p: &mut Plan, recv: &[Elements]) -> Vec<Span> {
    let lens: Vec<usize> = recv.iter().map(Elements::bytes).collect();
    match in_one_run(recv) {
        Some(at) => {
            let all = p.program(at, lens.iter().sum());
            parts(all, &lens)
        }
        None => blocks(p, &lens),
    }
}

/// The start of `blocks` where each lies contiguous right after the one
/// before (and they hold any bytes).
fn in_one_run(blocks: &[Elements]) -> Option<*mut u8> {
    let first = blocks.first()?.contiguous()?;
    let mut next = first;
    for b in blocks {
        if b.contiguous() != Some(next) {
            return None;
        }
        next = next.wrapping_add(b.bytes());
    }
    Some(first)
}

/// Whether [`outputs`] put `recv`'s results in the program's buffer.
fn delivered(recv: &[Elements]) -> bool {
    in_one_run(recv).is_some()
}

/// Whether any bytes of `a`'s and `b`'s runs are the same memory.
fn overlap(a: &[Elements], b: &[Elements]) -> bool {
    let run = |e: &Elements| e.contiguous().map(|s| (s as usize, s as usize + e.bytes()));
    a.iter()
        .filter_map(run)
        .any(|(s, e)| b.iter().filter_map(run).any(|(t, f)| s < f && t < e))
}

fn plan(comm: &Comm) -> Plan {
    Plan::new(comm.ranks.len(), comm.rank as usize)
}

/// The communicator's hosts, where the collectives go in two levels
/// (`FM_COLL_HOSTS`, [`hosts`]).
fn two_levels(comm: &Comm, t: &Tuning) -> Option<Arc<Hosts>> {
    if !(t.host_aware && t.several_hosts) {
        return None;
    }
    let h = Hosts::of_comm(&comm.ranks, &t.job_hosts);
    h.worth_it().then_some(h)
}

pub fn barrier(comm: &Comm) -> Plan {
    let mut p = plan(comm);
    match two_levels(comm, &tuning::current()) {
        Some(h) => hosts::barrier(&mut p, &h),
        None => algorithms::barrier(&mut p),
    }
    p
}

/// # Safety
/// `data` is the caller's buffer of its elements.
pub unsafe fn bcast(comm: &Comm, data: &Elements, root: usize) -> Plan {
    let mut p = plan(comm);
    let me = p.me;
    let span = if me == root {
        input(&mut p, data)
    } else {
        output(&mut p, data)
    };
    let t = tuning::current();
    let unit = data.layout.size.max(1);
    match two_levels(comm, &t) {
        Some(h) => hosts::bcast(&mut p, &h, root, span, |p, root, span| {
            t.rules.bcast(p, root, span, unit);
        }),
        None => t.rules.bcast(&mut p, root, span, unit),
    }
    if me != root {
        deliver(&mut p, span, data);
    }
    p
}

/// A reduction's operand: the caller's input packed (`MPI_IN_PLACE`: the
/// output's elements are the input).
///
/// # Safety
/// The buffers are the caller's, of `count` elements each.
unsafe fn operand(p: &mut Plan, send: Option<&Elements>, recv: &Elements) -> Span {
    match send {
        Some(s) => p.buffer(s.pack()),
        None => p.buffer(recv.pack()),
    }
}

/// `MPI_Reduce`: `send` is `None` for `MPI_IN_PLACE` at the root; `recv`
/// matters at the root only.
///
/// # Safety
/// As [`bcast`].
pub unsafe fn reduce(
    comm: &Comm,
    send: Option<&Elements>,
    recv: &Elements,
    reduction: Reduction,
    root: usize,
) -> Plan {
    let mut p = plan(comm);
    let (input, acc) = match p.me == root {
        true => {
            let (input, acc) = input_and_result(&mut p, send, recv);
            (input, Some(acc))
        }
        false => (operand_read(&mut p, send, recv), None),
    };
    let commutative = reduction.commutative();
    p.reducing(reduction);
    match two_levels(comm, &tuning::current()).filter(|_| commutative) {
        Some(h) => hosts::reduce(&mut p, &h, root, input, acc),
        None => algorithms::reduce_binomial(&mut p, root, input, acc, commutative),
    }
    if let Some(acc) = acc {
        deliver(&mut p, acc, recv);
    }
    p
}

/// A reduction's input, only read: the program's own elements where they
/// are one run of bytes, else packed (`MPI_IN_PLACE`, erroneous where
/// this is used: the output's elements).
///
/// # Safety
/// As [`bcast`].
unsafe fn operand_read(p: &mut Plan, send: Option<&Elements>, recv: &Elements) -> Span {
    input(p, send.unwrap_or(recv))
}

/// A reduction's input and where its result forms, at a member that
/// keeps the result: the program's buffers where they are each one run
/// of bytes (the same one for `MPI_IN_PLACE`), so that neither the input
/// nor the result is copied; else packed and scratch copies. An input
/// that overlaps the output (erroneous, but not always caught) is
/// packed first, so that the result is still right.
///
/// # Safety
/// As [`bcast`].
unsafe fn input_and_result(p: &mut Plan, send: Option<&Elements>, recv: &Elements) -> (Span, Span) {
    match send {
        None if recv.contiguous().is_some() => {
            let acc = output(p, recv);
            (acc, acc)
        }
        None => {
            let acc = p.buffer(recv.pack());
            (acc, acc)
        }
        Some(s) if overlap(std::slice::from_ref(s), std::slice::from_ref(recv)) => {
            (p.buffer(s.pack()), output(p, recv))
        }
        Some(s) => (input(p, s), output(p, recv)),
    }
}

/// # Safety
/// As [`bcast`].
pub unsafe fn allreduce(
    comm: &Comm,
    send: Option<&Elements>,
    recv: &Elements,
    reduction: Reduction,
) -> Plan {
    let mut p = plan(comm);
    let (input, acc) = input_and_result(&mut p, send, recv);
    let unit = recv.layout.size.max(1);
    let commutative = reduction.commutative();
    p.reducing(reduction);
    let t = tuning::current();
    match two_levels(comm, &t).filter(|_| commutative) {
        Some(h) => {
            if input != acc {
                p.copy(input, acc);
            }
            hosts::allreduce(&mut p, &h, acc, |p, acc| {
                t.rules.allreduce(p, acc, acc, unit, commutative);
            });
        }
        None => t.rules.allreduce(&mut p, input, acc, unit, commutative),
    }
    deliver(&mut p, acc, recv);
    p
}

/// Each of `elems` packed into the plan, once for a run of the very
/// same elements (an allgather sends one block to every neighbour).
///
/// # Safety
/// As [`bcast`].
pub unsafe fn packed(p: &mut Plan, elems: &[Elements]) -> Vec<Span> {
    let mut out: Vec<Span> = Vec::with_capacity(elems.len());
    for (i, e) in elems.iter().enumerate() {
        let span = match i.checked_sub(1) {
            Some(j) if elems[j].same(e) => out[j],
            _ => p.buffer(e.pack()),
        };
        out.push(span);
    }
    out
}

/// Blocks one after another in one new buffer, of the given lengths.
fn blocks(p: &mut Plan, lens: &[usize]) -> Vec<Span> {
    let all = p.scratch(lens.iter().sum());
    parts(all, lens)
}

/// `all` cut into blocks of the given lengths, one after another.
fn parts(all: Span, lens: &[usize]) -> Vec<Span> {
    let mut at = 0;
    lens.iter()
        .map(|&len| {
            let s = all.part(at, len);
            at += len;
            s
        })
        .collect()
}

/// `MPI_Gather(v)`: at the root, `recv[i]` is where member i's elements
/// go; `send` is `None` for `MPI_IN_PLACE` at the root.
///
/// # Safety
/// As [`bcast`].
pub unsafe fn gather(comm: &Comm, send: Option<&Elements>, recv: &[Elements], root: usize) -> Plan {
    let mut p = plan(comm);
    let me = p.me;
    let mine = send.map(|s| p.buffer(s.pack()));
    if me == root {
        let lens: Vec<usize> = recv.iter().map(Elements::bytes).collect();
        let b = blocks(&mut p, &lens);
        algorithms::gather_linear(&mut p, root, mine, &b);
        for (i, (span, to)) in b.iter().zip(recv).enumerate() {
            if i != root || mine.is_some() {
                p.output(*span, to.output());
            }
        }
    } else {
        algorithms::gather_linear(&mut p, root, mine, &[]);
    }
    p
}

/// `MPI_Scatter(v)`: at the root, `send[i]` is member i's elements;
/// `recv` is `None` for `MPI_IN_PLACE` at the root.
///
/// # Safety
/// As [`bcast`].
pub unsafe fn scatter(
    comm: &Comm,
    send: &[Elements],
    recv: Option<&Elements>,
    root: usize,
) -> Plan {
    let mut p = plan(comm);
    let mine = recv.map(|r| p.scratch(r.bytes()));
    let b: Vec<Span> = if p.me == root {
        send.iter().map(|s| p.buffer(s.pack())).collect()
    } else {
        Vec::new()
    };
    algorithms::scatter_linear(&mut p, root, &b, mine);
    if let (Some(span), Some(r)) = (mine, recv) {
        p.output(span, r.output());
    }
    p
}

/// `MPI_Allgather(v)`: `recv[i]` is where member i's elements go; `send`
/// is `None` for `MPI_IN_PLACE` (this member's are in `recv[me]`).
///
/// # Safety
/// As [`bcast`].
pub unsafe fn allgather(comm: &Comm, send: Option<&Elements>, recv: &[Elements]) -> Plan {
    let mut p = plan(comm);
    let me = p.me;
    let b = outputs(&mut p, recv);
    let in_program = delivered(recv);
    match send {
        Some(s) => {
            let mine = input(&mut p, s);
            p.copy(mine, b[me]);
        }
        // MPI_IN_PLACE: this member's block is where it goes already.
        None if in_program => {}
        None => {
            let mine = p.buffer(recv[me].pack());
            p.copy(mine, b[me]);
        }
    }
    tuning::current().rules.allgather(&mut p, &b);
    if !in_program {
        for (i, (span, to)) in b.iter().zip(recv).enumerate() {
            if i != me || send.is_some() {
                p.output(*span, to.output());
            }
        }
    }
    p
}

/// `MPI_Alltoall(v, w)`: `send[i]` goes to member i, `recv[i]` comes
/// from it. With `MPI_IN_PLACE` the caller passes `recv` as `send`: every
/// block is packed before any arrives.
///
/// # Safety
/// As [`bcast`].
pub unsafe fn alltoall(comm: &Comm, send: &[Elements], recv: &[Elements]) -> Plan {
    let mut p = plan(comm);
    // Sent from the program's buffer unless a block arriving could
    // overwrite one not yet sent (MPI_IN_PLACE passes `recv` as `send`).
    let apart = !overlap(send, recv);
    let s: Vec<Span> = (send.iter())
        .map(|e| match apart {
            true => input(&mut p, e),
            false => p.buffer(e.pack()),
        })
        .collect();
    let r = outputs(&mut p, recv);
    algorithms::alltoall_pairwise(&mut p, &s, &r);
    if !delivered(recv) {
        for (span, to) in r.iter().zip(recv) {
            p.output(*span, to.output());
        }
    }
    p
}

/// `MPI_Reduce_scatter(_block)`: the reduction of every member's
/// `counts.sum()` elements, member i getting `counts[i]` of them (from
/// element `counts[..i].sum()` on). `send` is `None` for `MPI_IN_PLACE`
/// (the input is in `recv`'s buffer, all of it).
///
/// # Safety
/// As [`bcast`]; `input` is the whole input's elements.
pub unsafe fn reduce_scatter(
    comm: &Comm,
    input: &Elements,
    recv: &Elements,
    counts: &[usize],
    reduction: Reduction,
) -> Plan {
    let mut p = plan(comm);
    let me = p.me;
    let acc = p.buffer(input.pack());
    let commutative = reduction.commutative();
    p.reducing(reduction);
    algorithms::reduce_binomial(&mut p, 0, acc, Some(acc), commutative);
    let size = recv.layout.size;
    let mut at = 0;
    let pieces: Vec<Span> = counts
        .iter()
        .map(|&c| {
            let s = acc.part(at, c * size);
            at += c * size;
            s
        })
        .collect();
    let mine = p.scratch(counts[me] * size);
    algorithms::scatter_linear(&mut p, 0, &pieces, Some(mine));
    p.output(mine, recv.output());
    p
}

/// `MPI_Scan` and `MPI_Exscan` (`exclusive`).
///
/// # Safety
/// As [`bcast`].
pub unsafe fn scan(
    comm: &Comm,
    send: Option<&Elements>,
    recv: &Elements,
    reduction: Reduction,
    exclusive: bool,
) -> Plan {
    let mut p = plan(comm);
    let partial = operand(&mut p, send, recv);
    let result = p.scratch(partial.len);
    if !exclusive {
        p.copy(partial, result);
    }
    p.reducing(reduction);
    if algorithms::scan_recursive_doubling(&mut p, partial, result, exclusive) {
        p.output(result, recv.output());
    }
    p
}

/// The neighbourhood collectives (`MPI_Neighbor_allgather(v)`,
/// `MPI_Neighbor_alltoall(v, w)`): `send[i]` goes to `n.outs[i]` and
/// `recv[i]` comes from `n.ins[i]`; an `MPI_PROC_NULL` neighbour's block
/// is neither sent nor written.
///
/// Messages between two members keep their order, so which block lands
/// where, when they name each other more than once, is the order the
/// receives are posted in: the list's for a graph; in a grid, each
/// dimension's two swapped, so that the first block a member sends a
/// neighbour (its down block) meets the first receive posted from it
/// (the up slot) ([`Neighbors::by_direction`]).
///
/// # Safety
/// As [`bcast`].
pub unsafe fn neighbors(comm: &Comm, n: &Neighbors, send: &[Elements], recv: &[Elements]) -> Plan {
    let mut p = plan(comm);
    let s = packed(&mut p, send);
    let lens: Vec<usize> = recv.iter().map(Elements::bytes).collect();
    let r = blocks(&mut p, &lens);
    let real = |k: usize| n.ins[k] != MPI_PROC_NULL;
    let swap = usize::from(n.by_direction);
    for k in (0..n.ins.len()).map(|k| k ^ swap).filter(|&k| real(k)) {
        p.recv(n.ins[k] as usize, r[k]);
    }
    for (&to, &span) in n.outs.iter().zip(&s).filter(|(&to, _)| to != MPI_PROC_NULL) {
        p.send(to as usize, span);
    }
    p.fence();
    for k in (0..n.ins.len()).filter(|&k| real(k)) {
        p.output(r[k], recv[k].output());
    }
    p
}
