//! Functions of MPICH's ABI that fm's MPI does not implement yet
//! (docs/MPI.md says which areas): exported, so that a program or a
//! language binding that names one loads (a Python extension module
//! resolves every symbol at once), and failing cleanly when called.
//!
//! Written by `scripts/gen-not-yet.py` from the gap between Debian's
//! `libmpich.so.12` and this library; `mpi/tests/symbols.rs` fails while
//! any of MPICH's symbols is missing.

use crate::*;

/// Each name as a C function of no arguments (the caller's are left
/// where the C calling convention puts them, which the callee may ignore)
/// that reports MPI_ERR_UNSUPPORTED_OPERATION.
macro_rules! not_yet {
    ($($name:ident)*) => {$(
        #[no_mangle]
        pub extern "C" fn $name() -> c_int {
            not_supported(stringify!($name))
        }
    )*};
}

/// Through `MPI_COMM_WORLD`'s error handler (fatal unless the program
/// chose `MPI_ERRORS_RETURN`); before `MPI_Init` or after
/// `MPI_Finalize`, fatal.
fn not_supported(name: &str) -> c_int {
    let name = name.strip_prefix('P').unwrap_or(name);
    let why = "is not supported by fm's MPI yet (docs/MPI.md lists what is)";
    if !matches!(&*phase(), Phase::Running(_)) {
        fatal(None, name, why);
    }
    call(name, MPI_COMM_WORLD, |_| {
        err(MPI_ERR_UNSUPPORTED_OPERATION, why)
    })
}

not_yet! {
    MPII_Errhandler_set_cxx
    MPII_Op_set_cxx
    MPII_Win_get_attr
    MPII_Win_set_attr
    MPIR_Err_create_code
    MPIR_Err_return_comm
    MPIR_Err_return_win
    MPIX_Comm_agree
    MPIX_Comm_failure_ack
    MPIX_Comm_failure_get_acked
    MPIX_Comm_revoke
    MPIX_Comm_shrink
    MPIX_Grequest_class_allocate
    MPIX_Grequest_class_create
    MPIX_Grequest_start
    MPI_Close_port
    MPI_Comm_accept
    MPI_Comm_connect
    MPI_Comm_disconnect
    MPI_Comm_get_parent
    MPI_Comm_join
    MPI_Comm_spawn
    MPI_Comm_spawn_multiple
    MPI_File_c2f
    MPI_File_call_errhandler
    MPI_File_close
    MPI_File_create_errhandler
    MPI_File_delete
    MPI_File_f2c
    MPI_File_get_amode
    MPI_File_get_atomicity
    MPI_File_get_byte_offset
    MPI_File_get_errhandler
    MPI_File_get_group
    MPI_File_get_info
    MPI_File_get_position
    MPI_File_get_position_shared
    MPI_File_get_size
    MPI_File_get_type_extent
    MPI_File_get_type_extent_c
    MPI_File_get_view
    MPI_File_iread
    MPI_File_iread_all
    MPI_File_iread_all_c
    MPI_File_iread_at
    MPI_File_iread_at_all
    MPI_File_iread_at_all_c
    MPI_File_iread_at_c
    MPI_File_iread_c
    MPI_File_iread_shared
    MPI_File_iread_shared_c
    MPI_File_iwrite
    MPI_File_iwrite_all
    MPI_File_iwrite_all_c
    MPI_File_iwrite_at
    MPI_File_iwrite_at_all
    MPI_File_iwrite_at_all_c
    MPI_File_iwrite_at_c
    MPI_File_iwrite_c
    MPI_File_iwrite_shared
    MPI_File_iwrite_shared_c
    MPI_File_open
    MPI_File_preallocate
    MPI_File_read
    MPI_File_read_all
    MPI_File_read_all_begin
    MPI_File_read_all_begin_c
    MPI_File_read_all_c
    MPI_File_read_all_end
    MPI_File_read_at
    MPI_File_read_at_all
    MPI_File_read_at_all_begin
    MPI_File_read_at_all_begin_c
    MPI_File_read_at_all_c
    MPI_File_read_at_all_end
    MPI_File_read_at_c
    MPI_File_read_c
    MPI_File_read_ordered
    MPI_File_read_ordered_begin
    MPI_File_read_ordered_begin_c
    MPI_File_read_ordered_c
    MPI_File_read_ordered_end
    MPI_File_read_shared
    MPI_File_read_shared_c
    MPI_File_seek
    MPI_File_seek_shared
    MPI_File_set_atomicity
    MPI_File_set_errhandler
    MPI_File_set_info
    MPI_File_set_size
    MPI_File_set_view
    MPI_File_sync
    MPI_File_write
    MPI_File_write_all
    MPI_File_write_all_begin
    MPI_File_write_all_begin_c
    MPI_File_write_all_c
    MPI_File_write_all_end
    MPI_File_write_at
    MPI_File_write_at_all
    MPI_File_write_at_all_begin
    MPI_File_write_at_all_begin_c
    MPI_File_write_at_all_c
    MPI_File_write_at_all_end
    MPI_File_write_at_c
    MPI_File_write_c
    MPI_File_write_ordered
    MPI_File_write_ordered_begin
    MPI_File_write_ordered_begin_c
    MPI_File_write_ordered_c
    MPI_File_write_ordered_end
    MPI_File_write_shared
    MPI_File_write_shared_c
    MPI_Lookup_name
    MPI_Open_port
    MPI_Publish_name
    MPI_Register_datarep
    MPI_Register_datarep_c
    MPI_Unpublish_name
    PMPIX_Comm_agree
    PMPIX_Comm_failure_ack
    PMPIX_Comm_failure_get_acked
    PMPIX_Comm_revoke
    PMPIX_Comm_shrink
    PMPIX_Grequest_class_allocate
    PMPIX_Grequest_class_create
    PMPIX_Grequest_start
    PMPI_Close_port
    PMPI_Comm_accept
    PMPI_Comm_connect
    PMPI_Comm_disconnect
    PMPI_Comm_get_parent
    PMPI_Comm_join
    PMPI_Comm_spawn
    PMPI_Comm_spawn_multiple
    PMPI_File_c2f
    PMPI_File_call_errhandler
    PMPI_File_close
    PMPI_File_create_errhandler
    PMPI_File_delete
    PMPI_File_f2c
    PMPI_File_get_amode
    PMPI_File_get_atomicity
    PMPI_File_get_byte_offset
    PMPI_File_get_errhandler
    PMPI_File_get_group
    PMPI_File_get_info
    PMPI_File_get_position
    PMPI_File_get_position_shared
    PMPI_File_get_size
    PMPI_File_get_type_extent
    PMPI_File_get_type_extent_c
    PMPI_File_get_view
    PMPI_File_iread
    PMPI_File_iread_all
    PMPI_File_iread_all_c
    PMPI_File_iread_at
    PMPI_File_iread_at_all
    PMPI_File_iread_at_all_c
    PMPI_File_iread_at_c
    PMPI_File_iread_c
    PMPI_File_iread_shared
    PMPI_File_iread_shared_c
    PMPI_File_iwrite
    PMPI_File_iwrite_all
    PMPI_File_iwrite_all_c
    PMPI_File_iwrite_at
    PMPI_File_iwrite_at_all
    PMPI_File_iwrite_at_all_c
    PMPI_File_iwrite_at_c
    PMPI_File_iwrite_c
    PMPI_File_iwrite_shared
    PMPI_File_iwrite_shared_c
    PMPI_File_open
    PMPI_File_preallocate
    PMPI_File_read
    PMPI_File_read_all
    PMPI_File_read_all_begin
    PMPI_File_read_all_begin_c
    PMPI_File_read_all_c
    PMPI_File_read_all_end
    PMPI_File_read_at
    PMPI_File_read_at_all
    PMPI_File_read_at_all_begin
    PMPI_File_read_at_all_begin_c
    PMPI_File_read_at_all_c
    PMPI_File_read_at_all_end
    PMPI_File_read_at_c
    PMPI_File_read_c
    PMPI_File_read_ordered
    PMPI_File_read_ordered_begin
    PMPI_File_read_ordered_begin_c
    PMPI_File_read_ordered_c
    PMPI_File_read_ordered_end
    PMPI_File_read_shared
    PMPI_File_read_shared_c
    PMPI_File_seek
    PMPI_File_seek_shared
    PMPI_File_set_atomicity
    PMPI_File_set_errhandler
    PMPI_File_set_info
    PMPI_File_set_size
    PMPI_File_set_view
    PMPI_File_sync
    PMPI_File_write
    PMPI_File_write_all
    PMPI_File_write_all_begin
    PMPI_File_write_all_begin_c
    PMPI_File_write_all_c
    PMPI_File_write_all_end
    PMPI_File_write_at
    PMPI_File_write_at_all
    PMPI_File_write_at_all_begin
    PMPI_File_write_at_all_begin_c
    PMPI_File_write_at_all_c
    PMPI_File_write_at_all_end
    PMPI_File_write_at_c
    PMPI_File_write_c
    PMPI_File_write_ordered
    PMPI_File_write_ordered_begin
    PMPI_File_write_ordered_begin_c
    PMPI_File_write_ordered_c
    PMPI_File_write_ordered_end
    PMPI_File_write_shared
    PMPI_File_write_shared_c
    PMPI_Lookup_name
    PMPI_Open_port
    PMPI_Publish_name
    PMPI_Register_datarep
    PMPI_Register_datarep_c
    PMPI_Unpublish_name
    QMPI_Get_calling_address
    QMPI_Get_function
    QMPI_Get_tool_storage
    QMPI_Register_function
    QMPI_Register_tool_name
    QMPI_Register_tool_storage
}
