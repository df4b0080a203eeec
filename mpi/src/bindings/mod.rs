//! The C interface: one file per area of the standard. Each function
//! decodes its C arguments and makes one call into the library (`#[mpi]`
//! exports it as `PMPI_x` and `MPI_x`).

/// Defines `PMPI_name` and `MPI_name` for a function not implemented
/// yet: it reports `MPI_ERR_UNSUPPORTED_OPERATION` to the error handler of
/// `MPI_COMM_WORLD` (fatal by default, naming the function), rather than
/// leaving the symbol missing (a program built against MPICH would die at
/// its first call with the loader's "undefined symbol"). The arguments are
/// not read (the C caller cleans up its own arguments).
macro_rules! not_yet {
    ($($name:ident / $pname:ident),* $(,)?) => {$(
        #[no_mangle]
        #[doc = concat!("`", stringify!($pname), "`: not supported yet.")]
        pub extern "C" fn $pname() -> c_int {
            call(stringify!($name), MPI_COMM_WORLD, |_| {
                err(
                    MPI_ERR_UNSUPPORTED_OPERATION,
                    concat!(stringify!($name), " is not supported by fm's MPI yet: of the collectives only MPI_Barrier is (docs/MPI.md)"),
                )
            })
        }

        #[no_mangle]
        #[doc = concat!("`", stringify!($name), "`: not supported yet.")]
        pub extern "C" fn $name() -> c_int {
            $pname()
        }
    )*};
}

mod attr;
mod coll;
mod comm;
mod datatype;
mod errhan;
mod group;
mod init;
mod pt2pt;
mod request;
