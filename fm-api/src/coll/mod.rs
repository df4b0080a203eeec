//! # Collectives for FM programs
//!
//! A [`Group`] is a set of ranks that run collectives together: the whole
//! job ([`crate::Fm::world`]) or some of its ranks ([`crate::Fm::group`]).
//! Each collective is written once, in fm-coll, and shared with fm's MPI
//! library: the classic algorithms chosen by size (`FM_COLL_*`,
//! docs/CONFIG.md), in two levels when a group spans hosts and has more
//! than one member on some (each host's members combine over shared
//! memory first and one leader per host sends on the network). Here they
//! run over FM messages to a reserved handler, so they mix freely with
//! the program's own messages and handlers.
//!
//! Every member of a group calls the same collectives in the same order,
//! with the same root and matching lengths (a member whose lengths do
//! not match gets [`crate::ErrorKind::CollectiveMismatch`]). Each blocking
//! call has a non-blocking form (`i…`) that returns a [`Pending`]: the
//! collective advances when the program calls [`Pending::test`] or
//! [`Pending::wait`] (or another collective's), and holds on to its
//! buffers until then. A blocking collective runs the program's handlers
//! while it waits. A handler's error does not stop a collective that
//! moves data: it completes, then the first such error is returned. A
//! barrier returns a handler's error at once, left as it was: calling
//! [`Group::barrier`] again completes the same barrier (what
//! `Fm::barrier` has always done).
//!
//! ```
//! use fm::coll::Op;
//! let mut fm = fm::Fm::init()?;
//! let mut world = fm.world()?;
//! // The sum of every rank's number, on every rank.
//! let mut v = [u64::from(fm.rank()) + 1];
//! world.allreduce(&mut fm, &mut v, Op::Sum)?;
//! let n = fm.size() as u64;
//! assert_eq!(v[0], n * (n + 1) / 2);
//! // Rank 0's vector, everywhere.
//! let mut data = vec![0u32; 1000];
//! if fm.rank() == 0 {
//!     data.iter_mut().enumerate().for_each(|(i, x)| *x = i as u32);
//! }
//! world.broadcast(&mut fm, 0, &mut data)?;
//! assert_eq!(data[999], 999);
//! # Ok::<(), fm::FmError>(())
//! ```

mod area;
mod channel;
mod mailbox;
mod tuning;

pub use area::HostArea;
pub use fm_coll::choose::Rules;
pub use fm_coll::op::{Bitwise, Element, Op};
pub(crate) use mailbox::{intake, Mailbox, COLLECTIVE};
pub use tuning::{HostAware, Tuning};

use crate::{Endpoint, ErrorKind, FmError, Rank, Result};
use channel::FmChannel;
use fm_coll::hosts::{self, Hosts};
use fm_coll::op::bytes_of;
use fm_coll::{algorithms, Combine, Span};
use std::collections::HashMap;
use std::convert::Infallible;
use std::marker::PhantomData;
use std::sync::Arc;

type Reduction = Box<dyn Combine<Error = Infallible> + Send>;
type Plan = fm_coll::Plan<Reduction>;
type Schedule = fm_coll::Schedule<Reduction, FmChannel>;

impl From<Infallible> for FmError {
    fn from(e: Infallible) -> FmError {
        match e {}
    }
}

/// What the groups of one process share: the tuning, and how many groups
/// of each member list it has made (so that two groups of the same ranks
/// are told apart, all members making their groups in one order).
pub(crate) struct Groups {
    tuning: Tuning,
    made: HashMap<Vec<Rank>, u32>,
}

impl Groups {
    /// The tuning from the environment, for the hosts of `ep`'s job.
    pub(crate) fn new(ep: &Endpoint) -> Result<Groups> {
        let dev = ep.composite();
        let hosts: Vec<&str> = (0..ep.size() as Rank)
            .map(|r| dev.host_of(r).unwrap_or(""))
            .collect();
        Ok(Groups {
            tuning: Tuning::from_env(&hosts)?,
            made: HashMap::new(),
        })
    }

    /// The ID the next group of `members` will have.
    pub(crate) fn next_id(&self, members: &[Rank]) -> u64 {
        group_id(members, self.made.get(members).copied().unwrap_or(0))
    }

    /// The group of `members` (job ranks, in the group's order), of
    /// which `me` is one.
    pub(crate) fn group(&mut self, me: Rank, size: usize, members: &[Rank]) -> Result<Group> {
        let bad = |why: String| -> FmError { ErrorKind::Group(why).into() };
        if let Some(&r) = members.iter().find(|&&r| r as usize >= size) {
            return Err(bad(format!("rank {r} is outside this job of {size} ranks")));
        }
        let mut sorted = members.to_vec();
        sorted.sort_unstable();
        if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
            return Err(bad(format!("rank {} is named twice", w[0])));
        }
        let Some(at) = members.iter().position(|&r| r == me) else {
            return Err(bad(format!(
                "rank {me} is not one of its members {members:?}: only members make a group"
            )));
        };
        let nth = self.made.entry(members.to_vec()).or_insert(0);
        let id = group_id(members, *nth);
        *nth += 1;
        let t = &self.tuning;
        let members: Arc<[Rank]> = members.into();
        let hosts = (t.host_aware && t.several_hosts)
            .then(|| Arc::new(Hosts::of(&members, &t.job_hosts)))
            .filter(|h| h.worth_it());
        Ok(Group {
            id,
            members,
            me: at,
            next: 0,
            hosts,
            rules: t.rules,
            unfinished_barrier: None,
        })
    }
}

/// A group's ID: FNV-1a of its members and its number among the groups
/// of those members, the same on every member.
fn group_id(members: &[Rank], nth: u32) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let words = std::iter::once(nth).chain(members.iter().copied());
    for b in words.flat_map(u32::to_le_bytes) {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// Ranks that run collectives together; see the [module](self) docs.
pub struct Group {
    id: u64,
    members: Arc<[Rank]>,
    me: usize,
    /// The number of the next collective.
    next: u32,
    /// The members' hosts, where collectives go in two levels.
    hosts: Option<Arc<Hosts>>,
    rules: Rules,
    /// A barrier a handler's error interrupted, for the next `barrier`.
    unfinished_barrier: Option<Pending<'static>>,
}

/// A non-blocking collective under way, holding its buffers (`'a`).
/// Dropped before it completes, it gives up this member's part: the
/// other members' collective cannot complete either, and what arrives
/// for it stays in the endpoint's mailbox.
#[must_use = "a collective advances only when tested or waited for"]
pub struct Pending<'a> {
    schedule: Schedule,
    done: bool,
    _buffers: PhantomData<&'a mut [u8]>,
}

impl Pending<'_> {
    /// Advance it without waiting: `true` once complete.
    pub fn test(&mut self, ep: &mut Endpoint) -> Result<bool> {
        if !self.done {
            ep.extract(usize::MAX)?;
            self.advance(ep)?;
        }
        Ok(self.done)
    }

    /// One advance of the schedule; once complete, the mailbox forgets
    /// the collective.
    fn advance(&mut self, ep: &mut Endpoint) -> Result<()> {
        self.done = self.schedule.advance(ep)?;
        if self.done {
            let c = self.schedule.channel();
            ep.coll_mailbox.forget(c.group, c.seq);
        }
        Ok(())
    }

    /// Wait until it completes, running handlers meanwhile. A handler's
    /// error is returned with the collective left as it was: waiting
    /// again goes on with it.
    pub fn wait(&mut self, ep: &mut Endpoint) -> Result<()> {
        while !self.done {
            self.advance(ep)?;
            if !self.done {
                ep.extract_wait(usize::MAX)?;
            }
        }
        Ok(())
    }

    /// [`Pending::wait`], on through handlers' errors: the first is
    /// returned once the collective is complete; fm's own errors (the
    /// job ended, a wait timed out, the members disagree) end it at once.
    fn finish(mut self, ep: &mut Endpoint) -> Result<()> {
        let mut first: Option<FmError> = None;
        loop {
            match self.wait(ep) {
                Ok(()) => return first.map_or(Ok(()), Err),
                Err(e) if e.is_handlers() => {
                    first.get_or_insert(e);
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// The bytes of `v` as a span of the plan, read and written in place.
fn program<T: Element>(p: &mut Plan, v: &mut [T]) -> Span {
    let b = fm_coll::op::bytes_of_mut(v);
    // SAFETY: the slice is borrowed by the `Pending` for as long as the
    // schedule runs, and no other span of the plan overlaps it.
    unsafe { p.program(b.as_mut_ptr(), b.len()) }
}

/// The bytes of `v` as a span the plan only reads (sends, copies from).
fn program_read<T: Element>(p: &mut Plan, v: &[T]) -> Span {
    let b = bytes_of(v);
    // SAFETY: as `program`; the plan's steps only read a span that is
    // sent or copied from.
    unsafe { p.program(b.as_ptr().cast_mut(), b.len()) }
}

/// `len` bytes cut into `n` blocks one after another.
fn blocks(all: Span, n: usize) -> Vec<Span> {
    let each = all.len / n.max(1);
    (0..n).map(|i| all.part(i * each, each)).collect()
}

impl Group {
    /// Its members (job ranks), in its order.
    /// The group's ID, the same on every member.
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    pub fn members(&self) -> &[Rank] {
        &self.members
    }

    /// This rank's place among the members.
    pub fn me(&self) -> usize {
        self.me
    }

    pub fn size(&self) -> usize {
        self.members.len()
    }

    fn plan(&self) -> Plan {
        Plan::new(self.members.len(), self.me)
    }

    fn root(&self, root: usize) -> Result<usize> {
        match root < self.size() {
            true => Ok(root),
            false => Err(ErrorKind::Group(format!(
                "root {root} is not a member of this group of {}",
                self.size()
            ))
            .into()),
        }
    }

    fn start<'a>(&mut self, ep: &mut Endpoint, plan: Plan) -> Result<Pending<'a>> {
        let seq = self.next;
        self.next = self.next.wrapping_add(1);
        let schedule = plan.schedule(FmChannel {
            group: self.id,
            seq,
            members: self.members.clone(),
            sent: Default::default(),
            alive: Arc::new(std::sync::Mutex::new(true)),
        });
        let mut p = Pending {
            schedule,
            done: false,
            _buffers: PhantomData,
        };
        p.advance(ep)?;
        Ok(p)
    }

    /// Start a barrier.
    pub fn ibarrier<'a>(&mut self, ep: &mut Endpoint) -> Result<Pending<'a>> {
        let mut p = self.plan();
        match &self.hosts {
            Some(h) => hosts::barrier(&mut p, h),
            None => algorithms::barrier(&mut p),
        }
        self.start(ep, p)
    }

    /// Wait until every member has entered the barrier. A handler's error
    /// during the wait is returned with the barrier left as it was:
    /// calling `barrier` again completes the same barrier.
    pub fn barrier(&mut self, ep: &mut Endpoint) -> Result<()> {
        let mut p = match self.unfinished_barrier.take() {
            Some(p) => p,
            None => self.ibarrier(ep)?,
        };
        let r = p.wait(ep);
        if r.is_err() {
            self.unfinished_barrier = Some(p);
        }
        r
    }

    /// Start a broadcast of `root`'s `data` into every member's `data`.
    pub fn ibroadcast<'a, T: Element>(
        &mut self,
        ep: &mut Endpoint,
        root: usize,
        data: &'a mut [T],
    ) -> Result<Pending<'a>> {
        let root = self.root(root)?;
        let mut p = self.plan();
        let span = program(&mut p, data);
        let (rules, unit) = (self.rules, std::mem::size_of::<T>());
        match &self.hosts {
            Some(h) => hosts::bcast(&mut p, h, root, span, |p, root, span| {
                rules.bcast(p, root, span, unit);
            }),
            None => rules.bcast(&mut p, root, span, unit),
        }
        self.start(ep, p)
    }

    /// Broadcast `root`'s `data` into every member's `data`.
    pub fn broadcast<T: Element>(
        &mut self,
        ep: &mut Endpoint,
        root: usize,
        data: &mut [T],
    ) -> Result<()> {
        self.ibroadcast(ep, root, data)?.finish(ep)
    }

    /// The reduction, its commutativity, checked against `T`.
    fn reduction<T: Element>(p: &mut Plan, op: Op<T>) -> Result<bool> {
        let c = op.checked().map_err(|e| ErrorKind::Group(e.to_string()))?;
        let commutative = c.commutative();
        p.reducing(Box::new(c));
        Ok(commutative)
    }

    /// Start a reduction of every member's `data` by `op` into `root`'s
    /// `data` (the others' are left as they were).
    pub fn ireduce<'a, T: Element>(
        &mut self,
        ep: &mut Endpoint,
        root: usize,
        data: &'a mut [T],
        op: Op<T>,
    ) -> Result<Pending<'a>> {
        let root = self.root(root)?;
        let mut p = self.plan();
        let commutative = Self::reduction(&mut p, op)?;
        // The root reduces in place; the others' data is only read.
        let (input, acc) = match p.me == root {
            true => {
                let acc = program(&mut p, data);
                (acc, Some(acc))
            }
            false => (program_read(&mut p, data), None),
        };
        match self.hosts.as_ref().filter(|_| commutative) {
            Some(h) => hosts::reduce(&mut p, h, root, input, acc),
            None => algorithms::reduce_binomial(&mut p, root, input, acc, commutative),
        }
        self.start(ep, p)
    }

    /// Reduce every member's `data` by `op` into `root`'s `data` (the
    /// others' are left as they were). An operation that does not commute
    /// combines in member order: member 0's value first.
    pub fn reduce<T: Element>(
        &mut self,
        ep: &mut Endpoint,
        root: usize,
        data: &mut [T],
        op: Op<T>,
    ) -> Result<()> {
        self.ireduce(ep, root, data, op)?.finish(ep)
    }

    /// Start a reduction of every member's `data` by `op` into every
    /// member's `data`.
    pub fn iallreduce<'a, T: Element>(
        &mut self,
        ep: &mut Endpoint,
        data: &'a mut [T],
        op: Op<T>,
    ) -> Result<Pending<'a>> {
        let mut p = self.plan();
        let commutative = Self::reduction(&mut p, op)?;
        let acc = program(&mut p, data);
        let (rules, unit) = (self.rules, std::mem::size_of::<T>());
        let flat = |p: &mut Plan, acc: Span| rules.allreduce(p, acc, acc, unit, commutative);
        match self.hosts.as_ref().filter(|_| commutative) {
            Some(h) => hosts::allreduce(&mut p, h, acc, flat),
            None => flat(&mut p, acc),
        }
        self.start(ep, p)
    }

    /// Reduce every member's `data` by `op` into every member's `data`.
    pub fn allreduce<T: Element>(
        &mut self,
        ep: &mut Endpoint,
        data: &mut [T],
        op: Op<T>,
    ) -> Result<()> {
        self.iallreduce(ep, data, op)?.finish(ep)
    }

    /// `all`'s length checked: `n` blocks of `block` elements.
    fn whole<T>(&self, all: &[T], block: usize, what: &str) -> Result<()> {
        let want = block * self.size();
        match all.len() == want {
            true => Ok(()),
            false => Err(ErrorKind::Group(format!(
                "{what} holds {} elements where {want} ({} members × {block}) are needed",
                all.len(),
                self.size()
            ))
            .into()),
        }
    }

    /// Start gathering every member's `mine` into `root`'s `all`, member
    /// i's at block i (`all` matters at the root only).
    pub fn igather<'a, T: Element>(
        &mut self,
        ep: &mut Endpoint,
        root: usize,
        mine: &'a [T],
        all: &'a mut [T],
    ) -> Result<Pending<'a>> {
        let root = self.root(root)?;
        let mut p = self.plan();
        let m = program_read(&mut p, mine);
        let b = match p.me == root {
            true => {
                self.whole(all, mine.len(), "the gather's result")?;
                blocks(program(&mut p, all), p.n)
            }
            false => Vec::new(),
        };
        algorithms::gather_linear(&mut p, root, Some(m), &b);
        self.start(ep, p)
    }

    /// Gather every member's `mine` into `root`'s `all`, member i's at
    /// block i (`all` matters at the root only).
    pub fn gather<T: Element>(
        &mut self,
        ep: &mut Endpoint,
        root: usize,
        mine: &[T],
        all: &mut [T],
    ) -> Result<()> {
        self.igather(ep, root, mine, all)?.finish(ep)
    }

    /// Start scattering `root`'s `all`, block i to member i's `mine`
    /// (`all` matters at the root only).
    pub fn iscatter<'a, T: Element>(
        &mut self,
        ep: &mut Endpoint,
        root: usize,
        all: &'a [T],
        mine: &'a mut [T],
    ) -> Result<Pending<'a>> {
        let root = self.root(root)?;
        let mut p = self.plan();
        let b = match p.me == root {
            true => {
                self.whole(all, mine.len(), "the scatter's input")?;
                blocks(program_read(&mut p, all), p.n)
            }
            false => Vec::new(),
        };
        let m = program(&mut p, mine);
        algorithms::scatter_linear(&mut p, root, &b, Some(m));
        self.start(ep, p)
    }

    /// Scatter `root`'s `all`, block i to member i's `mine` (`all`
    /// matters at the root only).
    pub fn scatter<T: Element>(
        &mut self,
        ep: &mut Endpoint,
        root: usize,
        all: &[T],
        mine: &mut [T],
    ) -> Result<()> {
        self.iscatter(ep, root, all, mine)?.finish(ep)
    }

    /// Start gathering every member's `mine` into every member's `all`,
    /// member i's at block i.
    pub fn iallgather<'a, T: Element>(
        &mut self,
        ep: &mut Endpoint,
        mine: &'a [T],
        all: &'a mut [T],
    ) -> Result<Pending<'a>> {
        self.whole(all, mine.len(), "the allgather's result")?;
        let mut p = self.plan();
        let m = program_read(&mut p, mine);
        let b = blocks(program(&mut p, all), p.n);
        p.copy(m, b[p.me]);
        self.rules.allgather(&mut p, &b);
        self.start(ep, p)
    }

    /// Gather every member's `mine` into every member's `all`, member i's
    /// at block i.
    pub fn allgather<T: Element>(
        &mut self,
        ep: &mut Endpoint,
        mine: &[T],
        all: &mut [T],
    ) -> Result<()> {
        self.iallgather(ep, mine, all)?.finish(ep)
    }

    /// Start an all-to-all: block j of member i's `send` goes to block i
    /// of member j's `recv`.
    pub fn ialltoall<'a, T: Element>(
        &mut self,
        ep: &mut Endpoint,
        send: &'a [T],
        recv: &'a mut [T],
    ) -> Result<Pending<'a>> {
        if send.len() != recv.len() || !send.len().is_multiple_of(self.size()) {
            return Err(ErrorKind::Group(format!(
                "an all-to-all sends and receives one block per member: {} and {} elements for {} members",
                send.len(),
                recv.len(),
                self.size()
            ))
            .into());
        }
        let mut p = self.plan();
        let s = blocks(program_read(&mut p, send), p.n);
        let r = blocks(program(&mut p, recv), p.n);
        algorithms::alltoall_pairwise(&mut p, &s, &r);
        self.start(ep, p)
    }

    /// All-to-all: block j of member i's `send` goes to block i of
    /// member j's `recv`.
    pub fn alltoall<T: Element>(
        &mut self,
        ep: &mut Endpoint,
        send: &[T],
        recv: &mut [T],
    ) -> Result<()> {
        self.ialltoall(ep, send, recv)?.finish(ep)
    }
}
