//! The protocol's datagrams in: check, route to the peer's session,
//! acknowledge, accept into the pool or answer the gap.

use super::header::{Header, Kind, Malformed};
use super::protocol::{Intent, Protocol};
use super::recv::Arrival;
use super::timers::earliest;
use crate::{Rank, CONTROL_RESERVE};
use std::time::Instant;

impl Protocol {
    /// Where the next datagram is to land: a free pool slot, or scratch
    /// space when the pool is full. Then [`Protocol::handle_datagram`].
    pub fn recv_buffer(&mut self) -> &mut [u8] {
        match self.free.last() {
            Some(&s) => &mut self.pool[s as usize],
            None => &mut self.scratch,
        }
    }

    /// The datagram of `len` bytes now in [`Protocol::recv_buffer`],
    /// arrived at (about) `now`; `came_from(r)` says whether it came from
    /// rank r's address (the link's [`came_from`](super::Link::came_from)).
    pub fn handle_datagram(&mut self, now: Instant, len: usize, came_from: impl Fn(Rank) -> bool) {
        let slot = self.free.last().copied();
        let Some(h) = self.check(slot, len, came_from) else {
            return;
        };
        let src = h.src;
        let s = &mut self.sessions[src as usize];
        if let Some(a) = s.send.on_ack(h.ack, now, &self.cfg) {
            self.rstats.spurious_timeouts += a.spurious_timeout as u64;
            if a.ended_stop {
                self.intents.push_back(Intent::Window(src));
            }
            let at = s.arm_after_ack(&self.cfg);
            self.next_timeout = earliest(self.next_timeout, at);
        }
        if matches!(h.kind, Kind::Lose | Kind::Stop | Kind::Go) && !s.fresh_control(h.control) {
            self.rstats.replayed_control += 1;
            return;
        }
        match h.kind {
            Kind::Data => self.on_data(src, &h, slot, now),
            Kind::Ack => {}
            Kind::Lose => {
                self.rstats.loses_received += 1;
                if s.send.on_lose(h.number, now) {
                    self.intents.push_back(Intent::Window(src));
                }
            }
            Kind::Stop => {
                self.rstats.stops_received += 1;
                s.send.on_stop(now);
                let at = s.arm_stop_probe();
                self.next_timeout = earliest(self.next_timeout, at);
            }
            Kind::Go => {
                s.send.on_go(now);
                self.intents.push_back(Intent::Window(src));
            }
        }
    }

    /// The header of a datagram that belongs to this job, carries its MAC
    /// (when the job uses them), came from the address of the rank it
    /// names, and is meant for this process and a known incarnation of
    /// its peer; anything else is counted.
    fn check(
        &mut self,
        slot: Option<u32>,
        len: usize,
        came_from: impl Fn(Rank) -> bool,
    ) -> Option<Header> {
        let buf = match slot {
            Some(s) => &self.pool[s as usize],
            None => &self.scratch,
        };
        let d = &buf[..len.min(buf.len())];
        let h = match Header::parse(d) {
            Ok(h) => h,
            Err(Malformed::Checksum) => {
                self.rstats.dropped_checksum += 1;
                return None;
            }
            Err(_) => {
                self.rstats.dropped_malformed += 1;
                return None;
            }
        };
        if h.job_key != self.cfg.job_key.0 {
            self.rstats.dropped_foreign_job += 1;
        } else if (self.cfg.mac.as_ref()).is_some_and(|k| !h.mac || !k.verify(d)) {
            self.rstats.dropped_unauthenticated += 1;
        } else if !came_from(h.src) {
            self.rstats.dropped_wrong_address += 1;
        } else if h.dst != self.cfg.rank || h.src as usize >= self.cfg.size {
            self.rstats.dropped_misdirected += 1;
        } else if h.dst_epoch != self.cfg.epoch
            || self.sessions[h.src as usize].epoch != Some(h.src_epoch)
        {
            self.rstats.dropped_stale_epoch += 1;
        } else {
            return Some(h);
        }
        None
    }

    fn on_data(&mut self, src: Rank, h: &Header, slot: Option<u32>, now: Instant) {
        let s = &mut self.sessions[src as usize];
        match (s.recv.arrival(h.number), slot) {
            (Arrival::InOrder, Some(slot)) => {
                self.free.pop();
                self.deliver(src, slot, h.len as usize, now);
                // Packets the reorder queue held for this gap follow it.
                loop {
                    let r = &mut self.sessions[src as usize].recv;
                    let Some((slot, len)) = r.held.remove(&r.next) else {
                        break;
                    };
                    self.held_total -= 1;
                    self.deliver(src, slot, len, now);
                }
                // A peer owed half a window is acknowledged at once.
                let r = &mut self.sessions[src as usize].recv;
                if r.ack_owed >= (self.cfg.window / 2).max(1) && !r.ack_queued {
                    r.ack_queued = true;
                    self.intents.push_back(Intent::OwedAck(src));
                }
            }
            (Arrival::InOrder, None) => self.pool_full(src),
            (Arrival::Duplicate, _) => {
                // Re-acknowledged (erratum 6): the first ACK may have been lost.
                self.rstats.duplicates += 1;
                let k = s.recv.last_in_order();
                self.intents.push_back(Intent::Control(src, Kind::Ack, k));
            }
            (Arrival::Ahead { ahead }, slot) if self.cfg.reorder => {
                // Trunking: a gap is normal; keep what fits, the timer finds losses.
                let window = self.cfg.window + CONTROL_RESERVE;
                let hold_limit = (self.pool.len() / 4).max(1);
                match slot {
                    Some(slot) if ahead < window && self.held_total < hold_limit => {
                        self.free.pop();
                        s.recv.held.insert(h.number, (slot, h.len as usize));
                        self.held_total += 1;
                        self.rstats.reordered += 1;
                    }
                    _ => self.rstats.out_of_order += 1,
                }
            }
            (Arrival::Ahead { .. }, _) => {
                self.rstats.out_of_order += 1;
                if s.recv.lose_again(now, s.send.rto) {
                    let k = s.recv.last_in_order();
                    self.intents.push_back(Intent::Control(src, Kind::Lose, k));
                }
            }
        }
    }

    /// The next packet in order from `src`, in pool slot `slot`, is ready.
    fn deliver(&mut self, src: Rank, slot: u32, len: usize, now: Instant) {
        self.ready.push_back((src, slot, len));
        let s = &mut self.sessions[src as usize];
        s.recv.accept(now);
        if s.recv.ack_owed == 1 {
            let at = s.arm_delayed_ack(&self.cfg);
            self.next_timeout = earliest(self.next_timeout, at);
        }
        self.rstats.data_accepted += 1;
        self.stats.packets_received += 1;
        self.stats.bytes_received += len as u64;
    }

    /// The packet expected next from `src` found the pool full: STOP it.
    fn pool_full(&mut self, src: Rank) {
        self.rstats.pool_full += 1;
        let r = &mut self.sessions[src as usize].recv;
        // Held packets must not keep the pool full for ever: they will
        // come again after the go-back.
        for (_, (slot, _)) in std::mem::take(&mut r.held) {
            self.held_total -= 1;
            self.free.push(slot);
        }
        if !r.stop_sent {
            r.stop_sent = true;
            self.stopped_peers += 1;
            let k = r.last_in_order();
            self.intents.push_back(Intent::Control(src, Kind::Stop, k));
        }
    }
}
