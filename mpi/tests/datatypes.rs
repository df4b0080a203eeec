//! The subarray and hindexed-block constructors, MPI-1's datatype names,
//! the `_x` queries, the status setters and attributes on datatypes
//! (`tests/c/typemaps.c`, built with MPICH's `mpicc`), checked against
//! what each rank computes alone,
//! under fmrun and under `mpiexec.mpich`; its checker must fail on one
//! wrong value.

mod common;

use common::*;
use fm_tests::TempDir;

const PASSED: &str = "all datatype checks passed on";

#[test]
fn subarrays_and_the_other_constructors() {
    let dir = TempDir::for_segments("mpi-typemaps");
    let Some(exe) = mpich_built(&dir, "typemaps") else {
        return;
    };
    let o = run(&dir, &["-n", "1"], &exe, &[], &[]);
    assert!(
        text(&o).contains(&format!("{PASSED} 1 ranks")),
        "{}",
        text(&o)
    );
    passes_fails_and_agrees_with_mpich(&dir, &exe, 2, &format!("{PASSED} 2 ranks"));
}
