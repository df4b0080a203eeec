//! Completion: wait, test, start, cancel, free.

use crate::generalized::{finish, CancelFn, FreeFn, Generalized, QueryFn};
use crate::*;
use fm_mpi_macros::mpi;

#[mpi]
fn PMPI_Wait(request: *mut Handle, status: *mut MpiStatus) -> c_int {
    wait("MPI_Wait", MPI_COMM_WORLD, request, status)
}

/// `MPI_Wait`, its error reported as `func`'s through `comm`'s handler
/// (the blocking calls that are a request and a wait under
/// `MPI_THREAD_MULTIPLE`).
///
/// # Safety
/// `request` and `status` are the caller's (MPI's rule).
pub(crate) unsafe fn wait(
    func: &str,
    comm: Handle,
    request: *mut Handle,
    status: *mut MpiStatus,
) -> c_int {
    let rc = crate::threads::ready(func, request, 1, true);
    if rc != MPI_SUCCESS {
        return rc;
    }
    finish(call(func, comm, |m| {
        let request = arg(request, "the request")?;
        let Some(id) = resolve(m, *request)? else {
            put_status(status, MpiStatus::empty());
            return Ok(());
        };
        let s = m.engine.wait(id)?;
        retire(m, request, status);
        put_status(status, s);
        status_result(&s)
    }))
}

#[mpi]
fn PMPI_Test(request: *mut Handle, flag: *mut c_int, status: *mut MpiStatus) -> c_int {
    finish(call("MPI_Test", MPI_COMM_WORLD, |m| {
        let request = arg(request, "the request")?;
        let flag = arg(flag, "the flag")?;
        let Some(id) = resolve(m, *request)? else {
            *flag = 1;
            put_status(status, MpiStatus::empty());
            return Ok(());
        };
        m.engine.progress()?;
        match m.engine.test(id) {
            Some(s) => {
                *flag = 1;
                retire(m, request, status);
                put_status(status, s);
                status_result(&s)
            }
            None => {
                *flag = 0;
                Ok(())
            }
        }
    }))
}

/// `MPI_Request_get_status`: `MPI_Test` that leaves the request as it is.
#[mpi]
fn PMPI_Request_get_status(request: Handle, flag: *mut c_int, status: *mut MpiStatus) -> c_int {
    finish(call("MPI_Request_get_status", MPI_COMM_WORLD, |m| {
        let flag = arg(flag, "the flag")?;
        let Some(id) = resolve(m, request)? else {
            *flag = 1;
            put_status(status, MpiStatus::empty());
            return Ok(());
        };
        m.engine.progress()?;
        match m.engine.peek(id) {
            Some(s) => {
                *flag = 1;
                m.queried(id, status);
                put_status(status, s);
                status_result(&s)
            }
            None => {
                *flag = 0;
                Ok(())
            }
        }
    }))
}

#[mpi]
fn PMPI_Waitall(count: c_int, requests: *mut Handle, statuses: *mut MpiStatus) -> c_int {
    let rc = crate::threads::ready("MPI_Waitall", requests, count, true);
    if rc != MPI_SUCCESS {
        return rc;
    }
    finish(call("MPI_Waitall", MPI_COMM_WORLD, |m| {
        let ids = request_ids(m, requests, count)?;
        let mut truncated = false;
        for (i, id) in ids.iter().enumerate() {
            let s = match id {
                None => MpiStatus::empty(),
                Some(id) => {
                    // Most are done by now (a window of small sends all
                    // are): taken at once, past the wait's machinery.
                    let s = match m.engine.test(*id) {
                        Some(s) => s,
                        None => m.engine.wait(*id)?,
                    };
                    retire(m, &mut *requests.add(i), status_slot(statuses, i));
                    s
                }
            };
            truncated |= s.error != MPI_SUCCESS;
            if statuses as usize != STATUS_IGNORE && !statuses.is_null() {
                *statuses.add(i) = s;
            }
        }
        if truncated {
            return err(MPI_ERR_IN_STATUS, "a request failed: see its status");
        }
        Ok(())
    }))
}

#[mpi]
fn PMPI_Waitany(
    count: c_int,
    requests: *mut Handle,
    index: *mut c_int,
    status: *mut MpiStatus,
) -> c_int {
    let rc = crate::threads::ready("MPI_Waitany", requests, count, false);
    if rc != MPI_SUCCESS {
        return rc;
    }
    finish(call("MPI_Waitany", MPI_COMM_WORLD, |m| {
        let ids = request_ids(m, requests, count)?;
        let index = arg(index, "the index")?;
        match m.engine.wait_any(&ids)? {
            None => {
                *index = MPI_UNDEFINED;
                put_status(status, MpiStatus::empty());
                Ok(())
            }
            Some((i, s)) => {
                *index = i as c_int;
                retire(m, &mut *requests.add(i), status);
                put_status(status, s);
                status_result(&s)
            }
        }
    }))
}

#[mpi]
fn PMPI_Testall(
    count: c_int,
    requests: *mut Handle,
    flag: *mut c_int,
    statuses: *mut MpiStatus,
) -> c_int {
    finish(call("MPI_Testall", MPI_COMM_WORLD, |m| {
        let ids = request_ids(m, requests, count)?;
        let flag = arg(flag, "the flag")?;
        m.engine.progress()?;
        if !ids.iter().flatten().all(|&id| m.engine.is_done(id)) {
            *flag = 0;
            return Ok(());
        }
        *flag = 1;
        for (i, id) in ids.iter().enumerate() {
            let s = id
                .and_then(|id| m.engine.test(id))
                .unwrap_or_else(MpiStatus::empty);
            if id.is_some() {
                retire(m, &mut *requests.add(i), status_slot(statuses, i));
            }
            if statuses as usize != STATUS_IGNORE && !statuses.is_null() {
                *statuses.add(i) = s;
            }
        }
        Ok(())
    }))
}

#[mpi]
fn PMPI_Testany(
    count: c_int,
    requests: *mut Handle,
    index: *mut c_int,
    flag: *mut c_int,
    status: *mut MpiStatus,
) -> c_int {
    finish(call("MPI_Testany", MPI_COMM_WORLD, |m| {
        let ids = request_ids(m, requests, count)?;
        let (index, flag) = (arg(index, "the index")?, arg(flag, "the flag")?);
        m.engine.progress()?;
        if ids.iter().all(Option::is_none) {
            *flag = 1;
            *index = MPI_UNDEFINED;
            put_status(status, MpiStatus::empty());
            return Ok(());
        }
        for (i, id) in ids.iter().enumerate() {
            if let Some(s) = id.and_then(|id| m.engine.test(id)) {
                *flag = 1;
                *index = i as c_int;
                retire(m, &mut *requests.add(i), status);
                put_status(status, s);
                return status_result(&s);
            }
        }
        *flag = 0;
        *index = MPI_UNDEFINED;
        Ok(())
    }))
}

#[mpi]
fn PMPI_Waitsome(
    incount: c_int,
    requests: *mut Handle,
    outcount: *mut c_int,
    indices: *mut c_int,
    statuses: *mut MpiStatus,
) -> c_int {
    let rc = crate::threads::ready("MPI_Waitsome", requests, incount, false);
    if rc != MPI_SUCCESS {
        return rc;
    }
    finish(call("MPI_Waitsome", MPI_COMM_WORLD, |m| {
        some(m, true, incount, requests, outcount, indices, statuses)
    }))
}

#[mpi]
fn PMPI_Testsome(
    incount: c_int,
    requests: *mut Handle,
    outcount: *mut c_int,
    indices: *mut c_int,
    statuses: *mut MpiStatus,
) -> c_int {
    finish(call("MPI_Testsome", MPI_COMM_WORLD, |m| {
        some(m, false, incount, requests, outcount, indices, statuses)
    }))
}

#[mpi]
fn PMPI_Start(request: *mut Handle) -> c_int {
    call("MPI_Start", MPI_COMM_WORLD, |m| {
        start(m, *arg(request, "the request")?)
    })
}

#[mpi]
fn PMPI_Startall(count: c_int, requests: *mut Handle) -> c_int {
    call("MPI_Startall", MPI_COMM_WORLD, |m| {
        if count < 0 {
            return err(MPI_ERR_COUNT, format!("count {count} is negative"));
        }
        if count > 0 && requests.is_null() {
            return err(MPI_ERR_ARG, "a null array of requests");
        }
        (0..count as usize).try_for_each(|i| start(m, *requests.add(i)))
    })
}

#[mpi]
fn PMPI_Request_free(request: *mut Handle) -> c_int {
    finish(call("MPI_Request_free", MPI_COMM_WORLD, |m| {
        let request = arg(request, "the request")?;
        if let Some(id) = resolve(m, *request)? {
            m.freed(id);
            m.engine.free_request(id);
        }
        if *request & !HANDLE_INDEX == PERSISTENT_DIRECT {
            let p = m.persistent[(*request & HANDLE_INDEX) as usize].take();
            // Its own duplicate of a derived datatype (`p2p::persistent`,
            // `partitioned::init`).
            let datatype = match p.map(|p| p.op) {
                Some(Started::P2p { datatype, .. }) => Some(datatype),
                Some(Started::Partitioned(q)) => Some(q.datatype),
                _ => None,
            };
            if let Some(t) = datatype.filter(|&t| !is_predefined_type(t)) {
                types::replace(t, None);
            }
        }
        *request = MPI_REQUEST_NULL;
        Ok(())
    }))
}

#[mpi]
fn PMPI_Cancel(request: *mut Handle) -> c_int {
    finish(call("MPI_Cancel", MPI_COMM_WORLD, |m| {
        if let Some(id) = resolve(m, *arg(request, "the request")?)? {
            m.cancelled(id);
            m.engine.cancel(id);
        }
        Ok(())
    }))
}

#[mpi]
fn PMPI_Test_cancelled(status: *const MpiStatus, flag: *mut c_int) -> c_int {
    if status.is_null() || status as usize == STATUS_IGNORE || flag.is_null() {
        return MPI_ERR_ARG;
    }
    *flag = c_int::from((*status).cancelled());
    MPI_SUCCESS
}

/// `MPI_Grequest_start`: a request the program completes itself
/// (`generalized`).
#[mpi]
fn PMPI_Grequest_start(
    query_fn: Option<QueryFn>,
    free_fn: Option<FreeFn>,
    cancel_fn: Option<CancelFn>,
    extra_state: *mut c_void,
    request: *mut Handle,
) -> c_int {
    call("MPI_Grequest_start", MPI_COMM_WORLD, |m| {
        let request = arg(request, "the request")?;
        let g = Generalized {
            query: query_fn,
            free: free_fn,
            cancel: cancel_fn,
            extra: extra_state,
            freed: false,
            fortran: false,
        };
        *request = request_handle(m.start_generalized(g));
        Ok(())
    })
}

/// `MPI_Grequest_complete`: the operation is done; a wait or test
/// completes the request now (a freed one's free function runs now).
#[mpi]
fn PMPI_Grequest_complete(request: Handle) -> c_int {
    finish(call("MPI_Grequest_complete", MPI_COMM_WORLD, |m| {
        m.complete_generalized(request_id(request)?)
    }))
}

/// MPICH's `MPII_Grequest_set_lang_f77`: Fortran's library started
/// `request`, whose functions are Fortran's.
#[no_mangle]
pub unsafe extern "C" fn MPII_Grequest_set_lang_f77(request: Handle) {
    if let (Phase::Running(m), Ok(id)) = (&mut *phase(), request_id(request)) {
        m.fortran_generalized(id);
    }
}

/// `MPI_Status_c2f`: MPICH's Fortran status is the C one's five ints.
#[mpi]
fn PMPI_Status_c2f(c_status: *const MpiStatus, f_status: *mut c_int) -> c_int {
    copy_status(c_status, f_status.cast())
}

/// `MPI_Status_f2c`.
#[mpi]
fn PMPI_Status_f2c(f_status: *const c_int, c_status: *mut MpiStatus) -> c_int {
    copy_status(f_status.cast(), c_status)
}

/// One status to another place (`MPI_STATUS_IGNORE` is no status).
unsafe fn copy_status(from: *const MpiStatus, to: *mut MpiStatus) -> c_int {
    let ignored = |p: usize| p == 0 || p == STATUS_IGNORE;
    if ignored(from as usize) || ignored(to as usize) {
        return MPI_ERR_ARG;
    }
    std::ptr::copy(from, to, 1);
    MPI_SUCCESS
}
