//! The driver: runs the sans-IO [`Protocol`] over a real [`Link`] and the
//! wall clock. It owns what the protocol must not: the link, the clock
//! reads, when to poll the link and run the timers, the mutex shared with
//! the background thread, and the lock-free arrival probe.

use super::protocol::Protocol;
use super::{ArrivalProbe, Link, ReliableConfig, ReliableStats};
use crate::doorbell::Doorbell;
use crate::sys;
use crate::{Device, DeviceError, DeviceInfo, DeviceStats, Rank, RawRecv, RawSend};
use std::os::fd::{BorrowedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::time::{Duration, Instant};

/// Datagrams read per poll at most.
const RECV_BATCH: usize = 32;

/// With an arrival probe, one idle poll in this many runs the protocol.
const FULL_POLL_EVERY: u32 = 64;

/// How often the background thread runs the protocol.
pub const BACKGROUND_TICK: Duration = Duration::from_millis(10);

/// The background thread: every [`BACKGROUND_TICK`], and at once when a
/// datagram arrives while the process sleeps on its doorbell, run the
/// protocol if the application is not in the device, and ring the
/// doorbell when that brought something.
fn background<L: Link + 'static>(
    driven: Weak<Mutex<Driven<L>>>,
    stop: Arc<AtomicBool>,
    bell: Arc<OnceLock<Arc<Doorbell>>>,
    fds: Vec<RawFd>,
) {
    while !stop.load(Ordering::Relaxed) {
        match bell.get() {
            Some(b) if b.armed() => {
                // SAFETY: the link owns the descriptors and outlives this
                // thread (the device joins it before dropping the link).
                let fds: Vec<_> = fds
                    .iter()
                    .map(|&f| unsafe { BorrowedFd::borrow_raw(f) })
                    .collect();
                sys::wait_readable(&fds, BACKGROUND_TICK)
            }
            Some(b) => b.wait_armed(BACKGROUND_TICK),
            None => std::thread::sleep(BACKGROUND_TICK),
        }
        let Some(driven) = driven.upgrade() else {
            return;
        };
        // Only when the application is not in the device itself.
        let Ok(mut g) = driven.try_lock() else {
            continue;
        };
        if g.progress() {
            if let Some(b) = bell.get() {
                b.ring();
            }
        }
    }
}

/// The protocol and its link, behind the device's lock.
struct Driven<L: Link> {
    protocol: Protocol,
    link: L,
    polls: u32,
    /// The last poll read the link empty.
    was_drained: bool,
    /// `protocol.ready_len()` for the lock-free idle check.
    ready_hint: Arc<AtomicUsize>,
}

impl<L: Link> Driven<L> {
    /// Read what arrived, run the timers when due, and hand what the
    /// protocol has to send to the link in one burst. True when something
    /// arrived or a peer became unreachable: what a sleeping application
    /// must be woken for.
    fn progress(&mut self) -> bool {
        let unreachable = self.protocol.unreachable_count();
        self.link.tick();
        let mut got = 0;
        let mut drained = false;
        // The clock is read once per poll, and only when something needs it.
        let mut clock: Option<Instant> = None;
        while got < RECV_BATCH {
            let Some(n) = self.link.recv(self.protocol.recv_buffer()) else {
                drained = true;
                break;
            };
            got += 1;
            let now = *clock.get_or_insert_with(Instant::now);
            let link = &self.link;
            self.protocol
                .handle_datagram(now, n, |claimed| link.came_from(claimed));
            if self.protocol.ready_len() > 0 && self.was_drained {
                // Data after an empty link: hand it over now rather than pay
                // one more (usually empty) receive first. Behind a stream
                // (the last poll did not drain) read on, so a full pool
                // shows as STOP rather than as socket-buffer drops.
                break;
            }
        }
        self.was_drained = drained;
        self.polls = self.polls.wrapping_add(1);
        // Timers once the link is drained (ACKs waiting to be read must not
        // look like losses), and now and then under a stream that never
        // drains, so its own losses are still found.
        let due = if drained {
            got == 0 || self.polls.is_multiple_of(64)
        } else {
            self.polls.is_multiple_of(1024)
        };
        if due {
            let now = *clock.get_or_insert_with(Instant::now);
            self.protocol.handle_timeout(now);
        }
        self.transmit(clock);
        self.ready_hint
            .store(self.protocol.ready_len(), Ordering::Release);
        got > 0 || self.protocol.unreachable_count() != unreachable
    }

    /// The next accepted packet, for the application.
    fn receive(&mut self) -> Option<RawRecv> {
        let r = self.protocol.receive()?;
        self.ready_hint
            .store(self.protocol.ready_len(), Ordering::Relaxed);
        Some(r)
    }

    /// Everything the protocol has to send, then one kick of the link.
    fn transmit(&mut self, clock: Option<Instant>) {
        if !self.protocol.has_transmits() {
            return;
        }
        let now = clock.unwrap_or_else(Instant::now);
        while let Some(t) = self.protocol.poll_transmit(now) {
            let failed = self.link.send(t.dest, t.datagram).is_err();
            if failed {
                self.protocol.transmit_failed();
            }
        }
        self.link.flush();
    }

    /// Keep polling until every packet sent is acknowledged (or `limit`
    /// passes): a process that leaves right after its last send — the
    /// release of a barrier — must not take the only copy of a lost packet
    /// with it. True when everything was acknowledged.
    fn flush(&mut self, limit: Duration) -> bool {
        let until = Instant::now() + limit;
        self.protocol.ack_all_owed();
        self.transmit(None);
        loop {
            if !self.protocol.pending() {
                return true;
            }
            if Instant::now() > until {
                return false;
            }
            self.progress();
            // Packets that arrive meanwhile are acknowledged and let go.
            self.protocol.discard_ready();
            std::thread::yield_now();
        }
    }
}

/// A reliable, ordered device over a lossy datagram link.
///
/// The protocol runs when the application polls (`raw_receive`, and
/// `raw_send_buffer` with a full window); a background thread also runs it
/// every [`BACKGROUND_TICK`] when it finds the state free, so a process that
/// stops polling — computing, or blocked elsewhere — still acknowledges,
/// retransmits and answers STOP/GO. The state sits behind a mutex that the
/// application's thread takes uncontended.
pub struct ReliableDevice<L: Link + 'static> {
    driven: Arc<Mutex<Driven<L>>>,
    stop: Arc<AtomicBool>,
    background: Option<std::thread::JoinHandle<()>>,
    /// The process's doorbell, once attached; the background thread rings it.
    bell: Arc<OnceLock<Arc<Doorbell>>>,
    /// Whether the link has descriptors the background thread can wait on.
    watchable: bool,
    /// Memory-notified links: an idle poll is a look at the rings and at
    /// `ready_hint`, without the lock; every [`FULL_POLL_EVERY`]th poll runs
    /// the protocol anyway (delayed ACKs, timers).
    probe: Option<ArrivalProbe>,
    ready_hint: Arc<AtomicUsize>,
    idle_polls: u32,
    /// Dropping waits (up to 2 s) for the last packets' acknowledgements.
    linger: bool,
}

/// The reliable layer over some datagram link: what the ethernet and nic
/// devices are.
pub type NetDevice = ReliableDevice<Box<dyn Link>>;

impl<L: Link + 'static> ReliableDevice<L> {
    /// A device over `link`; `peer_epochs[r]` is rank r's epoch, `None` for
    /// ranks this device does not reach (and for this rank itself).
    pub fn new(
        cfg: ReliableConfig,
        link: L,
        peer_epochs: &[Option<u32>],
    ) -> Result<Self, DeviceError> {
        let protocol = Protocol::new(cfg, peer_epochs, Instant::now())?;
        let ready_hint = Arc::new(AtomicUsize::new(0));
        let probe = link.arrival_probe();
        let fds = link.wait_fds();
        let watchable = !fds.is_empty();
        let driven = Arc::new(Mutex::new(Driven {
            protocol,
            link,
            polls: 0,
            was_drained: true,
            ready_hint: ready_hint.clone(),
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let bell = Arc::new(OnceLock::new());
        let (d, s, b) = (Arc::downgrade(&driven), stop.clone(), bell.clone());
        let background = std::thread::Builder::new()
            .name("fm-reliable".into())
            .spawn(move || background(d, s, b, fds))
            .ok();
        Ok(ReliableDevice {
            driven,
            stop,
            background,
            bell,
            watchable,
            probe,
            ready_hint,
            idle_polls: 0,
            linger: true,
        })
    }

    fn lock(&self) -> MutexGuard<'_, Driven<L>> {
        self.driven.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn reliable_stats(&self) -> ReliableStats {
        let mut d = self.lock();
        let mut s = d.protocol.reliable_stats();
        s.kernel_drops = d.link.kernel_drops();
        s
    }

    pub fn epoch(&self) -> u32 {
        self.lock().protocol.config().epoch
    }

    /// Poll until everything sent is acknowledged, for at most `limit`.
    pub fn flush(&mut self, limit: Duration) -> bool {
        self.lock().flush(limit)
    }

    /// Close without waiting for what is unacknowledged (the job is over:
    /// nobody will acknowledge it).
    pub fn skip_linger(&mut self) {
        self.linger = false;
    }
}

impl<L: Link + 'static> Drop for ReliableDevice<L> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.background.take() {
            let _ = t.join();
        }
        if !self.linger {
            return;
        }
        let mut d = self.lock();
        let limit = d.protocol.config().dead_after.min(Duration::from_secs(2));
        if !d.flush(limit) {
            tracing::warn!(
                device = d.protocol.config().device,
                "closing with packets still unacknowledged after {limit:?}"
            );
        }
    }
}

impl<L: Link + 'static> Device for ReliableDevice<L> {
    fn info(&self) -> DeviceInfo {
        self.lock().protocol.info()
    }
    fn reaches(&self, dest: Rank) -> bool {
        self.lock().protocol.reaches(dest)
    }
    fn window(&self, _dest: Rank) -> u32 {
        self.lock().protocol.config().window
    }
    fn peer_failure(&self, dest: Rank) -> Option<DeviceError> {
        self.lock().protocol.peer_failure(dest)
    }
    fn raw_send_buffer(&mut self, dest: Rank, len: usize) -> Result<RawSend, DeviceError> {
        let mut d = self.lock();
        let r = d.protocol.send_buffer(dest, len);
        if let Err(DeviceError::NoBuffer { .. }) = r {
            // The caller polls and retries; make sure polling can free a slot.
            d.progress();
        }
        r
    }
    fn raw_send(&mut self, buf: RawSend, len: usize) {
        let mut d = self.lock();
        let now = Instant::now();
        d.protocol.commit(buf, len, now);
        d.transmit(Some(now));
    }
    fn raw_abort(&mut self, _buf: RawSend) {}
    #[inline]
    fn raw_receive(&mut self) -> Option<RawRecv> {
        if let Some(p) = &self.probe {
            self.idle_polls = self.idle_polls.wrapping_add(1);
            if !self.idle_polls.is_multiple_of(FULL_POLL_EVERY)
                && self.ready_hint.load(Ordering::Acquire) == 0
                && !p.arrived()
            {
                return None;
            }
        }
        let mut d = self.lock();
        if d.protocol.ready_len() == 0 {
            d.progress();
        }
        d.receive()
    }
    fn raw_receive_arrived(&mut self) -> Option<RawRecv> {
        if self.probe.is_some() && self.ready_hint.load(Ordering::Acquire) == 0 {
            return None;
        }
        self.lock().receive()
    }
    fn raw_release(&mut self, token: u64) {
        let mut d = self.lock();
        d.protocol.release(token);
        d.transmit(None);
    }
    fn has_arrivals(&self) -> bool {
        // Datagrams still in the socket are the background thread's to
        // find (it waits on the link while the process sleeps).
        self.ready_hint.load(Ordering::Acquire) > 0
            || self.probe.as_ref().is_some_and(|p| p.arrived())
    }
    fn attach_doorbell(&mut self, bell: &Arc<Doorbell>) {
        if self.bell.set(bell.clone()).is_ok() && self.watchable {
            bell.add_watcher();
        }
    }
    fn stats(&self) -> DeviceStats {
        self.lock().protocol.stats()
    }
}
