//! FM programs under the launchers clusters already run, with no fmrun:
//! MPICH's `mpiexec` (hydra, PMI-1), Slurm's `srun --mpi=pmi2` and
//! `--mpi=pmix` (root, a real slurmctld and slurmd) and Open MPI's
//! `mpirun` (PMIx). Each rank learns its job through PMI and
//! exchanges nothing else with the launcher; a rank killed ends the job
//! with the launcher's report. `FM_BOOTSTRAP` asked for what is not there,
//! and a PMI server that answers nonsense, are clear errors.

use fm_tests::slurm::Slurm;
use fm_tests::TempDir;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const TESTPROG: &str = env!("CARGO_BIN_EXE_fm-testprog");
const MPIEXEC: &str = "/usr/bin/mpiexec.mpich";

fn fm_env(c: &mut Command, dir: &TempDir) {
    c.env("FM_SHM_DIR", &dir.0)
        .env("FM_PACER", "off")
        .env("FM_STATS", "json")
        .env_remove("FM_LOG")
        .env_remove("FM_GRM")
        .env_remove("FM_BOOTSTRAP");
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Every one of `n` ranks checked what it received, and said so. (A
/// foreign launcher passes on the ranks' output as it comes, so one
/// rank's line may be cut by another's: the lines are counted by their
/// unbroken part.)
fn alltoall_passed(o: &Output, n: usize) {
    let t = text(o);
    assert!(o.status.success(), "{t}");
    assert_eq!(t.matches(": ok, received ").count(), n, "{t}");
    assert_eq!(t.matches("fm-stats: {\"rank\":").count(), n, "{t}");
}

/// Start `launcher` on `serve`, wait until its 3 ranks are ready, kill
/// rank 1, and return what the launcher printed and its status.
fn kill_rank_1(mut launcher: Command) -> (String, std::process::ExitStatus) {
    let mut child = launcher
        .args([TESTPROG, "serve"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the launcher");
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut seen = String::new();
    let mut victim = None;
    let mut ready = 0;
    while ready < 3 {
        let mut line = String::new();
        if out.read_line(&mut line).expect("read") == 0 {
            break;
        }
        if let Some(rest) = line.trim().strip_prefix("rank 1 pid ") {
            victim = rest.split_whitespace().next().and_then(|p| p.parse().ok());
        }
        ready += line.contains(" ready") as usize;
        seen.push_str(&line);
    }
    let pid: i32 = victim.unwrap_or_else(|| panic!("rank 1 never said its pid:\n{seen}"));
    // SAFETY: signalling a rank this test started.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the job did not end after rank 1 was killed:\n{seen}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    out.read_to_string(&mut seen).expect("read");
    let mut err = String::new();
    child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut err)
        .expect("read");
    (seen + &err, status)
}

#[test]
fn an_fm_program_runs_under_mpich_mpiexec() {
    if !Path::new(MPIEXEC).exists() {
        eprintln!("SKIPPED: no mpiexec.mpich (apt-get install mpich)");
        return;
    }
    let dir = TempDir::for_segments("fm-hydra");
    let hydra = |n: &str| {
        let mut c = Command::new("timeout");
        c.args(["120", MPIEXEC, "-n", n]);
        fm_env(&mut c, &dir);
        c
    };
    let o = hydra("4")
        .args([TESTPROG, "alltoall", "2000", "65536", "5"])
        .output()
        .expect("mpiexec");
    alltoall_passed(&o, 4);
    let (t, status) = kill_rank_1(hydra("3"));
    assert!(!status.success(), "{t}");
    assert!(t.contains("BAD TERMINATION"), "{t}");
    assert!(dir.segments().is_empty(), "{:?}", dir.segments());
}

#[test]
fn an_fm_program_runs_under_srun() {
    let test = "an_fm_program_runs_under_srun";
    let dir = TempDir::for_segments("fm-srun");
    let Some(slurm) = Slurm::start(test, &dir.0.join("slurm")) else {
        return;
    };
    for mpi in ["--mpi=pmi2", "--mpi=pmix"] {
        let srun = |n: &str| {
            let mut c = slurm.command("timeout");
            c.args(["120", "srun", mpi, "--time=5", "-n", n]);
            fm_env(&mut c, &dir);
            c
        };
        let o = srun("4")
            .args([TESTPROG, "alltoall", "2000", "65536", "5"])
            .output()
            .expect("srun");
        alltoall_passed(&o, 4);
        let (t, status) = kill_rank_1(srun("3"));
        assert!(!status.success(), "{mpi}: {t}");
        assert!(t.contains(": Killed"), "{mpi}: {t}");
        if mpi == "--mpi=pmi2" {
            // srun lets the other tasks run on when one is killed: fm's
            // watch of the host ends them, naming the dead rank.
            assert!(t.contains("task 1: Killed"), "{t}");
            assert!(t.contains("ended without leaving the job"), "{t}");
        }
    }
    assert!(dir.segments().is_empty(), "{:?}", dir.segments());
}

#[test]
fn an_fm_program_runs_under_open_mpi_mpirun() {
    let mpirun = "/usr/bin/mpirun.openmpi";
    if !Path::new(mpirun).exists() {
        eprintln!("SKIPPED: no mpirun.openmpi (apt-get install openmpi-bin)");
        return;
    }
    let dir = TempDir::for_segments("fm-ompi");
    let run = |n: &str| {
        let mut c = Command::new("timeout");
        c.args([
            "120",
            mpirun,
            "--allow-run-as-root",
            "--oversubscribe",
            "-n",
            n,
        ]);
        c.args(["-x", "FM_SHM_DIR", "-x", "FM_STATS", "-x", "FM_PACER"]);
        fm_env(&mut c, &dir);
        c
    };
    let o = run("4")
        .args([TESTPROG, "alltoall", "2000", "65536", "5"])
        .output()
        .expect("mpirun");
    alltoall_passed(&o, 4);
    let (t, status) = kill_rank_1(run("3"));
    assert!(!status.success(), "{t}");
    assert!(t.contains("exited on signal 9"), "{t}");
    assert!(dir.segments().is_empty(), "{:?}", dir.segments());
}

/// `fm-testprog serve` (which opens fm) with `env`, no launcher.
fn init_with(dir: &TempDir, env: &[(&str, &str)]) -> String {
    let mut c = Command::new("timeout");
    c.args(["60", TESTPROG, "serve"]);
    fm_env(&mut c, dir);
    for v in [
        "PMI_FD",
        "PMI_PORT",
        "PMI_RANK",
        "PMI_SIZE",
        "PMI_JOBID",
        "PMI_ID",
    ] {
        c.env_remove(v);
    }
    for v in ["PMIX_NAMESPACE", "PMIX_RANK", "FM_PMIX_LIBRARY"] {
        c.env_remove(v);
    }
    c.envs(env.iter().copied());
    let o = c.output().expect("fm-testprog");
    assert!(!o.status.success(), "{}", text(&o));
    assert_ne!(o.status.code(), Some(124), "it hung:\n{}", text(&o));
    text(&o)
}

#[test]
fn bootstrap_sources_that_are_not_there_are_clear_errors() {
    let dir = TempDir::for_segments("fm-bootstrap");
    let t = init_with(&dir, &[("FM_BOOTSTRAP", "pmix")]);
    assert!(t.contains("not started by a PMIx launcher"), "{t}");
    // PMIx's variables without its server: the library says so.
    let t = init_with(&dir, &[("PMIX_NAMESPACE", "job.1"), ("PMIX_RANK", "0")]);
    assert!(t.contains("PMIx_Init failed"), "{t}");
    let missing = [
        ("PMIX_NAMESPACE", "job.1"),
        ("FM_PMIX_LIBRARY", "/nonexistent/libpmix.so.2"),
    ];
    let t = init_with(&dir, &missing);
    assert!(
        t.contains("PMIx needs OpenPMIx's client library /nonexistent/libpmix.so.2"),
        "{t}"
    );
    let t = init_with(&dir, &[("FM_BOOTSTRAP", "pmi1")]);
    assert!(t.contains("neither PMI_FD nor PMI_PORT is set"), "{t}");
    let t = init_with(&dir, &[("FM_BOOTSTRAP", "pmi2"), ("PMI_FD", "977")]);
    assert!(t.contains("PMI_FD=\"977\": not an open socket"), "{t}");
    let t = init_with(&dir, &[("FM_BOOTSTRAP", "pmi9")]);
    assert!(
        t.contains("known values: auto, grm, pmi1, pmi2, pmix, env"),
        "{t}"
    );
    let t = init_with(&dir, &[("FM_BOOTSTRAP", "grm")]);
    assert!(t.contains("FM_BOOTSTRAP=grm but FM_GRM is not set"), "{t}");
}

/// A PMI server at `PMI_PORT` that answers each line it reads with the
/// next of `answers`, then closes: what the process says of it.
fn against_server(dir: &TempDir, rank: &str, answers: &'static [&'static str]) -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = l.local_addr().expect("address").to_string();
    let server = std::thread::spawn(move || {
        let Ok((s, _)) = l.accept() else {
            return;
        };
        let mut r = BufReader::new(s.try_clone().expect("clone"));
        let mut w = s;
        let mut answers = answers.iter();
        // Answer each line while there are answers, then end the stream
        // (reading on until the process closes its side: a close with
        // unread lines would be a reset, not an end).
        loop {
            let mut line = String::new();
            if r.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            match answers.next() {
                Some(a) => {
                    let _ = w.write_all(a.as_bytes());
                }
                None => {
                    let _ = w.shutdown(std::net::Shutdown::Write);
                }
            }
        }
    });
    let t = init_with(
        dir,
        &[("PMI_PORT", &port), ("PMI_RANK", rank), ("PMI_SIZE", "2")],
    );
    let _ = server.join();
    t
}

#[test]
fn a_pmi_server_that_answers_nonsense_is_a_clear_error() {
    let dir = TempDir::for_segments("fm-badpmi");
    let t = against_server(&dir, "0", &[]);
    assert!(t.contains("closed the PMI connection during init"), "{t}");
    let t = against_server(&dir, "0", &["cmd=response_to_init rc=-1\n"]);
    assert!(t.contains("the launcher answered init for PMI-1"), "{t}");
    let t = against_server(
        &dir,
        "0",
        &[
            "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n",
            "garbage\n",
        ],
    );
    assert!(t.contains("the launcher answered get_my_kvsname"), "{t}");
    // The space gives a secret that is not fm's.
    let t = against_server(
        &dir,
        "0",
        &[
            "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n",
            "cmd=my_kvsname kvsname=k rc=0\n",
            "cmd=put_result rc=0\n",
            "cmd=put_result rc=0\n",
            "cmd=barrier_out\n",
            "cmd=get_result rc=0 value=zz\n",
        ],
    );
    assert!(t.contains("the value of \"fm-secret\" is not fm's"), "{t}");
    // A rank outside the size it is given.
    let t = against_server(
        &dir,
        "3",
        &[
            "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n",
            "cmd=my_kvsname kvsname=k rc=0\n",
        ],
    );
    assert!(t.contains("rank 3 of 2 is outside what fm runs"), "{t}");
}
