//! A session's timers, in one table: each is a deadline or nothing.
//!
//! A deadline may be early but never late: when one passes, the protocol
//! checks the session's state before it acts (`Protocol::fire`) and sets
//! the deadline again from that state (`Session::rearm`). So an event that
//! makes a timer unnecessary (an ACK, a GO) need not find and cancel it,
//! and the hot paths only arm what may now be needed sooner
//! (`Session::arm_after_ack`, `arm_after_send`, `arm_delayed_ack`,
//! `arm_stop_probe`).

use std::time::Instant;

/// What a session waits for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Timer {
    /// Nothing acknowledged for `dead_after`: the peer is unreachable.
    /// First: an unreachable peer gets no retransmission.
    Unreachable,
    /// An ACK owed and not yet carried by DATA: send it bare.
    DelayedAck,
    /// The oldest unacknowledged packet has waited a retransmission
    /// timeout (or a packet never went out: the link refused it).
    Retransmit,
    /// Stopped by the peer for a while: probe with one packet, in case the GO was lost.
    StopProbe,
}

impl Timer {
    /// In the order they fire when due together.
    pub const ALL: [Timer; 4] = [
        Timer::Unreachable,
        Timer::DelayedAck,
        Timer::Retransmit,
        Timer::StopProbe,
    ];
}

/// The deadlines of one session's timers.
#[derive(Clone, Debug, Default)]
pub struct TimerTable {
    at: [Option<Instant>; 4],
}

impl TimerTable {
    pub fn get(&self, t: Timer) -> Option<Instant> {
        self.at[t as usize]
    }

    /// Set `t` to `when`, or stop it with `None`.
    pub fn set(&mut self, t: Timer, when: Option<Instant>) {
        self.at[t as usize] = when;
    }

    /// The earliest deadline.
    pub fn next(&self) -> Option<Instant> {
        self.at.iter().flatten().min().copied()
    }

    /// `t`'s deadline is `now` or earlier.
    pub fn due(&self, t: Timer, now: Instant) -> bool {
        self.get(t).is_some_and(|d| d <= now)
    }
}

/// The earlier of two optional deadlines.
pub fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, None) => a,
        (None, b) => b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_table_answers_the_earliest_and_the_expired() {
        let t0 = Instant::now();
        let mut t = TimerTable::default();
        assert_eq!(t.next(), None);
        t.set(Timer::Unreachable, Some(t0 + Duration::from_secs(10)));
        t.set(Timer::DelayedAck, Some(t0 + Duration::from_millis(1)));
        assert_eq!(t.next(), Some(t0 + Duration::from_millis(1)));
        assert!(!t.due(Timer::DelayedAck, t0));
        let later = t0 + Duration::from_millis(1);
        let due: Vec<_> = Timer::ALL
            .into_iter()
            .filter(|x| t.due(*x, later))
            .collect();
        assert_eq!(due, [Timer::DelayedAck]);
        t.set(Timer::DelayedAck, None);
        assert_eq!(t.next(), Some(t0 + Duration::from_secs(10)));
        assert_eq!(earliest(None, Some(t0)), Some(t0));
        assert_eq!(
            earliest(Some(t0 + Duration::from_secs(1)), Some(t0)),
            Some(t0)
        );
    }
}
