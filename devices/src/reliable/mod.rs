//! The reliable-datagram layer: PM's Go-Back-N (thesis 001 §4.3.3 and
//! Appendix B) over any lossy [`Link`], with the errata fixed (notes §1.3):
//!
//! - per peer u32 sequence numbers, compared with serial arithmetic; the
//!   first DATA is 1; the sender keeps each packet in its send slot until it
//!   is acknowledged (the send buffer is the retransmit buffer);
//! - ACKs are cumulative and carried by every packet (piggybacked); a
//!   receiver that owes some sends a bare ACK after a quarter of the
//!   retransmission timeout without DATA to carry it (delayed ACK), or at
//!   once when it owes half a window;
//! - an out-of-order DATA is dropped and answered with LOSE(last in order),
//!   once per gap; LOSE(k) with k ≥ acked (erratum 3) makes the sender go
//!   back to k + 1 at once;
//! - a timeout goes back to the oldest unacknowledged packet (erratum 1),
//!   with exponential backoff, reset by progress;
//! - duplicates are dropped and re-acknowledged (erratum 6);
//! - STOP(k) carries the last sequence *accepted*: the sender rewinds to
//!   k + 1 and stops, its timer suspended; GO(j) resumes from j (erratum 5).
//!   A stopped sender probes with one packet now and then, so a lost GO
//!   cannot stall it for ever;
//! - an epoch per process incarnation in every header, plus the job key:
//!   packets of another job or of a dead earlier process are dropped and counted;
//! - no progress for `dead_after` with packets outstanding: the peer is
//!   unreachable, and sends to it fail with a clear error.
//!
//! The protocol is sans-IO (`protocol.rs`, after quinn-proto): per peer a
//! [`Session`](session) of a sender half (`send.rs`), a receiver half
//! (`recv.rs`) and a table of timers (`timers.rs`), with no link and no
//! clock, so the model tests run it in virtual time. The driver
//! (`driver.rs`) runs it over a real [`Link`]: when the application polls
//! (`raw_receive`, and `raw_send_buffer` when the window is full), and from
//! a low-rate background thread for a process that stops polling.
//!
//! | file | what |
//! |---|---|
//! | `header.rs` | the 64-byte packet header, its checksum and MAC, serial arithmetic |
//! | `config.rs` | [`ReliableConfig`], the user's [`Settings`], the advertised endpoint |
//! | `settings.rs` | the `FM_ETH_*` window, pool and timers, `FM_ETH_CHECKSUM`, `FM_FAULTS` in fm's table of settings |
//! | `send.rs`, `recv.rs`, `timers.rs`, `session.rs` | one peer's protocol state |
//! | `protocol.rs` | all sessions, the receive pool, the transmit queue, the device-facing calls: [`Protocol`]; its datagrams in (`incoming.rs`), out (`outgoing.rs`) and timeouts (`timeouts.rs`) |
//! | `driver.rs` | [`ReliableDevice`]: the protocol over a link and the clock |
//! | `link.rs` | the [`Link`] trait, trunks, the in-memory network, fault injection |
//! | `stats.rs` | [`ReliableStats`] |

pub mod config;
pub mod driver;
pub mod header;
mod incoming;
pub mod link;
mod outgoing;
pub mod protocol;
mod recv;
mod send;
mod session;
pub mod settings;
pub mod stats;
mod timeouts;
pub mod timers;

pub use config::{decode_endpoint, encode_endpoint, new_epoch, PeerLink, ReliableConfig, Settings};
pub use driver::{NetDevice, ReliableDevice, BACKGROUND_TICK};
pub use link::{ArrivalProbe, Faults, FaultyLink, Link, MemLink, MemNet, Trunk};
pub use protocol::{Protocol, Transmit};
pub use stats::ReliableStats;

use crate::Options;

/// Option bits of every device the reliable layer makes.
pub const OPTIONS: Options =
    Options(Options::RELIABLE.0 | Options::ORDERED.0 | Options::RECEIVES.0);
