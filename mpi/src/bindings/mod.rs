//! The C interface: one file per area of the standard. Each function
//! decodes its C arguments and makes one call into the library (`#[mpi]`
//! exports it as `PMPI_x` and `MPI_x`).

mod attr;
mod coll;
pub(crate) mod comm;
mod datatype;
mod errhan;
mod group;
mod info;
mod init;
mod op;
mod pt2pt;
mod request;
