//! Sleeping until another thread or process wakes us: futex wait and wake
//! on a word that may lie in shared memory (so the shared, not the private,
//! futex operations), and waiting for sockets to become readable. Both
//! through rustix.

use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::thread::futex;
use std::os::fd::BorrowedFd;
use std::sync::atomic::AtomicU32;
use std::time::Duration;

fn timespec(d: Duration) -> Timespec {
    Timespec {
        tv_sec: d.as_secs().min(i64::MAX as u64) as i64,
        tv_nsec: d.subsec_nanos() as _,
    }
}

/// Sleep while `word` holds `expected`, until [`futex_wake_all`] on it, or
/// `timeout` (`None`: no limit). May return early (a signal, a spurious
/// wake-up, the word already changed): callers look at their state again.
pub fn futex_wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) {
    let t = timeout.map(timespec);
    // Errors are all "return now": EAGAIN (the word changed), EINTR,
    // ETIMEDOUT. The caller re-checks whatever it waits for.
    let _ = futex::wait(word, futex::Flags::empty(), expected, t.as_ref());
}

/// Wake every thread, of any process, sleeping in [`futex_wait`] on `word`.
pub fn futex_wake_all(word: &AtomicU32) {
    let _ = futex::wake(word, futex::Flags::empty(), i32::MAX as u32);
}

/// Wait until one of `fds` is readable (or has an error), or `timeout`.
pub fn wait_readable(fds: &[BorrowedFd<'_>], timeout: Duration) {
    let mut polled: Vec<PollFd<'_>> = fds
        .iter()
        .map(|fd| PollFd::from_borrowed_fd(*fd, PollFlags::IN))
        .collect();
    let _ = rustix::event::poll(&mut polled, Some(&timespec(timeout)));
}
