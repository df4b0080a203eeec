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

pub mod settings;

use crate::reliable::{Link, Settings, Trunk};
use crate::{DeviceError, JobKey, Rank};
use socket2::{Domain, Protocol, Socket, Type};
use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// IPv4 (20) + UDP (8) headers.
const IP_UDP_HEADERS: usize = 28;
/// The largest UDP payload.
const MAX_UDP: usize = 65507;

pub type EthernetDevice = crate::reliable::NetDevice;

/// Settings of the ethernet device (`FM_ETH_*`, docs/CONFIG.md).
#[derive(Clone, Debug)]
pub struct EthernetConfig {
    /// Addresses to bind and advertise: one link each (several = trunking).
    pub addrs: Vec<IpAddr>,
    /// Largest datagram (header included); `None`: the interface's MTU less
    /// the IP and UDP headers (65507 on loopback: fewer, larger datagrams
    /// moved 2.7× the bandwidth of 16 KiB ones here).
    pub mtu: Option<usize>,
    /// The pacer's datagram size, used when `mtu` is not set (capped by
    /// the interfaces' MTU, like the default).
    pub paced_mtu: Option<usize>,
    /// Socket buffer sizes asked of the kernel.
    pub socket_buffer: usize,
    pub reliable: Settings,
}

impl EthernetConfig {
    pub fn new(addr: IpAddr) -> Self {
        EthernetConfig {
            addrs: vec![addr],
            mtu: None,
            paced_mtu: None,
            socket_buffer: 4 << 20,
            reliable: Settings::default(),
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
        crate::reliable::encode_endpoint(&a.join("+"), self.epoch, self.mtu)
    }

    pub fn decode(s: &str) -> Result<EthernetEndpoint, String> {
        let (a, epoch, mtu) = crate::reliable::decode_endpoint(s, "ip:port[+ip:port]/epoch/mtu")?;
        let addrs = a
            .split('+')
            .map(|x| x.parse().map_err(|e| format!("{x:?}: {e}")))
            .collect::<Result<Vec<SocketAddr>, String>>()?;
        if addrs.is_empty() || addrs.len() > MAX_LINKS {
            return Err(format!("{s:?}: 1 to {MAX_LINKS} addresses"));
        }
        Ok(EthernetEndpoint { addrs, epoch, mtu })
    }

    /// What the reliable layer needs of it.
    pub fn peer_link(&self) -> crate::reliable::PeerLink {
        crate::reliable::PeerLink {
            epoch: self.epoch,
            mtu: self.mtu as usize,
            links: self.addrs.len(),
        }
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
    DeviceError::io("ethernet", context)
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
            .map(|a| max_datagram(*a))
            .min()
            .unwrap_or(1472);
        let mtu = match (cfg.mtu, cfg.paced_mtu) {
            (Some(m), _) => m.min(MAX_UDP),
            (None, Some(p)) => p.min(iface),
            (None, None) => iface,
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
        let addrs = peers
            .iter()
            .map(|p| p.as_ref().map_or_else(Vec::new, |p| p.addrs.clone()))
            .collect();
        let links = self.socks.len();
        let link = UdpLink {
            trunk: Trunk::new(addrs, links),
            socks: self.socks,
            last_from: None,
        };
        let peers: Vec<_> = peers
            .iter()
            .map(|p| p.as_ref().map(EthernetEndpoint::peer_link))
            .collect();
        let r = &self.cfg.reliable;
        let c = r.config("ethernet", job_key, rank, peers.len(), self.epoch, self.mtu);
        r.associate(c, &peers, links, link)
    }
}

/// UDP under the reliable layer: one socket per link.
pub struct UdpLink {
    socks: Vec<UdpSocket>,
    trunk: Trunk<SocketAddr>,
    /// The link and sender of the datagram `recv` returned last.
    last_from: Option<(usize, SocketAddr)>,
}

impl Link for UdpLink {
    fn wait_fds(&self) -> Vec<std::os::fd::RawFd> {
        use std::os::fd::AsRawFd;
        self.socks.iter().map(|s| s.as_raw_fd()).collect()
    }
    fn send(&mut self, dest: Rank, datagram: &[u8]) -> io::Result<()> {
        let (i, to) = self.trunk.route(dest)?;
        self.socks[i].send_to(datagram, to).map(|_| ())
    }

    fn recv(&mut self, buf: &mut [u8]) -> Option<usize> {
        // Any error (would block, an ICMP "port unreachable" reported on a
        // later call) means nothing to read now; the reliable layer times out.
        let socks = &self.socks;
        let mut from = None;
        let (i, n) = self.trunk.recv(|i| {
            let (n, a) = socks[i].recv_from(buf).ok()?;
            from = Some(a);
            Some(n)
        })?;
        self.last_from = from.map(|a| (i, a));
        Some(n)
    }

    fn came_from(&self, claimed: Rank) -> bool {
        (self.last_from).is_some_and(|(i, a)| self.trunk.is_address_of(claimed, i, &a))
    }
}

/// Datagram sizes the pacer tries (paper 000 §6's burst size, here bytes
/// per system call), up to what the interface carries unfragmented (which
/// is always tried too). Below 8 KiB loopback moved 2–5× less in every
/// curve measured here (docs/PERFORMANCE.md).
pub const DATAGRAM_SIZES: [u64; 4] = [8192, 16384, 32768, MAX_UDP as u64];

/// The largest datagram `addr`'s interface carries without fragmenting.
pub fn max_datagram(addr: IpAddr) -> usize {
    interface_mtu(addr)
        .map(|m| m.saturating_sub(IP_UDP_HEADERS).min(MAX_UDP))
        .unwrap_or(1472)
}

/// The pacer's micro-benchmark: MB/s that one thread streams to another
/// (on another CPU) through two UDP sockets on `addr`, in datagrams of each
/// of `sizes` in turn, counting what arrives (a full receive buffer drops);
/// each measured for `window` after a warm-up of a third of that. One pair of
/// threads runs through all sizes, so no size pays for waking a CPU.
pub fn stream_rates(
    addr: IpAddr,
    sizes: &[usize],
    socket_buffer: usize,
    window: Duration,
) -> Vec<Option<f64>> {
    let (Ok(tx), Ok(rx)) = (bind_one(addr, socket_buffer), bind_one(addr, socket_buffer)) else {
        return vec![None; sizes.len()];
    };
    let Ok(to) = rx.local_addr() else {
        return vec![None; sizes.len()];
    };
    const STOP: usize = usize::MAX;
    let phase = AtomicUsize::new(0);
    let data = vec![0x5au8; sizes.iter().copied().max().unwrap_or(0).min(MAX_UDP)];
    let cpus = crate::sys::CpuPair::take();
    std::thread::scope(|s| {
        s.spawn(|| {
            cpus.pin_other();
            loop {
                let i = phase.load(Ordering::Relaxed);
                let Some(&n) = sizes.get(i) else { break };
                // Would-block (the send buffer is full) just tries again.
                let _ = tx.send_to(&data[..n.min(data.len())], to);
            }
        });
        let mut buf = vec![0u8; MAX_UDP];
        // One window more on the first size: the other CPU wakes up.
        let order =
            std::iter::once((0, window)).chain((0..sizes.len()).map(|i| (i, Duration::ZERO)));
        let mut rates: Vec<Option<f64>> = order
            .map(|(i, extra)| {
                phase.store(i, Ordering::Relaxed);
                let mut clock = crate::sys::RateWindow::new(window, extra);
                let mut moved = 0usize;
                loop {
                    match rx.recv(&mut buf) {
                        Ok(n) => moved += n,
                        Err(_) => std::hint::spin_loop(),
                    }
                    if let Some(rate) = clock.check(moved) {
                        break rate;
                    }
                }
            })
            .collect();
        rates.remove(0);
        phase.store(STOP, Ordering::Relaxed);
        rates
    })
}

/// The MTU of the interface that holds `addr`, from the kernel.
pub fn interface_mtu(addr: IpAddr) -> Option<usize> {
    crate::sys::interface_mtu(&interface_of(addr)?)
}

/// The first IPv4 address of the interface `name`.
pub fn interface_addr(name: &str) -> Option<IpAddr> {
    crate::sys::find_address(|ifname, a, _| (ifname == name && a.is_ipv4()).then_some(a))
}

/// The name of the interface that holds `addr`.
pub fn interface_of(addr: IpAddr) -> Option<String> {
    crate::sys::find_address(|ifname, a, _| (a == addr).then(|| ifname.to_string()))
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

    /// An outsider who knows everything in the clear (job key, both
    /// epochs, the next sequence number, the receiver's address; what one
    /// captured packet shows) sends the receiver forged DATA from its own
    /// socket before the real sender starts: without a MAC, with a zero
    /// MAC, and with a valid MAC (as if it had the key) but from the wrong
    /// address. Every forgery is dropped and counted under its reason and
    /// the real messages arrive exactly once, intact.
    #[test]
    fn forged_datagrams_from_outside_are_dropped_and_counted() {
        use crate::reliable::header::{Header, Kind, MacKey, HEADER};
        let key = MacKey::from_token("a-job-token-for-the-forgery-test");
        let forge = |with_key: bool| {
            let lo: IpAddr = "127.0.0.1".parse().unwrap();
            let mut c = EthernetConfig::new(lo);
            c.reliable.mac = with_key.then(|| key.clone());
            let (a, b) = (
                EthernetSocket::bind(c.clone()).unwrap(),
                EthernetSocket::bind(c).unwrap(),
            );
            let (ea, eb) = (a.endpoint().unwrap(), b.endpoint().unwrap());
            let mut da = a
                .associate(JobKey(5), 0, &[None, Some(eb.clone())])
                .unwrap();
            let mut db = b
                .associate(JobKey(5), 1, &[Some(ea.clone()), None])
                .unwrap();
            let outsider = UdpSocket::bind((lo, 0)).unwrap();
            let header = |mac: bool| Header {
                kind: Kind::Data,
                job_key: 5,
                src: 0,
                dst: 1,
                src_epoch: ea.epoch,
                dst_epoch: eb.epoch,
                number: 1,
                ack: 0,
                len: 4,
                control: 0,
                payload_crc: false,
                mac,
            };
            for (mac, sign) in [(false, None), (true, None), (true, Some(&key))] {
                let mut d = vec![0xEE; HEADER + 4];
                header(mac).write(&mut d, sign);
                outsider.send_to(&d, eb.addrs[0]).unwrap();
            }
            std::thread::sleep(Duration::from_millis(20));
            let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                exchange(&mut da, &mut db)
            }));
            (caught.is_ok(), db.reliable_stats())
        };
        let (ok, st) = forge(true);
        assert!(ok, "the real messages did not arrive intact: {st:?}");
        assert_eq!(
            (st.dropped_unauthenticated, st.dropped_wrong_address),
            (2, 1),
            "{st:?}"
        );
        assert_eq!(st.data_accepted, 200, "{st:?}");
        // Without MACs the address check alone stops an outsider who
        // cannot spoof the sender's address (the virtual-time test shows
        // what a forger who can gets through without the MAC).
        let (ok, st) = forge(false);
        assert!(ok, "{st:?}");
        assert_eq!(st.dropped_wrong_address, 3, "{st:?}");
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
