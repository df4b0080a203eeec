//! Multi-host jobs on real hosts made of network namespaces (root only):
//! fmrun starts each rank inside its host's namespace with
//! `ip netns exec`, the embedded GRM listens on the bridge, ranks on one
//! host talk through shared memory and ranks on different hosts through the
//! ethernet device over veth links.

use fm_tests::netns::{rate_limit, Cluster, NET_ETHERNET};
use fm_tests::{network_counter, succeed, TempDir};
use std::io::{BufRead, BufReader};
use std::path::Path;

const TESTPROG: &str = env!("CARGO_BIN_EXE_fm-testprog");

/// These tests share the machine's two cores and one of them measures
/// bandwidth: they run one at a time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn exclusive() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

/// fm-testprog with `per_host` ranks on each host of the cluster, hosts
/// joined by ethernet; it must succeed. Its stdout and stderr.
fn testprog(
    c: &Cluster,
    per_host: usize,
    dir: &TempDir,
    env: &[(&str, &str)],
    args: &[&str],
) -> (String, String) {
    let hosts = c.hosts_spec(per_host);
    succeed(
        c.fmrun(
            TESTPROG,
            dir,
            &hosts,
            NET_ETHERNET,
            Path::new(TESTPROG),
            args,
        )
        .envs(env.iter().copied()),
    )
}

#[test]
fn four_namespace_hosts_all_to_all_under_faults() {
    let _one = exclusive();
    let Some(c) = Cluster::new("four_namespace_hosts_all_to_all_under_faults", 4) else {
        return;
    };
    let dir = TempDir::for_segments("ns-a2a");
    let (o, e) = testprog(
        &c,
        2,
        &dir,
        &[("FM_FAULTS", "drop=0.05,dup=0.01,reorder=0.02,seed=21")],
        &["alltoall", "2000", "65536", "13"],
    );
    assert_eq!(e.matches("ok, received 2000 messages").count(), 8, "{e}");
    assert!(network_counter(&o, "ethernet", "retransmits") > 0, "{o}");
    assert!(dir.segments().is_empty());
}

#[test]
fn a_rate_limited_link_drops_packets_and_everything_still_arrives() {
    let _one = exclusive();
    let Some(c) = Cluster::new(
        "a_rate_limited_link_drops_packets_and_everything_still_arrives",
        2,
    ) else {
        return;
    };
    // Host 1's link: 100 Mbit/s with a small queue, so a stream overruns it
    // and the kernel drops (netem is not in this kernel; tbf is).
    if !rate_limit(&c.hosts[1].root_if, "100mbit", "32kb") {
        eprintln!("SKIPPED a_rate_limited_link_drops_packets_and_everything_still_arrives: tc tbf unavailable");
        return;
    }
    let dir = TempDir::for_segments("ns-tbf");
    let (o, e) = testprog(&c, 1, &dir, &[], &["alltoall", "600", "262144", "3"]);
    assert_eq!(e.matches("ok, received 600 messages").count(), 2, "{e}");
    assert!(
        network_counter(&o, "ethernet", "retransmits") > 0,
        "the link never dropped: raise the stream or lower the rate\n{o}"
    );
}

/// Bytes the kernel has sent and received on interface `iface` (this namespace's).
fn if_bytes(iface: &str) -> u64 {
    ["rx_bytes", "tx_bytes"]
        .iter()
        .map(|f| {
            std::fs::read_to_string(format!("/sys/class/net/{iface}/statistics/{f}"))
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok())
                .unwrap_or(0)
        })
        .sum()
}

/// Two namespace hosts joined by two networks, each of host 1's two links
/// limited to 200 Mbit/s; `None` (and SKIPPED said) where that cannot be.
fn two_limited_links(test: &str) -> Option<Cluster> {
    let c = Cluster::with_networks(test, 2, 2)?;
    for root_if in &c.hosts[1].root_ifs {
        if !rate_limit(root_if, "200mbit", "256kb") {
            eprintln!("SKIPPED {test}: tc tbf unavailable");
            return None;
        }
    }
    Some(c)
}

/// Trunking over two rate-limited links: both links carry the stream and
/// every message arrives intact. (What trunking gains in bandwidth is a
/// measurement, not a test: docs/PERFORMANCE.md, "Trunking".)
#[test]
fn trunking_spreads_a_stream_over_both_links_and_delivers_it_intact() {
    let _one = exclusive();
    let Some(c) =
        two_limited_links("trunking_spreads_a_stream_over_both_links_and_delivers_it_intact")
    else {
        return;
    };
    let before: Vec<u64> = c.hosts[1].root_ifs.iter().map(|i| if_bytes(i)).collect();
    let dir = TempDir::for_segments("ns-trunk");
    let (_, e) = testprog(
        &c,
        1,
        &dir,
        &[("FM_ETH_IFACES", "fm0,fm1")],
        &["alltoall", "600", "262144", "5"],
    );
    assert_eq!(e.matches("ok, received 600 messages").count(), 2, "{e}");
    // 600 messages of up to 256 KiB each way: each link carries a good
    // share (at least a tenth of the smallest possible total).
    for (i, root_if) in c.hosts[1].root_ifs.iter().enumerate() {
        let carried = if_bytes(root_if) - before[i];
        assert!(carried > 1 << 20, "link {root_if} carried {carried} bytes");
    }
    assert!(dir.segments().is_empty());
}

/// Streaming bandwidth (MB/s) of `fm-bench bw --device ethernet` between
/// the two hosts, over the interfaces named.
fn bw_between(c: &Cluster, ifaces: &str) -> f64 {
    let hosts = format!("{}:1,{}:1", c.hosts[0].name, c.hosts[1].name);
    let dir = TempDir::for_segments("ns-bw");
    let bench = fm_tests::workspace_bin(TESTPROG, "fm-bench");
    let args = [
        "bw", "--device", "ethernet", "--sizes", "65536", "--iters", "600", "--warmup", "60",
        "--json",
    ];
    let (o, _) = succeed(
        c.fmrun(TESTPROG, &dir, &hosts, NET_ETHERNET, &bench, &args)
            .env("FM_ETH_IFACES", ifaces),
    );
    o.lines()
        .filter_map(|l| l.split_once('{').map(|(_, r)| format!("{{{r}")))
        .find_map(|l| {
            let key = "\"mb_s\":";
            let at = l.find(key)? + key.len();
            l[at..].split([',', '}']).next()?.parse::<f64>().ok()
        })
        .expect("a bw row with mb_s")
}

/// The benchmark of trunking's gain (root; not part of the suite, it
/// measures and asserts nothing): `cargo test -p fm-tests --test multihost
/// bench_trunking -- --ignored --nocapture` prints one link's and two
/// links' bandwidth over 200 Mbit/s links (docs/PERFORMANCE.md).
#[test]
#[ignore = "a benchmark: run it with --ignored --nocapture"]
fn bench_trunking_over_two_rate_limited_links() {
    let _one = exclusive();
    let Some(c) = two_limited_links("bench_trunking_over_two_rate_limited_links") else {
        return;
    };
    // The better of two runs each: the machine is shared.
    let one = bw_between(&c, "fm0").max(bw_between(&c, "fm0"));
    let two = bw_between(&c, "fm0,fm1").max(bw_between(&c, "fm0,fm1"));
    println!(
        "one link {one:.1} MB/s, two links {two:.1} MB/s ({:.2}x)",
        two / one
    );
}

/// fmrun of fm-testprog `args` with one rank on each host of the cluster,
/// hosts joined by ethernet, its output piped.
fn one_per_host(c: &Cluster, dir: &TempDir, args: &[&str]) -> std::process::Command {
    c.fmrun(
        TESTPROG,
        dir,
        &c.hosts_spec(1),
        NET_ETHERNET,
        Path::new(TESTPROG),
        args,
    )
}

/// A stream from host 0 to host 1 through a receive pool of 16 packets
/// (STOP and GO all the time), while an attacker on host 0's link, who
/// captured host 1's first STOP, replays it `rate` times a second
/// (`fm-testprog replay-stop`; 0: no attacker). The job's stdout, stderr
/// (rank 1 says how long the stream took) and the attacker's report.
fn stream_under_replayed_stops(c: &Cluster, messages: &str, rate: u32) -> (String, String, String) {
    use std::io::Read;
    let dir = TempDir::for_segments("ns-replay");
    let mut job = one_per_host(c, &dir, &["stream", messages, "200"])
        .env("FM_ETH_POOL", "16")
        .env("FM_TEST_PAUSE_MS", "1500")
        .spawn()
        .expect("fmrun");
    let mut lines = BufReader::new(job.stdout.take().expect("piped")).lines();
    let mut ports = Vec::new();
    while ports.len() < 2 {
        let Some(Ok(l)) = lines.next() else { break };
        if let Some(a) = l.split("endpoint ").nth(1) {
            let a: std::net::SocketAddr = a.trim().parse().expect("an address");
            ports.push(a.port().to_string());
        }
    }
    assert_eq!(ports.len(), 2, "both ranks print their endpoint");
    let attacker = (rate > 0).then(|| {
        std::process::Command::new(TESTPROG)
            .args(["replay-stop", &c.hosts[0].root_if, &rate.to_string()])
            .args(&ports)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("the attacker")
    });
    let (o, e) = fm_tests::finish(job, lines);
    let mut report = String::new();
    if let Some(mut a) = attacker {
        drop(a.stdin.take()); // stop replaying
        let _ = a.wait();
        let _ = a.stdout.take().expect("piped").read_to_string(&mut report);
    }
    assert!(
        e.contains(&format!("rank 1: ok, received {messages} messages")),
        "{e}"
    );
    assert!(dir.segments().is_empty());
    (o, e, report)
}

/// The re-audit's attack: a genuine STOP, captured on the wire, replayed
/// 1,000 times a second into a stream that engages STOP and GO all the
/// time. Each replay is a counted duplicate, never an action: the sender
/// acts on no more STOPs than the receiver sent (before control numbers
/// every copy rewound and stopped it).
#[test]
fn a_replayed_stop_is_counted_and_never_acted_on() {
    let _one = exclusive();
    let Some(c) = Cluster::new("a_replayed_stop_is_counted_and_never_acted_on", 2) else {
        return;
    };
    let (o, _, report) = stream_under_replayed_stops(&c, "300000", 1000);
    let replayed: u64 = (report.split("replayed ").nth(1))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("the attacker's report: {report:?}"));
    assert!(
        report.contains("captured STOP") && replayed > 0,
        "the stream never engaged STOP, or nothing was replayed: {report}\n{o}"
    );
    let counted = network_counter(&o, "ethernet", "replayed-control");
    assert!(
        counted > 0 && counted <= replayed,
        "{counted} of {replayed} counted\n{o}"
    );
    let (sent, taken) = (
        network_counter(&o, "ethernet", "stops-sent"),
        network_counter(&o, "ethernet", "stops-received"),
    );
    assert!(taken <= sent, "{taken} STOPs acted on, {sent} sent\n{o}");
}

/// The same attack timed against the undisturbed stream (docs/SECURITY.md).
#[test]
#[ignore = "a benchmark: run it with --ignored --nocapture"]
fn bench_a_stream_under_1000_replayed_stops_a_second() {
    let _one = exclusive();
    let Some(c) = Cluster::new("bench_a_stream_under_1000_replayed_stops_a_second", 2) else {
        return;
    };
    let took = |e: &str| -> f64 {
        let at = e.find(" messages in ").expect("rank 1 says how long") + " messages in ".len();
        e[at..]
            .split_whitespace()
            .next()
            .and_then(|x| x.parse().ok())
            .expect("seconds")
    };
    let mut ratios = Vec::new();
    for round in 1..=5 {
        let (_, quiet, _) = stream_under_replayed_stops(&c, "300000", 0);
        let (o, attacked, report) = stream_under_replayed_stops(&c, "300000", 1000);
        let (q, a) = (took(&quiet), took(&attacked));
        ratios.push(a / q);
        println!(
            "round {round}: undisturbed {q:.3} s, under replayed STOPs {a:.3} s ({:+.1} %); attacker: {}; counted {}",
            (a / q - 1.0) * 100.0,
            report.trim().replace('\n', ", "),
            network_counter(&o, "ethernet", "replayed-control")
        );
    }
    ratios.sort_by(f64::total_cmp);
    println!("median: {:+.1} %", (ratios[ratios.len() / 2] - 1.0) * 100.0);
}

/// A host cut off from the others and from fmrun's GRM: fmrun's own lines
/// say what was found (the rank sent no heartbeat, or heard nothing from
/// the GRM), not only the exit status of the rank that ended itself.
#[test]
fn a_cut_off_host_is_named_on_fmruns_own_line() {
    use std::io::Read;
    let _one = exclusive();
    let Some(c) = Cluster::new("a_cut_off_host_is_named_on_fmruns_own_line", 2) else {
        return;
    };
    let dir = TempDir::for_segments("ns-cut");
    let mut job = one_per_host(&c, &dir, &["serve"])
        .env("FM_HEARTBEAT_TIMEOUT", "3s")
        .spawn()
        .expect("fmrun");
    let mut lines = BufReader::new(job.stdout.take().expect("piped")).lines();
    let ready = (lines.by_ref())
        .map_while(Result::ok)
        .filter(|l| l.contains(" ready"))
        .take(2)
        .count();
    assert_eq!(ready, 2, "both ranks serve");
    let cut = &c.hosts[1].root_if;
    let link = |state: &str| {
        std::process::Command::new("ip")
            .args(["link", "set", cut, state])
            .status()
            .expect("ip")
    };
    assert!(link("down").success());
    let mut err = String::new();
    let _ = job.stderr.take().expect("piped").read_to_string(&mut err);
    let status = job.wait().expect("fmrun");
    link("up");
    assert!(!status.success(), "{err}");
    let own: Vec<&str> = err.lines().filter(|l| l.starts_with("fmrun:")).collect();
    // The resource manager's verdict, or the cut rank's own (it heard
    // nothing from the GRM), whichever came first.
    assert!(
        own.iter()
            .any(|l| l.contains("sent no heartbeat for 3 s")
                || l.contains("heard nothing from the GRM")),
        "fmrun's own lines: {own:#?}\n{err}"
    );
    assert!(dir.segments().is_empty(), "{:?}", dir.segments());
}

/// fmrun over `hosts` of the cluster with `--rsh` through a script that
/// logs each remote start (its host) to `log` before `ip netns exec`.
fn counted_fmrun(c: &Cluster, dir: &TempDir, hosts: &str, args: &[&str]) -> std::process::Command {
    let script = dir.0.join("rsh.sh");
    let log = dir.0.join("remote-starts");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\necho \"$1\" >> '{}'\nexec ip netns exec \"$@\"\n",
            log.display()
        ),
    )
    .expect("write the remote shell");
    succeed(std::process::Command::new("chmod").arg("+x").arg(&script));
    let rsh = format!("{} {{host}}", script.display());
    let mut fmrun_args = c.fmrun_args(hosts, NET_ETHERNET);
    let at = fmrun_args.iter().position(|a| a == "--rsh").expect("--rsh") + 1;
    fmrun_args[at] = rsh;
    let fmrun_args: Vec<&str> = fmrun_args.iter().map(String::as_str).collect();
    fm_tests::fmrun(TESTPROG, dir, &fmrun_args, Path::new(TESTPROG), args)
}

/// The remote starts `counted_fmrun` logged.
fn remote_starts(dir: &TempDir) -> Vec<String> {
    let log = std::fs::read_to_string(dir.0.join("remote-starts")).unwrap_or_default();
    log.lines().map(str::to_string).collect()
}

/// Start `serve` on 8 hosts × 16 ranks; once every rank is ready, `act`
/// on the job and every rank's pid; then every rank must be gone within
/// the heartbeat timeout (3 s here) and a margin, on every host.
fn serve_then(c: &Cluster, dir: &TempDir, act: impl FnOnce(&mut std::process::Child, &[u32])) {
    let mut job = counted_fmrun(c, dir, &c.hosts_spec(16), &["serve"])
        .env("FM_HEARTBEAT_TIMEOUT", "3s")
        .spawn()
        .expect("fmrun");
    let lines = BufReader::new(job.stdout.take().expect("piped")).lines();
    let mut pids = vec![0u32; 128];
    let mut ready = 0;
    for l in lines.map_while(Result::ok) {
        let Some(rest) = l.split("rank ").nth(1) else {
            continue;
        };
        let words: Vec<&str> = rest.split_whitespace().collect();
        if let [rank, "pid", pid, "ready"] = words[..] {
            pids[rank.parse::<usize>().expect("rank")] = pid.parse().expect("pid");
            ready += 1;
            if ready == 128 {
                break;
            }
        }
    }
    assert_eq!(ready, 128, "every rank serves");
    act(&mut job, &pids);
    let until = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let alive = || pids.iter().filter(|&&p| fm_platform::pid_alive(p)).count();
    while alive() > 0 && std::time::Instant::now() < until {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let _ = job.kill();
    let _ = job.wait();
    assert_eq!(alive(), 0, "ranks left running");
}

/// 8 hosts × 16 ranks start through exactly 8 remote starts (one host
/// agent each); every rank's output is fmrun's as ever, prefixed by rank,
/// and a failing rank's exit status is the job's. A rank killed, or fmrun
/// killed, ends every process on every host.
#[test]
fn eight_hosts_of_16_ranks_start_through_one_remote_start_each() {
    let _one = exclusive();
    let test = "eight_hosts_of_16_ranks_start_through_one_remote_start_each";
    let Some(c) = Cluster::new(test, 8) else {
        return;
    };
    let dir = TempDir::for_segments("ns-agents");
    let (out, err) = succeed(
        counted_fmrun(
            &c,
            &dir,
            &c.hosts_spec(16),
            &["alltoall", "200", "8192", "5"],
        )
        .env("FM_LOG", "fm_grm=info"),
    );
    let mut starts = remote_starts(&dir);
    starts.sort();
    let mut hosts: Vec<String> = c.hosts.iter().map(|h| h.name.clone()).collect();
    hosts.sort();
    assert_eq!(starts, hosts, "one remote start per host");
    // fmrun runs no rank itself here: all 128 joined through the 8 agents,
    // one HostJoin each.
    let fence = (err.lines())
        .find(|l| l.contains("grm: job complete"))
        .unwrap_or_else(|| panic!("the GRM's fence line:\n{err}"));
    assert!(fence.contains("host_agents=8"), "{fence}");
    for r in 0..128 {
        let line = format!("[{r:>3}] rank {r}: ok, received");
        assert!(
            out.contains(&line) || err.contains(&line),
            "rank {r}:\n{err}"
        );
    }
    assert!(dir.segments().is_empty(), "{:?}", dir.segments());

    // Rank 37 leaves and exits with status 7: the job's status.
    let _ = std::fs::remove_file(dir.0.join("remote-starts"));
    let o = counted_fmrun(&c, &dir, &c.hosts_spec(16), &["exit", "37", "7"])
        .output()
        .expect("fmrun");
    let t = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(7), "{t}");
    assert!(t.contains("rank 37 exited with status 7"), "{t}");
    assert_eq!(remote_starts(&dir).len(), 8);

    // A rank killed: the job ends on every host.
    serve_then(&c, &dir, |job, pids| {
        // SAFETY: signalling a rank this test started.
        unsafe { libc::kill(pids[37] as i32, libc::SIGKILL) };
        let status = job.wait().expect("fmrun");
        assert!(!status.success());
    });
    // fmrun killed: its ranks on every host end by themselves.
    serve_then(&c, &dir, |job, _| {
        let _ = job.kill();
        let _ = job.wait();
    });
    assert!(dir.segments().is_empty(), "{:?}", dir.segments());
}
