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
    defined_as(lib, "")
}

/// The dynamic symbols `lib` defines of the kinds `nm` marks with one of
/// `kinds` (all for "").
fn defined_as(lib: &Path, kinds: &str) -> BTreeSet<String> {
    let o = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(lib)
        .output()
        .expect("nm (binutils)");
    assert!(o.status.success(), "nm {lib:?}");
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 3 && (kinds.is_empty() || kinds.contains(f[1]))).then(|| f[2])
        })
        .map(|s| s.split('@').next().unwrap_or(s).to_string())
        .collect()
}

fn our_library() -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("the test's path");
    let profile = exe.parent().and_then(Path::parent).expect("target/PROFILE");
    profile.join("libmpich.so")
}

fn crate_file(p: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(p)).expect(p)
}

/// The names in backquotes of docs/MPI.md's table of what is supported.
fn documented() -> BTreeSet<String> {
    let doc = crate_file("../docs/MPI.md");
    let table = doc
        .split("## What is supported")
        .nth(1)
        .and_then(|t| t.trim_start().split("\n\n").next())
        .expect("docs/MPI.md has a table under \"What is supported\"");
    table
        .split('`')
        .skip(1)
        .step_by(2)
        .map(|n| n.trim_end_matches("()").to_string())
        .collect()
}

/// docs/MPI.md's table is the list of what is implemented: every MPI
/// function this library implements is named there (a non-blocking
/// `MPI_Ix` or persistent `MPI_X_init` by its `MPI_X`, a large-count
/// `MPI_x_c` by its `MPI_x`; the tool interface by its row), and nothing
/// not implemented yet is.
#[test]
fn the_documented_table_is_what_is_implemented() {
    let lib = our_library();
    if !lib.exists() {
        eprintln!("SKIPPED: {lib:?} is not built");
        return;
    }
    let not_yet: BTreeSet<String> = crate_file("src/bindings/not_yet.rs")
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("MPI_"))
        .map(String::from)
        .collect();
    let doc = documented();
    let named = |f: &str| {
        let f = f.strip_suffix("_c").unwrap_or(f);
        let base = f.strip_suffix("_init").unwrap_or(f);
        let blocking = base
            .strip_prefix("MPI_I")
            .map(|rest| format!("MPI_{}{}", rest[..1].to_uppercase(), &rest[1..]));
        doc.contains(f) || doc.contains(base) || blocking.is_some_and(|b| doc.contains(&b))
    };
    let undocumented: Vec<String> = defined_as(&lib, "TW")
        .into_iter()
        .filter(|f| f.starts_with("MPI_") && !f.starts_with("MPI_T_") && !not_yet.contains(f))
        .filter(|f| !named(f))
        .collect();
    assert!(
        undocumented.is_empty(),
        "implemented but not in docs/MPI.md's table: {undocumented:?}"
    );
    let claimed: Vec<&String> = not_yet.iter().filter(|f| doc.contains(*f)).collect();
    assert!(
        claimed.is_empty(),
        "in docs/MPI.md's table but not implemented: {claimed:?}"
    );
}

#[test]
fn every_symbol_of_mpich_is_exported() {
    if !Path::new(MPICH).exists() {
        eprintln!("SKIPPED: no {MPICH} (apt-get install libmpich12)");
        return;
    }
    let ours = defined(&our_library());
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
