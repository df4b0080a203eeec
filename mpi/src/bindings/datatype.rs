//! Datatypes, packing, and counts from a status.

use crate::collective;
use crate::types::{Made, Recipe};
use crate::*;
use fm_mpi_macros::mpi;

#[mpi]
fn PMPI_Type_contiguous(count: IntOrCount, oldtype: Handle, newtype: *mut Handle) -> c_int {
    call("MPI_Type_contiguous", MPI_COMM_WORLD, |m| {
        let old = m.layout(oldtype)?;
        let l = Layout::hvector(nonneg(count, "count")?, 1, old.extent as i128, &old)?;
        let args = Args::counted(IntOrCount::LARGE, &[], &[count], &[], &[]);
        let r = recipe(MPI_COMBINER_CONTIGUOUS, args, &[oldtype])?;
        *arg(newtype, "the new datatype")? = types::add_made(l, r)?;
        Ok(())
    })
}

#[mpi]
fn PMPI_Type_vector(
    count: IntOrCount,
    blocklength: IntOrCount,
    stride: IntOrCount,
    oldtype: Handle,
    newtype: *mut Handle,
) -> c_int {
    call("MPI_Type_vector", MPI_COMM_WORLD, |m| {
        let old = m.layout(oldtype)?;
        let (n, b) = (
            nonneg(count, "count")?,
            nonneg(blocklength, "block length")?,
        );
        let l = Layout::hvector(n, b, stride as i128 * old.extent as i128, &old)?;
        let counts = [count, blocklength, stride];
        let args = Args::counted(IntOrCount::LARGE, &[], &counts, &[], &[]);
        let r = recipe(MPI_COMBINER_VECTOR, args, &[oldtype])?;
        *arg(newtype, "the new datatype")? = types::add_made(l, r)?;
        Ok(())
    })
}

#[mpi]
fn PMPI_Type_create_hvector(
    count: IntOrCount,
    blocklength: IntOrCount,
    stride: AintOrCount,
    oldtype: Handle,
    newtype: *mut Handle,
) -> c_int {
    call("MPI_Type_create_hvector", MPI_COMM_WORLD, |m| {
        let old = m.layout(oldtype)?;
        let (n, b) = (
            nonneg(count, "count")?,
            nonneg(blocklength, "block length")?,
        );
        let l = Layout::hvector(n, b, stride as i128, &old)?;
        let counts = [count, blocklength];
        let args = Args::counted(IntOrCount::LARGE, &[], &counts, &[], &[stride as isize]);
        let r = recipe(MPI_COMBINER_HVECTOR, args, &[oldtype])?;
        *arg(newtype, "the new datatype")? = types::add_made(l, r)?;
        Ok(())
    })
}

#[mpi]
fn PMPI_Type_indexed(
    count: IntOrCount,
    blocklengths: *const IntOrCount,
    displacements: *const IntOrCount,
    oldtype: Handle,
    newtype: *mut Handle,
) -> c_int {
    call("MPI_Type_indexed", MPI_COMM_WORLD, |m| {
        let old = m.layout(oldtype)?;
        let blocks = block_list(
            count,
            blocklengths,
            |i| *displacements.add(i) as i128 * old.extent as i128,
            displacements.is_null(),
        )?;
        let n = blocks.len();
        let counts = [
            &[count][..],
            collective::array(blocklengths, n, "block lengths")?,
            collective::array(displacements, n, "displacements")?,
        ]
        .concat();
        let args = Args::counted(IntOrCount::LARGE, &[], &counts, &[], &[]);
        let r = recipe(MPI_COMBINER_INDEXED, args, &[oldtype])?;
        *arg(newtype, "the new datatype")? = types::add_made(Layout::hindexed(&blocks, &old)?, r)?;
        Ok(())
    })
}

#[mpi]
fn PMPI_Type_create_hindexed(
    count: IntOrCount,
    blocklengths: *const IntOrCount,
    displacements: *const AintOrCount,
    oldtype: Handle,
    newtype: *mut Handle,
) -> c_int {
    call("MPI_Type_create_hindexed", MPI_COMM_WORLD, |m| {
        let old = m.layout(oldtype)?;
        let blocks = block_list(
            count,
            blocklengths,
            |i| *displacements.add(i) as i128,
            displacements.is_null(),
        )?;
        let n = blocks.len();
        let counts = [
            &[count][..],
            collective::array(blocklengths, n, "block lengths")?,
        ]
        .concat();
        let addresses = addresses(displacements, n)?;
        let args = Args::counted(IntOrCount::LARGE, &[], &counts, &[], &addresses);
        let r = recipe(MPI_COMBINER_HINDEXED, args, &[oldtype])?;
        *arg(newtype, "the new datatype")? = types::add_made(Layout::hindexed(&blocks, &old)?, r)?;
        Ok(())
    })
}

#[mpi]
fn PMPI_Type_create_indexed_block(
    count: IntOrCount,
    blocklength: IntOrCount,
    displacements: *const IntOrCount,
    oldtype: Handle,
    newtype: *mut Handle,
) -> c_int {
    call("MPI_Type_create_indexed_block", MPI_COMM_WORLD, |m| {
        let old = m.layout(oldtype)?;
        let b = nonneg(blocklength, "block length")?;
        let n = nonneg(count, "count")?;
        let displacements = collective::array(displacements, n, "displacements")?;
        let blocks: Vec<(usize, i128)> = (displacements.iter())
            .map(|&d| (b, d as i128 * old.extent as i128))
            .collect();
        let counts = [&[count, blocklength][..], displacements].concat();
        let args = Args::counted(IntOrCount::LARGE, &[], &counts, &[], &[]);
        let r = recipe(MPI_COMBINER_INDEXED_BLOCK, args, &[oldtype])?;
        *arg(newtype, "the new datatype")? = types::add_made(Layout::hindexed(&blocks, &old)?, r)?;
        Ok(())
    })
}

#[mpi]
fn PMPI_Type_create_struct(
    count: IntOrCount,
    blocklengths: *const IntOrCount,
    displacements: *const AintOrCount,
    types: *const Handle,
    newtype: *mut Handle,
) -> c_int {
    call("MPI_Type_create_struct", MPI_COMM_WORLD, |m| {
        let n = nonneg(count, "count")?;
        if n > 0 && (blocklengths.is_null() || displacements.is_null() || types.is_null()) {
            return err(
                MPI_ERR_ARG,
                "a null array of block lengths, displacements or types",
            );
        }
        // MPI-1's bound markers set the bounds instead of holding data.
        let (mut lbs, mut ubs, mut real) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..n {
            let at = *displacements.add(i) as isize;
            match *types.add(i) {
                LB_MARKER => lbs.push(at),
                UB_MARKER => ubs.push(at),
                t => real.push((
                    m.layout(t)?,
                    nonneg(*blocklengths.add(i), "block length")?,
                    at,
                )),
            }
        }
        let blocks: Vec<_> = (real.iter())
            .map(|(l, len, at)| (*len, *at as i128, &**l))
            .collect();
        let data = Layout::structure(&blocks)?;
        let layout = if lbs.is_empty() && ubs.is_empty() {
            data
        } else {
            // Without a marker, a bound is the data's (0 with no data).
            let has_data = !data.blocks.is_empty();
            let lb = (lbs.iter().copied().min()).unwrap_or(if has_data { data.lb } else { 0 });
            let ub = (ubs.iter().copied().max()).unwrap_or(if has_data {
                data.lb + data.extent
            } else {
                0
            });
            Layout::resized(&data, lb, ub - lb)
        };
        let counts = [
            &[count][..],
            collective::array(blocklengths, n, "block lengths")?,
        ]
        .concat();
        let addresses = addresses(displacements, n)?;
        let args = Args::counted(IntOrCount::LARGE, &[], &counts, &[], &addresses);
        let r = recipe(
            MPI_COMBINER_STRUCT,
            args,
            collective::ints(types, n, "datatypes")?,
        )?;
        *arg(newtype, "the new datatype")? = types::add_made(layout, r)?;
        Ok(())
    })
}

#[mpi]
fn PMPI_Type_create_resized(
    oldtype: Handle,
    lb: AintOrCount,
    extent: AintOrCount,
    newtype: *mut Handle,
) -> c_int {
    call("MPI_Type_create_resized", MPI_COMM_WORLD, |m| {
        let old = m.layout(oldtype)?;
        let (lb, extent) = (lb as isize, extent as isize);
        let args = Args::counted(AintOrCount::LARGE, &[], &[0; 0], &[], &[lb, extent]);
        let r = recipe(MPI_COMBINER_RESIZED, args, &[oldtype])?;
        *arg(newtype, "the new datatype")? = types::add_made(Layout::resized(&old, lb, extent), r)?;
        Ok(())
    })
}

/// `n` addresses from a caller's array (`MPI_Aint`, or `MPI_Count` in a
/// `_c` function).
///
/// # Safety
/// `p` is null or holds `n` entries.
unsafe fn addresses<A: Copy + TryInto<isize>>(p: *const A, n: usize) -> MpiResult<Vec<isize>> {
    Ok((collective::array(p, n, "displacements")?.iter())
        .map(|&a| a.try_into().unwrap_or(isize::MAX))
        .collect())
}

#[mpi]
fn PMPI_Type_commit(datatype: *mut Handle) -> c_int {
    call("MPI_Type_commit", MPI_COMM_WORLD, |m| {
        let h = *arg(datatype, "the datatype")?;
        if is_predefined_type(h) {
            return Ok(());
        }
        let l = m.derived(h)?;
        if !l.committed {
            let committed = Layout {
                committed: true,
                ..(*l).clone()
            };
            types::replace(h, Some(committed));
        }
        Ok(())
    })
}

#[mpi]
fn PMPI_Type_free(datatype: *mut Handle) -> c_int {
    let h = if datatype.is_null() {
        MPI_DATATYPE_NULL
    } else {
        *datatype
    };
    // The attributes go first, their delete callbacks outside the lock,
    // while the datatype is still there for them to look at.
    let deleted = call_with_callbacks("MPI_Type_free", MPI_COMM_WORLD, |m| {
        m.derived(h)?;
        if super::f90::is_f90(h) {
            return err(
                MPI_ERR_TYPE,
                "a type MPI_Type_create_f90_* gave is predefined and is not freed",
            );
        }
        Ok(m.attrs.clear(h))
    });
    if let Err(class) = deleted {
        return class;
    }
    call("MPI_Type_free", MPI_COMM_WORLD, |m| {
        let datatype = arg(datatype, "the datatype")?;
        m.derived(h)?;
        m.remove_type(h);
        *datatype = MPI_DATATYPE_NULL;
        Ok(())
    })
}

#[mpi]
fn PMPI_Type_size(datatype: Handle, size: *mut IntOrCount) -> c_int {
    query("MPI_Type_size", || {
        let l = types::layout(datatype)?;
        *arg(size, "the size")? =
            IntOrCount::try_from(l.size).unwrap_or(IntOrCount::from(MPI_UNDEFINED));
        Ok(())
    })
}

#[mpi]
fn PMPI_Type_get_extent(datatype: Handle, lb: *mut AintOrCount, extent: *mut AintOrCount) -> c_int {
    query("MPI_Type_get_extent", || {
        let l = types::layout(datatype)?;
        *arg(lb, "the lower bound")? = l.lb as AintOrCount;
        *arg(extent, "the extent")? = l.extent as AintOrCount;
        Ok(())
    })
}

#[mpi]
fn PMPI_Type_get_true_extent(
    datatype: Handle,
    lb: *mut AintOrCount,
    extent: *mut AintOrCount,
) -> c_int {
    query("MPI_Type_get_true_extent", || {
        let l = types::layout(datatype)?;
        *arg(lb, "the lower bound")? = l.true_lb as AintOrCount;
        *arg(extent, "the extent")? = (l.true_ub - l.true_lb) as AintOrCount;
        Ok(())
    })
}

#[mpi]
fn PMPI_Pack(
    inbuf: *const c_void,
    incount: IntOrCount,
    datatype: Handle,
    outbuf: *mut c_void,
    outsize: IntOrCount,
    position: *mut IntOrCount,
    comm: Handle,
) -> c_int {
    call("MPI_Pack", comm, |m| {
        let position = arg(position, "the position")?;
        let l = m.layout(datatype)?;
        let n = nonneg(incount, "count")?;
        let bytes = data_bytes(n, &l)?;
        check_buffer(inbuf, bytes, datatype)?;
        let at = within(*position, bytes, outsize)?;
        let mut data = Vec::with_capacity(bytes);
        l.pack(inbuf.cast(), n, &mut data);
        if bytes > 0 {
            std::ptr::copy_nonoverlapping(data.as_ptr(), outbuf.cast::<u8>().add(at), bytes);
        }
        *position += bytes as IntOrCount;
        Ok(())
    })
}

#[mpi]
fn PMPI_Unpack(
    inbuf: *const c_void,
    insize: IntOrCount,
    position: *mut IntOrCount,
    outbuf: *mut c_void,
    outcount: IntOrCount,
    datatype: Handle,
    comm: Handle,
) -> c_int {
    call("MPI_Unpack", comm, |m| {
        let position = arg(position, "the position")?;
        let l = m.layout(datatype)?;
        let n = nonneg(outcount, "count")?;
        let bytes = data_bytes(n, &l)?;
        check_buffer(outbuf, bytes, datatype)?;
        let at = within(*position, bytes, insize)?;
        let data = slice_or_empty(inbuf.cast::<u8>().wrapping_add(at), bytes);
        l.unpack(data, outbuf.cast(), n);
        *position += bytes as IntOrCount;
        Ok(())
    })
}

#[mpi]
fn PMPI_Pack_size(
    incount: IntOrCount,
    datatype: Handle,
    comm: Handle,
    size: *mut IntOrCount,
) -> c_int {
    call("MPI_Pack_size", comm, |m| {
        let l = m.layout(datatype)?;
        let bytes = data_bytes(nonneg(incount, "count")?, &l)?;
        *arg(size, "the size")? = IntOrCount::try_from(bytes).map_err(|_| MpiError {
            class: MPI_ERR_COUNT,
            message: format!("{bytes} bytes are more than the size argument holds"),
        })?;
        Ok(())
    })
}

#[mpi]
fn PMPI_Get_address(location: *const c_void, address: *mut isize) -> c_int {
    if address.is_null() {
        return MPI_ERR_ARG;
    }
    *address = location as isize;
    MPI_SUCCESS
}

#[mpi]
fn PMPI_Get_count(status: *const MpiStatus, datatype: Handle, count: *mut IntOrCount) -> c_int {
    count_in_status(status, datatype, count, false)
}

#[mpi]
fn PMPI_Get_elements(status: *const MpiStatus, datatype: Handle, count: *mut IntOrCount) -> c_int {
    count_in_status(status, datatype, count, true)
}

/// A constructor's integer, address and large-count arguments, as
/// `MPI_Type_get_contents` gives them back.
#[derive(Default)]
pub(super) struct Args {
    pub(super) ints: Vec<c_int>,
    pub(super) addresses: Vec<isize>,
    pub(super) large: Vec<i64>,
}

impl Args {
    /// A constructor with count arguments (MPI-4.0 §5.1.13): called in its
    /// classic form, `before`, `counts` and `after` are its integers and
    /// `addresses` its addresses; called in its `_c` form (`large`),
    /// `counts` and then `addresses` are its large counts, and only
    /// `before` and `after` are integers.
    pub(super) fn counted<C: CountArg>(
        large: bool,
        before: &[c_int],
        counts: &[C],
        after: &[c_int],
        addresses: &[isize],
    ) -> Args {
        let counts = counts.iter().map(|&c| c.into());
        match large {
            false => Args {
                ints: (before.iter().copied())
                    .chain(counts.map(|c| c as c_int))
                    .chain(after.iter().copied())
                    .collect(),
                addresses: addresses.to_vec(),
                large: Vec::new(),
            },
            true => Args {
                ints: [before, after].concat(),
                addresses: Vec::new(),
                large: counts.chain(addresses.iter().map(|&a| a as i64)).collect(),
            },
        }
    }
}

/// A constructor's recipe: its combiner, arguments, and the datatypes
/// it was given (kept as they are now).
pub(super) fn recipe(combiner: c_int, args: Args, types: &[Handle]) -> MpiResult<Recipe> {
    Ok(Recipe {
        combiner,
        ints: args.ints,
        addresses: args.addresses,
        large: args.large,
        types: types
            .iter()
            .map(|&t| Made::of(t))
            .collect::<MpiResult<_>>()?,
    })
}

/// Where `bytes` bytes at `position` of a pack buffer of `size` bytes
/// start (`MPI_Pack`, `MPI_Unpack` and their external32 forms): the
/// position, if they fit; `MPI_ERR_TRUNCATE` if not.
fn within(position: impl Into<i64>, bytes: usize, size: impl Into<i64>) -> MpiResult<usize> {
    let (position, size) = (position.into(), size.into());
    usize::try_from(position)
        .ok()
        .filter(|&p| p + bytes <= usize::try_from(size).unwrap_or(0))
        .ok_or_else(|| MpiError {
            class: MPI_ERR_TRUNCATE,
            message: format!("{bytes} bytes at position {position} are not within {size}"),
        })
}

/// The one data representation `MPI_Pack_external` writes.
unsafe fn external32(datarep: *const c_char) -> MpiResult<()> {
    match crate::info::c_str(datarep, "the data representation")? {
        "external32" => Ok(()),
        other => err(
            MPI_ERR_ARG,
            format!("data representation \"{other}\": fm packs only \"external32\""),
        ),
    }
}

/// `MPI_Pack_external`: `incount` elements, in external32
/// (`crate::external32`), at `*position` of `outbuf`.
#[mpi]
fn PMPI_Pack_external(
    datarep: *const c_char,
    inbuf: *const c_void,
    incount: IntOrCount,
    datatype: Handle,
    outbuf: *mut c_void,
    outsize: AintOrCount,
    position: *mut AintOrCount,
) -> c_int {
    call("MPI_Pack_external", MPI_COMM_WORLD, |m| {
        external32(datarep)?;
        let position = arg(position, "the position")?;
        let l = m.layout(datatype)?;
        let n = nonneg(incount, "count")?;
        check_buffer(inbuf, data_bytes(n, &l)?, datatype)?;
        let mut data = Vec::new();
        l.pack_external(inbuf.cast(), n, &mut data);
        let at = within(*position as i64, data.len(), outsize as i64)?;
        if !data.is_empty() {
            std::ptr::copy_nonoverlapping(data.as_ptr(), outbuf.cast::<u8>().add(at), data.len());
        }
        *position += data.len() as AintOrCount;
        Ok(())
    })
}

/// `MPI_Unpack_external`: `outcount` elements from external32 at
/// `*position` of `inbuf`.
#[mpi]
fn PMPI_Unpack_external(
    datarep: *const c_char,
    inbuf: *const c_void,
    insize: AintOrCount,
    position: *mut AintOrCount,
    outbuf: *mut c_void,
    outcount: IntOrCount,
    datatype: Handle,
) -> c_int {
    call("MPI_Unpack_external", MPI_COMM_WORLD, |m| {
        external32(datarep)?;
        let position = arg(position, "the position")?;
        let l = m.layout(datatype)?;
        let n = nonneg(outcount, "count")?;
        check_buffer(outbuf, data_bytes(n, &l)?, datatype)?;
        let bytes = l.external_size(n).ok_or_else(|| MpiError {
            class: MPI_ERR_COUNT,
            message: format!("{n} elements do not fit an address in external32"),
        })?;
        let at = within(*position as i64, bytes, insize as i64)?;
        let data = slice_or_empty(inbuf.cast::<u8>().wrapping_add(at), bytes);
        l.unpack_external(data, outbuf.cast(), n);
        *position += bytes as AintOrCount;
        Ok(())
    })
}

/// `MPI_Pack_external_size`: the bytes `incount` elements take in
/// external32.
#[mpi]
fn PMPI_Pack_external_size(
    datarep: *const c_char,
    incount: IntOrCount,
    datatype: Handle,
    size: *mut AintOrCount,
) -> c_int {
    call("MPI_Pack_external_size", MPI_COMM_WORLD, |m| {
        external32(datarep)?;
        let l = m.layout(datatype)?;
        let n = nonneg(incount, "count")?;
        let bytes = l.external_size(n).ok_or_else(|| MpiError {
            class: MPI_ERR_COUNT,
            message: format!("{n} elements do not fit an address in external32"),
        })?;
        *arg(size, "the size")? = bytes as AintOrCount;
        Ok(())
    })
}
