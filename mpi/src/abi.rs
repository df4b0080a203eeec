//! MPICH's ABI, as facts: the integer handles of predefined objects, the
//! special values, error classes and the layout of `MPI_Status`, as
//! Debian's MPICH 4 header (`mpich/mpi.h`) defines them. A program
//! compiled against that header passes these values; this library must
//! read them the same way.
//!
//! MPICH handles are 32-bit integers: bits 30–31 the kind (0 invalid, 1
//! built in, 2 direct, 3 indirect), bits 26–29 the object type, the rest
//! an index (for built-in datatypes: the size in bytes in bits 8–15).

use std::os::raw::c_int;

pub type Handle = c_int;

pub const MPI_SUCCESS: c_int = 0;
pub const MPI_ERR_BUFFER: c_int = 1;
pub const MPI_ERR_COUNT: c_int = 2;
pub const MPI_ERR_TYPE: c_int = 3;
pub const MPI_ERR_TAG: c_int = 4;
pub const MPI_ERR_COMM: c_int = 5;
pub const MPI_ERR_RANK: c_int = 6;
pub const MPI_ERR_ROOT: c_int = 7;
pub const MPI_ERR_GROUP: c_int = 8;
pub const MPI_ERR_OP: c_int = 9;
pub const MPI_ERR_TOPOLOGY: c_int = 10;
pub const MPI_ERR_DIMS: c_int = 11;
pub const MPI_ERR_ARG: c_int = 12;
pub const MPI_ERR_UNKNOWN: c_int = 13;
pub const MPI_ERR_TRUNCATE: c_int = 14;
pub const MPI_ERR_OTHER: c_int = 15;
pub const MPI_ERR_INTERN: c_int = 16;
pub const MPI_ERR_IN_STATUS: c_int = 17;
pub const MPI_ERR_REQUEST: c_int = 19;
pub const MPI_ERR_INFO: c_int = 28;
pub const MPI_ERR_INFO_KEY: c_int = 29;
pub const MPI_ERR_INFO_VALUE: c_int = 30;
pub const MPI_ERR_INFO_NOKEY: c_int = 31;
pub const MPI_ERR_NO_MEM: c_int = 34;
pub const MPI_ERR_UNSUPPORTED_OPERATION: c_int = 44;
pub const MPI_ERR_SESSION: c_int = 75;
pub const MPI_ERR_WIN: c_int = 45;
pub const MPI_ERR_BASE: c_int = 46;
pub const MPI_ERR_LOCKTYPE: c_int = 47;
pub const MPI_ERR_RMA_SYNC: c_int = 50;
pub const MPI_ERR_SIZE: c_int = 51;
pub const MPI_ERR_DISP: c_int = 52;
pub const MPI_ERR_ASSERT: c_int = 53;
pub const MPI_ERR_RMA_RANGE: c_int = 55;
pub const MPI_ERR_RMA_ATTACH: c_int = 56;
pub const MPI_ERR_RMA_SHARED: c_int = 57;
pub const MPI_ERR_RMA_FLAVOR: c_int = 58;
pub const MPI_ERR_KEYVAL: c_int = 48;
pub const MPI_ERR_LASTCODE: c_int = 0x3fff_ffff;

pub const MPI_COMM_NULL: Handle = 0x0400_0000;
pub const MPI_COMM_WORLD: Handle = 0x4400_0000;
pub const MPI_COMM_SELF: Handle = 0x4400_0001;
/// A communicator made at run time: direct kind, object type 1.
pub const COMM_DIRECT: Handle = 0x8400_0000_u32 as Handle;

pub const MPI_GROUP_NULL: Handle = 0x0800_0000;
pub const MPI_GROUP_EMPTY: Handle = 0x4800_0000;
pub const MPI_BYTE: Handle = 0x4c00_010d;
/// A group made at run time: direct kind, object type 2.
pub const GROUP_DIRECT: Handle = 0x8800_0000_u32 as Handle;
pub const MPI_COMM_TYPE_SHARED: c_int = 1;

pub const MPI_REQUEST_NULL: Handle = 0x2c00_0000;
/// A request made at run time: direct kind, object type 0xb, an index
/// below 2^24 ([`HANDLE_INDEX`]).
pub const REQUEST_DIRECT: Handle = 0xac00_0000_u32 as Handle;
/// A persistent request (`MPI_Send_init`, `MPI_Recv_init`): bit 24 set.
pub const PERSISTENT_DIRECT: Handle = 0xad00_0000_u32 as Handle;
/// A message a matched probe took (MPICH's messages are requests too):
/// bit 25 set.
pub const MESSAGE_DIRECT: Handle = 0xae00_0000_u32 as Handle;
pub const MPI_MESSAGE_NULL: Handle = 0x2c00_0000;
/// Sessions (MPI-4.0 §11.3): MPICH's kind 0xe.
pub const SESSION_DIRECT: Handle = 0xb800_0000_u32 as Handle;
pub const MPI_SESSION_NULL: Handle = 0x3800_0000;
pub const MPI_MESSAGE_NO_PROC: Handle = 0x6c00_0000;
/// The bits of a request's, persistent request's or message's index.
pub const HANDLE_INDEX: Handle = 0x00ff_ffff;

pub const MPI_DATATYPE_NULL: Handle = 0x0c00_0000;
/// A datatype made at run time: indirect kind (the direct handles
/// 0x8c000000.. are MPICH's pair types), object type 3.
pub const TYPE_INDIRECT: Handle = 0xcc00_0000_u32 as Handle;
/// MPI-1's `MPI_LB` and `MPI_UB`: markers of a struct type's bounds, not
/// types (MPICH's header still defines them; fm's does not).
pub const LB_MARKER: Handle = 0x4c00_0010;
pub const UB_MARKER: Handle = 0x4c00_0011;
pub const MPI_ERRORS_ARE_FATAL: Handle = 0x5400_0000;
pub const MPI_ERRORS_RETURN: Handle = 0x5400_0001;
pub const MPI_ERRORS_ABORT: Handle = 0x5400_0003;

pub const MPI_OP_NULL: Handle = 0x1800_0000;
pub const MPI_MAX: Handle = 0x5800_0001;
pub const MPI_SUM: Handle = 0x5800_0003;
/// An operation made at run time: direct kind, object type 6.
pub const OP_DIRECT: Handle = 0x9800_0000_u32 as Handle;

/// `MPI_IN_PLACE`: the address -1.
pub const IN_PLACE: usize = usize::MAX;

pub const MPI_INFO_NULL: Handle = 0x1c00_0000;
pub const MPI_INFO_ENV: Handle = 0x5c00_0001;
/// An info object made at run time: direct kind, object type 7.
pub const INFO_DIRECT: Handle = 0x9c00_0000_u32 as Handle;
pub const MPI_MAX_INFO_KEY: usize = 255;
pub const MPI_MAX_INFO_VAL: usize = 1024;
pub const MPI_MAX_OBJECT_NAME: usize = 128;

pub const MPI_ANY_SOURCE: c_int = -2;
pub const MPI_ANY_TAG: c_int = -1;
/// Array orders and distributions (`MPI_Type_create_subarray`,
/// `MPI_Type_create_darray`).
pub const MPI_ORDER_C: c_int = 56;
pub const MPI_ORDER_FORTRAN: c_int = 57;
pub const MPI_DISTRIBUTE_BLOCK: c_int = 121;
pub const MPI_DISTRIBUTE_CYCLIC: c_int = 122;
pub const MPI_DISTRIBUTE_NONE: c_int = 123;
pub const MPI_DISTRIBUTE_DFLT_DARG: c_int = -49767;
/// What `MPI_Type_match_size` looks for.
pub const MPI_TYPECLASS_REAL: c_int = 1;
pub const MPI_TYPECLASS_INTEGER: c_int = 2;
pub const MPI_TYPECLASS_COMPLEX: c_int = 3;
/// How a datatype was made (`MPI_Type_get_envelope`).
pub const MPI_COMBINER_NAMED: c_int = 1;
pub const MPI_COMBINER_DUP: c_int = 2;
pub const MPI_COMBINER_CONTIGUOUS: c_int = 3;
pub const MPI_COMBINER_VECTOR: c_int = 4;
pub const MPI_COMBINER_HVECTOR_INTEGER: c_int = 5;
pub const MPI_COMBINER_HVECTOR: c_int = 6;
pub const MPI_COMBINER_INDEXED: c_int = 7;
pub const MPI_COMBINER_HINDEXED_INTEGER: c_int = 8;
pub const MPI_COMBINER_HINDEXED: c_int = 9;
pub const MPI_COMBINER_INDEXED_BLOCK: c_int = 10;
pub const MPI_COMBINER_STRUCT_INTEGER: c_int = 11;
pub const MPI_COMBINER_STRUCT: c_int = 12;
pub const MPI_COMBINER_SUBARRAY: c_int = 13;
pub const MPI_COMBINER_DARRAY: c_int = 14;
pub const MPI_COMBINER_F90_REAL: c_int = 15;
pub const MPI_COMBINER_F90_COMPLEX: c_int = 16;
pub const MPI_COMBINER_F90_INTEGER: c_int = 17;
pub const MPI_COMBINER_RESIZED: c_int = 18;
pub const MPI_COMBINER_HINDEXED_BLOCK: c_int = 19;
/// What `MPI_Topo_test` says a communicator's topology is.
pub const MPI_GRAPH: c_int = 1;
pub const MPI_CART: c_int = 2;
pub const MPI_DIST_GRAPH: c_int = 3;
pub const MPI_PROC_NULL: c_int = -1;
pub const MPI_ROOT: c_int = -3;
pub const MPI_UNDEFINED: c_int = -32766;

pub const MPI_TAG_UB: c_int = 0x6440_0001;
pub const MPI_HOST: c_int = 0x6440_0003;
pub const MPI_IO: c_int = 0x6440_0005;
pub const MPI_WTIME_IS_GLOBAL: c_int = 0x6440_0007;
pub const MPI_UNIVERSE_SIZE: c_int = 0x6440_0009;
pub const MPI_LASTUSEDCODE: c_int = 0x6440_000b;
pub const MPI_APPNUM: c_int = 0x6440_000d;
pub const MPI_KEYVAL_INVALID: c_int = 0x2400_0000;
/// A keyval made at run time: direct kind, object type 9 (attributes),
/// an index below 2^22 (so never one of the predefined 0x644000xx).
pub const KEYVAL_DIRECT: c_int = 0x6400_0000;
pub const KEYVAL_INDEX: c_int = 0x003f_ffff;
/// The largest tag this library accepts (MPI asks for at least 32767).
pub const TAG_UB: c_int = 0x3fff_ffff;

pub const MPI_IDENT: c_int = 0;
pub const MPI_CONGRUENT: c_int = 1;
pub const MPI_SIMILAR: c_int = 2;
pub const MPI_UNEQUAL: c_int = 3;

pub const MPI_THREAD_SINGLE: c_int = 0;
pub const MPI_THREAD_FUNNELED: c_int = 1;
pub const MPI_THREAD_SERIALIZED: c_int = 2;
pub const MPI_THREAD_MULTIPLE: c_int = 3;

pub const MPI_MAX_PROCESSOR_NAME: usize = 128;
pub const MPI_MAX_ERROR_STRING: usize = 512;
pub const MPI_MAX_LIBRARY_VERSION_STRING: usize = 8192;

pub const MPI_VERSION: c_int = 4;
pub const MPI_SUBVERSION: c_int = 0;

/// `MPI_STATUS_IGNORE` and `MPI_STATUSES_IGNORE`: the address 1.
pub const STATUS_IGNORE: usize = 1;

/// MPICH's `MPI_Status`: the count in bytes over two ints (the high one's
/// lowest bit says cancelled), then source, tag and error.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MpiStatus {
    pub count_lo: c_int,
    pub count_hi_and_cancelled: c_int,
    pub source: c_int,
    pub tag: c_int,
    pub error: c_int,
}

impl MpiStatus {
    pub fn new(source: c_int, tag: c_int, bytes: usize, error: c_int) -> MpiStatus {
        let bytes = bytes as u64;
        MpiStatus {
            count_lo: bytes as u32 as c_int,
            count_hi_and_cancelled: ((bytes >> 32) << 1) as c_int,
            source,
            tag,
            error,
        }
    }

    /// The *empty* status (MPI-4.0 §3.7.3): of `MPI_REQUEST_NULL` and of
    /// an inactive persistent request.
    pub fn empty() -> MpiStatus {
        MpiStatus::new(MPI_ANY_SOURCE, MPI_ANY_TAG, 0, MPI_SUCCESS)
    }

    /// The status of a receive or probe from `MPI_PROC_NULL` (§3.11), and
    /// what a completed send reports.
    pub fn proc_null() -> MpiStatus {
        MpiStatus::new(MPI_PROC_NULL, MPI_ANY_TAG, 0, MPI_SUCCESS)
    }

    pub fn bytes(&self) -> u64 {
        (self.count_lo as u32 as u64) | ((self.count_hi_and_cancelled as u32 as u64) >> 1) << 32
    }

    pub fn cancelled(&self) -> bool {
        self.count_hi_and_cancelled & 1 != 0
    }
}

/// The size in bytes of a predefined datatype whose data is one block
/// (every basic type, and the pair types without a gap, `MPI_2INT` and
/// `MPI_FLOAT_INT`), or `None` for any other handle ([`pair_type`] has the
/// rest).
pub fn builtin_type_size(t: Handle) -> Option<usize> {
    let t = t as u32;
    match t {
        // Built-in kind, datatype object: the size is in bits 8–15.
        // (MPI_LB and MPI_UB, deprecated markers of size 0, are not types.)
        _ if t >> 26 == 0x4c00_0000 >> 26 => match (t >> 8) & 0xff {
            0 => None,
            n => Some(n as usize),
        },
        // MPI_FLOAT_INT (the other pair types are direct handles too).
        0x8c00_0000 => Some(8),
        _ => None,
    }
}

/// C's pair types, the struct of a value and an `int` that `MPI_MINLOC`
/// and `MPI_MAXLOC` use: the value's size and the `int`'s offset, as C
/// lays the struct out. Their size is the data's alone (12 for
/// `MPI_DOUBLE_INT`), their extent the struct's (16), as in MPICH.
pub fn pair_type(t: Handle) -> Option<(usize, isize)> {
    match t as u32 {
        0x4c00_0816 => Some((4, 4)),   // MPI_2INT
        0x8c00_0000 => Some((4, 4)),   // MPI_FLOAT_INT
        0x8c00_0001 => Some((8, 8)),   // MPI_DOUBLE_INT
        0x8c00_0002 => Some((8, 8)),   // MPI_LONG_INT
        0x8c00_0003 => Some((2, 4)),   // MPI_SHORT_INT
        0x8c00_0004 => Some((16, 16)), // MPI_LONG_DOUBLE_INT
        _ => None,
    }
}

/// Whether `t` is a predefined datatype.
pub fn is_predefined_type(t: Handle) -> bool {
    builtin_type_size(t).is_some() || pair_type(t).is_some()
}

/// What an error class means, for `MPI_Error_string`.
pub fn class_text(class: c_int) -> &'static str {
    match class {
        MPI_SUCCESS => "no error",
        MPI_ERR_BUFFER => "invalid buffer pointer",
        MPI_ERR_COUNT => "invalid count argument",
        MPI_ERR_TYPE => "invalid datatype",
        MPI_ERR_TAG => "invalid tag",
        MPI_ERR_COMM => "invalid communicator",
        MPI_ERR_RANK => "invalid rank",
        MPI_ERR_ROOT => "invalid root",
        MPI_ERR_OP => "invalid reduce operation",
        MPI_ERR_ARG => "invalid argument",
        MPI_ERR_TRUNCATE => "message truncated",
        MPI_ERR_OTHER => "other error",
        MPI_ERR_INTERN => "internal error",
        MPI_ERR_IN_STATUS => "error code is in status",
        MPI_ERR_REQUEST => "invalid request",
        MPI_ERR_UNSUPPORTED_OPERATION => "operation not supported by fm's MPI yet",
        MPI_ERR_SESSION => "invalid session",
        MPI_ERR_KEYVAL => "invalid keyval",
        MPI_ERR_TOPOLOGY => "invalid topology",
        MPI_ERR_DIMS => "invalid dimension argument",
        MPI_ERR_INFO => "invalid info object",
        MPI_ERR_INFO_KEY => "invalid info key",
        MPI_ERR_INFO_VALUE => "invalid info value",
        MPI_ERR_INFO_NOKEY => "no such info key",
        MPI_ERR_NO_MEM => "out of memory",
        _ => "unknown error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_sizes_are_read_from_the_handles() {
        assert_eq!(builtin_type_size(0x4c00_0101), Some(1)); // MPI_CHAR
        assert_eq!(builtin_type_size(0x4c00_0405), Some(4)); // MPI_INT
        assert_eq!(builtin_type_size(0x4c00_080b), Some(8)); // MPI_DOUBLE
        assert_eq!(builtin_type_size(0x4c00_100c), Some(16)); // MPI_LONG_DOUBLE
        assert_eq!(builtin_type_size(0x4c00_0816), Some(8)); // MPI_2INT
        assert_eq!(builtin_type_size(0x8c00_0000_u32 as Handle), Some(8)); // MPI_FLOAT_INT
        assert_eq!(builtin_type_size(0x8c00_0001_u32 as Handle), None); // MPI_DOUBLE_INT
        assert_eq!(pair_type(0x8c00_0003_u32 as Handle), Some((2, 4))); // MPI_SHORT_INT
        assert!(is_predefined_type(0x8c00_0004_u32 as Handle)); // MPI_LONG_DOUBLE_INT
        assert_eq!(builtin_type_size(MPI_DATATYPE_NULL), None);
        assert_eq!(builtin_type_size(MPI_COMM_WORLD), None);
        assert_eq!(builtin_type_size(0), None);
    }

    #[test]
    fn a_status_holds_counts_past_four_gigabytes() {
        let s = MpiStatus::new(3, 7, (5 << 32) + 9, 0);
        assert_eq!(s.bytes(), (5 << 32) + 9);
        assert!(!s.cancelled());
        assert_eq!(std::mem::size_of::<MpiStatus>(), 20);
    }
}
