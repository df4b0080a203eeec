//! Small collectives through the host's collective area: on a
//! communicator whose members all share this host, barrier, broadcast,
//! reduce, allreduce, gather, allgather, scatter and alltoall of up to
//! `FM_COLL_SHM_BYTES` per member move through shared memory ([`fm::coll::HostArea`]): each
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
pub use fm::coll::Watch;
use fm::coll::{AreaError, Collective, Region, Steps};
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
pub type CommArea = Steps;

/// The area of `comm` (all its members on this host) with slots of
/// `slot_bytes`: made by every member at the same collective, the first
/// that goes through it.
pub fn open(e: &Engine, comm: &Comm, slot_bytes: usize) -> MpiResult<CommArea> {
    let area = e
        .fm
        .host_area(&comm.ranks, u64::from(comm.context), slot_bytes)
        .map_err(|x| MpiError {
            class: MPI_ERR_NO_MEM,
            message: format!("the communicator's shared memory for collectives: {x} (FM_COLL_SHM_BYTES=0 sends them as messages instead)"),
        })?;
    Ok(Steps::new(area))
}

/// One collective through the communicator's area: fm's
/// ([`fm::coll::AreaOp`]) over the caller's elements where they are one
/// run of bytes, else over packed copies and scratch unpacked at the end.
pub struct AreaOp {
    op: fm::coll::AreaOp<Reduction>,
    regions: Regions,
}

/// The copies an op's regions point into, and what to unpack from them.
#[derive(Default)]
struct Regions {
    kept: Vec<Vec<u8>>,
    /// (index into `kept`, the elements it is unpacked into when done).
    unpack: Vec<(usize, Elements)>,
}

impl Regions {
    /// `e` as a region the op reads: where it lies, or packed.
    ///
    /// # Safety
    /// `e` is the caller's elements.
    unsafe fn input(&mut self, e: &Elements) -> Region {
        if let Some(at) = e.contiguous() {
            return Region {
                ptr: at,
                len: e.bytes(),
            };
        }
        // SAFETY: forwarded to the caller.
        let mut v = unsafe { e.pack() };
        let r = Region::of_mut(&mut v);
        self.kept.push(v);
        r
    }

    /// `e` as a region the op writes: where it lies, or scratch that is
    /// unpacked into it when the op is done.
    fn output(&mut self, e: &Elements) -> Region {
        if let Some(at) = e.contiguous() {
            return Region {
                ptr: at,
                len: e.bytes(),
            };
        }
        let mut v = super::pool::take(e.bytes());
        v.resize(e.bytes(), 0);
        let r = Region::of_mut(&mut v);
        self.unpack.push((self.kept.len(), e.clone()));
        self.kept.push(v);
        r
    }

    /// The op is done: its results into the caller's elements.
    fn deliver(&mut self) {
        for (i, e) in self.unpack.drain(..) {
            e.unpack(&self.kept[i]);
        }
        for v in self.kept.drain(..) {
            super::pool::give(v);
        }
    }
}

// SAFETY: the elements are the caller's buffers, used only under the
// library's lock while the collective runs (as `Elements`).
unsafe impl Send for AreaOp {}

impl AreaOp {
    /// # Safety
    /// The regions point into the caller's elements or `regions`' copies.
    unsafe fn new(area: &Arc<CommArea>, regions: Regions, what: Collective<Reduction>) -> AreaOp {
        AreaOp {
            // SAFETY: the caller's elements stay until the collective
            // completes (MPI's rule); the copies live in the op.
            op: unsafe { fm::coll::AreaOp::new(area, what) },
            regions,
        }
    }

    pub fn barrier(area: &Arc<CommArea>) -> AreaOp {
        // SAFETY: no regions.
        unsafe { AreaOp::new(area, Regions::default(), Collective::Barrier) }
    }

    /// # Safety
    /// The elements are the caller's buffers (MPI's rule), here and below.
    pub unsafe fn bcast(area: &Arc<CommArea>, data: &Elements, root: usize) -> AreaOp {
        let mut r = Regions::default();
        let data = match area.area().me() == root {
            // SAFETY: forwarded to the caller.
            true => unsafe { r.input(data) },
            false => r.output(data),
        };
        unsafe { AreaOp::new(area, r, Collective::Bcast { root, data }) }
    }

    /// Reduce to `root`, or allreduce (`None`); `send` is `None` for
    /// `MPI_IN_PLACE` (the result's elements are the input).
    ///
    /// # Safety
    /// As [`AreaOp::bcast`].
    pub unsafe fn reduce(
        area: &Arc<CommArea>,
        send: Option<&Elements>,
        recv: &Elements,
        reduction: Reduction,
        root: Option<usize>,
    ) -> AreaOp {
        let mut r = Regions::default();
        let keeps = root.is_none_or(|x| x == area.area().me());
        // SAFETY: forwarded to the caller.
        let input = unsafe { r.input(send.unwrap_or(recv)) };
        let result = match keeps {
            true => r.output(recv),
            false => Region::of_mut(&mut []),
        };
        let what = Collective::Reduce {
            root,
            input,
            result,
            reduction,
        };
        unsafe { AreaOp::new(area, r, what) }
    }

    /// Gather to `root`, or allgather (`None`): `recv` has a block per
    /// member where this member keeps them; `send` is `None` for
    /// `MPI_IN_PLACE` (this member's block is already in `recv`).
    ///
    /// # Safety
    /// As [`AreaOp::bcast`].
    pub unsafe fn gather(
        area: &Arc<CommArea>,
        send: Option<&Elements>,
        recv: &[Elements],
        root: Option<usize>,
    ) -> AreaOp {
        let mut r = Regions::default();
        let me = area.area().me();
        // SAFETY: forwarded to the caller.
        let mine = send.map(|s| unsafe { r.input(s) });
        // In place, this member's block is also its input.
        let all = (recv.iter().enumerate())
            .map(|(m, e)| match (m == me && mine.is_none(), e.contiguous()) {
                (true, None) => unsafe { r.input(e) },
                _ => r.output(e),
            })
            .collect();
        unsafe { AreaOp::new(area, r, Collective::Gather { root, mine, all }) }
    }

    /// The root's blocks `send` (empty elsewhere), one to each member's
    /// `recv` (`None` for `MPI_IN_PLACE` at the root).
    ///
    /// # Safety
    /// As [`AreaOp::bcast`].
    pub unsafe fn scatter(
        area: &Arc<CommArea>,
        send: &[Elements],
        recv: Option<&Elements>,
        root: usize,
    ) -> AreaOp {
        let mut r = Regions::default();
        // SAFETY: forwarded to the caller.
        let all = send.iter().map(|e| unsafe { r.input(e) }).collect();
        let mine = recv.map(|e| r.output(e));
        unsafe { AreaOp::new(area, r, Collective::Scatter { root, all, mine }) }
    }

    /// # Safety
    /// As [`AreaOp::bcast`].
    pub unsafe fn alltoall(area: &Arc<CommArea>, send: &[Elements], recv: &[Elements]) -> AreaOp {
        let mut r = Regions::default();
        // SAFETY: forwarded to the caller.
        let send = send.iter().map(|e| unsafe { r.input(e) }).collect();
        let recv = recv.iter().map(|e| r.output(e)).collect();
        unsafe { AreaOp::new(area, r, Collective::Alltoall { send, recv }) }
    }

    /// What this step waits for now, if it waits for other members.
    pub fn watch(&self) -> Option<Watch> {
        self.op.watch()
    }

    /// Go as far as possible without waiting; whether it is done.
    pub fn advance(&mut self, e: &mut Engine) -> MpiResult<bool> {
        match self.op.advance(&e.fm) {
            Ok(false) => Ok(false),
            Ok(true) => {
                self.regions.deliver();
                Ok(true)
            }
            Err(AreaError::Combine(x)) => Err(x),
            Err(AreaError::TooLong { len, room }) => err(
                MPI_ERR_COUNT,
                format!("{len} bytes where the members agreed on at most {room}: do all members pass matching counts and types?"),
            ),
            Err(AreaError::Mismatch { member, got, want }) => err(
                MPI_ERR_TRUNCATE,
                format!(
                    "member {member} sent {} where {want} bytes were expected: do all members pass matching counts and types (and the same root)?",
                    got.map_or("more".to_string(), |g| format!("{g} bytes"))
                ),
            ),
        }
    }
}
