//! Error handlers, classes and strings.

use crate::*;
use fm_mpi_macros::mpi;

#[mpi]
fn PMPI_Comm_set_errhandler(comm: Handle, errhandler: Handle) -> c_int {
    call("MPI_Comm_set_errhandler", comm, |m| {
        if errhandler != MPI_ERRORS_ARE_FATAL && errhandler != MPI_ERRORS_RETURN {
            return err(
                MPI_ERR_ARG,
                format!("{errhandler:#x} is not an error handler fm's MPI has"),
            );
        }
        m.comm_mut(comm)?.errhandler = errhandler;
        Ok(())
    })
}

#[mpi]
fn PMPI_Comm_get_errhandler(comm: Handle, errhandler: *mut Handle) -> c_int {
    call("MPI_Comm_get_errhandler", comm, |m| {
        let h = m.comm(comm)?.errhandler;
        if !errhandler.is_null() {
            *errhandler = h;
        }
        Ok(())
    })
}

#[mpi]
fn PMPI_Errhandler_set(comm: Handle, errhandler: Handle) -> c_int {
    PMPI_Comm_set_errhandler(comm, errhandler)
}

#[mpi]
fn PMPI_Error_string(errorcode: c_int, string: *mut c_char, resultlen: *mut c_int) -> c_int {
    put_string(
        class_text(errorcode),
        string,
        MPI_MAX_ERROR_STRING,
        resultlen,
    );
    MPI_SUCCESS
}

#[mpi]
fn PMPI_Error_class(errorcode: c_int, errorclass: *mut c_int) -> c_int {
    if !errorclass.is_null() {
        *errorclass = errorcode;
    }
    MPI_SUCCESS
}
