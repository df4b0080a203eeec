//! Process topologies and the neighbourhood collectives of
//! `tests/c/topo.c` (compiled with MPICH's `mpicc`), each answer checked
//! against what each rank computes alone: on 1 to 8 ranks of one host,
//! across virtual hosts and under packet loss. The same program under
//! `mpiexec.mpich` checks the test itself (less MPICH 4.0.2's known
//! neighbourhood bugs, which it names), and its checker must fail on one
//! wrong value.
//!
//! They need `mpich` and `libmpich-dev` (`.ci/run` installs them) and say
//! SKIPPED without.

mod common;

use common::*;
use fm_tests::TempDir;

const PASSED: &str = "all topology checks passed on";

fn passes(dir: &TempDir, exe: &std::path::Path, fmrun_args: &[&str], env: &[(&str, &str)]) {
    let n = fmrun_args[1];
    let o = run(dir, fmrun_args, exe, &[], env);
    let t = text(&o);
    assert!(
        o.status.success() && t.contains(&format!("{PASSED} {n} ranks")),
        "{fmrun_args:?} {env:?}:\n{t}"
    );
}

#[test]
fn topologies_on_one_to_eight_ranks_of_one_host() {
    let dir = TempDir::for_segments("mpi-topo");
    let Some(exe) = mpich_built(&dir, "topo") else {
        return;
    };
    for n in ["1", "2", "3", "4", "5", "7", "8"] {
        passes(&dir, &exe, &["-n", n, "--oversubscribe"], &[]);
    }
}

#[test]
fn topologies_across_virtual_hosts_and_under_loss() {
    let dir = TempDir::for_segments("mpi-topo-hosts");
    let Some(exe) = mpich_built(&dir, "topo") else {
        return;
    };
    let local = ["--rsh", "local", "--oversubscribe"];
    let two = [&["-n", "4", "--hosts", "a,b"][..], &local].concat();
    let four = [&["-n", "8", "--hosts", "a,b,c,d"][..], &local].concat();
    passes(&dir, &exe, &four, &[]);
    passes(
        &dir,
        &exe,
        &two,
        &[("FM_FAULTS", "drop=0.05,dup=0.01,reorder=0.02")],
    );
}

/// On 3 and 4 ranks: the checker fails on a wrong value, and the program
/// passes (and fails alike) under `mpiexec.mpich`.
#[test]
fn the_topology_checker_fails_on_a_wrong_value_and_holds_under_mpich() {
    let dir = TempDir::for_segments("mpi-topo-sabotage");
    let Some(exe) = mpich_built(&dir, "topo") else {
        return;
    };
    for n in [3, 4] {
        passes_fails_and_agrees_with_mpich(&dir, &exe, n, &format!("{PASSED} {n} ranks"));
    }
}
