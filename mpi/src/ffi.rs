//! Reading C arguments and writing C results: null checks, counts,
//! statuses and strings.

use crate::*;

/// C's `MPI_Count`: what the large-count (`_c`) functions take.
#[allow(non_camel_case_types)]
pub(crate) type MPI_Count = i64;

/// A count, length or displacement as a C caller passes it: `int` in
/// MPI's classic functions, `MPI_Count` or `MPI_Aint` in the `_c` ones
/// (`#[mpi]` writes both from one body, with `IntOrCount` for the
/// type). The library works in `i64` and converts at its edge.
pub(crate) trait CountArg:
    Form + Copy + Into<i64> + From<c_int> + TryFrom<u64> + TryFrom<usize> + std::fmt::Display
{
}
impl CountArg for c_int {}
impl CountArg for MPI_Count {}

/// Which form of a large-count function a body runs in, from the type
/// its `IntOrCount` or `AintOrCount` stands for there.
pub(crate) trait Form {
    /// The `_c` form.
    const LARGE: bool;
}
impl Form for c_int {
    const LARGE: bool = false;
}
impl Form for isize {
    const LARGE: bool = false;
}
impl Form for MPI_Count {
    const LARGE: bool = true;
}

/// `MPI_Get_count` (whole elements of `datatype`) and, with `basic`,
/// `MPI_Get_elements` (its basic elements, also those of a partial
/// element) in the bytes `status` says arrived: `MPI_UNDEFINED` when they
/// end inside one or are more than an int holds.
///
/// # Safety
/// `status` and `count` are null or valid, as MPI's caller promises.
pub(crate) unsafe fn count_in_status<C: CountArg>(
    status: *const MpiStatus,
    datatype: Handle,
    count: *mut C,
    basic: bool,
) -> c_int {
    if count.is_null() {
        return MPI_ERR_ARG;
    }
    match elements_in_status(status, datatype, basic) {
        Ok(n) => {
            // A count past an int's is MPI_UNDEFINED too (MPI-4.0 §3.2.5).
            *count = n
                .and_then(|n| C::try_from(n).ok())
                .unwrap_or(C::from(MPI_UNDEFINED));
            MPI_SUCCESS
        }
        Err(class) => class,
    }
}

/// [`count_in_status`]'s count, uncut (`MPI_Get_elements_x`): `None`
/// for `MPI_UNDEFINED`.
///
/// # Safety
/// `status` is null or valid, as MPI's caller promises.
pub(crate) unsafe fn elements_in_status(
    status: *const MpiStatus,
    datatype: Handle,
    basic: bool,
) -> Result<Option<u64>, c_int> {
    let whole = |bytes: u64, size: usize| match size as u64 {
        0 => Some(0),
        size => bytes.is_multiple_of(size).then_some(bytes / size),
    };
    if status.is_null() || status as usize == STATUS_IGNORE {
        return Err(MPI_ERR_ARG);
    }
    let bytes = (*status).bytes();
    Ok(match builtin_type_size(datatype) {
        Some(size) if !basic => whole(bytes, size),
        // Basic elements (pair types count two) are the layout's to say.
        _ => {
            let layout = match &*phase() {
                Phase::Running(m) => m.layout(datatype),
                _ => err(MPI_ERR_TYPE, "no datatype before MPI_Init"),
            };
            match layout {
                Ok(l) if basic => l.elements_in(bytes),
                Ok(l) => whole(bytes, l.size),
                Err(_) => return Err(MPI_ERR_TYPE),
            }
        }
    })
}

/// Bytes of data in `count` elements of `layout`, if they fit an address.
pub(crate) fn data_bytes(count: usize, layout: &Layout) -> MpiResult<usize> {
    count
        .checked_mul(layout.size)
        .filter(|&n| n <= isize::MAX as usize)
        .ok_or_else(|| MpiError {
            class: MPI_ERR_COUNT,
            message: format!(
                "{count} elements of {} bytes do not fit an address",
                layout.size
            ),
        })
}

/// A null buffer is refused for data of a predefined type only: a
/// derived type's blocks may be absolute addresses, from `MPI_BOTTOM`
/// (null), as MPICH takes them (pt2pt/bottom).
pub(crate) fn check_buffer(buf: *const c_void, bytes: usize, datatype: Handle) -> MpiResult<()> {
    if buf.is_null() && bytes > 0 && is_predefined_type(datatype) {
        return err(MPI_ERR_BUFFER, "a null buffer for a non-empty message");
    }
    Ok(())
}

/// An argument the call writes (or reads) through: null is `MPI_ERR_ARG`,
/// not a crash.
///
/// # Safety
/// `p` is null or points at a `T` that lives through the call.
pub(crate) unsafe fn arg<'a, T>(p: *mut T, what: &str) -> MpiResult<&'a mut T> {
    p.as_mut().ok_or_else(|| MpiError {
        class: MPI_ERR_ARG,
        message: format!("a null pointer for {what}"),
    })
}

/// A call that only answers `v` through `out` (any time, even before
/// `MPI_Init`): `MPI_ERR_ARG` for a null `out`.
///
/// # Safety
/// `out` is null or points at an int.
pub(crate) unsafe fn answer(out: *mut c_int, v: c_int) -> c_int {
    match out.as_mut() {
        Some(o) => {
            *o = v;
            MPI_SUCCESS
        }
        None => MPI_ERR_ARG,
    }
}

/// Write `s` to a status the caller gave, unless it is `MPI_STATUS_IGNORE`.
///
/// # Safety
/// `out` is null, `MPI_STATUS_IGNORE`, or points at an `MPI_Status`.
pub(crate) unsafe fn put_status(out: *mut MpiStatus, s: MpiStatus) {
    if !out.is_null() && out as usize != STATUS_IGNORE {
        // A call that completes one operation never writes MPI_ERROR
        // (MPI-4.0 §3.2.5; MPICH keeps it too): its error is its return.
        *out = MpiStatus {
            error: (*out).error,
            ..s
        };
    }
}

/// A completed operation's error, reported as the call's: a receive's
/// truncation, or a non-blocking collective that failed (its reason was
/// logged when it failed).
pub(crate) fn status_result(s: &MpiStatus) -> MpiResult<()> {
    match s.error {
        MPI_SUCCESS => Ok(()),
        MPI_ERR_TRUNCATE => err(
            MPI_ERR_TRUNCATE,
            format!(
                "message truncated: the receive buffer held {} bytes of a longer message from rank {} (tag {})",
                s.bytes(),
                s.source,
                s.tag
            ),
        ),
        class => err(class, format!("the operation failed: {}", class_text(class))),
    }
}

/// Copy `s` into the C string buffer `out` of at most `max` bytes (with its
/// NUL), and its length to `len`.
///
/// # Safety
/// `out` holds `max` bytes; `len` is null or points at an int.
pub(crate) unsafe fn put_string(s: &str, out: *mut c_char, max: usize, len: *mut c_int) {
    let n = s.len().min(max.saturating_sub(1));
    if !out.is_null() {
        std::ptr::copy_nonoverlapping(s.as_ptr(), out.cast::<u8>(), n);
        *out.add(n) = 0;
    }
    if !len.is_null() {
        *len = n as c_int;
    }
}

/// `n` counts from a caller's array, widened.
///
/// # Safety
/// `p` is null or holds `n` entries.
pub(crate) unsafe fn counts<C: CountArg>(p: *const C, n: usize, what: &str) -> MpiResult<Vec<i64>> {
    Ok((crate::collective::array(p, n, what)?.iter())
        .map(|&c| c.into())
        .collect())
}

/// A count or length that must not be negative.
pub(crate) fn nonneg(v: impl Into<i64>, what: &str) -> MpiResult<usize> {
    let v: i64 = v.into();
    usize::try_from(v).map_err(|_| MpiError {
        class: if what == "count" {
            MPI_ERR_COUNT
        } else {
            MPI_ERR_ARG
        },
        message: format!("{what} {v} is negative"),
    })
}

/// `count` blocks: lengths from `lengths`, byte offsets from `offset(i)`.
///
/// # Safety
/// `lengths` holds `count` entries, and `offset` reads `count` entries.
pub(crate) unsafe fn block_list<C: CountArg>(
    count: C,
    lengths: *const C,
    offset: impl Fn(usize) -> i128,
    offsets_null: bool,
) -> MpiResult<Vec<(usize, i128)>> {
    let n = nonneg(count, "count")?;
    if n > 0 && (lengths.is_null() || offsets_null) {
        return err(
            MPI_ERR_ARG,
            "a null array of block lengths or displacements",
        );
    }
    (0..n)
        .map(|i| Ok((nonneg(*lengths.add(i), "block length")?, offset(i))))
        .collect()
}

/// Writes the first `max` of `values` (all of them where there is room)
/// to the caller's array at `to`, which may be null only if nothing is
/// written.
///
/// # Safety
/// `to` is null or holds `max` values.
pub(crate) unsafe fn put_array<T: Copy>(
    to: *mut T,
    max: impl Into<i64>,
    values: &[T],
    what: &str,
) -> MpiResult<()> {
    let n = values.len().min(nonneg(max, what)?);
    if n > 0 {
        if to.is_null() {
            return err(MPI_ERR_ARG, format!("a null array for {what}"));
        }
        std::slice::from_raw_parts_mut(to, n).copy_from_slice(&values[..n]);
    }
    Ok(())
}
