//! A job of N processes on this host without fmrun: each started with the
//! environment `fm::Config::from_env` reads, optionally joined through an
//! embedded resource manager. For `fm-bench`'s standalone runs and the
//! multi-process tests; fmrun (`main.rs`) is the launcher for users.

use fm::settings;
use fm::JobKey;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus};
use std::time::{Duration, Instant};

/// N processes of one command, rank i with FM_RANK=i.
pub struct LocalJob {
    children: Vec<Child>,
    pub job_key: JobKey,
    /// With [`LocalJob::spawn_with_grm`]: the embedded resource manager and
    /// the job's registration, alive as long as the job.
    _grm: Option<(fm_grm::LauncherLink, fm_grm::Grm)>,
}

/// How a job ended.
#[derive(Debug)]
pub struct JobOutcome {
    /// Exit status per rank (None: killed by us after the deadline or another rank's failure).
    pub statuses: Vec<Option<ExitStatus>>,
    pub timed_out: bool,
}

impl JobOutcome {
    pub fn success(&self) -> bool {
        !self.timed_out && self.statuses.iter().all(|s| s.is_some_and(|s| s.success()))
    }

    /// The first rank that failed, with its status.
    pub fn first_failure(&self) -> Option<(usize, Option<ExitStatus>)> {
        self.statuses
            .iter()
            .enumerate()
            .find(|(_, s)| !s.is_some_and(|s| s.success()))
            .map(|(r, s)| (r, *s))
    }
}

impl LocalJob {
    /// Start `size` copies of `make()` joined through a resource manager
    /// started here (FM_GRM, FM_JOB_TOKEN), as fmrun does: the job gets
    /// its node map, so devices that exchange endpoints (ethernet) work.
    pub fn spawn_with_grm(
        size: usize,
        pin: bool,
        mut make: impl FnMut(usize) -> Command,
    ) -> std::io::Result<LocalJob> {
        let grm = fm_grm::Grm::start(fm_grm::GrmOptions::default())?;
        let addr = grm.addr().to_string();
        let token = fm_grm::client::new_token();
        let exe = std::env::current_exe().unwrap_or_default();
        let link = fm_grm::LauncherLink::register(
            &addr,
            &token,
            size as u32,
            &exe.to_string_lossy(),
            |_| {},
        )
        .map_err(|e| std::io::Error::other(e.to_string()))?;
        let mut job = LocalJob::spawn(size, pin, |r| {
            let mut c = make(r);
            c.env(settings::GRM.var, &addr)
                .env(settings::JOB_TOKEN.var, &token);
            c
        })?;
        job.job_key = link.job_key;
        job._grm = Some((link, grm));
        Ok(job)
    }

    /// Start `size` copies of `make()` with FM_RANK/FM_SIZE/FM_JOB_KEY set.
    /// With `pin`, rank i is bound to CPU i mod (CPUs).
    pub fn spawn(
        size: usize,
        pin: bool,
        mut make: impl FnMut(usize) -> Command,
    ) -> std::io::Result<LocalJob> {
        let job_key = JobKey(rand::random::<u64>() | 1);
        let cpus = fm_platform::cpus_allowed();
        let mut children = Vec::with_capacity(size);
        for rank in 0..size {
            let mut cmd = make(rank);
            cmd.env(settings::RANK.var, rank.to_string())
                .env(settings::SIZE.var, size.to_string())
                .env(settings::JOB_KEY.var, job_key.to_string());
            let cpu = pin.then_some(rank % cpus);
            // SAFETY: only async-signal-safe system calls between fork and exec.
            unsafe {
                cmd.pre_exec(move || {
                    // A rank never outlives its launcher, even one killed by a signal.
                    fm_platform::die_with_parent();
                    if let Some(cpu) = cpu {
                        let _ = fm_platform::pin_to_cpu(cpu);
                    }
                    Ok(())
                });
            }
            match cmd.spawn() {
                Ok(c) => children.push(c),
                Err(e) => {
                    for c in &mut children {
                        let _ = c.kill();
                        let _ = c.wait();
                    }
                    return Err(e);
                }
            }
        }
        Ok(LocalJob {
            children,
            job_key,
            _grm: None,
        })
    }

    /// Take rank `rank`'s stdout, if the command made it a pipe.
    pub fn take_stdout(&mut self, rank: usize) -> Option<std::process::ChildStdout> {
        self.children.get_mut(rank)?.stdout.take()
    }

    /// Process IDs of the ranks.
    pub fn pids(&self) -> Vec<u32> {
        self.children.iter().map(|c| c.id()).collect()
    }

    /// Wait for every rank; when one fails or the deadline passes, kill the rest.
    pub fn wait(mut self, timeout: Duration) -> JobOutcome {
        let deadline = Instant::now() + timeout;
        let n = self.children.len();
        let mut statuses: Vec<Option<ExitStatus>> = vec![None; n];
        let mut timed_out = false;
        loop {
            let mut running = 0;
            let mut failed = false;
            for (i, c) in self.children.iter_mut().enumerate() {
                if statuses[i].is_some() {
                    continue;
                }
                match c.try_wait() {
                    Ok(Some(s)) => {
                        failed |= !s.success();
                        statuses[i] = Some(s);
                    }
                    Ok(None) => running += 1,
                    Err(_) => running += 1,
                }
            }
            if running == 0 {
                break;
            }
            if failed || Instant::now() > deadline {
                timed_out = !failed;
                self.kill_all();
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        JobOutcome {
            statuses,
            timed_out,
        }
    }

    fn kill_all(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for LocalJob {
    fn drop(&mut self) {
        for c in &mut self.children {
            if let Ok(None) = c.try_wait() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}
