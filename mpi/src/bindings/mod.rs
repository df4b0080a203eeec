//! The C interface: one file per area of the standard. Each function
//! decodes its C arguments and makes one call into the library (`#[mpi]`
//! exports it as `PMPI_x` and `MPI_x`).

// Visible in the modules below, which use it.
/// `PMPI_X` (blocking), `PMPI_Ix` (non-blocking, with a request after the
/// same arguments) and `PMPI_X_init` (persistent, with an info object and
/// a request), all calling `$inner(m, args…, mode)`.
macro_rules! collective {
    ($($pname:ident / $piname:ident / $pinit:ident => $inner:ident($($a:ident: $t:ty),*) $(+ $extra:literal)? on $comm:ident;)*) => {$(
        #[fm_mpi_macros::mpi]
        fn $pname($($a: $t),*) -> c_int {
            let func = &stringify!($pname)[1..];
            if !$crate::threads::multiple() {
                return call(func, $comm, |m| $inner(m, $($a,)* $($extra,)? Mode::Blocking));
            }
            // Started, then waited for without the lock (`threads`).
            let mut request = MPI_REQUEST_NULL;
            let rc = call(func, $comm, |m| $inner(m, $($a,)* $($extra,)? Mode::Start(&mut request)));
            if rc != MPI_SUCCESS {
                return rc;
            }
            super::request::wait(func, $comm, &mut request, STATUS_IGNORE as *mut MpiStatus)
        }

        #[fm_mpi_macros::mpi]
        fn $piname($($a: $t,)* request: *mut Handle) -> c_int {
            call(&stringify!($piname)[1..], $comm, |m| $inner(m, $($a,)* $($extra,)? Mode::Start(request)))
        }

        #[fm_mpi_macros::mpi]
        fn $pinit($($a: $t,)* info: Handle, request: *mut Handle) -> c_int {
            call(&stringify!($pinit)[1..], $comm, |m| {
                if info != MPI_INFO_NULL {
                    m.info(info)?;
                }
                $inner(m, $($a,)* $($extra,)? Mode::Persistent(request))
            })
        }
    )*};
}

mod attr;
mod coll;
pub(crate) use coll::allgather_bytes;
pub(crate) mod comm;
mod darray;
mod datatype;
mod errhan;
mod f90;
mod group;
mod info;
mod init;
mod intercoll;
mod neighbor;
mod not_yet;
mod op;
mod partitioned;
mod pt2pt;
mod request;
mod rma;
mod session;
mod tool;
mod topo;
mod typemaps;
