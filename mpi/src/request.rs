//! Request and message handles: numbering, resolving, retiring, and
//! completing some of a list.

use crate::*;

pub(crate) fn request_handle(id: u32) -> Handle {
    REQUEST_DIRECT | id as Handle
}

pub(crate) fn request_id(h: Handle) -> MpiResult<u32> {
    if h & !HANDLE_INDEX == REQUEST_DIRECT {
        Ok((h & HANDLE_INDEX) as u32)
    } else {
        err(MPI_ERR_REQUEST, format!("{h:#x} is not a request"))
    }
}

/// What request handle `h` stands for now: the engine's request it runs
/// as, or `None` (`MPI_REQUEST_NULL`, or a persistent request not started).
pub(crate) fn resolve(m: &Mpi, h: Handle) -> MpiResult<Option<u32>> {
    match h {
        MPI_REQUEST_NULL => Ok(None),
        h if h & !HANDLE_INDEX == PERSISTENT_DIRECT => {
            match m.persistent.get((h & HANDLE_INDEX) as usize) {
                Some(Some(p)) => Ok(p.active),
                _ => err(MPI_ERR_REQUEST, format!("{h:#x} is not a request")),
            }
        }
        h => {
            let id = request_id(h)?;
            if m.engine.is_request(id) {
                Ok(Some(id))
            } else {
                err(MPI_ERR_REQUEST, format!("{h:#x} is not an active request"))
            }
        }
    }
}

/// A request completed: its handle becomes `MPI_REQUEST_NULL`, or, for a
/// persistent request, it stays and the request is inactive. `out` is
/// where the caller's status for it goes (a generalized request's query
/// function writes it: `generalized`).
pub(crate) fn retire(m: &mut Mpi, h: &mut Handle, out: *mut MpiStatus) {
    if let Ok(id) = request_id(*h) {
        m.retired(id, out);
    }
    if *h & !HANDLE_INDEX == PERSISTENT_DIRECT {
        if let Some(Some(p)) = m.persistent.get_mut((*h & HANDLE_INDEX) as usize) {
            p.active = None;
        }
    } else {
        *h = MPI_REQUEST_NULL;
    }
}

pub(crate) fn message_handle(id: u32) -> Handle {
    MESSAGE_DIRECT | id as Handle
}

/// A matched probe's message: `None` for `MPI_MESSAGE_NO_PROC`.
pub(crate) fn message_id(h: Handle) -> MpiResult<Option<u32>> {
    match h {
        MPI_MESSAGE_NO_PROC => Ok(None),
        h if h & !HANDLE_INDEX == MESSAGE_DIRECT => Ok(Some((h & HANDLE_INDEX) as u32)),
        h => err(
            MPI_ERR_REQUEST,
            format!("{h:#x} is not a message a matched probe returned"),
        ),
    }
}

/// `MPI_Waitsome` (`wait`) and `MPI_Testsome`: the requests of the array
/// that are complete (after waiting for one, for Waitsome), taken.
///
/// # Safety
/// As the two calls': the arrays hold `incount` entries.
pub(crate) unsafe fn some(
    m: &mut Mpi,
    wait: bool,
    incount: c_int,
    requests: *mut Handle,
    outcount: *mut c_int,
    indices: *mut c_int,
    statuses: *mut MpiStatus,
) -> MpiResult<()> {
    let ids = request_ids(m, requests, incount)?;
    let outcount = arg(outcount, "the count out")?;
    if ids.iter().all(Option::is_none) {
        *outcount = MPI_UNDEFINED;
        return Ok(());
    }
    if wait {
        m.engine.wait_until_any(&ids)?;
    } else {
        m.engine.progress()?;
    }
    *outcount = take_completed(m, &ids, requests, indices, statuses)?;
    Ok(())
}

/// The completed requests among `ids`, taken: their indices into the
/// caller's array (written to `indices`), and statuses (to `statuses`
/// unless ignored); the handles are set to `MPI_REQUEST_NULL`.
///
/// # Safety
/// `requests`, `indices` and `statuses` hold as many as `ids`.
pub(crate) unsafe fn take_completed(
    m: &mut Mpi,
    ids: &[Option<u32>],
    requests: *mut Handle,
    indices: *mut c_int,
    statuses: *mut MpiStatus,
) -> MpiResult<c_int> {
    let mut n = 0;
    let mut failed = false;
    for (i, id) in ids.iter().enumerate() {
        let Some(s) = id.and_then(|id| m.engine.test(id)) else {
            continue;
        };
        retire(m, &mut *requests.add(i), status_slot(statuses, n));
        if !indices.is_null() {
            *indices.add(n) = i as c_int;
        }
        if !statuses.is_null() && statuses as usize != STATUS_IGNORE {
            *statuses.add(n) = s;
        }
        failed |= s.error != MPI_SUCCESS;
        n += 1;
    }
    if failed {
        return err(MPI_ERR_IN_STATUS, "a request failed: see its status");
    }
    Ok(n as c_int)
}

/// Entry `i` of a caller's array of statuses, or null where they are
/// ignored.
///
/// # Safety
/// `statuses` is null, `MPI_STATUSES_IGNORE` or holds more than `i`.
pub(crate) unsafe fn status_slot(statuses: *mut MpiStatus, i: usize) -> *mut MpiStatus {
    match statuses.is_null() || statuses as usize == STATUS_IGNORE {
        true => std::ptr::null_mut(),
        false => statuses.add(i),
    }
}

/// The engine's requests of an array of handles ([`resolve`]): `None` for
/// `MPI_REQUEST_NULL` and persistent requests not started.
///
/// # Safety
/// `requests` holds `count` handles.
pub(crate) unsafe fn request_ids(
    m: &Mpi,
    requests: *mut Handle,
    count: c_int,
) -> MpiResult<Vec<Option<u32>>> {
    if count < 0 {
        return err(MPI_ERR_COUNT, format!("count {count} is negative"));
    }
    if count > 0 && requests.is_null() {
        return err(MPI_ERR_ARG, "a null array of requests");
    }
    // Sized once: collecting a fallible iterator grows the vector step
    // by step, a reallocation each (a tenth of a small message's cost in
    // a window's `MPI_Waitall`).
    let mut ids = Vec::with_capacity(count as usize);
    for i in 0..count as usize {
        ids.push(resolve(m, *requests.add(i))?);
    }
    Ok(ids)
}
