//! The sending half of FM and everything a handler may use: streams, credits,
//! the stash of packets that arrived while we could not run handlers, and the
//! control packets (credit returns, completions of single-copy pieces).
//!
//! # The credit rule
//!
//! A packet's credit goes back to its sender when the packet is released.
//! Deadlock freedom rests on one rule, kept by construction: **nothing that
//! may wait holds a received packet.** A handler's packet is copied aside
//! and released (its credit owed, and returned at once with a window of 1)
//! before the handler can reach anything that sends
//! ([`Incoming::endpoint`](crate::Incoming::endpoint), `reply`, `send`), and
//! a waiting sender keeps taking packets in and releasing them. So every
//! credit a waiting rank needs is either on its way back or held by a rank
//! that is not waiting. The one exception is the stash's bound, below.
//!
//! # The stash and its bound
//!
//! A sender out of credit keeps receiving: arriving data packets are copied
//! aside (the stash) and released, so two ranks sending head-to-head both
//! make progress. A sender outside any handler, with no message of its own
//! open, that finds the stash at its bound (`FM_STASH_BYTES`) runs the
//! handlers of set-aside messages (as `extract` would, and as GASNet's
//! request calls do) until it is below the bound again, before it sends or
//! while it waits for credit. Only then: handlers that reply would
//! otherwise take the credits a waiting sender needs, for ever. Past the
//! bound, a new message's first packet is still
//! copied (so its sender can finish that message, and a single-copy piece
//! is completed), but its credit goes back only when the message is
//! handled — for fewer than half the peer's window, so that a credit
//! return's worth keeps circulating and a peer part way through a message
//! can always finish it. (With a window below 4 nothing is withheld.)
//!
//! So, while no handler waits, a rank's stash holds at most
//! `FM_STASH_BYTES` plus, per peer, the messages of half a window. A
//! handler cannot run handlers, so a handler that has to wait first gives
//! back every credit withheld (two handlers waiting on credits the other
//! withholds would wait for ever), and withholds none while it waits: what
//! arrives meanwhile is set aside beyond the bound. Send bulk data from main
//! code, and keep what handlers send within the credit window.
//!
//! # Every wait ends
//!
//! Each wait in fm waits for something that a peer in *any* state produces,
//! or that this rank produces while it waits:
//!
//! - **credit or a buffer towards D**: D takes in (and so releases) every
//!   packet whatever it waits for — `acquire_data_slot`, `next_packet_from`
//!   and the single-copy wait all absorb; `extract` runs handlers — and it
//!   withholds fewer than half its window of our credits, returning them
//!   when a handler of its own must wait;
//! - **the stash's bound**: a rank past it outside handlers runs set-aside
//!   handlers, which consume messages; inside a handler it withholds nothing;
//! - **the rest of a message from S**: S is part way through that message,
//!   waiting at most for credit or a buffer towards us, which our wait
//!   gives (we absorb all others meanwhile);
//! - **a single-copy piece to be read**: its receiver reads it the moment
//!   it takes the descriptor in, handler or not, and its completion travels
//!   in the control reserve, which no data uses;
//! - **the barrier**: `extract_wait` runs handlers, so others' requests are
//!   answered while it waits;
//! - **room in the outbox** (`sender.rs`): only threads other than the
//!   owner's wait for it, and the owner makes it at every `extract`.
//!
//! The decisions (what to send, owe, withhold, and what a stalled rank does)
//! live in `accounts.rs`, with no I/O; its model (`accounts/model.rs`)
//! drives them through every interleaving of a few ranks with multi-packet
//! messages, the stash's bound, replies longer than a window and the
//! outbox, and finds no state where no rank can move.

use crate::accounts::{Accounts, Standing, WhileWaiting};
use crate::error::{ErrorKind, Result};
use crate::path_choice::{PathChoice, Way};
use crate::sender::{FmSender, Outbox};
use crate::wait::{WaitPolicy, Waiter};
use crate::wire::{self, Header, Kind, ABORT, FIRST, HEADER, LAST};
use fm_composite::Composite;
use fm_devices::{Device, DeviceError, DeviceKind, Rank, RawRecv, RawSend};
use std::collections::VecDeque;
use std::sync::Arc;

/// Counters of one FM endpoint.
#[derive(Clone, Debug, Default)]
pub struct FmStats {
    pub messages_sent: u64,
    pub messages_received: u64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    /// Times a sender had to wait for credits.
    pub credit_stalls: u64,
    /// Credit-return packets sent (returns not piggybacked on data).
    pub credit_packets: u64,
    /// Packets copied aside because they arrived while handlers could not run.
    pub stashed_packets: u64,
    /// Most bytes the stash held at once.
    pub stash_peak_bytes: u64,
    /// Messages set aside whose credit was withheld until they were
    /// handled, because the stash was at its bound.
    pub stash_withheld_credits: u64,
    /// Messages whose handlers ran inside a send because the stash was at
    /// its bound.
    pub handlers_run_while_sending: u64,
    /// Messages given up part way: by their sender (`abort_message`, or a
    /// handler returning with a message open), as counted by the receiver.
    pub messages_aborted: u64,
    /// Pieces moved by single copy from the sender's memory, and their
    /// bytes (which no device counts as sent).
    pub single_copy_pieces: u64,
    pub single_copy_bytes: u64,
    /// Messages for a handler ID nobody registered: consumed and dropped.
    pub dropped_unknown_handler: u64,
    /// Packets that broke the protocol (bad header, stray continuation): dropped.
    pub dropped_malformed: u64,
    /// One-sided requests this process refused as a target (no such
    /// window, out of its range, misaligned, unreadable), and answers
    /// that came for no operation waiting here: neither wrote anything.
    pub window_refused: u64,
    pub window_answers_dropped: u64,
}

impl FmStats {
    /// Every counter by name.
    pub fn fields(&self) -> [(&'static str, u64); 17] {
        [
            ("messages_sent", self.messages_sent),
            ("messages_received", self.messages_received),
            ("bytes_sent", self.bytes_sent),
            ("bytes_received", self.bytes_received),
            ("credit_stalls", self.credit_stalls),
            ("credit_packets", self.credit_packets),
            ("stashed_packets", self.stashed_packets),
            ("stash_peak_bytes", self.stash_peak_bytes),
            ("stash_withheld_credits", self.stash_withheld_credits),
            (
                "handlers_run_while_sending",
                self.handlers_run_while_sending,
            ),
            ("messages_aborted", self.messages_aborted),
            ("single_copy_pieces", self.single_copy_pieces),
            ("single_copy_bytes", self.single_copy_bytes),
            ("dropped_unknown_handler", self.dropped_unknown_handler),
            ("dropped_malformed", self.dropped_malformed),
            ("window_refused", self.window_refused),
            ("window_answers_dropped", self.window_answers_dropped),
        ]
    }
}

/// A packet handed to the FM layer: in device memory, or copied aside.
pub(crate) enum Packet {
    /// Just received: its piggybacked credits are not yet applied.
    Device(RawRecv),
    /// Copied aside, its piggybacked credits applied. `owes_credit`: its
    /// own credit is returned when it is consumed, not when it was copied
    /// (the stash was at its bound).
    Stashed {
        src: Rank,
        bytes: Vec<u8>,
        owes_credit: bool,
    },
}

impl Packet {
    pub(crate) fn src(&self) -> Rank {
        match self {
            Packet::Device(r) => r.src,
            Packet::Stashed { src, .. } => *src,
        }
    }
    pub(crate) fn bytes(&self) -> &[u8] {
        match self {
            // SAFETY: device memory stays valid until the token is released,
            // which only `Endpoint::release` does, consuming the packet.
            Packet::Device(r) => unsafe { std::slice::from_raw_parts(r.ptr, r.len) },
            Packet::Stashed { bytes, .. } => bytes,
        }
    }
}

/// A data packet copied aside, its piggybacked credits applied (zeroed in
/// `bytes`). `owes_credit`: its own credit is returned when it is consumed,
/// not when it was copied (the stash was at its bound).
pub(crate) struct SetAside {
    bytes: Vec<u8>,
    owes_credit: bool,
}

/// The open outgoing message.
struct OutMsg {
    dest: Rank,
    handler: u16,
    declared: usize,
    given: usize,
    /// Device slot being filled, and bytes in it (header included).
    slot: Option<(RawSend, usize)>,
    first_sent: bool,
    /// Long pieces may go by single copy (which waits for the receiver):
    /// not for `try_send`.
    single_copy: bool,
}

pub struct Endpoint {
    pub(crate) dev: Composite,
    rank: Rank,
    size: usize,
    /// Payload bytes per packet towards each destination (device MTU − header).
    room: Vec<usize>,
    /// Credits, what is owed and withheld, the stash's bytes: the rules'
    /// state (`accounts.rs`).
    acct: Accounts,
    /// Packets set aside per source, oldest first.
    stash: Vec<VecDeque<SetAside>>,
    stashed: usize,
    /// Single-copy pieces of ours a destination has not finished reading.
    awaiting_fin: Vec<bool>,
    /// Control packets that found no slot yet: (dest, kind).
    pending_control: Vec<(Rank, Kind)>,
    out: Option<OutMsg>,
    pub(crate) in_handler: bool,
    /// The handler table, by ID; a handler is taken out while it runs.
    pub(crate) handlers: Vec<Option<crate::Handler>>,
    /// fm's own barrier: messages counted as they arrive.
    /// Collectives' messages waiting for their receives.
    pub(crate) coll_mailbox: crate::coll::Mailbox,
    /// One-sided operations: this process's windows, and its operations
    /// not answered yet.
    pub(crate) windows: crate::window::Windows,
    /// Tells endpoints of one process apart (a window is served by the
    /// one that made it).
    pub(crate) id: u64,
    /// An error of a handler that a stalled sender ran, for the next extract.
    pub(crate) deferred_error: Option<crate::FmError>,
    /// How long fm's internal waits may take (`None`: for ever).
    pub(crate) wait_limit: Option<std::time::Duration>,
    /// How waits spend their time (`FM_WAIT`).
    pub(crate) wait: WaitPolicy,
    cma_threshold: usize,
    /// Pieces at least this long (and below `cma_threshold`) go the way
    /// measured faster towards their peer (`path_choice`).
    long_piece: usize,
    /// Per peer, made at its first such piece.
    path_choice: Vec<Option<Box<PathChoice>>>,
    /// Messages other threads queued (`sender.rs`), once a sender was made.
    pub(crate) outbox: Option<Arc<Outbox>>,
    pub(crate) stats: FmStats,
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        if let Some(o) = &self.outbox {
            o.close();
        }
        crate::wait::endpoint_open(false);
        if crate::wait::job_end_reason().is_some() {
            // Nobody waits for our last packets: close without the linger.
            for kind in [DeviceKind::Nic, DeviceKind::Ethernet] {
                if let Some(d) = self.dev.network_mut(kind) {
                    d.skip_linger();
                }
            }
        }
    }
}

impl Endpoint {
    pub(crate) fn new(
        dev: Composite,
        c: &crate::Config,
        handlers: Vec<Option<crate::Handler>>,
    ) -> Self {
        crate::wait::endpoint_open(true);
        let (max_credits, cma_threshold, cma_adapt_from) =
            (c.max_credits, c.cma_threshold, c.cma_adapt_from);
        let size = dev.size();
        let rank = dev.rank();
        let mut room = Vec::with_capacity(size);
        let mut windows = Vec::with_capacity(size);
        for r in 0..size as Rank {
            let mtu = dev.info_for(r).map_or(0, |i| i.mtu);
            let window = dev.window(r);
            room.push(mtu.saturating_sub(HEADER));
            windows.push(max_credits.map_or(window, |c| window.min(c)));
        }
        Endpoint {
            dev,
            rank,
            size,
            room,
            acct: Accounts::new(windows, c.stash_bytes),
            stash: (0..size).map(|_| VecDeque::new()).collect(),
            stashed: 0,
            awaiting_fin: vec![false; size],
            pending_control: Vec::new(),
            out: None,
            in_handler: false,
            handlers,
            coll_mailbox: Default::default(),
            windows: Default::default(),
            id: {
                static ENDPOINTS: std::sync::atomic::AtomicU64 =
                    std::sync::atomic::AtomicU64::new(0);
                ENDPOINTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            },
            deferred_error: None,
            wait_limit: c.wait_timeout,
            wait: WaitPolicy {
                sleeps: c.wait_sleeps(),
                spin_for: c.wait_spin,
                oversubscribed: c.oversubscribed(),
            },
            cma_threshold,
            long_piece: cma_adapt_from.map_or(cma_threshold, |a| a.min(cma_threshold)),
            path_choice: (0..size).map(|_| None).collect(),
            outbox: None,
            stats: FmStats::default(),
        }
    }

    /// This process's rank.
    pub fn rank(&self) -> Rank {
        self.rank
    }

    /// Number of ranks in the job.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The composite device underneath.
    pub fn composite(&self) -> &Composite {
        &self.dev
    }

    /// The composite, mutably: for benchmarks and tools that call devices
    /// directly. Packets taken from it bypass FM (no handlers, no credits).
    pub fn composite_mut(&mut self) -> &mut Composite {
        &mut self.dev
    }

    /// Counters.
    pub fn stats(&self) -> &FmStats {
        &self.stats
    }

    /// Credits held now towards `dest`: how many packets may be sent to it
    /// without waiting. 0 for a rank outside the job.
    ///
    /// ```no_run
    /// # let mut fm = fm::Fm::init()?;
    /// if fm.credits(1) == 0 {
    ///     fm.extract(usize::MAX)?; // let credit returns arrive
    /// }
    /// # Ok::<(), fm::FmError>(())
    /// ```
    pub fn credits(&self, dest: Rank) -> u32 {
        self.acct.credits.get(dest as usize).copied().unwrap_or(0)
    }

    /// The largest message payload that travels to `dest` in one packet
    /// (the route's packet size less fm's header): such a message costs
    /// one credit. 0 for a rank outside the job or with no route.
    ///
    /// ```no_run
    /// # let fm = fm::Fm::init()?;
    /// let one_packet = vec![0u8; fm.mtu(1)];
    /// # Ok::<(), fm::FmError>(())
    /// ```
    pub fn mtu(&self, dest: Rank) -> usize {
        self.room.get(dest as usize).copied().unwrap_or(0)
    }

    /// Whether a message of `len` bytes to `dest` goes out whole on the
    /// credits held now: each of its packets (one per [`Endpoint::mtu`]
    /// bytes) has its credit, so its send never waits part way for credit,
    /// setting aside what arrives meanwhile. A message longer than the
    /// whole credit window passes once the whole window is held. `true`
    /// where sending gives its error at once (a rank outside the job, a
    /// rank with no route).
    ///
    /// ```no_run
    /// # let mut fm = fm::Fm::init()?;
    /// let piece = vec![7u8; 256 << 10];
    /// while !fm.sends_whole(1, piece.len()) {
    ///     fm.extract(usize::MAX)?; // receive while credit comes back
    /// }
    /// fm.send(1, 7, &piece)?;
    /// # Ok::<(), fm::FmError>(())
    /// ```
    pub fn sends_whole(&self, dest: Rank, len: usize) -> bool {
        let d = dest as usize;
        let room = self.room.get(d).copied().unwrap_or(0);
        if room == 0 || self.dev.is_null_route(dest) {
            return true;
        }
        let packets = len.div_ceil(room).max(1);
        let held = self.acct.credits[d] as usize;
        held >= packets.min(self.acct.window[d] as usize)
    }

    /// The credit window towards `dest`: the most packets in flight to it
    /// (0 for a rank outside the job).
    pub fn credit_window(&self, dest: Rank) -> u32 {
        self.acct.window.get(dest as usize).copied().unwrap_or(0)
    }

    /// Limit every wait inside fm (for credit, for a single-copy
    /// completion, for the rest of a message being read, in `barrier` and
    /// `extract_wait`, and an [`FmSender`]'s wait for room) to `limit`;
    /// past it the call fails with
    /// [`ErrorKind::Timeout`]. `None` (the default, unless `FM_WAIT_TIMEOUT`
    /// is set) waits for ever.
    ///
    /// ```no_run
    /// # let mut fm = fm::Fm::init()?;
    /// fm.set_wait_timeout(Some(std::time::Duration::from_secs(10)));
    /// match fm.barrier() {
    ///     Err(e) if matches!(e.kind(), fm::ErrorKind::Timeout { .. }) => eprintln!("a rank is stuck"),
    ///     r => r?,
    /// }
    /// # Ok::<(), fm::FmError>(())
    /// ```
    pub fn set_wait_timeout(&mut self, limit: Option<std::time::Duration>) {
        self.wait_limit = limit;
        if let Some(o) = &self.outbox {
            o.set_limit(limit);
        }
    }

    /// A handle through which other threads send on this endpoint
    /// (`sender.rs`): what they send goes out at this endpoint's next
    /// `extract`, in the order each thread sent it.
    pub fn sender(&mut self) -> FmSender {
        let (bell, size, limit) = (self.dev.doorbell().clone(), self.size, self.wait_limit);
        let outbox = self.outbox.get_or_insert_with(|| {
            let o = Outbox::new(bell, size);
            o.set_limit(limit);
            o
        });
        FmSender::new(outbox.clone())
    }

    /// Send what other threads queued, oldest first.
    #[cold]
    pub(crate) fn send_outbox(&mut self) -> Result<()> {
        let Some(o) = self.outbox.clone() else {
            return Ok(());
        };
        while let Some(m) = o.pop() {
            self.send(m.dest, m.handler, &m.data)?;
        }
        Ok(())
    }

    /// Whether other threads queued messages.
    #[inline(always)]
    pub(crate) fn outbox_pending(&self) -> bool {
        self.outbox.as_ref().is_some_and(|o| o.pending())
    }

    /// A waiter bounded by this endpoint's wait limit.
    pub(crate) fn waiter(&self, what: &'static str) -> Waiter<'static> {
        Waiter::new(self.wait, self.wait_limit, what)
    }

    fn check_dest(&self, dest: Rank) -> Result<()> {
        if dest as usize >= self.size {
            return Err(ErrorKind::NoSuchRank {
                rank: dest,
                size: self.size,
            }
            .into());
        }
        Ok(())
    }

    // ------------------------------------------------------------------ send

    /// FM_begin_message: open a message of exactly `len` bytes to `dest`, for
    /// handler `handler` there.
    pub fn begin_message(&mut self, dest: Rank, len: usize, handler: u16) -> Result<()> {
        self.open_message(dest, len, handler, true, true)
    }

    /// Open a message; `wait`: for credit (else [`ErrorKind::WouldBlock`]).
    fn open_message(
        &mut self,
        dest: Rank,
        len: usize,
        handler: u16,
        wait: bool,
        single_copy: bool,
    ) -> Result<()> {
        self.check_dest(dest)?;
        if let Some(o) = &self.out {
            return Err(ErrorKind::MessageOpen { dest: o.dest }.into());
        }
        while self.acct.runs_set_aside_before_sending(self.standing()) && self.run_one_stashed()? {}
        if len > u32::MAX as usize {
            return Err(ErrorKind::TooLong {
                len,
                limit: u32::MAX as usize,
            }
            .into());
        }
        let want = HEADER + len.min(self.room[dest as usize]);
        let slot = match wait {
            true => self.acquire_data_slot(dest, want)?,
            false => self.try_data_slot(dest, want)?,
        };
        self.out = Some(OutMsg {
            dest,
            handler,
            declared: len,
            given: 0,
            slot: Some((slot, HEADER)),
            first_sent: false,
            single_copy,
        });
        Ok(())
    }

    /// Like [`Endpoint::begin_message`], but fails with
    /// [`ErrorKind::WouldBlock`] instead of waiting when no credit or
    /// buffer towards `dest` is at hand now. Later pieces of a message longer
    /// than [`Endpoint::mtu`] may still wait for credit.
    ///
    /// ```no_run
    /// # let mut fm = fm::Fm::init()?;
    /// loop {
    ///     match fm.try_begin_message(1, 4, 7) {
    ///         Ok(()) => break,
    ///         Err(e) if matches!(e.kind(), fm::ErrorKind::WouldBlock { .. }) => {
    ///             fm.extract(usize::MAX)?; // do other work, then retry
    ///         }
    ///         Err(e) => return Err(e),
    ///     }
    /// }
    /// fm.send_piece(b"ping")?;
    /// fm.end_message()?;
    /// # Ok::<(), fm::FmError>(())
    /// ```
    pub fn try_begin_message(&mut self, dest: Rank, len: usize, handler: u16) -> Result<()> {
        self.open_message(dest, len, handler, false, true)
    }

    /// Send a whole message if that needs no wait: when it fits the credits
    /// held towards `dest` (one packet per [`Endpoint::mtu`] bytes) it is
    /// sent through packets, never by single copy (which waits for the
    /// receiver); otherwise nothing is sent and the error is
    /// [`ErrorKind::WouldBlock`].
    ///
    /// ```no_run
    /// # let mut fm = fm::Fm::init()?;
    /// while let Err(e) = fm.try_send(1, 7, b"hello") {
    ///     if !matches!(e.kind(), fm::ErrorKind::WouldBlock { .. }) {
    ///         return Err(e);
    ///     }
    ///     fm.extract(usize::MAX)?;
    /// }
    /// # Ok::<(), fm::FmError>(())
    /// ```
    pub fn try_send(&mut self, dest: Rank, handler: u16, data: &[u8]) -> Result<()> {
        if self.send_packet_now(dest, handler, [data]) {
            return Ok(());
        }
        self.check_dest(dest)?;
        let packets = data.len().div_ceil(self.room[dest as usize].max(1)).max(1);
        if self.out.is_none()
            && !self.dev.is_null_route(dest)
            && packets > self.acct.credits[dest as usize] as usize
        {
            return Err(ErrorKind::WouldBlock { dest }.into());
        }
        self.open_message(dest, data.len(), handler, false, false)?;
        self.send_piece(data)?;
        self.end_message()
    }

    /// Give up the open message. If none of it has left yet, nothing is
    /// sent; otherwise its receiver's handler gets [`ErrorKind::Aborted`]
    /// from its next `receive` and the message ends there.
    ///
    /// ```no_run
    /// # let mut fm = fm::Fm::init()?;
    /// # fn next_chunk() -> Option<Vec<u8>> { None }
    /// fm.begin_message(1, 1 << 20, 7)?;
    /// while let Some(chunk) = next_chunk() {
    ///     fm.send_piece(&chunk)?;
    /// }
    /// if fm.remaining_to_send() > 0 {
    ///     fm.abort_message()?; // the source ran dry: no zero padding
    /// } else {
    ///     fm.end_message()?;
    /// }
    /// # Ok::<(), fm::FmError>(())
    /// ```
    pub fn abort_message(&mut self) -> Result<()> {
        let Some(o) = self.out.as_mut() else {
            return Err(ErrorKind::NoMessageOpen.into());
        };
        let dest = o.dest;
        if !o.first_sent {
            if let Some((slot, _)) = o.slot.take() {
                self.dev.raw_abort(slot);
                self.acct.credits[dest as usize] += 1;
            }
            self.out = None;
            return Ok(());
        }
        if o.slot.is_none() {
            let slot = self.acquire_data_slot(dest, HEADER)?;
            self.out.as_mut().expect("open message").slot = Some((slot, HEADER));
        }
        let o = self.out.as_mut().expect("open message");
        if let Some((_, fill)) = o.slot.as_mut() {
            *fill = HEADER; // what it gathered is not sent
        }
        self.flush_slot(LAST | ABORT);
        self.out = None;
        Ok(())
    }

    /// Bytes the open message still needs (0 when none is open).
    pub fn remaining_to_send(&self) -> usize {
        self.out.as_ref().map_or(0, |o| o.declared - o.given)
    }

    /// FM_send_piece: append `data` to the open message (gather).
    pub fn send_piece(&mut self, data: &[u8]) -> Result<()> {
        let Some(o) = self.out.as_mut() else {
            return Err(ErrorKind::NoMessageOpen.into());
        };
        if o.given + data.len() > o.declared {
            return Err(ErrorKind::LengthMismatch {
                dest: o.dest,
                declared: o.declared,
                given: o.given + data.len(),
            }
            .into());
        }
        let (dest, single_copy) = (o.dest, o.single_copy);
        let len = data.len();
        // The frames' copying time, when the choice is being measured.
        let mut copying_ns: Option<u64> = None;
        if single_copy && len >= self.long_piece && self.dev.remote_memory_to(dest) {
            if len >= self.cma_threshold {
                return self.send_remote_piece(data);
            }
            let choice = self.path_choice[dest as usize].get_or_insert_with(Default::default);
            match choice.next() {
                Way::SingleCopy => {
                    let t = std::time::Instant::now();
                    self.send_remote_piece(data)?;
                    let ns = t.elapsed().as_nanos() as u64;
                    if let Some(c) = self.path_choice[dest as usize].as_mut() {
                        c.single_took(len, ns);
                    }
                    return Ok(());
                }
                Way::Frames { timed: true } => copying_ns = Some(0),
                Way::Frames { timed: false } => {}
            }
        }
        let room = self.room[dest as usize];
        let mut data = data;
        while !data.is_empty() {
            let o = self.out.as_mut().expect("open message");
            let Some((slot, fill)) = o.slot.as_mut() else {
                let left = o.declared - o.given;
                let slot = self.acquire_data_slot(dest, HEADER + left.min(room))?;
                self.out.as_mut().expect("open message").slot = Some((slot, HEADER));
                continue;
            };
            let space = slot.cap.min(HEADER + room) - *fill;
            if space == 0 {
                self.flush_slot(0);
                continue;
            }
            let n = space.min(data.len());
            let t = copying_ns.is_some().then(std::time::Instant::now);
            // SAFETY: the slot has `cap` writable bytes; fill + n ≤ cap.
            unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), slot.ptr.add(*fill), n) };
            if let (Some(total), Some(t)) = (copying_ns.as_mut(), t) {
                *total += t.elapsed().as_nanos() as u64;
            }
            *fill += n;
            o.given += n;
            data = &data[n..];
        }
        if let (Some(ns), Some(c)) = (copying_ns, self.path_choice[dest as usize].as_mut()) {
            c.frames_took(len, ns);
        }
        Ok(())
    }

    /// FM_end_message: send what is left. A message shorter than declared is
    /// padded with zeros (so the receiver is never left waiting) and reported.
    pub fn end_message(&mut self) -> Result<()> {
        let Some(o) = self.out.as_ref() else {
            return Err(ErrorKind::NoMessageOpen.into());
        };
        let (dest, declared, given) = (o.dest, o.declared, o.given);
        if given < declared {
            let zeros = vec![0u8; declared - given];
            self.send_piece(&zeros)?;
        }
        let o = self.out.as_mut().expect("open message");
        if o.slot.is_some() {
            self.flush_slot(LAST);
        }
        self.out = None;
        self.stats.messages_sent += 1;
        self.stats.bytes_sent += declared as u64;
        if given < declared {
            return Err(ErrorKind::LengthMismatch {
                dest,
                declared,
                given,
            }
            .into());
        }
        Ok(())
    }

    /// Send a whole message in one call.
    #[inline]
    pub fn send(&mut self, dest: Rank, handler: u16, data: &[u8]) -> Result<()> {
        if self.send_packet_now(dest, handler, [data]) {
            return Ok(());
        }
        self.begin_message(dest, data.len(), handler)?;
        self.send_piece(data)?;
        self.end_message()
    }

    /// Send a message made of `parts`, one after another, if it fits one
    /// packet ([`Endpoint::mtu`]) and a credit and a buffer towards `dest`
    /// are at hand: it is written straight into the packet, with no
    /// gathering first. `false` if not, and nothing was sent (nor any error
    /// made: the caller decides whether to wait, queue or take a longer
    /// way). This is [`Endpoint::send`]'s fast path; an envelope and a
    /// payload held apart are the common case.
    ///
    /// ```no_run
    /// # let mut fm = fm::Fm::init()?;
    /// let (head, body) = ([1u8, 2, 3, 4], b"payload");
    /// if !fm.send_packet_now(1, 7, [&head, body]) {
    ///     let mut whole = head.to_vec();
    ///     whole.extend_from_slice(body);
    ///     fm.send(1, 7, &whole)?; // waits for credit as it must
    /// }
    /// # Ok::<(), fm::FmError>(())
    /// ```
    #[inline]
    pub fn send_packet_now<const N: usize>(
        &mut self,
        dest: Rank,
        handler: u16,
        parts: [&[u8]; N],
    ) -> bool {
        let d = dest as usize;
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if d >= self.size
            || self.out.is_some()
            || self.acct.stash_full()
            || len > self.room[d]
            || len >= self.cma_threshold
            || self.acct.credits[d] == 0
        {
            return false;
        }
        let Ok(slot) = self.dev.raw_send_buffer(dest, HEADER + len) else {
            return false;
        };
        self.acct.credits[d] -= 1;
        let h = Header {
            kind: Kind::Data,
            flags: FIRST | LAST,
            handler,
            credits: self.acct.take_owed(d),
            msg_len: len as u32,
        };
        // SAFETY: the slot has room for the header and the parts.
        unsafe {
            h.encode(std::slice::from_raw_parts_mut(slot.ptr, HEADER));
            let mut at = slot.ptr.add(HEADER);
            for p in parts {
                std::ptr::copy_nonoverlapping(p.as_ptr(), at, p.len());
                at = at.add(p.len());
            }
        }
        self.dev.raw_send(slot, HEADER + len);
        self.stats.messages_sent += 1;
        self.stats.bytes_sent += len as u64;
        true
    }

    /// Send the open slot with `flags` (FIRST is added for a message's first packet).
    fn flush_slot(&mut self, mut flags: u8) {
        let o = self.out.as_mut().expect("open message");
        let Some((slot, fill)) = o.slot.take() else {
            return;
        };
        if !o.first_sent {
            flags |= FIRST;
            o.first_sent = true;
        }
        let h = Header {
            kind: Kind::Data,
            flags,
            handler: o.handler,
            credits: self.acct.take_owed(o.dest as usize),
            msg_len: o.declared as u32,
        };
        // SAFETY: every slot has at least HEADER bytes.
        h.encode(unsafe { std::slice::from_raw_parts_mut(slot.ptr, HEADER) });
        self.dev.raw_send(slot, fill);
    }

    /// A long piece: leave it where it is and let the receiver copy it once.
    fn send_remote_piece(&mut self, data: &[u8]) -> Result<()> {
        let o = self.out.as_mut().expect("open message");
        let dest = o.dest;
        // Data already gathered goes first, in order.
        match &o.slot {
            Some((_, fill)) if *fill > HEADER => self.flush_slot(0),
            Some(_) => {
                // An empty slot: give it back with its credit.
                let (slot, _) = o.slot.take().expect("slot");
                self.dev.raw_abort(slot);
                self.acct.credits[dest as usize] += 1;
            }
            None => {}
        }
        let slot = self.acquire_data_slot(dest, HEADER + wire::REMOTE_PAYLOAD)?;
        let o = self.out.as_mut().expect("open message");
        let mut flags = 0;
        if !o.first_sent {
            flags |= FIRST;
            o.first_sent = true;
        }
        o.given += data.len();
        if o.given == o.declared {
            flags |= LAST;
        }
        let h = Header {
            kind: Kind::Remote,
            flags,
            handler: o.handler,
            credits: self.acct.take_owed(dest as usize),
            msg_len: o.declared as u32,
        };
        // SAFETY: the slot holds HEADER + REMOTE_PAYLOAD bytes.
        let p = unsafe { std::slice::from_raw_parts_mut(slot.ptr, HEADER + wire::REMOTE_PAYLOAD) };
        h.encode(p);
        p[HEADER..HEADER + 8].copy_from_slice(&(data.as_ptr() as u64).to_le_bytes());
        p[HEADER + 8..].copy_from_slice(&(data.len() as u64).to_le_bytes());
        self.awaiting_fin[dest as usize] = true;
        self.dev.raw_send(slot, HEADER + wire::REMOTE_PAYLOAD);
        self.stats.single_copy_pieces += 1;
        self.stats.single_copy_bytes += data.len() as u64;
        // `data` must stay untouched until the receiver has copied it.
        let mut w = self
            .waiter("a single-copy piece to be read by its receiver")
            .reporting_stalls();
        self.release_withheld();
        while self.awaiting_fin[dest as usize] {
            if self.progress_stalled()? {
                w.reset();
            } else {
                w.snooze(self)?;
            }
        }
        Ok(())
    }

    /// A slot for a data packet if a credit and a buffer are at hand now.
    fn try_data_slot(&mut self, dest: Rank, len: usize) -> Result<RawSend> {
        let d = dest as usize;
        // The null route has no credits: its device gives the clear error.
        if self.acct.credits[d] == 0 && !self.dev.is_null_route(dest) {
            return Err(ErrorKind::WouldBlock { dest }.into());
        }
        match self.dev.raw_send_buffer(dest, len) {
            Ok(slot) => {
                self.acct.credits[d] -= 1;
                Ok(slot)
            }
            Err(DeviceError::NoBuffer { .. }) => Err(ErrorKind::WouldBlock { dest }.into()),
            Err(e) => Err(e.into()),
        }
    }

    /// A slot for a data packet: waits for a credit, extracting meanwhile.
    fn acquire_data_slot(&mut self, dest: Rank, len: usize) -> Result<RawSend> {
        let d = dest as usize;
        let mut w = self.waiter("credit towards a rank");
        let mut stalled = false;
        let (mut since, mut warned) = (std::time::Instant::now(), false);
        loop {
            if self.acct.credits[d] > 0 {
                match self.dev.raw_send_buffer(dest, len) {
                    Ok(slot) => {
                        self.acct.credits[d] -= 1;
                        return Ok(slot);
                    }
                    Err(DeviceError::NoBuffer { .. }) => {}
                    Err(e) => return Err(e.into()),
                }
            } else if let Some(e) = self.dev.peer_failure(dest) {
                // No credit, so the device is not asked for a buffer; a
                // peer it has given up on must still end this wait.
                return Err(e.into());
            } else if self.dev.is_null_route(dest) {
                // The null transport: the device itself reports no route.
                return Err(self
                    .dev
                    .raw_send_buffer(dest, len)
                    .err()
                    .map(Into::into)
                    .unwrap_or_else(|| {
                        ErrorKind::Config(format!("rank {dest} has no usable device")).into()
                    }));
            }
            if !stalled {
                stalled = true;
                self.stats.credit_stalls += 1;
                since = std::time::Instant::now();
                self.release_withheld();
            } else if !warned && since.elapsed() > std::time::Duration::from_secs(1) {
                warned = true;
                tracing::warn!(
                    rank = self.rank,
                    waiting_for = dest,
                    credits = self.acct.credits[d],
                    owed = self.acct.owed[d],
                    stashed = self.stashed,
                    stashed_bytes = self.acct.stashed_bytes,
                    in_handler = self.in_handler,
                    pending_control = self.pending_control.len(),
                    device = ?self.dev.stats(),
                    fm = ?self.stats,
                    "fm: rank {} has had no credit towards {} for 1 s: {}",
                    self.rank,
                    if dest == self.rank { "itself".to_string() } else { format!("rank {dest}") },
                    self.stall_hint(dest)
                );
            }
            let set_aside = self.stashed > 0;
            if self.acct.while_waiting(self.standing(), set_aside) == WhileWaiting::RunSetAside
                && self.run_one_stashed()?
            {
                // Consume what was set aside (module docs).
                w.reset();
                continue;
            }
            if self.progress_stalled()? {
                w.reset();
            } else {
                w.snooze(self)?;
            }
        }
    }

    /// A wait inside the protocol has lasted `waited` (`wait.rs`): say what
    /// this rank holds, so that a stuck job says where it is stuck.
    #[cold]
    pub(crate) fn report_stall(&self, what: &str, waited: std::time::Duration) {
        tracing::warn!(
            rank = self.rank,
            open_message_to = ?self.open_message_dest(),
            stashed = self.stashed,
            stashed_bytes = self.acct.stashed_bytes,
            in_handler = self.in_handler,
            pending_control = self.pending_control.len(),
            credits = ?self.acct.credits,
            owed = ?self.acct.owed,
            device = ?self.dev.stats(),
            "fm: rank {} has waited {:.1} s for {what}",
            self.rank,
            waited.as_secs_f64()
        );
    }

    /// What a sender waiting for credit towards `dest` should look at.
    #[cold]
    fn stall_hint(&self, dest: Rank) -> String {
        match (dest == self.rank, self.in_handler) {
            (true, true) => "this handler sends to its own rank, whose messages wait for \
                handlers to run; send more than a window to yourself from main code"
                .into(),
            (false, true) => format!(
                "this rank waits inside a handler, so it runs none; rank {dest} must \
                 extract (or be in a send outside its handlers) to give credit back"
            ),
            (_, false) => format!(
                "rank {dest} has not handled this rank's messages: is it extracting, or \
                 busy elsewhere?"
            ),
        }
    }

    // --------------------------------------------------------------- receive

    /// The next packet from anyone: stashed ones first, then the devices.
    #[inline]
    pub(crate) fn next_packet(&mut self) -> Option<Packet> {
        if self.stashed > 0 {
            if let Some(p) = self.next_stashed() {
                return Some(p);
            }
        }
        self.dev.raw_receive().map(Packet::Device)
    }

    /// The oldest set-aside packet of the lowest-numbered source.
    pub(crate) fn next_stashed(&mut self) -> Option<Packet> {
        (0..self.size as Rank).find_map(|src| self.pop_stash(src))
    }

    /// Like [`Endpoint::next_packet`], but takes only what the devices
    /// already took in: no system call for a network device.
    #[inline]
    pub(crate) fn next_packet_arrived(&mut self) -> Option<Packet> {
        if self.stashed > 0 {
            return self.next_packet();
        }
        self.dev.raw_receive_arrived().map(Packet::Device)
    }

    /// The oldest set-aside packet from `src`.
    fn pop_stash(&mut self, src: Rank) -> Option<Packet> {
        let SetAside { bytes, owes_credit } = self.stash[src as usize].pop_front()?;
        self.stashed -= 1;
        self.acct.stashed_bytes -= bytes.len();
        Some(Packet::Stashed {
            src,
            bytes,
            owes_credit,
        })
    }

    /// Set a packet of `src`'s aside: last, or first (`unread`).
    fn push_stash(&mut self, src: Rank, p: SetAside, first: bool) {
        self.acct.stashed_bytes += p.bytes.len();
        let bytes = self.acct.stashed_bytes as u64;
        self.stats.stash_peak_bytes = self.stats.stash_peak_bytes.max(bytes);
        match first {
            true => self.stash[src as usize].push_front(p),
            false => self.stash[src as usize].push_back(p),
        }
        self.stashed += 1;
    }

    /// A handler is about to wait: return every credit withheld for a
    /// set-aside message. Withholding is for ranks that will run handlers
    /// when they wait; a handler cannot, and two handlers waiting for
    /// credits the other withholds would wait for ever.
    fn release_withheld(&mut self) {
        if !self.acct.returns_withheld_when_waiting(self.standing()) {
            return;
        }
        for src in 0..self.size {
            for i in 0..self.stash[src].len() {
                if std::mem::take(&mut self.stash[src][i].owes_credit) {
                    self.owe_withheld(src as Rank);
                }
            }
        }
    }

    /// Where this rank stands, for the rules (`accounts.rs`).
    #[inline(always)]
    fn standing(&self) -> Standing {
        Standing {
            in_handler: self.in_handler,
            message_open: self.out.is_some(),
        }
    }

    /// The next packet from `src` (the rest of a message being read). Packets
    /// from others are stashed; control packets are applied. Waits.
    pub(crate) fn next_packet_from(&mut self, src: Rank) -> Result<Packet> {
        let mut w = self
            .waiter("the rest of a message being read")
            .reporting_stalls();
        loop {
            if let Some(p) = self.pop_stash(src) {
                return Ok(p);
            }
            self.flush_control();
            match self.dev.raw_receive() {
                Some(r) if r.src == src => return Ok(Packet::Device(r)),
                Some(r) => {
                    w.reset();
                    self.absorb(r)?;
                }
                None => w.snooze(self)?,
            }
        }
    }

    /// Decode a packet's header and apply the credits it carries (once: a
    /// packet from the stash had them applied when it was set aside). A
    /// packet with a bad header is dropped and counted.
    #[inline(always)]
    pub(crate) fn open_packet(&mut self, p: Packet) -> Option<(Packet, Header)> {
        match Header::decode(p.bytes()) {
            Ok(h) => {
                if let Packet::Device(_) = p {
                    self.take_credits(p.src(), &h);
                }
                Some((p, h))
            }
            Err(_) => {
                self.drop_malformed(p, "bad header");
                None
            }
        }
    }

    /// Handle a packet while handlers cannot run: control packets take
    /// effect; data packets are copied aside and their slot and credit go
    /// back; a single-copy piece is copied out of the sender now and
    /// completed, so two processes sending large pieces head-to-head never
    /// wait on each other. Past the stash's bound, a new message's credit is
    /// withheld until it is handled (module docs).
    fn absorb(&mut self, raw: RawRecv) -> Result<()> {
        let Some((p, h)) = self.open_packet(Packet::Device(raw)) else {
            return Ok(());
        };
        let src = p.src();
        if matches!(h.kind, Kind::Credit | Kind::Fin) {
            self.on_control(src, &h, p);
            return Ok(());
        }
        let mut bytes = match h.kind {
            Kind::Remote => {
                let Some((addr, len)) = wire::decode_remote(&p.bytes()[HEADER..]) else {
                    self.drop_malformed(p, "bad single-copy descriptor");
                    return Ok(());
                };
                if len > u64::from(h.msg_len) {
                    self.drop_malformed(p, "single-copy piece longer than its message");
                    return Ok(());
                }
                // The length is the sender's claim: an allocation that
                // fails is this rank's error, not an abort.
                let mut bytes = Vec::new();
                if bytes.try_reserve_exact(HEADER + len as usize).is_err() {
                    self.send_fin(src);
                    self.release(p);
                    return Err(ErrorKind::Config(format!(
                        "no memory to set aside a single-copy piece of {len} bytes from rank {src}"
                    ))
                    .into());
                }
                bytes.resize(HEADER + len as usize, 0);
                bytes[..HEADER].copy_from_slice(&p.bytes()[..HEADER]);
                bytes[0] = Kind::Data as u8;
                let read = self.dev.remote_read(src, addr, &mut bytes[HEADER..]);
                self.send_fin(src);
                if let Err(e) = read {
                    self.release(p);
                    return Err(e.into());
                }
                bytes
            }
            _ => p.bytes().to_vec(),
        };
        // Credits were applied now; do not apply them twice.
        bytes[4..8].copy_from_slice(&0u32.to_le_bytes());
        // Never so many that fewer than a credit return's worth (half a
        // window) keep circulating: a peer part way through a message can
        // always finish it, as the credits it uses come back in batches.
        let s = src as usize;
        let owes_credit = self.acct.withholds(s, h.first(), self.standing());
        self.stats.stashed_packets += 1;
        if owes_credit {
            self.stats.stash_withheld_credits += 1;
            self.free(p);
        } else {
            self.release(p);
        }
        self.push_stash(src, SetAside { bytes, owes_credit }, false);
        Ok(())
    }

    /// Count and release a packet that breaks the protocol.
    pub(crate) fn drop_malformed(&mut self, p: Packet, why: &'static str) {
        self.stats.dropped_malformed += 1;
        tracing::warn!(
            src = p.src(),
            len = p.bytes().len(),
            why,
            "fm: dropped a malformed packet"
        );
        self.release(p);
    }

    /// Put a packet (its credits applied) back in front of its source's
    /// queue: it belongs to a later message.
    pub(crate) fn unread(&mut self, p: Packet) {
        let src = p.src();
        let aside = match p {
            Packet::Stashed {
                bytes, owes_credit, ..
            } => SetAside { bytes, owes_credit },
            Packet::Device(_) => {
                let mut bytes = p.bytes().to_vec();
                if bytes.len() >= HEADER {
                    bytes[4..8].copy_from_slice(&0u32.to_le_bytes());
                }
                self.release(p);
                SetAside {
                    bytes,
                    owes_credit: false,
                }
            }
        };
        self.push_stash(src, aside, true);
    }

    /// Apply piggybacked credits of a data packet's header.
    #[inline(always)]
    pub(crate) fn take_credits(&mut self, src: Rank, h: &Header) {
        if h.credits != 0 {
            let s = src as usize;
            if let Err(c) = self.acct.returned(s, h.credits) {
                // More back than we ever had out: a peer that breaks the
                // protocol. Never let it push us past the window, which is
                // what keeps the device's rings from being overrun.
                self.stats.dropped_malformed += 1;
                tracing::warn!(
                    src,
                    credits = c,
                    window = self.acct.window[s],
                    "fm: peer returned more credits than were out"
                );
            }
        }
    }

    /// A credit return or a completion (its credits already taken with
    /// [`Endpoint::take_credits`]): note it and free the packet.
    #[inline]
    pub(crate) fn on_control(&mut self, src: Rank, h: &Header, p: Packet) {
        if h.kind == Kind::Fin {
            self.awaiting_fin[src as usize] = false;
        }
        // Control packets consume no credit, so none is owed for them.
        self.free(p);
    }

    /// Release a consumed data packet: its slot goes back and a credit is
    /// owed (a set-aside packet's credit was owed when it was set aside).
    #[inline]
    pub(crate) fn release(&mut self, p: Packet) {
        match p {
            Packet::Device(r) => self.release_device(r.src, r.token),
            Packet::Stashed {
                src,
                owes_credit: true,
                ..
            } => self.owe_withheld(src),
            Packet::Stashed { .. } => {}
        }
    }

    /// Release a data packet still in device memory.
    #[inline]
    pub(crate) fn release_device(&mut self, src: Rank, token: u64) {
        self.dev.raw_release(token);
        self.owe_credit(src);
    }

    /// A packet of `src`'s was consumed: its credit is owed, and returned
    /// once enough are: credit returns are batched (half a window), which
    /// is also what bounds the control packets in a peer's queue.
    #[inline]
    pub(crate) fn owe_credit(&mut self, src: Rank) {
        if self.acct.consumed(src as usize) {
            self.send_control(src, Kind::Credit);
        }
    }

    /// A set-aside message whose credit was withheld was consumed.
    #[inline]
    pub(crate) fn owe_withheld(&mut self, src: Rank) {
        if self.acct.withheld_consumed(src as usize) {
            self.send_control(src, Kind::Credit);
        }
    }

    #[inline]
    fn free(&mut self, p: Packet) {
        if let Packet::Device(r) = p {
            self.dev.raw_release(r.token);
        }
    }

    /// Tell `dest` we finished copying its single-copy piece.
    pub(crate) fn send_fin(&mut self, dest: Rank) {
        self.send_control(dest, Kind::Fin);
    }

    /// Send a control packet from the reserve; if no slot is free, keep it for later.
    fn send_control(&mut self, dest: Rank, kind: Kind) {
        let credits = self.acct.owed[dest as usize];
        if kind == Kind::Credit && credits == 0 {
            return;
        }
        match self.dev.raw_send_buffer(dest, HEADER) {
            Ok(slot) => {
                let h = Header {
                    kind,
                    flags: 0,
                    handler: 0,
                    credits,
                    msg_len: 0,
                };
                // SAFETY: the slot holds at least HEADER bytes.
                h.encode(unsafe { std::slice::from_raw_parts_mut(slot.ptr, HEADER) });
                self.dev.raw_send(slot, HEADER);
                self.acct.owed[dest as usize] -= credits;
                if kind == Kind::Credit {
                    self.stats.credit_packets += 1;
                }
            }
            Err(e) => {
                tracing::debug!(dest, error = %e, "fm: control packet deferred");
                if kind == Kind::Fin || !self.pending_control.contains(&(dest, kind)) {
                    self.pending_control.push((dest, kind));
                }
            }
        }
    }

    /// Retry control packets that found no slot earlier.
    #[inline]
    pub(crate) fn flush_control(&mut self) {
        if self.pending_control.is_empty() {
            return;
        }
        for (dest, kind) in std::mem::take(&mut self.pending_control) {
            self.send_control(dest, kind);
        }
    }

    /// One round of progress while a sender is stalled (no credit, or waiting
    /// for a completion). Returns whether anything arrived.
    fn progress_stalled(&mut self) -> Result<bool> {
        self.flush_control();
        match self.dev.raw_receive() {
            Some(r) => {
                self.absorb(r)?;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// The destination of the open outgoing message, if one is open.
    pub(crate) fn open_message_dest(&self) -> Option<Rank> {
        self.out.as_ref().map(|o| o.dest)
    }
}
