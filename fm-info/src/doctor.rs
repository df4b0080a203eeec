//! `fm-info doctor`: each check prints `ok`, `warn` or `FAIL`, and for
//! anything not ok the exact fix. Exit status 1 if anything failed.

use fm_devices::shmem::segment::scan;
use fm_devices::shmem::ShmemConfig;
use fm_devices::JobKey;
use fm_platform as sys;
use std::ffi::CString;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::{Command, ExitCode, Stdio};

const TMPFS_MAGIC: i64 = 0x0102_1994;
const CAP_NET_RAW: u32 = 13;
/// Packet rings of the nic device lock this much per process, about.
const MEMLOCK_WANTED: u64 = 64 << 20;

#[derive(Default)]
struct Report {
    failed: bool,
    /// One JSON object per check instead of text.
    json: bool,
}

impl Report {
    fn say(&self, status: &str, what: &str, fix: Option<&str>) {
        if self.json {
            let mut o = serde_json::json!({ "check": status, "what": what });
            if let Some(f) = fix {
                o["fix"] = f.into();
            }
            println!("{o}");
            return;
        }
        match fix {
            Some(fix) => println!("{status:5} {what}\n      fix: {fix}"),
            None => println!("{status:5} {what}"),
        }
    }
    fn ok(&mut self, what: &str) {
        self.say("ok", what, None);
    }
    fn warn(&mut self, what: &str, fix: &str) {
        self.say("warn", what, Some(fix));
    }
    fn fail(&mut self, what: &str, fix: &str) {
        self.failed = true;
        self.say("FAIL", what, Some(fix));
    }
}

/// The environment and the settings file as a rank would read them.
fn check_settings(r: &mut Report) {
    match fm::config::check_settings() {
        Ok(()) => r.ok("settings: the environment and the settings file are valid"),
        Err(e) => r.fail(
            &format!("settings: {e}"),
            "correct the value (docs/CONFIG.md lists every setting; `fm-info config` shows where each comes from)",
        ),
    }
    for var in fm::settings::unknown_in_env() {
        r.warn(
            &format!("{var} is not a setting of fm: ranks ignore it"),
            "check its spelling against `fm-info config`, or unset it",
        );
    }
}

/// fm's MPI and C libraries beside this fm-info, as fmrun looks for them.
fn check_libraries(r: &mut Report) {
    use fm_launcher::libraries::{c_library, mpi_library_dir, BUILD_COMMAND};
    let build = format!("build them: `{BUILD_COMMAND}` (or install with scripts/install.sh)");
    match mpi_library_dir() {
        Some(d) => r.ok(&format!(
            "MPI library: {}/libmpich.so.12 (MPICH-built programs run on fm under fmrun)",
            d.display()
        )),
        None => r.warn(
            "MPI library: libmpich.so.12 is not beside fm-info: fmrun refuses MPICH-built programs",
            &build,
        ),
    }
    match c_library() {
        Some(p) => r.ok(&format!("C library: {}", p.display())),
        None => r.warn("C library: libfm_c.so is not beside fm-info", &build),
    }
}

fn mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / (1 << 20) as f64)
}

pub fn run(n: u32, dir: &Path, json: bool) -> ExitCode {
    let mut r = Report {
        json,
        ..Report::default()
    };
    if !json {
        println!(
            "fm-info doctor: a job of {n} processes on {}, segments in {}",
            sys::hostname(),
            dir.display()
        );
    }
    check_settings(&mut r);
    check_libraries(&mut r);
    check_space(&mut r, n.max(1), dir);
    check_stale(&mut r, dir);
    check_single_copy(&mut r);
    check_net_raw(&mut r);
    check_memlock(&mut r);
    if r.failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

fn statfs(dir: &Path) -> std::io::Result<libc::statfs> {
    let c = CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: a zeroed statfs filled by the kernel; `c` is NUL-terminated.
    unsafe {
        let mut st: libc::statfs = std::mem::zeroed();
        if libc::statfs(c.as_ptr(), &mut st) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(st)
    }
}

fn check_space(r: &mut Report, n: u32, dir: &Path) {
    let st = match statfs(dir) {
        Ok(s) => s,
        Err(e) => {
            return r.fail(
                &format!("segment directory {}: {e}", dir.display()),
                "create it, or point FM_SHM_DIR at a tmpfs directory you can write",
            )
        }
    };
    let free = st.f_bavail as u64 * st.f_bsize as u64;
    let need = ShmemConfig::new(JobKey(1), 0, (0..n).collect())
        .geometry()
        .total_bytes();
    let is_tmpfs = st.f_type as i64 == TMPFS_MAGIC;
    if free < need {
        let size_mib = (need * 2).div_ceil(1 << 20);
        let fix = if dir == Path::new("/dev/shm") {
            format!(
                "`mount -o remount,size={size_mib}m /dev/shm` (in Docker: `docker run --shm-size={size_mib}m`), or export FM_SHM_DIR=<a tmpfs directory with room>, or FM_SHM_PAYLOAD=4080 for smaller frames"
            )
        } else {
            format!("make {} at least {size_mib} MiB, or export FM_SHM_DIR=<a tmpfs directory with room>", dir.display())
        };
        r.fail(
            &format!(
                "{} has {} free; a job of {n} processes needs {} for its segment",
                dir.display(),
                mib(free),
                mib(need)
            ),
            &fix,
        );
    } else {
        r.ok(&format!(
            "{} has {} free; a job of {n} processes needs {} ({} jobs of that size fit)",
            dir.display(),
            mib(free),
            mib(need),
            free / need.max(1)
        ));
    }
    if !is_tmpfs {
        r.warn(
            &format!(
                "{} is not a tmpfs: segments there are written back to a disk",
                dir.display()
            ),
            "export FM_SHM_DIR=/dev/shm (or another tmpfs)",
        );
    }
}

fn check_stale(r: &mut Report, dir: &Path) {
    let all = scan(dir);
    let stale: Vec<_> = all.iter().filter(|s| s.is_stale()).collect();
    if stale.is_empty() {
        r.ok(&format!(
            "no stale segments ({} of running jobs)",
            all.len()
        ));
    } else {
        let bytes: u64 = stale.iter().map(|s| s.bytes).sum();
        let names: Vec<String> = stale
            .iter()
            .take(3)
            .map(|s| s.path.display().to_string())
            .collect();
        r.warn(
            &format!(
                "{} stale segment(s) of dead jobs hold {}: {}{}",
                stale.len(),
                mib(bytes),
                names.join(", "),
                if stale.len() > 3 { ", …" } else { "" }
            ),
            &format!("fm-info cleanup --dir {}", dir.display()),
        );
    }
}

fn check_single_copy(r: &mut Report) {
    let scope = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok());
    match probe_single_copy() {
        Ok(()) => r.ok(&format!(
            "single-copy transfers (process_vm_readv/writev) between processes work{}",
            scope.map_or(String::new(), |s| format!(" (ptrace_scope {s})"))
        )),
        Err(e) => {
            let fix = match scope {
                Some(2) => "`sysctl -w kernel.yama.ptrace_scope=1` (fm allows its peers itself at scope 1), or give the job CAP_SYS_PTRACE",
                Some(3) => "ptrace_scope 3 cannot be lowered until reboot: set kernel.yama.ptrace_scope=1 in /etc/sysctl.d/ and reboot",
                _ => "in a container: `docker run --cap-add SYS_PTRACE` (the default seccomp profile forbids process_vm_readv); large messages use the frame path meanwhile",
            };
            r.warn(&format!("single-copy transfers are not allowed here ({e}); large messages go through frames"), fix);
        }
    }
}

/// Read a word from a child process with process_vm_readv, as the shmem
/// device does with its peers.
pub fn probe_single_copy() -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut child = Command::new(exe)
        .arg("__cma-peer")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start the probe: {e}"))?;
    let mut line = String::new();
    let read = child
        .stdout
        .take()
        .map(|o| BufReader::new(o).read_line(&mut line));
    let result = (|| {
        read.ok_or("no probe output")?.map_err(|e| e.to_string())?;
        let mut it = line.split_whitespace().map(|w| w.parse::<u64>());
        let (Some(Ok(addr)), Some(Ok(want))) = (it.next(), it.next()) else {
            return Err(format!("the probe said {line:?}"));
        };
        let mut got = [0u8; 8];
        sys::process_read(child.id(), addr, &mut got).map_err(|e| e.to_string())?;
        if u64::from_ne_bytes(got) == want {
            Ok(())
        } else {
            Err("read the wrong bytes".to_string())
        }
    })();
    drop(child.stdin.take());
    let _ = child.wait();
    result
}

/// The probe's peer: allow any process to read us, say where, wait for EOF.
pub fn cma_peer() -> ExitCode {
    sys::allow_any_ptracer();
    let word = Box::new(0x5052_4f42_4500_0000u64 ^ std::process::id() as u64);
    println!("{} {}", &*word as *const u64 as u64, *word);
    let _ = std::io::stdout().flush();
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    std::hint::black_box(&word);
    ExitCode::SUCCESS
}

fn check_net_raw(r: &mut Report) {
    let eff = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        });
    match eff {
        Some(caps) if caps & (1 << CAP_NET_RAW) != 0 => r.ok("CAP_NET_RAW: raw packet rings (the nic device) can be opened"),
        _ => r.warn(
            "no CAP_NET_RAW: the nic device (raw packet rings) cannot be opened; ethernet (UDP) still works",
            "run as root, or `setcap cap_net_raw+ep <your program>`",
        ),
    }
}

fn check_memlock(r: &mut Report) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit fills the struct.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) } != 0 {
        return r.warn("cannot read the memlock limit", "check `ulimit -l`");
    }
    let show = |v: libc::rlim_t| {
        if v == libc::RLIM_INFINITY {
            "unlimited".to_string()
        } else {
            mib(v)
        }
    };
    if lim.rlim_cur == libc::RLIM_INFINITY || lim.rlim_cur >= MEMLOCK_WANTED {
        r.ok(&format!(
            "memlock limit {} (packet rings lock their memory)",
            show(lim.rlim_cur)
        ));
    } else {
        r.warn(
            &format!(
                "memlock limit {} (hard {}) is below the {} packet rings lock per process",
                show(lim.rlim_cur),
                show(lim.rlim_max),
                mib(MEMLOCK_WANTED)
            ),
            "`ulimit -l unlimited` in the job's shell; to raise the hard limit: `* - memlock unlimited` in /etc/security/limits.conf (systemd: LimitMEMLOCK=infinity)",
        );
    }
}
