//! What configures a reliable device: the layer's [`ReliableConfig`], the
//! user's [`Settings`] (the `FM_ETH_*` knobs), and the endpoint a network
//! device advertises in the node map.

use super::header::MacKey;
use super::{Faults, FaultyLink, Link, NetDevice, ReliableDevice};
use crate::{DeviceError, JobKey, Rank};
use std::time::Duration;

#[derive(Clone, Debug)]
pub struct ReliableConfig {
    /// Device name, for errors and `info()`.
    pub device: &'static str,
    pub job_key: JobKey,
    pub rank: Rank,
    pub size: usize,
    /// This process's epoch (a random non-zero number per open).
    pub epoch: u32,
    /// Largest datagram, header included.
    pub mtu: usize,
    /// N: packets a sender may have unacknowledged towards one peer.
    pub window: u32,
    /// Receive pool: packets accepted but not yet released, all peers together.
    pub pool: usize,
    /// Smallest retransmission timeout; the timeout follows the measured
    /// round trip (RFC 6298) above it, and doubles on each timeout up to `rto_max`.
    pub rto: Duration,
    pub rto_max: Duration,
    /// A peer that acknowledges nothing for this long is unreachable.
    pub dead_after: Duration,
    /// Packets may arrive out of order without being lost (trunking over
    /// several links): keep them in a per-peer reorder queue instead of
    /// answering a gap with LOSE; losses are then found by the timer.
    pub reorder: bool,
    /// The checksum covers payloads too, not only headers (see `header`).
    pub payload_crc: bool,
    /// Every packet carries a MAC under this key, and only packets with
    /// a valid one are accepted (see `header`); `None`: no MACs.
    pub mac: Option<MacKey>,
}

impl ReliableConfig {
    /// How long a receiver may hold a bare ACK back (delayed ACK): a
    /// quarter of the smallest retransmission timeout.
    pub fn ack_delay(&self) -> Duration {
        self.rto / 4
    }

    /// [`Settings::default`]'s values, 9000-byte datagrams, a pool of 512,
    /// and payloads under the CRC (for links with no checksum of their own).
    pub fn new(device: &'static str, job_key: JobKey, rank: Rank, size: usize) -> Self {
        let mut c = Settings::default().config(device, job_key, rank, size, new_epoch(), 9000);
        c.pool = 512;
        c.payload_crc = true;
        c
    }
}

/// What a user sets of a reliable device (the `FM_ETH_*` knobs and
/// `FM_FAULTS`, docs/CONFIG.md); the rest of [`ReliableConfig`] comes from
/// the job and the link. The ethernet and nic devices share it.
#[derive(Clone, Debug)]
pub struct Settings {
    pub window: u32,
    /// Receive pool in packets; `None`: 16 MiB worth, 128 to 4096 packets.
    pub pool: Option<usize>,
    pub rto: Duration,
    pub dead_after: Duration,
    pub faults: Option<Faults>,
    /// Cover payloads with the CRC too (`FM_ETH_CHECKSUM=full`); always
    /// when fault injection corrupts packets.
    pub payload_crc: bool,
    /// Authenticate every packet (`FM_ETH_AUTH`, default `mac`): the
    /// job's bootstrap then sets `mac` from the job's token.
    pub authenticate: bool,
    /// The job's packet key (set by the bootstrap, not by the user).
    pub mac: Option<MacKey>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            window: 64,
            pool: None,
            rto: Duration::from_millis(2),
            dead_after: Duration::from_secs(10),
            faults: None,
            payload_crc: false,
            authenticate: true,
            mac: None,
        }
    }
}

impl Settings {
    /// The layer's configuration for datagrams of up to `mtu` bytes.
    pub fn config(
        &self,
        device: &'static str,
        job_key: JobKey,
        rank: Rank,
        size: usize,
        epoch: u32,
        mtu: usize,
    ) -> ReliableConfig {
        ReliableConfig {
            device,
            job_key,
            rank,
            size,
            epoch,
            mtu,
            window: self.window,
            pool: self
                .pool
                .unwrap_or_else(|| ((16 << 20) / mtu.max(1)).clamp(128, 4096)),
            rto: self.rto,
            rto_max: (self.rto * 100).max(Duration::from_millis(100)),
            dead_after: self.dead_after,
            reorder: false,
            payload_crc: self.payload_crc || self.faults.is_some_and(|f| f.corrupt > 0.0),
            mac: self.mac.clone().filter(|_| self.authenticate),
        }
    }

    /// `link`, behind the fault injector when faults are configured.
    pub fn link<L: Link + 'static>(&self, link: L) -> Box<dyn Link> {
        match self.faults {
            Some(f) => Box::new(FaultyLink::new(link, f)),
            None => Box::new(link),
        }
    }

    /// Associate nodes for a network device (ethernet, nic): the device
    /// with configuration `c` (from [`Settings::config`] with this side's
    /// MTU) over `link` (`links` of them here); datagrams of the smallest
    /// MTU of this side and its peers, and a reorder queue when both sides
    /// trunk. `peers[r]` is rank r's endpoint, `None` for ranks reached
    /// otherwise.
    pub fn associate<L: Link + 'static>(
        &self,
        mut c: ReliableConfig,
        peers: &[Option<PeerLink>],
        links: usize,
        link: L,
    ) -> Result<NetDevice, DeviceError> {
        c.mtu = peers
            .iter()
            .flatten()
            .map(|p| p.mtu)
            .fold(c.mtu, usize::min);
        // Several links to a peer reorder packets among themselves.
        c.reorder = links > 1 && peers.iter().flatten().any(|p| p.links > 1);
        let epochs: Vec<Option<u32>> = peers.iter().map(|p| p.as_ref().map(|p| p.epoch)).collect();
        ReliableDevice::new(c, self.link(link), &epochs)
    }
}

/// A network endpoint in the node map: `LINKS/epoch/mtu`, LINKS being the
/// device's own part (addresses, MACs and network).
pub fn encode_endpoint(links: &str, epoch: u32, mtu: u32) -> String {
    format!("{links}/{epoch}/{mtu}")
}

/// Split `LINKS/epoch/mtu` (LINKS may itself hold a `/`): LINKS, the epoch
/// and the MTU; `form` names the whole format, for the error.
pub fn decode_endpoint<'a>(s: &'a str, form: &str) -> Result<(&'a str, u32, u32), String> {
    let mut it = s.rsplitn(3, '/');
    let (Some(mtu), Some(epoch), Some(links)) = (it.next(), it.next(), it.next()) else {
        return Err(format!("{s:?} is not {form}"));
    };
    Ok((
        links,
        epoch.parse().map_err(|e| format!("epoch {epoch:?}: {e}"))?,
        mtu.parse().map_err(|e| format!("mtu {mtu:?}: {e}"))?,
    ))
}

/// What associating needs of a peer's endpoint.
#[derive(Clone, Copy, Debug)]
pub struct PeerLink {
    pub epoch: u32,
    pub mtu: usize,
    /// Its links (addresses, interfaces): more than one is a trunk.
    pub links: usize,
}

/// A random non-zero epoch.
pub fn new_epoch() -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut x = t ^ (std::process::id() as u64) << 32 ^ 0x9E37_79B9_7F4A_7C15;
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    (x as u32) | 1
}
