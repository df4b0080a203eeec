//! The reliable-datagram layer: PM's Go-Back-N (thesis 001 §4.3.3 and
//! Appendix B) over any lossy [`Link`], with the errata fixed (notes §1.3):
//!
//! - per peer u32 sequence numbers, compared with serial arithmetic; the
//!   first DATA is 1; the sender keeps each packet in its send slot until it
//!   is acknowledged (the send buffer is the retransmit buffer);
//! - ACKs are cumulative and carried by every packet (piggybacked); a
//!   receiver that owes some sends a bare ACK after a quarter of the
//!   retransmission timeout without DATA to carry it (delayed ACK), or at
//!   once when it owes half a window;
//! - an out-of-order DATA is dropped and answered with LOSE(last in order),
//!   once per gap; LOSE(k) with k ≥ acked (erratum 3) makes the sender go
//!   back to k + 1 at once;
//! - a timeout goes back to the oldest unacknowledged packet (erratum 1),
//!   with exponential backoff, reset by progress;
//! - duplicates are dropped and re-acknowledged (erratum 6);
//! - STOP(k) carries the last sequence *accepted*: the sender rewinds to
//!   k + 1 and stops, its timer suspended; GO(j) resumes from j (erratum 5).
//!   A stopped sender probes with one packet now and then, so a lost GO
//!   cannot stall it for ever;
//! - an epoch per process incarnation in every header, plus the job key:
//!   packets of another job or of a dead earlier process are dropped and counted;
//! - no progress for `dead_after` with packets outstanding: the peer is
//!   unreachable, and sends to it fail with a clear error.
//!
//! Retransmission is driven by the application's polling (`raw_receive`,
//! and `raw_send_buffer` when the window is full), and by a low-rate
//! background thread for a process that stops polling.

pub mod header;
pub mod link;

use crate::{
    Device, DeviceError, DeviceInfo, DeviceStats, JobKey, Options, Rank, RawRecv, RawSend,
    CONTROL_RESERVE,
};
use header::{seq_le, seq_lt, Header, Kind, Malformed, HEADER};
pub use link::{ArrivalProbe, Faults, FaultyLink, Link, MemLink, MemNet, Trunk};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Datagrams read per poll at most.
const RECV_BATCH: usize = 32;

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

/// Option bits of every device the reliable layer makes.
pub const OPTIONS: Options =
    Options(Options::RELIABLE.0 | Options::ORDERED.0 | Options::RECEIVES.0);

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

/// Counters of the reliable layer, per device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReliableStats {
    pub data_sent: u64,
    pub data_accepted: u64,
    pub retransmits: u64,
    pub timeouts: u64,
    pub acks_sent: u64,
    pub loses_sent: u64,
    pub loses_received: u64,
    pub stops_sent: u64,
    pub stops_received: u64,
    pub gos_sent: u64,
    pub probes: u64,
    pub duplicates: u64,
    pub out_of_order: u64,
    /// Out-of-order packets kept in the reorder queue (trunking).
    pub reordered: u64,
    pub pool_full: u64,
    pub dropped_malformed: u64,
    pub dropped_checksum: u64,
    pub dropped_foreign_job: u64,
    pub dropped_stale_epoch: u64,
    pub dropped_misdirected: u64,
    pub link_errors: u64,
    pub window_full: u64,
    pub unreachable: u64,
    /// Frames the kernel dropped before the link read them (ring full), where
    /// the link can tell; the protocol recovered each as a loss.
    pub kernel_drops: u64,
    /// Timeouts found spurious (F-RTO, RFC 5682): after a timeout only the
    /// oldest packet went again, and the next ACK covered packets sent
    /// before the timeout, so nothing had been lost (the peer or its ACK was
    /// late: descheduled, delayed). Each saved a go-back of the window.
    pub spurious_timeouts: u64,
}

impl ReliableStats {
    /// Datagrams dropped as invalid: malformed, bad checksum, another job,
    /// a stale epoch, misdirected.
    pub fn invalid_drops(&self) -> u64 {
        self.dropped_malformed
            + self.dropped_checksum
            + self.dropped_foreign_job
            + self.dropped_stale_epoch
            + self.dropped_misdirected
    }
}

struct TxSlot {
    buf: Vec<u8>,
    len: usize,
    sent_at: Option<Instant>,
    /// Sent more than once: its ACK says nothing about the round trip (Karn).
    resent: bool,
}

struct Peer {
    /// The peer's epoch; `None`: not reached through this device.
    epoch: Option<u32>,
    // Sender side.
    slots: Vec<TxSlot>,
    /// Sequence number the next new packet gets.
    next_seq: u32,
    /// Last sequence acknowledged (cumulative).
    acked: u32,
    /// Last sequence transmitted since the last go-back.
    sent: u32,
    stopped: bool,
    stopped_at: Instant,
    /// Retransmission timeout now: from the round-trip estimate, doubled per timeout.
    rto: Duration,
    /// Smoothed round trip and its variation (RFC 6298), in microseconds.
    srtt_us: f64,
    rttvar_us: f64,
    /// Last time the acknowledged number moved (or the window became non-empty).
    progress_at: Instant,
    /// The LOSE number we last went back for, and when.
    went_back: Option<(u32, Instant)>,
    /// After a timeout, the one packet resent so far (F-RTO): the next ACK
    /// tells whether the rest must go again.
    probing: Option<u32>,
    unreachable: bool,
    // Receiver side.
    /// Next sequence expected.
    recv_next: u32,
    ack_owed: u32,
    /// When the oldest ACK still owed was earned.
    owed_since: Instant,
    stop_sent: bool,
    /// The gap we last sent LOSE for (`recv_next` then), and when.
    lose_sent: Option<(u32, Instant)>,
    /// Reorder queue: packets after a gap, by sequence → (pool slot, length).
    held: std::collections::BTreeMap<u32, (u32, usize)>,
}

impl Peer {
    fn new(epoch: Option<u32>, slots: usize, rto: Duration) -> Peer {
        let now = Instant::now();
        Peer {
            epoch,
            // Buffers grow to the MTU on first use: memory only for the
            // peers and window slots a process actually sends through.
            slots: if epoch.is_some() {
                (0..slots)
                    .map(|_| TxSlot {
                        buf: Vec::new(),
                        len: 0,
                        sent_at: None,
                        resent: false,
                    })
                    .collect()
            } else {
                Vec::new()
            },
            next_seq: 1,
            acked: 0,
            sent: 0,
            stopped: false,
            stopped_at: now,
            rto,
            srtt_us: 0.0,
            rttvar_us: 0.0,
            progress_at: now,
            went_back: None,
            probing: None,
            unreachable: false,
            recv_next: 1,
            ack_owed: 0,
            owed_since: now,
            stop_sent: false,
            lose_sent: None,
            held: std::collections::BTreeMap::new(),
        }
    }

    fn outstanding(&self) -> u32 {
        self.next_seq.wrapping_sub(1).wrapping_sub(self.acked)
    }

    fn slot(&mut self, seq: u32) -> &mut TxSlot {
        let n = self.slots.len();
        &mut self.slots[seq as usize % n]
    }
}

/// The protocol state of a [`ReliableDevice`], behind its lock.
struct Engine<L: Link> {
    cfg: ReliableConfig,
    link: L,
    peers: Vec<Peer>,
    /// Receive pool: datagrams land in a free slot and stay there until released.
    pool: Vec<Vec<u8>>,
    free: Vec<u32>,
    /// Accepted packets in arrival order: (source, pool slot, payload length).
    ready: VecDeque<(Rank, u32, usize)>,
    /// `ready.len()` for the lock-free idle check of [`ReliableDevice`].
    ready_hint: Arc<AtomicUsize>,
    /// Where datagrams land when the pool is full (control packets still count).
    scratch: Vec<u8>,
    /// Peers owed a bare ACK.
    owed: Vec<Rank>,
    /// Peers told STOP and not yet GO: releases look for them only then.
    stopped_peers: usize,
    /// Packets in all reorder queues.
    held_total: usize,
    polls: u32,
    /// The last poll read the link empty.
    was_drained: bool,
    timers_at: Instant,
    stats: DeviceStats,
    rstats: ReliableStats,
}

impl<L: Link> Engine<L> {
    /// A device over `link`; `peer_epochs[r]` is rank r's epoch, `None` for
    /// ranks this device does not reach (and for this rank itself).
    pub fn new(
        cfg: ReliableConfig,
        link: L,
        peer_epochs: &[Option<u32>],
    ) -> Result<Self, DeviceError> {
        if cfg.mtu <= HEADER || cfg.window == 0 || cfg.pool == 0 {
            return Err(DeviceError::Config {
                device: cfg.device,
                reason: format!(
                    "mtu {} (over {HEADER}), window {} and pool {} must be positive",
                    cfg.mtu, cfg.window, cfg.pool
                ),
            });
        }
        if peer_epochs.len() != cfg.size {
            return Err(DeviceError::Config {
                device: cfg.device,
                reason: format!(
                    "{} peer epochs for a job of {}",
                    peer_epochs.len(),
                    cfg.size
                ),
            });
        }
        let slots = (cfg.window + CONTROL_RESERVE) as usize;
        let peers = peer_epochs
            .iter()
            .map(|e| Peer::new(*e, slots, cfg.rto))
            .collect();
        Ok(Engine {
            pool: (0..cfg.pool).map(|_| vec![0; cfg.mtu]).collect(),
            free: (0..cfg.pool as u32).rev().collect(),
            ready: VecDeque::new(),
            ready_hint: Arc::new(AtomicUsize::new(0)),
            scratch: vec![0; cfg.mtu],
            owed: Vec::new(),
            stopped_peers: 0,
            held_total: 0,
            polls: 0,
            was_drained: true,
            timers_at: Instant::now(),
            link,
            peers,
            cfg,
            stats: DeviceStats::default(),
            rstats: ReliableStats::default(),
        })
    }

    fn payload_mtu(&self) -> usize {
        self.cfg.mtu - HEADER
    }

    /// A control packet to `dest` now (not retained: it is regenerated if needed).
    fn send_control(&mut self, dest: Rank, kind: Kind, number: u32) {
        let p = &self.peers[dest as usize];
        let Some(dst_epoch) = p.epoch else { return };
        let h = Header {
            kind,
            job_key: self.cfg.job_key.0,
            src: self.cfg.rank,
            dst: dest,
            src_epoch: self.cfg.epoch,
            dst_epoch,
            number,
            ack: p.recv_next.wrapping_sub(1),
            len: 0,
            payload_crc: false,
        };
        let mut d = [0u8; HEADER];
        h.write(&mut d);
        if self.link.send(dest, &d).is_err() {
            self.rstats.link_errors += 1;
        }
        match kind {
            Kind::Ack => self.rstats.acks_sent += 1,
            Kind::Lose => self.rstats.loses_sent += 1,
            Kind::Stop => self.rstats.stops_sent += 1,
            Kind::Go => self.rstats.gos_sent += 1,
            Kind::Data => {}
        }
        self.peers[dest as usize].ack_owed = 0;
    }

    /// Transmit what the window allows towards `dest`, from `sent + 1`.
    fn transmit(&mut self, dest: Rank) {
        let window = self.cfg.window + CONTROL_RESERVE;
        let now = Instant::now();
        loop {
            let p = &self.peers[dest as usize];
            if p.stopped
                || !seq_lt(p.sent, p.next_seq.wrapping_sub(1))
                || p.sent.wrapping_add(1).wrapping_sub(p.acked) > window
            {
                break;
            }
            let seq = p.sent.wrapping_add(1);
            if !self.send_data(dest, seq, now) {
                break;
            }
            self.peers[dest as usize].sent = seq;
        }
        self.link.flush();
    }

    /// Put DATA `seq` to `dest` on the link (again). False on a local failure.
    fn send_data(&mut self, dest: Rank, seq: u32, now: Instant) -> bool {
        let (key, me, epoch) = (self.cfg.job_key.0, self.cfg.rank, self.cfg.epoch);
        let payload_crc = self.cfg.payload_crc;
        let p = &mut self.peers[dest as usize];
        let Some(dst_epoch) = p.epoch else {
            return false;
        };
        let ack = p.recv_next.wrapping_sub(1);
        p.ack_owed = 0;
        let slot = p.slot(seq);
        let retransmit = slot.sent_at.is_some();
        slot.resent |= retransmit;
        let h = Header {
            kind: Kind::Data,
            job_key: key,
            src: me,
            dst: dest,
            src_epoch: epoch,
            dst_epoch,
            number: seq,
            ack,
            len: slot.len as u32,
            payload_crc,
        };
        h.write(&mut slot.buf);
        slot.sent_at = Some(now);
        let len = HEADER + slot.len;
        if self.link.send(dest, &slot.buf[..len]).is_err() {
            // Local failure (socket buffer full): the timer sends it again.
            self.rstats.link_errors += 1;
            return false;
        }
        if retransmit {
            self.rstats.retransmits += 1;
        } else {
            self.rstats.data_sent += 1;
        }
        true
    }

    /// A cumulative acknowledgement of `k` from `src`.
    fn on_ack(&mut self, src: Rank, k: u32, now: Instant) {
        let p = &mut self.peers[src as usize];
        let last = p.next_seq.wrapping_sub(1);
        if seq_lt(p.acked, k) && seq_le(k, last) {
            let newest = p.slot(k);
            if let (Some(t), false) = (newest.sent_at, newest.resent) {
                let sample = now.duration_since(t).as_secs_f64() * 1e6;
                if p.srtt_us == 0.0 {
                    p.srtt_us = sample;
                    p.rttvar_us = sample / 2.0;
                } else {
                    p.rttvar_us = 0.75 * p.rttvar_us + 0.25 * (p.srtt_us - sample).abs();
                    p.srtt_us = 0.875 * p.srtt_us + 0.125 * sample;
                }
            }
            let mut s = p.acked;
            while s != k {
                s = s.wrapping_add(1);
                let slot = p.slot(s);
                slot.sent_at = None;
                slot.resent = false;
            }
            p.acked = k;
            if seq_lt(p.sent, k) {
                p.sent = k;
            }
            // As QUIC's probe timeout (RFC 9002 §6.2.1): the round trip's
            // spread, plus the time the peer may hold an ACK back (its
            // delayed ACK), above the configured floor.
            let est = Duration::from_micros((p.srtt_us + 4.0 * p.rttvar_us) as u64)
                + self.cfg.ack_delay();
            p.rto = est.clamp(self.cfg.rto, self.cfg.rto_max);
            p.progress_at = now;
            // After a timeout's probe: packets after it acknowledged as
            // first sent mean the timeout was spurious. If only the probe
            // came back, the next packet's own timer (it was sent before the
            // probe) finds out soon whether it was lost too; going back
            // over the whole window now would resend what is merely late.
            if p.probing.take().is_some_and(|probe| seq_lt(probe, k)) {
                self.rstats.spurious_timeouts += 1;
            }
            // An ACK that moves ends a STOP as a GO does (the GO may be
            // lost): what was queued while stopped goes out now. Without
            // this a sender with nothing new to send waited for ever — no
            // timer runs for packets never transmitted.
            if std::mem::replace(&mut p.stopped, false) {
                self.transmit(src);
            }
        }
    }

    /// Read what arrived, answer it, run the timers; hand what was sent to
    /// the link in one burst.
    fn progress(&mut self) {
        self.poll_link();
        self.link.flush();
        self.ready_hint.store(self.ready.len(), Ordering::Release);
    }

    /// The work of [`Engine::progress`].
    fn poll_link(&mut self) {
        self.link.tick();
        let mut got = 0;
        let mut drained = false;
        // The clock is read once per poll, and only when something needs it.
        let mut clock: Option<Instant> = None;
        while got < RECV_BATCH {
            let slot = self.free.last().copied();
            let buf = match slot {
                Some(s) => &mut self.pool[s as usize],
                None => &mut self.scratch,
            };
            let Some(n) = self.link.recv(buf) else {
                drained = true;
                break;
            };
            got += 1;
            let now = *clock.get_or_insert_with(Instant::now);
            self.handle(slot, n, now);
            if !self.ready.is_empty() && self.was_drained {
                // Data after an empty link: hand it over now rather than pay
                // one more (usually empty) receive first. Behind a stream
                // (the last poll did not drain) read on, so a full pool
                // shows as STOP rather than as socket-buffer drops.
                break;
            }
        }
        self.was_drained = drained;
        // Owed ACKs ride on DATA going back when there is some; otherwise a
        // bare ACK goes out once a quarter of the retransmission timeout has
        // passed (delayed ACK), or at once for a peer owed half a window.
        if !self.owed.is_empty() {
            let half = (self.cfg.window / 2).max(1);
            let delay = self.cfg.ack_delay();
            let now = (got == 0).then(|| *clock.get_or_insert_with(Instant::now));
            let mut i = 0;
            while i < self.owed.len() {
                let r = self.owed[i];
                let p = &self.peers[r as usize];
                if p.ack_owed == 0 {
                    self.owed.swap_remove(i);
                } else if p.ack_owed >= half
                    || now.is_some_and(|t| t.duration_since(p.owed_since) >= delay)
                {
                    let k = p.recv_next.wrapping_sub(1);
                    self.send_control(r, Kind::Ack, k);
                    self.owed.swap_remove(i);
                } else {
                    i += 1;
                }
            }
        }
        self.polls = self.polls.wrapping_add(1);
        // Timers once the link is drained (ACKs waiting to be read must not
        // look like losses), and now and then under a stream that never
        // drains, so its own losses are still found.
        let due = if drained {
            got == 0 || self.polls.is_multiple_of(64)
        } else {
            self.polls.is_multiple_of(1024)
        };
        if due {
            let now = *clock.get_or_insert_with(Instant::now);
            if now.duration_since(self.timers_at) >= self.cfg.rto / 4 {
                self.timers_at = now;
                self.timers(now);
            }
        }
    }

    /// One datagram, arrived at (about) `now`: one clock read per poll.
    fn handle(&mut self, slot: Option<u32>, n: usize, now: Instant) {
        let d = match slot {
            Some(s) => &self.pool[s as usize][..n],
            None => &self.scratch[..n],
        };
        let h = match Header::parse(d) {
            Ok(h) => h,
            Err(Malformed::Checksum) => {
                self.rstats.dropped_checksum += 1;
                return;
            }
            Err(_) => {
                self.rstats.dropped_malformed += 1;
                return;
            }
        };
        if h.job_key != self.cfg.job_key.0 {
            self.rstats.dropped_foreign_job += 1;
            return;
        }
        if h.dst != self.cfg.rank || h.src as usize >= self.cfg.size {
            self.rstats.dropped_misdirected += 1;
            return;
        }
        if h.dst_epoch != self.cfg.epoch || self.peers[h.src as usize].epoch != Some(h.src_epoch) {
            self.rstats.dropped_stale_epoch += 1;
            return;
        }
        let src = h.src;
        self.on_ack(src, h.ack, now);
        match h.kind {
            Kind::Data => self.on_data(src, &h, slot, now),
            Kind::Ack => {}
            Kind::Lose => {
                self.rstats.loses_received += 1;
                let p = &mut self.peers[src as usize];
                // Once per loss: later LOSEs for the same gap were sent before
                // our go-back reached the receiver.
                let fresh = match p.went_back {
                    Some((k, t)) => k != h.number || now.duration_since(t) >= p.rto,
                    None => true,
                };
                if fresh && h.number == p.acked && !p.stopped {
                    p.went_back = Some((h.number, now));
                    p.probing = None;
                    p.sent = p.acked;
                    self.transmit(src);
                }
            }
            Kind::Stop => {
                self.rstats.stops_received += 1;
                let p = &mut self.peers[src as usize];
                p.stopped = true;
                p.stopped_at = now;
                p.probing = None;
                p.sent = p.acked;
            }
            Kind::Go => {
                let p = &mut self.peers[src as usize];
                p.stopped = false;
                p.sent = p.acked;
                p.progress_at = now;
                self.transmit(src);
            }
        }
    }

    fn on_data(&mut self, src: Rank, h: &Header, slot: Option<u32>, now: Instant) {
        let reorder = self.cfg.reorder;
        let hold_limit = (self.pool.len() / 4).max(1);
        let window = self.cfg.window + CONTROL_RESERVE;
        let p = &mut self.peers[src as usize];
        if h.number == p.recv_next {
            match slot {
                Some(s) => {
                    self.free.pop();
                    self.ready.push_back((src, s, h.len as usize));
                    p.recv_next = p.recv_next.wrapping_add(1);
                    // Packets the reorder queue held for this gap follow it.
                    while let Some((s, len)) = p.held.remove(&p.recv_next) {
                        self.held_total -= 1;
                        self.ready.push_back((src, s, len));
                        p.recv_next = p.recv_next.wrapping_add(1);
                        p.ack_owed += 1;
                        self.rstats.data_accepted += 1;
                        self.stats.packets_received += 1;
                        self.stats.bytes_received += len as u64;
                    }
                    p.lose_sent = None;
                    if p.ack_owed == 0 {
                        p.owed_since = now;
                        self.owed.push(src);
                    }
                    p.ack_owed += 1;
                    self.rstats.data_accepted += 1;
                    self.stats.packets_received += 1;
                    self.stats.bytes_received += h.len as u64;
                }
                None => {
                    self.rstats.pool_full += 1;
                    // Held packets must not keep the pool full for ever:
                    // they will come again after the go-back.
                    for (_, (s, _)) in std::mem::take(&mut p.held) {
                        self.held_total -= 1;
                        self.free.push(s);
                    }
                    if !p.stop_sent {
                        p.stop_sent = true;
                        self.stopped_peers += 1;
                        let k = p.recv_next.wrapping_sub(1);
                        self.send_control(src, Kind::Stop, k);
                    }
                }
            }
        } else if seq_lt(h.number, p.recv_next) || p.held.contains_key(&h.number) {
            self.rstats.duplicates += 1;
            let k = p.recv_next.wrapping_sub(1);
            self.send_control(src, Kind::Ack, k);
        } else if reorder {
            // Trunking: a gap is normal; keep what fits, the timer finds losses.
            let ahead = h.number.wrapping_sub(p.recv_next);
            match slot {
                Some(s) if ahead < window && self.held_total < hold_limit => {
                    self.free.pop();
                    p.held.insert(h.number, (s, h.len as usize));
                    self.held_total += 1;
                    self.rstats.reordered += 1;
                }
                _ => self.rstats.out_of_order += 1,
            }
        } else {
            self.rstats.out_of_order += 1;
            let again = match p.lose_sent {
                Some((k, t)) => k != p.recv_next || now.duration_since(t) >= p.rto,
                None => true,
            };
            if again {
                p.lose_sent = Some((p.recv_next, now));
                let k = p.recv_next.wrapping_sub(1);
                self.send_control(src, Kind::Lose, k);
            }
        }
    }

    fn timers(&mut self, now: Instant) {
        for r in 0..self.peers.len() {
            let p = &mut self.peers[r];
            if p.epoch.is_none() || p.outstanding() == 0 || p.unreachable {
                continue;
            }
            if now.duration_since(p.progress_at) > self.cfg.dead_after {
                p.unreachable = true;
                self.rstats.unreachable += 1;
                tracing::error!(
                    device = self.cfg.device,
                    rank = r,
                    secs = self.cfg.dead_after.as_secs_f64(),
                    "peer unreachable: nothing acknowledged"
                );
                continue;
            }
            if p.stopped {
                // Probe with the oldest packet: a lost GO must not stall us.
                if now.duration_since(p.stopped_at) > p.rto * 4 {
                    p.stopped_at = now;
                    let oldest = p.acked.wrapping_add(1);
                    self.send_data(r as Rank, oldest, now);
                    self.rstats.probes += 1;
                }
                continue;
            }
            let oldest = p.acked.wrapping_add(1);
            let sent_at = p.slot(oldest).sent_at;
            if sent_at.is_none() && seq_lt(p.sent, p.next_seq.wrapping_sub(1)) {
                // Queued, never transmitted: it waited out a STOP, or the
                // link refused it (a full socket buffer). No timeout covers
                // a packet never sent.
                self.transmit(r as Rank);
            } else if sent_at.is_some_and(|t| now.duration_since(t) > p.rto) {
                p.rto = (p.rto * 2).min(self.cfg.rto_max);
                self.rstats.timeouts += 1;
                if p.probing.is_none() {
                    // F-RTO: resend the oldest packet only; the ACK it brings
                    // back says whether the others were late or lost
                    // (on_ack). A descheduled peer then costs one packet,
                    // not a window.
                    p.probing = Some(oldest);
                    self.send_data(r as Rank, oldest, now);
                    self.link.flush();
                } else {
                    // The probe itself went unanswered: go back over all.
                    p.probing = None;
                    p.sent = p.acked;
                    self.transmit(r as Rank);
                }
            }
        }
        // Receive side: a GO may have been lost; repeat it while there is room.
        if self.free.len() * 2 >= self.pool.len() {
            self.send_gos();
        }
    }

    fn send_gos(&mut self) {
        if self.stopped_peers == 0 {
            return;
        }
        self.stopped_peers = 0;
        for r in 0..self.peers.len() {
            if self.peers[r].stop_sent {
                self.peers[r].stop_sent = false;
                let j = self.peers[r].recv_next;
                self.send_control(r as Rank, Kind::Go, j);
            }
        }
    }
}

impl<L: Link> Engine<L> {
    /// Keep polling until every packet sent is acknowledged (or `limit`
    /// passes): a process that leaves right after its last send — the
    /// release of a barrier — must not take the only copy of a lost packet
    /// with it. True when everything was acknowledged.
    pub fn flush(&mut self, limit: Duration) -> bool {
        let until = Instant::now() + limit;
        // What we owe goes out now: peers lingering for our ACKs stop sooner.
        for r in std::mem::take(&mut self.owed) {
            let p = &self.peers[r as usize];
            if p.ack_owed > 0 {
                let k = p.recv_next.wrapping_sub(1);
                self.send_control(r, Kind::Ack, k);
            }
        }
        loop {
            let pending = self
                .peers
                .iter()
                .any(|p| p.epoch.is_some() && !p.unreachable && p.outstanding() > 0);
            if !pending {
                return true;
            }
            if Instant::now() > until {
                return false;
            }
            self.progress();
            // Packets that arrive meanwhile are acknowledged and let go.
            while let Some((_, s, _)) = self.ready.pop_front() {
                self.free.push(s);
            }
            std::thread::yield_now();
        }
    }
}

impl<L: Link> Device for Engine<L> {
    fn info(&self) -> DeviceInfo {
        DeviceInfo {
            name: self.cfg.device,
            options: OPTIONS,
            mtu: self.payload_mtu(),
        }
    }

    fn reaches(&self, dest: Rank) -> bool {
        self.peers
            .get(dest as usize)
            .is_some_and(|p| p.epoch.is_some())
    }

    fn window(&self, _dest: Rank) -> u32 {
        self.cfg.window
    }

    fn raw_send_buffer(&mut self, dest: Rank, len: usize) -> Result<RawSend, DeviceError> {
        let device = self.cfg.device;
        if len > self.payload_mtu() {
            return Err(DeviceError::TooLarge {
                device,
                len,
                mtu: self.payload_mtu(),
            });
        }
        let Some(p) = self
            .peers
            .get_mut(dest as usize)
            .filter(|p| p.epoch.is_some())
        else {
            return Err(DeviceError::NotAPeer { device, dest });
        };
        if p.unreachable {
            return Err(DeviceError::Unreachable {
                device,
                dest,
                secs: self.cfg.dead_after.as_secs(),
            });
        }
        if p.outstanding() >= p.slots.len() as u32 {
            self.rstats.window_full += 1;
            self.stats.no_buffer += 1;
            // The caller polls and retries; make sure polling can free a slot.
            self.progress();
            return Err(DeviceError::NoBuffer { device, dest });
        }
        let seq = p.next_seq;
        let mtu = self.cfg.mtu;
        let slot = p.slot(seq);
        if slot.buf.len() < mtu {
            slot.buf.resize(mtu, 0);
        }
        Ok(RawSend {
            // SAFETY: the slot is `mtu` bytes; the payload follows the header.
            ptr: unsafe { slot.buf.as_mut_ptr().add(HEADER) },
            cap: self.cfg.mtu - HEADER,
            dest,
            token: seq as u64,
        })
    }

    fn raw_send(&mut self, buf: RawSend, len: usize) {
        let Some(p) = self.peers.get_mut(buf.dest as usize) else {
            return;
        };
        if buf.token as u32 != p.next_seq {
            return; // not the slot handed out last: refuse quietly
        }
        let seq = p.next_seq;
        if p.outstanding() == 0 {
            p.progress_at = Instant::now();
        }
        let slot = p.slot(seq);
        slot.len = len.min(slot.buf.len().saturating_sub(HEADER));
        slot.sent_at = None;
        slot.resent = false;
        p.next_seq = seq.wrapping_add(1);
        self.stats.packets_sent += 1;
        self.stats.bytes_sent += len as u64;
        self.transmit(buf.dest);
    }

    fn raw_abort(&mut self, _buf: RawSend) {}

    fn raw_receive(&mut self) -> Option<RawRecv> {
        if self.ready.is_empty() {
            self.progress();
        }
        self.raw_receive_arrived()
    }

    fn raw_receive_arrived(&mut self) -> Option<RawRecv> {
        let (src, s, len) = self.ready.pop_front()?;
        self.ready_hint.store(self.ready.len(), Ordering::Relaxed);
        Some(RawRecv {
            src,
            // SAFETY: the pool slot holds HEADER + len bytes until released.
            ptr: unsafe { self.pool[s as usize].as_ptr().add(HEADER) },
            len,
            token: s as u64,
        })
    }

    fn raw_release(&mut self, token: u64) {
        if (token as usize) < self.pool.len() {
            self.free.push(token as u32);
            if self.stopped_peers > 0 && self.free.len() * 2 >= self.pool.len() {
                self.send_gos();
                self.link.flush();
            }
        }
    }

    /// Packets dropped for any reason that makes them invalid (malformed,
    /// bad checksum, another job, a stale epoch, misdirected) count as malformed.
    fn stats(&self) -> DeviceStats {
        let mut s = self.stats.clone();
        s.dropped_malformed = self.rstats.invalid_drops();
        s
    }
}

/// A reliable, ordered device over a lossy datagram link.
///
/// The protocol runs when the application polls (`raw_receive`, and
/// `raw_send_buffer` with a full window); a background thread also runs it
/// every [`BACKGROUND_TICK`] when it finds the state free, so a process that
/// stops polling — computing, or blocked elsewhere — still acknowledges,
/// retransmits and answers STOP/GO. The state sits behind a mutex that the
/// application's thread takes uncontended.
pub struct ReliableDevice<L: Link + 'static> {
    engine: Arc<Mutex<Engine<L>>>,
    stop: Arc<AtomicBool>,
    background: Option<std::thread::JoinHandle<()>>,
    /// Memory-notified links: an idle poll is a look at the rings and at
    /// `ready_hint`, without the lock; every [`FULL_POLL_EVERY`]th poll runs
    /// the protocol anyway (delayed ACKs, timers).
    probe: Option<ArrivalProbe>,
    ready_hint: Arc<AtomicUsize>,
    idle_polls: u32,
}

/// With an arrival probe, one idle poll in this many runs the protocol.
const FULL_POLL_EVERY: u32 = 64;

/// The reliable layer over some datagram link: what the ethernet and nic
/// devices are.
pub type NetDevice = ReliableDevice<Box<dyn Link>>;

/// How often the background thread runs the protocol.
pub const BACKGROUND_TICK: Duration = Duration::from_millis(10);

impl<L: Link + 'static> ReliableDevice<L> {
    /// A device over `link`; `peer_epochs[r]` is rank r's epoch, `None` for
    /// ranks this device does not reach (and for this rank itself).
    pub fn new(
        cfg: ReliableConfig,
        link: L,
        peer_epochs: &[Option<u32>],
    ) -> Result<Self, DeviceError> {
        let engine = Engine::new(cfg, link, peer_epochs)?;
        let (probe, ready_hint) = (engine.link.arrival_probe(), engine.ready_hint.clone());
        let engine = Arc::new(Mutex::new(engine));
        let stop = Arc::new(AtomicBool::new(false));
        let (e, s) = (Arc::downgrade(&engine), stop.clone());
        let background = std::thread::Builder::new()
            .name("fm-reliable".into())
            .spawn(move || {
                while !s.load(Ordering::Relaxed) {
                    std::thread::sleep(BACKGROUND_TICK);
                    let Some(engine) = e.upgrade() else { return };
                    // Only when the application is not in the device itself.
                    if let Ok(mut g) = engine.try_lock() {
                        g.progress();
                    };
                }
            })
            .ok();
        Ok(ReliableDevice {
            engine,
            stop,
            background,
            probe,
            ready_hint,
            idle_polls: 0,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Engine<L>> {
        self.engine.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn reliable_stats(&self) -> ReliableStats {
        let mut e = self.lock();
        e.rstats.kernel_drops = e.link.kernel_drops();
        e.rstats
    }

    pub fn epoch(&self) -> u32 {
        self.lock().cfg.epoch
    }

    /// See [`Engine::flush`]: poll until everything sent is acknowledged.
    pub fn flush(&mut self, limit: Duration) -> bool {
        self.lock().flush(limit)
    }
}

impl<L: Link + 'static> Drop for ReliableDevice<L> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.background.take() {
            let _ = t.join();
        }
        let mut e = self.lock();
        let limit = e.cfg.dead_after.min(Duration::from_secs(2));
        if !e.flush(limit) {
            tracing::warn!(
                device = e.cfg.device,
                "closing with packets still unacknowledged after {limit:?}"
            );
        }
    }
}

impl<L: Link + 'static> Device for ReliableDevice<L> {
    fn info(&self) -> DeviceInfo {
        self.lock().info()
    }
    fn reaches(&self, dest: Rank) -> bool {
        self.lock().reaches(dest)
    }
    fn window(&self, dest: Rank) -> u32 {
        self.lock().window(dest)
    }
    fn raw_send_buffer(&mut self, dest: Rank, len: usize) -> Result<RawSend, DeviceError> {
        self.lock().raw_send_buffer(dest, len)
    }
    fn raw_send(&mut self, buf: RawSend, len: usize) {
        self.lock().raw_send(buf, len)
    }
    fn raw_abort(&mut self, buf: RawSend) {
        self.lock().raw_abort(buf)
    }
    #[inline]
    fn raw_receive(&mut self) -> Option<RawRecv> {
        if let Some(p) = &self.probe {
            self.idle_polls = self.idle_polls.wrapping_add(1);
            if !self.idle_polls.is_multiple_of(FULL_POLL_EVERY)
                && self.ready_hint.load(Ordering::Acquire) == 0
                && !p.arrived()
            {
                return None;
            }
        }
        self.lock().raw_receive()
    }
    fn raw_receive_arrived(&mut self) -> Option<RawRecv> {
        if self.probe.is_some() && self.ready_hint.load(Ordering::Acquire) == 0 {
            return None;
        }
        self.lock().raw_receive_arrived()
    }
    fn raw_release(&mut self, token: u64) {
        self.lock().raw_release(token)
    }
    fn stats(&self) -> DeviceStats {
        self.lock().stats()
    }
}
