//! The `shmem` device: HPVM 1.9's shared memory transport (SMT) between the
//! processes of one job on one host, plus PM/Shmem's direct memory copy
//! (single-copy remote read/write through `process_vm_readv/writev`).
//!
//! Opening attaches to the job's segment (creating it if first), takes an SMT
//! ID by fetch-and-increment, records (rank, pid) in the process table and
//! waits until all N local processes are there (the attach fence). The last
//! process to attach removes the segment's name, so nothing is left in
//! /dev/shm once a job runs, whatever happens to it afterwards.

pub mod pace;
pub mod queue;
pub mod segment;
pub mod settings;

use self::queue::QueueMemory;
use self::segment::{
    FrameHeader, Geometry, QueueRef, Segment, Slot, FRAME_HEADER_BYTES, INLINE_BYTES,
};
use crate::doorbell::{BellRef, Doorbell};
use crate::{
    sys, Device, DeviceError, DeviceInfo, DeviceStats, JobKey, Options, Rank, RawRecv, RawSend,
    CONTROL_RESERVE,
};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Payload per frame by default: frames of 16 KiB with their header. On the
/// machines measured (docs/PERFORMANCE.md) a pipelined stream through 16 KiB
/// frames moves 1 MiB three times faster than through 4 KiB frames.
pub const DEFAULT_PAYLOAD: u32 = 16384 - FRAME_HEADER_BYTES as u32;
/// Payload per frame when larger frames would not give each queue
/// [`MIN_POOL`] frames within a receiver's budget.
pub const SMALL_PAYLOAD: u32 = 4096 - FRAME_HEADER_BYTES as u32;
/// Bytes of frames the defaults give all receivers together (many
/// containers give /dev/shm 64 MiB), split among them within
/// [`RECEIVER_FRAME_BYTES`].
pub const SEGMENT_BUDGET: u64 = 32 << 20;
/// Least and most bytes of frames one receiver has by default: its pool
/// does not grow with the ranks that send to it (PM's buffers per channel),
/// only its slots do, 64 bytes per packet of credit.
pub const RECEIVER_FRAME_BYTES: std::ops::RangeInclusive<u64> = (256 << 10)..=(4 << 20);
/// Fewest frames a queue's pool has by default.
pub const MIN_POOL: u32 = 8;
/// A queue position taken but not published for this long never will be
/// (a sender publishes within microseconds of taking it): counted only
/// while this process's audits came about once a second, so a host too
/// loaded to run us is no evidence against the sender.
pub const UNPUBLISHED_FOR: Duration = Duration::from_secs(30);
/// A gap this long between two audits means this process itself was not
/// running: the clock of a position not yet published starts again.
const AUDIT_GAP: Duration = Duration::from_secs(3);

/// Whether to use cross-memory attach for remote read/write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmaMode {
    /// Probe each peer at open; use it where it works.
    Auto,
    /// Never: large messages go through frames.
    Off,
}

/// What a user sets of the shmem device (its `settings.rs`); fm's
/// `Config` holds one and hands it over as it is.
#[derive(Clone, Debug)]
pub struct ShmemSettings {
    /// Directory for the segment (`FM_SHM_DIR`, default /dev/shm).
    pub dir: PathBuf,
    /// M (`FM_SHM_QUEUES`); default N up to 8 processes, else 8.
    pub queues: Option<u32>,
    /// F, frames per queue (`FM_SHM_FRAMES`); default from the budget.
    pub frames: Option<u32>,
    /// Payload bytes per frame (`FM_SHM_PAYLOAD`); every rank must agree.
    pub payload: Option<u32>,
    /// Single copy (`FM_SHM_CMA`).
    pub cma: CmaMode,
    /// Carry packets of ≤ 48 bytes inside the receive-queue slot
    /// (`FM_SHM_INLINE`; off only for comparison).
    pub inline: bool,
    /// How long to wait for the other local processes to attach
    /// (`FM_ATTACH_TIMEOUT`).
    pub attach_timeout: Duration,
}

impl Default for ShmemSettings {
    fn default() -> Self {
        ShmemSettings {
            dir: PathBuf::from("/dev/shm"),
            queues: None,
            frames: None,
            payload: None,
            cma: CmaMode::Auto,
            inline: true,
            attach_timeout: Duration::from_secs(30),
        }
    }
}

/// How to open the shmem device: the job's part and the user's settings.
#[derive(Clone, Debug)]
pub struct ShmemConfig {
    pub job_key: JobKey,
    /// This host's name, part of the segment name.
    pub host: String,
    pub rank: Rank,
    /// Every rank on this host, this one included.
    pub local_ranks: Vec<Rank>,
    /// Payload bytes per frame the pacer chose, when `settings.payload` is
    /// not set: the creator of the segment uses it (halved until the
    /// segment fits [`SEGMENT_BUDGET`]) and the others take the creator's.
    pub paced_payload: Option<u32>,
    /// This process may sleep on its doorbell (`FM_WAIT`): its peers ring
    /// it after each packet they send it.
    pub sleeps: bool,
    pub settings: ShmemSettings,
}

impl ShmemConfig {
    pub fn new(job_key: JobKey, rank: Rank, local_ranks: Vec<Rank>) -> Self {
        ShmemConfig {
            job_key,
            host: sys::hostname(),
            rank,
            local_ranks,
            paced_payload: None,
            sleeps: false,
            settings: ShmemSettings::default(),
        }
    }

    /// The segment's geometry for this configuration: per queue, slots for
    /// its senders' credit windows, and a pool of frames from a budget per
    /// receiver that does not grow with N.
    pub fn geometry(&self) -> Geometry {
        let n = self.local_ranks.len().max(1) as u32;
        let m = self
            .settings
            .queues
            .unwrap_or(if n <= 8 { n } else { 8 })
            .clamp(1, n);
        let senders = n.div_ceil(m);
        // Window per sender: generous for few senders, smaller for many.
        let window = (256 / senders).clamp(4, 60);
        let credit_slots = (senders * (window + CONTROL_RESERVE))
            .next_power_of_two()
            .max(64);
        let mut g = Geometry {
            procs: n,
            queues: m,
            frames: 0,
            slots: credit_slots,
            payload: self
                .settings
                .payload
                .or(self.paced_payload)
                .unwrap_or(DEFAULT_PAYLOAD),
        };
        let budget = (SEGMENT_BUDGET / n as u64)
            .clamp(*RECEIVER_FRAME_BYTES.start(), *RECEIVER_FRAME_BYTES.end());
        let pool = |g: &Geometry| budget / (m as u64 * g.stride() as u64);
        if self.settings.payload.is_none() {
            // Halve the frames (header included) until each queue's pool
            // has its fewest frames.
            while pool(&g) < MIN_POOL as u64 && g.payload > SMALL_PAYLOAD {
                let frame = (g.payload as usize + FRAME_HEADER_BYTES) / 2;
                g.payload = (frame - FRAME_HEADER_BYTES).max(SMALL_PAYLOAD as usize) as u32;
            }
        }
        g.frames = self.settings.frames.unwrap_or_else(|| {
            let fit = pool(&g).clamp(MIN_POOL as u64, u32::MAX as u64) as u32;
            // A power of two no larger than what fits, nor than the slots:
            // more frames than packets of credit would never be used.
            (1 << fit.ilog2()).min(credit_slots)
        });
        // A pool set larger than the slots gets slots to match, and the
        // senders the windows those allow (as FM_SHM_FRAMES always has).
        g.slots = g.slots.max(g.frames);
        g
    }

    /// The segment's file name for this job and host.
    pub fn segment_path(&self) -> PathBuf {
        let host: String = self
            .host
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        self.settings
            .dir
            .join(format!("fm-{}-{}", self.job_key, host))
    }
}

/// Positions `head` up to `tail` of a queue taken and `head` not
/// published: since when, and when an audit last saw it so.
#[derive(Clone, Copy)]
struct Unpublished {
    head: u32,
    tail: u32,
    since: Instant,
    seen: Instant,
}

pub struct ShmemDevice {
    seg: Segment,
    rank: Rank,
    my_smt: u32,
    /// Per destination rank: the queue to send into (None: not on this host).
    dest_queue: Vec<Option<QueueRef>>,
    /// Per destination rank whose queue this rank alone sends into (the
    /// exclusive case): the position its next packet must take. The
    /// queue's tail word must hold it; one that does not was bent.
    dest_next: Vec<u32>,
    /// Per destination rank: its doorbell, to ring after each packet, if it
    /// may sleep.
    dest_bell: Vec<Option<BellRef>>,
    /// This process's doorbell.
    bell: Arc<Doorbell>,
    /// Per rank: pid and whether single-copy works towards it.
    pid_of: Vec<u32>,
    cma_ok: Vec<bool>,
    /// My receive queues (those some peer sends into) and their private heads.
    my_queues: Vec<QueueRef>,
    /// Whether senders can find every frame of a queue in use (fewer
    /// frames than slots): then they flag it and its receiver wakes them.
    pool_shared: bool,
    /// Per queue of mine, its senders that may sleep (when `pool_shared`).
    queue_senders: Box<[Vec<Rank>]>,
    /// The destination whose queue last had no free frame for us.
    starved: std::cell::Cell<Option<Rank>>,
    heads: Vec<u32>,
    /// Per queue of mine, the tag of the packet last received (what its
    /// slot holds until a sender publishes the position one lap later).
    last_taken: Vec<u64>,
    /// Per queue of mine, positions taken but the next not published, as
    /// [`Device::audit`] found them.
    unpublished: std::cell::RefCell<Vec<Option<Unpublished>>>,
    /// What showed the segment corrupted, once something did.
    corruption: Option<String>,
    /// Queue to poll first next time (round robin, so no sender starves).
    next_queue: usize,
    /// Ranks on this host.
    local: Vec<bool>,
    window: u32,
    payload: usize,
    fenced: bool,
    /// Carry packets of ≤ 48 bytes inside the receive-queue slot (FM_SHM_INLINE=0 disables).
    inline: bool,
    /// Where inline packets are filled before they are published: copying
    /// first and taking the queue position last keeps the leapfrog property.
    stage: Box<[[u8; INLINE_BYTES]; STAGES]>,
    /// Bit k set: stage k is free.
    stage_free: u8,
    /// Received inline packets, copied out of their slot at the moment they
    /// are polled: a slot is free for the next lap as soon as it is polled,
    /// so a packet read in place could be overwritten while its receiver
    /// still holds it (a handler replying before it reads). Frames need no
    /// copy: their in-use flag protects them until release.
    held: Box<[[u8; INLINE_BYTES]; HELD_INLINE]>,
    /// Bit k set: entry k of `held` is free.
    held_free: u64,
    /// Keeps the CMA probe word alive at a fixed address.
    _probe: Box<u64>,
    /// Where the job's other files on this host go ([`ShmemDevice::job_file`]).
    job_files: (PathBuf, JobKey),
    stats: DeviceStats,
}

impl ShmemDevice {
    /// Open the device: attach to the segment and wait for the local peers.
    pub fn open(cfg: &ShmemConfig) -> Result<Self, DeviceError> {
        let g = cfg.geometry();
        let n = g.procs;
        let Some(_) = cfg.local_ranks.iter().position(|&r| r == cfg.rank) else {
            return Err(DeviceError::Config {
                device: "shmem",
                reason: format!(
                    "rank {} is not among the local ranks {:?}",
                    cfg.rank, cfg.local_ranks
                ),
            });
        };
        if cfg.settings.cma == CmaMode::Auto {
            sys::allow_any_ptracer();
        }
        let path = cfg.segment_path();
        let adopt_payload = cfg.settings.payload.is_none();
        let seg = Segment::create_or_open(
            &path,
            cfg.job_key,
            g,
            adopt_payload,
            cfg.settings.attach_timeout,
        )?;
        let g = seg.geometry;
        tracing::debug!(path = %path.display(), created = seg.created, geometry = ?g, "shmem segment mapped");

        let my_smt = seg.next_smt_id().fetch_add(1, Ordering::AcqRel);
        if my_smt >= n {
            return Err(DeviceError::BadSegment {
                path,
                reason: format!("already has its {n} processes attached (a rank started twice?)"),
            });
        }
        let probe = Box::new(0x464d_5052_4f42_4500u64 ^ std::process::id() as u64);
        let entry = seg.proc_entry(my_smt);
        entry.rank.store(cfg.rank, Ordering::Relaxed);
        entry.pid.store(std::process::id(), Ordering::Relaxed);
        entry
            .probe_addr
            .store(&*probe as *const u64 as u64, Ordering::Relaxed);
        entry.probe_value.store(*probe, Ordering::Relaxed);
        entry.sleeps.store(cfg.sleeps as u32, Ordering::Relaxed);
        let bell = Arc::new(seg.doorbell(my_smt));
        seg.prepare_own_queues(my_smt);
        let mut dev = ShmemDevice {
            seg,
            rank: cfg.rank,
            my_smt,
            dest_queue: Vec::new(),
            dest_next: Vec::new(),
            dest_bell: Vec::new(),
            bell,
            pid_of: Vec::new(),
            cma_ok: Vec::new(),
            my_queues: Vec::new(),
            pool_shared: false,
            queue_senders: Box::default(),
            starved: std::cell::Cell::new(None),
            heads: Vec::new(),
            last_taken: Vec::new(),
            unpublished: std::cell::RefCell::new(Vec::new()),
            corruption: None,
            next_queue: 0,
            local: Vec::new(),
            window: 0,
            payload: g.payload as usize,
            fenced: false,
            inline: cfg.settings.inline,
            stage: Box::new([[0; INLINE_BYTES]; STAGES]),
            stage_free: (1 << STAGES) - 1,
            held: Box::new([[0; INLINE_BYTES]; HELD_INLINE]),
            held_free: u64::MAX,
            _probe: probe,
            job_files: (cfg.settings.dir.clone(), cfg.job_key),
            stats: DeviceStats::default(),
        };
        if dev.seg.attached().fetch_add(1, Ordering::AcqRel) + 1 == n {
            dev.seg.unlink();
        }
        dev.fence(cfg)?;
        Ok(dev)
    }

    /// Wait until all N local processes attached, then build the rank maps.
    fn fence(&mut self, cfg: &ShmemConfig) -> Result<(), DeviceError> {
        let g = self.seg.geometry;
        let n = g.procs;
        let deadline = Instant::now() + cfg.settings.attach_timeout;
        let mut spins = 0u32;
        while self.seg.attached().load(Ordering::Acquire) < n {
            if Instant::now() > deadline {
                self.seg.unlink();
                let here = self.seg.attached().load(Ordering::Acquire);
                return Err(DeviceError::Timeout {
                    device: "shmem",
                    what: format!("{} local processes to attach ({here} did)", n),
                    secs: cfg.settings.attach_timeout.as_secs(),
                });
            }
            spins += 1;
            if spins < 100 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        self.fenced = true;
        let size = cfg.local_ranks.iter().copied().max().unwrap_or(0) as usize + 1;
        let mut smt_of = vec![None; size.max(self.rank as usize + 1)];
        self.pid_of = vec![0; smt_of.len()];
        self.cma_ok = vec![false; smt_of.len()];
        self.local = vec![false; smt_of.len()];
        for id in 0..n {
            let e = self.seg.proc_entry(id);
            let rank = e.rank.load(Ordering::Relaxed);
            let ok = cfg.local_ranks.contains(&rank) && (rank as usize) < smt_of.len();
            if !ok || smt_of[rank as usize].is_some() {
                return Err(DeviceError::BadSegment {
                    path: self.seg.path.clone(),
                    reason: format!("SMT ID {id} claims rank {rank}, which is not a free local rank of this job"),
                });
            }
            smt_of[rank as usize] = Some(id);
            self.pid_of[rank as usize] = e.pid.load(Ordering::Relaxed);
            self.local[rank as usize] = true;
        }
        let m = g.queues;
        self.dest_queue = smt_of
            .iter()
            .enumerate()
            .map(|(r, s)| match s {
                Some(id) if r as Rank != self.rank => Some(self.seg.queue(*id, self.my_smt % m)),
                _ => None,
            })
            .collect();
        self.dest_next = vec![0; self.dest_queue.len()];
        self.dest_bell = smt_of
            .iter()
            .map(|s| {
                let e = self.seg.proc_entry((*s)?);
                let sleeps = e.sleeps.load(Ordering::Relaxed) != 0;
                // SAFETY: the segment stays mapped as long as the device.
                sleeps.then(|| unsafe { BellRef::new(&e.bell) })
            })
            .collect();
        // My queues that some peer sends into, in the order of `my_queues`.
        let used: Vec<u32> = (0..m)
            .filter(|&q| (0..n).any(|id| id != self.my_smt && id % m == q))
            .collect();
        for &q in &used {
            self.my_queues.push(self.seg.queue(self.my_smt, q));
            self.heads.push(0);
            let s = g.slots;
            self.last_taken.push(queue::initial_slot_value(s - 1, s));
            self.unpublished.get_mut().push(None);
        }
        // Credits bound the slots; the frames are a pool the senders share.
        self.window = (g.slots / g.senders_per_queue())
            .saturating_sub(CONTROL_RESERVE)
            .max(1);
        self.pool_shared = g.frames < g.slots;
        self.queue_senders = self.sleeping_senders(&smt_of, &used);
        if cfg.settings.cma == CmaMode::Auto {
            self.probe_cma(&smt_of);
        }
        Ok(())
    }

    /// Per queue of mine, its senders that may sleep on their doorbell:
    /// whom to wake when a frame is freed (with a pool they can exhaust).
    /// `used`: the queue numbers of `my_queues`.
    fn sleeping_senders(&self, smt_of: &[Option<u32>], used: &[u32]) -> Box<[Vec<Rank>]> {
        let m = self.seg.geometry.queues;
        let mut senders = vec![Vec::new(); self.my_queues.len()];
        if !self.pool_shared {
            return senders.into();
        }
        for (rank, id) in smt_of.iter().enumerate() {
            let Some(id) = *id else { continue };
            let Some(i) = used.iter().position(|&q| q == id % m) else {
                continue;
            };
            if id != self.my_smt && self.dest_bell[rank].is_some() {
                senders[i].push(rank as Rank);
            }
        }
        senders.into()
    }

    /// Try one single-copy read from each peer; remember where it works.
    fn probe_cma(&mut self, smt_of: &[Option<u32>]) {
        for (rank, id) in smt_of.iter().enumerate() {
            let Some(id) = id else { continue };
            if rank as Rank == self.rank {
                continue;
            }
            let e = self.seg.proc_entry(*id);
            let (addr, want) = (
                e.probe_addr.load(Ordering::Relaxed),
                e.probe_value.load(Ordering::Relaxed),
            );
            let mut got = [0u8; 8];
            match sys::process_read(self.pid_of[rank], addr, &mut got) {
                Ok(()) if u64::from_ne_bytes(got) == want => self.cma_ok[rank] = true,
                Ok(()) => tracing::warn!(
                    rank,
                    "shmem: single-copy probe read wrong data; large messages use frames"
                ),
                // A peer already gone (a short job's rank that finished
                // first) says nothing of what ptrace rules allow.
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {
                    tracing::debug!(rank, "shmem: single-copy probe: the peer has exited")
                }
                Err(e) => tracing::warn!(
                    rank,
                    error = %e,
                    "shmem: single-copy (process_vm_readv) to this peer is not allowed; large messages use frames. \
                     Fix: sysctl kernel.yama.ptrace_scope=0, or run without a seccomp profile that blocks it"
                ),
            }
        }
    }

    /// A watch over the other processes on this host: which died without
    /// closing their device.
    pub fn peer_watch(&self) -> segment::PeerWatch {
        self.seg.peer_watch(self.my_smt)
    }

    /// This process's doorbell, in its entry of the segment.
    pub fn doorbell(&self) -> Arc<Doorbell> {
        self.bell.clone()
    }

    /// A file of this job's on this host beside its segment, named
    /// `fm-<job key>-<name>`: what fmrun and the GRM remove when the job
    /// dies ([`segment::remove_job_segments`]) has this form.
    pub fn job_file(&self, name: &str) -> PathBuf {
        let (dir, key) = &self.job_files;
        dir.join(format!("fm-{key}-{name}"))
    }

    /// Wake `dest`'s waits if it may sleep: for memory this process
    /// shares with it that its wait looks at (a collective area), as a
    /// packet does.
    #[inline]
    pub fn wake(&self, dest: Rank) {
        self.ring(dest)
    }

    /// Wake `dest` if it may sleep: after every packet published to it.
    #[inline(always)]
    fn ring(&self, dest: Rank) {
        if let Some(Some(b)) = self.dest_bell.get(dest as usize) {
            b.ring();
        }
    }

    /// Every frame of `dest`'s queue `q` was in use: flag the queue, so
    /// that its receiver wakes us when it releases one, and look once more.
    #[cold]
    fn starved_on(&self, q: QueueRef, dest: Rank) -> Option<u32> {
        queue::mark_starved(&q);
        self.starved.set(Some(dest));
        queue::acquire_frame(&q)
    }

    /// For the re-check before sleeping: a queue we found without a free
    /// frame has one now (flagged again first, so a release after this
    /// look wakes us). Says so once, and forgets the queue: the sender
    /// tries again, and a sender that has gone on to other things does not
    /// keep its process from sleeping.
    fn frame_freed(&self) -> bool {
        let Some(q) = self.starved.get().and_then(|d| self.queue_to(d).ok()) else {
            return false;
        };
        queue::mark_starved(&q);
        let free = queue::has_free_frame(&q);
        if free {
            self.starved.set(None);
        }
        free
    }

    /// A sender of my queue `i` found no free frame: wake those that may
    /// sleep (they look again; the others poll anyway).
    #[cold]
    fn wake_senders(&self, i: usize) {
        for &r in &self.queue_senders[i] {
            self.ring(r);
        }
    }

    /// The geometry in use.
    pub fn geometry(&self) -> Geometry {
        self.seg.geometry
    }

    /// Received inline packets not yet released: 0 whenever the layer
    /// above holds nothing (a leak stops all receiving at [`HELD_INLINE`]).
    pub fn held_inline(&self) -> u32 {
        HELD_INLINE as u32 - self.held_free.count_ones()
    }

    /// Pid of a local rank.
    pub fn pid_of(&self, rank: Rank) -> Option<u32> {
        self.local
            .get(rank as usize)
            .copied()
            .unwrap_or(false)
            .then(|| self.pid_of[rank as usize])
    }

    /// Check the packet polled at queue position `pos` (frame `f`, or
    /// inline); one that cannot be valid is dropped and counted.
    #[inline(always)]
    fn accept(&mut self, i: usize, q: QueueRef, f: u32, pos: u32) -> Option<RawRecv> {
        if queue::is_inline(f) {
            let sp = q.slot_ptr(pos & (q.slots() - 1));
            // The tag says length and source; the slot's header says them
            // again, with the position and a CRC of the bytes.
            let (len, src) = (f & 0xff, (f >> 8) & 0x7f_ffff);
            if len as usize > INLINE_BYTES || !self.src_ok(src) {
                self.corrupted(format!(
                    "queue {i}: an inline packet claims {len} bytes from rank {src}"
                ));
                return None;
            }
            // SAFETY: the slot was published (Acquire on its tag); its
            // position cannot come round again before we poll the next one
            // (credits bound the unpolled slots), so it is intact until the
            // copy below, which happens before anything else is polled.
            let (len_position, check) = unsafe { Slot::read_header(sp) };
            // raw_receive polls only while an entry is free.
            let k = self.held_free.trailing_zeros() as usize;
            let dst = &mut self.held[k];
            // SAFETY: as above.
            *dst = unsafe { Slot::read_inline(sp) };
            if len_position != Slot::stamp(len, pos) || check != Slot::check(src, len_position, dst)
            {
                self.corrupted(format!(
                    "queue {i}: the slot of position {pos} fails its check: its tag says {len} bytes from rank {src}, its header {} bytes for position {} (a word of it was bent)",
                    len_position & 0xff,
                    len_position >> 8
                ));
                return None;
            }
            self.held_free &= !(1 << k);
            self.last_taken[i] = queue::slot_value(pos, f);
            self.stats.packets_received += 1;
            self.stats.bytes_received += len as u64;
            return Some(RawRecv {
                src,
                ptr: dst.as_ptr(),
                len: len as usize,
                token: RecvToken::Held(k).encode(),
            });
        }
        if f >= q.frames() {
            // A slot naming a frame that does not exist: nothing to release.
            self.corrupted(format!(
                "queue {i}: the slot of position {pos} names frame {f} of {}",
                q.frames()
            ));
            return None;
        }
        let frame = q.frame(f);
        // SAFETY: the published frame is ours to read until released.
        let (len, src, stamp) = unsafe { FrameHeader::read(frame.cast()) };
        if len as usize > self.payload || !self.src_ok(src) {
            self.corrupted(format!(
                "queue {i}: a frame claims {len} bytes (at most {}) from rank {src}",
                self.payload
            ));
            queue::release(&q, f);
            return None;
        }
        if stamp != pos || q.in_use(f).load(Ordering::Relaxed) == 0 {
            // Another position's frame, or a free one: the slot's tag was
            // bent. The frame is not ours to release.
            self.corrupted(format!(
                "queue {i}: the slot of position {pos} names frame {f}, which holds position {stamp}{} (its tag word was bent)",
                if q.in_use(f).load(Ordering::Relaxed) == 0 { " and is free" } else { "" }
            ));
            return None;
        }
        self.last_taken[i] = queue::slot_value(pos, f);
        self.stats.packets_received += 1;
        self.stats.bytes_received += len as u64;
        Some(RawRecv {
            src,
            // SAFETY: payload follows the header inside the frame.
            ptr: unsafe { frame.add(FRAME_HEADER_BYTES) },
            len: len as usize,
            token: RecvToken::Frame { queue: i, frame: f }.encode(),
        })
    }

    /// Whether `src` may send to us: another rank of this job on this host.
    #[inline(always)]
    /// A packet that cannot be valid was dropped: counted, and the segment
    /// is corrupted for good (its sender's credit went with the packet, so
    /// a wait for it would last for ever): [`Device::failure`] says so.
    #[cold]
    fn corrupted(&mut self, what: String) {
        self.stats.dropped_malformed += 1;
        tracing::warn!("shmem: dropped a packet: {what}");
        self.corruption.get_or_insert(what);
    }

    /// What [`Device::audit`] finds wrong with my queue `i` now, if anything.
    ///
    /// At the receiver's head h a queue of S slots holds: in slot h, a tag
    /// of position h (published) or h − S (not yet); in slot h − 1, the
    /// tag of the packet last received or one of position h − 1 + S; in its
    /// tail word, h up to h + S (credits bound the positions taken). And a
    /// position taken is published within microseconds: one taken but not
    /// published for [`UNPUBLISHED_FOR`] was never going to be.
    fn audit_queue(&self, i: usize, now: Instant) -> Option<String> {
        let (q, h) = (&self.my_queues[i], self.heads[i]);
        let s = q.slots();
        let at = |p: u32| (q.slot(p & (s - 1)).load(Ordering::Acquire) >> 32) as u32;
        let mut unpublished = self.unpublished.borrow_mut();
        let tail = q.rq_tail().load(Ordering::Acquire);
        if tail.wrapping_sub(h) > s {
            return Some(format!(
                "queue {i}: its tail word holds {tail} while the receiver is at position {h}, more than its {s} slots apart (the tail word was bent)"
            ));
        }
        let head = at(h);
        if head == h {
            unpublished[i] = None;
            return None; // published: the wait takes it next
        }
        if head != h.wrapping_sub(s) {
            return Some(format!(
                "queue {i}: the slot of position {h} holds a tag of position {head}, neither this lap's nor the last (its tag word was bent)"
            ));
        }
        let last = q.slot(h.wrapping_sub(1) & (s - 1)).load(Ordering::Acquire);
        let last_pos = (last >> 32) as u32;
        if last != self.last_taken[i] && last_pos != h.wrapping_sub(1).wrapping_add(s) {
            return Some(format!(
                "queue {i}: position {} was published again after it was received (its tail word was moved back)",
                h.wrapping_sub(1)
            ));
        }
        if tail == h {
            unpublished[i] = None;
            return None;
        }
        let fresh = Unpublished {
            head: h,
            tail,
            since: now,
            seen: now,
        };
        match unpublished[i] {
            Some(u) if (u.head, u.tail) == (h, tail) => {
                if now.saturating_duration_since(u.seen) >= AUDIT_GAP {
                    unpublished[i] = Some(fresh);
                    return None;
                }
                unpublished[i] = Some(Unpublished { seen: now, ..u });
                (now.saturating_duration_since(u.since) >= UNPUBLISHED_FOR).then(|| format!(
                    "queue {i}: positions {h} to {} were taken (its tail word holds {tail}) but {h} was not published in {} s (the tail word was moved on)",
                    tail.wrapping_sub(1),
                    UNPUBLISHED_FOR.as_secs()
                ))
            }
            _ => {
                unpublished[i] = Some(fresh);
                None
            }
        }
    }

    fn src_ok(&self, src: Rank) -> bool {
        src != self.rank && self.local.get(src as usize).copied().unwrap_or(false)
    }

    /// Test hook: publish an inline packet whose slot claims `claimed_len`
    /// bytes from `claimed_src`.
    #[doc(hidden)]
    pub fn debug_publish_inline(
        &mut self,
        dest: Rank,
        claimed_src: Rank,
        claimed_len: u32,
    ) -> Result<(), DeviceError> {
        let q = self.queue_to(dest)?;
        let tag = Slot::inline_tag(claimed_len, claimed_src);
        let pos = queue::publish_inline(&q, tag, |i, pos| {
            let stamp = Slot::stamp(claimed_len, pos);
            // SAFETY: as in raw_send.
            unsafe { Slot::write_inline(q.slot_ptr(i), stamp, 0, None) };
        });
        self.sent_at(dest, &q, pos);
        Ok(())
    }

    /// Test hook: a stray write into the queue this rank sends `dest`
    /// through. XOR `xor` into its 32-bit word `word`: of the control block
    /// (`slot_back` `None`), or of the slot of the position `slot_back`
    /// before the next one a sender will take.
    #[doc(hidden)]
    pub fn debug_bend(
        &mut self,
        dest: Rank,
        slot_back: Option<u32>,
        word: u32,
        xor: u32,
    ) -> Result<(), DeviceError> {
        let q = self.queue_to(dest)?;
        let limit = match slot_back {
            None => segment::QUEUE_CTL_BYTES,
            Some(_) => segment::SLOT_BYTES,
        };
        if word as usize * 4 >= limit {
            return Err(DeviceError::Config {
                device: "shmem",
                reason: format!("word {word} is beyond {limit} bytes"),
            });
        }
        let base: *mut u8 = match slot_back {
            None => q
                .slot_ptr(0)
                .cast::<u8>()
                .wrapping_sub(segment::QUEUE_CTL_BYTES),
            Some(back) => {
                let pos = q.rq_tail().load(Ordering::Acquire).wrapping_sub(back);
                q.slot_ptr(pos & (q.slots() - 1)).cast()
            }
        };
        // SAFETY: an aligned word inside the queue's mapped control block or
        // slot (checked above), accessed atomically as the queue's words are.
        let w = unsafe {
            &*base
                .add(word as usize * 4)
                .cast::<std::sync::atomic::AtomicU32>()
        };
        w.fetch_xor(xor, Ordering::AcqRel);
        Ok(())
    }

    /// The pid to use for single copy with `peer`, if the probe allowed it;
    /// `op` names the operation in the error.
    fn cma_pid(&self, peer: Rank, op: &'static str) -> Result<u32, DeviceError> {
        if self.remote_memory_to(peer) {
            Ok(self.pid_of[peer as usize])
        } else {
            Err(DeviceError::Unsupported {
                device: "shmem",
                op,
            })
        }
    }

    /// Test hook: publish a frame whose header claims `claimed_len` bytes from
    /// `claimed_src`, as a buggy or hostile process sharing the segment could.
    #[doc(hidden)]
    pub fn debug_publish_raw(
        &mut self,
        dest: Rank,
        claimed_src: Rank,
        claimed_len: u32,
    ) -> Result<(), DeviceError> {
        let q = self.queue_to(dest)?;
        let f = queue::acquire_frame(&q).ok_or(DeviceError::NoBuffer {
            device: "shmem",
            dest,
        })?;
        // SAFETY: we own frame f until published.
        unsafe { FrameHeader::write(q.frame(f).cast(), claimed_len, claimed_src) };
        let pos = queue::publish(&q, f);
        self.sent_at(dest, &q, pos);
        Ok(())
    }

    /// A packet to `dest` went out at queue position `pos`: where this
    /// rank alone sends into the queue, it is the position the last one
    /// left, or the tail word was bent (and the packet is lost: the
    /// receiver never reaches it, or passed it already).
    #[inline(always)]
    fn sent_at(&mut self, dest: Rank, q: &QueueRef, pos: u32) {
        if !q.exclusive() {
            return;
        }
        let next = &mut self.dest_next[dest as usize];
        let want = std::mem::replace(next, pos.wrapping_add(1));
        if pos != want {
            self.corrupted(format!(
                "the tail word of the queue to rank {dest} held {pos}, but this rank, its only sender, left it at {want} (it was bent)"
            ));
        }
    }

    #[inline(always)]
    fn queue_to(&self, dest: Rank) -> Result<QueueRef, DeviceError> {
        match self.dest_queue.get(dest as usize) {
            Some(Some(q)) => Ok(*q),
            _ => Err(DeviceError::NotAPeer {
                device: "shmem",
                dest,
            }),
        }
    }
}

fn cma_error(source: std::io::Error, op: &str, peer: Rank) -> DeviceError {
    DeviceError::Io {
        device: "shmem",
        context: format!("process_vm_{op} rank {peer}"),
        source,
    }
}

/// Inline packets a receiver may hold at once (each copied out of its slot
/// when polled). FM holds at most two; a PM-level receiver holding this many
/// receives nothing more until it releases one (back-pressure, as frames
/// give it).
pub const HELD_INLINE: usize = 64;

/// Send buffers outstanding at once on the inline path (a data packet being
/// gathered plus control packets sent meanwhile).
const STAGES: usize = 4;
/// What a send token names: a frame of the destination's queue, or an
/// inline staging buffer (whose bytes go into the slot at send).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SendToken {
    Frame(u32),
    Stage(usize),
}

impl SendToken {
    /// Set in a stage's token, above any frame index.
    const STAGE: u64 = 1 << 48;

    #[inline(always)]
    fn encode(self) -> u64 {
        match self {
            SendToken::Frame(f) => f as u64,
            SendToken::Stage(k) => SendToken::STAGE | k as u64,
        }
    }

    #[inline(always)]
    fn decode(t: u64) -> SendToken {
        match t & SendToken::STAGE {
            0 => SendToken::Frame(t as u32),
            _ => SendToken::Stage((t & 0xff) as usize),
        }
    }
}

/// What a receive token names: a frame of one of our queues, or a held
/// entry (an inline packet copied out of its slot).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RecvToken {
    Frame { queue: usize, frame: u32 },
    Held(usize),
}

impl RecvToken {
    /// `queue << 32 | frame`; a held entry has [`queue::INLINE`] for frame.
    #[inline(always)]
    fn encode(self) -> u64 {
        match self {
            RecvToken::Frame { queue, frame } => (queue as u64) << 32 | frame as u64,
            RecvToken::Held(k) => (k as u64) << 32 | queue::INLINE as u64,
        }
    }

    #[inline(always)]
    fn decode(t: u64) -> RecvToken {
        let (i, f) = ((t >> 32) as usize, t as u32);
        match f {
            queue::INLINE => RecvToken::Held(i),
            frame => RecvToken::Frame { queue: i, frame },
        }
    }
}

impl Device for ShmemDevice {
    fn info(&self) -> DeviceInfo {
        let mut options = Options::RELIABLE | Options::ORDERED | Options::RECEIVES;
        if self.cma_ok.iter().any(|&ok| ok) {
            options = options | Options::REMOTE_READ | Options::REMOTE_WRITE;
        }
        DeviceInfo {
            name: "shmem",
            options,
            mtu: self.payload,
        }
    }

    fn reaches(&self, dest: Rank) -> bool {
        matches!(self.dest_queue.get(dest as usize), Some(Some(_)))
    }

    fn window(&self, _dest: Rank) -> u32 {
        self.window
    }

    #[inline(always)]
    fn raw_send_buffer(&mut self, dest: Rank, len: usize) -> Result<RawSend, DeviceError> {
        if len > self.payload {
            return Err(DeviceError::TooLarge {
                device: "shmem",
                len,
                mtu: self.payload,
            });
        }
        let q = self.queue_to(dest)?;
        if len <= INLINE_BYTES && self.inline && self.stage_free != 0 {
            let k = self.stage_free.trailing_zeros() as usize;
            self.stage_free &= !(1 << k);
            return Ok(RawSend {
                ptr: self.stage[k].as_mut_ptr(),
                cap: INLINE_BYTES,
                dest,
                token: SendToken::Stage(k).encode(),
            });
        }
        let mut frame = queue::acquire_frame(&q);
        if frame.is_none() && self.pool_shared {
            frame = self.starved_on(q, dest);
        }
        match frame {
            Some(f) => Ok(RawSend {
                // SAFETY: f < frames; the payload follows the frame header.
                ptr: unsafe { q.frame(f).add(FRAME_HEADER_BYTES) },
                cap: self.payload,
                dest,
                token: SendToken::Frame(f).encode(),
            }),
            None => {
                self.stats.no_buffer += 1;
                Err(DeviceError::NoBuffer {
                    device: "shmem",
                    dest,
                })
            }
        }
    }

    #[inline(always)]
    fn raw_send(&mut self, buf: RawSend, len: usize) {
        let Ok(q) = self.queue_to(buf.dest) else {
            return;
        };
        let f = match SendToken::decode(buf.token) {
            SendToken::Stage(k) => {
                let len = len.min(INLINE_BYTES);
                let (stage, rank) = (&self.stage[k], self.rank);
                let tag = Slot::inline_tag(len as u32, rank);
                let pos = queue::publish_inline(&q, tag, |i, pos| {
                    let stamp = Slot::stamp(len as u32, pos);
                    let check = Slot::check(rank, stamp, stage);
                    // SAFETY: the queue position is ours until its tag is stored.
                    unsafe { Slot::write_inline(q.slot_ptr(i), stamp, check, Some(stage)) };
                });
                self.sent_at(buf.dest, &q, pos);
                self.stage_free |= 1 << k;
                self.stats.packets_sent += 1;
                self.stats.bytes_sent += len as u64;
                self.ring(buf.dest);
                return;
            }
            SendToken::Frame(f) => f,
        };
        let len = len.min(self.payload) as u32;
        // SAFETY: we own frame f (acquired in raw_send_buffer).
        unsafe { FrameHeader::write(q.frame(f).cast(), len, self.rank) };
        let pos = queue::publish(&q, f);
        self.sent_at(buf.dest, &q, pos);
        self.stats.packets_sent += 1;
        self.stats.bytes_sent += len as u64;
        self.ring(buf.dest);
    }

    fn raw_abort(&mut self, buf: RawSend) {
        match SendToken::decode(buf.token) {
            SendToken::Stage(k) => self.stage_free |= 1 << k,
            SendToken::Frame(f) => {
                if let Ok(q) = self.queue_to(buf.dest) {
                    queue::abandon(&q, f);
                }
            }
        }
    }

    #[inline(always)]
    fn raw_receive(&mut self) -> Option<RawRecv> {
        if self.held_free == 0 {
            // Every inline entry is held: back-pressure until one is
            // released (the next slot may be inline, and it must be copied
            // out the moment it is polled).
            return None;
        }
        let nq = self.my_queues.len();
        for k in 0..nq {
            let i = if nq == 1 {
                0
            } else {
                (self.next_queue + k) % nq
            };
            let q = self.my_queues[i];
            // Malformed frames are dropped and the same queue polled again.
            while let Some(f) = queue::poll(&q, &mut self.heads[i]) {
                let pos = self.heads[i].wrapping_sub(1);
                if let Some(r) = self.accept(i, q, f, pos) {
                    if nq > 1 {
                        self.next_queue = i + 1;
                    }
                    return Some(r);
                }
            }
        }
        None
    }

    fn has_arrivals(&self) -> bool {
        (self.my_queues.iter().zip(&self.heads)).any(|(q, &h)| queue::published(q, h))
            || self.frame_freed()
    }

    fn audit(&self) -> Option<DeviceError> {
        if let Some(e) = self.failure() {
            return Some(e);
        }
        let now = Instant::now();
        let what = (0..self.my_queues.len()).find_map(|i| self.audit_queue(i, now))?;
        tracing::error!("shmem: {what}");
        Some(DeviceError::BadSegment {
            path: self.seg.path.clone(),
            reason: format!("corrupted: {what}; packets are lost, so the job cannot go on"),
        })
    }

    fn failure(&self) -> Option<DeviceError> {
        let what = self.corruption.as_ref()?;
        Some(DeviceError::BadSegment {
            path: self.seg.path.clone(),
            reason: format!(
                "corrupted: {what}; the packet is lost and its sender's credit with it, so the job cannot go on"
            ),
        })
    }

    #[inline(always)]
    fn raw_release(&mut self, token: u64) {
        match RecvToken::decode(token) {
            // A second release of a held entry changes nothing.
            RecvToken::Held(k) if k < HELD_INLINE => self.held_free |= 1 << k,
            RecvToken::Held(_) => {}
            RecvToken::Frame { queue, frame } => {
                if let Some(q) = self.my_queues.get(queue) {
                    if frame < q.frames() {
                        queue::release(q, frame);
                        if self.pool_shared && queue::take_starved(q) {
                            self.wake_senders(queue);
                        }
                    }
                }
            }
        }
    }

    fn remote_read(
        &mut self,
        src: Rank,
        remote_addr: u64,
        buf: &mut [u8],
    ) -> Result<(), DeviceError> {
        let pid = self.cma_pid(src, "single-copy read from this peer")?;
        sys::process_read(pid, remote_addr, buf).map_err(|e| cma_error(e, "readv from", src))
    }

    fn remote_write(
        &mut self,
        dest: Rank,
        remote_addr: u64,
        data: &[u8],
    ) -> Result<(), DeviceError> {
        let pid = self.cma_pid(dest, "single-copy write to this peer")?;
        sys::process_write(pid, remote_addr, data).map_err(|e| cma_error(e, "writev to", dest))
    }

    fn remote_memory_to(&self, peer: Rank) -> bool {
        self.cma_ok.get(peer as usize).copied().unwrap_or(false)
    }

    fn stats(&self) -> DeviceStats {
        self.stats.clone()
    }
}

impl Drop for ShmemDevice {
    fn drop(&mut self) {
        // This process ends on purpose: its peers' watch (`PeerWatch`)
        // must not take its exit for a death.
        (self.seg.proc_entry(self.my_smt).departed).store(1, Ordering::Release);
        // Before the fence nobody else may remove the name; make sure it goes.
        if !self.fenced {
            self.seg.unlink();
        }
    }
}

#[cfg(test)]
mod token_tests {
    use super::*;

    #[test]
    fn tokens_decode_to_what_was_encoded() {
        for f in [0, 1, 63, 1 << 15, (1 << 16) - 1] {
            assert_eq!(
                SendToken::decode(SendToken::Frame(f).encode()),
                SendToken::Frame(f)
            );
            for q in [0, 1, 7, 4095] {
                let t = RecvToken::Frame { queue: q, frame: f };
                assert_eq!(RecvToken::decode(t.encode()), t);
            }
        }
        for k in 0..STAGES {
            assert_eq!(
                SendToken::decode(SendToken::Stage(k).encode()),
                SendToken::Stage(k)
            );
        }
        for k in 0..HELD_INLINE {
            assert_eq!(
                RecvToken::decode(RecvToken::Held(k).encode()),
                RecvToken::Held(k)
            );
        }
    }
}

#[cfg(test)]
mod geometry_tests {
    use super::*;

    fn geometry(n: u32) -> Geometry {
        ShmemConfig::new(JobKey(1), 0, (0..n).collect()).geometry()
    }

    /// Small jobs keep the geometry they had before frames became a pool:
    /// as many frames as slots (no sender ever finds the pool empty), 16 KiB
    /// frames, 64 per queue.
    #[test]
    fn small_jobs_have_a_frame_for_every_slot() {
        for n in 2..=4 {
            let g = geometry(n);
            assert_eq!(
                (g.frames, g.slots, g.payload),
                (64, 64, DEFAULT_PAYLOAD),
                "{n}"
            );
        }
    }

    /// Many ranks: the pool per receiver stays within its budget, and its
    /// frames are fewer than the slots (shared, PM's buffers per channel).
    #[test]
    fn a_receivers_pool_does_not_grow_with_its_senders() {
        for n in [16u32, 64, 256, 1024] {
            let g = geometry(n);
            g.validate().unwrap();
            let pool = g.queues as u64 * g.frames as u64 * g.stride() as u64;
            assert!(RECEIVER_FRAME_BYTES.contains(&pool), "{n}: {pool}");
            assert!(g.frames < g.slots && g.frames >= MIN_POOL, "{n}: {g:?}");
        }
    }
}
