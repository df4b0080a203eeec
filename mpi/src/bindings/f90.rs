//! Fortran 90's parameterized types (MPI-4.0 §19.1.9):
//! `MPI_Type_create_f90_real`, `_complex` and `_integer` give the type
//! of a `REAL`, `COMPLEX` or `INTEGER` of the kind `SELECTED_REAL_KIND(p,
//! r)` or `SELECTED_INT_KIND(r)` selects, among the sizes MPICH offers.
//! Each is made once per (kind, p, r) and the same handle given again; it
//! is a predefined type to the program (`MPI_Type_free` refuses it), and
//! `MPI_Type_get_envelope` says `MPI_COMBINER_F90_*` with `p` and `r`.

use super::datatype::{recipe, Args};
use crate::*;
use fm_mpi_macros::mpi;
use std::sync::Mutex;

/// What a type was made for: its combiner, `p` and `r`.
type Kind = (c_int, c_int, c_int);

/// The types made so far, with their handles.
static MADE: Mutex<Vec<(Kind, Handle)>> = Mutex::new(Vec::new());

/// Whether `h` is one of these (not to be freed).
pub(super) fn is_f90(h: Handle) -> bool {
    let made = MADE.lock().unwrap_or_else(|p| p.into_inner());
    made.iter().any(|&(_, t)| t == h)
}

/// The type of `combiner`'s kind for `p` and `r` (`MPI_UNDEFINED`: any),
/// whose size `size` picks among the sized types.
fn parameterized(
    m: &mut Mpi,
    combiner: c_int,
    p: c_int,
    r: c_int,
    size: Option<Handle>,
    out: *mut Handle,
) -> MpiResult<()> {
    // SAFETY: the caller's handle (null is refused).
    let out = unsafe { arg(out, "the new datatype")? };
    let Some(sized) = size else {
        return err(
            MPI_ERR_ARG,
            format!("no type has precision {p} and range {r} (MPI_UNDEFINED for either: any)"),
        );
    };
    let mut made = MADE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(&(_, h)) = made.iter().find(|(key, _)| *key == (combiner, p, r)) {
        *out = h;
        return Ok(());
    }
    let layout = (*m.layout(sized)?).clone();
    let args = Args {
        ints: match combiner {
            MPI_COMBINER_F90_INTEGER => vec![r],
            _ => vec![p, r],
        },
        ..Args::default()
    };
    let h = types::add_made(layout, recipe(combiner, args, &[])?)?;
    made.push(((combiner, p, r), h));
    *out = h;
    Ok(())
}

/// Whether `v` is within `max` (`MPI_UNDEFINED` always is).
fn within(v: c_int, max: c_int) -> bool {
    v == MPI_UNDEFINED || v <= max
}

/// REAL4 or REAL8 (MPICH offers no larger one here).
fn real(p: c_int, r: c_int) -> Option<(Handle, Handle)> {
    const REAL4: Handle = 0x4c00_0427;
    const REAL8: Handle = 0x4c00_0829;
    const COMPLEX8: Handle = 0x4c00_0828;
    const COMPLEX16: Handle = 0x4c00_102a;
    if within(p, 6) && within(r, 37) {
        Some((REAL4, COMPLEX8))
    } else if within(p, 15) && within(r, 307) {
        Some((REAL8, COMPLEX16))
    } else {
        None
    }
}

#[mpi]
fn PMPI_Type_create_f90_real(p: c_int, r: c_int, newtype: *mut Handle) -> c_int {
    call("MPI_Type_create_f90_real", MPI_COMM_WORLD, |m| {
        let size = real(p, r).map(|(t, _)| t);
        parameterized(m, MPI_COMBINER_F90_REAL, p, r, size, newtype)
    })
}

#[mpi]
fn PMPI_Type_create_f90_complex(p: c_int, r: c_int, newtype: *mut Handle) -> c_int {
    call("MPI_Type_create_f90_complex", MPI_COMM_WORLD, |m| {
        let size = real(p, r).map(|(_, t)| t);
        parameterized(m, MPI_COMBINER_F90_COMPLEX, p, r, size, newtype)
    })
}

/// INTEGER1, 2, 4 or 8: the smallest with `r` decimal digits.
#[mpi]
fn PMPI_Type_create_f90_integer(r: c_int, newtype: *mut Handle) -> c_int {
    call("MPI_Type_create_f90_integer", MPI_COMM_WORLD, |m| {
        let size = match r {
            MPI_UNDEFINED => Some(0x4c00_012d),
            r if r <= 2 => Some(0x4c00_012d),
            r if r <= 4 => Some(0x4c00_022f),
            r if r <= 9 => Some(0x4c00_0430),
            r if r <= 18 => Some(0x4c00_0831),
            _ => None,
        };
        parameterized(m, MPI_COMBINER_F90_INTEGER, MPI_UNDEFINED, r, size, newtype)
    })
}
