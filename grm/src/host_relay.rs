//! The GRM as a host's ranks see it under a host agent: the agent
//! (`fmrun --host-agent`) listens where its ranks' `FM_GRM` points (the
//! host's address towards the GRM, where other agents reach it too), takes
//! their Joins as the GRM would (a challenge each, the token's signature
//! checked), and joins them at the GRM in one [`HostJoin`]; the GRM's
//! one connection, heartbeat and signature per host replace one per rank
//! (docs/SCALE.md). At the fence it gets a [`proto::HostWelcome`], and the
//! node map from the GRM or from another agent ([`Msg::NodeMap`], taken
//! only if its digest is the one the HostWelcome proves), passes the map
//! on to the agents its HostWelcome names, and welcomes each rank with a
//! Welcome proved for that rank's own nonce. Afterwards it passes what its
//! ranks say to the GRM ([`Msg::ForRank`]), reports a rank that ends
//! without leaving as that rank's death, and tells its ranks how the job
//! ended. Ranks are unchanged: to them this is the GRM.
//!
//! Threads, all blocking: one accepts, one per connection reads, one runs
//! the relay ([`run`]) on the events they send it; the heartbeats to the
//! GRM are [`HostMembership`]'s, those to the ranks one more thread's.

use crate::auth::{self, Proof};
use crate::client::{Event, HostMembership, HEARTBEAT};
use crate::proto::{self, HostJoin, HostMember, Join, Msg, ProtoError};
use std::collections::BTreeMap;
use std::io;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long a connection to the relay has to say what it is.
const GREETING: Duration = Duration::from_secs(30);
/// Connections the relay serves beyond its ranks (agents passing the map
/// on; a stray or hostile client).
const SPARE_CONNECTIONS: usize = 64;

/// What the relay needs to know of its job and host.
#[derive(Clone, Debug)]
pub struct RelayConfig {
    /// The GRM's address (`FM_GRM` as fmrun gave it).
    pub grm: String,
    pub token: String,
    pub host: String,
    /// How many ranks of the job this host runs: the relay joins them at
    /// the GRM once all have joined here.
    pub ranks: usize,
    /// The fence's deadline, at the relay as at a rank (`FM_ATTACH_TIMEOUT`).
    pub attach_timeout: Duration,
}

/// A running relay.
pub struct HostRelay {
    /// Where this host's ranks, and other agents, reach it.
    rank_addr: SocketAddr,
    events: Sender<Ev>,
    /// Says when the relay is done.
    finished: Mutex<Receiver<()>>,
}

/// What the relay's threads tell it.
enum Ev {
    /// A rank on connection `conn`, challenged with this nonce, sent this
    /// Join (its signature not yet checked: the relay holds the token).
    Joined(u64, Proof, Join, TcpStream),
    /// Another agent passed the node map on.
    Map(Vec<u8>),
    /// Connection `conn` (a rank's, once joined) sent this.
    Said(u64, Msg),
    /// Connection `conn` ended, for this reason.
    Closed(u64, String),
    /// The GRM said this after the fence (or was lost).
    Grm(Event),
    /// The agent saw rank `rank` end this way; answered once the GRM is
    /// told, or needs not be.
    Ended(u32, String, Sender<()>),
    /// Every rank has ended: the agent is about to.
    Finished,
}

impl HostRelay {
    /// Listen on every address of the host, and serve until the job ends.
    pub fn start(cfg: RelayConfig) -> io::Result<HostRelay> {
        // Where ranks and other agents reach this one: the address this
        // host sends from to the GRM. Ranks take their network address
        // from the way to their GRM, so not loopback.
        let ip = route_to(&cfg.grm)?;
        let any: std::net::IpAddr = match ip {
            std::net::IpAddr::V4(_) => std::net::Ipv4Addr::UNSPECIFIED.into(),
            std::net::IpAddr::V6(_) => std::net::Ipv6Addr::UNSPECIFIED.into(),
        };
        let listener = TcpListener::bind((any, 0))?;
        let rank_addr = SocketAddr::new(ip, listener.local_addr()?.port());
        let relay = rank_addr.to_string();
        let (tx, rx) = mpsc::channel();
        let accept_tx = tx.clone();
        let limit = cfg.ranks + SPARE_CONNECTIONS;
        std::thread::Builder::new()
            .name("relay-accept".into())
            .spawn(move || accept(listener, accept_tx, limit))?;
        let run_tx = tx.clone();
        let (finished_tx, finished) = mpsc::channel();
        std::thread::Builder::new()
            .name("relay".into())
            .spawn(move || {
                if let Err(e) = run(&cfg, &relay, &rx, &run_tx) {
                    tracing::warn!("host relay on {}: {e}", cfg.host);
                    eprintln!("fmrun host agent on {}: {e}", cfg.host);
                }
                let _ = finished_tx.send(());
            })?;
        Ok(HostRelay {
            rank_addr,
            events: tx,
            finished: Mutex::new(finished),
        })
    }

    /// Every rank has ended: wait (up to `within`) until the relay has
    /// passed on all they said, so that the agent's own end, which closes
    /// the host's connection to the GRM, comes after their Leaves.
    pub fn finish(&self, within: Duration) {
        let _ = self.events.send(Ev::Finished);
        if let Ok(f) = self.finished.lock() {
            let _ = f.recv_timeout(within);
        }
    }

    /// The address the host's ranks get as `FM_GRM`.
    pub fn rank_addr(&self) -> String {
        self.rank_addr.to_string()
    }

    /// Rank `rank` failed this way (the agent saw its exit status): once
    /// its connection has said all it had, the GRM hears of it as the
    /// rank's death (after its Leave, if it left: a failing rank ends the
    /// job). Returns once that is written, or after a second.
    pub fn rank_ended(&self, rank: u32, how: &str) {
        let (done, told) = mpsc::channel();
        if self.events.send(Ev::Ended(rank, how.into(), done)).is_ok() {
            let _ = told.recv_timeout(Duration::from_secs(1));
        }
    }
}

/// The local address this host sends from to reach `grm`.
fn route_to(grm: &str) -> io::Result<std::net::IpAddr> {
    use std::net::ToSocketAddrs;
    let to = (grm.to_socket_addrs()?.next()).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!("{grm} resolves to nothing"),
        )
    })?;
    let probe = std::net::UdpSocket::bind(match to {
        SocketAddr::V4(_) => "0.0.0.0:0",
        SocketAddr::V6(_) => "[::]:0",
    })?;
    probe.connect(to)?;
    Ok(probe.local_addr()?.ip())
}

fn accept(listener: TcpListener, tx: Sender<Ev>, limit: usize) {
    let open = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    for (conn, s) in (0u64..).zip(listener.incoming()) {
        let Ok(s) = s else { continue };
        use std::sync::atomic::Ordering::SeqCst;
        if open.fetch_add(1, SeqCst) >= limit {
            open.fetch_sub(1, SeqCst);
            tracing::warn!("host relay: too many connections; one refused");
            continue;
        }
        let (tx, open) = (tx.clone(), open.clone());
        let spawned = std::thread::Builder::new()
            .name("relay-conn".into())
            .stack_size(128 << 10)
            .spawn(move || {
                serve(conn, s, &tx);
                open.fetch_sub(1, SeqCst);
            });
        if spawned.is_err() {
            tracing::warn!("host relay: no thread for a connection");
        }
    }
}

/// One connection: challenged; a rank's Join (its signature checked) or
/// another agent's NodeMap; then, for a rank, what it says until it ends.
fn serve(conn: u64, mut s: TcpStream, tx: &Sender<Ev>) {
    let _ = s.set_nodelay(true);
    let challenge = auth::nonce();
    if proto::write_msg(&mut s, &Msg::Challenge { nonce: challenge }).is_err() {
        return;
    }
    let _ = s.set_read_timeout(Some(GREETING));
    match proto::read_grm_msg(&mut s) {
        Ok(Msg::Join(j)) => {
            let Ok(writer) = s.try_clone() else { return };
            if tx.send(Ev::Joined(conn, challenge, j, writer)).is_err() {
                return;
            }
        }
        Ok(Msg::NodeMap { map }) => {
            let _ = tx.send(Ev::Map(map));
            return;
        }
        _ => return,
    }
    // A rank: what it says, until its connection ends. Its heartbeats
    // come every second; once the GRM's heartbeat timeout is known, a
    // rank silent that long is judged as the GRM would ([`serve_job`]).
    let _ = s.set_read_timeout(None);
    loop {
        match proto::read_msg(&mut s) {
            Ok(m) => {
                if tx.send(Ev::Said(conn, m)).is_err() {
                    return;
                }
            }
            Err(e) => {
                let why = match e {
                    ProtoError::Io(e) if e.kind() == io::ErrorKind::UnexpectedEof => {
                        "closed its connection to its host agent without leaving the job (the process died)".to_string()
                    }
                    ProtoError::Io(e)
                        if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) =>
                    {
                        "sent its host agent no heartbeat for the heartbeat timeout (hung)".to_string()
                    }
                    ProtoError::Io(e) => format!("lost its connection to its host agent: {e}"),
                    e => format!("sent its host agent a malformed frame ({e})"),
                };
                let _ = tx.send(Ev::Closed(conn, why));
                return;
            }
        }
    }
}

/// A rank joined here.
struct RankConn {
    join: Join,
    stream: Arc<Mutex<TcpStream>>,
    /// The rank the GRM gave it, after the fence.
    rank: Option<u32>,
    standing: Standing,
}

/// Where a rank stands in the job, as the relay passed it on.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Standing {
    Joined,
    /// It left: nothing more is passed on for it, but a failing exit.
    Left,
    /// Its end (a failure) was passed on: nothing more is.
    Gone,
}

/// Say why, and close.
fn refuse(mut stream: &TcpStream, reason: &str) {
    let refused = Msg::Refused {
        reason: reason.into(),
    };
    let _ = proto::write_msg(&mut stream, &refused);
    let _ = stream.shutdown(Shutdown::Both);
}

/// A process joining after the host's ranks all did: not one fmrun started.
const ONE_TOO_MANY: &str = "every rank of this host has joined already";

fn send_to(stream: &Mutex<TcpStream>, bytes: &[u8]) -> io::Result<()> {
    use std::io::Write;
    let mut s = stream.lock().unwrap_or_else(|p| p.into_inner());
    s.write_all(bytes)?;
    s.flush()
}

/// The ranks joined here, by connection, and a map passed on early.
type Gathered = (BTreeMap<u64, RankConn>, Option<Vec<u8>>);

/// Take the host's ranks' Joins, each proving the token; `None` if the
/// agent ends first.
fn gather(cfg: &RelayConfig, rx: &Receiver<Ev>) -> Option<Gathered> {
    let verifier = auth::verifier(&cfg.token);
    let job = auth::job_id(&cfg.token);
    let mut ranks: BTreeMap<u64, RankConn> = BTreeMap::new();
    let mut early_map = None;
    while ranks.len() < cfg.ranks {
        match rx.recv() {
            Ok(Ev::Joined(conn, challenge, j, stream)) => {
                let proved = j.job == job
                    && auth::verify(&verifier, "join", &challenge, &j.signed_bytes(), &j.proof);
                if !proved {
                    refuse(&stream, "the Join does not prove the job's token");
                    continue;
                }
                let stream = Arc::new(Mutex::new(stream));
                ranks.insert(
                    conn,
                    RankConn {
                        join: j,
                        stream,
                        rank: None,
                        standing: Standing::Joined,
                    },
                );
            }
            Ok(Ev::Map(m)) => early_map = Some(m),
            // A rank that ends before the fence: the agent sees its exit
            // and ends the job through fmrun.
            Ok(Ev::Closed(conn, _)) => {
                ranks.remove(&conn);
            }
            Ok(Ev::Ended(_, _, done)) => {
                let _ = done.send(());
            }
            Ok(Ev::Finished) | Err(_) => return None,
            Ok(_) => {}
        }
    }
    Some((ranks, early_map))
}

/// The relay: ranks' joins, the host's join at the GRM, the map, the
/// Welcomes, then what ranks and the GRM say until the job ends.
fn run(cfg: &RelayConfig, relay: &str, rx: &Receiver<Ev>, tx: &Sender<Ev>) -> Result<(), String> {
    let Some((mut ranks, early_map)) = gather(cfg, rx) else {
        return Ok(());
    };
    let first = ranks.values().next().map(|r| &r.join).ok_or("no ranks")?;
    let table = (first.fingerprint, first.handlers.clone());
    let host_join = HostJoin {
        job: auth::job_id(&cfg.token),
        nonce: [0; 32],
        proof: [0; 64],
        host: cfg.host.clone(),
        relay: relay.to_string(),
        fingerprint: first.fingerprint,
        handlers: first.handlers.clone(),
        members: (ranks.values())
            .map(|r| HostMember {
                rank: r.join.rank,
                pid: r.join.pid,
                endpoints: r.join.endpoints.clone(),
            })
            .collect(),
    };
    let events = tx.clone();
    let membership = HostMembership::join(
        &cfg.grm,
        &cfg.token,
        host_join,
        cfg.attach_timeout,
        move |e| {
            let _ = events.send(Ev::Grm(e));
        },
    );
    let membership = match membership {
        Ok(m) => m,
        Err(e) => {
            let end = Msg::JobEnded {
                reason: format!("the host agent could not join: {e}"),
            };
            tell_all(&ranks, &end);
            return Err(e.to_string());
        }
    };
    let w = &membership.welcome;
    for (r, &rank) in ranks.values_mut().zip(&w.ranks) {
        r.rank = Some(rank);
    }
    // A rank whose handler table differs from the first's cannot work with
    // the others: the GRM hears of it as that rank's failure.
    for r in ranks.values() {
        if (r.join.fingerprint, &r.join.handlers) != (table.0, &table.1) {
            let why = "its handler table differs from its host's first rank's".to_string();
            let _ = membership.for_rank(r.rank.unwrap_or_default(), Msg::Abort { reason: why });
        }
    }
    let map = match w.map.is_empty() {
        false => w.map.clone(),
        true => wait_for_map(rx, early_map, &w.map_digest, &ranks)?,
    };
    pass_on(&map, &w.relay_to);
    let heartbeat = Duration::from_millis(w.heartbeat_ms.into());
    welcome(cfg, w, &map, &ranks);
    drop(map);
    beat_ranks(&ranks);
    serve_job(&mut ranks, &membership, rx, heartbeat);
    Ok(())
}

/// Each rank's Welcome: its rank, proved for its own nonce, and the map.
fn welcome(cfg: &RelayConfig, w: &proto::HostWelcome, map: &[u8], ranks: &BTreeMap<u64, RankConn>) {
    let welcome_key = auth::welcome_key(&cfg.token);
    for r in ranks.values() {
        let rank = r.rank.unwrap_or_default();
        let signed = proto::welcome_signed(w.job_key, rank, w.heartbeat_ms, &w.map_digest);
        let proof = auth::prove(&welcome_key, "welcome", &r.join.nonce, &signed);
        let mut frame = proto::welcome_head(w.job_key, rank, w.heartbeat_ms, &proof, map.len());
        frame.extend_from_slice(map);
        let _ = send_to(&r.stream, &frame);
    }
}

/// Wait for the map another agent passes on: the first whose digest is
/// the proven one (others are dropped and counted in the log).
fn wait_for_map(
    rx: &Receiver<Ev>,
    early: Option<Vec<u8>>,
    digest: &[u8; 32],
    ranks: &BTreeMap<u64, RankConn>,
) -> Result<Vec<u8>, String> {
    if let Some(m) = early.filter(|m| proto::map_digest(m) == *digest) {
        return Ok(m);
    }
    loop {
        match rx.recv() {
            Ok(Ev::Map(m)) if proto::map_digest(&m) == *digest => return Ok(m),
            Ok(Ev::Map(_)) => {
                tracing::warn!("host relay: dropped a node map that is not the job's")
            }
            Ok(Ev::Grm(e)) => {
                tell_all(ranks, &end_of(&e));
                return Err(format!(
                    "the job ended before the node map came: {}",
                    e.describe()
                ));
            }
            Ok(Ev::Ended(_, _, done)) => {
                let _ = done.send(());
            }
            Ok(Ev::Joined(_, _, _, stream)) => refuse(&stream, ONE_TOO_MANY),
            Ok(Ev::Finished) | Err(_) => return Err("the agent ended".into()),
            Ok(_) => {}
        }
    }
}

/// Pass the map on to the agents at `to`, each on its own thread.
fn pass_on(map: &[u8], to: &[String]) {
    if to.is_empty() {
        return;
    }
    let frame: Arc<[u8]> = Msg::NodeMap { map: map.to_vec() }.encode().into();
    for addr in to {
        let (addr, frame) = (addr.clone(), frame.clone());
        let _ = std::thread::Builder::new()
            .name("relay-map".into())
            .spawn(move || {
                let sent = crate::client::greeted(&addr)
                    .map_err(|e| e.to_string())
                    .and_then(|(mut s, _)| {
                        use std::io::Write;
                        s.write_all(&frame).map_err(|e| e.to_string())
                    });
                if let Err(e) = sent {
                    // That agent waits in vain, and its ranks with it, until the
                    // launcher's attach timeout: said here, where it happened.
                    tracing::warn!("host relay: could not pass the node map on to {addr}: {e}");
                    eprintln!("fmrun host agent: could not pass the node map on to {addr}: {e}");
                }
            });
    }
}

/// Heartbeats to every rank every second, as the GRM sends them.
fn beat_ranks(ranks: &BTreeMap<u64, RankConn>) {
    let streams: Vec<Arc<Mutex<TcpStream>>> = ranks.values().map(|r| r.stream.clone()).collect();
    let _ = std::thread::Builder::new()
        .name("relay-beat".into())
        .spawn(move || {
            let beat = Msg::Heartbeat.encode();
            let mut open = streams;
            while !open.is_empty() {
                std::thread::sleep(HEARTBEAT);
                open.retain(|s| send_to(s, &beat).is_ok());
            }
        });
}

/// What the GRM's event becomes for the ranks.
fn end_of(e: &Event) -> Msg {
    match e {
        Event::PeerDied {
            rank,
            host,
            pid,
            reason,
        } => Msg::PeerDied {
            rank: *rank,
            host: host.clone(),
            pid: *pid,
            reason: reason.clone(),
        },
        other => Msg::JobEnded {
            reason: other.describe(),
        },
    }
}

fn tell_all(ranks: &BTreeMap<u64, RankConn>, m: &Msg) {
    let bytes = m.encode();
    for r in ranks.values().filter(|r| r.standing == Standing::Joined) {
        let _ = send_to(&r.stream, &bytes);
        let _ = r.stream.lock().map(|s| s.shutdown(Shutdown::Write));
    }
}

/// After the fence: pass on what ranks say, and how the job ends.
fn serve_job(
    ranks: &mut BTreeMap<u64, RankConn>,
    membership: &HostMembership,
    rx: &Receiver<Ev>,
    heartbeat: Duration,
) {
    // A rank silent for the GRM's heartbeat timeout is as good as dead.
    for r in ranks.values() {
        if let Ok(s) = r.stream.lock() {
            let _ = s.set_read_timeout(Some(heartbeat.max(2 * HEARTBEAT)));
        }
    }
    let by_rank: BTreeMap<u32, u64> = (ranks.iter())
        .filter_map(|(&c, r)| r.rank.map(|rank| (rank, c)))
        .collect();
    // Ranks the agent saw end, until their connections have said all.
    let mut ended: BTreeMap<u64, (String, Sender<()>)> = BTreeMap::new();
    while ranks.values().any(|r| r.standing == Standing::Joined) {
        match rx.recv() {
            Ok(Ev::Said(conn, m)) => pass(ranks, membership, conn, m),
            Ok(Ev::Closed(conn, why)) => match ended.remove(&conn) {
                Some((how, done)) => {
                    failed(ranks, membership, conn, how);
                    let _ = done.send(());
                }
                None => pass(ranks, membership, conn, Msg::Abort { reason: why }),
            },
            // A rank the agent saw fail: told once its connection has said
            // all it had (a Leave on its way, its last Stats).
            Ok(Ev::Ended(rank, how, done)) => match by_rank.get(&rank) {
                Some(&conn)
                    if ranks
                        .get(&conn)
                        .is_some_and(|r| r.standing == Standing::Joined) =>
                {
                    ended.insert(conn, (how, done));
                }
                Some(&conn) => {
                    failed(ranks, membership, conn, how);
                    let _ = done.send(());
                }
                None => {
                    let _ = done.send(());
                }
            },
            Ok(Ev::Grm(
                Event::Progress { .. } | Event::RankReady { .. } | Event::RankStats { .. },
            )) => {}
            Ok(Ev::Grm(e)) => {
                tell_all(ranks, &end_of(&e));
                break;
            }
            // Every rank has ended; their connections' ends are coming.
            Ok(Ev::Joined(_, _, _, stream)) => refuse(&stream, ONE_TOO_MANY),
            Ok(Ev::Map(_) | Ev::Finished) => {}
            Err(_) => break,
        }
    }
    membership.close();
}

/// The rank on `conn` ended with a failure (`how`, its exit status): its
/// death, even after it left the job, which a failing rank ends.
fn failed(
    ranks: &mut BTreeMap<u64, RankConn>,
    membership: &HostMembership,
    conn: u64,
    how: String,
) {
    let Some(r) = ranks.get_mut(&conn) else {
        return;
    };
    let Some(rank) = r.rank else { return };
    let reason = match std::mem::replace(&mut r.standing, Standing::Gone) {
        Standing::Joined => how,
        Standing::Left => format!("{how} after leaving the job"),
        Standing::Gone => return,
    };
    let _ = membership.for_rank(rank, Msg::Abort { reason });
}

/// Pass on what the rank on `conn` says; a Leave or Abort is its last.
fn pass(ranks: &mut BTreeMap<u64, RankConn>, membership: &HostMembership, conn: u64, msg: Msg) {
    let Some(r) = ranks
        .get_mut(&conn)
        .filter(|r| r.standing == Standing::Joined)
    else {
        return;
    };
    let Some(rank) = r.rank else { return };
    match msg {
        Msg::Heartbeat => {}
        m @ (Msg::Ready { .. } | Msg::Stats { .. }) => {
            let _ = membership.for_rank(rank, m);
        }
        Msg::Leave => {
            r.standing = Standing::Left;
            let _ = membership.for_rank(rank, Msg::Leave);
        }
        m @ Msg::Abort { .. } => {
            r.standing = Standing::Gone;
            let _ = membership.for_rank(rank, m);
        }
        other => {
            r.standing = Standing::Gone;
            let why = format!(
                "sent its host agent {}, which a joined process does not send",
                other.name()
            );
            let _ = membership.for_rank(rank, Msg::Abort { reason: why });
        }
    }
}
