//! fmrun: start an fm job with one command.
//!
//! `fmrun -n 4 ./prog args…` starts a resource manager inside itself (or uses
//! `--grm ADDR`), registers the job, starts the processes with the
//! environment `fm` reads (FM_GRM, FM_JOB_TOKEN, FM_RANK, FM_SIZE, FM_NET),
//! forwards their output line by line with a rank prefix, and watches them:
//! the first rank to fail — by exit status, by signal, or as the GRM reports —
//! stops the whole job within two seconds, and the job's exit status is that
//! rank's. Ctrl-C does the same. Nothing is left in the segment directory.
//!
//! Ranks go to other hosts with `--hosts`, `--hostfile` or `--topology`
//! (through OpenSSH or another remote shell), and inside a Slurm allocation
//! through srun (see `plan` and `remote`).

mod agent;
mod output;
mod plan;
mod remote;
mod settings;
mod signals;

use clap::Parser;
use fm_composite::table_report;
use fm_grm::{Event, Grm, GrmOptions, LauncherLink};
use fm_launcher::libraries;
use fm_platform as sys;
use plan::{Mode, Plan};
use remote::RemoteShell;
use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Child, Command, ExitCode, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

#[derive(Parser)]
#[command(
    name = "fmrun",
    about = "Run an fm job: N processes of PROGRAM on this host, on other hosts, or across clusters",
    version,
    trailing_var_arg = true
)]
pub struct Cli {
    /// Number of processes. Default: the slots of --hostfile or
    /// --topology, or the tasks of the Slurm allocation.
    #[arg(short = 'n', long = "np")]
    n: Option<u32>,
    /// Devices: auto, null (desktop-only: no network between hosts), or a
    /// list such as self,shmem,nic,ethernet,null. With --topology: auto (the
    /// topology's networks) or null. Defaults to FM_NET, else auto.
    #[arg(long, env = fm::settings::NET.var, default_value = "auto")]
    net: String,
    /// Print each rank's destination device table once the job has
    /// started: in full (a line per destination) up to 16 ranks, as runs
    /// of ranks per device (a line per rank) above; `--show-table=full` or
    /// `--show-table=runs` to choose.
    #[arg(long, value_name = "FORMAT", num_args = 0..=1, require_equals = true,
          default_missing_value = "auto")]
    show_table: Option<TableFormat>,
    /// At the end, print each rank's counters: messages, bytes and credit
    /// stalls; each device's packets, bytes and drops; the reliable
    /// layer's retransmits and drops by reason. `--stats` prints a line
    /// per rank; `--stats=json` an object per rank and line.
    #[arg(long, value_name = "FORMAT", num_args = 0..=1, require_equals = true,
          default_missing_value = "table")]
    stats: Option<StatsFormat>,
    /// More ranks than this host's CPUs is meant: no warning.
    #[arg(long)]
    oversubscribe: bool,
    /// Give every rank this variable, as mpirun's `-x`: `-x VAR=VALUE`, or
    /// `-x VAR` for fmrun's own value. Reaches ranks on other hosts too
    /// (which otherwise get only the job's and the `FM_*` variables).
    #[arg(short = 'x', value_name = "VAR[=VALUE]", value_parser = parse_export)]
    export: Vec<(String, String)>,
    /// Forward the ranks' lines as they are, without the `[rank] ` prefix
    /// (for output another program parses, such as `fm-bench --json`).
    #[arg(long)]
    no_prefix: bool,
    /// Do not put fm's MPI library (libmpich.so.12, MPICH's ABI) first on
    /// the ranks' library path. By default a program built against MPICH
    /// runs on fm's MPI (docs/MPI.md).
    #[arg(long)]
    no_mpi_lib: bool,
    /// Write each rank's output to DIR/rank.N/stdout and DIR/rank.N/stderr
    /// instead of the terminal.
    #[arg(long, value_name = "DIR")]
    output_filename: Option<PathBuf>,
    /// Use the resource manager at this address instead of starting one.
    #[arg(long, value_name = "HOST:PORT")]
    grm: Option<String>,
    /// Bind rank i to CPU i: `core`, or `none`. Default: core when the
    /// processes fit on the CPUs, none when oversubscribed.
    #[arg(long, visible_alias = "bind-to")]
    bind: Option<Bind>,
    /// Stop the job after this long: `90` or `90s`, `500ms`, `2m`, `1h`;
    /// the ranks still running are named.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    timeout: Option<Duration>,
    /// A rank (or fmrun) silent for this long is declared dead ("sent no
    /// heartbeat"), and a rank that hears nothing from fmrun's resource
    /// manager for this long ends itself. Everyone speaks every second.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration,
          env = settings::HEARTBEAT_TIMEOUT.var, default_value = "10s")]
    heartbeat_timeout: Duration,
    /// Hosts and their process counts: `a:2,b:2`, or `a,b` to share -n
    /// evenly. Ranks go to hosts in order (block distribution); each rank's
    /// FM_HOST is its host.
    #[arg(long, short = 'H', visible_alias = "host", value_name = "HOST[:N],...")]
    hosts: Option<String>,
    /// How ranks are laid on the hosts (mpirun's --map-by): `slot` fills
    /// each host's slots before the next (block, the default), `core` the
    /// same, `node` deals ranks to the hosts in turn (round-robin), each up
    /// to its slots.
    #[arg(long, value_name = "POLICY", default_value = "slot")]
    map_by: MapBy,
    /// Say each rank's binding (CPU, or none) on stderr as it starts
    /// (mpirun's --report-bindings).
    #[arg(long)]
    report_bindings: bool,
    /// Begin every forwarded line with the time since the job started, in
    /// seconds (mpirun's --timestamp-output).
    #[arg(long)]
    timestamp_output: bool,
    /// A file of hosts, one per line: `NAME [slots=N] [ranks=0,1]
    /// [address=ADDR]` (docs/TOPOLOGY.md).
    #[arg(long, value_name = "FILE")]
    hostfile: Option<PathBuf>,
    /// A topology: clusters, their hosts and networks, and the network that
    /// joins them (docs/TOPOLOGY.md); it sets each rank's device table.
    #[arg(long, value_name = "FILE.toml")]
    topology: Option<PathBuf>,
    /// How to start a rank on its host: a command template where `{host}`
    /// is replaced (`ssh {host}`, `ip netns exec {host}`), or `local` to run
    /// every rank here as if on its host (testing multi-host jobs on one machine).
    #[arg(
        long,
        env = settings::RSH.var,
        default_value = "ssh -o BatchMode=yes {host}",
        value_name = "TEMPLATE"
    )]
    rsh: String,
    /// Where the embedded GRM listens. Default: loopback, and when ranks
    /// run elsewhere also the address this host uses towards each of their
    /// hosts (each rank is given that one), never every interface.
    #[arg(long, value_name = "IP:PORT")]
    grm_listen: Option<SocketAddr>,
    /// Inside a Slurm allocation, start the ranks here instead of with srun.
    #[arg(long)]
    no_srun: bool,
    /// Start a remote host's ranks through one host agent (`fmrun
    /// --host-agent` there, through the remote shell: one remote start per
    /// host): `auto` for a host of 8 ranks or more, `always`, or `never`
    /// (one remote start per rank). The agent is this fmrun's own path,
    /// which must exist on every host, as the program's must. It joins its
    /// host's ranks at the resource manager as one (one connection and
    /// heartbeat per host) and passes the node map on to other agents.
    #[arg(long, value_name = "WHEN", default_value = "auto")]
    host_agents: HostAgents,
    /// The program and its arguments.
    #[arg(required = true, value_name = "PROGRAM ARGS")]
    command: Vec<String>,
}

/// When a remote host's ranks start through a host agent.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum HostAgents {
    /// For a host of [`AGENT_FROM`] ranks or more.
    Auto,
    Always,
    Never,
}

/// `--host-agents auto`: hosts of this many ranks get an agent (an sshd
/// takes up to `MaxStartups`, 10 by default, connections at once).
const AGENT_FROM: usize = 8;

/// How `--stats` prints each rank's counters.
#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum StatsFormat {
    /// A line per rank: the counters that are not zero, by layer and device.
    Table,
    /// A JSON object per rank and line, every counter.
    Json,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum TableFormat {
    /// In full up to 16 ranks, as runs above.
    Auto,
    /// A line per destination: rank, host, device.
    Full,
    /// A line per rank: its destinations as runs of ranks per device.
    Runs,
}

impl TableFormat {
    /// Whether a job of `n` ranks gets runs.
    fn runs(self, n: u32) -> bool {
        match self {
            TableFormat::Auto => n > 16,
            TableFormat::Full => false,
            TableFormat::Runs => true,
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Bind {
    Core,
    None,
}

/// `--map-by`: how ranks are laid on hosts.
#[derive(Clone, Copy, PartialEq, Eq, Debug, clap::ValueEnum)]
pub enum MapBy {
    /// Fill each host's slots in order (block).
    Slot,
    /// As slot: one rank per core, hosts filled in order.
    Core,
    /// Deal ranks to the hosts in turn (round-robin).
    Node,
}

/// fmrun(1) beyond its options.
const MAN_PAGE: fm_clidocs::Page = fm_clidocs::Page {
    examples: &[
        ("fmrun -n 8 ./my-program args", "8 processes of my-program on this host"),
        ("fmrun -n 8 -H n1:4,n2:4 ./my-program", "4 on each of two hosts, started through ssh"),
        ("fmrun --hostfile hosts --map-by node ./my-program", "the hosts of a file, ranks dealt to them in turn"),
        ("salloc -n 8 fmrun ./my-program", "inside a Slurm allocation: the ranks start through srun"),
        ("fmrun -n 2 /usr/bin/NPmpich2", "a program built against MPICH, on fm's MPI library"),
        ("fmrun -n 4 --hosts a,b --rsh local ./my-program", "two hosts on this machine, to try the network path"),
    ],
    exit_status: &[
        ("0", "every rank exited 0"),
        ("1-255", "the first failing rank's status (128 + the signal for a rank killed by one)"),
        ("2", "a bad command line, a bad setting, or a program built against MPICH without fm's MPI library"),
        ("124", "the job ran past --timeout"),
        ("127", "the program cannot be started"),
        ("130", "the job was interrupted (Ctrl-C)"),
    ],
    environment: &[
        (settings::RSH.var, "as --rsh"),
        (settings::HEARTBEAT_TIMEOUT.var, "as --heartbeat-timeout"),
        (fm::settings::NET.var, "as --net"),
        ("FM_*", "every other fm setting reaches every rank; with every rank on this host, fmrun checks them before any starts (docs/CONFIG.md; fm-info config lists them)"),
    ],
    see_also: &["fm-info(1)", "fm-grm(1)", "fm-bench(1)", "fm-mpicc(1)"],
};

/// After SIGTERM, ranks get this long before SIGKILL.
const TERM_GRACE: Duration = Duration::from_millis(700);
const TICK: Duration = Duration::from_millis(10);
/// How long a rank's failing exit waits for the resource manager to name
/// another rank as the one that ended the job ([`Job::reap`]).
const BLAME_GRACE: Duration = Duration::from_millis(500);
/// How long fmrun waits for a host agent that reported a failed rank to
/// end with that rank's status ([`Job::on_grm`]).
const AGENT_STATUS_WAIT: Duration = Duration::from_secs(3);

fn main() -> ExitCode {
    // On a remote host, started by an fmrun: no options of fmrun's own.
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--host-agent") {
        return agent::run(&args[2..]);
    }
    // The embedded GRM's own account of a death repeats fmrun's.
    fm_clidocs::generate_if_asked(<Cli as clap::CommandFactory>::command, &MAN_PAGE);
    fm::init_logging_or("warn,fm_grm=error");
    let cli = match Cli::try_parse_from(mpirun_spelling(std::env::args_os())) {
        Ok(cli) => cli,
        Err(e) if e.kind() == clap::error::ErrorKind::UnknownArgument => {
            // clap's advice ("use '-- --bogus'") is wrong for a launcher:
            // options after the program's name are the program's already.
            let arg = e
                .get(clap::error::ContextKind::InvalidArg)
                .map_or_else(String::new, |a| format!(" {a}"));
            eprintln!(
                "fmrun: unknown option{arg}: `fmrun --help` lists fmrun's options; \
                 a program's own options go after its name (fmrun -n 2 ./program --its-option)"
            );
            return ExitCode::from(2);
        }
        Err(e) => e.exit(),
    };
    match run(cli) {
        Ok(code) => ExitCode::from(code),
        Err(msg) => {
            eprintln!("fmrun: {msg}");
            ExitCode::from(2)
        }
    }
}

/// `-x VAR=VALUE`, or `-x VAR` for fmrun's own value of VAR.
fn parse_export(v: &str) -> Result<(String, String), String> {
    let (name, value) = match v.split_once('=') {
        Some((n, val)) => (n, Some(val.to_string())),
        None => (v, None),
    };
    let valid = (name.chars().next()).is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !valid {
        return Err(format!("{name:?} is not a variable name"));
    }
    let value = match value {
        Some(v) => v,
        None => std::env::var(name)
            .map_err(|_| format!("{name} is not set here (-x {name}=VALUE gives it a value)"))?,
    };
    Ok((name.to_string(), value))
}

/// `90`, `90s`, `1.5s`, `500ms`, `2m`, `1h`: a duration for `--timeout`.
fn parse_duration(v: &str) -> Result<Duration, String> {
    let v = v.trim();
    let split = v
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(v.len());
    let (num, unit) = v.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("{v:?} is not a duration such as 90s, 500ms, 2m"))?;
    let secs = match unit {
        "" | "s" => n,
        "ms" => n / 1e3,
        "m" | "min" => n * 60.0,
        "h" => n * 3600.0,
        _ => return Err(format!("{v:?}: unknown unit {unit:?} (ms, s, m, h)")),
    };
    Duration::try_from_secs_f64(secs)
        .ok()
        .filter(|d| !d.is_zero())
        .ok_or_else(|| format!("{v:?} is not a positive duration"))
}

/// fmrun's own settings (`FM_RSH`, `FM_SRUN`, …) are not the ranks': they
/// would read them as unknown settings.
fn without_fmrun_settings(c: &mut Command) {
    for s in settings::SETTINGS {
        c.env_remove(s.var);
    }
}

/// mpirun's `-np N` (and `-np=N`) is fmrun's `--np N`. clap takes `-np`
/// as `-n p`, so it is rewritten before parsing — among fmrun's own
/// options only: from the program on, arguments are the program's.
fn mpirun_spelling(args: impl IntoIterator<Item = std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    use clap::CommandFactory;
    let cmd = Cli::command();
    let takes_value = |a: &str| {
        cmd.get_arguments().any(|arg| {
            arg.get_action().takes_values()
                && !arg.is_positional()
                && (arg.get_long().is_some_and(|l| a == format!("--{l}"))
                    || arg.get_short().is_some_and(|s| a == format!("-{s}")))
        })
    };
    let mut out = Vec::new();
    let mut options = true;
    let mut value_next = false;
    for (i, a) in args.into_iter().enumerate() {
        let s = a.to_string_lossy().into_owned();
        if i == 0 || !options {
            out.push(a);
            continue;
        }
        if value_next {
            value_next = false;
        } else if s == "-np" {
            value_next = true;
            out.push("--np".into());
            continue;
        } else if let Some(v) = s.strip_prefix("-np=") {
            out.push(format!("--np={v}").into());
            continue;
        } else if s == "--" || !s.starts_with('-') {
            options = false;
        } else {
            value_next = takes_value(&s);
        }
        out.push(a);
    }
    out
}

// Long because it is a job's life in order — plan, GRM, registration,
// start, forward, watch, end, clean up — and each step hands the next the
// state it made; the steps themselves are the functions it calls.
#[allow(clippy::too_many_lines)]
fn run(cli: Cli) -> Result<u8, String> {
    let plan = plan::make(&cli)?;
    let n = plan.n;
    if n == 0 || n > fm_grm::proto::MAX_JOB {
        return Err(format!(
            "-n must be 1 to {}, not {n}",
            fm_grm::proto::MAX_JOB
        ));
    }
    let rsh = match plan.mode {
        Mode::Hosts if cli.rsh != "local" => Some(RemoteShell::parse(&cli.rsh)?),
        _ => None,
    };
    let elsewhere = rsh.is_some() || matches!(plan.mode, Mode::Slurm);
    let program = cli.command[0].clone();
    let shm_dir = fm::config::shm_dir().map_err(|e| e.to_string())?;
    let mpi_lib = match cli.no_mpi_lib {
        true => None,
        false => libraries::mpi_library_dir(),
    };
    if let Some(refusal) = libraries::refusal(&program, n, mpi_lib.as_deref(), cli.no_mpi_lib) {
        return Err(refusal);
    }
    // The settings every rank will read: a bad value stops the job here,
    // once, not in each rank — when every rank runs here, as fmrun would
    // read them (some depend on the host: FM_ETH_IFACES names its
    // interfaces; ranks elsewhere check those where they run). A misspelt
    // name is said once for the job (the ranks of a launched job do not
    // repeat it).
    if matches!(plan.mode, Mode::Here) {
        fm::config::check_settings().map_err(|e| {
            format!("{e} (no rank was started; `fm-info doctor` checks every setting)")
        })?;
    }
    let own = |var: &str| settings::SETTINGS.iter().any(|s| s.var == var);
    for var in fm::settings::unknown_in_env().iter().filter(|v| !own(v)) {
        eprintln!("fmrun: {}", fm::settings::unknown_warning(var));
    }

    signals::install();
    check_open_files(n, cli.grm.is_none());
    // The embedded resource manager lives as long as the job. When ranks
    // run elsewhere it listens on loopback and on the address this host
    // uses towards each of their hosts (what `GrmAddress::for_rank` hands
    // them), not on every interface.
    let listen = cli
        .grm_listen
        .unwrap_or(SocketAddr::from(([127, 0, 0, 1], 0)));
    let also_listen: Vec<IpAddr> = match (cli.grm_listen, elsewhere) {
        (None, true) => {
            let mut ips: Vec<IpAddr> = (plan.spots.iter())
                .map(|s| Some(s.target.as_str()))
                .chain(matches!(plan.mode, Mode::Slurm).then_some(None))
                .map(address_towards)
                .collect();
            ips.sort();
            ips.dedup();
            ips
        }
        _ => Vec::new(),
    };
    let embedded = match &cli.grm {
        Some(_) => None,
        None => Some(
            Grm::start(GrmOptions {
                listen,
                also_listen: also_listen.clone(),
                heartbeat_timeout: cli.heartbeat_timeout.max(Duration::from_secs(2)),
                ..GrmOptions::default()
            })
            .map_err(|e| format!("cannot start the resource manager on {listen}: {e}"))?,
        ),
    };
    let grm = match (&cli.grm, &embedded) {
        (Some(a), _) => GrmAddress::Given(a.clone()),
        (None, Some(g)) if !also_listen.is_empty() => GrmAddress::Routed(g.addr().port()),
        (None, Some(g)) => GrmAddress::Listening(g.addr()),
        (None, None) => unreachable!("one of the two is set"),
    };
    let token = fm_grm::client::new_token();
    let (tx, rx) = mpsc::channel::<Event>();
    let link = LauncherLink::register(&grm.for_launcher(), &token, n, &program, move |e| {
        let _ = tx.send(e);
    })
    .map_err(|e| e.to_string())?;
    tracing::debug!(key = %link.job_key, grm = %grm.for_launcher(), "fmrun: job registered");

    let cpus = sys::cpus_allowed();
    if matches!(plan.mode, Mode::Here) && n as usize > cpus && !cli.oversubscribe {
        eprintln!(
            "fmrun: {n} ranks on the {cpus} CPUs this host gives the job: oversubscribed, \
             so waiting ranks yield their CPU and messages are slower \
             (--oversubscribe says this is meant)"
        );
    }
    // Ranks on this host are bound by default when they fit its CPUs.
    // `--rsh local`'s "hosts" are this machine too, but share it with
    // whatever they simulate: bound only when asked (`--bind-to core`). A
    // remote host's ranks are the remote shell's business.
    let fits = if n as usize <= cpus {
        Bind::Core
    } else {
        Bind::None
    };
    let bind = match plan.mode {
        Mode::Here => cli.bind.unwrap_or(fits),
        Mode::Hosts if cli.rsh == "local" => cli.bind.unwrap_or(Bind::None),
        _ => Bind::None,
    };
    // One route lookup per host, not per rank.
    let mut grm_at: HashMap<Option<&str>, String> = HashMap::new();
    for t in plan
        .spots
        .iter()
        .map(|s| Some(s.target.as_str()))
        .chain([None])
    {
        grm_at.entry(t).or_insert_with(|| grm.for_rank(t));
    }
    let launch = Launch {
        cli: &cli,
        plan: &plan,
        rsh: rsh.as_ref(),
        grm_at: &grm_at,
        token: &token,
        mpi_lib,
        cpus,
        bind,
        locals: local_ranks(&plan.spots),
    };
    let mut out = output::Forwarder::new(
        n,
        !cli.no_prefix,
        cli.output_filename.clone(),
        cli.timestamp_output.then(Instant::now),
    );
    let mut procs: Vec<Proc> = Vec::new();
    let count = match plan.mode {
        Mode::Slurm => 1,
        _ => n,
    };
    let agents = launch.agents();
    // Per rank, the host agent that starts it (one pass, not a search per rank).
    let mut agent_of: Vec<Option<&(String, Vec<u32>)>> = vec![None; count as usize];
    for a in &agents {
        for &r in &a.1 {
            agent_of[r as usize] = Some(a);
        }
    }
    // The process that carries each rank a host agent starts: the agent's.
    let mut agent_proc: Vec<Option<usize>> = vec![None; count as usize];
    for r in 0..count {
        let started = match agent_of[r as usize] {
            // The host's agent starts with its first rank, for all of them.
            Some((target, ranks)) if ranks[0] == r => launch
                .spawn_agent(target, ranks)
                .map(|c| (c, format!("host agent on {target}"), Some(ranks))),
            Some(_) => continue,
            None => (launch.spawn(r)).map(|c| (c, format!("rank {r}"), None)),
        };
        match started {
            Ok((mut child, label, carried)) => {
                let labelled = carried.is_some();
                for &q in carried.into_iter().flatten() {
                    agent_proc[q as usize] = Some(procs.len());
                }
                match plan.mode {
                    Mode::Slurm => out.attach_labelled(child.stdout.take(), child.stderr.take()),
                    _ if labelled => out.attach_labelled(child.stdout.take(), child.stderr.take()),
                    _ => out.attach(r, child.stdout.take(), child.stderr.take()),
                }
                procs.push(Proc {
                    label: match plan.mode {
                        Mode::Slurm => "srun".into(),
                        _ => label,
                    },
                    child,
                    rank_pid: None,
                    status: None,
                });
            }
            Err(e) => {
                let mut job = Job::new(procs, out, n, cli.show_table.map(|f| f.runs(n)));
                job.fail(format!("cannot start {program:?}: {e}"), 127);
                return Ok(job.finish(&link, &shm_dir));
            }
        }
    }
    let mut job = Job::new(procs, out, n, cli.show_table.map(|f| f.runs(n)));
    // One process per rank: not srun, nor a host agent, for several.
    job.per_rank = !matches!(plan.mode, Mode::Slurm) && agents.is_empty();
    job.agent_proc = agent_proc;
    let deadline = cli.timeout.map(|t| Instant::now() + t);
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
            let limit = cli.timeout.unwrap_or_default();
            let running = job.still_running();
            job.fail(
                format!("the job ran past --timeout {limit:?}; still running: {running}"),
                124,
            );
        }
        job.progress();
        job.escalate();
    }
    // What a rank reports through the GRM (its table, its counters, which
    // rank ended the job) may still be on its way when the rank has
    // exited (a short program ends before the GRM has passed its table on).
    let awaits = |job: &Job| {
        (cli.stats.is_some() && job.stats.iter().any(Option::is_none))
            || (job.show_table.is_some() && job.tables.iter().any(Option::is_none))
            || (job.failure.is_none()
                && job
                    .pending
                    .is_some_and(|(_, _, t)| t.elapsed() < BLAME_GRACE))
    };
    let until = Instant::now() + Duration::from_secs(1);
    while awaits(&job) && Instant::now() < until {
        if let Ok(e) = rx.recv_timeout(TICK) {
            job.on_grm(e);
        }
    }
    let stats = std::mem::take(&mut job.stats);
    let code = job.finish(&link, &shm_dir);
    if let Some(format) = cli.stats {
        print_stats(&stats, format);
    }
    Ok(code)
}

/// Each rank's counters (`--stats`), after the job's own output.
fn print_stats(stats: &[Option<String>], format: StatsFormat) {
    let mut o = std::io::stdout().lock();
    for (rank, s) in stats.iter().enumerate() {
        let line = match (s, format) {
            (None, _) => {
                format!("fmrun: rank {rank} reported no counters (it did not end cleanly)")
            }
            (Some(json), StatsFormat::Json) => json.clone(),
            (Some(json), StatsFormat::Table) => stats_line(rank, json),
        };
        let _ = writeln!(o, "{line}");
    }
    let _ = o.flush();
}

/// `rank 0: fm messages_sent 4, …; shmem packets_sent 6, …; reliable
/// ethernet retransmits 1`: the counters that are not zero.
fn stats_line(rank: usize, json: &str) -> String {
    let Ok(v) = serde_json::from_str::<serde_json::Value>(json) else {
        return format!("rank {rank}: unreadable counters {json:?}");
    };
    let nonzero = |o: &serde_json::Value| -> Vec<String> {
        (o.as_object().into_iter().flatten())
            .filter(|(_, n)| n.as_u64().is_some_and(|n| n > 0))
            .map(|(k, n)| format!("{k} {n}"))
            .collect()
    };
    let mut parts = vec![format!("fm {}", nonzero(&v["fm"]).join(", "))];
    for (layer, prefix) in [("devices", ""), ("reliable", "reliable ")] {
        for (name, o) in v[layer].as_object().into_iter().flatten() {
            let c = nonzero(o);
            if !c.is_empty() {
                parts.push(format!("{prefix}{name} {}", c.join(", ")));
            }
        }
    }
    format!("rank {rank}: {}", parts.join("; "))
}

/// Descriptors fmrun holds per rank: the rank's output pipes, and with its
/// own resource manager the rank's connection and its writer's handle.
const FDS_PER_RANK: u64 = 2;
const FDS_PER_MEMBER: u64 = 2;

/// Raise the open-files limit to the hard limit, and say so when even that
/// cannot hold what `n` ranks need here (the job would fail to start one
/// rank or connection in, with a less clear error).
fn check_open_files(n: u32, own_grm: bool) {
    let per = FDS_PER_RANK + if own_grm { FDS_PER_MEMBER } else { 0 };
    let need = per * n as u64 + 64;
    let limit = sys::raise_open_files_limit();
    tracing::debug!(limit, need, "fmrun: open files");
    if need > limit {
        eprintln!(
            "fmrun: {n} ranks need about {need} open files in fmrun, and its hard limit here is \
             {limit} (`ulimit -Hn`): raise it (limits.conf, or `ulimit -Hn` in a \
             root shell), or start fewer ranks per fmrun"
        );
    }
}

/// Where ranks find the resource manager.
enum GrmAddress {
    /// `--grm HOST:PORT`.
    Given(String),
    /// The embedded one's socket.
    Listening(SocketAddr),
    /// The embedded one, at this port on loopback and on the address this
    /// host uses towards each rank's host.
    Routed(u16),
}

impl GrmAddress {
    fn for_launcher(&self) -> String {
        match self {
            GrmAddress::Given(a) => a.clone(),
            GrmAddress::Listening(a) if a.ip().is_unspecified() => {
                SocketAddr::from(([127, 0, 0, 1], a.port())).to_string()
            }
            GrmAddress::Listening(a) => a.to_string(),
            GrmAddress::Routed(port) => SocketAddr::from(([127, 0, 0, 1], *port)).to_string(),
        }
    }

    /// For a rank started on `target` (an ssh destination, `user@host`
    /// or an address; `None`: somewhere in the Slurm allocation): a GRM
    /// listening everywhere is reached at the address this host uses
    /// towards that host, else at this host's first outside address.
    fn for_rank(&self, target: Option<&str>) -> String {
        let port = match self {
            GrmAddress::Given(a) => return a.clone(),
            GrmAddress::Listening(a) if !a.ip().is_unspecified() => return a.to_string(),
            GrmAddress::Listening(a) => a.port(),
            GrmAddress::Routed(port) => *port,
        };
        SocketAddr::new(address_towards(target), port).to_string()
    }
}

/// The address this host uses towards `target` (an ssh destination,
/// `user@host` or an address; `None`: somewhere in the Slurm allocation),
/// else this host's first outside address.
fn address_towards(target: Option<&str>) -> IpAddr {
    let host = target.map(|t| t.rsplit_once('@').map_or(t, |(_, h)| h));
    let towards = host
        .and_then(|h| (h, 9).to_socket_addrs().ok()?.find(|s| s.is_ipv4()))
        .and_then(fm_devices::ethernet::local_addr_towards);
    towards
        .or_else(|| sys::find_address(|_, ip, _| (ip.is_ipv4() && !ip.is_loopback()).then_some(ip)))
        .unwrap_or(IpAddr::from([127, 0, 0, 1]))
}

/// What every rank's start needs.
struct Launch<'a> {
    cli: &'a Cli,
    plan: &'a Plan,
    rsh: Option<&'a RemoteShell>,
    /// FM_GRM for a rank on each target (`None`: under srun).
    grm_at: &'a HashMap<Option<&'a str>, String>,
    token: &'a str,
    /// The folder of fm's `libmpich.so.12`, put first on the ranks' library path.
    mpi_lib: Option<PathBuf>,
    cpus: usize,
    bind: Bind,
    /// Per rank of a job on hosts: its number among its host's ranks, and
    /// their count.
    locals: Vec<(u32, u32)>,
}

/// Per rank: its number among the ranks of its host, and their count.
fn local_ranks(spots: &[plan::Spot]) -> Vec<(u32, u32)> {
    let mut seen: HashMap<&str, u32> = HashMap::new();
    let index: Vec<u32> = (spots.iter())
        .map(|s| {
            let n = seen.entry(s.host.as_str()).or_insert(0);
            *n += 1;
            *n - 1
        })
        .collect();
    (spots.iter().zip(index))
        .map(|(s, i)| (i, seen[s.host.as_str()]))
        .collect()
}

impl Launch<'_> {
    /// The job's variables for rank `rank` (under Slurm, for every rank).
    fn rank_env(&self, rank: u32) -> Vec<(String, String)> {
        let spot = self.plan.spots.get(rank as usize);
        let target = spot.map(|s| s.target.as_str());
        let mut env: Vec<(String, String)> = Vec::new();
        let mut set = |k: &str, v: String| env.push((k.to_string(), v));
        set(
            fm::settings::GRM.var,
            self.grm_at.get(&target).cloned().unwrap_or_default(),
        );
        if !matches!(self.plan.mode, Mode::Slurm) {
            set(fm::settings::RANK.var, rank.to_string());
            set(fm::settings::SIZE.var, self.plan.n.to_string());
        }
        match spot {
            Some(s) => {
                set(fm::settings::HOST.var, s.host.clone());
                for (k, v) in &s.env {
                    set(k, v.clone());
                }
            }
            None => set(fm::settings::NET.var, self.cli.net.clone()),
        }
        if self.rsh.is_none() && !matches!(self.plan.mode, Mode::Slurm) {
            set(fm::settings::CPUS.var, self.cpus.to_string());
        }
        if let Some((local, locals)) = self.local_rank(rank) {
            for (k, v) in [
                (fm::settings::LOCAL_RANK.var, local),
                (fm::settings::LOCAL_SIZE.var, locals),
                ("MPI_LOCALRANKID", local),
                ("MPI_LOCALNRANKS", locals),
                ("OMPI_COMM_WORLD_LOCAL_RANK", local),
                ("OMPI_COMM_WORLD_LOCAL_SIZE", locals),
                ("PMI_RANK", rank),
                ("PMI_SIZE", self.plan.n),
            ] {
                set(k, v.to_string());
            }
        }
        if let Some(dir) = &self.mpi_lib {
            let path = match std::env::var("LD_LIBRARY_PATH") {
                Ok(p) if !p.is_empty() => format!("{}:{p}", dir.display()),
                _ => dir.display().to_string(),
            };
            set("LD_LIBRARY_PATH", path);
        }
        for (k, v) in &self.cli.export {
            set(k, v.clone());
        }
        env
    }

    /// Rank `rank`'s number among its host's ranks, and how many those
    /// are (`None` under Slurm, whose srun says it: `SLURM_LOCALID`).
    fn local_rank(&self, rank: u32) -> Option<(u32, u32)> {
        match self.plan.mode {
            Mode::Slurm => None,
            Mode::Here => Some((rank, self.plan.n)),
            Mode::Hosts => self.locals.get(rank as usize).copied(),
        }
    }

    /// The remote hosts whose ranks start through a host agent, each with
    /// its ranks in order (`--host-agents`).
    fn agents(&self) -> Vec<(String, Vec<u32>)> {
        let (Some(_), Mode::Hosts) = (self.rsh, &self.plan.mode) else {
            return Vec::new();
        };
        let mut by_target: Vec<(String, Vec<u32>)> = Vec::new();
        for (r, s) in self.plan.spots.iter().enumerate() {
            if remote::is_this_machine(&s.target) {
                continue;
            }
            match by_target.iter_mut().find(|(t, _)| *t == s.target) {
                Some((_, ranks)) => ranks.push(r as u32),
                None => by_target.push((s.target.clone(), vec![r as u32])),
            }
        }
        by_target.retain(|(_, ranks)| match self.cli.host_agents {
            HostAgents::Always => true,
            HostAgents::Auto => ranks.len() >= AGENT_FROM,
            HostAgents::Never => false,
        });
        by_target
    }

    /// Start the host agent on `target` for `ranks` (all on that host):
    /// the variables all of them share on its command line, as for one
    /// rank; each rank's own on its standard input, after the token.
    fn spawn_agent(&self, target: &str, ranks: &[u32]) -> std::io::Result<Child> {
        let rsh = self
            .rsh
            .ok_or_else(|| std::io::Error::other("no remote shell"))?;
        let envs: Vec<Vec<(String, String)>> = ranks.iter().map(|&r| self.rank_env(r)).collect();
        let mut common: Vec<(String, String)> = (envs[0].iter())
            .filter(|kv| envs.iter().all(|e| e.contains(kv)))
            .cloned()
            .collect();
        let specs: Vec<agent::RankSpec> = (ranks.iter().zip(&envs))
            .map(|(&r, e)| {
                (
                    r,
                    e.iter()
                        .filter(|kv| !common.contains(kv))
                        .cloned()
                        .collect(),
                )
            })
            .collect();
        with_fm_settings(&mut common);
        let exe = std::env::current_exe()?;
        let mut command = vec![exe.to_string_lossy().into_owned(), "--host-agent".into()];
        command.extend(self.cli.command.iter().cloned());
        let mut cmd = rsh.command(target, &common, &command);
        cmd.stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .stdin(Stdio::piped());
        // SAFETY: only async-signal-safe system calls between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                libc::setpgid(0, 0);
                sys::die_with_parent();
                Ok(())
            });
        }
        let mut child = cmd.spawn()?;
        if let Some(mut input) = child.stdin.take() {
            let head = format!("{}\n{}", self.token, agent::spec_input(&specs));
            if let Err(e) = input.write_all(head.as_bytes()) {
                tracing::debug!(
                    target,
                    "fmrun: the remote shell did not take the rank list: {e}"
                );
            }
            if ranks.contains(&0) {
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut std::io::stdin().lock(), &mut input);
                });
            }
        }
        Ok(child)
    }

    /// Start rank `rank` (or, under Slurm, srun for all of them).
    fn spawn(&self, rank: u32) -> std::io::Result<Child> {
        let spot = self.plan.spots.get(rank as usize);
        let mut env = self.rank_env(rank);
        let remote = match (self.rsh, spot) {
            // A host that is this machine (localhost, its name, one of its
            // addresses) starts its ranks here, as mpirun does: no shell.
            (Some(rsh), Some(s)) if !remote::is_this_machine(&s.target) => Some((rsh, s)),
            _ => None,
        };
        let mut cmd = match (remote, &self.plan.mode) {
            (Some((rsh, s)), _) => {
                with_fm_settings(&mut env);
                rsh.command(&s.target, &env, &self.cli.command)
            }
            (None, Mode::Hosts) if self.cli.rsh == "local" => {
                // As if through ssh: a login's few variables, the job's,
                // the FM_* settings and -x; nothing else of this shell.
                with_fm_settings(&mut env);
                let mut c = Command::new(&self.cli.command[0]);
                c.args(&self.cli.command[1..]).env_clear();
                for k in LOGIN_VARIABLES {
                    if let Some(v) = std::env::var_os(k) {
                        c.env(k, v);
                    }
                }
                c.envs(env).env(fm::settings::JOB_TOKEN.var, self.token);
                c
            }
            (None, Mode::Slurm) => {
                let mut c = remote::srun(self.plan.n, &self.cli.command);
                c.envs(env).env(fm::settings::JOB_TOKEN.var, self.token);
                without_fmrun_settings(&mut c);
                c
            }
            (None, _) => {
                let mut c = Command::new(&self.cli.command[0]);
                c.args(&self.cli.command[1..])
                    .envs(env)
                    .env(fm::settings::JOB_TOKEN.var, self.token);
                without_fmrun_settings(&mut c);
                c
            }
        };
        cmd.stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // Like mpirun: standard input goes to rank 0 only; a remote
            // rank's starts with the token.
            .stdin(if remote.is_some() {
                Stdio::piped()
            } else if rank == 0 {
                Stdio::inherit()
            } else {
                Stdio::null()
            });
        let cpu = (self.bind == Bind::Core).then_some(rank as usize % self.cpus.max(1));
        if self.cli.report_bindings {
            match (cpu, remote) {
                (Some(c), _) => eprintln!("fmrun: rank {rank} bound to CPU {c}"),
                (None, Some((_, s))) => {
                    eprintln!("fmrun: rank {rank} not bound by fmrun (on {})", s.host)
                }
                (None, None) => eprintln!("fmrun: rank {rank} not bound"),
            }
        }
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
        let mut child = cmd.spawn()?;
        if let Some(mut input) = child.stdin.take() {
            // A remote shell that already failed (no route, no key) is
            // reported by its exit status, not as a broken pipe here.
            if let Err(e) = input.write_all(format!("{}\n", self.token).as_bytes()) {
                tracing::debug!(rank, "fmrun: the remote shell did not take the token: {e}");
            }
            if rank == 0 {
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut std::io::stdin().lock(), &mut input);
                });
            }
        }
        Ok(child)
    }
}

/// What a login through ssh has of its own, and `--rsh local` passes on.
const LOGIN_VARIABLES: [&str; 5] = ["PATH", "HOME", "USER", "LOGNAME", "SHELL"];

/// Add the `FM_*` settings of this shell that ranks read (FM_SHM_DIR,
/// FM_FAULTS, …) to a remote rank's `env`, unless set there already;
/// fmrun's own settings stay here.
fn with_fm_settings(env: &mut Vec<(String, String)>) {
    for (k, v) in std::env::vars().filter(|(k, _)| k.starts_with("FM_")) {
        if !env.iter().any(|(e, _)| *e == k) && !settings::SETTINGS.iter().any(|s| s.var == k) {
            env.push((k, v));
        }
    }
}

/// A process fmrun started: one rank, or srun with all of them.
struct Proc {
    /// `rank 3`, or `srun`.
    label: String,
    child: Child,
    /// The rank's own pid, from the GRM once it is ready (the child may be
    /// the remote shell that started it).
    rank_pid: Option<u32>,
    status: Option<ExitStatus>,
}

/// The job as fmrun sees it.
struct Job {
    procs: Vec<Proc>,
    /// One process per rank (not srun for all): a rank the GRM reports
    /// dead is the process of that number.
    per_rank: bool,
    /// Per rank a host agent started, that agent's process.
    agent_proc: Vec<Option<usize>>,
    out: output::Forwarder,
    size: u32,
    /// First failure: its message and the exit status it gives the job.
    failure: Option<(String, u8)>,
    /// A rank that exited with a failing status (no signal), not yet
    /// blamed: it may only have seen the job end under it, and the
    /// resource manager's word on the rank that ended it may still be on
    /// its way ([`Job::settle`]).
    pending: Option<(usize, ExitStatus, Instant)>,
    /// The first failure was a rank's own exit, and the resource manager
    /// has not said what it found yet (a rank that sent no heartbeat).
    verdict_owed: bool,
    stopping: Option<Instant>,
    killed: bool,
    started: Instant,
    joined: u32,
    progress_shown: bool,
    last_progress: Option<Instant>,
    /// Tables to print once all are in (`Some(true)`: as runs).
    show_table: Option<bool>,
    tables: Vec<Option<String>>,
    /// Each rank's counters, as it reported them before leaving.
    stats: Vec<Option<String>>,
}

impl Job {
    fn new(procs: Vec<Proc>, out: output::Forwarder, size: u32, show_table: Option<bool>) -> Job {
        Job {
            procs,
            per_rank: true,
            agent_proc: Vec::new(),
            out,
            size,
            failure: None,
            pending: None,
            verdict_owed: false,
            stopping: None,
            killed: false,
            started: Instant::now(),
            joined: 0,
            progress_shown: false,
            last_progress: None,
            show_table,
            tables: vec![None; size as usize],
            stats: vec![None; size as usize],
        }
    }

    fn all_exited(&self) -> bool {
        self.procs.iter().all(|r| r.status.is_some())
    }

    /// The processes not yet exited, by label: `rank 1, rank 3` (the first
    /// ten, and how many more).
    fn still_running(&self) -> String {
        let running: Vec<&str> = (self.procs.iter())
            .filter(|p| p.status.is_none())
            .map(|p| p.label.as_str())
            .collect();
        let mut s = running
            .iter()
            .take(10)
            .copied()
            .collect::<Vec<_>>()
            .join(", ");
        if running.len() > 10 {
            s += &format!(" and {} more", running.len() - 10);
        }
        s
    }

    /// Collect exit statuses; the first failing rank fails the job. Of ranks
    /// found dead in the same pass, one killed by a signal is the cause and
    /// the others (which saw the job end under them) are not. A rank that
    /// exited with a failing status is blamed only after [`BLAME_GRACE`]:
    /// one that saw the job end exits as soon as the resource manager
    /// tells it, which under load can be before fmrun hears which rank
    /// ended it (an `MPI_Abort(7)` in rank 1 then ended the job with rank
    /// 3's status 1).
    fn reap(&mut self) {
        let mut blame: Option<(usize, ExitStatus)> = None;
        for i in 0..self.procs.len() {
            if self.procs[i].status.is_some() {
                continue;
            }
            if let Ok(Some(s)) = self.procs[i].child.try_wait() {
                self.procs[i].status = Some(s);
                let better = match blame {
                    None => true,
                    Some((_, b)) => b.signal().is_none() && s.signal().is_some(),
                };
                if !s.success() && better {
                    blame = Some((i, s));
                }
            }
        }
        match blame {
            Some((i, s)) if s.signal().is_some() => self.blame(i, s, None),
            Some((i, s)) if self.pending.is_none() => {
                self.pending = Some((i, s, Instant::now()));
            }
            _ => {}
        }
        self.settle(false);
    }

    /// Blame the pending rank once the resource manager has had
    /// [`BLAME_GRACE`] to name another (or at once with `now`), unless a
    /// failure is already recorded.
    fn settle(&mut self, now: bool) {
        match self.pending {
            Some(_) if self.failure.is_some() || self.stopping.is_some() => self.pending = None,
            Some((i, s, t)) if now || t.elapsed() >= BLAME_GRACE => {
                self.pending = None;
                self.blame(i, s, None);
            }
            _ => {}
        }
    }

    /// Rank process `i` ended with `s` (and the resource manager said
    /// `verdict` of it, when it had): the job's first failure.
    fn blame(&mut self, i: usize, s: ExitStatus, verdict: Option<String>) {
        if self.stopping.is_none() {
            let p = &self.procs[i];
            let (what, code) = describe_status(s);
            let pid = p.rank_pid.unwrap_or(p.child.id());
            let line = format!("{} (pid {pid}) {what}", p.label);
            // A rank that ends itself (it lost the resource manager: a cut
            // link) says why in its own output; what the resource manager
            // found (no heartbeat) belongs on fmrun's line too, now or
            // when it comes.
            let line = match verdict {
                Some(v) if adds_to_exit(&v) => format!("{line}; the resource manager: {v}"),
                Some(_) => line,
                None => {
                    // Its own last words: a rank that lost the resource
                    // manager says so.
                    self.verdict_owed = true;
                    let wait = Duration::from_millis(200);
                    match (self.per_rank).then(|| self.out.last_line(i as u32, wait)) {
                        Some(Some(last)) => format!("{line}; its last line: {last}"),
                        _ => line,
                    }
                }
            };
            self.fail(line, code);
        }
    }

    fn on_grm(&mut self, e: Event) {
        match e.clone() {
            Event::Progress { joined, .. } => self.joined = joined,
            Event::RankStats { rank, json } => {
                if let Some(s) = self.stats.get_mut(rank as usize) {
                    *s = Some(json);
                }
            }
            Event::RankReady { rank, pid, table } => {
                if let Some(p) = self.procs.get_mut(rank as usize).filter(|_| self.per_rank) {
                    p.rank_pid = Some(pid);
                }
                if let Some(t) = self.tables.get_mut(rank as usize) {
                    *t = Some(table);
                }
                if let Some(runs) = self.show_table {
                    if self.tables.iter().all(Option::is_some) {
                        let mut o = std::io::stdout().lock();
                        for (r, t) in self.tables.iter().enumerate() {
                            let t = t.as_deref().unwrap_or_default();
                            let _ = match runs {
                                true => writeln!(o, "{}", table_report::as_runs(r as u32, t)),
                                false => write!(o, "{}", table_report::in_full(r as u32, t)),
                            };
                        }
                        let _ = o.flush();
                        self.show_table = None;
                    }
                }
            }
            Event::PeerDied { rank, .. } if self.stopping.is_none() => {
                let verdict = Some(e.describe()).filter(|v| adds_to_exit(v));
                // The process's own exit status says more than the GRM can:
                // give it a moment to be reaped. (srun, which carries every
                // rank, prints which task failed first itself.) A host
                // agent tells the GRM of a failed rank first and then ends
                // with its status, through its remote shell: a longer moment.
                let r = rank as usize;
                let (carrier, wait) = match self.agent_proc.get(r).copied().flatten() {
                    Some(agent) => (Some(agent), AGENT_STATUS_WAIT),
                    None => (self.per_rank.then_some(r), Duration::from_millis(200)),
                };
                let until = Instant::now() + wait;
                while let Some(r) =
                    carrier.filter(|&r| r < self.procs.len() && Instant::now() < until)
                {
                    if let Some(s) = self.procs[r].status {
                        return self.blame(r, s, verdict);
                    }
                    if let Ok(Some(s)) = self.procs[r].child.try_wait() {
                        self.procs[r].status = Some(s);
                        return self.blame(r, s, verdict);
                    }
                    std::thread::sleep(Duration::from_millis(2));
                }
                self.fail(e.describe(), 1);
            }
            Event::PeerDied { ref reason, .. } if self.verdict_owed && adds_to_exit(reason) => {
                self.verdict_owed = false;
                self.out.flush();
                eprintln!("fmrun: the resource manager: {}", e.describe());
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
        for r in &self.procs {
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
                    "fmrun: starting {} processes: {}/{} joined ({})",
                    self.size,
                    self.joined,
                    self.size,
                    output::took(elapsed)
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
                "fmrun: all {} processes joined in {}",
                self.size,
                output::took(elapsed)
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
        self.settle(true);
        self.out.finish(Duration::from_millis(500));
        let removed = fm_devices::shmem::segment::remove_job_segments(shm_dir, link.job_key);
        if removed > 0 {
            tracing::info!(removed, "fmrun: removed the job's shared segments");
        }
        self.failure.map_or(0, |(_, c)| c)
    }
}

/// Whether the resource manager's verdict on a rank whose exit fmrun saw
/// says more than the exit: not when it only saw the connection close.
fn adds_to_exit(verdict: &str) -> bool {
    !verdict.contains("closed its connection to the GRM")
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

#[cfg(test)]
mod tests {
    use super::*;

    fn proc(label: &str, script: &str) -> Proc {
        let child = Command::new("sh").args(["-c", script]).spawn().expect("sh");
        Proc {
            label: label.into(),
            child,
            rank_pid: None,
            status: None,
        }
    }

    /// Rank 0 exits with 1 on seeing the job end, and is reaped before
    /// the resource manager's word that rank 1 (which exits with 7, later)
    /// ended the job: the job's status is rank 1's. (Before, fmrun blamed
    /// the first rank it reaped.)
    #[test]
    fn the_rank_the_resource_manager_names_is_blamed_not_one_that_saw_the_job_end() {
        let dir = std::env::temp_dir().join(format!("fmrun-blame-{}", std::process::id()));
        let go = dir.join("go");
        std::fs::create_dir_all(&dir).expect("a folder");
        let later = format!(
            "while [ ! -e {} ]; do sleep 0.01; done; exit 7",
            go.display()
        );
        let procs = vec![proc("rank 0", "exit 1"), proc("rank 1", &later)];
        let out = output::Forwarder::new(2, true, None, None);
        let mut job = Job::new(procs, out, 2, None);
        while job.procs[0].status.is_none() {
            job.reap();
            std::thread::sleep(TICK);
        }
        assert!(job.failure.is_none(), "{:?}", job.failure);
        std::fs::write(&go, b"").expect("go");
        while job.procs[1].child.try_wait().ok().flatten().is_none() {
            std::thread::sleep(TICK);
        }
        job.on_grm(Event::PeerDied {
            rank: 1,
            host: "h".into(),
            pid: job.procs[1].child.id(),
            reason: "closed its connection to the GRM without leaving the job".into(),
        });
        let _ = std::fs::remove_dir_all(&dir);
        let (what, code) = job.failure.clone().expect("a failure");
        assert_eq!(code, 7, "{what}");
        assert!(what.starts_with("rank 1 "), "{what}");
    }
}
