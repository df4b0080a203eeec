//! The sender half of a session: the window of send slots (the send buffer
//! is the retransmit buffer), the sequence numbers, STOP/GO, and the
//! retransmission timeout from the measured round trip.

use super::header::{seq_le, seq_lt, HEADER};
use super::ReliableConfig;
use std::time::{Duration, Instant};

/// One packet of the window, kept until it is acknowledged: the header's
/// room, then the payload.
pub struct TxSlot {
    pub buf: Vec<u8>,
    /// Payload length.
    pub len: usize,
    /// When it last went out; `None`: never since it was filled.
    pub sent_at: Option<Instant>,
    /// Sent more than once: its ACK says nothing about the round trip (Karn).
    pub resent: bool,
}

pub struct SendState {
    slots: Vec<TxSlot>,
    /// Sequence number the next new packet gets (the first is 1).
    pub next_seq: u32,
    /// Last sequence acknowledged (cumulative).
    pub acked: u32,
    /// Last sequence transmitted since the last go-back.
    pub sent: u32,
    pub stopped: bool,
    pub stopped_at: Instant,
    /// Retransmission timeout now: from the round-trip estimate, doubled per timeout.
    pub rto: Duration,
    /// Smoothed round trip and its variation (RFC 6298), in microseconds.
    srtt_us: f64,
    rttvar_us: f64,
    /// Last time the acknowledged number moved (or the window became non-empty).
    pub progress_at: Instant,
    /// The LOSE number we last went back for, and when.
    went_back: Option<(u32, Instant)>,
    /// After a timeout, the one packet resent so far (F-RTO): the next ACK
    /// tells whether the rest must go again.
    pub probing: Option<u32>,
    pub unreachable: bool,
}

/// What an acknowledgement that moved did.
pub struct Acked {
    /// It covered packets sent before a timeout's probe: the timeout was spurious.
    pub spurious_timeout: bool,
    /// It ended a STOP (the GO may have been lost): what waited may go.
    pub ended_stop: bool,
}

impl SendState {
    /// `slots` of them; none for a peer not reached through this device.
    pub fn new(slots: usize, rto: Duration, now: Instant) -> SendState {
        SendState {
            // Buffers grow to the MTU on first use: memory only for the
            // peers and window slots a process actually sends through.
            slots: (0..slots)
                .map(|_| TxSlot {
                    buf: Vec::new(),
                    len: 0,
                    sent_at: None,
                    resent: false,
                })
                .collect(),
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
        }
    }

    /// The last sequence filled.
    pub fn last(&self) -> u32 {
        self.next_seq.wrapping_sub(1)
    }

    pub fn oldest(&self) -> u32 {
        self.acked.wrapping_add(1)
    }

    pub fn outstanding(&self) -> u32 {
        self.last().wrapping_sub(self.acked)
    }

    /// The window is full: every slot holds an unacknowledged packet.
    pub fn full(&self) -> bool {
        self.outstanding() >= self.slots.len() as u32
    }

    pub fn slot(&mut self, seq: u32) -> &mut TxSlot {
        let n = self.slots.len();
        &mut self.slots[seq as usize % n]
    }

    pub fn oldest_sent_at(&self) -> Option<Instant> {
        let n = self.slots.len();
        self.slots[self.oldest() as usize % n].sent_at
    }

    /// The next packet the window lets go out, if any.
    pub fn next_to_transmit(&self) -> Option<u32> {
        let seq = self.sent.wrapping_add(1);
        let open = !self.stopped
            && seq_lt(self.sent, self.last())
            && seq.wrapping_sub(self.acked) <= self.slots.len() as u32;
        open.then_some(seq)
    }

    /// The next slot, filled with `len` bytes of payload, becomes the next
    /// packet: its sequence.
    pub fn commit(&mut self, len: usize, now: Instant) -> u32 {
        let seq = self.next_seq;
        if self.outstanding() == 0 {
            self.progress_at = now;
        }
        let slot = self.slot(seq);
        slot.len = len.min(slot.buf.len().saturating_sub(HEADER));
        slot.sent_at = None;
        slot.resent = false;
        self.next_seq = seq.wrapping_add(1);
        seq
    }

    /// A cumulative acknowledgement of `k`; `None` if it moved nothing.
    pub fn on_ack(&mut self, k: u32, now: Instant, cfg: &ReliableConfig) -> Option<Acked> {
        if !(seq_lt(self.acked, k) && seq_le(k, self.last())) {
            return None;
        }
        let newest = self.slot(k);
        if let (Some(t), false) = (newest.sent_at, newest.resent) {
            self.measure(now.saturating_duration_since(t));
        }
        let mut s = self.acked;
        while s != k {
            s = s.wrapping_add(1);
            let slot = self.slot(s);
            slot.sent_at = None;
            slot.resent = false;
        }
        self.acked = k;
        if seq_lt(self.sent, k) {
            self.sent = k;
        }
        // As QUIC's probe timeout (RFC 9002 §6.2.1): the round trip's
        // spread, plus the time the peer may hold an ACK back (its delayed
        // ACK), above the configured floor.
        let est =
            Duration::from_micros((self.srtt_us + 4.0 * self.rttvar_us) as u64) + cfg.ack_delay();
        self.rto = est.clamp(cfg.rto, cfg.rto_max);
        self.progress_at = now;
        Some(Acked {
            // After a timeout's probe: packets after it acknowledged as
            // first sent mean the timeout was spurious. If only the probe
            // came back, the next packet's own timer (it was sent before the
            // probe) finds out soon whether it was lost too; going back over
            // the whole window now would resend what is merely late.
            spurious_timeout: self.probing.take().is_some_and(|probe| seq_lt(probe, k)),
            // An ACK that moves ends a STOP as a GO does (the GO may be
            // lost). Without this a sender with nothing new to send waited
            // for ever: no timer runs for packets never transmitted.
            ended_stop: std::mem::replace(&mut self.stopped, false),
        })
    }

    /// One round-trip sample (RFC 6298).
    fn measure(&mut self, rtt: Duration) {
        let sample = rtt.as_secs_f64() * 1e6;
        if self.srtt_us == 0.0 {
            self.srtt_us = sample;
            self.rttvar_us = sample / 2.0;
        } else {
            self.rttvar_us = 0.75 * self.rttvar_us + 0.25 * (self.srtt_us - sample).abs();
            self.srtt_us = 0.875 * self.srtt_us + 0.125 * sample;
        }
    }

    /// LOSE(k): the receiver has everything up to k. True when this goes
    /// back to k + 1 — once per loss: later LOSEs for the same gap were
    /// sent before our go-back reached the receiver (erratum 3: k is the
    /// last received, so only k = acked is a gap we have not filled).
    pub fn on_lose(&mut self, k: u32, now: Instant) -> bool {
        let fresh = match self.went_back {
            Some((prev, t)) => prev != k || now.saturating_duration_since(t) >= self.rto,
            None => true,
        };
        if !(fresh && k == self.acked && !self.stopped) {
            return false;
        }
        self.went_back = Some((k, now));
        self.probing = None;
        self.sent = self.acked;
        true
    }

    /// STOP: rewind to after the last accepted packet and wait for GO
    /// (erratum 5); the retransmission timer is suspended meanwhile. The
    /// probe's clock starts at the first STOP only: a repeated (or forged)
    /// STOP must not put the probe off for ever.
    pub fn on_stop(&mut self, now: Instant) {
        if !self.stopped {
            self.stopped_at = now;
        }
        self.stopped = true;
        self.probing = None;
        self.sent = self.acked;
    }

    /// GO: resume from the oldest unacknowledged packet.
    pub fn on_go(&mut self, now: Instant) {
        self.stopped = false;
        self.sent = self.acked;
        self.progress_at = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_stop_does_not_put_the_probe_off() {
        let t0 = Instant::now();
        let mut s = SendState::new(4, Duration::from_millis(1), t0);
        s.on_stop(t0 + Duration::from_millis(5));
        for ms in 6..100 {
            s.on_stop(t0 + Duration::from_millis(ms));
        }
        assert_eq!(s.stopped_at, t0 + Duration::from_millis(5));
        // A GO ends the STOP; the next STOP starts the clock again.
        s.on_go(t0 + Duration::from_millis(100));
        s.on_stop(t0 + Duration::from_millis(101));
        assert_eq!(s.stopped_at, t0 + Duration::from_millis(101));
    }
}
