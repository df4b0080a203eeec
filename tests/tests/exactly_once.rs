//! Exactly once, intact, in order, whatever handlers do — the regressions of
//! the four bugs an outside test program found, and a randomized stress test
//! of every size class, replies before and after reading, replies to
//! replies, storms and self-sends, with 1–4 credits, on one host and on two
//! virtual hosts under injected faults. The program: fm-exactly-once.

use fm_tests::{fmrun, TempDir};
use std::path::Path;

const PROG: &str = env!("CARGO_BIN_EXE_fm-exactly-once");
const MIX: &str = env!("CARGO_BIN_EXE_fm-mix");

/// Run `PROG ARGS` (fm-exactly-once, or fm-mix when `args[0]` is "mix") as a job of `n` ranks (on the virtual hosts
/// `hosts`, if given) with `env`; (success, stdout, stderr). Nothing may be
/// left in the job's segment directory.
fn job(
    n: usize,
    hosts: Option<&str>,
    env: &[(&str, &str)],
    args: &[&str],
) -> (bool, String, String) {
    let dir = TempDir::for_segments("exactly-once");
    let n = n.to_string();
    let mut fmrun_args = vec!["-n", &n, "--timeout", "300"];
    if let Some(h) = hosts {
        fmrun_args.extend(["--hosts", h, "--rsh", "local"]);
    }
    let (prog, args) = match args {
        ["mix", rest @ ..] => (MIX, rest),
        _ => (PROG, args),
    };
    let mut c = fmrun(PROG, &dir, &fmrun_args, Path::new(prog), args);
    c.envs(env.iter().copied());
    let out = c.output().expect("run fmrun");
    let (o, e) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(
        dir.segments().is_empty(),
        "segments left: {:?}",
        dir.segments()
    );
    (out.status.success(), o, e)
}

/// The job must succeed with every rank saying ok.
fn ok(n: usize, hosts: Option<&str>, env: &[(&str, &str)], args: &[&str]) -> String {
    let (success, o, e) = job(n, hosts, env, args);
    assert!(success, "{args:?} with {env:?} failed:\n{o}\n{e}");
    assert_eq!(o.matches(": ok").count(), n, "{o}\n{e}");
    o
}

/// Bug 1: a handler that replies before reading its small (inline) request
/// read bytes of a later packet, the slot having been reused meanwhile.
#[test]
fn a_handler_replying_before_reading_reads_its_own_bytes() {
    ok(2, None, &[], &["reply-before-read", "3000"]);
    // The same across hosts, where the reply path is the network's.
    ok(2, Some("a,b"), &[], &["reply-before-read", "1000"]);
}

/// Bug 2: a window of one credit, with handlers that reply while their own
/// packet is unreleased (0-byte messages are never read).
#[test]
fn one_credit_handlers_replying_to_each_other_do_not_deadlock() {
    ok(2, None, &[("FM_CREDITS", "1")], &["chains", "3000"]);
    // One rank sending to itself.
    ok(1, None, &[("FM_CREDITS", "1")], &["chains", "3000"]);
    // 16 ranks sharing one queue of 64 frames: a window of 1 by default.
    ok(
        16,
        None,
        &[("FM_SHM_FRAMES", "64"), ("FM_SHM_QUEUES", "1")],
        &["chains", "500"],
    );
}

/// Bug 3: a handler's error out of `barrier` leaves it consistent; calling
/// it again completes it.
#[test]
fn a_barrier_interrupted_by_a_handler_error_can_be_called_again() {
    ok(3, None, &[], &["barrier-retry"]);
}

/// Bug 4: a handler returning with a message open is an error named for that
/// handler, and its message is aborted, not delivered padded with zeros.
#[test]
fn a_message_left_open_by_a_handler_is_aborted_and_reported() {
    ok(2, None, &[], &["open-in-handler"]);
}

/// The stress program on one host, in several settings: the default, 1–4
/// credits, no inline packets, no single copy, small frames.
#[test]
fn stress_one_host_every_size_class_and_reply_pattern() {
    // Single copy from 32 KiB so the stress reaches it with small sizes.
    let cma = ("FM_SHM_CMA_THRESHOLD", "32768");
    for (seed, n, env) in [
        ("1", 4, vec![cma]),
        ("2", 3, vec![cma, ("FM_CREDITS", "1")]),
        (
            "3",
            4,
            vec![cma, ("FM_CREDITS", "2"), ("FM_SHM_PAYLOAD", "4080")],
        ),
        ("4", 2, vec![cma, ("FM_CREDITS", "3")]),
        (
            "5",
            5,
            vec![cma, ("FM_CREDITS", "4"), ("FM_STASH_BYTES", "65536")],
        ),
        ("6", 3, vec![cma, ("FM_SHM_INLINE", "0")]),
        ("7", 4, vec![("FM_SHM_CMA", "off")]),
    ] {
        ok(n, None, &env, &["stress", seed, "6000", "300000"]);
    }
}

/// The stress program across two virtual hosts, with loss, duplication and
/// reordering injected on the network between them.
#[test]
fn stress_two_hosts_under_faults() {
    let cma = ("FM_SHM_CMA_THRESHOLD", "32768");
    for (seed, faults, credits) in [
        ("11", "drop=0.03,dup=0.01,reorder=0.02,seed=5", "2"),
        ("12", "drop=0.05,seed=9", "1"),
        ("13", "dup=0.05,reorder=0.05,seed=3", "4"),
    ] {
        ok(
            4,
            Some("a,b"),
            &[cma, ("FM_FAULTS", faults), ("FM_CREDITS", credits)],
            &["stress", seed, "3000", "200000"],
        );
    }
}

/// The checker is not blind: told to expect one wrong byte, it fails.
#[test]
fn the_stress_checker_fails_when_the_data_is_wrong() {
    let (success, o, e) = job(
        3,
        None,
        &[("FM_TEST_SABOTAGE", "1")],
        &["stress", "21", "100", "20000"],
    );
    assert!(!success, "sabotaged run passed:\n{o}\n{e}");
    assert!(e.contains("expected"), "{e}");
}

/// Two ranks stream 1 GiB at each other head-to-head before extracting
/// (fm-testprog headtohead, 1 MiB messages): the set-aside bytes stay
/// within FM_STASH_BYTES (16 MiB) plus half a window of messages, and
/// resident memory stays bounded (before the bound: the whole 1 GiB).
#[test]
fn head_to_head_bulk_of_1_gib_keeps_memory_bounded() {
    let testprog = Path::new(env!("CARGO_BIN_EXE_fm-testprog"));
    let dir = TempDir::for_segments("bulk");
    let out = fmrun(
        PROG,
        &dir,
        &["-n", "2", "--timeout", "300"],
        testprog,
        &["headtohead", "1024", "1048576"],
    )
    .output()
    .expect("run fmrun");
    let o = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{o}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = o
        .lines()
        .filter(|l| l.contains("head-to-head ok"))
        .collect();
    assert_eq!(lines.len(), 2, "{o}");
    for line in lines {
        let num = |key: &str| -> u64 {
            let at = line.find(key).expect("key") + key.len();
            line[at..]
                .split_whitespace()
                .next()
                .and_then(|w| w.parse().ok())
                .expect("number")
        };
        let (rss_kib, stash) = (num("peak resident "), num("stash peak "));
        // 16 MiB of stash, plus half a window (30 with two ranks) of 1 MiB
        // messages; resident: that, the program's buffers and the segment.
        assert!(
            stash <= (16 + 31) << 20,
            "stash grew to {stash} bytes: {line}"
        );
        assert!(rss_kib < 160 << 10, "resident {rss_kib} KiB: {line}");
        eprintln!("{}", &line[..line.find("; stats").unwrap_or(line.len())]);
    }
}

/// The adversarial mix (fm-mix): request/reply chains 9 deep whose handlers
/// reply before, during or after reading, replies and requests of up to
/// 4 MiB, fan-outs and bursts from handlers, a second thread sending
/// through an FmSender and the owner through its own past the outbox's
/// bound, main code sending in storms meanwhile; on 4 and 8
/// ranks, spinning and in the default wait, several seeds.
#[test]
fn mixed_request_reply_traffic_completes_on_4_and_8_ranks() {
    for (seed, n, wait) in [
        ("1", 4, "spin"),
        ("2", 4, "auto"),
        ("3", 8, "spin"),
        ("4", 8, "auto"),
    ] {
        ok(
            n,
            None,
            &[("FM_WAIT", wait)],
            &["mix", seed, "300", "4194304"],
        );
    }
    // Small frames, a small stash (credits withheld) and single copy from
    // 32 KiB: the pool, the stash bound and single copy all in play.
    ok(
        8,
        None,
        &[
            ("FM_SHM_PAYLOAD", "65520"),
            ("FM_STASH_BYTES", "65536"),
            ("FM_SHM_CMA_THRESHOLD", "32768"),
        ],
        &["mix", "5", "300", "4194304"],
    );
}

/// The mix across two virtual hosts, with loss, duplication and reordering.
#[test]
fn mixed_request_reply_traffic_completes_across_hosts_under_faults() {
    ok(
        4,
        Some("a,b"),
        &[("FM_FAULTS", "drop=0.05,dup=0.01,reorder=0.02,seed=7")],
        &["mix", "6", "200", "1048576"],
    );
}

/// The mix's checker is not blind: told to expect one wrong byte, it fails.
#[test]
fn the_mix_checker_fails_when_the_data_is_wrong() {
    let (success, o, e) = job(
        3,
        None,
        &[("FM_TEST_SABOTAGE", "1")],
        &["mix", "8", "100", "20000"],
    );
    assert!(!success, "sabotaged run passed:\n{o}\n{e}");
    assert!(e.contains("expected"), "{e}");
}
