//! The `ethernet` device: PM's reliable layer over UDP (SCore's PM/UDP).
//!
//! Unprivileged and routable. Opening is two steps, as PMv2's open-context
//! then associate-nodes: [`EthernetSocket::bind`] binds a non-blocking UDP
//! socket and draws the epoch, so the endpoint (`ip:port/epoch/mtu`) can go
//! into the node map; [`EthernetSocket::associate`] then takes every rank's
//! endpoint and gives the device. Datagram size: the interface's MTU less the
//! IP and UDP headers, capped by configuration.

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
    /// Address to bind and advertise.
    pub addr: IpAddr,
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
}

impl EthernetConfig {
    pub fn new(addr: IpAddr) -> Self {
        EthernetConfig {
            addr,
            mtu: None,
            window: 64,
            pool: None,
            rto: Duration::from_millis(2),
            dead_after: Duration::from_secs(10),
            socket_buffer: 4 << 20,
            faults: None,
        }
    }
}

/// Where a rank's ethernet device listens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EthernetEndpoint {
    pub addr: SocketAddr,
    pub epoch: u32,
    pub mtu: u32,
}

impl EthernetEndpoint {
    /// `ip:port/epoch/mtu`.
    pub fn encode(&self) -> String {
        format!("{}/{}/{}", self.addr, self.epoch, self.mtu)
    }

    pub fn decode(s: &str) -> Result<EthernetEndpoint, String> {
        let mut it = s.split('/');
        let (Some(a), Some(e), Some(m), None) = (it.next(), it.next(), it.next(), it.next()) else {
            return Err(format!("{s:?} is not ip:port/epoch/mtu"));
        };
        Ok(EthernetEndpoint {
            addr: a.parse().map_err(|e| format!("{a:?}: {e}"))?,
            epoch: e.parse().map_err(|e| format!("epoch {e:?}: {e}"))?,
            mtu: m.parse().map_err(|e| format!("mtu {m:?}: {e}"))?,
        })
    }
}

/// A bound socket, before the node map is known.
pub struct EthernetSocket {
    sock: UdpSocket,
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

impl EthernetSocket {
    pub fn bind(cfg: EthernetConfig) -> Result<EthernetSocket, DeviceError> {
        let domain = Domain::for_address(SocketAddr::new(cfg.addr, 0));
        let s = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP))
            .map_err(io_err("creating a UDP socket".into()))?;
        // The kernel may grant less; the reliable layer copes with drops.
        let _ = s.set_recv_buffer_size(cfg.socket_buffer);
        let _ = s.set_send_buffer_size(cfg.socket_buffer);
        s.bind(&SocketAddr::new(cfg.addr, 0).into())
            .map_err(io_err(format!("binding UDP on {}", cfg.addr)))?;
        s.set_nonblocking(true)
            .map_err(io_err("making the socket non-blocking".into()))?;
        let iface = interface_mtu(cfg.addr)
            .map(|m| (m.saturating_sub(IP_UDP_HEADERS)).min(MAX_UDP))
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
            sock: s.into(),
            cfg,
            epoch: crate::reliable::new_epoch(),
            mtu,
        })
    }

    pub fn endpoint(&self) -> Result<EthernetEndpoint, DeviceError> {
        Ok(EthernetEndpoint {
            addr: self
                .sock
                .local_addr()
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
        let link = UdpLink {
            sock: self.sock,
            peers: peers.iter().map(|p| p.map(|p| p.addr)).collect(),
        };
        let link: Box<dyn Link> = match self.cfg.faults {
            Some(f) => Box::new(FaultyLink::new(link, f)),
            None => Box::new(link),
        };
        let epochs: Vec<Option<u32>> = peers.iter().map(|p| p.map(|p| p.epoch)).collect();
        ReliableDevice::new(c, link, &epochs)
    }
}

/// UDP under the reliable layer.
pub struct UdpLink {
    sock: UdpSocket,
    peers: Vec<Option<SocketAddr>>,
}

impl Link for UdpLink {
    fn send(&mut self, dest: Rank, datagram: &[u8]) -> io::Result<()> {
        let Some(Some(to)) = self.peers.get(dest as usize) else {
            return Err(io::Error::new(io::ErrorKind::NotFound, "not a peer"));
        };
        self.sock.send_to(datagram, to).map(|_| ())
    }

    fn recv(&mut self, buf: &mut [u8]) -> Option<usize> {
        // Any error (would block, an ICMP "port unreachable" reported on a
        // later call) means nothing to read now; the reliable layer times out.
        self.sock.recv(buf).ok()
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

fn interface_of(addr: IpAddr) -> Option<String> {
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs allocates a list we free below.
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        return None;
    }
    let mut found = None;
    let mut cur = list;
    while !cur.is_null() {
        // SAFETY: a node of the list getifaddrs returned.
        let ifa = unsafe { &*cur };
        if !ifa.ifa_addr.is_null() {
            // SAFETY: ifa_addr points to a sockaddr of the family it names.
            let a = unsafe { sockaddr_ip(ifa.ifa_addr) };
            if a == Some(addr) {
                // SAFETY: ifa_name is a NUL-terminated string.
                let n = unsafe { std::ffi::CStr::from_ptr(ifa.ifa_name) };
                found = Some(n.to_string_lossy().into_owned());
                break;
            }
        }
        cur = ifa.ifa_next;
    }
    // SAFETY: the list from getifaddrs.
    unsafe { libc::freeifaddrs(list) };
    found
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
            addr: "198.18.0.2:4000".parse().unwrap(),
            epoch: 77,
            mtu: 1472,
        };
        assert_eq!(EthernetEndpoint::decode(&e.encode()), Ok(e));
        for bad in ["", "1.2.3.4:5", "1.2.3.4:5/x/9", "a/1/2", "1.2.3.4:5/1/2/3"] {
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
