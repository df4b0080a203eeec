//! FM programs' collectives (`fm::coll`): every collective checked
//! against a local reference by `fm-coll` on 1–8 ranks, on sub-groups,
//! across two and four virtual hosts, under packet loss; the checker
//! failing on wrong data; only one rank per host on the network in an
//! allreduce over four hosts; and clear errors for groups and operations
//! that cannot be.

use fm::coll::{Bitwise, Op};
use fm::{Config, ErrorKind, Fm, JobKey};
use fm_tests::{checker, checks_passed as passes, output_text as text, TempDir};
use std::process::Output;

/// `fm-coll ARGS` under fmrun.
fn coll(dir: &TempDir, fmrun_args: &[&str], args: &[&str], env: &[(&str, &str)]) -> Output {
    checker(
        env!("CARGO_BIN_EXE_fm-coll"),
        "fm-coll",
        dir,
        fmrun_args,
        args,
        env,
    )
}

#[test]
fn every_collective_is_right_on_1_to_8_ranks_and_on_sub_groups() {
    let dir = TempDir::for_segments("fm-coll-ranks");
    for n in [1, 2, 3, 4, 5, 7, 8] {
        let ranks = n.to_string();
        let o = coll(
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
fn collectives_are_right_across_virtual_hosts_and_under_loss() {
    let dir = TempDir::for_segments("fm-coll-hosts");
    let local = ["--rsh", "local", "--oversubscribe"];
    let two = [&["-n", "5", "--hosts", "a,b"][..], &local].concat();
    let four = [&["-n", "8", "--hosts", "a,b,c,d"][..], &local].concat();
    passes(&coll(&dir, &two, &["2", "11"], &[]), 5);
    passes(&coll(&dir, &four, &["2", "12"], &[]), 8);
    let faults = [("FM_FAULTS", "drop=0.05,dup=0.01,reorder=0.02")];
    let four = [&["-n", "4", "--hosts", "a,b"][..], &local].concat();
    passes(&coll(&dir, &four, &["1", "13"], &faults), 4);
    // Flat (one level) across hosts, and each algorithm by name.
    let flat = [
        ("FM_COLL_HOSTS", "off"),
        ("FM_COLL_BCAST", "scatter-allgather"),
        ("FM_COLL_ALLREDUCE", "rabenseifner"),
        ("FM_COLL_ALLGATHER", "ring"),
    ];
    passes(&coll(&dir, &two, &["1", "14"], &flat), 5);
}

#[test]
fn the_checker_fails_when_the_data_is_wrong() {
    let dir = TempDir::for_segments("fm-coll-sabotage");
    let o = coll(
        &dir,
        &["-n", "3", "--oversubscribe"],
        &["1", "1", "sabotage"],
        &[],
    );
    let t = text(&o);
    assert!(!o.status.success(), "{t}");
    assert!(t.contains("was expected"), "{t}");
}

/// `fm-coll MODE` on 2 ranks passes, printing `passed`, and `fm-coll
/// MODE sabotage` fails, printing `failed` (the check's test).
fn two_rank_check(mode: &str, passed: &str, failed: &str) {
    let dir = TempDir::for_segments(&format!("fm-coll-{mode}"));
    let two = ["-n", "2", "--oversubscribe"];
    let o = coll(&dir, &two, &[mode], &[]);
    let t = text(&o);
    assert!(o.status.success() && t.contains(passed), "{t}");
    let o = coll(&dir, &two, &[mode, "sabotage"], &[]);
    let t = text(&o);
    assert!(!o.status.success() && t.contains(failed), "{t}");
    assert!(dir.segments().is_empty(), "{:?}", dir.segments());
}

/// The bytes of a large broadcast go straight into the receive's memory,
/// so one given up after it asked for them must keep them out: its memory
/// stays as it was (and the check sees the bytes when they do land).
#[test]
fn a_given_up_collective_has_nothing_written_into_its_memory_after() {
    two_rank_check("given-up", "its memory untouched", "is not");
}

/// A root broadcasting ahead of its member cannot complete a large
/// broadcast before the member asks for its bytes, so it cannot fill the
/// member's memory with them; a small one does complete (the check's
/// test).
#[test]
fn a_root_running_ahead_waits_for_its_member_before_sending_a_large_broadcast() {
    two_rank_check(
        "ahead",
        "the root waited for its member",
        "completed at the root before",
    );
}

/// (ethernet bytes sent, host) of each rank of an `fm-coll allreduce`
/// run with `--stats=json`.
fn ethernet_bytes_by_rank(o: &Output, n: usize) -> Vec<(u64, String)> {
    let t = text(o);
    assert!(o.status.success() && t.contains("allreduces ok on"), "{t}");
    fm_tests::ethernet_bytes_by_rank(&t, n)
}

/// The same code as fm's MPI: in barriers and allreduces over 4 hosts ×
/// 2 ranks only each host's lowest rank sends on the network; with
/// `FM_COLL_HOSTS=off` every rank does, so the counters tell them apart.
#[test]
fn only_one_rank_per_host_sends_on_the_network_in_an_allreduce() {
    let dir = TempDir::for_segments("fm-coll-leaders");
    let four = fm_tests::FOUR_HOSTS_WITH_STATS;
    let aware = ethernet_bytes_by_rank(&coll(&dir, &four, &["allreduce"], &[]), 8);
    fm_tests::only_the_lowest_rank_of_each_host_sent(&aware);
    let flat = coll(&dir, &four, &["allreduce"], &[("FM_COLL_HOSTS", "off")]);
    let flat = ethernet_bytes_by_rank(&flat, 8);
    assert!(flat.iter().all(|(b, _)| *b > 0), "{flat:?}");
}

#[test]
fn groups_and_operations_that_cannot_be_are_clear_errors() {
    let mut fm = Fm::builder()
        .config(Config::local(0, 1, JobKey(21)))
        .build()
        .expect("one-rank job");
    let e = |r: fm::Result<fm::coll::Group>| r.err().expect("refused").to_string();
    assert!(e(fm.group(&[1])).contains("rank 1 is outside this job of 1 ranks"));
    assert!(e(fm.group(&[0, 0])).contains("rank 0 is named twice"));
    let mut g = fm.world().expect("the world");
    let mut x = [1.5f64];
    let bad = g
        .allreduce(&mut fm, &mut x, Op::Bits(Bitwise::And))
        .expect_err("no bits");
    assert!(
        matches!(bad.kind(), ErrorKind::Group(m) if m == "And is not defined on f64"),
        "{bad}"
    );
    let bad = g.broadcast(&mut fm, 1, &mut x).expect_err("no member 1");
    assert!(
        bad.to_string()
            .contains("root 1 is not a member of this group of 1"),
        "{bad}"
    );
    let mut all = [0u32; 3];
    let bad = g
        .allgather(&mut fm, &[1u32, 2], &mut all)
        .expect_err("wrong length");
    assert!(
        bad.to_string().contains("holds 3 elements where 2"),
        "{bad}"
    );
    // Still usable after the refusals.
    g.allreduce(&mut fm, &mut x, Op::Max).expect("allreduce");
    assert_eq!(x, [1.5]);
}
