//! The `nic` device: raw Ethernet frames of fm's own EtherType through
//! memory-mapped AF_PACKET rings (PACKET_MMAP, TPACKET_V2) — HPVM's
//! memory-notified Myrinet rings and PM/Ethernet's EtherType, on unmodified
//! drivers.
//!
//! The kernel writes an arrived frame into the mapped RX ring and sets the
//! frame's status word last; receiving is a load of that word: no system
//! call when nothing has arrived and none per frame. Sending fills frames of
//! the mapped TX ring and kicks the kernel once per burst (`send` with no
//! data), past the queueing discipline where the kernel allows it.
//! Reliability is the reliable layer's, unchanged (as for `ethernet`).
//!
//! Every rank of a host that uses the same interface has its own socket on
//! it; a socket filter (classic BPF) keeps the frames addressed to the other
//! ranks of this host out of each ring. Frames for nobody here — another
//! job's, broken ones — still reach the rings, and the reliable layer drops
//! and counts them.
//!
//! Needs CAP_NET_RAW: without it opening fails with
//! [`DeviceError::NotPermitted`], and fm falls back to `ethernet`.

pub mod settings;

use crate::reliable::{ArrivalProbe, Link, Settings, Trunk};
use crate::{DeviceError, JobKey, Rank};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering};
use std::sync::Arc;

/// IEEE 802 "local experimental" EtherType 1.
pub const DEFAULT_ETHERTYPE: u16 = 0x88B5;
/// Destination MAC, source MAC, EtherType.
const ETH_HEADER: usize = 14;
/// Where TX frame data starts: TPACKET_ALIGN(sizeof(struct tpacket2_hdr)).
const TX_DATA: usize = 32;
/// Room the kernel keeps before an RX frame's data (headers, alignment).
const RX_RESERVE: usize = 128;
/// Links of one endpoint at most (interfaces, for trunking).
pub const MAX_LINKS: usize = 8;

pub type NicDevice = crate::reliable::NetDevice;

/// Settings of the nic device (`FM_NIC_*`, docs/CONFIG.md).
#[derive(Clone, Debug)]
pub struct NicConfig {
    /// Interfaces to use, one link each (several = trunking).
    pub ifaces: Vec<String>,
    pub ethertype: u16,
    /// Largest frame payload (header of the reliable layer included);
    /// `None`: the interface's MTU.
    pub mtu: Option<usize>,
    /// Frames in each RX ring and in each TX ring.
    pub rx_frames: usize,
    pub tx_frames: usize,
    /// The layer-2 network the first interface is on: ranks on the same
    /// network talk through nic. `None`: its IPv4 network (`198.18.1.0/24`).
    pub network: Option<String>,
    pub reliable: Settings,
}

impl NicConfig {
    pub fn new(iface: &str) -> Self {
        NicConfig {
            ifaces: vec![iface.to_string()],
            ethertype: DEFAULT_ETHERTYPE,
            mtu: None,
            rx_frames: 1024,
            tx_frames: 256,
            network: None,
            reliable: Settings::default(),
        }
    }
}

/// Where a rank's nic device listens: a MAC per link, the layer-2 network,
/// the epoch and the frame payload size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NicEndpoint {
    pub macs: Vec<[u8; 6]>,
    pub network: String,
    pub epoch: u32,
    pub mtu: u32,
}

impl NicEndpoint {
    /// `mac[+mac…]@network/epoch/mtu` (the network may hold a `/`).
    pub fn encode(&self) -> String {
        let m: Vec<String> = self.macs.iter().map(format_mac).collect();
        let links = format!("{}@{}", m.join("+"), self.network);
        crate::reliable::encode_endpoint(&links, self.epoch, self.mtu)
    }

    pub fn decode(s: &str) -> Result<NicEndpoint, String> {
        let form = "mac[+mac]@network/epoch/mtu";
        let (links, epoch, mtu) = crate::reliable::decode_endpoint(s, form)?;
        let (macs, network) = links
            .split_once('@')
            .ok_or_else(|| format!("{s:?} is not {form}"))?;
        let macs = macs
            .split('+')
            .map(parse_mac)
            .collect::<Result<Vec<_>, _>>()?;
        if macs.is_empty() || macs.len() > MAX_LINKS || network.is_empty() {
            return Err(format!("{s:?}: 1 to {MAX_LINKS} MACs and a network"));
        }
        Ok(NicEndpoint {
            macs,
            network: network.to_string(),
            epoch,
            mtu,
        })
    }

    /// What the reliable layer needs of it.
    pub fn peer_link(&self) -> crate::reliable::PeerLink {
        crate::reliable::PeerLink {
            epoch: self.epoch,
            mtu: self.mtu as usize,
            links: self.macs.len(),
        }
    }
}

pub fn format_mac(m: &[u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

pub fn parse_mac(s: &str) -> Result<[u8; 6], String> {
    let mut m = [0u8; 6];
    let parts: Vec<&str> = s.trim().split(':').collect();
    if parts.len() != 6 {
        return Err(format!("{s:?} is not a MAC address"));
    }
    for (b, p) in m.iter_mut().zip(parts) {
        *b = u8::from_str_radix(p, 16).map_err(|_| format!("{s:?} is not a MAC address"))?;
    }
    Ok(m)
}

/// The rings of every interface, opened before the node map is known.
pub struct NicSocket {
    rings: Vec<Ring>,
    cfg: NicConfig,
    network: String,
    epoch: u32,
    mtu: usize,
}

fn io_err(context: String) -> impl FnOnce(io::Error) -> DeviceError {
    DeviceError::io("nic", context)
}

fn config_err(reason: String) -> DeviceError {
    DeviceError::Config {
        device: "nic",
        reason,
    }
}

impl NicSocket {
    /// Open a packet socket with RX and TX rings on each interface. Frames
    /// flow only once [`NicSocket::associate`] binds them.
    pub fn open(cfg: NicConfig) -> Result<NicSocket, DeviceError> {
        if cfg.ifaces.is_empty() || cfg.ifaces.len() > MAX_LINKS {
            return Err(config_err(format!(
                "1 to {MAX_LINKS} interfaces, not {}",
                cfg.ifaces.len()
            )));
        }
        if cfg.ethertype < 0x0600 {
            return Err(config_err(format!(
                "EtherType {:#06x} is a length, not a type (use 0x0600 or above, e.g. {DEFAULT_ETHERTYPE:#06x})",
                cfg.ethertype
            )));
        }
        let mut mtu = usize::MAX;
        for i in &cfg.ifaces {
            let m = crate::sys::interface_mtu(i)
                .ok_or_else(|| config_err(format!("interface {i:?} does not exist here")))?;
            mtu = mtu.min(m);
        }
        let mtu = cfg.mtu.map_or(mtu, |m| m.min(mtu));
        if mtu <= crate::reliable::header::HEADER + 64 {
            return Err(config_err(format!(
                "frame payload {mtu} is too small (FM_NIC_MTU)"
            )));
        }
        let rings = cfg
            .ifaces
            .iter()
            .map(|i| Ring::open(i, mtu, cfg.rx_frames, cfg.tx_frames))
            .collect::<Result<Vec<_>, _>>()?;
        let network = match &cfg.network {
            Some(n) => n.clone(),
            None => interface_network(&cfg.ifaces[0]).ok_or_else(|| {
                config_err(format!(
                    "interface {:?} has no IPv4 network to tell which hosts share it: set FM_NIC_NETWORK",
                    cfg.ifaces[0]
                ))
            })?,
        };
        Ok(NicSocket {
            rings,
            cfg,
            network,
            epoch: crate::reliable::new_epoch(),
            mtu,
        })
    }

    pub fn endpoint(&self) -> NicEndpoint {
        NicEndpoint {
            macs: self.rings.iter().map(|r| r.mac).collect(),
            network: self.network.clone(),
            epoch: self.epoch,
            mtu: self.mtu as u32,
        }
    }

    /// Whether a peer with endpoint `p` is on this device's layer-2 network.
    pub fn shares_network(&self, p: &NicEndpoint) -> bool {
        p.network == self.network
    }

    /// Associate nodes: `peers[r]` is rank r's endpoint (`None` for ranks
    /// reached otherwise and for this rank); ranks on another layer-2
    /// network are not reached. `host_mates` are the other ranks of this
    /// host: their frames are filtered out of our rings.
    pub fn associate(
        mut self,
        job_key: JobKey,
        rank: Rank,
        peers: &[Option<NicEndpoint>],
        host_mates: &[Rank],
    ) -> Result<NicDevice, DeviceError> {
        let peers: Vec<Option<NicEndpoint>> = peers
            .iter()
            .map(|p| p.clone().filter(|p| self.shares_network(p)))
            .collect();
        let filter = rank_filter(host_mates);
        for (r, iface) in self.rings.iter_mut().zip(&self.cfg.ifaces) {
            r.bind(iface, self.cfg.ethertype, &filter)?;
        }
        let words: Arc<[AtomicPtr<AtomicU32>]> = self
            .rings
            .iter()
            .map(|r| AtomicPtr::new(r.rx_status(0)))
            .collect();
        let macs = peers
            .iter()
            .map(|p| p.as_ref().map_or_else(Vec::new, |p| p.macs.clone()))
            .collect();
        let links = self.rings.len();
        let link = RingLink {
            trunk: Trunk::new(macs, links),
            ethertype: self.cfg.ethertype.to_be_bytes(),
            words,
            rings: self.rings,
            last_from: (0, [0; 6]),
        };
        let peers: Vec<_> = peers
            .iter()
            .map(|p| p.as_ref().map(NicEndpoint::peer_link))
            .collect();
        let r = &self.cfg.reliable;
        let c = r.config("nic", job_key, rank, peers.len(), self.epoch, self.mtu);
        r.associate(c, &peers, links, link)
    }
}

/// One interface's packet socket and its two mapped rings (RX, then TX).
struct Ring {
    fd: OwnedFd,
    map: *mut u8,
    map_len: usize,
    frame: usize,
    rx: usize,
    tx: usize,
    rx_head: usize,
    tx_head: usize,
    /// TX frames filled since the last kick.
    tx_queued: usize,
    mac: [u8; 6],
    /// Drops the kernel reported so far (PACKET_STATISTICS resets on read).
    drops: u64,
}

// SAFETY: the mapping belongs to this ring alone; it moves between threads
// with the device and is only touched under the device's lock (the arrival
// probe only reads status words, atomically).
unsafe impl Send for Ring {}

fn setsockopt<T>(fd: &OwnedFd, level: i32, name: i32, v: &T) -> io::Result<()> {
    // SAFETY: `v` is a live value of the size passed.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (v as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// A packet socket of protocol 0: nothing arrives until `bind`, after the
/// filter is on.
fn packet_socket() -> Result<OwnedFd, DeviceError> {
    // SAFETY: plain syscall; the fd is owned below.
    let raw = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, 0) };
    if raw < 0 {
        let e = io::Error::last_os_error();
        return Err(match e.raw_os_error() {
            Some(libc::EPERM) | Some(libc::EACCES) => DeviceError::NotPermitted {
                device: "nic",
                reason: format!(
                    "a packet socket needs CAP_NET_RAW ({e}); give it with `setcap cap_net_raw+ep <program>`"
                ),
            },
            _ => io_err("creating a packet socket".into())(e),
        });
    }
    // SAFETY: a fresh fd we own.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

impl Ring {
    fn open(iface: &str, mtu: usize, rx: usize, tx: usize) -> Result<Ring, DeviceError> {
        let fd = packet_socket()?;
        let what = |w: &str| format!("{w} on {iface}");
        setsockopt(
            &fd,
            libc::SOL_PACKET,
            libc::PACKET_VERSION,
            &(libc::tpacket_versions::TPACKET_V2 as i32),
        )
        .map_err(io_err(what("TPACKET_V2")))?;
        // Frames: a power of two that holds the kernel's header and the
        // Ethernet frame; blocks of at least a page.
        let frame = (RX_RESERVE + ETH_HEADER + mtu)
            .next_power_of_two()
            .max(2048);
        let page = 4096usize;
        let block = frame.max(page);
        let per_block = block / frame;
        let rx = rx.max(per_block * 2).div_ceil(per_block) * per_block;
        let tx = tx.max(per_block * 2).div_ceil(per_block) * per_block;
        for (opt, n, name) in [
            (libc::PACKET_RX_RING, rx, "RX ring"),
            (libc::PACKET_TX_RING, tx, "TX ring"),
        ] {
            let req = libc::tpacket_req {
                tp_block_size: block as u32,
                tp_block_nr: (n / per_block) as u32,
                tp_frame_size: frame as u32,
                tp_frame_nr: n as u32,
            };
            setsockopt(&fd, libc::SOL_PACKET, opt, &req).map_err(io_err(what(name)))?;
        }
        // Straight to the driver (kernel ≥ 3.14); a malformed frame is
        // skipped instead of blocking the ring.
        let _ = setsockopt(&fd, libc::SOL_PACKET, libc::PACKET_QDISC_BYPASS, &1i32);
        let _ = setsockopt(&fd, libc::SOL_PACKET, libc::PACKET_LOSS, &1i32);
        let map_len = (rx + tx) * frame;
        // SAFETY: maps the rings the kernel just made for this socket.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(io_err(what("mapping the rings"))(io::Error::last_os_error()));
        }
        let mac = crate::sys::interface_mac(iface)
            .ok_or_else(|| config_err(format!("interface {iface:?} has no MAC address")))?;
        Ok(Ring {
            fd,
            map: map.cast(),
            map_len,
            frame,
            rx,
            tx,
            rx_head: 0,
            tx_head: 0,
            tx_queued: 0,
            mac,
            drops: 0,
        })
    }

    /// Attach the socket filter, then start receiving our EtherType on `iface`.
    fn bind(
        &mut self,
        iface: &str,
        ethertype: u16,
        filter: &[libc::sock_filter],
    ) -> Result<(), DeviceError> {
        let prog = libc::sock_fprog {
            len: filter.len() as u16,
            filter: filter.as_ptr() as *mut libc::sock_filter,
        };
        setsockopt(&self.fd, libc::SOL_SOCKET, libc::SO_ATTACH_FILTER, &prog)
            .map_err(io_err(format!("attaching the rank filter on {iface}")))?;
        let name = std::ffi::CString::new(iface)
            .map_err(|_| config_err(format!("interface {iface:?} is not a valid name")))?;
        // SAFETY: a NUL-terminated name.
        let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
        if index == 0 {
            return Err(config_err(format!(
                "interface {iface:?} does not exist here"
            )));
        }
        // SAFETY: zeroed sockaddr_ll is valid; fields set below.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = ethertype.to_be();
        sll.sll_ifindex = index as i32;
        // SAFETY: binds our socket to a sockaddr_ll of the right size.
        let rc = unsafe {
            libc::bind(
                self.fd.as_raw_fd(),
                (&sll as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(io_err(format!("binding to {iface}"))(
                io::Error::last_os_error(),
            ));
        }
        Ok(())
    }

    fn rx_frame(&self, i: usize) -> *mut u8 {
        // SAFETY: i < rx: inside the RX part of the mapping.
        unsafe { self.map.add(i * self.frame) }
    }

    fn tx_frame(&self, i: usize) -> *mut u8 {
        // SAFETY: i < tx: inside the TX part, after the RX frames.
        unsafe { self.map.add((self.rx + i) * self.frame) }
    }

    /// The status word of RX frame `i` (first field of its tpacket2_hdr).
    fn rx_status(&self, i: usize) -> *mut AtomicU32 {
        self.rx_frame(i).cast()
    }

    /// The status word of a frame of this ring's mapping.
    fn status(&self, frame: *mut u8) -> &AtomicU32 {
        // SAFETY: every frame starts with its u32 status word, 16-byte
        // aligned, shared with the kernel; the mapping lives as long as self.
        unsafe { &*(frame as *const AtomicU32) }
    }

    /// The next arrived frame's Ethernet payload, copied into `buf`, and
    /// its source MAC in `from`.
    fn recv(&mut self, buf: &mut [u8], from: &mut [u8; 6]) -> Option<usize> {
        let f = self.rx_frame(self.rx_head);
        if self.status(f).load(Ordering::Acquire) & libc::TP_STATUS_USER == 0 {
            return None;
        }
        // SAFETY: the kernel handed this frame to us (TP_STATUS_USER): its
        // header is ours to read until we give it back.
        let h = unsafe { &*(f as *const libc::tpacket2_hdr) };
        let (mac, snap) = (h.tp_mac as usize, h.tp_snaplen as usize);
        let whole = snap == h.tp_len as usize && snap >= ETH_HEADER && mac + snap <= self.frame;
        let n = if whole {
            let n = (snap - ETH_HEADER).min(buf.len());
            // SAFETY: mac + snap ≤ frame: the frame's data, inside the mapping.
            let data = unsafe { std::slice::from_raw_parts(f.add(mac + ETH_HEADER), n) };
            buf[..n].copy_from_slice(data);
            // SAFETY: as above; bytes 6..12 of the Ethernet header.
            let src = unsafe { std::slice::from_raw_parts(f.add(mac + 6), 6) };
            from.copy_from_slice(src);
            n
        } else {
            0 // truncated or broken: the reliable layer counts it malformed
        };
        self.status(f)
            .store(libc::TP_STATUS_KERNEL, Ordering::Release);
        self.rx_head = (self.rx_head + 1) % self.rx;
        Some(n)
    }

    /// Queue one frame to `dst`; kick the kernel when the ring is full.
    fn send(&mut self, dst: &[u8; 6], ethertype: [u8; 2], datagram: &[u8]) -> io::Result<()> {
        let len = ETH_HEADER + datagram.len();
        if TX_DATA + len > self.frame {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "frame too large",
            ));
        }
        let f = self.tx_frame(self.tx_head);
        if self.status(f).load(Ordering::Acquire) != libc::TP_STATUS_AVAILABLE {
            // Full: let the kernel send what is queued, then look again.
            self.kick();
            if self.status(f).load(Ordering::Acquire) != libc::TP_STATUS_AVAILABLE {
                return Err(io::ErrorKind::WouldBlock.into());
            }
        }
        // SAFETY: an AVAILABLE TX frame is ours to fill; len fits (checked).
        unsafe {
            let d = f.add(TX_DATA);
            std::ptr::copy_nonoverlapping(dst.as_ptr(), d, 6);
            std::ptr::copy_nonoverlapping(self.mac.as_ptr(), d.add(6), 6);
            std::ptr::copy_nonoverlapping(ethertype.as_ptr(), d.add(12), 2);
            std::ptr::copy_nonoverlapping(datagram.as_ptr(), d.add(ETH_HEADER), datagram.len());
            (*(f as *mut libc::tpacket2_hdr)).tp_len = len as u32;
        }
        self.status(f)
            .store(libc::TP_STATUS_SEND_REQUEST, Ordering::Release);
        self.tx_head = (self.tx_head + 1) % self.tx;
        self.tx_queued += 1;
        Ok(())
    }

    /// Hand the queued TX frames to the kernel: one system call.
    fn kick(&mut self) {
        // SAFETY: a zero-length send on our socket sends the ring's queued frames.
        unsafe {
            libc::send(self.fd.as_raw_fd(), std::ptr::null(), 0, libc::MSG_DONTWAIT);
        }
        self.tx_queued = 0;
    }

    fn kernel_drops(&mut self) -> u64 {
        // SAFETY: a zeroed tpacket_stats is valid; the kernel fills it.
        let mut st: libc::tpacket_stats = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::tpacket_stats>() as libc::socklen_t;
        // SAFETY: getsockopt into a buffer of `len` bytes.
        let rc = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_STATISTICS,
                (&mut st as *mut libc::tpacket_stats).cast(),
                &mut len,
            )
        };
        if rc == 0 {
            self.drops += st.tp_drops as u64;
        }
        self.drops
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        // SAFETY: unmaps the mapping made in `open`, no longer referenced.
        unsafe { libc::munmap(self.map.cast(), self.map_len) };
    }
}

/// Classic BPF: drop frames whose reliable header names one of `mates` as
/// destination (they are another local rank's); accept everything else.
fn rank_filter(mates: &[Rank]) -> Vec<libc::sock_filter> {
    const LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
    const JEQ_K: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
    const RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;
    let op = |code: u16, jt: u8, jf: u8, k: u32| libc::sock_filter { code, jt, jf, k };
    // The destination rank: little-endian u32 at offset 16 of our header;
    // BPF loads big-endian.
    let mut p = vec![op(LD_W_ABS, 0, 0, (ETH_HEADER + 16) as u32)];
    // Jumps reach 255 instructions: more mates than that are not filtered
    // (their frames cost a look each, and are dropped as misdirected).
    let mates = &mates[..mates.len().min(250)];
    for (i, &m) in mates.iter().enumerate() {
        // Equal: jump past the remaining tests and the accept, to the drop.
        p.push(op(JEQ_K, (mates.len() - i) as u8, 0, m.swap_bytes()));
    }
    p.push(op(RET_K, 0, 0, u32::MAX));
    p.push(op(RET_K, 0, 0, 0));
    p
}

/// Frames queued in a TX ring before the kernel is kicked; the end of every
/// burst of sends kicks too (`Link::flush`). Not a setting: 1 and 32 moved
/// the same bandwidth over veth (docs/PERFORMANCE.md, "The pacer").
const TX_BURST: usize = 32;

/// Raw Ethernet under the reliable layer: one ring set per interface.
struct RingLink {
    rings: Vec<Ring>,
    /// Each peer's MAC per link.
    trunk: Trunk<[u8; 6]>,
    ethertype: [u8; 2],
    /// Per ring, the status word of its next RX frame (the arrival probe).
    words: Arc<[AtomicPtr<AtomicU32>]>,
    /// The ring and source MAC of the frame `recv` returned last.
    last_from: (usize, [u8; 6]),
}

impl Link for RingLink {
    fn wait_fds(&self) -> Vec<std::os::fd::RawFd> {
        self.rings.iter().map(|r| r.fd.as_raw_fd()).collect()
    }
    fn send(&mut self, dest: Rank, datagram: &[u8]) -> io::Result<()> {
        let (i, mac) = self.trunk.route(dest)?;
        let ring = &mut self.rings[i];
        ring.send(mac, self.ethertype, datagram)?;
        if ring.tx_queued >= TX_BURST {
            ring.kick();
        }
        Ok(())
    }

    fn recv(&mut self, buf: &mut [u8]) -> Option<usize> {
        let rings = &mut self.rings;
        let mut from = [0u8; 6];
        let (i, len) = self.trunk.recv(|i| rings[i].recv(buf, &mut from))?;
        self.last_from = (i, from);
        let r = &self.rings[i];
        self.words[i].store(r.rx_status(r.rx_head), Ordering::Relaxed);
        Some(len)
    }

    fn flush(&mut self) {
        for r in &mut self.rings {
            if r.tx_queued > 0 {
                r.kick();
            }
        }
    }

    fn arrival_probe(&self) -> Option<ArrivalProbe> {
        Some(ArrivalProbe::new(self.words.clone(), libc::TP_STATUS_USER))
    }

    fn came_from(&self, claimed: Rank) -> bool {
        let (i, mac) = &self.last_from;
        self.trunk.is_address_of(claimed, *i, mac)
    }

    fn kernel_drops(&mut self) -> u64 {
        self.rings.iter_mut().map(Ring::kernel_drops).sum()
    }
}

/// The IPv4 network of interface `name`, as `198.18.1.0/24`.
pub fn interface_network(name: &str) -> Option<String> {
    use std::net::IpAddr::V4;
    crate::sys::find_address(|ifname, a, mask| match (a, mask) {
        (V4(a), Some(V4(m))) if ifname == name => {
            Some(crate::sys::Ipv4Net::of(a, u32::from(m).count_ones() as u8).to_string())
        }
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_round_trip_and_bad_ones_are_errors() {
        let e = NicEndpoint {
            macs: vec![[2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 0xab]],
            network: "198.18.1.0/24".into(),
            epoch: 9,
            mtu: 1500,
        };
        assert_eq!(NicEndpoint::decode(&e.encode()), Ok(e.clone()));
        for bad in [
            "",
            "02:00:00:00:00:01/1/2",
            "02:00:00:00:00:01@/1/2",
            "02:00:00:00:00@n/1/2",
            "02:00:00:00:00:zz@n/1/2",
            "02:00:00:00:00:01@n/x/2",
            "02:00:00:00:00:01@n/1/",
        ] {
            assert!(NicEndpoint::decode(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_rank_filter_jumps_to_drop_for_each_mate() {
        let p = rank_filter(&[3, 7]);
        assert_eq!(p.len(), 5);
        // jeq 3 → drop (2 ahead: past jeq 7 and accept), jeq 7 → drop (1 ahead).
        assert_eq!((p[1].jt, p[1].k), (2, 3u32.swap_bytes()));
        assert_eq!((p[2].jt, p[2].k), (1, 7u32.swap_bytes()));
        assert_eq!((p[3].k, p[4].k), (u32::MAX, 0));
    }
}
