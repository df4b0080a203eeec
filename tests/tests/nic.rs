//! The nic device between namespace hosts on one bridge (root only): raw
//! frames of fm's EtherType through PACKET_MMAP rings, with the reliable
//! layer on top; ordinary IP traffic on the same interfaces goes on.

use fm_tests::netns::{rate_limit, Cluster, NET_NIC};
use fm_tests::{finish, network_counter, succeed, TempDir};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const TESTPROG: &str = env!("CARGO_BIN_EXE_fm-testprog");

/// Namespaces, two cores and a bandwidth test: one at a time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn exclusive() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

/// fm-testprog on every host of `c` through nic; it must succeed.
fn nic_job(c: &Cluster, per_host: usize, env: &[(&str, &str)], args: &[&str]) -> (String, String) {
    let dir = TempDir::for_segments("ns-nic");
    let out = succeed(
        c.fmrun(
            TESTPROG,
            &dir,
            &c.hosts_spec(per_host),
            NET_NIC,
            Path::new(TESTPROG),
            args,
        )
        .envs(env.iter().copied()),
    );
    assert!(dir.segments().is_empty());
    out
}

/// A command inside host `h`'s namespace.
fn on_host(c: &Cluster, h: usize, program: &str, args: &[&str]) -> Command {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", &c.hosts[h].name, program])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    cmd
}

fn assert_all_to_all(o: &str, e: &str, ranks: usize, messages: u64) {
    let ok = format!("ok, received {messages} messages");
    assert_eq!(e.matches(&ok).count(), ranks, "{e}");
    assert!(network_counter(o, "nic", "data-accepted") > 0, "{o}");
    // Every pair on other hosts went through nic: ethernet was not opened.
    assert!(!o.contains("ethernet rank"), "{o}");
}

#[test]
fn two_hosts_all_to_all_through_nic_while_ping_and_tcp_go_on() {
    let _one = exclusive();
    let test = "two_hosts_all_to_all_through_nic_while_ping_and_tcp_go_on";
    let Some(c) = Cluster::new(test, 2) else {
        return;
    };
    let to = c.hosts[1].addr.to_string();
    let mut sink = on_host(&c, 1, TESTPROG, &["tcp-sink", "5301"])
        .spawn()
        .expect("sink");
    let mut sink_out = BufReader::new(sink.stdout.take().expect("piped")).lines();
    assert!(sink_out
        .next()
        .is_some_and(|l| l.is_ok_and(|l| l.contains("listening"))));
    let bytes = (64u64 << 20).to_string();
    let target = format!("{to}:5301");
    let source = on_host(&c, 0, TESTPROG, &["tcp-source", &target, &bytes])
        .spawn()
        .expect("source");
    let ping = on_host(&c, 0, "ping", &["-c", "40", "-i", "0.05", "-W", "2", &to])
        .spawn()
        .expect("ping");
    let (o, e) = nic_job(&c, 2, &[], &["alltoall", "2000", "65536", "17"]);
    assert_all_to_all(&o, &e, 4, 2000);
    let src = source.wait_with_output().expect("source");
    assert!(
        src.status.success(),
        "{}",
        String::from_utf8_lossy(&src.stderr)
    );
    let rest: Vec<String> = sink_out.map_while(Result::ok).collect();
    assert!(sink.wait().expect("sink").success());
    assert!(
        rest.iter()
            .any(|l| l.contains(&format!("received {bytes} bytes"))),
        "{rest:?}"
    );
    let p = ping.wait_with_output().expect("ping");
    let p = String::from_utf8_lossy(&p.stdout);
    let received: u32 = p
        .split(',')
        .find_map(|f| f.trim().strip_suffix(" received")?.parse().ok())
        .unwrap_or(0);
    assert!(received >= 36, "ping during the job:\n{p}");
}

#[test]
fn four_hosts_all_to_all_through_nic_under_faults() {
    let _one = exclusive();
    let Some(c) = Cluster::new("four_hosts_all_to_all_through_nic_under_faults", 4) else {
        return;
    };
    let faults = [("FM_FAULTS", "drop=0.05,dup=0.01,reorder=0.02,seed=5")];
    let (o, e) = nic_job(&c, 2, &faults, &["alltoall", "1500", "65536", "23"]);
    assert_all_to_all(&o, &e, 8, 1500);
    assert!(network_counter(&o, "nic", "retransmits") > 0, "{o}");
    assert!(network_counter(&o, "nic", "duplicates") > 0, "{o}");
}

#[test]
fn a_rate_limited_link_drops_frames_and_nic_still_delivers() {
    let _one = exclusive();
    let test = "a_rate_limited_link_drops_frames_and_nic_still_delivers";
    let Some(c) = Cluster::new(test, 2) else {
        return;
    };
    // 100 Mbit/s and a 32 kB queue: a stream overruns it for sure (with
    // 200 Mbit/s and 128 kB it sometimes did not, once no retransmission
    // was spurious).
    if !rate_limit(&c.hosts[1].root_if, "100mbit", "32kb") {
        eprintln!("SKIPPED {test}: tc tbf unavailable");
        return;
    }
    let (o, e) = nic_job(&c, 1, &[], &["alltoall", "600", "262144", "3"]);
    assert_all_to_all(&o, &e, 2, 600);
    assert!(
        network_counter(&o, "nic", "retransmits") > 0,
        "the link never dropped: raise the stream or lower the rate\n{o}"
    );
}

#[test]
fn foreign_frames_of_our_ethertype_are_dropped_and_counted() {
    let _one = exclusive();
    let test = "foreign_frames_of_our_ethertype_are_dropped_and_counted";
    let Some(c) = Cluster::new(test, 2) else {
        return;
    };
    let dir = TempDir::for_segments("ns-nic-frames");
    let mut job = c
        .fmrun(
            TESTPROG,
            &dir,
            &c.hosts_spec(2),
            NET_NIC,
            Path::new(TESTPROG),
            &["alltoall", "1000", "16384", "9"],
        )
        .env("FM_TEST_PAUSE_MS", "800")
        .spawn()
        .expect("fmrun");
    let mut lines = BufReader::new(job.stdout.take().expect("piped")).lines();
    let (mut paused, t0) = (0, Instant::now());
    while paused < 4 && t0.elapsed() < Duration::from_secs(60) {
        let Some(Ok(l)) = lines.next() else { break };
        paused += l.contains("paused rank") as usize;
    }
    assert_eq!(paused, 4, "every rank says it is ready");
    // Broadcast from host 0: host 1's two ranks see every frame.
    let frames = on_host(&c, 0, TESTPROG, &["frames", "fm0", "600"])
        .output()
        .expect("frames");
    assert!(
        frames.status.success(),
        "{}",
        String::from_utf8_lossy(&frames.stderr)
    );
    let (o, err) = finish(job, lines);
    assert_all_to_all(&o, &err, 4, 1000);
    let invalid = network_counter(&o, "nic", "invalid-drops");
    // Each of host 1's ranks sees every frame but those the filter gives
    // to its neighbour: at least half of 600 each.
    assert!(
        (600..=1200).contains(&invalid),
        "{invalid} of 600 frames counted\n{o}"
    );
    assert!(dir.segments().is_empty());
}

#[test]
fn without_cap_net_raw_the_job_runs_on_ethernet_and_says_why_once_per_host() {
    let _one = exclusive();
    let test = "without_cap_net_raw_the_job_runs_on_ethernet_and_says_why_once_per_host";
    let Some(c) = Cluster::new(test, 2) else {
        return;
    };
    let dir = TempDir::for_segments("ns-nic-nocap");
    // Ranks start without CAP_NET_RAW in their bounding set, so not at all.
    let hosts = c.hosts_spec(2);
    let grm = format!("{}:0", c.gateway());
    let args = [
        "-n",
        "4",
        "--hosts",
        &hosts,
        "--rsh",
        "ip netns exec {host} setpriv --bounding-set=-net_raw",
        "--grm-listen",
        &grm,
        "--timeout",
        "120",
    ];
    let (o, e) = succeed(&mut fm_tests::fmrun(
        TESTPROG,
        &dir,
        &args,
        Path::new(TESTPROG),
        &["alltoall", "300", "16384", "4"],
    ));
    assert_eq!(e.matches("ok, received 300 messages").count(), 4, "{e}");
    assert!(
        !o.contains("nic rank") && o.contains("ethernet rank"),
        "{o}"
    );
    let why = e.matches("nic is not used on host").count();
    assert_eq!(why, 2, "one line per host:\n{e}");
    assert!(
        e.contains("CAP_NET_RAW") && e.contains("setcap cap_net_raw+ep"),
        "{e}"
    );
}

#[test]
fn nic_trunks_over_two_interfaces() {
    let _one = exclusive();
    let Some(c) = Cluster::with_networks("nic_trunks_over_two_interfaces", 2, 2) else {
        return;
    };
    let packets = |root_if: &str| -> u64 {
        std::fs::read_to_string(format!("/sys/class/net/{root_if}/statistics/rx_packets"))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0)
    };
    let before: Vec<u64> = c.hosts[0].root_ifs.iter().map(|i| packets(i)).collect();
    let env = [("FM_NIC_IFACES", "fm0,fm1")];
    let (o, e) = nic_job(&c, 1, &env, &["alltoall", "1000", "65536", "31"]);
    assert_all_to_all(&o, &e, 2, 1000);
    // Host 0 sent round-robin on both of its links (the root ends receive
    // what it sends): each carried about half of its frames.
    let data = network_counter(&o, "nic", "data-sent") / 2;
    for (i, root_if) in c.hosts[0].root_ifs.iter().enumerate() {
        let sent = packets(root_if) - before[i];
        assert!(
            sent > data / 3,
            "link {i} carried {sent} of ~{data} frames\n{o}"
        );
    }
}

/// Debian's NetPIPE built against MPICH, unmodified, between two namespace
/// hosts through nic (fm's libmpich.so.12, which fmrun puts first on the
/// ranks' library path): every byte checked up to 1 MiB, and the traffic
/// counted by nic's reliable layer.
#[test]
fn netpipe_built_for_mpich_runs_over_nic() {
    let _one = exclusive();
    let netpipe = Path::new("/usr/bin/NPmpich2");
    if !netpipe.exists() {
        eprintln!(
            "SKIPPED: no {} (apt-get install netpipe-mpich2)",
            netpipe.display()
        );
        return;
    }
    let mpi = Path::new(TESTPROG)
        .with_file_name("mpi")
        .join("libmpich.so.12");
    assert!(
        mpi.exists(),
        "{} is not built: run the workspace's tests",
        mpi.display()
    );
    let Some(c) = Cluster::new("netpipe_built_for_mpich_runs_over_nic", 2) else {
        return;
    };
    let dir = TempDir::for_segments("ns-nic-mpi");
    // Ping-pong, both ranks sending at once (`-2`), receives from any
    // source (`-z`, which this NetPIPE asks for as source -1: docs/MPI.md).
    for np_args in [
        &["-i", "-u", "1048576"][..],
        &["-i", "-2", "-u", "1048576"],
        &["-i", "-z", "-u", "1048576"],
    ] {
        let minus_one = if np_args.contains(&"-z") {
            "any-source"
        } else {
            "proc-null"
        };
        let cmd = c.fmrun(TESTPROG, &dir, &c.hosts_spec(1), NET_NIC, netpipe, np_args);
        // fmrun --stats: each rank's counters, nic's among them, at the end.
        let args: Vec<_> = cmd.get_args().map(|a| a.to_owned()).collect();
        let mut cmd = Command::new(cmd.get_program());
        cmd.arg("--stats")
            .args(args)
            .env("FM_SHM_DIR", &dir.0)
            .env("FM_MPI_SOURCE_MINUS_ONE", minus_one)
            .env_remove("FM_LOG")
            .stdin(Stdio::null())
            .current_dir(&dir.0); // NetPIPE writes np.out where it runs
        let (o, e) = succeed(&mut cmd);
        let all = format!("{o}{e}");
        assert!(
            all.matches("Integrity check passed").count() > 20 && !all.contains("failed"),
            "NPmpich2 {np_args:?}: {all}"
        );
        let accepted: u64 = all
            .lines()
            .filter_map(|l| l.split("reliable nic ").nth(1))
            .filter_map(|r| {
                r.split(", ").find_map(|f| {
                    f.strip_prefix("data_accepted ")?
                        .split([';', ' '])
                        .next()?
                        .parse::<u64>()
                        .ok()
                })
            })
            .sum();
        assert!(accepted > 1000, "nic carried {accepted} packets:\n{all}");
    }
    assert!(dir.segments().is_empty());
}

/// FM's one-sided windows between two namespace hosts through nic (2
/// ranks each: the two of a host share mapped windows), under loss: the
/// same checks as `tests/windows.rs`, guard bytes and refusals included.
#[test]
fn one_sided_windows_are_right_through_nic_under_faults() {
    let _one = exclusive();
    let Some(c) = Cluster::new("one_sided_windows_are_right_through_nic", 2) else {
        return;
    };
    let window = env!("CARGO_BIN_EXE_fm-window");
    let dir = TempDir::for_segments("ns-nic-window");
    let mut args = c.fmrun_args(&c.hosts_spec(2), NET_NIC);
    args.push("--stats".into());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (o, e) = succeed(
        fm_tests::fmrun(window, &dir, &args, Path::new(window), &["2", "35"])
            .env("FM_FAULTS", "drop=0.02,dup=0.01,reorder=0.02")
            .env("FM_WAIT_TIMEOUT", "120"),
    );
    let all = format!("{o}{e}");
    assert!(
        all.contains("windows ok") && all.contains("on 4 ranks"),
        "{all}"
    );
    // Every rank received data through nic (its counters at the end).
    assert_eq!(all.matches("; nic bytes_received").count(), 4, "{all}");
    assert!(dir.segments().is_empty());
}
