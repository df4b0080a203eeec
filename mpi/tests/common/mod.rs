//! What the MPI test programs share: building a C program with MPICH's
//! compiler wrapper, and running it under fmrun.

// Each test file uses some of these.
#![allow(dead_code)]

use fm_tests::{fmrun, TempDir};
use std::path::{Path, PathBuf};
use std::process::Output;

/// `mpicc.mpich`, if installed.
pub fn mpicc() -> Option<PathBuf> {
    ["/usr/bin/mpicc.mpich"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

/// tests/c/p2p.c compiled with MPICH's compiler wrapper into `dir`.
pub fn p2p(dir: &TempDir) -> Option<PathBuf> {
    mpich_built(dir, "p2p")
}

/// tests/c/NAME.c compiled with MPICH's compiler wrapper into `dir`.
pub fn mpich_built(dir: &TempDir, name: &str) -> Option<PathBuf> {
    let Some(cc) = mpicc() else {
        eprintln!("SKIPPED: no mpicc.mpich (apt-get install mpich libmpich-dev)");
        return None;
    };
    let exe = dir.0.join(name);
    fm_tests::succeed(
        std::process::Command::new(cc)
            .args(["-O1", "-Wall", "-Werror", "-Wno-stringop-overflow", "-o"])
            .arg(&exe)
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/c/{name}.c"))),
    );
    Some(exe)
}

/// Where this build's binaries are, for [`fm_tests::fmrun`]: fmrun is in
/// target/PROFILE, above this test's deps/.
pub fn own_bin() -> String {
    let exe = std::env::current_exe().expect("the test's path");
    let profile = exe.parent().and_then(Path::parent).expect("target/PROFILE");
    profile.join("test").to_string_lossy().into_owned()
}

/// `fmrun --timeout 120s FMRUN_ARGS PROGRAM ARGS` with `env`: the fmrun of
/// this build (target/PROFILE, beside this test's deps/).
pub fn run(
    dir: &TempDir,
    fmrun_args: &[&str],
    program: &Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> Output {
    let mut all = vec!["--timeout", "120s"];
    all.extend_from_slice(fmrun_args);
    let mut c = fmrun(&own_bin(), dir, &all, program, args);
    // NetPIPE writes np.out where it runs.
    c.current_dir(&dir.0);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("fmrun")
}

pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// `PROGRAM ARGS` on `n` ranks under MPICH's own `mpiexec.mpich` with
/// `ON_MPICH` set (the programs leave out what MPICH gets wrong), or
/// `None` (SKIPPED) without it.
pub fn under_mpich(program: &Path, n: usize, args: &[&str]) -> Option<Output> {
    let mpiexec = Path::new("/usr/bin/mpiexec.mpich");
    if !mpiexec.exists() {
        eprintln!("SKIPPED the run under MPICH: no mpiexec.mpich");
        return None;
    }
    let out = std::process::Command::new("timeout")
        .arg("120")
        .arg(mpiexec)
        .args(["-n", &n.to_string()])
        .arg(program)
        .args(args)
        .env("ON_MPICH", "1")
        .output()
        .expect("mpiexec.mpich");
    Some(out)
}

/// A checking program's three runs: it passes on `n` ranks under fmrun
/// (printing `passed`), it fails when told `sabotage` (its checker can
/// fail), and under `mpiexec.mpich` it passes and fails alike (its
/// expectations are MPICH's).
pub fn passes_fails_and_agrees_with_mpich(dir: &TempDir, exe: &Path, n: usize, passed: &str) {
    let ranks = n.to_string();
    let o = run(dir, &["-n", &ranks, "--oversubscribe"], exe, &[], &[]);
    let t = text(&o);
    assert!(o.status.success() && t.contains(passed), "{t}");
    let o = run(
        dir,
        &["-n", &ranks, "--oversubscribe"],
        exe,
        &["sabotage"],
        &[],
    );
    assert!(
        !o.status.success() && text(&o).contains("FAILED"),
        "{}",
        text(&o)
    );
    for (args, ok) in [(&[][..], true), (&["sabotage"][..], false)] {
        let Some(o) = under_mpich(exe, n, args) else {
            return;
        };
        let t = text(&o);
        assert_eq!(o.status.success(), ok, "mpiexec.mpich {args:?}:\n{t}");
        assert_eq!(t.contains(passed), ok, "mpiexec.mpich {args:?}:\n{t}");
    }
}

/// `fmrun FMRUN_ARGS PROGRAM ARGS` (the second of FMRUN_ARGS the number
/// of ranks) with `env` succeeds and prints `{passed} {n} ranks`.
pub fn passes_on(
    dir: &TempDir,
    exe: &Path,
    fmrun_args: &[&str],
    args: &[&str],
    env: &[(&str, &str)],
    passed: &str,
) {
    let n = fmrun_args[1];
    let o = run(dir, fmrun_args, exe, args, env);
    let t = text(&o);
    assert!(
        o.status.success() && t.contains(&format!("{passed} {n} ranks")),
        "{fmrun_args:?} {env:?}:\n{t}"
    );
}
