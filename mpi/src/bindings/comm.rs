//! Communicators.

use crate::*;
use fm_mpi_macros::mpi;

#[mpi]
fn PMPI_Comm_rank(comm: Handle, rank: *mut c_int) -> c_int {
    call("MPI_Comm_rank", comm, |m| {
        let r = m.comm(comm)?.rank;
        if !rank.is_null() {
            *rank = r;
        }
        Ok(())
    })
}

#[mpi]
fn PMPI_Comm_size(comm: Handle, size: *mut c_int) -> c_int {
    call("MPI_Comm_size", comm, |m| {
        let s = m.comm(comm)?.size();
        if !size.is_null() {
            *size = s;
        }
        Ok(())
    })
}

#[mpi]
fn PMPI_Comm_dup(comm: Handle, newcomm: *mut Handle) -> c_int {
    let mut request = MPI_REQUEST_NULL;
    let rc = PMPI_Comm_idup(comm, newcomm, &mut request);
    if rc != MPI_SUCCESS {
        return rc;
    }
    wait_for_context("MPI_Comm_dup", comm, newcomm, request)
}

/// The end of a blocking call that makes a communicator: wait for the
/// agreement on its context that the call started (`comm::agree_later`;
/// none: `MPI_REQUEST_NULL`). A non-blocking agreement and a wait at
/// every thread level: the members agree by one protocol whatever level
/// each asked for (a rank under `MPI_THREAD_MULTIPLE` and one under
/// `MPI_THREAD_SINGLE` once waited for each other by two protocols, for
/// ever), and under `MPI_THREAD_MULTIPLE` the wait lets the lock go, so
/// the agreement holds up no other thread (`threads`; docs/MPI.md,
/// "Threads"). Where the members found no context (out of ids), no
/// communicator is left, as MPICH leaves none, nor its attributes.
///
/// # Safety
/// `newcomm` is the caller's (MPI's rule), written by the start.
unsafe fn wait_for_context(
    func: &str,
    comm: Handle,
    newcomm: *mut Handle,
    mut request: Handle,
) -> c_int {
    if request == MPI_REQUEST_NULL {
        return MPI_SUCCESS;
    }
    let status = STATUS_IGNORE as *mut MpiStatus;
    let rc = super::request::wait(func, comm, &mut request, status);
    if rc != MPI_SUCCESS && !newcomm.is_null() && *newcomm != MPI_COMM_NULL {
        let _ = PMPI_Comm_free(newcomm);
        *newcomm = MPI_COMM_NULL;
    }
    rc
}

/// A blocking call that makes a communicator by `start`, which gives its
/// handle and the request of the agreement on its context, then waits
/// for that ([`wait_for_context`]).
///
/// # Safety
/// `newcomm` is the caller's (MPI's rule).
pub(crate) unsafe fn made_when_agreed(
    func: &str,
    comm: Handle,
    newcomm: *mut Handle,
    start: impl FnOnce(&mut Mpi) -> MpiResult<(Handle, Option<u32>)>,
) -> c_int {
    let mut request = MPI_REQUEST_NULL;
    let rc = call(func, comm, |m| {
        let out = arg(newcomm, "the new communicator")?;
        let (new, req) = start(m)?;
        *out = new;
        if let Some(req) = req {
            request = request_handle(req);
        }
        Ok(())
    });
    if rc != MPI_SUCCESS {
        return rc;
    }
    wait_for_context(func, comm, newcomm, request)
}

#[mpi]
fn PMPI_Comm_idup(comm: Handle, newcomm: *mut Handle, request: *mut Handle) -> c_int {
    super::attr::with_attributes("MPI_Comm_idup", Kind::Comm, comm, newcomm, |m| {
        let out = arg(request, "the request")?;
        let (new, req) = idup(m, comm)?;
        *out = request_handle(req);
        Ok(new)
    })
}

#[mpi]
fn PMPI_Comm_idup_with_info(
    comm: Handle,
    info: Handle,
    newcomm: *mut Handle,
    request: *mut Handle,
) -> c_int {
    match call("MPI_Comm_idup_with_info", comm, |m| {
        super::info::hints(m, info)
    }) {
        MPI_SUCCESS => PMPI_Comm_idup(comm, newcomm, request),
        class => class,
    }
}

#[mpi]
fn PMPI_Comm_split(comm: Handle, color: c_int, key: c_int, newcomm: *mut Handle) -> c_int {
    split_waiting("MPI_Comm_split", comm, color, key, newcomm)
}

/// `MPI_Comm_split` and `_split_type`: every member's colour and key
/// gathered ([`made_after_allgather`]), then the communicator of this
/// one's colour made: of an intracommunicator as `MPI_Comm_create` makes
/// one ([`icreate`], ordered by key, then rank), of an intercommunicator
/// with the members of that colour on both sides
/// ([`intercomm::split_from`]).
///
/// # Safety
/// `newcomm` is the caller's (MPI's rule).
unsafe fn split_waiting(
    func: &str,
    comm: Handle,
    color: c_int,
    key: c_int,
    newcomm: *mut Handle,
) -> c_int {
    if color < 0 && color != MPI_UNDEFINED {
        return call(func, comm, |_| {
            err(MPI_ERR_ARG, format!("color {color} is negative"))
        });
    }
    made_after_allgather(func, comm, [color, key], newcomm, |m, all| {
        let c = m.comm(comm)?;
        if c.remote.is_some() {
            return intercomm::split_from(m, comm, color, all);
        }
        let ranks = c.ranks.clone();
        let members = match color {
            MPI_UNDEFINED => Arc::from([]),
            _ => (of_color(all, 0..all.len(), color).iter())
                .map(|&i| ranks[i])
                .collect(),
        };
        let (new, req) = icreate(m, comm, members)?;
        Ok((new, Some(req)))
    })
}

/// A blocking call that makes a communicator from two ints every member
/// of `comm` says (a split's colour and key, a merge's `high`): they are
/// gathered by a non-blocking allgather over all of them (both groups of
/// an intercommunicator, numbered as its collectives number them: a
/// collective like the program's, on a context no user receive matches)
/// and waited for, then `make` makes it from them and its context is
/// agreed ([`made_when_agreed`]); so no wait holds the library's lock
/// under `MPI_THREAD_MULTIPLE` (docs/MPI.md, "Threads").
///
/// # Safety
/// `newcomm` is the caller's (MPI's rule).
unsafe fn made_after_allgather(
    func: &str,
    comm: Handle,
    mine: [c_int; 2],
    newcomm: *mut Handle,
    make: impl FnOnce(&mut Mpi, &[(c_int, c_int)]) -> MpiResult<(Handle, Option<u32>)>,
) -> c_int {
    let mut all: Vec<c_int> = Vec::new();
    let mut request = MPI_REQUEST_NULL;
    let rc = call(func, comm, |m| {
        arg(newcomm, "the new communicator")?;
        let c = m.comm(comm)?;
        let n = c.ranks.len() + c.remote.as_ref().map_or(0, |r| r.len());
        all = vec![0; 2 * n];
        let send = m.elements_at(mine.as_ptr().cast(), 8, MPI_BYTE)?;
        let at = all.as_mut_ptr();
        let recv = (0..n)
            .map(|i| m.elements_at(at.add(2 * i).cast(), 8, MPI_BYTE))
            .collect::<MpiResult<Vec<_>>>()?;
        let mode = crate::collective::Mode::Start(&mut request);
        m.collective(comm, mode, move |c| {
            Ok(crate::coll::allgather(
                &intercomm::both(c),
                Some(&send),
                &recv,
            ))
        })
    });
    if rc != MPI_SUCCESS {
        return rc;
    }
    // `mine` and `all` live until the allgather is done, here.
    let rc = super::request::wait(func, comm, &mut request, STATUS_IGNORE as *mut MpiStatus);
    if rc != MPI_SUCCESS {
        return rc;
    }
    let pairs: Vec<(c_int, c_int)> = all.chunks(2).map(|p| (p[0], p[1])).collect();
    made_when_agreed(func, comm, newcomm, |m| make(m, &pairs))
}

/// `send[r]` to member r of intracommunicator `comm` and `recv[r]` (as
/// long as the caller knows it to be) from it, by a non-blocking
/// alltoall (a collective like the program's, on a context no user
/// receive matches) waited for without the library's lock.
///
/// # Safety
/// Every member of `comm` calls it, as a collective.
pub(crate) unsafe fn exchanged(
    func: &str,
    comm: Handle,
    send: &[Vec<u8>],
    recv: &mut [Vec<u8>],
) -> c_int {
    let mut request = MPI_REQUEST_NULL;
    let rc = call(func, comm, |m| {
        let bytes =
            |m: &Mpi, at: *const u8, len: usize| m.elements_at(at.cast(), len as i64, MPI_BYTE);
        let send = (send.iter())
            .map(|b| bytes(m, b.as_ptr(), b.len()))
            .collect::<MpiResult<Vec<_>>>()?;
        let recv = (recv.iter_mut())
            .map(|b| bytes(m, b.as_mut_ptr(), b.len()))
            .collect::<MpiResult<Vec<_>>>()?;
        let mode = crate::collective::Mode::Start(&mut request);
        m.collective(comm, mode, move |c| {
            Ok(crate::coll::alltoall(c, &send, &recv))
        })
    });
    if rc != MPI_SUCCESS {
        return rc;
    }
    // `send` and `recv` live until the alltoall is done, here.
    super::request::wait(func, comm, &mut request, STATUS_IGNORE as *mut MpiStatus)
}

const MPI_COMM_TYPE_HW_GUIDED: c_int = 2;
const MPI_COMM_TYPE_HW_UNGUIDED: c_int = 3;
/// MPICH's extension: processes near each other as its hints say (a
/// directory they share, a level of the network). fm takes none of those
/// hints, so the split gives `MPI_COMM_NULL`, as MPICH does for a hint it
/// cannot serve.
const MPIX_COMM_TYPE_NEIGHBORHOOD: c_int = 4;

/// The info key of the hardware splits (MPI-4.0 §7.4.2), and the one
/// resource fm knows: the memory of a host ("machine" names it too).
const HW_RESOURCE: &str = "mpi_hw_resource_type";
const SHARED_MEMORY: &str = "mpi_shared_memory";

/// `MPI_Comm_split_type`: by host for `MPI_COMM_TYPE_SHARED`, and for
/// `MPI_COMM_TYPE_HW_GUIDED` asking for shared memory (or the machine);
/// another resource, or none named, gives `MPI_COMM_NULL`, as the
/// standard allows. `MPI_COMM_TYPE_HW_UNGUIDED` gives the host's members
/// where that is fewer than the communicator's (and says so in `info`),
/// else `MPI_COMM_NULL`.
#[mpi]
fn PMPI_Comm_split_type(
    comm: Handle,
    split_type: c_int,
    key: c_int,
    info: Handle,
    newcomm: *mut Handle,
) -> c_int {
    let func = "MPI_Comm_split_type";
    let mut color = MPI_UNDEFINED;
    let rc = call(func, comm, |m| {
        arg(newcomm, "the new communicator")?;
        let host = host_color(m);
        color = match split_type {
            MPI_UNDEFINED | MPIX_COMM_TYPE_NEIGHBORHOOD => MPI_UNDEFINED,
            MPI_COMM_TYPE_SHARED => host,
            MPI_COMM_TYPE_HW_GUIDED => {
                let asked = match info {
                    MPI_INFO_NULL => None,
                    i => m.info(i)?.into_iter().find(|(k, _)| k == HW_RESOURCE),
                };
                match asked.as_ref().map(|(_, v)| v.as_str()) {
                    Some(SHARED_MEMORY | "machine") => host,
                    _ => MPI_UNDEFINED,
                }
            }
            MPI_COMM_TYPE_HW_UNGUIDED => {
                let c = m.comm(comm)?;
                let hosts = &m.engine.fm.config().hosts;
                let mine = hosts.get(m.engine.fm.rank() as usize);
                let here = c.ranks.iter().filter(|&&r| hosts.get(r as usize) == mine).count();
                if here < c.ranks.len() {
                    if info != MPI_INFO_NULL {
                        let mut t = crate::info::infos();
                        let e = t.get_mut(info)?;
                        e.retain(|(k, _)| k != HW_RESOURCE);
                        e.push((HW_RESOURCE.into(), SHARED_MEMORY.into()));
                    }
                    host
                } else {
                    MPI_UNDEFINED
                }
            }
            t => {
                return err(
                    MPI_ERR_ARG,
                    format!("split type {t} is not one fm knows (MPI_COMM_TYPE_SHARED, _HW_GUIDED, _HW_UNGUIDED, MPIX_COMM_TYPE_NEIGHBORHOOD)"),
                )
            }
        };
        Ok(())
    });
    match rc {
        MPI_SUCCESS => split_waiting(func, comm, color, key, newcomm),
        rc => rc,
    }
}

/// The colour of this process's host: its first rank in the job.
fn host_color(m: &Mpi) -> c_int {
    let hosts = &m.engine.fm.config().hosts;
    let me = m.engine.fm.rank() as usize;
    match hosts.get(me) {
        Some(h) => hosts.iter().position(|x| x == h).unwrap_or(me) as c_int,
        None => me as c_int,
    }
}

#[mpi]
fn PMPI_Comm_create(comm: Handle, group: Handle, newcomm: *mut Handle) -> c_int {
    let func = "MPI_Comm_create";
    // Of an intercommunicator: the split of this side's members in
    // `group` (colour 0, key their rank in it) from the rest.
    let mut inter = None;
    let rc = call(func, comm, |m| {
        if m.comm(comm)?.remote.is_some() {
            let me = m.engine.fm.rank();
            inter = Some(match m.group(group)?.iter().position(|&r| r == me) {
                Some(at) => (0, at as c_int),
                None => (MPI_UNDEFINED, 0),
            });
        }
        Ok(())
    });
    if rc != MPI_SUCCESS {
        return rc;
    }
    if let Some((color, key)) = inter {
        return split_waiting(func, comm, color, key, newcomm);
    }
    made_when_agreed(func, comm, newcomm, |m| {
        let members = m.group(group)?;
        let (new, req) = icreate(m, comm, members)?;
        Ok((new, Some(req)))
    })
}

#[mpi]
fn PMPI_Comm_compare(comm1: Handle, comm2: Handle, result: *mut c_int) -> c_int {
    call("MPI_Comm_compare", comm1, |m| {
        let result = arg(result, "the result")?;
        let (a, b) = (m.comm(comm1)?, m.comm(comm2)?);
        *result = if comm1 == comm2 {
            MPI_IDENT
        } else if a.ranks == b.ranks {
            MPI_CONGRUENT
        } else {
            compare_members(&a.ranks, &b.ranks)
        };
        Ok(())
    })
}

#[mpi]
fn PMPI_Comm_group(comm: Handle, group: *mut Handle) -> c_int {
    call("MPI_Comm_group", comm, |m| {
        let group = arg(group, "the group")?;
        let ranks = m.comm(comm)?.ranks.clone();
        *group = m.add_group(ranks)?;
        Ok(())
    })
}

#[mpi]
fn PMPI_Comm_free(comm: *mut Handle) -> c_int {
    let h = if comm.is_null() { MPI_COMM_NULL } else { *comm };
    let freeable = |m: &Mpi| match Mpi::index(h) {
        Some(i) if i >= 2 && m.comms.get(i).is_some_and(Option::is_some) => Ok(i),
        _ => err(
            MPI_ERR_COMM,
            format!("{h:#x} is not a communicator that can be freed"),
        ),
    };
    // The attributes go first, their delete callbacks outside the lock,
    // while the communicator is still there for them to look at.
    let deleted = call_with_callbacks("MPI_Comm_free", MPI_COMM_WORLD, |m| {
        freeable(m)?;
        Ok(m.attrs.clear(h))
    });
    if let Err(class) = deleted {
        return class;
    }
    call("MPI_Comm_free", MPI_COMM_WORLD, |m| {
        freeable(m)?;
        m.remove_comm(h);
        *comm = MPI_COMM_NULL;
        Ok(())
    })
}

#[mpi]
fn PMPI_Intercomm_create(
    local_comm: Handle,
    local_leader: c_int,
    peer_comm: Handle,
    remote_leader: c_int,
    tag: c_int,
    newintercomm: *mut Handle,
) -> c_int {
    // The leaders swap their groups over `peer_comm`, each tells its own
    // group what it learnt (two broadcasts), then both groups agree on
    // the context: every wait without the library's lock.
    let func = "MPI_Intercomm_create";
    let (mut mine, mut theirs) = (Vec::new(), Vec::new());
    let mut swap = None;
    let rc = call(func, local_comm, |m| {
        arg(newintercomm, "the new intercommunicator")?;
        let (l, p, r, t) = (local_leader, peer_comm, remote_leader, tag);
        swap = intercomm::start_swap(m, local_comm, l, p, r, t, &mut mine, &mut theirs)?;
        Ok(())
    });
    if rc != MPI_SUCCESS {
        return rc;
    }
    let mut told = [0u8; intercomm::Met::LEN];
    let mut remote = Vec::new();
    if let Some((sent, got)) = swap {
        let mut status = MpiStatus::empty();
        for (id, status) in [(sent, STATUS_IGNORE as *mut MpiStatus), (got, &mut status)] {
            let rc = super::request::wait(func, local_comm, &mut request_handle(id), status);
            if rc != MPI_SUCCESS {
                return rc;
            }
        }
        theirs.truncate(status.bytes() as usize);
        let rc = call(func, local_comm, |m| {
            let (met, ranks) = intercomm::met(m, peer_comm, tag, &theirs)?;
            told = met.bytes();
            remote = ranks.iter().flat_map(|r| r.to_le_bytes()).collect();
            Ok(())
        });
        if rc != MPI_SUCCESS {
            return rc;
        }
    }
    // `mine` lives until the send is done, above.
    drop(mine);
    let rc = broadcast(func, local_comm, local_leader, &mut told);
    if rc != MPI_SUCCESS {
        return rc;
    }
    let met = match intercomm::Met::read(&told) {
        Ok(met) => met,
        Err(e) => return call(func, local_comm, |_| Err::<(), _>(e)),
    };
    remote.resize(4 * met.remotes as usize, 0);
    let rc = broadcast(func, local_comm, local_leader, &mut remote);
    if rc != MPI_SUCCESS {
        return rc;
    }
    made_when_agreed(func, local_comm, newintercomm, |m| {
        let remote = (remote.chunks_exact(4))
            .map(|b| fm::Rank::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        intercomm::created(m, local_comm, local_leader, &met, remote)
    })
}

/// `buf` from member `root` of intracommunicator `comm` to every other,
/// by a non-blocking broadcast (a collective like the program's)
/// waited for without the library's lock.
///
/// # Safety
/// Every member of `comm` calls it, as a collective.
unsafe fn broadcast(func: &str, comm: Handle, root: c_int, buf: &mut [u8]) -> c_int {
    let mut request = MPI_REQUEST_NULL;
    let rc = call(func, comm, |m| {
        let c = m.intracomm(comm, func)?;
        let root = crate::coll::root(c, root)?;
        let data = m.elements_at(buf.as_mut_ptr().cast(), buf.len() as i64, MPI_BYTE)?;
        let mode = crate::collective::Mode::Start(&mut request);
        m.collective(comm, mode, move |c| Ok(crate::coll::bcast(c, &data, root)))
    });
    if rc != MPI_SUCCESS {
        return rc;
    }
    // `buf` lives until the broadcast is done, here.
    super::request::wait(func, comm, &mut request, STATUS_IGNORE as *mut MpiStatus)
}

#[mpi]
fn PMPI_Intercomm_merge(intercomm: Handle, high: c_int, newintracomm: *mut Handle) -> c_int {
    let func = "MPI_Intercomm_merge";
    let rc = call(func, intercomm, |m| match m.comm(intercomm)?.remote {
        Some(_) => Ok(()),
        None => err(
            MPI_ERR_COMM,
            format!("{intercomm:#x} is not an intercommunicator"),
        ),
    });
    if rc != MPI_SUCCESS {
        return rc;
    }
    let high = c_int::from(high != 0);
    made_after_allgather(func, intercomm, [high, 0], newintracomm, |m, all| {
        intercomm::merge_from(m, intercomm, high != 0, all)
    })
}

#[mpi]
#[allow(clippy::too_many_arguments)]
fn PMPI_Intercomm_create_from_groups(
    local_group: Handle,
    local_leader: c_int,
    remote_group: Handle,
    remote_leader: c_int,
    stringtag: *const c_char,
    _info: Handle,
    errhandler: Handle,
    newintercomm: *mut Handle,
) -> c_int {
    let func = "MPI_Intercomm_create_from_groups";
    made_when_agreed(func, MPI_COMM_WORLD, newintercomm, |m| {
        if stringtag.is_null() {
            return err(MPI_ERR_ARG, "the string tag is a null pointer");
        }
        let tag = std::ffi::CStr::from_ptr(stringtag).to_bytes();
        let errhandler = m.errors.settable(errhandler)?;
        let (local, remote) = (m.group(local_group)?, m.group(remote_group)?);
        let (l, r) = (local_leader, remote_leader);
        intercomm::create_from_groups(m, local, l, remote, r, tag, errhandler)
    })
}

#[mpi]
fn PMPI_Comm_create_group(comm: Handle, group: Handle, tag: c_int, newcomm: *mut Handle) -> c_int {
    made_when_agreed("MPI_Comm_create_group", comm, newcomm, |m| {
        intercomm::create_group(m, comm, group, tag)
    })
}

#[mpi]
fn PMPI_Comm_test_inter(comm: Handle, flag: *mut c_int) -> c_int {
    call("MPI_Comm_test_inter", comm, |m| {
        let inter = m.comm(comm)?.remote.is_some();
        *arg(flag, "the flag")? = c_int::from(inter);
        Ok(())
    })
}

/// An intercommunicator's remote group.
fn remote_of(m: &Mpi, comm: Handle) -> MpiResult<Arc<[fm::Rank]>> {
    m.comm(comm)?.remote.clone().ok_or_else(|| MpiError {
        class: MPI_ERR_COMM,
        message: format!("{comm:#x} is not an intercommunicator"),
    })
}

#[mpi]
fn PMPI_Comm_remote_size(comm: Handle, size: *mut c_int) -> c_int {
    call("MPI_Comm_remote_size", comm, |m| {
        *arg(size, "the size")? = remote_of(m, comm)?.len() as c_int;
        Ok(())
    })
}

#[mpi]
fn PMPI_Comm_remote_group(comm: Handle, group: *mut Handle) -> c_int {
    call("MPI_Comm_remote_group", comm, |m| {
        let out = arg(group, "the group")?;
        let remote = remote_of(m, comm)?;
        *out = m.add_group(remote)?;
        Ok(())
    })
}
