//! The subarray and hindexed-block constructors, MPI-1's datatype names,
//! the `_x` queries and the status setters (`tests/c/typemaps.c`, built
//! with MPICH's `mpicc`), checked against what each rank computes alone,
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
    for n in ["1", "2"] {
        let o = run(&dir, &["-n", n], &exe, &[], &[]);
        let t = text(&o);
        assert!(
            o.status.success() && t.contains(&format!("{PASSED} {n} ranks")),
            "{t}"
        );
    }
    let o = run(&dir, &["-n", "1"], &exe, &["sabotage"], &[]);
    assert!(
        !o.status.success() && text(&o).contains("FAILED"),
        "{}",
        text(&o)
    );
    for (args, ok) in [(&[][..], true), (&["sabotage"][..], false)] {
        let Some(o) = under_mpich(&exe, 2, args) else {
            return;
        };
        assert_eq!(
            o.status.success(),
            ok,
            "mpiexec.mpich {args:?}:\n{}",
            text(&o)
        );
    }
}
