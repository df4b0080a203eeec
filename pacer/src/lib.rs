//! The pacer (HPVM 1.9, paper `000_…` §6): a newer PCI chipset moved
//! programmed I/O slower than an older one above 160-byte bursts, so HPVM
//! shipped a boot-time micro-benchmark that picks the burst size with the
//! best throughput. fm does the same for its devices' knobs — how many
//! bytes or frames go per step — at startup, and caches the measured curve
//! per host, device and kernel so later jobs start at once.
//!
//! This crate holds what every knob shares: the `FM_PACER` override, the
//! cache file (TOML under the user's cache directory) and [`tune`], which
//! returns the cached choice or measures the candidates with the closure a
//! device gives it.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Layout of the cache file; another version is ignored and re-measured.
pub const VERSION: u32 = 1;
/// A cached curve older than this is measured again.
pub const MAX_AGE: Duration = Duration::from_secs(30 * 24 * 3600);

/// `FM_PACER`: what the pacer may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Use the cached choice, measuring when there is none or it is stale.
    Auto,
    /// Never measure: every knob keeps its fixed default.
    Off,
    /// Measure again now, whatever the cache holds.
    Force,
    /// This size for every knob (clamped to each knob's candidates).
    Fixed(u64),
}

impl Mode {
    /// `auto` (or empty), `off`, `force`, or a size in bytes or frames.
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

    /// From `FM_PACER`; unset is `auto`.
    pub fn from_env() -> Result<Mode, String> {
        match std::env::var("FM_PACER") {
            Ok(v) => Mode::parse(&v).map_err(|e| format!("FM_PACER={v}: {e}")),
            Err(_) => Ok(Mode::Auto),
        }
    }
}

/// One knob's measured curve and the size chosen from it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Curve {
    /// (candidate size, throughput in MB/s), in the order measured.
    pub points: Vec<(u64, f64)>,
    pub chosen: u64,
    /// When it was measured, seconds since the Unix epoch.
    pub measured_at: u64,
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
            host: fm_devices::sys::hostname(),
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
    /// `FM_PACER=off`: the knob's default.
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

/// The size to use for `device`'s `knob`: from `mode`, the cache, or by
/// calling `measure(size)` (throughput in MB/s, or `None` when that size
/// cannot be measured here) on every candidate. A new curve is written
/// back to the cache when there is one.
pub fn tune(
    cache: Option<&Cache>,
    mode: Mode,
    device: &str,
    knob: &str,
    candidates: &[u64],
    default: u64,
    mut measure: impl FnMut(u64) -> Option<f64>,
) -> Choice {
    let key = format!("{device}.{knob}");
    match mode {
        Mode::Off => {
            return Choice {
                size: default,
                source: Source::Default,
                curve: None,
            }
        }
        Mode::Fixed(s) => {
            // The nearest candidate at or below, else the smallest.
            let size = candidates
                .iter()
                .copied()
                .filter(|&c| c <= s)
                .max()
                .or_else(|| candidates.iter().copied().min())
                .unwrap_or(default);
            return Choice {
                size,
                source: Source::Override,
                curve: None,
            };
        }
        Mode::Auto | Mode::Force => {}
    }
    let mut profile = cache.map(Cache::load).unwrap_or_else(Profile::empty);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    if mode == Mode::Auto {
        if let Some(c) = profile.curves.get(&key) {
            let fresh = now.saturating_sub(c.measured_at) < MAX_AGE.as_secs();
            let same = c.points.iter().map(|p| p.0).eq(candidates.iter().copied());
            if fresh && same {
                return Choice {
                    size: c.chosen,
                    source: Source::Cached,
                    curve: Some(c.clone()),
                };
            }
        }
    }
    let t = Instant::now();
    let points: Vec<(u64, f64)> = candidates
        .iter()
        .filter_map(|&s| measure(s).map(|mb_s| (s, mb_s)))
        .collect();
    let Some(chosen) = Curve::best(&points) else {
        tracing::debug!(knob = %key, "pacer: nothing measurable; keeping the default {default}");
        return Choice {
            size: default,
            source: Source::Default,
            curve: None,
        };
    };
    let curve = Curve {
        points,
        chosen,
        measured_at: now,
    };
    tracing::debug!(
        knob = %key,
        chosen,
        took_ms = t.elapsed().as_secs_f64() * 1e3,
        "pacer: measured {:?}",
        curve.points
    );
    if let Some(c) = cache {
        profile.curves.insert(key, curve.clone());
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
