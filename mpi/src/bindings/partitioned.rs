//! Partitioned communication (MPI-4.0 §4; `partitioned`).

use crate::partitioned::{arrived, init, ready};
use crate::*;
use fm_mpi_macros::mpi;

#[mpi]
#[allow(clippy::too_many_arguments)]
fn PMPI_Psend_init(
    buf: *const c_void,
    partitions: c_int,
    count: MPI_Count,
    datatype: Handle,
    dest: c_int,
    tag: c_int,
    comm: Handle,
    info: Handle,
    request: *mut Handle,
) -> c_int {
    call("MPI_Psend_init", comm, |m| {
        if info != MPI_INFO_NULL {
            m.info(info)?;
        }
        let buf = buf.cast_mut();
        init(
            m, true, buf, partitions, count, datatype, dest, tag, comm, request,
        )
    })
}

#[mpi]
#[allow(clippy::too_many_arguments)]
fn PMPI_Precv_init(
    buf: *mut c_void,
    partitions: c_int,
    count: MPI_Count,
    datatype: Handle,
    source: c_int,
    tag: c_int,
    comm: Handle,
    info: Handle,
    request: *mut Handle,
) -> c_int {
    call("MPI_Precv_init", comm, |m| {
        if info != MPI_INFO_NULL {
            m.info(info)?;
        }
        init(
            m, false, buf, partitions, count, datatype, source, tag, comm, request,
        )
    })
}

#[mpi]
fn PMPI_Pready(partition: c_int, request: Handle) -> c_int {
    call("MPI_Pready", MPI_COMM_WORLD, |m| {
        ready(m, request, [partition])
    })
}

#[mpi]
fn PMPI_Pready_range(partition_low: c_int, partition_high: c_int, request: Handle) -> c_int {
    call("MPI_Pready_range", MPI_COMM_WORLD, |m| {
        if partition_low > partition_high {
            return err(
                MPI_ERR_ARG,
                format!("partitions {partition_low} to {partition_high}"),
            );
        }
        ready(m, request, partition_low..=partition_high)
    })
}

#[mpi]
fn PMPI_Pready_list(length: c_int, array_of_partitions: *const c_int, request: Handle) -> c_int {
    call("MPI_Pready_list", MPI_COMM_WORLD, |m| {
        let n = nonneg(length, "length")?;
        let parts = crate::collective::ints(array_of_partitions, n, "partitions")?;
        ready(m, request, parts.iter().copied())
    })
}

#[mpi]
fn PMPI_Parrived(request: Handle, partition: c_int, flag: *mut c_int) -> c_int {
    call("MPI_Parrived", MPI_COMM_WORLD, |m| {
        let flag = arg(flag, "the flag")?;
        *flag = c_int::from(arrived(m, request, partition)?);
        Ok(())
    })
}
