//! Context agreements that do not block (`MPI_Comm_idup`, and the waits
//! of `MPI_Comm_dup`, `_create`, `_create_group`, `_create_from_group`,
//! `_split` and `_split_type`, which under `MPI_THREAD_MULTIPLE` let the
//! library's lock go): the members agree on a new context id in rounds,
//! each round a non-blocking allreduce (bitwise AND) of what each member
//! offers, which every progress advances.
//!
//! A member offers its free ids only while it holds its free set
//! (`context::ContextIds::held`), else none; one more byte says whether
//! it offered them. If every member did, the lowest id free on all is the
//! new context (or, with none, the process is out of ids); if one did
//! not, the round is lost and the next one starts. So two agreements in
//! flight at once never take the same id at a process.
//!
//! Round 0 offers nothing: it ends when every member has started the
//! agreement. A later round therefore ends as soon as every member makes
//! progress (each offers something at once), so a held free set always
//! comes back, and a blocking agreement may wait for it; round 0 may not
//! hold it, as a member not there yet may be in a blocking agreement that
//! waits for this one's free set (MPICH's comm/comm_create_group_idup).
//! It is needed even where every member is known to have entered the
//! call (a split, after its allgather of colours): a member starts the
//! agreement only once its calling thread has the library's lock again,
//! which another thread's blocking call may hold while it waits for the
//! free set a round 1 holds elsewhere (tried: MPICH's
//! threads/comm/idup_comm_gen then hung 3 times in 10).
//!
//! A round takes the free set only when no blocking agreement waits for
//! it and its agreement comes first, by (parent's context, [`Channel`]),
//! of those past round 0 at this process: an order every member sees the
//! same. The first agreement of that order among all those past round 0
//! in the job is first at each of its members, so each offers it the free
//! set from some round on, and it ends; then the next. (One still in
//! round 0 waits for members that may wait for another agreement to end:
//! it comes in no order.)

use super::*;
use crate::coll::algorithms::allreduce_recursive_doubling;
use crate::coll::op::{Elem, Predefined, Reduction};
use crate::coll::schedule::schedule;
use crate::coll::Schedule;
use crate::coll::{Plan, Span};
use crate::context::{COLLECTIVE_CONTEXT, CONTEXT_IDS};

/// What tells an agreement's messages from every other's at its members,
/// and orders it after the parent's context.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Channel {
    /// Child number `n` of the parent, which every member of the parent
    /// counts alike: rounds tagged `8 n + round`.
    Child(u32),
    /// A tag the program chose to tell concurrent calls apart
    /// (`MPI_Comm_create_group`'s, the hash of `MPI_Comm_create_from_group`'s
    /// string): rounds tagged with it, the round in bits 16-19 of the
    /// context (no id reaches them; 0 there is `Child`'s).
    Tagged(c_int),
}

/// The order agreements under way at a process take the free set in.
pub type Priority = (u32, Channel);

/// One agreement under way at this member.
struct Agreement {
    id: u64,
    priority: Priority,
    /// The members agreeing (the parent's, or both groups of an
    /// intercommunicator's), and which of them this process is.
    context: u32,
    ranks: Arc<[Rank]>,
    me: usize,
    channel: Channel,
    /// This process takes the id (a member of the new communicator).
    join: bool,
    req: u32,
    round: u32,
    under_way: Option<Round>,
}

struct Round {
    schedule: Schedule,
    offer: Span,
    /// This round offers the free set (and holds it).
    holds: bool,
}

/// Agreements under way, and the outcomes of those that ended until the
/// communicator waiting for one takes it.
#[derive(Default)]
pub struct Agreements {
    running: Vec<Agreement>,
    ended: HashMap<u64, MpiResult<u32>>,
    next: u64,
}

impl Agreements {
    pub fn running(&self) -> bool {
        !self.running.is_empty()
    }

    /// Whether an agreement has no round under way: its next one starts
    /// at the next progress, which must come before any wait for
    /// messages (`Engine::wait_for_arrival`).
    pub fn round_to_start(&self) -> bool {
        self.running.iter().any(|a| a.under_way.is_none())
    }

    /// The outcome of agreement `id`, once it ended (taken: asked once).
    pub fn outcome(&mut self, id: u64) -> Option<MpiResult<u32>> {
        self.ended.remove(&id)
    }
}

impl Engine {
    /// Start agreeing with the members of `view` on the context of a child
    /// of the communicator whose context is `parent`, told apart by
    /// `channel`: the request that completes when they have, and the
    /// agreement's id for [`Agreements::outcome`] (where this process
    /// `join`s the child; else it takes part only, and keeps no outcome).
    pub fn start_agreement(
        &mut self,
        view: &Comm,
        parent: u32,
        channel: Channel,
        join: bool,
    ) -> (u32, u64) {
        let req = self
            .matching()
            .add(Request::new(Op::Collective, false, None));
        let id = self.agreements.next;
        self.agreements.next += 1;
        self.agreements.running.push(Agreement {
            id,
            priority: (parent, channel),
            context: view.context | COLLECTIVE_CONTEXT,
            ranks: view.ranks.clone(),
            me: view.rank as usize,
            channel,
            join,
            req,
            round: 0,
            under_way: None,
        });
        self.advance_agreements();
        (req, id)
    }

    /// Wait until no agreement round holds this process's free set, and
    /// hold it (a blocking agreement, until [`Engine::release_ids`]).
    pub fn hold_ids(&mut self) -> MpiResult<()> {
        if self.contexts.held {
            self.contexts.blocking_waits = true;
            let r = self.progress_until(|e| (!e.contexts.held).then_some(()));
            self.contexts.blocking_waits = false;
            r?;
        }
        self.contexts.held = true;
        Ok(())
    }

    pub fn release_ids(&mut self) {
        self.contexts.held = false;
    }

    /// Advance every agreement: start a round where none is under way,
    /// and end those whose round found the id.
    pub(super) fn advance_agreements(&mut self) {
        let mut running = std::mem::take(&mut self.agreements.running);
        let mut i = 0;
        while i < running.len() {
            let first = (running.iter())
                .filter(|a| a.round > 0)
                .map(|a| a.priority)
                .min();
            let a = &mut running[i];
            let round = match &mut a.under_way {
                Some(r) => r,
                None => {
                    let holds = a.round > 0
                        && !self.contexts.held
                        && !self.contexts.blocking_waits
                        && first == Some(a.priority);
                    a.under_way.insert(self.start_round(a, holds))
                }
            };
            let outcome = match round.schedule.advance(self) {
                Ok(false) => {
                    i += 1;
                    continue;
                }
                Ok(true) => self.round_ended(round, a.join),
                Err(e) => Some(Err(e)),
            };
            if round.holds {
                self.release_ids();
            }
            let Some(outcome) = outcome else {
                // Some member offered no ids: the next round, at the next
                // progress (a round of one member ends at once).
                a.round = a.round.wrapping_add(1);
                a.under_way = None;
                i += 1;
                continue;
            };
            let a = running.swap_remove(i);
            let status = match &outcome {
                Ok(_) => MpiStatus::empty(),
                Err(e) => {
                    tracing::warn!("MPI_Comm_idup failed: {}", e.message);
                    MpiStatus {
                        error: e.class,
                        ..MpiStatus::empty()
                    }
                }
            };
            if a.join {
                self.agreements.ended.insert(a.id, outcome);
            }
            self.matching().complete(a.req, status);
        }
        running.append(&mut self.agreements.running);
        self.agreements.running = running;
    }

    /// Round `a.round` of agreement `a`, offering the free set if `holds`.
    fn start_round(&mut self, a: &Agreement, holds: bool) -> Round {
        let mut offer = if holds {
            self.contexts.held = true;
            self.contexts.free()
        } else {
            vec![0; CONTEXT_IDS / 8]
        };
        offer.push(u8::from(holds));
        let mut plan = Plan::new(a.ranks.len(), a.me);
        let span = plan.buffer(offer);
        allreduce_recursive_doubling(&mut plan, span);
        plan.reducing(Reduction::Predefined(Predefined::Band, Elem::U8));
        // A member is at most one round ahead of another (a round ends
        // nowhere before every member has offered), so the round's last
        // three bits tell rounds apart; the channel, agreements.
        // `schedule` adds `COLLECTIVE_OPERATIONS` to the parent's library
        // context: no blocking split or agreement (that context alone)
        // and no collective (not the library's) sends there.
        let round = a.round & 7;
        let (context, tag) = match a.channel {
            Channel::Child(n) => (a.context, (n << 3 | round) as c_int),
            Channel::Tagged(t) => (a.context | (round + 1) << 16, t),
        };
        Round {
            schedule: schedule(plan, context, tag, a.ranks.clone()),
            offer: span,
            holds,
        }
    }

    /// What a finished round decided: the id (taken if `join`), out of
    /// ids, or `None`: some member offered none, try again.
    fn round_ended(&mut self, round: &Round, join: bool) -> Option<MpiResult<u32>> {
        let bits = round.schedule.bytes(round.offer);
        let (&everyone, free) = bits.split_last()?;
        if everyone == 0 {
            return None;
        }
        Some(self.contexts.take_lowest(free, join))
    }
}
