//! Ranks started on other hosts as ssh starts them end with their job
//! (root only): two namespace hosts with real OpenSSH servers, two ranks on
//! each, started by fmrun through ssh. Such a rank is nobody's child on its
//! host, in its own session, and once fmrun or its ssh is gone its stdout
//! and stderr are pipes nobody reads. Whatever ends the job, every rank is
//! gone soon after, and nothing is left in the segment folder.

use fm_tests::netns::Cluster;
use fm_tests::sshd::SshServers;
use fm_tests::{fmrun, TempDir};
use std::io::BufRead;
use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

const TESTPROG: &str = env!("CARGO_BIN_EXE_fm-testprog");
/// The job's heartbeat timeout and `FM_ETH_DEAD_AFTER`, seconds.
const DEAD_AFTER: u64 = 3;

/// A running job of 4 `serve` ranks over two hosts, and how to find its
/// ranks among this machine's processes.
struct Job {
    fmrun: Child,
    tag: String,
    dir: TempDir,
    // Dropped after the job: the servers and the namespaces.
    _ssh: SshServers,
    cluster: Cluster,
}

impl Job {
    /// `None` (after saying why) where namespaces or OpenSSH are missing.
    fn start(test: &str) -> Option<Job> {
        let cluster = Cluster::new(test, 2)?;
        let dir = TempDir::for_segments("remote-end");
        let hosts: Vec<(&str, std::net::Ipv4Addr)> = (cluster.hosts.iter())
            .map(|h| (h.name.as_str(), h.addr))
            .collect();
        let ssh = SshServers::start(test, &dir.0, &hosts)?;
        let tag = format!("{test}-{}", std::process::id());
        let spec = format!("{}:2,{}:2", cluster.hosts[0].addr, cluster.hosts[1].addr);
        let (rsh, mark, beat) = (
            ssh.rsh(),
            format!("FM_TEST_TAG={tag}"),
            format!("{DEAD_AFTER}s"),
        );
        let args = [
            "-n",
            "4",
            "--hosts",
            &spec,
            "--net",
            fm_tests::netns::NET_ETHERNET,
            "--rsh",
            &rsh,
            "--heartbeat-timeout",
            &beat,
            "-x",
            &mark,
            "--timeout",
            "120",
        ];
        let mut fmrun = fmrun(TESTPROG, &dir, &args, Path::new(TESTPROG), &["serve"])
            .env("FM_ETH_DEAD_AFTER", DEAD_AFTER.to_string())
            .env("FM_PACER", "off")
            .spawn()
            .expect("fmrun");
        // Every rank has joined and passed the barrier's start.
        let mut out = std::io::BufReader::new(fmrun.stdout.take().expect("stdout")).lines();
        let mut ready = 0;
        while ready < 4 {
            match out.next() {
                Some(Ok(l)) if l.contains(" ready") => ready += 1,
                Some(Ok(_)) => {}
                _ => panic!("{test}: the job did not start"),
            }
        }
        // The rest of fmrun's output is read by nobody from here on.
        drop(out);
        let job = Job {
            fmrun,
            tag,
            dir,
            _ssh: ssh,
            cluster,
        };
        assert_eq!(job.ranks().len(), 4, "four ranks run");
        Some(job)
    }

    /// The pids of this job's ranks still running, on any host.
    fn ranks(&self) -> Vec<u32> {
        let mark = format!("FM_TEST_TAG={}", self.tag);
        let mut pids = Vec::new();
        for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|p| p.parse().ok()) else {
                continue;
            };
            let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
            if !String::from_utf8_lossy(&cmd).contains("fm-testprog") {
                continue;
            }
            let env = std::fs::read(e.path().join("environ")).unwrap_or_default();
            if env.split(|b| *b == 0).any(|v| v == mark.as_bytes()) {
                pids.push(pid);
            }
        }
        pids
    }

    /// fmrun's exit and what it said on stderr.
    fn fmrun_verdict(&mut self) -> (bool, String) {
        use std::io::Read;
        let mut err = String::new();
        if let Some(mut e) = self.fmrun.stderr.take() {
            let _ = e.read_to_string(&mut err);
        }
        let ok = self.fmrun.wait().is_ok_and(|s| s.success());
        (ok, err)
    }

    /// Wait until every rank is gone: how long that took from `since`.
    fn all_gone(&self, since: Instant, limit: Duration) -> Duration {
        while !self.ranks().is_empty() {
            assert!(
                since.elapsed() < limit,
                "ranks {:?} still run {:?} after the job ended",
                self.ranks(),
                since.elapsed()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        since.elapsed()
    }
}

impl Drop for Job {
    fn drop(&mut self) {
        let _ = self.fmrun.kill();
        let _ = self.fmrun.wait();
        for pid in self.ranks() {
            // SAFETY: kill(2) on a pid this test found; no memory involved.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        }
        for h in &self.cluster.hosts {
            let _ = std::process::Command::new("ip")
                .args(["link", "set", &h.root_if, "up"])
                .status();
        }
    }
}

#[test]
fn a_host_cut_off_ends_every_rank_within_the_dead_time() {
    let Some(mut job) = Job::start("a_host_cut_off_ends_every_rank_within_the_dead_time") else {
        return;
    };
    let cut = &job.cluster.hosts[1].root_if;
    let st = std::process::Command::new("ip")
        .args(["link", "set", cut, "down"])
        .status()
        .expect("ip");
    assert!(st.success());
    let t0 = Instant::now();
    let took = job.all_gone(t0, Duration::from_secs(DEAD_AFTER + 2));
    eprintln!("every rank gone {took:?} after the cut");
    assert!(job.dir.segments().is_empty(), "{:?}", job.dir.segments());
    let (ok, err) = job.fmrun_verdict();
    // On fmrun's own line, not only in the ranks' output.
    let own = err.lines().filter(|l| l.starts_with("fmrun:"));
    assert!(
        !ok && own
            .clone()
            .any(|l| l.contains("sent no heartbeat for 3 s")
                || l.contains("heard nothing from the GRM")),
        "{err}"
    );
}

#[test]
fn a_killed_fmrun_ends_every_rank_within_two_seconds() {
    let Some(mut job) = Job::start("a_killed_fmrun_ends_every_rank_within_two_seconds") else {
        return;
    };
    job.fmrun.kill().expect("SIGKILL fmrun");
    let t0 = Instant::now();
    let _ = job.fmrun.wait();
    let took = job.all_gone(t0, Duration::from_secs(2));
    eprintln!("every rank gone {took:?} after fmrun");
    assert!(job.dir.segments().is_empty(), "{:?}", job.dir.segments());
}

#[test]
fn a_killed_rank_ends_the_job_and_every_rank_within_two_seconds() {
    let Some(mut job) = Job::start("a_killed_rank_ends_the_job_and_every_rank_within_two_seconds")
    else {
        return;
    };
    let victim = job.ranks()[0];
    // SAFETY: kill(2) on one of this job's ranks.
    assert_eq!(unsafe { libc::kill(victim as i32, libc::SIGKILL) }, 0);
    let t0 = Instant::now();
    let took = job.all_gone(t0, Duration::from_secs(2));
    eprintln!("every rank gone {took:?} after the kill");
    let (ok, err) = job.fmrun_verdict();
    assert!(!ok, "fmrun reports the failure");
    assert!(
        err.contains(&format!("pid {victim}")),
        "fmrun names the rank's own pid: {err}"
    );
    assert!(job.dir.segments().is_empty(), "{:?}", job.dir.segments());
}
