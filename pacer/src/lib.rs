//! The pacer (HPVM 1.9, paper `000_…` §6): a newer PCI chipset moved
//! programmed I/O slower than an older one above 160-byte bursts, so HPVM
//! shipped a boot-time micro-benchmark that picks the burst size with the
//! best throughput. fm does the same for its devices' knobs — how many
//! bytes or frames go per step — at startup, and caches the measured curve
//! per host, device and kernel so later jobs start at once.
//!
//! This crate holds what every knob shares: the `FM_PACER` override, the
//! cache file (TOML under the user's cache directory) and [`Pacer::tune`],
//! which returns the cached choice or measures the candidates with the
//! closure a device gives it; [`knobs`] has the devices' knobs.

pub mod knobs;

use fm_platform::setting::{Scope, Setting};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Layout of the cache file; another version is ignored and re-measured.
pub const VERSION: u32 = 1;
/// A cached curve older than this is measured again.
pub const MAX_AGE: Duration = Duration::from_secs(30 * 24 * 3600);

/// The setting that says what the pacer may do ([`Mode`]).
pub const PACER: Setting = Setting {
    var: "FM_PACER",
    scope: Scope::Setting,
    default: r#"`auto`"#,
    doc: r#"`auto`: the cached choice, measured when missing, older than 30 days, from another fm version's cache layout, host or kernel, or for other candidates. `off`: every knob's fixed default (16 KiB frames; the interface's largest datagram), no cache read or written. `force`: measure again now (once per job and host). A size, e.g. `8192`: that many bytes for every knob (the nearest candidate at or below it). `FM_SHM_PAYLOAD` and `FM_ETH_MTU` win over the pacer."#,
};

/// The pacer's settings (in fm's table of settings, `fm::settings`).
pub const SETTINGS: &[Setting] = &[PACER];

/// `FM_PACER`: what the pacer may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Use the cached choice, measuring when there is none or it is stale.
    Auto,
    /// Never measure: every knob keeps its fixed default.
    Off,
    /// Measure again now, whatever the cache holds.
    Force,
    /// This many bytes for every knob (the nearest candidate at or below).
    Fixed(u64),
}

impl std::fmt::Display for Mode {
    /// As `FM_PACER` is written: `auto`, `off`, `force`, or the size.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Mode::Auto => f.write_str("auto"),
            Mode::Off => f.write_str("off"),
            Mode::Force => f.write_str("force"),
            Mode::Fixed(n) => write!(f, "{n}"),
        }
    }
}

impl Mode {
    /// `auto` (or empty), `off`, `force`, or a size in bytes.
    pub fn parse(v: &str) -> Result<Mode, String> {
        match v.trim() {
            "" | "auto" => Ok(Mode::Auto),
            "off" => Ok(Mode::Off),
            "force" => Ok(Mode::Force),
            n => match n.parse::<u64>() {
                Ok(0) | Err(_) => Err(format!(
                    "{n:?}: known values are auto, off, force, or a positive size"
                )),
                Ok(s) => Ok(Mode::Fixed(s)),
            },
        }
    }
}

/// One knob's measured curve and the size chosen from it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Curve {
    /// The sizes tried (some may have had nothing measurable).
    pub candidates: Vec<u64>,
    /// (candidate size, throughput in MB/s), in the order measured.
    pub points: Vec<(u64, f64)>,
    pub chosen: u64,
    /// When it was measured, seconds since the Unix epoch.
    pub measured_at: u64,
    /// The job that measured it (its key, hex), if a job did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
}

impl Curve {
    /// The fastest candidate; of two within 2 % of each other, the
    /// smaller (less latency per burst for the same throughput).
    pub fn best(points: &[(u64, f64)]) -> Option<u64> {
        let top = points.iter().map(|p| p.1).fold(f64::NAN, f64::max);
        points
            .iter()
            .filter(|p| p.1 >= top * 0.98)
            .map(|p| p.0)
            .min()
    }
}

/// Everything cached for one host and kernel: curves by `device.knob`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    pub version: u32,
    pub host: String,
    pub kernel: String,
    #[serde(default)]
    pub curves: BTreeMap<String, Curve>,
}

impl Profile {
    pub fn empty() -> Profile {
        Profile {
            version: VERSION,
            host: fm_platform::hostname(),
            kernel: kernel(),
            curves: BTreeMap::new(),
        }
    }
}

/// The cache file.
#[derive(Clone, Debug)]
pub struct Cache {
    pub path: PathBuf,
}

impl Cache {
    /// `$XDG_CACHE_HOME/fm/pacer.toml`, else `~/.cache/fm/pacer.toml`.
    pub fn default_location() -> Option<Cache> {
        let base = std::env::var_os("XDG_CACHE_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache")))?;
        Some(Cache {
            path: base.join("fm").join("pacer.toml"),
        })
    }

    /// What the file holds for this host and kernel. A missing file is an
    /// empty profile; an unreadable, corrupt or foreign one (another layout
    /// version, host or kernel) is ignored with a warning: it will be
    /// measured again and overwritten.
    pub fn load(&self) -> Profile {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Profile::empty(),
            Err(e) => {
                tracing::warn!(path = %self.path.display(), "pacer: cannot read the cache ({e}); measuring again");
                return Profile::empty();
            }
        };
        let p: Profile = match toml::from_str(&text) {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(path = %self.path.display(), "pacer: ignoring a corrupt cache ({}); measuring again", e.message());
                return Profile::empty();
            }
        };
        let here = Profile::empty();
        if p.version != VERSION || p.host != here.host || p.kernel != here.kernel {
            tracing::warn!(
                path = %self.path.display(),
                "pacer: the cache is for version {} on {:?} with kernel {:?}, not version {VERSION} on {:?} with {:?}; measuring again",
                p.version, p.host, p.kernel, here.host, here.kernel
            );
            return here;
        }
        p
    }

    /// Hold the lock next to the cache (`pacer.lock`, flock) until the
    /// returned file is dropped; `None` (go on unlocked) if it cannot be
    /// made or another process holds it longer than [`LOCK_WAIT`].
    pub fn lock(&self) -> Option<std::fs::File> {
        use std::os::fd::AsRawFd;
        let dir = self.path.parent()?;
        std::fs::create_dir_all(dir).ok()?;
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(self.path.with_extension("lock"))
            .ok()?;
        let deadline = Instant::now() + LOCK_WAIT;
        loop {
            // SAFETY: flock on a descriptor we own.
            if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
                return Some(f);
            }
            if Instant::now() > deadline {
                tracing::warn!(path = %self.path.display(), "pacer: another process holds the cache's lock; measuring without it");
                return None;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Write `profile`, atomically (a temporary file renamed over the old).
    pub fn store(&self, profile: &Profile) -> std::io::Result<()> {
        let text = toml::to_string(profile).map_err(std::io::Error::other)?;
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let tmp = self
            .path
            .with_extension(format!("toml.{}", std::process::id()));
        std::fs::write(&tmp, text)?;
        std::fs::rename(&tmp, &self.path)
    }
}

/// Where a choice came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// `FM_PACER=off`, or only one candidate: the knob's default.
    Default,
    /// `FM_PACER=<size>`.
    Override,
    Cached,
    Measured,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Choice {
    pub size: u64,
    pub source: Source,
    /// The curve behind a cached or measured choice.
    pub curve: Option<Curve>,
}

/// One device's knob: its name in the cache (`device.knob`), the sizes
/// worth trying and the size used without the pacer.
#[derive(Clone, Debug)]
pub struct Knob {
    pub key: String,
    pub candidates: Vec<u64>,
    pub default: u64,
}

/// Every candidate is measured this many times, in turn, and keeps its
/// best: a disturbance during one pass does not pick the size.
pub const PASSES: usize = 2;

/// How long to wait for another process of this host that is measuring
/// (it holds the cache's lock) before measuring anyway.
const LOCK_WAIT: Duration = Duration::from_secs(5);

/// What one process's pacer does: its mode and its cache.
#[derive(Clone, Debug)]
pub struct Pacer {
    pub mode: Mode,
    pub cache: Option<Cache>,
    /// The job this process belongs to: under `force`, a curve this job
    /// measured (another rank of it on this host, which held the lock
    /// first) is not measured again.
    pub job: Option<String>,
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Pacer {
    pub fn new(mode: Mode, cache: Option<Cache>) -> Pacer {
        Pacer {
            mode,
            cache,
            job: None,
        }
    }

    /// The size to use for `knob`: from the mode, the cache, or by calling
    /// `measure(sizes)` once, which gives the throughput in MB/s of each size
    /// in turn (`None` for one it cannot measure here): every candidate
    /// [`PASSES`] times, in alternating order, so that a drift during the
    /// run favours no end of the range. A new curve is written back to
    /// the cache. Processes of one host measure one at a time (a lock next
    /// to the cache), so they do not disturb each other and the later ones
    /// find the first one's curve.
    pub fn tune(&self, knob: &Knob, measure: impl FnOnce(&[u64]) -> Vec<Option<f64>>) -> Choice {
        let default = Choice {
            size: knob.default,
            source: Source::Default,
            curve: None,
        };
        match self.mode {
            Mode::Off => return default,
            Mode::Fixed(s) => {
                // The nearest candidate at or below, else the smallest.
                let c = &knob.candidates;
                let size = c.iter().copied().filter(|&c| c <= s).max();
                return Choice {
                    size: size
                        .or_else(|| c.iter().copied().min())
                        .unwrap_or(knob.default),
                    source: Source::Override,
                    curve: None,
                };
            }
            Mode::Auto | Mode::Force => {}
        }
        if let [only] = knob.candidates[..] {
            return Choice {
                size: only,
                ..default
            };
        }
        let _lock = self.cache.as_ref().and_then(Cache::lock);
        let mut profile = self
            .cache
            .as_ref()
            .map(Cache::load)
            .unwrap_or_else(Profile::empty);
        let now = unix_now();
        if let Some(c) = profile.curves.get(&knob.key) {
            let fresh = now.saturating_sub(c.measured_at) < MAX_AGE.as_secs();
            let same = c.candidates == knob.candidates;
            let this_job = self.job.is_some() && c.job == self.job;
            if same && ((self.mode == Mode::Auto && fresh) || this_job) {
                tracing::debug!(knob = %knob.key, chosen = c.chosen, "pacer: cached curve {:?}", c.points);
                return Choice {
                    size: c.chosen,
                    source: Source::Cached,
                    curve: Some(c.clone()),
                };
            }
        }
        let t = Instant::now();
        let points = measure_passes(&knob.candidates, measure);
        let Some(chosen) = Curve::best(&points) else {
            tracing::debug!(knob = %knob.key, "pacer: nothing measurable; keeping the default {}", knob.default);
            return default;
        };
        let curve = Curve {
            candidates: knob.candidates.clone(),
            points,
            chosen,
            measured_at: now,
            job: self.job.clone(),
        };
        tracing::debug!(
            knob = %knob.key,
            chosen,
            took_ms = t.elapsed().as_secs_f64() * 1e3,
            "pacer: measured {:?}",
            curve.points
        );
        if let Some(c) = &self.cache {
            profile.curves.insert(knob.key.clone(), curve.clone());
            if let Err(e) = c.store(&profile) {
                tracing::warn!(path = %c.path.display(), "pacer: cannot write the cache: {e}");
            }
        }
        Choice {
            size: chosen,
            source: Source::Measured,
            curve: Some(curve),
        }
    }
}

/// Each candidate's best throughput over [`PASSES`] passes, in
/// alternating order; a candidate never measured is left out.
fn measure_passes(
    candidates: &[u64],
    measure: impl FnOnce(&[u64]) -> Vec<Option<f64>>,
) -> Vec<(u64, f64)> {
    let mut sizes = Vec::with_capacity(PASSES * candidates.len());
    for pass in 0..PASSES {
        match pass % 2 {
            0 => sizes.extend(candidates.iter().copied()),
            _ => sizes.extend(candidates.iter().rev().copied()),
        }
    }
    let rates = measure(&sizes);
    (candidates.iter())
        .filter_map(|&c| {
            let best = (sizes.iter().zip(&rates))
                .filter(|(&s, _)| s == c)
                .filter_map(|(_, r)| *r)
                .fold(None, |b: Option<f64>, r| Some(b.map_or(r, |b| b.max(r))));
            best.map(|r| (c, r))
        })
        .collect()
}

/// The running kernel's release and version (`uname -rv`).
fn kernel() -> String {
    // SAFETY: a zeroed utsname is valid; uname fills it.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: uname writes into the struct we own.
    if unsafe { libc::uname(&mut u) } != 0 {
        return "unknown".into();
    }
    let field = |f: &[libc::c_char]| {
        let b: Vec<u8> = f
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        String::from_utf8_lossy(&b).into_owned()
    };
    format!("{} {}", field(&u.release), field(&u.version))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_and_bad_ones_are_errors() {
        assert_eq!(Mode::parse(""), Ok(Mode::Auto));
        assert_eq!(Mode::parse("off"), Ok(Mode::Off));
        assert_eq!(Mode::parse(" force "), Ok(Mode::Force));
        assert_eq!(Mode::parse("4096"), Ok(Mode::Fixed(4096)));
        for bad in ["0", "-1", "fast", "4k"] {
            assert!(Mode::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_best_is_the_smallest_within_two_percent_of_the_top() {
        assert_eq!(
            Curve::best(&[(1, 10.0), (2, 99.0), (4, 100.0), (8, 50.0)]),
            Some(2)
        );
        assert_eq!(Curve::best(&[(1, 10.0), (2, 90.0), (4, 100.0)]), Some(4));
        assert_eq!(Curve::best(&[]), None);
    }
}
