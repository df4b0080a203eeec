//! The `ethernet` device: PM's reliable layer over UDP (SCore's PM/UDP).
//!
//! Unprivileged and routable. Opening is two steps, as PMv2's open-context
//! then associate-nodes: [`EthernetSocket::bind`] binds a non-blocking UDP
//! socket and draws the epoch, so the endpoint (`ip:port/epoch/mtu`) can go
//! into the node map; [`EthernetSocket::associate`] then takes every rank's
//! endpoint and gives the device. Datagram size: the interface's MTU less the
//! IP and UDP headers, capped by configuration.
//!
//! Trunking (thesis chapter 6): given several local addresses — one per
//! interface — the device binds a socket on each and sends each packet to a
//! peer over the next of the links both sides have, round-robin; the
//! reliable layer then keeps a per-peer reorder queue instead of treating a
//! gap as a loss, and discards duplicates.

use crate::reliable::{Faults, FaultyLink, Link, ReliableConfig, ReliableDevice};
use crate::{DeviceError, JobKey, Rank};
use socket2::{Domain, Protocol, Socket, Type};
use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::Duration;

/// IPv4 (20) + UDP (8) headers.
const IP_UDP_HEADERS: usize = 28;
/// The largest UDP payload.
const MAX_UDP: usize = 65507;

pub type EthernetDevice = ReliableDevice<Box<dyn Link>>;

/// Settings of the ethernet device (`FM_ETH_*`, docs/CONFIG.md).
#[derive(Clone, Debug)]
pub struct EthernetConfig {
    /// Addresses to bind and advertise: one link each (several = trunking).
    pub addrs: Vec<IpAddr>,
    /// Largest datagram (header included); `None`: the interface's MTU less
    /// the IP and UDP headers (65507 on loopback: fewer, larger datagrams
    /// moved 2.7× the bandwidth of 16 KiB ones here).
    pub mtu: Option<usize>,
    pub window: u32,
    /// Receive pool in packets; `None`: 16 MiB worth, 128 to 4096 packets.
    pub pool: Option<usize>,
    pub rto: Duration,
    pub dead_after: Duration,
    /// Socket buffer sizes asked of the kernel.
    pub socket_buffer: usize,
    pub faults: Option<Faults>,
    /// Cover payloads with the CRC too (`FM_ETH_CHECKSUM=full`); always
    /// when fault injection corrupts packets.
    pub payload_crc: bool,
}

impl EthernetConfig {
    pub fn new(addr: IpAddr) -> Self {
        EthernetConfig {
            addrs: vec![addr],
            mtu: None,
            window: 64,
            pool: None,
            rto: Duration::from_millis(2),
            dead_after: Duration::from_secs(10),
            socket_buffer: 4 << 20,
            faults: None,
            payload_crc: false,
        }
    }
}

/// Links of one endpoint at most.
pub const MAX_LINKS: usize = 8;

/// Where a rank's ethernet device listens: one address per link.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EthernetEndpoint {
    pub addrs: Vec<SocketAddr>,
    pub epoch: u32,
    pub mtu: u32,
}

impl EthernetEndpoint {
    /// `ip:port[+ip:port…]/epoch/mtu`.
    pub fn encode(&self) -> String {
        let a: Vec<String> = self.addrs.iter().map(|a| a.to_string()).collect();
        format!("{}/{}/{}", a.join("+"), self.epoch, self.mtu)
    }

    pub fn decode(s: &str) -> Result<EthernetEndpoint, String> {
        let mut it = s.split('/');
        let (Some(a), Some(e), Some(m), None) = (it.next(), it.next(), it.next(), it.next()) else {
            return Err(format!("{s:?} is not ip:port[+ip:port]/epoch/mtu"));
        };
        let addrs = a
            .split('+')
            .map(|x| x.parse().map_err(|e| format!("{x:?}: {e}")))
            .collect::<Result<Vec<SocketAddr>, String>>()?;
        if addrs.is_empty() || addrs.len() > MAX_LINKS {
            return Err(format!("{s:?}: 1 to {MAX_LINKS} addresses"));
        }
        Ok(EthernetEndpoint {
            addrs,
            epoch: e.parse().map_err(|e| format!("epoch {e:?}: {e}"))?,
            mtu: m.parse().map_err(|e| format!("mtu {m:?}: {e}"))?,
        })
    }
}

/// Bound sockets (one per link), before the node map is known.
pub struct EthernetSocket {
    socks: Vec<UdpSocket>,
    cfg: EthernetConfig,
    epoch: u32,
    mtu: usize,
}

fn io_err(context: String) -> impl FnOnce(io::Error) -> DeviceError {
    move |source| DeviceError::Io {
        device: "ethernet",
        context,
        source,
    }
}

fn bind_one(addr: IpAddr, buffer: usize) -> Result<UdpSocket, DeviceError> {
    let s = Socket::new(
        Domain::for_address(SocketAddr::new(addr, 0)),
        Type::DGRAM,
        Some(Protocol::UDP),
    )
    .map_err(io_err("creating a UDP socket".into()))?;
    // The kernel may grant less; the reliable layer copes with drops.
    let _ = s.set_recv_buffer_size(buffer);
    let _ = s.set_send_buffer_size(buffer);
    s.bind(&SocketAddr::new(addr, 0).into())
        .map_err(io_err(format!("binding UDP on {addr}")))?;
    s.set_nonblocking(true)
        .map_err(io_err("making the socket non-blocking".into()))?;
    Ok(s.into())
}

impl EthernetSocket {
    pub fn bind(cfg: EthernetConfig) -> Result<EthernetSocket, DeviceError> {
        if cfg.addrs.is_empty() || cfg.addrs.len() > MAX_LINKS {
            return Err(DeviceError::Config {
                device: "ethernet",
                reason: format!("1 to {MAX_LINKS} addresses, not {}", cfg.addrs.len()),
            });
        }
        let socks = cfg
            .addrs
            .iter()
            .map(|a| bind_one(*a, cfg.socket_buffer))
            .collect::<Result<Vec<_>, _>>()?;
        let iface = cfg
            .addrs
            .iter()
            .map(|a| {
                interface_mtu(*a)
                    .map(|m| m.saturating_sub(IP_UDP_HEADERS).min(MAX_UDP))
                    .unwrap_or(1472)
            })
            .min()
            .unwrap_or(1472);
        let mtu = match cfg.mtu {
            Some(m) => m.min(MAX_UDP),
            None => iface,
        };
        if mtu <= crate::reliable::header::HEADER + 64 {
            return Err(DeviceError::Config {
                device: "ethernet",
                reason: format!("datagram size {mtu} is too small (FM_ETH_MTU)"),
            });
        }
        Ok(EthernetSocket {
            socks,
            cfg,
            epoch: crate::reliable::new_epoch(),
            mtu,
        })
    }

    pub fn endpoint(&self) -> Result<EthernetEndpoint, DeviceError> {
        Ok(EthernetEndpoint {
            addrs: self
                .socks
                .iter()
                .map(|s| s.local_addr())
                .collect::<io::Result<Vec<_>>>()
                .map_err(io_err("reading the bound address".into()))?,
            epoch: self.epoch,
            mtu: self.mtu as u32,
        })
    }

    /// Associate nodes: `peers[r]` is rank r's endpoint where this device
    /// reaches it (`None` for ranks reached otherwise, and for this rank).
    pub fn associate(
        self,
        job_key: JobKey,
        rank: Rank,
        peers: &[Option<EthernetEndpoint>],
    ) -> Result<EthernetDevice, DeviceError> {
        let mtu = peers
            .iter()
            .flatten()
            .map(|p| p.mtu as usize)
            .fold(self.mtu, usize::min);
        let mut c = ReliableConfig::new("ethernet", job_key, rank, peers.len());
        c.epoch = self.epoch;
        c.mtu = mtu;
        c.window = self.cfg.window;
        c.pool = self
            .cfg
            .pool
            .unwrap_or_else(|| ((16 << 20) / mtu).clamp(128, 4096));
        c.rto = self.cfg.rto;
        c.rto_max = (self.cfg.rto * 100).max(Duration::from_millis(100));
        c.dead_after = self.cfg.dead_after;
        c.payload_crc = self.cfg.payload_crc || self.cfg.faults.is_some_and(|f| f.corrupt > 0.0);
        // Several links to a peer reorder packets among themselves.
        c.reorder = self.socks.len() > 1 && peers.iter().flatten().any(|p| p.addrs.len() > 1);
        let link = UdpLink {
            peers: peers
                .iter()
                .map(|p| p.as_ref().map_or_else(Vec::new, |p| p.addrs.clone()))
                .collect(),
            next_path: vec![0; peers.len()],
            next_sock: 0,
            socks: self.socks,
        };
        let link: Box<dyn Link> = match self.cfg.faults {
            Some(f) => Box::new(FaultyLink::new(link, f)),
            None => Box::new(link),
        };
        let epochs: Vec<Option<u32>> = peers.iter().map(|p| p.as_ref().map(|p| p.epoch)).collect();
        ReliableDevice::new(c, link, &epochs)
    }
}

/// UDP under the reliable layer: one socket per link.
pub struct UdpLink {
    socks: Vec<UdpSocket>,
    /// Each peer's address per link.
    peers: Vec<Vec<SocketAddr>>,
    /// Round-robin position per peer.
    next_path: Vec<usize>,
    /// The socket to read first on the next receive.
    next_sock: usize,
}

impl Link for UdpLink {
    fn send(&mut self, dest: Rank, datagram: &[u8]) -> io::Result<()> {
        let d = dest as usize;
        let paths = self
            .peers
            .get(d)
            .map_or(0, |p| p.len().min(self.socks.len()));
        if paths == 0 {
            return Err(io::Error::new(io::ErrorKind::NotFound, "not a peer"));
        }
        // Link i of ours talks to link i of the peer (same network).
        let i = self.next_path[d] % paths;
        self.next_path[d] = self.next_path[d].wrapping_add(1);
        self.socks[i]
            .send_to(datagram, self.peers[d][i])
            .map(|_| ())
    }

    fn recv(&mut self, buf: &mut [u8]) -> Option<usize> {
        // Any error (would block, an ICMP "port unreachable" reported on a
        // later call) means nothing to read now; the reliable layer times out.
        let n = self.socks.len();
        for k in 0..n {
            let i = (self.next_sock + k) % n;
            if let Ok(len) = self.socks[i].recv(buf) {
                self.next_sock = (i + 1) % n;
                return Some(len);
            }
        }
        None
    }
}

/// The MTU of the interface that holds `addr`, from the kernel.
pub fn interface_mtu(addr: IpAddr) -> Option<usize> {
    let name = interface_of(addr)?;
    std::fs::read_to_string(format!("/sys/class/net/{name}/mtu"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The first IPv4 address of the interface `name`.
pub fn interface_addr(name: &str) -> Option<IpAddr> {
    let mut found = None;
    for_each_address(|ifname, a| {
        if found.is_none() && ifname == name && a.is_ipv4() {
            found = Some(a);
        }
    });
    found
}

fn interface_of(addr: IpAddr) -> Option<String> {
    let mut found = None;
    for_each_address(|ifname, a| {
        if found.is_none() && a == addr {
            found = Some(ifname.to_string());
        }
    });
    found
}

/// Call `f(interface name, address)` for every address of this host.
fn for_each_address(mut f: impl FnMut(&str, IpAddr)) {
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs allocates a list we free below.
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        return;
    }
    let mut cur = list;
    while !cur.is_null() {
        // SAFETY: a node of the list getifaddrs returned.
        let ifa = unsafe { &*cur };
        if !ifa.ifa_addr.is_null() {
            // SAFETY: ifa_addr points to a sockaddr of the family it names;
            // ifa_name is a NUL-terminated string.
            let (a, n) = unsafe {
                (
                    sockaddr_ip(ifa.ifa_addr),
                    std::ffi::CStr::from_ptr(ifa.ifa_name),
                )
            };
            if let Some(a) = a {
                f(&n.to_string_lossy(), a);
            }
        }
        cur = ifa.ifa_next;
    }
    // SAFETY: the list from getifaddrs.
    unsafe { libc::freeifaddrs(list) };
}

/// # Safety
/// `sa` must point to a valid sockaddr.
unsafe fn sockaddr_ip(sa: *const libc::sockaddr) -> Option<IpAddr> {
    match (*sa).sa_family as i32 {
        libc::AF_INET => {
            let s = &*(sa as *const libc::sockaddr_in);
            Some(IpAddr::from(u32::from_be(s.sin_addr.s_addr).to_be_bytes()))
        }
        libc::AF_INET6 => {
            let s = &*(sa as *const libc::sockaddr_in6);
            Some(IpAddr::from(s.sin6_addr.s6_addr))
        }
        _ => None,
    }
}

/// The local address this host uses to reach `remote` (no packet is sent).
pub fn local_addr_towards(remote: SocketAddr) -> Option<IpAddr> {
    let bind: SocketAddr = if remote.is_ipv4() {
        "0.0.0.0:0".parse().ok()?
    } else {
        "[::]:0".parse().ok()?
    };
    let s = UdpSocket::bind(bind).ok()?;
    s.connect(remote).ok()?;
    Some(s.local_addr().ok()?.ip())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Device, DeviceExt};

    #[test]
    fn endpoints_round_trip_and_bad_ones_are_errors() {
        let e = EthernetEndpoint {
            addrs: vec![
                "198.18.0.2:4000".parse().unwrap(),
                "198.19.0.2:4001".parse().unwrap(),
            ],
            epoch: 77,
            mtu: 1472,
        };
        assert_eq!(EthernetEndpoint::decode(&e.encode()), Ok(e.clone()));
        for bad in [
            "",
            "1.2.3.4:5",
            "1.2.3.4:5/x/9",
            "a/1/2",
            "1.2.3.4:5/1/2/3",
            "1.2.3.4:5+/1/2",
        ] {
            assert!(EthernetEndpoint::decode(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn two_devices_over_loopback_udp() {
        let lo: IpAddr = "127.0.0.1".parse().unwrap();
        let (a, b) = (
            EthernetSocket::bind(EthernetConfig::new(lo)).unwrap(),
            EthernetSocket::bind(EthernetConfig::new(lo)).unwrap(),
        );
        assert!(interface_mtu(lo).is_some());
        let (ea, eb) = (a.endpoint().unwrap(), b.endpoint().unwrap());
        let mut da = a.associate(JobKey(5), 0, &[None, Some(eb)]).unwrap();
        let mut db = b.associate(JobKey(5), 1, &[Some(ea), None]).unwrap();
        exchange(&mut da, &mut db);
    }

    #[test]
    fn two_links_per_peer_trunk_round_robin() {
        let lo = "127.0.0.1".parse().unwrap();
        let mut c = EthernetConfig::new(lo);
        c.addrs = vec![lo, "127.0.0.2".parse().unwrap()];
        let (a, b) = (
            EthernetSocket::bind(c.clone()).unwrap(),
            EthernetSocket::bind(c).unwrap(),
        );
        let (ea, eb) = (a.endpoint().unwrap(), b.endpoint().unwrap());
        assert_eq!(ea.addrs.len(), 2);
        let mut da = a.associate(JobKey(5), 0, &[None, Some(eb)]).unwrap();
        let mut db = b.associate(JobKey(5), 1, &[Some(ea), None]).unwrap();
        exchange(&mut da, &mut db);
    }

    fn exchange(da: &mut EthernetDevice, db: &mut EthernetDevice) {
        let mtu = da.info().mtu;
        for i in 0..200u32 {
            let len = (i as usize * 997) % mtu;
            let mut buf = loop {
                match da.get_send_buffer(1, len) {
                    Ok(b) => break b,
                    Err(DeviceError::NoBuffer { .. }) => {}
                    Err(e) => panic!("{e}"),
                }
            };
            buf.fill(i as u8);
            buf.send();
            let r = loop {
                if let Some(r) = db.receive() {
                    break r;
                }
            };
            assert_eq!((r.len(), r.src()), (len, 0));
            assert!(r.iter().all(|&x| x == i as u8));
        }
    }
}
