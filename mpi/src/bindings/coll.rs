//! Collectives.

use crate::*;
use fm_mpi_macros::mpi;

#[mpi]
fn PMPI_Barrier(comm: Handle) -> c_int {
    call("MPI_Barrier", comm, |m| {
        let mut c = m.comm(comm)?.clone();
        m.engine.barrier(&mut c)?;
        *m.comm_mut(comm)? = c;
        Ok(())
    })
}

not_yet! {
    MPI_Bcast / PMPI_Bcast,
    MPI_Reduce / PMPI_Reduce,
    MPI_Allreduce / PMPI_Allreduce,
    MPI_Gather / PMPI_Gather,
    MPI_Gatherv / PMPI_Gatherv,
    MPI_Scatter / PMPI_Scatter,
    MPI_Scatterv / PMPI_Scatterv,
    MPI_Allgather / PMPI_Allgather,
    MPI_Allgatherv / PMPI_Allgatherv,
    MPI_Alltoall / PMPI_Alltoall,
    MPI_Alltoallv / PMPI_Alltoallv,
    MPI_Alltoallw / PMPI_Alltoallw,
    MPI_Reduce_scatter / PMPI_Reduce_scatter,
    MPI_Reduce_scatter_block / PMPI_Reduce_scatter_block,
    MPI_Scan / PMPI_Scan,
    MPI_Exscan / PMPI_Exscan,
    MPI_Ibarrier / PMPI_Ibarrier,
    MPI_Ibcast / PMPI_Ibcast,
    MPI_Ireduce / PMPI_Ireduce,
    MPI_Iallreduce / PMPI_Iallreduce,
    MPI_Op_create / PMPI_Op_create,
    MPI_Op_free / PMPI_Op_free,
}
