//! fmrun's command line and its handling of programs that are not fm jobs.

use std::process::{Command, Output};

fn fmrun(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fmrun"))
        .args(args)
        .env_remove("FM_LOG")
        .output()
        .expect("run fmrun")
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn output_is_forwarded_line_by_line_with_a_rank_prefix() {
    let o = fmrun(&[
        "-n",
        "3",
        "sh",
        "-c",
        "echo \"out $FM_RANK of $FM_SIZE\"; echo err >&2; printf tail",
    ]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    for r in 0..3 {
        assert!(out.contains(&format!("[{r}] out {r} of 3\n")), "{out}");
        assert!(out.contains(&format!("[{r}] tail\n")), "{out}");
        assert!(err.contains(&format!("[{r}] err\n")), "{err}");
    }
}

#[test]
fn the_first_failing_rank_gives_the_job_its_status() {
    let o = fmrun(&[
        "-n",
        "2",
        "sh",
        "-c",
        "if [ $FM_RANK = 1 ]; then exit 5; fi; sleep 30",
    ]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(5), "{err}");
    assert!(err.contains("rank 1") && err.contains("status 5"), "{err}");
}

#[test]
fn bad_command_lines_are_clear_errors() {
    for (args, want) in [
        (&["-n", "0", "true"][..], "-n must be"),
        (
            &["-n", "2", "--net", "carrier-pigeon", "true"][..],
            "unknown device",
        ),
        (
            &["-n", "2", "--net", "infiniband", "true"][..],
            "unknown device \"infiniband\"",
        ),
        (
            &["-n", "8", "--hosts", "a:3,b:3", "true"][..],
            "the hosts take 6 processes but -n is 8: rank 6 and 1 more are placed on no host",
        ),
        (&["true"][..], "say how many processes: -n N"),
        (
            &["-n", "2", "--hosts", "a", "--hostfile", "h", "true"][..],
            "give one of --hosts, --hostfile and --topology",
        ),
        (
            &["--hostfile", "/nonexistent/hosts", "true"][..],
            "/nonexistent/hosts: cannot read the host file",
        ),
        (
            &["-n", "2", "--hosts", "a", "--rsh", "ssh", "true"][..],
            "has no {host} to replace",
        ),
        (
            &["-n", "2", "--hosts", ":2", "true"][..],
            "\"\" is not a host name",
        ),
        (&["-n", "2", "--hosts", ",", "true"][..], "names no host"),
        (&["-n", "2", "--hosts", "a:x", "true"][..], "not a number"),
        (&["-n", "2", "/nonexistent/program"][..], "cannot start"),
        (
            &["-n", "2", "--grm", "127.0.0.1:1", "true"][..],
            "cannot reach the GRM",
        ),
    ] {
        let o = fmrun(args);
        let (_, err) = text(&o);
        assert!(!o.status.success(), "{args:?}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}

#[test]
fn a_timeout_stops_the_job() {
    let o = fmrun(&["-n", "2", "--timeout", "1", "sleep", "30"]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(124), "{err}");
    assert!(err.contains("--timeout"), "{err}");
}

/// `--timeout` takes units, and names the ranks it stopped (only those).
#[test]
fn a_timeout_in_units_names_the_ranks_still_running() {
    let stuck = "if [ $FM_RANK = 1 ]; then sleep 30; fi";
    let o = fmrun(&["-n", "3", "--timeout", "800ms", "sh", "-c", stuck]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(124), "{err}");
    assert!(err.contains("still running: rank 1;"), "{err}");
    for bad in ["5x", "0s", "1.5.2", "s"] {
        let o = fmrun(&["-n", "1", "--timeout", bad, "true"]);
        assert_eq!(o.status.code(), Some(2), "--timeout {bad}");
        assert!(text(&o).1.contains("--timeout"), "--timeout {bad}");
    }
}

#[test]
fn hosts_place_ranks_in_blocks_and_rsh_templates_start_them() {
    let show = "echo \"$FM_RANK $FM_HOST $VIA\"";
    let o = fmrun(&[
        "-n", "4", "--hosts", "a,b", "--rsh", "local", "sh", "-c", show,
    ]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    for line in ["[0] 0 a ", "[1] 1 a ", "[2] 2 b ", "[3] 3 b "] {
        assert!(out.contains(line), "{out}");
    }
    // A template in front of `env FM_…=… PROGRAM`, as `ssh {host}` or `ip netns exec {host}` would be.
    let o = fmrun(&[
        "-n",
        "3",
        "--hosts",
        "x:1,y:2",
        "--rsh",
        "env VIA=via-{host}",
        "sh",
        "-c",
        show,
    ]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    for line in ["[0] 0 x via-x", "[1] 1 y via-y", "[2] 2 y via-y"] {
        assert!(out.contains(line), "{out}");
    }
}

/// A file in a fresh directory, removed when the test ends.
struct Scratch(std::path::PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let d = std::env::temp_dir().join(format!("fmrun-cli-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&d).expect("a scratch directory");
        Scratch(d)
    }
    fn file(&self, name: &str, text: &str) -> String {
        let p = self.0.join(name);
        std::fs::write(&p, text).expect("write a scratch file");
        p.to_string_lossy().into_owned()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn bad_host_and_topology_files_are_one_line_naming_file_and_line() {
    let d = Scratch::new("bad-files");
    let cases = [
        ("--hostfile", "hosts", "a0 slots=2\nb0 cores=2\n", "hosts:2: unknown key \"cores\""),
        ("--hostfile", "hosts", "a0 slots=2\na0 slots=2\n", "hosts:2: host \"a0\" is listed twice"),
        ("--hostfile", "hosts", "a0 ranks=0,1\nb0 ranks=1\n", "hosts:2: rank 1 is placed twice"),
        ("--hostfile", "hosts", "\n# nobody\n", "hosts: names no host"),
        (
            "--topology",
            "t.toml",
            "[[cluster]]\nname = \"a\"\nhosts = [{ name = \"h\", slots = 1 }]\nswitch = 1\n",
            "t.toml:4: unknown field `switch`",
        ),
        (
            "--topology",
            "t.toml",
            "[[cluster]]\nname = \"a\"\nhosts = []\n",
            "t.toml:2: cluster \"a\" has no hosts",
        ),
        (
            "--topology",
            "t.toml",
            "[[cluster]]\nname = \"a\"\nhosts = [{ name = \"h\", slots = 1 }]\n[[cluster]]\nname = \"b\"\nhosts = [{ name = \"g\", slots = 1 }]\n",
            "t.toml:4: rank 0 (host h, cluster a) cannot reach rank 1 (host g, cluster b): no network joins",
        ),
    ];
    for (opt, name, body, want) in cases {
        let path = d.file(name, body);
        let o = fmrun(&[opt, &path, "--rsh", "local", "true"]);
        let (_, err) = text(&o);
        assert_eq!(o.status.code(), Some(2), "{body:?}: {err}");
        let want = format!("fmrun: {}/{want}", d.0.display());
        assert!(
            err.starts_with(&want),
            "{body:?}:\n got  {err}\n want {want}"
        );
        assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    }
}

#[test]
fn a_topology_runs_ranks_with_its_tables_and_net_null_replaces_the_networks() {
    let d = Scratch::new("topology");
    let path = d.file(
        "one.toml",
        "[network.lan]\ndevice = \"ethernet\"\nrange = \"127.0.0.0/8\"\n[[cluster]]\nname = \"c\"\nnetworks = [\"lan\"]\nhosts = [{ name = \"h0\", slots = 2 }, { name = \"h1\", ranks = [2] }]\n",
    );
    let show = "echo \"$FM_RANK $FM_HOST $FM_NET $FM_ROUTES $FM_ETH_RANGE\"";
    let o = fmrun(&["--topology", &path, "--rsh", "local", "sh", "-c", show]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    for line in [
        "[0] 0 h0 self,shmem,ethernet,null self,shmem,ethernet 127.0.0.0/8",
        "[1] 1 h0 self,shmem,ethernet,null shmem,self,ethernet 127.0.0.0/8",
        "[2] 2 h1 self,shmem,ethernet,null ethernet*2,self 127.0.0.0/8",
    ] {
        assert!(out.contains(line), "{out}");
    }
    let o = fmrun(&[
        "--topology",
        &path,
        "--net",
        "null",
        "--rsh",
        "local",
        "sh",
        "-c",
        show,
    ]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert!(out.contains("[2] 2 h1 null null*2,self"), "{out}");
    let o = fmrun(&["--topology", &path, "--net", "nic", "true"]);
    assert!(text(&o).1.contains("the topology names the networks"));
}

/// mpirun's spellings: `-np N` and `-np=N` are `--np`; after the program,
/// `-np` is the program's own argument.
#[test]
fn np_as_mpirun_spells_it() {
    for args in [&["-np", "2"][..], &["-np=2"][..]] {
        let mut a = args.to_vec();
        a.extend(["echo", "hi", "-np", "3"]);
        let o = fmrun(&a);
        let (out, err) = text(&o);
        assert!(o.status.success(), "{args:?}: {err}");
        let mut lines: Vec<&str> = out.lines().collect();
        lines.sort();
        assert_eq!(lines, ["[0] hi -np 3", "[1] hi -np 3"], "{args:?}");
    }
}

#[test]
fn every_tool_says_its_version() {
    let v = env!("CARGO_PKG_VERSION");
    let o = fmrun(&["--version"]);
    assert_eq!(text(&o).0.trim(), format!("fmrun {v}"));
    for tool in ["fm-info", "fm-grm", "fm-bench"] {
        let bin = std::path::Path::new(env!("CARGO_BIN_EXE_fmrun")).with_file_name(tool);
        if !bin.exists() {
            // Built by the workspace's `cargo test`, not by this package's alone.
            eprintln!("SKIPPED {tool} --version: {} not built", bin.display());
            continue;
        }
        let o = Command::new(&bin).arg("--version").output().expect(tool);
        let out = String::from_utf8_lossy(&o.stdout);
        assert_eq!(out.trim(), format!("{tool} {v}"));
    }
}

/// A rank killed by a signal is named with the signal's name.
#[test]
fn a_signal_is_named() {
    let o = fmrun(&["-n", "1", "sh", "-c", "kill -USR1 $$"]);
    let (_, err) = text(&o);
    assert!(!o.status.success());
    assert!(err.contains("signal 10 (SIGUSR1)"), "{err}");
}

/// `--no-prefix`: the ranks' lines as they are (JSON stays JSON).
#[test]
fn no_prefix_forwards_lines_as_they_are() {
    let o = fmrun(&["-n", "2", "--no-prefix", "echo", "{\"rank\": 0}"]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert_eq!(out, "{\"rank\": 0}\n{\"rank\": 0}\n");
}

/// `--output-filename DIR`: each rank's streams in DIR/rank.N/, none on
/// the terminal.
#[test]
fn output_filename_writes_a_file_per_rank_and_stream() {
    let dir = std::env::temp_dir().join(format!("fmrun-out-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let d = dir.to_string_lossy().into_owned();
    let both = "echo out $FM_RANK; echo err $FM_RANK >&2";
    let o = fmrun(&["-n", "3", "--output-filename", &d, "sh", "-c", both]);
    let (out, err) = text(&o);
    let read = |r: u32, s: &str| std::fs::read_to_string(dir.join(format!("rank.{r}/{s}")));
    let got: Vec<_> = (0..3)
        .map(|r| (read(r, "stdout"), read(r, "stderr")))
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(o.status.success(), "{err}");
    assert!(
        out.is_empty() && !err.contains("out ") && !err.contains("err "),
        "{out}{err}"
    );
    for (r, (so, se)) in got.into_iter().enumerate() {
        assert_eq!(so.expect("stdout file"), format!("out {r}\n"));
        assert_eq!(se.expect("stderr file"), format!("err {r}\n"));
    }
}

/// A host list naming this machine (localhost, a loopback address, its
/// host name) starts those ranks here, as mpirun does: the remote shell is
/// not used (here it would fail).
#[test]
fn this_machine_in_a_host_list_starts_ranks_directly() {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let hosts = format!("localhost:2,127.0.0.1:1,{}:1", name.trim());
    let show = "echo \"$FM_RANK $FM_HOST\"";
    let o = fmrun(&["--hosts", &hosts, "--rsh", "false {host}", "sh", "-c", show]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    let mut lines: Vec<&str> = out.lines().collect();
    lines.sort();
    let want = [
        "[0] 0 localhost".to_string(),
        "[1] 1 localhost".to_string(),
        "[2] 2 127.0.0.1".to_string(),
        format!("[3] 3 {}", name.trim()),
    ];
    assert_eq!(lines, want);
}

/// `-x VAR=VALUE` and `-x VAR` reach ranks started through a remote shell,
/// which (as `env -i` here) passes nothing else of fmrun's environment.
#[test]
fn export_reaches_ranks_through_a_remote_shell() {
    let show = "echo \"${FOO:-unset} ${MINE:-unset} ${OTHER:-unset}\"";
    let o = Command::new(env!("CARGO_BIN_EXE_fmrun"))
        .args(["-n", "2", "--hosts", "a,b", "--rsh", "env -i X{host}=1"])
        .args(["-x", "FOO=bar", "-x", "MINE", "sh", "-c", show])
        .env("MINE", "from fmrun")
        .env("OTHER", "not exported")
        .env_remove("FM_LOG")
        .output()
        .expect("fmrun");
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    let mut lines: Vec<&str> = out.lines().collect();
    lines.sort();
    assert_eq!(
        lines,
        ["[0] bar from fmrun unset", "[1] bar from fmrun unset"]
    );
    for bad in ["1BAD=2", "A-B=1", "SURELY_NOT_SET_HERE_42"] {
        let o = fmrun(&["-n", "1", "-x", bad, "true"]);
        assert_eq!(o.status.code(), Some(2), "-x {bad}");
    }
}

/// More ranks than CPUs here: fmrun says so once, unless told it is meant.
#[test]
fn oversubscription_is_said_unless_meant() {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let n = (cpus + 1).to_string();
    let o = fmrun(&["-n", &n, "true"]);
    let (_, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert_eq!(err.matches("oversubscribed").count(), 1, "{err}");
    let o = fmrun(&["-n", &n, "--oversubscribe", "true"]);
    assert!(!text(&o).1.contains("oversubscribed"));
    let o = fmrun(&["-n", "1", "true"]);
    assert!(!text(&o).1.contains("oversubscribed"));
}

/// Every tool writes its man page and completions from its own option
/// definitions (`TOOL --generate-docs DIR`, scripts/gen-docs.sh).
#[test]
fn every_tool_generates_its_man_page_and_completions() {
    let dir = std::env::temp_dir().join(format!("fm-docs-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut checked = 0;
    for (tool, option) in [
        ("fmrun", "--np"),
        ("fm-info", "doctor"),
        ("fm-grm", "--listen"),
        ("fm-bench", "pingpong"),
    ] {
        let bin = std::path::Path::new(env!("CARGO_BIN_EXE_fmrun")).with_file_name(tool);
        if !bin.exists() {
            eprintln!(
                "SKIPPED {tool} --generate-docs: {} not built",
                bin.display()
            );
            continue;
        }
        let o = Command::new(&bin)
            .arg("--generate-docs")
            .arg(&dir)
            .output()
            .expect(tool);
        assert!(o.status.success(), "{tool}: {o:?}");
        let page = std::fs::read_to_string(dir.join(format!("man1/{tool}.1"))).expect("man page");
        assert!(page.contains(&format!(".TH {tool} 1")), "{tool}: {page}");
        let escaped = option.replace('-', "\\-");
        assert!(
            page.contains(&escaped) || page.contains(option),
            "{tool}: no {option}"
        );
        for f in [
            format!("{tool}.bash"),
            format!("_{tool}"),
            format!("{tool}.fish"),
        ] {
            let c = std::fs::read_to_string(dir.join("completions").join(&f)).expect(&f);
            assert!(c.contains(tool), "{f}");
        }
        checked += 1;
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(checked >= 1);
}

/// An MPICH-built program (Debian's NetPIPE) with fm's MPI library missing
/// (an fmrun copied where no mpi/ folder is beside it), or kept off with
/// --no-mpi-lib: refused before any rank starts, naming the build command;
/// never N one-process MPICH jobs that exit 0.
#[test]
fn an_mpich_program_without_fms_mpi_library_is_refused_before_starting() {
    let np = "/usr/bin/NPmpich2";
    if !std::path::Path::new(np).exists() {
        eprintln!("SKIPPED: {np} not installed (netpipe-mpich2)");
        return;
    }
    let dir = std::env::temp_dir().join(format!("fmrun-no-mpi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a folder");
    let lone = dir.join("fmrun");
    std::fs::copy(env!("CARGO_BIN_EXE_fmrun"), &lone).expect("copy fmrun");
    // Another test's fork may hold the copy's write descriptor for a moment
    // (until its exec closes it): the kernel says "text file busy" then.
    let mut tries = 0;
    let moved = loop {
        match Command::new(&lone)
            .args(["-n", "2", np, "-u", "1024"])
            .env_remove("FM_LOG")
            .output()
        {
            Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy && tries < 100 => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            r => break r.expect("run fmrun"),
        }
    };
    let _ = std::fs::remove_dir_all(&dir);
    let kept_off = fmrun(&["-n", "2", "--no-mpi-lib", np]);
    for (o, why) in [(moved, "not beside this fmrun"), (kept_off, "--no-mpi-lib")] {
        let (out, err) = text(&o);
        assert_eq!(o.status.code(), Some(2), "{out}{err}");
        assert!(out.is_empty(), "a rank ran: {out}");
        assert!(
            err.contains("built against MPICH (it needs libmpich.so.12)"),
            "{err}"
        );
        assert!(err.contains(why), "{err}");
        assert!(
            err.contains("cargo build --release --workspace --lib --bins --examples"),
            "{err}"
        );
    }
}

/// The lines of a job's stdout without their `[rank] ` prefix, by rank.
fn by_rank(out: &str) -> Vec<String> {
    let mut lines: Vec<(u32, String)> = out
        .lines()
        .filter_map(|l| {
            let (r, rest) = l.strip_prefix('[')?.split_once("] ")?;
            Some((r.trim().parse().ok()?, rest.to_string()))
        })
        .collect();
    lines.sort();
    lines.into_iter().map(|(_, l)| l).collect()
}

/// mpirun's `-H`/`--host` and `--map-by node`: ranks dealt to the hosts in
/// turn, each keeping its count; `--map-by slot` (the default) in blocks.
/// Each rank learns its local rank under fm's and MPI's names.
#[test]
fn mpirun_host_and_map_by_place_ranks_and_say_their_local_rank() {
    let show = "echo $FM_HOST $FM_LOCAL_RANK/$FM_LOCAL_SIZE $MPI_LOCALRANKID \
                $OMPI_COMM_WORLD_LOCAL_RANK/$OMPI_COMM_WORLD_LOCAL_SIZE $PMI_RANK/$PMI_SIZE";
    for (args, want) in [
        (
            vec!["-H", "a:2,b:2", "--map-by", "node"],
            [
                "a 0/2 0 0/2 0/4",
                "b 0/2 0 0/2 1/4",
                "a 1/2 1 1/2 2/4",
                "b 1/2 1 1/2 3/4",
            ],
        ),
        (
            vec!["--host", "a:2,b:2"],
            [
                "a 0/2 0 0/2 0/4",
                "a 1/2 1 1/2 1/4",
                "b 0/2 0 0/2 2/4",
                "b 1/2 1 1/2 3/4",
            ],
        ),
    ] {
        let mut all = args.clone();
        all.extend(["--rsh", "local", "sh", "-c", show]);
        let o = fmrun(&all);
        let (out, err) = text(&o);
        assert!(o.status.success(), "{args:?}: {err}");
        assert_eq!(by_rank(&out), want, "{args:?}: {out}");
    }
    // On this host alone (no FM_HOST is set), every rank is local.
    let o = fmrun(&["-n", "3", "sh", "-c", show]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert_eq!(
        by_rank(&out),
        ["0/3 0 0/3 0/3", "1/3 1 1/3 1/3", "2/3 2 2/3 2/3"]
    );
}

/// `--bind-to core` with `--report-bindings`: each rank says its CPU, and
/// is pinned to it (also under `--rsh local`); `--bind-to none` pins none.
#[test]
fn bind_to_and_report_bindings() {
    let mine = "grep Cpus_allowed_list /proc/self/status | tr -d ' \\t'";
    let o = fmrun(&[
        "-H",
        "a:1,b:1",
        "--rsh",
        "local",
        "--bind-to",
        "core",
        "--report-bindings",
        "sh",
        "-c",
        mine,
    ]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    for r in 0..2 {
        let cpu = r % std::thread::available_parallelism().map_or(1, |n| n.get());
        assert!(
            err.contains(&format!("fmrun: rank {r} bound to CPU {cpu}\n")),
            "{err}"
        );
        assert!(
            out.contains(&format!("[{r}] Cpus_allowed_list:{cpu}\n")),
            "{out}"
        );
    }
    let o = fmrun(&["-n", "2", "--bind-to", "none", "--report-bindings", "true"]);
    let (_, err) = text(&o);
    assert!(err.contains("fmrun: rank 1 not bound"), "{err}");
}

/// `--timestamp-output`: each line begins with the seconds since the start.
#[test]
fn timestamp_output_begins_lines_with_the_time() {
    let o = fmrun(&["-n", "2", "--timestamp-output", "echo", "hi"]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    for line in out.lines() {
        let (t, rest) = line.split_once(' ').expect("a time");
        assert!(t.parse::<f64>().is_ok_and(|t| t >= 0.0), "{line}");
        assert!(rest.ends_with("] hi"), "{line}");
    }
    assert_eq!(out.lines().count(), 2, "{out}");
}

/// An option fmrun does not know gets advice for a launcher, not clap's
/// "use '-- --bogus'".
#[test]
fn an_unknown_option_is_named_with_advice_for_a_launcher() {
    let o = fmrun(&["--bogus", "-n", "2", "true"]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.starts_with("fmrun: unknown option --bogus"), "{err}");
    assert!(err.contains("go after its name"), "{err}");
    assert!(!err.contains("-- --bogus"), "{err}");
}

/// `--rsh local` passes what ssh would: the job's and FM_* variables, -x,
/// a login's PATH/HOME/USER; another variable of fmrun's shell is dropped.
#[test]
fn rsh_local_forwards_what_ssh_would() {
    let o = Command::new(env!("CARGO_BIN_EXE_fmrun"))
        .args([
            "-H", "a,b", "-n", "2", "--rsh", "local", "-x", "KEPT", "sh", "-c",
        ])
        .arg("echo dropped=[$DROPPED] kept=[$KEPT] fm=[$FM_SHM_DIR] home=[${HOME:+set}]")
        .env("DROPPED", "1")
        .env("KEPT", "2")
        .env("FM_SHM_DIR", "/dev/shm")
        .env_remove("FM_LOG")
        .output()
        .expect("fmrun");
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert_eq!(
        by_rank(&out),
        ["dropped=[] kept=[2] fm=[/dev/shm] home=[set]"; 2],
        "{out}"
    );
}

/// An Open MPI host file's `max_slots=`: a host takes no more.
#[test]
fn a_host_file_with_max_slots() {
    let dir = std::env::temp_dir().join(format!("fmrun-max-slots-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a folder");
    let file = dir.join("hosts");
    std::fs::write(&file, "a slots=1 max_slots=1\nb max_slots=2\n").expect("host file");
    let f = file.to_str().expect("utf-8");
    let ok = fmrun(&[
        "--hostfile",
        f,
        "-n",
        "3",
        "--rsh",
        "local",
        "sh",
        "-c",
        "echo $FM_HOST",
    ]);
    let over = fmrun(&["--hostfile", f, "-n", "4", "--rsh", "local", "true"]);
    let _ = std::fs::remove_dir_all(&dir);
    let (out, err) = text(&ok);
    assert!(ok.status.success(), "{err}");
    assert_eq!(by_rank(&out), ["a", "b", "b"], "{out}");
    let (_, err) = text(&over);
    assert_eq!(over.status.code(), Some(2), "{err}");
    assert!(err.contains("more than its max_slots=2"), "{err}");
}
