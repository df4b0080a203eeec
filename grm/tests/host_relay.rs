//! Host relays (`fm_grm::host_relay`, what `fmrun --host-agent` runs)
//! between a real GRM and real members on loopback: ranks join their
//! host's relay as they would the GRM, the GRM sees one HostJoin per host,
//! the node map reaches every host (from the GRM for the first 16, passed
//! on between relays for the rest), and what a rank says or how the job
//! ends goes through.

use fm_grm::host_relay::{HostRelay, RelayConfig};
use fm_grm::proto::{DeviceEndpoint, Join};
use fm_grm::{Event, Grm, GrmOptions, LauncherLink, Membership};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// More hosts than the GRM sends the map to itself: some get it relayed.
const HOSTS: u32 = 20;
const PER_HOST: u32 = 2;

fn join_of(rank: u32) -> Join {
    Join {
        job: [0; 16],
        nonce: [0; 32],
        proof: [0; 64],
        rank: Some(rank),
        host: format!("h{}", rank / PER_HOST),
        pid: 10_000 + rank,
        fingerprint: 42,
        handlers: vec![(1, "ping".into())],
        endpoints: vec![DeviceEndpoint {
            device: "shmem".into(),
            address: format!("/dev/shm/h{}", rank / PER_HOST).into_bytes(),
        }],
    }
}

struct Job {
    _grm: Grm,
    _launcher: LauncherLink,
    events: mpsc::Receiver<Event>,
    relays: Vec<HostRelay>,
    token: String,
}

/// A GRM, a job of HOSTS × PER_HOST registered, and a relay per host.
fn job() -> Job {
    let grm = Grm::start(GrmOptions {
        heartbeat_timeout: Duration::from_secs(10),
        ..GrmOptions::default()
    })
    .expect("start a GRM");
    let addr = grm.addr().to_string();
    let token = fm_grm::client::new_token();
    let (tx, events) = mpsc::channel();
    let launcher = LauncherLink::register(&addr, &token, HOSTS * PER_HOST, "relay", move |e| {
        let _ = tx.send(e);
    })
    .expect("register");
    let relays = (0..HOSTS)
        .map(|h| {
            HostRelay::start(RelayConfig {
                grm: addr.clone(),
                token: token.clone(),
                host: format!("h{h}"),
                ranks: PER_HOST as usize,
                attach_timeout: Duration::from_secs(20),
            })
            .expect("a relay")
        })
        .collect();
    Job {
        _grm: grm,
        _launcher: launcher,
        events,
        relays,
        token,
    }
}

/// Every rank joins through its host's relay; the memberships, and a
/// receiver of what each is told when the job ends under it.
fn join_all(j: &Job) -> (Vec<Membership>, mpsc::Receiver<(u32, String)>) {
    let (tx, ended) = mpsc::channel();
    let threads: Vec<_> = (0..HOSTS * PER_HOST)
        .map(|r| {
            let (addr, token, tx) = (
                j.relays[(r / PER_HOST) as usize].rank_addr(),
                j.token.clone(),
                tx.clone(),
            );
            std::thread::spawn(move || {
                Membership::join(
                    &addr,
                    &token,
                    join_of(r),
                    Duration::from_secs(20),
                    move |why| {
                        let _ = tx.send((r, why));
                    },
                )
            })
        })
        .collect();
    let members = threads
        .into_iter()
        .map(|t| t.join().expect("a joining thread").expect("joined"))
        .collect();
    (members, ended)
}

fn wait_for(rx: &mpsc::Receiver<Event>, what: impl Fn(&Event) -> bool) -> Event {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(e) if what(&e) => return e,
            Ok(_) => {}
            Err(e) => panic!("no such event: {e}"),
        }
    }
}

/// Each rank gets its own rank, a Welcome that proves the token (checked
/// by `Membership::join`) and the whole map, whether its relay got the map
/// from the GRM or from another relay; Ready goes through to the launcher
/// with the rank's pid; every rank leaving completes the job.
#[test]
fn ranks_join_through_their_hosts_relay_and_complete() {
    let j = job();
    let (members, _) = join_all(&j);
    for (r, m) in members.iter().enumerate() {
        let w = &m.welcome;
        assert_eq!(w.rank, r as u32);
        assert_eq!(w.nodes.len(), (HOSTS * PER_HOST) as usize);
        assert!((w.nodes.iter())
            .all(|n| n.pid == 10_000 + n.rank && n.host == format!("h{}", n.rank / PER_HOST)));
    }
    members[7].ready("table of 7".into());
    let ready = wait_for(&j.events, |e| matches!(e, Event::RankReady { .. }));
    assert_eq!(
        ready,
        Event::RankReady {
            rank: 7,
            pid: 10_007,
            table: "table of 7".into()
        }
    );
    for m in &members {
        m.leave();
    }
    wait_for(&j.events, |e| *e == Event::Ended("completed".into()));
}

/// A rank that fails ends the job for every rank, on every host, naming
/// it; a rank the agent saw exit with a failure after leaving does too.
#[test]
fn a_failed_rank_ends_the_job_everywhere_through_the_relays() {
    let j = job();
    let (members, ended) = join_all(&j);
    members[5].abort("out of memory");
    let died = wait_for(&j.events, |e| matches!(e, Event::PeerDied { .. }));
    let Event::PeerDied { rank, reason, .. } = died else {
        unreachable!()
    };
    assert_eq!(rank, 5);
    assert!(reason.contains("out of memory"), "{reason}");
    let mut told: Vec<u32> = (0..HOSTS * PER_HOST - 1)
        .map(|_| {
            let (r, why) = ended.recv_timeout(Duration::from_secs(20)).expect("told");
            assert!(
                why.contains("rank 5") && why.contains("out of memory"),
                "{why}"
            );
            r
        })
        .collect();
    told.sort();
    assert_eq!(
        told,
        (0..HOSTS * PER_HOST)
            .filter(|&r| r != 5)
            .collect::<Vec<_>>()
    );

    let j = job();
    let (members, _) = join_all(&j);
    members[9].leave();
    j.relays[4].rank_ended(9, "exited with status 7");
    let died = wait_for(&j.events, |e| matches!(e, Event::PeerDied { .. }));
    assert!(
        matches!(&died, Event::PeerDied { rank: 9, reason, .. } if reason.contains("exited with status 7 after leaving")),
        "{died:?}"
    );
}

/// A rank of another job (another token) is refused by the relay, as the
/// GRM would refuse it; the host's own ranks still start; a process joining
/// once they all have is refused too.
#[test]
fn a_relay_refuses_a_join_that_does_not_prove_its_token() {
    let j = job();
    let stranger = Membership::join(
        &j.relays[0].rank_addr(),
        &fm_grm::client::new_token(),
        join_of(0),
        Duration::from_secs(5),
        |_| {},
    );
    match stranger {
        Err(fm_grm::GrmError::Refused { reason, .. }) => {
            assert!(reason.contains("does not prove"), "{reason}")
        }
        other => panic!("{:?}", other.map(|m| m.welcome.rank)),
    }
    let (members, _) = join_all(&j);
    assert_eq!(members.len(), (HOSTS * PER_HOST) as usize);
    let late = Membership::join(
        &j.relays[0].rank_addr(),
        &j.token,
        join_of(1),
        Duration::from_secs(5),
        |_| {},
    );
    match late {
        Err(fm_grm::GrmError::Refused { reason, .. }) => {
            assert!(reason.contains("has joined already"), "{reason}")
        }
        other => panic!("{:?}", other.map(|m| m.welcome.rank)),
    }
}
