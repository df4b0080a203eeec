//! fm's MPI collectives as fm-coll schedules: a plan combines with an MPI
//! [`Reduction`] and runs over the engine, its messages on the
//! communicator's collective context (no user receive matches them) with
//! the collective's sequence number as the tag, so two collectives in
//! flight on one communicator never take each other's messages, while
//! FM's order per pair keeps the messages of one collective between two
//! members in the order they were sent.

use super::op::Reduction;
use crate::abi::*;
use crate::engine::{err, Engine, MpiError, MpiResult};
use fm::Rank;
use std::os::raw::c_int;
use std::sync::Arc;

/// Bit 29 of a context: collective operations' messages (bit 30 is the
/// library's own exchanges, `context.rs`).
pub const COLLECTIVE_OPERATIONS: u32 = 0x2000_0000;

pub type Plan = fm_coll::Plan<Reduction>;
pub type Schedule = fm_coll::Schedule<Reduction, Collective>;
pub use fm_coll::Span;

impl fm_coll::Combine for Reduction {
    type Error = MpiError;
    fn combine(&self, lower: &[u8], higher: &mut [u8]) -> MpiResult<()> {
        Reduction::combine(self, lower, higher)
    }
    fn commutative(&self) -> bool {
        Reduction::commutative(self)
    }
}

/// One collective's way to its members: the communicator's context, the
/// collective's number and the members' job ranks.
pub struct Collective {
    context: u32,
    tag: c_int,
    me: c_int,
    ranks: Arc<[Rank]>,
}

impl Collective {
    /// The channel of collective `tag` (its number on the communicator)
    /// of member `me` on context `context` (the communicator's).
    pub fn new(context: u32, tag: c_int, me: usize, ranks: Arc<[Rank]>) -> Collective {
        Collective {
            context: context | COLLECTIVE_OPERATIONS,
            tag: tag & TAG_UB,
            me: me as c_int,
            ranks,
        }
    }
}

/// The plan as a schedule of collective `tag` on context `context`.
pub fn schedule(plan: Plan, context: u32, tag: c_int, ranks: Arc<[Rank]>) -> Schedule {
    let me = plan.rank;
    plan.schedule(Collective::new(context, tag, me, ranks))
}

impl fm_coll::Channel for Collective {
    type Net = Engine;
    type Error = MpiError;
    type Request = u32;

    unsafe fn send(
        &mut self,
        e: &mut Engine,
        to: usize,
        data: *const u8,
        len: usize,
    ) -> MpiResult<u32> {
        let route = crate::engine::Route {
            context: self.context,
            me: self.me,
            to: Some(self.ranks[to]),
        };
        e.isend(route, self.tag, data.cast_mut(), len, false)
    }

    unsafe fn recv(
        &mut self,
        e: &mut Engine,
        from: usize,
        into: *mut u8,
        len: usize,
    ) -> MpiResult<u32> {
        e.irecv(self.context, from as c_int, self.tag, into, len)
    }

    fn test(&mut self, e: &mut Engine, r: u32) -> Option<MpiResult<usize>> {
        let s = e.test(r)?;
        Some(match s.error {
            MPI_SUCCESS => Ok(s.bytes() as usize),
            // The receive got what fits and more was sent: more than its
            // room, which `mismatch` reports.
            MPI_ERR_TRUNCATE => Ok(s.bytes() as usize + 1),
            c => err(c, format!("a receive from member {} failed", s.source)),
        })
    }

    fn mismatch(&self, from: usize, got: usize, want: usize) -> MpiError {
        let what = match got > want {
            true => "more bytes".to_string(),
            false => format!("{got} bytes"),
        };
        MpiError {
            class: MPI_ERR_TRUNCATE,
            message: format!(
                "member {from} sent {what} where {want} were expected: do all members pass matching counts and types (and the same root)?"
            ),
        }
    }
}
