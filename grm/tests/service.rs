//! The GRM's rules, against a real GRM on loopback: admission, ranks,
//! contexts, the fence, liveness, and reclaiming a dead job's segments.

use fm_devices::shmem::segment::{Geometry, Segment};
use fm_grm::proto::{self, DeviceEndpoint, Join, Msg};
use fm_grm::{Event, Grm, GrmOptions, LauncherLink, Membership};
use std::net::TcpStream;
use std::sync::mpsc;
use std::time::{Duration, Instant};

fn grm(heartbeat_timeout: Duration) -> Grm {
    Grm::start(GrmOptions {
        heartbeat_timeout,
        ..GrmOptions::default()
    })
    .expect("start a GRM")
}

fn launcher(g: &Grm, size: u32) -> (LauncherLink, String, mpsc::Receiver<Event>) {
    let token = fm_grm::client::new_token();
    let (tx, rx) = mpsc::channel();
    let l = LauncherLink::register(&g.addr().to_string(), &token, size, "test", move |e| {
        let _ = tx.send(e);
    })
    .expect("register");
    (l, token, rx)
}

fn join_req(token: &str, rank: Option<u32>, host: &str, shm: Option<&str>) -> Join {
    Join {
        token: token.to_string(),
        rank,
        host: host.to_string(),
        pid: std::process::id(),
        fingerprint: 42,
        handlers: vec![(1, "ping".into())],
        endpoints: shm
            .map(|d| DeviceEndpoint {
                device: "shmem".into(),
                address: d.as_bytes().to_vec(),
            })
            .into_iter()
            .collect(),
    }
}

/// Join `reqs` concurrently (the fence needs them all); results in order.
fn join_all(g: &Grm, reqs: Vec<Join>) -> Vec<Result<Membership, fm_grm::GrmError>> {
    let addr = g.addr().to_string();
    let threads: Vec<_> = reqs
        .into_iter()
        .map(|j| {
            let a = addr.clone();
            std::thread::spawn(move || Membership::join(&a, j, Duration::from_secs(10), |_| {}))
        })
        .collect();
    threads
        .into_iter()
        .map(|t| t.join().expect("join thread"))
        .collect()
}

fn wait_for(rx: &mpsc::Receiver<Event>, what: impl Fn(&Event) -> bool) -> Event {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(e) if what(&e) => return e,
            Ok(_) => {}
            Err(e) => panic!("no such event: {e}"),
        }
    }
}

#[test]
fn ranks_contexts_and_node_map_after_the_fence() {
    let g = grm(Duration::from_secs(10));
    let (l, token, rx) = launcher(&g, 4);
    let ms: Vec<Membership> = join_all(
        &g,
        vec![
            join_req(&token, Some(3), "h1", Some("/dev/shm")),
            join_req(&token, None, "h0", Some("/dev/shm")),
            join_req(&token, None, "h1", Some("/dev/shm")),
            join_req(&token, None, "h0", None),
        ],
    )
    .into_iter()
    .map(|r| r.expect("welcome"))
    .collect();
    let mut ranks: Vec<u32> = ms.iter().map(|m| m.welcome.rank).collect();
    assert_eq!(ms[0].welcome.rank, 3);
    ranks.sort();
    assert_eq!(ranks, [0, 1, 2, 3]);
    for m in &ms {
        assert_eq!(m.job_key(), l.job_key);
        assert_eq!(m.welcome.nodes.len(), 4);
        let me = &m.welcome.nodes[m.welcome.rank as usize];
        assert_eq!(me.pid, std::process::id());
    }
    // Contexts count per host and device, in rank order.
    let nodes = &ms[0].welcome.nodes;
    let mut per_host = std::collections::HashMap::new();
    for n in nodes {
        for (dev, ctx) in &n.contexts {
            let k = per_host
                .entry((n.host.clone(), dev.clone()))
                .or_insert(0u32);
            assert_eq!(ctx, k, "{nodes:?}");
            *k += 1;
        }
    }
    wait_for(&rx, |e| matches!(e, Event::Progress { joined: 4, size: 4 }));
    drop(ms);
    assert_eq!(
        wait_for(&rx, |e| matches!(e, Event::Ended(_))),
        Event::Ended("completed".into())
    );
    assert_eq!(g.status().jobs, 0);
}

#[test]
fn admission_errors_are_clear() {
    let g = grm(Duration::from_secs(10));
    let addr = g.addr().to_string();
    let (_l, token, _rx) = launcher(&g, 2);
    let refuse = |j: Join| match Membership::join(&addr, j, Duration::from_secs(5), |_| {}) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("admitted"),
    };
    assert!(refuse(join_req("no-such-token-0000", None, "h", None))
        .contains("no job with token no-suc"));
    assert!(
        refuse(join_req(&token, Some(2), "h", None)).contains("rank 2 is outside this job of 2")
    );
    // A rank taken twice: the first waits at the fence, the second is refused.
    let first = {
        let (a, j) = (addr.clone(), join_req(&token, Some(0), "h", None));
        std::thread::spawn(move || Membership::join(&a, j, Duration::from_secs(10), |_| {}))
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while g.status().members < 1 {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(refuse(join_req(&token, Some(0), "h", None)).contains("rank 0 has already joined"));
    let mut odd = join_req(&token, Some(1), "h", None);
    odd.handlers = vec![(1, "pong".into())];
    odd.fingerprint = 43;
    let why = refuse(odd);
    assert!(
        why.contains("handler 1 is \"pong\" on rank 1 but \"ping\" on rank 0"),
        "{why}"
    );
    // The mismatch ended the job: the first joiner is told.
    let e = first.join().expect("thread").err().expect("job ended");
    assert!(e.to_string().contains("handler table differs"), "{e}");
    // Registering needs a real token and size.
    let bad = LauncherLink::register(&addr, "short", 2, "x", |_| {})
        .err()
        .expect("refused");
    assert!(bad.to_string().contains("16 to 256"), "{bad}");
    let bad = LauncherLink::register(&addr, &fm_grm::client::new_token(), 0, "x", |_| {})
        .err()
        .expect("refused");
    assert!(bad.to_string().contains("1 to 65536"), "{bad}");
}

#[test]
fn a_dead_process_ends_the_job_tells_everyone_and_reclaims_its_segment() {
    let g = grm(Duration::from_secs(10));
    let (l, token, rx) = launcher(&g, 2);
    let dir = std::env::temp_dir().join(format!("fm-grm-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("mkdir");
    let d = dir.to_string_lossy().into_owned();
    // A segment of this job that not every process attached to (the
    // process died first), and one of another job that must stay.
    let ours = dir.join(format!("fm-{}-h", l.job_key));
    let theirs = dir.join(format!("fm-{}-h", fm_devices::JobKey(l.job_key.0 ^ 1)));
    let g2 = Geometry {
        procs: 2,
        queues: 2,
        frames: 64,
        payload: 4080,
    };
    let _a = Segment::create_or_open(&ours, l.job_key, g2, false, Duration::from_secs(1))
        .expect("segment");
    let _b = Segment::create_or_open(
        &theirs,
        fm_devices::JobKey(l.job_key.0 ^ 1),
        g2,
        false,
        Duration::from_secs(1),
    )
    .expect("segment");
    let (tx, ended) = mpsc::channel();
    let addr = g.addr().to_string();
    let survivor = {
        let (a, j) = (addr.clone(), join_req(&token, Some(0), "h", Some(&d)));
        std::thread::spawn(move || {
            Membership::join(&a, j, Duration::from_secs(10), move |why| {
                let _ = tx.send(why);
            })
        })
    };
    // Rank 1 joins over a raw connection and then "dies": the connection closes without Leave.
    let mut raw = TcpStream::connect(g.addr()).expect("connect");
    proto::write_msg(
        &mut raw,
        &Msg::Join(join_req(&token, Some(1), "h", Some(&d))),
    )
    .expect("send");
    assert!(matches!(proto::read_msg(&mut raw), Ok(Msg::Welcome(_))));
    let m0 = survivor.join().expect("thread").expect("welcome");
    drop(raw);
    let why = ended
        .recv_timeout(Duration::from_secs(5))
        .expect("survivor told");
    assert!(why.contains("rank 1") && why.contains("died"), "{why}");
    let e = wait_for(&rx, |e| matches!(e, Event::PeerDied { .. }));
    assert!(matches!(e, Event::PeerDied { rank: 1, .. }), "{e:?}");
    assert!(!ours.exists(), "the dead job's segment was not reclaimed");
    assert!(theirs.exists(), "another job's segment was removed");
    drop(m0);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_silent_process_is_declared_dead_after_the_heartbeat_timeout() {
    let g = grm(Duration::from_millis(2500));
    let (_l, token, rx) = launcher(&g, 1);
    // Joins, then neither sends heartbeats nor closes: hung.
    let mut raw = TcpStream::connect(g.addr()).expect("connect");
    proto::write_msg(&mut raw, &Msg::Join(join_req(&token, None, "h", None))).expect("send");
    assert!(matches!(proto::read_msg(&mut raw), Ok(Msg::Welcome(_))));
    let t0 = Instant::now();
    let e = wait_for(&rx, |e| matches!(e, Event::PeerDied { .. }));
    assert!(e.describe().contains("no heartbeat"), "{e:?}");
    assert!(t0.elapsed() < Duration::from_secs(8));
    // The launcher's own heartbeats kept it alive all along.
    assert_eq!(g.status().jobs, 0);
}

#[test]
fn an_aborting_process_ends_the_job_with_its_reason() {
    let g = grm(Duration::from_secs(10));
    let (_l, token, rx) = launcher(&g, 2);
    let mut ms = join_all(
        &g,
        vec![
            join_req(&token, None, "h", None),
            join_req(&token, None, "h", None),
        ],
    );
    let m1 = ms.pop().expect("two").expect("welcome");
    m1.abort("could not open its devices");
    let e = wait_for(&rx, |e| matches!(e, Event::PeerDied { .. }));
    assert!(
        e.describe().contains("failed: could not open its devices"),
        "{e:?}"
    );
}
