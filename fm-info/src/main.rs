//! fm-info: what fm can use on this host, and what will break it.
//!
//! - `fm-info` (or `fm-info devices`): each device with its option bits;
//! - `fm-info doctor [-n N]`: the problems that fill other projects' issue
//!   trackers — a /dev/shm too small for the job, stale segments of dead
//!   jobs, ptrace rules that forbid single-copy transfers, missing
//!   CAP_NET_RAW, a low memlock limit — each with the exact fix;
//! - `fm-info pacer`: the pacer's curve per device knob, a table (and an
//!   SVG plot with `--svg FILE`);
//! - `fm-info cleanup`: remove the segments of dead jobs, and nothing else;
//! - `fm-info config`: every setting, its value here and where that came
//!   from (`--markdown`: docs/CONFIG.md's rows, from the same table).

mod doctor;
mod pacer;

use clap::{Parser, Subcommand};
use fm_devices::ethernet::{EthernetConfig, EthernetSocket};
use fm_devices::nic::{NicConfig, NicSocket};
use fm_devices::null::NullDevice;
use fm_devices::selfloop::SelfDevice;
use fm_devices::shmem::segment::scan;
use fm_devices::shmem::{ShmemConfig, ShmemDevice};
use fm_devices::{Device, DeviceInfo, JobKey};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    version,
    about = "fm's devices on this host, a doctor, and cleanup of dead jobs' segments"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Option<Cmd>,
}

#[derive(Subcommand)]
enum Cmd {
    /// The devices available on this host and their option bits.
    Devices {
        /// One JSON object per device (`device`, `options`, `mtu`, `note`
        /// or `unavailable`).
        #[arg(long)]
        json: bool,
    },
    /// Check what breaks shared-memory messaging in practice, with the fix for each.
    Doctor {
        /// Size the check for a job of this many processes on this host.
        #[arg(short = 'n', long = "np", default_value_t = 8)]
        n: u32,
        /// Segment directory (default: FM_SHM_DIR or /dev/shm).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// One JSON object per check (`check`, `what`, `fix`).
        #[arg(long)]
        json: bool,
    },
    /// Remove the segments of dead jobs (no process of theirs alive).
    Cleanup {
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Only list what would be removed.
        #[arg(long)]
        dry_run: bool,
    },
    /// The pacer's measured curve per device knob (a table, and a plot with --svg) and
    /// the chosen size; measures now if nothing is cached.
    Pacer {
        /// Measure again, whatever the cache holds.
        #[arg(long)]
        force: bool,
        /// Also draw the curves into this SVG file (nothing is written
        /// unless asked).
        #[arg(long, value_name = "FILE.svg")]
        svg: Option<PathBuf>,
    },
    /// Every setting of fm: its value for a rank started here now, and
    /// where that comes from (environment, settings file, default).
    Config {
        /// Print the table's rows as docs/CONFIG.md has them instead.
        #[arg(long, conflicts_with = "json")]
        markdown: bool,
        /// One JSON object per setting (`var`, `value`, `source`, `default`).
        #[arg(long)]
        json: bool,
    },
    /// (internal) The peer of the single-copy probe.
    #[command(hide = true, name = "__cma-peer")]
    CmaPeer,
}

/// fm-info(1) beyond its options.
const MAN_PAGE: fm_clidocs::Page = fm_clidocs::Page {
    examples: &[
        ("fm-info", "the devices on this host and their option bits"),
        (
            "fm-info doctor -n 8",
            "will a job of 8 processes work here? and the fix for what will not",
        ),
        (
            "fm-info cleanup --dry-run",
            "which segments of dead jobs would be removed",
        ),
        (
            "fm-info config",
            "every setting, its value here and where it came from",
        ),
        (
            "fm-info pacer --svg pacer.svg",
            "the pacer's measured curves and choices, and a plot",
        ),
    ],
    exit_status: &[
        ("0", "done (doctor: nothing failed)"),
        ("1", "doctor found something that fails a job"),
        ("2", "a bad command line, or settings that cannot be read"),
    ],
    environment: &[
        (
            fm_devices::shmem::settings::SHM_DIR.var,
            "the segment directory doctor and cleanup look at",
        ),
        (
            "FM_*",
            "the settings config shows and doctor checks (docs/CONFIG.md)",
        ),
    ],
    see_also: &["fmrun(1)", "fm-bench(1)"],
};

fn main() -> ExitCode {
    fm_platform::die_quietly_on_closed_pipe();
    fm_clidocs::generate_if_asked(<Cli as clap::CommandFactory>::command, &MAN_PAGE);
    fm::init_logging();
    let cli = Cli::parse();
    match cli.cmd.unwrap_or(Cmd::Devices { json: false }) {
        Cmd::Devices { json } => devices(json),
        Cmd::Doctor { n, dir, json } => {
            // A broken settings file is the doctor's to report, not a reason to stop.
            let default = || fm::config::shm_dir().unwrap_or_else(|_| "/dev/shm".into());
            doctor::run(n, &dir.unwrap_or_else(default), json)
        }
        Cmd::Cleanup { dir, dry_run } => cleanup(&dir.unwrap_or_else(shm_dir), dry_run),
        Cmd::Pacer { force, svg } => pacer::run(force, svg.as_deref()),
        Cmd::Config { markdown, json } => config(markdown, json),
        Cmd::CmaPeer => doctor::cma_peer(),
    }
}

/// `fm-info config`: each setting's value and its source, from fm's table.
fn config(markdown: bool, json: bool) -> ExitCode {
    use fm_platform::setting::Scope;
    use std::fmt::Write as _;
    let mut out = String::new();
    if markdown {
        for s in fm::settings::all() {
            let _ = writeln!(out, "{}", s.markdown_row());
        }
    } else {
        let file = match fm::config_file::ConfigFile::load() {
            Ok(f) => f,
            Err(e) => {
                eprintln!("fm-info: {e}");
                return ExitCode::from(2);
            }
        };
        let width = fm::settings::all().map(|s| s.var.len()).max().unwrap_or(0);
        for s in fm::settings::all() {
            let from_file = (file.as_ref())
                .filter(|_| s.scope == Scope::Setting)
                .and_then(|f| f.get(s.var).map(|(v, line)| (v, f.path.display(), line)));
            let (value, source) = match (s.env(), from_file) {
                (Some(v), _) => (Some(v), "environment".to_string()),
                (None, Some((v, path, line))) => (Some(v.to_string()), format!("{path}:{line}")),
                (None, None) => (None, "default".to_string()),
            };
            let _ = match json {
                true => writeln!(
                    out,
                    "{}",
                    serde_json::json!({"var": s.var, "value": value, "source": source, "default": s.default})
                ),
                false => match value {
                    Some(v) => writeln!(out, "{:width$}  {v}  ({source})", s.var),
                    None => writeln!(out, "{:width$}  -  (default: {})", s.var, s.default),
                },
            };
        }
    }
    // A closed pipe (`| head`) ends the output, not the program with a panic.
    let _ = std::io::Write::write_all(&mut std::io::stdout().lock(), out.as_bytes());
    ExitCode::SUCCESS
}

pub fn shm_dir() -> PathBuf {
    fm::config::shm_dir().unwrap_or_else(|e| {
        eprintln!("fm-info: {e}");
        std::process::exit(2)
    })
}

/// `fm-info devices`' lines: text, or a JSON object per device.
struct DeviceLines {
    json: bool,
}

impl DeviceLines {
    fn device(&self, i: &DeviceInfo, note: &str) {
        let options = format!("{:?}", i.options);
        match self.json {
            true => println!(
                "{}",
                serde_json::json!({"device": i.name, "options": options, "mtu": i.mtu, "note": note})
            ),
            false => println!("  {:<9} {options:<40} mtu {:>6}  {note}", i.name, i.mtu),
        }
    }

    fn unavailable(&self, name: &str, why: &str) {
        match self.json {
            true => println!(
                "{}",
                serde_json::json!({"device": name, "unavailable": why})
            ),
            false => println!("  {name:<9} unavailable: {why}"),
        }
    }
}

fn devices(json: bool) -> ExitCode {
    let out = DeviceLines { json };
    if !json {
        println!(
            "devices on {} (option bits as PMv2's get-option-bits):",
            fm_platform::hostname()
        );
    }
    out.device(&SelfDevice::open(0).info(), "this process");
    // A real one-process segment, opened and gone again.
    let dir = shm_dir();
    let mut c = ShmemConfig::new(JobKey(rand_key()), 0, vec![0]);
    c.settings.dir = dir.clone();
    match ShmemDevice::open(&c) {
        Ok(d) => {
            let single = match doctor::probe_single_copy() {
                Ok(()) => "single copy (process_vm_readv/writev): allowed".to_string(),
                Err(e) => format!("single copy: not allowed ({e}); frames only"),
            };
            // The pacer is not run here: a job's frames are the pacer's
            // chosen frame less its 16-byte header (`fm-info pacer`), halved
            // while a host's ranks would exceed the segment's budget.
            out.device(
                &d.info(),
                &format!(
                    "in {}; {single}; mtu without the pacer: a job's is its frame size (`fm-info pacer`) less a 16-byte header, smaller with many ranks on a host",
                    dir.display()
                ),
            );
        }
        Err(e) => out.unavailable("shmem", &e.to_string()),
    }
    out.device(
        &NullDevice::open(vec![]).info(),
        "between hosts, desktop-only (--net null)",
    );
    // The network devices, really opened (and closed again) on loopback and
    // on each interface with an IPv4 address.
    let lo = std::net::IpAddr::from([127, 0, 0, 1]);
    match EthernetSocket::bind(EthernetConfig::new(lo)).and_then(|s| {
        let ep = s.endpoint()?;
        let addrs: Vec<String> = ep.addrs.iter().map(|a| a.to_string()).collect();
        let note = format!(
            "UDP; on loopback at {}, datagrams of up to {} bytes",
            addrs.join(", "),
            ep.mtu
        );
        Ok((s.associate(JobKey(rand_key()), 0, &[None])?, note))
    }) {
        Ok((d, note)) => out.device(&d.info(), &note),
        Err(e) => out.unavailable("ethernet", &e.to_string()),
    }
    let mut ifaces: Vec<String> = Vec::new();
    fm_platform::for_each_address(|name, a, _| {
        if a.is_ipv4() && !a.is_loopback() && !ifaces.iter().any(|i| i == name) {
            ifaces.push(name.to_string());
        }
    });
    if ifaces.is_empty() {
        out.unavailable("nic", "no interface with an IPv4 address besides loopback");
    }
    for i in ifaces {
        match NicSocket::open(NicConfig::new(&i)) {
            Ok(s) => {
                let ep = s.endpoint();
                let info = DeviceInfo {
                    name: "nic",
                    options: fm_devices::reliable::OPTIONS,
                    mtu: ep.mtu as usize - fm_devices::reliable::header::HEADER,
                };
                let mac = fm_devices::nic::format_mac(&ep.macs[0]);
                out.device(
                    &info,
                    &format!("raw frames on {i} ({mac}, network {})", ep.network),
                );
            }
            Err(e) => out.unavailable("nic", &format!("on {i}: {e}")),
        }
    }
    ExitCode::SUCCESS
}

fn rand_key() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    t ^ (std::process::id() as u64) << 40 | 1
}

fn cleanup(dir: &std::path::Path, dry_run: bool) -> ExitCode {
    let mut removed = 0;
    let mut kept = 0;
    for s in scan(dir) {
        if !s.is_stale() {
            kept += 1;
            continue;
        }
        let verb = if dry_run { "would remove" } else { "removed" };
        if dry_run || std::fs::remove_file(&s.path).is_ok() {
            removed += 1;
            let why = match s.unfinished {
                Some(_) => "never initialised: its creator died while making it",
                None => "no process alive",
            };
            println!(
                "{verb} {} (job {}, {} KiB, {why})",
                s.path.display(),
                s.job_key,
                s.bytes / 1024
            );
        } else {
            eprintln!(
                "fm-info: cannot remove {}: {}",
                s.path.display(),
                std::io::Error::last_os_error()
            );
        }
    }
    println!(
        "{removed} stale segment(s) {} in {}; {kept} of running jobs left alone",
        if dry_run { "found" } else { "removed" },
        dir.display()
    );
    ExitCode::SUCCESS
}
