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
//!
//! The exception is a cleared rendezvous message's bytes ([`Kind::Bulk`],
//! below): the receive that cleared it leaves a [`Landing`], and the
//! bytes go straight into its memory as they arrive, not into a buffer
//! here first and then copied (which made FM programs' large collectives
//! copy every byte twice). The landing holds its collective's [`Alive`]
//! flag, which the collective's end clears; the handler writes only
//! while holding the flag's lock with the flag set.
//!
//! A message of [`RENDEZVOUS_FROM`] bytes or more goes by rendezvous: the
//! sender announces it ([`Kind::Ready`]), the receive whose ticket it is
//! answers once it is under way ([`Kind::Clear`]), and only then do the
//! bytes come ([`Kind::Bulk`]). A member that runs ahead (the root of
//! broadcasts in a loop) so waits for its members instead of filling
//! their memory with messages they have not asked for yet.

use crate::incoming::Incoming;
use crate::{Rank, Result};
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};

/// The reserved handler ID of collectives' messages.
pub(crate) const COLLECTIVE: u16 = crate::RESERVED_HANDLERS;

/// Messages this long and longer go by rendezvous.
pub(crate) const RENDEZVOUS_FROM: usize = 64 << 10;

/// A collective message's header: the group's ID, the collective's number
/// in it, the kind, and a ticket (or a length), little-endian.
pub(crate) const HEADER: usize = 20;

/// The most bytes a collective message's buffer is made room for before
/// its bytes arrive.
const POOLED_CLAIM: usize = 16 << 20;

/// A collective (group ID, number) and the other member (the source of a
/// message, the destination of a send).
pub(crate) type Key = (u64, u32, Rank);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// The data itself, sent at once.
    Eager = 0,
    /// A rendezvous message is ready (its bytes come once cleared; the
    /// word says how many, for whoever reads a trace).
    Ready = 1,
    /// The receiver's answer to a `Ready`: send the bytes of ticket t.
    Clear = 2,
    /// The bytes of the message of ticket t, cleared.
    Bulk = 3,
}

pub(crate) fn header(group: u64, seq: u32, kind: Kind, word: u32) -> [u8; HEADER] {
    let mut h = [0u8; HEADER];
    h[..8].copy_from_slice(&group.to_le_bytes());
    h[8..12].copy_from_slice(&seq.to_le_bytes());
    h[12..16].copy_from_slice(&(kind as u32).to_le_bytes());
    h[16..].copy_from_slice(&word.to_le_bytes());
    h
}

/// (group ID, number, kind, word) of a header; `None` for an unknown kind.
fn parse(h: &[u8; HEADER]) -> Option<(u64, u32, Kind, u32)> {
    let word = |at: usize| {
        let mut w = [0u8; 4];
        w.copy_from_slice(&h[at..at + 4]);
        u32::from_le_bytes(w)
    };
    let mut g = [0u8; 8];
    g.copy_from_slice(&h[..8]);
    let kind = match word(12) {
        0 => Kind::Eager,
        1 => Kind::Ready,
        2 => Kind::Clear,
        3 => Kind::Bulk,
        _ => return None,
    };
    Some((u64::from_le_bytes(g), word(8), kind, word(16)))
}

/// What arrived for a ticket.
enum Arrival {
    Data(Vec<u8>),
    /// A rendezvous message, and whether it was cleared.
    Ready(bool),
}

/// The messages of one key.
#[derive(Default)]
struct Slot {
    /// Arrived messages, numbered from `first`; `None`: taken.
    arrived: VecDeque<Option<Arrival>>,
    first: u32,
    /// Receives posted.
    posted: u32,
}

/// Whether a collective is still under way: cleared (under its lock)
/// when its `Pending` is dropped, after which no handler writes into its
/// receives' memory.
pub(crate) type Alive = Arc<Mutex<bool>>;

/// Where the bytes of a cleared rendezvous message land: a receive's
/// memory of `room` bytes, while its collective is [`Alive`].
pub(crate) struct Landing {
    pub(crate) into: *mut u8,
    pub(crate) room: usize,
    pub(crate) alive: Alive,
}

// SAFETY: `into` is written only by the endpoint's handler, with `alive`
// locked and set: while the collective that owns the memory is under way.
unsafe impl Send for Landing {}

/// What a receive finds for its ticket.
pub(crate) enum Found {
    /// Nothing yet.
    Nothing,
    /// Its message's bytes.
    Data(Vec<u8>),
    /// A rendezvous message, not yet cleared: clear it (the caller sends
    /// the `Clear` and leaves a [`Landing`]), then wait for the bytes.
    Clear,
    /// Its message's bytes, this many, are in the receive's memory.
    Landed(usize),
}

#[derive(Default)]
pub(crate) struct Mailbox {
    /// By collective (group ID, number), by source. A source's tickets
    /// count on for the whole collective (a rendezvous names its message
    /// by them), and the collective's entry goes when it completes here
    /// ([`Mailbox::forget`]).
    slots: HashMap<(u64, u32), HashMap<Rank, Slot>>,
    /// Bytes of cleared rendezvous messages, by key and ticket.
    bulk: HashMap<(Key, u32), Vec<u8>>,
    /// Clears received: (key of the receiver, ticket).
    cleared: HashSet<(Key, u32)>,
    /// Where cleared messages' bytes go, by key and ticket.
    landings: HashMap<(Key, u32), Landing>,
    /// How many bytes landed, by key and ticket.
    landed: HashMap<(Key, u32), usize>,
}

impl Mailbox {
    /// A receive of the next message of `key`: its ticket.
    pub(crate) fn post(&mut self, key: Key) -> u32 {
        let s = self.slot(key);
        s.posted += 1;
        s.posted - 1
    }

    /// What has arrived for ticket `t` of `key`: a message's bytes are
    /// taken (once); a rendezvous message asks once to be cleared.
    pub(crate) fn take(&mut self, key: Key, t: u32) -> Found {
        let Some(s) = (self.slots.get_mut(&(key.0, key.1))).and_then(|c| c.get_mut(&key.2)) else {
            return Found::Nothing;
        };
        let Some(at) = t.checked_sub(s.first) else {
            return Found::Nothing;
        };
        let Some(slot) = s.arrived.get_mut(at as usize) else {
            return Found::Nothing;
        };
        let data = match slot {
            None => return Found::Nothing,
            Some(Arrival::Ready(cleared @ false)) => {
                *cleared = true;
                return Found::Clear;
            }
            Some(Arrival::Ready(true)) => match self.landed.remove(&(key, t)) {
                Some(n) => {
                    *slot = None;
                    self.pop_taken(key);
                    return Found::Landed(n);
                }
                None => match self.bulk.remove(&(key, t)) {
                    Some(d) => d,
                    None => return Found::Nothing,
                },
            },
            Some(Arrival::Data(_)) => match slot.take() {
                Some(Arrival::Data(d)) => d,
                _ => return Found::Nothing,
            },
        };
        *slot = None;
        self.pop_taken(key);
        Found::Data(data)
    }

    /// The taken messages at the front of `key`'s slot, gone.
    fn pop_taken(&mut self, key: Key) {
        let s = self.slot(key);
        while let Some(None) = s.arrived.front() {
            s.arrived.pop_front();
            s.first += 1;
        }
    }

    /// The bytes of ticket `t` of `key`, once cleared, go to `l`.
    pub(crate) fn land(&mut self, key: Key, t: u32, l: Landing) {
        self.landings.insert((key, t), l);
    }

    /// Whether the receiver of `key` cleared our message of ticket `t`
    /// (taken once).
    pub(crate) fn take_clear(&mut self, key: Key, t: u32) -> bool {
        self.cleared.remove(&(key, t))
    }

    fn slot(&mut self, key: Key) -> &mut Slot {
        let c = self.slots.entry((key.0, key.1)).or_default();
        c.entry(key.2).or_default()
    }

    fn arrived(&mut self, key: Key, a: Arrival) {
        self.slot(key).arrived.push_back(Some(a));
    }

    /// Collective `seq` of `group` completed here: every message for it
    /// was taken, and its tickets are no longer needed.
    pub(crate) fn forget(&mut self, group: u64, seq: u32) {
        self.slots.remove(&(group, seq));
    }

    /// Messages of collectives waiting for their receives (for tests).
    #[cfg(test)]
    fn waiting(&self) -> usize {
        let s = self.slots.values().flat_map(|c| c.values());
        s.map(|s| s.arrived.iter().flatten().count()).sum()
    }
}

/// The collective message `m` is, kept in its endpoint's mailbox; one too
/// short to hold a header, or of a kind fm does not know, is dropped and
/// counted.
pub(crate) fn intake(m: &mut Incoming<'_>) -> Result<()> {
    let mut h = [0u8; HEADER];
    let parsed = match m.len() >= HEADER && m.receive(&mut h)? == HEADER {
        true => parse(&h),
        false => None,
    };
    let Some((group, seq, kind, word)) = parsed else {
        m.endpoint().stats.dropped_malformed += 1;
        tracing::warn!(
            src = m.src(),
            "fm: dropped a collective message without a header fm knows"
        );
        return Ok(());
    };
    let key = (group, seq, m.src());
    if kind == Kind::Bulk && land(m, key, word)? {
        return Ok(());
    }
    let data = match kind {
        Kind::Eager | Kind::Bulk => {
            // From the pool the schedules' buffers come from: a fresh
            // vector of a megabyte or more would be fresh pages, faulted
            // in on every message. Room for at most `POOLED_CLAIM` up
            // front: the length is the sender's claim, and beyond it the
            // vector grows with what really comes.
            let mut data = fm_coll::pool::take(m.remaining().min(POOLED_CLAIM));
            m.receive_append(&mut data)?;
            data
        }
        Kind::Ready | Kind::Clear => Vec::new(),
    };
    let b = &mut m.endpoint().coll_mailbox;
    match kind {
        Kind::Eager => b.arrived(key, Arrival::Data(data)),
        Kind::Ready => b.arrived(key, Arrival::Ready(false)),
        Kind::Clear => {
            b.cleared.insert((key, word));
        }
        Kind::Bulk => {
            b.bulk.insert((key, word), data);
        }
    }
    Ok(())
}

/// The bytes of `m`, a cleared rendezvous message of ticket `t` of `key`,
/// straight into the receive's memory if it left a landing, its
/// collective is under way and they fit: whether they landed (else they
/// are kept as any message, and the receive finds them there).
fn land(m: &mut Incoming<'_>, key: Key, t: u32) -> Result<bool> {
    let Some(l) = m.endpoint().coll_mailbox.landings.remove(&(key, t)) else {
        return Ok(false);
    };
    let alive = l.alive.lock().unwrap_or_else(|e| e.into_inner());
    let len = m.remaining();
    if !*alive || len > l.room {
        return Ok(false);
    }
    let got = match len {
        0 => 0,
        // SAFETY: the receive's memory holds `room` bytes while its
        // collective is under way, which `alive`, locked, says it is.
        _ => m.receive(unsafe { std::slice::from_raw_parts_mut(l.into, len) })?,
    };
    drop(alive);
    m.endpoint().coll_mailbox.landed.insert((key, t), got);
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(f: Found) -> Option<Vec<u8>> {
        match f {
            Found::Data(d) => Some(d),
            _ => None,
        }
    }

    #[test]
    fn each_receive_takes_the_message_of_its_ticket_in_any_order_and_the_collective_is_forgotten_after(
    ) {
        let mut b = Mailbox::default();
        let k = (7, 3, 1);
        let (t0, t1) = (b.post(k), b.post(k));
        assert_eq!(data(b.take(k, t0)), None, "nothing has arrived");
        b.arrived(k, Arrival::Data(vec![0]));
        b.arrived(k, Arrival::Data(vec![1]));
        b.arrived((7, 4, 1), Arrival::Data(vec![9]));
        assert_eq!(
            data(b.take(k, t1)),
            Some(vec![1]),
            "tested before the first"
        );
        assert_eq!(data(b.take(k, t1)), None, "taken once");
        assert_eq!(data(b.take(k, t0)), Some(vec![0]));
        // A message that arrives before its receive is posted waits, and
        // the tickets count on.
        b.arrived(k, Arrival::Data(vec![2]));
        let t = b.post(k);
        assert_eq!(t, 2);
        assert_eq!(data(b.take(k, t)), Some(vec![2]));
        assert_eq!(b.waiting(), 1, "the other collective's message");
        b.forget(7, 3);
        assert!(!b.slots.contains_key(&(7, 3)) && b.slots.contains_key(&(7, 4)));
    }

    #[test]
    fn a_rendezvous_message_is_cleared_once_and_taken_when_its_bytes_come() {
        let mut b = Mailbox::default();
        let k = (1, 0, 2);
        let (t0, t1) = (b.post(k), b.post(k));
        b.arrived(k, Arrival::Ready(false));
        b.arrived(k, Arrival::Data(vec![5]));
        assert!(matches!(b.take(k, t0), Found::Clear), "asks to be cleared");
        assert!(matches!(b.take(k, t0), Found::Nothing), "once");
        assert_eq!(
            data(b.take(k, t1)),
            Some(vec![5]),
            "the next ticket is not held up"
        );
        b.bulk.insert((k, t0), vec![7; 100]);
        assert_eq!(data(b.take(k, t0)), Some(vec![7; 100]));
        assert!(b.bulk.is_empty());
        // Bytes that landed in the receive's memory are found by count.
        let t2 = b.post(k);
        b.arrived(k, Arrival::Ready(false));
        assert!(matches!(b.take(k, t2), Found::Clear));
        b.landed.insert((k, t2), 64);
        assert!(matches!(b.take(k, t2), Found::Landed(64)));
        assert!(matches!(b.take(k, t2), Found::Nothing), "taken once");
        assert!(!b.take_clear(k, 0));
        b.cleared.insert((k, 0));
        assert!(b.take_clear(k, 0) && !b.take_clear(k, 0));
    }
}
