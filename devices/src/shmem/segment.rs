//! The shared segment of one job on one host: layout, creation, attach, checks.
//!
//! Array-based (processes map it at different addresses, so no pointers):
//!
//! ```text
//! 0      header (one page): magic, layout version, job key, geometry, counters
//! 4096   process table: N entries of 64 bytes (rank, pid, CMA probe word,
//!          doorbell word, whether the process may sleep on it)
//! ...    queues: for each receiver SMT ID r, for each of its M queues:
//!          control (256 B): free-list head @0, starved flag @64,
//!                  receive-queue tail @128
//!          slots:  S × 64 B (tag = queue position and frame index, stored last;
//!                  a packet of ≤ 48 B travels inline in its slot, no frame,
//!                  after its length and the low 24 bits of its position,
//!                  and a check word over its source, those and its bytes)
//!          frames: F × stride; frame = in-use u32, len u32, src rank u32,
//!                  queue position u32, payload
//!
//! The positions stamped into frames and inline slots let a receiver tell a
//! packet from what a stray write made look like one: a tag bent to look
//! published names a slot or frame of another position (`mod.rs`, `accept`).
//! An inline slot says its length and source twice (in its tag and its
//! header) and carries a check word over them and its bytes, so a stray
//! write into any one word of it shows.
//! ```
//!
//! A receiver's queues are one contiguous run, which it alone maps in
//! ahead of use: memory touched grows with the ranks on the host, not with
//! their square ([`Segment::prefault_own_queues`]). S grows with the
//! senders a queue has (their credit windows, 64 B per packet); F is a
//! pool of a fixed budget of bytes per receiver, whatever N is
//! (`ShmemConfig::geometry`).

use super::queue::{initial_slot_value, QueueMemory};
use crate::{sys, DeviceError, JobKey};
use memmap2::MmapMut;
use std::fs::{File, OpenOptions};
use std::io::ErrorKind;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Map the segment. A small one (up to [`POPULATE_WHOLE_BYTES`]) has all
/// its pages mapped now (`MAP_POPULATE`): a frame's first use would
/// otherwise take a page fault per 4 KiB (~16 per 64 KiB frame, several
/// µs) in the middle of a message, and make the frame path look slow to
/// `fm`'s choice of single copy. A larger one (many local ranks) is mapped
/// lazily, and each process maps in its own queues
/// ([`Segment::prefault_own_queues`]): every process populating the whole
/// of it made start-up and memory grow with the square of the ranks.
///
/// # Safety
/// As [`MmapMut::map_mut`]: the file must not be truncated while mapped.
unsafe fn map_segment(file: &File, total: u64) -> std::io::Result<MmapMut> {
    let mut options = memmap2::MmapOptions::new();
    if total <= POPULATE_WHOLE_BYTES {
        options.populate();
    }
    // SAFETY: forwarded to the caller.
    unsafe { options.map_mut(file) }
}

/// Segments up to this size are mapped in whole by every process.
pub const POPULATE_WHOLE_BYTES: u64 = 40 << 20;

pub const MAGIC: u64 = u64::from_le_bytes(*b"FM-SMT\0\x01");
pub const LAYOUT_VERSION: u32 = 5;
const READY: u32 = 0x5245_4459;
pub const HEADER_BYTES: usize = 4096;
pub const PROC_ENTRY_BYTES: usize = 64;
pub const QUEUE_CTL_BYTES: usize = 256;
pub const FRAME_HEADER_BYTES: usize = 16;
/// Each receive-queue slot is one cache line: the tag word (position and
/// frame index, stored last), then — for a packet carried inline — its
/// length, source and up to [`INLINE_BYTES`] of payload.
pub const SLOT_BYTES: usize = 64;
pub const SLOT_HEADER_BYTES: usize = 16;
pub const INLINE_BYTES: usize = SLOT_BYTES - SLOT_HEADER_BYTES;

/// The header of a frame, written by its sender before it publishes the
/// frame; the payload follows.
#[repr(C)]
pub struct FrameHeader {
    /// The frame's in-use flag (`queue.rs`).
    _in_use: u32,
    pub len: u32,
    pub src: u32,
    /// The queue position it was published at.
    pub position: u32,
}

/// A receive-queue slot, one cache line. `tag` (position << 32 | frame,
/// or [`Slot::inline_tag`] for a packet carried in the slot) is
/// stored last with Release by the queue (`queue.rs`); an inline packet's
/// length, source and bytes come before it.
#[repr(C)]
pub struct Slot {
    pub tag: AtomicU64,
    /// An inline packet's length (low 8 bits) and the low 24 bits of the
    /// position it was published at ([`Slot::stamp`]).
    pub len_position: u32,
    /// [`Slot::check`] of the packet.
    pub check: u32,
    pub inline: [u8; INLINE_BYTES],
}

const _: () = assert!(std::mem::size_of::<FrameHeader>() == FRAME_HEADER_BYTES);
const _: () = assert!(std::mem::size_of::<Slot>() == SLOT_BYTES);
const _: () = assert!(std::mem::offset_of!(Slot, inline) == SLOT_HEADER_BYTES);

impl Slot {
    /// The tag's low word for an inline packet of `len` bytes from `src`
    /// (below 2^23, as every rank is): the slot's header says both again,
    /// so a stray write into either word shows.
    #[inline(always)]
    pub fn inline_tag(len: u32, src: u32) -> u32 {
        super::queue::INLINE_FLAG | (src & 0x7f_ffff) << 8 | (len & 0xff)
    }

    /// The length-and-position word of an inline packet of `len` bytes
    /// published at queue position `position`.
    #[inline(always)]
    pub fn stamp(len: u32, position: u32) -> u32 {
        (position << 8) | (len & 0xff)
    }

    /// The check word of an inline packet from `src` with
    /// length-and-position word `len_position` and inline area `data`
    /// (all of it, as the slot carries it): the XOR of its 8-byte words,
    /// each rotated by its own amount, folded to 32 bits. A change of any
    /// one 32-bit word changes it (a rotation of a nonzero 32-bit pattern
    /// folds to a rotation of it), in a few cycles on the 8 B path, where
    /// a CRC cost 10 % of the one-way latency.
    #[inline(always)]
    pub fn check(src: u32, len_position: u32, data: &[u8; INLINE_BYTES]) -> u32 {
        let mut h = (src as u64) << 32 | len_position as u64;
        for (k, w) in data.chunks_exact(8).enumerate() {
            let mut b = [0u8; 8];
            b.copy_from_slice(w);
            h ^= u64::from_le_bytes(b).rotate_left(8 * k as u32 + 5);
        }
        (h ^ (h >> 32)) as u32
    }

    /// An inline packet's length-and-position word ([`Slot::stamp`]) and
    /// check ([`Slot::check`]).
    ///
    /// # Safety
    /// `slot` is a slot of a mapped queue whose tag this process polled and
    /// whose position cannot come round again meanwhile.
    #[inline(always)]
    pub unsafe fn read_header(slot: *const Slot) -> (u32, u32) {
        // SAFETY: forwarded to the caller; the fields lie inside the slot.
        unsafe {
            (
                std::ptr::addr_of!((*slot).len_position).read(),
                std::ptr::addr_of!((*slot).check).read(),
            )
        }
    }

    /// An inline packet's bytes, all [`INLINE_BYTES`] of them: a fixed
    /// size compiles to a few vector moves, where `len` would call memcpy.
    ///
    /// # Safety
    /// As [`Slot::read_header`].
    #[inline(always)]
    pub unsafe fn read_inline(slot: *const Slot) -> [u8; INLINE_BYTES] {
        // SAFETY: forwarded to the caller; the array lies inside the slot.
        unsafe { std::ptr::addr_of!((*slot).inline).read_unaligned() }
    }

    /// Write an inline packet's length-and-position word ([`Slot::stamp`])
    /// and check ([`Slot::check`]) (and `data`, when given).
    ///
    /// # Safety
    /// `slot` is a slot of a mapped queue at a position this process has
    /// claimed and not yet published.
    #[inline(always)]
    pub unsafe fn write_inline(
        slot: *mut Slot,
        len_position: u32,
        check: u32,
        data: Option<&[u8; INLINE_BYTES]>,
    ) {
        // SAFETY: forwarded to the caller; the fields lie inside the slot.
        unsafe {
            std::ptr::addr_of_mut!((*slot).len_position).write(len_position);
            std::ptr::addr_of_mut!((*slot).check).write(check);
            if let Some(d) = data {
                std::ptr::addr_of_mut!((*slot).inline).write_unaligned(*d);
            }
        }
    }
}

impl FrameHeader {
    /// # Safety
    /// `frame` is the header of a frame this process owns or was given.
    #[inline(always)]
    pub unsafe fn read(frame: *const FrameHeader) -> (u32, u32, u32) {
        // SAFETY: forwarded to the caller.
        unsafe {
            (
                std::ptr::addr_of!((*frame).len).read(),
                std::ptr::addr_of!((*frame).src).read(),
                std::ptr::addr_of!((*frame).position).read(),
            )
        }
    }

    /// # Safety
    /// `frame` is the header of a frame this process acquired.
    #[inline(always)]
    pub unsafe fn write(frame: *mut FrameHeader, len: u32, src: u32) {
        // SAFETY: forwarded to the caller.
        unsafe {
            std::ptr::addr_of_mut!((*frame).len).write(len);
            std::ptr::addr_of_mut!((*frame).src).write(src);
        }
    }
}
/// Largest sane geometry, so that a corrupt header cannot make us map terabytes.
const MAX_PROCS: u32 = 4096;
const MAX_FRAMES: u32 = 1 << 16;
const MAX_PAYLOAD: u32 = 1 << 24;

/// Header at offset 0. Only the atomics change after creation.
#[repr(C)]
struct Header {
    magic: u64,
    version: u32,
    header_bytes: u32,
    job_key: u64,
    total_bytes: u64,
    procs: u32,
    queues: u32,
    frames: u32,
    payload: u32,
    creator_pid: u32,
    ready: AtomicU32,
    next_smt_id: AtomicU32,
    attached: AtomicU32,
    slots: u32,
}

/// One process's entry in the process table (indexed by SMT ID).
#[repr(C)]
pub struct ProcEntry {
    pub rank: AtomicU32,
    pub pid: AtomicU32,
    pub probe_addr: AtomicU64,
    pub probe_value: AtomicU64,
    /// The process's doorbell (`crate::doorbell`).
    pub bell: AtomicU32,
    /// Non-zero: the process may sleep on its doorbell, so senders ring it.
    pub sleeps: AtomicU32,
    /// Non-zero once the process closed its device: a pid gone after this
    /// is a process that ended, not one that died ([`PeerWatch`]).
    pub departed: AtomicU32,
}

const _: () = assert!(std::mem::size_of::<ProcEntry>() <= PROC_ENTRY_BYTES);

/// Shape of a segment; every process of a job computes the same one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// N: processes on this host.
    pub procs: u32,
    /// M: queues per receiver, 1 ≤ M ≤ N.
    pub queues: u32,
    /// F: frames per queue (a pool its senders share), a power of two.
    pub frames: u32,
    /// S: slots per queue (room for its senders' credit windows), a power
    /// of two.
    pub slots: u32,
    /// Payload bytes per frame.
    pub payload: u32,
}

impl Geometry {
    pub fn stride(&self) -> usize {
        (FRAME_HEADER_BYTES + self.payload as usize).next_multiple_of(64)
    }
    fn slots_bytes(&self) -> usize {
        self.slots as usize * SLOT_BYTES
    }
    pub fn queue_bytes(&self) -> usize {
        QUEUE_CTL_BYTES + self.slots_bytes() + self.frames as usize * self.stride()
    }
    fn queues_offset(&self) -> usize {
        (HEADER_BYTES + self.procs as usize * PROC_ENTRY_BYTES).next_multiple_of(4096)
    }
    /// Bytes of one receiver's M queues (one contiguous run).
    pub fn receiver_bytes(&self) -> usize {
        self.queues as usize * self.queue_bytes()
    }
    pub fn total_bytes(&self) -> u64 {
        self.queues_offset() as u64
            + self.procs as u64 * self.queues as u64 * self.queue_bytes() as u64
    }
    /// Most senders that can share one queue.
    pub fn senders_per_queue(&self) -> u32 {
        self.procs.div_ceil(self.queues)
    }
    /// Exactly one possible sender per queue: the queue needs no atomic RMW.
    pub fn exclusive(&self) -> bool {
        self.queues >= self.procs
    }
    pub fn validate(&self) -> Result<(), String> {
        if self.procs == 0 || self.procs > MAX_PROCS {
            return Err(format!("{} processes (1..={MAX_PROCS})", self.procs));
        }
        if self.queues == 0 || self.queues > self.procs {
            return Err(format!(
                "{} queues per receiver (1..={})",
                self.queues, self.procs
            ));
        }
        if !self.frames.is_power_of_two() || self.frames < 8 || self.frames > MAX_FRAMES {
            return Err(format!(
                "{} frames per queue (a power of two, 8..={MAX_FRAMES})",
                self.frames
            ));
        }
        if !self.slots.is_power_of_two() || self.slots < 8 || self.slots > MAX_FRAMES {
            return Err(format!(
                "{} slots per queue (a power of two, 8..={MAX_FRAMES})",
                self.slots
            ));
        }
        if self.payload < 64 || self.payload > MAX_PAYLOAD {
            return Err(format!(
                "{} payload bytes per frame (64..={MAX_PAYLOAD})",
                self.payload
            ));
        }
        Ok(())
    }
}

/// A mapped segment.
pub struct Segment {
    /// Shared with the process's doorbell, whose word lies inside.
    map: Arc<MmapMut>,
    pub geometry: Geometry,
    pub path: PathBuf,
    pub created: bool,
}

/// The other processes of a host's job, seen through the segment's process
/// table: which of them died (their pid is gone) without closing their
/// device first. For a launcher that does not watch its ranks for fm
/// (a PMI launcher: a rank killed by a signal leaves the others waiting).
/// Holds the mapping, so it outlives the device if need be.
#[derive(Clone)]
pub struct PeerWatch {
    map: Arc<MmapMut>,
    /// (rank, offset of its process entry, pid) of every other process.
    peers: Vec<(u32, usize, u32)>,
}

impl PeerWatch {
    /// (rank, pid) of every peer whose process is gone without having
    /// departed.
    pub fn dead(&self) -> Vec<(u32, u32)> {
        (self.peers.iter())
            .filter(|&&(_, at, pid)| {
                // SAFETY: a process entry inside the mapping, 64-byte aligned.
                let e = unsafe { &*(self.map.as_ptr().add(at) as *const ProcEntry) };
                let departed = e.departed.load(Ordering::Acquire) != 0;
                !departed && pid != 0 && !sys::pid_alive(pid)
            })
            .map(|&(rank, _, pid)| (rank, pid))
            .collect()
    }
}

/// One queue inside a mapped segment.
#[derive(Clone, Copy)]
pub struct QueueRef {
    base: *mut u8,
    frames: u32,
    slots: u32,
    exclusive: bool,
    stride: usize,
    slots_bytes: usize,
}

impl QueueRef {
    /// The queue whose memory starts at `base`, laid out for `g`.
    ///
    /// # Safety
    /// `base` must point to `g.queue_bytes()` writable bytes, aligned to 64,
    /// that outlive every use of the returned reference.
    pub unsafe fn at(base: *mut u8, g: &Geometry) -> QueueRef {
        QueueRef {
            base,
            frames: g.frames,
            slots: g.slots,
            exclusive: g.exclusive(),
            stride: g.stride(),
            slots_bytes: g.slots_bytes(),
        }
    }

    /// Pointer to frame `i`'s header.
    #[inline(always)]
    pub fn frame(&self, i: u32) -> *mut u8 {
        // SAFETY (caller's contract): i < frames, so the frame lies inside the mapping.
        unsafe {
            self.base
                .add(QUEUE_CTL_BYTES + self.slots_bytes + i as usize * self.stride)
        }
    }
}

impl QueueRef {
    /// Pointer to slot `i`.
    #[inline(always)]
    pub fn slot_ptr(&self, i: u32) -> *mut Slot {
        // SAFETY (caller's contract): i < slots, inside the slot array.
        unsafe { self.base.add(QUEUE_CTL_BYTES + i as usize * SLOT_BYTES) }.cast()
    }
}

impl QueueMemory for QueueRef {
    type A32 = AtomicU32;
    type A64 = AtomicU64;
    #[inline(always)]
    fn frames(&self) -> u32 {
        self.frames
    }
    #[inline(always)]
    fn slots(&self) -> u32 {
        self.slots
    }
    #[inline(always)]
    fn exclusive(&self) -> bool {
        self.exclusive
    }
    #[inline(always)]
    fn free_head(&self) -> &AtomicU32 {
        // SAFETY: aligned word inside the mapping, only accessed atomically.
        unsafe { &*(self.base as *const AtomicU32) }
    }
    #[inline(always)]
    fn rq_tail(&self) -> &AtomicU32 {
        // SAFETY: as above.
        unsafe { &*(self.base.add(128) as *const AtomicU32) }
    }
    #[inline(always)]
    fn starved(&self) -> &AtomicU32 {
        // SAFETY: as above; its own cache line, written only by starved senders.
        unsafe { &*(self.base.add(64) as *const AtomicU32) }
    }
    #[inline(always)]
    fn slot(&self, i: u32) -> &AtomicU64 {
        debug_assert!(i < self.slots);
        // SAFETY: i < frames; 8-byte aligned inside the slot array.
        unsafe { &*(self.slot_ptr(i) as *const AtomicU64) }
    }
    #[inline(always)]
    fn in_use(&self, frame: u32) -> &AtomicU32 {
        debug_assert!(frame < self.frames);
        // SAFETY: first word of frame `frame`, aligned to 64.
        unsafe { &*(self.frame(frame) as *const AtomicU32) }
    }
    #[inline(always)]
    fn stamp_frame(&self, frame: u32, position: u32) {
        let h: *mut FrameHeader = self.frame(frame).cast();
        // SAFETY: the frame is this sender's until the tag's Release store
        // publishes it, which orders this write before the receiver's read.
        unsafe { std::ptr::addr_of_mut!((*h).position).write(position) };
    }
}

// SAFETY: QueueRef points into a shared mapping whose words are only accessed
// atomically or under the queue protocol; the mapping outlives every QueueRef
// (the device owns both).
unsafe impl Send for QueueRef {}

/// A segment to attach to is a regular file of this user that no other
/// user can open: anything else in its place (another user's file, a
/// device, a file others may write) is refused.
fn check_ownership(path: &Path, file: &File) -> Result<(), DeviceError> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let m = file.metadata().map_err(|e| io_err(path, "stat", e))?;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if !m.is_file() {
        return Err(bad(path, "is not a regular file"));
    }
    if m.uid() != me {
        return Err(bad(
            path,
            format!("belongs to user {}, not to this user ({me})", m.uid()),
        ));
    }
    let mode = m.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(bad(
            path,
            format!("has mode {mode:03o}: other users could reach it (fm makes 600)"),
        ));
    }
    Ok(())
}

fn bad(path: &Path, reason: impl Into<String>) -> DeviceError {
    DeviceError::BadSegment {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

fn io_err(path: &Path, what: &str, source: std::io::Error) -> DeviceError {
    DeviceError::Io {
        device: "shmem",
        context: format!("{what} {}", path.display()),
        source,
    }
}

impl Segment {
    /// Create the segment, or attach to the one another process of the job
    /// created. With `adopt_payload`, an attaching process takes the
    /// creator's payload per frame (the pacer's choice on this host) instead
    /// of insisting on its own.
    pub fn create_or_open(
        path: &Path,
        key: JobKey,
        geometry: Geometry,
        adopt_payload: bool,
        timeout: Duration,
    ) -> Result<Segment, DeviceError> {
        geometry.validate().map_err(|e| DeviceError::Config {
            device: "shmem",
            reason: e,
        })?;
        // O_EXCL refuses a symlink in the segment's place as it refuses
        // any existing name.
        match OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
        {
            Ok(file) => Self::create(file, path, key, geometry),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                Self::open(path, key, geometry, adopt_payload, timeout)
            }
            Err(e) => Err(io_err(path, "create", e)),
        }
    }

    fn create(file: File, path: &Path, key: JobKey, g: Geometry) -> Result<Segment, DeviceError> {
        let total = g.total_bytes();
        if let Err(source) = sys::fallocate(&file, total) {
            let _ = std::fs::remove_file(path);
            return Err(DeviceError::NoSpace {
                path: path.to_path_buf(),
                bytes: total,
                source,
            });
        }
        // SAFETY: we created the file and reserved its storage; other processes
        // only touch it through the protocol below.
        let mut map = unsafe { map_segment(&file, total) }.map_err(|e| {
            let _ = std::fs::remove_file(path);
            io_err(path, "map", e)
        })?;
        let seg = {
            let base = map.as_mut_ptr();
            // SAFETY: the mapping is at least HEADER_BYTES long and page aligned.
            let h = unsafe { &mut *(base as *mut Header) };
            h.magic = MAGIC;
            h.version = LAYOUT_VERSION;
            h.header_bytes = HEADER_BYTES as u32;
            h.job_key = key.0;
            h.total_bytes = total;
            h.procs = g.procs;
            h.queues = g.queues;
            h.frames = g.frames;
            h.slots = g.slots;
            h.payload = g.payload;
            h.creator_pid = std::process::id();
            Segment {
                map: Arc::new(map),
                geometry: g,
                path: path.to_path_buf(),
                created: true,
            }
        };
        // Each receiver initialises its own queues' slots
        // (`Segment::prepare_own_queues`); a zeroed frame is free.
        seg.header().ready.store(READY, Ordering::Release);
        Ok(seg)
    }

    fn open(
        path: &Path,
        key: JobKey,
        mut g: Geometry,
        adopt_payload: bool,
        timeout: Duration,
    ) -> Result<Segment, DeviceError> {
        let deadline = Instant::now() + timeout;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
            .map_err(|e| match e.raw_os_error() {
                Some(libc::ELOOP) => bad(path, "is a symbolic link, not a segment"),
                _ => io_err(path, "open", e),
            })?;
        check_ownership(path, &file)?;
        // Wait for the creator to size the file and publish the header.
        loop {
            let len = file.metadata().map_err(|e| io_err(path, "stat", e))?.len();
            if len >= HEADER_BYTES as u64 {
                // SAFETY: mapping a prefix that exists; read-only view of the header.
                let head = unsafe { memmap2::MmapOptions::new().len(HEADER_BYTES).map(&file) }
                    .map_err(|e| io_err(path, "map header of", e))?;
                // SAFETY: HEADER_BYTES ≥ size_of::<Header>(); ready is read atomically.
                let h = unsafe { &*(head.as_ptr() as *const Header) };
                if h.ready.load(Ordering::Acquire) == READY {
                    if adopt_payload {
                        // The creator's frame size, and the pool it sized
                        // from it.
                        g.payload = h.payload;
                        g.frames = h.frames;
                        g.validate().map_err(|e| bad(path, e))?;
                    }
                    Self::check_header(path, h, key, g, len)?;
                    break;
                }
                if h.magic != 0 && h.magic != MAGIC {
                    return Err(bad(path, "not an fm shared-memory segment (wrong magic)"));
                }
            }
            if Instant::now() > deadline {
                return Err(DeviceError::Timeout {
                    device: "shmem",
                    what: format!("the creator of {} to initialise it", path.display()),
                    secs: timeout.as_secs(),
                });
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        // SAFETY: size checked against the header above.
        let map =
            unsafe { map_segment(&file, g.total_bytes()) }.map_err(|e| io_err(path, "map", e))?;
        Ok(Segment {
            map: Arc::new(map),
            geometry: g,
            path: path.to_path_buf(),
            created: false,
        })
    }

    fn check_header(
        path: &Path,
        h: &Header,
        key: JobKey,
        g: Geometry,
        file_len: u64,
    ) -> Result<(), DeviceError> {
        if h.magic != MAGIC {
            return Err(bad(path, "not an fm shared-memory segment (wrong magic)"));
        }
        if h.version != LAYOUT_VERSION {
            return Err(bad(
                path,
                format!(
                    "layout version {} but this fm uses version {LAYOUT_VERSION}",
                    h.version
                ),
            ));
        }
        if h.job_key != key.0 {
            return Err(bad(
                path,
                format!("belongs to job {:016x}, not to this job {key}", h.job_key),
            ));
        }
        let theirs = Geometry {
            procs: h.procs,
            queues: h.queues,
            frames: h.frames,
            slots: h.slots,
            payload: h.payload,
        };
        if theirs != g {
            return Err(bad(
                path,
                format!("geometry {theirs:?} differs from this process's {g:?} (check FM_SHM_* settings are the same for every rank)"),
            ));
        }
        if h.total_bytes != g.total_bytes() || file_len != g.total_bytes() {
            return Err(bad(
                path,
                format!("size {file_len} bytes, expected {}", g.total_bytes()),
            ));
        }
        Ok(())
    }

    fn header(&self) -> &Header {
        // SAFETY: the mapping starts with a Header.
        unsafe { &*(self.map.as_ptr() as *const Header) }
    }

    pub fn next_smt_id(&self) -> &AtomicU32 {
        &self.header().next_smt_id
    }

    pub fn attached(&self) -> &AtomicU32 {
        &self.header().attached
    }

    /// A [`PeerWatch`] over every process of the table but `me`.
    pub fn peer_watch(&self, me: u32) -> PeerWatch {
        let peers = (0..self.geometry.procs)
            .filter(|&id| id != me)
            .map(|id| {
                let e = self.proc_entry(id);
                let at = HEADER_BYTES + id as usize * PROC_ENTRY_BYTES;
                (
                    e.rank.load(Ordering::Relaxed),
                    at,
                    e.pid.load(Ordering::Relaxed),
                )
            })
            .collect();
        PeerWatch {
            map: self.map.clone(),
            peers,
        }
    }

    pub fn proc_entry(&self, smt_id: u32) -> &ProcEntry {
        assert!(smt_id < self.geometry.procs);
        // SAFETY: inside the process table, 64-byte aligned.
        unsafe {
            &*(self
                .map
                .as_ptr()
                .add(HEADER_BYTES + smt_id as usize * PROC_ENTRY_BYTES)
                as *const ProcEntry)
        }
    }

    /// The doorbell of the process with SMT ID `smt_id`.
    pub fn doorbell(&self, smt_id: u32) -> crate::doorbell::Doorbell {
        let word = &self.proc_entry(smt_id).bell as *const AtomicU32;
        // SAFETY: the word lies in the mapping, in an aligned entry.
        unsafe { crate::doorbell::Doorbell::in_segment(self.map.clone(), word) }
    }

    /// Queue `q` of receiver `r`.
    pub fn queue(&self, r: u32, q: u32) -> QueueRef {
        let g = &self.geometry;
        assert!(r < g.procs && q < g.queues);
        let off =
            g.queues_offset() + (r as usize * g.queues as usize + q as usize) * g.queue_bytes();
        // SAFETY: off + queue_bytes ≤ total_bytes = mapping length, and the
        // mapping lives as long as the segment.
        unsafe { QueueRef::at(self.map.as_ptr().add(off) as *mut u8, g) }
    }

    /// Make ready the queues of receiver `smt_id`: map them in, when the
    /// segment is too large to be mapped in whole (what this process reads
    /// first is its own queues, and senders' first frames land there), and
    /// give their slots their first values. Each process does its own, so
    /// the work of starting grows with the ranks on the host, not their
    /// square. Called before the process counts as attached, so nobody
    /// sends to it yet. Mapping in is best effort: on a kernel without
    /// `MADV_POPULATE_WRITE` (before 5.14) pages fault in on first use.
    pub fn prepare_own_queues(&self, smt_id: u32) {
        let g = self.geometry;
        if g.total_bytes() > POPULATE_WHOLE_BYTES {
            let own = g.queues_offset() + smt_id as usize * g.receiver_bytes();
            for (off, len) in [(0, g.queues_offset()), (own, g.receiver_bytes())] {
                // Inside the mapping: own + the receiver's bytes ≤ total.
                if let Err(e) = self
                    .map
                    .advise_range(memmap2::Advice::PopulateWrite, off, len)
                {
                    tracing::debug!(error = %e, "shmem: pages of own queues fault in on use");
                    break;
                }
            }
        }
        for q in 0..g.queues {
            let queue = self.queue(smt_id, q);
            for i in 0..g.slots {
                QueueMemory::slot(&queue, i)
                    .store(initial_slot_value(i, g.slots), Ordering::Relaxed);
            }
        }
    }

    /// Remove the name; the mapping stays valid for everyone who has it.
    pub fn unlink(&self) {
        match std::fs::remove_file(&self.path) {
            Ok(()) => tracing::debug!(path = %self.path.display(), "shmem segment unlinked"),
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(path = %self.path.display(), error = %e, "could not remove shmem segment")
            }
        }
    }
}

/// An fm segment file found in a directory, read without attaching.
#[derive(Debug, Clone)]
pub struct SegmentFile {
    pub path: PathBuf,
    pub job_key: JobKey,
    pub creator_pid: u32,
    /// Pids of the processes that attached (0 for a slot nobody took).
    pub pids: Vec<u32>,
    pub bytes: u64,
    /// The creator never finished writing the header (it died between
    /// creating the file and initialising it): the job key is the name's,
    /// and no pid is known.
    pub unfinished: Option<std::time::SystemTime>,
}

/// An unfinished segment older than this has no live creator: creating
/// one takes milliseconds, and attaching gives up after
/// `FM_ATTACH_TIMEOUT` (at most a few minutes in practice).
pub const UNFINISHED_STALE_AFTER: Duration = Duration::from_secs(600);

/// The job key in a segment's name, `fm-KEY-HOST`.
fn key_in_name(path: &Path) -> Option<JobKey> {
    let name = path.file_name()?.to_str()?;
    let hex = name.strip_prefix("fm-")?.get(..16)?;
    (name.as_bytes().get(19) == Some(&b'-'))
        .then(|| u64::from_str_radix(hex, 16).ok().map(JobKey))
        .flatten()
}

impl SegmentFile {
    /// Read the header and process table of `path`; `None` if it is not an
    /// fm segment, neither by its header nor, unfinished, by its name.
    pub fn read(path: &Path) -> Option<SegmentFile> {
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
            .ok()?;
        let meta = file.metadata().ok()?;
        let bytes = meta.len();
        let unfinished = |bytes| {
            Some(SegmentFile {
                path: path.to_path_buf(),
                job_key: key_in_name(path)?,
                creator_pid: 0,
                pids: Vec::new(),
                bytes,
                unfinished: Some(meta.modified().ok()?),
            })
        };
        if bytes < HEADER_BYTES as u64 {
            return unfinished(bytes);
        }
        // Header and the largest process table, or the whole file if smaller:
        // one read-only map. SAFETY: a prefix of the file; segments are never
        // truncated (only unlinked).
        let len = bytes.min((HEADER_BYTES + MAX_PROCS as usize * PROC_ENTRY_BYTES) as u64);
        let map = unsafe { memmap2::MmapOptions::new().len(len as usize).map(&file) }.ok()?;
        // SAFETY: as in `open`; only plain fields and atomics are read.
        let h = unsafe { &*(map.as_ptr() as *const Header) };
        if h.ready.load(Ordering::Acquire) != READY {
            return if h.magic == 0 || h.magic == MAGIC {
                unfinished(bytes)
            } else {
                None
            };
        }
        if h.magic != MAGIC {
            return None;
        }
        let procs = h.procs.min(MAX_PROCS) as usize;
        let table_end = HEADER_BYTES + procs * PROC_ENTRY_BYTES;
        let mut pids = Vec::new();
        if table_end as u64 <= len {
            for i in 0..procs {
                let at = HEADER_BYTES + i * PROC_ENTRY_BYTES + 4;
                pids.push(u32::from_ne_bytes(map[at..at + 4].try_into().ok()?));
            }
        }
        Some(SegmentFile {
            path: path.to_path_buf(),
            job_key: JobKey(h.job_key),
            creator_pid: h.creator_pid,
            pids,
            bytes,
            unfinished: None,
        })
    }

    /// No process that created or attached to it is alive: its job is dead.
    /// An unfinished one is stale once it is [`UNFINISHED_STALE_AFTER`] old.
    pub fn is_stale(&self) -> bool {
        if let Some(t) = self.unfinished {
            return t.elapsed().is_ok_and(|age| age >= UNFINISHED_STALE_AFTER);
        }
        std::iter::once(self.creator_pid)
            .chain(self.pids.iter().copied())
            .filter(|&p| p != 0)
            .all(|p| !sys::pid_alive(p))
    }
}

/// Every fm segment (`fm-*` with a valid header) in `dir`.
pub fn scan(dir: &Path) -> Vec<SegmentFile> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found: Vec<SegmentFile> = entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("fm-"))
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .filter_map(|e| SegmentFile::read(&e.path()))
        .collect();
    found.sort_by(|a, b| a.path.cmp(&b.path));
    found
}

/// Remove the segments of job `key` in `dir` (a dead job's, or one that
/// ended before all its processes attached), and its other files there
/// (collective areas a member died before opening: `fm-<key>-area-…`).
/// Returns how many were removed.
pub fn remove_job_segments(dir: &Path, key: JobKey) -> usize {
    let prefix = format!("fm-{key}-");
    let segments = scan(dir)
        .into_iter()
        .filter(|s| s.job_key == key)
        .filter(|s| {
            s.path
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(&prefix))
        })
        .filter(|s| std::fs::remove_file(&s.path).is_ok())
        .count();
    let areas = format!("{prefix}{AREA_FILES}");
    let others = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&areas))
        .filter(|e| std::fs::remove_file(e.path()).is_ok())
        .count();
    segments + others
}

/// How the names of a job's collective areas go on after `fm-<key>-`
/// ([`crate::shmem::ShmemDevice::job_file`]).
pub const AREA_FILES: &str = "area-";
