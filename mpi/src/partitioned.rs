//! Partitioned communication (MPI-4.0 §4): a persistent send and receive
//! of `partitions` parts of `count` elements each. The sender marks each
//! part ready (`MPI_Pready` and its range and list forms) and the
//! receiver asks whether one has arrived (`MPI_Parrived`).
//!
//! fm sends the whole buffer as one message once its last part is ready,
//! so a part arrives when they all have; the standard allows that, and
//! the data never waits in a copy. Until then the send's request is a
//! stand-in that `MPI_Wait` would wait on. The messages go on their
//! communicator's context with [`PARTITIONED`] set, so no ordinary
//! receive matches them; a start's send meets the receive started the
//! same time, since both sides start in the order MPI requires.

use crate::p2p::{recv_on, send_on};
use crate::*;

/// Bit 31 of a context: partitioned messages (bits 28 to 30 are the
/// library's other kinds; 0 to 27 the communicator's id and persistent
/// collectives' slots).
pub(crate) const PARTITIONED: u32 = 0x8000_0000;

/// A partitioned send or receive, as `MPI_Start` begins it.
pub(crate) struct Partitioned {
    pub(crate) send: bool,
    pub(crate) buf: *mut c_void,
    pub(crate) partitions: usize,
    /// Elements per part.
    pub(crate) count: i64,
    pub(crate) datatype: Handle,
    pub(crate) peer: c_int,
    pub(crate) tag: c_int,
    /// The send's parts marked ready since its start.
    pub(crate) ready: Vec<bool>,
    /// The send's stand-in request while parts are not ready.
    pub(crate) stand_in: Option<u32>,
}

impl Mpi {
    /// Persistent request `h` as a partitioned operation, and whether it
    /// is active.
    fn partitioned(&mut self, h: Handle) -> MpiResult<(&mut Partitioned, bool)> {
        match self.persistent.get_mut((h & HANDLE_INDEX) as usize) {
            Some(Some(Persistent {
                op: Started::Partitioned(p),
                active,
                ..
            })) if h & !HANDLE_INDEX == PERSISTENT_DIRECT => Ok((p, active.is_some())),
            _ => err(
                MPI_ERR_REQUEST,
                format!("{h:#x} is not a partitioned request (MPI_Psend_init, MPI_Precv_init)"),
            ),
        }
    }
}

/// `MPI_Start` of partitioned request `p` on `comm`: a receive is posted
/// for every part at once; a send waits for its parts (a stand-in
/// request), unless it has none.
pub(crate) fn start(m: &mut Mpi, p: &Partitioned, comm: Handle) -> MpiResult<u32> {
    let total = p.count * p.partitions as i64;
    match p.send {
        false => {
            let (route, source) = m.recv_from(comm, p.peer, p.tag)?;
            recv_on(
                m,
                route.context | PARTITIONED,
                p.buf,
                total,
                p.datatype,
                source,
                p.tag,
            )
        }
        true if p.partitions == 0 => send_all(m, comm, p),
        true => Ok(m.engine.generalized_request()),
    }
}

/// The whole buffer of send `p`, its parts all ready: the request.
fn send_all(m: &mut Mpi, comm: Handle, p: &Partitioned) -> MpiResult<u32> {
    let mut route = m.p2p(comm, p.peer, false, p.tag)?;
    route.context |= PARTITIONED;
    let total = p.count * p.partitions as i64;
    let mut r = MPI_REQUEST_NULL;
    send_on(
        m,
        route,
        p.buf,
        total,
        p.datatype,
        p.tag,
        false,
        Some(&mut r),
    )?;
    request_id(r)
}

/// `MPI_Pready` of `parts` of send `h`: once every part is ready, the
/// data goes and the request is the send's.
pub(crate) fn ready(
    m: &mut Mpi,
    h: Handle,
    parts: impl IntoIterator<Item = c_int>,
) -> MpiResult<()> {
    let (p, active) = m.partitioned(h)?;
    if !p.send || !active {
        return err(
            MPI_ERR_REQUEST,
            "MPI_Pready needs a partitioned send that was started",
        );
    }
    for part in parts {
        match usize::try_from(part).ok().filter(|&i| i < p.partitions) {
            Some(i) if !p.ready[i] => p.ready[i] = true,
            Some(_) => {
                return err(MPI_ERR_ARG, format!("partition {part} is ready already"));
            }
            None => {
                return err(
                    MPI_ERR_ARG,
                    format!("partition {part} is not one of {}", p.partitions),
                )
            }
        }
    }
    if !p.ready.iter().all(|&r| r) {
        return Ok(());
    }
    let stand_in = p.stand_in.take();
    let copy = Partitioned {
        ready: Vec::new(),
        stand_in: None,
        ..*p
    };
    let comm = m.persistent[(h & HANDLE_INDEX) as usize]
        .as_ref()
        .map_or(MPI_COMM_NULL, |q| q.comm);
    let id = send_all(m, comm, &copy)?;
    if let Some(Some(q)) = m.persistent.get_mut((h & HANDLE_INDEX) as usize) {
        q.active = Some(id);
    }
    if let Some(s) = stand_in {
        m.engine.free_request(s);
        m.engine.complete_generalized(s);
    }
    Ok(())
}

/// `MPI_Parrived`: whether part `part` of receive `h` has arrived (all
/// of them arrive at once); an inactive request's have.
pub(crate) fn arrived(m: &mut Mpi, h: Handle, part: c_int) -> MpiResult<bool> {
    let (p, active) = m.partitioned(h)?;
    if p.send {
        return err(MPI_ERR_REQUEST, "MPI_Parrived needs a partitioned receive");
    }
    if usize::try_from(part)
        .ok()
        .filter(|&i| i < p.partitions)
        .is_none()
    {
        return err(
            MPI_ERR_ARG,
            format!("partition {part} is not one of {}", p.partitions),
        );
    }
    if !active {
        return Ok(true);
    }
    m.engine.progress()?;
    let id = resolve(m, h)?;
    Ok(id.is_none_or(|id| m.engine.is_done(id)))
}

/// `MPI_Psend_init` (`send`) and `MPI_Precv_init`: a partitioned
/// request, checked now as its starts will be.
#[allow(clippy::too_many_arguments)]
pub(crate) fn init(
    m: &mut Mpi,
    send: bool,
    buf: *mut c_void,
    partitions: c_int,
    count: i64,
    datatype: Handle,
    peer: c_int,
    tag: c_int,
    comm: Handle,
    request: *mut Handle,
) -> MpiResult<()> {
    // SAFETY: the caller's request handle (null is refused).
    let request = unsafe { arg(request, "the request")? };
    let parts = nonneg(partitions, "number of partitions")?;
    nonneg(count, "count")?;
    m.p2p(comm, peer, !send, tag)?;
    if m.comm(comm)?.remote.is_some() {
        return err(
            MPI_ERR_COMM,
            "partitioned communication on an intercommunicator is not supported by fm's MPI yet",
        );
    }
    let total = count.checked_mul(parts as i64).unwrap_or(i64::MAX);
    check_buffer(buf, m.elements(total, datatype)?.bytes(), datatype)?;
    let datatype = m.own_type(datatype)?;
    let p = Partitioned {
        send,
        buf,
        partitions: parts,
        count,
        datatype,
        peer,
        tag,
        ready: vec![false; parts],
        stand_in: None,
    };
    *request = m.add_persistent(Persistent {
        op: Started::Partitioned(p),
        comm,
        active: None,
    })?;
    Ok(())
}
