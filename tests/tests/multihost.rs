//! Multi-host jobs on real hosts made of network namespaces (root only):
//! fmrun starts each rank inside its host's namespace with
//! `ip netns exec`, the embedded GRM listens on the bridge, ranks on one
//! host talk through shared memory and ranks on different hosts through the
//! ethernet device over veth links.

use fm_tests::netns::Cluster;
use fm_tests::{workspace_bin, TempDir};
use std::path::Path;
use std::process::{Command, Output, Stdio};

const TESTPROG: &str = env!("CARGO_BIN_EXE_fm-testprog");

/// These tests share the machine's two cores and one of them measures
/// bandwidth: they run one at a time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn exclusive() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner())
}

fn shm_dir(tag: &str) -> TempDir {
    let base = Path::new("/dev/shm");
    TempDir::new_in(base.is_dir().then_some(base), tag)
}

/// fmrun with `per_host` ranks on each host of the cluster.
fn fmrun(
    c: &Cluster,
    per_host: usize,
    dir: &TempDir,
    env: &[(&str, &str)],
    args: &[&str],
) -> Output {
    let hosts: Vec<String> = c
        .hosts
        .iter()
        .map(|h| format!("{}:{per_host}", h.name))
        .collect();
    let n = (per_host * c.hosts.len()).to_string();
    let mut cmd = Command::new(workspace_bin(TESTPROG, "fmrun"));
    cmd.args([
        "-n",
        &n,
        "--hosts",
        &hosts.join(","),
        "--rsh",
        "ip netns exec {host}",
    ])
    .args([
        "--grm-listen",
        &format!("{}:0", c.gateway()),
        "--timeout",
        "240",
    ])
    .arg(TESTPROG)
    .args(args)
    .env("FM_SHM_DIR", &dir.0)
    .env_remove("FM_LOG")
    .envs(env.iter().copied())
    .stdin(Stdio::null());
    cmd.output().expect("run fmrun")
}

fn counter(out: &str, name: &str) -> u64 {
    out.lines()
        .filter(|l| l.contains("ethernet rank"))
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let at = w.iter().position(|x| *x == name)?;
            w.get(at + 1)?.parse::<u64>().ok()
        })
        .sum()
}

#[test]
fn four_namespace_hosts_all_to_all_under_faults() {
    let _one = exclusive();
    let Some(c) = Cluster::new("four_namespace_hosts_all_to_all_under_faults", 4) else {
        return;
    };
    let dir = shm_dir("ns-a2a");
    let out = fmrun(
        &c,
        2,
        &dir,
        &[("FM_FAULTS", "drop=0.05,dup=0.01,reorder=0.02,seed=21")],
        &["alltoall", "2000", "65536", "13"],
    );
    let (o, e) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{:?}\n{o}\n{e}", out.status);
    assert_eq!(e.matches("ok, received 2000 messages").count(), 8, "{e}");
    assert!(counter(&o, "retransmits") > 0, "{o}");
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
    // Host 1's link: 200 Mbit/s with a small queue, so a stream overruns it
    // and the kernel drops (netem is not in this kernel; tbf is).
    let tbf = Command::new("tc")
        .args(["qdisc", "add", "dev", &c.hosts[1].root_if, "root", "tbf"])
        .args(["rate", "200mbit", "burst", "64kb", "limit", "128kb"])
        .status()
        .is_ok_and(|s| s.success());
    if !tbf {
        eprintln!("SKIPPED a_rate_limited_link_drops_packets_and_everything_still_arrives: tc tbf unavailable");
        return;
    }
    let dir = shm_dir("ns-tbf");
    let out = fmrun(&c, 1, &dir, &[], &["alltoall", "600", "262144", "3"]);
    let (o, e) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{:?}\n{o}\n{e}", out.status);
    assert_eq!(e.matches("ok, received 600 messages").count(), 2, "{e}");
    assert!(
        counter(&o, "retransmits") > 0,
        "the link never dropped: raise the stream or lower the rate\n{o}"
    );
}

/// Streaming bandwidth (MB/s) of `fm-bench bw --device ethernet` between
/// the two hosts, over the interfaces named.
fn bw_between(c: &Cluster, ifaces: &str) -> f64 {
    let hosts = format!("{},{}", c.hosts[0].name, c.hosts[1].name);
    let out = Command::new(workspace_bin(TESTPROG, "fmrun"))
        .args([
            "-n",
            "2",
            "--hosts",
            &hosts,
            "--rsh",
            "ip netns exec {host}",
        ])
        .args([
            "--grm-listen",
            &format!("{}:0", c.gateway()),
            "--timeout",
            "120",
        ])
        .arg(workspace_bin(TESTPROG, "fm-bench"))
        .args([
            "bw", "--device", "ethernet", "--sizes", "65536", "--iters", "600", "--warmup", "60",
            "--json",
        ])
        .env("FM_ETH_IFACES", ifaces)
        .env_remove("FM_LOG")
        .stdin(Stdio::null())
        .output()
        .expect("run fmrun");
    let o = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{:?}\n{o}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
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

#[test]
fn trunking_over_two_rate_limited_links_nearly_doubles_bandwidth() {
    let _one = exclusive();
    let test = "trunking_over_two_rate_limited_links_nearly_doubles_bandwidth";
    let Some(c) = Cluster::with_networks(test, 2, 2) else {
        return;
    };
    // Each of host 1's two links: 200 Mbit/s.
    for root_if in &c.hosts[1].root_ifs {
        let ok = Command::new("tc")
            .args(["qdisc", "add", "dev", root_if, "root", "tbf"])
            .args(["rate", "200mbit", "burst", "64kb", "limit", "256kb"])
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            eprintln!("SKIPPED {test}: tc tbf unavailable");
            return;
        }
    }
    // The better of two runs each: the machine is shared.
    let one = bw_between(&c, "fm0").max(bw_between(&c, "fm0"));
    let two = bw_between(&c, "fm0,fm1").max(bw_between(&c, "fm0,fm1"));
    eprintln!(
        "one link {one:.1} MB/s, two links {two:.1} MB/s ({:.2}x)",
        two / one
    );
    assert!(
        two >= 1.7 * one,
        "one link {one:.1} MB/s, two links {two:.1} MB/s"
    );
}
