//! The collectives' intercommunicator forms (`coll::inter`): the same C
//! functions as `coll.rs`, which hands an intercommunicator here. A
//! rooted one's `root` is `MPI_ROOT` at the root, `MPI_PROC_NULL` at the
//! rest of its group and the root's rank in the other group; buffers that
//! matter only at the root are not read elsewhere. `MPI_IN_PLACE` has no
//! meaning between two groups.

use crate::coll::inter::{self, Root};
use crate::coll::{self, Elements};
use crate::collective::*;
use crate::*;

/// The size of the other group, if `comm` is an intercommunicator.
pub(super) fn remote_size(m: &Mpi, comm: Handle) -> MpiResult<Option<usize>> {
    Ok(m.comm(comm)?.remote.as_ref().map(|r| r.len()))
}

fn root_of(m: &Mpi, comm: Handle, root: c_int) -> MpiResult<Root> {
    inter::root(m.comm(comm)?, root)
}

/// `MPI_IN_PLACE` is refused on an intercommunicator.
pub(super) fn not_in_place(buf: *const c_void) -> MpiResult<()> {
    match coll::in_place(buf) {
        true => err(MPI_ERR_BUFFER, "MPI_IN_PLACE on an intercommunicator"),
        false => Ok(()),
    }
}

/// `count` elements at `buf`, which may not be `MPI_IN_PLACE` here.
pub(super) unsafe fn elements<C: CountArg>(
    m: &Mpi,
    buf: *const c_void,
    count: C,
    datatype: Handle,
) -> MpiResult<Elements> {
    not_in_place(buf)?;
    m.elements_at(buf, count, datatype)
}

/// What a member not at the root passes for a buffer it does not use.
fn unused(m: &Mpi) -> MpiResult<Elements> {
    m.elements_at(std::ptr::null(), 0, MPI_BYTE)
}

pub(super) fn barrier(m: &mut Mpi, comm: Handle, mode: Mode) -> MpiResult<()> {
    m.collective(comm, mode, |c| Ok(inter::barrier(c)))
}

pub(super) unsafe fn bcast<C: CountArg>(
    m: &mut Mpi,
    buffer: *mut c_void,
    count: C,
    datatype: Handle,
    root: c_int,
    comm: Handle,
    mode: Mode,
) -> MpiResult<()> {
    let r = root_of(m, comm, root)?;
    let data = match r {
        Root::Idle => unused(m)?,
        _ => elements(m, buffer, count, datatype)?,
    };
    m.collective(comm, mode, move |c| Ok(inter::bcast(c, &data, r)))
}

#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn reduce<C: CountArg>(
    m: &mut Mpi,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: C,
    datatype: Handle,
    op: Handle,
    root: c_int,
    comm: Handle,
    mode: Mode,
) -> MpiResult<()> {
    let r = root_of(m, comm, root)?;
    let reduction = m.reduction(op, datatype)?;
    let (send, recv) = match r {
        Root::Here => (unused(m)?, elements(m, recvbuf, count, datatype)?),
        Root::There(_) => (elements(m, sendbuf, count, datatype)?, unused(m)?),
        Root::Idle => (unused(m)?, unused(m)?),
    };
    m.collective(comm, mode, move |c| {
        Ok(inter::reduce(c, &send, &recv, reduction.clone(), r))
    })
}

#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn allreduce<C: CountArg>(
    m: &mut Mpi,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: C,
    datatype: Handle,
    op: Handle,
    comm: Handle,
    mode: Mode,
) -> MpiResult<()> {
    let reduction = m.reduction(op, datatype)?;
    let send = elements(m, sendbuf, count, datatype)?;
    let recv = elements(m, recvbuf, count, datatype)?;
    m.collective(comm, mode, move |c| {
        Ok(inter::allreduce(c, &send, &recv, reduction.clone()))
    })
}

/// Gather(v): `recv` gives the root's blocks, one per member of the
/// other group, when asked.
pub(super) unsafe fn gather<C: CountArg>(
    m: &mut Mpi,
    (sendbuf, sendcount, sendtype): (*const c_void, C, Handle),
    recv: impl FnOnce(&Mpi, usize) -> MpiResult<Vec<Elements>>,
    root: c_int,
    comm: Handle,
    mode: Mode,
) -> MpiResult<()> {
    let r = root_of(m, comm, root)?;
    let remotes = remote_size(m, comm)?.unwrap_or(0);
    let (send, recv) = match r {
        Root::Here => (unused(m)?, recv(m, remotes)?),
        Root::There(_) => (elements(m, sendbuf, sendcount, sendtype)?, Vec::new()),
        Root::Idle => (unused(m)?, Vec::new()),
    };
    m.collective(comm, mode, move |c| Ok(inter::gather(c, &send, &recv, r)))
}

/// Scatter(v): `send` gives the root's blocks when asked.
pub(super) unsafe fn scatter<C: CountArg>(
    m: &mut Mpi,
    send: impl FnOnce(&Mpi, usize) -> MpiResult<Vec<Elements>>,
    (recvbuf, recvcount, recvtype): (*mut c_void, C, Handle),
    root: c_int,
    comm: Handle,
    mode: Mode,
) -> MpiResult<()> {
    let r = root_of(m, comm, root)?;
    let remotes = remote_size(m, comm)?.unwrap_or(0);
    let (send, recv) = match r {
        Root::Here => (send(m, remotes)?, unused(m)?),
        Root::There(_) => (Vec::new(), elements(m, recvbuf, recvcount, recvtype)?),
        Root::Idle => (Vec::new(), unused(m)?),
    };
    m.collective(comm, mode, move |c| Ok(inter::scatter(c, &send, &recv, r)))
}

/// Allgather(v) and alltoall(v, w): blocks to and from each member of
/// the other group.
pub(super) fn exchange(
    m: &mut Mpi,
    send: Vec<Elements>,
    recv: Vec<Elements>,
    comm: Handle,
    mode: Mode,
) -> MpiResult<()> {
    // SAFETY: the caller's buffers, as MPI promises for the call.
    m.collective(comm, mode, move |c| {
        Ok(unsafe { inter::alltoall(c, &send, &recv) })
    })
}

/// The same elements for each of `n` members (allgather's input).
pub(super) unsafe fn repeated<C: CountArg>(
    m: &Mpi,
    (buf, count, datatype): (*const c_void, C, Handle),
    n: usize,
) -> MpiResult<Vec<Elements>> {
    Ok(vec![elements(m, buf, count, datatype)?; n])
}

/// Reduce_scatter(_block): `counts` are this group's.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn reduce_scatter(
    m: &mut Mpi,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    counts: Vec<usize>,
    datatype: Handle,
    op: Handle,
    comm: Handle,
    mode: Mode,
) -> MpiResult<()> {
    let reduction = m.reduction(op, datatype)?;
    let me = m.comm(comm)?.rank as usize;
    let total: usize = counts.iter().sum();
    let total =
        i64::try_from(total).or_else(|_| err(MPI_ERR_COUNT, format!("{total} elements in all")))?;
    let input = elements(m, sendbuf, total, datatype)?;
    let recv = elements(m, recvbuf, counts[me] as i64, datatype)?;
    m.collective(comm, mode, move |c| {
        Ok(inter::reduce_scatter(
            c,
            &input,
            &recv,
            &counts,
            reduction.clone(),
        ))
    })
}
