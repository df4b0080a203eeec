//! fm-launcher: `fmrun` (the binary, `main.rs`); [`LocalJob`], a job of
//! processes on this host started without it (fm-bench, the tests); and
//! where fm's MPI and C libraries are ([`libraries`]).

pub mod libraries;
pub mod local;

pub use local::{JobOutcome, LocalJob};
