//! fmrun: start an fm job on this host with one command.
//!
//! `fmrun -n 4 ./prog args…` starts a resource manager inside itself (or uses
//! `--grm ADDR`), registers the job, starts the processes with the
//! environment `fm` reads (FM_GRM, FM_JOB_TOKEN, FM_RANK, FM_SIZE, FM_NET),
//! forwards their output line by line with a rank prefix, and watches them:
//! the first rank to fail — by exit status, by signal, or as the GRM reports —
//! stops the whole job within two seconds, and the job's exit status is that
//! rank's. Ctrl-C does the same. Nothing is left in the segment directory.

mod output;
mod signals;

use clap::Parser;
use fm_devices::sys;
use fm_grm::{Event, Grm, GrmOptions, LauncherLink};
use std::io::{IsTerminal, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Child, Command, ExitCode, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

#[derive(Parser)]
#[command(
    about = "Run an fm job: N processes of PROGRAM on this host",
    trailing_var_arg = true
)]
struct Cli {
    /// Number of processes.
    #[arg(short = 'n', long = "np")]
    n: u32,
    /// Devices: auto, null (desktop-only: no network between hosts), or a
    /// list such as self,shmem,nic,ethernet,null.
    #[arg(long, default_value = "auto")]
    net: String,
    /// Print each rank's destination device table once the job has started.
    #[arg(long)]
    show_table: bool,
    /// Use the resource manager at this address instead of starting one.
    #[arg(long, value_name = "HOST:PORT")]
    grm: Option<String>,
    /// Bind rank i to CPU i: `core`, or `none`. Default: core when the
    /// processes fit on the CPUs, none when oversubscribed.
    #[arg(long)]
    bind: Option<Bind>,
    /// Stop the job after this many seconds.
    #[arg(long, value_name = "SECONDS")]
    timeout: Option<u64>,
    /// Hosts and their process counts: `a:2,b:2`, or `a,b` to share -n
    /// evenly. Ranks go to hosts in order (block distribution); each rank's
    /// FM_HOST is its host.
    #[arg(long, value_name = "HOST[:N],...")]
    hosts: Option<String>,
    /// How to start a rank on its host: a command template where `{host}`
    /// is replaced (`ssh {host}`, `ip netns exec {host}`), or `local` to run
    /// every rank here as if on its host (testing multi-host jobs on one machine).
    #[arg(long, default_value = "ssh {host}", value_name = "TEMPLATE")]
    rsh: String,
    /// Where the embedded GRM listens; ranks on other hosts must reach it.
    #[arg(long, default_value = "127.0.0.1:0", value_name = "IP:PORT")]
    grm_listen: std::net::SocketAddr,
    /// The program and its arguments.
    #[arg(required = true, value_name = "PROGRAM ARGS")]
    command: Vec<String>,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Bind {
    Core,
    None,
}

/// After SIGTERM, ranks get this long before SIGKILL.
const TERM_GRACE: Duration = Duration::from_millis(700);
const TICK: Duration = Duration::from_millis(10);

fn main() -> ExitCode {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(
            // The embedded GRM's own account of a death repeats fmrun's.
            std::env::var("FM_LOG").unwrap_or_else(|_| "warn,fm_grm=error".into()),
        ))
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(msg) => {
            eprintln!("fmrun: {msg}");
            ExitCode::from(2)
        }
    }
}

fn run(cli: Cli) -> Result<u8, String> {
    if cli.n == 0 || cli.n > fm_grm::proto::MAX_JOB {
        return Err(format!(
            "-n must be 1 to {}, not {}",
            fm_grm::proto::MAX_JOB,
            cli.n
        ));
    }
    fm::Net::parse(&cli.net).map_err(|e| format!("--net {}: {e}", cli.net))?;
    let program = cli.command[0].clone();
    let shm_dir = PathBuf::from(std::env::var("FM_SHM_DIR").unwrap_or_else(|_| "/dev/shm".into()));

    signals::install();
    // The embedded resource manager lives as long as the job.
    let embedded = match &cli.grm {
        Some(_) => None,
        None => Some(
            Grm::start(GrmOptions {
                listen: cli.grm_listen,
                ..GrmOptions::default()
            })
            .map_err(|e| {
                format!(
                    "cannot start the resource manager on {}: {e}",
                    cli.grm_listen
                )
            })?,
        ),
    };
    let addr = match (&cli.grm, &embedded) {
        (Some(a), _) => a.clone(),
        (None, Some(g)) => g.addr().to_string(),
        (None, None) => unreachable!("one of the two is set"),
    };
    let token = fm_grm::client::new_token();
    let (tx, rx) = mpsc::channel::<Event>();
    let link = LauncherLink::register(&addr, &token, cli.n, &program, move |e| {
        let _ = tx.send(e);
    })
    .map_err(|e| e.to_string())?;
    tracing::debug!(key = %link.job_key, %addr, "fmrun: job registered");

    let hosts = match &cli.hosts {
        Some(h) => Some(place(h, cli.n)?),
        None => None,
    };
    let cpus = sys::cpus_allowed();
    let bind = if hosts.is_some() {
        Bind::None
    } else {
        cli.bind.unwrap_or(if cli.n as usize <= cpus {
            Bind::Core
        } else {
            Bind::None
        })
    };
    let mut out = output::Forwarder::new(cli.n);
    let mut ranks: Vec<Rank> = Vec::with_capacity(cli.n as usize);
    for r in 0..cli.n {
        let host = hosts.as_ref().map(|h| h[r as usize].as_str());
        match spawn(&cli, r, host, &addr, &token, cpus, bind) {
            Ok(mut child) => {
                out.attach(r, child.stdout.take(), child.stderr.take());
                ranks.push(Rank {
                    child,
                    status: None,
                });
            }
            Err(e) => {
                let mut job = Job::new(ranks, out, cli.n, cli.show_table);
                job.fail(format!("cannot start {program:?}: {e}"), 127);
                return Ok(job.finish(&link, &shm_dir));
            }
        }
    }
    let mut job = Job::new(ranks, out, cli.n, cli.show_table);
    let deadline = cli.timeout.map(|s| Instant::now() + Duration::from_secs(s));
    while !job.all_exited() {
        // Everything the GRM said first: it names the rank that died.
        if let Ok(e) = rx.recv_timeout(TICK) {
            job.on_grm(e);
            while let Ok(e) = rx.try_recv() {
                job.on_grm(e);
            }
        }
        job.reap();
        if let Some(sig) = signals::take() {
            if job.stopping.is_some() {
                // A second Ctrl-C: no more grace.
                job.kill_all(libc::SIGKILL);
            }
            job.fail(
                format!("interrupted by {}", signals::name(sig)),
                128 + sig as u8,
            );
        }
        if deadline.is_some_and(|d| Instant::now() > d) && job.stopping.is_none() {
            job.fail(
                format!("the job ran past --timeout {} s", cli.timeout.unwrap_or(0)),
                124,
            );
        }
        job.progress();
        job.escalate();
    }
    Ok(job.finish(&link, &shm_dir))
}

/// Rank i's host, from `a:2,b:2` or `a,b` (block distribution).
fn place(spec: &str, n: u32) -> Result<Vec<String>, String> {
    let mut hosts: Vec<(String, Option<u32>)> = Vec::new();
    for part in spec.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (h, c) = match part.rsplit_once(':') {
            Some((h, c)) => (
                h,
                Some(
                    c.parse::<u32>()
                        .map_err(|_| format!("--hosts: {part:?}: the count is not a number"))?,
                ),
            ),
            None => (part, None),
        };
        if h.is_empty() {
            return Err(format!("--hosts: {part:?} names no host"));
        }
        hosts.push((h.to_string(), c));
    }
    if hosts.is_empty() {
        return Err("--hosts names no host".into());
    }
    let counted: u32 = hosts.iter().filter_map(|(_, c)| *c).sum();
    let uncounted = hosts.iter().filter(|(_, c)| c.is_none()).count() as u32;
    let each = match uncounted {
        0 => 0,
        u => n.saturating_sub(counted).div_ceil(u),
    };
    let mut out = Vec::with_capacity(n as usize);
    for (h, c) in &hosts {
        for _ in 0..c.unwrap_or(each) {
            if out.len() < n as usize {
                out.push(h.clone());
            }
        }
    }
    if out.len() != n as usize || (uncounted == 0 && counted != n) {
        return Err(format!(
            "--hosts {spec} places {} processes but -n is {n}",
            counted.max(out.len() as u32)
        ));
    }
    Ok(out)
}

fn spawn(
    cli: &Cli,
    rank: u32,
    host: Option<&str>,
    addr: &str,
    token: &str,
    cpus: usize,
    bind: Bind,
) -> std::io::Result<Child> {
    let mut env: Vec<(&str, String)> = vec![
        ("FM_GRM", addr.to_string()),
        ("FM_JOB_TOKEN", token.to_string()),
        ("FM_RANK", rank.to_string()),
        ("FM_SIZE", cli.n.to_string()),
        ("FM_NET", cli.net.clone()),
        ("FM_CPUS", cpus.to_string()),
    ];
    if let Some(h) = host {
        env.push(("FM_HOST", h.to_string()));
    }
    let mut cmd = match host {
        Some(h) if cli.rsh != "local" => {
            // Through the remote shell: the environment goes on the command line.
            let mut words = cli.rsh.split_whitespace().map(|w| w.replace("{host}", h));
            let mut c = Command::new(words.next().unwrap_or_else(|| "ssh".into()));
            c.args(words).arg("env");
            for (k, v) in &env {
                c.arg(format!("{k}={v}"));
            }
            // Settings of this shell that ranks read (FM_SHM_DIR, FM_FAULTS, ...).
            for (k, v) in std::env::vars().filter(|(k, _)| k.starts_with("FM_")) {
                if !env.iter().any(|(e, _)| *e == k) {
                    c.arg(format!("{k}={v}"));
                }
            }
            c.args(&cli.command);
            c
        }
        _ => {
            let mut c = Command::new(&cli.command[0]);
            c.args(&cli.command[1..])
                .envs(env.iter().map(|(k, v)| (*k, v)));
            c
        }
    };
    cmd.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Like mpirun: standard input goes to rank 0 only.
        .stdin(if rank == 0 {
            Stdio::inherit()
        } else {
            Stdio::null()
        });
    let cpu = (bind == Bind::Core).then_some(rank as usize % cpus.max(1));
    // SAFETY: only async-signal-safe system calls between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            // Its own process group: Ctrl-C reaches fmrun, which stops the
            // job in order, and a rank's helpers are stopped with it.
            libc::setpgid(0, 0);
            // Never outlive fmrun, even one killed by SIGKILL.
            sys::die_with_parent();
            if let Some(cpu) = cpu {
                let _ = sys::pin_to_cpu(cpu);
            }
            Ok(())
        });
    }
    cmd.spawn()
}

struct Rank {
    child: Child,
    status: Option<ExitStatus>,
}

/// The job as fmrun sees it.
struct Job {
    ranks: Vec<Rank>,
    out: output::Forwarder,
    size: u32,
    /// First failure: its message and the exit status it gives the job.
    failure: Option<(String, u8)>,
    stopping: Option<Instant>,
    killed: bool,
    started: Instant,
    joined: u32,
    progress_shown: bool,
    last_progress: Option<Instant>,
    show_table: bool,
    tables: Vec<Option<String>>,
}

impl Job {
    fn new(ranks: Vec<Rank>, out: output::Forwarder, size: u32, show_table: bool) -> Job {
        Job {
            ranks,
            out,
            size,
            failure: None,
            stopping: None,
            killed: false,
            started: Instant::now(),
            joined: 0,
            progress_shown: false,
            last_progress: None,
            show_table,
            tables: vec![None; size as usize],
        }
    }

    fn all_exited(&self) -> bool {
        self.ranks.iter().all(|r| r.status.is_some())
    }

    /// Collect exit statuses; the first failing rank fails the job. Of ranks
    /// found dead in the same pass, one killed by a signal is the cause and
    /// the others (which saw the job end under them) are not.
    fn reap(&mut self) {
        let mut blame: Option<(usize, ExitStatus)> = None;
        for i in 0..self.ranks.len() {
            if self.ranks[i].status.is_some() {
                continue;
            }
            if let Ok(Some(s)) = self.ranks[i].child.try_wait() {
                self.ranks[i].status = Some(s);
                let better = match blame {
                    None => true,
                    Some((_, b)) => b.signal().is_none() && s.signal().is_some(),
                };
                if !s.success() && better {
                    blame = Some((i, s));
                }
            }
        }
        if let Some((i, s)) = blame {
            self.blame(i, s);
        }
    }

    fn blame(&mut self, rank: usize, s: ExitStatus) {
        if self.stopping.is_none() {
            let pid = self.ranks[rank].child.id();
            let (what, code) = describe_status(s);
            self.fail(format!("rank {rank} (pid {pid}) {what}"), code);
        }
    }

    fn on_grm(&mut self, e: Event) {
        match e.clone() {
            Event::Progress { joined, .. } => self.joined = joined,
            Event::RankReady { rank, table } => {
                if let Some(t) = self.tables.get_mut(rank as usize) {
                    *t = Some(table);
                }
                if self.show_table && self.tables.iter().all(Option::is_some) {
                    let mut o = std::io::stdout().lock();
                    for t in &self.tables {
                        let _ = writeln!(o, "{}", t.as_deref().unwrap_or("").trim_end());
                    }
                    let _ = o.flush();
                    self.show_table = false;
                }
            }
            Event::PeerDied { rank, .. } if self.stopping.is_none() => {
                // The process's own exit status says more than the GRM can:
                // give it a moment to be reaped.
                let until = Instant::now() + Duration::from_millis(200);
                let r = rank as usize;
                while r < self.ranks.len() && Instant::now() < until {
                    if let Some(s) = self.ranks[r].status {
                        return self.blame(r, s);
                    }
                    if let Ok(Some(s)) = self.ranks[r].child.try_wait() {
                        self.ranks[r].status = Some(s);
                        return self.blame(r, s);
                    }
                    std::thread::sleep(Duration::from_millis(2));
                }
                self.fail(e.describe(), 1);
            }
            Event::Ended(reason) if reason != "completed" && self.stopping.is_none() => {
                self.fail(format!("the job ended: {reason}"), 1);
            }
            Event::Lost(reason) if self.stopping.is_none() => self.fail(reason, 1),
            _ => {}
        }
    }

    /// Record the first failure and start stopping every rank.
    fn fail(&mut self, what: String, code: u8) {
        if self.failure.is_none() {
            self.out.flush();
            eprintln!("fmrun: {what}; stopping the job");
            self.failure = Some((what, code.max(1)));
        }
        if self.stopping.is_none() {
            self.stopping = Some(Instant::now());
            self.kill_all(libc::SIGTERM);
        }
    }

    fn kill_all(&mut self, sig: i32) {
        for r in &self.ranks {
            if r.status.is_none() {
                // SAFETY: signalling the rank's own process group.
                unsafe {
                    libc::kill(-(r.child.id() as i32), sig);
                }
            }
        }
        if sig == libc::SIGKILL {
            self.killed = true;
        }
    }

    /// Ranks that ignore SIGTERM get SIGKILL after the grace period.
    fn escalate(&mut self) {
        if let Some(t) = self.stopping {
            if !self.killed && t.elapsed() > TERM_GRACE {
                self.kill_all(libc::SIGKILL);
            }
        }
    }

    /// A progress line while a job is slow to start or large.
    fn progress(&mut self) {
        let all = self.joined >= self.size;
        let now = Instant::now();
        let elapsed = self.started.elapsed();
        if !all && self.stopping.is_none() && (self.size >= 32 || elapsed > Duration::from_secs(1))
        {
            let tty = std::io::stderr().is_terminal();
            let every = if tty {
                Duration::from_millis(100)
            } else {
                Duration::from_secs(1)
            };
            if self.last_progress.is_none_or(|t| now - t >= every) {
                self.last_progress = Some(now);
                self.progress_shown = true;
                let line = format!(
                    "fmrun: starting {} processes: {}/{} joined ({:.1} s)",
                    self.size,
                    self.joined,
                    self.size,
                    elapsed.as_secs_f64()
                );
                if tty {
                    eprint!("\r{line}");
                } else {
                    eprintln!("{line}");
                }
            }
        } else if all && self.progress_shown {
            self.progress_shown = false;
            if std::io::stderr().is_terminal() {
                eprintln!();
            }
            eprintln!(
                "fmrun: all {} processes joined in {:.1} s",
                self.size,
                elapsed.as_secs_f64()
            );
        }
    }

    /// Wait for the output, end the job at the GRM, remove what is left in
    /// the segment directory, and return the job's exit status.
    fn finish(mut self, link: &LauncherLink, shm_dir: &std::path::Path) -> u8 {
        let give_up = Instant::now() + Duration::from_secs(2);
        while !self.all_exited() && Instant::now() < give_up {
            self.reap();
            self.escalate();
            std::thread::sleep(TICK);
        }
        self.out.finish(Duration::from_millis(500));
        let removed = fm_devices::shmem::segment::remove_job_segments(shm_dir, link.job_key);
        if removed > 0 {
            tracing::info!(removed, "fmrun: removed the job's shared segments");
        }
        self.failure.map_or(0, |(_, c)| c)
    }
}

/// "exited with status 3" / "was killed by signal 9 (SIGKILL)", and the
/// status a shell would give.
fn describe_status(s: ExitStatus) -> (String, u8) {
    if let Some(c) = s.code() {
        (format!("exited with status {c}"), c.clamp(1, 255) as u8)
    } else if let Some(sig) = s.signal() {
        (
            format!("was killed by signal {sig} ({})", signals::name(sig)),
            (128 + sig).min(255) as u8,
        )
    } else {
        (format!("ended with {s}"), 1)
    }
}
