//! Where a process learns its job: its rank and the job's size, the host of
//! every rank, the job's secret (the key of its segments and packets), and
//! the device endpoints of the ranks on other hosts. One [`Bootstrap`]
//! source is chosen at init (`FM_BOOTSTRAP`, by default from what the
//! launcher set): fmrun's resource manager, a PMI launcher (MPICH's
//! `mpiexec`, `srun --mpi=pmi2`), or the configuration itself.

pub mod pmi;
pub mod pmix;

use crate::config::{Config, GrmJoin};
use crate::error::{ErrorKind, Result};
use crate::settings;
use fm_devices::shmem::segment::PeerWatch;
use fm_devices::JobKey;
use fm_grm::proto::{DeviceEndpoint, Node};
use fm_grm::Membership;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Where the job's facts come from.
#[derive(Clone, Debug)]
pub enum Bootstrap {
    /// They are in the configuration: `FM_RANK`, `FM_SIZE`, `FM_JOB_KEY`
    /// and `FM_HOSTS`, a job of one, or a [`Config`] built by hand.
    Given,
    /// fmrun's resource manager (`FM_GRM`): it checks the job's token and
    /// sends the node map once every rank joined.
    Grm(GrmJoin),
    /// The launcher's PMI server (`PMI_FD` or `PMI_PORT`), over this wire
    /// protocol.
    Pmi(pmi::Wire),
    /// The launcher's PMIx server, through OpenPMIx's client library (this
    /// file: `FM_PMIX_LIBRARY`).
    Pmix(String),
}

/// A launcher's key-value space, as PMI-1, PMI-2 and PMIx serve it: each
/// process puts keys, a fence makes them visible, any process gets what
/// another put.
pub(crate) trait KeyValueSpace: Send {
    fn rank(&self) -> u32;
    fn size(&self) -> usize;
    /// Each rank's host as the launcher names it, where it says (PMIx);
    /// otherwise the ranks tell each other theirs.
    fn hosts(&mut self) -> std::result::Result<Option<Vec<String>>, pmi::PmiError>;
    fn put(&mut self, key: &str, value: &str) -> std::result::Result<(), pmi::PmiError>;
    /// Wait until every process put what it puts before its fence.
    fn fence(&mut self) -> std::result::Result<(), pmi::PmiError>;
    /// What `rank` put under `key`.
    fn get(&mut self, rank: u32, key: &str) -> std::result::Result<String, pmi::PmiError>;
    /// End the whole job: the launcher kills every process and reports `code`.
    fn abort(&mut self, code: i32, message: &str);
    fn finalize(&mut self) -> std::result::Result<(), pmi::PmiError>;
}

/// PMI's space is one for the whole job: a key is made the putter's own by
/// its rank.
impl KeyValueSpace for pmi::Pmi {
    fn rank(&self) -> u32 {
        self.rank
    }
    fn size(&self) -> usize {
        self.size
    }
    fn hosts(&mut self) -> std::result::Result<Option<Vec<String>>, pmi::PmiError> {
        Ok(None)
    }
    fn put(&mut self, key: &str, value: &str) -> std::result::Result<(), pmi::PmiError> {
        let k = format!("{key}-{}", self.rank);
        pmi::Pmi::put(self, &k, value)
    }
    fn fence(&mut self) -> std::result::Result<(), pmi::PmiError> {
        pmi::Pmi::fence(self)
    }
    fn get(&mut self, rank: u32, key: &str) -> std::result::Result<String, pmi::PmiError> {
        pmi::Pmi::get(self, &format!("{key}-{rank}"))
    }
    fn abort(&mut self, code: i32, message: &str) {
        pmi::Pmi::abort(self, code, message)
    }
    fn finalize(&mut self) -> std::result::Result<(), pmi::PmiError> {
        pmi::Pmi::finalize(self)
    }
}

impl KeyValueSpace for pmix::Pmix {
    fn rank(&self) -> u32 {
        self.rank
    }
    fn size(&self) -> usize {
        self.size
    }
    fn hosts(&mut self) -> std::result::Result<Option<Vec<String>>, pmi::PmiError> {
        pmix::Pmix::hosts(self).map(Some)
    }
    fn put(&mut self, key: &str, value: &str) -> std::result::Result<(), pmi::PmiError> {
        pmix::Pmix::put(self, key, value)
    }
    fn fence(&mut self) -> std::result::Result<(), pmi::PmiError> {
        pmix::Pmix::fence(self)
    }
    fn get(&mut self, rank: u32, key: &str) -> std::result::Result<String, pmi::PmiError> {
        self.get_from(rank, key)
    }
    fn abort(&mut self, code: i32, message: &str) {
        pmix::Pmix::abort(self, code, message)
    }
    fn finalize(&mut self) -> std::result::Result<(), pmi::PmiError> {
        pmix::Pmix::finalize(self)
    }
}

type Space = Arc<Mutex<Box<dyn KeyValueSpace>>>;

/// What `FM_BOOTSTRAP` asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Asked {
    Auto,
    Env,
    Grm,
    Pmi(pmi::Wire),
    Pmix,
}

/// `FM_BOOTSTRAP`, or what the launcher's variables say under `auto`.
pub(crate) fn asked() -> Result<Asked> {
    let asked = match settings::BOOTSTRAP.env() {
        None => Asked::Auto,
        Some(v) => match v.trim() {
            "" | "auto" => Asked::Auto,
            "env" => Asked::Env,
            "grm" => Asked::Grm,
            "pmi1" => Asked::Pmi(pmi::Wire::V1),
            "pmi2" => Asked::Pmi(pmi::Wire::V2),
            "pmix" => Asked::Pmix,
            _ => {
                return Err(ErrorKind::Env {
                    var: settings::BOOTSTRAP.var,
                    value: v.clone(),
                    reason: "known values: auto, grm, pmi1, pmi2, pmix, env".into(),
                }
                .into())
            }
        },
    };
    let set = |v: &str| std::env::var_os(v).is_some();
    Ok(match asked {
        Asked::Auto if settings::GRM.env().is_some() => Asked::Grm,
        // Slurm's pmi2 plugin names the job; hydra does not, and speaks both.
        Asked::Auto if set("PMI_FD") || set("PMI_PORT") => Asked::Pmi(match set("PMI_JOBID") {
            true => pmi::Wire::V2,
            false => pmi::Wire::V1,
        }),
        Asked::Auto if set("PMIX_NAMESPACE") => Asked::Pmix,
        Asked::Auto => Asked::Env,
        a => a,
    })
}

/// How a process is joined to its job once its devices are open; held by
/// [`crate::Fm`] and dropped last.
pub(crate) enum Joined {
    Given,
    Grm(Membership),
    Pmi(PmiJob),
}

/// A job under a PMI launcher: the connection (finalized when dropped) and
/// the watch over this host's other ranks.
pub(crate) struct PmiJob {
    space: Space,
    /// The job's secret (hex), which rank 0 chose and put for all.
    pub secret: String,
    /// Every rank's pid, as each put it.
    pids: Vec<u32>,
    /// Stops the watch when the process leaves the job.
    stop: Arc<std::sync::atomic::AtomicBool>,
}

/// The PMI connection of this process's job, for [`abort`].
static LAUNCHER: Mutex<Option<Space>> = Mutex::new(None);

/// End the whole job with exit status `code` through the launcher that
/// started it, where that is a PMI launcher (`MPI_Abort`): it kills every
/// rank and reports `code`. Returns whether one was told; fmrun needs no
/// telling (it sees the exit status of the rank that aborts).
pub fn abort(code: i32, reason: &str) -> bool {
    let launcher = LAUNCHER.lock().unwrap_or_else(|p| p.into_inner()).clone();
    match launcher {
        Some(space) => {
            space
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .abort(code, reason);
            true
        }
        None => false,
    }
}

/// How often a rank under a PMI launcher looks for a dead peer on its host.
const WATCH_EVERY: Duration = Duration::from_millis(200);

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

fn pmi_error(e: pmi::PmiError) -> crate::FmError {
    ErrorKind::Config(format!("PMI launcher: {e}")).into()
}

/// A value another rank put that fm cannot read: named with its key.
fn unreadable(key: &str, value: &str) -> crate::FmError {
    ErrorKind::Config(format!(
        "PMI launcher: the value of {key:?} is not fm's ({value:?}): do all ranks run the same fm?"
    ))
    .into()
}

impl PmiJob {
    /// Connect to the launcher and learn the job: rank, size and every
    /// rank's host into `config`, the job's key from the secret rank 0
    /// put (the launcher's key-value space is private to the job:
    /// docs/SECURITY.md). One fence.
    pub fn start(bootstrap: &Bootstrap, config: &mut Config) -> Result<PmiJob> {
        let mut p: Box<dyn KeyValueSpace> = match bootstrap {
            Bootstrap::Pmi(wire) => Box::new(pmi::Pmi::connect(*wire).map_err(pmi_error)?),
            Bootstrap::Pmix(library) => Box::new(pmix::Pmix::connect(library).map_err(pmi_error)?),
            _ => unreachable!("PmiJob::start under {bootstrap:?}"),
        };
        match PmiJob::learn(p.as_mut(), config) {
            Ok((secret, pids)) => Ok(PmiJob {
                space: Arc::new(Mutex::new(p)),
                secret,
                pids,
                stop: Arc::default(),
            }),
            Err(e) => {
                // The others may wait at a fence for this rank: end the job.
                p.abort(1, &e.to_string());
                Err(e)
            }
        }
    }

    /// [`PmiJob::start`]'s exchange; returns the secret and every pid.
    fn learn(p: &mut dyn KeyValueSpace, config: &mut Config) -> Result<(String, Vec<u32>)> {
        let (rank, size) = (p.rank() as usize, p.size());
        if size == 0 || size > fm_grm::proto::MAX_JOB as usize || rank >= size {
            return Err(ErrorKind::Config(format!(
                "PMI launcher: rank {rank} of {size} is outside what fm runs (1 to {} ranks)",
                fm_grm::proto::MAX_JOB
            ))
            .into());
        }
        if rank == 0 {
            p.put("fm-secret", &hex(&rand::random::<[u8; 32]>()))
                .map_err(pmi_error)?;
        }
        // The launcher's names for the hosts, or each rank's own (and its
        // pid) through the space.
        let named = p.hosts().map_err(pmi_error)?;
        if named.is_none() {
            let me = format!("{}.{}", hex(config.host.as_bytes()), std::process::id());
            p.put("fm-host", &me).map_err(pmi_error)?;
        }
        p.fence().map_err(pmi_error)?;
        let secret = p.get(0, "fm-secret").map_err(pmi_error)?;
        let key_bytes = unhex(&secret)
            .filter(|b| b.len() == 32)
            .ok_or_else(|| unreadable("fm-secret", &secret))?;
        let (hosts, pids) = match named {
            Some(hosts) if hosts.len() == size => {
                config.host = hosts[rank].clone();
                (hosts, vec![0; size])
            }
            Some(hosts) => {
                return Err(ErrorKind::Config(format!(
                    "PMI launcher: {} host names for {size} ranks",
                    hosts.len()
                ))
                .into())
            }
            None => {
                let (mut hosts, mut pids) = (Vec::with_capacity(size), Vec::with_capacity(size));
                for r in 0..size {
                    let v = p.get(r as u32, "fm-host").map_err(pmi_error)?;
                    let (host, pid) = (v.split_once('.'))
                        .and_then(|(h, pid)| {
                            let h = String::from_utf8(unhex(h)?).ok()?;
                            Some((h, pid.parse::<u32>().ok()?))
                        })
                        .filter(|(h, _)| !h.is_empty())
                        .ok_or_else(|| unreadable(&format!("fm-host of rank {r}"), &v))?;
                    hosts.push(host);
                    pids.push(pid);
                }
                (hosts, pids)
            }
        };
        config.rank = rank as u32;
        config.size = size;
        config.hosts = hosts;
        let mut k = [0u8; 8];
        k.copy_from_slice(&key_bytes[..8]);
        config.job_key = JobKey(u64::from_le_bytes(k));
        Ok((secret, pids))
    }

    /// Publish this rank's device endpoints and, after a fence, read those
    /// of the ranks on other hosts: the node map. A job on one host has no
    /// endpoints to exchange, and no fence.
    pub fn exchange(&self, config: &Config, endpoints: &[DeviceEndpoint]) -> Result<Vec<Node>> {
        let mut p = self.space.lock().unwrap_or_else(|p| p.into_inner());
        let remote = config.hosts.iter().any(|h| *h != config.host);
        if remote {
            let mine: Vec<String> = (endpoints.iter())
                .map(|e| format!("{}:{}", e.device, hex(&e.address)))
                .collect();
            let value = mine.join(",");
            p.put("fm-ep", &value).map_err(pmi_error)?;
            p.fence().map_err(pmi_error)?;
        }
        let mut nodes = Vec::with_capacity(config.size);
        for (r, host) in config.hosts.iter().enumerate() {
            let mut endpoints = Vec::new();
            if *host != config.host {
                let k = format!("fm-ep of rank {r}");
                let v = p.get(r as u32, "fm-ep").map_err(pmi_error)?;
                for e in v.split(',').filter(|e| !e.is_empty()) {
                    let (device, address) = (e.split_once(':'))
                        .and_then(|(d, a)| Some((d.to_string(), unhex(a)?)))
                        .ok_or_else(|| unreadable(&k, &v))?;
                    endpoints.push(DeviceEndpoint { device, address });
                }
            }
            nodes.push(Node {
                rank: r as u32,
                host: host.clone(),
                pid: self.pids[r],
                contexts: Vec::new(),
                endpoints,
            });
        }
        Ok(nodes)
    }

    /// End the job through the launcher (it kills every rank and reports).
    pub fn aborter(&self) -> impl Fn(&str) + Send + Sync + 'static {
        let space = self.space.clone();
        move |reason| {
            tracing::error!("fm: ending the job through the launcher: {reason}");
            (space.lock().unwrap_or_else(|p| p.into_inner())).abort(1, reason);
        }
    }

    /// Let [`abort`] end the job through this launcher.
    pub fn serve_abort(&self) {
        *LAUNCHER.lock().unwrap_or_else(|p| p.into_inner()) = Some(self.space.clone());
    }

    /// Watch the other ranks on this host: one that died without closing
    /// fm (killed, crashed) ends the job here — every wait fails with the
    /// reason — and through the launcher, which a PMI launcher does not do
    /// by itself (`srun` lets the others run on). Ranks on other hosts are
    /// watched by theirs, and by the reliable layer's dead-peer timeout.
    pub fn watch(&self, peers: PeerWatch, host: String) {
        let (stop, abort) = (self.stop.clone(), self.aborter());
        let spawned = std::thread::Builder::new()
            .name("fm-pmi-watch".into())
            .spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let dead = peers.dead();
                    if !dead.is_empty() {
                        let who: Vec<String> = (dead.iter())
                            .map(|(rank, pid)| format!("rank {rank} (pid {pid} on {host})"))
                            .collect();
                        let reason = format!(
                            "{} ended without leaving the job (killed or crashed)",
                            who.join(", ")
                        );
                        crate::wait::job_ended_by_grm(reason.clone());
                        abort(&reason);
                        return;
                    }
                    if crate::wait::job_end_reason().is_some() {
                        return;
                    }
                    std::thread::sleep(WATCH_EVERY);
                }
            });
        if let Err(e) = spawned {
            tracing::warn!("fm: cannot watch this host's ranks for deaths: {e}");
        }
    }
}

impl Drop for PmiJob {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        LAUNCHER.lock().unwrap_or_else(|p| p.into_inner()).take();
        let mut p = self.space.lock().unwrap_or_else(|p| p.into_inner());
        if let Err(e) = p.finalize() {
            tracing::debug!("fm: PMI finalize: {e}");
        }
    }
}
