//! The GRM service: the [`Core`] state machine driven by one event loop
//! over its sockets (`epoll`), on one thread, whatever the number of
//! connections. A thread per connection (two, with its writer) made a
//! GRM of 2,048 members cost 4,096 threads, and 4,096 members could not
//! start (docs/SCALE.md).
//!
//! The loop reads what each socket has, hands the core every whole frame,
//! and writes what the core says, as far as each socket takes it: no
//! client, reading or not, can hold up another. A client whose queue
//! passes [`OUTBOX_BYTES`], or that takes nothing written to it within
//! the heartbeat timeout, is cut off. Connections and jobs are limited per
//! client (a local user, or a remote host).

use crate::machine::{ConnId, Core, CoreOptions, Frame, Gone, Output};
use crate::peer::client_of;
use crate::proto::{self, GrmStatus, MAX_FRAME};
use fm_devices::shmem::segment::remove_job_segments;
use rustix::event::epoll::{self, EventData, EventFlags};
use rustix::event::{eventfd, EventfdFlags};
use std::collections::{HashMap, VecDeque};
use std::io::{self, ErrorKind, IoSlice, Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
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

impl GrmOptions {
    fn core(&self) -> CoreOptions {
        CoreOptions {
            heartbeat_timeout: self.heartbeat_timeout,
            greeting_timeout: self.greeting_timeout,
            max_connections: self.max_connections,
            max_per_client: self.max_per_client,
            max_jobs_per_client: self.max_jobs_per_client,
        }
    }
}

/// A running GRM. Dropping it stops accepting and ends its jobs.
pub struct Grm {
    addrs: Vec<SocketAddr>,
    shared: Arc<Shared>,
    event_loop: Option<JoinHandle<()>>,
}

struct Shared {
    core: Mutex<Core>,
    stopping: AtomicBool,
    /// Written to wake the loop (to stop it).
    wake: OwnedFd,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Core> {
        // A panic while holding the lock would be a bug in the core; its
        // state is still consistent enough to keep ending jobs.
        self.core.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Bytes queued to one client before it counts as not reading: bounded in
/// bytes, not frames, since a launcher reading as fast as it can still
/// gets a burst of a report per rank when a large job starts (256 ranks'
/// tables at once cut a queue of 64 frames).
const OUTBOX_BYTES: usize = 16 << 20;

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
    rustix::net::listen(&l, LISTEN_BACKLOG)?;
    l.set_nonblocking(true)?;
    Ok(l)
}

/// Event-loop tokens: listeners by index, the wake-up descriptor, then
/// connections by their [`ConnId`] (from `FIRST_CONN` on, never reused).
const WAKE: u64 = u64::MAX;
const FIRST_CONN: ConnId = 1 << 32;

impl Grm {
    /// Bind and start serving on a thread of its own.
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
            core: Mutex::new(Core::new(opts.core(), Instant::now())),
            stopping: AtomicBool::new(false),
            wake: eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)?,
        });
        let mut ev = EventLoop::new(shared.clone(), listeners, &opts)?;
        let event_loop = std::thread::Builder::new()
            .name("grm".into())
            .spawn(move || ev.run())?;
        tracing::info!(?addrs, "grm: listening");
        Ok(Grm {
            addrs,
            shared,
            event_loop: Some(event_loop),
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
        self.shared.lock().status()
    }

    /// Serve until the process ends (the daemon's main loop).
    pub fn serve_forever(mut self) {
        if let Some(h) = self.event_loop.take() {
            let _ = h.join();
        }
    }
}

impl Drop for Grm {
    fn drop(&mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        let _ = rustix::io::write(&self.shared.wake, &1u64.to_ne_bytes());
        if let Some(h) = self.event_loop.take() {
            let _ = h.join();
        }
    }
}

/// One client connection as the loop sees it.
struct Socket {
    stream: TcpStream,
    /// Bytes read and not yet a whole frame.
    input: Vec<u8>,
    /// Frames to write, the first `written` bytes of the first one done.
    output: VecDeque<Frame>,
    written: usize,
    queued: usize,
    /// When a byte was last written, or the queue last became non-empty.
    progress: Instant,
    /// The core said to close it: write what is queued, then shut the
    /// sending side and wait (no longer than `linger`) for the peer to close.
    closing: bool,
    write_shut: bool,
    linger: Option<Instant>,
    /// EPOLLOUT is asked for (the queue did not fit in the socket).
    wants_out: bool,
}

struct EventLoop {
    shared: Arc<Shared>,
    epoll: OwnedFd,
    listeners: Vec<TcpListener>,
    sockets: HashMap<ConnId, Socket>,
    next_conn: ConnId,
    /// How long a stuck writer or a lingering close is given.
    timeout: Duration,
    next_sweep: Instant,
}

impl EventLoop {
    fn new(
        shared: Arc<Shared>,
        listeners: Vec<TcpListener>,
        opts: &GrmOptions,
    ) -> io::Result<Self> {
        let epoll = epoll::create(epoll::CreateFlags::CLOEXEC)?;
        for (i, l) in listeners.iter().enumerate() {
            epoll::add(&epoll, l, EventData::new_u64(i as u64), EventFlags::IN)?;
        }
        epoll::add(
            &epoll,
            &shared.wake,
            EventData::new_u64(WAKE),
            EventFlags::IN,
        )?;
        Ok(EventLoop {
            shared,
            epoll,
            listeners,
            sockets: HashMap::new(),
            next_conn: FIRST_CONN,
            timeout: opts.heartbeat_timeout,
            next_sweep: Instant::now(),
        })
    }

    fn run(&mut self) {
        let mut events = Vec::with_capacity(1024);
        loop {
            let next = self.shared.lock().next_tick().min(self.next_sweep);
            let wait = next.saturating_duration_since(Instant::now());
            let ts = rustix::event::Timespec {
                tv_sec: wait.as_secs() as i64,
                tv_nsec: wait.subsec_nanos().into(),
            };
            events.clear();
            match epoll::wait(
                &self.epoll,
                rustix::buffer::spare_capacity(&mut events),
                Some(&ts),
            ) {
                Ok(_) | Err(rustix::io::Errno::INTR) => {}
                Err(e) => {
                    tracing::error!("grm: epoll_wait failed: {e}");
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
            if self.shared.stopping.load(Ordering::SeqCst) {
                return self.stop();
            }
            let shared = self.shared.clone();
            let mut core = shared.lock();
            let now = Instant::now();
            for ev in &events {
                let (token, flags) = (ev.data.u64(), ev.flags);
                match token {
                    WAKE => {
                        let mut b = [0u8; 8];
                        let _ = rustix::io::read(&self.shared.wake, &mut b);
                    }
                    t if t < FIRST_CONN => self.accept(t as usize, &mut core, now),
                    conn => {
                        if flags.intersects(EventFlags::OUT) {
                            self.flush(conn, &mut core);
                        }
                        if flags.intersects(EventFlags::IN | EventFlags::HUP | EventFlags::ERR) {
                            self.read(conn, &mut core, now);
                        }
                    }
                }
            }
            if now >= core.next_tick() {
                core.tick(now);
            }
            self.apply(&mut core);
            if now >= self.next_sweep {
                self.sweep(&mut core, now);
                self.apply(&mut core);
            }
        }
    }

    fn accept(&mut self, listener: usize, core: &mut Core, now: Instant) {
        loop {
            let stream = match self.listeners[listener].accept() {
                Ok((s, _)) => s,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                Err(e) => {
                    // Out of descriptors: the connection waits in the
                    // backlog until one is freed.
                    tracing::warn!("grm: accept failed: {e}");
                    return;
                }
            };
            let conn = self.next_conn;
            self.next_conn += 1;
            let registered = stream.set_nonblocking(true).and_then(|()| {
                let _ = stream.set_nodelay(true);
                epoll::add(
                    &self.epoll,
                    &stream,
                    EventData::new_u64(conn),
                    EventFlags::IN | EventFlags::RDHUP,
                )
                .map_err(io::Error::from)
            });
            if let Err(e) = registered {
                tracing::warn!("grm: cannot watch a connection: {e}");
                continue;
            }
            let client = client_of(&stream);
            self.sockets.insert(
                conn,
                Socket {
                    stream,
                    input: Vec::new(),
                    output: VecDeque::new(),
                    written: 0,
                    queued: 0,
                    progress: now,
                    closing: false,
                    write_shut: false,
                    linger: None,
                    wants_out: false,
                },
            );
            core.connected(conn, client, now);
        }
    }

    /// Take what the socket has; hand the core each whole frame.
    fn read(&mut self, conn: ConnId, core: &mut Core, now: Instant) {
        let Some(s) = self.sockets.get_mut(&conn) else {
            return;
        };
        let mut buf = [0u8; 64 << 10];
        let n = match (&s.stream).read(&mut buf) {
            Ok(0) => return self.gone(conn, core, Gone::Closed),
            Ok(n) => n,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => return,
            Err(_) => return self.gone(conn, core, Gone::Closed),
        };
        if s.closing {
            // Nothing more is wanted from it: wait for its end.
            return;
        }
        s.input.extend_from_slice(&buf[..n]);
        let mut at = 0;
        while s.input.len() - at >= 4 {
            let prefix = [
                s.input[at],
                s.input[at + 1],
                s.input[at + 2],
                s.input[at + 3],
            ];
            let len = match proto::frame_len(prefix, MAX_FRAME) {
                Ok(len) => len,
                Err(e) => {
                    core.malformed(conn, &e);
                    s.input = Vec::new();
                    return;
                }
            };
            if s.input.len() - at < 4 + len {
                break;
            }
            core.received(conn, &s.input[at + 4..at + 4 + len], now);
            at += 4 + len;
        }
        s.input.drain(..at);
    }

    /// The socket is gone: drop it and tell the core.
    fn gone(&mut self, conn: ConnId, core: &mut Core, how: Gone) {
        if let Some(s) = self.sockets.remove(&conn) {
            let _ = epoll::delete(&self.epoll, &s.stream);
            if how == Gone::NotReading {
                let _ = s.stream.shutdown(Shutdown::Both);
            }
        }
        core.closed(conn, how);
    }

    /// Do what the core said, until it has nothing more to say.
    fn apply(&mut self, core: &mut Core) {
        while let Some(o) = core.poll_output() {
            match o {
                Output::Send(conn, frame) => {
                    let Some(s) = self.sockets.get_mut(&conn) else {
                        continue;
                    };
                    if s.write_shut {
                        continue;
                    }
                    if s.queued + frame.len() > OUTBOX_BYTES {
                        tracing::debug!(conn, "grm: a client's queue is full: cut off");
                        self.gone(conn, core, Gone::NotReading);
                        continue;
                    }
                    if s.output.is_empty() {
                        s.progress = Instant::now();
                    }
                    s.queued += frame.len();
                    s.output.push_back(frame);
                    self.flush(conn, core);
                }
                Output::Close(conn) => {
                    if let Some(s) = self.sockets.get_mut(&conn) {
                        s.closing = true;
                        s.input = Vec::new();
                    }
                    self.flush(conn, core);
                }
                Output::RemoveSegments { key, dirs } => {
                    let removed: usize = dirs.iter().map(|d| remove_job_segments(d, key)).sum();
                    tracing::debug!(%key, removed, "grm: segments removed");
                }
            }
        }
    }

    /// Write as much of the queue as the socket takes; ask to hear when it
    /// takes more; shut the sending side once a closing socket's queue is out.
    fn flush(&mut self, conn: ConnId, core: &mut Core) {
        let Some(s) = self.sockets.get_mut(&conn) else {
            return;
        };
        while let Some(f) = s.output.front() {
            let shared = f.shared.as_deref().unwrap_or(&[]);
            let (head, tail) = if s.written < f.head.len() {
                (&f.head[s.written..], shared)
            } else {
                (&[][..], &shared[s.written - f.head.len()..])
            };
            match (&s.stream).write_vectored(&[IoSlice::new(head), IoSlice::new(tail)]) {
                Ok(n) => {
                    s.written += n;
                    s.queued -= n;
                    s.progress = Instant::now();
                    if s.written == f.len() {
                        s.output.pop_front();
                        s.written = 0;
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return self.gone(conn, core, Gone::Closed),
            }
        }
        let wants_out = !s.output.is_empty();
        if wants_out != s.wants_out {
            s.wants_out = wants_out;
            let mut flags = EventFlags::IN | EventFlags::RDHUP;
            if wants_out {
                flags |= EventFlags::OUT;
            }
            let _ = epoll::modify(&self.epoll, &s.stream, EventData::new_u64(conn), flags);
        }
        if s.closing && !wants_out && !s.write_shut {
            s.write_shut = true;
            let _ = s.stream.shutdown(Shutdown::Write);
            s.linger = Some(Instant::now() + self.timeout);
        }
    }

    /// Once a second: cut clients that take nothing written to them within
    /// the timeout, and drop closed sockets whose peer never closed.
    fn sweep(&mut self, core: &mut Core, now: Instant) {
        self.next_sweep = now + Duration::from_secs(1);
        let stuck: Vec<(ConnId, Gone)> = (self.sockets.iter())
            .filter_map(|(&c, s)| {
                if !s.output.is_empty() && now.duration_since(s.progress) >= self.timeout {
                    Some((c, Gone::NotReading))
                } else if s.linger.is_some_and(|l| now >= l) {
                    Some((c, Gone::Closed))
                } else {
                    None
                }
            })
            .collect();
        for (c, how) in stuck {
            self.gone(c, core, how);
        }
    }

    /// End every job, write what the sockets take within a second in all
    /// (a client that does not read cannot hold the shutdown), and close
    /// them all.
    fn stop(&mut self) {
        let shared = self.shared.clone();
        let mut core = shared.lock();
        core.shutdown();
        self.apply(&mut core);
        let until = Instant::now() + Duration::from_secs(1);
        for s in self.sockets.values_mut() {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            let _ = s.stream.set_nonblocking(false);
            let _ = s.stream.set_write_timeout(Some(left));
            for (i, f) in s.output.iter().enumerate() {
                let skip = if i == 0 { s.written } else { 0 };
                let shared = f.shared.as_deref().unwrap_or(&[]);
                let bytes: Vec<u8> = f.head.iter().chain(shared).copied().skip(skip).collect();
                if (&s.stream).write_all(&bytes).is_err() {
                    break;
                }
            }
            let _ = s.stream.shutdown(Shutdown::Write);
        }
    }
}
