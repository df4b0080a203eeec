//! Waiting without starving a descheduled peer.
//!
//! With a CPU per rank, spin (a yield is a system call and a peer on its own
//! CPU answers within microseconds); with more ranks than CPUs, yield after a
//! short spin so the peer we wait for gets to run. Either way, once nothing
//! has happened for a while, sleep in short naps.

use crate::error::{ErrorKind, Result};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Polls before a waiter looks at the clock (or yields, when oversubscribed).
const SPINS: u32 = 256;
/// With a CPU per rank: spin this long before yielding.
const SPIN_FOR: Duration = Duration::from_micros(50);
/// Then yield this long before napping.
const YIELD_FOR: Duration = Duration::from_millis(20);
const NAP: Duration = Duration::from_micros(50);

static OVERSUBSCRIBED: AtomicBool = AtomicBool::new(false);
static JOB_ENDED: AtomicBool = AtomicBool::new(false);
static JOB_END_REASON: Mutex<String> = Mutex::new(String::new());

/// The resource manager says this process's job is over (a peer died):
/// every wait from now on fails with [`ErrorKind::JobEnded`] instead of
/// waiting for a peer that will never answer.
pub fn end_job(reason: String) {
    *JOB_END_REASON.lock().unwrap_or_else(|p| p.into_inner()) = reason;
    JOB_ENDED.store(true, Ordering::SeqCst);
}

/// Why the job ended, if it did.
pub fn job_end_reason() -> Option<String> {
    JOB_ENDED.load(Ordering::SeqCst).then(|| {
        JOB_END_REASON
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    })
}

/// Tell every waiter of this process whether ranks on this host outnumber its CPUs.
pub fn set_oversubscribed(yes: bool) {
    OVERSUBSCRIBED.store(yes, Ordering::Relaxed);
}

#[derive(Default)]
pub struct Waiter {
    polls: u32,
    idle_since: Option<Instant>,
    /// Give up at this time, naming what was waited for; looked at every
    /// 64 polls, whether they found something or not.
    deadline: Option<(Instant, Duration, &'static str)>,
    since_check: u32,
}

impl Waiter {
    pub fn new() -> Self {
        Waiter::default()
    }

    /// A waiter that fails with [`ErrorKind::Timeout`] once `limit` has
    /// passed without the wait ending (`None`: waits for ever).
    pub fn with_limit(limit: Option<Duration>, what: &'static str) -> Self {
        Waiter {
            deadline: limit.map(|l| (Instant::now() + l, l, what)),
            ..Waiter::default()
        }
    }

    #[cold]
    fn check_deadline(&self) -> Result<()> {
        match self.deadline {
            Some((at, limit, what)) if Instant::now() >= at => Err(ErrorKind::Timeout {
                what,
                ms: limit.as_millis(),
            }
            .into()),
            _ => Ok(()),
        }
    }

    /// Something happened (but maybe not what is waited for): start over
    /// with fast polling. The time limit still counts from the start.
    #[inline(always)]
    pub fn reset(&mut self) {
        self.since_check = self.since_check.saturating_add(1);
        self.polls = 0;
        self.idle_since = None;
    }

    /// Nothing happened on this poll. Fails once the job has ended (looked
    /// at only after the first spins, so the fast path pays nothing).
    #[inline]
    pub fn snooze(&mut self) -> Result<()> {
        self.polls = self.polls.saturating_add(1);
        self.since_check = self.since_check.saturating_add(1);
        if self.deadline.is_some() && self.since_check >= 64 {
            self.since_check = 0;
            self.check_deadline()?;
        }
        if self.polls < SPINS {
            std::hint::spin_loop();
            return Ok(());
        }
        if let Some(reason) = job_end_reason() {
            return Err(ErrorKind::JobEnded(reason).into());
        }
        let since = *self.idle_since.get_or_insert_with(Instant::now);
        let idle = since.elapsed();
        if idle < SPIN_FOR && !OVERSUBSCRIBED.load(Ordering::Relaxed) {
            std::hint::spin_loop();
        } else if idle < YIELD_FOR {
            std::thread::yield_now();
        } else {
            std::thread::sleep(NAP);
        }
        Ok(())
    }
}
