//! The library exports every symbol Debian's MPICH does (`nm -D` of
//! `libmpich.so.12`), functions and data, so that any program or language
//! binding built against MPICH loads with all of them resolved at once;
//! what fm does not implement yet fails cleanly when called
//! (`tests/c/notyet.c`).

mod common;

use common::*;
use fm_tests::TempDir;
use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

const MPICH: &str = "/usr/lib/x86_64-linux-gnu/libmpich.so.12";

/// The dynamic symbols `lib` defines.
fn defined(lib: &Path) -> BTreeSet<String> {
    let o = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(lib)
        .output()
        .expect("nm (binutils)");
    assert!(o.status.success(), "nm {lib:?}");
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .map(|s| s.split('@').next().unwrap_or(s).to_string())
        .collect()
}

#[test]
fn every_symbol_of_mpich_is_exported() {
    if !Path::new(MPICH).exists() {
        eprintln!("SKIPPED: no {MPICH} (apt-get install libmpich12)");
        return;
    }
    let exe = std::env::current_exe().expect("the test's path");
    let profile = exe.parent().and_then(Path::parent).expect("target/PROFILE");
    let ours = defined(&profile.join("libmpich.so"));
    let missing: Vec<String> = defined(Path::new(MPICH))
        .difference(&ours)
        .cloned()
        .collect();
    assert!(
        missing.is_empty(),
        "{} of MPICH's symbols are not exported (scripts/gen-not-yet.py adds what is not implemented yet): {missing:?}",
        missing.len()
    );
}

#[test]
fn not_yet_functions_fail_cleanly() {
    let dir = TempDir::for_segments("mpi-notyet");
    let Some(exe) = mpich_built(&dir, "notyet") else {
        return;
    };
    let o = run(&dir, &["-n", "2"], &exe, &["returns"], &[]);
    let t = text(&o);
    assert!(
        o.status.success() && t.contains("not-yet functions fail cleanly"),
        "{t}"
    );
    let o = run(&dir, &["-n", "2"], &exe, &["fatal"], &[]);
    let t = text(&o);
    assert!(
        !o.status.success()
            && t.contains("MPI_File_open")
            && t.contains("not supported by fm's MPI yet")
            && !t.contains("FAILED"),
        "{t}"
    );
}
