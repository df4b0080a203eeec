//! Collectives, blocking, non-blocking and persistent: each triple shares
//! one function that decodes the arguments and builds the member's plan
//! (`coll`; on an intercommunicator, `intercoll.rs`); `Mpi::collective`
//! runs or starts it.

use crate::coll::area::AreaOp;
use crate::coll::{self, Elements};
use crate::collective::*;
use crate::*;
use intercoll::remote_size;

use super::intercoll;

collective! {
    PMPI_Barrier / PMPI_Ibarrier / PMPI_Barrier_init => barrier(comm: Handle) on comm;
    PMPI_Bcast / PMPI_Ibcast / PMPI_Bcast_init => bcast(
        buffer: *mut c_void, count: IntOrCount, datatype: Handle, root: c_int, comm: Handle
    ) on comm;
    PMPI_Reduce / PMPI_Ireduce / PMPI_Reduce_init => reduce(
        sendbuf: *const c_void, recvbuf: *mut c_void, count: IntOrCount, datatype: Handle,
        op: Handle, root: c_int, comm: Handle
    ) on comm;
    PMPI_Allreduce / PMPI_Iallreduce / PMPI_Allreduce_init => allreduce(
        sendbuf: *const c_void, recvbuf: *mut c_void, count: IntOrCount, datatype: Handle,
        op: Handle, comm: Handle
    ) on comm;
    PMPI_Gather / PMPI_Igather / PMPI_Gather_init => gather(
        sendbuf: *const c_void, sendcount: IntOrCount, sendtype: Handle,
        recvbuf: *mut c_void, recvcount: IntOrCount, recvtype: Handle, root: c_int, comm: Handle
    ) on comm;
    PMPI_Gatherv / PMPI_Igatherv / PMPI_Gatherv_init => gatherv(
        sendbuf: *const c_void, sendcount: IntOrCount, sendtype: Handle,
        recvbuf: *mut c_void, recvcounts: *const IntOrCount, displs: *const IntOrCount,
        recvtype: Handle, root: c_int, comm: Handle
    ) on comm;
    PMPI_Scatter / PMPI_Iscatter / PMPI_Scatter_init => scatter(
        sendbuf: *const c_void, sendcount: IntOrCount, sendtype: Handle,
        recvbuf: *mut c_void, recvcount: IntOrCount, recvtype: Handle, root: c_int, comm: Handle
    ) on comm;
    PMPI_Scatterv / PMPI_Iscatterv / PMPI_Scatterv_init => scatterv(
        sendbuf: *const c_void, sendcounts: *const IntOrCount, displs: *const IntOrCount,
        sendtype: Handle, recvbuf: *mut c_void, recvcount: IntOrCount, recvtype: Handle,
        root: c_int, comm: Handle
    ) on comm;
    PMPI_Allgather / PMPI_Iallgather / PMPI_Allgather_init => allgather(
        sendbuf: *const c_void, sendcount: IntOrCount, sendtype: Handle,
        recvbuf: *mut c_void, recvcount: IntOrCount, recvtype: Handle, comm: Handle
    ) on comm;
    PMPI_Allgatherv / PMPI_Iallgatherv / PMPI_Allgatherv_init => allgatherv(
        sendbuf: *const c_void, sendcount: IntOrCount, sendtype: Handle,
        recvbuf: *mut c_void, recvcounts: *const IntOrCount, displs: *const IntOrCount,
        recvtype: Handle, comm: Handle
    ) on comm;
    PMPI_Alltoall / PMPI_Ialltoall / PMPI_Alltoall_init => alltoall(
        sendbuf: *const c_void, sendcount: IntOrCount, sendtype: Handle,
        recvbuf: *mut c_void, recvcount: IntOrCount, recvtype: Handle, comm: Handle
    ) on comm;
    PMPI_Alltoallv / PMPI_Ialltoallv / PMPI_Alltoallv_init => alltoallv(
        sendbuf: *const c_void, sendcounts: *const IntOrCount, sdispls: *const IntOrCount,
        sendtype: Handle, recvbuf: *mut c_void, recvcounts: *const IntOrCount,
        rdispls: *const IntOrCount, recvtype: Handle, comm: Handle
    ) on comm;
    PMPI_Alltoallw / PMPI_Ialltoallw / PMPI_Alltoallw_init => alltoallw(
        sendbuf: *const c_void, sendcounts: *const IntOrCount, sdispls: *const IntOrCount,
        sendtypes: *const Handle, recvbuf: *mut c_void, recvcounts: *const IntOrCount,
        rdispls: *const IntOrCount, recvtypes: *const Handle, comm: Handle
    ) on comm;
    PMPI_Reduce_scatter / PMPI_Ireduce_scatter / PMPI_Reduce_scatter_init => reduce_scatter(
        sendbuf: *const c_void, recvbuf: *mut c_void, recvcounts: *const IntOrCount,
        datatype: Handle, op: Handle, comm: Handle
    ) on comm;
    PMPI_Reduce_scatter_block / PMPI_Ireduce_scatter_block / PMPI_Reduce_scatter_block_init => reduce_scatter_block(
        sendbuf: *const c_void, recvbuf: *mut c_void, recvcount: IntOrCount,
        datatype: Handle, op: Handle, comm: Handle
    ) on comm;
    PMPI_Scan / PMPI_Iscan / PMPI_Scan_init => scan(
        sendbuf: *const c_void, recvbuf: *mut c_void, count: IntOrCount, datatype: Handle,
        op: Handle, comm: Handle
    ) + false on comm;
    PMPI_Exscan / PMPI_Iexscan / PMPI_Exscan_init => scan(
        sendbuf: *const c_void, recvbuf: *mut c_void, count: IntOrCount, datatype: Handle,
        op: Handle, comm: Handle
    ) + true on comm;
}

fn barrier(m: &mut Mpi, comm: Handle, mode: Mode) -> MpiResult<()> {
    if remote_size(m, comm)?.is_some() {
        return intercoll::barrier(m, comm, mode);
    }
    if let Some(area) = m.area_for(comm, 0, mode)? {
        return m.area_collective(mode, AreaOp::barrier(&area));
    }
    m.collective(comm, mode, move |c| Ok(coll::barrier(c)))
}

unsafe fn bcast<C: CountArg>(
    m: &mut Mpi,
    buffer: *mut c_void,
    count: C,
    datatype: Handle,
    root: c_int,
    comm: Handle,
    mode: Mode,
) -> MpiResult<()> {
    if remote_size(m, comm)?.is_some() {
        return intercoll::bcast(m, buffer, count, datatype, root, comm, mode);
    }
    let data = m.elements_at(buffer, count, datatype)?;
    if let Some(area) = m.area_for(comm, data.bytes(), mode)? {
        let r = coll::root(m.comm(comm)?, root)?;
        return m.area_collective(mode, AreaOp::bcast(&area, data, r));
    }
    m.collective(comm, mode, move |c| {
        Ok(coll::bcast(c, &data, coll::root(c, root)?))
    })
}

/// The input of a reduction: `None` for `MPI_IN_PLACE`.
unsafe fn input<C: CountArg>(
    m: &Mpi,
    sendbuf: *const c_void,
    count: C,
    datatype: Handle,
) -> MpiResult<Option<Elements>> {
    if coll::in_place(sendbuf) {
        return Ok(None);
    }
    m.elements_at(sendbuf, count, datatype).map(Some)
}

#[allow(clippy::too_many_arguments)]
unsafe fn reduce<C: CountArg>(
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
    if remote_size(m, comm)?.is_some() {
        return intercoll::reduce(m, sendbuf, recvbuf, count, datatype, op, root, comm, mode);
    }
    let reduction = m.reduction(op, datatype)?;
    let me_root = {
        let c = m.comm(comm)?;
        coll::root(c, root)? == c.rank as usize
    };
    let send = input(m, sendbuf, count, datatype)?;
    if send.is_none() && !me_root {
        return err(MPI_ERR_BUFFER, "MPI_IN_PLACE is for the root only");
    }
    // The output matters at the root only (elsewhere it may be null).
    let recv = match me_root {
        true => m.elements_at(recvbuf, count, datatype)?,
        false => m
            .elements_at(std::ptr::null(), 0, datatype)?
            .at(0, nonneg(count, "count")?),
    };
    if let Some(area) = m.area_for(comm, recv.bytes(), mode)? {
        let r = coll::root(m.comm(comm)?, root)?;
        return m.area_collective(mode, AreaOp::reduce(&area, send, recv, reduction, Some(r)));
    }
    m.collective(comm, mode, move |c| {
        Ok(coll::reduce(
            c,
            send.as_ref(),
            &recv,
            reduction.clone(),
            coll::root(c, root)?,
        ))
    })
}

#[allow(clippy::too_many_arguments)]
unsafe fn allreduce<C: CountArg>(
    m: &mut Mpi,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: C,
    datatype: Handle,
    op: Handle,
    comm: Handle,
    mode: Mode,
) -> MpiResult<()> {
    if remote_size(m, comm)?.is_some() {
        return intercoll::allreduce(m, sendbuf, recvbuf, count, datatype, op, comm, mode);
    }
    let reduction = m.reduction(op, datatype)?;
    let send = input(m, sendbuf, count, datatype)?;
    let recv = m.elements_at(recvbuf, count, datatype)?;
    if let Some(area) = m.area_for(comm, recv.bytes(), mode)? {
        return m.area_collective(mode, AreaOp::reduce(&area, send, recv, reduction, None));
    }
    m.collective(comm, mode, move |c| {
        Ok(coll::allreduce(c, send.as_ref(), &recv, reduction.clone()))
    })
}

fn size_of(m: &Mpi, comm: Handle) -> MpiResult<(usize, usize)> {
    let c = m.comm(comm)?;
    Ok((c.ranks.len(), c.rank as usize))
}

#[allow(clippy::too_many_arguments)]
unsafe fn gather<C: CountArg>(
    m: &mut Mpi,
    sendbuf: *const c_void,
    sendcount: C,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcount: C,
    recvtype: Handle,
    root: c_int,
    comm: Handle,
    mode: Mode,
) -> MpiResult<()> {
    if remote_size(m, comm)?.is_some() {
        let recv = |m: &Mpi, n| Ok(uniform(&m.elements_at(recvbuf, recvcount, recvtype)?, n));
        return intercoll::gather(m, (sendbuf, sendcount, sendtype), recv, root, comm, mode);
    }
    let (n, me) = size_of(m, comm)?;
    let r = coll::root(m.comm(comm)?, root)?;
    let recv = match me == r {
        true => uniform(&m.elements_at(recvbuf, recvcount, recvtype)?, n),
        false => Vec::new(),
    };
    // Every member's part is as long (MPI's rule), so each member's
    // own says whether the area serves them all (not so for gatherv).
    let send = match coll::in_place(sendbuf) && !recv.is_empty() {
        true => None,
        false => Some(m.elements_at(sendbuf, sendcount, sendtype)?),
    };
    let part = send.as_ref().unwrap_or_else(|| &recv[me]).bytes();
    if let Some(area) = m.area_for(comm, part, mode)? {
        return m.area_collective(mode, AreaOp::gather(&area, send, recv, Some(r)));
    }
    gathered(m, sendbuf, sendcount, sendtype, recv, root, comm, mode)
}

#[allow(clippy::too_many_arguments)]
unsafe fn gatherv<C: CountArg>(
    m: &mut Mpi,
    sendbuf: *const c_void,
    sendcount: C,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcounts: *const C,
    displs: *const C,
    recvtype: Handle,
    root: c_int,
    comm: Handle,
    mode: Mode,
) -> MpiResult<()> {
    if remote_size(m, comm)?.is_some() {
        let recv = |m: &Mpi, n| per_member(m, recvbuf, recvcounts, displs, recvtype, n);
        return intercoll::gather(m, (sendbuf, sendcount, sendtype), recv, root, comm, mode);
    }
    let (n, me) = size_of(m, comm)?;
    let r = coll::root(m.comm(comm)?, root)?;
    let recv = match me == r {
        true => per_member(m, recvbuf, recvcounts, displs, recvtype, n)?,
        false => Vec::new(),
    };
    gathered(m, sendbuf, sendcount, sendtype, recv, root, comm, mode)
}

/// Gather(v)'s common part: this member's input, and the run.
#[allow(clippy::too_many_arguments)]
unsafe fn gathered<C: CountArg>(
    m: &mut Mpi,
    sendbuf: *const c_void,
    sendcount: C,
    sendtype: Handle,
    recv: Vec<Elements>,
    root: c_int,
    comm: Handle,
    mode: Mode,
) -> MpiResult<()> {
    let send = match coll::in_place(sendbuf) && !recv.is_empty() {
        true => None,
        false => Some(m.elements_at(sendbuf, sendcount, sendtype)?),
    };
    m.collective(comm, mode, move |c| {
        Ok(coll::gather(c, send.as_ref(), &recv, coll::root(c, root)?))
    })
}

#[allow(clippy::too_many_arguments)]
unsafe fn scatter<C: CountArg>(
    m: &mut Mpi,
    sendbuf: *const c_void,
    sendcount: C,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcount: C,
    recvtype: Handle,
    root: c_int,
    comm: Handle,
    mode: Mode,
) -> MpiResult<()> {
    if remote_size(m, comm)?.is_some() {
        let send = |m: &Mpi, n| Ok(uniform(&m.elements_at(sendbuf, sendcount, sendtype)?, n));
        return intercoll::scatter(m, send, (recvbuf, recvcount, recvtype), root, comm, mode);
    }
    let (n, me) = size_of(m, comm)?;
    let r = coll::root(m.comm(comm)?, root)?;
    let send = match me == r {
        true => uniform(&m.elements_at(sendbuf, sendcount, sendtype)?, n),
        false => Vec::new(),
    };
    scattered(m, send, recvbuf, recvcount, recvtype, root, comm, mode)
}

#[allow(clippy::too_many_arguments)]
unsafe fn scatterv<C: CountArg>(
    m: &mut Mpi,
    sendbuf: *const c_void,
    sendcounts: *const C,
    displs: *const C,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcount: C,
    recvtype: Handle,
    root: c_int,
    comm: Handle,
    mode: Mode,
) -> MpiResult<()> {
    if remote_size(m, comm)?.is_some() {
        let send = |m: &Mpi, n| per_member(m, sendbuf, sendcounts, displs, sendtype, n);
        return intercoll::scatter(m, send, (recvbuf, recvcount, recvtype), root, comm, mode);
    }
    let (n, me) = size_of(m, comm)?;
    let r = coll::root(m.comm(comm)?, root)?;
    let send = match me == r {
        true => per_member(m, sendbuf, sendcounts, displs, sendtype, n)?,
        false => Vec::new(),
    };
    scattered(m, send, recvbuf, recvcount, recvtype, root, comm, mode)
}

/// Scatter(v)'s common part: this member's output, and the run.
#[allow(clippy::too_many_arguments)]
unsafe fn scattered<C: CountArg>(
    m: &mut Mpi,
    send: Vec<Elements>,
    recvbuf: *mut c_void,
    recvcount: C,
    recvtype: Handle,
    root: c_int,
    comm: Handle,
    mode: Mode,
) -> MpiResult<()> {
    let recv = match coll::in_place(recvbuf) && !send.is_empty() {
        true => None,
        false => Some(m.elements_at(recvbuf, recvcount, recvtype)?),
    };
    m.collective(comm, mode, move |c| {
        Ok(coll::scatter(c, &send, recv.as_ref(), coll::root(c, root)?))
    })
}

/// An allgather of `bytes` bytes from each member of `comm`, run or
/// started as `mode` says.
pub(crate) unsafe fn allgather_bytes(
    m: &mut Mpi,
    send: *const c_void,
    recv: *mut c_void,
    bytes: c_int,
    comm: Handle,
    mode: Mode,
) -> MpiResult<()> {
    allgather(m, send, bytes, MPI_BYTE, recv, bytes, MPI_BYTE, comm, mode)
}

#[allow(clippy::too_many_arguments)]
unsafe fn allgather<C: CountArg>(
    m: &mut Mpi,
    sendbuf: *const c_void,
    sendcount: C,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcount: C,
    recvtype: Handle,
    comm: Handle,
    mode: Mode,
) -> MpiResult<()> {
    if let Some(n) = remote_size(m, comm)? {
        let recv = uniform(&m.elements_at(recvbuf, recvcount, recvtype)?, n);
        let send = intercoll::repeated(m, (sendbuf, sendcount, sendtype), n)?;
        return intercoll::exchange(m, send, recv, comm, mode);
    }
    let (n, _) = size_of(m, comm)?;
    let recv = uniform(&m.elements_at(recvbuf, recvcount, recvtype)?, n);
    allgathered(m, sendbuf, sendcount, sendtype, recv, comm, mode)
}

#[allow(clippy::too_many_arguments)]
unsafe fn allgatherv<C: CountArg>(
    m: &mut Mpi,
    sendbuf: *const c_void,
    sendcount: C,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcounts: *const C,
    displs: *const C,
    recvtype: Handle,
    comm: Handle,
    mode: Mode,
) -> MpiResult<()> {
    if let Some(n) = remote_size(m, comm)? {
        let recv = per_member(m, recvbuf, recvcounts, displs, recvtype, n)?;
        let send = intercoll::repeated(m, (sendbuf, sendcount, sendtype), n)?;
        return intercoll::exchange(m, send, recv, comm, mode);
    }
    let (n, _) = size_of(m, comm)?;
    let recv = per_member(m, recvbuf, recvcounts, displs, recvtype, n)?;
    allgathered(m, sendbuf, sendcount, sendtype, recv, comm, mode)
}

unsafe fn allgathered<C: CountArg>(
    m: &mut Mpi,
    sendbuf: *const c_void,
    sendcount: C,
    sendtype: Handle,
    recv: Vec<Elements>,
    comm: Handle,
    mode: Mode,
) -> MpiResult<()> {
    let send = match coll::in_place(sendbuf) {
        true => None,
        false => Some(m.elements_at(sendbuf, sendcount, sendtype)?),
    };
    // Every member knows every part's length: the longest decides.
    let longest = recv.iter().map(Elements::bytes).max().unwrap_or(0);
    if let Some(area) = m.area_for(comm, longest, mode)? {
        return m.area_collective(mode, AreaOp::gather(&area, send, recv, None));
    }
    m.collective(comm, mode, move |c| {
        Ok(coll::allgather(c, send.as_ref(), &recv))
    })
}

#[allow(clippy::too_many_arguments)]
unsafe fn alltoall<C: CountArg>(
    m: &mut Mpi,
    sendbuf: *const c_void,
    sendcount: C,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcount: C,
    recvtype: Handle,
    comm: Handle,
    mode: Mode,
) -> MpiResult<()> {
    if let Some(n) = remote_size(m, comm)? {
        let recv = uniform(&m.elements_at(recvbuf, recvcount, recvtype)?, n);
        let send = uniform(&intercoll::elements(m, sendbuf, sendcount, sendtype)?, n);
        return intercoll::exchange(m, send, recv, comm, mode);
    }
    let (n, _) = size_of(m, comm)?;
    let recv = uniform(&m.elements_at(recvbuf, recvcount, recvtype)?, n);
    let send = match coll::in_place(sendbuf) {
        true => recv.clone(),
        false => uniform(&m.elements_at(sendbuf, sendcount, sendtype)?, n),
    };
    m.collective(comm, mode, move |c| Ok(coll::alltoall(c, &send, &recv)))
}

#[allow(clippy::too_many_arguments)]
unsafe fn alltoallv<C: CountArg>(
    m: &mut Mpi,
    sendbuf: *const c_void,
    sendcounts: *const C,
    sdispls: *const C,
    sendtype: Handle,
    recvbuf: *mut c_void,
    recvcounts: *const C,
    rdispls: *const C,
    recvtype: Handle,
    comm: Handle,
    mode: Mode,
) -> MpiResult<()> {
    if let Some(n) = remote_size(m, comm)? {
        intercoll::not_in_place(sendbuf)?;
        let recv = per_member(m, recvbuf, recvcounts, rdispls, recvtype, n)?;
        let send = per_member(m, sendbuf, sendcounts, sdispls, sendtype, n)?;
        return intercoll::exchange(m, send, recv, comm, mode);
    }
    let (n, _) = size_of(m, comm)?;
    let recv = per_member(m, recvbuf, recvcounts, rdispls, recvtype, n)?;
    let send = match coll::in_place(sendbuf) {
        true => recv.clone(),
        false => per_member(m, sendbuf, sendcounts, sdispls, sendtype, n)?,
    };
    m.collective(comm, mode, move |c| Ok(coll::alltoall(c, &send, &recv)))
}

#[allow(clippy::too_many_arguments)]
unsafe fn alltoallw<C: CountArg>(
    m: &mut Mpi,
    sendbuf: *const c_void,
    sendcounts: *const C,
    sdispls: *const C,
    sendtypes: *const Handle,
    recvbuf: *mut c_void,
    recvcounts: *const C,
    rdispls: *const C,
    recvtypes: *const Handle,
    comm: Handle,
    mode: Mode,
) -> MpiResult<()> {
    if let Some(n) = remote_size(m, comm)? {
        intercoll::not_in_place(sendbuf)?;
        let recv = per_member_w(m, recvbuf, recvcounts, rdispls, recvtypes, n)?;
        let send = per_member_w(m, sendbuf, sendcounts, sdispls, sendtypes, n)?;
        return intercoll::exchange(m, send, recv, comm, mode);
    }
    let (n, _) = size_of(m, comm)?;
    let recv = per_member_w(m, recvbuf, recvcounts, rdispls, recvtypes, n)?;
    let send = match coll::in_place(sendbuf) {
        true => recv.clone(),
        false => per_member_w(m, sendbuf, sendcounts, sdispls, sendtypes, n)?,
    };
    m.collective(comm, mode, move |c| Ok(coll::alltoall(c, &send, &recv)))
}

#[allow(clippy::too_many_arguments)]
unsafe fn reduce_scatter<C: CountArg>(
    m: &mut Mpi,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcounts: *const C,
    datatype: Handle,
    op: Handle,
    comm: Handle,
    mode: Mode,
) -> MpiResult<()> {
    let (n, _) = size_of(m, comm)?;
    let counts = array(recvcounts, n, "counts")?
        .iter()
        .map(|&c| nonneg(c, "count"))
        .collect::<MpiResult<Vec<usize>>>()?;
    scattered_reduction(m, sendbuf, recvbuf, counts, datatype, op, comm, mode)
}

#[allow(clippy::too_many_arguments)]
unsafe fn reduce_scatter_block<C: CountArg>(
    m: &mut Mpi,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    recvcount: C,
    datatype: Handle,
    op: Handle,
    comm: Handle,
    mode: Mode,
) -> MpiResult<()> {
    let (n, _) = size_of(m, comm)?;
    let counts = vec![nonneg(recvcount, "count")?; n];
    scattered_reduction(m, sendbuf, recvbuf, counts, datatype, op, comm, mode)
}

/// Reduce_scatter(_block)'s common part.
#[allow(clippy::too_many_arguments)]
unsafe fn scattered_reduction(
    m: &mut Mpi,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    counts: Vec<usize>,
    datatype: Handle,
    op: Handle,
    comm: Handle,
    mode: Mode,
) -> MpiResult<()> {
    if remote_size(m, comm)?.is_some() {
        return intercoll::reduce_scatter(m, sendbuf, recvbuf, counts, datatype, op, comm, mode);
    }
    let reduction = m.reduction(op, datatype)?;
    let me = size_of(m, comm)?.1;
    let total: usize = counts.iter().sum();
    let total = c_int::try_from(total)
        .or_else(|_| err(MPI_ERR_COUNT, format!("{total} elements in all")))?;
    let recv = m.elements_at(recvbuf, counts[me] as c_int, datatype)?;
    let input = match coll::in_place(sendbuf) {
        true => m.elements_at(recvbuf, total, datatype)?,
        false => m.elements_at(sendbuf, total, datatype)?,
    };
    m.collective(comm, mode, move |c| {
        Ok(coll::reduce_scatter(
            c,
            &input,
            &recv,
            &counts,
            reduction.clone(),
        ))
    })
}

#[allow(clippy::too_many_arguments)]
/// `MPI_Scan`, and `MPI_Exscan` (`exclusive`).
unsafe fn scan<C: CountArg>(
    m: &mut Mpi,
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count: C,
    datatype: Handle,
    op: Handle,
    comm: Handle,
    exclusive: bool,
    mode: Mode,
) -> MpiResult<()> {
    m.intracomm(comm, "MPI_Scan and MPI_Exscan")?;
    let reduction = m.reduction(op, datatype)?;
    let send = input(m, sendbuf, count, datatype)?;
    let recv = m.elements_at(recvbuf, count, datatype)?;
    m.collective(comm, mode, move |c| {
        Ok(coll::scan(
            c,
            send.as_ref(),
            &recv,
            reduction.clone(),
            exclusive,
        ))
    })
}
