//! Opening the devices: one [`Provider`] per kind of device, looped over
//! by [`open`]. Each says how it binds before the node map is known, what
//! endpoint it advertises in it, and how it associates with the node map
//! once every rank has joined; the composite then builds the destination
//! device table from the members they give. The job's facts come from
//! the [`Bootstrap`] source (`crate::wireup`).

use crate::config::{Config, Want};
use crate::error::{ErrorKind, Result};
use crate::wait;
use crate::wireup::{Bootstrap, Joined, PmiJob};
use fm_composite::{Composite, Member};
use fm_devices::ethernet::{EthernetConfig, EthernetEndpoint, EthernetSocket};
use fm_devices::nic::{NicConfig, NicEndpoint, NicSocket};
use fm_devices::null::NullDevice;
use fm_devices::selfloop::SelfDevice;
use fm_devices::shmem::{ShmemConfig, ShmemDevice};
use fm_devices::{DeviceKind, Rank};
use fm_grm::proto::{DeviceEndpoint, Node};
use std::net::IpAddr;

/// What binding a network device needs before the node map: the job's
/// secret, from which the packet MAC key derives, and the address to
/// bind when the settings name none.
struct Binding {
    secret: String,
    default_addr: IpAddr,
}

/// What the providers share while the devices open.
struct Context {
    pacer: fm_pacer::Pacer,
    /// The address the ethernet device bound: nic's default interface.
    eth_addr: Option<IpAddr>,
    eth_endpoint: Option<EthernetEndpoint>,
    /// Every rank's host and endpoints once joined (`None` when the
    /// configuration gave the job: no endpoints to learn).
    nodes: Option<Vec<Node>>,
}

/// A kind of device fm can open.
trait Provider {
    fn kind(&self) -> DeviceKind;
    /// Before the node map (only where there is one to learn): open what
    /// peers must learn of — a socket, rings — and return the endpoint to
    /// advertise.
    fn bind(&mut self, _c: &Config, _b: &Binding, _cx: &mut Context) -> Result<Option<Vec<u8>>> {
        Ok(None)
    }
    /// With the node map (`cx.nodes`): the composite's member, or `None`
    /// when this device reaches no rank.
    fn associate(self: Box<Self>, c: &Config, cx: &Context) -> Result<Option<Member>>;
}

/// Open every device for `config` — joining the job through its bootstrap
/// source, which fills in rank, size, key and hosts — and build the
/// composite. Returns it with how the process is joined and the ethernet
/// endpoint.
pub(crate) fn open(
    config: &mut Config,
    names: &[(u16, String)],
) -> Result<(Composite, Joined, Option<EthernetEndpoint>)> {
    // Under PMI the launcher's key-value space gives rank, size, hosts and
    // the job's secret first: the pacer and the packet key need them.
    let pmi = match &config.bootstrap {
        b @ (Bootstrap::Pmi(_) | Bootstrap::Pmix(_)) => Some(PmiJob::start(&b.clone(), config)?),
        _ => None,
    };
    let mut cx = Context {
        pacer: pacer_of(config),
        eth_addr: None,
        eth_endpoint: None,
        nodes: None,
    };
    // Ethernet binds before nic: nic's default interface is ethernet's.
    let mut providers: Vec<Box<dyn Provider>> = vec![
        Box::new(SelfProvider),
        Box::new(ShmemProvider),
        Box::new(EthernetProvider(None)),
        Box::new(NicProvider(None, None)),
        Box::new(NullProvider),
    ];
    let joined = join(config, names, pmi, &mut providers, &mut cx)?;
    let composite = (|| -> Result<Composite> {
        let mut members = Vec::new();
        for p in providers {
            members.extend(p.associate(config, &cx)?);
        }
        Ok(match &config.routes {
            Some(routes) => {
                Composite::with_routes(config.rank, config.hosts.clone(), members, routes)?
            }
            None => Composite::new(config.rank, config.hosts.clone(), members)?,
        })
    })();
    if matches!(joined, Joined::Given) && config.rank == 0 {
        // A process on its own: a misspelt setting is otherwise silently
        // ignored. A launched job's launcher said it once for every rank.
        crate::settings::warn_unknown_in_env();
    }
    match composite {
        Ok(mut c) => {
            if let (Joined::Pmi(p), Some(shm)) = (&joined, c.shmem_mut()) {
                p.watch(shm.peer_watch(), config.host.clone());
            }
            Ok((c, joined, cx.eth_endpoint))
        }
        Err(e) => {
            match &joined {
                Joined::Grm(m) => m.abort(&e.to_string()),
                Joined::Pmi(p) => p.aborter()(&e.to_string()),
                Joined::Given => {}
            }
            Err(e)
        }
    }
}

/// Bind what peers must learn of, then join the job through its source:
/// the node map goes into `cx.nodes`.
fn join(
    config: &mut Config,
    names: &[(u16, String)],
    pmi: Option<PmiJob>,
    providers: &mut [Box<dyn Provider>],
    cx: &mut Context,
) -> Result<Joined> {
    let binding = match (&config.bootstrap, &pmi) {
        (Bootstrap::Grm(g), _) => Some(Binding {
            secret: g.token.clone(),
            default_addr: address_towards_grm(&g.addr),
        }),
        // A job on one host under PMI opens no network.
        (Bootstrap::Pmi(_) | Bootstrap::Pmix(_), Some(p))
            if config.hosts.iter().any(|h| *h != config.host) =>
        {
            Some(Binding {
                secret: p.secret.clone(),
                default_addr: address_of_host(&config.host),
            })
        }
        _ => None,
    };
    let mut endpoints = Vec::new();
    if let Some(b) = &binding {
        for p in providers.iter_mut() {
            if let Some(address) = p.bind(config, b, cx)? {
                let device = p.kind().name().into();
                endpoints.push(DeviceEndpoint { device, address });
            }
        }
    }
    Ok(match (config.bootstrap.clone(), pmi) {
        (Bootstrap::Grm(g), _) => {
            let m = join_job(&g, config, names, endpoints)?;
            cx.nodes = Some(m.welcome.nodes.clone());
            Joined::Grm(m)
        }
        (Bootstrap::Pmi(_) | Bootstrap::Pmix(_), Some(p)) => {
            let nodes = p.exchange(config, &endpoints).inspect_err(|e| {
                // The others may wait at the fence for this rank.
                p.aborter()(&e.to_string());
            })?;
            cx.nodes = Some(nodes);
            wait::on_abort(p.aborter());
            p.serve_abort();
            Joined::Pmi(p)
        }
        _ => Joined::Given,
    })
}

struct SelfProvider;

impl Provider for SelfProvider {
    fn kind(&self) -> DeviceKind {
        DeviceKind::SelfLoop
    }
    fn associate(self: Box<Self>, c: &Config, _: &Context) -> Result<Option<Member>> {
        Ok(Some(Member::SelfLoop(SelfDevice::open(c.rank))))
    }
}

/// Shared memory, when the job has other ranks on this host; it advertises
/// its segment directory.
struct ShmemProvider;

impl Provider for ShmemProvider {
    fn kind(&self) -> DeviceKind {
        DeviceKind::Shmem
    }
    fn bind(&mut self, c: &Config, _: &Binding, _: &mut Context) -> Result<Option<Vec<u8>>> {
        Ok(Some(c.shm.dir.to_string_lossy().into_owned().into_bytes()))
    }
    fn associate(self: Box<Self>, c: &Config, cx: &Context) -> Result<Option<Member>> {
        let pacer = &cx.pacer;
        let local = c.local_ranks();
        if local.len() > 1 {
            let mut s = ShmemConfig::new(c.job_key, c.rank, local);
            s.host = c.host.clone();
            s.settings = c.shm.clone();
            s.sleeps = c.wait_sleeps();
            if c.shm.payload.is_none() {
                let frame = fm_pacer::knobs::tune_shmem_frame(pacer, &c.shm.dir).size;
                s.paced_payload = Some(fm_devices::shmem::pace::payload_of_frame(frame));
            }
            return Ok(Some(Member::Shmem(ShmemDevice::open(&s)?)));
        }
        Ok(None)
    }
}

/// UDP between hosts (`FM_NET` with ethernet): the socket binds first,
/// its address goes into the node map.
struct EthernetProvider(Option<EthernetSocket>);

impl Provider for EthernetProvider {
    fn kind(&self) -> DeviceKind {
        DeviceKind::Ethernet
    }
    fn bind(&mut self, c: &Config, b: &Binding, cx: &mut Context) -> Result<Option<Vec<u8>>> {
        if !c.net.ethernet {
            return Ok(None);
        }
        let s = bind_ethernet(b, c, &cx.pacer)?;
        let ep = s.endpoint()?;
        cx.eth_addr = ep.addrs.first().map(|a| a.ip());
        let address = ep.encode().into_bytes();
        cx.eth_endpoint = Some(ep);
        self.0 = Some(s);
        Ok(Some(address))
    }
    fn associate(self: Box<Self>, c: &Config, cx: &Context) -> Result<Option<Member>> {
        let (Some(sock), Some(nodes)) = (self.0, &cx.nodes) else {
            return Ok(None);
        };
        let peers = peer_endpoints(nodes, c, DeviceKind::Ethernet, EthernetEndpoint::decode)?;
        if peers.iter().all(Option::is_none) {
            return Ok(None);
        }
        let d = sock.associate(c.job_key, c.rank, &peers)?;
        Ok(Some(Member::Net(DeviceKind::Ethernet, Box::new(d))))
    }
}

/// Raw frames between hosts of one layer-2 network: the rings open first,
/// the interface's MAC and network go into the node map. An optional nic
/// that cannot open says why once per host and is left out.
struct NicProvider(Option<NicSocket>, NicUnused);

impl Provider for NicProvider {
    fn kind(&self) -> DeviceKind {
        DeviceKind::Nic
    }
    fn bind(&mut self, c: &Config, b: &Binding, cx: &mut Context) -> Result<Option<Vec<u8>>> {
        let (sock, unused) = open_nic(c, b, cx.eth_addr)?;
        let address = sock.as_ref().map(|s| s.endpoint().encode().into_bytes());
        (self.0, self.1) = (sock, unused);
        Ok(address)
    }
    fn associate(self: Box<Self>, c: &Config, cx: &Context) -> Result<Option<Member>> {
        if let Some(why) = &self.1 {
            // One line per host: from its first rank.
            if c.local_ranks().first() == Some(&c.rank) {
                tracing::warn!(
                    "fm: nic is not used on host {}: {why}; {} carries traffic between hosts",
                    c.host,
                    if c.net.ethernet {
                        "ethernet"
                    } else {
                        "nothing (null)"
                    }
                );
            }
        }
        let (Some(sock), Some(nodes)) = (self.0, &cx.nodes) else {
            return Ok(None);
        };
        let peers = peer_endpoints(nodes, c, DeviceKind::Nic, NicEndpoint::decode)?;
        if !peers.iter().flatten().any(|p| sock.shares_network(p)) {
            return Ok(None);
        }
        let mates: Vec<Rank> = (c.local_ranks().into_iter())
            .filter(|&r| r != c.rank)
            .collect();
        let d = sock.associate(c.job_key, c.rank, &peers, &mates)?;
        Ok(Some(Member::Net(DeviceKind::Nic, Box::new(d))))
    }
}

/// The NULL transport: ranks no network reaches ("no route").
struct NullProvider;

impl Provider for NullProvider {
    fn kind(&self) -> DeviceKind {
        DeviceKind::Null
    }
    fn associate(self: Box<Self>, c: &Config, _: &Context) -> Result<Option<Member>> {
        Ok(Some(Member::Null(NullDevice::open(c.hosts.clone()))))
    }
}

/// The address this host uses to reach the GRM: the network between hosts.
fn address_towards_grm(addr: &str) -> IpAddr {
    use std::net::ToSocketAddrs;
    let grm = addr
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .and_then(fm_devices::ethernet::local_addr_towards);
    grm.unwrap_or(IpAddr::from([127, 0, 0, 1]))
}

/// The address this host's name resolves to, other than loopback: the one
/// its peers on other hosts know it by (under a PMI launcher, which names
/// no address of its own); else loopback.
fn address_of_host(host: &str) -> IpAddr {
    use std::net::ToSocketAddrs;
    let named = (host, 0).to_socket_addrs().ok().and_then(|mut a| {
        a.find(|a| a.is_ipv4() && !a.ip().is_loopback())
            .map(|a| a.ip())
    });
    named.unwrap_or(IpAddr::from([127, 0, 0, 1]))
}

/// The pacer of this process: its mode, the cache of this user, and the
/// job (a hash of its token or its key) so that under `FM_PACER=force` one
/// rank per host measures and the others take its curve.
fn pacer_of(c: &Config) -> fm_pacer::Pacer {
    let mut p = fm_pacer::Pacer::new(c.pacer, fm_pacer::Cache::default_location());
    let job = match &c.bootstrap {
        Bootstrap::Grm(g) => fingerprint(&[(0, g.token.clone())]),
        _ => c.job_key.0,
    };
    p.job = Some(format!("{job:016x}"));
    p
}

/// Bind the ethernet device's socket, so its endpoint can go into the node map.
fn bind_ethernet(b: &Binding, c: &Config, pacer: &fm_pacer::Pacer) -> Result<EthernetSocket> {
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
        (None, None) => vec![b.default_addr],
    };
    let mut e = EthernetConfig::new(addrs[0]);
    if c.eth.mtu.is_none() {
        let choice = fm_pacer::knobs::tune_ethernet_datagram(pacer, addrs[0], e.socket_buffer);
        e.paced_mtu = Some(choice.size as usize);
    }
    e.addrs = addrs;
    e.mtu = c.eth.mtu;
    e.reliable = reliable_settings(c, b);
    Ok(EthernetSocket::bind(e)?)
}

/// The reliable layer's settings for this job: the user's, and the
/// packet key derived from the job's secret (docs/SECURITY.md).
fn reliable_settings(c: &Config, b: &Binding) -> fm_devices::reliable::Settings {
    let mut r = c.reliable.clone();
    if r.authenticate {
        r.mac = Some(fm_devices::reliable::header::MacKey::from_token(&b.secret));
    }
    r
}

/// Each rank's endpoint for `device` in the node map, for ranks on other
/// hosts that advertised one.
fn peer_endpoints<E>(
    nodes: &[Node],
    c: &Config,
    device: DeviceKind,
    decode: impl Fn(&str) -> std::result::Result<E, String>,
) -> Result<Vec<Option<E>>> {
    let mut peers = Vec::with_capacity(nodes.len());
    for n in nodes {
        let ep = n.endpoints.iter().find(|e| e.device == device.name());
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

/// Why an optional nic device was not opened.
type NicUnused = Option<String>;

/// Open the nic device's rings where the configuration asks for it. An
/// optional nic that cannot open comes back as the reason, for one line.
fn open_nic(
    c: &Config,
    b: &Binding,
    eth: Option<IpAddr>,
) -> Result<(Option<NicSocket>, NicUnused)> {
    if c.net.nic == Want::No {
        return Ok((None, None));
    }
    let ifaces = match c.nic.ifaces.first() {
        Some(_) => c.nic.ifaces.clone(),
        // By default, the interface the ethernet device uses (or would),
        // if it is a real one: on loopback every host is this one.
        None => match eth
            .or(Some(b.default_addr))
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
    n.reliable = reliable_settings(c, b);
    match NicSocket::open(n) {
        Ok(s) => Ok((Some(s), None)),
        Err(e) if c.net.nic == Want::IfAvailable => Ok((None, Some(e.to_string()))),
        Err(e) => Err(e.into()),
    }
}

/// Join the job through the resource manager: it checks the token and the
/// handler table, assigns rank and job key, and answers with the node map
/// once every process has joined.
fn join_job(
    g: &crate::config::GrmJoin,
    config: &mut Config,
    names: &[(u16, String)],
    endpoints: Vec<DeviceEndpoint>,
) -> Result<fm_grm::Membership> {
    let join = fm_grm::proto::Join {
        // Filled in by `Membership::join` from the token.
        job: [0; 16],
        nonce: [0; 32],
        proof: [0; 64],
        rank: g.rank,
        host: config.host.clone(),
        pid: std::process::id(),
        fingerprint: fingerprint(names),
        handlers: names.to_vec(),
        endpoints,
    };
    let m = fm_grm::Membership::join(
        &g.addr,
        &g.token,
        join,
        config.shm.attach_timeout,
        wait::job_ended_under_this_process,
    )?;
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
    wait::on_abort(m.aborter());
    Ok(m)
}

/// FNV-1a over the handler table (IDs and names, sorted by ID): equal
/// across ranks that registered the same handlers.
pub(crate) fn fingerprint(names: &[(u16, String)]) -> u64 {
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
