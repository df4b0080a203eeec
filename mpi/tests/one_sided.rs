//! One-sided communication of `tests/c/rma.c` (compiled with MPICH's
//! `mpicc`): fence, passive target and post/start/complete/wait epochs,
//! puts, gets, accumulates, fetch-and-op and compare-and-swap under
//! contention, request-based accesses, allocated, shared and dynamic
//! windows, and accesses out of range, each result checked against what
//! each rank computes alone and guard bytes around the windows. On 1 to 8
//! ranks of one host, across two virtual hosts (over fm's ethernet) and
//! under packet loss. The same program under `mpiexec.mpich` checks the
//! test itself, and its checker must fail on one wrong value.
//!
//! They need `mpich` and `libmpich-dev` (`.ci/run` installs them) and say
//! SKIPPED without.

mod common;

use common::*;
use fm_tests::TempDir;

const PASSED: &str = "all one-sided checks passed on";

fn passes(
    dir: &TempDir,
    exe: &std::path::Path,
    fmrun_args: &[&str],
    seed: &str,
    env: &[(&str, &str)],
) {
    passes_on(dir, exe, fmrun_args, &[seed], env, PASSED);
}

#[test]
fn one_sided_on_one_to_eight_ranks_of_one_host() {
    let dir = TempDir::for_segments("mpi-rma");
    let Some(exe) = mpich_built(&dir, "rma") else {
        return;
    };
    for n in ["1", "2", "3", "4", "5", "7", "8"] {
        passes(&dir, &exe, &["-n", n, "--oversubscribe"], n, &[]);
    }
    passes_fails_and_agrees_with_mpich(&dir, &exe, 3, &format!("{PASSED} 3 ranks"));
}

#[test]
fn one_sided_across_virtual_hosts_and_under_loss() {
    let dir = TempDir::for_segments("mpi-rma-hosts");
    let Some(exe) = mpich_built(&dir, "rma") else {
        return;
    };
    let local = ["--rsh", "local", "--oversubscribe"];
    let two = [&["-n", "4", "--hosts", "a,b"][..], &local].concat();
    passes(&dir, &exe, &two, "11", &[]);
    let faults = [("FM_FAULTS", "drop=0.05,dup=0.01,reorder=0.02")];
    passes(&dir, &exe, &two, "12", &faults);
}
