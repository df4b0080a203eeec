//! # fm-grm — the global resource manager
//!
//! HPVM's GRM maps a job's virtual nodes to processes and hands each context
//! its program ID and instance (the job key every device checks); SCore's
//! runtime builds a composite per process from what it is told. This crate is
//! that service for fm:
//!
//! - [`proto`]: the versioned, length-prefixed wire protocol;
//! - [`machine`]: the service as a state machine without I/O ([`machine::Core`]);
//! - [`server`]: the service ([`Grm`]): the machine driven by one event loop
//!   over its sockets, embedded in `fmrun` or run alone as `fm-grm`;
//! - [`client`]: joining a job ([`Membership`], used by `fm` at init) and
//!   registering one ([`LauncherLink`], used by `fmrun`);
//! - [`host_relay`]: the GRM as a host's ranks see it under a host agent,
//!   which joins them at the GRM as one host.
//!
//! Life of a job: the launcher registers it (its id and verifier, size,
//! program) and gets the job key; each process joins with proof of the
//! job's token ([`auth`]), host, pid, handler-table
//! fingerprint and its endpoints per device; when all have joined (the
//! fence) each gets the node map. Heartbeats and the open connection show
//! who is alive: a process that dies ends the job — its peers and the
//! launcher are told who and why — and the job's shared segments are removed.

pub mod auth;
pub mod client;
pub mod host_relay;
pub mod machine;
pub mod peer;
pub mod proto;
pub mod server;

pub use client::{Event, GrmError, LauncherLink, Membership};
pub use server::{Grm, GrmOptions};
