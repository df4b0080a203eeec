//! The GRM as a state machine without I/O: it is told of connections,
//! whole frames, ends and the time, and answers with what to write, what
//! to close and which segments to remove ([`Output`]). `server` drives it
//! from one event loop over sockets; `examples/startup_sim.rs` drives it
//! with 65,536 simulated members and no sockets at all. Nothing here
//! blocks, spawns or reads the clock.
//!
//! Life of a job: the launcher registers it (its id and verifier, size,
//! program) and gets the job key; each process joins with proof of the
//! job's token, and when all have joined (the fence) each gets the node
//! map. A connection that sends no whole frame within its timeout, ends,
//! or breaks the protocol ends its job; the job's segments are removed
//! and everyone still there is told who and why.

use crate::auth::{self, JobId, Proof};
use crate::peer::Client;
use crate::proto::{self, GrmStatus, HostJoin, HostWelcome, Join, Msg, Node, ProtoError, MAX_JOB};
use fm_devices::JobKey;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A connection, as the driver numbers them (never reused).
pub type ConnId = u64;

/// Limits and timeouts of the core (the socket-level ones are the server's).
#[derive(Clone, Debug)]
pub struct CoreOptions {
    /// A process or launcher that sends no whole frame for this long is
    /// declared dead (a frame dribbled a byte at a time does not count).
    pub heartbeat_timeout: Duration,
    /// A new connection must say what it wants, in one whole frame, within
    /// this time.
    pub greeting_timeout: Duration,
    /// Connections beyond this are refused.
    pub max_connections: u32,
    /// Connections of one client beyond this are refused.
    pub max_per_client: u32,
    /// Jobs registered by one client beyond this are refused.
    pub max_jobs_per_client: u32,
}

/// Bytes to write to a connection: its own `head`, then bytes it shares
/// with others (a Welcome's node map, encoded once for the whole job).
#[derive(Clone, Debug)]
pub struct Frame {
    pub head: Vec<u8>,
    pub shared: Option<Arc<[u8]>>,
}

impl Frame {
    pub fn len(&self) -> usize {
        self.head.len() + self.shared.as_ref().map_or(0, |s| s.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl From<&Msg> for Frame {
    fn from(m: &Msg) -> Frame {
        Frame {
            head: m.encode(),
            shared: None,
        }
    }
}

/// What the driver must do, in this order.
#[derive(Debug)]
pub enum Output {
    Send(ConnId, Frame),
    /// Write what is queued, then close the sending side. The connection
    /// stays the core's until the driver reports it [`Core::closed`].
    Close(ConnId),
    /// Remove the job's shared segments in these folders (before what
    /// follows is sent: whoever hears of the end finds them gone).
    RemoveSegments {
        key: JobKey,
        dirs: Vec<PathBuf>,
    },
}

/// How a connection ended, as the driver saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gone {
    /// The peer closed it, or it failed.
    Closed,
    /// The peer did not take what was written to it.
    NotReading,
}

/// What one connection is.
enum Role {
    /// Challenged; its first frame says what it wants.
    Greeting {
        challenge: Proof,
    },
    Launcher(JobId),
    Member(JobId, u32),
    /// A host agent, speaking for the job's ranks on its host.
    Host(JobId),
    /// Nothing more is read from it (it left, was answered or refused).
    Done,
}

struct Conn {
    client: Client,
    role: Role,
    /// When it must next send a whole frame.
    deadline: Option<Instant>,
    /// It holds one of its client's connections and one of the GRM's:
    /// from its acceptance until the core decides to close it ([`Core::finish`]),
    /// not until its socket is gone (the driver may linger on it).
    counted: bool,
}

/// A job's keys, as its launcher registered them (`auth`).
struct JobKeys {
    /// The public key its Joins' signatures are checked with.
    verifier: Proof,
    /// The key of its Welcomes' proofs.
    welcome_key: Proof,
}

struct Job {
    key: JobKey,
    /// What its members' Joins are checked with, and its Welcomes proved with.
    keys: JobKeys,
    /// Who registered it: a local user's job is joined only by that user.
    owner: Client,
    program: String,
    size: u32,
    launcher: Option<ConnId>,
    /// Members by rank, made as they join: a registered job costs nothing
    /// per rank until its processes come.
    members: BTreeMap<u32, Member>,
    /// No rank below this is free (for joiners that ask for none).
    first_free: u32,
    left: u32,
    welcomed: bool,
    /// The first joiner's handler table: every later one must match it.
    reference: Option<HandlerTable>,
    /// Host agents by connection, each speaking for some of the members.
    agents: BTreeMap<ConnId, Agent>,
}

impl Job {
    /// Every connection of the job's processes still there (an agent's
    /// once, however many ranks it speaks for).
    fn member_conns(&self) -> BTreeSet<ConnId> {
        (self.members.values())
            .filter(|m| !m.left)
            .map(|m| m.conn)
            .collect()
    }
}

/// A host agent of a job.
struct Agent {
    /// Where it takes the node map from another agent.
    relay: String,
    /// The nonce of its HostJoin, which its HostWelcome's proof answers.
    nonce: Proof,
    /// The ranks it speaks for, in its HostJoin's order.
    ranks: Vec<u32>,
}

/// A process's handler table: (rank, fingerprint, (ID, name) entries).
type HandlerTable = (u32, u64, Vec<(u16, String)>);

struct Member {
    conn: ConnId,
    host: String,
    pid: u32,
    endpoints: Vec<proto::DeviceEndpoint>,
    /// The nonce of its Join, which the Welcome's proof answers.
    nonce: Proof,
    left: bool,
}

/// Why a member or launcher connection ended.
enum End {
    Gone(Gone),
    Silent,
    Malformed(String),
    /// The process said it cannot go on.
    Aborted(String),
}

impl End {
    fn describe(&self, timeout: Duration) -> String {
        match self {
            End::Silent => format!(
                "sent no heartbeat for {} s (hung or unreachable)",
                timeout.as_secs()
            ),
            End::Gone(Gone::Closed) => {
                "closed its connection to the GRM without leaving the job (the process died)".into()
            }
            End::Gone(Gone::NotReading) => {
                "did not take what the GRM wrote to it (hung or unreachable)".into()
            }
            End::Malformed(e) => format!("sent a malformed frame ({e})"),
            End::Aborted(why) => format!("failed: {why}"),
        }
    }
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

/// How often the core wakes when nothing happens: heartbeats are due every
/// [`crate::client::HEARTBEAT`], and deadlines are checked this often.
const TICK: Duration = Duration::from_millis(100);
/// A gap between ticks this long means the GRM itself was not running.
const STALLED: Duration = Duration::from_secs(2);

/// The GRM's state: its jobs and connections.
pub struct Core {
    opts: CoreOptions,
    jobs: HashMap<JobId, Job>,
    conns: HashMap<ConnId, Conn>,
    /// Connections counted against each client's limit.
    per_client: HashMap<Client, u32>,
    /// Connections the core closed whose sockets the driver still holds.
    closing: u32,
    rejected: u64,
    next_heartbeat: Instant,
    next_check: Instant,
    /// When [`Core::tick`] last ran: a much longer gap means the GRM itself
    /// was not running (a loaded host), and that time is not held against
    /// the members' heartbeats.
    last_tick: Instant,
    out: VecDeque<Output>,
}

impl Core {
    pub fn new(opts: CoreOptions, now: Instant) -> Core {
        Core {
            opts,
            jobs: HashMap::new(),
            conns: HashMap::new(),
            per_client: HashMap::new(),
            closing: 0,
            rejected: 0,
            next_heartbeat: now + crate::client::HEARTBEAT,
            next_check: now + TICK,
            last_tick: now,
            out: VecDeque::new(),
        }
    }

    /// The next thing to do, if any.
    pub fn poll_output(&mut self) -> Option<Output> {
        self.out.pop_front()
    }

    /// When [`Core::tick`] is next due.
    pub fn next_tick(&self) -> Instant {
        self.next_heartbeat.min(self.next_check)
    }

    pub fn status(&self) -> GrmStatus {
        GrmStatus {
            jobs: self.jobs.len() as u32,
            members: (self.jobs.values())
                .map(|j| j.members.values().filter(|m| !m.left).count() as u32)
                .sum(),
            connections: self.conns.len() as u32,
            rejected_frames: self.rejected,
        }
    }

    fn heartbeat_ms(&self) -> u32 {
        self.opts
            .heartbeat_timeout
            .as_millis()
            .min(u32::MAX as u128) as u32
    }

    fn send(&mut self, conn: ConnId, m: &Msg) {
        self.out.push_back(Output::Send(conn, m.into()));
    }

    /// Say why, then close; counted as a refused request.
    fn refuse(&mut self, conn: ConnId, reason: &str) {
        self.rejected += 1;
        self.send(
            conn,
            &Msg::Refused {
                reason: reason.into(),
            },
        );
        self.finish(conn);
    }

    /// Read nothing more from `conn`; close it once written. It stops
    /// counting against the limits now: a client that does not close its
    /// end must not keep the slot while the driver lingers.
    fn finish(&mut self, conn: ConnId) {
        if let Some(c) = self.conns.get_mut(&conn) {
            c.role = Role::Done;
            c.deadline = None;
            if std::mem::replace(&mut c.counted, false) {
                let client = c.client;
                self.uncount(client);
                self.closing += 1;
            }
        }
        self.out.push_back(Output::Close(conn));
    }

    fn uncount(&mut self, client: Client) {
        if let Some(n) = self.per_client.get_mut(&client) {
            *n -= 1;
            if *n == 0 {
                self.per_client.remove(&client);
            }
        }
    }

    /// The GRM is full and `client` wants a connection: cut off the
    /// oldest connection still greeting (it has not shown it belongs to
    /// any job) of the client holding the most, when that is at least two
    /// more than `client` holds. No set of clients can then keep another
    /// out by holding connections open, only by holding fewer. False when
    /// there is none to cut off.
    fn make_room(&mut self, client: Client) -> bool {
        let count = |c: &Client| self.per_client.get(c).copied().unwrap_or(0);
        let mine = count(&client);
        let victim = (self.conns.iter())
            .filter(|(_, c)| c.counted && matches!(c.role, Role::Greeting { .. }))
            .filter(|(_, c)| count(&c.client) > mine + 1)
            .max_by_key(|(&id, c)| (count(&c.client), std::cmp::Reverse(id)))
            .map(|(&id, c)| (id, c.client));
        let Some((conn, holder)) = victim else {
            return false;
        };
        tracing::debug!(%holder, %client, "grm: full; cut off the oldest greeting connection of the largest holder");
        self.refuse(
            conn,
            &format!("cut off: this GRM is full, and {holder} holds the most connections"),
        );
        true
    }

    /// A new connection of `client` (`None`: its peer could not be named,
    /// it has gone already). It is challenged, or refused.
    pub fn connected(&mut self, conn: ConnId, client: Option<Client>, now: Instant) {
        debug_assert!(!self.conns.contains_key(&conn), "connection {conn} reused");
        let Some(client) = client else {
            self.out.push_back(Output::Close(conn));
            return;
        };
        let in_use = self.conns.len() as u32 - self.closing;
        let refusal = if in_use >= self.opts.max_connections && !self.make_room(client) {
            Some("too many connections to this GRM".to_string())
        } else if self.per_client.get(&client).copied().unwrap_or(0) >= self.opts.max_per_client {
            Some(format!(
                "{client} has {} connections to this GRM, the most one client may have",
                self.opts.max_per_client
            ))
        } else {
            None
        };
        if let Some(why) = refusal {
            // Not a connection of ours: refused before it was one.
            self.rejected += 1;
            self.send(conn, &Msg::Refused { reason: why });
            self.out.push_back(Output::Close(conn));
            return;
        }
        *self.per_client.entry(client).or_insert(0) += 1;
        let challenge = auth::nonce();
        self.conns.insert(
            conn,
            Conn {
                client,
                role: Role::Greeting { challenge },
                deadline: Some(now + self.opts.greeting_timeout),
                counted: true,
            },
        );
        self.send(conn, &Msg::Challenge { nonce: challenge });
    }

    /// The connection's socket is gone: forget it, and end its job if it
    /// was a member that had not left, or a launcher.
    pub fn closed(&mut self, conn: ConnId, how: Gone) {
        self.lost(conn, End::Gone(how));
        if let Some(c) = self.conns.remove(&conn) {
            match c.counted {
                true => self.uncount(c.client),
                false => self.closing -= 1,
            }
        }
    }

    /// A frame the driver could not take whole: its length is impossible.
    pub fn malformed(&mut self, conn: ConnId, e: &ProtoError) {
        self.rejected_frame(conn, e);
    }

    fn rejected_frame(&mut self, conn: ConnId, e: &ProtoError) {
        tracing::warn!(conn, "grm: refused a malformed frame: {e}");
        self.refuse_and_end(conn, &format!("malformed frame: {e}"), e.to_string());
    }

    /// Refuse what `conn` sent, and end its job if it was in one.
    fn refuse_and_end(&mut self, conn: ConnId, reason: &str, end: String) {
        self.lost(conn, End::Malformed(end));
        self.refuse(conn, reason);
    }

    /// One whole frame from `conn` (without its length prefix).
    pub fn received(&mut self, conn: ConnId, frame: &[u8], now: Instant) {
        let msg = match Msg::decode(frame) {
            Ok(m) => m,
            Err(e) => return self.rejected_frame(conn, &e),
        };
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        let role = match &c.role {
            Role::Greeting { challenge } => Role::Greeting {
                challenge: *challenge,
            },
            Role::Launcher(id) => Role::Launcher(*id),
            Role::Member(id, rank) => Role::Member(*id, *rank),
            Role::Host(id) => Role::Host(*id),
            Role::Done => return,
        };
        c.deadline = Some(now + self.opts.heartbeat_timeout);
        let client = c.client;
        match role {
            Role::Greeting { challenge } => self.first(conn, client, &challenge, msg),
            Role::Launcher(_) => self.launcher_said(conn, msg),
            Role::Member(id, rank) => self.member_said(conn, &id, rank, msg),
            Role::Host(id) => self.host_said(conn, &id, msg),
            Role::Done => {}
        }
    }

    /// Heartbeats when due, and connections past their deadline.
    pub fn tick(&mut self, now: Instant) {
        let gap = now.saturating_duration_since(self.last_tick);
        self.last_tick = now;
        if gap > STALLED {
            // The GRM did not run for `gap`: nobody could be heard meanwhile.
            tracing::warn!(
                secs = gap.as_secs_f64(),
                "grm: this process was not running for a while; members' heartbeat deadlines moved on by as much"
            );
            for c in self.conns.values_mut() {
                if let Some(d) = c.deadline.as_mut() {
                    *d += gap;
                }
            }
        }
        if now >= self.next_heartbeat {
            self.next_heartbeat = now + crate::client::HEARTBEAT;
            let mut to = Vec::new();
            for job in self.jobs.values() {
                to.extend(job.launcher.into_iter().chain(job.member_conns()));
            }
            let beat = Frame::from(&Msg::Heartbeat);
            self.out
                .extend(to.into_iter().map(|c| Output::Send(c, beat.clone())));
        }
        if now >= self.next_check {
            self.next_check = now + TICK;
            let late: Vec<ConnId> = (self.conns.iter())
                .filter(|(_, c)| c.deadline.is_some_and(|d| now >= d))
                .map(|(&id, _)| id)
                .collect();
            for conn in late {
                self.lost(conn, End::Silent);
                self.finish(conn);
            }
        }
    }

    /// End every job (the GRM is shutting down).
    pub fn shutdown(&mut self) {
        let ids: Vec<JobId> = self.jobs.keys().copied().collect();
        for id in ids {
            self.end_job(&id, Ending::Ended("the GRM is shutting down".into()));
        }
    }

    /// `conn` will say nothing more: if it was a launcher or a member
    /// that had not left, its job ends, naming why.
    fn lost(&mut self, conn: ConnId, end: End) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        let role = std::mem::replace(&mut c.role, Role::Done);
        c.deadline = None;
        let timeout = self.opts.heartbeat_timeout;
        match role {
            Role::Launcher(id) => {
                if let Some(job) = self.jobs.get_mut(&id) {
                    job.launcher = None;
                    let why = format!("its launcher {}", end.describe(timeout));
                    self.end_job(&id, Ending::Ended(why));
                }
            }
            Role::Member(id, rank) => {
                let Some(m) = self.jobs.get(&id).and_then(|j| j.members.get(&rank)) else {
                    return;
                };
                if m.left {
                    return;
                }
                self.died(&id, rank, end.describe(timeout));
            }
            Role::Host(id) => {
                // Its ranks are as good as gone: the first still there is
                // named, as the job's first death.
                let Some(job) = self.jobs.get(&id) else {
                    return;
                };
                let ranks = job.agents.get(&conn).map(|a| a.ranks.as_slice());
                let still = (ranks.unwrap_or_default().iter())
                    .find(|r| job.members.get(r).is_some_and(|m| !m.left));
                if let Some(&rank) = still {
                    let reason = format!("(its host agent {})", end.describe(timeout));
                    self.died(&id, rank, reason);
                }
            }
            Role::Greeting { .. } | Role::Done => {}
        }
    }

    /// Rank `rank` of job `id` is gone for `reason`: the job ends, naming it.
    fn died(&mut self, id: &JobId, rank: u32, reason: String) {
        let Some(m) = self.jobs.get(id).and_then(|j| j.members.get(&rank)) else {
            return;
        };
        let (host, pid) = (m.host.clone(), m.pid);
        tracing::warn!(rank, pid, host, "grm: rank {reason}");
        self.end_job(
            id,
            Ending::Died {
                rank,
                host,
                pid,
                reason,
            },
        );
    }

    fn first(&mut self, conn: ConnId, client: Client, challenge: &Proof, msg: Msg) {
        match msg {
            Msg::Status => {
                let s = self.status();
                self.send(conn, &Msg::StatusReply(s));
                self.finish(conn);
            }
            Msg::Register {
                job,
                verifier,
                welcome_key,
                size,
                program,
                proof,
            } => {
                let signed =
                    proto::register_signed_bytes(&job, &verifier, &welcome_key, size, &program);
                if !auth::verify(&verifier, "register", challenge, &signed, &proof) {
                    tracing::warn!(%client, "grm: a Register without a valid signature of its job's token");
                    self.refuse(conn, "the Register does not prove the job's token");
                    return;
                }
                let keys = JobKeys {
                    verifier,
                    welcome_key,
                };
                if let Err(why) = self.register(conn, client, job, keys, size, program) {
                    self.refuse(conn, &why);
                }
            }
            Msg::Join(j) => {
                if let Err(why) = self.join(conn, client, challenge, j) {
                    self.refuse(conn, &why);
                }
            }
            Msg::HostJoin(j) => {
                if let Err(why) = self.host_join(conn, client, challenge, j) {
                    self.refuse(conn, &why);
                }
            }
            other => self.refuse(
                conn,
                &format!(
                    "a connection starts with Register, Join, HostJoin or Status, not {}",
                    other.name()
                ),
            ),
        }
    }

    fn register(
        &mut self,
        conn: ConnId,
        client: Client,
        id: JobId,
        keys: JobKeys,
        size: u32,
        program: String,
    ) -> Result<(), String> {
        if size == 0 || size > MAX_JOB {
            return Err(format!("a job has 1 to {MAX_JOB} processes, not {size}"));
        }
        if self.jobs.contains_key(&id) {
            return Err("a job with this id is already registered".into());
        }
        let owned = self.jobs.values().filter(|j| j.owner == client).count();
        if owned >= self.opts.max_jobs_per_client as usize {
            return Err(format!(
                "{client} has {owned} jobs at this GRM, the most one client may have"
            ));
        }
        // Program ID from the program's name, instance at random: the key
        // names the job's shared segments, so it must differ from every
        // live job's on this host, whichever GRM started it.
        let name = program.rsplit('/').next().unwrap_or(&program);
        let program_id = fnv32(name.as_bytes());
        let key = loop {
            let instance: u32 = rand::random();
            let key = JobKey((program_id as u64) << 32 | instance as u64);
            if instance != 0 && self.jobs.values().all(|j| j.key != key) {
                break key;
            }
        };
        let heartbeat_ms = self.heartbeat_ms();
        self.send(
            conn,
            &Msg::Registered {
                job_key: key.0,
                heartbeat_ms,
            },
        );
        if let Some(c) = self.conns.get_mut(&conn) {
            c.role = Role::Launcher(id);
        }
        tracing::info!(%key, size, program, %client, "grm: job registered");
        self.jobs.insert(
            id,
            Job {
                key,
                keys,
                owner: client,
                program,
                size,
                launcher: Some(conn),
                members: BTreeMap::new(),
                first_free: 0,
                left: 0,
                welcomed: false,
                reference: None,
                agents: BTreeMap::new(),
            },
        );
        Ok(())
    }

    /// The launcher's connection carries heartbeats until the job ends.
    fn launcher_said(&mut self, conn: ConnId, msg: Msg) {
        if !matches!(msg, Msg::Heartbeat) {
            let name = msg.name();
            self.refuse_and_end(
                conn,
                &format!("a launcher does not send {name}"),
                format!("unexpected {name}"),
            );
        }
    }

    /// May `client`, who proved what `proved` checks, join job `id`?
    fn may_join(
        &self,
        client: Client,
        id: &JobId,
        proved: impl FnOnce(&JobKeys) -> bool,
    ) -> Result<(), String> {
        let Some(job) = self.jobs.get(id) else {
            return Err(
                "no job with this token is registered at this GRM (wrong or stale FM_JOB_TOKEN; start jobs with fmrun)".into(),
            );
        };
        if !proved(&job.keys) {
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
        Ok(())
    }

    /// The rank a process of `host`, joining job `id` (admitted by
    /// [`Core::may_join`]) as `asked`, gets. A rank taken twice or a
    /// handler table unlike the first joiner's ends the job: both proved
    /// the token, so the job cannot be trusted, or cannot work.
    fn take_rank(
        &mut self,
        id: &JobId,
        asked: Option<u32>,
        (host, pid): (&str, u32),
        (fingerprint, handlers): (u64, &[(u16, String)]),
    ) -> Result<u32, String> {
        let Some(job) = self.jobs.get_mut(id) else {
            return Err("the job has ended".into());
        };
        if let Some((r, first)) = asked.and_then(|r| job.members.get(&r).map(|m| (r, m))) {
            // Someone else holds the token, or the launcher started a rank
            // twice.
            let why = format!(
                "rank {r} joined twice, as pid {} on {} and as pid {pid} on {host}: someone else holds this job's token, or a rank was started twice",
                first.pid, first.host
            );
            tracing::warn!(key = %job.key, "grm: {why}");
            self.end_job(id, Ending::Ended(why.clone()));
            return Err(why);
        }
        let rank = choose_rank(job, asked)?;
        match &job.reference {
            None => job.reference = Some((rank, fingerprint, handlers.to_vec())),
            Some((first, fp, table)) if *fp != fingerprint || table != handlers => {
                let why = format!(
                    "rank {rank}'s handler table differs from rank {first}'s: {}",
                    handler_difference(*first, table, rank, handlers)
                );
                self.end_job(id, Ending::Ended(why.clone()));
                return Err(why);
            }
            Some(_) => {}
        }
        Ok(rank)
    }

    /// Admit a process to its job, or say why not.
    fn join(
        &mut self,
        conn: ConnId,
        client: Client,
        challenge: &Proof,
        j: Join,
    ) -> Result<(), String> {
        self.may_join(client, &j.job, |keys| {
            auth::verify(
                &keys.verifier,
                "join",
                challenge,
                &j.signed_bytes(),
                &j.proof,
            )
        })?;
        let rank = self.take_rank(
            &j.job,
            j.rank,
            (&j.host, j.pid),
            (j.fingerprint, &j.handlers),
        )?;
        tracing::debug!(rank, pid = j.pid, host = j.host, "grm: joined");
        let member = Member {
            conn,
            host: j.host,
            pid: j.pid,
            endpoints: j.endpoints,
            nonce: j.nonce,
            left: false,
        };
        if let Some(job) = self.jobs.get_mut(&j.job) {
            job.members.insert(rank, member);
        }
        if let Some(c) = self.conns.get_mut(&conn) {
            c.role = Role::Member(j.job, rank);
        }
        self.joined(&j.job);
        Ok(())
    }

    /// Admit a host agent's processes to their job, or say why not. One
    /// that cannot join ends the job, which cannot start without them.
    fn host_join(
        &mut self,
        conn: ConnId,
        client: Client,
        challenge: &Proof,
        j: HostJoin,
    ) -> Result<(), String> {
        self.may_join(client, &j.job, |keys| {
            let signed = j.signed_bytes();
            auth::verify(&keys.verifier, "host-join", challenge, &signed, &j.proof)
        })?;
        if j.members.is_empty() {
            return Err("a HostJoin names no process".into());
        }
        let mut ranks = Vec::with_capacity(j.members.len());
        for m in j.members {
            let fingerprint = (j.fingerprint, j.handlers.as_slice());
            let rank = match self.take_rank(&j.job, m.rank, (&j.host, m.pid), fingerprint) {
                Ok(r) => r,
                Err(why) => {
                    let why = format!("host agent on {}: {why}", j.host);
                    self.end_job(&j.job, Ending::Ended(why.clone()));
                    return Err(why);
                }
            };
            let member = Member {
                conn,
                host: j.host.clone(),
                pid: m.pid,
                endpoints: m.endpoints,
                nonce: j.nonce,
                left: false,
            };
            if let Some(job) = self.jobs.get_mut(&j.job) {
                job.members.insert(rank, member);
            }
            ranks.push(rank);
        }
        tracing::debug!(host = j.host, ranks = ranks.len(), "grm: a host joined");
        let agent = Agent {
            relay: j.relay,
            nonce: j.nonce,
            ranks,
        };
        if let Some(job) = self.jobs.get_mut(&j.job) {
            job.agents.insert(conn, agent);
        }
        if let Some(c) = self.conns.get_mut(&conn) {
            c.role = Role::Host(j.job);
        }
        self.joined(&j.job);
        Ok(())
    }

    /// Members joined job `id`: tell its launcher, and fence once all are in.
    fn joined(&mut self, id: &JobId) {
        let Some(job) = self.jobs.get(id) else {
            return;
        };
        let (joined, size) = (job.members.len() as u32, job.size);
        if let Some(l) = job.launcher {
            self.send(l, &Msg::Progress { joined, size });
        }
        if joined == size {
            self.fence(id);
        }
    }

    /// Everyone joined: give each process the node map, with the proof
    /// that answers its nonce. The map is encoded and hashed once; each
    /// process gets its own head and proof before the shared bytes.
    fn fence(&mut self, id: &JobId) {
        let heartbeat_ms = self.heartbeat_ms();
        let Some(job) = self.jobs.get_mut(id) else {
            return;
        };
        job.welcomed = true;
        let nodes: Vec<Node> = (job.members.iter())
            .map(|(&rank, m)| Node {
                rank,
                host: m.host.clone(),
                pid: m.pid,
                contexts: Vec::new(),
                endpoints: m.endpoints.clone(),
            })
            .collect();
        let map: Arc<[u8]> = proto::encode_node_map(&nodes).into();
        drop(nodes);
        let digest = proto::map_digest(&map);
        tracing::info!(key = %job.key, size = job.size, program = job.program, map_bytes = map.len(), host_agents = job.agents.len(), "grm: job complete, node map sent");
        let own = (job.members.iter()).filter(|(_, m)| !job.agents.contains_key(&m.conn));
        for (&rank, m) in own {
            let signed = proto::welcome_signed(job.key.0, rank, heartbeat_ms, &digest);
            let proof = auth::prove(&job.keys.welcome_key, "welcome", &m.nonce, &signed);
            let head = proto::welcome_head(job.key.0, rank, heartbeat_ms, &proof, map.len());
            self.out.push_back(Output::Send(
                m.conn,
                Frame {
                    head,
                    shared: Some(map.clone()),
                },
            ));
        }
        // Host agents in the order of their first ranks; the first
        // RELAY_FANOUT get the map, and every agent passes it on
        // (`proto::relay_children`).
        let mut agents: Vec<(&ConnId, &Agent)> = job.agents.iter().collect();
        agents.sort_by_key(|(_, a)| a.ranks.iter().min().copied());
        for (i, &(&conn, a)) in agents.iter().enumerate() {
            let mut w = HostWelcome {
                job_key: job.key.0,
                heartbeat_ms,
                ranks: a.ranks.clone(),
                relay_to: (proto::relay_children(i, agents.len()))
                    .map(|c| agents[c].1.relay.clone())
                    .collect(),
                map_digest: digest,
                proof: [0; 32],
                map: Vec::new(),
            };
            let signed = proto::host_welcome_signed(&w);
            w.proof = auth::prove(&job.keys.welcome_key, "host-welcome", &a.nonce, &signed);
            let root = i < proto::RELAY_FANOUT;
            let map_len = if root { map.len() } else { 0 };
            let head = proto::host_welcome_head(&w, map_len);
            let shared = root.then(|| map.clone());
            self.out
                .push_back(Output::Send(conn, Frame { head, shared }));
        }
    }

    fn member_said(&mut self, conn: ConnId, id: &JobId, rank: u32, msg: Msg) {
        match msg {
            Msg::Heartbeat => {}
            m @ (Msg::Ready { .. } | Msg::Stats { .. } | Msg::Leave | Msg::Abort { .. }) => {
                self.rank_said(conn, id, rank, m)
            }
            other => {
                let name = other.name();
                self.refuse_and_end(
                    conn,
                    &format!("a joined process does not send {name}"),
                    format!("unexpected {name}"),
                );
            }
        }
    }

    /// A host agent says something for its host or one of its ranks.
    fn host_said(&mut self, conn: ConnId, id: &JobId, msg: Msg) {
        let ours = |rank: u32| {
            (self.jobs.get(id))
                .and_then(|j| j.agents.get(&conn))
                .is_some_and(|a| a.ranks.contains(&rank))
        };
        match msg {
            Msg::Heartbeat => {}
            Msg::ForRank { rank, msg } if ours(rank) => self.rank_said(conn, id, rank, *msg),
            Msg::ForRank { rank, .. } => self.refuse_and_end(
                conn,
                &format!("rank {rank} is not one this host agent joined"),
                format!("spoke for rank {rank}, not its own"),
            ),
            other => {
                let name = other.name();
                self.refuse_and_end(
                    conn,
                    &format!("a host agent does not send {name}"),
                    format!("unexpected {name}"),
                );
            }
        }
    }

    /// What rank `rank` says, through its own connection `conn` or its
    /// host agent's (`Ready`, `Stats`, `Leave` or `Abort`).
    fn rank_said(&mut self, conn: ConnId, id: &JobId, rank: u32, msg: Msg) {
        let Some(job) = self.jobs.get_mut(id) else {
            return;
        };
        let launcher = job.launcher;
        match msg {
            Msg::Ready { table } => {
                if let (Some(l), Some(m)) = (launcher, job.members.get(&rank)) {
                    let pid = m.pid;
                    self.send(l, &Msg::RankReady { rank, pid, table });
                }
            }
            Msg::Stats { json } => {
                if let Some(l) = launcher {
                    self.send(l, &Msg::RankStats { rank, json });
                }
            }
            Msg::Leave => {
                if let Some(m) = job.members.get_mut(&rank) {
                    if !m.left {
                        m.left = true;
                        job.left += 1;
                    }
                }
                let done = job.left == job.size;
                // A connection is done once every rank it speaks for left.
                let all_left = (job.members.values()).all(|m| m.conn != conn || m.left);
                if let Some(c) = self.conns.get_mut(&conn).filter(|_| all_left) {
                    c.role = Role::Done;
                    c.deadline = None;
                }
                if done {
                    self.end_job(id, Ending::Completed);
                }
            }
            Msg::Abort { reason } => {
                let reason = End::Aborted(reason).describe(self.opts.heartbeat_timeout);
                self.died(id, rank, reason);
                self.finish(conn);
            }
            other => {
                let name = other.name();
                self.refuse_and_end(
                    conn,
                    &format!("a rank does not send {name} here"),
                    format!("unexpected {name}"),
                );
            }
        }
    }

    /// Reclaim the job's segments, tell everyone still there, forget it,
    /// and close its connections once what they hold is written.
    fn end_job(&mut self, id: &JobId, how: Ending) {
        let Some(job) = self.jobs.remove(id) else {
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
        let dirs: BTreeSet<PathBuf> = (job.members.values())
            .flat_map(|m| &m.endpoints)
            .filter(|e| e.device == "shmem")
            .filter_map(|e| std::str::from_utf8(&e.address).ok().map(PathBuf::from))
            .filter(|d| d.is_absolute())
            .collect();
        self.out.push_back(Output::RemoveSegments {
            key: job.key,
            dirs: dirs.into_iter().collect(),
        });
        // The launcher first: it hears who died before the others react.
        let told = job.launcher.into_iter().chain(job.member_conns());
        let frame = Frame::from(&msg);
        for c in told {
            self.out.push_back(Output::Send(c, frame.clone()));
        }
        let every: BTreeSet<ConnId> = job
            .launcher
            .into_iter()
            .chain(job.members.values().map(|m| m.conn))
            .collect();
        for c in every {
            self.finish(c);
        }
        match how {
            Ending::Completed => tracing::info!(key = %job.key, "grm: job completed"),
            _ => tracing::info!(key = %job.key, "grm: job ended: {}", msg_reason(&msg)),
        }
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
        Some(r) => Ok(r),
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

/// The core in virtual time: no sockets, no sleeps; time is what the test
/// says it is.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::{host_welcome_proves, new_token, signed_host_join, signed_join};
    use crate::proto::{DeviceEndpoint, HostMember};
    use rand::{Rng, SeedableRng};

    const HB: Duration = Duration::from_secs(10);
    const ME: Client = Client::User(1000);

    fn core(t0: Instant) -> Core {
        Core::new(
            CoreOptions {
                heartbeat_timeout: HB,
                greeting_timeout: Duration::from_secs(2),
                max_connections: 64,
                max_per_client: 32,
                max_jobs_per_client: 4,
            },
            t0,
        )
    }

    /// Every output so far, as (connection, message) for what was sent.
    fn drain(c: &mut Core) -> Vec<(ConnId, Option<Msg>)> {
        let mut v = Vec::new();
        while let Some(o) = c.poll_output() {
            match o {
                Output::Send(conn, f) => {
                    let whole: Vec<u8> = f
                        .head
                        .iter()
                        .chain(f.shared.iter().flat_map(|s| s.iter()))
                        .copied()
                        .collect();
                    v.push((
                        conn,
                        Some(Msg::decode(&whole[4..]).expect("the core sends what decodes")),
                    ));
                }
                Output::Close(conn) => v.push((conn, None)),
                Output::RemoveSegments { .. } => {}
            }
        }
        v
    }

    fn challenge_of(out: &[(ConnId, Option<Msg>)], conn: ConnId) -> Proof {
        out.iter()
            .find_map(|(c, m)| match m {
                Some(Msg::Challenge { nonce }) if *c == conn => Some(*nonce),
                _ => None,
            })
            .expect("a challenge")
    }

    /// A job of `size` registered on connection 1, with `token`.
    fn registered(c: &mut Core, size: u32, token: &str, now: Instant) {
        c.connected(1, Some(ME), now);
        let challenge = challenge_of(&drain(c), 1);
        let m = crate::client::signed_register(token, &challenge, size, "t");
        c.received(1, &m.encode()[4..], now);
        let out = drain(c);
        assert!(
            out.iter()
                .any(|(_, m)| matches!(m, Some(Msg::Registered { .. }))),
            "{out:?}"
        );
    }

    /// Rank `r` joins on connection 10 + r.
    fn join(c: &mut Core, r: u32, token: &str, now: Instant) -> Vec<(ConnId, Option<Msg>)> {
        let conn = 10 + ConnId::from(r);
        c.connected(conn, Some(ME), now);
        let challenge = challenge_of(&drain(c), conn);
        let j = Join {
            job: [0; 16],
            nonce: [0; 32],
            proof: [0; 64],
            rank: Some(r),
            host: format!("h{}", r / 2),
            pid: 100 + r,
            fingerprint: 1,
            handlers: vec![],
            endpoints: vec![DeviceEndpoint {
                device: "shmem".into(),
                address: b"/nonexistent".to_vec(),
            }],
        };
        c.received(
            conn,
            &Msg::Join(signed_join(token, &challenge, j)).encode()[4..],
            now,
        );
        drain(c)
    }

    /// The GRM's own thread not running for longer than the heartbeat
    /// timeout (a loaded host) is no member's silence: nobody is declared
    /// dead for it, and a member silent for the timeout after it still is.
    #[test]
    fn a_grm_that_did_not_run_blames_no_member_for_it() {
        let t0 = Instant::now();
        let mut c = core(t0);
        let token = new_token();
        registered(&mut c, 2, &token, t0);
        join(&mut c, 0, &token, t0);
        join(&mut c, 1, &token, t0);
        let beat = Msg::Heartbeat.encode();
        c.tick(t0 + TICK);
        drain(&mut c);
        // 15 s without the GRM running; then the launcher and rank 0 are
        // heard at once (their beats were waiting), rank 1 is not yet.
        let back = t0 + TICK + HB + Duration::from_secs(5);
        c.received(10, &beat[4..], back);
        c.received(1, &beat[4..], back);
        c.tick(back);
        let out = drain(&mut c);
        assert!(
            out.iter().all(|(_, m)| matches!(m, Some(Msg::Heartbeat))),
            "{out:?}"
        );
        // Rank 1 stays silent for the timeout with the GRM running: dead.
        let mut now = back;
        let mut died = None;
        while now < back + HB + 2 * TICK && died.is_none() {
            now += TICK;
            c.received(10, &beat[4..], now);
            c.received(1, &beat[4..], now);
            c.tick(now);
            died = drain(&mut c).into_iter().find_map(|(conn, m)| match m {
                Some(Msg::PeerDied { rank, .. }) if conn == 1 => Some((rank, now)),
                _ => None,
            });
        }
        let (rank, at) = died.expect("rank 1 declared dead");
        assert_eq!(rank, 1);
        assert!(at >= back + HB - TICK, "declared dead too early");
    }

    #[test]
    fn a_silent_member_ends_its_job_at_its_deadline_not_before() {
        let t0 = Instant::now();
        let mut c = core(t0);
        let token = new_token();
        registered(&mut c, 2, &token, t0);
        join(&mut c, 0, &token, t0);
        let out = join(&mut c, 1, &token, t0);
        assert_eq!(
            out.iter()
                .filter(|(_, m)| matches!(m, Some(Msg::Welcome(_))))
                .count(),
            2
        );
        // Rank 0 and the launcher keep talking; rank 1 says nothing.
        let beat = Msg::Heartbeat.encode();
        let mut now = t0;
        while now < t0 + HB - Duration::from_millis(200) {
            now += Duration::from_millis(100);
            c.received(10, &beat[4..], now);
            c.received(1, &beat[4..], now);
            c.tick(now);
            let out = drain(&mut c);
            assert!(
                out.iter().all(|(_, m)| matches!(m, Some(Msg::Heartbeat))),
                "{out:?}"
            );
        }
        c.tick(t0 + HB + TICK);
        let out = drain(&mut c);
        let died = out.iter().find_map(|(conn, m)| match m {
            Some(Msg::PeerDied { rank, reason, .. }) if *conn == 1 => Some((*rank, reason.clone())),
            _ => None,
        });
        assert_eq!(
            died,
            Some((1, "sent no heartbeat for 10 s (hung or unreachable)".into()))
        );
        assert_eq!(c.status().jobs, 0);
        // Everyone is closed once told.
        for conn in [1, 10, 11] {
            assert!(out.contains(&(conn, None)), "{conn} not closed: {out:?}");
        }
    }

    #[test]
    fn a_connection_that_never_greets_is_closed_and_counted_until_gone() {
        let t0 = Instant::now();
        let mut c = core(t0);
        c.connected(5, Some(ME), t0);
        drain(&mut c);
        c.tick(t0 + Duration::from_millis(1900));
        assert!(drain(&mut c).is_empty());
        c.tick(t0 + Duration::from_millis(2100));
        assert_eq!(drain(&mut c), vec![(5, None)]);
        assert_eq!(
            c.status().connections,
            1,
            "still a socket until the driver says it is gone"
        );
        assert!(c.per_client.is_empty(), "but no longer one of its client's");
        c.closed(5, Gone::Closed);
        assert_eq!(c.status().connections, 0);
    }

    /// A client cut off at its deadline gets its slot back then, not when
    /// the driver lets go of the half-closed socket.
    #[test]
    fn a_cut_off_connection_frees_its_slot_at_the_cut_off() {
        let t0 = Instant::now();
        let mut c = core(t0);
        for conn in 0..32 {
            c.connected(conn, Some(ME), t0);
        }
        c.connected(40, Some(ME), t0);
        let out = drain(&mut c);
        assert!(
            out.iter()
                .any(|(id, m)| *id == 40 && matches!(m, Some(Msg::Refused { .. }))),
            "over the client's limit: {out:?}"
        );
        c.tick(t0 + Duration::from_millis(1900));
        c.tick(t0 + Duration::from_millis(2100));
        drain(&mut c);
        // No closed() yet: the sockets linger, the slots do not.
        c.connected(41, Some(ME), t0 + Duration::from_millis(2200));
        let out = drain(&mut c);
        assert!(
            out.iter()
                .any(|(id, m)| *id == 41 && matches!(m, Some(Msg::Challenge { .. }))),
            "{out:?}"
        );
    }

    /// Four clients at their limits fill the GRM (64 = 4 × 16, as 8,192 =
    /// 4 × 2,048 by default): a fifth client still gets in, each of its
    /// connections cutting off the oldest greeting one of the largest
    /// holder; a holder cannot cut off another holder's as large as itself,
    /// and members of a job are never cut off.
    #[test]
    fn clients_at_their_limits_cannot_keep_another_out() {
        let t0 = Instant::now();
        let mut c = core(t0);
        c.opts.max_per_client = 16;
        let token = new_token();
        registered(&mut c, 2, &token, t0);
        let _ = join(&mut c, 0, &token, t0);
        let mut conn = 100;
        for user in 1..=4 {
            for _ in 0..16 {
                conn += 1;
                c.connected(conn, Some(Client::User(user)), t0);
            }
        }
        drain(&mut c);
        // The GRM filled with 62 of theirs (with our 2), evenly: once full,
        // a user with fewer cut off one of a user with more.
        let held: Vec<u32> = (1..=4)
            .map(|u| c.per_client.get(&Client::User(u)).copied().unwrap_or(0))
            .collect();
        assert_eq!(held.iter().sum::<u32>(), 62, "{held:?}");
        assert!(held.iter().all(|&n| n == 15 || n == 16), "{held:?}");
        let short = (1..=4)
            .find(|&u| held[u as usize - 1] == 15)
            .expect("one with 15");
        c.connected(500, Some(Client::User(short)), t0);
        let out = drain(&mut c);
        assert!(
            out.iter().any(|(id, m)| *id == 500
                && matches!(m, Some(Msg::Refused { reason }) if reason.contains("too many connections"))),
            "{out:?}"
        );
        // Our rank 1 joins: a largest holder's oldest greeting connection goes.
        let out = join(&mut c, 1, &token, t0);
        assert!(
            out.iter()
                .any(|(_, m)| matches!(m, Some(Msg::Welcome { .. }))),
            "{out:?}"
        );
        let theirs: u32 = (1..=4)
            .map(|u| c.per_client.get(&Client::User(u)).copied().unwrap_or(0))
            .sum();
        assert_eq!(theirs, 61, "one of theirs was cut off");
        assert_eq!(c.per_client.get(&ME), Some(&3));
    }

    #[test]
    fn the_node_map_is_encoded_once_and_every_welcome_proves_the_token() {
        let t0 = Instant::now();
        let mut c = core(t0);
        let token = new_token();
        registered(&mut c, 8, &token, t0);
        let mut nonces = HashMap::new();
        for r in 0..8 {
            let conn = 10 + ConnId::from(r);
            c.connected(conn, Some(ME), t0);
            let challenge = challenge_of(&drain(&mut c), conn);
            let j = signed_join(
                &token,
                &challenge,
                Join {
                    job: [0; 16],
                    nonce: [0; 32],
                    proof: [0; 64],
                    rank: None,
                    host: format!("h{}", r % 3),
                    pid: r,
                    fingerprint: 1,
                    handlers: vec![],
                    endpoints: vec![],
                },
            );
            nonces.insert(conn, j.nonce);
            c.received(conn, &Msg::Join(j).encode()[4..], t0);
        }
        let mut maps = Vec::new();
        while let Some(o) = c.poll_output() {
            if let Output::Send(conn, f) = o {
                if let Some(map) = f.shared.clone() {
                    let whole: Vec<u8> = f.head.iter().chain(map.iter()).copied().collect();
                    let Ok(Msg::Welcome(w)) = Msg::decode(&whole[4..]) else {
                        panic!("not a Welcome");
                    };
                    let welcome_key = auth::welcome_key(&token);
                    assert!(auth::check(
                        &welcome_key,
                        "welcome",
                        &nonces[&conn],
                        &w.signed_bytes(),
                        &w.proof
                    ));
                    // Another rank's proof does not fit this Welcome.
                    let other = nonces[&(10 + (conn - 10 + 1) % 8)];
                    assert!(!auth::check(
                        &welcome_key,
                        "welcome",
                        &other,
                        &w.signed_bytes(),
                        &w.proof
                    ));
                    assert_eq!(w.nodes.len(), 8);
                    maps.push(map);
                }
            }
        }
        assert_eq!(maps.len(), 8);
        assert!(
            maps.iter().all(|m| Arc::ptr_eq(m, &maps[0])),
            "one map, shared"
        );
    }

    /// Host agent `conn` joins `ranks` of the job of `token` (pids 1000 +
    /// rank, relay address "relay-<conn>"): its HostJoin's nonce, and what
    /// the core said.
    fn host_join(
        c: &mut Core,
        conn: ConnId,
        ranks: &[u32],
        token: &str,
        now: Instant,
    ) -> (Proof, Vec<(ConnId, Option<Msg>)>) {
        c.connected(conn, Some(ME), now);
        let challenge = challenge_of(&drain(c), conn);
        let j = signed_host_join(
            token,
            &challenge,
            HostJoin {
                job: [0; 16],
                nonce: [0; 32],
                proof: [0; 64],
                host: format!("host{conn}"),
                relay: format!("relay-{conn}"),
                fingerprint: 1,
                handlers: vec![],
                members: (ranks.iter())
                    .map(|&r| HostMember {
                        rank: Some(r),
                        pid: 1000 + r,
                        endpoints: vec![DeviceEndpoint {
                            device: "shmem".into(),
                            address: format!("/dev/shm/h{conn}").into_bytes(),
                        }],
                    })
                    .collect(),
            },
        );
        c.received(conn, &Msg::HostJoin(j.clone()).encode()[4..], now);
        (j.nonce, drain(c))
    }

    /// 24 host agents of 3 ranks each and 2 ranks of their own: the ranks
    /// get Welcomes, each agent one HostWelcome that proves the token and
    /// names its ranks; the GRM sends the map to 16 agents only, and passed
    /// on as each HostWelcome says, it reaches every other agent exactly
    /// once. Heartbeats go once per connection, not per rank.
    #[test]
    fn host_agents_join_for_their_ranks_and_pass_the_map_on() {
        let t0 = Instant::now();
        let mut c = core(t0);
        let token = new_token();
        let (hosts, per_host) = (24u32, 3u32);
        let size = hosts * per_host + 2;
        registered(&mut c, size, &token, t0);
        let mut nonces = HashMap::new();
        let mut out = Vec::new();
        // Agents join in reverse order: the tree follows ranks, not time.
        for h in (0..hosts).rev() {
            let ranks: Vec<u32> = (h * per_host..(h + 1) * per_host).collect();
            let (nonce, o) = host_join(&mut c, 100 + ConnId::from(h), &ranks, &token, t0);
            nonces.insert(100 + ConnId::from(h), nonce);
            out.extend(o);
        }
        for r in hosts * per_host..size {
            out.extend(join(&mut c, r, &token, t0));
        }
        let welcome_key = auth::welcome_key(&token);
        let mut welcomes = HashMap::new();
        let mut own = 0;
        for (conn, m) in out {
            match m {
                Some(Msg::HostWelcome(w)) => {
                    assert!(host_welcome_proves(&welcome_key, &nonces[&conn], &w));
                    let other = nonces[&(100 + (conn - 100 + 1) % 24)];
                    assert!(!host_welcome_proves(&welcome_key, &other, &w));
                    let h = (conn - 100) as u32;
                    assert_eq!(
                        w.ranks,
                        (h * per_host..(h + 1) * per_host).collect::<Vec<_>>()
                    );
                    assert!(welcomes.insert(conn, w).is_none(), "two HostWelcomes");
                }
                Some(Msg::Welcome(w)) => {
                    assert!(w.rank >= hosts * per_host);
                    own += 1;
                }
                _ => {}
            }
        }
        assert_eq!((welcomes.len(), own), (hosts as usize, 2));
        // The relay, as the agents do it: from each agent that has the map
        // to the agents its HostWelcome names.
        let by_relay: HashMap<String, ConnId> = (100..100 + ConnId::from(hosts))
            .map(|c| (format!("relay-{c}"), c))
            .collect();
        let mut got: HashMap<ConnId, Vec<u8>> = (welcomes.iter())
            .filter(|(_, w)| !w.map.is_empty())
            .map(|(&c, w)| (c, w.map.clone()))
            .collect();
        assert_eq!(got.len(), proto::RELAY_FANOUT);
        let mut queue: Vec<ConnId> = got.keys().copied().collect();
        while let Some(from) = queue.pop() {
            for to in &welcomes[&from].relay_to {
                let to = by_relay[to];
                let map = got[&from].clone();
                assert_eq!(proto::map_digest(&map), welcomes[&to].map_digest);
                assert!(got.insert(to, map).is_none(), "{to} got the map twice");
                queue.push(to);
            }
        }
        assert_eq!(got.len(), hosts as usize);
        let map = &got[&100];
        let mut frame = Msg::Heartbeat.encode()[4..7].to_vec();
        frame[2] = 4;
        frame.extend_from_slice(&[0; 8 + 4 + 4 + 32]);
        frame.extend_from_slice(map);
        let Ok(Msg::Welcome(w)) = Msg::decode(&frame) else {
            panic!("the relayed map does not decode");
        };
        assert_eq!(w.nodes.len(), size as usize);
        assert!(w.nodes[..72].iter().all(|n| n.pid == 1000 + n.rank));
        c.tick(t0 + crate::client::HEARTBEAT);
        let beats = drain(&mut c);
        for h in 100..100 + ConnId::from(hosts) {
            assert_eq!(beats.iter().filter(|(x, _)| *x == h).count(), 1);
        }
    }

    /// An agent speaks for its own ranks only; a rank it reports failed,
    /// or its own end while ranks are still there, ends the job naming
    /// that rank; once all its ranks left, its end is no death.
    #[test]
    fn a_host_agent_answers_for_its_ranks_and_no_others() {
        let t0 = Instant::now();
        let say = |c: &mut Core, conn: ConnId, rank: u32, m: Msg| {
            let m = Msg::ForRank {
                rank,
                msg: Box::new(m),
            };
            c.received(conn, &m.encode()[4..], t0);
            drain(c)
        };
        let died = |out: &[(ConnId, Option<Msg>)]| {
            out.iter().find_map(|(conn, m)| match m {
                Some(Msg::PeerDied { rank, reason, .. }) if *conn == 1 => {
                    Some((*rank, reason.clone()))
                }
                _ => None,
            })
        };
        let ended = |out: &[(ConnId, Option<Msg>)]| {
            out.iter().find_map(|(conn, m)| match m {
                Some(Msg::JobEnded { reason }) if *conn == 1 => Some(reason.clone()),
                _ => None,
            })
        };
        for case in 0..4 {
            let mut c = core(t0);
            let token = new_token();
            registered(&mut c, 4, &token, t0);
            host_join(&mut c, 10, &[0, 1], &token, t0);
            host_join(&mut c, 11, &[2, 3], &token, t0);
            match case {
                0 => {
                    let out = say(&mut c, 10, 2, Msg::Leave);
                    let (rank, why) = died(&out).expect("the job ends");
                    assert_eq!(rank, 0);
                    assert!(why.contains("spoke for rank 2"), "{why}");
                }
                1 => {
                    let out = say(
                        &mut c,
                        11,
                        3,
                        Msg::Abort {
                            reason: "killed by signal 9".into(),
                        },
                    );
                    let (rank, why) = died(&out).expect("a death");
                    assert_eq!(rank, 3);
                    assert!(why.contains("killed by signal 9"), "{why}");
                }
                2 => {
                    say(&mut c, 10, 0, Msg::Leave);
                    say(&mut c, 10, 1, Msg::Leave);
                    c.closed(10, Gone::Closed);
                    assert_eq!(died(&drain(&mut c)), None);
                    say(&mut c, 11, 3, Msg::Leave);
                    c.closed(11, Gone::Closed);
                    let (rank, why) = died(&drain(&mut c)).expect("a death");
                    assert_eq!(rank, 2);
                    assert!(why.contains("host agent closed its connection"), "{why}");
                }
                _ => {
                    for (conn, r) in [(10, 0), (10, 1), (11, 2), (11, 3)] {
                        let out = say(&mut c, conn, r, Msg::Leave);
                        assert_eq!(died(&out), None);
                        if r == 3 {
                            assert_eq!(ended(&out).as_deref(), Some("completed"));
                        }
                    }
                }
            }
            assert_eq!(c.status().jobs, 0, "case {case}");
        }
    }

    /// A HostJoin signed as a rank's Join is refused; one whose ranks
    /// clash with a joined rank's ends the job.
    #[test]
    fn a_host_join_proves_the_token_for_a_host_and_takes_free_ranks_only() {
        let t0 = Instant::now();
        let mut c = core(t0);
        let token = new_token();
        registered(&mut c, 4, &token, t0);
        c.connected(10, Some(ME), t0);
        let challenge = challenge_of(&drain(&mut c), 10);
        let mut j = signed_host_join(
            &token,
            &challenge,
            HostJoin {
                job: [0; 16],
                nonce: [0; 32],
                proof: [0; 64],
                host: "h".into(),
                relay: "r".into(),
                fingerprint: 1,
                handlers: vec![],
                members: vec![HostMember {
                    rank: Some(0),
                    pid: 1,
                    endpoints: vec![],
                }],
            },
        );
        j.proof = auth::sign(&token, "join", &challenge, &j.signed_bytes());
        c.received(10, &Msg::HostJoin(j).encode()[4..], t0);
        let out = drain(&mut c);
        assert!(out.iter().any(|(x, m)| *x == 10
            && matches!(m, Some(Msg::Refused { reason }) if reason.contains("does not prove"))));
        assert_eq!(c.status().jobs, 1);
        join(&mut c, 1, &token, t0);
        let (_, out) = host_join(&mut c, 20, &[0, 1], &token, t0);
        assert!(out.iter().any(|(x, m)| *x == 1
            && matches!(m, Some(Msg::JobEnded { reason }) if reason.contains("rank 1 joined twice"))));
        assert_eq!(c.status().jobs, 0);
    }

    /// Random connections, frames (good, mutated and foreign), ends and
    /// times: the core never panics, and what it counts as connections is
    /// what the driver holds.
    #[test]
    fn any_sequence_of_events_keeps_the_books_straight() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let examples: Vec<Vec<u8>> = proto::examples()
            .iter()
            .map(|m| m.encode()[4..].to_vec())
            .collect();
        for round in 0..200 {
            let t0 = Instant::now();
            let mut c = core(t0);
            let token = new_token();
            let mut now = t0;
            let mut open: BTreeSet<ConnId> = BTreeSet::new();
            registered(&mut c, rng.gen_range(1..6), &token, now);
            open.insert(1);
            let mut next = 100;
            for _ in 0..300 {
                match rng.gen_range(0..10) {
                    0 | 1 => {
                        next += 1;
                        let client = Client::User(rng.gen_range(0..3));
                        c.connected(next, Some(client), now);
                        open.insert(next);
                    }
                    2 => {
                        if let Some(&conn) = open.iter().nth(rng.gen_range(0..open.len().max(1))) {
                            c.closed(
                                conn,
                                if rng.gen() {
                                    Gone::Closed
                                } else {
                                    Gone::NotReading
                                },
                            );
                            open.remove(&conn);
                        }
                    }
                    3 => {
                        now += Duration::from_millis(rng.gen_range(0..3000));
                        c.tick(now);
                    }
                    4 => {
                        // A driver never reuses a connection's number.
                        let r = rng.gen_range(0..6);
                        if open.insert(10 + ConnId::from(r)) {
                            let _ = join(&mut c, r, &token, now);
                        }
                    }
                    5 => {
                        next += 1;
                        open.insert(next);
                        let ranks: Vec<u32> = (0..rng.gen_range(1..4))
                            .map(|_| rng.gen_range(0..6))
                            .collect();
                        let _ = host_join(&mut c, next, &ranks, &token, now);
                    }
                    _ => {
                        let Some(&conn) = open.iter().nth(rng.gen_range(0..open.len().max(1)))
                        else {
                            continue;
                        };
                        let mut f = examples[rng.gen_range(0..examples.len())].clone();
                        if rng.gen_bool(0.3) {
                            let at = rng.gen_range(0..f.len());
                            f[at] = rng.gen();
                        }
                        c.received(conn, &f, now);
                    }
                }
                // Closes the core asks for are the driver's to carry out.
                while let Some(o) = c.poll_output() {
                    if let Output::Close(conn) = o {
                        if open.remove(&conn) {
                            c.closed(conn, Gone::Closed);
                        }
                    }
                }
                books_agree(&c, &open, round);
            }
        }
    }

    /// What the core counts as connections is what the driver holds.
    fn books_agree(c: &Core, open: &BTreeSet<ConnId>, round: usize) {
        let s = c.status();
        assert!(
            s.connections as usize <= open.len(),
            "round {round}: {s:?} vs {}",
            open.len()
        );
        assert_eq!(s.connections as usize, c.conns.len());
        let counted = c.conns.values().filter(|x| x.counted).count();
        assert_eq!(c.per_client.values().sum::<u32>() as usize, counted);
        assert_eq!(counted + c.closing as usize, c.conns.len());
    }
}
