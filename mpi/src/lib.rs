//! # fm-mpi — MPI on fm, with MPICH's ABI
//!
//! `libmpich.so.12`: a program built against MPICH (Debian's `libmpich-dev`,
//! Intel MPI, Cray MPICH share the ABI) loads this library instead of
//! MPICH's when it comes first on the library path, which is what `fmrun`
//! arranges; `MPI_Init` then joins the job as `Fm::init` does (GRM, node
//! map, handler check, device table), and point-to-point messages travel
//! as FM messages over the composite ([`engine`]).
//!
//! Every function is exported as `PMPI_x` and as `MPI_x` (which calls
//! `PMPI_x`), the profiling interface: a tool that defines `MPI_x` itself
//! reaches the library through `PMPI_x`. Calls are serialized by one lock;
//! `MPI_Init_thread` provides `MPI_THREAD_MULTIPLE`, under which blocking
//! calls wait without holding it ([`threads`]).
//!
//! Collectives ([`coll`]) run as schedules of sends, receives and local
//! steps over the same engine, advanced by every call's progress.
//!
//! Errors go to the communicator's error handler: `MPI_ERRORS_ARE_FATAL`
//! (the default) prints the rank, the function and the reason, and ends
//! the whole job; `MPI_ERRORS_RETURN` returns the error class. docs/MPI.md
//! lists what is supported.

// The C names are MPI's.
#![allow(non_snake_case)]

pub mod abi;
pub mod attr;
pub mod coll;
pub mod context;
pub mod datatype;
pub mod engine;
pub mod error;
mod errors;
pub mod external32;
pub mod topo;

mod bindings;
mod collective;
mod comm;
mod intercomm;

mod ffi;
mod generalized;
mod info;
mod p2p;
mod partitioned;
mod request;
mod rma;
mod session;
mod state;
mod threads;
mod types;

use abi::*;
use attr::{Attributes, Callback, CopyFn, DeleteFn, Kind};
use datatype::Layout;
use engine::{err, slice_or_empty, Comm, Engine, MpiError, MpiResult, Route, Unpack};
use std::ffi::{c_char, c_double, c_int, c_void};
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Instant;

use comm::*;
use errors::Handling;
use ffi::*;
use p2p::*;
use request::*;
use state::*;
use threads::blocking;
