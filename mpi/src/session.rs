//! MPI-4.0's Sessions model (§11.3): a library starts MPI for itself with
//! `MPI_Session_init`, whether or not the program called `MPI_Init`,
//! finds the process sets `mpi://WORLD` and `mpi://SELF`, makes a group
//! of one and a communicator of that group (`MPI_Comm_create_from_group`).
//!
//! fm's library joins the job once, at the first `MPI_Init` or
//! `MPI_Session_init`, and leaves it when the World model and every
//! session are finalized (the last of `MPI_Finalize` and
//! `MPI_Session_finalize`); it does not start again after that.

use crate::*;

/// An open session: the error handler its calls report through, and the
/// thread level it provides.
pub(crate) struct Session {
    pub(crate) errhandler: Handle,
    pub(crate) thread_level: c_int,
}

/// The process sets every session sees, in the order `MPI_Session_get_nth_pset`
/// numbers them. Names are compared without regard to case.
pub(crate) const PSETS: [&str; 2] = ["mpi://WORLD", "mpi://SELF"];

/// The names of the thread levels, as the `thread_level` info key spells them.
pub(crate) const THREAD_LEVELS: [(&str, c_int); 4] = [
    ("MPI_THREAD_SINGLE", MPI_THREAD_SINGLE),
    ("MPI_THREAD_FUNNELED", MPI_THREAD_FUNNELED),
    ("MPI_THREAD_SERIALIZED", MPI_THREAD_SERIALIZED),
    ("MPI_THREAD_MULTIPLE", MPI_THREAD_MULTIPLE),
];

impl Mpi {
    /// Session `h`.
    pub(crate) fn session(&self, h: Handle) -> MpiResult<&Session> {
        let found = (h & !HANDLE_INDEX == SESSION_DIRECT)
            .then(|| self.sessions.get((h & HANDLE_INDEX) as usize))
            .flatten()
            .and_then(Option::as_ref);
        found.ok_or_else(|| MpiError {
            class: MPI_ERR_SESSION,
            message: format!("{h:#x} is not an open session"),
        })
    }

    pub(crate) fn session_mut(&mut self, h: Handle) -> MpiResult<&mut Session> {
        self.session(h)?;
        match self.sessions.get_mut((h & HANDLE_INDEX) as usize) {
            Some(Some(s)) => Ok(s),
            _ => err(MPI_ERR_SESSION, format!("{h:#x} is not an open session")),
        }
    }

    /// A new session: its handle.
    pub(crate) fn add_session(&mut self, s: Session) -> MpiResult<Handle> {
        place(&mut self.sessions, s, SESSION_DIRECT, "sessions")
    }

    /// The processes of process set `name`.
    pub(crate) fn pset(&self, name: &str) -> MpiResult<Arc<[fm::Rank]>> {
        match PSETS.iter().position(|p| p.eq_ignore_ascii_case(name)) {
            Some(0) => Ok(self.world()?.ranks.clone()),
            Some(_) => Ok(vec![self.engine.fm.rank()].into()),
            None => err(
                MPI_ERR_ARG,
                format!("no process set \"{name}\" (fm's are {PSETS:?})"),
            ),
        }
    }

    /// The job's communicator of every process, which sessions use as
    /// the World model does.
    pub(crate) fn world(&self) -> MpiResult<&Comm> {
        self.comm(MPI_COMM_WORLD)
    }

    /// Whether the library is still in use: the World model runs or a
    /// session is open.
    pub(crate) fn in_use(&self) -> bool {
        self.world == World::Initialized || self.sessions.iter().any(Option::is_some)
    }

    /// The library's last use ended: sends still open complete (their
    /// receivers may still want them), then every process of the job
    /// meets, so that nobody leaves while a peer needs it.
    pub(crate) fn leave(&mut self) -> MpiResult<()> {
        for id in self.engine.open_requests() {
            self.engine.settle(id)?;
        }
        self.collective(MPI_COMM_WORLD, crate::collective::Mode::Blocking, |c| {
            Ok(coll::barrier(c))
        })
    }
}
