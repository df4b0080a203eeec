//! MPICH 4.0.2's own test suite (`tests/mpich-suite/`: MPICH's `test/mpi`
//! at tag v4.0.2, its licence in the tarball's COPYRIGHT), built against
//! Debian's MPICH with `mpicc.mpich` and run unmodified under fmrun: every
//! test that passes under `mpiexec.mpich` on this machine passes under
//! fmrun, on one host and, for a sample, across two virtual hosts, except
//! those `tests/mpich-suite/exclusions.txt` names, each with its reason.
//!
//! A test that fails under fmrun and is not excluded is run under
//! `mpiexec.mpich`: if it passes there, this test fails and names it.
//! Excluded tests are not run (some would only time out); the list
//! should only shrink.
//!
//! Building the suite takes 5 to 15 minutes on 2 CPUs (once: it is kept
//! in target/tmp/mpich-suite); it needs `mpich`, `libmpich-dev`,
//! `autoconf`, `automake`, `libtool` and `make` (`.ci/run` installs them),
//! and says SKIPPED without.

mod common;

use common::text;
use fm_tests::TempDir;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The folders of what fm's MPI implements (docs/MPI.md), in the order
/// they run; `threads/…` are the same areas under `MPI_THREAD_MULTIPLE`.
/// One-sided communication ([`RMA`]) runs in a test of its own, beside
/// these (on 2 CPUs the two overlap: most tests mostly wait).
const FOLDERS: [&str; 16] = [
    "basic",
    "init",
    "pt2pt",
    "comm",
    "group",
    "datatype",
    "attr",
    "errhan",
    "info",
    "topo",
    "coll",
    "threads/init",
    "threads/pt2pt",
    "threads/comm",
    "threads/coll",
    "threads/mpi_t",
];

const RMA: [&str; 1] = ["rma"];

/// `basic/` has no testlist: plain programs that exit 0.
const BASIC: [(&str, usize); 6] = [
    ("simple", 2),
    ("self", 1),
    ("sendrecv", 2),
    ("srtest", 2),
    ("patterns", 2),
    ("wtime", 1),
];

/// Of these folders, every `SAMPLE`-th test that passed on one host runs
/// again across two virtual hosts.
/// (rma's across hosts are `one_sided.rs`'s: its sample here took three
/// minutes of CI.)
const ACROSS_HOSTS: [&str; 3] = ["pt2pt", "comm", "coll"];
const SAMPLE: usize = 6;

/// Seconds a test may run (fmrun's `--timeout`; the slowest here take
/// about 35 s on a quiet 2-CPU machine).
const TIMEOUT: &str = "300s";

/// How long fmrun waits for a rank's heartbeat before ending the job.
const HEARTBEAT_TIMEOUT: &str = "60s";

/// Seconds a test MPICH marks as failing on itself may run: such a test
/// may wait for ever (pt2pt/pscancel waits for a cancel fm does not do).
const XFAIL_TIMEOUT: &str = "60s";

#[derive(Clone, Debug)]
struct Test {
    folder: &'static str,
    name: String,
    np: usize,
    args: Vec<String>,
    env: Vec<(String, String)>,
    /// The testlist's `resultTest=`: how a pass is told.
    result: String,
    /// MPICH marks it as failing on MPICH itself.
    xfail: bool,
    /// The testlist's `timeLimit=` (seconds), which the launcher enforces
    /// (hydra reads it from `MPIEXEC_TIMEOUT`; fmrun takes `--timeout`).
    limit: Option<u32>,
}

impl Test {
    /// The time limit that is the test's subject: a test that must fail
    /// (init/timeout: the launcher ends a job that runs past it). Other
    /// tests' limits are MPICH's estimates for its own machines, and a
    /// busy one is given [`TIMEOUT`].
    fn own_limit(&self) -> Option<u32> {
        self.limit.filter(|_| self.result == "TestErrFatal")
    }
}

impl Test {
    fn id(&self) -> String {
        format!("{}/{} {}", self.folder, self.name, self.np)
    }
}

#[derive(Clone, Debug, PartialEq)]
enum Outcome {
    Pass,
    /// Failed, timed out, crashed or not built: the first line that says why.
    Fail(String),
}

/// The tests of `folder` as its testlist lists them.
fn testlist(suite: &Path, folder: &'static str) -> Vec<Test> {
    let lines: Vec<String> = if folder == "basic" {
        (BASIC.iter())
            .map(|(n, np)| format!("{n} {np} resultTest=Basic"))
            .collect()
    } else {
        let list = std::fs::read_to_string(suite.join(folder).join("testlist"))
            .expect("the folder's testlist");
        list.lines().map(str::to_owned).collect()
    };
    let mut tests = Vec::new();
    for line in lines {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with('@') {
            continue;
        }
        let mut words = line.split_whitespace();
        let name = words.next().unwrap_or_default().to_owned();
        let mut t = Test {
            folder,
            name,
            np: 1,
            args: Vec::new(),
            env: Vec::new(),
            result: String::new(),
            xfail: false,
            limit: None,
        };
        for (i, w) in words.enumerate() {
            if i == 0 {
                if let Ok(np) = w.parse() {
                    t.np = np;
                    continue;
                }
            }
            let Some((k, v)) = w.split_once('=') else {
                continue;
            };
            match k {
                "arg" => t.args.push(v.to_owned()),
                "env" => {
                    if let Some((ek, ev)) = v.split_once('=') {
                        t.env.push((ek.to_owned(), ev.to_owned()));
                    }
                }
                "resultTest" => t.result = v.to_owned(),
                "xfail" => t.xfail = true,
                "timeLimit" => t.limit = v.parse().ok(),
                _ => {}
            }
        }
        tests.push(t);
    }
    tests
}

/// What a run says, as MPICH's own runner reads it: ` No Errors` and exit
/// 0, or for the tests that must fail, a non-zero exit.
fn classify(t: &Test, code: Option<i32>, out: &str, timed_out: bool) -> Outcome {
    // fmrun starts each line with "[rank] ".
    let lines: Vec<&str> = out
        .lines()
        .map(
            |l| match l.strip_prefix('[').and_then(|r| r.split_once("] ")) {
                Some((r, rest)) if r.trim().parse::<u32>().is_ok() => rest,
                _ => l,
            },
        )
        .collect();
    let no_errors = lines
        .iter()
        .any(|l| matches!(l.trim(), "No Errors" | "No errors"));
    let why = || {
        let first = lines
            .iter()
            .map(|l| l.trim())
            .find(|l| !l.is_empty() && !l.starts_with("fmrun: "))
            .unwrap_or("");
        Outcome::Fail(format!("exit {code:?}: {first}"))
    };
    if timed_out {
        return Outcome::Fail("timed out".into());
    }
    let failed = code != Some(0);
    let pass = match t.result.as_str() {
        "TestStatus" | "TestErrFatal" => failed,
        "TestStatusNoErrors" => failed && no_errors,
        "Basic" => {
            !failed && {
                let l = out.to_lowercase();
                !(l.contains("fail") || l.contains("error") || l.contains("abort"))
            }
        }
        _ => no_errors && !failed,
    };
    if pass {
        Outcome::Pass
    } else {
        why()
    }
}

/// The suite built in target/tmp/mpich-suite (built once), or `None`
/// (SKIPPED) without the tools.
fn built_suite() -> Option<PathBuf> {
    let tools = [
        "mpicc.mpich",
        "mpiexec.mpich",
        "autoreconf",
        "automake",
        "libtoolize",
        "make",
    ];
    let found = |t: &&str| {
        Command::new("sh")
            .args(["-c", &format!("command -v {t}")])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if let Some(t) = tools.iter().find(|t| !found(t)) {
        eprintln!(
            "SKIPPED: no {t} (apt-get install mpich libmpich-dev autoconf automake libtool make)"
        );
        return None;
    }
    let here = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mpich-suite");
    let dest = Path::new(env!("CARGO_TARGET_TMPDIR")).join("mpich-suite");
    let suite = dest.join("mpich-4.0.2/test/mpi");
    // The build is kept, keyed by the tarball's and the script's sizes and
    // the folders.
    let size = |f: &str| std::fs::metadata(here.join(f)).map_or(0, |m| m.len());
    let folders = [&FOLDERS[..], &RMA[..]].concat();
    let key = format!(
        "{} {} {}",
        size("mpich-4.0.2-test-mpi.tar.xz"),
        size("build.sh"),
        folders.join(" ")
    );
    let marker = dest.join("built");
    if std::fs::read_to_string(&marker).ok().as_deref() == Some(key.as_str()) {
        return Some(suite);
    }
    let _ = std::fs::remove_dir_all(&dest);
    let o = Command::new("bash")
        .arg(here.join("build.sh"))
        .arg(&dest)
        .args(&folders)
        .output()
        .expect("build.sh");
    assert!(o.status.success(), "building MPICH's suite:\n{}", text(&o));
    std::fs::write(&marker, key).expect("the build's marker");
    Some(suite)
}

/// `folder/name np` → why it is left out.
fn exclusions() -> HashMap<String, String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mpich-suite/exclusions.txt");
    let list = std::fs::read_to_string(path).expect("exclusions.txt");
    let mut out = HashMap::new();
    for line in list.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        // "folder/name np  reason"
        let mut w = line.splitn(3, char::is_whitespace);
        let (Some(test), Some(np), Some(why)) = (w.next(), w.next(), w.next()) else {
            panic!("exclusions.txt: {line:?} is not `folder/name np reason`");
        };
        let why = why.trim();
        assert!(!why.is_empty(), "exclusions.txt: {line:?} gives no reason");
        out.insert(format!("{test} {np}"), why.to_owned());
    }
    out
}

/// Test `t` under fmrun with `hosts` (none: one host).
fn under_fmrun(dir: &TempDir, suite: &Path, t: &Test, hosts: Option<&str>) -> Outcome {
    let exe = suite.join(t.folder).join(&t.name);
    if !exe.exists() {
        return Outcome::Fail("not built".into());
    }
    let np = t.np.to_string();
    let limit = match t.own_limit() {
        Some(s) => format!("{s}s"),
        None if t.xfail => XFAIL_TIMEOUT.to_owned(),
        None => TIMEOUT.to_owned(),
    };
    let mut args = vec!["--timeout", &limit, "-n", &np, "--oversubscribe"];
    if let Some(h) = hosts {
        args.extend(["--hosts", h, "--rsh", "local"]);
    }
    let prog: Vec<&str> = t.args.iter().map(String::as_str).collect();
    let own = std::env::current_exe().expect("the test's path");
    let own = own.parent().and_then(Path::parent).expect("target/PROFILE");
    let mut c = fm_tests::fmrun(&own.join("t").to_string_lossy(), dir, &args, &exe, &prog);
    c.current_dir(suite.join(t.folder));
    // A heartbeat comes from a thread of its own, whatever the rank's
    // MPI calls do: ten seconds without one means a process that did
    // not run, which a busy 2-CPU machine has shown (rma/rma_contig,
    // once). Hangs are the limit's to find; the heartbeat's own tests
    // (tests/lifecycle.rs, multihost.rs) keep their short timeouts.
    c.env("FM_HEARTBEAT_TIMEOUT", HEARTBEAT_TIMEOUT);
    c.envs(t.env.iter().map(|(k, v)| (k, v)));
    let o = c.output().expect("fmrun");
    // fmrun exits 124 when the job ran past --timeout: a failure of the
    // job, unless the limit was the test's own (init/timeout checks that
    // the launcher ends a job that runs past it).
    let timed_out = o.status.code() == Some(124) && t.own_limit().is_none();
    classify(t, o.status.code(), &text(&o), timed_out)
}

/// Test `t` under `mpiexec.mpich`.
fn under_mpich(suite: &Path, t: &Test) -> Outcome {
    let exe = suite.join(t.folder).join(&t.name);
    if !exe.exists() {
        return Outcome::Fail("not built".into());
    }
    let mut c = Command::new("timeout");
    c.args(["-k", "5", TIMEOUT, "mpiexec.mpich", "-n", &t.np.to_string()]);
    if let Some(s) = t.own_limit() {
        c.env("MPIEXEC_TIMEOUT", s.to_string());
    }
    let o = c
        .arg(&exe)
        .args(&t.args)
        .envs(t.env.iter().map(|(k, v)| (k, v)))
        .current_dir(suite.join(t.folder))
        .stdin(Stdio::null())
        .output()
        .expect("mpiexec.mpich");
    classify(t, o.status.code(), &text(&o), o.status.code() == Some(124))
}

#[test]
fn every_test_of_mpichs_suite_that_passes_under_mpiexec_passes_under_fmrun() {
    every_test_passes(&FOLDERS, "mpi-mpich-suite");
}

#[test]
fn every_one_sided_test_of_mpichs_suite_that_passes_under_mpiexec_passes_under_fmrun() {
    every_test_passes(&RMA, "mpi-mpich-suite-rma");
}

/// The suite is built once for both tests, by the first to ask.
fn built_once() -> Option<PathBuf> {
    static BUILT: std::sync::Mutex<Option<Option<PathBuf>>> = std::sync::Mutex::new(None);
    let mut b = BUILT.lock().unwrap_or_else(|p| p.into_inner());
    b.get_or_insert_with(built_suite).clone()
}

/// Every test of `folders` that passes under `mpiexec.mpich` passes under
/// fmrun (less the exclusions), and a sample of them across two virtual hosts.
fn every_test_passes(folders: &[&'static str], segments: &str) {
    let Some(suite) = built_once() else {
        return;
    };
    let dir = TempDir::for_segments(segments);
    let excluded: HashMap<String, String> = exclusions()
        .into_iter()
        .filter(|(id, _)| folders.iter().any(|f| id.starts_with(&format!("{f}/"))))
        .collect();
    let mut used = std::collections::HashSet::new();
    // Per folder: passed, failed as on MPICH, excluded, xfail.
    let mut table: BTreeMap<&str, [usize; 4]> = BTreeMap::new();
    let mut regressions = Vec::new();
    let mut passed_here = Vec::new();
    for &folder in folders {
        let row = table.entry(folder).or_default();
        for t in testlist(&suite, folder) {
            let id = t.id();
            // One line excludes every run of a test with that many ranks
            // (a testlist may run it with several arguments).
            if let Some(why) = excluded.get(&id) {
                eprintln!("{id:<40} excluded: {why}");
                used.insert(id);
                row[2] += 1;
                continue;
            }
            let started = std::time::Instant::now();
            let outcome = under_fmrun(&dir, &suite, &t, None);
            let secs = started.elapsed().as_secs_f64();
            eprintln!("{id:<40} {secs:6.1} s {outcome:?}");
            match outcome {
                Outcome::Pass => {
                    row[0] += 1;
                    passed_here.push(t);
                }
                Outcome::Fail(_) if t.xfail => row[3] += 1,
                Outcome::Fail(fm) => match under_mpich(&suite, &t) {
                    Outcome::Pass => regressions.push(format!("{id}: {fm}")),
                    Outcome::Fail(_) => row[1] += 1,
                },
            }
        }
    }
    let unknown: Vec<&String> = excluded.keys().filter(|k| !used.contains(*k)).collect();
    assert!(
        unknown.is_empty(),
        "exclusions.txt names tests no testlist has: {unknown:?}"
    );
    // A sample across two virtual hosts (over fm's ethernet device).
    let mut across = 0;
    for folder in ACROSS_HOSTS.iter().filter(|f| folders.contains(f)) {
        for t in (passed_here.iter())
            .filter(|t| t.folder == *folder)
            .step_by(SAMPLE)
        {
            across += 1;
            let outcome = under_fmrun(&dir, &suite, t, Some("a,b"));
            eprintln!("{:<40} on 2 hosts: {outcome:?}", t.id());
            if let Outcome::Fail(why) = outcome {
                regressions.push(format!("{} on 2 hosts: {why}", t.id()));
            }
        }
    }
    eprintln!("folder      passed  failed-as-on-MPICH  excluded  xfail");
    for (f, r) in &table {
        eprintln!("{f:<10} {:>7} {:>19} {:>9} {:>6}", r[0], r[1], r[2], r[3]);
    }
    eprintln!("{across} of the tests that passed ran again across 2 virtual hosts");
    assert!(
        regressions.is_empty(),
        "tests of MPICH's suite that pass under mpiexec.mpich fail under fmrun:\n{}",
        regressions.join("\n")
    );
}

/// The runner's reading of an outcome can fail: a test that printed
/// ` No Errors` but exited 1 failed, one that must fail and exited 0
/// failed, fmrun's "[rank] " prefix is no obstacle.
#[test]
fn the_suites_runner_tells_a_pass_from_a_failure() {
    let t = |result: &str| Test {
        folder: "pt2pt",
        name: "x".into(),
        np: 2,
        args: vec![],
        env: vec![],
        result: result.into(),
        xfail: false,
        limit: None,
    };
    let plain = t("");
    assert_eq!(
        classify(&plain, Some(0), "[0]  No Errors\n", false),
        Outcome::Pass
    );
    assert!(matches!(
        classify(&plain, Some(1), "[0]  No Errors\n", false),
        Outcome::Fail(_)
    ));
    assert!(matches!(
        classify(&plain, Some(0), "Found 1 errors\n", false),
        Outcome::Fail(_)
    ));
    assert!(matches!(
        classify(&plain, Some(0), " No Errors\n", true),
        Outcome::Fail(_)
    ));
    let must_fail = t("TestStatus");
    assert_eq!(classify(&must_fail, Some(1), "", false), Outcome::Pass);
    assert!(matches!(
        classify(&must_fail, Some(0), "", false),
        Outcome::Fail(_)
    ));
    let basic = t("Basic");
    assert_eq!(
        classify(&basic, Some(0), "[1] hello\n", false),
        Outcome::Pass
    );
    assert!(matches!(
        classify(&basic, Some(0), "[1] Test FAILED\n", false),
        Outcome::Fail(_)
    ));
    // The testlist's words: ranks, arguments, environment, xfail.
    let dir = TempDir::new_in(None, "mpich-testlist");
    std::fs::create_dir_all(dir.0.join("pt2pt")).expect("a folder");
    std::fs::write(
        dir.0.join("pt2pt/testlist"),
        "# a comment\nsendrecv1 2\nbig 4 arg=-n=3 env=A=b xfail=ticket1 timeLimit=10\n@other\n\nalone\n",
    )
    .expect("a testlist");
    let list = testlist(&dir.0, "pt2pt");
    let ids: Vec<String> = list.iter().map(Test::id).collect();
    assert_eq!(ids, ["pt2pt/sendrecv1 2", "pt2pt/big 4", "pt2pt/alone 1"]);
    assert_eq!(list[1].args, ["-n=3"]);
    assert_eq!(list[1].env, [("A".to_owned(), "b".to_owned())]);
    assert!(list[1].xfail && !list[0].xfail);
    assert_eq!((list[1].limit, list[0].limit), (Some(10), None));
}
