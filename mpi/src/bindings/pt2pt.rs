//! Point-to-point: sends, receives, probes, buffers, persistent requests.

use crate::*;
use fm_mpi_macros::mpi;

#[mpi]
fn PMPI_Send(
    buf: *const c_void,
    count: IntOrCount,
    datatype: Handle,
    dest: c_int,
    tag: c_int,
    comm: Handle,
) -> c_int {
    blocking_send(
        "MPI_Send",
        (buf, count.into(), datatype, dest, tag, comm),
        false,
    )
}

#[mpi]
fn PMPI_Rsend(
    buf: *const c_void,
    count: IntOrCount,
    datatype: Handle,
    dest: c_int,
    tag: c_int,
    comm: Handle,
) -> c_int {
    blocking_send(
        "MPI_Rsend",
        (buf, count.into(), datatype, dest, tag, comm),
        false,
    )
}

#[mpi]
fn PMPI_Ssend(
    buf: *const c_void,
    count: IntOrCount,
    datatype: Handle,
    dest: c_int,
    tag: c_int,
    comm: Handle,
) -> c_int {
    blocking_send(
        "MPI_Ssend",
        (buf, count.into(), datatype, dest, tag, comm),
        true,
    )
}

/// `MPI_Send`, `MPI_Rsend` and `MPI_Ssend` (`sync`): under one hold of
/// the lock, as always; under `MPI_THREAD_MULTIPLE`, started and waited
/// for without it (`threads`).
fn blocking_send(
    func: &str,
    (buf, count, datatype, dest, tag, comm): (*const c_void, i64, Handle, c_int, c_int, Handle),
    sync: bool,
) -> c_int {
    if !crate::threads::multiple() {
        return call(func, comm, |m| {
            send(m, buf, count, datatype, dest, tag, comm, sync, None)
        });
    }
    let mut id = 0;
    let rc = call(func, comm, |m| {
        id = request_id(started_send(
            m, buf, count, datatype, dest, tag, comm, sync,
        )?)?;
        Ok(())
    });
    if rc != MPI_SUCCESS {
        return rc;
    }
    // A standard send may return once its data is set aside, as alone.
    crate::threads::until(func, comm, |m| {
        Ok(match sync {
            true => m.engine.test(id).is_some(),
            false => m.engine.send_may_return(id),
        })
    })
}

#[mpi]
fn PMPI_Isend(
    buf: *const c_void,
    count: IntOrCount,
    datatype: Handle,
    dest: c_int,
    tag: c_int,
    comm: Handle,
    request: *mut Handle,
) -> c_int {
    call("MPI_Isend", comm, |m| {
        send(
            m,
            buf,
            count.into(),
            datatype,
            dest,
            tag,
            comm,
            false,
            Some(request),
        )
    })
}

#[mpi]
fn PMPI_Irsend(
    buf: *const c_void,
    count: IntOrCount,
    datatype: Handle,
    dest: c_int,
    tag: c_int,
    comm: Handle,
    request: *mut Handle,
) -> c_int {
    call("MPI_Irsend", comm, |m| {
        send(
            m,
            buf,
            count.into(),
            datatype,
            dest,
            tag,
            comm,
            false,
            Some(request),
        )
    })
}

#[mpi]
fn PMPI_Issend(
    buf: *const c_void,
    count: IntOrCount,
    datatype: Handle,
    dest: c_int,
    tag: c_int,
    comm: Handle,
    request: *mut Handle,
) -> c_int {
    call("MPI_Issend", comm, |m| {
        send(
            m,
            buf,
            count.into(),
            datatype,
            dest,
            tag,
            comm,
            true,
            Some(request),
        )
    })
}

#[mpi]
fn PMPI_Recv(
    buf: *mut c_void,
    count: IntOrCount,
    datatype: Handle,
    source: c_int,
    tag: c_int,
    comm: Handle,
    status: *mut MpiStatus,
) -> c_int {
    blocking(
        "MPI_Recv",
        comm,
        |m| recv(m, buf, count.into(), datatype, source, tag, comm),
        |_, s| {
            put_status(status, s);
            status_result(&s)
        },
    )
}

#[mpi]
fn PMPI_Irecv(
    buf: *mut c_void,
    count: IntOrCount,
    datatype: Handle,
    source: c_int,
    tag: c_int,
    comm: Handle,
    request: *mut Handle,
) -> c_int {
    call("MPI_Irecv", comm, |m| {
        let request = arg(request, "the request")?;
        let id = recv(m, buf, count.into(), datatype, source, tag, comm)?;
        *request = request_handle(id);
        Ok(())
    })
}

/// `MPI_Isendrecv` (MPI-4.0): the send and the receive of `MPI_Sendrecv`
/// started at once, one request for both.
#[mpi]
fn PMPI_Isendrecv(
    sendbuf: *const c_void,
    sendcount: IntOrCount,
    sendtype: Handle,
    dest: c_int,
    sendtag: c_int,
    recvbuf: *mut c_void,
    recvcount: IntOrCount,
    recvtype: Handle,
    source: c_int,
    recvtag: c_int,
    comm: Handle,
    request: *mut Handle,
) -> c_int {
    call("MPI_Isendrecv", comm, |m| {
        let request = arg(request, "the request")?;
        let (sreq, r) = start_sendrecv(
            m,
            (sendbuf, sendcount.into(), sendtype, dest, sendtag),
            (recvbuf, recvcount.into(), recvtype, source, recvtag),
            comm,
        )?;
        let s = resolve(m, sreq)?;
        *request = request_handle(m.engine.start_pair(s, r)?);
        Ok(())
    })
}

/// The receive and then the send of `MPI_Sendrecv` and `MPI_Isendrecv`,
/// started: the send's request handle and the receive's request.
fn start_sendrecv(
    m: &mut Mpi,
    (sendbuf, sendcount, sendtype, dest, sendtag): (*const c_void, i64, Handle, c_int, c_int),
    (recvbuf, recvcount, recvtype, source, recvtag): (*mut c_void, i64, Handle, c_int, c_int),
    comm: Handle,
) -> MpiResult<(Handle, u32)> {
    let r = recv(m, recvbuf, recvcount, recvtype, source, recvtag, comm)?;
    let sreq = started_send(m, sendbuf, sendcount, sendtype, dest, sendtag, comm, false)?;
    Ok((sreq, r))
}

#[mpi]
fn PMPI_Sendrecv(
    sendbuf: *const c_void,
    sendcount: IntOrCount,
    sendtype: Handle,
    dest: c_int,
    sendtag: c_int,
    recvbuf: *mut c_void,
    recvcount: IntOrCount,
    recvtype: Handle,
    source: c_int,
    recvtag: c_int,
    comm: Handle,
    status: *mut MpiStatus,
) -> c_int {
    let start = |m: &mut Mpi| {
        start_sendrecv(
            m,
            (sendbuf, sendcount.into(), sendtype, dest, sendtag),
            (recvbuf, recvcount.into(), recvtype, source, recvtag),
            comm,
        )
    };
    let end = |s: MpiStatus| {
        put_status(status, s);
        status_result(&s)
    };
    if crate::threads::multiple() {
        // One request for both, waited for without the lock (`threads`).
        return blocking(
            "MPI_Sendrecv",
            comm,
            |m| {
                let (sreq, r) = start(m)?;
                let sreq = resolve(m, sreq)?;
                m.engine.start_pair(sreq, r)
            },
            |_, s| end(s),
        );
    }
    call("MPI_Sendrecv", comm, |m| {
        let (sreq, r) = start(m)?;
        m.engine.wait(request_id(sreq)?)?;
        end(m.engine.wait(r)?)
    })
}

#[mpi]
fn PMPI_Sendrecv_replace(
    buf: *mut c_void,
    count: IntOrCount,
    datatype: Handle,
    dest: c_int,
    sendtag: c_int,
    source: c_int,
    recvtag: c_int,
    comm: Handle,
    status: *mut MpiStatus,
) -> c_int {
    if crate::threads::multiple() {
        // `MPI_Isendrecv_replace`'s way, waited for without the lock.
        return blocking(
            "MPI_Sendrecv_replace",
            comm,
            |m| {
                let (to, from) = ((dest, sendtag), (source, recvtag));
                start_sendrecv_replace(m, buf, count.into(), datatype, to, from, comm)
            },
            |_, s| {
                put_status(status, s);
                status_result(&s)
            },
        );
    }
    call("MPI_Sendrecv_replace", comm, |m| {
        let elements = m.elements(count.into(), datatype)?;
        check_buffer(buf, elements.bytes(), datatype)?;
        // The send starts first. A packed type's packs its elements into a
        // message of its own at once, so the receive may unpack straight
        // into them; plain bytes are sent from where they are, so the
        // message comes into a buffer of its own and replaces them (at
        // their offset) once both are done.
        let sreq = started_send(m, buf, count.into(), datatype, dest, sendtag, comm, false)?;
        let (r, incoming) = match elements {
            Elements::Packed { .. } => (
                recv(m, buf, count.into(), datatype, source, recvtag, comm)?,
                None,
            ),
            Elements::Plain { at, bytes } => {
                let (c, source) = m.recv_from(comm, source, recvtag)?;
                let mut v = vec![0u8; bytes];
                // SAFETY: `v` (its heap buffer) lives until the receive
                // is waited for, below.
                let r = m
                    .engine
                    .irecv(c.context, source, recvtag, v.as_mut_ptr(), bytes)?;
                (r, Some((at, v)))
            }
        };
        m.engine.wait(request_id(sreq)?)?;
        let s = m.engine.wait(r)?;
        if let Some((at, v)) = incoming {
            let n = (s.bytes() as usize).min(v.len());
            if n > 0 {
                // SAFETY: the caller's `count` elements, `v.len()` plain
                // bytes from `at` (MPI's rule for the buffer).
                std::ptr::copy_nonoverlapping(v.as_ptr(), buf.cast::<u8>().offset(at), n);
            }
        }
        put_status(status, s);
        status_result(&s)
    })
}

/// `MPI_Isendrecv_replace`: the data to send is copied first, so the
/// receive may write over it at once; one request for both.
#[mpi]
fn PMPI_Isendrecv_replace(
    buf: *mut c_void,
    count: IntOrCount,
    datatype: Handle,
    dest: c_int,
    sendtag: c_int,
    source: c_int,
    recvtag: c_int,
    comm: Handle,
    request: *mut Handle,
) -> c_int {
    call("MPI_Isendrecv_replace", comm, |m| {
        let request = arg(request, "the request")?;
        let r = start_sendrecv_replace(
            m,
            buf,
            count.into(),
            datatype,
            (dest, sendtag),
            (source, recvtag),
            comm,
        )?;
        *request = request_handle(r);
        Ok(())
    })
}

/// `MPI_Isendrecv_replace` started: its request.
///
/// # Safety
/// `buf` holds `count` elements of `datatype` (MPI's rule).
unsafe fn start_sendrecv_replace(
    m: &mut Mpi,
    buf: *mut c_void,
    count: i64,
    datatype: Handle,
    (dest, sendtag): (c_int, c_int),
    (source, recvtag): (c_int, c_int),
    comm: Handle,
) -> MpiResult<u32> {
    let elements = m.elements(count, datatype)?;
    check_buffer(buf, elements.bytes(), datatype)?;
    let to = m.p2p(comm, dest, false, sendtag)?;
    let s = m
        .engine
        .isend_owned(to, sendtag, copy_of(buf, count, elements), false)?;
    let r = recv(m, buf, count, datatype, source, recvtag, comm)?;
    m.engine.start_pair(Some(s), r)
}

#[mpi]
fn PMPI_Improbe(
    source: c_int,
    tag: c_int,
    comm: Handle,
    flag: *mut c_int,
    message: *mut Handle,
    status: *mut MpiStatus,
) -> c_int {
    call("MPI_Improbe", comm, |m| {
        improbe(m, source, tag, comm, flag, message, status)
    })
}

/// `MPI_Improbe`'s work.
///
/// # Safety
/// `flag`, `message` and `status` are the caller's (MPI's rule).
unsafe fn improbe(
    m: &mut Mpi,
    source: c_int,
    tag: c_int,
    comm: Handle,
    flag: *mut c_int,
    message: *mut Handle,
    status: *mut MpiStatus,
) -> MpiResult<()> {
    let (flag, message) = (arg(flag, "the flag")?, arg(message, "the message")?);
    let (c, source) = m.recv_from(comm, source, tag)?;
    if source == MPI_PROC_NULL {
        *flag = 1;
        *message = MPI_MESSAGE_NO_PROC;
        put_status(status, MpiStatus::proc_null());
        return Ok(());
    }
    match m.engine.improbe(c.context, source, tag)? {
        Some((id, s)) => {
            *flag = 1;
            *message = message_handle(id);
            put_status(status, s);
        }
        None => *flag = 0,
    }
    Ok(())
}

#[mpi]
fn PMPI_Mprobe(
    source: c_int,
    tag: c_int,
    comm: Handle,
    message: *mut Handle,
    status: *mut MpiStatus,
) -> c_int {
    if crate::threads::multiple() {
        // Matched probes, without the lock between them (`threads`).
        return crate::threads::until("MPI_Mprobe", comm, |m| {
            let mut flag = 0;
            improbe(m, source, tag, comm, &mut flag, message, status)?;
            Ok(flag != 0)
        });
    }
    call("MPI_Mprobe", comm, |m| {
        let message = arg(message, "the message")?;
        let (c, source) = m.recv_from(comm, source, tag)?;
        if source == MPI_PROC_NULL {
            *message = MPI_MESSAGE_NO_PROC;
            put_status(status, MpiStatus::proc_null());
            return Ok(());
        }
        let (id, s) = m.engine.mprobe(c.context, source, tag)?;
        *message = message_handle(id);
        put_status(status, s);
        Ok(())
    })
}

#[mpi]
fn PMPI_Imrecv(
    buf: *mut c_void,
    count: IntOrCount,
    datatype: Handle,
    message: *mut Handle,
    request: *mut Handle,
) -> c_int {
    call("MPI_Imrecv", MPI_COMM_WORLD, |m| {
        let (message, request) = (arg(message, "the message")?, arg(request, "the request")?);
        let id = mrecv_start(m, buf, count.into(), datatype, *message)?;
        *message = MPI_MESSAGE_NULL;
        *request = request_handle(id);
        Ok(())
    })
}

#[mpi]
fn PMPI_Mrecv(
    buf: *mut c_void,
    count: IntOrCount,
    datatype: Handle,
    message: *mut Handle,
    status: *mut MpiStatus,
) -> c_int {
    blocking(
        "MPI_Mrecv",
        MPI_COMM_WORLD,
        |m| {
            let message = arg(message, "the message")?;
            let id = mrecv_start(m, buf, count.into(), datatype, *message)?;
            *message = MPI_MESSAGE_NULL;
            Ok(id)
        },
        |_, s| {
            put_status(status, s);
            status_result(&s)
        },
    )
}

#[mpi]
fn PMPI_Buffer_attach(buffer: *mut c_void, size: IntOrCount) -> c_int {
    call("MPI_Buffer_attach", MPI_COMM_WORLD, |m| {
        if m.attached.is_some() {
            return err(
                MPI_ERR_BUFFER,
                "a buffer is attached already (MPI_Buffer_detach it first)",
            );
        }
        if size < 0 || (buffer.is_null() && size > 0) {
            return err(
                MPI_ERR_BUFFER,
                format!("a buffer of {size} bytes at {buffer:?}"),
            );
        }
        m.attached = Some((buffer as usize, size as usize));
        Ok(())
    })
}

#[mpi]
fn PMPI_Buffer_detach(buffer_addr: *mut c_void, size: *mut IntOrCount) -> c_int {
    call("MPI_Buffer_detach", MPI_COMM_WORLD, |m| {
        // Every buffered send completes first.
        while let Some((id, data)) = m.buffered.pop() {
            m.engine.wait(id)?;
            drop(data);
        }
        let (addr, bytes) = m.attached.take().unwrap_or((0, 0));
        if !buffer_addr.is_null() {
            *buffer_addr.cast::<*mut c_void>() = addr as *mut c_void;
        }
        if !size.is_null() {
            *size = IntOrCount::try_from(bytes).unwrap_or(IntOrCount::MAX);
        }
        Ok(())
    })
}

#[mpi]
fn PMPI_Bsend(
    buf: *const c_void,
    count: IntOrCount,
    datatype: Handle,
    dest: c_int,
    tag: c_int,
    comm: Handle,
) -> c_int {
    call("MPI_Bsend", comm, |m| {
        bsend(m, buf, count.into(), datatype, dest, tag, comm)
    })
}

#[mpi]
fn PMPI_Ibsend(
    buf: *const c_void,
    count: IntOrCount,
    datatype: Handle,
    dest: c_int,
    tag: c_int,
    comm: Handle,
    request: *mut Handle,
) -> c_int {
    call("MPI_Ibsend", comm, |m| {
        let request = arg(request, "the request")?;
        bsend(m, buf, count.into(), datatype, dest, tag, comm)?;
        // Buffered: complete as soon as the data is copied.
        *request = request_handle(m.engine.null_request());
        Ok(())
    })
}

#[mpi]
fn PMPI_Send_init(
    buf: *const c_void,
    count: IntOrCount,
    datatype: Handle,
    dest: c_int,
    tag: c_int,
    comm: Handle,
    request: *mut Handle,
) -> c_int {
    send_init(
        "MPI_Send_init",
        SendMode::Standard,
        buf,
        count.into(),
        datatype,
        dest,
        tag,
        comm,
        request,
    )
}

#[mpi]
fn PMPI_Ssend_init(
    buf: *const c_void,
    count: IntOrCount,
    datatype: Handle,
    dest: c_int,
    tag: c_int,
    comm: Handle,
    request: *mut Handle,
) -> c_int {
    send_init(
        "MPI_Ssend_init",
        SendMode::Synchronous,
        buf,
        count.into(),
        datatype,
        dest,
        tag,
        comm,
        request,
    )
}

#[mpi]
fn PMPI_Rsend_init(
    buf: *const c_void,
    count: IntOrCount,
    datatype: Handle,
    dest: c_int,
    tag: c_int,
    comm: Handle,
    request: *mut Handle,
) -> c_int {
    send_init(
        "MPI_Rsend_init",
        SendMode::Standard,
        buf,
        count.into(),
        datatype,
        dest,
        tag,
        comm,
        request,
    )
}

#[mpi]
fn PMPI_Bsend_init(
    buf: *const c_void,
    count: IntOrCount,
    datatype: Handle,
    dest: c_int,
    tag: c_int,
    comm: Handle,
    request: *mut Handle,
) -> c_int {
    send_init(
        "MPI_Bsend_init",
        SendMode::Buffered,
        buf,
        count.into(),
        datatype,
        dest,
        tag,
        comm,
        request,
    )
}

/// A persistent send of `mode`.
#[allow(clippy::too_many_arguments)]
unsafe fn send_init(
    func: &str,
    mode: SendMode,
    buf: *const c_void,
    count: i64,
    datatype: Handle,
    dest: c_int,
    tag: c_int,
    comm: Handle,
    request: *mut Handle,
) -> c_int {
    call(func, comm, |m| {
        persistent(
            m,
            Some(mode),
            buf.cast_mut(),
            count,
            datatype,
            dest,
            tag,
            comm,
            request,
        )
    })
}

#[mpi]
fn PMPI_Recv_init(
    buf: *mut c_void,
    count: IntOrCount,
    datatype: Handle,
    source: c_int,
    tag: c_int,
    comm: Handle,
    request: *mut Handle,
) -> c_int {
    call("MPI_Recv_init", comm, |m| {
        persistent(
            m,
            None,
            buf,
            count.into(),
            datatype,
            source,
            tag,
            comm,
            request,
        )
    })
}

#[mpi]
fn PMPI_Iprobe(
    source: c_int,
    tag: c_int,
    comm: Handle,
    flag: *mut c_int,
    status: *mut MpiStatus,
) -> c_int {
    call("MPI_Iprobe", comm, |m| {
        let flag = arg(flag, "the flag")?;
        let (c, source) = m.recv_from(comm, source, tag)?;
        match m.engine.iprobe(c.context, source, tag)? {
            Some(s) => {
                *flag = 1;
                put_status(status, s);
            }
            None => *flag = 0,
        }
        Ok(())
    })
}

#[mpi]
fn PMPI_Probe(source: c_int, tag: c_int, comm: Handle, status: *mut MpiStatus) -> c_int {
    if crate::threads::multiple() {
        // Probes, without the lock between them (`threads`).
        return crate::threads::until("MPI_Probe", comm, |m| {
            let (c, source) = m.recv_from(comm, source, tag)?;
            if source == MPI_PROC_NULL {
                put_status(status, MpiStatus::proc_null());
                return Ok(true);
            }
            let s = m.engine.iprobe(c.context, source, tag)?;
            s.inspect(|&s| put_status(status, s));
            Ok(s.is_some())
        });
    }
    call("MPI_Probe", comm, |m| {
        let (c, source) = m.recv_from(comm, source, tag)?;
        let s = m.engine.probe(c.context, source, tag)?;
        put_status(status, s);
        Ok(())
    })
}
