//! Attributes and keyvals.

use crate::*;
use fm_mpi_macros::mpi;

/// The predefined attributes' values (`MPI_Comm_get_attr` returns
/// pointers to them).
static TAG_UB: c_int = abi::TAG_UB;
static PROC_NULL: c_int = MPI_PROC_NULL;
static ANY_SOURCE: c_int = MPI_ANY_SOURCE;
static FALSE: c_int = 0;
static APPNUM: c_int = 0;

#[mpi]
fn PMPI_Comm_get_attr(comm: Handle, keyval: c_int, value: *mut c_void, flag: *mut c_int) -> c_int {
    call("MPI_Comm_get_attr", comm, |m| {
        m.comm(comm)?;
        let flag = arg(flag, "the flag")?;
        let predefined: Option<*const c_int> = match keyval {
            MPI_TAG_UB => Some(&TAG_UB),
            MPI_HOST => Some(&PROC_NULL),
            MPI_IO => Some(&ANY_SOURCE),
            MPI_WTIME_IS_GLOBAL => Some(&FALSE),
            MPI_UNIVERSE_SIZE => Some(&m.universe),
            MPI_APPNUM => Some(&APPNUM),
            MPI_LASTUSEDCODE => Some(super::errhan::last_used()),
            _ => None,
        };
        // The value is a pointer (MPI's C binding): to the predefined
        // attribute's int, or the one the caller set.
        let found = match predefined {
            Some(p) => Some(p as usize),
            None => m.attrs.get(comm, keyval)?,
        };
        *flag = c_int::from(found.is_some());
        if let Some(v) = found {
            *arg(value.cast::<usize>(), "the value")? = v;
        }
        Ok(())
    })
}

#[mpi]
fn PMPI_Attr_get(comm: Handle, keyval: c_int, value: *mut c_void, flag: *mut c_int) -> c_int {
    PMPI_Comm_get_attr(comm, keyval, value, flag)
}

#[mpi]
fn PMPI_Comm_create_keyval(
    copy: Option<CopyFn>,
    delete: Option<DeleteFn>,
    keyval: *mut c_int,
    extra_state: *mut c_void,
) -> c_int {
    call("MPI_Comm_create_keyval", MPI_COMM_WORLD, |m| {
        let keyval = arg(keyval, "the keyval")?;
        *keyval = m.attrs.create_keyval(copy, delete, extra_state as usize)?;
        Ok(())
    })
}

#[mpi]
fn PMPI_Keyval_create(
    copy: Option<CopyFn>,
    delete: Option<DeleteFn>,
    keyval: *mut c_int,
    extra_state: *mut c_void,
) -> c_int {
    PMPI_Comm_create_keyval(copy, delete, keyval, extra_state)
}

#[mpi]
fn PMPI_Comm_free_keyval(keyval: *mut c_int) -> c_int {
    call("MPI_Comm_free_keyval", MPI_COMM_WORLD, |m| {
        let keyval = arg(keyval, "the keyval")?;
        m.attrs.free_keyval(*keyval)?;
        *keyval = MPI_KEYVAL_INVALID;
        Ok(())
    })
}

#[mpi]
fn PMPI_Keyval_free(keyval: *mut c_int) -> c_int {
    PMPI_Comm_free_keyval(keyval)
}

#[mpi]
fn PMPI_Comm_set_attr(comm: Handle, keyval: c_int, value: *mut c_void) -> c_int {
    deleting("MPI_Comm_set_attr", comm, |m| {
        m.attrs.set(comm, keyval, value as usize)
    })
}

/// A call that may delete a value (`set` replacing one, `delete`): its
/// delete callback runs outside the library's lock; if it fails, the
/// call fails and the value stays (attr/attrerr).
unsafe fn deleting(
    func: &str,
    comm: Handle,
    f: impl FnOnce(&mut Mpi) -> MpiResult<Option<Callback>>,
) -> c_int {
    let mut deletion = None;
    let r = call(func, comm, |m| {
        m.comm(comm)?;
        deletion = f(m)?;
        Ok(())
    });
    let Some(cb) = deletion.filter(|_| r == MPI_SUCCESS) else {
        return r;
    };
    match cb.run() {
        Ok(_) => MPI_SUCCESS,
        Err(e) => call(func, comm, |m| {
            m.attrs.restore(&cb);
            Err(e)
        }),
    }
}

#[mpi]
fn PMPI_Attr_put(comm: Handle, keyval: c_int, value: *mut c_void) -> c_int {
    PMPI_Comm_set_attr(comm, keyval, value)
}

#[mpi]
fn PMPI_Comm_delete_attr(comm: Handle, keyval: c_int) -> c_int {
    deleting("MPI_Comm_delete_attr", comm, |m| {
        m.attrs.delete(comm, keyval)
    })
}

#[mpi]
fn PMPI_Attr_delete(comm: Handle, keyval: c_int) -> c_int {
    PMPI_Comm_delete_attr(comm, keyval)
}
