//! MPI windows (MPI-4.0 chapter 12) over the engine's one-sided messages
//! (`engine::rma`): how a window is made and freed, and each way of
//! synchronising — fence, post/start/complete/wait, and passive target
//! locks with flushes.
//!
//! A window gets a communicator of its own (a duplicate of the one it was
//! made on): its context names the window on the wire, and its fences and
//! frees are barriers that no message of the program's can match.
//!
//! Puts and gets into a part mapped in the origin's process are the
//! origin's own copies (`direct`), and need nothing of the target.
//!
//! Passive target progress otherwise: a target serves accesses, locks and
//! unlocks in its own MPI calls (each one's progress, blocking waits
//! included); a target computing outside MPI delays its origins until its
//! next MPI call, as in MPICH without an asynchronous progress thread.

mod direct;

use crate::engine::rma::{Access, Kind, Window};
use crate::*;
use std::collections::HashMap;

/// `MPI_Win` handles made at run time: direct kind, object type 8.
pub(crate) const WIN_DIRECT: Handle = 0xa000_0000_u32 as Handle;
pub(crate) const MPI_WIN_NULL: Handle = 0x2000_0000;

pub(crate) const MPI_WIN_FLAVOR_CREATE: c_int = 1;
pub(crate) const MPI_WIN_FLAVOR_ALLOCATE: c_int = 2;
pub(crate) const MPI_WIN_FLAVOR_DYNAMIC: c_int = 3;
pub(crate) const MPI_WIN_FLAVOR_SHARED: c_int = 4;
/// Memory is one copy: what a load sees is what a put wrote.
pub(crate) const MPI_WIN_UNIFIED: c_int = 2;
pub(crate) const MPI_LOCK_EXCLUSIVE: c_int = 234;
pub(crate) const MPI_LOCK_SHARED: c_int = 235;
pub(crate) const MPI_MODE_NOCHECK: c_int = 1024;
/// All the assertions MPI defines (`MPI_MODE_NOCHECK` … `MPI_MODE_NOSUCCEED`).
const MODES: c_int = 1024 | 2048 | 4096 | 8192 | 16384;

/// The window's memory, when the library holds it.
pub(crate) enum Memory {
    /// The program's (`MPI_Win_create`), or none (dynamic).
    Program,
    /// `MPI_Win_allocate`'s, where no other member shares this host.
    Owned(#[allow(dead_code)] Vec<u64>),
    /// `MPI_Win_allocate`'s, where others do: shared mappings.
    Mapped(direct::Mapped),
    /// `MPI_Win_allocate_shared`'s: one mapping all members on the host
    /// share, and each member's part of it (base, size, unit).
    Shared {
        _map: Option<memmap2::MmapMut>,
        parts: Vec<(usize, usize, c_int)>,
    },
}

/// What `MPI_Win_get_attr` points at: kept at fixed addresses.
pub(crate) struct Attrs {
    pub(crate) size: isize,
    pub(crate) disp_unit: c_int,
    pub(crate) flavor: c_int,
    pub(crate) model: c_int,
}

/// The window hints MPI defines and their defaults, as `MPI_Win_get_info`
/// gives them: fm keeps every ordering and works the same whatever they
/// say, so a hint set is only remembered.
const HINTS: [(&str, &str); 6] = [
    ("no_locks", "false"),
    ("accumulate_ordering", "rar,raw,war,waw"),
    ("accumulate_ops", "same_op_no_op"),
    ("same_size", "false"),
    ("same_disp_unit", "false"),
    ("alloc_shared_noncontig", "false"),
];

pub(crate) struct Win {
    /// The window's own communicator.
    pub(crate) comm: Handle,
    /// Its name on the wire: that communicator's context.
    pub(crate) id: u32,
    pub(crate) ranks: Arc<[fm::Rank]>,
    pub(crate) base: usize,
    pub(crate) attrs: Box<Attrs>,
    pub(crate) memory: Memory,
    pub(crate) errhandler: Handle,
    /// The hints in [`HINTS`], as last set.
    pub(crate) hints: crate::info::Entries,
    /// Targets this origin holds locks on: whether a lock was asked for
    /// (not under `MPI_MODE_NOCHECK`).
    locked: HashMap<fm::Rank, bool>,
    /// `MPI_Win_lock_all`, and whether locks were asked for.
    all_locked: Option<bool>,
    /// The targets of the access epoch `MPI_Win_start` opened.
    access: Option<Vec<fm::Rank>>,
    /// The origins of the exposure epoch `MPI_Win_post` opened.
    exposure: Option<Vec<fm::Rank>>,
    /// Per member, its part where this process reaches it with loads and
    /// stores (`direct`), and the mappings of other members' parts.
    direct: Vec<Option<direct::Part>>,
    peer_maps: Vec<memmap2::MmapMut>,
}

fn sync_error<T>(why: &str) -> MpiResult<T> {
    err(MPI_ERR_RMA_SYNC, why)
}

fn check_assert(assert: c_int) -> MpiResult<()> {
    match assert & !MODES {
        0 => Ok(()),
        _ => err(
            MPI_ERR_ASSERT,
            format!("{assert:#x} is not a combination of MPI_MODE_ assertions"),
        ),
    }
}

impl Mpi {
    pub(crate) fn win(&self, h: Handle) -> MpiResult<&Win> {
        (h & !HANDLE_INDEX == WIN_DIRECT)
            .then(|| self.wins.get((h & HANDLE_INDEX) as usize)?.as_ref())
            .flatten()
            .ok_or_else(|| MpiError {
                class: MPI_ERR_WIN,
                message: format!("{h:#x} is not a window"),
            })
    }

    pub(crate) fn win_mut(&mut self, h: Handle) -> MpiResult<&mut Win> {
        self.win(h)?;
        (self.wins.get_mut((h & HANDLE_INDEX) as usize))
            .and_then(Option::as_mut)
            .ok_or_else(|| MpiError {
                class: MPI_ERR_WIN,
                message: format!("{h:#x} is not a window"),
            })
    }

    /// Make a window over `size` bytes at `base` on `comm` (collective).
    pub(crate) fn make_window(
        &mut self,
        comm: Handle,
        base: usize,
        size: i64,
        disp_unit: i64,
        flavor: c_int,
        memory: Memory,
    ) -> MpiResult<Handle> {
        self.intracomm(comm, "a window")?;
        let size = nonneg(size, "the window's size")?;
        let disp_unit = match c_int::try_from(disp_unit) {
            Ok(u) if u > 0 => u,
            _ => return err(MPI_ERR_DISP, format!("displacement unit {disp_unit}")),
        };
        let own = crate::comm::dup(self, comm)?;
        let c = self.comm(own)?;
        let (id, ranks) = (c.context, c.ranks.clone());
        let dynamic = flavor == MPI_WIN_FLAVOR_DYNAMIC;
        let w = Window::new(base, size, disp_unit as usize, dynamic);
        self.engine.add_window(id, w);
        let win = Win {
            comm: own,
            id,
            ranks,
            base,
            attrs: Box::new(Attrs {
                size: size as isize,
                disp_unit,
                flavor,
                model: MPI_WIN_UNIFIED,
            }),
            memory,
            errhandler: MPI_ERRORS_ARE_FATAL,
            hints: HINTS.iter().map(|&(k, v)| (k.into(), v.into())).collect(),
            locked: HashMap::new(),
            all_locked: None,
            access: None,
            exposure: None,
            direct: Vec::new(),
            peer_maps: Vec::new(),
        };
        let h = place(&mut self.wins, win, WIN_DIRECT, "windows")?;
        self.find_direct(h)?;
        Ok(h)
    }

    /// Take the window hints of info object `info` (`MPI_INFO_NULL`: none).
    pub(crate) fn set_hints(&mut self, win: Handle, info: Handle) -> MpiResult<()> {
        let given = match info {
            MPI_INFO_NULL => Vec::new(),
            h => self.info(h)?,
        };
        let w = self.win_mut(win)?;
        for (k, v) in given {
            if let Some(h) = w.hints.iter_mut().find(|(hk, _)| *hk == k) {
                h.1 = v;
            }
        }
        Ok(())
    }

    /// `MPI_Win_allocate_shared`'s memory: one mapping of every member's
    /// part, made by the first member in a file of `/dev/shm` that the
    /// others open, unlinked once all have it mapped. A member that cannot
    /// open it (on another host) makes every member fail.
    pub(crate) fn shared_memory(
        &mut self,
        comm: Handle,
        size: i64,
        disp_unit: i64,
    ) -> MpiResult<Memory> {
        let c = self.intracomm(comm, "a shared window")?.clone();
        let size = nonneg(size, "the window's size")?;
        let mut mine = [0u64; 3];
        mine[0] = size as u64;
        mine[1] = disp_unit.max(0) as u64;
        mine[2] = std::process::id() as u64;
        let all = self.allgather_words(comm, &mine)?;
        let round = |n: u64| n.div_ceil(64) * 64;
        let total: u64 = all.chunks(3).map(|p| round(p[0])).sum();
        let path = format!("/dev/shm/fm-win-{}-{}-{}", all[2], c.ranks[0], c.context);
        let opened = match c.rank {
            0 => std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(&path)
                .and_then(|f| f.set_len(total).map(|()| f)),
            _ => Err(std::io::Error::other("not yet")),
        };
        self.allgather_words(comm, &[0])?;
        let opened = match c.rank {
            0 => opened,
            _ => std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(&path),
        };
        // SAFETY: a file of this job's window, which nothing truncates.
        let map = opened.and_then(|f| match total {
            0 => Ok(None),
            _ => unsafe { memmap2::MmapMut::map_mut(&f) }.map(Some),
        });
        let ok = self.allgather_words(comm, &[u64::from(map.is_ok())])?;
        if c.rank == 0 {
            let _ = std::fs::remove_file(&path);
        }
        let mut map = match (ok.iter().all(|&v| v == 1), map) {
            (true, Ok(m)) => m,
            (_, Err(e)) => {
                return err(
                    MPI_ERR_RMA_SHARED,
                    format!("the window's shared memory: {e}"),
                )
            }
            _ => return err(
                MPI_ERR_RMA_SHARED,
                "a member could not map the window's shared memory (are all members on one host?)",
            ),
        };
        let start = map.as_mut().map_or(0, |m| m.as_mut_ptr() as usize);
        let mut at = start;
        let parts = (all.chunks(3))
            .map(|p| {
                // A member without bytes has no base (as MPICH gives it).
                let base = if p[0] == 0 { 0 } else { at };
                let part = (base, p[0] as usize, p[1] as c_int);
                at += round(p[0]) as usize;
                part
            })
            .collect();
        Ok(Memory::Shared { _map: map, parts })
    }

    /// Every member's `words`, in rank order (blocking, on `comm`).
    fn allgather_words(&mut self, comm: Handle, words: &[u64]) -> MpiResult<Vec<u64>> {
        let n = self.comm(comm)?.size() as usize;
        let mut all = vec![0u64; n * words.len()];
        let bytes = (words.len() * 8) as c_int;
        // SAFETY: both buffers hold what the counts say.
        unsafe {
            crate::bindings::allgather_bytes(
                self,
                words.as_ptr().cast(),
                all.as_mut_ptr().cast(),
                bytes,
                comm,
                crate::collective::Mode::Blocking,
            )?
        };
        Ok(all)
    }

    /// `count` elements of `datatype` at the target: a layout, no buffer.
    fn target_elements(&self, count: i64, datatype: Handle) -> MpiResult<crate::coll::Elements> {
        // Any non-null address passes the check of a buffer.
        self.elements_at(
            std::ptr::NonNull::<u8>::dangling().as_ptr().cast(),
            count,
            datatype,
        )
    }

    fn win_barrier(&mut self, win: Handle) -> MpiResult<()> {
        let comm = self.win(win)?.comm;
        self.collective(comm, crate::collective::Mode::Blocking, |c| {
            Ok(crate::coll::barrier(c))
        })
    }

    /// `MPI_Win_free`: every access answered, every member done with the
    /// window, then it is gone.
    pub(crate) fn free_window(&mut self, win: Handle) -> MpiResult<Win> {
        let w = self.win(win)?;
        if !w.locked.is_empty()
            || w.all_locked.is_some()
            || w.access.is_some()
            || w.exposure.is_some()
        {
            return sync_error("the window is freed with an epoch still open");
        }
        let id = w.id;
        self.engine.rma_settle(id, None)?;
        self.win_barrier(win)?;
        self.engine.remove_window(id);
        let Some(w) = (self.wins.get_mut((win & HANDLE_INDEX) as usize)).and_then(Option::take)
        else {
            return err(MPI_ERR_WIN, format!("{win:#x} is not a window"));
        };
        self.remove_comm(w.comm);
        self.names.remove(&win);
        Ok(w)
    }

    /// The FM rank of window rank `rank` (`None`: `MPI_PROC_NULL`).
    fn target(&self, win: Handle, rank: c_int) -> MpiResult<(u32, Option<fm::Rank>)> {
        let w = self.win(win)?;
        if rank == MPI_PROC_NULL {
            return Ok((w.id, None));
        }
        match usize::try_from(rank).ok().and_then(|r| w.ranks.get(r)) {
            Some(&r) => Ok((w.id, Some(r))),
            None => err(
                MPI_ERR_RANK,
                format!("rank {rank} in a window of {} members", w.ranks.len()),
            ),
        }
    }

    /// An access of `kind` from `origin` (data to send; none for a get)
    /// into `target_count` elements of `target_type` at `disp` of rank
    /// `rank`'s window, the old data into `result`: the request, if asked
    /// for one.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn access(
        &mut self,
        win: Handle,
        kind: Kind,
        origin: Option<&crate::coll::Elements>,
        compare: Option<&crate::coll::Elements>,
        result: Option<&crate::coll::Elements>,
        rank: c_int,
        disp: isize,
        target_count: i64,
        target_type: Handle,
        op: Handle,
        request: bool,
    ) -> MpiResult<Option<u32>> {
        let (id, to) = self.target(win, rank)?;
        if disp < 0 && self.win(win)?.attrs.flavor != MPI_WIN_FLAVOR_DYNAMIC {
            // As MPICH: at the origin, before anything is sent.
            return err(MPI_ERR_DISP, format!("target displacement {disp}"));
        }
        let target = self.target_elements(target_count, target_type)?;
        let bytes = target.bytes();
        if bytes == 0 {
            // Nothing moves (MPICH's rma/badrma: a zero-sized type).
            return Ok(request.then(|| self.engine.null_request()));
        }
        for (e, what) in [(origin, "origin"), (result, "result")] {
            if let Some(e) = e.filter(|e| e.bytes() != bytes) {
                return err(
                    MPI_ERR_TYPE,
                    format!(
                        "{} bytes of {what} data for {bytes} bytes at the target",
                        e.bytes()
                    ),
                );
            }
        }
        let elem = match kind {
            Kind::Put | Kind::Get => 0,
            Kind::CompareSwap => target.layout.base.unwrap_or(0),
            _ => {
                if let Ok(Some(_)) = self.user_op(op) {
                    return err(
                        MPI_ERR_OP,
                        "one-sided accumulates take predefined operations only",
                    );
                }
                coll::op::Reduction::new(op, None, target_type, target.layout.clone())?;
                target.layout.base.unwrap_or(0)
            }
        };
        let Some(to) = to else {
            return Ok(request.then(|| self.engine.null_request()));
        };
        if let (Kind::Put | Kind::Get, Some(at)) = (kind, target.layout.contiguous_at()) {
            if self.direct_access(win, kind, origin.or(result), rank, disp, at, bytes)? {
                return Ok(request.then(|| self.engine.null_request()));
            }
        }
        // SAFETY: the caller's buffers, as MPI's caller promises. A
        // contiguous origin goes as it is, without a packed copy.
        let data: std::borrow::Cow<[u8]> = match (origin, compare) {
            (Some(o), None) => match o.layout.contiguous_at() {
                Some(at) => unsafe { slice_or_empty(o.buf.offset(at), o.bytes()) }.into(),
                None => unsafe { o.pack() }.into(),
            },
            (o, c) => {
                let mut v = o.map(|o| unsafe { o.pack() }).unwrap_or_default();
                if let Some(c) = c {
                    v.extend_from_slice(&unsafe { c.pack() });
                }
                v.into()
            }
        };
        let a = Access {
            disp: disp as i64,
            count: target.count as u64,
            extent: target.layout.extent as i64,
            blocks: &target.layout.blocks,
            op,
            elem,
        };
        let result = result.map(|r| Unpack {
            layout: r.layout.clone(),
            buf: r.buf,
            count: r.count,
        });
        self.engine
            .rma_access(id, to, kind, &a, &data, result, request)
    }

    pub(crate) fn fence(&mut self, assert: c_int, win: Handle) -> MpiResult<()> {
        check_assert(assert)?;
        let w = self.win(win)?;
        if !w.locked.is_empty()
            || w.all_locked.is_some()
            || w.access.is_some()
            || w.exposure.is_some()
        {
            return sync_error("MPI_Win_fence inside a lock or post/start epoch");
        }
        self.engine.rma_settle(w.id, None)?;
        self.win_barrier(win)
    }

    pub(crate) fn lock(
        &mut self,
        lock_type: c_int,
        rank: c_int,
        assert: c_int,
        win: Handle,
    ) -> MpiResult<()> {
        check_assert(assert)?;
        let exclusive = match lock_type {
            MPI_LOCK_EXCLUSIVE => true,
            MPI_LOCK_SHARED => false,
            t => return err(MPI_ERR_LOCKTYPE, format!("lock type {t}")),
        };
        let (id, to) = self.target(win, rank)?;
        let Some(to) = to else { return Ok(()) };
        let w = self.win(win)?;
        if w.locked.contains_key(&to) || w.all_locked.is_some() {
            return sync_error("the target is locked already by this process");
        }
        let ask = assert & MPI_MODE_NOCHECK == 0;
        if ask {
            self.engine
                .rma_control(id, to, Kind::Lock, u32::from(exclusive))?;
            self.engine.rma_take(id, to, Kind::Granted, true)?;
        }
        self.win_mut(win)?.locked.insert(to, ask);
        Ok(())
    }

    pub(crate) fn unlock(&mut self, rank: c_int, win: Handle) -> MpiResult<()> {
        let (id, to) = self.target(win, rank)?;
        let Some(to) = to else { return Ok(()) };
        let Some(asked) = self.win_mut(win)?.locked.remove(&to) else {
            return sync_error("MPI_Win_unlock of a target this process has not locked");
        };
        let settled = self.engine.rma_settle(id, Some(to));
        if asked {
            self.engine.rma_control(id, to, Kind::Unlock, 0)?;
        }
        settled
    }

    pub(crate) fn lock_all(&mut self, assert: c_int, win: Handle) -> MpiResult<()> {
        check_assert(assert)?;
        let w = self.win(win)?;
        if !w.locked.is_empty() || w.all_locked.is_some() {
            return sync_error("MPI_Win_lock_all with a lock held already");
        }
        let (id, ranks) = (w.id, w.ranks.clone());
        let ask = assert & MPI_MODE_NOCHECK == 0;
        if ask {
            for &r in ranks.iter() {
                self.engine.rma_control(id, r, Kind::Lock, 0)?;
            }
            for &r in ranks.iter() {
                self.engine.rma_take(id, r, Kind::Granted, true)?;
            }
        }
        self.win_mut(win)?.all_locked = Some(ask);
        Ok(())
    }

    pub(crate) fn unlock_all(&mut self, win: Handle) -> MpiResult<()> {
        let Some(asked) = self.win_mut(win)?.all_locked.take() else {
            return sync_error("MPI_Win_unlock_all without MPI_Win_lock_all");
        };
        let w = self.win(win)?;
        let (id, ranks) = (w.id, w.ranks.clone());
        let settled = self.engine.rma_settle(id, None);
        if asked {
            for &r in ranks.iter() {
                self.engine.rma_control(id, r, Kind::Unlock, 0)?;
            }
        }
        settled
    }

    /// `MPI_Win_flush` (and `_local`: fm completes both at once) of
    /// `rank`, or of every target.
    pub(crate) fn flush(&mut self, rank: Option<c_int>, win: Handle) -> MpiResult<()> {
        let w = self.win(win)?;
        if w.locked.is_empty() && w.all_locked.is_none() {
            return sync_error("a flush outside a passive target epoch");
        }
        match rank {
            None => {
                let id = w.id;
                self.engine.rma_settle(id, None)
            }
            Some(rank) => match self.target(win, rank)? {
                (_, None) => Ok(()),
                (id, Some(to)) => self.engine.rma_settle(id, Some(to)),
            },
        }
    }

    /// A group's members, each checked to be in the window's.
    fn win_group(&self, win: Handle, group: Handle) -> MpiResult<Vec<fm::Rank>> {
        let members = self.group(group)?;
        let w = self.win(win)?;
        match members.iter().find(|r| !w.ranks.contains(r)) {
            Some(r) => err(
                MPI_ERR_GROUP,
                format!("FM rank {r} is no member of the window"),
            ),
            None => Ok(members.to_vec()),
        }
    }

    pub(crate) fn post(&mut self, group: Handle, assert: c_int, win: Handle) -> MpiResult<()> {
        check_assert(assert)?;
        let origins = self.win_group(win, group)?;
        let w = self.win(win)?;
        if w.exposure.is_some() {
            return sync_error("MPI_Win_post with an exposure epoch open");
        }
        let id = w.id;
        for &r in &origins {
            self.engine.rma_control(id, r, Kind::Posted, 0)?;
        }
        self.win_mut(win)?.exposure = Some(origins);
        Ok(())
    }

    pub(crate) fn start(&mut self, group: Handle, assert: c_int, win: Handle) -> MpiResult<()> {
        check_assert(assert)?;
        let targets = self.win_group(win, group)?;
        let w = self.win(win)?;
        if w.access.is_some() {
            return sync_error("MPI_Win_start with an access epoch open");
        }
        let id = w.id;
        for &r in &targets {
            self.engine.rma_take(id, r, Kind::Posted, true)?;
        }
        self.win_mut(win)?.access = Some(targets);
        Ok(())
    }

    pub(crate) fn complete(&mut self, win: Handle) -> MpiResult<()> {
        let Some(targets) = self.win_mut(win)?.access.take() else {
            return sync_error("MPI_Win_complete without MPI_Win_start");
        };
        let id = self.win(win)?.id;
        let mut settled = Ok(());
        for &r in &targets {
            settled = settled.and(self.engine.rma_settle(id, Some(r)));
            self.engine.rma_control(id, r, Kind::Complete, 0)?;
        }
        settled
    }

    /// `MPI_Win_wait` (`wait`), or `MPI_Win_test`: whether every origin
    /// of the exposure epoch completed (it is then closed).
    pub(crate) fn wait_exposure(&mut self, win: Handle, wait: bool) -> MpiResult<bool> {
        let w = self.win(win)?;
        let Some(origins) = w.exposure.clone() else {
            return sync_error("MPI_Win_wait or MPI_Win_test without MPI_Win_post");
        };
        let id = w.id;
        if !wait {
            self.engine.progress()?;
            if !origins
                .iter()
                .all(|&r| self.engine.rma_has_completed(id, r))
            {
                return Ok(false);
            }
        }
        for &r in &origins {
            self.engine.rma_take(id, r, Kind::Complete, true)?;
        }
        self.win_mut(win)?.exposure = None;
        Ok(true)
    }
}
