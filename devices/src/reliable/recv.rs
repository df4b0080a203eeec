//! The receiver half of a session: the next sequence expected, the ACKs
//! owed, the LOSE and STOP already sent, and the reorder queue of a trunk.

use super::header::seq_lt;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

pub struct RecvState {
    /// Next sequence expected.
    pub next: u32,
    /// Packets accepted since the last ACK went out (bare or carried).
    pub ack_owed: u32,
    /// An ACK is queued to go bare: the delayed-ACK timer need not run.
    pub ack_queued: bool,
    /// When the oldest ACK still owed was earned.
    pub owed_since: Instant,
    /// STOP sent, GO not yet.
    pub stop_sent: bool,
    /// The gap we last sent LOSE for (`next` then), and when.
    lose_sent: Option<(u32, Instant)>,
    /// Reorder queue: packets after a gap, by sequence → (pool slot, length).
    pub held: BTreeMap<u32, (u32, usize)>,
}

/// Where an arriving DATA stands against what was received.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arrival {
    /// The one expected next.
    InOrder,
    /// Received before (or waiting in the reorder queue).
    Duplicate,
    /// After a gap, `ahead` past the one expected.
    Ahead { ahead: u32 },
}

impl RecvState {
    pub fn new(now: Instant) -> RecvState {
        RecvState {
            next: 1,
            ack_owed: 0,
            ack_queued: false,
            owed_since: now,
            stop_sent: false,
            lose_sent: None,
            held: BTreeMap::new(),
        }
    }

    /// The cumulative ACK: the last sequence received in order.
    pub fn last_in_order(&self) -> u32 {
        self.next.wrapping_sub(1)
    }

    pub fn arrival(&self, seq: u32) -> Arrival {
        if seq == self.next {
            Arrival::InOrder
        } else if seq_lt(seq, self.next) || self.held.contains_key(&seq) {
            Arrival::Duplicate
        } else {
            Arrival::Ahead {
                ahead: seq.wrapping_sub(self.next),
            }
        }
    }

    /// One more packet accepted in order.
    pub fn accept(&mut self, now: Instant) {
        self.next = self.next.wrapping_add(1);
        if self.ack_owed == 0 {
            self.owed_since = now;
        }
        self.ack_owed += 1;
        self.lose_sent = None;
    }

    /// An ACK went out (bare or carried by DATA or a control packet).
    pub fn acked(&mut self) {
        self.ack_owed = 0;
        self.ack_queued = false;
    }

    /// Whether to answer a gap with LOSE now: once per gap, again after `rto`.
    pub fn lose_again(&mut self, now: Instant, rto: Duration) -> bool {
        let again = match self.lose_sent {
            Some((k, t)) => k != self.next || now.saturating_duration_since(t) >= rto,
            None => true,
        };
        if again {
            self.lose_sent = Some((self.next, now));
        }
        again
    }
}
