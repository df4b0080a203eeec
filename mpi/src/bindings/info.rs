//! Info objects, memory for MPI, object names, duplicated types and
//! dimensions for a grid.

use crate::info::{c_str, info_call, key, InfoTable};
use crate::*;
use fm_mpi_macros::mpi;

#[mpi]
fn PMPI_Info_create(info: *mut Handle) -> c_int {
    info_call("MPI_Info_create", |t| {
        let out = arg(info, "the info object")?;
        *out = t.add(Vec::new())?;
        Ok(())
    })
}

#[mpi]
fn PMPI_Info_create_env(_argc: c_int, _argv: *mut *mut c_char, info: *mut Handle) -> c_int {
    info_call("MPI_Info_create_env", |t| {
        let out = arg(info, "the info object")?;
        let env = t.get(MPI_INFO_ENV)?;
        *out = t.add(env)?;
        Ok(())
    })
}

#[mpi]
fn PMPI_Info_set(info: Handle, k: *const c_char, value: *const c_char) -> c_int {
    info_call("MPI_Info_set", |t| {
        let k = key(c_str(k, "key")?)?.to_string();
        let v = c_str(value, "value")?;
        if v.len() > MPI_MAX_INFO_VAL {
            return err(
                MPI_ERR_INFO_VALUE,
                format!(
                    "an info value has at most {MPI_MAX_INFO_VAL} characters, not {}",
                    v.len()
                ),
            );
        }
        let e = t.get_mut(info)?;
        match e.iter_mut().find(|(x, _)| *x == k) {
            Some((_, old)) => *old = v.to_string(),
            None => e.push((k, v.to_string())),
        }
        Ok(())
    })
}

#[mpi]
fn PMPI_Info_delete(info: Handle, k: *const c_char) -> c_int {
    info_call("MPI_Info_delete", |t| {
        let k = key(c_str(k, "key")?)?.to_string();
        let e = t.get_mut(info)?;
        match e.iter().position(|(x, _)| *x == k) {
            Some(i) => {
                e.remove(i);
                Ok(())
            }
            None => err(
                MPI_ERR_INFO_NOKEY,
                format!("no key {k:?} in the info object"),
            ),
        }
    })
}

/// The value of key `k` in info object `info`, if set.
unsafe fn value_of(t: &InfoTable, info: Handle, k: *const c_char) -> MpiResult<Option<String>> {
    let k = key(c_str(k, "key")?)?;
    Ok(t.get(info)?
        .into_iter()
        .find(|(x, _)| x == k)
        .map(|(_, v)| v))
}

#[mpi]
fn PMPI_Info_get(
    info: Handle,
    k: *const c_char,
    valuelen: c_int,
    value: *mut c_char,
    flag: *mut c_int,
) -> c_int {
    info_call("MPI_Info_get", |t| {
        let flag = arg(flag, "the flag")?;
        let max = nonneg(valuelen, "value length")?;
        let v = value_of(t, info, k)?;
        *flag = c_int::from(v.is_some());
        if let Some(v) = v {
            if value.is_null() {
                return err(MPI_ERR_ARG, "a null value buffer");
            }
            // `valuelen` characters and the NUL (MPI's rule for the buffer).
            put_string(&v, value, max + 1, std::ptr::null_mut());
        }
        Ok(())
    })
}

#[mpi]
fn PMPI_Info_get_string(
    info: Handle,
    k: *const c_char,
    buflen: *mut c_int,
    value: *mut c_char,
    flag: *mut c_int,
) -> c_int {
    info_call("MPI_Info_get_string", |t| {
        let flag = arg(flag, "the flag")?;
        let buflen = arg(buflen, "the buffer length")?;
        let v = value_of(t, info, k)?;
        *flag = c_int::from(v.is_some());
        if let Some(v) = v {
            let room = nonneg(*buflen, "buffer length")?;
            if room > 0 && !value.is_null() {
                put_string(&v, value, room, std::ptr::null_mut());
            }
            *buflen = v.len() as c_int + 1;
        }
        Ok(())
    })
}

#[mpi]
fn PMPI_Info_get_valuelen(
    info: Handle,
    k: *const c_char,
    valuelen: *mut c_int,
    flag: *mut c_int,
) -> c_int {
    info_call("MPI_Info_get_valuelen", |t| {
        let flag = arg(flag, "the flag")?;
        let len = arg(valuelen, "the value length")?;
        let v = value_of(t, info, k)?;
        *flag = c_int::from(v.is_some());
        if let Some(v) = v {
            *len = v.len() as c_int;
        }
        Ok(())
    })
}

#[mpi]
fn PMPI_Info_get_nkeys(info: Handle, nkeys: *mut c_int) -> c_int {
    info_call("MPI_Info_get_nkeys", |t| {
        *arg(nkeys, "the number of keys")? = t.get(info)?.len() as c_int;
        Ok(())
    })
}

#[mpi]
fn PMPI_Info_get_nthkey(info: Handle, n: c_int, k: *mut c_char) -> c_int {
    info_call("MPI_Info_get_nthkey", |t| {
        let e = t.get(info)?;
        let Some((name, _)) = usize::try_from(n).ok().and_then(|i| e.get(i)) else {
            return err(
                MPI_ERR_ARG,
                format!("key {n} of an info object with {} keys", e.len()),
            );
        };
        if k.is_null() {
            return err(MPI_ERR_ARG, "a null key buffer");
        }
        put_string(name, k, MPI_MAX_INFO_KEY + 1, std::ptr::null_mut());
        Ok(())
    })
}

#[mpi]
fn PMPI_Info_dup(info: Handle, newinfo: *mut Handle) -> c_int {
    info_call("MPI_Info_dup", |t| {
        let out = arg(newinfo, "the new info object")?;
        let e = t.get(info)?;
        *out = t.add(e)?;
        Ok(())
    })
}

#[mpi]
fn PMPI_Info_free(info: *mut Handle) -> c_int {
    info_call("MPI_Info_free", |t| {
        let info = arg(info, "the info object")?;
        t.free(*info)?;
        *info = MPI_INFO_NULL;
        Ok(())
    })
}

/// An info argument a call takes hints from: `MPI_INFO_NULL` or an object.
pub(super) fn hints(m: &Mpi, info: Handle) -> MpiResult<()> {
    if info != MPI_INFO_NULL {
        m.info(info)?;
    }
    Ok(())
}

#[mpi]
fn PMPI_Alloc_mem(size: isize, info: Handle, baseptr: *mut c_void) -> c_int {
    call("MPI_Alloc_mem", MPI_COMM_WORLD, |m| {
        hints(m, info)?;
        let out = arg(baseptr.cast::<*mut c_void>(), "the address out")?;
        let Ok(bytes) = usize::try_from(size) else {
            return err(MPI_ERR_ARG, format!("size {size} is negative"));
        };
        // Plain memory: fm's transports need nothing registered.
        let p = libc::malloc(bytes.max(1));
        if p.is_null() {
            return err(MPI_ERR_NO_MEM, format!("no memory for {bytes} bytes"));
        }
        *out = p;
        Ok(())
    })
}

#[mpi]
fn PMPI_Free_mem(base: *mut c_void) -> c_int {
    // What MPI_Alloc_mem gave (malloc's), or null.
    libc::free(base);
    MPI_SUCCESS
}

#[mpi]
fn PMPI_Comm_dup_with_info(comm: Handle, info: Handle, newcomm: *mut Handle) -> c_int {
    match call("MPI_Comm_dup_with_info", comm, |m| hints(m, info)) {
        MPI_SUCCESS => super::comm::PMPI_Comm_dup(comm, newcomm),
        class => class,
    }
}

#[mpi]
fn PMPI_Comm_set_info(comm: Handle, info: Handle) -> c_int {
    call("MPI_Comm_set_info", comm, |m| {
        m.comm(comm)?;
        hints(m, info)
    })
}

#[mpi]
fn PMPI_Comm_get_info(comm: Handle, info_used: *mut Handle) -> c_int {
    call("MPI_Comm_get_info", comm, |m| {
        m.comm(comm)?;
        let out = arg(info_used, "the info object")?;
        // fm uses no hint yet: none was used.
        *out = crate::info::infos().add(Vec::new())?;
        Ok(())
    })
}

/// A name given to an object (at most `MPI_MAX_OBJECT_NAME` - 1 bytes kept).
pub(super) unsafe fn set_name(m: &mut Mpi, h: Handle, name: *const c_char) -> MpiResult<()> {
    let name = c_str(name, "name")?;
    let mut end = name.len().min(MPI_MAX_OBJECT_NAME - 1);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    m.names.insert(h, name[..end].to_string());
    Ok(())
}

pub(super) unsafe fn get_name(
    m: &Mpi,
    h: Handle,
    name: *mut c_char,
    len: *mut c_int,
    default: &str,
) -> MpiResult<()> {
    if name.is_null() || len.is_null() {
        return err(MPI_ERR_ARG, "a null name or length");
    }
    let n = m.names.get(&h).map_or(default, String::as_str);
    put_string(n, name, MPI_MAX_OBJECT_NAME, len);
    Ok(())
}

#[mpi]
fn PMPI_Comm_set_name(comm: Handle, comm_name: *const c_char) -> c_int {
    call("MPI_Comm_set_name", comm, |m| {
        m.comm(comm)?;
        set_name(m, comm, comm_name)
    })
}

#[mpi]
fn PMPI_Comm_get_name(comm: Handle, comm_name: *mut c_char, resultlen: *mut c_int) -> c_int {
    call("MPI_Comm_get_name", comm, |m| {
        m.comm(comm)?;
        let default = match comm {
            MPI_COMM_WORLD => "MPI_COMM_WORLD",
            MPI_COMM_SELF => "MPI_COMM_SELF",
            _ => "",
        };
        get_name(m, comm, comm_name, resultlen, default)
    })
}

#[mpi]
fn PMPI_Type_set_name(datatype: Handle, type_name: *const c_char) -> c_int {
    call("MPI_Type_set_name", MPI_COMM_WORLD, |m| {
        m.layout(datatype)?;
        set_name(m, datatype, type_name)
    })
}

#[mpi]
fn PMPI_Type_get_name(datatype: Handle, type_name: *mut c_char, resultlen: *mut c_int) -> c_int {
    call("MPI_Type_get_name", MPI_COMM_WORLD, |m| {
        // MPI-1's bound markers have names but no layout.
        if !matches!(datatype, LB_MARKER | UB_MARKER) {
            m.layout(datatype)?;
        }
        get_name(m, datatype, type_name, resultlen, predefined_name(datatype))
    })
}

#[mpi]
fn PMPI_Type_dup(oldtype: Handle, newtype: *mut Handle) -> c_int {
    let make = |m: &mut Mpi| {
        let l = (*m.layout(oldtype)?).clone();
        let r = super::datatype::recipe(MPI_COMBINER_DUP, Default::default(), &[oldtype])?;
        crate::types::add_made(l, r)
    };
    super::attr::with_attributes("MPI_Type_dup", Kind::Datatype, oldtype, newtype, make)
}

/// The names of the predefined datatypes, as MPICH gives them (each
/// handle's first name in MPICH's `mpi.h`; `MPI_C_COMPLEX` for the
/// single-precision C complex).
fn predefined_name(t: Handle) -> &'static str {
    match t as u32 {
        0x4c00_0010 => "MPI_LB",
        0x4c00_0011 => "MPI_UB",
        0x4c00_0101 => "MPI_CHAR",
        0x4c00_0102 => "MPI_UNSIGNED_CHAR",
        0x4c00_010d => "MPI_BYTE",
        0x4c00_010f => "MPI_PACKED",
        0x4c00_0118 => "MPI_SIGNED_CHAR",
        0x4c00_011a => "MPI_CHARACTER",
        0x4c00_012d => "MPI_INTEGER1",
        0x4c00_0133 => "MPI_CXX_BOOL",
        0x4c00_0137 => "MPI_INT8_T",
        0x4c00_013b => "MPI_UINT8_T",
        0x4c00_013f => "MPI_C_BOOL",
        0x4c00_0203 => "MPI_SHORT",
        0x4c00_0204 => "MPI_UNSIGNED_SHORT",
        0x4c00_022f => "MPI_INTEGER2",
        0x4c00_0238 => "MPI_INT16_T",
        0x4c00_023c => "MPI_UINT16_T",
        0x4c00_0405 => "MPI_INT",
        0x4c00_0406 => "MPI_UNSIGNED",
        0x4c00_040a => "MPI_FLOAT",
        0x4c00_040e => "MPI_WCHAR",
        0x4c00_041b => "MPI_INTEGER",
        0x4c00_041c => "MPI_REAL",
        0x4c00_041d => "MPI_LOGICAL",
        0x4c00_0427 => "MPI_REAL4",
        0x4c00_0430 => "MPI_INTEGER4",
        0x4c00_0439 => "MPI_INT32_T",
        0x4c00_043d => "MPI_UINT32_T",
        0x4c00_0807 => "MPI_LONG",
        0x4c00_0808 => "MPI_UNSIGNED_LONG",
        0x4c00_0809 => "MPI_LONG_LONG_INT",
        0x4c00_080b => "MPI_DOUBLE",
        0x4c00_0816 => "MPI_2INT",
        0x4c00_0819 => "MPI_UNSIGNED_LONG_LONG",
        0x4c00_081e => "MPI_COMPLEX",
        0x4c00_081f => "MPI_DOUBLE_PRECISION",
        0x4c00_0820 => "MPI_2INTEGER",
        0x4c00_0821 => "MPI_2REAL",
        0x4c00_0828 => "MPI_COMPLEX8",
        0x4c00_0829 => "MPI_REAL8",
        0x4c00_0831 => "MPI_INTEGER8",
        0x4c00_0834 => "MPI_CXX_FLOAT_COMPLEX",
        0x4c00_083a => "MPI_INT64_T",
        0x4c00_083e => "MPI_UINT64_T",
        0x4c00_0840 => "MPI_C_COMPLEX",
        0x4c00_0843 => "MPI_AINT",
        0x4c00_0844 => "MPI_OFFSET",
        0x4c00_0845 => "MPI_COUNT",
        0x4c00_100c => "MPI_LONG_DOUBLE",
        0x4c00_1022 => "MPI_DOUBLE_COMPLEX",
        0x4c00_1023 => "MPI_2DOUBLE_PRECISION",
        0x4c00_102a => "MPI_COMPLEX16",
        0x4c00_102b => "MPI_REAL16",
        0x4c00_1035 => "MPI_CXX_DOUBLE_COMPLEX",
        0x4c00_1041 => "MPI_C_DOUBLE_COMPLEX",
        0x4c00_202c => "MPI_COMPLEX32",
        0x4c00_2036 => "MPI_CXX_LONG_DOUBLE_COMPLEX",
        0x4c00_2042 => "MPI_C_LONG_DOUBLE_COMPLEX",
        0x8c00_0000 => "MPI_FLOAT_INT",
        0x8c00_0001 => "MPI_DOUBLE_INT",
        0x8c00_0002 => "MPI_LONG_INT",
        0x8c00_0003 => "MPI_SHORT_INT",
        0x8c00_0004 => "MPI_LONG_DOUBLE_INT",
        _ => "",
    }
}
