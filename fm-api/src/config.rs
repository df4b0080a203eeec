//! Configuration of one FM process: from the environment `fmrun` sets, or
//! built by hand for tests and embedding. Every knob, its variable and its
//! default is listed in docs/CONFIG.md.

use crate::config_file::ConfigFile;
use crate::error::{ErrorKind, FmError, Result};
use crate::settings;
use crate::wireup::{self, Asked, Bootstrap};
use fm_devices::shmem::{CmaMode, ShmemSettings};
use fm_devices::{JobKey, Rank};
use fm_platform as sys;
use fm_platform::setting::{Scope, Setting};
use std::path::PathBuf;
use std::time::Duration;

/// Which networks a process opens between hosts (`FM_NET`); self and
/// shmem are always there, null takes the ranks no network reaches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Net {
    pub nic: Want,
    pub ethernet: bool,
}

/// Whether to open a device that may be unavailable here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Want {
    No,
    /// Open it if this process can (CAP_NET_RAW, the interface exists);
    /// otherwise say why in one line and go on without it.
    IfAvailable,
    /// Open it or fail.
    Required,
}

impl Net {
    /// Every network: nic where it can open (between hosts on one layer-2
    /// network), else ethernet.
    pub const AUTO: Net = Net {
        nic: Want::IfAvailable,
        ethernet: true,
    };
    /// Desktop-only: the NULL transport between hosts.
    pub const NULL: Net = Net {
        nic: Want::No,
        ethernet: false,
    };

    /// `auto`, `null`, or a comma-separated list of devices
    /// (`self,shmem,nic,ethernet,null`). A list with nic but without
    /// ethernet requires nic; with both, ethernet is the fallback; with
    /// neither, hosts are joined by the NULL transport.
    pub fn parse(v: &str) -> std::result::Result<Net, String> {
        match v.trim() {
            "" | "auto" => Ok(Net::AUTO),
            "null" => Ok(Net::NULL),
            list => {
                let mut net = Net::NULL;
                for d in list.split(',').map(str::trim) {
                    match d {
                        "self" | "shmem" | "null" => {}
                        "ethernet" => net.ethernet = true,
                        "nic" => net.nic = Want::Required,
                        _ => {
                            return Err(format!(
                                "unknown device {d:?} (known: auto, null, or a list of self, shmem, nic, ethernet, null)"
                            ))
                        }
                    }
                }
                if net.ethernet && net.nic == Want::Required {
                    net.nic = Want::IfAvailable;
                }
                Ok(net)
            }
        }
    }
}

/// Where and how to join a job through the resource manager.
#[derive(Clone, Debug)]
pub struct GrmJoin {
    /// `host:port` of the GRM (`FM_GRM`).
    pub addr: String,
    /// The job's token (`FM_JOB_TOKEN`).
    pub token: String,
    /// The rank asked for (`FM_RANK`), or any free one.
    pub rank: Option<Rank>,
}

#[derive(Clone, Debug)]
pub struct Config {
    /// Where rank, size, job key and hosts come from: anything but
    /// [`Bootstrap::Given`] overwrites the fields below at init.
    pub bootstrap: Bootstrap,
    pub rank: Rank,
    pub size: usize,
    pub job_key: JobKey,
    /// Name of this host.
    pub host: String,
    /// Host of every rank; ranks on `host` talk over shared memory.
    pub hosts: Vec<String>,
    pub net: Net,
    /// The shmem device (`FM_SHM_*`, `FM_ATTACH_TIMEOUT`), as it takes
    /// them; `attach_timeout` also bounds the wait for the GRM's node map.
    pub shm: ShmemSettings,
    /// Pieces at least this long go by single copy where the device can.
    pub cma_threshold: usize,
    /// Pieces from this long up to `cma_threshold` go by frames or by
    /// single copy, whichever is measured faster towards the peer
    /// (`FM_SHM_CMA_ADAPT`); `None`: always frames below the threshold.
    pub cma_adapt_from: Option<usize>,
    /// Upper bound on the credit window per destination (packets).
    pub max_credits: Option<u32>,
    /// Bound on the bytes a sender out of credit copies aside
    /// (`FM_STASH_BYTES`; endpoint.rs, "The stash and its bound").
    pub stash_bytes: usize,
    /// Limit on fm's internal waits (`FM_WAIT_TIMEOUT`, seconds); `None`:
    /// wait for ever.
    pub wait_timeout: Option<Duration>,
    /// How waits spend their time (`FM_WAIT`).
    pub wait: crate::wait::WaitMode,
    /// A blocking wait's busy period (`FM_WAIT_SPIN_US`).
    pub wait_spin: Duration,
    /// What the pacer may do (`FM_PACER`).
    pub pacer: fm_pacer::Mode,
    /// CPUs this host gives the job (`FM_CPUS`); default: those this
    /// process may run on. More local ranks than that: waits yield.
    pub cpus: Option<usize>,
    /// The ethernet device's addresses and datagram size (`FM_ETH_ADDR`,
    /// `FM_ETH_IFACES`, `FM_ETH_RANGE`, `FM_ETH_MTU`).
    pub eth: EthSettings,
    /// The reliable layer under ethernet and nic (`FM_ETH_WINDOW`, `_POOL`,
    /// `_RTO_US`, `_DEAD_AFTER`, `_CHECKSUM`, `FM_FAULTS`), as the devices
    /// take it.
    pub reliable: fm_devices::reliable::Settings,
    /// The nic device (`FM_NIC_*`).
    pub nic: NicSettings,
    /// The device for each rank (`FM_ROUTES`, set by `fmrun --topology`);
    /// `None`: the fastest open device that reaches it.
    pub routes: Option<Vec<fm_devices::DeviceKind>>,
}

/// Settings of the nic device.
#[derive(Clone, Debug, Default)]
pub struct NicSettings {
    /// Interfaces, one link each (`FM_NIC_IFACES`); default: the interface
    /// of the ethernet device's address, unless that is loopback.
    pub ifaces: Vec<String>,
    pub ethertype: Option<u16>,
    pub mtu: Option<usize>,
    pub frames: Option<usize>,
    /// The layer-2 network's name (`FM_NIC_NETWORK`); default: the first
    /// interface's IPv4 network.
    pub network: Option<String>,
}

/// Settings of the ethernet device.
#[derive(Clone, Debug, Default)]
pub struct EthSettings {
    /// Addresses to bind, one per link (`FM_ETH_ADDR`, or the interfaces of
    /// `FM_ETH_IFACES`); default: the one this host uses to reach the GRM.
    /// Several = trunking.
    pub addrs: Vec<std::net::IpAddr>,
    pub mtu: Option<usize>,
    /// Bind this host's address in this network (`FM_ETH_RANGE`), when no
    /// address or interface is given.
    pub range: Option<sys::Ipv4Net>,
}

impl Config {
    /// A job of `size` ranks on this host, this process being `rank`.
    pub fn local(rank: Rank, size: usize, job_key: JobKey) -> Config {
        let host = sys::hostname();
        Config {
            bootstrap: Bootstrap::Given,
            rank,
            size,
            job_key,
            hosts: vec![host.clone(); size],
            host,
            net: Net::AUTO,
            shm: ShmemSettings::default(),
            // Single copy (process_vm_readv) only pays beyond a few MiB on the
            // machines measured: below, the pipelined frame path is faster.
            cma_threshold: 8 << 20,
            // Below 64 KiB single copy's fixed cost (~2.5 µs) never pays
            // when the ranks share a cache, and the frames are the default.
            cma_adapt_from: Some(64 << 10),
            max_credits: None,
            stash_bytes: 16 << 20,
            wait_timeout: None,
            wait: crate::wait::WaitMode::Auto,
            wait_spin: crate::wait::DEFAULT_SPIN,
            pacer: fm_pacer::Mode::Auto,
            cpus: None,
            eth: EthSettings::default(),
            reliable: fm_devices::reliable::Settings::default(),
            nic: NicSettings::default(),
            routes: None,
        }
    }

    /// From the environment: under fmrun (`FM_GRM`), a PMI launcher
    /// (`PMI_FD`), or `FM_RANK` and `FM_SIZE` (`FM_BOOTSTRAP` chooses; see
    /// [`crate::wireup`]). With none of these this is a singleton job (rank
    /// 0 of 1), as MPI does for a program started by hand.
    pub fn from_env() -> Result<Config> {
        match wireup::asked()? {
            Asked::Grm => match settings::GRM.env() {
                Some(addr) => Config::from_env_with_grm(addr),
                None => Err(ErrorKind::Config(
                    "FM_BOOTSTRAP=grm but FM_GRM is not set (start the job with fmrun)".into(),
                )
                .into()),
            },
            Asked::Pmi(wire) => {
                // Rank, size, key and hosts come from the launcher at init.
                let mut cfg = Config::local(0, 1, JobKey(0));
                cfg.bootstrap = Bootstrap::Pmi(wire);
                cfg.apply_env()?;
                Ok(cfg)
            }
            Asked::Pmix => {
                let mut cfg = Config::local(0, 1, JobKey(0));
                let library = settings::PMIX_LIBRARY.env();
                cfg.bootstrap = Bootstrap::Pmix(library.unwrap_or_else(|| "libpmix.so.2".into()));
                cfg.apply_env()?;
                Ok(cfg)
            }
            Asked::Auto | Asked::Env => Config::from_env_given(),
        }
    }

    /// The job as `FM_RANK`, `FM_SIZE`, `FM_JOB_KEY` and `FM_HOSTS` say,
    /// or a job of one.
    fn from_env_given() -> Result<Config> {
        let rank: Option<u32> = env_only(&settings::RANK)?;
        let size: Option<usize> = env_only(&settings::SIZE)?;
        let (rank, size) = match (rank, size) {
            (None, None) => (0, 1),
            (Some(r), Some(s)) => (r, s),
            _ => {
                return Err(ErrorKind::Config(
                    "FM_RANK and FM_SIZE must be set together (fmrun sets both)".into(),
                )
                .into())
            }
        };
        if size == 0 || size > fm_grm::proto::MAX_JOB as usize {
            return Err(ErrorKind::Env {
                var: settings::SIZE.var,
                value: size.to_string(),
                reason: format!("must be 1 to {}", fm_grm::proto::MAX_JOB),
            }
            .into());
        }
        if rank as usize >= size {
            return Err(ErrorKind::Env {
                var: settings::RANK.var,
                value: rank.to_string(),
                reason: format!("must be below FM_SIZE={size}"),
            }
            .into());
        }
        let job_key = match settings::JOB_KEY.env() {
            Some(v) => JobKey(u64::from_str_radix(v.trim(), 16).map_err(|e| ErrorKind::Env {
                var: settings::JOB_KEY.var,
                value: v.clone(),
                reason: format!("not a hexadecimal job key: {e}"),
            })?),
            None if size == 1 => JobKey(rand::random()),
            None => {
                return Err(ErrorKind::Config(
                    "FM_JOB_KEY is not set: every rank of a job must share one key (start the job with fmrun)".into(),
                ).into())
            }
        };
        let mut cfg = Config::local(rank, size, job_key);
        cfg.apply_env()?;
        cfg.hosts = match settings::HOSTS.env() {
            Some(v) => {
                let hosts: Vec<String> = v.split(',').map(|s| s.trim().to_string()).collect();
                if hosts.len() != size || hosts.iter().any(|h| h.is_empty()) {
                    return Err(ErrorKind::Env {
                        var: settings::HOSTS.var,
                        value: v,
                        reason: format!("must name one host for each of the {size} ranks"),
                    }
                    .into());
                }
                hosts
            }
            None => vec![cfg.host.clone(); size],
        };
        if cfg.hosts[rank as usize] != cfg.host {
            return Err(ErrorKind::Config(format!(
                "FM_HOSTS puts rank {rank} on host {:?} but this is {:?} (set FM_HOST)",
                cfg.hosts[rank as usize], cfg.host
            ))
            .into());
        }
        Ok(cfg)
    }

    /// Under `fmrun`: the GRM at `addr` gives rank, size, key and node map.
    fn from_env_with_grm(addr: String) -> Result<Config> {
        let token = settings::JOB_TOKEN.env().ok_or_else(|| {
            ErrorKind::Config(
                "FM_GRM is set but FM_JOB_TOKEN is not: the job's token comes with the GRM's address (start the job with fmrun)".into(),
            )
        })?;
        // Started by srun (fmrun in a Slurm allocation): Slurm numbers the tasks.
        let rank: Option<u32> = match env_only(&settings::RANK)? {
            Some(r) => Some(r),
            None => match std::env::var("SLURM_PROCID") {
                Ok(v) => Some(v.trim().parse().map_err(|e: std::num::ParseIntError| {
                    ErrorKind::Config(format!("SLURM_PROCID={v:?}: {e}"))
                })?),
                Err(_) => None,
            },
        };
        let mut cfg = Config::local(0, 1, JobKey(0));
        cfg.bootstrap = Bootstrap::Grm(GrmJoin { addr, token, rank });
        cfg.apply_env()?;
        Ok(cfg)
    }

    /// The settings every process reads, however it finds its job.
    fn apply_env(&mut self) -> Result<()> {
        let file = ConfigFile::load().map_err(ErrorKind::Config)?;
        let vars = Vars {
            file: file.as_ref(),
        };
        self.apply(&vars).map_err(|e| vars.locate(e))
    }

    fn apply(&mut self, vars: &Vars) -> Result<()> {
        if let Some(h) = vars.get(&settings::HOST)? {
            self.host = h;
        } else if let Ok(h) = std::env::var("SLURMD_NODENAME") {
            // A Slurm task: the node's name in the allocation.
            self.host = h;
        }
        self.pacer = vars.pacer()?;
        if let Some(v) = vars.get(&settings::NET)? {
            self.net = Net::parse(&v).map_err(|reason| env_error(&settings::NET, &v, reason))?;
        }
        if let Some(v) = vars.get(&settings::ROUTES)? {
            let routes =
                parse_routes(&v).map_err(|reason| env_error(&settings::ROUTES, &v, reason))?;
            self.routes = Some(routes);
        }
        self.max_credits = vars.within(&settings::CREDITS, "credit", 1..=65536)?;
        if let Some(b) = vars.parse(&settings::STASH_BYTES)? {
            self.stash_bytes = b;
        }
        if let Some(s) = vars.within::<u64>(&settings::WAIT_TIMEOUT, "second", 1..=31_536_000)? {
            self.wait_timeout = Some(Duration::from_secs(s));
        }
        if let Some(v) = vars.get(&settings::WAIT)? {
            self.wait = v
                .parse()
                .map_err(|reason| env_error(&settings::WAIT, &v, reason))?;
        }
        if let Some(us) = vars.parse::<u64>(&settings::WAIT_SPIN_US)? {
            self.wait_spin = Duration::from_micros(us);
        }
        self.cpus = vars.within(&settings::CPUS, "CPU", 1..=65536)?;
        self.apply_shmem(vars)?;
        self.apply_ethernet(vars)?;
        self.apply_nic(vars)
    }

    /// The shmem device's settings (`fm_devices::shmem::settings`).
    fn apply_shmem(&mut self, vars: &Vars) -> Result<()> {
        use fm_devices::shmem::settings as shm;
        if let Some(d) = vars.shm_dir()? {
            self.shm.dir = d;
        }
        self.shm.queues = vars.parse(&shm::SHM_QUEUES)?;
        self.shm.frames = vars.parse(&shm::SHM_FRAMES)?;
        self.shm.payload = vars.parse(&shm::SHM_PAYLOAD)?;
        if let Some(inline) = vars.switch(&shm::SHM_INLINE, "1", "0")? {
            self.shm.inline = inline;
        }
        if let Some(v) = vars.get(&shm::SHM_CMA)? {
            self.shm.cma = match v.as_str() {
                "auto" | "on" | "1" => CmaMode::Auto,
                "off" | "0" => CmaMode::Off,
                _ => {
                    return Err(env_error(
                        &shm::SHM_CMA,
                        &v,
                        "known values: auto, off".into(),
                    ))
                }
            };
        }
        if let Some(t) = vars.parse(&shm::SHM_CMA_THRESHOLD)? {
            self.cma_threshold = t;
        }
        if let Some(v) = vars.get(&shm::SHM_CMA_ADAPT)? {
            self.cma_adapt_from = match v.trim() {
                "off" => None,
                n => Some(n.parse().map_err(|e: std::num::ParseIntError| {
                    env_error(
                        &shm::SHM_CMA_ADAPT,
                        &v,
                        format!("a size in bytes, or off ({e})"),
                    )
                })?),
            };
        }
        if let Some(s) = vars.parse::<u64>(&shm::ATTACH_TIMEOUT)? {
            self.shm.attach_timeout = Duration::from_secs(s);
        }
        Ok(())
    }

    /// The ethernet device's and the reliable layer's settings.
    fn apply_ethernet(&mut self, vars: &Vars) -> Result<()> {
        use fm_devices::ethernet::settings as eth;
        use fm_devices::reliable::settings as rel;
        if let Some(v) = vars.get(&eth::ETH_ADDR)? {
            self.eth.addrs = (v.split(','))
                .map(|a| a.trim().parse())
                .collect::<std::result::Result<_, _>>()
                .map_err(|e: std::net::AddrParseError| {
                    env_error(&eth::ETH_ADDR, &v, e.to_string())
                })?;
        }
        if let Some(v) = vars.get(&eth::ETH_IFACES)? {
            self.eth.addrs = (v.split(','))
                .map(|n| {
                    fm_devices::ethernet::interface_addr(n.trim()).ok_or_else(|| {
                        let why = format!("interface {:?} has no IPv4 address here", n.trim());
                        env_error(&eth::ETH_IFACES, &v, why)
                    })
                })
                .collect::<Result<_>>()?;
        }
        if let Some(v) = vars.get(&eth::ETH_RANGE)? {
            let range = v
                .parse()
                .map_err(|reason| env_error(&eth::ETH_RANGE, &v, reason))?;
            self.eth.range = Some(range);
        }
        self.eth.mtu = vars.parse(&eth::ETH_MTU)?;
        let r = &mut self.reliable;
        if let Some(w) = vars.within(&rel::ETH_WINDOW, "packet", 1..=4096)? {
            r.window = w;
        }
        if let Some(us) = vars.within::<u64>(&rel::ETH_RTO_US, "µ", 10..=10_000_000)? {
            r.rto = Duration::from_micros(us);
        }
        if let Some(s) = vars.within::<u64>(&rel::ETH_DEAD_AFTER, "second", 1..=86_400)? {
            r.dead_after = Duration::from_secs(s);
        }
        if let Some(full) = vars.switch(&rel::ETH_CHECKSUM, "full", "header")? {
            r.payload_crc = full;
        }
        if let Some(mac) = vars.switch(&rel::ETH_AUTH, "mac", "none")? {
            r.authenticate = mac;
        }
        r.pool = vars.within(&rel::ETH_POOL, "packet", 1..=65536)?;
        if let Some(v) = vars.get(&rel::FAULTS)? {
            let f = fm_devices::reliable::Faults::parse(&v)
                .map_err(|reason| env_error(&rel::FAULTS, &v, reason))?;
            r.faults = Some(f);
        }
        Ok(())
    }

    /// The nic device's settings.
    fn apply_nic(&mut self, vars: &Vars) -> Result<()> {
        use fm_devices::nic::settings as nic;
        if let Some(v) = vars.get(&nic::NIC_IFACES)? {
            self.nic.ifaces = (v.split(','))
                .map(|n| n.trim().to_string())
                .filter(|n| !n.is_empty())
                .collect();
        }
        if let Some(v) = vars.get(&nic::NIC_ETHERTYPE)? {
            let t = v.trim();
            let parsed = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
                Some(h) => u16::from_str_radix(h, 16).ok(),
                None => t.parse().ok(),
            };
            let why = || "an EtherType from 0x0600 to 0xffff (default 0x88b5)".into();
            let ethertype = parsed.filter(|&e| e >= 0x0600);
            self.nic.ethertype =
                Some(ethertype.ok_or_else(|| env_error(&nic::NIC_ETHERTYPE, &v, why()))?);
        }
        self.nic.mtu = vars.parse(&nic::NIC_MTU)?;
        self.nic.frames = vars.within(&nic::NIC_FRAMES, "frame", 1..=65536)?;
        if let Some(v) = vars.get(&nic::NIC_NETWORK)? {
            self.nic.network = Some(v);
        }
        Ok(())
    }

    /// Ranks on this process's host.
    pub fn local_ranks(&self) -> Vec<Rank> {
        (0..self.size as Rank)
            .filter(|&r| self.hosts[r as usize] == self.host)
            .collect()
    }

    /// CPUs this host gives the job: `FM_CPUS`, else those this process
    /// may run on.
    pub fn job_cpus(&self) -> usize {
        self.cpus.unwrap_or_else(fm_platform::cpus_allowed)
    }

    /// More ranks on this host than it gives the job CPUs.
    pub fn oversubscribed(&self) -> bool {
        self.local_ranks().len() > self.job_cpus()
    }

    /// Whether this process's waits sleep after their busy period.
    pub fn wait_sleeps(&self) -> bool {
        self.wait.sleeps(self.oversubscribed())
    }
}

/// `FM_ROUTES`: the device for each rank in order, a run of equal ones
/// written once with its length: `self,shmem,nic*2,ethernet*4`.
pub fn encode_routes(routes: &[&str]) -> String {
    encode_runs(&routes.iter().map(|&d| (d, 1)).collect::<Vec<_>>())
}

/// [`encode_routes`] from runs `(device, ranks)`; adjacent runs of one
/// device are written as one.
pub fn encode_runs(runs: &[(&str, usize)]) -> String {
    let mut merged: Vec<(&str, usize)> = Vec::with_capacity(runs.len());
    for &(d, k) in runs {
        match merged.last_mut() {
            Some((m, n)) if *m == d => *n += k,
            _ => merged.push((d, k)),
        }
    }
    let words: Vec<String> = merged
        .iter()
        .map(|&(d, k)| match k {
            1 => d.to_string(),
            k => format!("{d}*{k}"),
        })
        .collect();
    words.join(",")
}

/// The devices of [`encode_routes`]'s form, one per rank.
pub fn parse_routes(v: &str) -> std::result::Result<Vec<fm_devices::DeviceKind>, String> {
    let mut out = Vec::new();
    for part in v.split(',').map(str::trim) {
        let (dev, n) = match part.split_once('*') {
            Some((d, n)) => (
                d,
                n.parse::<usize>()
                    .ok()
                    .filter(|&n| n > 0 && n <= fm_grm::proto::MAX_JOB as usize)
                    .ok_or_else(|| format!("{part:?}: a device and a count of ranks, as nic*2"))?,
            ),
            None => (part, 1),
        };
        let dev: fm_devices::DeviceKind = dev.parse()?;
        if out.len() + n > fm_grm::proto::MAX_JOB as usize {
            return Err(format!(
                "more than {} ranks",
                fm_grm::proto::MAX_JOB as usize
            ));
        }
        out.extend(std::iter::repeat_n(dev, n));
    }
    Ok(out)
}

/// Check the settings a rank started here now would read (the environment
/// and the settings file) without joining a job: the error a rank would
/// fail with, if any. For `fm-info doctor`.
pub fn check_settings() -> Result<()> {
    Config::local(0, 1, JobKey(0)).apply_env()
}

/// The fuzz target `fm_value` (fm-api/fuzz) and its corpus's replay: the
/// first byte picks a setting, the rest is its value in the environment;
/// reading the configuration gives it or an error naming the variable,
/// never a panic. It changes this process's environment (every `FM_*` is
/// removed first): one call at a time, in a process of its own. `FM_GRM`
/// (which would connect somewhere) is left out.
#[doc(hidden)]
pub fn fuzz_fm_value(data: &[u8]) {
    let Some((&pick, value)) = data.split_first() else {
        return;
    };
    let all: Vec<&Setting> = settings::all()
        .filter(|s| s.var != settings::GRM.var)
        .collect();
    let s = all[pick as usize % all.len()];
    let value = String::from_utf8_lossy(value).replace('\0', "");
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("FM_") {
            std::env::remove_var(k);
        }
    }
    std::env::set_var(s.var, &value);
    if let Err(e) = Config::from_env() {
        let e = e.to_string();
        assert!(!e.trim().is_empty(), "{}={value:?}: an empty error", s.var);
    }
    std::env::remove_var(s.var);
}

/// The segment directory (`FM_SHM_DIR`) from the environment or the
/// settings file, as a rank would find it (for fmrun and the tools, which
/// clean up and check what ranks create).
pub fn shm_dir() -> Result<PathBuf> {
    let file = ConfigFile::load().map_err(ErrorKind::Config)?;
    let vars = Vars {
        file: file.as_ref(),
    };
    let dir = vars.shm_dir().map_err(|e| vars.locate(e))?;
    Ok(dir.unwrap_or_else(|| ShmemSettings::default().dir))
}

/// `FM_PACER` from the environment or the settings file (for tools such as
/// `fm-info pacer` that open no endpoint).
pub fn pacer_mode() -> Result<fm_pacer::Mode> {
    let file = ConfigFile::load().map_err(ErrorKind::Config)?;
    let vars = Vars {
        file: file.as_ref(),
    };
    vars.pacer().map_err(|e| vars.locate(e))
}

/// Where settings come from: the environment, then the file.
struct Vars<'a> {
    file: Option<&'a ConfigFile>,
}

impl Vars<'_> {
    /// `var`'s value, from the environment or else the file.
    fn get(&self, setting: &'static Setting) -> Result<Option<String>> {
        match env_var(setting.var)? {
            Some(v) => Ok(Some(v)),
            None => Ok(self
                .file
                .filter(|_| setting.scope == Scope::Setting)
                .and_then(|f| f.get(setting.var))
                .map(|(v, _)| v.to_string())),
        }
    }

    fn parse<T: std::str::FromStr>(&self, setting: &'static Setting) -> Result<Option<T>>
    where
        T::Err: std::fmt::Display,
    {
        let var = setting.var;
        match self.get(setting)? {
            Some(v) => v.trim().parse().map(Some).map_err(|e: T::Err| {
                ErrorKind::Env {
                    var,
                    value: v,
                    reason: e.to_string(),
                }
                .into()
            }),
            None => Ok(None),
        }
    }

    /// Like [`Vars::parse`], for a number that must lie in `range`
    /// (its documented bounds); `unit` names what is counted, for the error.
    fn within<T: TryFrom<u64>>(
        &self,
        setting: &'static Setting,
        unit: &str,
        range: std::ops::RangeInclusive<u64>,
    ) -> Result<Option<T>> {
        let Some(v) = self.parse::<u64>(setting)? else {
            return Ok(None);
        };
        match T::try_from(v) {
            Ok(t) if range.contains(&v) => Ok(Some(t)),
            _ => Err(ErrorKind::Env {
                var: setting.var,
                value: v.to_string(),
                reason: format!("must be {} to {} {unit}s", range.start(), range.end()),
            }
            .into()),
        }
    }

    /// A setting with two values: `on` is true, `off` false.
    fn switch(&self, setting: &'static Setting, on: &str, off: &str) -> Result<Option<bool>> {
        match self.get(setting)? {
            None => Ok(None),
            Some(v) if v.trim() == on => Ok(Some(true)),
            Some(v) if v.trim() == off => Ok(Some(false)),
            Some(v) => Err(env_error(setting, &v, format!("known values: {on}, {off}"))),
        }
    }

    /// `FM_SHM_DIR`, which may not be empty.
    fn shm_dir(&self) -> Result<Option<PathBuf>> {
        let var = &fm_devices::shmem::settings::SHM_DIR;
        match self.get(var)? {
            Some(d) if d.trim().is_empty() => {
                let why = "an empty path would put segments in the current folder".into();
                Err(env_error(var, &d, why))
            }
            d => Ok(d.map(PathBuf::from)),
        }
    }

    /// `FM_PACER`; unset is `auto`.
    fn pacer(&self) -> Result<fm_pacer::Mode> {
        match self.get(&fm_pacer::PACER)? {
            Some(v) => {
                fm_pacer::Mode::parse(&v).map_err(|reason| env_error(&fm_pacer::PACER, &v, reason))
            }
            None => Ok(fm_pacer::Mode::Auto),
        }
    }

    /// A bad value that came from the file: say so with its file and line.
    fn locate(&self, e: FmError) -> FmError {
        if let (ErrorKind::Env { var, value, reason }, Some(f)) = (e.kind(), self.file) {
            if let (Ok(None), Some((_, line))) = (env_var(var), f.get(var)) {
                return ErrorKind::Config(format!(
                    "{}:{line}: {} = {value:?}: {reason}",
                    f.path.display(),
                    fm_platform::setting::file_key(var)
                ))
                .into();
            }
        }
        e
    }
}

/// An environment variable; unset is `None`, not UTF-8 an error.
fn env_var(var: &'static str) -> Result<Option<String>> {
    match std::env::var(var) {
        Ok(v) => Ok(Some(v)),
        Err(std::env::VarError::NotPresent) => Ok(None),
        Err(std::env::VarError::NotUnicode(v)) => Err(ErrorKind::Env {
            var,
            value: v.to_string_lossy().into_owned(),
            reason: "not valid UTF-8".into(),
        }
        .into()),
    }
}

/// A variable read from the environment only (a job variable, or a
/// setting of the layers above FM): its value, parsed, if set; a value
/// that does not parse is an error naming the variable.
pub fn env_only<T: std::str::FromStr>(setting: &'static Setting) -> Result<Option<T>>
where
    T::Err: std::fmt::Display,
{
    Vars { file: None }.parse(setting)
}

/// A bad value of `setting`.
fn env_error(setting: &'static Setting, value: &str, reason: String) -> FmError {
    ErrorKind::Env {
        var: setting.var,
        value: value.to_string(),
        reason,
    }
    .into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_round_trip_and_bad_ones_are_refused() {
        let r = [
            "self", "shmem", "nic", "nic", "ethernet", "ethernet", "ethernet", "null",
        ];
        let s = encode_routes(&r);
        assert_eq!(s, "self,shmem,nic*2,ethernet*3,null");
        let names: Vec<&str> = parse_routes(&s).unwrap().iter().map(|k| k.name()).collect();
        assert_eq!(names, r);
        for bad in ["self,tcp", "nic*0", "nic*x", "nic*99999999", ""] {
            assert!(parse_routes(bad).is_err(), "{bad}");
        }
    }
}
