//! The GRM service: registers jobs, admits their processes, fences, hands
//! out the node map, watches liveness and ends jobs whose processes die.
//!
//! One thread per connection (a job's processes, its launcher, a status
//! query); all job state sits behind one mutex, held only for bookkeeping and
//! for short writes that have a timeout, so a client that stops reading
//! cannot stall the GRM.

use crate::proto::{self, GrmStatus, Join, Msg, Node, ProtoError, Welcome, MAX_JOB};
use fm_devices::shmem::segment::remove_job_segments;
use fm_devices::JobKey;
use std::collections::HashMap;
use std::io::{self, ErrorKind};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

/// Settings of a GRM.
#[derive(Clone, Debug)]
pub struct GrmOptions {
    /// Where to listen (loopback by default; port 0 picks a free one).
    pub listen: SocketAddr,
    /// A process or launcher silent for this long is declared dead.
    pub heartbeat_timeout: Duration,
    /// A new connection must say what it wants within this time.
    pub greeting_timeout: Duration,
    /// Connections beyond this are refused.
    pub max_connections: u32,
}

impl Default for GrmOptions {
    fn default() -> Self {
        GrmOptions {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            heartbeat_timeout: Duration::from_secs(10),
            greeting_timeout: Duration::from_secs(10),
            max_connections: 4096,
        }
    }
}

/// A running GRM. Dropping it stops accepting and ends its jobs.
pub struct Grm {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

struct Shared {
    opts: GrmOptions,
    state: Mutex<State>,
    connections: AtomicU32,
    rejected: AtomicU64,
    stopping: AtomicBool,
}

#[derive(Default)]
struct State {
    /// Jobs by token.
    jobs: HashMap<String, Job>,
}

struct Job {
    key: JobKey,
    program: String,
    size: u32,
    /// Write side of the launcher's connection.
    launcher: Option<TcpStream>,
    members: Vec<Option<Member>>,
    joined: u32,
    left: u32,
    welcomed: bool,
    /// The first joiner's handler table: every later one must match it.
    reference: Option<HandlerTable>,
}

/// A process's handler table: (rank, fingerprint, (ID, name) entries).
type HandlerTable = (u32, u64, Vec<(u16, String)>);

struct Member {
    host: String,
    pid: u32,
    endpoints: Vec<proto::DeviceEndpoint>,
    conn: TcpStream,
    left: bool,
}

impl Grm {
    /// Bind and start serving in background threads.
    pub fn start(opts: GrmOptions) -> io::Result<Grm> {
        let listener = TcpListener::bind(opts.listen)?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            opts,
            state: Mutex::new(State::default()),
            connections: AtomicU32::new(0),
            rejected: AtomicU64::new(0),
            stopping: AtomicBool::new(false),
        });
        let s = shared.clone();
        let accept = std::thread::Builder::new()
            .name("grm-accept".into())
            .spawn(move || accept_loop(listener, s))?;
        tracing::info!(%addr, "grm: listening");
        Ok(Grm {
            addr,
            shared,
            accept: Some(accept),
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn status(&self) -> GrmStatus {
        self.shared.status()
    }

    /// Serve until the process ends (the daemon's main loop).
    pub fn serve_forever(mut self) {
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
    }
}

impl Drop for Grm {
    fn drop(&mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        // Wake the accept loop with a connection of our own.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_millis(200));
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
        let mut st = self.shared.lock();
        let tokens: Vec<String> = st.jobs.keys().cloned().collect();
        for t in tokens {
            end_job(
                &mut st,
                &t,
                Ending::Ended("the GRM is shutting down".into()),
            );
        }
    }
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    for conn in listener.incoming() {
        if shared.stopping.load(Ordering::SeqCst) {
            return;
        }
        let stream = match conn {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!("grm: accept failed: {e}");
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        let n = shared.connections.fetch_add(1, Ordering::SeqCst) + 1;
        if n > shared.opts.max_connections {
            shared.connections.fetch_sub(1, Ordering::SeqCst);
            refuse(&stream, "too many connections to this GRM");
            continue;
        }
        let s = shared.clone();
        let spawned = std::thread::Builder::new()
            .name("grm-conn".into())
            .spawn(move || {
                serve(&s, stream);
                s.connections.fetch_sub(1, Ordering::SeqCst);
            });
        if let Err(e) = spawned {
            shared.connections.fetch_sub(1, Ordering::SeqCst);
            tracing::warn!("grm: cannot start a connection thread: {e}");
        }
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock would be a bug in this file; the
        // state is still consistent enough to keep ending jobs.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn status(&self) -> GrmStatus {
        let st = self.lock();
        GrmStatus {
            jobs: st.jobs.len() as u32,
            members: st
                .jobs
                .values()
                .map(|j| j.members.iter().flatten().filter(|m| !m.left).count() as u32)
                .sum(),
            connections: self.connections.load(Ordering::SeqCst),
            rejected_frames: self.rejected.load(Ordering::SeqCst),
        }
    }

    /// Read one message; a malformed one is counted and answered with Refused.
    fn read(&self, conn: &mut TcpStream) -> Result<Msg, ReadEnd> {
        match proto::read_msg(conn) {
            Ok(m) => Ok(m),
            Err(ProtoError::Io(e)) => Err(ReadEnd::Closed(e)),
            Err(e) => {
                self.rejected.fetch_add(1, Ordering::SeqCst);
                tracing::warn!(peer = ?conn.peer_addr().ok(), "grm: refused a malformed frame: {e}");
                refuse(conn, &format!("malformed frame: {e}"));
                Err(ReadEnd::Malformed(e.to_string()))
            }
        }
    }
}

enum ReadEnd {
    Closed(io::Error),
    Malformed(String),
    /// The process said it cannot go on.
    Aborted(String),
}

impl ReadEnd {
    fn describe(&self, timeout: Duration) -> String {
        match self {
            ReadEnd::Closed(e)
                if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) =>
            {
                format!(
                    "sent no heartbeat for {} s (hung or unreachable)",
                    timeout.as_secs()
                )
            }
            ReadEnd::Closed(_) => {
                "closed its connection to the GRM without leaving the job (the process died)".into()
            }
            ReadEnd::Malformed(e) => format!("sent a malformed frame ({e})"),
            ReadEnd::Aborted(why) => format!("failed: {why}"),
        }
    }
}

/// Best effort: say why, then close.
fn refuse(conn: &TcpStream, reason: &str) {
    let mut c = conn;
    let _ = c.set_write_timeout(Some(Duration::from_millis(500)));
    let _ = proto::write_msg(
        &mut c,
        &Msg::Refused {
            reason: reason.into(),
        },
    );
    let _ = conn.shutdown(Shutdown::Write);
}

/// Send to a client; a client that does not read within a second loses it.
fn send(conn: &TcpStream, m: &Msg) {
    let mut c = conn;
    if let Err(e) = proto::write_msg(&mut c, m) {
        tracing::debug!("grm: could not send {}: {e}", m.name());
    }
}

fn serve(shared: &Shared, mut conn: TcpStream) {
    let _ = conn.set_nodelay(true);
    let _ = conn.set_read_timeout(Some(shared.opts.greeting_timeout));
    let first = match shared.read(&mut conn) {
        Ok(m) => m,
        Err(_) => return,
    };
    match first {
        Msg::Status => send(&conn, &Msg::StatusReply(shared.status())),
        Msg::Register {
            token,
            size,
            program,
        } => {
            if let Some(token) = register(shared, &conn, token, size, program) {
                watch_launcher(shared, conn, &token);
            }
        }
        Msg::Join(j) => {
            if let Some((token, rank)) = join(shared, &conn, j) {
                watch_member(shared, conn, &token, rank);
            }
        }
        other => {
            shared.rejected.fetch_add(1, Ordering::SeqCst);
            refuse(
                &conn,
                &format!(
                    "a connection starts with Register, Join or Status, not {}",
                    other.name()
                ),
            );
        }
    }
}

/// Tokens are secrets the launcher makes up: long enough not to be guessed.
fn valid_token(t: &str) -> bool {
    (16..=256).contains(&t.len()) && t.bytes().all(|b| b.is_ascii_graphic())
}

fn register(
    shared: &Shared,
    conn: &TcpStream,
    token: String,
    size: u32,
    program: String,
) -> Option<String> {
    if !valid_token(&token) {
        refuse(conn, "a job token is 16 to 256 printable characters");
        return None;
    }
    if size == 0 || size > MAX_JOB {
        refuse(
            conn,
            &format!("a job has 1 to {MAX_JOB} processes, not {size}"),
        );
        return None;
    }
    let mut st = shared.lock();
    if st.jobs.contains_key(&token) {
        drop(st);
        refuse(conn, "a job with this token is already registered");
        return None;
    }
    // Program ID from the program's name, instance at random: the key names
    // the job's shared segments, so it must differ from every live job's on
    // this host, whichever GRM started it.
    let name = program.rsplit('/').next().unwrap_or(&program);
    let program_id = fnv32(name.as_bytes());
    let key = loop {
        let instance: u32 = rand::random();
        let key = JobKey((program_id as u64) << 32 | instance as u64);
        if instance != 0 && st.jobs.values().all(|j| j.key != key) {
            break key;
        }
    };
    let launcher = conn.try_clone().ok();
    if let Some(l) = &launcher {
        let _ = l.set_write_timeout(Some(Duration::from_secs(1)));
    }
    st.jobs.insert(
        token.clone(),
        Job {
            key,
            program: program.clone(),
            size,
            launcher,
            members: (0..size).map(|_| None).collect(),
            joined: 0,
            left: 0,
            welcomed: false,
            reference: None,
        },
    );
    drop(st);
    tracing::info!(%key, size, program, "grm: job registered");
    send(conn, &Msg::Registered { job_key: key.0 });
    Some(token)
}

/// The launcher's connection: heartbeats until the job ends; its loss ends the job.
fn watch_launcher(shared: &Shared, mut conn: TcpStream, token: &str) {
    let _ = conn.set_read_timeout(Some(shared.opts.heartbeat_timeout));
    let end = loop {
        match shared.read(&mut conn) {
            Ok(Msg::Heartbeat) => continue,
            Ok(m) => {
                shared.rejected.fetch_add(1, Ordering::SeqCst);
                refuse(&conn, &format!("a launcher does not send {}", m.name()));
                break format!("its launcher sent an unexpected {}", m.name());
            }
            Err(e) => break format!("its launcher {}", e.describe(shared.opts.heartbeat_timeout)),
        }
    };
    let mut st = shared.lock();
    if let Some(job) = st.jobs.get_mut(token) {
        job.launcher = None;
        end_job(&mut st, token, Ending::Ended(end));
    }
}

/// The rank a joining process gets: the one it asks for if that is free,
/// else the first free one; why not, when there is none.
fn choose_rank(job: &Job, asked: Option<u32>) -> Result<u32, String> {
    match asked {
        Some(r) if r >= job.size => Err(format!(
            "rank {r} is outside this job of {} processes",
            job.size
        )),
        Some(r) => match &job.members[r as usize] {
            Some(m) => Err(format!(
                "rank {r} has already joined (pid {} on {})",
                m.pid, m.host
            )),
            None => Ok(r),
        },
        None => (job.members.iter().position(Option::is_none))
            .map(|r| r as u32)
            .ok_or_else(|| "every rank of this job has joined".to_string()),
    }
}

fn join(shared: &Shared, conn: &TcpStream, j: Join) -> Option<(String, u32)> {
    let mut st = shared.lock();
    let Some(job) = st.jobs.get_mut(&j.token) else {
        drop(st);
        let shown: String = j.token.chars().take(6).collect();
        refuse(
            conn,
            &format!(
                "no job with token {shown}… is registered at this GRM (wrong or stale FM_JOB_TOKEN; start jobs with fmrun)"
            ),
        );
        return None;
    };
    if job.welcomed {
        drop(st);
        refuse(conn, "this job has already started with all its processes");
        return None;
    }
    let rank = match choose_rank(job, j.rank) {
        Ok(r) => r,
        Err(why) => {
            drop(st);
            refuse(conn, &why);
            return None;
        }
    };
    match &job.reference {
        None => job.reference = Some((rank, j.fingerprint, j.handlers.clone())),
        Some((first, fp, table)) if *fp != j.fingerprint || *table != j.handlers => {
            let why = format!(
                "rank {rank}'s handler table differs from rank {first}'s: {}",
                handler_difference(*first, table, rank, &j.handlers)
            );
            let token = j.token.clone();
            refuse(conn, &why);
            end_job(&mut st, &token, Ending::Ended(why));
            return None;
        }
        Some(_) => {}
    }
    let member_conn = match conn.try_clone() {
        Ok(c) => c,
        Err(e) => {
            drop(st);
            refuse(conn, &format!("GRM out of resources: {e}"));
            return None;
        }
    };
    let _ = member_conn.set_write_timeout(Some(Duration::from_secs(1)));
    job.members[rank as usize] = Some(Member {
        host: j.host.clone(),
        pid: j.pid,
        endpoints: j.endpoints.clone(),
        conn: member_conn,
        left: false,
    });
    job.joined += 1;
    tracing::debug!(key = %job.key, rank, pid = j.pid, host = j.host, "grm: joined");
    if let Some(l) = &job.launcher {
        send(
            l,
            &Msg::Progress {
                joined: job.joined,
                size: job.size,
            },
        );
    }
    if job.joined == job.size {
        fence(job);
    }
    Some((j.token, rank))
}

/// Name the first handler where two tables differ.
fn handler_difference(
    a_rank: u32,
    a: &[(u16, String)],
    b_rank: u32,
    b: &[(u16, String)],
) -> String {
    for (id, name) in a {
        match b.iter().find(|(i, _)| i == id) {
            None => return format!("rank {b_rank} lacks handler {id} {name:?}"),
            Some((_, other)) if other != name => {
                return format!(
                    "handler {id} is {other:?} on rank {b_rank} but {name:?} on rank {a_rank}"
                )
            }
            Some(_) => {}
        }
    }
    for (id, name) in b {
        if !a.iter().any(|(i, _)| i == id) {
            return format!(
                "rank {b_rank} registers handler {id} {name:?}, which rank {a_rank} lacks"
            );
        }
    }
    "the fingerprints differ".into()
}

/// Everyone joined: give each process the node map.
fn fence(job: &mut Job) {
    job.welcomed = true;
    let mut per_host: HashMap<(&str, &str), u32> = HashMap::new();
    let mut nodes = Vec::with_capacity(job.size as usize);
    for (rank, m) in job.members.iter().enumerate() {
        let Some(m) = m else { continue };
        let mut contexts = Vec::new();
        for e in &m.endpoints {
            let n = per_host.entry((&m.host, &e.device)).or_insert(0);
            contexts.push((e.device.clone(), *n));
            *n += 1;
        }
        nodes.push(Node {
            rank: rank as u32,
            host: m.host.clone(),
            pid: m.pid,
            contexts,
            endpoints: m.endpoints.clone(),
        });
    }
    tracing::info!(key = %job.key, size = job.size, program = job.program, "grm: job complete, node map sent");
    for (rank, m) in job.members.iter().enumerate() {
        if let Some(m) = m {
            let w = Msg::Welcome(Welcome {
                job_key: job.key.0,
                rank: rank as u32,
                nodes: nodes.clone(),
            });
            send(&m.conn, &w);
        }
    }
}

fn watch_member(shared: &Shared, mut conn: TcpStream, token: &str, rank: u32) {
    let _ = conn.set_read_timeout(Some(shared.opts.heartbeat_timeout));
    let end = loop {
        match shared.read(&mut conn) {
            Ok(Msg::Heartbeat) => {}
            Ok(Msg::Ready { table }) => {
                let st = shared.lock();
                if let Some(l) = st.jobs.get(token).and_then(|j| j.launcher.as_ref()) {
                    send(l, &Msg::RankReady { rank, table });
                }
            }
            Ok(Msg::Leave) => {
                let mut st = shared.lock();
                let Some(job) = st.jobs.get_mut(token) else {
                    return;
                };
                if let Some(m) = job.members[rank as usize].as_mut() {
                    if !m.left {
                        m.left = true;
                        job.left += 1;
                    }
                }
                if job.left == job.size {
                    end_job(&mut st, token, Ending::Completed);
                }
                return;
            }
            Ok(Msg::Abort { reason }) => break ReadEnd::Aborted(reason),
            Ok(m) => {
                shared.rejected.fetch_add(1, Ordering::SeqCst);
                refuse(
                    &conn,
                    &format!("a joined process does not send {}", m.name()),
                );
                break ReadEnd::Malformed(format!("unexpected {}", m.name()));
            }
            Err(e) => break e,
        }
    };
    let mut st = shared.lock();
    let Some(job) = st.jobs.get_mut(token) else {
        return;
    };
    let Some(m) = job.members[rank as usize].as_ref() else {
        return;
    };
    if m.left {
        return;
    }
    let reason = end.describe(shared.opts.heartbeat_timeout);
    let (host, pid) = (m.host.clone(), m.pid);
    tracing::warn!(key = %job.key, rank, pid, host, "grm: rank {reason}");
    end_job(
        &mut st,
        token,
        Ending::Died {
            rank,
            host,
            pid,
            reason,
        },
    );
}

enum Ending {
    Completed,
    Ended(String),
    Died {
        rank: u32,
        host: String,
        pid: u32,
        reason: String,
    },
}

/// Reclaim the job's segments, tell everyone still there, forget it.
fn end_job(st: &mut State, token: &str, how: Ending) {
    let Some(job) = st.jobs.remove(token) else {
        return;
    };
    let msg = match &how {
        Ending::Completed => Msg::JobEnded {
            reason: "completed".into(),
        },
        Ending::Ended(r) => Msg::JobEnded { reason: r.clone() },
        Ending::Died {
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
    };
    // Segments first: whoever hears of the end finds them gone.
    let dirs: std::collections::BTreeSet<PathBuf> = job
        .members
        .iter()
        .flatten()
        .flat_map(|m| &m.endpoints)
        .filter(|e| e.device == "shmem")
        .filter_map(|e| std::str::from_utf8(&e.address).ok().map(PathBuf::from))
        .collect();
    let mut removed = 0;
    for d in dirs.iter().filter(|d| d.is_absolute()) {
        removed += remove_job_segments(d, job.key);
    }
    // The launcher first: it hears who died before the others react.
    if let Some(l) = &job.launcher {
        send(l, &msg);
        let _ = l.shutdown(Shutdown::Write);
    }
    for m in job.members.iter().flatten() {
        if !m.left {
            send(&m.conn, &msg);
        }
        let _ = m.conn.shutdown(Shutdown::Write);
    }
    match how {
        Ending::Completed => tracing::info!(key = %job.key, "grm: job completed"),
        _ => tracing::info!(key = %job.key, removed, "grm: job ended: {}", msg_reason(&msg)),
    }
}

fn msg_reason(m: &Msg) -> String {
    match m {
        Msg::JobEnded { reason } => reason.clone(),
        Msg::PeerDied {
            rank, pid, reason, ..
        } => format!("rank {rank} (pid {pid}) {reason}"),
        _ => String::new(),
    }
}

/// FNV-1a, 32 bits.
fn fnv32(b: &[u8]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for x in b {
        h ^= *x as u32;
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}
