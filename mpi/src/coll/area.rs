//! Small collectives through the host's collective area: on a
//! communicator whose members all share this host, barrier, broadcast,
//! reduce, allreduce, gather and allgather of up to `FM_COLL_SHM_BYTES`
//! per member move through shared memory ([`fm::coll::HostArea`]): each
//! member writes its part once into its slot and posts the step, and
//! each member that needs others' parts reads them where they lie once
//! their step is posted. No message, no matching, no schedule.
//!
//! A step is one collective. Steps are numbered per communicator in the
//! order the collectives are called, which every member shares (MPI's
//! rule), and one member runs them one after the other: a step starts
//! (writes and posts) only once this member completed the one before, so
//! that posting `s` says "done with `s − 1`" ([`fm::coll::HostArea`]).
//! A non-blocking collective here is a step that progress advances; a
//! blocking one waits for its step, sleeping as `FM_WAIT` says.
//!
//! Reductions combine in rank order on every member that keeps the
//! result (`v0 op (v1 op (… op v(n−1)))`), so non-commutative operations
//! are right and every member of an allreduce gets the very same bytes.

use super::op::Reduction;
use super::Elements;
use crate::abi::*;
use crate::engine::{err, Comm, Engine, MpiError, MpiResult};
use fm::coll::HostArea;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Members above which a communicator does not use an area: each step
/// reads every member's posted word, which costs more than a tree's
/// messages once there are many.
pub const MAX_MEMBERS: usize = 64;

/// Whether a communicator's collectives go through an area: not known
/// until its first collective that could.
#[derive(Clone, Default)]
pub enum AreaState {
    #[default]
    Unknown,
    /// Never (members on other hosts, too few or too many of them, an
    /// intercommunicator, no shared memory device).
    Never,
    Open(Arc<CommArea>),
}

/// A communicator's area and its steps at this member.
pub struct CommArea {
    area: HostArea,
    /// Steps made so far: the next one is this + 1.
    made: AtomicU64,
    /// The last step this member completed.
    done: AtomicU64,
}

impl CommArea {
    /// The area of `comm` (all its members on this host) with slots of
    /// `slot_bytes`: made by every member at the same collective, the
    /// first that goes through it.
    pub fn open(e: &Engine, comm: &Comm, slot_bytes: usize) -> MpiResult<CommArea> {
        let area = e
            .fm
            .host_area(&comm.ranks, u64::from(comm.context), slot_bytes)
            .map_err(|x| MpiError {
                class: MPI_ERR_NO_MEM,
                message: format!("the communicator's shared memory for collectives: {x} (FM_COLL_SHM_BYTES=0 sends them as messages instead)"),
            })?;
        Ok(CommArea {
            area,
            made: AtomicU64::new(0),
            done: AtomicU64::new(0),
        })
    }

    pub fn slot_bytes(&self) -> usize {
        self.area.slot_bytes()
    }
}

/// Whose posted step a member waits for.
#[derive(Clone, Copy, Debug)]
enum Need {
    Nobody,
    Member(usize),
    All,
}

/// What a waiting member looks at: `need`'s posted words reaching `step`
/// (looked at in a sleeping wait's re-check; `Engine::wait_for_arrival`).
#[derive(Clone)]
pub struct Watch {
    area: Arc<CommArea>,
    need: Need,
    step: u64,
}

impl Watch {
    pub fn ready(&self) -> bool {
        posted(&self.area.area, self.need, self.step)
    }
}

fn posted(a: &HostArea, need: Need, step: u64) -> bool {
    match need {
        Need::Nobody => true,
        Need::Member(m) => a.posted(m, step),
        Need::All => a.all_posted(step),
    }
}

/// Who writes and who reads in a step: a collective's shape.
#[derive(Clone, Copy, Debug)]
enum Shape {
    /// Nobody writes; everybody waits for everybody.
    Barrier,
    /// The root writes; the others read it.
    Bcast(usize),
    /// Everybody writes; the root reads everybody (`None`: everybody does).
    Gather(Option<usize>),
}

impl Shape {
    fn writes(self, me: usize) -> bool {
        match self {
            Shape::Barrier => false,
            Shape::Bcast(root) => root == me,
            Shape::Gather(_) => true,
        }
    }

    fn reads(self, me: usize) -> Need {
        match self {
            Shape::Barrier => Need::All,
            Shape::Bcast(root) if root == me => Need::Nobody,
            Shape::Bcast(root) => Need::Member(root),
            Shape::Gather(root) if root.is_none_or(|r| r == me) => Need::All,
            Shape::Gather(_) => Need::Nobody,
        }
    }
}

/// Whether a member may start (write and post) `step`, having completed
/// `done`: the step before must be done, and a member that writes must
/// find its cell of `step − 2` free (every member posted `step − 1`).
fn may_start(done: u64, step: u64, writes: bool, all_posted_before: impl FnOnce() -> bool) -> bool {
    done + 1 >= step && (!writes || all_posted_before())
}

/// One collective's step.
pub struct AreaOp {
    area: Arc<CommArea>,
    step: u64,
    posted: bool,
    kind: Kind,
}

// SAFETY: the elements are the caller's buffers, used only under the
// library's lock while the collective runs (as `Elements`).
unsafe impl Send for AreaOp {}

enum Kind {
    Barrier,
    Bcast {
        root: usize,
        data: Elements,
    },
    /// Reduce (`root`: the member that keeps the result) or allreduce
    /// (`None`: every member keeps it). `send` is `None` for
    /// `MPI_IN_PLACE`: the result's elements are the input.
    Reduce {
        root: Option<usize>,
        send: Option<Elements>,
        recv: Elements,
        reduction: Reduction,
    },
    /// Gather (`root`) or allgather (`None`): `recv` has a block per
    /// member (empty where this member keeps nothing); `send` is `None`
    /// for `MPI_IN_PLACE` (this member's block is already in `recv`).
    Gather {
        root: Option<usize>,
        send: Option<Elements>,
        recv: Vec<Elements>,
    },
}

impl AreaOp {
    fn new(area: &Arc<CommArea>, kind: Kind) -> AreaOp {
        let step = area.made.fetch_add(1, Ordering::Relaxed) + 1;
        AreaOp {
            area: area.clone(),
            step,
            posted: false,
            kind,
        }
    }

    pub fn barrier(area: &Arc<CommArea>) -> AreaOp {
        AreaOp::new(area, Kind::Barrier)
    }

    pub fn bcast(area: &Arc<CommArea>, data: Elements, root: usize) -> AreaOp {
        AreaOp::new(area, Kind::Bcast { root, data })
    }

    pub fn reduce(
        area: &Arc<CommArea>,
        send: Option<Elements>,
        recv: Elements,
        reduction: Reduction,
        root: Option<usize>,
    ) -> AreaOp {
        let kind = Kind::Reduce {
            root,
            send,
            recv,
            reduction,
        };
        AreaOp::new(area, kind)
    }

    pub fn gather(
        area: &Arc<CommArea>,
        send: Option<Elements>,
        recv: Vec<Elements>,
        root: Option<usize>,
    ) -> AreaOp {
        AreaOp::new(area, Kind::Gather { root, send, recv })
    }

    fn me(&self) -> usize {
        self.area.area.me()
    }

    fn shape(&self) -> Shape {
        match &self.kind {
            Kind::Barrier => Shape::Barrier,
            Kind::Bcast { root, .. } => Shape::Bcast(*root),
            Kind::Reduce { root, .. } | Kind::Gather { root, .. } => Shape::Gather(*root),
        }
    }

    /// Whether this member writes its slot in this step.
    fn writes(&self) -> bool {
        self.shape().writes(self.me())
    }

    /// Whose step this member reads once posted.
    fn reads(&self) -> Need {
        self.shape().reads(self.me())
    }

    /// What this step waits for now, if it waits for other members.
    pub fn watch(&self) -> Option<Watch> {
        let done = self.area.done.load(Ordering::Relaxed);
        let (need, step) = match self.posted {
            false if !may_start(done, self.step, false, || true) => return None,
            false if self.writes() => (Need::All, self.step - 1),
            false => return None,
            true => (self.reads(), self.step),
        };
        Some(Watch {
            area: self.area.clone(),
            need,
            step,
        })
    }

    /// Go as far as possible without waiting; whether the step is done.
    pub fn advance(&mut self, e: &mut Engine) -> MpiResult<bool> {
        let a = &self.area.area;
        if !self.posted {
            // This member's step before, then a free slot.
            let done = self.area.done.load(Ordering::Relaxed);
            if !may_start(done, self.step, self.writes(), || {
                a.all_posted(self.step - 1)
            }) {
                return Ok(false);
            }
            // SAFETY: the caller's buffers (MPI's rule).
            let wrote = match self.writes() {
                true => unsafe { self.write() },
                false => Ok(()),
            };
            // Posted even when the part did not fit (its length then
            // says so to the readers), so that nobody waits for ever.
            a.post(&e.fm, self.step);
            self.posted = true;
            if let Err(x) = wrote {
                self.area.done.store(self.step, Ordering::Relaxed);
                return Err(x);
            }
        }
        if !posted(a, self.reads(), self.step) {
            return Ok(false);
        }
        // Done with the step whatever reading finds: the next one goes on.
        // SAFETY: as above.
        let read = unsafe { self.read() };
        self.area.done.store(self.step, Ordering::Relaxed);
        read.map(|()| true)
    }

    /// This member's part of the step, into its slot (a member that
    /// [`AreaOp::writes`]).
    ///
    /// # Safety
    /// The elements are the caller's buffers.
    unsafe fn write(&self) -> MpiResult<()> {
        let mine = match &self.kind {
            Kind::Barrier => return Ok(()),
            Kind::Bcast { data, .. } => data,
            Kind::Reduce { send, recv, .. } => send.as_ref().unwrap_or(recv),
            Kind::Gather { send, recv, .. } => match send {
                Some(s) => s,
                None => &recv[self.me()],
            },
        };
        let (a, step, me) = (&self.area.area, self.step, self.me());
        let slot = a.slot(me, step);
        let len = mine.bytes();
        if len > a.slot_bytes() {
            // Callers choose the area by size; a member whose part does
            // not fit passed more than the others.
            a.slot_len(me, step).store(u64::MAX, Ordering::Relaxed);
            return err(
                MPI_ERR_COUNT,
                format!("{len} bytes where the members agreed on at most {}: do all members pass matching counts and types?", a.slot_bytes()),
            );
        }
        match mine.contiguous() {
            // SAFETY: the caller's elements are readable; the slot holds
            // `slot_bytes`.
            Some(at) => unsafe { std::ptr::copy_nonoverlapping(at, slot, len) },
            None if len > 0 => {
                // SAFETY: as above.
                let packed = unsafe { mine.pack() };
                unsafe { std::ptr::copy_nonoverlapping(packed.as_ptr(), slot, len) };
                super::pool::give(packed);
            }
            None => {}
        }
        a.slot_len(me, step).store(len as u64, Ordering::Relaxed);
        Ok(())
    }

    /// `member`'s part of the step, checked to be `want` bytes long.
    fn part(&self, member: usize, want: usize) -> MpiResult<&[u8]> {
        let a = &self.area.area;
        let len = a.slot_len(member, self.step).load(Ordering::Relaxed) as usize;
        if len != want {
            return err(
                MPI_ERR_TRUNCATE,
                format!("member {member} sent {len} bytes where {want} were expected: do all members pass matching counts and types (and the same root)?"),
            );
        }
        // SAFETY: the member posted the step, so its slot holds `len`
        // (≤ slot_bytes) bytes that nobody writes until every member
        // posted the next step, which this one does only after this read.
        Ok(unsafe { std::slice::from_raw_parts(a.slot(member, self.step), len) })
    }

    /// What this member keeps from the others' parts.
    ///
    /// # Safety
    /// The elements are the caller's buffers.
    unsafe fn read(&self) -> MpiResult<()> {
        let me = self.me();
        match &self.kind {
            Kind::Barrier => Ok(()),
            Kind::Bcast { root, data } => {
                if *root != me {
                    data.unpack(self.part(*root, data.bytes())?);
                }
                Ok(())
            }
            Kind::Reduce {
                root,
                recv,
                reduction,
                ..
            } => {
                if root.is_some_and(|r| r != me) {
                    return Ok(());
                }
                let n = self.area.area.ranks().len();
                let len = recv.bytes();
                let mut scratch = Vec::new();
                let acc: &mut [u8] = match recv.contiguous() {
                    // SAFETY: the caller's result elements, writable.
                    Some(at) => unsafe { std::slice::from_raw_parts_mut(at, len) },
                    None => {
                        scratch = super::pool::take(len);
                        scratch.resize(len, 0);
                        &mut scratch
                    }
                };
                acc.copy_from_slice(self.part(n - 1, len)?);
                for m in (0..n - 1).rev() {
                    reduction.combine(self.part(m, len)?, acc)?;
                }
                if recv.contiguous().is_none() {
                    recv.unpack(&scratch);
                    super::pool::give(scratch);
                }
                Ok(())
            }
            Kind::Gather { root, send, recv } => {
                if root.is_some_and(|r| r != me) {
                    return Ok(());
                }
                for (m, block) in recv.iter().enumerate() {
                    if m != me || send.is_some() {
                        block.unpack(self.part(m, block.bytes())?);
                    }
                }
                Ok(())
            }
        }
    }
}

/// An explicit-state check of the step protocol: members running the same
/// collectives' steps in every interleaving, over cells modelled as the
/// host area lays them out (two per member, by the step's parity), with
/// the production rules ([`Shape`], [`may_start`], [`posted`]'s "at
/// least"). Every read must find the writer's contribution to that very
/// step, and every state must let some member move until all are done.
#[cfg(test)]
mod model {
    use super::{may_start, Need, Shape};
    use std::collections::HashSet;

    /// Per member: the next op, whether it posted it, the last step done.
    /// Per member and parity: the step posted there, and the step whose
    /// data lies there.
    #[derive(Clone, PartialEq, Eq, Hash)]
    struct State {
        at: Vec<(usize, bool, u64)>,
        cells: Vec<[(u64, u64); 2]>,
    }

    fn ready(s: &State, need: Need, step: u64) -> bool {
        let posted = |m: usize| s.cells[m][(step & 1) as usize].0 >= step;
        match need {
            Need::Nobody => true,
            Need::Member(m) => posted(m),
            Need::All => (0..s.cells.len()).all(posted),
        }
    }

    /// Member `m`'s next move, if it can make one: the state after it.
    fn step(s: &State, ops: &[Shape], m: usize) -> Option<State> {
        let (i, posted_it, done) = s.at[m];
        let shape = *ops.get(i)?;
        let step = i as u64 + 1;
        let mut t = s.clone();
        let p = (step & 1) as usize;
        if !posted_it {
            let writes = shape.writes(m);
            let before = || ready(s, Need::All, step - 1);
            if !may_start(done, step, writes, before) {
                return None;
            }
            if writes {
                t.cells[m][p].1 = step;
            }
            t.cells[m][p].0 = step;
            t.at[m].1 = true;
            return Some(t);
        }
        let need = shape.reads(m);
        if !ready(s, need, step) {
            return None;
        }
        let readers: Vec<usize> = match need {
            Need::Nobody => vec![],
            Need::Member(r) => vec![r],
            Need::All => (0..s.cells.len()).filter(|&w| shape.writes(w)).collect(),
        };
        for w in readers {
            assert_eq!(
                s.cells[w][p].1, step,
                "member {m} read member {w}'s step {step} and found step {}'s data ({ops:?})",
                s.cells[w][p].1
            );
        }
        t.at[m] = (i + 1, false, step);
        Some(t)
    }

    fn explore(n: usize, ops: &[Shape]) -> usize {
        let start = State {
            at: vec![(0, false, 0); n],
            cells: vec![[(0, 0); 2]; n],
        };
        let mut seen = HashSet::new();
        let mut todo = vec![start];
        while let Some(s) = todo.pop() {
            if !seen.insert(s.clone()) {
                continue;
            }
            let next: Vec<State> = (0..n).filter_map(|m| step(&s, ops, m)).collect();
            let finished = s.at.iter().all(|&(i, _, _)| i == ops.len());
            assert!(finished || !next.is_empty(), "stuck: {ops:?}");
            todo.extend(next);
        }
        seen.len()
    }

    /// Every sequence of 4 steps of every shape on 2 and 3 members.
    #[test]
    fn every_read_finds_its_step_and_nothing_sticks() {
        for n in [2usize, 3] {
            let mut shapes = vec![Shape::Barrier, Shape::Gather(None)];
            for r in 0..n {
                shapes.push(Shape::Bcast(r));
                shapes.push(Shape::Gather(Some(r)));
            }
            let k = shapes.len();
            let mut states = 0;
            for code in 0..k.pow(4) {
                let ops: Vec<Shape> = (0..4).map(|d| shapes[code / k.pow(d) % k]).collect();
                states += explore(n, &ops);
            }
            assert!(states > 1000, "{states}");
        }
    }

    /// The check fails on the rule it guards: a writer that does not wait
    /// for its cell to be free overwrites a step still being read.
    #[test]
    #[should_panic(expected = "found step")]
    fn the_check_fails_without_the_free_cell_rule() {
        let ops = [Shape::Bcast(0), Shape::Bcast(0), Shape::Bcast(0)];
        // The same exploration, with `may_start` told every cell is free.
        let n = 2;
        let mut todo = vec![State {
            at: vec![(0, false, 0); n],
            cells: vec![[(0, 0); 2]; n],
        }];
        let mut seen = HashSet::new();
        while let Some(s) = todo.pop() {
            if !seen.insert(s.clone()) {
                continue;
            }
            for m in 0..n {
                let (i, posted_it, done) = s.at[m];
                if i < ops.len() && !posted_it && may_start(done, i as u64 + 1, true, || true) {
                    let mut t = s.clone();
                    let p = (i + 1) & 1;
                    if ops[i].writes(m) {
                        t.cells[m][p].1 = i as u64 + 1;
                    }
                    t.cells[m][p].0 = i as u64 + 1;
                    t.at[m].1 = true;
                    todo.push(t);
                } else if let Some(t) = step(&s, &ops, m) {
                    todo.push(t);
                }
            }
        }
    }
}
