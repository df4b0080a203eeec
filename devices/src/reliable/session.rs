//! One peer's protocol state: the sender half, the receiver half and the
//! timers, with no link and no clock (the time comes in as arguments).

use super::header::seq_lt;
use super::recv::RecvState;
use super::send::SendState;
use super::timers::{earliest, Timer, TimerTable};
use super::ReliableConfig;
use std::time::Instant;

pub struct Session {
    /// The peer's epoch; `None`: not reached through this device.
    pub epoch: Option<u32>,
    pub send: SendState,
    pub recv: RecvState,
    pub timers: TimerTable,
    /// The control number of the last LOSE, STOP or GO sent to the peer.
    pub control_sent: u32,
    /// The control number of the last LOSE, STOP or GO acted on from the
    /// peer: one not newer is a replay (or reordered behind a newer one).
    pub control_acted: u32,
}

impl Session {
    pub fn new(epoch: Option<u32>, slots: usize, cfg: &ReliableConfig, now: Instant) -> Session {
        Session {
            epoch,
            send: SendState::new(if epoch.is_some() { slots } else { 0 }, cfg.rto, now),
            recv: RecvState::new(now),
            timers: TimerTable::default(),
            control_sent: 0,
            control_acted: 0,
        }
    }

    /// A LOSE, STOP or GO with control number `n` is newer than any acted
    /// on from the peer: it is acted on now (true), or is a replay.
    pub fn fresh_control(&mut self, n: u32) -> bool {
        let fresh = seq_lt(self.control_acted, n);
        if fresh {
            self.control_acted = n;
        }
        fresh
    }

    /// Packets are outstanding towards a peer still thought reachable.
    pub fn live(&self) -> bool {
        self.epoch.is_some() && self.send.outstanding() > 0 && !self.send.unreachable
    }

    // When each timer is due, from the state (one formula each, for arming
    // and for the check when it fires).

    /// The oldest unacknowledged packet's timeout (`None`: never sent).
    pub fn retransmit_at(&self) -> Option<Instant> {
        self.send.oldest_sent_at().map(|t| t + self.send.rto)
    }

    pub fn unreachable_at(&self, cfg: &ReliableConfig) -> Instant {
        self.send.progress_at + cfg.dead_after
    }

    pub fn stop_probe_at(&self) -> Instant {
        self.send.stopped_at + self.send.rto * 4
    }

    pub fn delayed_ack_at(&self, cfg: &ReliableConfig) -> Instant {
        self.recv.owed_since + cfg.ack_delay()
    }

    /// An acknowledgement moved: the retransmission and unreachability
    /// timers follow the new oldest packet (the timeout may have shrunk).
    pub fn arm_after_ack(&mut self, cfg: &ReliableConfig) -> Option<Instant> {
        if self.send.outstanding() == 0 {
            self.timers.set(Timer::Retransmit, None);
            self.timers.set(Timer::Unreachable, None);
            return None;
        }
        let retransmit = self.retransmit_at();
        if retransmit.is_some() {
            self.timers.set(Timer::Retransmit, retransmit);
        }
        let unreachable = Some(self.unreachable_at(cfg));
        self.timers.set(Timer::Unreachable, unreachable);
        earliest(retransmit, unreachable)
    }

    /// DATA went out at `now`: the timers that watch outstanding packets
    /// run, if they did not (a deadline already set is early enough: the
    /// oldest packet went out no later than this one).
    pub fn arm_after_send(&mut self, cfg: &ReliableConfig, now: Instant) -> Option<Instant> {
        let mut armed = None;
        if self.timers.get(Timer::Retransmit).is_none() {
            armed = Some(now + self.send.rto);
            self.timers.set(Timer::Retransmit, armed);
        }
        if self.timers.get(Timer::Unreachable).is_none() {
            let at = Some(self.unreachable_at(cfg));
            self.timers.set(Timer::Unreachable, at);
            armed = earliest(armed, at);
        }
        armed
    }

    /// The first ACK became owed: the delayed-ACK timer runs.
    pub fn arm_delayed_ack(&mut self, cfg: &ReliableConfig) -> Option<Instant> {
        let at = Some(self.delayed_ack_at(cfg));
        self.timers.set(Timer::DelayedAck, at);
        at
    }

    /// Stopped by the peer: the probe timer runs.
    pub fn arm_stop_probe(&mut self) -> Option<Instant> {
        let at = Some(self.stop_probe_at());
        self.timers.set(Timer::StopProbe, at);
        at
    }

    /// Set every timer from the state: what each waits for, if anything
    /// (after a timer fired, or a send failed).
    pub fn rearm(&mut self, cfg: &ReliableConfig, now: Instant) {
        let (send, recv) = (&self.send, &self.recv);
        let delayed_ack = (recv.ack_owed > 0 && !recv.ack_queued).then(|| self.delayed_ack_at(cfg));
        let live = self.live();
        let retransmit = (live && !send.stopped).then(|| match self.retransmit_at() {
            Some(t) => t,
            // Filled but never sent (the link refused it): try again soon,
            // keeping an earlier deadline so a busy peer cannot postpone it.
            None => self
                .timers
                .get(Timer::Retransmit)
                .unwrap_or(now + cfg.ack_delay()),
        });
        let stop_probe = (live && send.stopped).then(|| self.stop_probe_at());
        let unreachable = live.then(|| self.unreachable_at(cfg));
        self.timers.set(Timer::DelayedAck, delayed_ack);
        self.timers.set(Timer::Retransmit, retransmit);
        self.timers.set(Timer::StopProbe, stop_probe);
        self.timers.set(Timer::Unreachable, unreachable);
    }
}
