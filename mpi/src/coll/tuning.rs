//! How the collectives choose their algorithms: the `FM_COLL_*` settings
//! (docs/CONFIG.md), read once when the library joins the job, and the
//! job's hosts, which say who shares memory with whom.

use fm::settings::Setting;
use fm::settings::{self, env_only};
use std::str::FromStr;
use std::sync::{Arc, Mutex};

/// Where `auto` changes algorithm (bytes of the whole vector or message):
/// MPICH's rules of thumb, measured again on fm (docs/PERFORMANCE.md).
#[derive(Clone, Copy, Debug)]
pub struct Choice {
    /// Broadcasts this long and longer, on 4 or more members, scatter and
    /// allgather instead of a binomial tree.
    pub bcast_long: usize,
    /// Allreduces this long and longer (commutative operations, at least
    /// an element per member) reduce-scatter and allgather (Rabenseifner)
    /// instead of recursive doubling.
    pub allreduce_long: usize,
    /// Allgathers whose result is shorter than this, on a power-of-two
    /// number of members, go by recursive doubling instead of a ring.
    pub allgather_short: usize,
}

pub const CHOICE: Choice = Choice {
    bcast_long: 128 * 1024,
    allreduce_long: 8 * 1024,
    allgather_short: 512 * 1024,
};

/// An algorithm a setting names, or `Auto` (chosen by size).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bcast {
    Auto,
    Binomial,
    ScatterAllgather,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Allreduce {
    Auto,
    RecursiveDoubling,
    Rabenseifner,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Allgather {
    Auto,
    RecursiveDoubling,
    Ring,
}

/// The value of `names` that `s` names, or an error listing them.
fn named<T: Copy>(s: &str, names: &[(&str, T)]) -> Result<T, String> {
    match names.iter().find(|(n, _)| *n == s) {
        Some(&(_, v)) => Ok(v),
        None => {
            let all: Vec<&str> = names.iter().map(|(n, _)| *n).collect();
            Err(format!("expected one of {}", all.join(", ")))
        }
    }
}

/// `FromStr` for a setting's type: its values by name.
macro_rules! by_name {
    ($t:ty { $($name:literal => $v:expr),* $(,)? }) => {
        impl FromStr for $t {
            type Err = String;
            fn from_str(s: &str) -> Result<Self, String> {
                named(s, &[$(($name, $v)),*])
            }
        }
    };
}

by_name!(Bcast {
    "auto" => Bcast::Auto,
    "binomial" => Bcast::Binomial,
    "scatter-allgather" => Bcast::ScatterAllgather,
});

by_name!(Allreduce {
    "auto" => Allreduce::Auto,
    "recursive-doubling" => Allreduce::RecursiveDoubling,
    "rabenseifner" => Allreduce::Rabenseifner,
});

by_name!(Allgather {
    "auto" => Allgather::Auto,
    "recursive-doubling" => Allgather::RecursiveDoubling,
    "ring" => Allgather::Ring,
});

/// `FM_COLL_HOSTS`: whether collectives go in two levels on communicators
/// spread over hosts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostAware(pub bool);

by_name!(HostAware {
    "auto" => HostAware(true),
    "off" => HostAware(false),
});

/// Everything the collectives choose by.
#[derive(Clone, Debug)]
pub struct Tuning {
    pub host_aware: bool,
    pub bcast: Bcast,
    pub allreduce: Allreduce,
    pub allgather: Allgather,
    pub choice: Choice,
    /// The host of each rank of the job, numbered from 0 in the order of
    /// each host's first rank.
    pub job_hosts: Arc<[u32]>,
    /// Whether the job has ranks on more than one host.
    pub several_hosts: bool,
}

impl Default for Tuning {
    fn default() -> Tuning {
        Tuning {
            host_aware: true,
            bcast: Bcast::Auto,
            allreduce: Allreduce::Auto,
            allgather: Allgather::Auto,
            choice: CHOICE,
            job_hosts: Arc::new([]),
            several_hosts: false,
        }
    }
}

impl Tuning {
    /// The settings from the environment, for a job whose ranks are on
    /// `hosts` (by rank); a bad value is an error naming its variable.
    pub fn from_env(hosts: &[String]) -> fm::Result<Tuning> {
        fn or<T: FromStr>(s: &'static Setting, default: T) -> fm::Result<T>
        where
            T::Err: std::fmt::Display,
        {
            Ok(env_only::<T>(s)?.unwrap_or(default))
        }
        let mut seen: Vec<&str> = Vec::new();
        let job_hosts: Arc<[u32]> = hosts
            .iter()
            .map(|h| match seen.iter().position(|s| s == h) {
                Some(i) => i as u32,
                None => {
                    seen.push(h);
                    (seen.len() - 1) as u32
                }
            })
            .collect();
        Ok(Tuning {
            host_aware: or(&settings::COLL_HOSTS, HostAware(true))?.0,
            bcast: or(&settings::COLL_BCAST, Bcast::Auto)?,
            allreduce: or(&settings::COLL_ALLREDUCE, Allreduce::Auto)?,
            allgather: or(&settings::COLL_ALLGATHER, Allgather::Auto)?,
            choice: Choice {
                bcast_long: or(&settings::COLL_BCAST_LONG, CHOICE.bcast_long)?,
                allreduce_long: or(&settings::COLL_ALLREDUCE_LONG, CHOICE.allreduce_long)?,
                allgather_short: or(&settings::COLL_ALLGATHER_SHORT, CHOICE.allgather_short)?,
            },
            several_hosts: seen.len() > 1,
            job_hosts,
        })
    }
}

/// The tuning of the job this process is in (set when the library joins
/// it; the defaults before).
static TUNING: Mutex<Option<Arc<Tuning>>> = Mutex::new(None);

pub fn set(t: Tuning) {
    *TUNING.lock().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(t));
}

pub fn current() -> Arc<Tuning> {
    let mut t = TUNING.lock().unwrap_or_else(|e| e.into_inner());
    t.get_or_insert_with(Default::default).clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_parse_their_names_and_refuse_others_listing_them() {
        assert_eq!(
            "scatter-allgather".parse::<Bcast>(),
            Ok(Bcast::ScatterAllgather)
        );
        assert_eq!("ring".parse::<Allgather>(), Ok(Allgather::Ring));
        assert_eq!("off".parse::<HostAware>(), Ok(HostAware(false)));
        let e = "tree".parse::<Allreduce>().unwrap_err();
        assert!(e.contains("auto, recursive-doubling, rabenseifner"), "{e}");
    }
}
