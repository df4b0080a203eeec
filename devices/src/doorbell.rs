//! A process's doorbell: the one place a rank sleeps, whichever device its
//! next packet comes by (paper 001 §5.3.3, Interrupt Reaping, in today's
//! form: poll while a reply is likely soon, then sleep until woken).
//!
//! The doorbell is one 32-bit word — in this process's entry of the shared
//! segment when the process has local peers, so that they can reach it —
//! that is either `AWAKE` or `ARMED`. The protocol ("armed head"):
//!
//! * **Waiter**: [`arm`] stores `ARMED` and fences; then it looks at every
//!   source once more (the re-check); only if all are empty does it
//!   [`sleep`] — a futex wait that returns at once if the word is no longer
//!   `ARMED`. After waking it is `AWAKE` again.
//! * **Ringer**, after publishing a packet (or whatever the waiter's
//!   re-check looks at): [`ring`] fences, and only if the word reads
//!   `ARMED` stores `AWAKE` and wakes the sleepers.
//!
//! No wake-up is lost: the two fences (sequentially consistent) order the
//! waiter's store of `ARMED` and its re-check against the ringer's publish
//! and its load of the word, so either the re-check sees the packet or the
//! ringer sees `ARMED`; and a ringer that resets the word before the waiter
//! reaches the futex makes the futex wait return at once (the kernel
//! compares the word under its own lock). `devices/tests/loom_doorbell.rs`
//! checks this on the code below. A sender to a process that never sleeps
//! (`FM_WAIT=spin`) skips the ring altogether; one to a process that may
//! pays a fence and a load of a cache line that stays shared until the
//! waiter arms.
//!
//! *Watchers* — the network devices' background threads — sleep while the
//! word is `AWAKE`; arming wakes them, so that while the application
//! sleeps they wait on the sockets for it and ring when a datagram came.

use crate::shmem::queue::Atomic32;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub const AWAKE: u32 = 0;
pub const ARMED: u32 = 1;

/// The word of a doorbell (its loads and stores are the SMT queue's
/// [`Atomic32`]) and what sleeping on it means: futex calls on real
/// memory, a model under loom.
pub trait BellWord: Atomic32 {
    /// A sequentially consistent fence.
    fn fence(&self);
    /// Sleep while the word holds `expected` (until woken or `timeout`; may
    /// return early).
    fn wait(&self, expected: u32, timeout: Option<Duration>);
    /// Wake every sleeper.
    fn wake_all(&self);
}

impl BellWord for AtomicU32 {
    #[inline(always)]
    fn fence(&self) {
        std::sync::atomic::fence(Ordering::SeqCst)
    }
    fn wait(&self, expected: u32, timeout: Option<Duration>) {
        crate::sys::futex_wait(self, expected, timeout)
    }
    fn wake_all(&self) {
        crate::sys::futex_wake_all(self)
    }
}

/// Waiter, first step: from now on a ringer wakes us. Then re-check every
/// source, and [`sleep`] or [`disarm`].
#[inline]
pub fn arm<W: BellWord>(w: &W) {
    w.store(ARMED, Relaxed);
    w.fence();
}

/// Waiter: the re-check found something; no need to be woken.
#[inline]
pub fn disarm<W: BellWord>(w: &W) {
    w.store(AWAKE, Relaxed);
}

/// Waiter, last step: the re-check found nothing. Sleeps until rung (or
/// `timeout`); returns awake.
pub fn sleep<W: BellWord>(w: &W, timeout: Option<Duration>) {
    w.wait(ARMED, timeout);
    w.store(AWAKE, Relaxed);
}

/// Ringer: what the waiter re-checks was just published; wake it if it
/// armed.
#[inline(always)]
pub fn ring<W: BellWord>(w: &W) {
    w.fence();
    if w.load(Relaxed) == ARMED {
        wake(w);
    }
}

/// The word read `ARMED`: make later ringers skip the system call, and
/// wake. A plain store, not a swap: two ringers may both wake (a spare
/// system call), and a ringer's store may land on a newer `ARMED` (the
/// waiter's next sleep then returns at once and re-checks); neither loses
/// a wake-up, and loom can check this form exactly (it does not model a
/// swap's atomicity against a later plain store).
#[cold]
#[inline(never)]
fn wake<W: BellWord>(w: &W) {
    w.store(AWAKE, Relaxed);
    w.wake_all();
}

/// Another process's doorbell word, inside a mapping that the holder of
/// this reference keeps alive: for ringing only.
#[derive(Clone, Copy)]
pub struct BellRef(std::ptr::NonNull<AtomicU32>);

// SAFETY: the word is only accessed atomically; its holder keeps the
// mapping alive (see `BellRef::new`).
unsafe impl Send for BellRef {}

impl BellRef {
    /// # Safety
    /// `word` must stay mapped as long as the `BellRef` is used.
    pub unsafe fn new(word: &AtomicU32) -> BellRef {
        BellRef(std::ptr::NonNull::from(word))
    }

    #[inline(always)]
    pub fn ring(self) {
        // SAFETY: see `BellRef::new`.
        ring(unsafe { self.0.as_ref() })
    }
}

/// Where a doorbell's word lives, kept alive as long as the doorbell.
enum Home {
    /// A process without local peers: its own memory.
    Own(#[allow(dead_code, reason = "owns the word `word` points to")] Box<AtomicU32>),
    /// This process's entry of the shared segment.
    Segment(
        #[allow(dead_code, reason = "keeps the mapping `word` points into")] Arc<memmap2::MmapMut>,
    ),
}

/// This process's doorbell, shared by everything that may wake it: the
/// composite (which sleeps on it), the network devices' background threads,
/// threads sending through a shared endpoint, the end of the job.
pub struct Doorbell {
    word: *const AtomicU32,
    _home: Home,
    /// Background threads that watch sockets while the process sleeps.
    watchers: AtomicU32,
}

// SAFETY: `word` points to an atomic that `_home` keeps alive and that is
// only ever accessed atomically.
unsafe impl Send for Doorbell {}
// SAFETY: as above.
unsafe impl Sync for Doorbell {}

impl Doorbell {
    /// A doorbell in this process's own memory (nobody outside rings it).
    pub fn own() -> Arc<Doorbell> {
        let b = Box::new(AtomicU32::new(AWAKE));
        Arc::new(Doorbell {
            word: &*b,
            _home: Home::Own(b),
            watchers: AtomicU32::new(0),
        })
    }

    /// A doorbell whose word is `word`, inside `map`.
    ///
    /// # Safety
    /// `word` points into `map`, 4-byte aligned.
    pub(crate) unsafe fn in_segment(map: Arc<memmap2::MmapMut>, word: *const AtomicU32) -> Self {
        Doorbell {
            word,
            _home: Home::Segment(map),
            watchers: AtomicU32::new(0),
        }
    }

    #[inline(always)]
    fn word(&self) -> &AtomicU32 {
        // SAFETY: see the Send impl.
        unsafe { &*self.word }
    }

    /// Waiter, first step ([`arm`]); also wakes the watchers.
    pub fn arm(&self) {
        arm(self.word());
        if self.watchers.load(Relaxed) > 0 {
            self.word().wake_all();
        }
    }

    pub fn disarm(&self) {
        disarm(self.word())
    }

    pub fn sleep(&self, timeout: Option<Duration>) {
        sleep(self.word(), timeout)
    }

    /// Wake the process if it sleeps: for anything that changes what its
    /// re-check looks at (another thread, a background thread, the job's end).
    pub fn ring(&self) {
        ring(self.word())
    }

    /// A background thread will watch sockets while the process sleeps.
    pub fn add_watcher(&self) {
        self.watchers.fetch_add(1, Relaxed);
    }

    /// Watcher: whether the process is asleep (or about to be).
    pub fn armed(&self) -> bool {
        self.word().load(Relaxed) == ARMED
    }

    /// Watcher: sleep until the process arms, or `timeout`.
    pub fn wait_armed(&self, timeout: Duration) {
        self.word().wait(AWAKE, Some(timeout))
    }
}
