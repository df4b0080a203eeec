//! Info objects: ordered (key, value) strings a program passes as hints.
//! fm takes no hint yet, so what a call "used" is always empty; the
//! objects themselves behave as MPI-4.0 §10 says.

use crate::*;
use std::ffi::CStr;

/// One info object's entries, in the order their keys were first set.
pub(crate) type Entries = Vec<(String, String)>;

/// A C string argument, checked.
///
/// # Safety
/// `p` is null or a NUL-terminated string.
pub(crate) unsafe fn c_str<'a>(p: *const c_char, what: &str) -> MpiResult<&'a str> {
    if p.is_null() {
        return err(MPI_ERR_ARG, format!("a null {what}"));
    }
    CStr::from_ptr(p).to_str().map_err(|_| MpiError {
        class: MPI_ERR_ARG,
        message: format!("the {what} is not UTF-8"),
    })
}

/// An info key as MPI takes it: leading and trailing spaces stripped,
/// not empty, at most `MPI_MAX_INFO_KEY` characters.
pub(crate) fn key(k: &str) -> MpiResult<&str> {
    let k = k.trim_matches(' ');
    if k.is_empty() || k.len() > MPI_MAX_INFO_KEY {
        return err(
            MPI_ERR_INFO_KEY,
            format!(
                "an info key must have 1 to {MPI_MAX_INFO_KEY} characters, not {}",
                k.len()
            ),
        );
    }
    Ok(k)
}

/// Every info object of the process. MPI-4.0 lets a program use info
/// objects before `MPI_Init` and after `MPI_Finalize`, so they live here,
/// beside the library's state, under a lock of their own (taken after
/// the library's, never before it).
pub(crate) struct InfoTable {
    objects: Vec<Option<Entries>>,
    /// The job's size once `MPI_Init` has run (`MPI_INFO_ENV`'s maxprocs).
    pub(crate) universe: Option<c_int>,
}

static INFOS: Mutex<InfoTable> = Mutex::new(InfoTable {
    objects: Vec::new(),
    universe: None,
});

/// The process's info objects.
pub(crate) fn infos() -> std::sync::MutexGuard<'static, InfoTable> {
    INFOS.lock().unwrap_or_else(|p| p.into_inner())
}

/// An info call, in any phase: through [`call`] (and so the error
/// handler of `MPI_COMM_WORLD`) while MPI runs, else on its own, an error
/// coming back as its class.
pub(crate) fn info_call(func: &str, f: impl FnOnce(&mut InfoTable) -> MpiResult<()>) -> c_int {
    let running = !crate::state::in_call() && matches!(&*phase(), Phase::Running(_));
    if running {
        return call(func, MPI_COMM_WORLD, |_| f(&mut infos()));
    }
    f(&mut infos()).map_or_else(|e| e.class, |()| MPI_SUCCESS)
}

impl InfoTable {
    /// Info object `h`'s entries (`MPI_INFO_ENV`'s are the job's).
    pub(crate) fn get(&self, h: Handle) -> MpiResult<Entries> {
        match h {
            MPI_INFO_ENV => Ok(self.env()),
            h if h & !HANDLE_INDEX == INFO_DIRECT => self
                .objects
                .get((h & HANDLE_INDEX) as usize)
                .and_then(Clone::clone)
                .ok_or_else(|| MpiError {
                    class: MPI_ERR_INFO,
                    message: format!("{h:#x} is not an info object"),
                }),
            h => err(MPI_ERR_INFO, format!("{h:#x} is not an info object")),
        }
    }

    /// Info object `h`'s entries to change (not `MPI_INFO_ENV`).
    pub(crate) fn get_mut(&mut self, h: Handle) -> MpiResult<&mut Entries> {
        let found = (h & !HANDLE_INDEX == INFO_DIRECT)
            .then(|| self.objects.get_mut((h & HANDLE_INDEX) as usize))
            .flatten()
            .and_then(Option::as_mut);
        found.ok_or_else(|| MpiError {
            class: MPI_ERR_INFO,
            message: format!("{h:#x} is not an info object this call may change"),
        })
    }

    /// A new info object holding `entries`: its handle.
    pub(crate) fn add(&mut self, entries: Entries) -> MpiResult<Handle> {
        place(&mut self.objects, entries, INFO_DIRECT, "info objects")
    }

    pub(crate) fn free(&mut self, h: Handle) -> MpiResult<()> {
        self.get_mut(h)?;
        self.objects[(h & HANDLE_INDEX) as usize] = None;
        Ok(())
    }

    /// `MPI_INFO_ENV`: how the job was started, as far as fm knows it.
    fn env(&self) -> Entries {
        let mut e = Vec::new();
        // fmrun says the job's size to every rank before MPI_Init.
        let size = self
            .universe
            .map(|n| n.to_string())
            .or_else(|| std::env::var(fm::settings::SIZE.var).ok());
        if let Some(n) = size {
            e.push(("maxprocs".to_string(), n));
        }
        e.push(("host".into(), processor_name()));
        if let Ok(d) = std::env::current_dir() {
            e.push(("wdir".into(), d.display().to_string()));
        }
        let args: Vec<String> = std::env::args().collect();
        if let Some((cmd, rest)) = args.split_first() {
            e.push(("command".into(), cmd.clone()));
            if !rest.is_empty() {
                e.push(("argv".into(), rest.join(" ")));
            }
        }
        let level = match crate::threads::level() {
            MPI_THREAD_MULTIPLE => "MPI_THREAD_MULTIPLE",
            MPI_THREAD_SERIALIZED => "MPI_THREAD_SERIALIZED",
            MPI_THREAD_FUNNELED => "MPI_THREAD_FUNNELED",
            _ => "MPI_THREAD_SINGLE",
        };
        e.push(("thread_level".into(), level.into()));
        e
    }
}

impl Mpi {
    /// Info object `h`'s entries ([`InfoTable::get`]).
    pub(crate) fn info(&self, h: Handle) -> MpiResult<Entries> {
        infos().get(h)
    }
}
