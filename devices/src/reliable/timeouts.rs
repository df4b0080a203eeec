//! The protocol's clock-driven side: which timers are due, and what each
//! does when it fires.

use super::header::seq_lt;
use super::protocol::{Intent, Protocol};
use super::timers::{earliest, Timer};
use crate::Rank;
use std::time::Instant;

impl Protocol {
    /// When [`Protocol::handle_timeout`] has something to do at the
    /// latest (it may be earlier than needed, never later).
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.next_timeout
    }

    /// Run the timers due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        // Receive side: room again for a peer told STOP whose GO no
        // release sent (or whose GO was lost and who probes).
        if self.stopped_peers > 0 && self.room() {
            self.send_gos();
        }
        if self.next_timeout.is_none_or(|t| now < t) {
            return;
        }
        let mut next = None;
        for r in 0..self.sessions.len() {
            if self.sessions[r].timers.next().is_some_and(|t| t <= now) {
                for t in Timer::ALL {
                    if self.sessions[r].timers.due(t, now) {
                        self.sessions[r].timers.set(t, None);
                        self.fire(r as Rank, t, now);
                    }
                }
                self.sessions[r].rearm(&self.cfg, now);
            }
            next = earliest(next, self.sessions[r].timers.next());
        }
        self.next_timeout = next;
    }

    /// Timer `t` of session `r` is due: act if the state still calls for it.
    fn fire(&mut self, r: Rank, t: Timer, now: Instant) {
        let s = &mut self.sessions[r as usize];
        match t {
            Timer::Unreachable => {
                if s.live() && now >= s.unreachable_at(&self.cfg) {
                    s.send.unreachable = true;
                    self.rstats.unreachable += 1;
                    tracing::error!(
                        device = self.cfg.device,
                        rank = r,
                        secs = self.cfg.dead_after.as_secs_f64(),
                        "peer unreachable: nothing acknowledged"
                    );
                }
            }
            Timer::DelayedAck => {
                if s.recv.ack_owed > 0 && !s.recv.ack_queued {
                    s.recv.ack_queued = true;
                    self.intents.push_back(Intent::OwedAck(r));
                }
            }
            Timer::StopProbe => {
                // Probe with the oldest packet: a lost GO must not stall us.
                if s.live() && s.send.stopped && now >= s.stop_probe_at() {
                    s.send.stopped_at = now;
                    self.intents.push_back(Intent::Probe(r, s.send.oldest()));
                    self.rstats.probes += 1;
                }
            }
            Timer::Retransmit => self.retransmit(r, now),
        }
    }

    fn retransmit(&mut self, r: Rank, now: Instant) {
        let s = &mut self.sessions[r as usize];
        if !s.live() || s.send.stopped {
            return;
        }
        let due = s.retransmit_at();
        let send = &mut s.send;
        let oldest = send.oldest();
        match due {
            // Filled, never transmitted: the link refused it (a full socket
            // buffer). No timeout covers a packet never sent.
            None if seq_lt(send.sent, send.last()) => self.intents.push_back(Intent::Window(r)),
            Some(t) if now >= t => {
                send.rto = (send.rto * 2).min(self.cfg.rto_max);
                self.rstats.timeouts += 1;
                // The timer runs again from this decision, not from when the
                // resend reaches the link.
                send.slot(oldest).sent_at = Some(now);
                if send.probing.is_none() {
                    // F-RTO: resend the oldest packet only; the ACK it
                    // brings back says whether the others were late or lost
                    // (`SendState::on_ack`). A descheduled peer then costs
                    // one packet, not a window.
                    send.probing = Some(oldest);
                    self.intents.push_back(Intent::Probe(r, oldest));
                } else {
                    // The probe itself went unanswered: go back over all
                    // (erratum 1: from the oldest unacknowledged).
                    send.probing = None;
                    send.sent = send.acked;
                    self.intents.push_back(Intent::Window(r));
                }
            }
            _ => {}
        }
    }
}
