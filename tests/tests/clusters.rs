//! A cluster of clusters (root only): cluster A, two hosts on a bridge
//! joined by `nic`; cluster B, two hosts on another bridge joined by
//! `ethernet`; a router namespace between them — started by fmrun through
//! real OpenSSH servers in the hosts' namespaces, from a topology file.

use fm_tests::clusters::Clusters;
use fm_tests::sshd::SshServers;
use fm_tests::{fmrun, network_counter, route_bytes, succeed, TempDir};
use std::io::BufRead;
use std::path::Path;

const TESTPROG: &str = env!("CARGO_BIN_EXE_fm-testprog");

/// Figure 7.2 over the namespaces: the fast network inside A, A's and
/// B's ethernet ranges nested in the joining network.
fn topology(c: &Clusters) -> String {
    let host = |h: &fm_tests::clusters::ClusterHost| {
        format!(
            "  {{ name = \"{}\", address = \"{}\", slots = 2 }},\n",
            h.name, h.addr
        )
    };
    let hosts = |k: usize| c.clusters[k].iter().map(host).collect::<String>();
    format!(
        "join = \"routed\"\n\n\
         [network.fast]\ndevice = \"nic\"\ninterface = \"fm0\"\n\n\
         [network.lan-b]\ndevice = \"ethernet\"\nrange = \"{}\"\n\n\
         [network.routed]\ndevice = \"ethernet\"\nrange = \"198.18.0.0/15\"\n\n\
         [[cluster]]\nname = \"A\"\nnetworks = [\"fast\", \"routed\"]\nhosts = [\n{}]\n\n\
         [[cluster]]\nname = \"B\"\nnetworks = [\"lan-b\", \"routed\"]\nhosts = [\n{}]\n",
        c.network(1),
        hosts(0),
        hosts(1)
    )
}

/// The device column of each rank's table in `--show-table` output.
fn tables(out: &str) -> Vec<Vec<String>> {
    let mut t: Vec<Vec<String>> = Vec::new();
    for l in out.lines() {
        if l.starts_with("destination device table of rank") {
            t.push(Vec::new());
        } else if let Some(cur) = t.last_mut() {
            if let [r, _host, dev] = l.split_whitespace().collect::<Vec<_>>()[..] {
                if r.parse::<u32>().is_ok() {
                    cur.push(dev.to_string());
                }
            }
        }
    }
    t
}

/// The job token of a running fm-testprog rank, from its environment.
fn a_rank_token() -> Option<String> {
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        if !String::from_utf8_lossy(&cmd).contains("fm-testprog") {
            continue;
        }
        let env = std::fs::read(e.path().join("environ")).unwrap_or_default();
        for var in env.split(|b| *b == 0) {
            if let Some(t) = var.strip_prefix(b"FM_JOB_TOKEN=") {
                return Some(String::from_utf8_lossy(t).into_owned());
            }
        }
    }
    None
}

/// Processes whose command line holds `needle`.
fn command_lines_with(needle: &str) -> Vec<String> {
    let mut hits = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        if cmd.contains(needle) {
            hits.push(cmd);
        }
    }
    hits
}

#[test]
// Long because it is one scenario: build two clusters of namespace hosts
// with sshd, run a job across them, check every pair's route.
#[allow(clippy::too_many_lines)]
fn two_clusters_through_ssh_route_each_pair_through_its_table() {
    let test = "two_clusters_through_ssh_route_each_pair_through_its_table";
    let Some(c) = Clusters::new(test, &[2, 2]) else {
        return;
    };
    let dir = TempDir::for_segments("clusters");
    let hosts: Vec<(&str, std::net::Ipv4Addr)> =
        c.hosts().map(|h| (h.namespace.as_str(), h.addr)).collect();
    let Some(ssh) = SshServers::start(test, &dir.0, &hosts) else {
        return;
    };
    let topo = dir.0.join("figure-7.2.toml");
    std::fs::write(&topo, topology(&c)).expect("write the topology");
    let topo_arg = topo.to_string_lossy().into_owned();
    let rsh = ssh.rsh();
    let args = [
        "--topology",
        &topo_arg,
        "--rsh",
        &rsh,
        "--show-table",
        "--timeout",
        "240",
    ];
    // Ranks pause after opening their devices, so the process listings can
    // be read while the job runs.
    let mut child = fmrun(
        TESTPROG,
        &dir,
        &args,
        Path::new(TESTPROG),
        &["alltoall", "3000", "65536", "27"],
    )
    .env("FM_PACER", "off")
    .env("FM_TEST_PAUSE_MS", "1500")
    .spawn()
    .expect("start fmrun");
    let mut lines = std::io::BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut head = Vec::new();
    while head
        .iter()
        .filter(|l: &&String| l.contains("paused rank"))
        .count()
        < 8
    {
        match lines.next() {
            Some(Ok(l)) => head.push(l),
            _ => break,
        }
    }
    let token = a_rank_token();
    let leaks = token.as_deref().map(command_lines_with).unwrap_or_default();
    let (rest, err) = fm_tests::finish(child, lines);
    let out = head.join("\n") + "\n" + &rest;
    assert!(
        token.is_some(),
        "no rank found to read the token from\n{out}\n{err}"
    );
    assert!(
        leaks.is_empty(),
        "the job token is on a command line: {leaks:?}"
    );
    assert_eq!(err.matches("ok, received").count(), 8, "{out}\n{err}");

    // The tables: as the topology implies, for every rank.
    let t = tables(&out);
    assert_eq!(t.len(), 8, "{out}");
    assert_eq!(
        t[0],
        ["self", "shmem", "nic", "nic", "ethernet", "ethernet", "ethernet", "ethernet"],
        "{out}"
    );
    let host = |r: usize| r / 2;
    let cluster = |r: usize| r / 4;
    for (me, row) in t.iter().enumerate() {
        for (dest, dev) in row.iter().enumerate() {
            let want = if dest == me {
                "self"
            } else if host(dest) == host(me) {
                "shmem"
            } else if cluster(dest) == cluster(me) && cluster(me) == 0 {
                "nic"
            } else {
                "ethernet"
            };
            assert_eq!(dev, want, "rank {me}'s table, rank {dest}\n{out}");
        }
    }
    // Each device carried exactly the traffic of the ranks its table gives
    // it: the message bytes, plus headers and credits (under 2 % here).
    let routes = route_bytes(&out);
    // A ranks: self, shmem, nic, ethernet, null; B ranks: no nic.
    assert_eq!(routes.len(), 4 * 5 + 4 * 4, "{out}");
    for (rank, dev, payload, sent) in &routes {
        assert!(
            *sent >= *payload && *sent <= payload + payload / 50 + 65536,
            "rank {rank}'s {dev}: {payload} payload bytes routed to it, {sent} sent\n{out}"
        );
        let uses = t[*rank as usize].iter().any(|d| d == dev) && dev != "self";
        assert_eq!(*payload > 0, uses, "rank {rank}'s {dev}\n{out}");
    }
    for dev in ["nic", "ethernet"] {
        assert!(network_counter(&out, dev, "data-sent") > 0, "{dev}\n{out}");
    }
    assert!(dir.segments().is_empty(), "{:?}", dir.segments());

    // The same binary with --net null on the same clusters: the same
    // tables with the NULL transport in place of the networks, and a send
    // off the host is the clear no-route error.
    let (out, err) = succeed(
        fmrun(
            TESTPROG,
            &dir,
            &[
                &args[..4],
                &["--net", "null", "--show-table", "--timeout", "120"],
            ]
            .concat(),
            Path::new(TESTPROG),
            &["noroute"],
        )
        .env("FM_PACER", "off"),
    );
    let t = tables(&out);
    assert_eq!(
        t[0],
        ["self", "shmem", "null", "null", "null", "null", "null", "null"],
        "{out}"
    );
    assert!(
        out.contains("no-route:") && out.contains("rank 7"),
        "{out}\n{err}"
    );
}

#[test]
fn the_same_binary_runs_with_net_null_on_one_host() {
    let dir = TempDir::for_segments("null-one-host");
    let (out, err) = succeed(
        fmrun(
            TESTPROG,
            &dir,
            &["-n", "4", "--net", "null", "--show-table"],
            Path::new(TESTPROG),
            &["alltoall", "2000", "65536", "27"],
        )
        .env("FM_PACER", "off"),
    );
    assert_eq!(err.matches("ok, received").count(), 4, "{err}");
    let t = tables(&out);
    assert_eq!(t[0], ["self", "shmem", "shmem", "shmem"], "{out}");
    for (rank, dev, payload, sent) in route_bytes(&out) {
        assert!(sent >= payload, "rank {rank}'s {dev}");
    }
}
