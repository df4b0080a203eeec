//! Error handlers, classes, codes and strings: the predefined handlers,
//! the program's own (`errors.rs`), and the classes and codes it adds.

use crate::errors::{HandlerFn, LAST_USED};
use crate::info::c_str;
use crate::*;
use fm_mpi_macros::mpi;

const MPI_ERRHANDLER_NULL: Handle = 0x1400_0000;

#[mpi]
fn PMPI_Comm_set_errhandler(comm: Handle, errhandler: Handle) -> c_int {
    call("MPI_Comm_set_errhandler", comm, |m| {
        let h = m.errors.settable(errhandler)?;
        m.comm_mut(comm)?.errhandler = h;
        Ok(())
    })
}

#[mpi]
fn PMPI_Comm_get_errhandler(comm: Handle, errhandler: *mut Handle) -> c_int {
    call("MPI_Comm_get_errhandler", comm, |m| {
        let h = m.comm(comm)?.errhandler;
        *arg(errhandler, "the error handler")? = h;
        Ok(())
    })
}

#[mpi]
fn PMPI_Errhandler_set(comm: Handle, errhandler: Handle) -> c_int {
    PMPI_Comm_set_errhandler(comm, errhandler)
}

#[mpi]
fn PMPI_Errhandler_get(comm: Handle, errhandler: *mut Handle) -> c_int {
    PMPI_Comm_get_errhandler(comm, errhandler)
}

#[mpi]
fn PMPI_Comm_create_errhandler(function: Option<HandlerFn>, errhandler: *mut Handle) -> c_int {
    call("MPI_Comm_create_errhandler", MPI_COMM_WORLD, |m| {
        let out = arg(errhandler, "the error handler")?;
        let Some(f) = function else {
            return err(MPI_ERR_ARG, "a null error handler function");
        };
        *out = m.errors.create(f)?;
        Ok(())
    })
}

#[mpi]
fn PMPI_Errhandler_create(function: Option<HandlerFn>, errhandler: *mut Handle) -> c_int {
    PMPI_Comm_create_errhandler(function, errhandler)
}

/// `MPI_Errhandler_free`: the handle is gone; a communicator that holds
/// the handler keeps it.
#[mpi]
fn PMPI_Errhandler_free(errhandler: *mut Handle) -> c_int {
    call("MPI_Errhandler_free", MPI_COMM_WORLD, |m| {
        let h = arg(errhandler, "the error handler")?;
        m.errors.free(*h)?;
        *h = MPI_ERRHANDLER_NULL;
        Ok(())
    })
}

/// `MPI_Comm_call_errhandler`: `comm`'s handler runs on `errorcode` as if
/// a call on `comm` had failed with it; if it returns, so does this,
/// with `MPI_SUCCESS`.
#[mpi]
fn PMPI_Comm_call_errhandler(comm: Handle, errorcode: c_int) -> c_int {
    let called = call("MPI_Comm_call_errhandler", comm, |m| {
        m.comm(comm)?;
        err(
            errorcode,
            format!(
                "the program raised error {errorcode}: {}",
                text_of(m, errorcode)
            ),
        )
    });
    // A bad communicator is an error of this call; any other outcome is
    // the handler's, which returned.
    match called == MPI_ERR_COMM && errorcode != MPI_ERR_COMM {
        true => MPI_ERR_COMM,
        false => MPI_SUCCESS,
    }
}

fn text_of(m: &Mpi, code: c_int) -> String {
    match m.errors.string(code) {
        Some(s) => s.to_string(),
        None => class_text(m.errors.class_of(code)).to_string(),
    }
}

/// Answers about error codes, which need the table of added ones: at
/// once when this thread holds the library (an error handler the
/// program gave runs outside it, so this is a reduction function asking).
fn with_errors<T>(f: impl FnOnce(Option<&crate::errors::Errors>) -> T) -> T {
    if crate::state::in_call() {
        return f(None);
    }
    match &*phase() {
        Phase::Running(m) => f(Some(&m.errors)),
        _ => f(None),
    }
}

#[mpi]
fn PMPI_Error_string(errorcode: c_int, string: *mut c_char, resultlen: *mut c_int) -> c_int {
    let s = with_errors(|e| match e.and_then(|e| e.string(errorcode)) {
        Some(s) => s.to_string(),
        None => class_text(errorcode).to_string(),
    });
    put_string(&s, string, MPI_MAX_ERROR_STRING, resultlen);
    MPI_SUCCESS
}

#[mpi]
fn PMPI_Error_class(errorcode: c_int, errorclass: *mut c_int) -> c_int {
    let class = with_errors(|e| e.map_or(errorcode, |e| e.class_of(errorcode)));
    if !errorclass.is_null() {
        *errorclass = class;
    }
    MPI_SUCCESS
}

#[mpi]
fn PMPI_Add_error_class(errorclass: *mut c_int) -> c_int {
    call("MPI_Add_error_class", MPI_COMM_WORLD, |m| {
        let out = arg(errorclass, "the error class")?;
        *out = m.errors.add(None)?;
        Ok(())
    })
}

#[mpi]
fn PMPI_Add_error_code(errorclass: c_int, errorcode: *mut c_int) -> c_int {
    call("MPI_Add_error_code", MPI_COMM_WORLD, |m| {
        let out = arg(errorcode, "the error code")?;
        *out = m.errors.add(Some(errorclass))?;
        Ok(())
    })
}

#[mpi]
fn PMPI_Add_error_string(errorcode: c_int, string: *const c_char) -> c_int {
    call("MPI_Add_error_string", MPI_COMM_WORLD, |m| {
        let s = c_str(string, "error string")?;
        let mut s = s.to_string();
        s.truncate(MPI_MAX_ERROR_STRING - 1);
        m.errors.set_string(errorcode, Some(s))
    })
}

/// MPICH's MPI-4.1 preview of deleting what `MPI_Add_error_*` added.
macro_rules! delete {
    ($($name:ident / $pname:ident: $what:literal $body:expr;)*) => {$(
        #[no_mangle]
        pub extern "C" fn $pname(value: c_int) -> c_int {
            call($what, MPI_COMM_WORLD, |m| $body(m, value))
        }
        #[no_mangle]
        pub extern "C" fn $name(value: c_int) -> c_int {
            $pname(value)
        }
    )*};
}

delete! {
    MPIX_Delete_error_class / PMPIX_Delete_error_class: "MPIX_Delete_error_class"
        |m: &mut Mpi, v| m.errors.delete(v, true);
    MPIX_Delete_error_code / PMPIX_Delete_error_code: "MPIX_Delete_error_code"
        |m: &mut Mpi, v| m.errors.delete(v, false);
    MPIX_Delete_error_string / PMPIX_Delete_error_string: "MPIX_Delete_error_string"
        |m: &mut Mpi, v| m.errors.set_string(v, None);
}

/// The value `MPI_LASTUSEDCODE` points at.
pub(crate) fn last_used() -> *const c_int {
    LAST_USED.as_ptr()
}
