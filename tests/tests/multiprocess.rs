//! Real processes on real shared memory: the one-host spine end to end.

use fm_launcher::LocalJob;
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn testprog(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_fm-testprog"));
    c.args(args);
    c
}

/// No segment of this job may be left behind.
fn assert_no_segment(job: fm::JobKey) {
    let left: Vec<_> = std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&format!("fm-{job}")))
                .collect()
        })
        .unwrap_or_default();
    assert!(left.is_empty(), "segments left in /dev/shm: {left:?}");
}

fn run(size: usize, timeout: Duration, env: &[(&str, &str)], args: &[&str]) -> Duration {
    let start = Instant::now();
    let job = LocalJob::spawn(size, false, |_| {
        let mut c = testprog(args);
        c.envs(env.iter().copied());
        c
    })
    .expect("spawn");
    let key = job.job_key;
    let out = job.wait(timeout);
    assert!(out.success(), "job {args:?} failed: {out:?}");
    assert_no_segment(key);
    start.elapsed()
}

/// 4 processes send 100,000 messages all-to-all (25,000 each), sizes 0 B to
/// 256 KiB, in random pieces, read in random chunks: every byte checked,
/// every message exactly once and in order per sender. With the default
/// settings, pieces of 64 KiB and more go through frames or by single copy
/// as measured, so both ways carry some (checked by the program).
#[test]
fn alltoall_4_processes_100k_messages_checked() {
    let t = run(
        4,
        Duration::from_secs(900),
        &[("FM_TEST_WANT_SINGLE_COPY", "1")],
        &["alltoall", "25000", "262144", "42"],
    );
    eprintln!("all-to-all took {t:?}");
}

/// The same through frames only (no single-copy path).
#[test]
fn alltoall_without_single_copy() {
    run(
        3,
        Duration::from_secs(300),
        &[("FM_SHM_CMA", "off")],
        &["alltoall", "3000", "100000", "7"],
    );
}

/// Every piece of 4 KiB or more by single copy (process_vm_readv), mixed
/// with frames, and 4 KiB frames.
#[test]
fn alltoall_single_copy_and_small_frames() {
    run(
        4,
        Duration::from_secs(300),
        &[("FM_SHM_CMA_THRESHOLD", "4096"), ("FM_SHM_PAYLOAD", "4080")],
        &["alltoall", "5000", "262144", "11"],
    );
}

/// Frames a queue's senders share, fewer than their credit windows (what
/// many local ranks get by default: PM's buffers per channel): senders
/// find the pool empty while they hold credit and wait for a frame —
/// asleep on their doorbell (`FM_WAIT=block`, no busy period), so the
/// receiver that frees a frame must wake them, or the job hangs (without
/// the wake, half of such runs hung here: three runs).
#[test]
fn alltoall_through_a_frame_pool_smaller_than_the_windows() {
    for seed in ["19", "20", "21"] {
        run(
            6,
            Duration::from_secs(120),
            &[
                ("FM_SHM_FRAMES", "8"),
                ("FM_SHM_QUEUES", "2"),
                ("FM_SHM_CMA", "off"),
                ("FM_WAIT", "block"),
                ("FM_WAIT_SPIN_US", "0"),
            ],
            &["alltoall", "10000", "65536", seed],
        );
    }
}

/// One shared queue per receiver (M = 1): senders contend with
/// fetch-and-increment and leapfrog each other.
#[test]
fn alltoall_shared_queues() {
    run(
        4,
        Duration::from_secs(300),
        &[("FM_SHM_QUEUES", "1")],
        &["alltoall", "5000", "20000", "9"],
    );
}

/// Two processes each send everything to the other before extracting, with
/// one credit: extract-on-stall keeps both going.
#[test]
fn head_to_head_with_one_credit() {
    run(
        2,
        Duration::from_secs(120),
        &[("FM_CREDITS", "1")],
        &["headtohead", "20000", "64"],
    );
}

/// Head-to-head with multi-packet and single-copy messages and two credits.
#[test]
fn head_to_head_large_messages_tiny_credits() {
    run(
        2,
        Duration::from_secs(120),
        &[("FM_CREDITS", "2"), ("FM_SHM_CMA_THRESHOLD", "16384")],
        &["headtohead", "300", "70000"],
    );
    run(
        2,
        Duration::from_secs(120),
        &[("FM_CREDITS", "1"), ("FM_SHM_CMA", "off")],
        &["headtohead", "300", "70000"],
    );
}

/// Six processes on two cores: a token ring where every hop waits for a
/// descheduled peer, then all-to-all traffic. Must make steady progress.
#[test]
fn oversubscribed_6_processes() {
    let t = run(6, Duration::from_secs(120), &[], &["ring", "500"]);
    eprintln!("6-process ring, 3000 hops: {t:?}");
    let t = run(
        6,
        Duration::from_secs(240),
        &[],
        &["alltoall", "3000", "65536", "3"],
    );
    eprintln!("6-process all-to-all: {t:?}");
}

/// Blocking waits lose no wake-up: eight processes on two cores, every
/// wait sleeping at once (no busy period). First a token ring whose every
/// hop must wake a sleeping rank (each holds the token a random while, so
/// the next is sometimes asleep and sometimes still polling): a wake-up
/// lost stops the ring, and the wait limit fails the job. Then all-to-all
/// traffic sent at random intervals — a random wait in
/// `extract_wait_timeout` after every message — with messages of one
/// packet and of several and two credits, so senders sleep waiting for
/// credit too: every message exactly once, in order, intact (checked).
#[test]
fn blocking_waits_8_processes_random_intervals() {
    let blocking = [
        ("FM_WAIT", "block"),
        ("FM_WAIT_SPIN_US", "0"),
        ("FM_CREDITS", "2"),
        ("FM_TEST_GAP_US", "300"),
        // A lost wake-up fails the wait rather than hanging the test.
        ("FM_WAIT_TIMEOUT", "20"),
    ];
    let t = run(8, Duration::from_secs(300), &blocking, &["ring", "300"]);
    eprintln!("8 blocking processes, 2400 hops: {t:?}");
    let t = run(
        8,
        Duration::from_secs(300),
        &blocking,
        &["alltoall", "3000", "20000", "11"],
    );
    eprintln!("8 blocking processes, 24000 messages: {t:?}");
}

/// Rank 0's four threads send through one endpoint (an `FmSender` each)
/// to rank 1 while rank 0's main thread extracts, sleeping between
/// (`FM_WAIT=block`): rank 1 gets each thread's 2000 messages once, in
/// order, intact (checked by the program).
#[test]
fn threads_send_through_one_endpoint() {
    run(
        2,
        Duration::from_secs(120),
        &[("FM_WAIT", "block"), ("FM_WAIT_TIMEOUT", "30")],
        &["threads", "2000"],
    );
}

/// Run `fm-testprog MODE` on two ranks whose address space is limited to
/// 1 GiB, so that an allocation of what a forged packet claims fails.
fn run_in_1_gib(mode: &str, env: &[(&str, &str)]) {
    let job = LocalJob::spawn(2, false, |_| {
        let mut c = Command::new("sh");
        c.args(["-c", "ulimit -v 1048576 && exec \"$0\" \"$1\""])
            .arg(env!("CARGO_BIN_EXE_fm-testprog"))
            .arg(mode)
            .envs(env.iter().copied());
        c
    })
    .expect("spawn");
    let key = job.job_key;
    let out = job.wait(Duration::from_secs(60));
    assert!(out.success(), "{mode}: {out:?}");
    assert_no_segment(key);
}

/// A forged first packet claiming a message of 4 GiB − 1 bytes, read with
/// `receive_vec`: the vector grows with what arrives, so the rank does not
/// abort on the allocation; it fails its wait for the rest at its limit,
/// saying so.
#[test]
fn a_message_length_claim_is_not_an_allocation() {
    run_in_1_gib("claim", &[]);
}

/// The same for a forged single-copy piece claiming 4 GiB − 1 bytes, set
/// aside by a rank that waits for credit: its send fails with an error
/// naming the piece and the rank.
#[test]
fn a_single_copy_length_claim_is_not_an_allocation() {
    run_in_1_gib("claim-remote", &[("FM_CREDITS", "1")]);
}

/// A message whose sender began another before sending all it claimed
/// (a forged first packet of 100 bytes claiming 1,000): the handler reading
/// it gets an error saying so, not 100 bytes as if whole; the next message
/// arrives intact; the byte counter is what arrived (fm-testprog checks).
#[test]
fn a_message_cut_short_is_an_error_and_counted_as_it_came() {
    run(2, Duration::from_secs(60), &[], &["cutshort"]);
}

/// Rank 2 is on another host and the job has no network: the NULL transport
/// answers a send with a no-route error naming the rank and its host.
#[test]
fn null_transport_reports_no_route() {
    let mut job = LocalJob::spawn(3, false, |rank| {
        let mut c = testprog(&["noroute"]);
        c.env("FM_HOSTS", "hostA,hostA,hostB")
            .env("FM_HOST", if rank == 2 { "hostB" } else { "hostA" })
            .env("FM_NET", "null")
            .stdout(Stdio::piped());
        c
    })
    .expect("spawn");
    let mut out0 = job.take_stdout(0).expect("stdout");
    let key = job.job_key;
    let outcome = job.wait(Duration::from_secs(60));
    assert!(outcome.success(), "{outcome:?}");
    let mut text = String::new();
    out0.read_to_string(&mut text).expect("read");
    assert!(
        text.contains("no route to rank 2") && text.contains("hostB") && text.contains("null"),
        "{text}"
    );
    assert_no_segment(key);
}

/// A rank killed mid-job leaves no segment: the name is gone once all attached.
#[test]
fn killed_job_leaves_no_segment() {
    let job =
        LocalJob::spawn(2, false, |_| testprog(&["headtohead", "100000000", "64"])).expect("spawn");
    std::thread::sleep(Duration::from_millis(500));
    let key = job.job_key;
    for pid in job.pids() {
        // SAFETY: signalling our own children.
        unsafe { libc_kill(pid as i32, 9) };
    }
    let _ = job.wait(Duration::from_secs(10));
    assert_no_segment(key);
}

/// A launcher killed with SIGKILL takes its ranks with it (they do not run
/// on as orphans) and leaves no segment behind.
#[test]
fn ranks_die_with_their_launcher() {
    use std::io::BufRead;
    let mut launcher = testprog(&["launcher", "2"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn launcher");
    let mut line = String::new();
    std::io::BufReader::new(launcher.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("job line");
    let key = line.trim().trim_start_matches("job ").to_string();
    std::thread::sleep(Duration::from_millis(500));
    let children = |pid: u32| -> Vec<u32> {
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|s| s.parse().ok())
            .collect()
    };
    let ranks = children(launcher.id());
    assert_eq!(ranks.len(), 2, "launcher should have 2 ranks: {ranks:?}");
    launcher.kill().expect("kill launcher");
    let _ = launcher.wait();
    let running = |pid: &u32| {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .map(|s| !s.contains("(zombie)"))
            .unwrap_or(false)
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while ranks.iter().any(running) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let left: Vec<u32> = ranks.iter().copied().filter(running).collect();
    for pid in &left {
        // SAFETY: cleaning up processes this test started.
        unsafe { libc_kill(*pid as i32, 9) };
    }
    assert!(left.is_empty(), "ranks outlived their launcher: {left:?}");
    let key = u64::from_str_radix(&key, 16).expect("job key from the launcher");
    assert_no_segment(fm::JobKey(key));
}

extern "C" {
    #[link_name = "kill"]
    fn libc_kill(pid: i32, sig: i32) -> i32;
}

/// The README's first set-up command is the build that fmrun's refusal of
/// an MPICH program without fm's MPI library names: the one that builds
/// the MPI and C libraries too (`--workspace --lib`), not only binaries.
#[test]
fn readme_first_command_builds_the_libraries_too() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let first = readme
        .split("```sh\n")
        .nth(1)
        .and_then(|b| b.lines().next())
        .expect("a sh block in the README");
    let build = fm_launcher::libraries::BUILD_COMMAND;
    assert!(first.starts_with(&format!("{build} && ")), "{first}");
    assert!(
        build.contains("--workspace") && build.contains("--lib"),
        "{build}"
    );
}

/// The README's first set-up command, as `cargo test` builds it (debug):
/// fmrun runs the ring example on 4 ranks and prints the device tables.
#[test]
fn readme_ring_example_runs_under_fmrun() {
    let ring = std::path::Path::new(env!("CARGO_BIN_EXE_fm-testprog"))
        .with_file_name("examples")
        .join("ring");
    if !ring.exists() {
        eprintln!(
            "SKIPPED readme_ring_example_runs_under_fmrun: {} not built (cargo test builds it)",
            ring.display()
        );
        return;
    }
    let dir = fm_tests::TempDir::for_segments("readme-ring");
    let (o, _) = fm_tests::succeed(&mut fm_tests::fmrun(
        env!("CARGO_BIN_EXE_fm-testprog"),
        &dir,
        &["-n", "4", "--show-table"],
        &ring,
        &[],
    ));
    assert_eq!(o.matches("1 MiB from rank").count(), 4, "{o}");
    assert!(o.contains("shmem"), "no device table: {o}");
    assert!(dir.segments().is_empty());
}

/// The README's "Using it" example is `fm-api/examples/hello.rs` exactly,
/// and ends correctly alone and on 2 and 4 ranks.
#[test]
fn readme_hello_example_is_the_example_and_runs_on_any_number_of_ranks() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let shown = readme
        .split("```rust\n")
        .nth(1)
        .and_then(|b| b.split("```").next())
        .expect("a rust block in the README");
    let file = std::fs::read_to_string(root.join("fm-api/examples/hello.rs")).expect("hello.rs");
    let code: String = file
        .lines()
        .skip_while(|l| l.starts_with("//!") || l.is_empty())
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(shown, code, "README.md and fm-api/examples/hello.rs differ");
    let hello = std::path::Path::new(env!("CARGO_BIN_EXE_fm-testprog"))
        .with_file_name("examples")
        .join("hello");
    if !hello.exists() {
        eprintln!(
            "SKIPPED the runs of hello: {} not built (cargo test builds it)",
            hello.display()
        );
        return;
    }
    let alone = std::process::Command::new(&hello).output().expect("hello");
    assert!(alone.status.success(), "{alone:?}");
    assert_eq!(
        String::from_utf8_lossy(&alone.stdout),
        "rank 0 of 1: greeted and thanked\n"
    );
    for n in [2u32, 4] {
        let dir = fm_tests::TempDir::for_segments("readme-hello");
        let (o, _) = fm_tests::succeed(&mut fm_tests::fmrun(
            env!("CARGO_BIN_EXE_fm-testprog"),
            &dir,
            &["-n", &n.to_string(), "--oversubscribe"],
            &hello,
            &[],
        ));
        for r in 0..n {
            let want = format!("[{r}] rank {r} of {n}: greeted and thanked");
            assert!(o.contains(&want), "{want:?} in {o}");
        }
        assert!(dir.segments().is_empty());
    }
}
