//! How a rank waits: poll while an answer is likely soon, then — where
//! `FM_WAIT` lets it — sleep on the process's doorbell until a device has
//! something for it (paper 001 §5.3.3, Interrupt Reaping; the doorbell's
//! protocol is in `fm_devices::doorbell`).
//!
//! * `spin`: poll for ever. With a CPU per rank, spin (a yield is a system
//!   call and a peer on its own CPU answers within microseconds); with more
//!   ranks than CPUs, yield after a short spin so the peer we wait for gets
//!   to run; once nothing has happened for a while, nap 50 µs at a time.
//! * `block`: poll for the busy period (`FM_WAIT_SPIN_US`; yielding when
//!   oversubscribed), then sleep until woken.
//! * `auto` (the default): `spin` while each local rank has a CPU of its
//!   own, `block` when the host is oversubscribed.

use crate::endpoint::Endpoint;
use crate::error::{ErrorKind, Result};
use fm_devices::doorbell::Doorbell;
use fm_devices::Device;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// Polls before a waiter looks at the clock (or yields, when oversubscribed).
const SPINS: u32 = 256;
/// `spin`, with a CPU per rank: spin this long before yielding.
const SPIN_FOR: Duration = Duration::from_micros(50);
/// `spin`: then yield this long before napping.
const YIELD_FOR: Duration = Duration::from_millis(20);
const NAP: Duration = Duration::from_micros(50);
/// `block`: the default busy period (docs/PERFORMANCE.md, "Blocking waits").
pub const DEFAULT_SPIN: Duration = Duration::from_micros(50);
/// A wait inside fm's protocol (the rest of a message, a single-copy
/// completion) normally ends within milliseconds; one that lasts this long
/// is reported once, with what the rank holds, so that a stuck job says
/// where it is stuck. (Waits for credit report at 1 s with their own hint;
/// waits for the application's messages never do.)
const STALL_REPORT_AFTER: Duration = Duration::from_secs(2);
/// How often a wait that finds nothing has the devices look for damage
/// that would only stall it (`Device::audit`); a sleeping wait wakes for it.
const AUDIT_EVERY: Duration = Duration::from_secs(1);

static JOB_ENDED: AtomicBool = AtomicBool::new(false);
static JOB_END_REASON: Mutex<String> = Mutex::new(String::new());
/// Every endpoint's doorbell in this process, rung when the job ends.
static DOORBELLS: Mutex<Vec<Weak<Doorbell>>> = Mutex::new(Vec::new());
/// Endpoints of this process not yet dropped.
static OPEN_ENDPOINTS: AtomicUsize = AtomicUsize::new(0);

/// Once the resource manager says the job is over, the time a process
/// that still holds an endpoint has to end by itself (its waits fail at
/// once) before fm ends it: a rank started through a remote shell is
/// nobody's child here, and must not outlive its job.
pub const JOB_END_GRACE: Duration = Duration::from_secs(1);
/// The exit status of a process fm ends that way.
pub const JOB_END_EXIT: i32 = 1;

/// The resource manager says this process's job is over (a peer died):
/// every wait from now on fails with [`ErrorKind::JobEnded`] instead of
/// waiting for a peer that will never answer; sleeping waits are woken.
pub fn end_job(reason: String) {
    *JOB_END_REASON.lock().unwrap_or_else(|p| p.into_inner()) = reason;
    JOB_ENDED.store(true, Ordering::SeqCst);
    let bells = DOORBELLS.lock().unwrap_or_else(|p| p.into_inner());
    for b in bells.iter().filter_map(Weak::upgrade) {
        b.ring();
    }
}

/// The job ended under this process, as the resource manager says (a peer
/// died, the GRM or its link was lost) or, under a PMI launcher, the watch
/// of this host's ranks (`wireup/launched.rs`): end every wait first, then — if
/// the process still holds an endpoint after [`JOB_END_GRACE`] — the
/// process; log last, since a log line may block on a stderr nobody reads.
pub(crate) fn job_ended_under_this_process(reason: String) {
    end_job(reason.clone());
    let _ = std::thread::Builder::new()
        .name("fm-job-ended".into())
        .spawn(|| {
            std::thread::sleep(JOB_END_GRACE);
            if OPEN_ENDPOINTS.load(Ordering::SeqCst) > 0 {
                std::process::exit(JOB_END_EXIT);
            }
        });
    tracing::error!("fm: the job has ended: {reason}");
}

/// How this process ends its job at the resource manager
/// (`Membership::aborter`), once it has joined one.
type Aborter = Box<dyn Fn(&str) + Send + Sync>;
static ABORT: Mutex<Option<Aborter>> = Mutex::new(None);

/// Remember how to end the job from a wait.
pub(crate) fn on_abort(abort: impl Fn(&str) + Send + Sync + 'static) {
    *ABORT.lock().unwrap_or_else(|p| p.into_inner()) = Some(Box::new(abort));
}

/// This process cannot go on (a device failed): end the job at the
/// resource manager, so every peer and the launcher hear why.
fn abort_job(reason: &str) {
    if let Some(a) = ABORT.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
        a(reason);
    }
}

/// An endpoint opened (`true`) or was dropped.
pub(crate) fn endpoint_open(open: bool) {
    if open {
        OPEN_ENDPOINTS.fetch_add(1, Ordering::SeqCst);
    } else {
        OPEN_ENDPOINTS.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Ring `bell` when the job ends.
pub(crate) fn ring_at_job_end(bell: &Arc<Doorbell>) {
    let mut bells = DOORBELLS.lock().unwrap_or_else(|p| p.into_inner());
    bells.retain(|b| b.strong_count() > 0);
    bells.push(Arc::downgrade(bell));
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

/// What a waiting rank does with its time (`FM_WAIT`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitMode {
    /// Poll for ever.
    Spin,
    /// Poll for the busy period, then sleep until woken.
    Block,
    /// `Spin` with a CPU per local rank, `Block` when oversubscribed.
    Auto,
}

impl std::str::FromStr for WaitMode {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<WaitMode, String> {
        match s.trim() {
            "spin" => Ok(WaitMode::Spin),
            "block" => Ok(WaitMode::Block),
            "auto" => Ok(WaitMode::Auto),
            _ => Err("known values: spin, block, auto".into()),
        }
    }
}

impl WaitMode {
    /// Whether a rank waiting this way sleeps, on a host that is (or is
    /// not) oversubscribed.
    pub fn sleeps(self, oversubscribed: bool) -> bool {
        match self {
            WaitMode::Spin => false,
            WaitMode::Block => true,
            WaitMode::Auto => oversubscribed,
        }
    }
}

/// How this endpoint's waits go, settled when it opens.
#[derive(Clone, Copy, Debug)]
pub(crate) struct WaitPolicy {
    /// Sleep on the doorbell after the busy period.
    pub sleeps: bool,
    /// The busy period (`FM_WAIT_SPIN_US`), for sleeping waits.
    pub spin_for: Duration,
    /// More local ranks than CPUs: yield rather than spin.
    pub oversubscribed: bool,
}

impl WaitPolicy {
    /// Polls before the clock is read: none when a blocking wait has no
    /// busy period (`FM_WAIT_SPIN_US=0`: sleep at the first empty poll).
    #[inline(always)]
    fn first_spins(&self) -> u32 {
        match self.sleeps && self.spin_for.is_zero() {
            true => 0,
            false => SPINS,
        }
    }
}

pub(crate) struct Waiter<'a> {
    policy: WaitPolicy,
    polls: u32,
    idle_since: Option<Instant>,
    /// Give up at this time, naming what was waited for; looked at every
    /// 64 polls, whether they found something or not.
    deadline: Option<(Instant, Duration, &'static str)>,
    since_check: u32,
    /// Each poll sends what other threads queued (an extract's wait): a
    /// queued message is something to wake for.
    sends_outbox: bool,
    /// What is waited for; reported once the wait lasts
    /// [`STALL_REPORT_AFTER`] (`reports`), counted from its first idle poll.
    what: &'static str,
    reports: bool,
    stalled_since: Option<Instant>,
    /// When the devices are next audited, while the wait finds nothing.
    next_audit: Option<Instant>,
    /// Whether to go on waiting ([`Endpoint::extract_wait_while`]): looked
    /// at in the armed window too, so that a thread that changes what it
    /// reads and then wakes the endpoint ([`Waker`]) is never missed.
    go_on: Option<&'a dyn Fn() -> bool>,
}

/// Wakes an endpoint's sleeping wait from another thread
/// ([`Endpoint::waker`]); `Clone` and `Send`.
#[derive(Clone)]
pub struct Waker(Arc<Doorbell>);

impl Waker {
    /// Ring the endpoint's doorbell: a wait asleep on it wakes and looks
    /// again (at its `go_on`, for [`Endpoint::extract_wait_while`]).
    pub fn wake(&self) {
        self.0.ring();
    }
}

impl Endpoint {
    /// A handle through which another thread wakes this endpoint's wait.
    pub fn waker(&self) -> Waker {
        Waker(self.dev.doorbell().clone())
    }
}

impl<'a> Waiter<'a> {
    /// A waiter that fails with [`ErrorKind::Timeout`] once `limit` has
    /// passed without the wait ending (`None`: waits for ever).
    pub(crate) fn new(policy: WaitPolicy, limit: Option<Duration>, what: &'static str) -> Self {
        Waiter {
            policy,
            polls: 0,
            idle_since: None,
            deadline: limit.map(|l| (Instant::now() + l, l, what)),
            since_check: 0,
            sends_outbox: false,
            what,
            reports: false,
            stalled_since: None,
            next_audit: None,
            go_on: None,
        }
    }

    /// A waiter that stops once `go_on` says so (`Waiter::stopped`).
    pub(crate) fn while_<'b>(self, go_on: &'b dyn Fn() -> bool) -> Waiter<'b>
    where
        'a: 'b,
    {
        Waiter {
            go_on: Some(go_on),
            ..self
        }
    }

    /// Whether the waiter's `go_on` says to stop.
    #[inline]
    pub(crate) fn stopped(&self) -> bool {
        self.go_on.is_some_and(|f| !f())
    }

    /// A waiter that reports a wait lasting [`STALL_REPORT_AFTER`].
    pub(crate) fn reporting_stalls(mut self) -> Self {
        self.reports = true;
        self
    }

    /// A waiter whose polls send the outbox (`sender.rs`).
    pub(crate) fn sending_outbox(mut self) -> Self {
        self.sends_outbox = true;
        self
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

    /// Nothing happened on this poll of `ep`. Fails once the job has
    /// ended (looked at only after the first spins, so the fast path pays
    /// nothing).
    #[inline]
    pub(crate) fn snooze(&mut self, ep: &Endpoint) -> Result<()> {
        self.polls = self.polls.saturating_add(1);
        self.since_check = self.since_check.saturating_add(1);
        if self.deadline.is_some() && self.since_check >= 64 {
            self.since_check = 0;
            self.check_deadline()?;
        }
        if self.polls < self.policy.first_spins() {
            std::hint::spin_loop();
            return Ok(());
        }
        self.idle(ep)
    }

    /// Past the first spins: the clock decides.
    #[cold]
    fn idle(&mut self, ep: &Endpoint) -> Result<()> {
        if let Some(reason) = job_end_reason() {
            return Err(ErrorKind::JobEnded(reason).into());
        }
        if let Some(e) = ep.dev.failure() {
            abort_job(&format!("rank {}: {e}", ep.rank()));
            return Err(e.into());
        }
        let since = *self.idle_since.get_or_insert_with(Instant::now);
        let idle = since.elapsed();
        if idle >= AUDIT_EVERY {
            self.audit(ep)?;
        }
        if self.reports {
            let stalled = *self.stalled_since.get_or_insert(since);
            if stalled.elapsed() >= STALL_REPORT_AFTER {
                self.reports = false;
                ep.report_stall(self.what, stalled.elapsed());
            }
        }
        let p = self.policy;
        let busy_for = if p.sleeps { p.spin_for } else { SPIN_FOR };
        if idle < busy_for && !p.oversubscribed {
            std::hint::spin_loop();
        } else if idle < busy_for || (!p.sleeps && idle < YIELD_FOR) {
            std::thread::yield_now();
        } else if !p.sleeps {
            std::thread::sleep(NAP);
        } else {
            self.sleep(ep);
        }
        Ok(())
    }

    /// About once a second of finding nothing: have the devices look for
    /// damage that would only stall this wait.
    #[cold]
    fn audit(&mut self, ep: &Endpoint) -> Result<()> {
        let now = Instant::now();
        if self.next_audit.is_some_and(|at| now < at) {
            return Ok(());
        }
        self.next_audit = Some(now + AUDIT_EVERY);
        if let Some(e) = ep.dev.audit() {
            abort_job(&format!("rank {}: {e}", ep.rank()));
            return Err(e.into());
        }
        Ok(())
    }

    /// Arm the doorbell, look at every device (and the outbox) once more,
    /// and sleep if nothing is there (until rung, the time limit, or the
    /// next audit).
    fn sleep(&mut self, ep: &Endpoint) {
        let bell = ep.dev.doorbell();
        bell.arm();
        if ep.dev.has_arrivals()
            || (self.sends_outbox && ep.outbox_pending())
            || JOB_ENDED.load(Ordering::SeqCst)
            || self.stopped()
        {
            bell.disarm();
            return;
        }
        let now = Instant::now();
        let to_deadline = self
            .deadline
            .map(|(at, _, _)| at.saturating_duration_since(now));
        let to_audit = self
            .next_audit
            .unwrap_or(now + AUDIT_EVERY)
            .saturating_duration_since(now);
        bell.sleep(Some(to_deadline.map_or(to_audit, |d| d.min(to_audit))));
        // Look at the time limit at the next poll.
        self.since_check = 64;
    }
}
