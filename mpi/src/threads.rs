//! `MPI_THREAD_MULTIPLE`: any thread may call MPI at any time.
//!
//! Every call still runs under the library's one lock (`state::call`), so
//! calls are atomic with respect to each other and MPI's ordering rules
//! hold as they do for one thread: messages of one thread reach each
//! destination in the order it sent them, and a receive matches the first
//! message that fits when it is posted. What changes is *waiting*: a
//! thread must never wait with the lock held, or a thread blocked in
//! `MPI_Recv` would stop another thread's `MPI_Send` — the very message
//! it may be waiting for. So, once a program asked for
//! `MPI_THREAD_MULTIPLE`, a blocking call is its non-blocking self plus a
//! wait ([`blocking`]), and a wait ([`until`]) tests its condition under
//! the lock, with progress, and gives the lock up between tests:
//!
//! * for a short while it tests again at once (an answer is often
//!   microseconds away);
//! * then one waiting thread — the *sleeper* — waits in FM for a message,
//!   holding the lock as a single-threaded wait does (spinning, yielding
//!   or sleeping on the doorbell as `FM_WAIT` says); its wait ends as soon
//!   as another thread enters MPI, which wakes it (`fm::wait::Waker`);
//! * every other waiting thread sleeps until some thread gives the lock
//!   up (each release bumps [`ENDS`] and, when someone waits for it,
//!   notifies), then tests again: whatever completes its request happens
//!   under the lock.
//!
//! No wake-up is lost. A thread about to take the lock counts itself in
//! [`INSIDE`] first and then rings the doorbell; the sleeper looks at
//! `INSIDE` after arming the doorbell and before sleeping (the doorbell's
//! armed-head protocol, `fm_devices::doorbell`), so it either sees the
//! count or is woken. Every lock user counts, not only `call`
//! (`state::phase`: `MPI_Initialized` takes the lock too; `MPI_Wtime`
//! reads its clock without it). An idle thread
//! reads [`ENDS`] before its last test and sleeps only while it is
//! unchanged past that test, looked at under [`ENDED`]'s mutex, which a
//! releasing thread takes to notify once it has bumped `ENDS`.
//!
//! Programs that did not ask for `MPI_THREAD_MULTIPLE` pay one relaxed
//! load per call for all this (`multiple`).

use crate::*;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, OnceLock};
use std::time::Duration;

/// The thread level this process provides (`MPI_Init_thread`,
/// `MPI_Query_thread`): `MPI_THREAD_SINGLE` until it is asked for more.
static LEVEL: AtomicI32 = AtomicI32::new(MPI_THREAD_SINGLE);
/// The thread that initialised MPI (`MPI_Is_thread_main`).
static MAIN: OnceLock<std::thread::ThreadId> = OnceLock::new();
/// Wakes the sleeper's wait in FM when another thread enters MPI.
static WAKER: OnceLock<fm::wait::Waker> = OnceLock::new();
/// Threads holding the library's lock or waiting for it (`state::phase`).
static INSIDE: AtomicUsize = AtomicUsize::new(0);
/// Some waiting thread is the sleeper.
static SLEEPER: AtomicBool = AtomicBool::new(false);
/// Calls ended so far, and the threads waiting for the next to end.
static ENDS: AtomicU64 = AtomicU64::new(0);
static IDLERS: AtomicUsize = AtomicUsize::new(0);
static ENDED: (Mutex<()>, Condvar) = (Mutex::new(()), Condvar::new());

/// Tests of a wait before it goes idle.
const POLLS: u32 = 64;
/// An idle waiter tests again at least this often (a safety net: every
/// call's end wakes it anyway).
const IDLE_AT_MOST: Duration = Duration::from_millis(10);

/// Whether any thread may call MPI at any time (the program asked for
/// `MPI_THREAD_MULTIPLE`).
#[inline(always)]
pub(crate) fn multiple() -> bool {
    LEVEL.load(Ordering::Relaxed) == MPI_THREAD_MULTIPLE
}

/// The level provided when `required` is asked for: the process's, raised
/// to `required` (a level is only ever raised: a session asking for less
/// than `MPI_Init_thread` did gets what threads already rely on, as
/// MPICH's does). Called under the lock, by the thread that initialises
/// MPI or a session.
pub(crate) fn provide(m: &Mpi, required: c_int) -> c_int {
    let level = required.clamp(MPI_THREAD_SINGLE, MPI_THREAD_MULTIPLE);
    if level == MPI_THREAD_MULTIPLE {
        WAKER.get_or_init(|| m.engine.fm.waker());
    }
    LEVEL.fetch_max(level, Ordering::SeqCst).max(level)
}

/// The level in force (`MPI_Query_thread`).
pub(crate) fn level() -> c_int {
    LEVEL.load(Ordering::Relaxed)
}

/// This thread initialises MPI (the first to do so is the main thread).
pub(crate) fn initialising() {
    MAIN.get_or_init(|| std::thread::current().id());
}

/// Whether this is the thread that initialised MPI.
pub(crate) fn is_main() -> bool {
    MAIN.get()
        .is_none_or(|&id| id == std::thread::current().id())
}

/// A thread's hold of the library's lock, counted under
/// `MPI_THREAD_MULTIPLE`.
pub(crate) struct Inside(bool);

/// A thread is about to take the library's lock (`state::phase`): a
/// sleeper's wait in FM ends, so that the lock is soon free.
#[inline(always)]
pub(crate) fn enter() -> Inside {
    if !multiple() {
        return Inside(false);
    }
    if INSIDE.fetch_add(1, Ordering::SeqCst) > 0 {
        if let Some(w) = WAKER.get() {
            w.wake();
        }
    }
    Inside(true)
}

impl Drop for Inside {
    /// The thread gave the lock up: the threads waiting for a call to
    /// end test again.
    fn drop(&mut self) {
        if !self.0 {
            return;
        }
        INSIDE.fetch_sub(1, Ordering::SeqCst);
        ENDS.fetch_add(1, Ordering::SeqCst);
        if IDLERS.load(Ordering::SeqCst) > 0 {
            let _g = ENDED.0.lock().unwrap_or_else(|p| p.into_inner());
            ENDED.1.notify_all();
        }
    }
}

/// The sleeper's wait in FM goes on while it is alone in MPI.
fn alone() -> bool {
    INSIDE.load(Ordering::SeqCst) <= 1
}

/// Wait until `done` (run under the lock, after progress) says so, giving
/// the lock up between tests (module comment). An error of `done` or of
/// progress is `func`'s, reported through `comm`'s error handler; its
/// class comes back.
pub(crate) fn until(
    func: &str,
    comm: Handle,
    mut done: impl FnMut(&mut Mpi) -> MpiResult<bool>,
) -> c_int {
    let mut polls = 0u32;
    loop {
        let mut finished = false;
        let seen = ENDS.load(Ordering::SeqCst);
        let rc = call(func, comm, |m| {
            m.engine.progress()?;
            finished = done(m)?;
            Ok(())
        });
        if rc != MPI_SUCCESS || finished {
            return rc;
        }
        polls += 1;
        if INSIDE.load(Ordering::SeqCst) > 0 {
            // Another thread waits for the lock: let it run (a mutex
            // lets the thread that just gave it up take it again at
            // once, and with as many spinning threads as CPUs, the one
            // woken for it may get no CPU for a time slice).
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
        if polls < POLLS {
            continue;
        }
        if !SLEEPER.swap(true, Ordering::SeqCst) {
            let rc = call(func, comm, |m| {
                let r = m.engine.wait_for_arrival_while(alone);
                SLEEPER.store(false, Ordering::SeqCst);
                r?;
                finished = done(m)?;
                Ok(())
            });
            SLEEPER.store(false, Ordering::SeqCst);
            if rc != MPI_SUCCESS || finished {
                return rc;
            }
        } else {
            idle_after(seen + 1);
        }
        polls = 0;
    }
}

/// Sleep until more than `seen` calls have ended (this thread's own test
/// ended one), or [`IDLE_AT_MOST`] passed.
fn idle_after(seen: u64) {
    IDLERS.fetch_add(1, Ordering::SeqCst);
    let g = ENDED.0.lock().unwrap_or_else(|p| p.into_inner());
    if ENDS.load(Ordering::SeqCst) <= seen {
        let _ = ENDED.1.wait_timeout(g, IDLE_AT_MOST);
    }
    IDLERS.fetch_sub(1, Ordering::SeqCst);
}

/// A blocking call made of a request: `start` begins it under the lock,
/// the request is waited for, and `end` gets its status. Alone, all under
/// one hold of the lock (as every blocking call has always run); under
/// `MPI_THREAD_MULTIPLE`, with the wait of [`until`] between.
pub(crate) fn blocking(
    func: &str,
    comm: Handle,
    start: impl FnOnce(&mut Mpi) -> MpiResult<u32>,
    end: impl FnOnce(&mut Mpi, MpiStatus) -> MpiResult<()>,
) -> c_int {
    if !multiple() {
        return call(func, comm, |m| {
            let id = start(m)?;
            let s = m.engine.wait(id)?;
            end(m, s)
        });
    }
    let mut id = 0;
    let rc = call(func, comm, |m| {
        id = start(m)?;
        Ok(())
    });
    if rc != MPI_SUCCESS {
        return rc;
    }
    let rc = until(func, comm, |m| Ok(m.engine.is_done(id)));
    if rc != MPI_SUCCESS {
        return rc;
    }
    call(func, comm, |m| {
        let s = m.engine.wait(id)?;
        end(m, s)
    })
}

/// Under `MPI_THREAD_MULTIPLE`, wait (as [`until`]) for the requests of
/// a wait call to be ready — all of them, or (`all` false) any one, or
/// none active — before the call itself runs and finds them so.
pub(crate) fn ready(func: &str, requests: *mut Handle, count: c_int, all: bool) -> c_int {
    if !multiple() {
        return MPI_SUCCESS;
    }
    until(func, MPI_COMM_WORLD, |m| {
        // SAFETY: the caller's array of `count` requests (MPI's rule).
        let ids = unsafe { request_ids(m, requests, count)? };
        let mut active = ids.iter().flatten().peekable();
        if active.peek().is_none() {
            return Ok(true);
        }
        Ok(match all {
            true => active.all(|&id| m.engine.is_done(id)),
            false => active.any(|&id| m.engine.is_done(id)),
        })
    })
}
