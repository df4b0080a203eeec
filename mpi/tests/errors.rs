//! The program's own error handlers and error classes
//! (`tests/c/errors.c`, built with MPICH's `mpicc`): under fmrun, under
//! `mpiexec.mpich`, and failing when told to expect a wrong value.

mod common;

use common::*;
use fm_tests::TempDir;

#[test]
fn error_handlers_and_added_error_classes() {
    let dir = TempDir::for_segments("mpi-errors");
    let Some(exe) = mpich_built(&dir, "errors") else {
        return;
    };
    passes_fails_and_agrees_with_mpich(&dir, &exe, 2, "all error handler checks passed on 2 ranks");
}
