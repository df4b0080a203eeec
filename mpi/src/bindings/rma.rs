//! One-sided communication: windows, accesses and synchronisation
//! (`crate::rma`). Errors go to the window's error handler.

use crate::coll::Elements;
use crate::engine::rma::Kind;
use crate::rma::*;
use crate::*;
use fm_mpi_macros::mpi;

/// Where `MPI_Win_get_attr` finds the predefined attributes.
const MPI_WIN_BASE: c_int = 0x6600_0001;
const MPI_WIN_SIZE: c_int = 0x6600_0003;
const MPI_WIN_DISP_UNIT: c_int = 0x6600_0005;
const MPI_WIN_CREATE_FLAVOR: c_int = 0x6600_0007;
const MPI_WIN_MODEL: c_int = 0x6600_0009;

/// A window `make` makes, with the hints of `info` (checked already),
/// given back in `win`.
unsafe fn out_win(
    m: &mut Mpi,
    win: *mut Handle,
    info: Handle,
    make: impl FnOnce(&mut Mpi) -> MpiResult<Handle>,
) -> MpiResult<()> {
    let out = arg(win, "the window")?;
    let w = make(m)?;
    m.set_hints(w, info)?;
    *out = w;
    Ok(())
}

#[mpi]
fn PMPI_Win_create(
    base: *mut c_void,
    size: isize,
    disp_unit: IntOrCount,
    info: Handle,
    comm: Handle,
    win: *mut Handle,
) -> c_int {
    call("MPI_Win_create", comm, |m| {
        super::info::hints(m, info)?;
        if base.is_null() && size > 0 {
            return err(MPI_ERR_BASE, "a null base for a window of some bytes");
        }
        out_win(m, win, info, |m| {
            m.make_window(
                comm,
                base as usize,
                size as i64,
                disp_unit.into(),
                MPI_WIN_FLAVOR_CREATE,
                Memory::Program,
            )
        })
    })
}

/// A window over memory the library holds (`memory`, with this member's
/// part at `base`): its base given back in `baseptr`, the window in `win`.
#[allow(clippy::too_many_arguments)]
unsafe fn allocated(
    m: &mut Mpi,
    comm: Handle,
    size: isize,
    disp_unit: i64,
    info: Handle,
    baseptr: *mut c_void,
    win: *mut Handle,
    flavor: c_int,
    make_memory: impl FnOnce(&mut Mpi) -> MpiResult<(usize, Memory)>,
) -> MpiResult<()> {
    super::info::hints(m, info)?;
    let out = arg(baseptr.cast::<*mut c_void>(), "the base pointer")?;
    arg(win, "the window")?;
    let (base, memory) = make_memory(m)?;
    out_win(m, win, info, |m| {
        m.make_window(comm, base, size as i64, disp_unit, flavor, memory)
    })?;
    *out = base as *mut c_void;
    Ok(())
}

#[mpi]
fn PMPI_Win_allocate(
    size: isize,
    disp_unit: IntOrCount,
    info: Handle,
    comm: Handle,
    baseptr: *mut c_void,
    win: *mut Handle,
) -> c_int {
    call("MPI_Win_allocate", comm, |m| {
        let flavor = MPI_WIN_FLAVOR_ALLOCATE;
        allocated(
            m,
            comm,
            size,
            disp_unit.into(),
            info,
            baseptr,
            win,
            flavor,
            |m| {
                let bytes = nonneg(size as i64, "the window's size")?;
                m.allocate_memory(comm, bytes)
            },
        )
    })
}

#[mpi]
fn PMPI_Win_allocate_shared(
    size: isize,
    disp_unit: IntOrCount,
    info: Handle,
    comm: Handle,
    baseptr: *mut c_void,
    win: *mut Handle,
) -> c_int {
    call("MPI_Win_allocate_shared", comm, |m| {
        let flavor = MPI_WIN_FLAVOR_SHARED;
        allocated(
            m,
            comm,
            size,
            disp_unit.into(),
            info,
            baseptr,
            win,
            flavor,
            |m| {
                let memory = m.shared_memory(comm, size as i64, disp_unit.into())?;
                let rank = m.comm(comm)?.rank as usize;
                match &memory {
                    Memory::Shared { parts, .. } => Ok((parts[rank].0, memory)),
                    _ => err(MPI_ERR_INTERN, "shared memory is not shared"),
                }
            },
        )
    })
}

#[mpi]
fn PMPI_Win_shared_query(
    win: Handle,
    rank: c_int,
    size: *mut isize,
    disp_unit: *mut IntOrCount,
    baseptr: *mut c_void,
) -> c_int {
    call("MPI_Win_shared_query", win, |m| {
        let (size, unit) = (arg(size, "the size")?, arg(disp_unit, "the unit")?);
        let base = arg(baseptr.cast::<*mut c_void>(), "the base pointer")?;
        let w = m.win(win)?;
        let part = match &w.memory {
            Memory::Shared { parts, .. } if rank == MPI_PROC_NULL => {
                parts.iter().find(|p| p.1 > 0).or(parts.first()).copied()
            }
            Memory::Shared { parts, .. } => usize::try_from(rank)
                .ok()
                .and_then(|r| parts.get(r))
                .copied(),
            _ if w.ranks.get(rank.max(0) as usize) == Some(&m.engine.fm.rank()) => {
                Some((w.base, w.attrs.size as usize, w.attrs.disp_unit))
            }
            _ => return err(MPI_ERR_RMA_FLAVOR, "the window's memory is not shared"),
        };
        let Some((b, s, u)) = part else {
            return err(MPI_ERR_RANK, format!("rank {rank} of the window"));
        };
        (*base, *size, *unit) = (b as *mut c_void, s as isize, IntOrCount::from(u));
        Ok(())
    })
}

#[mpi]
fn PMPI_Win_create_dynamic(info: Handle, comm: Handle, win: *mut Handle) -> c_int {
    call("MPI_Win_create_dynamic", comm, |m| {
        super::info::hints(m, info)?;
        out_win(m, win, info, |m| {
            m.make_window(comm, 0, 0, 1, MPI_WIN_FLAVOR_DYNAMIC, Memory::Program)
        })
    })
}

#[mpi]
fn PMPI_Win_attach(win: Handle, base: *mut c_void, size: isize) -> c_int {
    call("MPI_Win_attach", win, |m| {
        let w = m.win(win)?;
        if w.attrs.flavor != MPI_WIN_FLAVOR_DYNAMIC {
            return err(
                MPI_ERR_RMA_FLAVOR,
                "MPI_Win_attach to a window not made by MPI_Win_create_dynamic",
            );
        }
        let size = nonneg(size as i64, "the region's size")?;
        if base.is_null() && size > 0 {
            return err(MPI_ERR_ARG, "a null region");
        }
        let id = w.id;
        m.engine.attach(id, base as usize, size)
    })
}

#[mpi]
fn PMPI_Win_detach(win: Handle, base: *const c_void) -> c_int {
    call("MPI_Win_detach", win, |m| {
        let id = m.win(win)?.id;
        m.engine.detach(id, base as usize)
    })
}

#[mpi]
fn PMPI_Win_free(win: *mut Handle) -> c_int {
    let h = match win.as_ref() {
        Some(&h) => h,
        None => MPI_COMM_WORLD,
    };
    let deleted = call_with_callbacks("MPI_Win_free", h, |m| {
        let out = arg(win, "the window")?;
        m.win(*out)?;
        let callbacks = m.attrs.clear(*out);
        m.free_window(*out)?;
        *out = MPI_WIN_NULL;
        Ok(callbacks)
    });
    match deleted {
        Ok(_) => MPI_SUCCESS,
        Err(rc) => rc,
    }
}

#[mpi]
fn PMPI_Win_get_group(win: Handle, group: *mut Handle) -> c_int {
    call("MPI_Win_get_group", win, |m| {
        let out = arg(group, "the group")?;
        let ranks = m.win(win)?.ranks.clone();
        *out = m.add_group(ranks)?;
        Ok(())
    })
}

#[mpi]
fn PMPI_Win_set_name(win: Handle, name: *const c_char) -> c_int {
    call("MPI_Win_set_name", win, |m| {
        m.win(win)?;
        super::info::set_name(m, win, name)
    })
}

#[mpi]
fn PMPI_Win_get_name(win: Handle, name: *mut c_char, resultlen: *mut c_int) -> c_int {
    call("MPI_Win_get_name", win, |m| {
        m.win(win)?;
        super::info::get_name(m, win, name, resultlen, "")
    })
}

#[mpi]
fn PMPI_Win_set_info(win: Handle, info: Handle) -> c_int {
    call("MPI_Win_set_info", win, |m| m.set_hints(win, info))
}

#[mpi]
fn PMPI_Win_get_info(win: Handle, info_used: *mut Handle) -> c_int {
    call("MPI_Win_get_info", win, |m| {
        m.win(win)?;
        let out = arg(info_used, "the info object")?;
        let hints = m.win(win)?.hints.clone();
        *out = crate::info::infos().add(hints)?;
        Ok(())
    })
}

#[mpi]
fn PMPI_Win_get_attr(win: Handle, keyval: c_int, value: *mut c_void, flag: *mut c_int) -> c_int {
    call("MPI_Win_get_attr", win, |m| {
        let w = m.win(win)?;
        let at: Option<usize> = match keyval {
            MPI_WIN_BASE => Some(w.base),
            MPI_WIN_SIZE => Some(&w.attrs.size as *const isize as usize),
            MPI_WIN_DISP_UNIT => Some(&w.attrs.disp_unit as *const c_int as usize),
            MPI_WIN_CREATE_FLAVOR => Some(&w.attrs.flavor as *const c_int as usize),
            MPI_WIN_MODEL => Some(&w.attrs.model as *const c_int as usize),
            _ => m.attrs.get(win, keyval, attr::Kind::Win)?,
        };
        super::attr::give(at, value, flag)
    })
}

#[mpi]
fn PMPI_Win_set_errhandler(win: Handle, errhandler: Handle) -> c_int {
    call("MPI_Win_set_errhandler", win, |m| {
        let h = m.errors.settable(errhandler)?;
        m.win_mut(win)?.errhandler = h;
        Ok(())
    })
}

#[mpi]
fn PMPI_Win_get_errhandler(win: Handle, errhandler: *mut Handle) -> c_int {
    call("MPI_Win_get_errhandler", win, |m| {
        let h = m.win(win)?.errhandler;
        *arg(errhandler, "the error handler")? = h;
        Ok(())
    })
}

#[mpi]
fn PMPI_Win_create_errhandler(
    function: Option<crate::errors::HandlerFn>,
    errhandler: *mut Handle,
) -> c_int {
    super::errhan::PMPI_Comm_create_errhandler(function, errhandler)
}

#[mpi]
fn PMPI_Win_call_errhandler(win: Handle, errorcode: c_int) -> c_int {
    let called = call("MPI_Win_call_errhandler", win, |m| {
        m.win(win)?;
        err(errorcode, format!("the program raised error {errorcode}"))
    });
    match called == MPI_ERR_WIN && errorcode != MPI_ERR_WIN {
        true => MPI_ERR_WIN,
        false => MPI_SUCCESS,
    }
}

/// An origin or result buffer: `None` when it has no data (a get's
/// origin, an accumulate's result).
unsafe fn buffer<C: CountArg>(
    m: &Mpi,
    buf: *const c_void,
    count: C,
    datatype: Handle,
) -> MpiResult<Elements> {
    m.elements_at(buf, count, datatype)
}

/// Give the request of an `MPI_R…` access back.
unsafe fn give_request(request: *mut Handle, id: Option<u32>) -> MpiResult<()> {
    let out = arg(request, "the request")?;
    *out = match id {
        Some(id) => request_handle(id),
        None => MPI_REQUEST_NULL,
    };
    Ok(())
}

#[allow(clippy::too_many_arguments)]
unsafe fn put_or_get<C: CountArg>(
    m: &mut Mpi,
    kind: Kind,
    buf: *const c_void,
    count: C,
    datatype: Handle,
    rank: c_int,
    disp: isize,
    target_count: C,
    target_type: Handle,
    win: Handle,
    request: bool,
) -> MpiResult<Option<u32>> {
    let (n, target_n) = (count.into(), target_count.into());
    let quick = m.quick_put_get(
        win,
        kind,
        buf,
        n,
        datatype,
        rank,
        disp,
        target_n,
        target_type,
    );
    if quick?.is_some() {
        return Ok(request.then(|| m.engine.null_request()));
    }
    let e = buffer(m, buf, n, datatype)?;
    let (origin, result) = match kind {
        Kind::Put => (Some(&e), None),
        _ => (None, Some(&e)),
    };
    m.access(
        win,
        kind,
        origin,
        None,
        result,
        rank,
        disp,
        target_n,
        target_type,
        0,
        request,
    )
}

/// An access's blocking form and its request form (`MPI_R…`, the same
/// arguments and a request), both running `$body` with `request` saying
/// whether a request is wanted; the body gives the request, if any.
macro_rules! with_request_form {
    ($($name:ident $rname:ident ($($a:ident: $t:ty),*) on $win:ident => |$m:ident, $request:ident| $body:expr;)*) => {$(
        #[mpi]
        fn $name($($a: $t),*) -> c_int {
            call(&stringify!($name)[1..], $win, |$m| {
                let $request = false;
                $body.map(drop)
            })
        }

        #[mpi]
        fn $rname($($a: $t,)* request: *mut Handle) -> c_int {
            call(&stringify!($rname)[1..], $win, |$m| {
                arg(request, "the request")?;
                let id = {
                    let $request = true;
                    $body?
                };
                give_request(request, id)
            })
        }
    )*};
}

with_request_form! {
    PMPI_Put PMPI_Rput (
        buf: *const c_void, count: IntOrCount, datatype: Handle, rank: c_int, disp: isize,
        target_count: IntOrCount, target_type: Handle, win: Handle
    ) on win => |m, request| put_or_get(
        m, Kind::Put, buf, count, datatype, rank, disp, target_count, target_type, win, request
    );
    PMPI_Get PMPI_Rget (
        buf: *const c_void, count: IntOrCount, datatype: Handle, rank: c_int, disp: isize,
        target_count: IntOrCount, target_type: Handle, win: Handle
    ) on win => |m, request| put_or_get(
        m, Kind::Get, buf, count, datatype, rank, disp, target_count, target_type, win, request
    );
    PMPI_Accumulate PMPI_Raccumulate (
        buf: *const c_void, count: IntOrCount, datatype: Handle, rank: c_int, disp: isize,
        target_count: IntOrCount, target_type: Handle, op: Handle, win: Handle
    ) on win => |m, request| accumulate(
        m, (buf, count, datatype), None, rank, disp, target_count, target_type, op, win, request
    );
    PMPI_Get_accumulate PMPI_Rget_accumulate (
        buf: *const c_void, count: IntOrCount, datatype: Handle, result: *mut c_void,
        result_count: IntOrCount, result_type: Handle, rank: c_int, disp: isize,
        target_count: IntOrCount, target_type: Handle, op: Handle, win: Handle
    ) on win => |m, request| accumulate(
        m, (buf, count, datatype), Some((result, result_count, result_type)), rank, disp,
        target_count, target_type, op, win, request
    );
}

#[allow(clippy::too_many_arguments)]
unsafe fn accumulate<C: CountArg>(
    m: &mut Mpi,
    origin: (*const c_void, C, Handle),
    result: Option<(*mut c_void, C, Handle)>,
    rank: c_int,
    disp: isize,
    target_count: C,
    target_type: Handle,
    op: Handle,
    win: Handle,
    request: bool,
) -> MpiResult<Option<u32>> {
    // MPI_NO_OP ignores the origin's buffer (MPI-4.0 §12.3.4).
    let no_op = op == MPI_NO_OP;
    let o = match no_op {
        true => None,
        false => Some(buffer(m, origin.0, origin.1, origin.2)?),
    };
    let r = match result {
        Some((b, c, t)) => Some(buffer(m, b, c, t)?),
        None => None,
    };
    let kind = match result {
        Some(_) => Kind::GetAccumulate,
        None => Kind::Accumulate,
    };
    m.access(
        win,
        kind,
        o.as_ref(),
        None,
        r.as_ref(),
        rank,
        disp,
        target_count.into(),
        target_type,
        op,
        request,
    )
}

const MPI_NO_OP: Handle = 0x5800_000e;

#[mpi]
fn PMPI_Fetch_and_op(
    buf: *const c_void,
    result: *mut c_void,
    datatype: Handle,
    rank: c_int,
    disp: isize,
    op: Handle,
    win: Handle,
) -> c_int {
    call("MPI_Fetch_and_op", win, |m| {
        let r = Some((result, 1, datatype));
        accumulate(
            m,
            (buf, 1, datatype),
            r,
            rank,
            disp,
            1,
            datatype,
            op,
            win,
            false,
        )
        .map(drop)
    })
}

#[mpi]
fn PMPI_Compare_and_swap(
    buf: *const c_void,
    compare: *const c_void,
    result: *mut c_void,
    datatype: Handle,
    rank: c_int,
    disp: isize,
    win: Handle,
) -> c_int {
    call("MPI_Compare_and_swap", win, |m| {
        let l = m.layout(datatype)?;
        if l.base.and_then(coll::op::Elem::of).is_none() || l.blocks.len() > 1 {
            return err(
                MPI_ERR_TYPE,
                "MPI_Compare_and_swap takes one element of a predefined type",
            );
        }
        let (o, c, r) = (
            buffer(m, buf, 1, datatype)?,
            buffer(m, compare, 1, datatype)?,
            buffer(m, result, 1, datatype)?,
        );
        m.access(
            win,
            Kind::CompareSwap,
            Some(&o),
            Some(&c),
            Some(&r),
            rank,
            disp,
            1,
            datatype,
            0,
            false,
        )
        .map(drop)
    })
}

#[mpi]
fn PMPI_Win_fence(assert: c_int, win: Handle) -> c_int {
    call("MPI_Win_fence", win, |m| m.fence(assert, win))
}

#[mpi]
fn PMPI_Win_lock(lock_type: c_int, rank: c_int, assert: c_int, win: Handle) -> c_int {
    call("MPI_Win_lock", win, |m| {
        m.lock(lock_type, rank, assert, win)
    })
}

#[mpi]
fn PMPI_Win_unlock(rank: c_int, win: Handle) -> c_int {
    call("MPI_Win_unlock", win, |m| m.unlock(rank, win))
}

#[mpi]
fn PMPI_Win_lock_all(assert: c_int, win: Handle) -> c_int {
    call("MPI_Win_lock_all", win, |m| m.lock_all(assert, win))
}

#[mpi]
fn PMPI_Win_unlock_all(win: Handle) -> c_int {
    call("MPI_Win_unlock_all", win, |m| m.unlock_all(win))
}

#[mpi]
fn PMPI_Win_flush(rank: c_int, win: Handle) -> c_int {
    call("MPI_Win_flush", win, |m| m.flush(Some(rank), win))
}

#[mpi]
fn PMPI_Win_flush_local(rank: c_int, win: Handle) -> c_int {
    call("MPI_Win_flush_local", win, |m| m.flush(Some(rank), win))
}

#[mpi]
fn PMPI_Win_flush_all(win: Handle) -> c_int {
    call("MPI_Win_flush_all", win, |m| m.flush(None, win))
}

#[mpi]
fn PMPI_Win_flush_local_all(win: Handle) -> c_int {
    call("MPI_Win_flush_local_all", win, |m| m.flush(None, win))
}

/// `MPI_Win_sync`: the window's memory is one copy (`MPI_WIN_UNIFIED`);
/// a full fence orders this process's loads and stores around the call.
#[mpi]
fn PMPI_Win_sync(win: Handle) -> c_int {
    call("MPI_Win_sync", win, |m| {
        m.win(win)?;
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        m.engine.progress()
    })
}

#[mpi]
fn PMPI_Win_post(group: Handle, assert: c_int, win: Handle) -> c_int {
    call("MPI_Win_post", win, |m| m.post(group, assert, win))
}

#[mpi]
fn PMPI_Win_start(group: Handle, assert: c_int, win: Handle) -> c_int {
    call("MPI_Win_start", win, |m| m.start(group, assert, win))
}

#[mpi]
fn PMPI_Win_complete(win: Handle) -> c_int {
    call("MPI_Win_complete", win, |m| m.complete(win))
}

#[mpi]
fn PMPI_Win_wait(win: Handle) -> c_int {
    call("MPI_Win_wait", win, |m| {
        m.wait_exposure(win, true).map(drop)
    })
}

#[mpi]
fn PMPI_Win_test(win: Handle, flag: *mut c_int) -> c_int {
    call("MPI_Win_test", win, |m| {
        let out = arg(flag, "the flag")?;
        *out = c_int::from(m.wait_exposure(win, false)?);
        Ok(())
    })
}
