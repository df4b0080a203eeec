//! The GRM service: registers jobs, admits their processes, fences, hands
//! out the node map, watches liveness and ends jobs whose processes die.
//!
//! One thread reads each connection, each frame within a deadline (a
//! client that dribbles bytes is cut off, not waited for); what the GRM
//! says to a job's members and launcher goes through a per-connection
//! [`Outbox`] whose own thread does the writing, so no client, reading or
//! not, can hold the lock that every job shares. Connections and jobs are
//! limited per client (a local user, or a remote host).

use crate::auth::{self, JobId, Proof};
use crate::peer::{client_of, Client};
use crate::proto::{self, GrmStatus, Join, Msg, Node, ProtoError, Welcome, MAX_JOB};
use fm_devices::shmem::segment::remove_job_segments;
use fm_devices::JobKey;
use std::collections::{BTreeMap, HashMap};
use std::io::{self, ErrorKind, Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Settings of a GRM.
#[derive(Clone, Debug)]
pub struct GrmOptions {
    /// Where to listen (loopback by default; port 0 picks a free one).
    pub listen: SocketAddr,
    /// More addresses to listen on, at the same port: fmrun's own GRM
    /// listens on the addresses its hosts reach it at, not everywhere.
    pub also_listen: Vec<IpAddr>,
    /// A process or launcher silent for this long is declared dead; a
    /// frame must arrive whole within it, and a client must take what is
    /// written to it within it.
    pub heartbeat_timeout: Duration,
    /// A new connection must say what it wants, in one whole frame, within
    /// this time.
    pub greeting_timeout: Duration,
    /// Connections beyond this are refused.
    pub max_connections: u32,
    /// Connections of one client (a local user, or a remote host) beyond
    /// this are refused: one user cannot lock out the others.
    pub max_per_client: u32,
    /// Jobs registered by one client beyond this are refused.
    pub max_jobs_per_client: u32,
}

impl Default for GrmOptions {
    fn default() -> Self {
        GrmOptions {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            also_listen: Vec::new(),
            heartbeat_timeout: Duration::from_secs(10),
            greeting_timeout: Duration::from_secs(10),
            max_connections: 8192,
            max_per_client: 2048,
            max_jobs_per_client: 256,
        }
    }
}

/// A running GRM. Dropping it stops accepting and ends its jobs.
pub struct Grm {
    addrs: Vec<SocketAddr>,
    shared: Arc<Shared>,
    accept: Vec<JoinHandle<()>>,
    /// Dropped to stop the heartbeat thread.
    stop_heartbeats: Option<std::sync::mpsc::Sender<()>>,
    heartbeats: Option<JoinHandle<()>>,
}

struct Shared {
    opts: GrmOptions,
    state: Mutex<State>,
    connections: AtomicU32,
    per_client: Mutex<HashMap<Client, u32>>,
    rejected: AtomicU64,
    stopping: AtomicBool,
}

#[derive(Default)]
struct State {
    /// Jobs by id.
    jobs: HashMap<JobId, Job>,
}

struct Job {
    key: JobKey,
    /// The key its members' proofs are checked with.
    verifier: Proof,
    /// Who registered it: a local user's job is joined only by that user.
    owner: Client,
    program: String,
    size: u32,
    launcher: Option<Outbox>,
    /// Members by rank, made as they join: a registered job costs nothing
    /// per rank until its processes come.
    members: BTreeMap<u32, Member>,
    /// No rank below this is free (for joiners that ask for none).
    first_free: u32,
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
    /// The nonce of its Join, which the Welcome's proof answers.
    nonce: Proof,
    outbox: Outbox,
    left: bool,
}

/// What the GRM writes to one client, written by a thread of its own: a
/// queue past [`OUTBOX_BYTES`] or a write that does not finish within the
/// timeout cuts the connection (its reader then sees it end), so a client
/// that does not read stalls nobody. Dropping the outbox writes what is
/// queued, then closes the sending side (if anything was sent).
struct Outbox {
    tx: Sender<Vec<u8>>,
    /// Bytes queued and not yet written.
    queued: Arc<AtomicUsize>,
    /// One handle shared with the writer thread (one descriptor per client).
    conn: Arc<TcpStream>,
}

/// Bytes queued to one client before it counts as not reading: bounded in
/// bytes, not frames, since a launcher reading as fast as it can still
/// gets a burst of a report per rank when a large job starts (256 ranks'
/// tables at once cut a queue of 64 frames).
const OUTBOX_BYTES: usize = 16 << 20;

impl Outbox {
    fn start(conn: &TcpStream, timeout: Duration) -> io::Result<Outbox> {
        let (tx, rx) = channel::<Vec<u8>>();
        let queued = Arc::new(AtomicUsize::new(0));
        let conn = Arc::new(conn.try_clone()?);
        conn.set_write_timeout(Some(timeout))?;
        let (w, written) = (conn.clone(), queued.clone());
        std::thread::Builder::new()
            .name("grm-write".into())
            .spawn(move || {
                let mut used = false;
                for frame in rx {
                    written.fetch_sub(frame.len(), Ordering::Relaxed);
                    if let Err(e) = (&*w).write_all(&frame).and_then(|()| (&*w).flush()) {
                        tracing::debug!("grm: a client did not take what was written: {e}");
                        let _ = w.shutdown(Shutdown::Both);
                        return;
                    }
                    used = true;
                }
                // An outbox dropped unused (the request was refused) leaves
                // the connection to its reader, which is writing the refusal.
                if used {
                    let _ = w.shutdown(Shutdown::Write);
                }
            })?;
        Ok(Outbox { tx, queued, conn })
    }

    fn send(&self, m: &Msg) {
        self.send_frame(m.encode());
    }

    fn send_frame(&self, frame: Vec<u8>) {
        let len = frame.len();
        if self.queued.fetch_add(len, Ordering::Relaxed) + len > OUTBOX_BYTES {
            self.queued.fetch_sub(len, Ordering::Relaxed);
            tracing::debug!("grm: a client's queue is full: cut off");
            let _ = self.conn.shutdown(Shutdown::Both);
            return;
        }
        // A writer that has gone (its write failed) took the connection down.
        let _ = self.tx.send(frame);
    }
}

/// Reads one frame within a deadline, however the bytes trickle in.
struct Deadline<'a> {
    conn: &'a TcpStream,
    until: Instant,
}

impl Read for Deadline<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(ErrorKind::TimedOut, "frame deadline passed"));
        }
        self.conn.set_read_timeout(Some(left))?;
        (&mut &*self.conn).read(buf)
    }
}

/// Connections the kernel queues before the GRM accepts them. Every rank
/// of a job connects at once; std's 128 made the rest of a large job's
/// connections lose their SYNs and retry after 1, 3, 7 s (a simulated
/// start-up of 1,024 members took minutes; `grm/examples/startup_sim.rs`).
/// The kernel caps it at `net.core.somaxconn` (4096 by default).
const LISTEN_BACKLOG: i32 = 65535;

/// A listening socket on `addr` with [`LISTEN_BACKLOG`].
fn listen(addr: SocketAddr) -> io::Result<TcpListener> {
    let l = TcpListener::bind(addr)?;
    // A second listen(2) on a listening socket sets its backlog anew.
    // SAFETY: a valid descriptor this listener owns.
    if unsafe { libc::listen(std::os::fd::AsRawFd::as_raw_fd(&l), LISTEN_BACKLOG) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(l)
}

impl Grm {
    /// Bind and start serving in background threads.
    pub fn start(opts: GrmOptions) -> io::Result<Grm> {
        let first = listen(opts.listen)?;
        let port = first.local_addr()?.port();
        let mut listeners = vec![first];
        for ip in &opts.also_listen {
            let a = SocketAddr::new(*ip, port);
            if listeners.iter().any(|l| l.local_addr().ok() == Some(a)) {
                continue;
            }
            listeners.push(listen(a)?);
        }
        let addrs = (listeners.iter())
            .map(TcpListener::local_addr)
            .collect::<io::Result<Vec<_>>>()?;
        let shared = Arc::new(Shared {
            opts,
            state: Mutex::new(State::default()),
            connections: AtomicU32::new(0),
            per_client: Mutex::new(HashMap::new()),
            rejected: AtomicU64::new(0),
            stopping: AtomicBool::new(false),
        });
        let mut accept = Vec::new();
        for l in listeners {
            let s = shared.clone();
            accept.push(
                std::thread::Builder::new()
                    .name("grm-accept".into())
                    .spawn(move || accept_loop(l, s))?,
            );
        }
        let (stop_heartbeats, stop) = std::sync::mpsc::channel();
        let s = shared.clone();
        let heartbeats = std::thread::Builder::new()
            .name("grm-heartbeat".into())
            .spawn(move || s.heartbeats(&stop))?;
        tracing::info!(?addrs, "grm: listening");
        Ok(Grm {
            addrs,
            shared,
            accept,
            stop_heartbeats: Some(stop_heartbeats),
            heartbeats: Some(heartbeats),
        })
    }

    /// The first address listened on.
    pub fn addr(&self) -> SocketAddr {
        self.addrs[0]
    }

    /// Every address listened on.
    pub fn addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    pub fn status(&self) -> GrmStatus {
        self.shared.status()
    }

    /// Serve until the process ends (the daemon's main loop).
    pub fn serve_forever(mut self) {
        for h in std::mem::take(&mut self.accept) {
            let _ = h.join();
        }
    }
}

impl Drop for Grm {
    fn drop(&mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        // Wake the accept loops with connections of our own.
        for a in &self.addrs {
            let a = match a.ip() {
                ip if ip.is_unspecified() => SocketAddr::from(([127, 0, 0, 1], a.port())),
                _ => *a,
            };
            let _ = TcpStream::connect_timeout(&a, Duration::from_millis(200));
        }
        for h in std::mem::take(&mut self.accept) {
            let _ = h.join();
        }
        drop(self.stop_heartbeats.take());
        if let Some(h) = self.heartbeats.take() {
            let _ = h.join();
        }
        let mut st = self.shared.lock();
        let ids: Vec<JobId> = st.jobs.keys().copied().collect();
        for id in ids {
            end_job(
                &mut st,
                &id,
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
            .spawn(move || match s.admit(&stream) {
                Ok(client) => {
                    serve(&s, stream, client);
                    s.release(client);
                    s.connections.fetch_sub(1, Ordering::SeqCst);
                }
                Err(refusal) => {
                    // No longer a connection before it counts as refused,
                    // so the two counters never show it twice.
                    s.connections.fetch_sub(1, Ordering::SeqCst);
                    if let Some(reason) = refusal {
                        s.refuse(&stream, &reason);
                    }
                }
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

    fn heartbeat_ms(&self) -> u32 {
        self.opts
            .heartbeat_timeout
            .as_millis()
            .min(u32::MAX as u128) as u32
    }

    /// Say something to every launcher and member once a second, so that
    /// each knows the GRM is there: one that hears nothing for the
    /// heartbeat timeout has lost it (a cut link looks like nothing else).
    fn heartbeats(&self, stop: &std::sync::mpsc::Receiver<()>) {
        while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
            stop.recv_timeout(crate::client::HEARTBEAT)
        {
            let st = self.lock();
            for job in st.jobs.values() {
                let members = job.members.values().filter(|m| !m.left);
                for o in job.launcher.iter().chain(members.map(|m| &m.outbox)) {
                    o.send(&Msg::Heartbeat);
                }
            }
        }
    }

    /// Count the connection against its client, or refuse it.
    /// Count the connection against its client, or say why not (`None`:
    /// the peer has gone already).
    fn admit(&self, conn: &TcpStream) -> Result<Client, Option<String>> {
        let client = client_of(conn).ok_or(None)?;
        let mut per = self.per_client.lock().unwrap_or_else(|p| p.into_inner());
        let n = per.entry(client).or_insert(0);
        if *n >= self.opts.max_per_client {
            return Err(Some(format!(
                "{client} has {} connections to this GRM, the most one client may have",
                self.opts.max_per_client
            )));
        }
        *n += 1;
        Ok(client)
    }

    fn release(&self, client: Client) {
        let mut per = self.per_client.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = per.get_mut(&client) {
            *n -= 1;
            if *n == 0 {
                per.remove(&client);
            }
        }
    }

    fn status(&self) -> GrmStatus {
        let st = self.lock();
        GrmStatus {
            jobs: st.jobs.len() as u32,
            members: st
                .jobs
                .values()
                .map(|j| j.members.values().filter(|m| !m.left).count() as u32)
                .sum(),
            connections: self.connections.load(Ordering::SeqCst),
            rejected_frames: self.rejected.load(Ordering::SeqCst),
        }
    }

    /// Read one message, whole within `limit`; a malformed one is counted
    /// and answered with Refused.
    fn read(&self, conn: &mut TcpStream, limit: Duration) -> Result<Msg, ReadEnd> {
        let mut r = Deadline {
            conn,
            until: Instant::now() + limit,
        };
        match proto::read_msg(&mut r) {
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

    /// Count a refused request and say why.
    fn refuse(&self, conn: &TcpStream, reason: &str) {
        self.rejected.fetch_add(1, Ordering::SeqCst);
        refuse(conn, reason);
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

/// Best effort: say why, then close. Only ever called by the
/// connection's own thread, never under the lock.
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

fn serve(shared: &Shared, mut conn: TcpStream, client: Client) {
    let _ = conn.set_nodelay(true);
    let challenge = auth::nonce();
    {
        let mut c = &conn;
        let _ = c.set_write_timeout(Some(shared.opts.greeting_timeout));
        if proto::write_msg(&mut c, &Msg::Challenge { nonce: challenge }).is_err() {
            return;
        }
    }
    let first = match shared.read(&mut conn, shared.opts.greeting_timeout) {
        Ok(m) => m,
        Err(_) => return,
    };
    match first {
        Msg::Status => {
            let mut c = &conn;
            let _ = proto::write_msg(&mut c, &Msg::StatusReply(shared.status()));
        }
        Msg::Register {
            job,
            verifier,
            size,
            program,
        } => match register(shared, &conn, client, job, verifier, size, program) {
            Ok(()) => watch_launcher(shared, conn, &job),
            Err(why) => shared.refuse(&conn, &why),
        },
        Msg::Join(j) => match join(shared, &conn, client, &challenge, j) {
            Ok((job, rank)) => watch_member(shared, conn, &job, rank),
            Err(why) => shared.refuse(&conn, &why),
        },
        other => shared.refuse(
            &conn,
            &format!(
                "a connection starts with Register, Join or Status, not {}",
                other.name()
            ),
        ),
    }
}

fn register(
    shared: &Shared,
    conn: &TcpStream,
    client: Client,
    id: JobId,
    verifier: Proof,
    size: u32,
    program: String,
) -> Result<(), String> {
    if size == 0 || size > MAX_JOB {
        return Err(format!("a job has 1 to {MAX_JOB} processes, not {size}"));
    }
    let launcher = Outbox::start(conn, shared.opts.heartbeat_timeout)
        .map_err(|e| format!("GRM out of resources: {e}"))?;
    let mut st = shared.lock();
    if st.jobs.contains_key(&id) {
        return Err("a job with this id is already registered".into());
    }
    let owned = st.jobs.values().filter(|j| j.owner == client).count();
    if owned >= shared.opts.max_jobs_per_client as usize {
        return Err(format!(
            "{client} has {owned} jobs at this GRM, the most one client may have"
        ));
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
    launcher.send(&Msg::Registered {
        job_key: key.0,
        heartbeat_ms: shared.heartbeat_ms(),
    });
    st.jobs.insert(
        id,
        Job {
            key,
            verifier,
            owner: client,
            program: program.clone(),
            size,
            launcher: Some(launcher),
            members: BTreeMap::new(),
            first_free: 0,
            left: 0,
            welcomed: false,
            reference: None,
        },
    );
    drop(st);
    tracing::info!(%key, size, program, %client, "grm: job registered");
    Ok(())
}

/// The launcher's connection: heartbeats until the job ends; its loss ends the job.
fn watch_launcher(shared: &Shared, mut conn: TcpStream, id: &JobId) {
    let end = loop {
        match shared.read(&mut conn, shared.opts.heartbeat_timeout) {
            Ok(Msg::Heartbeat) => continue,
            Ok(m) => {
                shared.refuse(&conn, &format!("a launcher does not send {}", m.name()));
                break format!("its launcher sent an unexpected {}", m.name());
            }
            Err(e) => break format!("its launcher {}", e.describe(shared.opts.heartbeat_timeout)),
        }
    };
    let mut st = shared.lock();
    if let Some(job) = st.jobs.get_mut(id) {
        job.launcher = None;
        end_job(&mut st, id, Ending::Ended(end));
    }
}

/// The rank a joining process gets: the one it asks for if that is free,
/// else the first free one; why not, when there is none.
fn choose_rank(job: &mut Job, asked: Option<u32>) -> Result<u32, String> {
    match asked {
        Some(r) if r >= job.size => Err(format!(
            "rank {r} is outside this job of {} processes",
            job.size
        )),
        Some(r) => match job.members.get(&r) {
            Some(m) => Err(format!(
                "rank {r} has already joined (pid {} on {})",
                m.pid, m.host
            )),
            None => Ok(r),
        },
        None => {
            while job.members.contains_key(&job.first_free) {
                job.first_free += 1;
            }
            (job.first_free < job.size)
                .then_some(job.first_free)
                .ok_or_else(|| "every rank of this job has joined".to_string())
        }
    }
}

/// Admit a process to its job: Ok((job, rank)), or why not.
fn join(
    shared: &Shared,
    conn: &TcpStream,
    client: Client,
    challenge: &Proof,
    j: Join,
) -> Result<(JobId, u32), String> {
    let outbox = Outbox::start(conn, shared.opts.heartbeat_timeout)
        .map_err(|e| format!("GRM out of resources: {e}"))?;
    let mut st = shared.lock();
    let Some(job) = st.jobs.get_mut(&j.job) else {
        return Err(
            "no job with this token is registered at this GRM (wrong or stale FM_JOB_TOKEN; start jobs with fmrun)".into(),
        );
    };
    if !auth::check(
        &job.verifier,
        "join",
        challenge,
        &j.signed_bytes(),
        &j.proof,
    ) {
        tracing::warn!(key = %job.key, %client, "grm: a Join without a valid proof of the job's token");
        return Err("the Join does not prove the job's token".into());
    }
    if matches!(job.owner, Client::User(_))
        && matches!(client, Client::User(_))
        && job.owner != client
    {
        return Err(format!(
            "this job belongs to {}, not to {client}",
            job.owner
        ));
    }
    if job.welcomed {
        return Err("this job has already started with all its processes".into());
    }
    let rank = choose_rank(job, j.rank)?;
    match &job.reference {
        None => job.reference = Some((rank, j.fingerprint, j.handlers.clone())),
        Some((first, fp, table)) if *fp != j.fingerprint || *table != j.handlers => {
            let why = format!(
                "rank {rank}'s handler table differs from rank {first}'s: {}",
                handler_difference(*first, table, rank, &j.handlers)
            );
            let id = j.job;
            end_job(&mut st, &id, Ending::Ended(why.clone()));
            return Err(why);
        }
        Some(_) => {}
    }
    job.members.insert(
        rank,
        Member {
            host: j.host.clone(),
            pid: j.pid,
            endpoints: j.endpoints.clone(),
            nonce: j.nonce,
            outbox,
            left: false,
        },
    );
    let joined = job.members.len() as u32;
    tracing::debug!(key = %job.key, rank, pid = j.pid, host = j.host, "grm: joined");
    if let Some(l) = &job.launcher {
        l.send(&Msg::Progress {
            joined,
            size: job.size,
        });
    }
    if joined == job.size {
        fence(job, shared.heartbeat_ms());
    }
    Ok((j.job, rank))
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

/// Everyone joined: give each process the node map, with the proof that
/// answers its nonce.
fn fence(job: &mut Job, heartbeat_ms: u32) {
    job.welcomed = true;
    let mut per_host: HashMap<(&str, &str), u32> = HashMap::new();
    let mut nodes = Vec::with_capacity(job.size as usize);
    for (&rank, m) in &job.members {
        let mut contexts = Vec::new();
        for e in &m.endpoints {
            let n = per_host.entry((&m.host, &e.device)).or_insert(0);
            contexts.push((e.device.clone(), *n));
            *n += 1;
        }
        nodes.push(Node {
            rank,
            host: m.host.clone(),
            pid: m.pid,
            contexts,
            endpoints: m.endpoints.clone(),
        });
    }
    tracing::info!(key = %job.key, size = job.size, program = job.program, "grm: job complete, node map sent");
    let mut w = Welcome {
        job_key: job.key.0,
        rank: 0,
        heartbeat_ms,
        nodes,
        proof: [0; 32],
    };
    for (&rank, m) in &job.members {
        w.rank = rank;
        // The proof is the frame's last field: sign the frame with it zero,
        // then put it in place.
        let mut frame = w.signed_bytes();
        let proof = auth::prove(&job.verifier, "welcome", &m.nonce, &frame);
        let at = frame.len() - proof.len();
        frame[at..].copy_from_slice(&proof);
        m.outbox.send_frame(frame);
    }
}

fn watch_member(shared: &Shared, mut conn: TcpStream, id: &JobId, rank: u32) {
    let timeout = shared.opts.heartbeat_timeout;
    let end = loop {
        match shared.read(&mut conn, timeout) {
            Ok(Msg::Heartbeat) => {}
            Ok(Msg::Ready { table }) => {
                let st = shared.lock();
                let job = st.jobs.get(id);
                if let Some((l, m)) =
                    job.and_then(|j| Some((j.launcher.as_ref()?, j.members.get(&rank)?)))
                {
                    l.send(&Msg::RankReady {
                        rank,
                        pid: m.pid,
                        table,
                    });
                }
            }
            Ok(Msg::Leave) => {
                let mut st = shared.lock();
                let Some(job) = st.jobs.get_mut(id) else {
                    return;
                };
                if let Some(m) = job.members.get_mut(&rank) {
                    if !m.left {
                        m.left = true;
                        job.left += 1;
                    }
                }
                if job.left == job.size {
                    end_job(&mut st, id, Ending::Completed);
                }
                return;
            }
            Ok(Msg::Stats { json }) => {
                let st = shared.lock();
                if let Some(l) = st.jobs.get(id).and_then(|j| j.launcher.as_ref()) {
                    l.send(&Msg::RankStats { rank, json });
                }
            }
            Ok(Msg::Abort { reason }) => break ReadEnd::Aborted(reason),
            Ok(m) => {
                shared.refuse(
                    &conn,
                    &format!("a joined process does not send {}", m.name()),
                );
                break ReadEnd::Malformed(format!("unexpected {}", m.name()));
            }
            Err(e) => break e,
        }
    };
    let mut st = shared.lock();
    let Some(job) = st.jobs.get_mut(id) else {
        return;
    };
    let Some(m) = job.members.get(&rank) else {
        return;
    };
    if m.left {
        return;
    }
    let reason = end.describe(timeout);
    let (host, pid) = (m.host.clone(), m.pid);
    tracing::warn!(key = %job.key, rank, pid, host, "grm: rank {reason}");
    end_job(
        &mut st,
        id,
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

/// Reclaim the job's segments, tell everyone still there, forget it
/// (dropping the outboxes writes what they hold, then closes them).
fn end_job(st: &mut State, id: &JobId, how: Ending) {
    let Some(job) = st.jobs.remove(id) else {
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
        .values()
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
        l.send(&msg);
    }
    for m in job.members.values().filter(|m| !m.left) {
        m.outbox.send(&msg);
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
