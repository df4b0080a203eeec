//! A Fortran program built with MPICH's `mpif90` runs on fm: MPICH's own
//! Fortran library (`libmpichfort.so.12`) calls into fm's
//! `libmpich.so.12`, and the program prints the same under fmrun as under
//! `mpiexec.mpich` (`tests/fortran/ranks.f90`). SKIPPED without
//! `mpif90.mpich` (mpich, libmpich-dev, gfortran).

mod common;

use common::*;
use fm_tests::TempDir;
use std::path::Path;
use std::process::Command;

/// The program's lines, less fmrun's `[rank] ` prefixes, sorted (ranks
/// print in any order).
fn lines(out: &[u8]) -> Vec<String> {
    let mut v: Vec<String> = String::from_utf8_lossy(out)
        .lines()
        .map(
            |l| match l.strip_prefix('[').and_then(|r| r.split_once("] ")) {
                Some((_, rest)) => rest.to_string(),
                None => l.to_string(),
            },
        )
        .filter(|l| l.starts_with("rank"))
        .collect();
    v.sort();
    v
}

#[test]
fn a_fortran_program_prints_what_it_prints_under_mpich() {
    let fc = Path::new("/usr/bin/mpif90.mpich");
    if !fc.exists() {
        eprintln!("SKIPPED: no mpif90.mpich (apt-get install mpich libmpich-dev gfortran)");
        return;
    }
    let dir = TempDir::for_segments("mpi-fortran");
    let exe = dir.0.join("ranks");
    fm_tests::succeed(
        Command::new(fc)
            .args(["-Wall", "-o"])
            .arg(&exe)
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fortran/ranks.f90")),
    );
    let ours = run(&dir, &["-n", "4", "--oversubscribe"], &exe, &[], &[]);
    assert!(ours.status.success(), "{}", text(&ours));
    let ours = lines(&ours.stdout);
    assert_eq!(ours.len(), 18, "{ours:#?}");
    let Some(theirs) = under_mpich(&exe, 4, &[]) else {
        return;
    };
    assert!(theirs.status.success(), "{}", text(&theirs));
    assert_eq!(ours, lines(&theirs.stdout));
}
