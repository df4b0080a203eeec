//! A PMIx client through the standard client library, OpenPMIx's
//! `libpmix.so.2` (`srun --mpi=pmix`, Open MPI's `mpirun`): not a
//! re-implementation of its protocol. The library is loaded when a job
//! starts through PMIx, not linked: fm runs where it is not installed, and
//! a job that asks for PMIx there is told what is missing.
//!
//! Only what fm needs is declared: the calls below, and the two structures
//! they pass — a process name and a value (`pmix_common.h` of OpenPMIx 4:
//! `pmix_proc_t` is 260 bytes with the rank at 256; `pmix_value_t` is 32
//! bytes, a 16-bit type and then an 8-aligned union; fm reads and writes
//! strings and 32-bit integers in it).

use super::pmi::PmiError;
use std::ffi::{c_char, c_int, c_void, CStr, CString};

const PMIX_SUCCESS: c_int = 0;
const PMIX_STRING: u16 = 3;
const PMIX_UINT32: u16 = 14;
/// Share a put with every process of the job, on any host.
const PMIX_GLOBAL: u8 = 3;
/// The rank that names the job itself, for job-level facts.
const PMIX_RANK_WILDCARD: u32 = u32::MAX - 1;
const PMIX_JOB_SIZE: &CStr = c"pmix.job.size";
const PMIX_HOSTNAME: &CStr = c"pmix.hname";

#[repr(C)]
#[derive(Clone, Copy)]
struct Proc {
    nspace: [c_char; 256],
    rank: u32,
}

#[repr(C)]
struct Value {
    kind: u16,
    data: [u64; 3],
}

const _: () = assert!(std::mem::size_of::<Proc>() == 260);
const _: () = assert!(std::mem::size_of::<Value>() == 32);

type Init = unsafe extern "C" fn(*mut Proc, *const c_void, usize) -> c_int;
type Finalize = unsafe extern "C" fn(*const c_void, usize) -> c_int;
type Put = unsafe extern "C" fn(u8, *const c_char, *mut Value) -> c_int;
type Commit = unsafe extern "C" fn() -> c_int;
type Fence = unsafe extern "C" fn(*const Proc, usize, *const c_void, usize) -> c_int;
type Get = unsafe extern "C" fn(
    *const Proc,
    *const c_char,
    *const c_void,
    usize,
    *mut *mut Value,
) -> c_int;
type Abort = unsafe extern "C" fn(c_int, *const c_char, *mut Proc, usize) -> c_int;
type ErrorString = unsafe extern "C" fn(c_int) -> *const c_char;
type ValueDestruct = unsafe extern "C" fn(*mut Value);

/// The calls of the loaded library.
struct Lib {
    init: Init,
    finalize: Finalize,
    put: Put,
    commit: Commit,
    fence: Fence,
    get: Get,
    abort: Abort,
    error_string: ErrorString,
    value_destruct: ValueDestruct,
}

impl Lib {
    /// Load `path` (a name the loader looks up, or a path) and find every
    /// call fm makes.
    fn load(path: &str) -> Result<Lib, PmiError> {
        let missing = |why: String| PmiError::NoLibrary {
            library: path.to_string(),
            why,
        };
        let name = CString::new(path).map_err(|e| missing(e.to_string()))?;
        // SAFETY: dlopen of a library by name; its initialisers run, as
        // for any linked library. The handle is never closed: the calls
        // found in it are used until the process ends.
        let handle = unsafe { libc::dlopen(name.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
        if handle.is_null() {
            // SAFETY: dlerror returns the thread's last error, a C string.
            let why = unsafe { CStr::from_ptr(libc::dlerror()) };
            return Err(missing(why.to_string_lossy().into_owned()));
        }
        let find = |symbol: &CStr| -> Result<*mut c_void, PmiError> {
            // SAFETY: a symbol lookup in the handle just opened.
            let p = unsafe { libc::dlsym(handle, symbol.as_ptr()) };
            match p.is_null() {
                true => Err(missing(format!(
                    "it has no {} (not OpenPMIx 4?)",
                    symbol.to_string_lossy()
                ))),
                false => Ok(p),
            }
        };
        // SAFETY: each symbol is OpenPMIx's function of that name, whose
        // C signature the type says (pmix.h).
        unsafe {
            Ok(Lib {
                init: std::mem::transmute::<*mut c_void, Init>(find(c"PMIx_Init")?),
                finalize: std::mem::transmute::<*mut c_void, Finalize>(find(c"PMIx_Finalize")?),
                put: std::mem::transmute::<*mut c_void, Put>(find(c"PMIx_Put")?),
                commit: std::mem::transmute::<*mut c_void, Commit>(find(c"PMIx_Commit")?),
                fence: std::mem::transmute::<*mut c_void, Fence>(find(c"PMIx_Fence")?),
                get: std::mem::transmute::<*mut c_void, Get>(find(c"PMIx_Get")?),
                abort: std::mem::transmute::<*mut c_void, Abort>(find(c"PMIx_Abort")?),
                error_string: std::mem::transmute::<*mut c_void, ErrorString>(find(
                    c"PMIx_Error_string",
                )?),
                value_destruct: std::mem::transmute::<*mut c_void, ValueDestruct>(find(
                    c"PMIx_Value_destruct",
                )?),
            })
        }
    }
}

/// A process's connection to the PMIx server that started it.
pub struct Pmix {
    lib: Lib,
    me: Proc,
    pub rank: u32,
    pub size: usize,
    finalized: bool,
}

// SAFETY: the library is thread-safe (PMIx calls may come from any
// thread); `Pmix` holds only its function pointers and a process name.
unsafe impl Send for Pmix {}

impl Pmix {
    /// Load `library` and initialise as a client of the PMIx server whose
    /// address the launcher put in the environment.
    pub fn connect(library: &str) -> Result<Pmix, PmiError> {
        if std::env::var_os("PMIX_NAMESPACE").is_none() {
            return Err(PmiError::Env {
                var: "PMIX_NAMESPACE",
                value: String::new(),
                reason: "not set: this process was not started by a PMIx launcher (srun --mpi=pmix, Open MPI's mpirun)".into(),
            });
        }
        let lib = Lib::load(library)?;
        let mut me = Proc {
            nspace: [0; 256],
            rank: 0,
        };
        // SAFETY: `me` is a pmix_proc_t the call fills in.
        let rc = unsafe { (lib.init)(&mut me, std::ptr::null(), 0) };
        let mut p = Pmix {
            lib,
            me,
            rank: me.rank,
            size: 0,
            // Not initialised: nothing to finalise.
            finalized: rc != PMIX_SUCCESS,
        };
        p.check("PMIx_Init", rc)?;
        let job = Proc {
            rank: PMIX_RANK_WILDCARD,
            ..p.me
        };
        p.size = p.get_u32(&job, PMIX_JOB_SIZE)? as usize;
        Ok(p)
    }

    fn check(&self, call: &'static str, rc: c_int) -> Result<(), PmiError> {
        if rc == PMIX_SUCCESS {
            return Ok(());
        }
        // SAFETY: PMIx_Error_string returns a static C string.
        let s = unsafe { CStr::from_ptr((self.lib.error_string)(rc)) };
        Err(PmiError::Pmix {
            call,
            status: format!("{} ({rc})", s.to_string_lossy()),
        })
    }

    fn proc_of(&self, rank: u32) -> Proc {
        Proc { rank, ..self.me }
    }

    /// The value of `key` for `proc`: its type and, for the caller to read
    /// and release, the value the library allocated.
    fn get(&self, proc: &Proc, key: &CStr) -> Result<GotValue<'_>, PmiError> {
        let mut v: *mut Value = std::ptr::null_mut();
        // SAFETY: a valid process name and key; the library allocates `v`.
        let rc = unsafe { (self.lib.get)(proc, key.as_ptr(), std::ptr::null(), 0, &mut v) };
        self.check("PMIx_Get", rc)?;
        if v.is_null() {
            return Err(PmiError::Missing {
                key: key.to_string_lossy().into_owned(),
            });
        }
        Ok(GotValue { lib: &self.lib, v })
    }

    fn get_u32(&self, proc: &Proc, key: &CStr) -> Result<u32, PmiError> {
        let v = self.get(proc, key)?;
        // SAFETY: a value the library returned, read as its type says.
        match unsafe { ((*v.v).kind, (*v.v).data[0] as u32) } {
            (PMIX_UINT32, n) => Ok(n),
            (kind, _) => Err(PmiError::Refused {
                what: format!("PMIx_Get({})", key.to_string_lossy()),
                answer: format!("a value of type {kind}, not a 32-bit integer"),
            }),
        }
    }

    fn get_string(&self, proc: &Proc, key: &CStr) -> Result<String, PmiError> {
        let v = self.get(proc, key)?;
        // SAFETY: as above; a string value is a NUL-terminated C string.
        unsafe {
            let (kind, ptr) = ((*v.v).kind, (*v.v).data[0] as *const c_char);
            if kind != PMIX_STRING || ptr.is_null() {
                return Err(PmiError::Refused {
                    what: format!("PMIx_Get({})", key.to_string_lossy()),
                    answer: format!("a value of type {kind}, not a string"),
                });
            }
            Ok(CStr::from_ptr(ptr).to_string_lossy().into_owned())
        }
    }

    /// Each rank's host as the launcher names it (`PMIX_HOSTNAME`: the
    /// job's own facts, held by the local server, no exchange).
    pub fn hosts(&self) -> Result<Vec<String>, PmiError> {
        (0..self.size as u32)
            .map(|r| self.get_string(&self.proc_of(r), PMIX_HOSTNAME))
            .collect()
    }

    pub fn put(&mut self, key: &str, value: &str) -> Result<(), PmiError> {
        let k = cstring(key)?;
        let s = cstring(value)?;
        let mut v = Value {
            kind: PMIX_STRING,
            data: [s.as_ptr() as u64, 0, 0],
        };
        // SAFETY: the library copies the key and the string value.
        let rc = unsafe { (self.lib.put)(PMIX_GLOBAL, k.as_ptr(), &mut v) };
        self.check("PMIx_Put", rc)
    }

    /// Commit what this process put and wait for every process of the job
    /// to do the same. Nothing is collected: a peer's value is fetched from
    /// its server when asked for (PMIx's direct modex).
    pub fn fence(&mut self) -> Result<(), PmiError> {
        // SAFETY: no arguments.
        let rc = unsafe { (self.lib.commit)() };
        self.check("PMIx_Commit", rc)?;
        // SAFETY: no process list (the whole job), no directives.
        let rc = unsafe { (self.lib.fence)(std::ptr::null(), 0, std::ptr::null(), 0) };
        self.check("PMIx_Fence", rc)
    }

    /// What `rank` put under `key`.
    pub fn get_from(&mut self, rank: u32, key: &str) -> Result<String, PmiError> {
        let k = cstring(key)?;
        self.get_string(&self.proc_of(rank), &k)
    }

    /// End the whole job (every process of this namespace) with `code`.
    pub fn abort(&mut self, code: i32, message: &str) {
        let m = cstring(message).unwrap_or_default();
        // SAFETY: a message and no process list: the whole namespace.
        unsafe {
            (self.lib.abort)(code, m.as_ptr(), std::ptr::null_mut(), 0);
        }
    }

    pub fn finalize(&mut self) -> Result<(), PmiError> {
        if std::mem::replace(&mut self.finalized, true) {
            return Ok(());
        }
        // SAFETY: no directives.
        let rc = unsafe { (self.lib.finalize)(std::ptr::null(), 0) };
        self.check("PMIx_Finalize", rc)
    }
}

impl Drop for Pmix {
    fn drop(&mut self) {
        if let Err(e) = self.finalize() {
            tracing::debug!("fm: {e}");
        }
    }
}

/// A value `PMIx_Get` allocated, released when dropped.
struct GotValue<'a> {
    lib: &'a Lib,
    v: *mut Value,
}

impl Drop for GotValue<'_> {
    fn drop(&mut self) {
        // SAFETY: PMIX_VALUE_RELEASE: the library frees what the value
        // holds, then the value itself, which it allocated with malloc.
        unsafe {
            (self.lib.value_destruct)(self.v);
            libc::free(self.v as *mut c_void);
        }
    }
}

fn cstring(s: &str) -> Result<CString, PmiError> {
    CString::new(s).map_err(|_| PmiError::Refused {
        what: "a PMIx key or value".into(),
        answer: format!("{s:?} holds a NUL byte"),
    })
}
