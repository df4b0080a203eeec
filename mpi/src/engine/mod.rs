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
//! an `Action` (`matching.rs`) and sent by the progress loop outside any handler, so no
//! handler ever waits for credit, and every blocking call keeps every
//! protocol moving.

use crate::abi::*;
use crate::coll::area::Watch;
use crate::coll::schedule::COLLECTIVE_OPERATIONS;
use crate::coll::Running;
use crate::datatype::Layout;
use fm::{Fm, Incoming, Rank};
use std::cell::{RefCell, RefMut};
use std::collections::{HashMap, VecDeque};
use std::os::raw::c_int;
use std::sync::Arc;

mod agreements;
mod compound;
mod deferred;
mod handlers;
mod matching;
pub mod rma;
mod stream;
mod wire;

pub use agreements::{Agreements, Channel};
use deferred::Deferred;

pub use crate::error::{err, MpiError, MpiResult};
use handlers::*;
use matching::*;
pub use matching::{Kept, Unpack};
use wire::*;
pub use wire::{
    COLL_EAGER_LIMIT, COLL_SHM_BYTES, DEFAULT_EAGER_LIMIT, DEFAULT_SET_ASIDE_LIMIT,
    MAX_COLL_SHM_BYTES, MAX_MESSAGE, SHORT,
};

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
    /// An intercommunicator's remote group (FM ranks by rank), which
    /// point-to-point ranks name; `ranks` is then the local group.
    pub remote: Option<Arc<[Rank]>>,
    pub errhandler: Handle,
    /// Collectives started on it: the next one's number, which its
    /// messages carry as their tag (`coll::schedule`).
    pub collectives: u32,
    /// Contexts handed out to communicators made from this one: every
    /// member makes the same ones in the same order.
    pub children: u32,
    /// Its collective area on this host, once its first small collective
    /// asked (`coll::area`).
    pub area: crate::coll::area::AreaState,
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
    /// The same for collectives' messages (`FM_COLL_EAGER_LIMIT`).
    pub coll_eager_limit: usize,
    /// Bytes per member up to which a collective goes through the host's
    /// area where it can (`FM_COLL_SHM_BYTES`; 0: never).
    pub coll_shm_bytes: usize,
    /// Where a small eager message is gathered before it is sent.
    scratch: Vec<u8>,
    /// Non-blocking collectives under way, by their request.
    collectives: Vec<(u32, Running)>,
    /// Requests of a send and a receive together (`MPI_Isendrecv`): the
    /// request, the send's (none to `MPI_PROC_NULL`) and the receive's.
    pairs: Vec<(u32, Option<u32>, u32)>,
    /// Messages that match in order (eager, synchronous eager, request
    /// to send) that a non-blocking send could not hand to FM without
    /// waiting for credit, by destination, oldest first. Later ones to
    /// the same destination queue behind them (MPI's order); progress
    /// sends them as credit returns, so `MPI_Isend` never waits for its
    /// receiver (MPICH's pt2pt/sendrecv3).
    deferred: HashMap<Rank, VecDeque<Deferred>>,
    /// Rendezvous sends whose receivers cleared them, their data going
    /// out in pieces as credit allows (`stream.rs`), oldest first.
    streams: Vec<stream::Stream>,
    /// The context ids this process's communicators use.
    pub contexts: crate::context::ContextIds,
    /// Context agreements under way (`MPI_Comm_idup`), and their outcomes.
    pub agreements: Agreements,
}

impl Engine {
    /// Join the job (as `Fm::init` does) with the protocol's handlers.
    pub fn start() -> MpiResult<Engine> {
        let shared = Arc::new(Shared::default());
        let s = |sh: &Arc<Shared>| sh.clone();
        let (a, b, c, d, e, g, h) = (
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
            .handler(rma::RMA, "mpi-rma", move |m| rma::on_rma(&h, m))
            .from_env()?
            .build()?;
        let bytes = |setting, default| {
            fm::settings::env_only::<usize>(setting).map(|v| v.unwrap_or(default))
        };
        let eager_limit = bytes(&fm::settings::MPI_EAGER_LIMIT, DEFAULT_EAGER_LIMIT)?;
        // With a CPU per rank, a root running ahead of its members is
        // better served by rendezvous than by eager messages set aside
        // and copied; sharing CPUs, the rendezvous's round trip costs
        // more than the copy (docs/PERFORMANCE.md, "Collectives: eager
        // limit, buffers and hosts").
        let coll_default = match fm.config().oversubscribed() {
            false => COLL_EAGER_LIMIT.min(eager_limit),
            true => eager_limit,
        };
        let coll_eager_limit = bytes(&fm::settings::COLL_EAGER_LIMIT, coll_default)?;
        let coll_shm_bytes = bytes(&fm::settings::COLL_SHM_BYTES, COLL_SHM_BYTES)?;
        if coll_shm_bytes > MAX_COLL_SHM_BYTES {
            return Err(fm::FmError::from(fm::ErrorKind::Env {
                var: fm::settings::COLL_SHM_BYTES.var,
                value: coll_shm_bytes.to_string(),
                reason: format!("at most {MAX_COLL_SHM_BYTES}"),
            })
            .into());
        }
        shared.0.borrow_mut().set_aside_room =
            bytes(&fm::settings::MPI_SET_ASIDE_LIMIT, DEFAULT_SET_ASIDE_LIMIT)?;
        Ok(Engine {
            fm,
            shared,
            eager_limit,
            coll_eager_limit,
            coll_shm_bytes,
            scratch: Vec::with_capacity(4096),
            collectives: Vec::new(),
            pairs: Vec::new(),
            deferred: HashMap::new(),
            streams: Vec::new(),
            contexts: Default::default(),
            agreements: Default::default(),
        })
    }

    fn matching(&self) -> RefMut<'_, Matching> {
        lock(&self.shared)
    }

    /// Run arrived handlers and send what they asked for, without waiting.
    pub fn progress(&mut self) -> MpiResult<()> {
        self.fm.extract(usize::MAX)?;
        // One look at what handlers left: actions, and one-sided answers.
        let (actions, answers) = {
            let sh = self.matching();
            (!sh.actions.is_empty(), sh.rma.has_outbox())
        };
        if actions {
            self.act_on_actions()?;
        }
        if !self.deferred.is_empty() {
            self.send_deferred(None, None)?;
        }
        if !self.streams.is_empty() {
            self.send_streams(false)?;
        }
        if !self.collectives.is_empty() {
            self.advance_collectives();
        }
        if !self.pairs.is_empty() {
            self.advance_pairs();
        }
        if self.agreements.running() {
            self.advance_agreements();
        }
        if answers {
            self.send_rma_answers()?;
        }
        Ok(())
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
                        self.start_stream(req, to, recv_req);
                        self.send_streams(false)?;
                    }
                }
            }
        }
    }

    /// Wait for something to happen, then make progress. With messages
    /// deferred or a cleared send's pieces to go, what may happen is a
    /// credit return, which wakes no wait for messages: this waits
    /// instead in FM's send of the oldest deferred message, or of the
    /// next piece (which takes in what arrives meanwhile, as any blocking
    /// send does). An agreement whose round ended without an id starts
    /// its next round first, and nothing waits: its members may all be
    /// in the same state, each waiting for the others' next round (three
    /// ranks' `MPI_Comm_dup`s hung so, about once in 30 runs, when the
    /// round ended in the last poll before the wait).
    ///
    /// A wait also ends when what a collective through the host's area
    /// waits for comes (`extra`'s, and those of the non-blocking ones
    /// under way): the member that posts it rings this process's
    /// doorbell, and the wait looks at it before it sleeps.
    fn wait_for_arrival(&mut self, extra: Option<&Watch>) -> MpiResult<()> {
        self.wait_for_arrival_while_inner(extra, || true)
    }

    /// The watches of the collectives under way, and `extra`.
    fn watches(&self, extra: Option<&Watch>) -> Vec<Watch> {
        let mut w: Vec<Watch> = (self.collectives.iter())
            .filter_map(|(_, r)| r.watch())
            .collect();
        w.extend(extra.cloned());
        w
    }

    fn wait_for_arrival_while_inner(
        &mut self,
        extra: Option<&Watch>,
        go_on: impl Fn() -> bool,
    ) -> MpiResult<()> {
        if let Some(r) = self.instead_of_waiting() {
            return r;
        }
        let watches = self.watches(extra);
        if watches.is_empty() {
            self.fm.extract_wait_while(usize::MAX, go_on)?;
        } else {
            let quiet = || go_on() && !watches.iter().any(Watch::ready);
            if quiet() {
                self.fm.extract_wait_while(usize::MAX, quiet)?;
            }
        }
        self.act()
    }

    /// What a wait for arrival does instead of waiting, if anything (the
    /// deferred send, the next agreement round: see above).
    fn instead_of_waiting(&mut self) -> Option<MpiResult<()>> {
        if let Some(&to) = self.deferred.keys().next() {
            return Some(self.send_deferred(Some(to), Some(1)));
        }
        if !self.streams.is_empty() {
            return Some(self.send_streams(true));
        }
        if self.agreements.round_to_start() {
            self.advance_agreements();
            return Some(Ok(()));
        }
        None
    }

    /// [`Engine::wait_for_arrival`] that also ends once `go_on` says so:
    /// how a thread waiting under `MPI_THREAD_MULTIPLE` lets another have
    /// the library (`state::Idle`).
    pub fn wait_for_arrival_while(&mut self, go_on: fn() -> bool) -> MpiResult<()> {
        self.wait_for_arrival_while_inner(None, go_on)
    }

    /// Make progress until `found` finds something, and return it: polling
    /// first (a reply is often a fraction of a microsecond away, and FM's
    /// waiting reads the clock each round), then FM's own wait, which
    /// sleeps as `FM_WAIT` says. Every blocking call waits through here.
    fn progress_until<T>(&mut self, mut found: impl FnMut(&mut Self) -> Option<T>) -> MpiResult<T> {
        self.progress_watching(|e| found(e).ok_or(None))
    }

    /// [`Engine::progress_until`] for what `found` says a wait should
    /// also look at when it finds nothing (a collective through the
    /// host's area).
    fn progress_watching<T>(
        &mut self,
        mut found: impl FnMut(&mut Self) -> Result<T, Option<Watch>>,
    ) -> MpiResult<T> {
        const POLLS: u32 = 256;
        loop {
            for _ in 0..POLLS {
                if let Ok(t) = found(self) {
                    return Ok(t);
                }
                self.progress()?;
            }
            match found(self) {
                Ok(t) => return Ok(t),
                Err(w) => self.wait_for_arrival(w.as_ref())?,
            }
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
        if !sync && kept.is_none() && len <= self.eager_limit_of(route.context) {
            let waiting = !self.deferred.is_empty() && self.deferred.contains_key(&to);
            if !waiting && self.send_eager_now(to, route, tag, slice_or_empty(data, len)) {
                return Ok(DONE_SEND);
            }
        }
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
        if len <= self.eager_limit_of(route.context) {
            let (handler, head_len) = eager_head(&env);
            let mut head = [0u8; SYNC_ENVELOPE];
            env.write(&mut head[..head_len]);
            let data = slice_or_empty(data, len);
            self.send_or_defer(to, handler, &head[..head_len], data, req, !sync)?;
        } else {
            let mut head = [0u8; RTS_LEN];
            env.write(&mut head[..SYNC_ENVELOPE]);
            head[SYNC_ENVELOPE..].copy_from_slice(&(len as u64).to_le_bytes());
            self.send_or_defer(to, RTS, &head, &[], req, false)?;
        }
        self.act()?;
        Ok(req)
    }

    /// The eager limit of messages on `context`: a collective's message has
    /// a limit of its own.
    fn eager_limit_of(&self, context: u32) -> usize {
        match context & COLLECTIVE_OPERATIONS {
            0 => self.eager_limit,
            _ => self.coll_eager_limit,
        }
    }

    /// An eager message of a standard send that FM takes at once as one
    /// packet, envelope and data written straight into it: whether it
    /// went. Such a send is complete when it returns, with no request of
    /// its own (`DONE_SEND`); nothing else may wait for credit towards
    /// `to` (MPI's order).
    #[inline]
    fn send_eager_now(&mut self, to: Rank, route: Route, tag: c_int, data: &[u8]) -> bool {
        let mut head = [0u8; ENVELOPE];
        Envelope::standard(&route, tag).write(&mut head);
        self.fm.send_packet_now(to, EAGER, [&head, data])
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
        let waiting = |e: &Self, to: &Rank| !e.deferred.is_empty() && e.deferred.contains_key(to);
        if let Some(to) = route.to.filter(|to| waiting(self, to)) {
            // Messages before this one wait for credit: they go first.
            self.send_deferred(Some(to), Some(usize::MAX))?;
        }
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
            return self.progress_until(|e| e.send_may_return(id).then_some(()));
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

    /// An eager message: the envelope, then the data, waiting for credit
    /// as FM's send does ([`Engine::send_whole`]).
    fn send_eager(&mut self, to: Rank, env: &Envelope, data: &[u8]) -> MpiResult<()> {
        let (handler, head_len) = eager_head(env);
        let mut head = [0u8; SYNC_ENVELOPE];
        env.write(&mut head[..head_len]);
        self.send_whole(to, handler, &head[..head_len], data, true)?;
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

    /// A request the program completes itself (`MPI_Grequest_start`).
    pub fn generalized_request(&mut self) -> u32 {
        self.matching()
            .add(Request::new(Op::Generalized, false, None))
    }

    /// `MPI_Grequest_complete`: generalized request `id` is done (its
    /// status is the query function's, given at the wait or test). `false`
    /// if `id` is no generalized request still running.
    pub fn complete_generalized(&mut self, id: u32) -> bool {
        let mut sh = self.matching();
        match sh.get(id) {
            Some(r) if matches!(r.op, Op::Generalized) && !r.done => {
                sh.complete(id, MpiStatus::empty());
                true
            }
            _ => false,
        }
    }

    /// Is request `id` a live one?
    pub fn is_request(&self, id: u32) -> bool {
        self.matching()
            .requests
            .get(id as usize)
            .is_some_and(Option::is_some)
    }

    /// If request `id` is done: its status, and the request is gone.
    /// The status of request `id` if it is complete, leaving it
    /// (`MPI_Request_get_status`).
    pub fn peek(&mut self, id: u32) -> Option<MpiStatus> {
        let mut sh = self.matching();
        let r = sh.get(id)?;
        r.done.then_some(r.status)
    }

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

    /// Whether blocking standard send `id` may return: it completed (and
    /// is gone), or its data was set aside (`Matching::set_aside`: the
    /// request then ends by itself).
    pub fn send_may_return(&mut self, id: u32) -> bool {
        self.test(id).is_some() || self.matching().set_aside(id)
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

    /// Make progress until request `id` is complete, or gone: one
    /// `MPI_Request_free` freed is forgotten the moment it completes.
    pub fn settle(&mut self, id: u32) -> MpiResult<()> {
        self.progress_until(|e| (!e.is_request(id) || e.is_done(id)).then_some(()))
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
        if id == DONE_SEND {
            return;
        }
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
            let mut s = MpiStatus::proc_null();
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
            return Ok(Some(MpiStatus::proc_null()));
        }
        self.progress()?;
        Ok(self.matching().peek(context, source, tag))
    }

    pub fn probe(&mut self, context: u32, source: c_int, tag: c_int) -> MpiResult<MpiStatus> {
        if source == MPI_PROC_NULL {
            return Ok(MpiStatus::proc_null());
        }
        self.progress_until(|e| e.matching().peek(context, source, tag))
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

/// Messages up to this long are gathered into one piece before FM sends
/// them (cheaper than FM's gather of two pieces for a few bytes).
const SMALL_GATHER: usize = 4096;

/// An eager message's handler and envelope length.
fn eager_head(env: &Envelope) -> (u16, usize) {
    if env.flags & SYNC != 0 {
        (EAGER_SYNC, SYNC_ENVELOPE)
    } else {
        (EAGER, ENVELOPE)
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
