//! More datatype constructors and queries: the subarray and the
//! hindexed block types, MPI-1's names for the `create` constructors and
//! for the bounds, the `_x` queries that answer in `MPI_Count`, and the
//! status setters for generalized requests and layered libraries.

use crate::types;
use crate::*;
use fm_mpi_macros::mpi;

use super::datatype::{recipe, Args};

use super::datatype::{
    PMPI_Get_address, PMPI_Type_create_hindexed, PMPI_Type_create_hvector, PMPI_Type_create_struct,
    PMPI_Type_get_extent, PMPI_Type_get_true_extent,
};

#[mpi]
fn PMPI_Type_create_hindexed_block(
    count: IntOrCount,
    blocklength: IntOrCount,
    displacements: *const AintOrCount,
    oldtype: Handle,
    newtype: *mut Handle,
) -> c_int {
    call("MPI_Type_create_hindexed_block", MPI_COMM_WORLD, |m| {
        let old = m.layout(oldtype)?;
        let (n, b) = (
            nonneg(count, "count")?,
            nonneg(blocklength, "block length")?,
        );
        let displacements: Vec<isize> =
            (crate::collective::array(displacements, n, "displacements")?)
                .iter()
                .map(|&d| d as isize)
                .collect();
        let blocks: Vec<(usize, i128)> = displacements.iter().map(|&d| (b, d as i128)).collect();
        let counts = [count, blocklength];
        let args = Args::counted(IntOrCount::LARGE, &[], &counts, &[], &displacements);
        let r = recipe(MPI_COMBINER_HINDEXED_BLOCK, args, &[oldtype])?;
        *arg(newtype, "the new datatype")? = types::add_made(Layout::hindexed(&blocks, &old)?, r)?;
        Ok(())
    })
}

/// `MPI_Type_create_subarray`: the block `subsizes` at `starts` of an
/// array of `sizes` (row-major for `MPI_ORDER_C`, column-major for
/// `MPI_ORDER_FORTRAN`), as a type whose extent is the whole array's.
#[mpi]
fn PMPI_Type_create_subarray(
    ndims: c_int,
    sizes: *const IntOrCount,
    subsizes: *const IntOrCount,
    starts: *const IntOrCount,
    order: c_int,
    oldtype: Handle,
    newtype: *mut Handle,
) -> c_int {
    call("MPI_Type_create_subarray", MPI_COMM_WORLD, |m| {
        let n = nonneg(ndims, "number of dimensions")?;
        if n == 0 {
            return err(MPI_ERR_ARG, "a subarray of no dimensions");
        }
        let (mut sizes, mut subsizes, mut starts) = (
            counts(sizes, n, "sizes")?,
            counts(subsizes, n, "subsizes")?,
            counts(starts, n, "starts")?,
        );
        let counts = [&sizes[..], &subsizes, &starts].concat();
        let args = Args::counted(IntOrCount::LARGE, &[ndims], &counts, &[order], &[]);
        let r = recipe(MPI_COMBINER_SUBARRAY, args, &[oldtype])?;
        match order {
            MPI_ORDER_C => {}
            MPI_ORDER_FORTRAN => {
                sizes.reverse();
                subsizes.reverse();
                starts.reverse();
            }
            o => {
                return err(
                    MPI_ERR_ARG,
                    format!("order {o} is neither MPI_ORDER_C nor MPI_ORDER_FORTRAN"),
                )
            }
        }
        for i in 0..n {
            let (size, sub, start) = (sizes[i], subsizes[i], starts[i]);
            if size < 1 || sub < 0 || sub > size || start < 0 || start > size - sub {
                return err(
                    MPI_ERR_ARG,
                    format!("dimension {i}: a block of {sub} from {start} does not fit {size}"),
                );
            }
        }
        let old = m.layout(oldtype)?;
        let e = old.extent as i128;
        // The fastest dimension's run, then each slower one's copies of
        // it a row apart; then placed at its start in a type as large
        // as the whole array.
        let mut t = Layout::hvector(1, subsizes[n - 1] as usize, 0, &old)?;
        let mut row = sizes[n - 1] as i128 * e;
        let mut at = starts[n - 1] as i128 * e;
        for i in (0..n - 1).rev() {
            t = Layout::hvector(subsizes[i] as usize, 1, row, &t)?;
            at += starts[i] as i128 * row;
            row *= sizes[i] as i128;
        }
        let placed = Layout::hindexed(&[(1, at)], &t)?;
        let Ok(extent) = isize::try_from(row) else {
            return err(MPI_ERR_ARG, "the array's extent does not fit an address");
        };
        *arg(newtype, "the new datatype")? =
            types::add_made(Layout::resized(&placed, 0, extent), r)?;
        Ok(())
    })
}

#[mpi]
fn PMPI_Type_hvector(
    count: c_int,
    blocklength: c_int,
    stride: isize,
    oldtype: Handle,
    newtype: *mut Handle,
) -> c_int {
    PMPI_Type_create_hvector(count, blocklength, stride, oldtype, newtype)
}

#[mpi]
fn PMPI_Type_hindexed(
    count: c_int,
    blocklengths: *const c_int,
    displacements: *const isize,
    oldtype: Handle,
    newtype: *mut Handle,
) -> c_int {
    PMPI_Type_create_hindexed(count, blocklengths, displacements, oldtype, newtype)
}

#[mpi]
fn PMPI_Type_struct(
    count: c_int,
    blocklengths: *const c_int,
    displacements: *const isize,
    types: *const Handle,
    newtype: *mut Handle,
) -> c_int {
    PMPI_Type_create_struct(count, blocklengths, displacements, types, newtype)
}

#[mpi]
fn PMPI_Address(location: *const c_void, address: *mut isize) -> c_int {
    PMPI_Get_address(location, address)
}

/// One of a type's bounds, as MPI-1's queries give them.
unsafe fn bound(datatype: Handle, out: *mut isize, pick: fn(isize, isize) -> isize) -> c_int {
    let (mut lb, mut extent) = (0, 0);
    match PMPI_Type_get_extent(datatype, &mut lb, &mut extent) {
        MPI_SUCCESS if out.is_null() => MPI_ERR_ARG,
        MPI_SUCCESS => {
            *out = pick(lb, extent);
            MPI_SUCCESS
        }
        e => e,
    }
}

#[mpi]
fn PMPI_Type_extent(datatype: Handle, extent: *mut isize) -> c_int {
    bound(datatype, extent, |_, e| e)
}

#[mpi]
fn PMPI_Type_lb(datatype: Handle, displacement: *mut isize) -> c_int {
    bound(datatype, displacement, |lb, _| lb)
}

#[mpi]
fn PMPI_Type_ub(datatype: Handle, displacement: *mut isize) -> c_int {
    bound(datatype, displacement, |lb, e| lb + e)
}

#[mpi]
fn PMPI_Type_size_x(datatype: Handle, size: *mut i64) -> c_int {
    query("MPI_Type_size_x", || {
        *arg(size, "the size")? = crate::types::layout(datatype)?.size as i64;
        Ok(())
    })
}

/// A pair of `MPI_Aint` answers widened to `MPI_Count`.
unsafe fn widened(
    f: unsafe extern "C" fn(Handle, *mut isize, *mut isize) -> c_int,
    datatype: Handle,
    a: *mut i64,
    b: *mut i64,
) -> c_int {
    let (mut x, mut y) = (0, 0);
    match f(datatype, &mut x, &mut y) {
        MPI_SUCCESS if a.is_null() || b.is_null() => MPI_ERR_ARG,
        MPI_SUCCESS => {
            (*a, *b) = (x as i64, y as i64);
            MPI_SUCCESS
        }
        e => e,
    }
}

#[mpi]
fn PMPI_Type_get_extent_x(datatype: Handle, lb: *mut i64, extent: *mut i64) -> c_int {
    widened(PMPI_Type_get_extent, datatype, lb, extent)
}

#[mpi]
fn PMPI_Type_get_true_extent_x(datatype: Handle, lb: *mut i64, extent: *mut i64) -> c_int {
    widened(PMPI_Type_get_true_extent, datatype, lb, extent)
}

#[mpi]
fn PMPI_Get_elements_x(status: *const MpiStatus, datatype: Handle, count: *mut i64) -> c_int {
    if count.is_null() {
        return MPI_ERR_ARG;
    }
    match elements_in_status(status, datatype, true) {
        Ok(n) => {
            *count = n.map_or(i64::from(MPI_UNDEFINED), |n| n.min(i64::MAX as u64) as i64);
            MPI_SUCCESS
        }
        Err(class) => class,
    }
}

/// `MPI_Status_set_elements(_x)`: the status says `count` elements of
/// `datatype` arrived.
unsafe fn set_elements(name: &str, status: *mut MpiStatus, datatype: Handle, count: i64) -> c_int {
    query(name, || {
        let s = arg(status, "the status")?;
        let size = crate::types::layout(datatype)?.size as u64;
        let count =
            u64::try_from(count).or_else(|_| err(MPI_ERR_COUNT, format!("count {count}")))?;
        let cancelled = s.count_hi_and_cancelled & 1;
        let fresh = MpiStatus::new(s.source, s.tag, (count * size) as usize, s.error);
        *s = MpiStatus {
            count_hi_and_cancelled: fresh.count_hi_and_cancelled | cancelled,
            ..fresh
        };
        Ok(())
    })
}

#[mpi]
fn PMPI_Status_set_elements(status: *mut MpiStatus, datatype: Handle, count: c_int) -> c_int {
    set_elements(
        "MPI_Status_set_elements",
        status,
        datatype,
        i64::from(count),
    )
}

#[mpi]
fn PMPI_Status_set_elements_x(status: *mut MpiStatus, datatype: Handle, count: i64) -> c_int {
    set_elements("MPI_Status_set_elements_x", status, datatype, count)
}

#[mpi]
fn PMPI_Status_set_cancelled(status: *mut MpiStatus, flag: c_int) -> c_int {
    match status.as_mut() {
        None => MPI_ERR_ARG,
        Some(s) => {
            s.count_hi_and_cancelled = (s.count_hi_and_cancelled & !1) | c_int::from(flag != 0);
            MPI_SUCCESS
        }
    }
}

/// `MPI_Type_get_envelope`: how `datatype` was made, and how many
/// arguments of each kind its constructor took. A datatype a `_c`
/// constructor made has large counts, which only the `_c` query and
/// `MPI_Type_get_contents_c` give (MPI-4.0 §5.1.13): `MPI_ERR_TYPE` here.
#[mpi]
fn PMPI_Type_get_envelope(
    datatype: Handle,
    num_integers: *mut c_int,
    num_addresses: *mut c_int,
    num_datatypes: *mut c_int,
    combiner: *mut c_int,
) -> c_int {
    query("MPI_Type_get_envelope", || {
        let (ni, na, nl, nt, c) = envelope(datatype)?;
        if nl > 0 {
            return large_counts("MPI_Type_get_envelope");
        }
        *arg(num_integers, "the number of integers")? = ni as c_int;
        *arg(num_addresses, "the number of addresses")? = na as c_int;
        *arg(num_datatypes, "the number of datatypes")? = nt as c_int;
        *arg(combiner, "the combiner")? = c;
        Ok(())
    })
}

/// `MPI_Type_get_envelope_c`: [`PMPI_Type_get_envelope`]'s answer with
/// the number of large counts too.
#[mpi]
fn PMPI_Type_get_envelope_c(
    datatype: Handle,
    num_integers: *mut MPI_Count,
    num_addresses: *mut MPI_Count,
    num_large_counts: *mut MPI_Count,
    num_datatypes: *mut MPI_Count,
    combiner: *mut c_int,
) -> c_int {
    query("MPI_Type_get_envelope_c", || {
        let (ni, na, nl, nt, c) = envelope(datatype)?;
        *arg(num_integers, "the number of integers")? = ni as MPI_Count;
        *arg(num_addresses, "the number of addresses")? = na as MPI_Count;
        *arg(num_large_counts, "the number of large counts")? = nl as MPI_Count;
        *arg(num_datatypes, "the number of datatypes")? = nt as MPI_Count;
        *arg(combiner, "the combiner")? = c;
        Ok(())
    })
}

/// How many integers, addresses, large counts and datatypes made
/// `datatype`, and its combiner.
fn envelope(datatype: Handle) -> MpiResult<(usize, usize, usize, usize, c_int)> {
    Ok(match types::recipe(datatype) {
        Some(r) => (
            r.ints.len(),
            r.addresses.len(),
            r.large.len(),
            r.types.len(),
            r.combiner,
        ),
        None => {
            types::layout(datatype)?;
            (0, 0, 0, 0, MPI_COMBINER_NAMED)
        }
    })
}

fn large_counts<T>(func: &str) -> MpiResult<T> {
    err(
        MPI_ERR_TYPE,
        format!(
            "the datatype was made by a large-count (_c) constructor: {func}_c tells its arguments"
        ),
    )
}

/// `MPI_Type_get_contents`: the constructor's arguments; a derived
/// datatype among them comes back as a new datatype the program frees.
#[mpi]
fn PMPI_Type_get_contents(
    datatype: Handle,
    max_integers: c_int,
    max_addresses: c_int,
    max_datatypes: c_int,
    integers: *mut c_int,
    addresses: *mut isize,
    datatypes: *mut Handle,
) -> c_int {
    query("MPI_Type_get_contents", || {
        if envelope(datatype)?.2 > 0 {
            return large_counts("MPI_Type_get_contents");
        }
        let max = [max_integers, max_addresses, 0, max_datatypes].map(i64::from);
        contents(
            datatype,
            max,
            integers,
            addresses,
            std::ptr::null_mut(),
            datatypes,
        )
    })
}

/// `MPI_Type_get_contents_c`: with the large counts too.
#[mpi]
#[allow(clippy::too_many_arguments)]
fn PMPI_Type_get_contents_c(
    datatype: Handle,
    max_integers: MPI_Count,
    max_addresses: MPI_Count,
    max_large_counts: MPI_Count,
    max_datatypes: MPI_Count,
    integers: *mut c_int,
    addresses: *mut isize,
    large_counts: *mut MPI_Count,
    datatypes: *mut Handle,
) -> c_int {
    query("MPI_Type_get_contents_c", || {
        let max = [max_integers, max_addresses, max_large_counts, max_datatypes];
        contents(datatype, max, integers, addresses, large_counts, datatypes)
    })
}

/// The arguments that made `datatype`, into arrays with room for `max`
/// of each kind (integers, addresses, large counts, datatypes).
unsafe fn contents(
    datatype: Handle,
    max: [i64; 4],
    integers: *mut c_int,
    addresses: *mut isize,
    large_counts: *mut MPI_Count,
    datatypes: *mut Handle,
) -> MpiResult<()> {
    let Some(r) = types::recipe(datatype) else {
        types::layout(datatype)?;
        return err(
            MPI_ERR_TYPE,
            "a predefined datatype has no contents (MPI_COMBINER_NAMED)",
        );
    };
    let room = |max: i64, need: usize, out_null: bool, what: &str| match usize::try_from(max) {
        Ok(m) if m >= need && (need == 0 || !out_null) => Ok(()),
        _ => err(
            MPI_ERR_ARG,
            format!("room for {max} {what} (or a null array), not the {need} there are"),
        ),
    };
    let [mi, ma, ml, mt] = max;
    room(mi, r.ints.len(), integers.is_null(), "integers")?;
    room(ma, r.addresses.len(), addresses.is_null(), "addresses")?;
    room(ml, r.large.len(), large_counts.is_null(), "large counts")?;
    room(mt, r.types.len(), datatypes.is_null(), "datatypes")?;
    let handles = (r.types.iter())
        .map(types::handle_of)
        .collect::<MpiResult<Vec<_>>>()?;
    // The room is checked above, before any new datatype is made.
    put_array(integers, r.ints.len() as i64, &r.ints, "integers")?;
    put_array(
        addresses,
        r.addresses.len() as i64,
        &r.addresses,
        "addresses",
    )?;
    put_array(large_counts, r.large.len() as i64, &r.large, "large counts")?;
    put_array(datatypes, handles.len() as i64, &handles, "datatypes")
}

/// `MPI_Type_match_size`: the predefined type of a class and size, as
/// MPICH gives it (Fortran's sized types: `MPI_REAL4`, `MPI_INTEGER8`,
/// `MPI_COMPLEX16`…); a size the class has no type of is `MPI_ERR_ARG`.
#[mpi]
fn PMPI_Type_match_size(typeclass: c_int, size: c_int, datatype: *mut Handle) -> c_int {
    call("MPI_Type_match_size", MPI_COMM_WORLD, |_| {
        let out = arg(datatype, "the datatype")?;
        let t: Option<u32> = match (typeclass, size) {
            (MPI_TYPECLASS_REAL, 4) => Some(0x4c00_0427),
            (MPI_TYPECLASS_REAL, 8) => Some(0x4c00_0829),
            (MPI_TYPECLASS_REAL, 16) => Some(0x4c00_102b),
            (MPI_TYPECLASS_INTEGER, 1) => Some(0x4c00_012d),
            (MPI_TYPECLASS_INTEGER, 2) => Some(0x4c00_022f),
            (MPI_TYPECLASS_INTEGER, 4) => Some(0x4c00_0430),
            (MPI_TYPECLASS_INTEGER, 8) => Some(0x4c00_0831),
            (MPI_TYPECLASS_COMPLEX, 8) => Some(0x4c00_0828),
            (MPI_TYPECLASS_COMPLEX, 16) => Some(0x4c00_102a),
            (MPI_TYPECLASS_COMPLEX, 32) => Some(0x4c00_202c),
            _ => None,
        };
        match t {
            Some(t) => {
                *out = t as Handle;
                Ok(())
            }
            None => err(
                MPI_ERR_ARG,
                format!("no predefined type of class {typeclass} has {size} bytes"),
            ),
        }
    })
}
