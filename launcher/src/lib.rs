//! fm-launcher: `fmrun` (the binary, `main.rs`), and [`LocalJob`], a job of
//! processes on this host started without it (fm-bench, the tests).

pub mod local;

pub use local::{JobOutcome, LocalJob};
