//! Jobs started with fmrun, end to end: real processes, the real resource
//! manager (embedded, and the fm-grm daemon), real shared memory.
//!
//! Every job's segments go to a private directory under /dev/shm, so "no
//! segment is left" is checked exactly and nothing of another job is touched.

use fm_tests::{workspace_bin, TempDir, TinyTmpfs};
use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

const TESTPROG: &str = env!("CARGO_BIN_EXE_fm-testprog");

/// `fmrun ARGS fm-testprog PROG_ARGS`, segments in `dir`, output captured.
fn job(dir: &TempDir, fmrun_args: &[&str], prog_args: &[&str]) -> Command {
    fm_tests::fmrun(TESTPROG, dir, fmrun_args, Path::new(TESTPROG), prog_args)
}

struct Finished {
    status: ExitStatus,
    /// From the call to the process's exit.
    took: Duration,
    stdout: String,
    stderr: String,
}

/// Wait for a job, killing it if it outlives `limit` (a test never hangs).
/// Reads whichever of its stdout and stderr are still piped to us.
fn finish(mut child: Child, limit: Duration) -> Finished {
    let t0 = Instant::now();
    let drain = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            if let Some(mut r) = r {
                let _ = r.read_to_string(&mut s);
            }
            s
        })
    };
    let t_out = drain(
        child
            .stdout
            .take()
            .map(|o| Box::new(o) as Box<dyn Read + Send>),
    );
    let t_err = drain(
        child
            .stderr
            .take()
            .map(|e| Box::new(e) as Box<dyn Read + Send>),
    );
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if t0.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the job did not end within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    let took = t0.elapsed();
    Finished {
        status,
        took,
        stdout: t_out.join().unwrap_or_default(),
        stderr: t_err.join().unwrap_or_default(),
    }
}

/// `fmrun FMRUN_ARGS fm-testprog PROG_ARGS` to its end.
fn run_job(dir: &TempDir, fmrun_args: &[&str], prog_args: &[&str]) -> Finished {
    finish(
        job(dir, fmrun_args, prog_args).spawn().expect("fmrun"),
        Duration::from_secs(60),
    )
}

/// The fm-grm daemon on a free loopback port; killed when dropped.
struct Daemon {
    child: Child,
    addr: String,
}

impl Daemon {
    fn start() -> Daemon {
        let mut child = Command::new(workspace_bin(TESTPROG, "fm-grm"))
            .args(["--listen", "127.0.0.1:0", "--print-addr"])
            .env("FM_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start fm-grm");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("piped"))
            .read_line(&mut line)
            .expect("fm-grm prints its address");
        Daemon {
            child,
            addr: line.trim().to_string(),
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn two_jobs_side_by_side_never_see_each_others_messages() {
    let dir = TempDir::for_segments("isolation");
    let daemon = Daemon::start();
    // Two jobs through one GRM daemon (isolated by token), a third through
    // fmrun's own embedded GRM; all three share one segment directory.
    let grm = ["--grm", daemon.addr.as_str(), "-n", "3"];
    let a = job(&dir, &grm, &["isolation", "job-AAAA", "20000"])
        .spawn()
        .expect("job A");
    let b = job(&dir, &grm, &["isolation", "job-BBBB", "20000"])
        .spawn()
        .expect("job B");
    let c = job(&dir, &["-n", "2"], &["isolation", "job-CCCC", "20000"])
        .spawn()
        .expect("job C");
    for (tag, j) in [("job-AAAA", a), ("job-BBBB", b), ("job-CCCC", c)] {
        let f = finish(j, Duration::from_secs(120));
        assert!(
            f.status.success(),
            "{tag}: {:?}\n{}\n{}",
            f.status,
            f.stdout,
            f.stderr
        );
        let oks = f
            .stdout
            .lines()
            .filter(|l| l.contains("isolation ok"))
            .count();
        assert!(oks >= 2, "{tag}: {}", f.stdout);
        assert!(
            f.stdout
                .lines()
                .filter(|l| l.contains("isolation ok"))
                .all(|l| l.contains(tag)),
            "{tag}: {}",
            f.stdout
        );
    }
    assert!(
        dir.segments().is_empty(),
        "left behind: {:?}",
        dir.segments()
    );
    let st = fm_grm::client::status(&daemon.addr).expect("GRM status");
    assert_eq!((st.jobs, st.members), (0, 0), "{st:?}");
}

/// Start `fmrun -n N fm-testprog serve` and wait for every rank's pid.
fn serving_job(dir: &TempDir, n: usize) -> (Child, Vec<u32>, std::thread::JoinHandle<String>) {
    let mut child = job(dir, &["-n", &n.to_string()], &["serve"])
        .spawn()
        .expect("fmrun");
    let mut lines = BufReader::new(child.stdout.take().expect("piped")).lines();
    let mut pids = vec![0u32; n];
    let deadline = Instant::now() + Duration::from_secs(60);
    while pids.contains(&0) {
        assert!(Instant::now() < deadline, "ranks did not start");
        let line = lines.next().expect("a line").expect("utf-8");
        // "[r] rank R pid P ready"
        let w: Vec<&str> = line.split_whitespace().collect();
        if w.len() == 6 && w[1] == "rank" && w[5] == "ready" {
            let r: usize = w[2].parse().expect("rank");
            pids[r] = w[4].parse().expect("pid");
        }
    }
    let rest =
        std::thread::spawn(move || lines.map_while(Result::ok).collect::<Vec<_>>().join("\n"));
    (child, pids, rest)
}

fn alive(pid: u32) -> bool {
    fm_platform::pid_alive(pid)
        && std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|s| !s.contains(") Z "))
            .unwrap_or(false)
}

#[test]
fn a_rank_killed_by_sigkill_ends_the_job_naming_it() {
    let dir = TempDir::for_segments("sigkill");
    let (child, pids, _rest) = serving_job(&dir, 4);
    // SAFETY: a plain kill of our own grandchild.
    unsafe { libc::kill(pids[2] as i32, libc::SIGKILL) };
    // fmrun stops the job within 2 s on an idle machine (README); the
    // test asserts only that it ends, well inside the wait limit, as a
    // loaded machine may be slower.
    let f = finish(child, Duration::from_secs(60));
    eprintln!("ended {:?} after the signal", f.took);
    assert!(f.took < Duration::from_secs(30), "took {:?}", f.took);
    assert_eq!(f.status.code(), Some(128 + libc::SIGKILL), "{}", f.stderr);
    assert!(
        f.stderr.contains("rank 2") && f.stderr.contains("SIGKILL"),
        "{}",
        f.stderr
    );
    assert!(
        dir.segments().is_empty(),
        "left behind: {:?}",
        dir.segments()
    );
    std::thread::sleep(Duration::from_millis(50));
    for (r, p) in pids.iter().enumerate() {
        assert!(!alive(*p), "rank {r} (pid {p}) outlived the job");
    }
}

#[test]
fn ctrl_c_stops_the_whole_job() {
    let dir = TempDir::for_segments("sigint");
    let (child, pids, _rest) = serving_job(&dir, 3);
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    // fmrun stops the job within 2 s on an idle machine (README); the
    // test asserts only that it ends, well inside the wait limit, as a
    // loaded machine may be slower.
    let f = finish(child, Duration::from_secs(60));
    eprintln!("ended {:?} after the signal", f.took);
    assert!(f.took < Duration::from_secs(30), "took {:?}", f.took);
    assert_eq!(f.status.code(), Some(130), "{}", f.stderr);
    assert!(f.stderr.contains("interrupted by SIGINT"), "{}", f.stderr);
    assert!(dir.segments().is_empty());
    for p in pids {
        assert!(!alive(p), "pid {p} outlived the job");
    }
}

#[test]
fn a_rank_that_exits_nonzero_gives_the_job_its_status() {
    let dir = TempDir::for_segments("exit");
    let f = run_job(&dir, &["-n", "3"], &["exit", "1", "7"]);
    assert_eq!(f.status.code(), Some(7), "{}", f.stderr);
    assert!(
        f.stderr.contains("rank 1") && f.stderr.contains("status 7"),
        "{}",
        f.stderr
    );
    assert!(dir.segments().is_empty());
}

#[test]
fn a_wrong_token_is_refused_with_a_clear_error() {
    let daemon = Daemon::start();
    let child = Command::new(TESTPROG)
        .arg("serve")
        .env("FM_GRM", &daemon.addr)
        .env("FM_JOB_TOKEN", "0123456789abcdef-not-a-job")
        .env("FM_RANK", "0")
        .env_remove("FM_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("fm-testprog");
    let f = finish(child, Duration::from_secs(30));
    assert_eq!(f.status.code(), Some(1));
    assert!(
        f.stderr.contains("refused") && f.stderr.contains("no job with this token"),
        "{}",
        f.stderr
    );
}

#[test]
fn a_mismatched_handler_table_is_refused_at_join_naming_the_handler() {
    let dir = TempDir::for_segments("handlers");
    let f = run_job(&dir, &["-n", "3"], &["handlers", "2"]);
    assert!(!f.status.success());
    assert!(f.status.signal().is_none(), "{:?}", f.status);
    assert!(
        f.stderr.contains("handler 2") && f.stderr.contains("\"reply-v2\""),
        "{}",
        f.stderr
    );
    assert!(dir.segments().is_empty());
}

#[test]
fn a_segment_directory_too_small_is_a_clean_error_before_any_message() {
    let Some(tiny) = TinyTmpfs::mount(
        "a_segment_directory_too_small_is_a_clean_error_before_any_message",
        "256k",
    ) else {
        return;
    };
    let f = run_job(&tiny.0, &["-n", "4"], &["ring", "10"]);
    assert_eq!(f.status.code(), Some(1), "{}", f.stderr);
    assert!(
        f.stderr.contains("cannot allocate") && f.stderr.contains("FM_SHM_DIR"),
        "{}",
        f.stderr
    );
    assert!(tiny.0.segments().is_empty(), "{:?}", tiny.0.segments());
}

/// A misspelt setting is reported once per job (by fmrun, before the ranks
/// start; the ranks say nothing of it), naming it; fmrun's own settings and
/// the tools' variables are not reported.
#[test]
fn an_unknown_fm_variable_is_reported_once_per_job() {
    let dir = TempDir::for_segments("unknown-var");
    let f = finish(
        job(&dir, &["-n", "3"], &["alltoall", "10", "100", "1"])
            .env("FM_CREDITZ", "3")
            .env("FM_RSH", "local")
            .env("FM_TEST_NOTHING", "1")
            .spawn()
            .expect("fmrun"),
        Duration::from_secs(60),
    );
    assert!(f.status.success(), "{}", f.stderr);
    let warnings: Vec<&str> = (f.stderr.lines())
        .filter(|l| l.contains("is not a setting of fm"))
        .collect();
    assert_eq!(warnings.len(), 1, "{}", f.stderr);
    assert!(
        warnings[0].starts_with("fmrun: ") && warnings[0].contains("FM_CREDITZ"),
        "{}",
        f.stderr
    );
    assert!(!f.stderr.contains("FM_RSH is not") && !f.stderr.contains("FM_TEST_NOTHING"));
}

/// A bad value of a setting stops the job in fmrun, once, naming the
/// variable, before any rank starts.
#[test]
fn a_bad_setting_stops_the_job_before_any_rank_starts() {
    let dir = TempDir::for_segments("bad-var");
    let f = finish(
        job(&dir, &["-n", "4"], &["barrier", "1"])
            .env("FM_CREDITS", "many")
            .spawn()
            .expect("fmrun"),
        Duration::from_secs(60),
    );
    assert_eq!(f.status.code(), Some(2), "{}", f.stderr);
    assert_eq!(f.stderr.matches("FM_CREDITS").count(), 1, "{}", f.stderr);
    assert!(f.stderr.contains("no rank was started"), "{}", f.stderr);
    assert!(!f.stdout.contains("barriers done"), "{}", f.stdout);
}

/// The README's hello (Rust without `init_logging`) says a misspelt
/// setting once, as a plain line, on its own; a job of 4 says it once.
#[test]
fn a_rust_program_alone_or_in_a_job_says_a_misspelt_setting_once() {
    let hello = Path::new(TESTPROG).with_file_name("examples").join("hello");
    if !hello.exists() {
        eprintln!(
            "SKIPPED: {} not built (cargo test builds it)",
            hello.display()
        );
        return;
    }
    let o = Command::new(&hello)
        .env("FM_CREDTIS", "4")
        .env_remove("FM_LOG")
        .output()
        .expect("hello");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert_eq!(
        err.matches("FM_CREDTIS is not a setting of fm").count(),
        1,
        "{err}"
    );
    // And a job of 4 of them: once (fmrun's), not once per rank.
    let dir = TempDir::for_segments("hello-misspelt");
    let f = finish(
        fm_tests::fmrun(TESTPROG, &dir, &["-n", "4", "--oversubscribe"], &hello, &[])
            .env("FM_CREDTIS", "4")
            .spawn()
            .expect("fmrun"),
        Duration::from_secs(120),
    );
    assert!(f.status.success(), "{}", f.stderr);
    let said = f
        .stderr
        .matches("FM_CREDTIS is not a setting of fm")
        .count();
    assert_eq!(said, 1, "{}", f.stderr);
}

/// fmrun raises its open-files limit to the hard limit: 40 ranks start
/// under a soft limit of 64 (they used to fail with "Too many open
/// files"), and when even the hard limit is too small fmrun says so,
/// naming what it needs.
#[test]
fn fmrun_raises_its_open_files_limit_and_says_when_the_hard_limit_is_too_small() {
    let fmrun = workspace_bin(TESTPROG, "fmrun");
    let run = |limits: &str| {
        let script = format!("{limits}; exec \"$0\" -n 40 --oversubscribe sleep 0.2",);
        let c = Command::new("sh")
            .args(["-c", &script])
            .arg(&fmrun)
            .env_remove("FM_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("sh");
        finish(c, Duration::from_secs(60))
    };
    let f = run("ulimit -Sn 64");
    assert!(f.status.success(), "{}", f.stderr);
    assert!(!f.stderr.contains("open files"), "{}", f.stderr);
    let f = run("ulimit -Sn 64; ulimit -Hn 64");
    assert!(
        f.stderr.contains("40 ranks need about") && f.stderr.contains("its hard limit here is 64"),
        "{}",
        f.stderr
    );
}

/// A packet in the shared segment that no sender could have made (a stray
/// write into the segment) is not a silent hang: the rank that finds it
/// fails its wait naming the segment and what was wrong, the job ends
/// through the resource manager, and fmrun reports it.
#[test]
fn a_corrupted_segment_ends_the_job_naming_it() {
    let dir = TempDir::for_segments("corrupt");
    let t0 = Instant::now();
    let f = finish(
        job(&dir, &["-n", "2", "--timeout", "60"], &["corrupt"])
            .spawn()
            .expect("fmrun"),
        Duration::from_secs(60),
    );
    assert!(!f.status.success(), "{}", f.stderr);
    assert!(
        f.stderr
            .contains("an inline packet claims 200 bytes from rank 0"),
        "{}",
        f.stderr
    );
    assert!(t0.elapsed() < Duration::from_secs(30), "{:?}", t0.elapsed());
    assert!(dir.segments().is_empty(), "{:?}", dir.segments());
}

/// The runs of `a_stray_write_into_any_word_…`: `fm-testprog bend` arguments.
fn bend_cases() -> Vec<Vec<String>> {
    let v = |a: &[&str]| a.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    let mut cases: Vec<Vec<String>> = (0..64)
        .map(|word: u32| v(&["control", &word.to_string(), "0x80000001"]))
        .collect();
    // The tail word, one position on or back.
    cases.push(v(&["control", "32", "1"]));
    cases.push(v(&["control", "32", "2"]));
    // Slots: the third packet (a frame), the first (inline).
    for back in ["1", "3"] {
        for word in 0..16 {
            cases.push(v(&["slot", back, &word.to_string(), "0x80000001"]));
        }
    }
    cases.push(v(&["slot", "1", "1", "0x100"]));
    cases.push(v(&["slot", "3", "1", "0x100"]));
    cases
}

/// One `fm-testprog bend` run: "harmless" (every message intact),
/// "detected" (the job ended naming the segment and what was wrong, not
/// at the wait limit), or "WRONG"; and its stderr.
fn bend_verdict(args: &[String]) -> (&'static str, String) {
    let dir = TempDir::for_segments("bend");
    let mut prog = vec!["bend"];
    prog.extend(args.iter().map(String::as_str));
    let f = finish(
        job(&dir, &["-n", "2", "--timeout", "60"], &prog)
            .env("FM_WAIT_TIMEOUT", "20")
            .spawn()
            .expect("fmrun"),
        Duration::from_secs(90),
    );
    assert!(dir.segments().is_empty(), "{args:?}: {:?}", dir.segments());
    let err = f.stderr;
    let verdict = if f.status.success() && err.contains("rank 1: bend ok") {
        "harmless"
    } else if !f.status.success()
        && err.contains("shmem: segment")
        && err.contains("corrupted: ")
        && !err.contains("gave up waiting")
    {
        "detected"
    } else {
        "WRONG"
    };
    (verdict, err)
}

/// A stray write into a live segment, one 32-bit word at a time, into
/// every word of the control block of the queue rank 0 sends rank 1
/// through, and every word of a slot that holds a packet rank 1 has not
/// taken yet (a frame's, and an inline packet's): each run either does no
/// harm (every message arrives intact) or ends the job naming the segment
/// and what was wrong — never a wrong message, never a hang until the
/// wait limit (20 s here).
#[test]
fn a_stray_write_into_any_word_of_a_queue_or_slot_is_harmless_or_ends_the_job_naming_it() {
    let cases = bend_cases();
    let outcomes: Vec<(Vec<String>, &str, String)> = std::thread::scope(|s| {
        let halves: Vec<_> = (cases.chunks(cases.len().div_ceil(2)))
            .map(|part| {
                s.spawn(move || {
                    (part.iter())
                        .map(|args| {
                            let (verdict, err) = bend_verdict(args);
                            (args.clone(), verdict, err)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        halves
            .into_iter()
            .flat_map(|h| h.join().expect("runs"))
            .collect()
    });
    let wrong: Vec<_> = outcomes.iter().filter(|o| o.1 == "WRONG").collect();
    assert!(
        wrong.is_empty(),
        "{} of {}: {wrong:#?}",
        wrong.len(),
        outcomes.len()
    );
    let verdict = |a: &[&str]| {
        (outcomes.iter())
            .find(|o| o.0.iter().map(String::as_str).eq(a.iter().copied()))
            .map(|o| o.1)
            .expect("ran")
    };
    // Not vacuous: the words that matter were bent and it showed; the
    // free-list head and the padding are harmless.
    for bent in [
        &["control", "32", "1"][..],
        &["control", "32", "2"],
        &["slot", "1", "0", "0x80000001"],
        &["slot", "1", "1", "0x100"],
        &["slot", "3", "1", "0x100"],
        &["slot", "3", "3", "0x80000001"],
        &["slot", "3", "15", "0x80000001"],
    ] {
        assert_eq!(verdict(bent), "detected", "{bent:?}");
    }
    for harmless in [
        &["control", "0", "0x80000001"][..],
        &["control", "5", "0x80000001"],
    ] {
        assert_eq!(verdict(harmless), "harmless", "{harmless:?}");
    }
}

/// As another user (root only): a job of this user cannot be joined by
/// another local user even with its token, and another user holding every
/// connection it may have does not lock this user out of the GRM.
#[test]
fn another_local_user_can_neither_join_our_job_nor_lock_us_out() {
    if !fm_tests::is_root() {
        eprintln!("SKIPPED another_local_user_can_neither_join_our_job_nor_lock_us_out: needs root to run as another user");
        return;
    }
    let as_nobody = |args: &[&str]| {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", TESTPROG])
            .args(args)
            .env_remove("FM_LOG")
            .env_remove("XDG_CONFIG_HOME")
            .env("HOME", "/nonexistent");
        c
    };
    let grm = fm_grm::Grm::start(fm_grm::GrmOptions {
        max_per_client: 8,
        ..fm_grm::GrmOptions::default()
    })
    .expect("GRM");
    let addr = grm.addr().to_string();
    let token = fm_grm::client::new_token();
    let _job = fm_grm::LauncherLink::register(&addr, &token, 2, "ours", |_| {}).expect("register");
    // Nobody, with our job's token, cannot join it.
    let out = as_nobody(&["serve"])
        .env("FM_GRM", &addr)
        .env("FM_JOB_TOKEN", &token)
        .env("FM_RANK", "1")
        .output()
        .expect("setpriv");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("this job belongs to user 0, not to user 65534"),
        "{err}"
    );
    // Nobody holds all 8 connections it may have, and more.
    let mut flood = as_nobody(&["flood", &addr, "20"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("setpriv");
    let mut line = String::new();
    std::io::BufReader::new(flood.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("flood's line");
    assert!(line.contains("holding 20"), "{line}");
    // Its connections are admitted (up to its limit) or refused, each by
    // its own thread: wait until the 12 beyond the limit were refused.
    let deadline = Instant::now() + Duration::from_secs(10);
    while grm.status().rejected_frames < 12 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    // We still register and see the GRM.
    let t0 = Instant::now();
    let second =
        fm_grm::LauncherLink::register(&addr, &fm_grm::client::new_token(), 1, "ours", |_| {});
    assert!(second.is_ok(), "{:?}", second.err());
    // Not held up behind the others' connections (which never finish).
    assert!(t0.elapsed() < Duration::from_secs(30), "{:?}", t0.elapsed());
    let st = fm_grm::client::status(&addr).expect("status");
    assert!(
        st.rejected_frames >= 12,
        "nobody's extra connections were refused: {st:?}"
    );
    assert!(st.connections <= 8 + 3, "{st:?}");
    let _ = flood.kill();
    let _ = flood.wait();
}

/// Four other users at their connection limits fill a shared GRM (its
/// limits scaled down: 64 connections, 16 per user, the default's
/// 8,192 = 4 × 2,048): our job still starts through it, each of its
/// connections cutting off the oldest unauthenticated one of the user
/// holding the most (root only, to be four other users).
#[test]
fn four_users_at_their_limits_cannot_lock_our_job_out_of_a_shared_grm() {
    let test = "four_users_at_their_limits_cannot_lock_our_job_out_of_a_shared_grm";
    if !fm_tests::is_root() {
        eprintln!("SKIPPED {test}: needs root to run as other users");
        return;
    }
    let grm = fm_grm::Grm::start(fm_grm::GrmOptions {
        max_connections: 64,
        max_per_client: 16,
        ..fm_grm::GrmOptions::default()
    })
    .expect("GRM");
    let addr = grm.addr().to_string();
    let floods: Vec<Child> = (65531..=65534)
        .map(|uid: u32| {
            let mut c = Command::new("setpriv")
                .args([
                    &format!("--reuid={uid}"),
                    &format!("--regid={uid}"),
                    "--clear-groups",
                    TESTPROG,
                ])
                .args(["flood", &addr, "20"])
                .env_remove("FM_LOG")
                .stdout(Stdio::piped())
                .spawn()
                .expect("setpriv");
            let mut line = String::new();
            std::io::BufReader::new(c.stdout.take().expect("stdout"))
                .read_line(&mut line)
                .expect("flood's line");
            assert!(line.contains("holding 20"), "{line}");
            c
        })
        .collect();
    // 4 × 4 beyond their limits refused: the GRM holds its 64.
    let deadline = Instant::now() + Duration::from_secs(10);
    while grm.status().rejected_frames < 16 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(grm.status().connections, 64, "{:?}", grm.status());
    let dir = TempDir::for_segments("full-grm");
    let f = finish(
        job(&dir, &["-n", "2", "--grm", &addr], &["barrier", "3"])
            .spawn()
            .expect("fmrun"),
        Duration::from_secs(60),
    );
    for mut c in floods {
        let _ = c.kill();
        let _ = c.wait();
    }
    assert!(f.status.success(), "{}", f.stderr);
    assert!(f.stdout.contains("barriers done"), "{}", f.stdout);
    println!("{test}: the job ran in {:?}", f.took);
}

/// `fmrun --stats` prints each rank's counters after the job (a ring of
/// 10 laps: 11 messages each way per rank), as a line or as JSON; the
/// numbers are the ranks' own.
#[test]
fn fmrun_stats_prints_each_ranks_counters_as_lines_and_as_json() {
    let dir = TempDir::for_segments("stats");
    let f = finish(
        job(&dir, &["-n", "2", "--stats"], &["ring", "10"])
            .spawn()
            .expect("fmrun"),
        Duration::from_secs(60),
    );
    assert!(f.status.success(), "{}", f.stderr);
    for r in 0..2 {
        let line = (f.stdout.lines())
            .find(|l| l.starts_with(&format!("rank {r}: fm ")))
            .unwrap_or_else(|| panic!("no counters of rank {r}: {}", f.stdout));
        assert!(
            line.contains("messages_sent 11") && line.contains("shmem "),
            "{line}"
        );
    }
    let f = finish(
        job(&dir, &["-n", "2", "--stats=json"], &["ring", "10"])
            .spawn()
            .expect("fmrun"),
        Duration::from_secs(60),
    );
    assert!(f.status.success(), "{}", f.stderr);
    let objects: Vec<&str> = f
        .stdout
        .lines()
        .filter(|l| l.starts_with("{\"rank\":"))
        .collect();
    assert_eq!(objects.len(), 2, "{}", f.stdout);
    for (r, o) in objects.iter().enumerate() {
        assert!(
            o.starts_with(&format!("{{\"rank\":{r},\"fm\":{{\"messages_sent\":11,")),
            "{o}"
        );
        assert!(
            o.contains("\"devices\":{\"self\":{") && o.ends_with('}'),
            "{o}"
        );
    }
}

/// A job that is merely starved is not a lost GRM: fmrun and 4 spinning
/// ranks at nice 19, with a busy loop at nice 0 on every CPU, for 60 s.
/// Heartbeats may be late; nobody may conclude that the GRM or a rank died
/// (a cut link still ends a job within the timeout: remote_end.rs).
#[test]
fn a_starved_job_is_not_ended_as_grm_lost() {
    let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
    let hogs: Vec<Child> = (0..cpus)
        .map(|_| {
            Command::new("sh")
                .args(["-c", "while :; do :; done"])
                .spawn()
                .expect("start a busy loop")
        })
        .collect();
    struct Kill(Vec<Child>);
    impl Drop for Kill {
        fn drop(&mut self) {
            for h in &mut self.0 {
                let _ = h.kill();
                let _ = h.wait();
            }
        }
    }
    let _hogs = Kill(hogs);
    let dir = TempDir::for_segments("starved");
    let mut c = Command::new("nice");
    c.args(["-n", "19"])
        .arg(workspace_bin(TESTPROG, "fmrun"))
        .args(["-n", "4", "--timeout", "600", TESTPROG, "busy", "60"])
        .env("FM_SHM_DIR", &dir.0)
        .env("FM_WAIT", "spin")
        .env_remove("FM_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let f = finish(c.spawn().expect("start fmrun"), Duration::from_secs(900));
    assert!(
        f.status.success() && f.stdout.matches("busy ok").count() == 4,
        "{:?}\n{}\n{}",
        f.status,
        f.stdout,
        f.stderr
    );
    assert!(!f.stderr.contains("heard nothing"), "{}", f.stderr);
    assert!(dir.segments().is_empty(), "{:?}", dir.segments());
}
