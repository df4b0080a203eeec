//! fm-bench: measure fm on this machine.
//!
//! Standalone (no FM_RANK in the environment) it starts its own two rank
//! processes pinned to different CPUs, as `ucx_perftest` does on loopback;
//! under a launcher it runs as the rank it is given (ranks 0 and 1 measure,
//! the others wait). Rank 0 prints the results.

mod coll;
mod rma;
mod stats;

use fm_platform::setting::{Scope, Setting};

/// The ID of the `raw_syscalls:sys_enter` tracepoint, read outside a
/// network namespace (where tracefs is not mounted) by scripts/bench-nic.sh.
const SYS_ENTER_ID: Setting = Setting {
    var: "FM_BENCH_SYS_ENTER_ID",
    scope: Scope::Environment,
    default: "tracefs",
    doc: "the system call tracepoint's ID, for `pollcost`'s system call count",
};

/// The placement probe the standalone parent measured, for rank 0's
/// metadata line.
const PLACEMENT: Setting = Setting {
    var: "FM_BENCH_PLACEMENT_US",
    scope: Scope::Environment,
    default: "measured by a standalone fm-bench before its ranks start",
    doc: "the cache-line ping-pong between CPUs 0 and 1, one-way µs: this host's placement of its CPUs (near ~0.03, far ~0.2 on this project's machine)",
};

/// Set: `overhead` calls the device directly on both sides (should give 0).
const CALIBRATE: Setting = Setting {
    var: "FM_BENCH_CALIBRATE",
    scope: Scope::Environment,
    default: "unset",
    doc: "`overhead` compares the device with itself: its result should be 0",
};

/// fm-bench(1) beyond its options.
const MAN_PAGE: fm_clidocs::Page = fm_clidocs::Page {
    examples: &[
        (
            "fm-bench pingpong --sizes 1:1m",
            "one-way latency at every power of two to 1 MiB, two processes over shared memory",
        ),
        (
            "fm-bench bw --device ethernet --csv",
            "streaming bandwidth over UDP on loopback, as CSV",
        ),
        (
            "fmrun -n 2 -H a,b --no-prefix fm-bench pingpong --device ethernet --json",
            "between two hosts, one JSON object per line",
        ),
        (
            "fm-bench coll --ranks 4 --ops allreduce,bcast --sizes 8:1m",
            "collectives over four processes on this host",
        ),
        (
            "fm-bench overhead",
            "what the composite's table costs over the device itself",
        ),
    ],
    exit_status: &[
        ("0", "measured"),
        ("1", "a benchmark failed (no progress, a device error)"),
        ("2", "a bad command line"),
    ],
    environment: &[
        (CALIBRATE.var, CALIBRATE.doc),
        (
            "FM_*",
            "fm's settings apply to the measured ranks (docs/CONFIG.md)",
        ),
    ],
    see_also: &["fmrun(1)", "fm-info(1)"],
};

use clap::{Parser, Subcommand, ValueEnum};
use fm::{Config, Fm, Incoming};
use fm_composite::Composite;
use fm_devices::{Device, Rank};
use fm_launcher::LocalJob;
use stats::{Format, Printer, Sample, Summary};
use std::process::{Command, ExitCode};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Parser, Clone)]
#[command(
    name = "fm-bench",
    version,
    about = "Benchmarks of fm: latency, bandwidth, message rate, poll cost, composite overhead"
)]
struct Cli {
    #[command(subcommand)]
    bench: Bench,
}

#[derive(Subcommand, Clone)]
enum Bench {
    /// One-way latency: half of a ping-pong round trip.
    Pingpong(Opts),
    /// Streaming bandwidth: windows of messages, one acknowledgement per window.
    Bw(Opts),
    /// Message rate of small messages (default 8 B).
    Rate(Opts),
    /// Cost of one idle receive poll of the composite (self + shmem + null) and of an idle extract.
    Pollcost(Opts),
    /// One-way latency through the composite vs calling the shmem device directly.
    Overhead(Opts),
    /// Collectives (fm::coll) by size on every rank of the job: the
    /// median, minimum and maximum over ranks of each one's average time
    /// per call.
    Coll(coll::CollOpts),
    /// One-sided put latency (a put and its flush: complete at the
    /// target) and bandwidth (--window puts, one flush), on the peer's
    /// part of an `fm::Window`.
    Put(Opts),
    /// One-sided get latency (each get waits for its data).
    Get(Opts),
    /// 64-bit atomics on the peer's window: fetch-add, compare-and-swap
    /// and swap, each to completion.
    Atomic(Opts),
    /// Every rank waits in `extract_wait` with nothing arriving, then
    /// exits: for measuring what an idle rank costs (`FM_WAIT`).
    Idle(IdleOpts),
}

#[derive(clap::Args, Clone)]
struct IdleOpts {
    /// How long each rank waits.
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// How the ranks wait (sets FM_WAIT).
    #[arg(long, value_enum)]
    wait: Option<WaitArg>,
}

/// `--wait`: FM_WAIT for the ranks.
#[derive(ValueEnum, Clone, Copy, PartialEq, Eq, Debug)]
enum WaitArg {
    Spin,
    Block,
    Auto,
}

impl WaitArg {
    /// Make this the ranks' FM_WAIT (this process's, and its children's).
    fn apply(self) {
        let v = match self {
            WaitArg::Spin => "spin",
            WaitArg::Block => "block",
            WaitArg::Auto => "auto",
        };
        std::env::set_var(fm::settings::WAIT.var, v);
    }
}

#[derive(clap::Args, Clone)]
struct Opts {
    /// Device between the two ranks: shmem (two processes), ethernet (two
    /// processes as two hosts, UDP on loopback), self (one process), or nic
    /// (under fmrun across hosts on one layer-2 network, with `--net nic`).
    #[arg(long, value_enum, default_value = "shmem")]
    device: DeviceArg,
    /// Layer to measure at: fm (handlers, streams, credits), composite or device (raw PM API).
    #[arg(long, value_enum, default_value = "fm")]
    layer: Layer,
    /// Message sizes in bytes, comma separated (suffixes k and m allowed);
    /// `A:B` is every power of two from A to B, as OSU's benchmarks do
    /// (`1:1m`, `8,64k:4m`).
    #[arg(long, value_parser = parse_sizes)]
    sizes: Option<Sizes>,
    /// Timed iterations per size (default depends on size).
    #[arg(long)]
    iters: Option<u64>,
    /// Untimed iterations first.
    #[arg(long)]
    warmup: Option<u64>,
    /// Messages per window for bw and rate.
    #[arg(long, default_value_t = 64)]
    window: u64,
    /// One JSON object per line instead of a table (the first: the run's
    /// metadata).
    #[arg(long, conflicts_with = "csv")]
    json: bool,
    /// Comma-separated values instead of a table (after a `#` line of
    /// metadata).
    #[arg(long)]
    csv: bool,
    /// Also draw the results against message size into this SVG file.
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<std::path::PathBuf>,
    /// Do not pin the standalone rank processes to CPUs.
    #[arg(long)]
    no_pin: bool,
    /// Fault injection on network devices, as FM_FAULTS (e.g. drop=0.01,seed=3).
    #[arg(long)]
    faults: Option<String>,
    /// How the ranks wait for a message (sets FM_WAIT; `block` with
    /// FM_WAIT_SPIN_US=0 sleeps at once).
    #[arg(long, value_enum)]
    wait: Option<WaitArg>,
    /// Seconds without progress after which a rank gives up and reports
    /// what it saw instead of hanging (a lost peer, a stuck protocol).
    /// Raise it where a rank may be descheduled that long: many ranks on
    /// few CPUs, a slow emulator.
    #[arg(long, value_name = "SECONDS", default_value = "10", value_parser = parse_seconds)]
    stall_limit: Duration,
}

/// A positive number of seconds, as `--stall-limit` takes it.
fn parse_seconds(s: &str) -> Result<Duration, String> {
    let secs: f64 = s.parse().map_err(|e| format!("bad seconds {s:?}: {e}"))?;
    match Duration::try_from_secs_f64(secs) {
        Ok(d) if !d.is_zero() => Ok(d),
        _ => Err(format!(
            "{s:?}: the limit must be a positive number of seconds"
        )),
    }
}

#[derive(ValueEnum, Clone, Copy, PartialEq, Eq, Debug)]
enum DeviceArg {
    Shmem,
    Ethernet,
    Nic,
    #[value(name = "self")]
    SelfLoop,
}

#[derive(ValueEnum, Clone, Copy, PartialEq, Eq, Debug)]
enum Layer {
    Fm,
    Composite,
    Device,
}

/// `--sizes`: the sizes in order.
#[derive(Clone, Debug)]
struct Sizes(Vec<usize>);

/// `8,1k,64k:4m`: single sizes and power-of-two ranges.
fn parse_sizes(s: &str) -> Result<Sizes, String> {
    let mut out = Vec::new();
    for part in s.split(',') {
        match part.split_once(':') {
            Some((a, b)) => {
                let (a, b) = (parse_size(a)?, parse_size(b)?);
                if a == 0 || a > b {
                    return Err(format!(
                        "bad size range {part:?}: from a size of at least 1 up to a larger one"
                    ));
                }
                let mut x = a;
                while x <= b {
                    out.push(x);
                    x = x.checked_mul(2).ok_or("size range too large")?;
                }
            }
            None => out.push(parse_size(part)?),
        }
    }
    Ok(Sizes(out))
}

fn parse_size(s: &str) -> Result<usize, String> {
    let s = s.trim().to_ascii_lowercase();
    let (num, mul) = match s.strip_suffix('k') {
        Some(n) => (n, 1024),
        None => match s.strip_suffix('m') {
            Some(n) => (n, 1024 * 1024),
            None => (s.as_str(), 1),
        },
    };
    num.parse::<usize>()
        .map(|n| n * mul)
        .map_err(|e| format!("bad size {s:?}: {e}"))
}

const H_PING: u16 = 1;
const H_ACK: u16 = 2;
const H_SYNC: u16 = 3;

fn main() -> ExitCode {
    fm_platform::die_quietly_on_closed_pipe();
    fm_clidocs::generate_if_asked(<Cli as clap::CommandFactory>::command, &MAN_PAGE);
    fm::init_logging();
    let cli = Cli::parse();
    let opts = match &cli.bench {
        Bench::Pingpong(o)
        | Bench::Bw(o)
        | Bench::Rate(o)
        | Bench::Pollcost(o)
        | Bench::Overhead(o)
        | Bench::Put(o)
        | Bench::Get(o)
        | Bench::Atomic(o) => o.clone(),
        Bench::Idle(o) => return idle(o),
        Bench::Coll(o) => return collectives(o),
    };
    if let Some(w) = opts.wait {
        w.apply();
    }
    let standalone = !fm::settings::RANK.is_set();
    if let Some(f) = &opts.faults {
        if let Err(e) = fm_devices::reliable::Faults::parse(f) {
            eprintln!("fm-bench: --faults {f}: {e}");
            return ExitCode::FAILURE;
        }
        std::env::set_var(fm_devices::reliable::settings::FAULTS.var, f);
    }
    if standalone && opts.device == DeviceArg::Nic {
        eprintln!(
            "fm-bench: --device nic runs under fmrun across hosts (raw frames need two interfaces on one layer-2 network and CAP_NET_RAW), e.g. fmrun --net nic --hosts a,b -n 2 fm-bench pingpong --device nic"
        );
        return ExitCode::FAILURE;
    }
    if standalone && opts.device != DeviceArg::SelfLoop {
        return launch_pair(&opts);
    }
    match run_rank(&cli.bench, &opts) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("fm-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `fm-bench idle`: wait, then meet the others and leave.
fn idle(o: &IdleOpts) -> ExitCode {
    if let Some(w) = o.wait {
        w.apply();
    }
    let run = || -> Res<()> {
        let mut fm = Fm::init().map_err(e)?;
        fm.barrier().map_err(e)?;
        let t = Duration::from_secs_f64(o.seconds.max(0.0));
        // What may arrive is the next barrier's message of a rank whose
        // wait ended first: the barrier below counts it.
        fm.extract_wait_timeout(usize::MAX, t).map_err(e)?;
        fm.barrier().map_err(e)
    };
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("fm-bench: {err}");
            ExitCode::FAILURE
        }
    }
}

/// `fm-bench coll`: standalone, its ranks started here; under a
/// launcher, this rank's part.
fn collectives(o: &coll::CollOpts) -> ExitCode {
    if !fm::settings::RANK.is_set() {
        return launch(o.ranks.max(1), !o.no_pin, false);
    }
    let run = || -> Res<()> {
        let mut fm = Fm::init().map_err(e)?;
        let cpus = fm.config().job_cpus();
        let mut meta = run_metadata(&fm, !o.no_pin, cpus);
        meta.retain(|(k, _)| *k != "timing");
        meta.push((
            "timing",
            "each rank's average time per call over --iters calls after a \
             barrier; median, min, p99 and max over the ranks"
                .into(),
        ));
        coll::run(&mut fm, o, meta)
    };
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("fm-bench: {err}");
            ExitCode::FAILURE
        }
    }
}

/// Start ranks 0 and 1 as child processes, pinned to different CPUs.
fn launch_pair(opts: &Opts) -> ExitCode {
    launch(2, !opts.no_pin, opts.device == DeviceArg::Ethernet)
}

/// Start `ranks` rank processes of this command, pinned to CPUs of their
/// own if `pin`; with `ethernet`, each as a host of its own.
fn launch(ranks: usize, pin: bool, ethernet: bool) -> ExitCode {
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("fm-bench: cannot find own executable: {e}");
            return ExitCode::FAILURE;
        }
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let probe = placement_probe_us().map(|us| format!("{us:.3}"));
    let make = |r: usize| {
        let mut c = Command::new(&exe);
        c.args(&args).env(
            fm::settings::CPUS.var,
            fm_platform::cpus_allowed().to_string(),
        );
        if let Some(us) = &probe {
            c.env(PLACEMENT.var, us);
        }
        if ethernet {
            // Hosts of their own as far as fm knows: the composite routes through ethernet.
            c.env(fm::settings::HOST.var, format!("fm-bench-host{r}"));
        }
        c
    };
    let spawned = match ethernet {
        true => LocalJob::spawn_with_grm(ranks, pin, make),
        false => LocalJob::spawn(ranks, pin, make),
    };
    let job = match spawned {
        Ok(j) => j,
        Err(e) => {
            eprintln!("fm-bench: cannot start rank processes: {e}");
            return ExitCode::FAILURE;
        }
    };
    let out = job.wait(Duration::from_secs(3600));
    match out.first_failure() {
        None => ExitCode::SUCCESS,
        Some((rank, status)) => {
            eprintln!("fm-bench: rank {rank} failed ({status:?})");
            ExitCode::FAILURE
        }
    }
}

/// How far apart CPUs 0 and 1 (where the ranks run) are: a cache line
/// bounced between two threads pinned there, one-way µs, the median of 7
/// batches of 20 000 round trips. `None` with fewer than two CPUs.
fn placement_probe_us() -> Option<f64> {
    const TRIPS: u64 = 20_000;
    if fm_platform::cpus_allowed() < 2 {
        return None;
    }
    let line = Arc::new(AtomicU64::new(0));
    let other = line.clone();
    let echo = std::thread::spawn(move || {
        let _ = fm_platform::pin_to_cpu(1);
        for i in 0..7 * TRIPS {
            while other.load(Ordering::Acquire) != 2 * i + 1 {
                std::hint::spin_loop();
            }
            other.store(2 * i + 2, Ordering::Release);
        }
    });
    // In a thread of its own too: the caller's affinity, which the ranks
    // inherit, stays as it was.
    let ping = std::thread::spawn(move || {
        let _ = fm_platform::pin_to_cpu(0);
        let mut batches = Vec::new();
        for b in 0..7 {
            let t = std::time::Instant::now();
            for i in b * TRIPS..(b + 1) * TRIPS {
                line.store(2 * i + 1, Ordering::Release);
                while line.load(Ordering::Acquire) != 2 * i + 2 {
                    std::hint::spin_loop();
                }
            }
            batches.push(t.elapsed().as_secs_f64() * 1e6 / (2 * TRIPS) as f64);
        }
        batches
    });
    let mut batches = ping.join().ok()?;
    echo.join().ok()?;
    batches.sort_by(f64::total_cmp);
    Some(batches[3])
}

type Res<T> = Result<T, String>;

fn e<E: std::fmt::Display>(x: E) -> String {
    x.to_string()
}

/// Shared state the handlers of one rank write into.
#[derive(Default)]
struct Flags {
    acks: Counter,
    pings: Counter,
    /// Ping-pong: the PING handler echoes each message; otherwise it acknowledges each window.
    echo: AtomicBool,
    /// Pair synchronisations received from the peer.
    syncs: Counter,
}

/// A count one thread writes and reads (handlers must be `Send`, so not a
/// `Cell`): relaxed loads and stores, plain moves on the machine.
#[derive(Default)]
struct Counter(AtomicU64);

impl Counter {
    #[inline(always)]
    fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
    #[inline(always)]
    fn bump(&self) -> u64 {
        let k = self.get() + 1;
        self.0.store(k, Ordering::Relaxed);
        k
    }
}

/// The benchmark's endpoint: its handlers answer pings (at once in
/// ping-pong mode, once per window when streaming) and count acks and
/// synchronisations in the returned flags.
fn open_endpoint(config: Config, opts: &Opts) -> Res<(Fm, Arc<Flags>)> {
    let flags = Arc::new(Flags::default());
    let window = opts.window;
    let (f1, f2, f3) = (flags.clone(), flags.clone(), flags.clone());
    // Each handler's receive buffer is its own.
    let (mut ping_buf, mut ack_buf) = (Vec::new(), Vec::new());
    let fm = Fm::builder()
        // PING: read the data; in ping-pong mode answer at once.
        .handler(H_PING, "ping", move |m: &mut Incoming<'_>| {
            let n = receive_into(m, &mut ping_buf)?;
            let k = f1.pings.bump();
            if f1.echo.load(Ordering::Relaxed) {
                // ping-pong: echo what came, from inside the handler
                m.reply(H_ACK, &ping_buf[..n])?;
            } else if k % window == 0 {
                // bandwidth: one acknowledgement per window
                m.reply(H_ACK, &[])?;
            }
            Ok(())
        })
        .handler(H_ACK, "ack", move |m: &mut Incoming<'_>| {
            receive_into(m, &mut ack_buf)?;
            f2.acks.bump();
            Ok(())
        })
        .handler(H_SYNC, "sync", move |_| {
            f3.syncs.bump();
            Ok(())
        })
        .config(config)
        .build()
        .map_err(e)?;
    Ok((fm, flags))
}

fn run_rank(bench: &Bench, opts: &Opts) -> Res<()> {
    let config = if !fm::settings::RANK.is_set() {
        Config::local(0, 1, fm::JobKey(std::process::id() as u64))
    } else {
        Config::from_env().map_err(e)?
    };
    let (mut fm, flags) = open_endpoint(config, opts)?;
    let peer = peer_of(&fm, opts)?;
    let active = fm.rank() < 2 || opts.device == DeviceArg::SelfLoop && fm.rank() == 0;
    fm.barrier().map_err(e)?;
    if active {
        // Pinned ranks see one CPU in their mask: the launcher says how many the job has.
        let (cpus, oversubscribed) = (fm.config().job_cpus(), fm.config().oversubscribed());
        let format = match (opts.json, opts.csv) {
            (true, _) => Format::Json,
            (_, true) => Format::Csv,
            _ => Format::Table,
        };
        let mut meta = run_metadata(&fm, !opts.no_pin, cpus);
        if matches!(bench, Bench::Put(_) | Bench::Get(_) | Bench::Atomic(_)) {
            meta.retain(|(k, _)| *k != "timing");
            meta.push((
                "timing",
                "put: half a round trip of puts each rank waits to land in its \
                 own window (ucp_put_lat's measure); get and atomics: each \
                 operation to its answer; put_bw: windows of --window puts and \
                 one flush; medians over batches"
                    .into(),
            ));
        }
        let mut ctx = Ctx {
            epoch: 0,
            oversubscribed,
            fm: &mut fm,
            flags: &flags,
            peer,
            opts,
            printer: Printer::new(format, meta, opts.plot.clone()),
        };
        match bench {
            Bench::Pingpong(_) => match opts.layer {
                Layer::Fm => ctx.pingpong()?,
                Layer::Composite | Layer::Device => ctx.raw_pingpong(opts.layer)?,
            },
            Bench::Bw(_) => ctx.stream(false)?,
            Bench::Rate(_) => ctx.stream(true)?,
            Bench::Pollcost(_) => ctx.pollcost()?,
            Bench::Overhead(_) => ctx.overhead()?,
            Bench::Put(_) => ctx.one_sided(rma::OneSided::Put)?,
            Bench::Get(_) => ctx.one_sided(rma::OneSided::Get)?,
            Bench::Atomic(_) => ctx.one_sided(rma::OneSided::Atomic)?,
            Bench::Idle(_) | Bench::Coll(_) => {
                unreachable!("idle and coll run on their own (main)")
            }
        }
        ctx.printer.finish()?;
    }
    fm.barrier().map_err(e)?;
    if fm.rank() == 0 {
        for dev in [
            fm_devices::DeviceKind::Nic,
            fm_devices::DeviceKind::Ethernet,
        ] {
            if let Some(st) = fm.composite().network_stats(dev) {
                eprintln!("fm-bench: {dev} counters of rank 0: {st}");
            }
        }
    }
    Ok(())
}

/// The rank this one measures against, checked to be reached through the
/// device asked for, not whatever the table chose.
fn peer_of(fm: &Fm, opts: &Opts) -> Res<Rank> {
    let peer: Rank = match opts.device {
        DeviceArg::SelfLoop => fm.rank(),
        DeviceArg::Shmem | DeviceArg::Ethernet | DeviceArg::Nic => {
            if fm.size() < 2 {
                return Err(format!(
                    "--device {} needs two ranks",
                    device_name(opts.device)
                ));
            }
            1 - fm.rank().min(1)
        }
    };
    let route = fm.composite().info_for(peer).map(|i| i.name);
    if fm.rank() < 2 && route != Some(device_name(opts.device)) {
        return Err(format!(
            "--device {}: rank {} reaches rank {peer} through {} (choose devices with fmrun --net)",
            device_name(opts.device),
            fm.rank(),
            route.unwrap_or("nothing")
        ));
    }
    Ok(peer)
}

/// What a run was, printed once before its rows.
fn run_metadata(fm: &Fm, pin: bool, cpus: usize) -> Vec<(&'static str, serde_json::Value)> {
    let devices = fm.composite().member_names().join("+");
    vec![
        ("fm_bench", env!("CARGO_PKG_VERSION").into()),
        (
            "commit",
            option_env!("BUILD_COMMIT").unwrap_or("unknown").into(),
        ),
        ("host", fm_platform::hostname().into()),
        ("cpu", cpu_model().into()),
        ("date", stats::utc_now().into()),
        (
            "placement_probe_us",
            PLACEMENT
                .env()
                .unwrap_or_else(|| "not measured (ranks started by a launcher)".into())
                .into(),
        ),
        ("ranks", fm.size().into()),
        ("cpus", cpus.into()),
        ("pinned", (pin && fm.config().cpus.is_some()).into()),
        ("devices", devices.into()),
        ("pacer", fm.config().pacer.to_string().into()),
        (
            "timing",
            "latency: median, min, p99 and max over timed batches of 20 \
             round trips (1 above 4 KiB), halved; bandwidth and rate: over \
             windows of --window messages"
                .into(),
        ),
    ]
}

/// The processor's model name (`/proc/cpuinfo`).
fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            let line = t.lines().find(|l| l.starts_with("model name"))?;
            Some(line.split_once(':')?.1.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}

struct Ctx<'a> {
    fm: &'a mut Fm,
    /// Pair synchronisations done.
    epoch: u64,
    /// More local ranks than CPUs: waits yield early.
    oversubscribed: bool,
    flags: &'a Flags,
    peer: Rank,
    opts: &'a Opts,
    /// Rows go out as each size finishes.
    printer: Printer,
}

fn default_iters(size: usize) -> u64 {
    match size {
        0..=4096 => 100_000,
        4097..=65536 => 20_000,
        65537..=1048576 => 2_000,
        _ => 500,
    }
}

impl Ctx<'_> {
    fn leader(&self) -> bool {
        self.fm.rank() == 0
    }

    /// A barrier of the two measuring ranks only (with more ranks in the job,
    /// under fmrun, the others wait in the job-wide barrier at the end). As
    /// the job barrier: the responder arrives, the leader answers, so the
    /// leader leaves FM before the responder does — raw benchmarks rely on it.
    fn sync(&mut self) -> Res<()> {
        if self.peer == self.fm.rank() {
            return Ok(());
        }
        self.epoch += 1;
        if !self.leader() {
            self.fm.send(self.peer, H_SYNC, &[]).map_err(e)?;
        }
        while self.flags.syncs.get() < self.epoch {
            self.fm.extract_wait(usize::MAX).map_err(e)?;
        }
        if self.leader() {
            self.fm.send(self.peer, H_SYNC, &[]).map_err(e)?;
        }
        Ok(())
    }

    fn sizes(&self, default: &[usize]) -> Vec<usize> {
        (self.opts.sizes.clone()).map_or_else(|| default.to_vec(), |s| s.0)
    }

    /// A ping-pong result row for this run's device and layer.
    fn pingpong_row(&self, size: usize, iters: u64, samples: &[f64]) -> Sample {
        Sample::latency(
            "pingpong",
            self.device_name(),
            self.layer_name(),
            size,
            iters,
            &Summary::of(samples),
        )
    }

    fn device_name(&self) -> &'static str {
        device_name(self.opts.device)
    }

    fn layer_name(&self) -> &'static str {
        match self.opts.layer {
            Layer::Fm => "fm",
            Layer::Composite => "composite",
            Layer::Device => "device",
        }
    }

    /// Wait for the `n`-th acknowledgement, polling without pause.
    fn wait_acks(&mut self, n: u64) -> Res<()> {
        self.wait_for(n, |f| f.acks.get(), "acknowledgements")
    }

    fn wait_pings(&mut self, n: u64) -> Res<()> {
        self.wait_for(n, |f| f.pings.get(), "messages")
    }

    /// Poll until `count` reaches `n`; a benchmark that stops making
    /// progress reports what it saw instead of hanging. Ranks whose waits
    /// sleep (`FM_WAIT`) wait in `extract_wait`, as a program would.
    fn wait_for(&mut self, n: u64, count: impl Fn(&Flags) -> u64, what: &str) -> Res<()> {
        let limit = self.opts.stall_limit;
        if self.fm.config().wait_sleeps() {
            while count(self.flags) < n {
                if self.fm.extract_wait_timeout(usize::MAX, limit).map_err(e)? == 0 {
                    return Err(format!(
                        "rank {}: nothing for {limit:?} waiting for {what}: have {}, want {n} \
                         (--stall-limit)",
                        self.fm.rank(),
                        count(self.flags)
                    ));
                }
            }
            return Ok(());
        }
        let mut polls = 0u64;
        let mut since = Instant::now();
        let mut last = count(self.flags);
        while count(self.flags) < n {
            self.fm.extract(usize::MAX).map_err(e)?;
            polls += 1;
            if polls.is_multiple_of(4096) {
                let now = count(self.flags);
                if now != last {
                    last = now;
                    since = Instant::now();
                } else if since.elapsed() > limit {
                    return Err(format!(
                        "rank {}: no progress for {:?} waiting for {what}: have {now}, want {n} \
                         (--stall-limit); stats {:?}",
                        self.fm.rank(),
                        limit,
                        self.fm.stats()
                    ));
                }
            }
            if self.oversubscribed && polls.is_multiple_of(64) {
                // More ranks than CPUs here: let the peer run.
                std::thread::yield_now();
            }
        }
        Ok(())
    }

    /// FM ping-pong: rank 0 sends, the peer's handler echoes from inside the handler.
    fn pingpong(&mut self) -> Res<()> {
        let sizes = self.sizes(&[8, 1024, 65536, 1 << 20]);
        self.flags.echo.store(true, Ordering::Relaxed);
        for &size in &sizes {
            let iters = self.opts.iters.unwrap_or(default_iters(size));
            let warmup = self.opts.warmup.unwrap_or(iters / 10 + 10);
            let batch = batch_for(size);
            let (warm_rounds, rounds) = (warmup.div_ceil(batch), iters.div_ceil(batch).max(1));
            let sbuf = vec![0x5au8; size];
            // Counts before the barrier: its extract may already run the
            // handlers of messages the leader sends right after it.
            let (acks0, pings0) = (self.flags.acks.get(), self.flags.pings.get());
            self.sync()?;
            if self.leader() {
                let mut samples = Vec::with_capacity(rounds as usize);
                let mut want = acks0;
                for round in 0..warm_rounds + rounds {
                    let t = Instant::now();
                    for _ in 0..batch {
                        self.fm.send(self.peer, H_PING, &sbuf).map_err(e)?;
                        want += 1;
                        self.wait_acks(want)?;
                    }
                    if round >= warm_rounds {
                        samples.push(t.elapsed().as_secs_f64() * 1e6 / batch as f64 / 2.0);
                    }
                }
                self.printer
                    .row(&self.pingpong_row(size, rounds * batch, &samples));
            } else {
                let want = pings0 + (warm_rounds + rounds) * batch;
                self.wait_pings(want)?;
            }
            self.sync()?;
        }
        self.flags.echo.store(false, Ordering::Relaxed);
        Ok(())
    }

    /// Streaming: windows of `window` messages, acknowledged once per window.
    fn stream(&mut self, rate: bool) -> Res<()> {
        let sizes = self.sizes(if rate {
            &[8]
        } else {
            &[8, 1024, 4096, 16384, 65536, 262144, 1 << 20, 4 << 20]
        });
        let window = self.opts.window;
        for &size in &sizes {
            let iters = self
                .opts
                .iters
                .unwrap_or(if rate {
                    2_000_000
                } else {
                    default_iters(size) * 4
                })
                .max(window);
            let windows = iters / window;
            let warm = self
                .opts
                .warmup
                .map(|w| w / window)
                .unwrap_or(windows / 10 + 2);
            let sbuf = vec![0x33u8; size];
            // Counts before the barrier (see `pingpong`).
            let (acks0, pings0) = (self.flags.acks.get(), self.flags.pings.get());
            self.sync()?;
            if self.leader() {
                let mut samples = Vec::new();
                let base = acks0;
                for w in 0..warm + windows {
                    let t = Instant::now();
                    for _ in 0..window {
                        self.fm.send(self.peer, H_PING, &sbuf).map_err(e)?;
                    }
                    self.wait_acks(base + w + 1)?;
                    if w >= warm {
                        samples.push(t.elapsed().as_secs_f64() * 1e6);
                    }
                }
                self.printer.row(&Sample::stream(
                    if rate { "rate" } else { "bw" },
                    self.device_name(),
                    size,
                    windows * window,
                    window,
                    &Summary::of(&samples),
                ));
            } else {
                self.wait_pings(pings0 + (warm + windows) * window)?;
            }
            self.sync()?;
        }
        Ok(())
    }

    /// Idle poll cost: the composite's raw receive and FM's extract, nothing arriving.
    fn pollcost(&mut self) -> Res<()> {
        if !self.leader() {
            // Stay quiet until the leader has measured: wait for its one ping.
            let pings0 = self.flags.pings.get();
            return self.wait_pings(pings0 + 1);
        }
        {
            let n = self.opts.iters.unwrap_or(10_000_000);
            let members: Vec<&str> = self.fm.composite().member_names();
            let label = members.join("+");
            let mut comp_samples = Vec::new();
            let mut fm_samples = Vec::new();
            let mut shm_samples = Vec::new();
            for _ in 0..21 {
                comp_samples.push(idle_poll_ns(composite_mut(self.fm), n / 21)?);
                let t = Instant::now();
                for _ in 0..n / 21 {
                    std::hint::black_box(self.fm.extract(usize::MAX).map_err(e)?);
                }
                fm_samples.push(t.elapsed().as_secs_f64() * 1e9 / (n / 21) as f64);
                if let Some(shm) = composite_mut(self.fm).shmem_mut() {
                    shm_samples.push(idle_poll_ns(shm, n / 21)?);
                }
            }
            self.printer.row(&Sample::nanos(
                "pollcost",
                &label,
                "composite",
                n,
                &Summary::of(&comp_samples),
            ));
            self.printer.row(&Sample::nanos(
                "pollcost",
                &label,
                "fm-extract",
                n,
                &Summary::of(&fm_samples),
            ));
            if !shm_samples.is_empty() {
                self.printer.row(&Sample::nanos(
                    "pollcost",
                    "shmem",
                    "device",
                    n,
                    &Summary::of(&shm_samples),
                ));
            }
            if self.opts.device == DeviceArg::Nic {
                let row = self.nic_pollcost(n)?;
                self.printer.row(&row);
            }
            if self.peer != self.fm.rank() {
                self.fm.send(self.peer, H_PING, &[]).map_err(e)?;
            }
        }
        Ok(())
    }

    /// An idle poll of the nic device alone, and the system calls it made.
    fn nic_pollcost(&mut self, n: u64) -> Res<Sample> {
        let nic = composite_mut(self.fm)
            .network_mut(fm_devices::DeviceKind::Nic)
            .ok_or("no nic device in this job")?;
        // Inside `ip netns exec` tracefs is not mounted: the ID may come
        // from outside (scripts/bench-nic.sh).
        let counter = match SYS_ENTER_ID.env().and_then(|v| v.parse().ok()) {
            Some(id) => fm_platform::SyscallCounter::with_tracepoint(id),
            None => fm_platform::SyscallCounter::this_thread(),
        };
        let before = counter.as_ref().map(|c| c.read());
        let samples = (0..21)
            .map(|_| idle_poll_ns(&mut *nic, n / 21))
            .collect::<Res<Vec<f64>>>()?;
        // The clock is read through the vDSO: no system call. The counter's
        // second read is one.
        let calls = counter.zip(before).map(|(c, b)| c.read() - b - 1);
        let mut s = Sample::nanos(
            "pollcost",
            "nic",
            "device",
            n / 21 * 21,
            &Summary::of(&samples),
        );
        s.syscalls = calls;
        Ok(s)
    }

    /// Raw PM-level ping-pong over the composite or directly over its shmem member.
    fn raw_pingpong(&mut self, layer: Layer) -> Res<()> {
        let sizes = self.sizes(&[8, 1024]);
        for &size in &sizes {
            let iters = self.opts.iters.unwrap_or(default_iters(size));
            let warmup = self.opts.warmup.unwrap_or(iters / 10 + 10);
            self.sync()?;
            let leader = self.leader();
            let peer = self.peer;
            let samples = match layer {
                Layer::Composite => {
                    raw_pp(composite_mut(self.fm), peer, leader, size, warmup, iters)?
                }
                _ => raw_pp(shmem_mut(self.fm)?, peer, leader, size, warmup, iters)?,
            };
            if leader {
                self.printer.row(&self.pingpong_row(size, iters, &samples));
            }
            self.sync()?;
        }
        Ok(())
    }

    /// Composite vs direct device, interleaved rounds so drift hits both alike.
    fn overhead(&mut self) -> Res<()> {
        let size = self.sizes(&[8])[0];
        let iters = self.opts.iters.unwrap_or(20_000);
        let leader = self.leader();
        let peer = self.peer;
        let (mut via, mut direct) = (Vec::new(), Vec::new());
        // Alternate which goes first, so that whatever the first run after a
        // barrier pays is paid by both alike.
        let calibrate = CALIBRATE.is_set();
        for round in 0..16 {
            for composite_now in [round % 2 == 0, round % 2 == 1] {
                self.sync()?;
                let samples = if composite_now && !calibrate {
                    raw_pp(
                        composite_mut(self.fm),
                        peer,
                        leader,
                        size,
                        iters / 10,
                        iters,
                    )?
                } else {
                    raw_pp(shmem_mut(self.fm)?, peer, leader, size, iters / 10, iters)?
                };
                if composite_now {
                    via.extend(samples);
                } else {
                    direct.extend(samples);
                }
            }
        }
        if leader {
            let (a, b) = (Summary::of(&via), Summary::of(&direct));
            for r in [
                Sample::latency("overhead", "shmem", "composite", size, iters * 16, &a),
                Sample::latency("overhead", "shmem", "device", size, iters * 16, &b),
            ] {
                self.printer.row(&r);
            }
            let diff_ns = (a.median - b.median) * 1000.0;
            // Two medians closer than either's spread (median to p99) differ
            // by noise, whatever the sign.
            let spread_ns = (a.p99 - a.median).max(b.p99 - b.median) * 1000.0;
            let noise = diff_ns.abs() <= spread_ns;
            if self.opts.json {
                println!(
                    "{}",
                    serde_json::json!({"bench": "overhead", "device": "shmem", "size": size,
                        "composite_minus_device_ns": stats::round(diff_ns),
                        "spread_ns": stats::round(spread_ns), "within_noise": noise})
                );
            } else {
                let note = match noise {
                    true => format!(", within noise (the spread is {spread_ns:.1} ns)"),
                    false => String::new(),
                };
                println!(
                    "composite overhead: {diff_ns:+.1} ns one-way (median composite − median direct){note}"
                );
            }
        }
        Ok(())
    }
}

/// Receive the whole message into the shared buffer; returns its length.
fn receive_into(m: &mut Incoming<'_>, b: &mut Vec<u8>) -> fm::Result<usize> {
    let n = m.len();
    if b.len() < n {
        b.resize(n, 0);
    }
    m.receive(&mut b[..n])?;
    Ok(n)
}

fn batch_for(size: usize) -> u64 {
    if size <= 4096 {
        20
    } else {
        1
    }
}

/// The device's name, as the composite's table prints it.
fn device_name(d: DeviceArg) -> &'static str {
    match d {
        DeviceArg::Shmem => "shmem",
        DeviceArg::Ethernet => "ethernet",
        DeviceArg::Nic => "nic",
        DeviceArg::SelfLoop => "self",
    }
}

/// ns per idle `raw_receive` of `dev` over `polls` polls; an error if a
/// packet arrives meanwhile (the measurement would not be of idle polls).
#[inline]
fn idle_poll_ns<D: Device>(dev: &mut D, polls: u64) -> Res<f64> {
    let t = Instant::now();
    for _ in 0..polls {
        if let Some(r) = std::hint::black_box(&mut *dev).raw_receive() {
            dev.raw_release(r.token);
            return Err("pollcost: a packet arrived during the idle measurement".into());
        }
    }
    Ok(t.elapsed().as_secs_f64() * 1e9 / polls as f64)
}

/// The composite under the FM endpoint (benchmarks call devices directly).
fn composite_mut(fm: &mut Fm) -> &mut Composite {
    fm.composite_mut()
}

fn shmem_mut(fm: &mut Fm) -> Res<&mut fm_devices::shmem::ShmemDevice> {
    composite_mut(fm)
        .shmem_mut()
        .ok_or_else(|| "no shmem device in this job".to_string())
}

/// PM-level ping-pong: get buffer, fill, send; poll, read, release. Returns
/// one-way latencies in µs per batch of 20 round trips.
fn raw_pp<D: Device>(
    dev: &mut D,
    peer: Rank,
    leader: bool,
    size: usize,
    warmup: u64,
    iters: u64,
) -> Res<Vec<f64>> {
    let payload = vec![0x77u8; size];
    let mut sink = vec![0u8; size];
    let batch = 20u64;
    let rounds = (warmup + iters) / batch;
    let warm_rounds = warmup / batch;
    let mut samples = Vec::with_capacity(rounds as usize);
    let send = |dev: &mut D| -> Res<()> {
        loop {
            match dev.raw_send_buffer(peer, size) {
                Ok(b) => {
                    // SAFETY: the slot has at least `size` writable bytes.
                    unsafe { std::ptr::copy_nonoverlapping(payload.as_ptr(), b.ptr, size) };
                    dev.raw_send(b, size);
                    return Ok(());
                }
                Err(fm_devices::DeviceError::NoBuffer { .. }) => std::hint::spin_loop(),
                Err(x) => return Err(x.to_string()),
            }
        }
    };
    let mut recv = |dev: &mut D| loop {
        if let Some(r) = dev.raw_receive() {
            // SAFETY: valid until released below.
            let data = unsafe { std::slice::from_raw_parts(r.ptr, r.len) };
            let n = data.len().min(sink.len());
            sink[..n].copy_from_slice(&data[..n]);
            dev.raw_release(r.token);
            return;
        }
    };
    // The barrier before us is FM traffic: the responder may still be in its
    // last extract, which would take a raw packet for a malformed FM one. So
    // the responder, out of FM for sure, speaks first.
    if leader {
        recv(dev);
    } else {
        send(dev)?;
    }
    for round in 0..rounds {
        let t = Instant::now();
        for _ in 0..batch {
            if leader {
                send(dev)?;
                recv(dev);
            } else {
                recv(dev);
                send(dev)?;
            }
        }
        if round >= warm_rounds {
            samples.push(t.elapsed().as_secs_f64() * 1e6 / batch as f64 / 2.0);
        }
    }
    Ok(samples)
}
