//! A real single-host Slurm cluster (root only): slurmctld and slurmd from
//! Debian's packages, with their configuration, state and logs in a test
//! directory and ports of their own, stopped when dropped.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub struct Slurm {
    dir: PathBuf,
    pub conf: PathBuf,
}

/// A TCP port nobody listens on now.
fn free_port() -> Option<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").ok()?;
    Some(l.local_addr().ok()?.port())
}

impl Slurm {
    /// Start the daemons in `dir`, or `None` (after saying why `test` is
    /// skipped) when not root or Slurm is not installed.
    pub fn start(test: &str, dir: &Path) -> Option<Slurm> {
        if !crate::is_root() {
            eprintln!("SKIPPED {test}: slurmd runs as root");
            return None;
        }
        let installed = ["/usr/sbin/slurmctld", "/usr/sbin/slurmd"]
            .iter()
            .all(|p| Path::new(p).exists())
            && Command::new("salloc").arg("--version").output().is_ok();
        if !installed {
            eprintln!("SKIPPED {test}: Slurm is not installed (apt-get install slurmctld slurmd slurm-client)");
            return None;
        }
        match Slurm::launch(dir) {
            Ok(s) => Some(s),
            Err(e) => panic!("{test}: cannot start Slurm: {e}"),
        }
    }

    fn launch(dir: &Path) -> Result<Slurm, String> {
        let host = Command::new("hostname")
            .arg("-s")
            .output()
            .map_err(|e| format!("hostname: {e}"))?;
        let host = String::from_utf8_lossy(&host.stdout).trim().to_string();
        let (ctld, slurmd) = (
            free_port().ok_or("no free port")?,
            free_port().ok_or("no free port")?,
        );
        for d in ["state", "spool"] {
            std::fs::create_dir_all(dir.join(d)).map_err(|e| e.to_string())?;
        }
        let p = |f: &str| dir.join(f).display().to_string();
        // No authentication service (munge) to run: auth/none, one host, root.
        let conf = format!(
            "ClusterName=fmtest\nSlurmctldHost={host}\nSlurmctldPort={ctld}\nSlurmdPort={slurmd}\n\
             SlurmUser=root\nSlurmdUser=root\nAuthType=auth/none\nCredType=cred/none\n\
             StateSaveLocation={}\nSlurmdSpoolDir={}\nSlurmctldPidFile={}\nSlurmdPidFile={}\n\
             SlurmctldLogFile={}\nSlurmdLogFile={}\nProctrackType=proctrack/pgid\nTaskPlugin=task/none\n\
             SelectType=select/cons_tres\nSelectTypeParameters=CR_CPU\nMpiDefault=none\n\
             ReturnToService=2\nJobAcctGatherType=jobacct_gather/none\n\
             AccountingStorageType=accounting_storage/none\nSlurmdParameters=config_overrides\n\
             NodeName={host} CPUs=8 State=UNKNOWN\n\
             PartitionName=fm Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES\n",
            p("state"),
            p("spool"),
            p("slurmctld.pid"),
            p("slurmd.pid"),
            p("slurmctld.log"),
            p("slurmd.log"),
        );
        let path = dir.join("slurm.conf");
        std::fs::write(&path, conf).map_err(|e| e.to_string())?;
        let s = Slurm {
            dir: dir.to_path_buf(),
            conf: path,
        };
        for (daemon, extra) in [("slurmctld", &["-i"][..]), ("slurmd", &[][..])] {
            let ok = Command::new(format!("/usr/sbin/{daemon}"))
                .arg("-f")
                .arg(&s.conf)
                .args(extra)
                .env("SLURM_CONF", &s.conf)
                .stdin(Stdio::null())
                .status()
                .is_ok_and(|st| st.success());
            if !ok {
                return Err(format!("{daemon} did not start: {}", s.log(daemon)));
            }
        }
        // Up when the node is idle.
        let until = Instant::now() + Duration::from_secs(30);
        loop {
            let o = s.command("sinfo").args(["-h", "-o", "%T"]).output();
            let state = o.map_or_else(
                |e| e.to_string(),
                |o| String::from_utf8_lossy(&o.stdout).trim().to_string(),
            );
            if state == "idle" {
                return Ok(s);
            }
            if Instant::now() > until {
                return Err(format!(
                    "the node is {state:?}, not idle: {}",
                    s.log("slurmctld")
                ));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn log(&self, daemon: &str) -> String {
        std::fs::read_to_string(self.dir.join(format!("{daemon}.log"))).unwrap_or_default()
    }

    /// A Slurm client command (salloc, srun, sinfo) for this cluster.
    pub fn command(&self, program: &str) -> Command {
        let mut c = Command::new(program);
        c.env("SLURM_CONF", &self.conf);
        c
    }

    fn pid(&self, daemon: &str) -> Option<i32> {
        std::fs::read_to_string(self.dir.join(format!("{daemon}.pid")))
            .ok()?
            .trim()
            .parse()
            .ok()
    }
}

impl Drop for Slurm {
    fn drop(&mut self) {
        for daemon in ["slurmd", "slurmctld"] {
            if let Some(pid) = self.pid(daemon) {
                // SAFETY: signalling a daemon this test started.
                unsafe {
                    libc::kill(pid, libc::SIGTERM);
                }
                let until = Instant::now() + Duration::from_secs(5);
                while fm_platform::pid_alive(pid as u32) && Instant::now() < until {
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        }
    }
}
