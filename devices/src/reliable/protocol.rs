//! The sans-IO core of the reliable layer, in the manner of quinn-proto:
//! every peer's [`Session`], the receive pool they share, and the queue of
//! what is to be transmitted — with no link and no clock. Time comes in as
//! arguments; datagrams come in through [`Protocol::recv_buffer`] and
//! [`Protocol::handle_datagram`] and go out through
//! [`Protocol::poll_transmit`], which lends the bytes straight from the send
//! slot (or, for a control packet, from a header-sized buffer). The driver
//! (`driver.rs`) runs it over a real [`Link`](super::Link); the model tests
//! run it over a simulated network in virtual time.

use super::header::{Kind, CONTROL_LEN, HEADER};
use super::session::Session;
use super::{ReliableConfig, ReliableStats, OPTIONS};
use crate::{DeviceError, DeviceInfo, DeviceStats, Rank, RawRecv, RawSend, CONTROL_RESERVE};
use std::collections::VecDeque;
use std::time::Instant;

/// A datagram to put on the link: `datagram` is lent from the protocol
/// until the next call on it.
pub struct Transmit<'a> {
    pub dest: Rank,
    pub datagram: &'a [u8],
}

/// Something to transmit, decided when an event happened; the bytes are
/// made when it is polled, so they carry the newest cumulative ACK.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Intent {
    /// What the window allows towards the peer, from `sent + 1`.
    Window(Rank),
    /// DATA `seq` again, alone: a timeout's or a stopped sender's probe.
    Probe(Rank, u32),
    /// A control packet with its number.
    Control(Rank, Kind, u32),
    /// A bare ACK, unless DATA or another packet carried it meanwhile.
    OwedAck(Rank),
}

/// The last DATA handed out by `poll_transmit`, for `transmit_failed`.
#[derive(Clone, Copy)]
pub(super) struct HandedData {
    pub(super) dest: Rank,
    pub(super) seq: u32,
    /// From a `Window` intent (it advanced `sent`).
    pub(super) window: bool,
    pub(super) retransmit: bool,
}

/// The most memory a device's receive pool may take.
pub const MAX_POOL_BYTES: usize = 1 << 30;

pub struct Protocol {
    pub(super) cfg: ReliableConfig,
    pub(super) sessions: Vec<Session>,
    /// Receive pool: datagrams land in a free slot and stay there until released.
    pub(super) pool: Vec<Vec<u8>>,
    pub(super) free: Vec<u32>,
    /// Pool slots lent to the application (a second release is ignored).
    pub(super) lent: Vec<bool>,
    /// Accepted packets in arrival order: (source, pool slot, payload length).
    pub(super) ready: VecDeque<(Rank, u32, usize)>,
    /// Where datagrams land when the pool is full (control packets still count).
    pub(super) scratch: Vec<u8>,
    pub(super) intents: VecDeque<Intent>,
    /// The bytes of the control packet being transmitted.
    pub(super) control: [u8; HEADER + CONTROL_LEN as usize],
    pub(super) handed: Option<HandedData>,
    /// Peers told STOP and not yet GO: releases look for them only then.
    pub(super) stopped_peers: usize,
    /// Packets in all reorder queues.
    pub(super) held_total: usize,
    /// No timer is due before this (it may be early, never late).
    pub(super) next_timeout: Option<Instant>,
    pub(super) stats: DeviceStats,
    pub(super) rstats: ReliableStats,
}

impl Protocol {
    /// The protocol of one device; `peer_epochs[r]` is rank r's epoch,
    /// `None` for ranks this device does not reach (and for this rank).
    pub fn new(
        cfg: ReliableConfig,
        peer_epochs: &[Option<u32>],
        now: Instant,
    ) -> Result<Protocol, DeviceError> {
        if cfg.mtu <= HEADER || cfg.window == 0 || cfg.pool == 0 {
            return Err(DeviceError::Config {
                device: cfg.device,
                reason: format!(
                    "mtu {} (over {HEADER}), window {} and pool {} must be positive",
                    cfg.mtu, cfg.window, cfg.pool
                ),
            });
        }
        let pool_bytes = cfg.pool.saturating_mul(cfg.mtu);
        if pool_bytes > MAX_POOL_BYTES {
            return Err(DeviceError::Config {
                device: cfg.device,
                reason: format!(
                    "a receive pool of {} datagrams of {} bytes is {} MiB, over the limit of {} MiB: lower FM_ETH_POOL (or the datagram size)",
                    cfg.pool,
                    cfg.mtu,
                    pool_bytes >> 20,
                    MAX_POOL_BYTES >> 20
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
        Ok(Protocol {
            sessions: (peer_epochs.iter())
                .map(|e| Session::new(*e, slots, &cfg, now))
                .collect(),
            pool: (0..cfg.pool).map(|_| vec![0; cfg.mtu]).collect(),
            free: (0..cfg.pool as u32).rev().collect(),
            lent: vec![false; cfg.pool],
            ready: VecDeque::new(),
            scratch: vec![0; cfg.mtu],
            intents: VecDeque::new(),
            control: [0; HEADER + CONTROL_LEN as usize],
            handed: None,
            stopped_peers: 0,
            held_total: 0,
            next_timeout: None,
            stats: DeviceStats::default(),
            rstats: ReliableStats::default(),
            cfg,
        })
    }

    pub fn config(&self) -> &ReliableConfig {
        &self.cfg
    }

    fn payload_mtu(&self) -> usize {
        self.cfg.mtu - HEADER
    }

    pub fn info(&self) -> DeviceInfo {
        DeviceInfo {
            name: self.cfg.device,
            options: OPTIONS,
            mtu: self.payload_mtu(),
        }
    }

    pub fn reaches(&self, dest: Rank) -> bool {
        (self.sessions.get(dest as usize)).is_some_and(|s| s.epoch.is_some())
    }

    /// The device's counters: datagrams that could not be valid (malformed,
    /// a bad checksum) as malformed, well-formed ones refused (another
    /// job's, a stale epoch, misdirected, unauthenticated, from the wrong
    /// address) as invalid.
    pub fn stats(&self) -> DeviceStats {
        let mut s = self.stats.clone();
        let r = &self.rstats;
        s.dropped_malformed = r.dropped_malformed + r.dropped_checksum;
        s.dropped_invalid = r.invalid_drops() - s.dropped_malformed;
        s
    }

    pub fn reliable_stats(&self) -> ReliableStats {
        self.rstats
    }

    /// Peers found unreachable so far.
    pub fn unreachable_count(&self) -> u64 {
        self.rstats.unreachable
    }

    /// Accepted packets not yet received by the application.
    pub fn ready_len(&self) -> usize {
        self.ready.len()
    }

    /// Packets are unacknowledged towards a peer still thought reachable.
    pub fn pending(&self) -> bool {
        self.sessions.iter().any(Session::live)
    }

    /// `dest` is unreachable: every send to it fails with this.
    pub fn peer_failure(&self, dest: Rank) -> Option<DeviceError> {
        let s = self.sessions.get(dest as usize)?;
        s.send.unreachable.then_some(DeviceError::Unreachable {
            device: self.cfg.device,
            dest,
            secs: self.cfg.dead_after.as_secs(),
        })
    }

    /// A send slot for `len` bytes to `dest`; `NoBuffer` when the window is
    /// full (the caller lets the protocol run and tries again).
    pub fn send_buffer(&mut self, dest: Rank, len: usize) -> Result<RawSend, DeviceError> {
        let device = self.cfg.device;
        let mtu = self.payload_mtu();
        if len > mtu {
            return Err(DeviceError::TooLarge { device, len, mtu });
        }
        if let Some(e) = self.peer_failure(dest) {
            return Err(e);
        }
        let Some(s) = (self.sessions.get_mut(dest as usize)).filter(|s| s.epoch.is_some()) else {
            return Err(DeviceError::NotAPeer { device, dest });
        };
        if s.send.full() {
            self.rstats.window_full += 1;
            self.stats.no_buffer += 1;
            return Err(DeviceError::NoBuffer { device, dest });
        }
        let seq = s.send.next_seq;
        let slot = s.send.slot(seq);
        if slot.buf.len() < self.cfg.mtu {
            slot.buf.resize(self.cfg.mtu, 0);
        }
        Ok(RawSend {
            // SAFETY: the slot is `mtu` bytes; the payload follows the header.
            ptr: unsafe { slot.buf.as_mut_ptr().add(HEADER) },
            cap: mtu,
            dest,
            token: seq as u64,
        })
    }

    /// The slot from [`Protocol::send_buffer`] holds `len` bytes: it is the
    /// next packet to `buf.dest`. Any other slot is refused quietly.
    pub fn commit(&mut self, buf: RawSend, len: usize, now: Instant) {
        let Some(s) = self.sessions.get_mut(buf.dest as usize) else {
            return;
        };
        if s.epoch.is_none() || buf.token as u32 != s.send.next_seq || s.send.full() {
            return;
        }
        s.send.commit(len, now);
        self.stats.packets_sent += 1;
        self.stats.bytes_sent += len as u64;
        // Its timers start when it goes out (`Protocol::data`).
        self.intents.push_back(Intent::Window(buf.dest));
    }

    /// The next packet accepted, in place in its pool slot until released.
    pub fn receive(&mut self) -> Option<RawRecv> {
        let (src, s, len) = self.ready.pop_front()?;
        self.lent[s as usize] = true;
        Some(RawRecv {
            src,
            // SAFETY: the pool slot holds HEADER + len bytes until released.
            ptr: unsafe { self.pool[s as usize].as_ptr().add(HEADER) },
            len,
            token: s as u64,
        })
    }

    /// The application is done with a received packet; a token not lent
    /// (released already, or never handed out) is ignored.
    pub fn release(&mut self, token: u64) {
        let Some(lent) = self.lent.get_mut(token as usize).filter(|l| **l) else {
            return;
        };
        *lent = false;
        self.free.push(token as u32);
        if self.stopped_peers > 0 && self.room() {
            self.send_gos();
        }
    }

    /// Release every packet not yet received (a device closing).
    pub fn discard_ready(&mut self) {
        while let Some(r) = self.receive() {
            self.release(r.token);
        }
    }

    /// Every ACK owed goes out bare now (a device closing: peers lingering
    /// for our ACKs stop sooner).
    pub fn ack_all_owed(&mut self) {
        for r in 0..self.sessions.len() {
            if self.sessions[r].recv.ack_owed > 0 {
                self.intents.push_back(Intent::OwedAck(r as Rank));
            }
        }
    }

    /// Half the pool is free: peers told STOP may go again.
    pub(super) fn room(&self) -> bool {
        self.free.len() * 2 >= self.pool.len()
    }

    pub(super) fn send_gos(&mut self) {
        self.stopped_peers = 0;
        for (r, s) in self.sessions.iter_mut().enumerate() {
            if std::mem::take(&mut s.recv.stop_sent) {
                let j = s.recv.next;
                self.intents
                    .push_back(Intent::Control(r as Rank, Kind::Go, j));
            }
        }
    }
}
