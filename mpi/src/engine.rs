//! MPI point-to-point over FM messages (paper 003 §3.3–3.4's MPI-NP):
//! per-communicator tag matching with a posted-receive queue and an
//! unexpected-message queue, eager sends below a threshold and a
//! request-to-send / clear-to-send rendezvous above it.
//!
//! FM delivers the messages of one sender to one receiver once and in
//! order, so matching in arrival order keeps MPI's non-overtaking rule.
//! Handlers run inside `extract` and do only what needs the message: match
//! it, and receive its bytes straight into a posted buffer (a large piece
//! of a shared-memory message is pulled from the sender by single copy), or
//! keep it as unexpected. Whatever must be *sent* in answer (clear to send,
//! the rendezvous data, a synchronous send's acknowledgement) is queued as
//! an [`Action`] and sent by the progress loop outside any handler, so no
//! handler ever waits for credit, and every blocking call keeps every
//! protocol moving.

use crate::abi::*;
use crate::datatype::Layout;
use fm::{Fm, Incoming, Rank};
use std::cell::{RefCell, RefMut};
use std::collections::{HashMap, VecDeque};
use std::os::raw::c_int;
use std::sync::Arc;

/// FM handler IDs of the protocol.
const EAGER: u16 = 1;
const RTS: u16 = 2;
const CTS: u16 = 3;
const DATA: u16 = 4;
const ACK: u16 = 5;
const BARRIER: u16 = 6;
const EAGER_SYNC: u16 = 7;

/// The envelope of an eager message: context, the source's rank in the
/// communicator, tag. Twelve bytes, so that with FM's 16-byte header a
/// message of up to 20 bytes travels inside shared memory's 48-byte slot.
const ENVELOPE: usize = 12;
/// A synchronous eager message adds the sender's request, which the
/// receiver's acknowledgement names; a request to send adds the length.
const SYNC_ENVELOPE: usize = 16;
const RTS_LEN: usize = SYNC_ENVELOPE + 8;
/// Flag: a synchronous send, acknowledged when matched.
const SYNC: u32 = 1;

/// Messages up to this many bytes are sent eagerly (`fm::settings::MPI_EAGER_LIMIT`).
pub const DEFAULT_EAGER_LIMIT: usize = 64 << 10;

/// Data bytes an MPI message may have: it travels as one FM message, whose
/// length is 32 bits, with at most a 16-byte envelope before it.
pub const MAX_MESSAGE: usize = u32::MAX as usize - SYNC_ENVELOPE;

/// A send of `len` bytes is refused before anything is sent when it does
/// not fit one FM message (not half-sent, with its receiver waiting).
fn fits_one_message(len: usize) -> MpiResult<()> {
    if len > MAX_MESSAGE {
        return err(
            MPI_ERR_COUNT,
            format!("{len} bytes in one message: fm's MPI sends at most {MAX_MESSAGE}"),
        );
    }
    Ok(())
}

/// Data bytes of a message short enough to be gathered with its envelope
/// on the stack and sent as one FM packet ([`Engine::send_short`]).
pub const SHORT: usize = 64;

/// Bytes of blocking sends that may be copied aside
/// (`fm::settings::MPI_SET_ASIDE_LIMIT`).
pub const DEFAULT_SET_ASIDE_LIMIT: usize = 64 << 20;

/// An error as MPI reports it: its class, and what happened.
#[derive(Debug)]
pub struct MpiError {
    pub class: c_int,
    pub message: String,
}

pub type MpiResult<T> = Result<T, MpiError>;

pub fn err<T>(class: c_int, message: impl Into<String>) -> MpiResult<T> {
    Err(MpiError {
        class,
        message: message.into(),
    })
}

impl From<crate::datatype::Refused> for MpiError {
    fn from(r: crate::datatype::Refused) -> Self {
        MpiError {
            class: match r {
                crate::datatype::Refused::Blocks => MPI_ERR_OTHER,
                crate::datatype::Refused::Bounds => MPI_ERR_ARG,
            },
            message: r.to_string(),
        }
    }
}

impl From<fm::FmError> for MpiError {
    fn from(e: fm::FmError) -> Self {
        MpiError {
            class: MPI_ERR_OTHER,
            message: format!("fm: {e}"),
        }
    }
}

/// Who a message is from and how it is labelled, as matching sees it.
#[derive(Clone, Copy, Debug)]
struct Envelope {
    context: u32,
    /// The sender's rank in the communicator.
    source: c_int,
    tag: c_int,
    flags: u32,
    /// The sender's request (rendezvous and synchronous sends).
    sender_req: u32,
}

impl Envelope {
    /// A standard send's envelope on `route`: no flags, no request.
    fn standard(route: &Route, tag: c_int) -> Envelope {
        Envelope {
            context: route.context,
            source: route.me,
            tag,
            flags: 0,
            sender_req: 0,
        }
    }

    /// Its bytes: the short form into 12 bytes, with the sender's request
    /// into 16 or more.
    fn write(&self, out: &mut [u8]) {
        out[0..4].copy_from_slice(&self.context.to_le_bytes());
        out[4..8].copy_from_slice(&self.source.to_le_bytes());
        out[8..12].copy_from_slice(&self.tag.to_le_bytes());
        if out.len() >= SYNC_ENVELOPE {
            out[12..16].copy_from_slice(&self.sender_req.to_le_bytes());
        }
    }

    /// Read back what `write` wrote into `b` (12 or 16 bytes); `flags`
    /// says how it came.
    fn read(b: &[u8], flags: u32) -> Envelope {
        let w = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        Envelope {
            context: w(0),
            source: w(4) as c_int,
            tag: w(8) as c_int,
            flags,
            sender_req: if b.len() >= SYNC_ENVELOPE { w(12) } else { 0 },
        }
    }

    fn matches(&self, context: u32, source: c_int, tag: c_int) -> bool {
        self.context == context
            && (source == MPI_ANY_SOURCE || source == self.source)
            && (tag == MPI_ANY_TAG || tag == self.tag)
    }
}

/// A message that arrived before its receive was posted.
struct Unexpected {
    env: Envelope,
    /// The FM rank it came from (where answers go).
    from: Rank,
    body: Body,
}

enum Body {
    /// The whole message, copied aside.
    Eager(Vec<u8>),
    /// Only its announcement: the data waits at the sender.
    Rendezvous { len: u64 },
}

impl Unexpected {
    fn len(&self) -> u64 {
        match &self.body {
            Body::Eager(d) => d.len() as u64,
            Body::Rendezvous { len } => *len,
        }
    }
}

/// A posted receive waiting for its message.
struct Posted {
    req: u32,
    context: u32,
    source: c_int,
    tag: c_int,
}

/// What a request is for.
enum Op {
    Send {
        data: *const u8,
        len: usize,
    },
    Recv {
        buf: *mut u8,
        cap: usize,
    },
    /// Already complete when made (to or from `MPI_PROC_NULL`).
    Null,
}

struct Request {
    op: Op,
    done: bool,
    status: MpiStatus,
    /// `MPI_Request_free` was called: forget it once done.
    freed: bool,
    /// What the request holds for the caller until it is gone.
    kept: Option<Kept>,
    /// Its data was copied aside by a blocking send ([`Engine::send`]):
    /// the bytes go back to `set_aside_room` when it is gone.
    set_aside: bool,
}

impl Request {
    fn new(op: Op, done: bool, kept: Option<Kept>) -> Request {
        Request {
            op,
            done,
            status: MpiStatus::empty(),
            freed: false,
            kept,
            set_aside: false,
        }
    }
}

/// Data a request holds for a caller whose elements are not plain bytes:
/// the packed copy of a derived type's elements being sent (the send
/// reads it), or the buffer a message is received into, unpacked into the
/// caller's elements when the receive completes.
pub struct Kept {
    pub data: Vec<u8>,
    pub unpack: Option<Unpack>,
}

impl Kept {
    /// A buffer to receive the packed bytes of `unpack`'s elements into,
    /// kept by the request and unpacked when it completes.
    fn to_unpack(unpack: Unpack) -> (*mut u8, usize, Kept) {
        let mut data = vec![0u8; unpack.count * unpack.layout.size];
        let (buf, cap) = (data.as_mut_ptr(), data.len());
        (
            buf,
            cap,
            Kept {
                data,
                unpack: Some(unpack),
            },
        )
    }
}

/// Where a received message's bytes go: `count` elements of `layout` at `buf`.
pub struct Unpack {
    pub layout: Arc<Layout>,
    pub buf: *mut u8,
    pub count: usize,
}

/// Something to send in answer, outside any handler.
enum Action {
    ClearToSend {
        to: Rank,
        sender_req: u32,
        recv_req: u32,
    },
    Data {
        req: u32,
        to: Rank,
        recv_req: u32,
    },
    Ack {
        to: Rank,
        sender_req: u32,
    },
}

/// What handlers and calls share: never borrowed across a send or an
/// extract (handlers borrow it inside those).
#[derive(Default)]
struct Matching {
    requests: Vec<Option<Request>>,
    free: Vec<u32>,
    posted: VecDeque<Posted>,
    unexpected: VecDeque<Unexpected>,
    actions: Vec<Action>,
    /// Barrier messages arrived, by (context, epoch, round).
    barrier: HashMap<(u32, u32, u32), u32>,
    /// Messages a matched probe took, by number, until received.
    taken: Vec<Option<Unexpected>>,
    /// Requests to send in `unexpected`: some sender waits for this
    /// process to post a receive.
    unexpected_rendezvous: usize,
    /// Bytes blocking sends may still copy aside ([`Engine::send`]).
    set_aside_room: usize,
}

/// The matching state of the process. Every access is made by the thread
/// holding the library's lock (`MPI` in lib.rs): the calls hold it, and
/// handlers run only inside the FM calls those make, on the same thread.
/// So a `RefCell` serves, without a lock on the message path (a mutex
/// here cost two lock round trips per message); its flag still turns a
/// nested borrow, which would be a bug, into a panic.
#[derive(Default)]
struct Shared(RefCell<Matching>);

// SAFETY: as above, one thread at a time, under the library's lock; the
// raw pointers in requests are the caller's buffers, used only while the
// request is live.
unsafe impl Send for Shared {}
// SAFETY: as above.
unsafe impl Sync for Shared {}

impl Matching {
    fn add(&mut self, r: Request) -> u32 {
        match self.free.pop() {
            Some(i) => {
                self.requests[i as usize] = Some(r);
                i
            }
            None => {
                self.requests.push(Some(r));
                self.requests.len() as u32 - 1
            }
        }
    }

    fn get(&mut self, id: u32) -> Option<&mut Request> {
        self.requests.get_mut(id as usize).and_then(Option::as_mut)
    }

    /// Forget request `id`: dropped where it is, not moved out first
    /// (copying a just-written request stalls the load on the stores).
    fn remove(&mut self, id: u32) {
        let Some(slot) = self.requests.get_mut(id as usize) else {
            return;
        };
        let Some(r) = slot else {
            return;
        };
        if r.set_aside {
            self.set_aside_room += r.kept.as_ref().map_or(0, |k| k.data.len());
        }
        *slot = None;
        self.free.push(id);
    }

    /// Keep a message no receive was posted for.
    fn keep_unexpected(&mut self, u: Unexpected) {
        if matches!(u.body, Body::Rendezvous { .. }) {
            self.unexpected_rendezvous += 1;
        }
        self.unexpected.push_back(u);
    }

    /// The first kept message matching, taken off the queue.
    fn take_unexpected(&mut self, context: u32, source: c_int, tag: c_int) -> Option<Unexpected> {
        let i = (self.unexpected.iter()).position(|u| u.env.matches(context, source, tag))?;
        let u = self.unexpected.remove(i)?;
        if matches!(u.body, Body::Rendezvous { .. }) {
            self.unexpected_rendezvous -= 1;
        }
        Some(u)
    }

    /// Copy blocking send `id`'s data aside, so that the send can return
    /// before its receive is posted, if another sender waits for this
    /// process to receive (so the receiver of `id` may be waiting for this
    /// process in turn) and the limit allows. The request is then freed: it
    /// ends on its own once the data has gone.
    fn set_aside(&mut self, id: u32) -> bool {
        if self.unexpected_rendezvous == 0 {
            return false;
        }
        let room = self.set_aside_room;
        let Some(r) = self.get(id) else {
            return false;
        };
        let Op::Send { data, len } = r.op else {
            return false;
        };
        if len > room || r.kept.is_some() {
            return false;
        }
        // SAFETY: the blocking send's caller holds `len` bytes at `data`
        // until the send returns, which is after this copy.
        let copy = unsafe { std::slice::from_raw_parts(data, len) }.to_vec();
        r.op = Op::Send {
            data: copy.as_ptr(),
            len,
        };
        r.kept = Some(Kept {
            data: copy,
            unpack: None,
        });
        r.set_aside = true;
        r.freed = true;
        self.set_aside_room -= len;
        tracing::debug!(len, "mpi: a blocking send's data set aside");
        true
    }

    /// A request reached its end: it is done, and gone if it was freed.
    fn complete(&mut self, id: u32, status: MpiStatus) {
        let freed = match self.get(id) {
            Some(r) => {
                r.done = true;
                r.status = status;
                if let Some(Kept {
                    data,
                    unpack: Some(u),
                }) = &r.kept
                {
                    let n = (status.bytes() as usize).min(data.len());
                    // SAFETY: the caller's elements, live until the request
                    // completes (now), as irecv's caller promised.
                    unsafe { u.layout.unpack(&data[..n], u.buf, u.count) };
                }
                r.freed
            }
            None => return,
        };
        if freed {
            self.remove(id);
        }
    }

    /// The first posted receive `env` matches, taken off the queue.
    fn take_posted(&mut self, env: &Envelope) -> Option<u32> {
        let i = (self.posted.iter()).position(|p| env.matches(p.context, p.source, p.tag))?;
        // Most messages match the oldest receive: taking it from the front
        // is cheaper than `remove`, and this is every message's path.
        let p = if i == 0 {
            self.posted.pop_front()
        } else {
            self.posted.remove(i)
        };
        p.map(|p| p.req)
    }

    /// A rendezvous matched receive `req`: ask the sender for the data, and
    /// keep the envelope's source and tag for the status when it comes.
    fn clear_to_send(&mut self, to: Rank, env: &Envelope, req: u32) {
        if let Some(r) = self.get(req) {
            r.status = MpiStatus::new(env.source, env.tag, 0, MPI_SUCCESS);
        }
        self.actions.push(Action::ClearToSend {
            to,
            sender_req: env.sender_req,
            recv_req: req,
        });
    }

    /// Receive `u`, which arrived before receive `req` was posted: an eager
    /// message is copied from where it was kept (and acknowledged if
    /// synchronous), a rendezvous one asked for.
    fn receive_unexpected(&mut self, req: u32, u: Unexpected) {
        let env = u.env;
        match u.body {
            Body::Eager(data) => {
                let Some((buf, cap)) = self.recv_buffer(req) else {
                    return;
                };
                let n = data.len().min(cap);
                let error = if data.len() > cap {
                    MPI_ERR_TRUNCATE
                } else {
                    MPI_SUCCESS
                };
                if n > 0 {
                    // SAFETY: the receive's buffer holds `cap` bytes while
                    // its request is live (the caller's promise to irecv).
                    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), buf, n) };
                }
                self.complete(req, MpiStatus::new(env.source, env.tag, n, error));
                if env.flags & SYNC != 0 {
                    self.actions.push(Action::Ack {
                        to: u.from,
                        sender_req: env.sender_req,
                    });
                }
            }
            Body::Rendezvous { .. } => self.clear_to_send(u.from, &env, req),
        }
    }

    /// The status of the first unexpected message matching, if any.
    fn peek(&self, context: u32, source: c_int, tag: c_int) -> Option<MpiStatus> {
        let u = (self.unexpected.iter()).find(|u| u.env.matches(context, source, tag))?;
        Some(MpiStatus::new(
            u.env.source,
            u.env.tag,
            u.len() as usize,
            MPI_SUCCESS,
        ))
    }

    /// The first unexpected message matching, taken out of matching and
    /// kept for a matched receive under the number returned.
    fn take(&mut self, context: u32, source: c_int, tag: c_int) -> Option<(u32, MpiStatus)> {
        let status = self.peek(context, source, tag)?;
        let u = self.take_unexpected(context, source, tag)?;
        let id = match self.taken.iter().position(Option::is_none) {
            Some(i) => {
                self.taken[i] = Some(u);
                i
            }
            None => {
                self.taken.push(Some(u));
                self.taken.len() - 1
            }
        };
        Some((id as u32, status))
    }

    /// A barrier message for `key` arrived: count it taken.
    fn arrived(&mut self, key: (u32, u32, u32)) -> bool {
        let Some(c) = self.barrier.get_mut(&key) else {
            return false;
        };
        *c -= 1;
        if *c == 0 {
            self.barrier.remove(&key);
        }
        true
    }

    /// The posted receive's buffer and capacity.
    fn recv_buffer(&mut self, id: u32) -> Option<(*mut u8, usize)> {
        match self.get(id)?.op {
            Op::Recv { buf, cap } => Some((buf, cap)),
            _ => None,
        }
    }
}

fn lock(m: &Shared) -> RefMut<'_, Matching> {
    m.0.borrow_mut()
}

/// Receive the rest of message `m` into the receive `req` (as much as fits)
/// and complete it; the status says truncated if it did not all fit.
fn deliver(sh: &mut Matching, req: u32, m: &mut Incoming<'_>, env: &Envelope) -> fm::Result<()> {
    let Some((buf, cap)) = sh.recv_buffer(req) else {
        return Ok(());
    };
    let len = m.remaining();
    let n = len.min(cap);
    if n > 0 {
        // SAFETY: the receive's buffer holds `cap` bytes and lives until
        // the request completes (MPI's rule for the caller).
        let dst = unsafe { std::slice::from_raw_parts_mut(buf, n) };
        m.receive(dst)?;
    }
    let error = if len > cap {
        MPI_ERR_TRUNCATE
    } else {
        MPI_SUCCESS
    };
    sh.complete(req, MpiStatus::new(env.source, env.tag, n, error));
    Ok(())
}

fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}

/// Where a point-to-point call goes: the communicator's context, this
/// process's rank in it, and the destination's FM rank (`None`:
/// `MPI_PROC_NULL`, or a receive).
#[derive(Clone, Copy, Debug)]
pub struct Route {
    pub context: u32,
    pub me: c_int,
    pub to: Option<Rank>,
}

/// A communicator: its context (the same on every member), its members'
/// FM ranks by communicator rank, and this process's rank in it.
#[derive(Clone)]
pub struct Comm {
    pub context: u32,
    /// Shared: a communicator is copied on every call that uses it.
    pub ranks: Arc<[Rank]>,
    pub rank: c_int,
    pub errhandler: Handle,
    /// Barriers entered on it (matches barrier messages to barriers).
    pub barriers: u32,
    /// Contexts handed out to communicators made from this one: every
    /// member makes the same ones in the same order.
    pub children: u32,
}

impl Comm {
    pub fn size(&self) -> c_int {
        self.ranks.len() as c_int
    }
}

/// One process's MPI: its FM endpoint and the matching state its handlers share.
pub struct Engine {
    pub fm: Fm,
    shared: Arc<Shared>,
    pub eager_limit: usize,
    /// Where a small eager message is gathered before it is sent.
    scratch: Vec<u8>,
}

impl Engine {
    /// Join the job (as `Fm::init` does) with the protocol's handlers.
    pub fn start() -> MpiResult<Engine> {
        let shared = Arc::new(Shared::default());
        let s = |sh: &Arc<Shared>| sh.clone();
        let (a, b, c, d, e, f, g) = (
            s(&shared),
            s(&shared),
            s(&shared),
            s(&shared),
            s(&shared),
            s(&shared),
            s(&shared),
        );
        let fm = Fm::builder()
            .handler(EAGER, "mpi-eager", move |m| on_eager(&a, m, false))
            .handler(EAGER_SYNC, "mpi-eager-sync", move |m| on_eager(&g, m, true))
            .handler(RTS, "mpi-rts", move |m| on_rts(&b, m))
            .handler(CTS, "mpi-cts", move |m| on_cts(&c, m))
            .handler(DATA, "mpi-data", move |m| on_data(&d, m))
            .handler(ACK, "mpi-ack", move |m| on_ack(&e, m))
            .handler(BARRIER, "mpi-barrier", move |m| on_barrier(&f, m))
            .from_env()?
            .build()?;
        let bytes = |setting, default| {
            fm::settings::env_only::<usize>(setting).map(|v| v.unwrap_or(default))
        };
        let eager_limit = bytes(&fm::settings::MPI_EAGER_LIMIT, DEFAULT_EAGER_LIMIT)?;
        shared.0.borrow_mut().set_aside_room =
            bytes(&fm::settings::MPI_SET_ASIDE_LIMIT, DEFAULT_SET_ASIDE_LIMIT)?;
        Ok(Engine {
            fm,
            shared,
            eager_limit,
            scratch: Vec::with_capacity(4096),
        })
    }

    fn matching(&self) -> RefMut<'_, Matching> {
        lock(&self.shared)
    }

    /// Run arrived handlers and send what they asked for, without waiting.
    pub fn progress(&mut self) -> MpiResult<()> {
        self.fm.extract(usize::MAX)?;
        self.act()
    }

    /// Send what handlers asked for (sending may run handlers that ask for more).
    #[inline]
    fn act(&mut self) -> MpiResult<()> {
        if self.matching().actions.is_empty() {
            return Ok(());
        }
        self.act_on_actions()
    }

    /// [`Engine::act`] with actions waiting (out of line: most calls have none).
    #[inline(never)]
    fn act_on_actions(&mut self) -> MpiResult<()> {
        loop {
            let actions = std::mem::take(&mut self.matching().actions);
            if actions.is_empty() {
                return Ok(());
            }
            for a in actions {
                match a {
                    Action::ClearToSend {
                        to,
                        sender_req,
                        recv_req,
                    } => {
                        let mut b = [0u8; 8];
                        b[..4].copy_from_slice(&sender_req.to_le_bytes());
                        b[4..].copy_from_slice(&recv_req.to_le_bytes());
                        self.fm.send(to, CTS, &b)?;
                    }
                    Action::Ack { to, sender_req } => {
                        self.fm.send(to, ACK, &sender_req.to_le_bytes())?;
                    }
                    Action::Data { req, to, recv_req } => {
                        let data = match self.matching().get(req).map(|r| &r.op) {
                            Some(Op::Send { data, len, .. }) => Some((*data, *len)),
                            _ => None,
                        };
                        let Some((data, len)) = data else {
                            continue;
                        };
                        // SAFETY: the send's buffer lives until its request
                        // completes, which is after this.
                        let bytes = unsafe { std::slice::from_raw_parts(data, len) };
                        self.fm.begin_message(to, 4 + len, DATA)?;
                        self.fm.send_piece(&recv_req.to_le_bytes())?;
                        self.fm.send_piece(bytes)?;
                        self.fm.end_message()?;
                        self.matching().complete(req, MpiStatus::empty());
                    }
                }
            }
        }
    }

    /// Wait for something to happen, then make progress.
    fn wait_for_arrival(&mut self) -> MpiResult<()> {
        self.fm.extract_wait(usize::MAX)?;
        self.act()
    }

    /// Make progress until `found` finds something, and return it: polling
    /// first (a reply is often a fraction of a microsecond away, and FM's
    /// waiting reads the clock each round), then FM's own wait, which
    /// sleeps as `FM_WAIT` says. Every blocking call waits through here.
    fn progress_until<T>(&mut self, mut found: impl FnMut(&mut Self) -> Option<T>) -> MpiResult<T> {
        const POLLS: u32 = 256;
        loop {
            for _ in 0..POLLS {
                if let Some(t) = found(self) {
                    return Ok(t);
                }
                self.progress()?;
            }
            if let Some(t) = found(self) {
                return Ok(t);
            }
            self.wait_for_arrival()?;
        }
    }

    /// Start a send of `len` bytes at `data` to communicator rank `dest`.
    ///
    /// # Safety
    /// `data` holds `len` readable bytes until the request completes.
    pub unsafe fn isend(
        &mut self,
        route: Route,
        tag: c_int,
        data: *const u8,
        len: usize,
        sync: bool,
    ) -> MpiResult<u32> {
        self.isend_kept(route, tag, data, len, sync, None)
    }

    /// A send of `data`, which the request keeps until it is gone.
    pub fn isend_owned(
        &mut self,
        route: Route,
        tag: c_int,
        data: Vec<u8>,
        sync: bool,
    ) -> MpiResult<u32> {
        let (ptr, len) = (data.as_ptr(), data.len());
        // SAFETY: the bytes live in the request until it is gone.
        unsafe {
            self.isend_kept(
                route,
                tag,
                ptr,
                len,
                sync,
                Some(Kept { data, unpack: None }),
            )
        }
    }

    /// # Safety
    /// As [`Engine::isend`].
    unsafe fn isend_kept(
        &mut self,
        route: Route,
        tag: c_int,
        data: *const u8,
        len: usize,
        sync: bool,
        kept: Option<Kept>,
    ) -> MpiResult<u32> {
        let Some(to) = route.to else {
            return Ok(self.null_request());
        };
        fits_one_message(len)?;
        let req = self
            .matching()
            .add(Request::new(Op::Send { data, len }, false, kept));
        let env = Envelope {
            context: route.context,
            source: route.me,
            tag,
            flags: if sync { SYNC } else { 0 },
            sender_req: req,
        };
        if len <= self.eager_limit {
            self.send_eager(to, &env, slice_or_empty(data, len))?;
            if !sync {
                self.matching().complete(req, MpiStatus::empty());
            }
        } else {
            let mut head = [0u8; RTS_LEN];
            env.write(&mut head[..SYNC_ENVELOPE]);
            head[SYNC_ENVELOPE..].copy_from_slice(&(len as u64).to_le_bytes());
            self.fm.send(to, RTS, &head)?;
        }
        self.act()?;
        Ok(req)
    }

    /// A blocking standard send (`MPI_Send`): an eager one is complete once
    /// handed to FM, with no request made for it.
    ///
    /// # Safety
    /// `data` holds `len` readable bytes.
    pub unsafe fn send(
        &mut self,
        route: Route,
        tag: c_int,
        data: *const u8,
        len: usize,
    ) -> MpiResult<()> {
        match route.to {
            None => Ok(()),
            Some(to) if len <= SHORT && len <= self.eager_limit => {
                self.send_short(to, route, tag, slice_or_empty(data, len))
            }
            Some(to) => self.send_longer(to, route, tag, data, len),
        }
    }

    /// [`Engine::send`] of a message past [`SHORT`] (out of line, so that
    /// the short one's path does not pay for this one's frame).
    ///
    /// # Safety
    /// As [`Engine::send`].
    #[inline(never)]
    unsafe fn send_longer(
        &mut self,
        to: Rank,
        route: Route,
        tag: c_int,
        data: *const u8,
        len: usize,
    ) -> MpiResult<()> {
        if len > self.eager_limit {
            // MPI lets a standard send return once its data is buffered;
            // fm's waits for the receive (the data then moves once, straight
            // into the receive's buffer) unless the wait could be a cycle of
            // blocked senders, which setting the data aside breaks.
            let id = self.isend(route, tag, data, len, false)?;
            return self.progress_until(|e| {
                let done = e.test(id).is_some() || e.matching().set_aside(id);
                done.then_some(())
            });
        }
        // (`isend` checks the rendezvous case.)
        fits_one_message(len)?;
        let env = Envelope::standard(&route, tag);
        self.send_eager(to, &env, slice_or_empty(data, len))?;
        self.act()
    }

    /// A blocking standard send of at most [`SHORT`] bytes, within the
    /// eager limit: the envelope and the data gathered on the stack, one FM
    /// send, no request. This is a latency-bound program's every message,
    /// so it skips the general path's steps (docs/PERFORMANCE.md, "The 8 B
    /// gap").
    fn send_short(&mut self, to: Rank, route: Route, tag: c_int, data: &[u8]) -> MpiResult<()> {
        let mut b = [0u8; ENVELOPE + SHORT];
        let env = Envelope::standard(&route, tag);
        env.write(&mut b[..ENVELOPE]);
        let n = ENVELOPE + data.len();
        b[ENVELOPE..n].copy_from_slice(data);
        self.fm.send(to, EAGER, &b[..n])?;
        self.act()
    }

    /// An eager message: the envelope, then the data. A small one is
    /// gathered here and sent as one piece (cheaper than FM's gather for a
    /// few bytes); a larger one goes as two pieces, the data where it is.
    fn send_eager(&mut self, to: Rank, env: &Envelope, data: &[u8]) -> MpiResult<()> {
        const SMALL: usize = 4096;
        let (handler, head_len) = if env.flags & SYNC != 0 {
            (EAGER_SYNC, SYNC_ENVELOPE)
        } else {
            (EAGER, ENVELOPE)
        };
        if head_len + data.len() <= SMALL {
            let b = &mut self.scratch;
            b.clear();
            b.resize(head_len, 0);
            env.write(b);
            b.extend_from_slice(data);
            self.fm.send(to, handler, &self.scratch)?;
        } else {
            let mut head = [0u8; SYNC_ENVELOPE];
            env.write(&mut head[..head_len]);
            self.fm.begin_message(to, head_len + data.len(), handler)?;
            self.fm.send_piece(&head[..head_len])?;
            self.fm.send_piece(data)?;
            self.fm.end_message()?;
        }
        Ok(())
    }

    /// Post a receive of up to `cap` bytes into `buf`.
    ///
    /// # Safety
    /// `buf` holds `cap` writable bytes until the request completes.
    pub unsafe fn irecv(
        &mut self,
        context: u32,
        source: c_int,
        tag: c_int,
        buf: *mut u8,
        cap: usize,
    ) -> MpiResult<u32> {
        self.irecv_kept(context, source, tag, buf, cap, None)
    }

    /// A receive into a buffer of its own, unpacked into `unpack`'s
    /// elements when it completes.
    ///
    /// # Safety
    /// `unpack.buf` holds `unpack.count` writable elements of its layout
    /// until the request completes.
    pub unsafe fn irecv_unpacked(
        &mut self,
        context: u32,
        source: c_int,
        tag: c_int,
        unpack: Unpack,
    ) -> MpiResult<u32> {
        let (buf, cap, kept) = Kept::to_unpack(unpack);
        self.irecv_kept(context, source, tag, buf, cap, Some(kept))
    }

    /// # Safety
    /// As [`Engine::irecv`].
    unsafe fn irecv_kept(
        &mut self,
        context: u32,
        source: c_int,
        tag: c_int,
        buf: *mut u8,
        cap: usize,
        kept: Option<Kept>,
    ) -> MpiResult<u32> {
        if source == MPI_PROC_NULL {
            return Ok(self.null_request());
        }
        let mut sh = self.matching();
        let req = sh.add(Request::new(Op::Recv { buf, cap }, false, kept));
        match sh.take_unexpected(context, source, tag) {
            None => sh.posted.push_back(Posted {
                req,
                context,
                source,
                tag,
            }),
            Some(u) => sh.receive_unexpected(req, u),
        }
        drop(sh);
        self.act()?;
        Ok(req)
    }

    /// `MPI_Improbe`: the first unexpected message matching, taken out of
    /// matching (no other receive can have it) and kept for `imrecv` under
    /// the number returned, with its status.
    pub fn improbe(
        &mut self,
        context: u32,
        source: c_int,
        tag: c_int,
    ) -> MpiResult<Option<(u32, MpiStatus)>> {
        self.progress()?;
        Ok(self.matching().take(context, source, tag))
    }

    /// `MPI_Mprobe`: wait for [`Engine::improbe`] to find one.
    pub fn mprobe(
        &mut self,
        context: u32,
        source: c_int,
        tag: c_int,
    ) -> MpiResult<(u32, MpiStatus)> {
        self.progress_until(|e| e.matching().take(context, source, tag))
    }

    /// Is `message` one taken by a matched probe and not yet received?
    pub fn is_message(&self, message: u32) -> bool {
        self.matching()
            .taken
            .get(message as usize)
            .is_some_and(Option::is_some)
    }

    /// `MPI_Imrecv`: receive the message a matched probe took into up to
    /// `cap` bytes at `buf`.
    ///
    /// # Safety
    /// `buf` holds `cap` writable bytes until the request completes.
    pub unsafe fn imrecv(&mut self, message: u32, buf: *mut u8, cap: usize) -> MpiResult<u32> {
        self.imrecv_kept(message, buf, cap, None)
    }

    /// [`Engine::imrecv`] into `count` elements of a layout that is not
    /// plain bytes, as [`Engine::irecv_unpacked`].
    ///
    /// # Safety
    /// As [`Engine::irecv_unpacked`].
    pub unsafe fn imrecv_unpacked(&mut self, message: u32, unpack: Unpack) -> MpiResult<u32> {
        let (buf, cap, kept) = Kept::to_unpack(unpack);
        self.imrecv_kept(message, buf, cap, Some(kept))
    }

    /// # Safety
    /// As [`Engine::imrecv`].
    unsafe fn imrecv_kept(
        &mut self,
        message: u32,
        buf: *mut u8,
        cap: usize,
        kept: Option<Kept>,
    ) -> MpiResult<u32> {
        let mut sh = self.matching();
        let Some(u) = sh.taken.get_mut(message as usize).and_then(Option::take) else {
            return err(
                MPI_ERR_REQUEST,
                "the message is not one a matched probe returned",
            );
        };
        let req = sh.add(Request::new(Op::Recv { buf, cap }, false, kept));
        sh.receive_unexpected(req, u);
        drop(sh);
        self.act()?;
        Ok(req)
    }

    pub fn null_request(&mut self) -> u32 {
        self.matching().add(Request::new(Op::Null, true, None))
    }

    /// Is request `id` a live one?
    pub fn is_request(&self, id: u32) -> bool {
        self.matching()
            .requests
            .get(id as usize)
            .is_some_and(Option::is_some)
    }

    /// If request `id` is done: its status, and the request is gone.
    pub fn test(&mut self, id: u32) -> Option<MpiStatus> {
        let mut sh = self.matching();
        let r = sh.get(id)?;
        if !r.done {
            return None;
        }
        let status = r.status;
        sh.remove(id);
        Some(status)
    }

    /// Wait for request `id` to complete; its status.
    pub fn wait(&mut self, id: u32) -> MpiResult<MpiStatus> {
        if !self.is_request(id) {
            return err(MPI_ERR_REQUEST, "the request is not active");
        }
        self.progress_until(|e| e.test(id))
    }

    /// Wait until one of `ids` (those that are `Some`) completes: its index and status.
    pub fn wait_any(&mut self, ids: &[Option<u32>]) -> MpiResult<Option<(usize, MpiStatus)>> {
        if ids.iter().all(Option::is_none) {
            return Ok(None);
        }
        self.progress_until(|e| {
            (ids.iter().enumerate()).find_map(|(i, id)| Some((i, e.test((*id)?)?)))
        })
        .map(Some)
    }

    /// Make progress until one of `ids` (those that are `Some`) is done.
    pub fn wait_until_any(&mut self, ids: &[Option<u32>]) -> MpiResult<()> {
        self.progress_until(|e| ids.iter().flatten().any(|&id| e.is_done(id)).then_some(()))
    }

    pub fn is_done(&self, id: u32) -> bool {
        self.matching()
            .requests
            .get(id as usize)
            .and_then(Option::as_ref)
            .is_some_and(|r| r.done)
    }

    /// `MPI_Request_free`: forget the request once it completes.
    pub fn free_request(&mut self, id: u32) {
        let mut sh = self.matching();
        let done = match sh.get(id) {
            Some(r) => {
                r.freed = true;
                r.done
            }
            None => return,
        };
        if done {
            sh.remove(id);
        }
    }

    /// `MPI_Cancel` of a receive not yet matched: it completes, cancelled.
    /// Sends are not cancelled (they complete as usual).
    pub fn cancel(&mut self, id: u32) {
        let mut sh = self.matching();
        if let Some(i) = sh.posted.iter().position(|p| p.req == id) {
            sh.posted.remove(i);
            let mut s = MpiStatus::empty();
            s.count_hi_and_cancelled |= 1;
            sh.complete(id, s);
        }
    }

    /// The status of the first unexpected message matching, if any.
    pub fn iprobe(
        &mut self,
        context: u32,
        source: c_int,
        tag: c_int,
    ) -> MpiResult<Option<MpiStatus>> {
        if source == MPI_PROC_NULL {
            return Ok(Some(MpiStatus::empty()));
        }
        self.progress()?;
        Ok(self.matching().peek(context, source, tag))
    }

    pub fn probe(&mut self, context: u32, source: c_int, tag: c_int) -> MpiResult<MpiStatus> {
        if source == MPI_PROC_NULL {
            return Ok(MpiStatus::empty());
        }
        self.progress_until(|e| e.matching().peek(context, source, tag))
    }

    /// A dissemination barrier over the communicator's members: in round k
    /// each tells the member 2^k after it and waits to hear from the one
    /// 2^k before it. Its messages carry the communicator's context and the
    /// barrier's number, so barriers never mix.
    pub fn barrier(&mut self, comm: &mut Comm) -> MpiResult<()> {
        let n = comm.ranks.len() as c_int;
        let epoch = comm.barriers;
        comm.barriers += 1;
        let mut round = 0u32;
        let mut step = 1;
        while step < n {
            let to = comm.ranks[((comm.rank + step) % n) as usize];
            let mut b = [0u8; 12];
            b[..4].copy_from_slice(&comm.context.to_le_bytes());
            b[4..8].copy_from_slice(&epoch.to_le_bytes());
            b[8..].copy_from_slice(&round.to_le_bytes());
            self.fm.send(to, BARRIER, &b)?;
            let key = (comm.context, epoch, round);
            self.progress_until(|e| e.matching().arrived(key).then_some(()))?;
            round += 1;
            step *= 2;
        }
        Ok(())
    }

    /// Every request still open, for `MPI_Finalize` to complete.
    pub fn open_requests(&self) -> Vec<u32> {
        let sh = self.matching();
        (0..sh.requests.len() as u32)
            .filter(|&i| {
                sh.requests[i as usize]
                    .as_ref()
                    .is_some_and(|r| !r.done && matches!(r.op, Op::Send { .. }))
            })
            .collect()
    }
}

/// The caller's bytes; a zero-length message may come with any pointer.
///
/// # Safety
/// `data` must point at `len` readable bytes when `len > 0`.
pub unsafe fn slice_or_empty<'a>(data: *const u8, len: usize) -> &'a [u8] {
    if len == 0 {
        &[]
    } else {
        std::slice::from_raw_parts(data, len)
    }
}

/// An eager message (`sync`: a synchronous send's, to be acknowledged).
fn on_eager(shared: &Shared, m: &mut Incoming<'_>, sync: bool) -> fm::Result<()> {
    let mut head = [0u8; SYNC_ENVELOPE];
    let (head, flags) = if sync {
        (&mut head[..], SYNC)
    } else {
        (&mut head[..ENVELOPE], 0)
    };
    if m.receive(head)? < head.len() {
        tracing::warn!(
            src = m.src(),
            "mpi: a message shorter than its envelope: dropped"
        );
        return Ok(());
    }
    let env = Envelope::read(head, flags);
    let mut sh = lock(shared);
    match sh.take_posted(&env) {
        Some(req) => deliver(&mut sh, req, m, &env)?,
        None => {
            let data = m.receive_vec()?;
            sh.keep_unexpected(Unexpected {
                env,
                from: m.src(),
                body: Body::Eager(data),
            });
            return Ok(());
        }
    }
    if env.flags & SYNC != 0 {
        sh.actions.push(Action::Ack {
            to: m.src(),
            sender_req: env.sender_req,
        });
    }
    Ok(())
}

fn on_rts(shared: &Shared, m: &mut Incoming<'_>) -> fm::Result<()> {
    let mut head = [0u8; RTS_LEN];
    if m.receive(&mut head)? < RTS_LEN {
        tracing::warn!(src = m.src(), "mpi: a short request to send: dropped");
        return Ok(());
    }
    let env = Envelope::read(&head[..SYNC_ENVELOPE], 0);
    let len = u64::from_le_bytes(head[SYNC_ENVELOPE..].try_into().unwrap_or([0; 8]));
    let mut sh = lock(shared);
    match sh.take_posted(&env) {
        Some(recv_req) => sh.clear_to_send(m.src(), &env, recv_req),
        None => sh.keep_unexpected(Unexpected {
            env,
            from: m.src(),
            body: Body::Rendezvous { len },
        }),
    }
    Ok(())
}

fn on_cts(shared: &Shared, m: &mut Incoming<'_>) -> fm::Result<()> {
    let mut b = [0u8; 8];
    if m.receive(&mut b)? < 8 {
        return Ok(());
    }
    lock(shared).actions.push(Action::Data {
        req: u32_at(&b, 0),
        to: m.src(),
        recv_req: u32_at(&b, 4),
    });
    Ok(())
}

fn on_data(shared: &Shared, m: &mut Incoming<'_>) -> fm::Result<()> {
    let mut b = [0u8; 4];
    if m.receive(&mut b)? < 4 {
        return Ok(());
    }
    let req = u32_at(&b, 0);
    let mut sh = lock(shared);
    let Some(r) = sh.get(req) else {
        tracing::warn!(src = m.src(), req, "mpi: data for no receive: dropped");
        return Ok(());
    };
    let env = Envelope {
        context: 0,
        source: r.status.source,
        tag: r.status.tag,
        flags: 0,
        sender_req: 0,
    };
    deliver(&mut sh, req, m, &env)
}

fn on_ack(shared: &Shared, m: &mut Incoming<'_>) -> fm::Result<()> {
    let mut b = [0u8; 4];
    if m.receive(&mut b)? == 4 {
        lock(shared).complete(u32_at(&b, 0), MpiStatus::empty());
    }
    Ok(())
}

fn on_barrier(shared: &Shared, m: &mut Incoming<'_>) -> fm::Result<()> {
    let mut b = [0u8; 12];
    if m.receive(&mut b)? == 12 {
        let key = (u32_at(&b, 0), u32_at(&b, 4), u32_at(&b, 8));
        *lock(shared).barrier.entry(key).or_insert(0) += 1;
    }
    Ok(())
}
