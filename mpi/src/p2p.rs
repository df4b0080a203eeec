//! Point-to-point operations the bindings share: send modes, buffered
//! and persistent sends, receives.

use crate::*;

/// Every kind of send: checked, started, and waited for unless `request`
/// takes it.
#[allow(clippy::too_many_arguments)]
pub(crate) fn send(
    m: &mut Mpi,
    buf: *const c_void,
    count: i64,
    datatype: Handle,
    dest: c_int,
    tag: c_int,
    comm: Handle,
    sync: bool,
    request: Option<*mut Handle>,
) -> MpiResult<()> {
    let c = m.p2p(comm, dest, false, tag)?;
    send_on(m, c, buf, count, datatype, tag, sync, request)
}

/// A send started and not waited for: its request.
#[allow(clippy::too_many_arguments)]
pub(crate) fn started_send(
    m: &mut Mpi,
    buf: *const c_void,
    count: i64,
    datatype: Handle,
    dest: c_int,
    tag: c_int,
    comm: Handle,
    sync: bool,
) -> MpiResult<Handle> {
    let mut r = MPI_REQUEST_NULL;
    send(m, buf, count, datatype, dest, tag, comm, sync, Some(&mut r))?;
    Ok(r)
}

/// [`send`] on route `c`, checked (a partitioned send's goes on a
/// context of its own: `partitioned`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn send_on(
    m: &mut Mpi,
    c: Route,
    buf: *const c_void,
    count: i64,
    datatype: Handle,
    tag: c_int,
    sync: bool,
    request: Option<*mut Handle>,
) -> MpiResult<()> {
    // A blocking standard send of a short message of a predefined type
    // goes straight to the engine, past the general steps below.
    if let (None, false, Some(size), Ok(n)) = (
        request,
        sync,
        builtin_type_size(datatype),
        usize::try_from(count),
    ) {
        if n * size <= engine::SHORT {
            check_buffer(buf, n * size, datatype)?;
            // SAFETY: the caller's buffer of `n * size` bytes (MPI's rule).
            return unsafe { m.engine.send(c, tag, buf.cast(), n * size) };
        }
    }
    let (at, bytes) = match m.elements(count, datatype)? {
        Elements::Plain { at, bytes } => (at, bytes),
        Elements::Packed { layout, bytes } => {
            check_buffer(buf, bytes, datatype)?;
            let mut data = Vec::with_capacity(bytes);
            // SAFETY: the caller's `count` elements (MPI's rule).
            unsafe { layout.pack(buf.cast(), count as usize, &mut data) };
            let id = m.engine.isend_owned(c, tag, data, sync)?;
            return match request {
                // SAFETY: the caller's request handle.
                Some(r) => unsafe {
                    *arg(r, "the request")? = request_handle(id);
                    Ok(())
                },
                None => m.engine.wait(id).map(drop),
            };
        }
    };
    check_buffer(buf, bytes, datatype)?;
    let buf = buf.cast::<u8>().wrapping_offset(at).cast::<c_void>();
    // SAFETY (all three): the caller's buffer of `bytes` bytes and request
    // handle (MPI's rule).
    match request {
        None if !sync => unsafe { m.engine.send(c, tag, buf.cast(), bytes) },
        None => {
            let id = unsafe { m.engine.isend(c, tag, buf.cast(), bytes, sync)? };
            m.engine.wait(id).map(drop)
        }
        Some(r) => unsafe {
            let r = arg(r, "the request")?;
            *r = request_handle(m.engine.isend(c, tag, buf.cast(), bytes, sync)?);
            Ok(())
        },
    }
}

/// `MPI_BSEND_OVERHEAD` in MPICH's header: what each buffered message is
/// counted to take of the attached buffer beyond its data.
pub(crate) const BSEND_OVERHEAD: usize = 96;

/// A buffered send: the data is copied, the send started from the copy,
/// and the call returns. The copies in flight, each with
/// [`BSEND_OVERHEAD`], must fit the attached buffer's size.
pub(crate) fn bsend(
    m: &mut Mpi,
    buf: *const c_void,
    count: i64,
    datatype: Handle,
    dest: c_int,
    tag: c_int,
    comm: Handle,
) -> MpiResult<()> {
    let c = m.p2p(comm, dest, false, tag)?;
    let elements = m.elements(count, datatype)?;
    let bytes = elements.bytes();
    check_buffer(buf, bytes, datatype)?;
    // Forget the copies whose sends are done.
    let engine = &mut m.engine;
    m.buffered.retain(|(id, _)| engine.test(*id).is_none());
    let in_use: usize = m
        .buffered
        .iter()
        .map(|(_, d)| d.len() + BSEND_OVERHEAD)
        .sum();
    let room = m.attached.map_or(0, |(_, size)| size);
    if in_use + bytes + BSEND_OVERHEAD > room {
        return err(
            MPI_ERR_BUFFER,
            format!(
                "the attached buffer ({room} bytes, {in_use} in use) cannot hold {bytes} more bytes and MPI_BSEND_OVERHEAD ({BSEND_OVERHEAD})"
            ),
        );
    }
    // SAFETY: the caller's `count` elements (checked above).
    let copy = unsafe { copy_of(buf, count, elements) };
    // SAFETY: the copy lives in `buffered` until the send completes.
    let id = unsafe { m.engine.isend(c, tag, copy.as_ptr(), bytes, false)? };
    m.buffered.push((id, copy));
    Ok(())
}

/// The data of `count` elements at `buf`, packed.
///
/// # Safety
/// `buf` holds the elements (checked by the caller).
pub(crate) unsafe fn copy_of(buf: *const c_void, count: i64, elements: Elements) -> Vec<u8> {
    match elements {
        Elements::Plain { at, bytes } => {
            slice_or_empty(buf.cast::<u8>().offset(at), bytes).to_vec()
        }
        Elements::Packed { layout, bytes } => {
            let mut data = Vec::with_capacity(bytes);
            layout.pack(buf.cast(), count as usize, &mut data);
            data
        }
    }
}

/// How a send sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SendMode {
    /// Standard and ready sends.
    Standard,
    Synchronous,
    /// A copy from the attached buffer ([`bsend`]).
    Buffered,
}

/// Make a persistent request (`send`: its mode, or `None` for a
/// receive), checked now as the operation it starts will be.
#[allow(clippy::too_many_arguments)]
pub(crate) fn persistent(
    m: &mut Mpi,
    send: Option<SendMode>,
    buf: *mut c_void,
    count: i64,
    datatype: Handle,
    peer: c_int,
    tag: c_int,
    comm: Handle,
    request: *mut Handle,
) -> MpiResult<()> {
    // SAFETY: the caller's request handle (null is refused).
    let request = unsafe { arg(request, "the request")? };
    m.p2p(comm, peer, send.is_none(), tag)?;
    check_buffer(buf, m.elements(count, datatype)?.bytes(), datatype)?;
    let datatype = m.own_type(datatype)?;
    let p = Persistent {
        op: Started::P2p {
            send,
            buf,
            count,
            datatype,
            peer,
            tag,
        },
        comm,
        active: None,
    };
    *request = m.add_persistent(p)?;
    Ok(())
}

impl Mpi {
    /// The datatype a persistent request keeps: the program may free a
    /// derived one while the request lives, so the request holds a
    /// duplicate of its own (freed with it, `MPI_Request_free`).
    pub(crate) fn own_type(&mut self, datatype: Handle) -> MpiResult<Handle> {
        match is_predefined_type(datatype) {
            true => Ok(datatype),
            false => self.add_type((*self.derived(datatype)?).clone()),
        }
    }

    /// A new persistent request: its handle.
    pub(crate) fn add_persistent(&mut self, p: Persistent) -> MpiResult<Handle> {
        place(
            &mut self.persistent,
            p,
            PERSISTENT_DIRECT,
            "persistent requests",
        )
    }
}

/// `MPI_Start`: begin the operation of persistent request `h`.
pub(crate) fn start(m: &mut Mpi, h: Handle) -> MpiResult<()> {
    let p = match m.persistent.get_mut((h & HANDLE_INDEX) as usize) {
        Some(Some(p)) if h & !HANDLE_INDEX == PERSISTENT_DIRECT => p,
        _ => {
            return err(
                MPI_ERR_REQUEST,
                format!("{h:#x} is not a persistent request"),
            )
        }
    };
    if p.active.is_some() {
        return err(MPI_ERR_REQUEST, "the persistent request is already active");
    }
    let comm = p.comm;
    let id = match &mut p.op {
        Started::P2p {
            send: sync,
            buf,
            count,
            datatype,
            peer,
            tag,
        } => {
            let (sync, buf, count, datatype, peer, tag) =
                (*sync, *buf, *count, *datatype, *peer, *tag);
            match sync {
                Some(SendMode::Buffered) => {
                    bsend(m, buf, count, datatype, peer, tag, comm)?;
                    m.engine.null_request()
                }
                Some(mode) => {
                    let sync = mode == SendMode::Synchronous;
                    request_id(started_send(
                        m, buf, count, datatype, peer, tag, comm, sync,
                    )?)?
                }
                None => recv(m, buf, count, datatype, peer, tag, comm)?,
            }
        }
        Started::Collective { .. } => m.start_persistent_collective(h)?,
        Started::Partitioned(p) => {
            p.ready.fill(false);
            let p = crate::partitioned::Partitioned {
                ready: Vec::new(),
                stand_in: None,
                ..*p
            };
            let id = crate::partitioned::start(m, &p, comm)?;
            if let Some(Some(Persistent {
                op: Started::Partitioned(q),
                ..
            })) = m.persistent.get_mut((h & HANDLE_INDEX) as usize)
            {
                q.stand_in = p.send.then_some(id);
            }
            id
        }
    };
    if let Some(Some(p)) = m.persistent.get_mut((h & HANDLE_INDEX) as usize) {
        p.active = Some(id);
    }
    Ok(())
}

/// Start receiving the message of a matched probe (`MPI_MESSAGE_NO_PROC`:
/// an empty receive, complete at once).
pub(crate) fn mrecv_start(
    m: &mut Mpi,
    buf: *mut c_void,
    count: i64,
    datatype: Handle,
    message: Handle,
) -> MpiResult<u32> {
    let elements = m.elements(count, datatype)?;
    check_buffer(buf, elements.bytes(), datatype)?;
    let id = match message_id(message)? {
        None => return Ok(m.engine.null_request()),
        Some(id) if m.engine.is_message(id) => id,
        Some(_) => {
            return err(
                MPI_ERR_REQUEST,
                format!("{message:#x} was received already"),
            )
        }
    };
    // SAFETY (both): the caller's buffer of `count` elements (MPI's rule).
    match elements {
        Elements::Plain { at, bytes } => unsafe {
            m.engine
                .imrecv(id, buf.cast::<u8>().wrapping_offset(at), bytes)
        },
        Elements::Packed { layout, .. } => unsafe {
            let unpack = Unpack {
                layout,
                buf: buf.cast(),
                count: count as usize,
            };
            m.engine.imrecv_unpacked(id, unpack)
        },
    }
}

pub(crate) fn recv(
    m: &mut Mpi,
    buf: *mut c_void,
    count: i64,
    datatype: Handle,
    source: c_int,
    tag: c_int,
    comm: Handle,
) -> MpiResult<u32> {
    let (c, source) = m.recv_from(comm, source, tag)?;
    recv_on(m, c.context, buf, count, datatype, source, tag)
}

/// [`recv`] on `context`, from `source` checked.
pub(crate) fn recv_on(
    m: &mut Mpi,
    context: u32,
    buf: *mut c_void,
    count: i64,
    datatype: Handle,
    source: c_int,
    tag: c_int,
) -> MpiResult<u32> {
    match m.elements(count, datatype)? {
        Elements::Plain { at, bytes } => {
            check_buffer(buf, bytes, datatype)?;
            // SAFETY: the caller's buffer of `bytes` bytes (MPI's rule).
            unsafe {
                m.engine.irecv(
                    context,
                    source,
                    tag,
                    buf.cast::<u8>().wrapping_offset(at),
                    bytes,
                )
            }
        }
        Elements::Packed { layout, bytes } => {
            check_buffer(buf, bytes, datatype)?;
            let unpack = Unpack {
                layout,
                buf: buf.cast(),
                count: count as usize,
            };
            // SAFETY: the caller's `count` elements (MPI's rule).
            unsafe { m.engine.irecv_unpacked(context, source, tag, unpack) }
        }
    }
}
