//! Helpers shared by the integration tests and the test program.

pub mod clusters;
pub mod fuzz;
pub mod netns;
pub mod slurm;
pub mod sshd;
pub mod threads;

/// Deterministic bytes for message `seq` from `src` to `dst` (xorshift64*).
pub fn fill(buf: &mut [u8], src: u32, dst: u32, seq: u64) {
    let mut x = (src as u64) << 48 ^ (dst as u64) << 32 ^ seq ^ 0x9E37_79B9_7F4A_7C15;
    for chunk in buf.chunks_mut(8) {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        let v = x.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes();
        chunk.copy_from_slice(&v[..chunk.len()]);
    }
}

/// The generator of everything about message `seq` of handler `kind`
/// from `src` to `dst` in a randomized test (its length, what its handler
/// does), for a run's `seed`: the same on every rank, so each can check
/// what it receives.
pub fn message_rng(seed: u64, kind: u16, src: u32, dst: u32, seq: u64) -> Rng {
    Rng::new(
        seed ^ (kind as u64) << 56
            ^ (src as u64) << 40
            ^ (dst as u64) << 24
            ^ seq.wrapping_mul(0x9E37_79B9),
    )
}

/// The bytes of message `seq` of `kind` from `src` to `dst`, `len` long.
pub fn message_bytes(len: usize, kind: u16, src: u32, dst: u32, seq: u64) -> Vec<u8> {
    let mut b = vec![0u8; len];
    fill(&mut b, src ^ (kind as u32) << 16, dst, seq);
    b
}

/// A small deterministic generator for sizes and split points.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in 0..=max.
    pub fn upto(&mut self, max: u64) -> u64 {
        self.next_u64() % (max + 1)
    }
    /// Log-uniform size in 0..=max: every order of magnitude equally likely,
    /// with the end points 0 and max forced now and then.
    pub fn size(&mut self, max: u64) -> u64 {
        match self.upto(31) {
            0 => 0,
            1 => max,
            _ => {
                let bits = 64 - max.leading_zeros() as u64;
                let b = self.upto(bits);
                self.upto((1u64 << b).min(max))
            }
        }
    }
}

/// A test program's exit status for its result; a failure is said on
/// stderr as "PROGRAM rank R: why".
pub fn exit_with(program: &str, r: Result<(), String>) -> std::process::ExitCode {
    match r {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!(
                "{program} rank {}: {e}",
                std::env::var("FM_RANK").unwrap_or_default()
            );
            std::process::ExitCode::FAILURE
        }
    }
}

/// Environment for test processes: tracing to stderr at warn unless FM_LOG says otherwise.
pub fn init_tracing() {
    fm::init_logging();
}

/// A directory for one test, removed with everything in it when dropped.
pub struct TempDir(pub std::path::PathBuf);

impl TempDir {
    /// A fresh directory under `base` (the system's temp dir when `None`).
    pub fn new_in(base: Option<&std::path::Path>, tag: &str) -> TempDir {
        let base = base.map_or_else(std::env::temp_dir, |b| b.to_path_buf());
        let p = base.join(format!(
            "fm-test-{tag}-{}-{:08x}",
            std::process::id(),
            Rng::new(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(1, |d| d.as_nanos() as u64)
            )
            .next_u64() as u32
        ));
        std::fs::create_dir_all(&p).expect("create a test directory");
        TempDir(p)
    }

    pub fn new(tag: &str) -> TempDir {
        TempDir::new_in(None, tag)
    }

    /// fm segment files (`fm-*`) left in the directory.
    pub fn segments(&self) -> Vec<String> {
        std::fs::read_dir(&self.0)
            .map(|d| {
                d.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.starts_with("fm-"))
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A small tmpfs mounted on a fresh directory (root only); unmounted when dropped.
pub struct TinyTmpfs(pub TempDir);

impl TinyTmpfs {
    /// `None` (after saying why the caller is skipped) when not root or the mount fails.
    pub fn mount(test: &str, size: &str) -> Option<TinyTmpfs> {
        if !is_root() {
            eprintln!("SKIPPED {test}: needs root to mount a small tmpfs");
            return None;
        }
        let dir = TempDir::new("tiny");
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&dir.0)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            eprintln!("SKIPPED {test}: mounting a tmpfs failed");
            return None;
        }
        Some(TinyTmpfs(dir))
    }
}

impl Drop for TinyTmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg(&self.0 .0)
            .status();
    }
}

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// A binary of another crate of the workspace, built next to this one's
/// (`cargo test` builds every crate's binaries that have integration tests).
pub fn workspace_bin(own_bin: &str, name: &str) -> std::path::PathBuf {
    let p = std::path::Path::new(own_bin).with_file_name(name);
    assert!(
        p.exists(),
        "{} is not built: run the workspace's tests (`cargo test`), or `cargo build --bins` first",
        p.display()
    );
    p
}

impl TempDir {
    /// A fresh directory under /dev/shm (the system's temp dir where there
    /// is none): a job's private segment directory.
    pub fn for_segments(tag: &str) -> TempDir {
        let base = std::path::Path::new("/dev/shm");
        TempDir::new_in(base.is_dir().then_some(base), tag)
    }
}

/// `fmrun FMRUN_ARGS PROGRAM PROG_ARGS`, the job's segments in `dir`, no
/// FM_LOG, stdin closed, output piped. `own_bin` is a binary of the calling
/// test crate, to find fmrun next to it.
pub fn fmrun(
    own_bin: &str,
    dir: &TempDir,
    fmrun_args: &[&str],
    program: &std::path::Path,
    prog_args: &[&str],
) -> std::process::Command {
    let mut c = std::process::Command::new(workspace_bin(own_bin, "fmrun"));
    c.args(fmrun_args)
        .arg(program)
        .args(prog_args)
        .env("FM_SHM_DIR", &dir.0)
        .env_remove("FM_LOG")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    c
}

/// Checker program `name` (one of this package's, `own_bin` being the
/// path Cargo gave for it) under fmrun with `fmrun_args`, `args` and
/// `env`: a wait that hangs fails rather than holds the suite (every wait
/// gives up after 120 s, and fmrun stops the job after 300 s).
pub fn checker(
    own_bin: &str,
    name: &str,
    dir: &TempDir,
    fmrun_args: &[&str],
    args: &[&str],
    env: &[(&str, &str)],
) -> std::process::Output {
    let exe = workspace_bin(own_bin, name);
    let fmrun_args = [&["--timeout", "300s"][..], fmrun_args].concat();
    let mut c = fmrun(own_bin, dir, &fmrun_args, &exe, args);
    c.env("FM_WAIT_TIMEOUT", "120").envs(env.iter().copied());
    c.output().expect("run fmrun")
}

/// A job's stdout and stderr, together.
pub fn output_text(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The checker's job succeeded and said "checks on RANKS ranks".
pub fn checks_passed(o: &std::process::Output, ranks: usize) {
    let t = output_text(o);
    let ok = format!("checks on {ranks} ranks");
    assert!(o.status.success() && t.contains(&ok), "{t}");
}

/// The sum over the ranks' `DEVICE rank R: NAME VALUE …` lines (printed by
/// fm-testprog) of counter NAME of network device DEVICE.
pub fn network_counter(out: &str, device: &str, name: &str) -> u64 {
    let tag = format!("{device} rank ");
    out.lines()
        .filter(|l| l.contains(&tag))
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let at = w.iter().position(|x| *x == name)?;
            w.get(at + 1)?.parse::<u64>().ok()
        })
        .sum()
}

/// The `route rank R: DEVICE payload P sent B` lines of fm-testprog's
/// all-to-all: (rank, device, payload bytes, bytes the device sent).
pub fn route_bytes(out: &str) -> Vec<(u32, String, u64, u64)> {
    out.lines()
        .filter_map(|l| {
            let rest = &l[l.find("route rank ")? + "route rank ".len()..];
            let w: Vec<&str> = rest.split_whitespace().collect();
            match w[..] {
                [r, dev, "payload", p, "sent", b] => Some((
                    r.trim_end_matches(':').parse().ok()?,
                    dev.to_string(),
                    p.parse().ok()?,
                    b.parse().ok()?,
                )),
                _ => None,
            }
        })
        .collect()
}

/// Run `cmd` to its end; it must succeed. Its stdout and stderr.
pub fn succeed(cmd: &mut std::process::Command) -> (String, String) {
    let out = cmd.output().expect("run the command");
    let (o, e) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(out.status.success(), "{:?}\n{o}\n{e}", out.status);
    (o, e)
}

/// Wait for a job started with piped output whose stdout was read up to
/// `lines`; it must succeed. The rest of its stdout, and its stderr.
pub fn finish(
    mut child: std::process::Child,
    lines: std::io::Lines<std::io::BufReader<std::process::ChildStdout>>,
) -> (String, String) {
    use std::io::Read;
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut err);
    }
    let status = child.wait().expect("wait for the job");
    let o = rest.join("\n");
    assert!(status.success(), "{status:?}\n{o}\n{err}");
    (o, err)
}

/// Ranks 0 and 1 of job `key` on shared memory in this process, their
/// segment in `dir` (rank 1 opens in a thread: each waits for the other).
pub fn shmem_pair(
    dir: &TempDir,
    key: u64,
) -> (
    fm_devices::shmem::ShmemDevice,
    fm_devices::shmem::ShmemDevice,
) {
    use fm_devices::shmem::{ShmemConfig, ShmemDevice};
    let mk = |r: u32| {
        let mut c = ShmemConfig::new(fm_devices::JobKey(key), r, vec![0, 1]);
        c.settings.dir = dir.0.clone();
        c.settings.attach_timeout = std::time::Duration::from_secs(10);
        c
    };
    let c1 = mk(1);
    let peer = std::thread::spawn(move || ShmemDevice::open(&c1).expect("open rank 1"));
    let d0 = ShmemDevice::open(&mk(0)).expect("open rank 0");
    (d0, peer.join().expect("rank 1"))
}

/// `fmrun` options of 8 ranks on 4 virtual hosts, with each rank's
/// counters printed as JSON at the end (`--stats=json`).
pub const FOUR_HOSTS_WITH_STATS: [&str; 8] = [
    "-n",
    "8",
    "--hosts",
    "a,b,c,d",
    "--rsh",
    "local",
    "--oversubscribe",
    "--stats=json",
];

/// Each rank's bytes sent on the ethernet device and its host, from the
/// output of a job of `n` ranks under `fmrun --stats=json` whose ranks
/// each print "rank R on HOST".
pub fn ethernet_bytes_by_rank(out: &str, n: usize) -> Vec<(u64, String)> {
    /// The number after `key` in `s`.
    fn field(s: &str, key: &str) -> Option<u64> {
        let rest = &s[s.find(key)? + key.len()..];
        let end = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        rest[..end].parse().ok()
    }
    let mut by_rank = vec![(u64::MAX, String::new()); n];
    for line in out.lines() {
        let line = line.split_once("] ").map_or(line, |(_, l)| l);
        if line.starts_with('{') {
            let rank = field(line, "\"rank\":").expect("a rank") as usize;
            let eth = line
                .split_once("\"ethernet\":")
                .expect("ethernet's counters")
                .1;
            by_rank[rank].0 = field(eth, "\"bytes_sent\":").expect("bytes sent");
        } else if let Some((r, host)) = line
            .split_once("rank ")
            .and_then(|(_, l)| l.split_once(" on "))
        {
            by_rank[r.parse::<usize>().expect("a rank")].1 = host.to_string();
        }
    }
    let all = by_rank.iter().all(|(b, h)| *b != u64::MAX && !h.is_empty());
    assert!(all, "not every rank's counters and host in:\n{out}");
    by_rank
}

/// Of each host, only its lowest rank sent on the network.
pub fn only_the_lowest_rank_of_each_host_sent(by_rank: &[(u64, String)]) {
    for (rank, (bytes, host)) in by_rank.iter().enumerate() {
        let lowest = by_rank.iter().position(|(_, h)| h == host) == Some(rank);
        assert_eq!(*bytes > 0, lowest, "rank {rank} on {host}: {by_rank:?}");
    }
}
