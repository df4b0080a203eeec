//! Jobs whose ranks sit on different hosts and talk through the ethernet
//! device (UDP with Go-Back-N). The hosts are "virtual" here — fmrun
//! `--hosts … --rsh local` gives each rank its host identity on this
//! machine — so ranks on one host use shared memory and ranks on different
//! hosts real UDP sockets on loopback. Network namespaces come with the
//! multi-host harness.

use fm_tests::{finish, fmrun, network_counter, succeed, TempDir};
use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const TESTPROG: &str = env!("CARGO_BIN_EXE_fm-testprog");

/// 8 ranks on 4 virtual hosts, with `faults` injected.
fn job(dir: &TempDir, faults: &str, args: &[&str]) -> Command {
    let mut c = fmrun(
        TESTPROG,
        dir,
        &[
            "-n",
            "8",
            "--hosts",
            "h0,h1,h2,h3",
            "--rsh",
            "local",
            "--timeout",
            "240",
        ],
        Path::new(TESTPROG),
        args,
    );
    c.env("FM_FAULTS", faults);
    c
}

/// 2 ranks on 2 virtual hosts, ended by fmrun after `timeout` seconds.
fn pair(dir: &TempDir, timeout: &str, args: &[&str]) -> Command {
    let fmrun_args = [
        "-n",
        "2",
        "--hosts",
        "a,b",
        "--rsh",
        "local",
        "--timeout",
        timeout,
    ];
    fmrun(TESTPROG, dir, &fmrun_args, Path::new(TESTPROG), args)
}

#[test]
fn four_hosts_of_two_ranks_all_to_all_under_loss_duplication_and_reordering() {
    let dir = TempDir::for_segments("eth-a2a");
    let (o, e) = succeed(&mut job(
        &dir,
        "drop=0.05,dup=0.01,reorder=0.02,seed=11",
        &["alltoall", "2000", "65536", "5"],
    ));
    // Every rank checked every message: exactly once, in order, intact.
    assert_eq!(e.matches("ok, received 2000 messages").count(), 8, "{e}");
    assert_eq!(o.matches("ethernet rank").count(), 8, "{o}");
    assert!(
        network_counter(&o, "ethernet", "retransmits") > 0,
        "no retransmission under 5 % loss?\n{o}"
    );
    assert!(network_counter(&o, "ethernet", "duplicates") > 0, "{o}");
    assert!(dir.segments().is_empty());
}

#[test]
fn garbage_datagrams_at_the_device_port_are_dropped_and_counted() {
    let dir = TempDir::for_segments("eth-garbage");
    let mut child = job(&dir, "", &["alltoall", "1000", "16384", "9"])
        .env("FM_TEST_PAUSE_MS", "600")
        .spawn()
        .expect("fmrun");
    let mut lines = BufReader::new(child.stdout.take().expect("piped")).lines();
    let mut ports: Vec<SocketAddr> = Vec::new();
    let t0 = Instant::now();
    while ports.len() < 8 && t0.elapsed() < Duration::from_secs(60) {
        let Some(Ok(l)) = lines.next() else { break };
        if let Some(a) = l.split("endpoint ").nth(1) {
            ports.push(a.trim().parse().expect("an address"));
        }
    }
    assert_eq!(ports.len(), 8, "every rank prints its endpoint");
    // Random bytes, truncated headers, valid-looking magic with nonsense,
    // while the job starts sending.
    let s = UdpSocket::bind("127.0.0.1:0").expect("socket");
    let mut x: u64 = 0x1234_5678_9abc_def1;
    let mut sent = 0;
    for round in 0..300 {
        for p in &ports {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let len = (x % 200) as usize;
            let mut d: Vec<u8> = (0..len).map(|i| (x >> (i % 56)) as u8).collect();
            if round % 3 == 0 && d.len() >= 4 {
                d[0..2].copy_from_slice(b"Fm");
                d[2] = 1;
            }
            let _ = s.send_to(&d, p);
            sent += 1;
        }
    }
    let (o, err) = finish(child, lines);
    assert_eq!(
        err.matches("ok, received 1000 messages").count(),
        8,
        "{err}"
    );
    let invalid = network_counter(&o, "ethernet", "invalid-drops");
    assert!(
        invalid > 0 && invalid <= sent,
        "{invalid} of {sent} counted\n{o}"
    );
    assert!(dir.segments().is_empty());
}

#[test]
fn a_slow_receiver_engages_stop_and_go_and_nothing_is_lost() {
    let dir = TempDir::for_segments("eth-stopgo");
    let (o, e) = succeed(
        pair(&dir, "240", &["stream", "1500", "20000"])
            // A receive pool of 8 packets, far below the 64 credits a sender has.
            .env("FM_ETH_POOL", "8")
            .env("FM_TEST_SLOW_RANK", "1"),
    );
    assert!(e.contains("rank 1: ok, received 1500 messages"), "{e}");
    assert!(
        network_counter(&o, "ethernet", "stops-sent") > 0,
        "STOP never engaged\n{o}"
    );
    assert!(network_counter(&o, "ethernet", "stops-received") > 0, "{o}");
}

/// Total loss between two hosts: the sender, out of credit, is not left
/// waiting for ever. Once the reliable layer gives up on the peer
/// (`FM_ETH_DEAD_AFTER`), the send fails naming the rank, and the job
/// ends with it, within that time plus two seconds.
#[test]
fn total_loss_ends_the_job_naming_the_unreachable_rank() {
    let dir = TempDir::for_segments("eth-dead");
    let mut c = pair(&dir, "60", &["stream", "100", "1000"]);
    c.env("FM_FAULTS", "drop=1.0").env("FM_ETH_DEAD_AFTER", "3");
    let t0 = Instant::now();
    let out = c.output().expect("fmrun");
    let took = t0.elapsed();
    let (o, e) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        !out.status.success(),
        "the job cannot succeed with every packet lost\n{o}\n{e}"
    );
    assert!(
        e.contains("rank 1 is unreachable") || e.contains("rank 0 is unreachable"),
        "the failure names the rank:\n{e}"
    );
    assert!(
        took < Duration::from_secs(3 + 2 + 3),
        "took {took:?} (3 s to give up, 2 s to end, and start-up)\n{e}"
    );
    assert!(dir.segments().is_empty());
}
