//! What the collective bindings share: their arguments checked, and a
//! collective run (blocking) or started (non-blocking) on a communicator.

use crate::coll::area::{self, AreaOp, AreaState, CommArea};
use crate::coll::op::{Reduction, UserOp};
use crate::coll::schedule::schedule;
use crate::coll::{Elements, Plan};
use crate::*;

/// How a collective call runs: at once (`MPI_X`), started with a request
/// (`MPI_Ix`), or made a persistent request (`MPI_X_init`).
#[derive(Clone, Copy)]
pub(crate) enum Mode {
    Blocking,
    Start(*mut Handle),
    Persistent(*mut Handle),
}

/// What writes one member's plan of a collective from its arguments,
/// again at each start of a persistent one.
pub(crate) type Build = Box<dyn FnMut(&Comm) -> MpiResult<Plan> + Send>;

/// A persistent collective's messages go on its communicator's context
/// with its slot in bits 12-27 (ids are below 4096), so that its starts,
/// numbered from 0 as their tags, meet no other collective's.
fn persistent_context(context: u32, slot: u32) -> u32 {
    context | ((slot % 0xffff + 1) << 12)
}

impl Mpi {
    /// `count` elements of `datatype` at `buf`, checked: a committed
    /// type, a count and buffer that make sense.
    pub(crate) fn elements_at(
        &self,
        buf: *const c_void,
        count: impl Into<i64>,
        datatype: Handle,
    ) -> MpiResult<Elements> {
        let count = nonneg(count, "count")?;
        let layout = self.layout(datatype)?;
        if !layout.committed {
            return err(
                MPI_ERR_TYPE,
                format!("datatype {datatype:#x} is not committed (MPI_Type_commit)"),
            );
        }
        check_buffer(buf, data_bytes(count, &layout)?, datatype)?;
        Ok(Elements {
            buf: buf as *mut u8,
            count,
            layout,
        })
    }

    /// The host's collective area of `comm`, where a collective of
    /// `bytes` per member called as `mode` goes through it
    /// ([`coll::area`]): made at the first such collective, by every
    /// member at once. The choice depends only on what every member
    /// passes alike (MPI's rules), so all members make the same.
    /// Persistent collectives always go by messages.
    pub(crate) fn area_for(
        &mut self,
        comm: Handle,
        bytes: usize,
        mode: Mode,
    ) -> MpiResult<Option<Arc<CommArea>>> {
        let limit = self.engine.coll_shm_bytes;
        if limit == 0 || bytes > limit || matches!(mode, Mode::Persistent(_)) {
            return Ok(None);
        }
        let c = self.comm(comm)?;
        match &c.area {
            AreaState::Open(a) => return Ok(Some(a.clone())),
            AreaState::Never => return Ok(None),
            AreaState::Unknown => {}
        }
        let dev = self.engine.fm.composite();
        let here = dev.host_of(dev.rank());
        let possible = c.remote.is_none()
            && (2..=area::MAX_MEMBERS).contains(&c.ranks.len())
            && dev.shmem().is_some()
            && c.ranks.iter().all(|&r| dev.host_of(r) == here);
        let state = match possible {
            true => AreaState::Open(Arc::new(CommArea::open(&self.engine, c, limit)?)),
            false => AreaState::Never,
        };
        let open = match &state {
            AreaState::Open(a) => Some(a.clone()),
            _ => None,
        };
        self.comm_mut(comm)?.area = state;
        Ok(open)
    }

    /// Run (blocking) or start (non-blocking) collective step `op`.
    pub(crate) fn area_collective(&mut self, mode: Mode, op: AreaOp) -> MpiResult<()> {
        match mode {
            Mode::Blocking => self.engine.run(op),
            Mode::Start(r) | Mode::Persistent(r) => {
                // SAFETY: the caller's request handle (MPI's rule).
                let out = unsafe { arg(r, "the request")? };
                *out = request_handle(self.engine.start_collective(op)?);
                Ok(())
            }
        }
    }

    /// The caller's operation made by `MPI_Op_create`, if `op` is one.
    pub(crate) fn user_op(&self, op: Handle) -> MpiResult<Option<UserOp>> {
        if op & !HANDLE_INDEX != OP_DIRECT {
            return Ok(None);
        }
        match self.ops.get((op & HANDLE_INDEX) as usize) {
            Some(Some(u)) => Ok(Some(*u)),
            _ => err(MPI_ERR_OP, format!("{op:#x} is not an operation")),
        }
    }

    /// Operation `op` on elements of `datatype`, checked.
    pub(crate) fn reduction(&self, op: Handle, datatype: Handle) -> MpiResult<Reduction> {
        Reduction::new(op, self.user_op(op)?, datatype, self.layout(datatype)?)
    }

    /// Run a collective on `comm` as `mode` says. `build` checks the
    /// arguments and writes this member's plan; only then is the
    /// collective counted on `comm`.
    pub(crate) fn collective(
        &mut self,
        comm: Handle,
        mode: Mode,
        mut build: impl FnMut(&Comm) -> MpiResult<Plan> + Send + 'static,
    ) -> MpiResult<()> {
        let out = match mode {
            Mode::Blocking => None,
            // SAFETY: the caller's request handle (MPI's rule).
            Mode::Start(r) | Mode::Persistent(r) => Some(unsafe { arg(r, "the request")? }),
        };
        // The builder refuses an intercommunicator where the collective
        // has no intercommunicator form (the bindings choose the form).
        let plan = build(self.comm(comm)?)?;
        let c = self.comm_mut(comm)?;
        let number = c.collectives;
        c.collectives = c.collectives.wrapping_add(1);
        let (context, ranks) = (c.context, members(c));
        match (mode, out) {
            (Mode::Persistent(_), Some(out)) => {
                let p = Persistent {
                    op: Started::Collective {
                        build: Box::new(build),
                        slot: number,
                        starts: 0,
                    },
                    comm,
                    active: None,
                };
                *out = self.add_persistent(p)?;
                Ok(())
            }
            (_, Some(out)) => {
                let s = schedule(plan, context, number as c_int, ranks);
                *out = request_handle(self.engine.start_collective(s)?);
                Ok(())
            }
            (_, None) => self
                .engine
                .run(schedule(plan, context, number as c_int, ranks)),
        }
    }

    /// `MPI_Start` of persistent collective `h`: its plan written again
    /// from its arguments, started; the engine's request.
    pub(crate) fn start_persistent_collective(&mut self, h: Handle) -> MpiResult<u32> {
        let Some(Some(p)) = self.persistent.get_mut((h & HANDLE_INDEX) as usize) else {
            return err(
                MPI_ERR_REQUEST,
                format!("{h:#x} is not a persistent request"),
            );
        };
        let comm = p.comm;
        let Started::Collective {
            build,
            slot,
            starts,
        } = &mut p.op
        else {
            return err(
                MPI_ERR_REQUEST,
                format!("{h:#x} is not a persistent collective"),
            );
        };
        let c = Mpi::index(comm)
            .and_then(|i| self.comms.get(i)?.as_ref())
            .ok_or_else(|| MpiError {
                class: MPI_ERR_COMM,
                message: "the persistent collective's communicator was freed".into(),
            })?;
        let plan = build(c)?;
        let s = schedule(
            plan,
            persistent_context(c.context, *slot),
            *starts as c_int,
            members(c),
        );
        *starts = starts.wrapping_add(1);
        self.engine.start_collective(s)
    }
}

/// The members a collective on `c` runs over, in its plan's numbering:
/// both groups of an intercommunicator ([`coll::inter`]).
fn members(c: &Comm) -> Arc<[fm::Rank]> {
    match c.remote {
        Some(_) => crate::coll::inter::members(c),
        None => c.ranks.clone(),
    }
}

/// `n` ints from a C array, or `MPI_ERR_ARG` for a null one.
///
/// # Safety
/// `p` is null or holds `n` ints.
pub(crate) unsafe fn ints<'a>(p: *const c_int, n: usize, what: &str) -> MpiResult<&'a [c_int]> {
    array(p, n, what)
}

/// `n` values from a C array, or `MPI_ERR_ARG` for a null one.
///
/// # Safety
/// `p` is null or holds `n` values.
pub(crate) unsafe fn array<'a, T>(p: *const T, n: usize, what: &str) -> MpiResult<&'a [T]> {
    if p.is_null() {
        if n == 0 {
            return Ok(&[]);
        }
        return err(MPI_ERR_ARG, format!("a null array of {what}"));
    }
    Ok(std::slice::from_raw_parts(p, n))
}

/// Elements for each member from per-member counts and displacements
/// (in elements of `datatype`), as the v-collectives take them.
///
/// # Safety
/// `counts` and `displs` hold `n` entries; `buf` is the caller's.
pub(crate) unsafe fn per_member<C: CountArg>(
    m: &Mpi,
    buf: *const c_void,
    counts: *const C,
    displs: *const C,
    datatype: Handle,
    n: usize,
) -> MpiResult<Vec<Elements>> {
    let (counts, displs) = (
        array(counts, n, "counts")?,
        array(displs, n, "displacements")?,
    );
    let base = m.elements_at(buf, 0, datatype)?;
    (0..n)
        .map(|i| {
            let e = base.at(displs[i].into() as isize, nonneg(counts[i], "count")?);
            check_buffer(buf, e.bytes(), datatype)?;
            Ok(e)
        })
        .collect()
}

/// Elements for each member of the same count, one after another.
pub(crate) fn uniform(base: &Elements, n: usize) -> Vec<Elements> {
    (0..n)
        .map(|i| base.at((i * base.count) as isize, base.count))
        .collect()
}

/// Elements for each member with its own datatype and a displacement in
/// bytes (`MPI_Alltoallw`: ints, or addresses in its `_c` form; `MPI_Neighbor_alltoallw`: addresses).
///
/// # Safety
/// The arrays hold `n` entries each; `buf` is the caller's.
pub(crate) unsafe fn per_member_w<C: CountArg, D: CountArg>(
    m: &Mpi,
    buf: *const c_void,
    counts: *const C,
    displs: *const D,
    types: *const Handle,
    n: usize,
) -> MpiResult<Vec<Elements>> {
    let counts = array(counts, n, "counts")?;
    let displs = array(displs, n, "displacements")?;
    let types = ints(types, n, "datatypes")?;
    (0..n)
        .map(|i| {
            let e = m.elements_at(buf, counts[i], types[i])?;
            Ok(e.at_byte(displs[i].into() as isize, e.count))
        })
        .collect()
}
