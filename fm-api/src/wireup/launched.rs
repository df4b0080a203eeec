//! A job started by a PMI or PMIx launcher: what each rank learns from
//! the launcher's key-value space, the watch over its host's other ranks,
//! and ending the job through the launcher.

use super::space::{KeyValueSpace, Space};
use super::{pmi, pmix, Bootstrap};
use crate::config::Config;
use crate::error::{ErrorKind, Result};
use fm_devices::shmem::segment::PeerWatch;
use fm_devices::JobKey;
use fm_grm::proto::{DeviceEndpoint, Node};
use fm_platform::hex;
use std::sync::{Arc, Mutex};
use std::time::Duration;

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
            p.put("fm-secret", &hex::encode(&rand::random::<[u8; 32]>()))
                .map_err(pmi_error)?;
        }
        // The launcher's names for the hosts, or each rank's own (and its
        // pid) through the space.
        let named = p.hosts().map_err(pmi_error)?;
        if named.is_none() {
            let me = format!(
                "{}.{}",
                hex::encode(config.host.as_bytes()),
                std::process::id()
            );
            p.put("fm-host", &me).map_err(pmi_error)?;
        }
        p.fence().map_err(pmi_error)?;
        let secret = p.get(0, "fm-secret").map_err(pmi_error)?;
        let key_bytes = hex::decode(&secret)
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
                            let h = String::from_utf8(hex::decode(h)?).ok()?;
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
                .map(|e| format!("{}:{}", e.device, hex::encode(&e.address)))
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
                        .and_then(|(d, a)| Some((d.to_string(), hex::decode(a)?)))
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
                        crate::wait::job_ended_under_this_process(reason.clone());
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
