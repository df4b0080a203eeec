//! The tool information interface (MPI_T, MPI-4.0 §15.3) of a library
//! that exposes no variables, the GPU queries of a library without GPU
//! support, address arithmetic, and the data symbols of MPICH's ABI.
//!
//! fm's MPI has no control or performance variables, categories, events
//! or sources yet: MPI_T starts and ends, counts none of each, finds no
//! name and no index, and knows no handle, which is what the standard asks
//! of such a library. fm's own counters are FmStats and `fm-info`.

use crate::*;

const MPI_T_ERR_INVALID_INDEX: c_int = 62;
const MPI_T_ERR_INVALID_HANDLE: c_int = 64;
const MPI_T_ERR_INVALID_NAME: c_int = 73;
const MPI_T_ERR_NOT_INITIALIZED: c_int = 60;

/// How many `MPI_T_init_thread`s are not yet finalized.
static T_INITS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Each body once as `MPI_T_x` and once as `PMPI_T_x`.
macro_rules! both {
    ($($name:ident / $pname:ident ($($a:ident: $t:ty),*) $body:block)*) => {$(
        #[no_mangle]
        pub extern "C" fn $pname($($a: $t),*) -> c_int $body
        #[no_mangle]
        pub extern "C" fn $name($($a: $t),*) -> c_int {
            $pname($($a),*)
        }
    )*};
}

/// `*out = 0` where `out` is not null: a count of none.
fn none(out: *mut c_int) -> c_int {
    if T_INITS.load(std::sync::atomic::Ordering::Relaxed) == 0 {
        return MPI_T_ERR_NOT_INITIALIZED;
    }
    // SAFETY: the caller's int, as MPI says.
    if let Some(out) = unsafe { out.as_mut() } {
        *out = 0;
    }
    MPI_SUCCESS
}

both! {
    MPI_T_init_thread / PMPI_T_init_thread(required: c_int, provided: *mut c_int) {
        T_INITS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // SAFETY: the caller's int.
        if let Some(p) = unsafe { provided.as_mut() } {
            *p = required.clamp(MPI_THREAD_SINGLE, MPI_THREAD_MULTIPLE);
        }
        MPI_SUCCESS
    }
    MPI_T_finalize / PMPI_T_finalize() {
        match T_INITS.fetch_update(
            std::sync::atomic::Ordering::Relaxed,
            std::sync::atomic::Ordering::Relaxed,
            |n| n.checked_sub(1),
        ) {
            Ok(_) => MPI_SUCCESS,
            Err(_) => MPI_T_ERR_NOT_INITIALIZED,
        }
    }
    MPI_T_cvar_get_num / PMPI_T_cvar_get_num(num: *mut c_int) { none(num) }
    MPI_T_pvar_get_num / PMPI_T_pvar_get_num(num: *mut c_int) { none(num) }
    MPI_T_category_get_num / PMPI_T_category_get_num(num: *mut c_int) { none(num) }
    MPI_T_source_get_num / PMPI_T_source_get_num(num: *mut c_int) { none(num) }
    MPI_T_event_get_num / PMPI_T_event_get_num(num: *mut c_int) { none(num) }
    MPI_T_category_changed / PMPI_T_category_changed(stamp: *mut c_int) { none(stamp) }
}

/// MPI_T functions that name a variable, category or event: none has a
/// name (`NAME`), an index (`INDEX`) or a handle (`HANDLE`).
macro_rules! nothing_there {
    ($($class:ident: $($name:ident)*;)*) => {$($(
        #[no_mangle]
        pub extern "C" fn $name() -> c_int {
            $class
        }
    )*)*};
}

const NAME: c_int = MPI_T_ERR_INVALID_NAME;
const INDEX: c_int = MPI_T_ERR_INVALID_INDEX;
const HANDLE: c_int = MPI_T_ERR_INVALID_HANDLE;

nothing_there! {
    NAME: MPI_T_cvar_get_index PMPI_T_cvar_get_index MPI_T_pvar_get_index PMPI_T_pvar_get_index
        MPI_T_category_get_index PMPI_T_category_get_index MPI_T_event_get_index PMPI_T_event_get_index;
    INDEX: MPI_T_cvar_get_info PMPI_T_cvar_get_info MPI_T_pvar_get_info PMPI_T_pvar_get_info
        MPI_T_category_get_info PMPI_T_category_get_info MPI_T_category_get_categories
        PMPI_T_category_get_categories MPI_T_category_get_cvars PMPI_T_category_get_cvars
        MPI_T_category_get_pvars PMPI_T_category_get_pvars MPI_T_category_get_events
        PMPI_T_category_get_events MPI_T_category_get_num_events PMPI_T_category_get_num_events
        MPI_T_enum_get_info PMPI_T_enum_get_info MPI_T_enum_get_item PMPI_T_enum_get_item
        MPI_T_event_get_info PMPI_T_event_get_info MPI_T_source_get_info PMPI_T_source_get_info
        MPI_T_source_get_timestamp PMPI_T_source_get_timestamp MPI_T_cvar_handle_alloc
        PMPI_T_cvar_handle_alloc MPI_T_pvar_handle_alloc PMPI_T_pvar_handle_alloc
        MPI_T_event_handle_alloc PMPI_T_event_handle_alloc;
    HANDLE: MPI_T_cvar_handle_free PMPI_T_cvar_handle_free MPI_T_cvar_read PMPI_T_cvar_read
        MPI_T_cvar_write PMPI_T_cvar_write MPI_T_pvar_handle_free PMPI_T_pvar_handle_free
        MPI_T_pvar_read PMPI_T_pvar_read MPI_T_pvar_readreset PMPI_T_pvar_readreset
        MPI_T_pvar_reset PMPI_T_pvar_reset MPI_T_pvar_start PMPI_T_pvar_start
        MPI_T_pvar_stop PMPI_T_pvar_stop MPI_T_pvar_write PMPI_T_pvar_write
        MPI_T_pvar_session_create PMPI_T_pvar_session_create MPI_T_pvar_session_free
        PMPI_T_pvar_session_free MPI_T_event_handle_free PMPI_T_event_handle_free
        MPI_T_event_handle_get_info PMPI_T_event_handle_get_info MPI_T_event_handle_set_info
        PMPI_T_event_handle_set_info MPI_T_event_callback_get_info PMPI_T_event_callback_get_info
        MPI_T_event_callback_set_info PMPI_T_event_callback_set_info MPI_T_event_register_callback
        PMPI_T_event_register_callback MPI_T_event_set_dropped_handler
        PMPI_T_event_set_dropped_handler MPI_T_event_read PMPI_T_event_read MPI_T_event_copy
        PMPI_T_event_copy MPI_T_event_get_timestamp PMPI_T_event_get_timestamp
        MPI_T_event_get_source PMPI_T_event_get_source;
}

both! {
    MPIX_Query_cuda_support / PMPIX_Query_cuda_support() { 0 }
    MPIX_Query_hip_support / PMPIX_Query_hip_support() { 0 }
    MPIX_Query_ze_support / PMPIX_Query_ze_support() { 0 }
    MPIX_GPU_query_support / PMPIX_GPU_query_support(_gpu_type: c_int, is_supported: *mut c_int) {
        // SAFETY: the caller's int.
        match unsafe { is_supported.as_mut() } {
            Some(s) => {
                *s = 0;
                MPI_SUCCESS
            }
            None => MPI_ERR_ARG,
        }
    }
}

/// `MPI_Aint_add`: an address `disp` bytes from `base`.
#[no_mangle]
pub extern "C" fn PMPI_Aint_add(base: isize, disp: isize) -> isize {
    base.wrapping_add(disp)
}

#[no_mangle]
pub extern "C" fn MPI_Aint_add(base: isize, disp: isize) -> isize {
    PMPI_Aint_add(base, disp)
}

/// `MPI_Aint_diff`: the bytes from `addr2` to `addr1`.
#[no_mangle]
pub extern "C" fn PMPI_Aint_diff(addr1: isize, addr2: isize) -> isize {
    addr1.wrapping_sub(addr2)
}

#[no_mangle]
pub extern "C" fn MPI_Aint_diff(addr1: isize, addr2: isize) -> isize {
    PMPI_Aint_diff(addr1, addr2)
}

/// Data of MPICH's ABI that C programs do not read but the Fortran and
/// C++ layers and version tools name: exported with MPICH's sizes, so
/// that a copy relocation made against MPICH's library fits, and
/// writable: MPICH's Fortran library (`libmpichfort.so.12`) stores the
/// addresses of its `MPI_STATUS_IGNORE` and `MPI_STATUSES_IGNORE` in
/// `MPI_F_STATUS_IGNORE` and `MPI_F_STATUSES_IGNORE` when it starts.
#[repr(C, align(8))]
pub struct AbiData<const N: usize>([u8; N]);

macro_rules! abi_data {
    ($($name:ident: $n:literal = $value:expr;)*) => {$(
        #[no_mangle]
        pub static mut $name: AbiData<$n> = AbiData(padded($value));
    )*};
}

/// `s` and zeros after it, `N` bytes in all.
const fn padded<const N: usize>(s: &[u8]) -> [u8; N] {
    let mut out = [0; N];
    let mut i = 0;
    while i < s.len() && i < N {
        out[i] = s[i];
        i += 1;
    }
    out
}

abi_data! {
    MPII_Version_string: 6 = b"4.0.2";
    MPII_Version_date: 29 = b"fm, with MPICH 4.0.2's ABI";
    MPII_Version_device: 8 = b"fm";
    MPII_Version_ABI: 7 = b"14:2:2";
    MPII_Version_custom: 1 = b"";
    MPII_Version_CC: 127 = b"fm-mpicc";
    MPII_Version_CXX: 126 = b"";
    MPII_Version_F77: 277 = b"";
    MPII_Version_FC: 277 = b"";
    MPII_Version_configure: 1043 = b"";
    MPIR_F08_MPI_BOTTOM: 4 = b"";
    MPIR_F08_MPI_IN_PLACE: 4 = b"";
    MPIR_F08_MPI_STATUS_IGNORE_OBJ: 20 = b"";
    MPIR_F08_MPI_STATUSES_IGNORE_OBJ: 20 = b"";
    MPI_F_STATUS_IGNORE: 8 = b"";
    MPI_F_STATUSES_IGNORE: 8 = b"";
    MPI_F08_STATUS_IGNORE: 8 = b"";
    MPI_F08_STATUSES_IGNORE: 8 = b"";
    MPI_T_PVAR_ALL_HANDLES: 8 = &[0xff; 8];
}

/// `MPI_Pcontrol`: for profiling tools, which define `MPI_Pcontrol`
/// themselves; the library does nothing with the level (MPI-4.0 §15.2.4).
#[fm_mpi_macros::mpi]
fn PMPI_Pcontrol(_level: c_int) -> c_int {
    MPI_SUCCESS
}
