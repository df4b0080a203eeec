//! MPI-4.0's Sessions (`session`): starting MPI without `MPI_Init`,
//! process sets, and communicators made from their groups.

use crate::info::{c_str, infos};
use crate::session::{Session, PSETS, THREAD_LEVELS};
use crate::*;
use fm_mpi_macros::mpi;

use super::errhan::PMPI_Comm_create_errhandler;
use crate::errors::HandlerFn;

/// `MPI_Session_init`: a new session; the first one (or `MPI_Init`)
/// joins the job. The `thread_level` info key asks for a thread level;
/// the session provides it (up to `MPI_THREAD_MULTIPLE`, `threads`).
#[mpi]
fn PMPI_Session_init(info: Handle, errhandler: Handle, session: *mut Handle) -> c_int {
    let requested = match requested_level(info) {
        Ok(l) => l,
        Err(e) => return before_session("MPI_Session_init", errhandler, e),
    };
    {
        let mut g = phase();
        match &*g {
            Phase::Before => *g = Phase::Running(state::join_job("MPI_Session_init")),
            Phase::Running(_) => {}
            Phase::Finalized => {
                drop(g);
                let why = "fm's MPI does not start again once MPI_Finalize or the last MPI_Session_finalize ended it";
                return before_session(
                    "MPI_Session_init",
                    errhandler,
                    MpiError {
                        class: MPI_ERR_OTHER,
                        message: why.into(),
                    },
                );
            }
        }
    }
    call("MPI_Session_init", MPI_COMM_SELF, |m| {
        let out = arg(session, "the session")?;
        let errhandler = m.errors.settable(errhandler)?;
        let thread_level = crate::threads::provide(m, requested);
        *out = m.add_session(Session {
            errhandler,
            thread_level,
        })?;
        Ok(())
    })
}

/// An error before a session exists: through the handler the program gave
/// (`MPI_ERRORS_RETURN` returns the class), else fatal.
fn before_session(func: &str, errhandler: Handle, e: MpiError) -> c_int {
    match errhandler {
        MPI_ERRORS_RETURN => {
            tracing::warn!("{func}: {}", e.message);
            e.class
        }
        _ => state::fatal(None, func, &e.message),
    }
}

/// The thread level info object `info` asks for (`thread_level`), or
/// `MPI_THREAD_SINGLE`, MPI-4.0's default for a session.
fn requested_level(info: Handle) -> MpiResult<c_int> {
    if info == MPI_INFO_NULL {
        return Ok(MPI_THREAD_SINGLE);
    }
    let entries = infos().get(info)?;
    match entries.iter().find(|(k, _)| k == "thread_level") {
        None => Ok(MPI_THREAD_SINGLE),
        Some((_, v)) => THREAD_LEVELS
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(v.trim()))
            .map(|&(_, level)| level)
            .ok_or_else(|| MpiError {
                class: MPI_ERR_INFO_VALUE,
                message: format!("thread_level \"{v}\" is not one of MPI's thread levels"),
            }),
    }
}

/// `MPI_Session_finalize`: the session ends; the last use of the library
/// (no session open, the World model not running) leaves the job, every
/// process meeting first.
#[mpi]
fn PMPI_Session_finalize(session: *mut Handle) -> c_int {
    let h = if session.is_null() {
        MPI_SESSION_NULL
    } else {
        *session
    };
    let r = call("MPI_Session_finalize", h, |m| {
        let out = arg(session, "the session")?;
        m.session(*out)?;
        m.sessions[(*out & HANDLE_INDEX) as usize] = None;
        *out = MPI_SESSION_NULL;
        Ok(())
    });
    if r != MPI_SUCCESS {
        return r;
    }
    let mut g = phase();
    if let Phase::Running(m) = &mut *g {
        if !m.in_use() {
            if let Err(e) = m.leave() {
                let rank = m.comms[0].as_ref().map(|c| c.rank);
                state::fatal(rank, "MPI_Session_finalize", &e.message);
            }
            *g = Phase::Finalized;
        }
    }
    MPI_SUCCESS
}

/// `MPI_Session_get_info`: the hints the session uses: `thread_level`,
/// the level it provides.
#[mpi]
fn PMPI_Session_get_info(session: Handle, info_used: *mut Handle) -> c_int {
    call("MPI_Session_get_info", session, |m| {
        let out = arg(info_used, "the info object")?;
        let level = m.session(session)?.thread_level;
        let name = THREAD_LEVELS
            .iter()
            .find(|(_, l)| *l == level)
            .map_or("MPI_THREAD_SINGLE", |(n, _)| n);
        *out = infos().add(vec![("thread_level".into(), name.into())])?;
        Ok(())
    })
}

#[mpi]
fn PMPI_Session_get_num_psets(session: Handle, _info: Handle, npset_names: *mut c_int) -> c_int {
    call("MPI_Session_get_num_psets", session, |m| {
        m.session(session)?;
        *arg(npset_names, "the number of process sets")? = PSETS.len() as c_int;
        Ok(())
    })
}

/// `MPI_Session_get_nth_pset`: with `*pset_len` 0, the length the name
/// needs (with its NUL); else the name, cut to `*pset_len` with its NUL.
#[mpi]
fn PMPI_Session_get_nth_pset(
    session: Handle,
    _info: Handle,
    n: c_int,
    pset_len: *mut c_int,
    pset_name: *mut c_char,
) -> c_int {
    call("MPI_Session_get_nth_pset", session, |m| {
        m.session(session)?;
        let len = arg(pset_len, "the name's length")?;
        let Some(name) = usize::try_from(n).ok().and_then(|n| PSETS.get(n)) else {
            return err(MPI_ERR_ARG, format!("process set {n} of {}", PSETS.len()));
        };
        if *len <= 0 {
            *len = name.len() as c_int + 1;
            return Ok(());
        }
        if pset_name.is_null() {
            return err(MPI_ERR_ARG, "a null buffer for the process set's name");
        }
        let room = (*len as usize - 1).min(name.len());
        std::ptr::copy_nonoverlapping(name.as_ptr().cast::<c_char>(), pset_name, room);
        *pset_name.add(room) = 0;
        *len = room as c_int + 1;
        Ok(())
    })
}

/// `MPI_Session_get_pset_info`: `mpi_size`, the set's number of processes.
#[mpi]
fn PMPI_Session_get_pset_info(
    session: Handle,
    pset_name: *const c_char,
    info: *mut Handle,
) -> c_int {
    call("MPI_Session_get_pset_info", session, |m| {
        m.session(session)?;
        let out = arg(info, "the info object")?;
        let size = m.pset(c_str(pset_name, "the process set's name")?)?.len();
        *out = infos().add(vec![("mpi_size".into(), size.to_string())])?;
        Ok(())
    })
}

#[mpi]
fn PMPI_Group_from_session_pset(
    session: Handle,
    pset_name: *const c_char,
    newgroup: *mut Handle,
) -> c_int {
    call("MPI_Group_from_session_pset", session, |m| {
        m.session(session)?;
        let out = arg(newgroup, "the new group")?;
        let members = m.pset(c_str(pset_name, "the process set's name")?)?;
        *out = m.add_group(members)?;
        Ok(())
    })
}

/// `MPI_Comm_create_from_group`: a communicator of `group`'s members,
/// each of which calls this with the same `stringtag`.
#[mpi]
fn PMPI_Comm_create_from_group(
    group: Handle,
    stringtag: *const c_char,
    info: Handle,
    errhandler: Handle,
    newcomm: *mut Handle,
) -> c_int {
    let func = "MPI_Comm_create_from_group";
    super::comm::made_when_agreed(func, MPI_COMM_SELF, newcomm, |m| {
        if info != MPI_INFO_NULL {
            m.info(info)?;
        }
        let tag = c_str(stringtag, "the string tag")?.as_bytes();
        let errhandler = m.errors.settable(errhandler)?;
        let members = m.group(group)?;
        let (new, req) = intercomm::create_from_group(m, members, tag, errhandler)?;
        Ok((new, Some(req)))
    })
}

#[mpi]
fn PMPI_Session_create_errhandler(function: Option<HandlerFn>, errhandler: *mut Handle) -> c_int {
    PMPI_Comm_create_errhandler(function, errhandler)
}

#[mpi]
fn PMPI_Session_set_errhandler(session: Handle, errhandler: Handle) -> c_int {
    call("MPI_Session_set_errhandler", session, |m| {
        let h = m.errors.settable(errhandler)?;
        m.session_mut(session)?.errhandler = h;
        Ok(())
    })
}

#[mpi]
fn PMPI_Session_get_errhandler(session: Handle, errhandler: *mut Handle) -> c_int {
    call("MPI_Session_get_errhandler", session, |m| {
        *arg(errhandler, "the error handler")? = m.session(session)?.errhandler;
        Ok(())
    })
}

/// `MPI_Session_call_errhandler`: the session's handler, with `errorcode`.
#[mpi]
fn PMPI_Session_call_errhandler(session: Handle, errorcode: c_int) -> c_int {
    let called = call("MPI_Session_call_errhandler", session, |m| {
        m.session(session)?;
        err(errorcode, format!("the program raised error {errorcode}"))
    });
    match called == MPI_ERR_SESSION && errorcode != MPI_ERR_SESSION {
        true => MPI_ERR_SESSION,
        false => MPI_SUCCESS,
    }
}
