//! CPUs: pinning, how many this process may use, and the clock and CPU
//! pair of the pacer's two-thread micro-benchmarks.

use rustix::thread::{sched_getaffinity, sched_getcpu, sched_setaffinity, CpuSet};
use std::io;

/// Pin the calling thread to one CPU.
pub fn pin_to_cpu(cpu: usize) -> io::Result<()> {
    if cpu >= CpuSet::MAX_CPU {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    let mut set = CpuSet::new();
    set.set(cpu);
    sched_setaffinity(None, &set).map_err(io::Error::from)
}

/// Number of CPUs this process may run on.
pub fn cpus_allowed() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// The clock of one throughput measurement of the pacer's
/// micro-benchmarks: a warm-up, then a window over which the bytes moved
/// are counted.
pub struct RateWindow {
    begin: std::time::Instant,
    warm_up: std::time::Duration,
    window: std::time::Duration,
    start: Option<(std::time::Instant, usize)>,
}

impl RateWindow {
    /// A window of `window` after a warm-up of a third of that plus `extra`.
    pub fn new(window: std::time::Duration, extra: std::time::Duration) -> RateWindow {
        RateWindow {
            begin: std::time::Instant::now(),
            warm_up: window / 3 + extra,
            window,
            start: None,
        }
    }

    /// With `moved` bytes so far: `None` while measuring, then the MB/s
    /// (`Some(None)` when nothing moved at all).
    ///
    /// A window in which nothing moved measured the scheduler, not the
    /// transport (on a busy 2-CPU host the other thread can sit
    /// descheduled for milliseconds), so the window is stretched, up to
    /// [`RateWindow::STRETCH`] times, until the first byte moves.
    pub fn check(&mut self, moved: usize) -> Option<Option<f64>> {
        let now = std::time::Instant::now();
        match self.start {
            None if now - self.begin >= self.warm_up => self.start = Some((now, moved)),
            Some((t0, m0)) if now - t0 >= self.window => {
                if moved == m0 && now - t0 < self.window * Self::STRETCH {
                    return None;
                }
                let mb_s = (moved - m0) as f64 / (now - t0).as_secs_f64() / 1e6;
                return Some(Some(mb_s).filter(|r| *r > 0.0));
            }
            _ => {}
        }
        None
    }

    /// How many windows a measurement waits for its first byte.
    pub const STRETCH: u32 = 100;
}

/// Two CPUs for a two-thread micro-benchmark (the pacer's), whatever CPU
/// fmrun pinned this process to: the calling thread stays on its CPU and
/// the other thread calls [`CpuPair::pin_other`]. The caller's affinity
/// comes back when the pair is dropped.
pub struct CpuPair {
    saved: Option<CpuSet>,
    here: usize,
    online: usize,
}

impl CpuPair {
    pub fn take() -> CpuPair {
        let saved = sched_getaffinity(None).ok();
        let here = sched_getcpu();
        // SAFETY: sysconf with a valid name (rustix has no sysconf).
        let online = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as usize;
        if saved.is_some() {
            let _ = pin_to_cpu(here);
        }
        CpuPair {
            saved,
            here,
            online: online.max(here + 1),
        }
    }

    /// Pin the calling (other) thread to the next CPU after the caller's
    /// that it may use (a cgroup's cpuset may exclude some); stay put where
    /// there is none.
    pub fn pin_other(&self) {
        if self.saved.is_some() {
            let _ = (1..self.online).any(|i| pin_to_cpu((self.here + i) % self.online).is_ok());
        }
    }
}

impl Drop for CpuPair {
    fn drop(&mut self) {
        if let Some(set) = &self.saved {
            let _ = sched_setaffinity(None, set);
        }
    }
}
