//! The neighbourhood collectives (MPI-4.0 §8.6): each member exchanges
//! blocks with the neighbours its communicator's topology gives it
//! (`topo`), blocking, non-blocking and persistent.

use crate::coll::{self, Elements};
use crate::collective::*;
use crate::topo::Neighbors;
use crate::*;

collective! {
    PMPI_Neighbor_allgather / PMPI_Ineighbor_allgather / PMPI_Neighbor_allgather_init => allgather(
        sendbuf: *const c_void, sendcount: IntOrCount, sendtype: Handle,
        recvbuf: *mut c_void, recvcount: IntOrCount, recvtype: Handle, comm: Handle
    ) on comm;
    PMPI_Neighbor_allgatherv / PMPI_Ineighbor_allgatherv / PMPI_Neighbor_allgatherv_init => allgatherv(
        sendbuf: *const c_void, sendcount: IntOrCount, sendtype: Handle,
        recvbuf: *mut c_void, recvcounts: *const IntOrCount, displs: *const IntOrCount,
        recvtype: Handle, comm: Handle
    ) on comm;
    PMPI_Neighbor_alltoall / PMPI_Ineighbor_alltoall / PMPI_Neighbor_alltoall_init => alltoall(
        sendbuf: *const c_void, sendcount: IntOrCount, sendtype: Handle,
        recvbuf: *mut c_void, recvcount: IntOrCount, recvtype: Handle, comm: Handle
    ) on comm;
    PMPI_Neighbor_alltoallv / PMPI_Ineighbor_alltoallv / PMPI_Neighbor_alltoallv_init => alltoallv(
        sendbuf: *const c_void, sendcounts: *const IntOrCount, sdispls: *const IntOrCount,
        sendtype: Handle, recvbuf: *mut c_void, recvcounts: *const IntOrCount,
        rdispls: *const IntOrCount, recvtype: Handle, comm: Handle
    ) on comm;
    PMPI_Neighbor_alltoallw / PMPI_Ineighbor_alltoallw / PMPI_Neighbor_alltoallw_init => alltoallw(
        sendbuf: *const c_void, sendcounts: *const IntOrCount, sdispls: *const i64,
        sendtypes: *const Handle, recvbuf: *mut c_void, recvcounts: *const IntOrCount,
        rdispls: *const i64, recvtypes: *const Handle, comm: Handle
    ) on comm;
}

/// Run the exchange: `send` for the out-neighbours, `recv` for the in-
/// neighbours, found from the topology when the call was made.
fn exchange(
    m: &mut Mpi,
    comm: Handle,
    n: Neighbors,
    send: Vec<Elements>,
    recv: Vec<Elements>,
    mode: Mode,
) -> MpiResult<()> {
    m.collective(comm, mode, move |c| {
        // SAFETY: the caller's buffers, as MPI promises for the call.
        Ok(unsafe { coll::neighbors(c, &n, &send, &recv) })
    })
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
    let n = m.neighbors(comm)?;
    let recv = uniform(&m.elements_at(recvbuf, recvcount, recvtype)?, n.ins.len());
    let send = vec![m.elements_at(sendbuf, sendcount, sendtype)?; n.outs.len()];
    exchange(m, comm, n, send, recv, mode)
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
    let n = m.neighbors(comm)?;
    let recv = per_member(m, recvbuf, recvcounts, displs, recvtype, n.ins.len())?;
    let send = vec![m.elements_at(sendbuf, sendcount, sendtype)?; n.outs.len()];
    exchange(m, comm, n, send, recv, mode)
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
    let n = m.neighbors(comm)?;
    let recv = uniform(&m.elements_at(recvbuf, recvcount, recvtype)?, n.ins.len());
    let send = uniform(&m.elements_at(sendbuf, sendcount, sendtype)?, n.outs.len());
    exchange(m, comm, n, send, recv, mode)
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
    let n = m.neighbors(comm)?;
    let recv = per_member(m, recvbuf, recvcounts, rdispls, recvtype, n.ins.len())?;
    let send = per_member(m, sendbuf, sendcounts, sdispls, sendtype, n.outs.len())?;
    exchange(m, comm, n, send, recv, mode)
}

#[allow(clippy::too_many_arguments)]
unsafe fn alltoallw<C: CountArg>(
    m: &mut Mpi,
    sendbuf: *const c_void,
    sendcounts: *const C,
    sdispls: *const i64,
    sendtypes: *const Handle,
    recvbuf: *mut c_void,
    recvcounts: *const C,
    rdispls: *const i64,
    recvtypes: *const Handle,
    comm: Handle,
    mode: Mode,
) -> MpiResult<()> {
    let n = m.neighbors(comm)?;
    let recv = per_member_w(m, recvbuf, recvcounts, rdispls, recvtypes, n.ins.len())?;
    let send = per_member_w(m, sendbuf, sendcounts, sdispls, sendtypes, n.outs.len())?;
    exchange(m, comm, n, send, recv, mode)
}
