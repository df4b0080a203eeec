//! The client side: a process joining a job, and a launcher registering one.
//!
//! Both keep their connection open for the life of the job: a background
//! thread sends a heartbeat every [`HEARTBEAT`], another reads what the GRM
//! says (a peer died, the job ended) and hands it to a callback.

use crate::auth::{self, Proof};
use crate::proto::{self, HostJoin, HostWelcome, Join, Msg, ProtoError, Welcome};
use fm_devices::JobKey;
use std::io;
use std::net::{Shutdown, SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How often clients say they are alive.
pub const HEARTBEAT: Duration = Duration::from_secs(1);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum GrmError {
    #[error("cannot reach the GRM at {addr}: {source}")]
    Connect { addr: String, source: io::Error },
    #[error("the GRM at {addr} refused: {reason}")]
    Refused { addr: String, reason: String },
    #[error("talking to the GRM at {addr}: {source}")]
    Protocol { addr: String, source: ProtoError },
    #[error("the GRM at {addr} did not answer within {secs} s: {waiting_for}")]
    Timeout {
        addr: String,
        secs: u64,
        waiting_for: String,
    },
    #[error("the job ended before it started: {0}")]
    JobEnded(String),
    #[error("the GRM at {addr} sent a node map not signed with this job's token (it is not the job's GRM, or the connection was tampered with)")]
    Forged { addr: String },
    #[error("the GRM at {addr} sent {got} where {expected} was expected")]
    Unexpected {
        addr: String,
        got: &'static str,
        expected: &'static str,
    },
}

fn connect(addr: &str) -> Result<TcpStream, GrmError> {
    let err = |source| GrmError::Connect {
        addr: addr.to_string(),
        source,
    };
    let addrs: Vec<SocketAddr> = addr.to_socket_addrs().map_err(err)?.collect();
    let mut last = io::Error::new(io::ErrorKind::NotFound, "the address resolves to nothing");
    for a in addrs {
        match TcpStream::connect_timeout(&a, CONNECT_TIMEOUT) {
            Ok(s) => {
                let _ = s.set_nodelay(true);
                return Ok(s);
            }
            Err(e) => last = e,
        }
    }
    Err(err(last))
}

/// Connect and read the GRM's challenge (the GRM speaks first).
pub(crate) fn greeted(addr: &str) -> Result<(TcpStream, Proof), GrmError> {
    let mut s = connect(addr)?;
    let _ = s.set_read_timeout(Some(CONNECT_TIMEOUT));
    match proto::read_grm_msg(&mut s).map_err(|e| protocol(addr, e))? {
        Msg::Challenge { nonce } => Ok((s, nonce)),
        m => Err(unexpected(addr, &m, "Challenge")),
    }
}

/// Ask the GRM what it knows.
pub fn status(addr: &str) -> Result<proto::GrmStatus, GrmError> {
    let (mut s, _) = greeted(addr)?;
    proto::write_msg(&mut s, &Msg::Status).map_err(|e| protocol(addr, e.into()))?;
    match proto::read_grm_msg(&mut s).map_err(|e| protocol(addr, e))? {
        Msg::StatusReply(st) => Ok(st),
        m => Err(unexpected(addr, &m, "StatusReply")),
    }
}

fn protocol(addr: &str, e: ProtoError) -> GrmError {
    GrmError::Protocol {
        addr: addr.to_string(),
        source: e,
    }
}

fn unexpected(addr: &str, m: &Msg, expected: &'static str) -> GrmError {
    match m {
        Msg::Refused { reason } => GrmError::Refused {
            addr: addr.to_string(),
            reason: reason.clone(),
        },
        Msg::JobEnded { reason } => GrmError::JobEnded(reason.clone()),
        Msg::PeerDied {
            rank, pid, reason, ..
        } => GrmError::JobEnded(format!("rank {rank} (pid {pid}) {reason}")),
        m => GrmError::Unexpected {
            addr: addr.to_string(),
            got: m.name(),
            expected,
        },
    }
}

/// The connection of a job member or launcher, shared by its threads.
struct Link {
    stream: Mutex<TcpStream>,
    /// Set once this side said goodbye: the end of the connection is expected.
    done: AtomicBool,
}

impl Link {
    fn send(&self, m: &Msg) -> io::Result<()> {
        let mut s = self.stream.lock().unwrap_or_else(|p| p.into_inner());
        proto::write_msg(&mut *s, m)
    }

    fn start_heartbeat(self: &Arc<Self>) {
        let link = self.clone();
        let _ = std::thread::Builder::new()
            .name("grm-heartbeat".into())
            .spawn(move || {
                while !link.done.load(Ordering::SeqCst) {
                    std::thread::sleep(HEARTBEAT);
                    if link.done.load(Ordering::SeqCst) || link.send(&Msg::Heartbeat).is_err() {
                        return;
                    }
                }
            });
    }

    /// Read messages until the connection ends, passing each to `on`.
    /// The GRM says something every second; `silence` without a word
    /// means it is lost (a cut link shows no other way) — judged by
    /// [`Silence`], so that a listener that was itself not running does not
    /// blame the GRM.
    fn start_reader(
        self: &Arc<Self>,
        mut reader: TcpStream,
        addr: String,
        silence: Duration,
        mut on: impl FnMut(Event) + Send + 'static,
    ) {
        let link = self.clone();
        // A frame that has begun arrives whole within the silence.
        let _ = reader.set_read_timeout(Some(silence.max(2 * HEARTBEAT)));
        let _ = std::thread::Builder::new()
            .name("grm-events".into())
            .spawn(move || {
                let mut quiet = Silence::new(silence, Instant::now());
                loop {
                    // Wait for the next frame a beat at a time, so that
                    // every wake-up of this thread is seen.
                    let ready = readable_within(&reader, HEARTBEAT);
                    let now = Instant::now();
                    let r = match ready {
                        Ok(false) if !quiet.lost(now) => continue,
                        Ok(false) => Err(ProtoError::Io(io::ErrorKind::TimedOut.into())),
                        Ok(true) => proto::read_grm_msg(&mut reader),
                        Err(e) => Err(ProtoError::Io(e)),
                    };
                    match r {
                        Ok(m) => {
                            quiet.heard(Instant::now());
                            if let Some(ev) = Event::from_msg(m) {
                                let last = matches!(ev, Event::PeerDied { .. } | Event::Ended(_));
                                on(ev);
                                if last {
                                    link.done.store(true, Ordering::SeqCst);
                                    return;
                                }
                            }
                        }
                        Err(e) => {
                            if !link.done.swap(true, Ordering::SeqCst) {
                                let why = match &e {
                                    ProtoError::Io(io)
                                        if matches!(
                                            io.kind(),
                                            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                                        ) =>
                                    {
                                        format!(
                                            "heard nothing from the GRM at {addr} for {} s (it is unreachable, or the link to it is cut)",
                                            silence.as_secs()
                                        )
                                    }
                                    _ => format!("lost the connection to the GRM at {addr}: {e}"),
                                };
                                on(Event::Lost(why));
                            }
                            return;
                        }
                    }
                }
            });
    }

    fn close(&self) {
        self.done.store(true, Ordering::SeqCst);
        let s = self.stream.lock().unwrap_or_else(|p| p.into_inner());
        let _ = s.shutdown(Shutdown::Both);
    }
}

/// Whether the GRM has been silent long enough to be called lost, judged
/// on the time the listener itself was running: a heartbeat is missed only
/// when the listener woke about when it asked to and found nothing. A
/// process that was not scheduled for a while (a loaded host, a stopped
/// process) wakes late, and that interval says nothing of the GRM: the GRM
/// is lost only after `silence` of wall time *and* as many on-time empty
/// wake-ups as heartbeats fit in it.
#[derive(Clone, Copy, Debug)]
pub struct Silence {
    silence: Duration,
    last_heard: Instant,
    last_wake: Instant,
    missed: u32,
}

impl Silence {
    pub fn new(silence: Duration, now: Instant) -> Silence {
        Silence {
            silence,
            last_heard: now,
            last_wake: now,
            missed: 0,
        }
    }

    /// Something arrived.
    pub fn heard(&mut self, now: Instant) {
        self.last_heard = now;
        self.last_wake = now;
        self.missed = 0;
    }

    /// The listener woke at `now` after waiting a beat and heard nothing:
    /// whether the GRM is now lost.
    pub fn lost(&mut self, now: Instant) -> bool {
        // On time: within three beats of the last wake-up.
        if now.saturating_duration_since(self.last_wake) <= 3 * HEARTBEAT {
            self.missed += 1;
        }
        self.last_wake = now;
        let beats = (self.silence.as_millis() / HEARTBEAT.as_millis()).max(1) as u32;
        self.missed >= beats && now.saturating_duration_since(self.last_heard) >= self.silence
    }
}

/// Whether `s` has bytes to read (or its end) within `wait`.
fn readable_within(s: &TcpStream, wait: Duration) -> io::Result<bool> {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let mut fds = [PollFd::new(s, PollFlags::IN)];
    let ts = Timespec {
        tv_sec: wait.as_secs() as i64,
        tv_nsec: wait.subsec_nanos().into(),
    };
    match poll(&mut fds, Some(&ts)) {
        Ok(n) => Ok(n > 0),
        Err(rustix::io::Errno::INTR) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// What the GRM tells a member or launcher during a job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// Launcher: `joined` of `size` processes have joined.
    Progress { joined: u32, size: u32 },
    /// Launcher: a process opened its devices; its destination table.
    RankReady { rank: u32, pid: u32, table: String },
    /// Launcher: a process's counters at its end, a JSON object.
    RankStats { rank: u32, json: String },
    /// A process of the job died; the job is over.
    PeerDied {
        rank: u32,
        host: String,
        pid: u32,
        reason: String,
    },
    /// The job is over ("completed" when every process left).
    Ended(String),
    /// The GRM itself went away.
    Lost(String),
}

impl Event {
    fn from_msg(m: Msg) -> Option<Event> {
        Some(match m {
            Msg::Progress { joined, size } => Event::Progress { joined, size },
            Msg::RankReady { rank, pid, table } => Event::RankReady { rank, pid, table },
            Msg::RankStats { rank, json } => Event::RankStats { rank, json },
            Msg::PeerDied {
                rank,
                host,
                pid,
                reason,
            } => Event::PeerDied {
                rank,
                host,
                pid,
                reason,
            },
            Msg::JobEnded { reason } => Event::Ended(reason),
            Msg::Refused { reason } => Event::Ended(format!("the GRM refused: {reason}")),
            _ => return None,
        })
    }

    /// One line for a person.
    pub fn describe(&self) -> String {
        match self {
            Event::Progress { joined, size } => format!("{joined}/{size} processes joined"),
            Event::RankReady { rank, .. } => format!("rank {rank} is ready"),
            Event::RankStats { rank, json } => format!("rank {rank}: {json}"),
            Event::PeerDied {
                rank,
                host,
                pid,
                reason,
            } => format!("rank {rank} (pid {pid} on {host}) {reason}"),
            Event::Ended(r) | Event::Lost(r) => r.clone(),
        }
    }
}

/// The Join (or HostJoin) is sent on `s`: heartbeats start, and the GRM's
/// answer at the fence is read, within `timeout` for the whole fence (the
/// GRM's heartbeats come meanwhile).
fn fence(
    addr: &str,
    s: &mut TcpStream,
    timeout: Duration,
) -> Result<(Arc<Link>, Result<Msg, ProtoError>), GrmError> {
    let link = Arc::new(Link {
        stream: Mutex::new(s.try_clone().map_err(|e| protocol(addr, e.into()))?),
        done: AtomicBool::new(false),
    });
    // Heartbeats start now: a large job may take a while to fence.
    link.start_heartbeat();
    let deadline = std::time::Instant::now() + timeout;
    let reply = loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let _ = s.set_read_timeout(Some(left.max(Duration::from_millis(1))));
        match proto::read_grm_msg(s) {
            Ok(Msg::Heartbeat) if !left.is_zero() => {}
            Ok(Msg::Heartbeat) => break Err(ProtoError::Io(io::ErrorKind::TimedOut.into())),
            r => break r,
        }
    };
    Ok((link, reply))
}

/// Why no answer came at the fence.
fn fence_failed(addr: &str, e: ProtoError, timeout: Duration) -> GrmError {
    match e {
        ProtoError::Io(e)
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ) =>
        {
            GrmError::Timeout {
                addr: addr.to_string(),
                secs: timeout.as_secs(),
                waiting_for: "every process of the job to join (FM_ATTACH_TIMEOUT)".into(),
            }
        }
        e => protocol(addr, e),
    }
}

/// A host agent's membership of a job, for its host's ranks
/// ([`proto::HostJoin`]): what its ranks say goes through it.
pub struct HostMembership {
    pub welcome: HostWelcome,
    link: Arc<Link>,
}

impl HostMembership {
    /// Join `join`'s ranks to the job of `token` at the GRM `addr`, and
    /// wait (up to `timeout`) for the fence. The HostWelcome must prove the
    /// token; its map, if it has one, must have its digest (a relayed map
    /// is the caller's to check). `on_event` runs on a background thread
    /// for what the GRM says afterwards (a peer died, the job ended, the
    /// GRM was lost).
    pub fn join(
        addr: &str,
        token: &str,
        join: HostJoin,
        timeout: Duration,
        on_event: impl FnMut(Event) + Send + 'static,
    ) -> Result<HostMembership, GrmError> {
        let (mut s, challenge) = greeted(addr)?;
        let join = signed_host_join(token, &challenge, join);
        proto::write_msg(&mut s, &Msg::HostJoin(join.clone()))
            .map_err(|e| protocol(addr, e.into()))?;
        let (link, reply) = fence(addr, &mut s, timeout)?;
        let welcome = match reply {
            Ok(Msg::HostWelcome(w))
                if host_welcome_proves(&auth::welcome_key(token), &join.nonce, &w)
                    && (w.map.is_empty() || proto::map_digest(&w.map) == w.map_digest) =>
            {
                w
            }
            Ok(Msg::HostWelcome(_)) => {
                link.close();
                return Err(GrmError::Forged {
                    addr: addr.to_string(),
                });
            }
            Ok(m) => {
                link.close();
                return Err(unexpected(addr, &m, "HostWelcome"));
            }
            Err(e) => {
                link.close();
                return Err(fence_failed(addr, e, timeout));
            }
        };
        let silence = Duration::from_millis(welcome.heartbeat_ms.into());
        link.start_reader(s, addr.to_string(), silence, on_event);
        Ok(HostMembership { welcome, link })
    }

    /// Pass on what rank `rank` says (`Ready`, `Stats`, `Leave`, `Abort`).
    pub fn for_rank(&self, rank: u32, msg: Msg) -> io::Result<()> {
        self.link.send(&Msg::ForRank {
            rank,
            msg: Box::new(msg),
        })
    }

    /// Every rank left: the connection's end is no death.
    pub fn close(&self) {
        self.link.close();
    }
}

/// A process's membership of a job. Dropping it leaves the job cleanly.
pub struct Membership {
    pub welcome: Welcome,
    link: Arc<Link>,
}

impl Membership {
    /// Join the job of `token` at the GRM `addr` and wait (up to `timeout`)
    /// for the fence: every process of the job joined. The Join proves the
    /// token without sending it (its `job`, `nonce` and `proof` are filled
    /// in here), and the Welcome must prove it back. `on_end` runs on a
    /// background thread if the job ends under this process (a peer died, the
    /// launcher went away, the GRM was lost).
    pub fn join(
        addr: &str,
        token: &str,
        join: Join,
        timeout: Duration,
        mut on_end: impl FnMut(String) + Send + 'static,
    ) -> Result<Membership, GrmError> {
        let (mut s, challenge) = greeted(addr)?;
        let welcome_key = auth::welcome_key(token);
        let join = signed_join(token, &challenge, join);
        proto::write_msg(&mut s, &Msg::Join(join.clone())).map_err(|e| protocol(addr, e.into()))?;
        let (link, reply) = fence(addr, &mut s, timeout)?;
        let welcome = match reply {
            Ok(Msg::Welcome(w))
                if auth::check(
                    &welcome_key,
                    "welcome",
                    &join.nonce,
                    &w.signed_bytes(),
                    &w.proof,
                ) =>
            {
                w
            }
            Ok(Msg::Welcome(_)) => {
                link.close();
                return Err(GrmError::Forged {
                    addr: addr.to_string(),
                });
            }
            Ok(m) => {
                link.close();
                return Err(unexpected(addr, &m, "Welcome"));
            }
            Err(e) => {
                link.close();
                return Err(fence_failed(addr, e, timeout));
            }
        };
        let silence = Duration::from_millis(welcome.heartbeat_ms.into());
        link.start_reader(s, addr.to_string(), silence, move |ev| match ev {
            Event::PeerDied { .. } | Event::Ended(_) | Event::Lost(_) => on_end(ev.describe()),
            _ => {}
        });
        Ok(Membership { welcome, link })
    }

    /// This process's counters, a JSON object, for the launcher
    /// (`fmrun --stats`); sent before it leaves.
    pub fn report_stats(&self, json: String) {
        let _ = self.link.send(&Msg::Stats { json });
    }

    /// Devices are open: tell the launcher, with this process's device table.
    pub fn ready(&self, table: String) {
        let _ = self.link.send(&Msg::Ready { table });
    }

    pub fn job_key(&self) -> JobKey {
        JobKey(self.welcome.job_key)
    }

    /// This process cannot go on: the job ends, and its peers are told why.
    pub fn abort(&self, reason: &str) {
        abort_link(&self.link, reason);
    }

    /// [`Membership::abort`] for whoever finds the process cannot go on
    /// without holding the membership (a wait deep in the library).
    pub fn aborter(&self) -> impl Fn(&str) + Send + Sync + 'static {
        let link = self.link.clone();
        move |reason| abort_link(&link, reason)
    }

    /// Leave the job: this process is done with it.
    pub fn leave(&self) {
        if !self.link.done.swap(true, Ordering::SeqCst) {
            let _ = self.link.send(&Msg::Leave);
        }
        self.link.close();
    }
}

impl Drop for Membership {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.abort("panicked");
        } else {
            self.leave();
        }
    }
}

fn abort_link(link: &Link, reason: &str) {
    if !link.done.swap(true, Ordering::SeqCst) {
        let _ = link.send(&Msg::Abort {
            reason: reason.to_string(),
        });
    }
    link.close();
}

/// A launcher's hold on a registered job; the job ends if it is dropped or
/// the launcher dies.
pub struct LauncherLink {
    pub job_key: JobKey,
    link: Arc<Link>,
}

impl LauncherLink {
    /// Register a job of `size` processes under `token` (the GRM is given
    /// the job's id and verifier, not the token); `on_event` receives its
    /// events on a background thread.
    pub fn register(
        addr: &str,
        token: &str,
        size: u32,
        program: &str,
        on_event: impl FnMut(Event) + Send + 'static,
    ) -> Result<LauncherLink, GrmError> {
        let (mut s, challenge) = greeted(addr)?;
        let m = signed_register(token, &challenge, size, program);
        proto::write_msg(&mut s, &m).map_err(|e| protocol(addr, e.into()))?;
        let (job_key, heartbeat_ms) =
            match proto::read_grm_msg(&mut s).map_err(|e| protocol(addr, e))? {
                Msg::Registered {
                    job_key,
                    heartbeat_ms,
                } => (JobKey(job_key), heartbeat_ms),
                m => return Err(unexpected(addr, &m, "Registered")),
            };
        let link = Arc::new(Link {
            stream: Mutex::new(s.try_clone().map_err(|e| protocol(addr, e.into()))?),
            done: AtomicBool::new(false),
        });
        link.start_heartbeat();
        let silence = Duration::from_millis(heartbeat_ms.into());
        link.start_reader(s, addr.to_string(), silence, on_event);
        Ok(LauncherLink { job_key, link })
    }
}

impl Drop for LauncherLink {
    fn drop(&mut self) {
        self.link.close();
    }
}

/// `join` made a Join of `token`'s job for the connection whose GRM sent
/// `challenge`: its job id, a fresh nonce and the signature (`auth`).
pub fn signed_join(token: &str, challenge: &Proof, mut join: Join) -> Join {
    join.job = auth::job_id(token);
    join.nonce = auth::nonce();
    join.proof = auth::sign(token, "join", challenge, &join.signed_bytes());
    join
}

/// `signed_join` for a host agent: the HostJoin of `token`'s job for the
/// connection whose GRM sent `challenge`.
pub fn signed_host_join(token: &str, challenge: &Proof, mut join: HostJoin) -> HostJoin {
    join.job = auth::job_id(token);
    join.nonce = auth::nonce();
    join.proof = auth::sign(token, "host-join", challenge, &join.signed_bytes());
    join
}

/// Is `w` the GRM's answer to the HostJoin whose nonce was `nonce`, for
/// the job of `welcome_key` (`auth::welcome_key` of its token)? Its map,
/// from the GRM or relayed by another agent, is checked apart: its digest
/// must be `w.map_digest`.
pub fn host_welcome_proves(welcome_key: &Proof, nonce: &Proof, w: &HostWelcome) -> bool {
    let signed = proto::host_welcome_signed(w);
    auth::check(welcome_key, "host-welcome", nonce, &signed, &w.proof)
}

/// The Register of `token`'s job for the connection whose GRM sent
/// `challenge`: the job's id, verifier and welcome key, signed (`auth`).
pub fn signed_register(token: &str, challenge: &Proof, size: u32, program: &str) -> Msg {
    let (job, verifier, welcome_key) = (
        auth::job_id(token),
        auth::verifier(token),
        auth::welcome_key(token),
    );
    let signed = proto::register_signed_bytes(&job, &verifier, &welcome_key, size, program);
    Msg::Register {
        job,
        verifier,
        welcome_key,
        size,
        program: program.to_string(),
        proof: auth::sign(token, "register", challenge, &signed),
    }
}

/// A fresh random job token (128 bits, hex).
pub fn new_token() -> String {
    format!("{:032x}", rand::random::<u128>())
}

#[cfg(test)]
mod silence_tests {
    use super::{Silence, HEARTBEAT};
    use std::time::{Duration, Instant};

    const SILENCE: Duration = Duration::from_secs(10);

    /// Wake-ups a beat apart with nothing heard: lost at the tenth, not before.
    #[test]
    fn on_time_empty_wake_ups_lose_the_grm_after_the_silence() {
        let t0 = Instant::now();
        let mut s = Silence::new(SILENCE, t0);
        for i in 1..10 {
            assert!(!s.lost(t0 + i * HEARTBEAT), "lost at beat {i}");
        }
        assert!(s.lost(t0 + 10 * HEARTBEAT));
    }

    /// A listener that was not running for 60 s wakes late once: that says
    /// nothing of the GRM; ten on-time empty wake-ups after it do.
    #[test]
    fn a_listener_that_was_not_running_does_not_blame_the_grm() {
        let t0 = Instant::now();
        let mut s = Silence::new(SILENCE, t0);
        let back = t0 + Duration::from_secs(60);
        assert!(!s.lost(back));
        for i in 1..10 {
            assert!(
                !s.lost(back + i * HEARTBEAT),
                "lost at beat {i} after waking"
            );
        }
        assert!(s.lost(back + 10 * HEARTBEAT));
    }

    /// Anything heard starts the count again.
    #[test]
    fn hearing_anything_resets_the_count() {
        let t0 = Instant::now();
        let mut s = Silence::new(SILENCE, t0);
        for i in 1..10 {
            assert!(!s.lost(t0 + i * HEARTBEAT));
        }
        s.heard(t0 + Duration::from_millis(9500));
        for i in 10..19 {
            assert!(!s.lost(t0 + i * HEARTBEAT), "lost at beat {i}");
        }
        assert!(s.lost(t0 + 20 * HEARTBEAT));
    }
}
