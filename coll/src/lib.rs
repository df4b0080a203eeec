//! # fm-coll — collectives as schedules, for fm's MPI and FM programs
//!
//! A collective is written once, as a [`Plan`]: the sends, receives and
//! local steps one member takes, in stages ([`algorithms`] has the classic
//! algorithms; [`hosts`] their two-level forms for members spread over
//! hosts). A [`Schedule`] runs a plan over any transport that implements
//! [`Channel`], without blocking, so the same plan serves a blocking call
//! and a non-blocking one. fm's MPI library runs its collectives over its
//! matching engine; the FM API (`fm::coll`) runs them over FM messages,
//! with the typed reductions of [`op`].
//!
//! ```
//! use fm_coll::{algorithms, Plan};
//! use fm_coll::op::{Checked, Op};
//! // Member 2 of 5 in a binomial broadcast from member 0: it hears from
//! // its parent, member 0, then passes the data on to member 3.
//! let mut p: Plan<Checked<u8>> = Plan::new(5, 2);
//! let data = p.scratch(8);
//! algorithms::bcast_binomial(&mut p, 0, data);
//! assert_eq!(p.peers(), (vec![3], vec![0]));
//! ```

pub mod algorithms;
pub mod choose;
pub mod hosts;
#[cfg(test)]
mod model;
pub mod op;
mod plan;
pub mod pool;
mod schedule;

pub use plan::{Output, Plan, Span, Step};
pub use schedule::{Channel, Combine, Schedule};
