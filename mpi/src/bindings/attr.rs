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
        // The value is a pointer (MPI's C binding): to the predefined
        // attribute's int, or the one the caller set.
        give(comm_attr(m, comm, keyval)?.map(|(v, _)| v), value, flag)
    })
}

/// `keyval`'s value on `comm`, and whether it is a predefined
/// attribute's (then a pointer to its int). Fortran names a predefined
/// keyval one above C's (MPICH's `MPII_ATTR_C_TO_FORTRAN`).
fn comm_attr(m: &Mpi, comm: Handle, keyval: c_int) -> MpiResult<Option<(usize, bool)>> {
    m.comm(comm)?;
    let c_form = match keyval & 1 {
        0 if keyval & !0xff == MPI_TAG_UB & !0xff => keyval - 1,
        _ => keyval,
    };
    let predefined: Option<*const c_int> = match c_form {
        MPI_TAG_UB => Some(&TAG_UB),
        MPI_HOST => Some(&PROC_NULL),
        MPI_IO => Some(&ANY_SOURCE),
        MPI_WTIME_IS_GLOBAL => Some(&FALSE),
        MPI_UNIVERSE_SIZE => Some(&m.universe),
        MPI_APPNUM => Some(&APPNUM),
        MPI_LASTUSEDCODE => Some(super::errhan::last_used()),
        _ => None,
    };
    Ok(match predefined {
        Some(p) => Some((p as usize, true)),
        None => m.attrs.get(comm, keyval, Kind::Comm)?.map(|v| (v, false)),
    })
}

/// MPICH's `MPII_Comm_get_attr`, which its Fortran library calls: as
/// `MPI_Comm_get_attr` for a C pointer (`given` 0); for Fortran's integers
/// the value itself, address-sized (a predefined attribute's int read
/// from where it is).
#[no_mangle]
pub unsafe extern "C" fn MPII_Comm_get_attr(
    comm: Handle,
    keyval: c_int,
    value: *mut c_void,
    flag: *mut c_int,
    given: c_int,
) -> c_int {
    call("MPI_Comm_get_attr", comm, |m| {
        let found = comm_attr(m, comm, keyval)?.map(|(v, predefined)| {
            match predefined && given != attr::GIVEN_AS_POINTER {
                true => *(v as *const c_int) as isize as usize,
                false => v,
            }
        });
        give(found, value, flag)
    })
}

/// MPICH's `MPII_Comm_set_attr`: `MPI_Comm_set_attr` of a value given as
/// `given` (from Fortran: an integer in the pointer's place).
#[no_mangle]
pub unsafe extern "C" fn MPII_Comm_set_attr(
    comm: Handle,
    keyval: c_int,
    value: *mut c_void,
    given: c_int,
) -> c_int {
    deleting("MPI_Comm_set_attr", comm, Kind::Comm, |m| {
        m.attrs
            .set_given(comm, keyval, Kind::Comm, value as usize, given)
    })
}

/// MPICH's `MPII_Type_get_attr` (the value, whatever `given`).
#[no_mangle]
pub unsafe extern "C" fn MPII_Type_get_attr(
    datatype: Handle,
    keyval: c_int,
    value: *mut c_void,
    flag: *mut c_int,
    _given: c_int,
) -> c_int {
    PMPI_Type_get_attr(datatype, keyval, value, flag)
}

/// MPICH's `MPII_Type_set_attr`.
#[no_mangle]
pub unsafe extern "C" fn MPII_Type_set_attr(
    datatype: Handle,
    keyval: c_int,
    value: *mut c_void,
    given: c_int,
) -> c_int {
    deleting("MPI_Type_set_attr", datatype, Kind::Datatype, |m| {
        m.attrs
            .set_given(datatype, keyval, Kind::Datatype, value as usize, given)
    })
}

/// MPICH's `MPII_Keyval_set_proxy`: Fortran's library made `keyval` and
/// calls its callbacks through these.
#[no_mangle]
pub unsafe extern "C" fn MPII_Keyval_set_proxy(
    keyval: c_int,
    copy: Option<attr::CopyProxy>,
    delete: Option<attr::DeleteProxy>,
) {
    if let Phase::Running(m) = &mut *phase() {
        m.attrs.set_proxies(keyval, copy, delete);
    }
}

/// An attribute's value as `MPI_X_get_attr` gives it: the flag, and the
/// value if there is one.
pub(super) unsafe fn give(
    found: Option<usize>,
    value: *mut c_void,
    flag: *mut c_int,
) -> MpiResult<()> {
    let flag = arg(flag, "the flag")?;
    *flag = c_int::from(found.is_some());
    if let Some(v) = found {
        *arg(value.cast::<usize>(), "the value")? = v;
    }
    Ok(())
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
        *keyval = m
            .attrs
            .create_keyval(Kind::Comm, copy, delete, extra_state as usize)?;
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
    free_keyval("MPI_Comm_free_keyval", keyval, Kind::Comm)
}

unsafe fn free_keyval(func: &str, keyval: *mut c_int, kind: Kind) -> c_int {
    call(func, MPI_COMM_WORLD, |m| {
        let keyval = arg(keyval, "the keyval")?;
        m.attrs.free_keyval(*keyval, kind)?;
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
    deleting("MPI_Comm_set_attr", comm, Kind::Comm, |m| {
        m.attrs.set(comm, keyval, Kind::Comm, value as usize)
    })
}

/// A call that may delete a value of `object` (`set` replacing one,
/// `delete`): its delete callback runs outside the library's lock; if it
/// fails, the call fails and the value stays (attr/attrerr). Errors go to
/// the communicator's handler, a datatype's to `MPI_COMM_WORLD`'s.
unsafe fn deleting(
    func: &str,
    object: Handle,
    kind: Kind,
    f: impl FnOnce(&mut Mpi) -> MpiResult<Option<Callback>>,
) -> c_int {
    let comm = match kind {
        Kind::Comm | Kind::Win => object,
        Kind::Datatype => MPI_COMM_WORLD,
    };
    let mut deletion = None;
    let r = call(func, comm, |m| {
        match kind {
            Kind::Comm => m.comm(object).map(drop)?,
            Kind::Datatype => m.layout(object).map(drop)?,
            Kind::Win => m.win(object).map(drop)?,
        }
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
    deleting("MPI_Comm_delete_attr", comm, Kind::Comm, |m| {
        m.attrs.delete(comm, keyval, Kind::Comm)
    })
}

#[mpi]
fn PMPI_Attr_delete(comm: Handle, keyval: c_int) -> c_int {
    PMPI_Comm_delete_attr(comm, keyval)
}

#[mpi]
fn PMPI_Type_create_keyval(
    copy: Option<CopyFn>,
    delete: Option<DeleteFn>,
    keyval: *mut c_int,
    extra_state: *mut c_void,
) -> c_int {
    call("MPI_Type_create_keyval", MPI_COMM_WORLD, |m| {
        let keyval = arg(keyval, "the keyval")?;
        *keyval = m
            .attrs
            .create_keyval(Kind::Datatype, copy, delete, extra_state as usize)?;
        Ok(())
    })
}

#[mpi]
fn PMPI_Type_free_keyval(keyval: *mut c_int) -> c_int {
    free_keyval("MPI_Type_free_keyval", keyval, Kind::Datatype)
}

#[mpi]
fn PMPI_Type_set_attr(datatype: Handle, keyval: c_int, value: *mut c_void) -> c_int {
    deleting("MPI_Type_set_attr", datatype, Kind::Datatype, |m| {
        m.attrs
            .set(datatype, keyval, Kind::Datatype, value as usize)
    })
}

#[mpi]
fn PMPI_Type_get_attr(
    datatype: Handle,
    keyval: c_int,
    value: *mut c_void,
    flag: *mut c_int,
) -> c_int {
    call("MPI_Type_get_attr", MPI_COMM_WORLD, |m| {
        m.layout(datatype)?;
        give(m.attrs.get(datatype, keyval, Kind::Datatype)?, value, flag)
    })
}

#[mpi]
fn PMPI_Type_delete_attr(datatype: Handle, keyval: c_int) -> c_int {
    deleting("MPI_Type_delete_attr", datatype, Kind::Datatype, |m| {
        m.attrs.delete(datatype, keyval, Kind::Datatype)
    })
}

/// A duplicate of communicator or datatype `old` that `make` makes, with
/// the attributes their copy callbacks give: those run outside the lock,
/// then the duplicate gets what they gave (or, if one failed, is freed
/// again).
pub(super) unsafe fn with_attributes(
    func: &str,
    kind: Kind,
    old: Handle,
    out: *mut Handle,
    make: impl FnOnce(&mut Mpi) -> MpiResult<Handle>,
) -> c_int {
    let (errors, null) = match kind {
        Kind::Comm => (old, MPI_COMM_NULL),
        Kind::Datatype => (MPI_COMM_WORLD, MPI_DATATYPE_NULL),
        Kind::Win => (old, crate::rma::MPI_WIN_NULL),
    };
    let mut new = null;
    let copied = call_with_callbacks(func, errors, |m| {
        let out = arg(out, "the new object")?;
        new = make(m)?;
        *out = new;
        Ok(m.attrs.copies(old))
    });
    match copied {
        Ok(values) if values.is_empty() => MPI_SUCCESS,
        Ok(values) => call(func, errors, |m| {
            m.attrs.set_copied(old, new, values);
            Ok(())
        }),
        Err(class) if new == null => class,
        Err(class) => {
            call(func, errors, |m| {
                match kind {
                    Kind::Comm => m.remove_comm(new),
                    Kind::Datatype => m.remove_type(new),
                    // Windows are never duplicated.
                    Kind::Win => {}
                }
                Ok(())
            });
            *out = null;
            class
        }
    }
}

#[mpi]
fn PMPI_Win_create_keyval(
    copy: Option<CopyFn>,
    delete: Option<DeleteFn>,
    keyval: *mut c_int,
    extra_state: *mut c_void,
) -> c_int {
    call("MPI_Win_create_keyval", MPI_COMM_WORLD, |m| {
        let keyval = arg(keyval, "the keyval")?;
        *keyval = (m.attrs).create_keyval(Kind::Win, copy, delete, extra_state as usize)?;
        Ok(())
    })
}

#[mpi]
fn PMPI_Win_free_keyval(keyval: *mut c_int) -> c_int {
    free_keyval("MPI_Win_free_keyval", keyval, Kind::Win)
}

#[mpi]
fn PMPI_Win_set_attr(win: Handle, keyval: c_int, value: *mut c_void) -> c_int {
    deleting("MPI_Win_set_attr", win, Kind::Win, |m| {
        m.attrs.set(win, keyval, Kind::Win, value as usize)
    })
}

#[mpi]
fn PMPI_Win_delete_attr(win: Handle, keyval: c_int) -> c_int {
    deleting("MPI_Win_delete_attr", win, Kind::Win, |m| {
        m.attrs.delete(win, keyval, Kind::Win)
    })
}
