//! Tag matching: posted receives, unexpected messages, requests, and
//! what handlers leave for the progress loop to send.

use super::*;

/// A message that arrived before its receive was posted.
pub(crate) struct Unexpected {
    pub(crate) env: Envelope,
    /// The FM rank it came from (where answers go).
    pub(crate) from: Rank,
    pub(crate) body: Body,
}

pub(crate) enum Body {
    /// The whole message, copied aside.
    Eager(Vec<u8>),
    /// Only its announcement: the data waits at the sender.
    Rendezvous { len: u64 },
}

impl Unexpected {
    pub(crate) fn len(&self) -> u64 {
        match &self.body {
            Body::Eager(d) => d.len() as u64,
            Body::Rendezvous { len } => *len,
        }
    }
}

/// A posted receive waiting for its message.
pub(crate) struct Posted {
    pub(crate) req: u32,
    pub(crate) context: u32,
    pub(crate) source: c_int,
    pub(crate) tag: c_int,
}

/// What a request is for.
pub(crate) enum Op {
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
    /// A non-blocking collective, completed when its schedule ends.
    Collective,
    /// A generalized request (`MPI_Grequest_start`), completed when the
    /// program says so (`MPI_Grequest_complete`).
    Generalized,
    /// A one-sided access's (`MPI_Rput`…), completed by its answer.
    Rma,
}

pub(crate) struct Request {
    pub(crate) op: Op,
    pub(crate) done: bool,
    pub(crate) status: MpiStatus,
    /// `MPI_Request_free` was called: forget it once done.
    pub(crate) freed: bool,
    /// What the request holds for the caller until it is gone.
    pub(crate) kept: Option<Kept>,
    /// Its data was copied aside by a blocking send ([`Engine::send`]):
    /// the bytes go back to `set_aside_room` when it is gone.
    pub(crate) set_aside: bool,
    /// A receive that cleared a rendezvous message: its pieces' progress.
    pub(crate) arriving: Option<Arriving>,
}

/// A cleared rendezvous message's data as it arrives (`handlers::on_data`).
#[derive(Clone, Copy)]
pub(crate) struct Arriving {
    /// The message's length, as its request to send said.
    pub(crate) len: usize,
    /// Bytes that arrived so far: the next piece's offset.
    pub(crate) at: usize,
}

impl Request {
    pub(crate) fn new(op: Op, done: bool, kept: Option<Kept>) -> Request {
        Request {
            op,
            done,
            status: MpiStatus::proc_null(),
            freed: false,
            kept,
            set_aside: false,
            arriving: None,
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
    pub(crate) fn to_unpack(unpack: Unpack) -> (*mut u8, usize, Kept) {
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
pub(crate) enum Action {
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

/// The request that every send complete as it started shares (an eager
/// `MPI_Isend` that FM took at once): always done, never removed or
/// freed, so such a send makes no request of its own, and its wait finds
/// it done. MPICH 4.0.2 does the same: its completed sends share one
/// built-in request handle.
pub(crate) const DONE_SEND: u32 = 0;

/// What handlers and calls share: never borrowed across a send or an
/// extract (handlers borrow it inside those).
pub(crate) struct Matching {
    pub(crate) requests: Vec<Option<Request>>,
    pub(crate) free: Vec<u32>,
    pub(crate) posted: VecDeque<Posted>,
    pub(crate) unexpected: VecDeque<Unexpected>,
    pub(crate) actions: Vec<Action>,
    /// Messages a matched probe took, by number, until received.
    pub(crate) taken: Vec<Option<Unexpected>>,
    /// Requests to send in `unexpected`: some sender waits for this
    /// process to post a receive.
    pub(crate) unexpected_rendezvous: usize,
    /// Bytes blocking sends may still copy aside ([`Engine::send`]).
    pub(crate) set_aside_room: usize,
    /// Windows and the one-sided accesses under way on them.
    pub(crate) rma: super::rma::Rma,
}

/// The matching state of the process. Every access is made by the thread
/// holding the library's lock (`MPI` in lib.rs): the calls hold it, and
/// handlers run only inside the FM calls those make, on the same thread.
/// So a `RefCell` serves, without a lock on the message path (a mutex
/// here cost two lock round trips per message); its flag still turns a
/// nested borrow, which would be a bug, into a panic.
#[derive(Default)]
pub(crate) struct Shared(pub(crate) RefCell<Matching>);

// SAFETY: as above, one thread at a time, under the library's lock; the
// raw pointers in requests are the caller's buffers, used only while the
// request is live.
unsafe impl Send for Shared {}
// SAFETY: as above.
unsafe impl Sync for Shared {}

impl Default for Matching {
    fn default() -> Matching {
        Matching {
            // Slot `DONE_SEND`.
            requests: vec![Some(Request::new(Op::Null, true, None))],
            free: Vec::new(),
            posted: VecDeque::new(),
            unexpected: VecDeque::new(),
            actions: Vec::new(),
            taken: Vec::new(),
            unexpected_rendezvous: 0,
            set_aside_room: 0,
            rma: Default::default(),
        }
    }
}

impl Matching {
    pub(crate) fn add(&mut self, r: Request) -> u32 {
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

    pub(crate) fn get(&mut self, id: u32) -> Option<&mut Request> {
        self.requests.get_mut(id as usize).and_then(Option::as_mut)
    }

    /// Forget request `id`: dropped where it is, not moved out first
    /// (copying a just-written request stalls the load on the stores).
    pub(crate) fn remove(&mut self, id: u32) {
        if id == DONE_SEND {
            return;
        }
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
    pub(crate) fn keep_unexpected(&mut self, u: Unexpected) {
        if matches!(u.body, Body::Rendezvous { .. }) {
            self.unexpected_rendezvous += 1;
        }
        self.unexpected.push_back(u);
    }

    /// The first kept message matching, taken off the queue.
    pub(crate) fn take_unexpected(
        &mut self,
        context: u32,
        source: c_int,
        tag: c_int,
    ) -> Option<Unexpected> {
        // Every receive asks; most find nothing kept (an iterator over an
        // empty ring still costs a receive's tenth).
        if self.unexpected.is_empty() {
            return None;
        }
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
    pub(crate) fn set_aside(&mut self, id: u32) -> bool {
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
        let copy = unsafe { slice_or_empty(data, len) }.to_vec();
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
    pub(crate) fn complete(&mut self, id: u32, status: MpiStatus) {
        if id == DONE_SEND {
            // Done already, and shared: a stray answer naming it (a
            // malformed acknowledgement) changes nothing.
            return;
        }
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
    pub(crate) fn take_posted(&mut self, env: &Envelope) -> Option<u32> {
        // Most messages match the oldest receive: it is tried first and
        // taken from the front, without an iterator over the ring (this is
        // every message's path).
        let front = self.posted.front()?;
        if env.matches(front.context, front.source, front.tag) {
            return self.posted.pop_front().map(|p| p.req);
        }
        let i = (self.posted.iter()).position(|p| env.matches(p.context, p.source, p.tag))?;
        self.posted.remove(i).map(|p| p.req)
    }

    /// A rendezvous matched receive `req`: ask the sender for the data, and
    /// keep the envelope's source and tag for the status when it comes.
    pub(crate) fn clear_to_send(&mut self, to: Rank, env: &Envelope, req: u32, len: u64) {
        if let Some(r) = self.get(req) {
            r.status = MpiStatus::new(env.source, env.tag, 0, MPI_SUCCESS);
            r.arriving = Some(Arriving {
                len: usize::try_from(len).unwrap_or(usize::MAX),
                at: 0,
            });
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
    pub(crate) fn receive_unexpected(&mut self, req: u32, u: Unexpected) {
        let env = u.env;
        match u.body {
            Body::Eager(data) => self.deliver_eager(req, &data, &env, u.from),
            Body::Rendezvous { len } => self.clear_to_send(u.from, &env, req, len),
        }
    }

    /// Eager message `data` (with envelope `env`, from FM rank `from`)
    /// into receive `req`, as much as fits, which completes it (truncated
    /// if it did not all fit); a synchronous one is acknowledged.
    pub(crate) fn deliver_eager(&mut self, req: u32, data: &[u8], env: &Envelope, from: Rank) {
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
            // SAFETY: the receive's buffer holds `cap` bytes while its
            // request is live (the caller's promise to irecv).
            unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), buf, n) };
        }
        self.complete(req, MpiStatus::new(env.source, env.tag, n, error));
        if env.flags & SYNC != 0 {
            self.actions.push(Action::Ack {
                to: from,
                sender_req: env.sender_req,
            });
        }
    }

    /// The status of the first unexpected message matching, if any.
    pub(crate) fn peek(&self, context: u32, source: c_int, tag: c_int) -> Option<MpiStatus> {
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
    pub(crate) fn take(
        &mut self,
        context: u32,
        source: c_int,
        tag: c_int,
    ) -> Option<(u32, MpiStatus)> {
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

    /// The posted receive's buffer and capacity.
    pub(crate) fn recv_buffer(&mut self, id: u32) -> Option<(*mut u8, usize)> {
        match self.get(id)?.op {
            Op::Recv { buf, cap } => Some((buf, cap)),
            _ => None,
        }
    }
}

pub(crate) fn lock(m: &Shared) -> RefMut<'_, Matching> {
    m.0.borrow_mut()
}

/// Receive the rest of message `m` into the receive `req` (as much as fits)
/// and complete it; the status says truncated if it did not all fit.
pub(crate) fn deliver(
    sh: &mut Matching,
    req: u32,
    m: &mut Incoming<'_>,
    env: &Envelope,
) -> fm::Result<()> {
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

/// Matching on its own, without Fm: MPI's rules for which receive a
/// message goes to and which message a receive or probe takes.
#[cfg(test)]
mod tests {
    use super::*;

    fn env(context: u32, source: c_int, tag: c_int) -> Envelope {
        Envelope {
            context,
            source,
            tag,
            flags: 0,
            sender_req: 0,
        }
    }

    fn post(m: &mut Matching, context: u32, source: c_int, tag: c_int) -> u32 {
        let req = m.add(Request::new(Op::Null, false, None));
        m.posted.push_back(Posted {
            req,
            context,
            source,
            tag,
        });
        req
    }

    fn arrive(m: &mut Matching, context: u32, source: c_int, tag: c_int, byte: u8) {
        m.keep_unexpected(Unexpected {
            env: env(context, source, tag),
            from: source as Rank,
            body: Body::Eager(vec![byte]),
        });
    }

    fn first_byte(u: &Unexpected) -> u8 {
        match &u.body {
            Body::Eager(d) => d[0],
            Body::Rendezvous { .. } => 0,
        }
    }

    /// The request completed sends share is done from the start, and
    /// stays: waits, completions and removals leave it as it is, and no
    /// other request is ever given its slot.
    #[test]
    fn the_shared_request_of_completed_sends_stays_done() {
        let mut m = Matching::default();
        let done = |m: &mut Matching| m.get(DONE_SEND).map(|r| (r.done, r.freed));
        assert_eq!(done(&mut m), Some((true, false)));
        m.remove(DONE_SEND);
        let mut s = MpiStatus::proc_null();
        s.count_hi_and_cancelled |= 1;
        m.complete(DONE_SEND, s);
        assert_eq!(done(&mut m), Some((true, false)));
        assert_eq!(
            m.get(DONE_SEND).map(|r| r.status.count_hi_and_cancelled),
            Some(0)
        );
        let ids: Vec<u32> = (0..4)
            .map(|_| m.add(Request::new(Op::Null, false, None)))
            .collect();
        assert!(!ids.contains(&DONE_SEND), "{ids:?}");
        for id in ids {
            m.remove(id);
        }
        assert_ne!(m.add(Request::new(Op::Null, false, None)), DONE_SEND);
    }

    /// A message goes to the oldest posted receive it matches; wildcards
    /// match any source or tag, never another communicator's context.
    #[test]
    fn a_message_matches_the_oldest_posted_receive_that_accepts_it() {
        let mut m = Matching::default();
        let other_context = post(&mut m, 9, MPI_ANY_SOURCE, MPI_ANY_TAG);
        let tag5 = post(&mut m, 1, MPI_ANY_SOURCE, 5);
        let from2 = post(&mut m, 1, 2, MPI_ANY_TAG);
        let any = post(&mut m, 1, MPI_ANY_SOURCE, MPI_ANY_TAG);
        assert_eq!(m.take_posted(&env(1, 2, 7)), Some(from2));
        assert_eq!(m.take_posted(&env(1, 3, 5)), Some(tag5));
        assert_eq!(m.take_posted(&env(1, 3, 5)), Some(any));
        assert_eq!(
            m.take_posted(&env(1, 3, 5)),
            None,
            "the receives are used up"
        );
        assert_eq!(m.take_posted(&env(9, 0, 0)), Some(other_context));
    }

    /// Non-overtaking: of the kept messages a receive matches, it takes the
    /// first that arrived; a probe sees that same one and leaves it.
    #[test]
    fn a_receive_takes_the_first_matching_message_that_arrived() {
        let mut m = Matching::default();
        arrive(&mut m, 1, 0, 4, 1);
        arrive(&mut m, 1, 1, 4, 2);
        arrive(&mut m, 1, 0, 4, 3);
        arrive(&mut m, 2, 0, 4, 4);
        let probed = m.peek(1, 0, MPI_ANY_TAG).expect("probe");
        assert_eq!((probed.source, probed.tag, probed.bytes()), (0, 4, 1));
        let u = m.take_unexpected(1, 0, 4).expect("first from 0");
        assert_eq!(first_byte(&u), 1);
        let u = m
            .take_unexpected(1, MPI_ANY_SOURCE, 4)
            .expect("next of any");
        assert_eq!(first_byte(&u), 2);
        let u = m.take_unexpected(1, 0, MPI_ANY_TAG).expect("second from 0");
        assert_eq!(first_byte(&u), 3);
        assert!(m.take_unexpected(1, MPI_ANY_SOURCE, MPI_ANY_TAG).is_none());
        let u = m
            .take_unexpected(2, MPI_ANY_SOURCE, MPI_ANY_TAG)
            .expect("context 2");
        assert_eq!(first_byte(&u), 4);
    }

    /// A matched probe takes its message out of matching: a later receive
    /// cannot get it, and its number is reused once it is received.
    #[test]
    fn a_matched_probe_takes_its_message_out_of_matching() {
        let mut m = Matching::default();
        arrive(&mut m, 1, 0, 4, 1);
        arrive(&mut m, 1, 0, 4, 2);
        let (id, status) = m.take(1, 0, 4).expect("mprobe");
        assert_eq!(status.bytes(), 1);
        let u = m.take_unexpected(1, 0, 4).expect("the other");
        assert_eq!(first_byte(&u), 2);
        let kept = m.taken[id as usize].take().expect("kept for mrecv");
        assert_eq!(first_byte(&kept), 1);
        arrive(&mut m, 1, 0, 4, 3);
        assert_eq!(m.take(1, 0, 4).map(|(i, _)| i), Some(id), "number reused");
    }

    /// Request numbers are reused after removal, and a removed request is
    /// gone; a freed request disappears when it completes.
    #[test]
    fn requests_are_numbered_reused_and_forgotten_when_freed() {
        let mut m = Matching::default();
        let a = m.add(Request::new(Op::Null, false, None));
        let b = m.add(Request::new(Op::Null, false, None));
        assert_ne!(a, b);
        m.remove(a);
        assert!(m.get(a).is_none());
        assert_eq!(m.add(Request::new(Op::Null, false, None)), a);
        m.get(b).expect("b").freed = true;
        m.complete(b, MpiStatus::proc_null());
        assert!(m.get(b).is_none(), "a freed request is gone once done");
        m.complete(a, MpiStatus::new(3, 9, 0, MPI_SUCCESS));
        let r = m.get(a).expect("a stays until waited for");
        assert!(r.done);
        assert_eq!((r.status.source, r.status.tag), (3, 9));
    }

    /// A blocking send's data is copied aside only when some sender waits
    /// for this process to receive, and only within the limit; the room
    /// comes back when the request is gone.
    #[test]
    fn a_blocking_send_is_set_aside_only_when_a_rendezvous_waits_and_it_fits() {
        let data = [7u8; 100];
        let mut m = Matching {
            set_aside_room: 150,
            ..Matching::default()
        };
        let send = |m: &mut Matching| {
            let op = Op::Send {
                data: data.as_ptr(),
                len: data.len(),
            };
            m.add(Request::new(op, false, None))
        };
        let a = send(&mut m);
        assert!(!m.set_aside(a), "nobody waits for this process");
        m.keep_unexpected(Unexpected {
            env: env(1, 0, 0),
            from: 0,
            body: Body::Rendezvous { len: 1 << 20 },
        });
        assert!(m.set_aside(a));
        assert_eq!(m.set_aside_room, 50);
        let b = send(&mut m);
        assert!(!m.set_aside(b), "past the limit");
        m.complete(a, MpiStatus::proc_null());
        assert_eq!(m.set_aside_room, 150, "the room comes back");
        assert!(m.take_unexpected(1, 0, 0).is_some());
        assert!(!m.set_aside(b), "no rendezvous waits any more");
    }
}
