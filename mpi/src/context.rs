//! Context ids: the number every message of a communicator carries, which
//! a receiver matches on. Two communicators a process belongs to must
//! never share one, or their messages would mix; so ids are not derived
//! (a hash of the parent's could collide) but agreed, as MPICH does: each
//! process knows which ids its communicators use, and the members of the
//! parent a new communicator is made from take the lowest id free on all
//! of them, found by a bitwise AND of their free sets (recursive doubling
//! over the parent, `log2(n)` rounds of messages).
//!
//! Agreements may run at once (`MPI_Comm_idup`, `engine::agreements`), and
//! two that both offered a process's free ids could both take the same
//! one. So the free set is *held*: only its holder offers it, a blocking
//! agreement for its whole length or a non-blocking one for one round;
//! the others offer no ids and try again (MPICH's scheme).

use crate::abi::*;
use crate::engine::{err, Comm, Engine, MpiResult, Route};
use std::ffi::c_int;

/// How many ids there are. A process can belong to this many
/// communicators at once, less `MPI_COMM_WORLD` and `MPI_COMM_SELF`.
pub const CONTEXT_IDS: usize = 4096;
const WORDS: usize = CONTEXT_IDS / 64;

/// Bit 30 of a context: the library's own messages on a communicator
/// (`MPI_Comm_split`'s exchange, the agreement below), which no user
/// receive can match.
pub const COLLECTIVE_CONTEXT: u32 = 0x4000_0000;

/// The context of a communicator whose `MPI_Comm_idup` has not ended:
/// no id is this (ids are below [`CONTEXT_IDS`]).
pub const UNAGREED: u32 = u32::MAX;

/// The ids this process's communicators use.
pub struct ContextIds {
    used: [u64; WORDS],
    /// An agreement holds the free set and may offer it.
    pub held: bool,
    /// A blocking agreement waits for the free set: no non-blocking
    /// round takes it meanwhile (or one that keeps failing could keep it
    /// from the blocking one for ever).
    pub blocking_waits: bool,
}

impl Default for ContextIds {
    /// `MPI_COMM_WORLD` has id 0 and `MPI_COMM_SELF` id 1.
    fn default() -> Self {
        let mut used = [0; WORDS];
        used[0] = 0b11;
        ContextIds {
            used,
            held: false,
            blocking_waits: false,
        }
    }
}

impl ContextIds {
    /// The free ids, one bit each, as bytes to send.
    pub fn free(&self) -> Vec<u8> {
        self.used.iter().flat_map(|w| (!w).to_le_bytes()).collect()
    }

    /// Id `id` is no longer used (`MPI_Comm_free`).
    pub fn release(&mut self, id: u32) {
        if let Some(w) = self.used.get_mut(id as usize / 64) {
            *w &= !(1 << (id % 64));
        }
    }

    pub fn take(&mut self, id: u32) {
        self.used[id as usize / 64] |= 1 << (id % 64);
    }

    /// The lowest id of `free` (taken when `join`).
    pub fn take_lowest(&mut self, free: &[u8], join: bool) -> MpiResult<u32> {
        let Some(id) = lowest_set(free) else {
            return err(
                MPI_ERR_OTHER,
                format!(
                    "no communicator id is free on every member: a process may belong to at most {} communicators",
                    CONTEXT_IDS - 2
                ),
            );
        };
        if join {
            self.take(id);
        }
        Ok(id)
    }
}

/// Agree with the other members of `parent` on the id of a new
/// communicator made from it: every member calls this, in the same order
/// on `parent` (its `epoch`, the parent's child count, tells the
/// agreements apart), holding the free set; those that `join` the new
/// communicator take the id. Collective over `parent`.
pub fn agree(engine: &mut Engine, parent: &Comm, epoch: u32, join: bool) -> MpiResult<u32> {
    let free = free_on(engine, parent, agreement_tag(epoch))?;
    engine.contexts.take_lowest(&free, join)
}

/// The ids free on every member of `comm`, as bits (collective over
/// `comm`, on its library context with `tag`; the caller holds the free
/// set).
pub fn free_on(engine: &mut Engine, comm: &Comm, tag: c_int) -> MpiResult<Vec<u8>> {
    debug_assert!(engine.contexts.held);
    let mine = engine.contexts.free();
    and_over(engine, comm, tag, mine)
}

/// A blocking agreement on child `epoch` of a communicator uses tag
/// `2 * epoch + 1` on the parent's library context (the even tags were
/// the blocking splits' exchanges of colours, which are collectives now).
fn agreement_tag(epoch: u32) -> c_int {
    (epoch.wrapping_mul(2).wrapping_add(1) & TAG_UB as u32) as c_int
}

fn lowest_set(bits: &[u8]) -> Option<u32> {
    let i = bits.iter().position(|&b| b != 0)?;
    Some(i as u32 * 8 + bits[i].trailing_zeros())
}

/// The bitwise AND of every member's `mine`, known to every member.
/// Recursive doubling: with `p` the largest power of two up to the size,
/// the members from `p` on first hand theirs to member `r - p`, the first
/// `p` exchange with partner `r ^ step` for each step, and the result goes
/// back to those that handed theirs in.
fn and_over(engine: &mut Engine, comm: &Comm, tag: c_int, mut mine: Vec<u8>) -> MpiResult<Vec<u8>> {
    let n = comm.ranks.len();
    let r = comm.rank as usize;
    let p = 1 << n.ilog2();
    let extra = n - p;
    if r >= p {
        send(engine, comm, r - p, tag, &mine)?;
        return receive(engine, comm, r - p, tag, mine.len());
    }
    if r < extra {
        let theirs = receive(engine, comm, r + p, tag, mine.len())?;
        and_into(&mut mine, &theirs);
    }
    let mut step = 1;
    while step < p {
        let partner = r ^ step;
        let sent = start_send(engine, comm, partner, tag, &mine)?;
        let theirs = receive(engine, comm, partner, tag, mine.len())?;
        engine.wait(sent)?;
        and_into(&mut mine, &theirs);
        step *= 2;
    }
    if r < extra {
        send(engine, comm, r + p, tag, &mine)?;
    }
    Ok(mine)
}

fn and_into(mine: &mut [u8], theirs: &[u8]) {
    for (a, b) in mine.iter_mut().zip(theirs) {
        *a &= b;
    }
}

fn collective(comm: &Comm, to: usize) -> Route {
    Route {
        context: comm.context | COLLECTIVE_CONTEXT,
        me: comm.rank,
        to: Some(comm.ranks[to]),
    }
}

/// Start sending `data` to member `to` of `comm` on its collective
/// context; the caller waits for it while `data` lives.
pub fn start_send(
    engine: &mut Engine,
    comm: &Comm,
    to: usize,
    tag: c_int,
    data: &[u8],
) -> MpiResult<u32> {
    // SAFETY: `data` outlives the request: every caller waits for it
    // before `data` goes.
    unsafe { engine.isend(collective(comm, to), tag, data.as_ptr(), data.len(), false) }
}

pub fn send(engine: &mut Engine, comm: &Comm, to: usize, tag: c_int, data: &[u8]) -> MpiResult<()> {
    let id = start_send(engine, comm, to, tag, data)?;
    engine.wait(id).map(drop)
}

/// `len` bytes from member `from` of `comm` on its collective context;
/// another length is an error, not a short answer.
pub fn receive(
    engine: &mut Engine,
    comm: &Comm,
    from: usize,
    tag: c_int,
    len: usize,
) -> MpiResult<Vec<u8>> {
    let mut b = vec![0u8; len];
    let context = comm.context | COLLECTIVE_CONTEXT;
    // SAFETY: `b` lives until the receive is waited for, here.
    let id = unsafe { engine.irecv(context, from as c_int, tag, b.as_mut_ptr(), len)? };
    let s = engine.wait(id)?;
    if s.bytes() != len as u64 || s.error != MPI_SUCCESS {
        return err(
            MPI_ERR_INTERN,
            format!(
                "member {from} sent {} bytes of the library's own exchange, not {len}",
                s.bytes()
            ),
        );
    }
    Ok(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_taken_lowest_first_and_released() {
        let mut c = ContextIds::default();
        assert_eq!(lowest_set(&c.free()), Some(2));
        c.take(2);
        c.take(3);
        assert_eq!(lowest_set(&c.free()), Some(4));
        c.release(2);
        assert_eq!(lowest_set(&c.free()), Some(2));
        // Another member uses 2 and 4: the lowest free on both is 5.
        let mut other = ContextIds::default();
        other.take(2);
        other.take(4);
        let mut both = c.free();
        and_into(&mut both, &other.free());
        assert_eq!(lowest_set(&both), Some(5));
        for id in 0..CONTEXT_IDS as u32 {
            c.take(id);
        }
        assert_eq!(lowest_set(&c.free()), None);
    }
}
