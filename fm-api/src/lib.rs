//! # fm — Fast Messages over a composite of devices
//!
//! The FM 2.x programming model (HPVM): handlers registered by ID, messages
//! sent as streams of pieces (gather) and received in pieces inside the
//! handler (scatter), `extract` to run handlers, and credit-based flow control.
//!
//! ```no_run
//! use fm::Fm;
//! const PING: u16 = 1;
//! let mut fm = Fm::builder()
//!     .handler(PING, "ping", |m| {
//!         let data = m.receive_vec()?;
//!         println!("{} bytes from rank {}", data.len(), m.src());
//!         Ok(())
//!     })
//!     .from_env()?
//!     .build()?;
//! let next = (fm.rank() + 1) % fm.size() as u32;
//! fm.send(next, PING, b"hello")?;
//! while fm.stats().messages_received == 0 {
//!     fm.extract_wait(usize::MAX)?;
//! }
//! # Ok::<(), fm::FmError>(())
//! ```
//!
//! Guarantees: messages from one sender to one receiver are delivered exactly
//! once and in the order sent; a handler runs once per message and may start
//! before the whole message has arrived (each `receive` waits for the bytes it
//! asks for); bytes a handler does not read are discarded when it returns.
//! A sender out of credit keeps receiving — arriving packets are set aside and
//! their credits returned — so processes that send to each other head-to-head
//! never deadlock; the set-aside messages' handlers run at the next `extract`,
//! or, once the set-aside bytes reach `FM_STASH_BYTES`, inside a send that
//! waits outside any handler (so memory stays bounded). Handlers may send, to
//! any rank and before or after reading their message, but not extract; a
//! handler that returns with a message open has that message aborted and its
//! `extract` fails naming it. The rules that make this hold are in the
//! endpoint module's docs ("The credit rule", "The stash and its bound").
//!
//! `Fm` is used from one thread at a time (it is `&mut self` throughout);
//! wrap it in a `Mutex` to share it, so the single-thread path pays nothing.

pub mod config;
pub mod config_file;
mod endpoint;
pub mod error;
mod extract;
mod incoming;
pub mod job;
mod path_choice;
pub mod wait;
pub mod wire;

pub use config::{Config, GrmJoin, Net, Want};

/// The README's example, compiled and run as a doctest.
#[doc = include_str!("../../README.md")]
#[cfg(doctest)]
pub struct ReadmeExample;
pub use endpoint::{Endpoint, FmStats};
pub use error::{ErrorKind, FmError, Result};
pub use extract::RESERVED_HANDLERS;
pub use fm_devices::{JobKey, Rank};
pub use incoming::Incoming;

use extract::{BARRIER_ARRIVE, BARRIER_RELEASE};
use fm_composite::{Composite, Member};
use fm_devices::ethernet::{EthernetConfig, EthernetDevice, EthernetEndpoint, EthernetSocket};
use fm_devices::nic::{NicConfig, NicDevice, NicEndpoint, NicSocket};
use fm_devices::null::NullDevice;
use fm_devices::selfloop::SelfDevice;
use fm_devices::shmem::{ShmemConfig, ShmemDevice};
use fm_grm::Membership;
use std::ops::{Deref, DerefMut};

/// A message handler: runs on the destination for each message sent to its ID.
pub type Handler = Box<dyn FnMut(&mut Incoming<'_>) -> Result<()>>;

/// Builds an [`Fm`]: handlers first, then the configuration.
pub struct FmBuilder {
    handlers: Vec<(u16, String, Handler)>,
    config: Option<Config>,
}

impl FmBuilder {
    /// Register `f` for handler ID `id` (below [`RESERVED_HANDLERS`]); `name`
    /// identifies it when the resource manager compares handler tables.
    pub fn handler<F>(mut self, id: u16, name: &str, f: F) -> Self
    where
        F: FnMut(&mut Incoming<'_>) -> Result<()> + 'static,
    {
        self.handlers.push((id, name.to_string(), Box::new(f)));
        self
    }

    /// Use this configuration.
    pub fn config(mut self, c: Config) -> Self {
        self.config = Some(c);
        self
    }

    /// Take the configuration from the environment (`FM_RANK`, `FM_SIZE`, …).
    pub fn from_env(mut self) -> Result<Self> {
        self.config = Some(Config::from_env()?);
        Ok(self)
    }

    /// Open the devices, attach to the job and return the endpoint.
    pub fn build(self) -> Result<Fm> {
        let mut config = match self.config {
            Some(c) => c,
            None => Config::from_env()?,
        };
        let mut table: Vec<Option<Handler>> = Vec::new();
        let mut names: Vec<(u16, String)> = Vec::new();
        for (id, name, f) in self.handlers {
            if id >= RESERVED_HANDLERS {
                return Err(ErrorKind::Config(format!(
                    "handler ID {id:#x} ({name:?}) is reserved for fm (use IDs below {RESERVED_HANDLERS:#x})"
                )).into());
            }
            if let Some((_, first)) = names.iter().find(|(i, _)| *i == id) {
                return Err(ErrorKind::DuplicateHandler {
                    id,
                    first: first.clone(),
                    second: name,
                }
                .into());
            }
            if table.len() <= id as usize {
                table.resize_with(id as usize + 1, || None);
            }
            table[id as usize] = Some(f);
            names.push((id, name));
        }
        names.sort();
        let pacer = pacer_of(&config);
        let (grm, nic, eth) = match config.grm.clone() {
            Some(g) => {
                // Opened before joining: their endpoints go into the node map.
                let eth = match config.net.ethernet {
                    true => {
                        let s = bind_ethernet(&g, &config, &pacer)?;
                        let ep = s.endpoint()?;
                        Some((s, ep))
                    }
                    false => None,
                };
                let (nic, nic_unused) = open_nic(&config, &g, eth.as_ref().map(|(s, _)| s))?;
                let eps = Endpoints {
                    eth: eth.as_ref().map(|(_, ep)| ep),
                    nic: nic.as_ref().map(|(_, ep)| ep),
                };
                let m = join_job(&g, &mut config, &names, eps)?;
                if let Some(why) = nic_unused {
                    // One line per host: from its first rank.
                    if config.local_ranks().first() == Some(&config.rank) {
                        tracing::warn!(
                            "fm: nic is not used on host {}: {why}; {} carries traffic between hosts",
                            config.host,
                            if eth.is_some() { "ethernet" } else { "nothing (null)" }
                        );
                    }
                }
                let eth = match eth {
                    Some((s, ep)) => associate_ethernet(s, &m, &config)?.map(|d| (d, ep)),
                    None => None,
                };
                let nic = match nic {
                    Some((s, _)) => associate_nic(s, &m, &config)?,
                    None => None,
                };
                (Some(m), nic, eth)
            }
            None => (None, None, None),
        };
        let (eth, eth_endpoint) = eth.unzip();
        let dev = match open_composite(&config, &pacer, nic, eth) {
            Ok(d) => d,
            Err(e) => {
                if let Some(m) = &grm {
                    m.abort(&e.to_string());
                }
                return Err(e);
            }
        };
        if let Some(m) = &grm {
            m.ready(dev.table().to_string());
        }
        let cpus = config.cpus.unwrap_or_else(fm_devices::sys::cpus_allowed);
        wait::set_oversubscribed(config.local_ranks().len() > cpus);
        tracing::debug!(
            rank = config.rank,
            size = config.size,
            "fm: endpoint open\n{}",
            dev.table()
        );
        Ok(Fm {
            ep: Endpoint::new(dev, &config, table),
            names,
            barrier: BarrierState::default(),
            config,
            eth_endpoint,
            _grm: grm,
        })
    }
}

/// The address this host uses to reach the GRM: the network between hosts.
fn address_towards_grm(g: &GrmJoin) -> std::net::IpAddr {
    use std::net::ToSocketAddrs;
    let grm = g
        .addr
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .and_then(fm_devices::ethernet::local_addr_towards);
    grm.unwrap_or(std::net::IpAddr::from([127, 0, 0, 1]))
}

/// The pacer of this process: its mode, the cache of this user, and the
/// job (a hash of its token or its key) so that under `FM_PACER=force` one
/// rank per host measures and the others take its curve.
fn pacer_of(c: &Config) -> fm_pacer::Pacer {
    let mut p = fm_pacer::Pacer::new(c.pacer, fm_pacer::Cache::default_location());
    let job = match &c.grm {
        Some(g) => fingerprint(&[(0, g.token.clone())]),
        None => c.job_key.0,
    };
    p.job = Some(format!("{job:016x}"));
    p
}

/// Bind the ethernet device's socket, so its endpoint can go into the node map.
fn bind_ethernet(g: &GrmJoin, c: &Config, pacer: &fm_pacer::Pacer) -> Result<EthernetSocket> {
    let addrs = match (c.eth.addrs.first(), c.eth.range) {
        (Some(_), _) => c.eth.addrs.clone(),
        (None, Some(range)) => match range.local_address() {
            Some((_, a)) => vec![a],
            None => {
                return Err(ErrorKind::Config(format!(
                    "host {} has no address in FM_ETH_RANGE {range} for the ethernet device",
                    c.host
                ))
                .into())
            }
        },
        (None, None) => vec![address_towards_grm(g)],
    };
    let mut e = EthernetConfig::new(addrs[0]);
    if c.eth.mtu.is_none() {
        let choice = fm_pacer::knobs::tune_ethernet_datagram(pacer, addrs[0], e.socket_buffer);
        e.paced_mtu = Some(choice.size as usize);
    }
    e.addrs = addrs;
    e.mtu = c.eth.mtu;
    e.reliable = c.eth.reliable();
    Ok(EthernetSocket::bind(e)?)
}

/// Each rank's endpoint for `device` in the node map, for ranks on other
/// hosts that advertised one.
fn peer_endpoints<E>(
    m: &Membership,
    c: &Config,
    device: &str,
    decode: impl Fn(&str) -> std::result::Result<E, String>,
) -> Result<Vec<Option<E>>> {
    let mut peers = Vec::with_capacity(m.welcome.nodes.len());
    for n in &m.welcome.nodes {
        let ep = n.endpoints.iter().find(|e| e.device == device);
        peers.push(match ep {
            Some(e) if n.host != c.host => Some(
                std::str::from_utf8(&e.address)
                    .map_err(|e| e.to_string())
                    .and_then(&decode)
                    .map_err(|why| {
                        ErrorKind::Config(format!(
                            "rank {}'s {device} endpoint in the node map is unusable: {why}",
                            n.rank
                        ))
                    })?,
            ),
            _ => None,
        });
    }
    Ok(peers)
}

/// Associate nodes: the ranks on other hosts that advertised an ethernet endpoint.
fn associate_ethernet(
    sock: EthernetSocket,
    m: &Membership,
    c: &Config,
) -> Result<Option<EthernetDevice>> {
    let peers = peer_endpoints(m, c, "ethernet", EthernetEndpoint::decode)?;
    if peers.iter().all(Option::is_none) {
        return Ok(None);
    }
    Ok(Some(sock.associate(c.job_key, c.rank, &peers)?))
}

/// Why an optional nic device was not opened.
type NicUnused = Option<String>;

/// Open the nic device's rings where the configuration asks for it. An
/// optional nic that cannot open comes back as the reason, for one line.
fn open_nic(
    c: &Config,
    g: &GrmJoin,
    eth: Option<&EthernetSocket>,
) -> Result<(Option<(NicSocket, NicEndpoint)>, NicUnused)> {
    if c.net.nic == Want::No {
        return Ok((None, None));
    }
    let ifaces = match c.nic.ifaces.first() {
        Some(_) => c.nic.ifaces.clone(),
        // By default, the interface the ethernet device uses (or would),
        // if it is a real one: on loopback every host is this one.
        None => match eth
            .and_then(|s| s.endpoint().ok())
            .and_then(|ep| ep.addrs.first().map(|a| a.ip()))
            .or_else(|| Some(address_towards_grm(g)))
            .filter(|ip| !ip.is_loopback())
            .and_then(fm_devices::ethernet::interface_of)
        {
            Some(i) => vec![i],
            None if c.net.nic == Want::Required => {
                return Err(ErrorKind::Config(
                    "FM_NET asks for nic: name its interfaces in FM_NIC_IFACES".into(),
                )
                .into())
            }
            None => return Ok((None, None)),
        },
    };
    let mut n = NicConfig::new(&ifaces[0]);
    n.ifaces = ifaces;
    if let Some(t) = c.nic.ethertype {
        n.ethertype = t;
    }
    n.mtu = c.nic.mtu;
    if let Some(f) = c.nic.frames {
        n.rx_frames = f;
        n.tx_frames = f;
    }
    n.network = c.nic.network.clone();
    n.reliable = c.eth.reliable();
    match NicSocket::open(n) {
        Ok(s) => {
            let ep = s.endpoint();
            Ok((Some((s, ep)), None))
        }
        Err(e) if c.net.nic == Want::IfAvailable => Ok((None, Some(e.to_string()))),
        Err(e) => Err(e.into()),
    }
}

/// Associate nodes: the ranks on other hosts of this layer-2 network that
/// advertised a nic endpoint.
fn associate_nic(sock: NicSocket, m: &Membership, c: &Config) -> Result<Option<NicDevice>> {
    let peers = peer_endpoints(m, c, "nic", NicEndpoint::decode)?;
    if !peers.iter().flatten().any(|p| sock.shares_network(p)) {
        return Ok(None);
    }
    let mates: Vec<Rank> = c
        .local_ranks()
        .into_iter()
        .filter(|&r| r != c.rank)
        .collect();
    Ok(Some(sock.associate(c.job_key, c.rank, &peers, &mates)?))
}

/// This process's endpoints, for the node map.
struct Endpoints<'a> {
    eth: Option<&'a EthernetEndpoint>,
    nic: Option<&'a NicEndpoint>,
}

/// Join the job through the resource manager: it checks the token and the
/// handler table, assigns rank and job key, and answers with the node map
/// once every process has joined.
fn join_job(
    g: &GrmJoin,
    config: &mut Config,
    names: &[(u16, String)],
    eps: Endpoints<'_>,
) -> Result<Membership> {
    let mut endpoints = vec![fm_grm::proto::DeviceEndpoint {
        device: "shmem".into(),
        address: config.shm_dir.to_string_lossy().into_owned().into_bytes(),
    }];
    if let Some(ep) = eps.nic {
        endpoints.push(fm_grm::proto::DeviceEndpoint {
            device: "nic".into(),
            address: ep.encode().into_bytes(),
        });
    }
    if let Some(ep) = eps.eth {
        endpoints.push(fm_grm::proto::DeviceEndpoint {
            device: "ethernet".into(),
            address: ep.encode().into_bytes(),
        });
    }
    let join = fm_grm::proto::Join {
        token: g.token.clone(),
        rank: g.rank,
        host: config.host.clone(),
        pid: std::process::id(),
        fingerprint: fingerprint(names),
        handlers: names.to_vec(),
        endpoints,
    };
    let m = Membership::join(&g.addr, join, config.attach_timeout, |reason| {
        tracing::error!("fm: the job has ended: {reason}");
        wait::end_job(reason);
    })?;
    let w = &m.welcome;
    let size = w.nodes.len();
    if w.rank as usize >= size
        || w.nodes
            .iter()
            .enumerate()
            .any(|(i, n)| n.rank as usize != i)
    {
        return Err(ErrorKind::Config(format!(
            "the GRM at {} sent a node map that does not list ranks 0..{size} in order",
            g.addr
        ))
        .into());
    }
    config.rank = w.rank;
    config.size = size;
    config.job_key = m.job_key();
    config.hosts = w.nodes.iter().map(|n| n.host.clone()).collect();
    Ok(m)
}

/// FNV-1a over the handler table (IDs and names, sorted by ID): equal
/// across ranks that registered the same handlers.
fn fingerprint(names: &[(u16, String)]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for (id, name) in names {
        for b in id
            .to_le_bytes()
            .iter()
            .chain(name.as_bytes())
            .chain([0u8].iter())
        {
            h ^= *b as u64;
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// Open self, shmem (when the job has other ranks on this host) and null,
/// and build the destination device table.
fn open_composite(
    c: &Config,
    pacer: &fm_pacer::Pacer,
    nic: Option<NicDevice>,
    eth: Option<EthernetDevice>,
) -> Result<Composite> {
    let mut members = vec![Member::SelfLoop(SelfDevice::open(c.rank))];
    let local = c.local_ranks();
    if local.len() > 1 {
        let mut s = ShmemConfig::new(c.job_key, c.rank, local);
        s.dir = c.shm_dir.clone();
        s.host = c.host.clone();
        s.queues = c.shm_queues;
        s.frames = c.shm_frames;
        s.payload = c.shm_payload;
        if c.shm_payload.is_none() {
            let frame = fm_pacer::knobs::tune_shmem_frame(pacer, &c.shm_dir).size;
            s.paced_payload = Some(fm_devices::shmem::pace::payload_of_frame(frame));
        }
        s.cma = c.cma;
        s.attach_timeout = c.attach_timeout;
        members.push(Member::Shmem(ShmemDevice::open(&s)?));
    }
    // Faster first: the table takes the first member that reaches a rank.
    if let Some(n) = nic {
        members.push(Member::Network("nic", Box::new(n)));
    }
    if let Some(e) = eth {
        members.push(Member::Network("ethernet", Box::new(e)));
    }
    // Ranks no network reaches get the NULL transport: "no route".
    members.push(Member::Null(NullDevice::open(c.hosts.clone())));
    Ok(match &c.routes {
        Some(routes) => Composite::with_routes(c.rank, c.hosts.clone(), members, routes)?,
        None => Composite::new(c.rank, c.hosts.clone(), members)?,
    })
}

/// For programs and fm's tools: `tracing` output to stderr, filtered by
/// `FM_LOG` (default `warn`, e.g. `FM_LOG=fm_pacer=debug`), in colour only
/// on a terminal. Does nothing if a subscriber is already set.
pub fn init_logging() {
    init_logging_or("warn");
}

/// As [`init_logging`], with `default` as the filter when `FM_LOG` is unset.
pub fn init_logging_or(default: &str) {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(
            std::env::var("FM_LOG").unwrap_or_else(|_| default.into()),
        ))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}

/// One FM process: its endpoint and its handler table.
pub struct Fm {
    ep: Endpoint,
    names: Vec<(u16, String)>,
    barrier: BarrierState,
    config: Config,
    /// Where this process's ethernet device listens, if it has one.
    eth_endpoint: Option<fm_devices::ethernet::EthernetEndpoint>,
    /// Membership of the job at the resource manager; dropped last, after
    /// the endpoint, so leaving the job is the last thing a process does.
    _grm: Option<Membership>,
}

impl Deref for Fm {
    type Target = Endpoint;
    fn deref(&self) -> &Endpoint {
        &self.ep
    }
}

impl DerefMut for Fm {
    fn deref_mut(&mut self) -> &mut Endpoint {
        &mut self.ep
    }
}

impl Fm {
    pub fn builder() -> FmBuilder {
        FmBuilder {
            handlers: Vec::new(),
            config: None,
        }
    }

    /// `Fm::builder().from_env()?.build()` with no handlers of its own.
    pub fn init() -> Result<Fm> {
        Fm::builder().from_env()?.build()
    }

    /// The configuration in use.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Where this process's ethernet device listens (address, epoch, MTU),
    /// when the job has ranks on other hosts.
    pub fn ethernet_endpoint(&self) -> Option<fm_devices::ethernet::EthernetEndpoint> {
        self.eth_endpoint.clone()
    }

    /// (ID, name) of every registered handler, sorted by ID.
    pub fn handler_names(&self) -> &[(u16, String)] {
        &self.names
    }

    /// A fingerprint of the handler table (IDs and names), equal across ranks
    /// that registered the same handlers.
    pub fn handler_fingerprint(&self) -> u64 {
        fingerprint(&self.names)
    }

    /// Wait until every rank has entered the barrier (rank 0 gathers and
    /// releases). A handler's error during the wait is returned with the
    /// barrier left as it was: calling `barrier` again completes the same
    /// barrier (a message sent for it is not sent twice).
    pub fn barrier(&mut self) -> Result<()> {
        let size = self.ep.size() as u64;
        if size == 1 {
            return Ok(());
        }
        let epoch = self.barrier.done + 1;
        if self.ep.rank() == 0 {
            while self.ep.barrier_arrived < epoch * (size - 1) {
                self.ep.extract_wait(1)?;
            }
            if self.barrier.sent < epoch {
                self.barrier.released_to = 1;
                self.barrier.sent = epoch;
            }
            while (self.barrier.released_to as u64) < size {
                self.ep
                    .send(self.barrier.released_to, BARRIER_RELEASE, &[])?;
                self.barrier.released_to += 1;
            }
        } else {
            if self.barrier.sent < epoch {
                self.ep.send(0, BARRIER_ARRIVE, &[])?;
                self.barrier.sent = epoch;
            }
            while self.ep.barrier_released < epoch {
                self.ep.extract_wait(1)?;
            }
        }
        self.barrier.done = epoch;
        Ok(())
    }
}

/// Where this rank is in the barriers, so a barrier interrupted by an error
/// resumes where it stopped.
#[derive(Default)]
struct BarrierState {
    /// Barriers completed.
    done: u64,
    /// The barrier whose message(s) this rank began to send.
    sent: u64,
    /// Rank 0: the next rank to release in barrier `sent`.
    released_to: Rank,
}
