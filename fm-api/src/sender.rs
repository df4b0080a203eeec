//! Several threads sending through one endpoint.
//!
//! An [`Fm`](crate::Fm) is used by one thread at a time (its calls take
//! `&mut self`, and nothing on its paths takes a lock). Other threads send
//! through an [`FmSender`]: `send` copies the message into the endpoint's
//! outbox and rings the process's doorbell; the thread that owns the `Fm`
//! sends what the outbox holds, in the order it was queued, at the start
//! of its next `extract` (and so in `extract_wait`, `barrier`, …, which
//! wake for it). Messages of one sending thread therefore reach each
//! destination exactly once and in the order that thread sent them, as
//! the owner's own do; an owner that does not extract sends nothing of
//! theirs, and the outbox's bound (4 MiB) then holds the senders back.
//!
//! The bound never holds back the owner's own thread: a handler (or main
//! code) sending through an `FmSender` of its own `Fm` would otherwise wait
//! for room that only its own next `extract` makes, for ever. Its messages
//! are queued past the bound and go out at that `extract`.
//!
//! The owner's fast path pays one branch on whether a sender was ever made
//! and, once one was, a thread-local read and two relaxed loads per
//! `extract` (who owns it, and whether anything is queued).

use crate::error::{ErrorKind, Result};
use crate::extract::RESERVED_HANDLERS;
use fm_devices::doorbell::Doorbell;
use fm_devices::Rank;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// A sender waiting this long for room says why it may be waiting for ever.
const STALL_REPORT_AFTER: std::time::Duration = std::time::Duration::from_secs(2);

/// Bytes the outbox holds at most; a sender waits for room (a message
/// larger than this waits for an empty outbox).
pub const OUTBOX_BYTES: usize = 4 << 20;

/// A message queued by another thread.
pub(crate) struct Queued {
    pub dest: Rank,
    pub handler: u16,
    pub data: Vec<u8>,
}

#[derive(Default)]
struct Queue {
    messages: VecDeque<Queued>,
    bytes: usize,
}

/// The owner's side and the senders' side meet here.
pub(crate) struct Outbox {
    queue: Mutex<Queue>,
    /// Signalled when the owner took messages out (room for a sender).
    room: Condvar,
    /// Messages queued: what the owner's `extract` and its sleep look at.
    pending: AtomicUsize,
    /// The owner is gone: senders fail.
    closed: AtomicBool,
    /// The thread that sends the outbox ([`thread_no`]): the one that last
    /// extracted, or made a sender.
    owner: AtomicU64,
    /// The endpoint's wait limit in milliseconds (0: none), for senders
    /// waiting for room.
    limit_ms: AtomicU64,
    bell: Arc<Doorbell>,
    size: usize,
}

impl Outbox {
    pub(crate) fn new(bell: Arc<Doorbell>, size: usize) -> Arc<Outbox> {
        Arc::new(Outbox {
            queue: Mutex::new(Queue::default()),
            room: Condvar::new(),
            pending: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
            owner: AtomicU64::new(thread_no()),
            limit_ms: AtomicU64::new(0),
            bell,
            size,
        })
    }

    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether messages wait to be sent.
    #[inline(always)]
    pub(crate) fn pending(&self) -> bool {
        self.pending.load(Ordering::Relaxed) > 0
    }

    /// Owner: this thread sends the outbox (at each `extract`).
    #[inline]
    pub(crate) fn owned_here(&self) {
        let me = thread_no();
        if self.owner.load(Ordering::Relaxed) != me {
            self.owner.store(me, Ordering::Relaxed);
        }
    }

    /// Owner: the endpoint's wait limit, which senders waiting for room keep too.
    pub(crate) fn set_limit(&self, limit: Option<std::time::Duration>) {
        let ms = limit.map_or(0, |l| (l.as_millis() as u64).max(1));
        self.limit_ms.store(ms, Ordering::Relaxed);
    }

    /// Owner: the oldest queued message.
    pub(crate) fn pop(&self) -> Option<Queued> {
        let mut q = self.lock();
        let m = q.messages.pop_front()?;
        q.bytes -= m.data.len();
        self.pending.fetch_sub(1, Ordering::Relaxed);
        drop(q);
        self.room.notify_all();
        Some(m)
    }

    /// Owner: the endpoint is going away.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        let _q = self.lock();
        self.room.notify_all();
    }
}

/// A handle through which any thread sends on an endpoint it does not own
/// ([`Endpoint::sender`](crate::Endpoint::sender)); `Clone` and `Send`.
///
/// ```
/// let mut fm = fm::Fm::builder()
///     .handler(1, "hello", |m| {
///         println!("{:?}", String::from_utf8_lossy(&m.receive_vec()?));
///         Ok(())
///     })
///     .config(fm::Config::local(0, 1, fm::JobKey(7)))
///     .build()?;
/// let sender = fm.sender();
/// std::thread::spawn(move || sender.send(0, 1, b"from a thread"))
///     .join()
///     .expect("thread")?;
/// fm.extract_wait(usize::MAX)?; // sends it, then runs its handler
/// # Ok::<(), fm::FmError>(())
/// ```
#[derive(Clone)]
pub struct FmSender {
    outbox: Arc<Outbox>,
}

impl FmSender {
    pub(crate) fn new(outbox: Arc<Outbox>) -> FmSender {
        FmSender { outbox }
    }

    /// Queue a message of `data` for `handler` at `dest`; the owner sends
    /// it at its next `extract`. Waits while the outbox is full, except on
    /// the owner's own thread (module docs), and at most the `Fm`'s wait
    /// limit ([`Endpoint::set_wait_timeout`](crate::Endpoint::set_wait_timeout));
    /// fails once the `Fm` is dropped. A send that fails at the owner (an
    /// unreachable peer) comes back from the owner's `extract`.
    pub fn send(&self, dest: Rank, handler: u16, data: &[u8]) -> Result<()> {
        let o = &self.outbox;
        if dest as usize >= o.size {
            return Err(ErrorKind::NoSuchRank {
                rank: dest,
                size: o.size,
            }
            .into());
        }
        if handler >= RESERVED_HANDLERS {
            return Err(ErrorKind::Config(format!(
                "handler ID {handler:#x} is reserved for fm (use IDs below {RESERVED_HANDLERS:#x})"
            ))
            .into());
        }
        let on_owner_thread = o.owner.load(Ordering::Relaxed) == thread_no();
        let mut q = o.lock();
        // The clock is read only once a send has to wait.
        let mut since = None;
        let mut reported = false;
        while waits_for_room(on_owner_thread, q.messages.len(), q.bytes, data.len()) {
            if o.closed.load(Ordering::SeqCst) {
                break;
            }
            let waited = since.get_or_insert_with(std::time::Instant::now).elapsed();
            let limit_ms = o.limit_ms.load(Ordering::Relaxed);
            if limit_ms != 0 && waited.as_millis() >= u128::from(limit_ms) {
                return Err(ErrorKind::Timeout {
                    what: "room in the outbox of the thread that owns the Fm",
                    ms: u128::from(limit_ms),
                }
                .into());
            }
            if !reported && waited >= STALL_REPORT_AFTER {
                reported = true;
                tracing::warn!(
                    queued = q.messages.len(),
                    queued_bytes = q.bytes,
                    "fm: a thread has waited {} s to queue a message on an FmSender: the \
                     thread that owns the Fm sends what is queued only when it extracts; is \
                     it waiting for this thread (a join, a lock) instead?",
                    waited.as_secs()
                );
            }
            q = o
                .room
                .wait_timeout(q, std::time::Duration::from_millis(250))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        if o.closed.load(Ordering::SeqCst) {
            return Err(ErrorKind::Config("the Fm of this sender was dropped".into()).into());
        }
        q.bytes += data.len();
        q.messages.push_back(Queued {
            dest,
            handler,
            data: data.to_vec(),
        });
        o.pending.fetch_add(1, Ordering::Relaxed);
        drop(q);
        // The owner may sleep: its re-check looks at `pending`.
        o.bell.ring();
        Ok(())
    }
}

/// Whether a sender waits for room before queueing `len` bytes behind
/// `queued` messages of `queued_bytes`: while they and it would pass the
/// bound (a message larger than the bound waits for an empty outbox) —
/// except on the owner's thread, since only that thread makes room.
#[inline]
pub(crate) fn waits_for_room(
    on_owner_thread: bool,
    queued: usize,
    queued_bytes: usize,
    len: usize,
) -> bool {
    !on_owner_thread && queued > 0 && queued_bytes + len > OUTBOX_BYTES
}

/// A number for the calling thread, unique in this process (std's
/// `ThreadId::as_u64` is not stable).
fn thread_no() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    thread_local! {
        static NO: u64 = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    NO.with(|n| *n)
}
