//! A simulated start-up: one GRM and N members in this process, 64 ranks
//! to a "host", one ethernet endpoint each (docs/SCALE.md).
//!
//! Usage: cargo run --release -p fm-grm --example startup_sim -- [--no-sockets] N... | HOSTSxRANKS...
//!
//! - With sockets (the default): the GRM's event loop, and each member a
//!   thread joining over loopback TCP as a rank does (challenge, signed
//!   Join, heartbeats, the Welcome with the node map). The sizes that fit
//!   are bounded by the threads the members need (two each).
//! - `--no-sockets`: the GRM's state machine ([`fm_grm::machine::Core`])
//!   driven directly, members as in-process state: each takes its
//!   challenge, sends a signed Join, and checks its Welcome's proof. The
//!   node map is decoded in full for the first and last member (the others
//!   get the same shared bytes, whose digest the proof covers, checked
//!   once). This is the GRM's own work and memory for N members, without
//!   the kernel's: 65,536 members fit.
//! - `HOSTSxRANKS` (such as `1000x64`): the state machine again, with one
//!   host agent per host joining its ranks at once (one signed HostJoin,
//!   one connection); the GRM sends the node map to 16 agents and they
//!   pass it on down a tree (`proto::relay_children`), each checking its
//!   digest against its own HostWelcome's proven one.
//!
//! Prints how long until every member has its Welcome, the Welcome's size,
//! the bytes the GRM sends in Welcomes, and the heap at its peak (all of
//! this process: the GRM and, for sockets, the members' threads).

use fm_grm::auth;
use fm_grm::client::{
    host_welcome_proves, new_token, signed_host_join, signed_join, signed_register, LauncherLink,
    Membership,
};
use fm_grm::machine::{ConnId, Core, CoreOptions, Frame, Output};
use fm_grm::peer::Client;
use fm_grm::proto::{self, DeviceEndpoint, HostJoin, HostMember, HostWelcome, Join, Msg};
use fm_grm::server::{Grm, GrmOptions};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The system allocator, counting the bytes live and their peak.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is passed to the system allocator as is.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let p = System.alloc(l);
        if !p.is_null() {
            let live = LIVE.fetch_add(l.size(), Ordering::Relaxed) + l.size();
            PEAK.fetch_max(live, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size(), Ordering::Relaxed);
        System.dealloc(p, l)
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn mib(b: usize) -> f64 {
    b as f64 / f64::from(1 << 20)
}

/// The Join member `r` sends (before it is signed).
fn join_of(r: u32) -> Join {
    Join {
        job: [0; 16],
        nonce: [0; 32],
        proof: [0; 64],
        rank: Some(r),
        host: format!("host{:04}", r / 64),
        pid: 100_000 + r,
        fingerprint: 42,
        handlers: vec![(1, "data".into())],
        endpoints: vec![DeviceEndpoint {
            device: "ethernet".into(),
            // An IPv4 address and a port, as ethernet's.
            address: vec![198, 18, (r >> 14) as u8, (r >> 6) as u8, 0xc3, r as u8],
        }],
    }
}

fn with_sockets(n: u32) -> Result<(), String> {
    let g = Grm::start(GrmOptions {
        max_connections: 2 * n + 64,
        max_per_client: 2 * n + 64,
        heartbeat_timeout: Duration::from_secs(120),
        ..GrmOptions::default()
    })
    .map_err(|e| format!("GRM: {e}"))?;
    let addr = g.addr().to_string();
    let token = new_token();
    let _launcher = LauncherLink::register(&addr, &token, n, "startup_sim", |_| {})
        .map_err(|e| format!("register: {e}"))?;
    let t0 = Instant::now();
    let members: Vec<_> = (0..n)
        .map(|r| {
            let (addr, token) = (addr.clone(), token.clone());
            std::thread::Builder::new()
                .stack_size(256 << 10)
                .spawn(move || {
                    Membership::join(&addr, &token, join_of(r), Duration::from_secs(600), |_| {})
                })
                .map_err(|e| format!("thread for rank {r}: {e}"))
        })
        .collect::<Result<_, _>>()?;
    let mut welcome_bytes = 0;
    let mut kept = Vec::with_capacity(n as usize);
    for m in members {
        let m = m
            .join()
            .map_err(|_| "a member panicked".to_string())?
            .map_err(|e| format!("join: {e}"))?;
        if m.welcome.nodes.len() != n as usize {
            return Err(format!("a node map of {} ranks", m.welcome.nodes.len()));
        }
        welcome_bytes = Msg::Welcome(m.welcome.clone()).encode().len();
        kept.push(m);
    }
    report(n, t0.elapsed(), welcome_bytes, "sockets");
    for m in &kept {
        m.leave();
    }
    Ok(())
}

fn report(n: u32, took: Duration, welcome_bytes: usize, how: &str) {
    println!(
        "{n} members: all welcomed in {:.2} s ({how}); a Welcome {} KiB, {} MiB of Welcomes in all; peak heap {:.0} MiB",
        took.as_secs_f64(),
        welcome_bytes >> 10,
        (welcome_bytes as u64 * u64::from(n)) >> 20,
        mib(PEAK.load(Ordering::Relaxed))
    );
}

/// The client every connection of the simulation counts against.
const ME: Client = Client::User(0);
/// The launcher's connection; member r's is r + 1.
const LAUNCHER: ConnId = 0;

/// A GRM core with a job of `n` registered by a launcher on [`LAUNCHER`].
fn registered(n: u32, token: &str, t0: Instant) -> Core {
    registered_for(n, n, token, t0)
}

/// [`registered`], for `conns` connections besides the launcher's.
fn registered_for(n: u32, conns: u32, token: &str, t0: Instant) -> Core {
    let mut core = Core::new(
        CoreOptions {
            heartbeat_timeout: Duration::from_secs(120),
            greeting_timeout: Duration::from_secs(120),
            max_connections: conns + 1,
            max_per_client: conns + 1,
            max_jobs_per_client: 1,
        },
        t0,
    );
    core.connected(LAUNCHER, Some(ME), t0);
    let mut challenge = None;
    while let Some(o) = core.poll_output() {
        if let Output::Send(_, f) = o {
            if let Ok(Msg::Challenge { nonce }) = Msg::decode(&f.head[4..]) {
                challenge = Some(nonce);
            }
        }
    }
    let challenge = challenge.expect("the GRM challenges the launcher");
    let register = signed_register(token, &challenge, n, "startup_sim");
    core.received(LAUNCHER, &register.encode()[4..], t0);
    core
}

/// A simulated member: its connection, and its Join's nonce once sent.
struct Member {
    nonce: Option<auth::Proof>,
    welcomed: bool,
}

fn without_sockets(n: u32) -> Result<(), String> {
    // The members' own state, made first so that what is counted from here
    // on is the GRM's (and the frames in flight between the two).
    let mut members: Vec<Member> = (0..n)
        .map(|_| Member {
            nonce: None,
            welcomed: false,
        })
        .collect();
    PEAK.store(LIVE.load(Ordering::Relaxed), Ordering::Relaxed);
    let before = LIVE.load(Ordering::Relaxed);
    let t0 = Instant::now();
    let token = new_token();
    let welcome_key = auth::welcome_key(&token);
    let mut core = registered(n, &token, t0);
    let member_conn = |r: u32| ConnId::from(r) + 1;
    let mut map_checked: Option<(*const u8, [u8; 32])> = None;
    let (mut welcome_bytes, mut welcomed, mut launcher_frames) = (0, 0u32, 0u64);
    let mut members_time = Duration::ZERO;
    let mut sent = 0u64;
    // Every member connects, then answers its challenge; the core's
    // outputs are taken as they come, as a driver would.
    for r in 0..n {
        core.connected(member_conn(r), Some(ME), Instant::now());
        if r % 1024 == 0 {
            core.tick(Instant::now());
        }
        // The last Join fences the job: every Welcome comes then.
        while let Some(o) = core.poll_output() {
            let Output::Send(conn, frame) = o else {
                return Err(format!("unexpected {o:?}"));
            };
            sent += frame.len() as u64;
            if conn == LAUNCHER {
                let beat = matches!(Msg::decode(&frame.head[4..]), Ok(Msg::Heartbeat));
                launcher_frames += u64::from(!beat);
                continue;
            }
            let m = (conn - 1) as u32;
            if frame.shared.is_some() {
                check_welcome(
                    m,
                    n,
                    &frame,
                    &welcome_key,
                    &members[m as usize],
                    &mut map_checked,
                )?;
                members[m as usize].welcomed = true;
                welcomed += 1;
                welcome_bytes = frame.len();
                continue;
            }
            match Msg::decode(&frame.head[4..]) {
                Ok(Msg::Challenge { nonce }) => {
                    // Each member signs its own Join, in its own process:
                    // not the GRM's time.
                    let signing = Instant::now();
                    let join = signed_join(&token, &nonce, join_of(m));
                    members_time += signing.elapsed();
                    members[m as usize].nonce = Some(join.nonce);
                    core.received(conn, &Msg::Join(join).encode()[4..], Instant::now());
                }
                // Due every second while a large job joins.
                Ok(Msg::Heartbeat) => {}
                other => return Err(format!("member {m} got {other:?} before its Welcome")),
            }
        }
    }
    let took = t0.elapsed() - members_time;
    if welcomed != n || members.iter().any(|m| !m.welcomed) {
        return Err(format!("{welcomed} of {n} members welcomed"));
    }
    // Registered, and a Progress per member (the challenge it signed its
    // Register over was taken before).
    if launcher_frames != u64::from(n) + 1 {
        return Err(format!("the launcher got {launcher_frames} frames"));
    }
    report(n, took, welcome_bytes, "no sockets");
    let peak = PEAK.load(Ordering::Relaxed).saturating_sub(before);
    let held = LIVE.load(Ordering::Relaxed).saturating_sub(before);
    println!(
        "    the GRM: {:.1} MiB at its peak (every Welcome queued), {:.1} MiB held once they are written ({:.0} bytes per member); it sent {:.1} MiB ({:.0} KiB per host of 64)",
        mib(peak),
        mib(held),
        held as f64 / f64::from(n),
        mib(sent as usize),
        sent as f64 / 1024.0 / (f64::from(n) / 64.0)
    );
    Ok(())
}

/// The HostJoin of host `h`'s `per_host` ranks (before it is signed).
fn host_join_of(h: u32, per_host: u32) -> HostJoin {
    HostJoin {
        job: [0; 16],
        nonce: [0; 32],
        proof: [0; 64],
        host: format!("host{h:04}"),
        relay: relay_of(h),
        fingerprint: 42,
        handlers: vec![(1, "data".into())],
        members: (h * per_host..(h + 1) * per_host)
            .map(|r| {
                let j = join_of(r);
                HostMember {
                    rank: j.rank,
                    pid: j.pid,
                    endpoints: j.endpoints,
                }
            })
            .collect(),
    }
}

fn relay_of(h: u32) -> String {
    format!("198.18.{}.{}:7000", h >> 8, h & 255)
}

/// What the simulated agents hold: each one's nonce, and its HostWelcome
/// with the map it got (from the GRM or relayed), once it has both.
struct Agents {
    nonces: Vec<Option<auth::Proof>>,
    welcomes: Vec<Option<HostWelcome>>,
    maps: Vec<Option<Arc<[u8]>>>,
}

/// One host agent per host, `per_host` ranks each: every agent connects,
/// answers its challenge with one signed HostJoin for its ranks, and takes
/// its HostWelcome; the GRM sends the node map to 16 agents, and the
/// agents pass it on down the tree their HostWelcomes name, each checking
/// its digest against its own proven one. The GRM's time and bytes are
/// counted; the agents' (signing, checking, relaying) are not.
fn with_agents(hosts: u32, per_host: u32) -> Result<(), String> {
    let n = hosts * per_host;
    let mut agents = Agents {
        nonces: vec![None; hosts as usize],
        welcomes: vec![None; hosts as usize],
        maps: vec![None; hosts as usize],
    };
    PEAK.store(LIVE.load(Ordering::Relaxed), Ordering::Relaxed);
    let before = LIVE.load(Ordering::Relaxed);
    let t0 = Instant::now();
    let token = new_token();
    let welcome_key = auth::welcome_key(&token);
    let mut core = registered_for(n, hosts + 1, &token, t0);
    let mut agents_time = Duration::ZERO;
    let mut sent = 0u64;
    for h in 0..hosts {
        core.connected(ConnId::from(h) + 1, Some(ME), Instant::now());
        if h % 64 == 0 {
            core.tick(Instant::now());
        }
        while let Some(o) = core.poll_output() {
            let Output::Send(conn, frame) = o else {
                return Err(format!("unexpected {o:?}"));
            };
            sent += frame.len() as u64;
            if conn == LAUNCHER {
                continue;
            }
            let a = (conn - 1) as usize;
            let took = Instant::now();
            let msg = match &frame.shared {
                Some(map) => {
                    let whole: Vec<u8> = frame.head.iter().chain(map.iter()).copied().collect();
                    Msg::decode(&whole[4..])
                }
                None => Msg::decode(&frame.head[4..]),
            };
            match msg {
                Ok(Msg::Challenge { nonce }) => {
                    let join = signed_host_join(&token, &nonce, host_join_of(a as u32, per_host));
                    agents.nonces[a] = Some(join.nonce);
                    agents_time += took.elapsed();
                    core.received(conn, &Msg::HostJoin(join).encode()[4..], Instant::now());
                    continue;
                }
                Ok(Msg::HostWelcome(w)) => {
                    let nonce = agents.nonces[a].ok_or("a HostWelcome before a HostJoin")?;
                    if !host_welcome_proves(&welcome_key, &nonce, &w) {
                        return Err(format!("host {a}'s HostWelcome does not prove the token"));
                    }
                    agents.maps[a] = frame.shared.clone();
                    agents.welcomes[a] = Some(w);
                }
                Ok(Msg::Heartbeat) => {}
                other => return Err(format!("host {a} got {other:?}")),
            }
            agents_time += took.elapsed();
        }
    }
    let took = t0.elapsed() - agents_time;
    let peak = PEAK.load(Ordering::Relaxed).saturating_sub(before);
    let depth = relay(&mut agents, n)?;
    println!(
        "{hosts} hosts × {per_host} ranks, one agent each: all welcomed in {took:.3?} of GRM time; the GRM sent {:.1} MiB ({:.0} KiB per host); the map {} KiB, relayed {depth} hops deep; GRM heap at its peak {:.1} MiB",
        sent as f64 / f64::from(1 << 20),
        sent as f64 / 1024.0 / f64::from(hosts),
        agents.maps[0].as_ref().map_or(0, |m| m.len() >> 10),
        mib(peak),
    );
    Ok(())
}

/// The agents pass the map on as their HostWelcomes say; each checks
/// that what it got has its proven digest. Every agent must end up with
/// the map (decoded in full once: `n` ranks); returns the tree's depth.
fn relay(agents: &mut Agents, n: u32) -> Result<usize, String> {
    let hosts = agents.welcomes.len();
    let by_addr: std::collections::HashMap<String, usize> =
        (0..hosts).map(|h| (relay_of(h as u32), h)).collect();
    let mut level: Vec<usize> = (0..hosts).filter(|&h| agents.maps[h].is_some()).collect();
    let mut digests: Vec<(*const u8, [u8; 32])> = Vec::new();
    let mut depth = 0;
    while !level.is_empty() {
        depth += 1;
        let mut next = Vec::new();
        for &from in &level {
            let map = agents.maps[from].clone().ok_or("a relay without the map")?;
            let w = agents.welcomes[from].as_ref().ok_or("no HostWelcome")?;
            // Each agent hashes what it got; the same shared bytes are
            // hashed once here.
            let p = map.as_ptr();
            let digest = match digests.iter().find(|(q, _)| *q == p) {
                Some((_, d)) => *d,
                None => {
                    let d = proto::map_digest(&map);
                    digests.push((p, d));
                    d
                }
            };
            if digest != w.map_digest {
                return Err(format!(
                    "host {from} got a map that is not its HostWelcome's"
                ));
            }
            for to in &w.relay_to {
                let &to = by_addr.get(to).ok_or("a relay to nowhere")?;
                if agents.maps[to].replace(map.clone()).is_some() {
                    return Err(format!("host {to} got the map twice"));
                }
                next.push(to);
            }
        }
        level = next;
    }
    if let Some(h) = (0..hosts).find(|&h| agents.maps[h].is_none()) {
        return Err(format!("host {h} never got the map"));
    }
    let map = agents.maps[0].as_deref().unwrap_or_default();
    let mut frame = vec![0; 3 + 8 + 4 + 4 + 32];
    frame[..2].copy_from_slice(&proto::VERSION.to_le_bytes());
    frame[2] = 4;
    frame.extend_from_slice(map);
    match Msg::decode(&frame) {
        Ok(Msg::Welcome(w))
            if w.nodes.len() == n as usize
                && (w.nodes.iter().enumerate()).all(|(i, x)| x.pid == 100_000 + i as u32) =>
        {
            Ok(depth)
        }
        other => Err(format!("the relayed map: {other:?}")),
    }
}

/// A Welcome's head carries the rank and a proof over its fields and the
/// map's digest; the map is checked (decoded in full) for the first and
/// last member, and must be the same shared bytes for the rest.
fn check_welcome(
    m: u32,
    n: u32,
    frame: &Frame,
    welcome_key: &auth::Proof,
    member: &Member,
    map_checked: &mut Option<(*const u8, [u8; 32])>,
) -> Result<(), String> {
    let map = frame.shared.as_deref().ok_or("a Welcome without its map")?;
    let digest = match *map_checked {
        Some((p, d)) if p == map.as_ptr() && m != n - 1 => d,
        Some((p, _)) if p != map.as_ptr() => return Err("a second node map".into()),
        _ => {
            let whole: Vec<u8> = frame.head.iter().chain(map).copied().collect();
            let w = match Msg::decode(&whole[4..]) {
                Ok(Msg::Welcome(w)) => w,
                other => return Err(format!("member {m}'s Welcome: {other:?}")),
            };
            let nonce = member.nonce.ok_or("no nonce")?;
            if w.rank != m
                || w.nodes.len() != n as usize
                || w.nodes
                    .iter()
                    .enumerate()
                    .any(|(i, x)| x.pid != 100_000 + i as u32)
                || !auth::check(welcome_key, "welcome", &nonce, &w.signed_bytes(), &w.proof)
            {
                return Err(format!("member {m}'s Welcome is wrong"));
            }
            let d = proto::map_digest(map);
            *map_checked = Some((map.as_ptr(), d));
            d
        }
    };
    let h = proto::decode_welcome_head(&frame.head)
        .map_err(|e| format!("member {m}'s Welcome: {e}"))?;
    let signed = proto::welcome_signed(h.job_key, h.rank, h.heartbeat_ms, &digest);
    let nonce = member.nonce.ok_or("no nonce")?;
    if h.rank != m || !auth::check(welcome_key, "welcome", &nonce, &signed, &h.proof) {
        return Err(format!("member {m}'s Welcome does not prove the token"));
    }
    Ok(())
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let no_sockets = args.iter().any(|a| a == "--no-sockets");
    let mut runs: Vec<&str> = args
        .iter()
        .map(String::as_str)
        .filter(|a| *a != "--no-sockets")
        .collect();
    if runs.is_empty() {
        runs = vec!["256", "1024"];
    }
    for run in runs {
        let r = match run.split_once('x').map(|(h, p)| (h.parse(), p.parse())) {
            Some((Ok(hosts), Ok(per_host))) => with_agents(hosts, per_host),
            _ => match run.parse() {
                Ok(n) if no_sockets => without_sockets(n),
                Ok(n) => with_sockets(n),
                Err(_) => Err("not a number of members nor HOSTSxRANKS".into()),
            },
        };
        if let Err(e) = r {
            eprintln!("{run}: {e}");
            std::process::exit(1);
        }
    }
}
