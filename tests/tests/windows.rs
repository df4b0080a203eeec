//! FM programs' one-sided windows (`fm::Window`): `fm-window` checks
//! puts, gets and atomics against a local reference, with guard bytes,
//! on 1–8 ranks, across two virtual hosts over ethernet, under packet
//! loss, duplication and reordering; the checker fails on wrong data.

use fm_tests::{checker, checks_passed as passes, output_text as text, TempDir};
use std::process::Output;

/// `fm-window ARGS` under fmrun.
fn window(dir: &TempDir, fmrun_args: &[&str], args: &[&str], env: &[(&str, &str)]) -> Output {
    checker(
        env!("CARGO_BIN_EXE_fm-window"),
        "fm-window",
        dir,
        fmrun_args,
        args,
        env,
    )
}

#[test]
fn puts_gets_and_atomics_are_right_on_1_to_8_ranks() {
    let dir = TempDir::for_segments("fm-window-ranks");
    for n in [1, 2, 3, 5, 8] {
        let ranks = n.to_string();
        let o = window(
            &dir,
            &["-n", &ranks, "--oversubscribe"],
            &["2", &ranks],
            &[],
        );
        passes(&o, n);
    }
    assert!(dir.segments().is_empty(), "{:?}", dir.segments());
}

#[test]
fn windows_are_right_across_virtual_hosts_and_under_faults() {
    let dir = TempDir::for_segments("fm-window-hosts");
    let local = ["--rsh", "local", "--oversubscribe"];
    let two = [&["-n", "4", "--hosts", "a,b"][..], &local].concat();
    passes(&window(&dir, &two, &["2", "21"], &[]), 4);
    let faults = [("FM_FAULTS", "drop=0.05,dup=0.01,reorder=0.02")];
    passes(&window(&dir, &two, &["1", "22"], &faults), 4);
}

#[test]
fn the_checker_fails_when_the_data_is_wrong() {
    let dir = TempDir::for_segments("fm-window-sabotage");
    let o = window(
        &dir,
        &["-n", "2", "--oversubscribe"],
        &["1", "1", "sabotage"],
        &[],
    );
    let t = text(&o);
    assert!(!o.status.success(), "{t}");
    assert!(t.contains("was expected"), "{t}");
}
