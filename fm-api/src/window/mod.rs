//! # One-sided communication for FM programs
//!
//! A [`Window`] is memory that every member of a group exposes to the
//! others: made collectively by [`crate::Fm::window`] (zeroed memory fm
//! allocates) or [`crate::Fm::window_over`] (a vector the program hands
//! over and gets back from [`Window::free`]). Any member then writes
//! ([`Window::put`]) and reads ([`Window::get`]) any member's part, and
//! updates 64-bit words atomically ([`Window::fetch_add`],
//! [`Window::swap`], [`Window::compare_swap`]), naming the target by its
//! number in the group and the place by its byte offset in the target's
//! window.
//!
//! How it works, and what that means for a program:
//!
//! - Each operation is one FM message to a handler fm reserves; the
//!   target applies it **inside its own handlers** (any `extract`, or any
//!   blocking fm call, such as a collective or a flush), as FM's active
//!   messages have always run. A target that computes for a long time
//!   without calling fm delays the origins waiting for it by as long.
//! - A put is complete at the origin when `put` returns (its data has
//!   been copied out; the buffer may be reused), and **at the target**
//!   when [`Window::flush`] to that target (or [`Window::flush_all`], or
//!   [`Window::fence`]) returns: its bytes are then in the target's
//!   window. Get and the atomics wait for their answer and return with
//!   it.
//! - Operations of one origin to one target are applied in the order
//!   issued. The atomics are atomic with respect to each other and to
//!   puts, from every origin: a target applies one message at a time.
//! - [`Window::fence`] flushes every operation of this member and waits
//!   until every member has too: after it, every put issued before any
//!   member's fence is visible in every window.
//! - Nothing outside a window is ever written: every operation is checked
//!   against the target's length at the origin (a clear error at once)
//!   and again at the target, which refuses what does not fit (and what
//!   names a window it does not have, or an atomic word not 8-byte
//!   aligned); a target's refusal comes back from the next flush, fence,
//!   get or atomic as [`crate::ErrorKind::Window`].
//! - The program reads and writes its own part with
//!   [`Window::local`] and [`Window::local_mut`], which borrow the
//!   endpoint: while the slice lives, no handler runs, so no operation
//!   that came as a message changes it. Members on this host store into
//!   a window made by [`crate::Fm::window`] directly, at any time: as in
//!   MPI's shared windows, read what they write after a fence (or a
//!   flag they set, with [`Window::load`]), and do not write a place
//!   another member writes in the same epoch. A window made over a
//!   vector ([`crate::Fm::window_over`]) is reached only by messages
//!   (and by its own member).
//!
//! ```
//! let mut fm = fm::Fm::init()?;
//! let world = fm.world()?;
//! let (me, n) = (world.me(), world.size());
//! // 8 bytes per member: a counter on member 0, and a slot for a name.
//! let mut win = fm.window(&world, 16)?;
//! // Everyone counts itself in at member 0, and writes its number into
//! // the next member's slot.
//! let before = win.fetch_add(&mut fm, 0, 0, 1)?;
//! assert!(before < n as u64);
//! win.put(&mut fm, (me + 1) % n, 8, &(me as u64).to_le_bytes())?;
//! win.fence(&mut fm)?;
//! let mine = win.local(&fm);
//! assert_eq!(mine[8..16], (((me + n - 1) % n) as u64).to_le_bytes());
//! if me == 0 {
//!     assert_eq!(mine[..8], (n as u64).to_le_bytes());
//! }
//! // And read member 0's counter from anywhere.
//! let mut count = [0u8; 8];
//! win.get(&mut fm, 0, 0, &mut count)?;
//! assert_eq!(u64::from_le_bytes(count), n as u64);
//! win.free(&mut fm)?;
//! # Ok::<(), fm::FmError>(())
//! ```

mod serve;
mod wire;

pub(crate) use serve::{intake, Windows};
pub(crate) use wire::ONE_SIDED;

use crate::coll::Group;
use crate::{Endpoint, ErrorKind, FmError, Rank, Result};
use std::alloc::Layout;
use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::Arc;
use wire::{Kind, Request, Status};

/// A window's memory: fm's own allocation (64-byte aligned, zeroed), a
/// shared mapping the members on this host map too (`shared`), or a
/// vector the program handed over.
pub(crate) struct Memory {
    ptr: *mut u8,
    len: usize,
    backing: Backing,
}

enum Backing {
    Allocated(Layout),
    /// The mapping, and its file until every member had the chance to
    /// map it (then unlinked).
    Shared {
        _mapping: memmap2::MmapMut,
        file: std::sync::Mutex<Option<std::path::PathBuf>>,
    },
    Vec(Vec<u8>),
}

// SAFETY: the memory is written only by the handlers of the endpoint
// that made it and by the program through `Window::local_mut`, which
// borrows that endpoint mutably: never by two threads at once.
unsafe impl Send for Memory {}
unsafe impl Sync for Memory {}

impl Memory {
    fn allocate(len: usize) -> Result<Memory> {
        let layout = Layout::from_size_align(len.max(1), 64)
            .map_err(|e| window_error(format!("a window of {len} bytes: {e}")))?;
        // SAFETY: the layout's size is not zero.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(window_error(format!(
                "no memory for a window of {len} bytes"
            )));
        }
        Ok(Memory {
            ptr,
            len,
            backing: Backing::Allocated(layout),
        })
    }

    /// `len` zeroed bytes in a file of /dev/shm that the members on this
    /// host map (`Memory::unlink` once they have).
    fn shared(len: usize, path: std::path::PathBuf) -> std::io::Result<Memory> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)?;
        let mapped = file.set_len(len as u64).and_then(|()| {
            // SAFETY: a new file of this window, which nothing truncates.
            unsafe { memmap2::MmapMut::map_mut(&file) }
        });
        let mut map = match mapped {
            Ok(m) => m,
            Err(e) => {
                let _ = std::fs::remove_file(&path);
                return Err(e);
            }
        };
        Ok(Memory {
            ptr: map.as_mut_ptr(),
            len,
            backing: Backing::Shared {
                _mapping: map,
                file: std::sync::Mutex::new(Some(path)),
            },
        })
    }

    /// The shared file's name is no longer needed: every member that
    /// could map it has.
    fn unlink(&self) {
        if let Backing::Shared { file, .. } = &self.backing {
            let taken = file.lock().unwrap_or_else(|p| p.into_inner()).take();
            if let Some(p) = taken {
                let _ = std::fs::remove_file(p);
            }
        }
    }

    fn over(mut v: Vec<u8>) -> Memory {
        Memory {
            ptr: v.as_mut_ptr(),
            len: v.len(),
            backing: Backing::Vec(v),
        }
    }

    /// The program's vector, if the memory is one (taken).
    fn take_vec(&mut self) -> Option<Vec<u8>> {
        match &mut self.backing {
            Backing::Vec(v) => Some(std::mem::take(v)),
            Backing::Allocated(_) | Backing::Shared { .. } => None,
        }
    }

    /// Where `len` bytes from `offset` lie, if they lie in the memory.
    pub(crate) fn range(&self, offset: u64, len: u64) -> std::result::Result<*mut u8, Status> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len as u64 => Ok(self.ptr.wrapping_add(offset as usize)),
            _ => Err(Status::OutOfRange),
        }
    }
}

impl Drop for Memory {
    fn drop(&mut self) {
        self.unlink();
        if let Backing::Allocated(layout) = self.backing {
            // SAFETY: allocated with this layout by `allocate`.
            unsafe { std::alloc::dealloc(self.ptr, layout) };
        }
    }
}

fn window_error(why: String) -> FmError {
    ErrorKind::Window(why).into()
}

/// Memory every member of a group exposes to the others (the module's
/// documentation says how it behaves). Dropped without [`Window::free`],
/// its memory goes at once: later requests for it are refused, and the
/// stores of members on this host that mapped it land in memory nobody
/// reads any more.
pub struct Window {
    /// The window's own group (of the members it was made on): its ID
    /// names the window on the wire, the same on every member.
    group: Group,
    /// Each member's window length, as it said at creation.
    lens: Vec<u64>,
    memory: Arc<Memory>,
    /// Per member, its window in this process's memory where it can be
    /// reached with loads and stores: this member's own, and those of
    /// members on this host whose windows are shared mappings.
    direct: Vec<Option<Direct>>,
    /// The endpoint that serves it (`Endpoint::id`).
    endpoint: u64,
}

/// A member's window reached directly: where it lies here (the mapping,
/// kept for as long as the window, for another member's).
struct Direct {
    ptr: *mut u8,
    _mapping: Option<memmap2::MmapMut>,
}

// SAFETY: the pointers point into the window's own memory (kept by its
// `Arc`) and into mappings the window owns; it is used from one thread at
// a time, with the endpoint it was made on.
unsafe impl Send for Window {}

/// The file of member `rank`'s shared window `id`, made by process `pid`.
fn shared_path(pid: u64, id: u64, rank: Rank) -> std::path::PathBuf {
    format!("/dev/shm/fm-window-{pid}-{id:016x}-{rank}").into()
}

/// Map `len` bytes of another member's shared window.
fn map_peer(path: &std::path::Path, len: u64) -> std::io::Result<Direct> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)?;
    if file.metadata()?.len() < len {
        return Err(std::io::Error::other("shorter than its window"));
    }
    // SAFETY: the file of another member's window, which nothing
    // truncates; its length was checked.
    let mut map = unsafe { memmap2::MmapOptions::new().len(len as usize).map_mut(&file) }?;
    Ok(Direct {
        ptr: map.as_mut_ptr(),
        _mapping: Some(map),
    })
}

impl crate::Fm {
    /// A window of `len` zeroed bytes on every member of `on` (each may
    /// ask for another length). Collective over `on`: every member calls
    /// it, in the same order as their other windows and groups.
    ///
    /// Where other members share this host, the memory is a shared
    /// mapping they map too, and operations between them are loads and
    /// stores (and the processor's atomics), with no message; if it
    /// cannot be made (no /dev/shm), messages carry them, as between
    /// hosts.
    pub fn window(&mut self, on: &Group, len: usize) -> Result<Window> {
        let (me, dev) = (self.rank(), self.composite());
        let here = dev.host_of(me);
        let neighbours = on
            .members()
            .iter()
            .any(|&r| r != me && dev.host_of(r) == here);
        let id = self.groups.next_id(on.members());
        let shared = (neighbours && len > 0)
            .then(|| Memory::shared(len, shared_path(u64::from(std::process::id()), id, me)))
            .and_then(|m| {
                m.map_err(|e| {
                    tracing::warn!("fm: a window's shared memory: {e}; its members use messages")
                })
                .ok()
            });
        let memory = match shared {
            Some(m) => m,
            None => Memory::allocate(len)?,
        };
        self.make_window(on, memory)
    }

    /// A window over `memory` (the vector's length is the window's), given
    /// back by [`Window::free`]. Collective over `on`, as [`Fm::window`].
    ///
    /// [`Fm::window`]: crate::Fm::window
    pub fn window_over(&mut self, on: &Group, memory: Vec<u8>) -> Result<Window> {
        self.make_window(on, Memory::over(memory))
    }

    fn make_window(&mut self, on: &Group, memory: Memory) -> Result<Window> {
        let mut group = self.group(on.members())?;
        let memory = Arc::new(memory);
        // Registered before the members tell each other their lengths:
        // once a member knows everyone's, everyone has registered, so no
        // request can come before its window is there.
        let id = group.id();
        self.windows.register(id, Arc::downgrade(&memory));
        let pid = match memory.backing {
            Backing::Shared { .. } => u64::from(std::process::id()),
            _ => 0,
        };
        let mut all = vec![0u64; 2 * group.size()];
        if let Err(e) = group.allgather(self, &[memory.len as u64, pid], &mut all) {
            self.windows.deregister(id);
            return Err(e);
        }
        let lens: Vec<u64> = all.iter().step_by(2).copied().collect();
        let dev = self.composite();
        let here = dev.host_of(self.rank());
        let direct = (group.members().iter().enumerate())
            .map(|(i, &r)| match (i == group.me(), all[2 * i + 1]) {
                (true, _) => Some(Direct {
                    ptr: memory.ptr,
                    _mapping: None,
                }),
                (false, 0) => None,
                (false, pid) if dev.host_of(r) == here => {
                    let path = shared_path(pid, id, r);
                    map_peer(&path, lens[i])
                        .map_err(|e| {
                            tracing::warn!(
                                "fm: member {i}'s window: {}: {e}; messages carry its operations",
                                path.display()
                            )
                        })
                        .ok()
                }
                _ => None,
            })
            .collect();
        if all.iter().skip(1).step_by(2).any(|&pid| pid != 0) {
            // Every member that could map a shared window has: their
            // files go (the memory stays until the last mapping does).
            let mapped = group.barrier(self);
            memory.unlink();
            if let Err(e) = mapped {
                self.windows.deregister(id);
                return Err(e);
            }
        }
        Ok(Window {
            group,
            lens,
            memory,
            direct,
            endpoint: self.id,
        })
    }
}

impl Window {
    /// The window's ID, the same on every member (it names the window in
    /// its messages).
    pub fn id(&self) -> u64 {
        self.group.id()
    }

    /// This member's window length.
    pub fn len(&self) -> usize {
        self.memory.len
    }

    pub fn is_empty(&self) -> bool {
        self.memory.len == 0
    }

    /// Member `target`'s window length.
    pub fn len_of(&self, target: usize) -> Option<usize> {
        self.lens.get(target).map(|&l| l as usize)
    }

    /// The window's members (job ranks, in the group's order).
    pub fn members(&self) -> &[Rank] {
        self.group.members()
    }

    /// This process's number among them.
    pub fn me(&self) -> usize {
        self.group.me()
    }

    /// This member's own window, to read. Borrows the endpoint, so that
    /// no handler (and so no operation that came as a message) runs
    /// while it is read; members on this host may store into a window of
    /// [`crate::Fm::window`] meanwhile (the module's documentation).
    ///
    /// # Panics
    /// If `ep` is not the endpoint that made the window.
    pub fn local<'a>(&'a self, ep: &'a Endpoint) -> &'a [u8] {
        self.same_endpoint(ep);
        // SAFETY: the memory lives as long as `self`; remote operations
        // write it only from `ep`'s handlers, which cannot run while `ep`
        // is borrowed.
        unsafe { std::slice::from_raw_parts(self.memory.ptr, self.memory.len) }
    }

    /// This member's own window, to write (as [`Window::local`]).
    ///
    /// # Panics
    /// If `ep` is not the endpoint that made the window.
    pub fn local_mut<'a>(&'a mut self, ep: &'a mut Endpoint) -> &'a mut [u8] {
        self.same_endpoint(ep);
        // SAFETY: as `local`; `&mut self` makes this the only slice.
        unsafe { std::slice::from_raw_parts_mut(self.memory.ptr, self.memory.len) }
    }

    /// The 64-bit word (native byte order) at `offset` of this member's
    /// own window, read atomically: for waiting on a flag that another
    /// member's put or atomic sets.
    pub fn load(&self, ep: &Endpoint, offset: usize) -> Result<u64> {
        self.same_endpoint(ep);
        let len = self.memory.len;
        let at = (self.memory.range(offset as u64, 8))
            .ok()
            .filter(|&at| (at as usize).is_multiple_of(8))
            .ok_or_else(|| {
                window_error(format!(
                    "no aligned 8-byte word at offset {offset} of this member's window of {len} bytes"
                ))
            })?;
        // SAFETY: in the window (checked), aligned.
        Ok(unsafe { AtomicU64::from_ptr(at.cast::<u64>()) }.load(Ordering::Acquire))
    }

    fn same_endpoint(&self, ep: &Endpoint) {
        assert!(
            ep.id == self.endpoint,
            "fm: a window used with an endpoint other than the one that made it"
        );
    }

    /// Member `target`'s job rank, after checking that `len` bytes from
    /// `offset` lie in its window.
    fn target(&self, ep: &Endpoint, target: usize, offset: usize, len: usize) -> Result<Rank> {
        self.same_endpoint(ep);
        let Some(&has) = self.lens.get(target) else {
            return Err(window_error(format!(
                "member {target} of a window of {} members",
                self.lens.len()
            )));
        };
        match offset.checked_add(len) {
            Some(end) if end as u64 <= has => Ok(self.group.members()[target]),
            _ => Err(window_error(format!(
                "{len} bytes at offset {offset} of member {target}'s window of {has} bytes"
            ))),
        }
    }

    /// Write `data` at `offset` of member `target`'s window. Returns once
    /// `data` may be reused; complete at the target after a flush.
    pub fn put(
        &mut self,
        ep: &mut Endpoint,
        target: usize,
        offset: usize,
        data: &[u8],
    ) -> Result<()> {
        let to = self.target(ep, target, offset, data.len())?;
        if let Some(d) = &self.direct[target] {
            // SAFETY: `target` checked the range against the member's
            // window, which `d` maps whole.
            unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), d.ptr.add(offset), data.len()) };
            return Ok(());
        }
        let window = self.group.id();
        ep.windows.put_to(window, to);
        let r = Request {
            kind: Kind::Put,
            window,
            op: 0,
            offset: offset as u64,
            a: 0,
            b: 0,
        };
        ep.send_request(to, &r, data)
    }

    /// Read `buf.len()` bytes at `offset` of member `target`'s window into
    /// `buf`, waiting for them.
    pub fn get(
        &mut self,
        ep: &mut Endpoint,
        target: usize,
        offset: usize,
        buf: &mut [u8],
    ) -> Result<()> {
        let to = self.target(ep, target, offset, buf.len())?;
        if let Some(d) = &self.direct[target] {
            // SAFETY: as `put`'s.
            unsafe {
                std::ptr::copy_nonoverlapping(d.ptr.add(offset), buf.as_mut_ptr(), buf.len())
            };
            return Ok(());
        }
        let into = (buf.as_mut_ptr(), buf.len());
        let r = self.request(ep, Kind::Get, to, offset, [buf.len() as u64, 0], Some(into));
        self.answered(ep, to, r).map(drop)
    }

    /// Add `value` to the 64-bit word (native byte order, 8-byte aligned)
    /// at `offset` of member `target`'s window, wrapping: its value
    /// before.
    pub fn fetch_add(
        &mut self,
        ep: &mut Endpoint,
        target: usize,
        offset: usize,
        value: u64,
    ) -> Result<u64> {
        self.atomic(ep, Kind::FetchAdd, target, offset, [value, 0])
    }

    /// Store `value` in the word at `offset` of member `target`'s window:
    /// its value before.
    pub fn swap(
        &mut self,
        ep: &mut Endpoint,
        target: usize,
        offset: usize,
        value: u64,
    ) -> Result<u64> {
        self.atomic(ep, Kind::Swap, target, offset, [value, 0])
    }

    /// Store `new` in the word at `offset` of member `target`'s window if
    /// it holds `expected`: its value before (`expected` if stored).
    pub fn compare_swap(
        &mut self,
        ep: &mut Endpoint,
        target: usize,
        offset: usize,
        expected: u64,
        new: u64,
    ) -> Result<u64> {
        self.atomic(ep, Kind::CompareSwap, target, offset, [expected, new])
    }

    fn atomic(
        &mut self,
        ep: &mut Endpoint,
        kind: Kind,
        target: usize,
        offset: usize,
        ab: [u64; 2],
    ) -> Result<u64> {
        let to = self.target(ep, target, offset, 8)?;
        if let Some(d) = &self.direct[target] {
            let at = d.ptr.wrapping_add(offset);
            if !(at as usize).is_multiple_of(8) {
                return Err(refused(to, Status::Misaligned));
            }
            // SAFETY: in the member's window (checked), aligned; the
            // target's handlers update it with the same atomics.
            let word = unsafe { AtomicU64::from_ptr(at.cast::<u64>()) };
            return Ok(match kind {
                Kind::FetchAdd => word.fetch_add(ab[0], Ordering::SeqCst),
                Kind::Swap => word.swap(ab[0], Ordering::SeqCst),
                _ => word
                    .compare_exchange(ab[0], ab[1], Ordering::SeqCst, Ordering::SeqCst)
                    .unwrap_or_else(|old| old),
            });
        }
        let r = self.request(ep, kind, to, offset, ab, Some((std::ptr::null_mut(), 0)));
        self.answered(ep, to, r)
    }

    /// Number a request and put it in flight.
    fn request(
        &self,
        ep: &mut Endpoint,
        kind: Kind,
        to: Rank,
        offset: usize,
        [a, b]: [u64; 2],
        answer_into: Option<(*mut u8, usize)>,
    ) -> Request {
        let window = self.group.id();
        let op = ep.windows.start(window, to, answer_into);
        Request {
            kind,
            window,
            op,
            offset: offset as u64,
            a,
            b,
        }
    }

    /// Send `r` and wait for its answer: its value.
    fn answered(&mut self, ep: &mut Endpoint, to: Rank, r: Request) -> Result<u64> {
        let sent = ep.send_request(to, &r, &[]);
        let outcome = sent.and_then(|()| {
            let mut got = None;
            wait_until(ep, |ep| {
                got = ep.windows.outcome(r.op);
                got.is_some()
            })?;
            Ok(got)
        });
        // Whatever happened, the answer writes into the caller's buffer
        // no more.
        ep.windows.forget(r.op);
        match outcome? {
            Some((Status::Ok, value)) => Ok(value),
            Some((status, _)) => Err(refused(to, status)),
            None => Err(window_error("no answer".into())),
        }
    }

    /// Wait until every operation to member `target` is complete there
    /// (its puts' bytes are in its window). A target's refusal of any
    /// operation since the last flush comes back here.
    pub fn flush(&mut self, ep: &mut Endpoint, target: usize) -> Result<()> {
        let to = self.target(ep, target, 0, 0)?;
        let id = self.group.id();
        self.ask_flush(ep, Some(to))?;
        wait_until(ep, |ep| !ep.windows.unanswered(id, Some(to)))?;
        // Direct stores before this are seen before anything after it.
        fence(Ordering::SeqCst);
        self.reported(ep)
    }

    /// [`Window::flush`] to every member.
    pub fn flush_all(&mut self, ep: &mut Endpoint) -> Result<()> {
        self.same_endpoint(ep);
        let id = self.group.id();
        self.ask_flush(ep, None)?;
        wait_until(ep, |ep| !ep.windows.unanswered(id, None))?;
        fence(Ordering::SeqCst);
        self.reported(ep)
    }

    /// [`Window::flush_all`], then a barrier of the window's members:
    /// every operation any member issued before its fence is complete.
    pub fn fence(&mut self, ep: &mut Endpoint) -> Result<()> {
        let flushed = self.flush_all(ep);
        // The barrier even after a refusal, so that members stay in step.
        self.group.barrier(ep)?;
        flushed
    }

    /// Ask the targets of puts since their last flush (`only`, or all) to
    /// answer once those are applied.
    fn ask_flush(&self, ep: &mut Endpoint, only: Option<Rank>) -> Result<()> {
        for to in ep.windows.take_unflushed(self.group.id(), only) {
            let r = self.request(ep, Kind::Flush, to, 0, [0, 0], None);
            ep.send_request(to, &r, &[])?;
        }
        Ok(())
    }

    /// A target's refusal since the last look (taken).
    fn reported(&self, ep: &mut Endpoint) -> Result<()> {
        match ep.windows.take_error(self.group.id()) {
            Some((rank, status)) => Err(refused(rank, status)),
            None => Ok(()),
        }
    }

    /// Collective: fence, then give the memory up; a window made over a
    /// vector gives it back.
    pub fn free(mut self, ep: &mut Endpoint) -> Result<Option<Vec<u8>>> {
        let fenced = self.fence(ep);
        ep.windows.deregister(self.group.id());
        fenced?;
        let Window { memory, .. } = self;
        Ok(Arc::try_unwrap(memory).ok().and_then(|mut m| m.take_vec()))
    }
}

fn refused(rank: Rank, status: Status) -> FmError {
    let why = match status {
        Status::Ok => "nothing",
        Status::NoWindow => "it has no such window (never made, or freed)",
        Status::OutOfRange => "the bytes named are not in its window",
        Status::Misaligned => "the atomic's word is not 8-byte aligned there",
        Status::Malformed => "it could not read the operation, or its answer was malformed",
    };
    window_error(format!("rank {rank} refused a one-sided operation: {why}"))
}

/// Run handlers until `done`; a handler's error is returned once `done`
/// holds (fm's own errors at once: the job ended, a wait timed out).
fn wait_until(ep: &mut Endpoint, mut done: impl FnMut(&mut Endpoint) -> bool) -> Result<()> {
    let mut first: Option<FmError> = None;
    while !done(ep) {
        match ep.extract_wait(usize::MAX) {
            Ok(_) => {}
            Err(e) if e.is_handlers() => {
                first.get_or_insert(e);
            }
            Err(e) => return Err(e),
        }
    }
    first.map_or(Ok(()), Err)
}

#[cfg(test)]
mod tests {
    use super::wire::{Kind, Request, ONE_SIDED};
    use crate::{Config, Fm, JobKey};
    use proptest::prelude::*;

    /// Requests of any offset and length, forged past the origin's
    /// checks, against a window with guard bytes past its end: what lies
    /// in the window is written whole, anything else is refused and
    /// writes nothing, and the bytes past the end never change.
    #[test]
    fn no_request_writes_outside_its_window() {
        let mut fm = Fm::builder()
            .config(Config::local(0, 1, JobKey(35)))
            .build()
            .expect("one-rank job");
        let world = fm.world().expect("world");
        const LEN: usize = 300;
        let mut v = Vec::with_capacity(LEN + 64);
        v.resize(LEN, 0u8);
        v.spare_capacity_mut()[..64].iter_mut().for_each(|b| {
            b.write(0xA5);
        });
        let win = fm.window_over(&world, v).expect("window");
        let fm = std::cell::RefCell::new(fm);
        let id = win.id();
        let offsets = prop_oneof![
            0..LEN as u64 + 8,
            Just(u64::MAX),
            (u64::MAX - 16)..=u64::MAX
        ];
        let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig::with_cases(500));
        runner
            .run(
                &(offsets, 0..LEN + 8, any::<u8>()),
                |(offset, len, fill)| {
                    let mut fm = fm.borrow_mut();
                    let before = win.local(&fm).to_vec();
                    let (refused, received) =
                        (fm.stats().window_refused, fm.stats().messages_received);
                    let r = Request {
                        kind: Kind::Put,
                        window: id,
                        op: 0,
                        offset,
                        a: 0,
                        b: 0,
                    };
                    let msg = [&r.bytes()[..], &vec![fill; len]].concat();
                    fm.send(0, ONE_SIDED, &msg).expect("send");
                    while fm.stats().messages_received == received {
                        fm.extract_wait(usize::MAX).expect("extract");
                    }
                    let fits = offset
                        .checked_add(len as u64)
                        .is_some_and(|e| e <= LEN as u64);
                    let mut want = before;
                    if fits {
                        want[offset as usize..offset as usize + len].fill(fill);
                    }
                    prop_assert_eq!(win.local(&fm), &want[..]);
                    prop_assert_eq!(fm.stats().window_refused, refused + u64::from(!fits));
                    Ok(())
                },
            )
            .expect("property");
        let mut back = win
            .free(&mut fm.borrow_mut())
            .expect("free")
            .expect("the vector");
        let spare = back.spare_capacity_mut();
        // SAFETY: written above; only a write past the end could change them.
        assert!(spare[..64]
            .iter()
            .all(|b| unsafe { b.assume_init() } == 0xA5));
    }
}
