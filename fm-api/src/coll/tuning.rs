//! How the collectives choose their algorithms: the `FM_COLL_*` settings
//! (docs/CONFIG.md), read once when a process joins its job (by
//! `Fm::build` and `MPI_Init`), and the job's hosts, which say who shares
//! memory with whom.

use crate::config::env_only;
use crate::settings::{self, Setting};
use crate::Result;
use fm_coll::choose::{Choice, Rules, CHOICE};
use std::str::FromStr;
use std::sync::Arc;

/// `FM_COLL_HOSTS`: whether collectives go in two levels on groups
/// spread over hosts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostAware(pub bool);

fm_coll::by_name!(HostAware {
    "auto" => HostAware(true),
    "off" => HostAware(false),
});

/// Everything the collectives choose by.
#[derive(Clone, Debug)]
pub struct Tuning {
    pub host_aware: bool,
    pub rules: Rules,
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
            rules: Rules::default(),
            job_hosts: Arc::new([]),
            several_hosts: false,
        }
    }
}

impl Tuning {
    /// The settings from the environment, for a job whose ranks are on
    /// `hosts` (by rank); a bad value is an error naming its variable.
    pub fn from_env(hosts: &[&str]) -> Result<Tuning> {
        fn or<T: FromStr>(s: &'static Setting, default: T) -> Result<T>
        where
            T::Err: std::fmt::Display,
        {
            Ok(env_only::<T>(s)?.unwrap_or(default))
        }
        let mut seen: Vec<&str> = Vec::new();
        let job_hosts: Arc<[u32]> = (hosts.iter())
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
            rules: Rules {
                bcast: or(&settings::COLL_BCAST, Default::default())?,
                allreduce: or(&settings::COLL_ALLREDUCE, Default::default())?,
                allgather: or(&settings::COLL_ALLGATHER, Default::default())?,
                choice: Choice {
                    bcast_long: or(&settings::COLL_BCAST_LONG, CHOICE.bcast_long)?,
                    allreduce_long: or(&settings::COLL_ALLREDUCE_LONG, CHOICE.allreduce_long)?,
                    allgather_short: or(&settings::COLL_ALLGATHER_SHORT, CHOICE.allgather_short)?,
                },
            },
            several_hosts: seen.len() > 1,
            job_hosts,
        })
    }
}
