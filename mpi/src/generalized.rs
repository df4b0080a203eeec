//! Generalized requests (MPI-4.0 §13.2): operations the program runs
//! itself and completes with `MPI_Grequest_complete`. Its query function
//! gives the status when a wait or test completes the request (and
//! `MPI_Request_get_status` asks), its free function runs once the request
//! is both complete and freed, its cancel function at `MPI_Cancel`.
//!
//! Those functions may call MPI, so they run outside the library's lock:
//! a call that completes, frees or cancels one notes what to run
//! (`Mpi::finishing`), and its binding runs that once the lock is
//! released ([`finish`]). Their return code is the call's, as MPI says.

use crate::*;
use std::sync::atomic::{AtomicBool, Ordering};

pub(crate) type QueryFn = unsafe extern "C" fn(*mut c_void, *mut MpiStatus) -> c_int;
pub(crate) type FreeFn = unsafe extern "C" fn(*mut c_void) -> c_int;
pub(crate) type CancelFn = unsafe extern "C" fn(*mut c_void, c_int) -> c_int;

/// The same three as Fortran's library passes them (MPICH's
/// `MPIR_Grequest_f77_*_function`): the error comes back in the last
/// argument, the cancel's flag by reference.
type FortranQuery = unsafe extern "C" fn(*mut c_void, *mut MpiStatus, *mut c_int);
type FortranFree = unsafe extern "C" fn(*mut c_void, *mut c_int);
type FortranCancel = unsafe extern "C" fn(*mut c_void, *mut c_int, *mut c_int);

/// One generalized request's functions and the program's state for them.
#[derive(Clone, Copy)]
pub(crate) struct Generalized {
    pub(crate) query: Option<QueryFn>,
    pub(crate) free: Option<FreeFn>,
    pub(crate) cancel: Option<CancelFn>,
    pub(crate) extra: *mut c_void,
    /// `MPI_Request_free` was called before it completed: the free
    /// function runs at `MPI_Grequest_complete`.
    pub(crate) freed: bool,
    /// Started from Fortran (`MPII_Grequest_set_lang_f77`): its functions
    /// are Fortran's.
    pub(crate) fortran: bool,
}

// SAFETY: `extra` is the program's, only handed back to its functions.
unsafe impl Send for Generalized {}

/// What to run of a generalized request's functions once the lock is
/// released.
pub(crate) enum Step {
    /// The query function, into the caller's status `out` (null or
    /// `MPI_STATUS_IGNORE`: a status of our own), then, with `free`, the
    /// free function.
    Query {
        out: *mut MpiStatus,
        free: bool,
    },
    Free,
    Cancel {
        complete: bool,
    },
}

pub(crate) struct Finish {
    pub(crate) request: Generalized,
    pub(crate) step: Step,
}

// SAFETY: `out` is the caller's status, written before its call returns.
unsafe impl Send for Finish {}

/// Whether the program ever started a generalized request: until it has,
/// [`finish`] takes no lock.
static STARTED: AtomicBool = AtomicBool::new(false);

impl Mpi {
    /// `MPI_Grequest_start`: a new request, not complete.
    pub(crate) fn start_generalized(&mut self, g: Generalized) -> u32 {
        STARTED.store(true, Ordering::Relaxed);
        let id = self.engine.generalized_request();
        self.generalized.insert(id, g);
        id
    }

    /// Request `id` completed and its handle is retired: if generalized,
    /// its query and free functions are to run, the status into `out`.
    pub(crate) fn retired(&mut self, id: u32, out: *mut MpiStatus) {
        // Every wait and test comes here: no hashing while there are none.
        if self.generalized.is_empty() {
            return;
        }
        if let Some(request) = self.generalized.remove(&id) {
            let step = Step::Query { out, free: true };
            self.finishing.push(Finish { request, step });
        }
    }

    /// `MPI_Request_get_status` of a complete request `id`: a generalized
    /// one's query function is to run, the status into `out`.
    pub(crate) fn queried(&mut self, id: u32, out: *mut MpiStatus) {
        if let Some(&request) = self.generalized.get(&id) {
            let step = Step::Query { out, free: false };
            self.finishing.push(Finish { request, step });
        }
    }

    /// `MPI_Request_free` of request `id`: a complete generalized one's
    /// free function is to run; one still running keeps it for its
    /// completion.
    pub(crate) fn freed(&mut self, id: u32) {
        let done = self.engine.is_done(id);
        match self.generalized.get_mut(&id) {
            Some(g) if !done => g.freed = true,
            Some(_) => {
                if let Some(request) = self.generalized.remove(&id) {
                    self.finishing.push(Finish {
                        request,
                        step: Step::Free,
                    });
                }
            }
            None => {}
        }
    }

    /// `MPI_Cancel` of request `id`: a generalized one's cancel function
    /// is to run.
    pub(crate) fn cancelled(&mut self, id: u32) {
        if let Some(&request) = self.generalized.get(&id) {
            let complete = self.engine.is_done(id);
            self.finishing.push(Finish {
                request,
                step: Step::Cancel { complete },
            });
        }
    }

    /// `MPII_Grequest_set_lang_f77`: request `id` was started from
    /// Fortran.
    pub(crate) fn fortran_generalized(&mut self, id: u32) {
        if let Some(g) = self.generalized.get_mut(&id) {
            g.fortran = true;
        }
    }

    /// `MPI_Grequest_complete` of request `id`.
    pub(crate) fn complete_generalized(&mut self, id: u32) -> MpiResult<()> {
        if !self.generalized.contains_key(&id) || !self.engine.complete_generalized(id) {
            return err(
                MPI_ERR_REQUEST,
                "not a generalized request still running (MPI_Grequest_start)",
            );
        }
        if self.generalized.get(&id).is_some_and(|g| g.freed) {
            if let Some(request) = self.generalized.remove(&id) {
                self.finishing.push(Finish {
                    request,
                    step: Step::Free,
                });
            }
        }
        Ok(())
    }
}

/// Run what the call that returned `rc` left to run of generalized
/// requests' functions, outside the lock: the first error any of them
/// returns is the call's, unless the call failed itself.
pub(crate) fn finish(rc: c_int) -> c_int {
    if !STARTED.load(Ordering::Relaxed) {
        return rc;
    }
    let steps = match &mut *phase() {
        Phase::Running(m) => std::mem::take(&mut m.finishing),
        _ => return rc,
    };
    let mut rc = rc;
    for f in steps {
        // SAFETY: the program's functions, called as MPI says, with its
        // state and the caller's status.
        let r = unsafe { f.run() };
        if rc == MPI_SUCCESS {
            rc = r;
        }
    }
    rc
}

impl Finish {
    /// # Safety
    /// The program's functions are valid; `out` is null, ignored or the
    /// caller's status.
    unsafe fn run(self) -> c_int {
        let g = self.request;
        let first_error = |a: c_int, b: c_int| if a != MPI_SUCCESS { a } else { b };
        match self.step {
            Step::Query { out, free } => {
                let mut s = MpiStatus::empty();
                let q = g.query.map_or(MPI_SUCCESS, |f| g.query_with(f, &mut s));
                put_status(out, s);
                let f = match free {
                    true => g.free.map_or(MPI_SUCCESS, |f| g.free_with(f)),
                    false => MPI_SUCCESS,
                };
                first_error(q, f)
            }
            Step::Free => g.free.map_or(MPI_SUCCESS, |f| g.free_with(f)),
            Step::Cancel { complete } => {
                g.cancel.map_or(MPI_SUCCESS, |f| g.cancel_with(f, complete))
            }
        }
    }
}

impl Generalized {
    /// # Safety
    /// `f` is the program's query function, of its language.
    unsafe fn query_with(&self, f: QueryFn, s: &mut MpiStatus) -> c_int {
        if !self.fortran {
            return f(self.extra, s);
        }
        let mut ierr = MPI_SUCCESS;
        std::mem::transmute::<QueryFn, FortranQuery>(f)(self.extra, s, &mut ierr);
        ierr
    }

    /// # Safety
    /// `f` is the program's free function, of its language.
    unsafe fn free_with(&self, f: FreeFn) -> c_int {
        if !self.fortran {
            return f(self.extra);
        }
        let mut ierr = MPI_SUCCESS;
        std::mem::transmute::<FreeFn, FortranFree>(f)(self.extra, &mut ierr);
        ierr
    }

    /// # Safety
    /// `f` is the program's cancel function, of its language.
    unsafe fn cancel_with(&self, f: CancelFn, complete: bool) -> c_int {
        if !self.fortran {
            return f(self.extra, c_int::from(complete));
        }
        let (mut flag, mut ierr) = (c_int::from(complete), MPI_SUCCESS);
        std::mem::transmute::<CancelFn, FortranCancel>(f)(self.extra, &mut flag, &mut ierr);
        ierr
    }
}
