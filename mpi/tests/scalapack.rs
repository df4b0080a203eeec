//! Real programs that use collectives, built by Debian against MPICH and
//! run unmodified on fm's libmpich.so.12: ScaLAPACK's own test programs
//! (package `scalapack-mpi-test`). ScaLAPACK's communication layer, the
//! BLACS, calls `MPI_Bcast`, `MPI_Reduce` and `MPI_Allreduce` (with
//! operations of its own, `MPI_Op_create`), on communicators it splits
//! and creates, with vector and struct datatypes.
//!
//! They need `scalapack-mpi-test` (`.ci/run` installs it) and say
//! SKIPPED without.

mod common;

use common::*;
use fm_tests::TempDir;
use std::path::{Path, PathBuf};

const TESTS: &str = "/usr/lib/x86_64-linux-gnu/scalapack/mpich-tests";

/// ScaLAPACK's MPICH-built test program `name`, if installed.
fn program(name: &str) -> Option<PathBuf> {
    let p = Path::new(TESTS).join(name);
    if !p.exists() {
        eprintln!(
            "SKIPPED: no {} (apt-get install scalapack-mpi-test)",
            p.display()
        );
        return None;
    }
    Some(p)
}

/// `LU.dat`, the LU test's input: ScaLAPACK's own (60 problems: four
/// shapes, three block sizes, three numbers of right-hand sides, three
/// of them per process column) on each of the process grids `grids`
/// (P × Q), passing when each scaled residual is below `threshold`.
fn lu_input(dir: &TempDir, grids: &[(u32, u32)], threshold: &str) {
    let ours = std::fs::read_to_string(Path::new(TESTS).join("LU.dat")).expect("LU.dat");
    let mut lines: Vec<String> = ours.lines().map(String::from).collect();
    let list = |f: fn(&(u32, u32)) -> u32| -> String {
        let v: Vec<String> = grids.iter().map(|g| f(g).to_string()).collect();
        v.join(" ")
    };
    // Lines 14 to 17: the number of grids, their Ps, their Qs, the threshold.
    lines[13] = format!("{} number of process grids", grids.len());
    lines[14] = format!("{} values of P", list(|g| g.0));
    lines[15] = format!("{} values of Q", list(|g| g.1));
    lines[16] = format!("{threshold} threshold");
    std::fs::write(dir.0.join("LU.dat"), lines.join("\n") + "\n").expect("LU.dat");
}

/// The table rows of an LU test's output, less the timings, which differ
/// from run to run: M, N, NB, NRHS, NBRHS, P, Q and the verdict.
fn lu_rows(text: &str) -> Vec<String> {
    text.lines()
        .map(|l| l.split_once("] ").map_or(l, |(_, rest)| rest))
        .filter(|l| l.starts_with("WALL "))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            format!("{} {}", f[1..8].join(" "), f[f.len() - 1])
        })
        .collect()
}

/// ScaLAPACK's LU factorization and solve (`xdlu`, double precision)
/// gives the same table on fm as under `mpiexec.mpich` (2 ranks, grids
/// 1 × 2 and 2 × 1: 120 problems), every one passing its residual checks; on 4
/// ranks of 2 virtual hosts (grids 2 × 2, 1 × 4, 4 × 1) and under packet
/// loss every one passes too, as do the 240 of ScaLAPACK's own input on 4
/// ranks (docs/MPI.md's example). With a threshold no residual can meet,
/// every problem fails: the check reads ScaLAPACK's own verdict.
#[test]
fn scalapacks_lu_test_runs_as_under_mpich() {
    let Some(xdlu) = program("xdlu") else { return };
    let dir = TempDir::for_segments("mpi-scalapack-lu");
    lu_input(&dir, &[(1, 2), (2, 1)], "1.0");
    let o = run(&dir, &["-n", "2"], &xdlu, &[], &[]);
    let t = text(&o);
    let rows = lu_rows(&t);
    assert!(o.status.success() && rows.len() == 120, "{t}");
    assert!(rows.iter().all(|r| r.ends_with("PASSED")), "{t}");
    assert!(
        t.contains("120 tests completed and passed residual checks"),
        "{t}"
    );
    if Path::new("/usr/bin/mpiexec.mpich").exists() {
        let m = std::process::Command::new("timeout")
            .args(["120", "/usr/bin/mpiexec.mpich", "-n", "2"])
            .arg(&xdlu)
            .current_dir(&dir.0)
            .output()
            .expect("mpiexec.mpich");
        assert_eq!(lu_rows(&text(&m)), rows, "under MPICH:\n{}", text(&m));
    }
    // Across 2 virtual hosts: every grid, then (a third of the work, so
    // that a loaded machine's retransmissions fit the time limit) the
    // 2 × 2 grid under packet loss.
    let local = ["--hosts", "a,b", "--rsh", "local", "--oversubscribe"];
    let faults = [("FM_FAULTS", "drop=0.02,dup=0.01,reorder=0.02")];
    for (grids, env, passed) in [
        (&[(2, 2), (1, 4), (4, 1)][..], &[][..], 180),
        (&[(2, 2)], &faults, 60),
    ] {
        lu_input(&dir, grids, "1.0");
        let o = run(&dir, &[&["-n", "4"][..], &local].concat(), &xdlu, &[], env);
        let t = text(&o);
        assert!(o.status.success(), "{env:?}:\n{t}");
        let all = format!("{passed} tests completed and passed residual checks");
        assert!(t.contains(&all), "{env:?}:\n{t}");
    }
    // docs/MPI.md's example: ScaLAPACK's file as it is, on 4 ranks.
    let ours = Path::new(TESTS).join("LU.dat");
    std::fs::copy(ours, dir.0.join("LU.dat")).expect("LU.dat");
    let t = text(&run(&dir, &["-n", "4", "--oversubscribe"], &xdlu, &[], &[]));
    assert!(
        t.contains("240 tests completed and passed residual checks"),
        "{t}"
    );
    lu_input(&dir, &[(1, 2)], "1e-30");
    let t = text(&run(&dir, &["-n", "2"], &xdlu, &[], &[]));
    assert!(
        t.contains("60 tests completed and failed residual checks"),
        "{t}"
    );
}

/// The BLACS's own tester (`xCbtest`, its C interface) on 4 ranks: point
/// to point, broadcasts over every topology, and combines (sum, max, min
/// of every type) on grids and their rows and columns. Every test it runs
/// passes; it ends by testing `BLACS_ABORT`, which must end the job.
#[test]
fn the_blacs_tester_passes_every_test_it_runs() {
    let Some(bt) = program("xCbtest") else { return };
    let dir = TempDir::for_segments("mpi-scalapack-blacs");
    for f in ["bt.dat", "sdrv.dat", "bsbr.dat", "comb.dat"] {
        std::fs::copy(
            Path::new("/usr/share/scalapack/BLACS").join(f),
            dir.0.join(f),
        )
        .expect(f);
    }
    let o = run(&dir, &["-n", "4", "--oversubscribe"], &bt, &[], &[]);
    let t = text(&o);
    let summaries: Vec<&str> = t.lines().filter(|l| l.contains(" TESTS; ")).collect();
    assert_eq!(summaries.len(), 22, "{t}");
    for s in summaries {
        assert!(s.ends_with(" 0 FAILED."), "{s}\n{t}");
    }
    assert!(t.contains("PASSED  BLACS_SET/BLACS_GET TESTS"), "{t}");
    assert!(
        !o.status.success() && t.contains("called MPI_Abort"),
        "BLACS_ABORT ends the job:\n{t}"
    );
}
