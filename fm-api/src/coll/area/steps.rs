//! The step protocol over a host's area ([`super::HostArea`]): who
//! writes and who reads in each shape of step, when a member may start a
//! step, and one group's steps at one member. The module above says why
//! the rules hold; the explicit-state check below runs them.

use super::HostArea;
use crate::Endpoint;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Whose posted step a member waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    Nobody,
    Member(usize),
    All,
}

/// Who writes and who reads in a step: a collective's shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// Nobody writes; everybody waits for everybody.
    Barrier,
    /// The root writes; the others read it (a broadcast, a scatter).
    Bcast(usize),
    /// Everybody writes; the root reads everybody, or everybody does
    /// (`None`: an allgather, an allreduce, an alltoall).
    Gather(Option<usize>),
}

impl Shape {
    /// Whether member `me` writes its cell in a step of this shape.
    pub fn writes(self, me: usize) -> bool {
        match self {
            Shape::Barrier => false,
            Shape::Bcast(root) => root == me,
            Shape::Gather(_) => true,
        }
    }

    /// Whose step member `me` waits for, to read (or, in a barrier, to
    /// know they arrived).
    pub fn reads(self, me: usize) -> Need {
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

fn posted(a: &HostArea, need: Need, step: u64) -> bool {
    match need {
        Need::Nobody => true,
        Need::Member(m) => a.posted(m, step),
        Need::All => a.all_posted(step),
    }
}

/// A group's area and this member's steps through it: the steps made
/// so far and the last one completed. Steps are made in the order the
/// group's collectives are called, which every member shares; this
/// member runs them one after the other.
pub struct Steps {
    area: HostArea,
    made: AtomicU64,
    done: AtomicU64,
}

impl Steps {
    pub fn new(area: HostArea) -> Steps {
        Steps {
            area,
            made: AtomicU64::new(0),
            done: AtomicU64::new(0),
        }
    }

    pub fn area(&self) -> &HostArea {
        &self.area
    }
}

/// One collective's step at this member: start it (write this member's
/// part, if it has one, and post), wait until what it reads is posted,
/// read, finish. [`Step::watch`] says what a wait should look at.
pub struct Step {
    steps: Arc<Steps>,
    step: u64,
    shape: Shape,
    posted: bool,
}

impl Step {
    /// The group's next step, of `shape`.
    pub fn next(steps: &Arc<Steps>, shape: Shape) -> Step {
        Step {
            steps: steps.clone(),
            step: steps.made.fetch_add(1, Ordering::Relaxed) + 1,
            shape,
            posted: false,
        }
    }

    pub fn area(&self) -> &HostArea {
        &self.steps.area
    }

    /// Whether this member writes its part in this step.
    pub fn writes(&self) -> bool {
        self.shape.writes(self.area().me())
    }

    pub fn posted(&self) -> bool {
        self.posted
    }

    fn done(&self) -> u64 {
        self.steps.done.load(Ordering::Relaxed)
    }

    /// Whether this member may start the step now: it finished the one
    /// before, and, if it writes, its cell is free.
    pub fn may_start(&self) -> bool {
        let a = self.area();
        may_start(self.done(), self.step, self.writes(), || {
            a.all_posted(self.step - 1)
        })
    }

    /// Where this member writes its part ([`HostArea::slot_bytes`]), once
    /// it may start and before it posts.
    pub fn slot(&self) -> *mut u8 {
        self.area().slot(self.area().me(), self.step)
    }

    /// Post the step: this member wrote `len` bytes into its slot (`None`:
    /// what it meant to write did not fit, which its readers are told).
    pub fn post(&mut self, ep: &Endpoint, len: Option<usize>) {
        let a = self.area();
        if self.writes() {
            let len = len.map_or(u64::MAX, |l| l as u64);
            a.slot_len(a.me(), self.step).store(len, Ordering::Relaxed);
        }
        a.post(ep, self.step);
        self.posted = true;
    }

    /// Whether everything this member reads in the step is posted.
    pub fn ready(&self) -> bool {
        posted(self.area(), self.shape.reads(self.area().me()), self.step)
    }

    /// `member`'s part of the step, once [`Step::ready`] (or this member's
    /// own, once posted): `None` if it did not fit.
    pub fn part(&self, member: usize) -> Option<&[u8]> {
        let a = self.area();
        let len = a.slot_len(member, self.step).load(Ordering::Relaxed);
        let len = usize::try_from(len).ok().filter(|&l| l <= a.slot_bytes())?;
        // SAFETY: the member posted the step, so its slot holds `len`
        // bytes that nobody writes until every member posted the next
        // step, which this one does only after it finished this one.
        Some(unsafe { std::slice::from_raw_parts(a.slot(member, self.step), len) })
    }

    /// This member is done with the step (read what it reads): the next
    /// may start.
    pub fn finish(&mut self) {
        self.steps.done.store(self.step, Ordering::Relaxed);
    }

    /// What the step waits for now, if it waits for other members.
    pub fn watch(&self) -> Option<Watch> {
        let (need, step) = match self.posted {
            false if self.done() + 1 < self.step => return None,
            false if self.writes() => (Need::All, self.step - 1),
            false => return None,
            true => (self.shape.reads(self.area().me()), self.step),
        };
        Some(Watch {
            steps: self.steps.clone(),
            need,
            step,
        })
    }
}

/// What a waiting member looks at: `need`'s cells reaching `step` (in a
/// sleeping wait's re-check, [`Endpoint::extract_wait_while`]).
#[derive(Clone)]
pub struct Watch {
    steps: Arc<Steps>,
    need: Need,
    step: u64,
}

impl Watch {
    pub fn ready(&self) -> bool {
        posted(&self.steps.area, self.need, self.step)
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
