//! Where collectives' messages wait for the receive that takes them.
//!
//! A collective's message carries its group and its number in the group
//! ([`Key`]); FM keeps each pair's messages in order, so the n-th message
//! from a source for one collective is the one its n-th receive from that
//! source wants. A receive is given its number when posted (a *ticket*)
//! and takes that message when it has arrived, in whatever order the
//! schedule tests its receives. Messages are kept here, never written
//! into a receive's memory from a handler, so a collective given up part
//! way (its `Pending` dropped) leaves nothing to write into memory that
//! is no longer its.

use crate::incoming::Incoming;
use crate::{Rank, Result};
use std::collections::{HashMap, VecDeque};

/// The reserved handler ID of collectives' messages.
pub(crate) const COLLECTIVE: u16 = crate::RESERVED_HANDLERS;

/// A collective message's header: the group's ID and the collective's
/// number in it, little-endian.
pub(crate) const HEADER: usize = 12;

/// The most bytes a collective message's buffer is made room for before
/// its bytes arrive.
const POOLED_CLAIM: usize = 16 << 20;

/// A collective (group ID, number) and a source.
pub(crate) type Key = (u64, u32, Rank);

pub(crate) fn header(group: u64, seq: u32) -> [u8; HEADER] {
    let mut h = [0u8; HEADER];
    h[..8].copy_from_slice(&group.to_le_bytes());
    h[8..].copy_from_slice(&seq.to_le_bytes());
    h
}

/// (group ID, number) of a header.
fn parse(h: &[u8; HEADER]) -> (u64, u32) {
    let (mut g, mut s) = ([0u8; 8], [0u8; 4]);
    g.copy_from_slice(&h[..8]);
    s.copy_from_slice(&h[8..]);
    (u64::from_le_bytes(g), u32::from_le_bytes(s))
}

/// The messages of one key.
#[derive(Default)]
struct Slot {
    /// Arrived messages, numbered from `first`; `None`: taken.
    arrived: VecDeque<Option<Vec<u8>>>,
    first: u32,
    /// Receives posted.
    posted: u32,
}

#[derive(Default)]
pub(crate) struct Mailbox {
    slots: HashMap<Key, Slot>,
}

impl Mailbox {
    /// A receive of the next message of `key`: its ticket.
    pub(crate) fn post(&mut self, key: Key) -> u32 {
        let s = self.slots.entry(key).or_default();
        s.posted += 1;
        s.posted - 1
    }

    /// The message of `key` that ticket `t` is for, once it has arrived.
    pub(crate) fn take(&mut self, key: Key, t: u32) -> Option<Vec<u8>> {
        let s = self.slots.get_mut(&key)?;
        let at = t.checked_sub(s.first)? as usize;
        let m = s.arrived.get_mut(at)?.take()?;
        while let Some(None) = s.arrived.front() {
            s.arrived.pop_front();
            s.first += 1;
        }
        // Every receive posted has its message and nothing more waits:
        // the next message and the next receive both start again at 0.
        if s.arrived.is_empty() && s.first == s.posted {
            self.slots.remove(&key);
        }
        Some(m)
    }

    fn arrived(&mut self, key: Key, data: Vec<u8>) {
        self.slots
            .entry(key)
            .or_default()
            .arrived
            .push_back(Some(data));
    }

    /// Messages of collectives waiting for their receives (for tests).
    #[cfg(test)]
    fn waiting(&self) -> usize {
        let s = self.slots.values();
        s.map(|s| s.arrived.iter().flatten().count()).sum()
    }
}

/// The collective message `m` is, kept in its endpoint's mailbox; one too
/// short to hold a header is dropped and counted.
pub(crate) fn intake(m: &mut Incoming<'_>) -> Result<()> {
    let mut h = [0u8; HEADER];
    if m.len() < HEADER || m.receive(&mut h)? < HEADER {
        let ep = m.endpoint();
        ep.stats.dropped_malformed += 1;
        tracing::warn!(
            src = m.src(),
            "fm: dropped a collective message without its header"
        );
        return Ok(());
    }
    let (group, seq) = parse(&h);
    // From the pool the schedules' buffers come from: a fresh vector of a
    // megabyte or more would be fresh pages, faulted in on every message.
    // Room for at most `POOLED_CLAIM` up front: the length is the sender's
    // claim, and beyond it the vector grows with what really comes.
    let mut data = fm_coll::pool::take(m.remaining().min(POOLED_CLAIM));
    m.receive_append(&mut data)?;
    let src = m.src();
    m.endpoint().coll_mailbox.arrived((group, seq, src), data);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_receive_takes_the_message_of_its_ticket_in_any_order_and_the_key_is_forgotten_after() {
        let mut b = Mailbox::default();
        let k = (7, 3, 1);
        let (t0, t1) = (b.post(k), b.post(k));
        assert_eq!(b.take(k, t0), None, "nothing has arrived");
        b.arrived(k, vec![0]);
        b.arrived(k, vec![1]);
        b.arrived((7, 4, 1), vec![9]);
        assert_eq!(b.take(k, t1), Some(vec![1]), "tested before the first");
        assert_eq!(b.take(k, t1), None, "taken once");
        assert_eq!(b.take(k, t0), Some(vec![0]));
        assert!(!b.slots.contains_key(&k), "forgotten once all are taken");
        // A message that arrives before its receive is posted waits.
        b.arrived(k, vec![2]);
        let t = b.post(k);
        assert_eq!(b.take(k, t), Some(vec![2]));
        assert_eq!(b.waiting(), 1, "the other collective's message");
    }
}
