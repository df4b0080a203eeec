//! Puts and gets as the origin's own loads and stores, where the target's
//! part of the window is mapped in this process: every part of an
//! `MPI_Win_allocate_shared` window; the parts of `MPI_Win_allocate`
//! windows of members on this host (each allocated in a file of /dev/shm
//! that its host's members map, then unlinked); and this process's own
//! part of any window but a dynamic one.
//!
//! What stays a message: accumulates of every kind (the target applies
//! them one at a time, which is what makes them atomic and ordered), any
//! access whose target datatype is not one run of bytes, and every access
//! to a member whose part is not mapped here. MPI leaves concurrent puts
//! and gets to one place undefined, so a direct put beside a put that
//! went as a message needs no order between them; a direct access is
//! complete when it returns, and flushes, unlocks and fences end with a
//! memory fence so that the target's next look sees it.

use super::{Memory, MPI_WIN_FLAVOR_ALLOCATE, MPI_WIN_FLAVOR_DYNAMIC};
use crate::engine::rma::Kind;
use crate::*;
use std::path::PathBuf;

/// A member's part of a window, where this process reaches it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Part {
    pub(crate) base: usize,
    pub(crate) size: usize,
    pub(crate) disp_unit: usize,
}

impl Part {
    /// Where `bytes` bytes from displacement `disp` (and `at` bytes) lie
    /// here, checked as the target checks (`engine::rma::Window::blocks`).
    fn at(&self, disp: isize, at: isize, bytes: usize) -> MpiResult<*mut u8> {
        let start = disp as i128 * self.disp_unit as i128 + at as i128;
        if start < 0 || start + bytes as i128 > self.size as i128 {
            return err(
                MPI_ERR_RMA_RANGE,
                format!(
                    "bytes {start}..{} of a window of {} bytes",
                    start + bytes as i128,
                    self.size
                ),
            );
        }
        Ok((self.base + start as usize) as *mut u8)
    }
}

/// `MPI_Win_allocate`'s memory in a file of /dev/shm: this member's
/// mapping, and its file until the window's members have mapped it.
pub(crate) struct Mapped {
    _own: memmap2::MmapMut,
    file: Option<PathBuf>,
    /// The file's number among this process's (`path_of`).
    number: u64,
}

impl Drop for Mapped {
    fn drop(&mut self) {
        if let Some(f) = self.file.take() {
            let _ = std::fs::remove_file(f);
        }
    }
}

/// The file of process `pid`'s `n`-th mapped window.
fn path_of(pid: u64, n: u64) -> PathBuf {
    format!("/dev/shm/fm-mpiwin-{pid}-{n}").into()
}

/// This process's mapped windows so far (they name its files).
static MAPPED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A new file of `len` zeroed bytes, mapped: (mapping, file, its number).
fn create(len: usize) -> std::io::Result<(memmap2::MmapMut, PathBuf, u64)> {
    let n = MAPPED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = path_of(u64::from(std::process::id()), n);
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)?;
    // SAFETY: a new file of this window, which nothing truncates.
    match file
        .set_len(len as u64)
        .and_then(|()| unsafe { memmap2::MmapMut::map_mut(&file) })
    {
        Ok(map) => Ok((map, path, n)),
        Err(e) => {
            let _ = std::fs::remove_file(&path);
            Err(e)
        }
    }
}

/// Map `len` bytes of another member's part.
fn map_peer(path: &std::path::Path, len: usize) -> std::io::Result<memmap2::MmapMut> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)?;
    if file.metadata()?.len() < len as u64 {
        return Err(std::io::Error::other("shorter than its part"));
    }
    // SAFETY: another member's part, which nothing truncates; its length
    // was checked.
    unsafe { memmap2::MmapOptions::new().len(len).map_mut(&file) }
}

impl Mpi {
    /// Whether another member of `comm` runs on this host.
    fn has_neighbours(&self, comm: Handle) -> MpiResult<bool> {
        let c = self.comm(comm)?;
        let hosts = &self.engine.fm.config().hosts;
        let me = self.engine.fm.rank();
        let here = hosts.get(me as usize);
        Ok(c.ranks
            .iter()
            .any(|&r| r != me && hosts.get(r as usize) == here))
    }

    /// `MPI_Win_allocate`'s memory of `size` bytes: a mapping its host's
    /// members map too where there are such, else the library's own.
    pub(crate) fn allocate_memory(
        &mut self,
        comm: Handle,
        size: usize,
    ) -> MpiResult<(usize, Memory)> {
        if size > 0 && self.has_neighbours(comm)? {
            match create(size) {
                Ok((mut own, file, number)) => {
                    let base = own.as_mut_ptr() as usize;
                    let m = Mapped {
                        _own: own,
                        file: Some(file),
                        number,
                    };
                    return Ok((base, Memory::Mapped(m)));
                }
                Err(e) => tracing::warn!(
                    "fm: MPI_Win_allocate's shared memory: {e}; its members use messages"
                ),
            }
        }
        let mut mem = vec![0u64; size.div_ceil(8)];
        Ok((mem.as_mut_ptr() as usize, Memory::Owned(mem)))
    }

    /// Find the parts of window `win` this process reaches directly
    /// (collective for an `MPI_Win_allocate` window: its members tell
    /// each other where their parts are, map those on their host, and
    /// then give up the files' names).
    pub(crate) fn find_direct(&mut self, win: Handle) -> MpiResult<()> {
        let w = self.win(win)?;
        let me = self.comm(w.comm)?.rank as usize;
        let mine = Part {
            base: w.base,
            size: w.attrs.size as usize,
            disp_unit: w.attrs.disp_unit as usize,
        };
        let n = w.ranks.len();
        let direct: Vec<Option<Part>> = match (&w.memory, w.attrs.flavor) {
            (Memory::Shared { parts, .. }, _) => (parts.iter())
                .map(|&(base, size, unit)| {
                    Some(Part {
                        base,
                        size,
                        disp_unit: unit as usize,
                    })
                })
                .collect(),
            (_, MPI_WIN_FLAVOR_ALLOCATE) => return self.map_parts(win),
            (_, MPI_WIN_FLAVOR_DYNAMIC) => vec![None; n],
            _ => (0..n).map(|r| (r == me).then_some(mine)).collect(),
        };
        self.win_mut(win)?.direct = direct;
        Ok(())
    }

    /// [`Mpi::find_direct`] of an `MPI_Win_allocate` window.
    fn map_parts(&mut self, win: Handle) -> MpiResult<()> {
        let w = self.win(win)?;
        let comm = w.comm;
        let me = self.comm(comm)?.rank as usize;
        let file_no = match &w.memory {
            Memory::Mapped(m) => Some(m.number),
            _ => None,
        };
        let pid = file_no.map_or(0, |_| u64::from(std::process::id()));
        let words = [
            w.attrs.size as u64,
            w.attrs.disp_unit as u64,
            pid,
            file_no.unwrap_or(0),
        ];
        let base = w.base;
        let all = self.allgather_words(comm, &words)?;
        let mut peers = Vec::new();
        let mut direct = Vec::with_capacity(all.len() / 4);
        for (r, p) in all.chunks(4).enumerate() {
            let (size, unit) = (p[0] as usize, p[1] as usize);
            let part = |base| Part {
                base,
                size,
                disp_unit: unit,
            };
            direct.push(match (r == me, p[2]) {
                (true, _) => Some(part(base)),
                (false, 0) => None,
                (false, pid) => match map_peer(&path_of(pid, p[3]), size) {
                    Ok(mut m) => {
                        let at = m.as_mut_ptr() as usize;
                        peers.push(m);
                        Some(part(at))
                    }
                    // On another host, or not reachable: messages.
                    Err(_) => None,
                },
            });
        }
        if all.chunks(4).any(|p| p[2] != 0) {
            // Every member that could map a part has: the names go.
            self.win_barrier(win)?;
        }
        let w = self.win_mut(win)?;
        if let Memory::Mapped(m) = &mut w.memory {
            if let Some(f) = m.file.take() {
                let _ = std::fs::remove_file(f);
            }
        }
        w.direct = direct;
        w.peer_maps = peers;
        Ok(())
    }

    /// `MPI_Put` or `MPI_Get` of predefined types at both ends into a
    /// part mapped here, done with no datatype lookup (the call's cost is
    /// most of a small access's): `None` where it does not apply, or where
    /// the arguments are wrong — the general path then checks them and
    /// says why.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn quick_put_get(
        &self,
        win: Handle,
        kind: Kind,
        buf: *const c_void,
        count: i64,
        datatype: Handle,
        rank: c_int,
        disp: isize,
        target_count: i64,
        target_type: Handle,
    ) -> MpiResult<Option<()>> {
        let bytes_of = |n: i64, t: Handle| {
            let size = crate::abi::builtin_type_size(t)?;
            usize::try_from(n).ok()?.checked_mul(size)
        };
        let (Some(bytes), Some(target_bytes)) = (
            bytes_of(count, datatype),
            bytes_of(target_count, target_type),
        ) else {
            return Ok(None);
        };
        if bytes != target_bytes || bytes == 0 || buf.is_null() || disp < 0 {
            return Ok(None);
        }
        let Some(part) = (self.win(win).ok())
            .and_then(|w| w.direct.get(usize::try_from(rank).ok()?).copied().flatten())
        else {
            return Ok(None);
        };
        let there = part.at(disp, 0, bytes)?;
        // SAFETY: as `direct_access`'s; `buf` holds `bytes` bytes (MPI's
        // rule for a count of a predefined type).
        unsafe {
            match kind {
                Kind::Put => std::ptr::copy(buf.cast::<u8>(), there, bytes),
                _ => std::ptr::copy(there, buf.cast::<u8>().cast_mut(), bytes),
            }
        }
        Ok(Some(()))
    }

    /// A put or get of `bytes` contiguous bytes at displacement `disp`
    /// (plus `at`) of member `rank`'s part, done here with a copy if that
    /// part is mapped: `Ok(false)` if it is not (the access goes as a
    /// message).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn direct_access(
        &self,
        win: Handle,
        kind: Kind,
        data: Option<&crate::coll::Elements>,
        rank: c_int,
        disp: isize,
        at: isize,
        bytes: usize,
    ) -> MpiResult<bool> {
        let w = self.win(win)?;
        let Some(part) = usize::try_from(rank)
            .ok()
            .and_then(|r| w.direct.get(r).copied().flatten())
        else {
            return Ok(false);
        };
        let Some(data) = data else {
            return Ok(false);
        };
        let there = part.at(disp, at, bytes)?;
        // SAFETY: `there..there + bytes` lies in the member's part
        // (checked), which this process maps for as long as the window
        // lives; `data` is the caller's buffer of `bytes` bytes of its
        // layout (MPI's rule). `copy`, not `copy_nonoverlapping`: a
        // program may name its own part as the other buffer.
        unsafe {
            match (kind, data.layout.contiguous_at()) {
                (Kind::Put, Some(o)) => std::ptr::copy(data.buf.offset(o), there, bytes),
                (Kind::Put, None) => std::ptr::copy(data.pack().as_ptr(), there, bytes),
                (_, Some(o)) => std::ptr::copy(there, data.buf.offset(o), bytes),
                (_, None) => {
                    let from = std::slice::from_raw_parts(there, bytes);
                    data.layout.unpack(from, data.buf, data.count);
                }
            }
        }
        Ok(true)
    }
}
