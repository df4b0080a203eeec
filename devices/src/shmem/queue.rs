//! The SMT queue of HPVM 1.9 (paper 000, section 5), independent of where its
//! memory lives, so that the same code runs on a mapped segment and under loom.
//!
//! A receiver owns a *free list* — a ring of `F` frames (power of two), each
//! with an in-use flag — and a *receive queue* — a ring of `S` slots (power
//! of two) holding frame indices.
//!
//! Send:
//! 1. fetch-and-increment the free-list head to pick a frame;
//! 2. test-and-set its in-use flag; if it was taken, go back to 1 (a sender
//!    descheduled while copying holds its frame, and the others leapfrog it);
//! 3. copy the packet into the frame (caller);
//! 4. fetch-and-increment the receive-queue tail;
//! 5. store the frame index into that slot, last, with Release.
//!
//! Receive: load the slot at the receiver's private head with Acquire (the
//! memory-notified poll: one cache line that stays in cache until a sender
//! writes it); on a hit advance the head, read the frame in place, then clear
//! its in-use flag with Release.
//!
//! Each slot value carries the queue position it was written for
//! (`position << 32 | frame`), so a slot never needs clearing and a value from
//! an earlier lap is never mistaken for a new one.
//!
//! Flow control (FM credits) guarantees that senders never have more than `S`
//! packets in one queue together, so a slot is always consumed before its
//! position comes round again. The frames are a pool the queue's senders
//! share (PM's receive buffers per channel, not per peer): with `F < S` a
//! sender can find every frame in use, is told so ([`acquire_frame`] gives
//! `None`, the device `NoBuffer`) and tries again once the receiver has
//! released one — which every waiting FM rank keeps doing (the credit rule,
//! `fm-api/src/endpoint.rs`). [`mark_starved`] and [`take_starved`] let a
//! receiver wake such a sender when it may sleep.
//!
//! With exactly one possible sender per queue (M = N), steps 1, 2 and 4 need
//! no read-modify-write: the paper's "no synchronization primitives are needed
//! in the queues" case. [`QueueMemory::exclusive`] selects it.

use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, Release};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// The 32-bit atomic operations the queue needs.
pub trait Atomic32 {
    fn load(&self, order: Ordering) -> u32;
    fn store(&self, v: u32, order: Ordering);
    fn fetch_add(&self, v: u32, order: Ordering) -> u32;
    fn swap(&self, v: u32, order: Ordering) -> u32;
}

/// The 64-bit atomic operations the queue needs.
pub trait Atomic64 {
    fn load(&self, order: Ordering) -> u64;
    fn store(&self, v: u64, order: Ordering);
}

impl Atomic32 for AtomicU32 {
    #[inline(always)]
    fn load(&self, o: Ordering) -> u32 {
        AtomicU32::load(self, o)
    }
    #[inline(always)]
    fn store(&self, v: u32, o: Ordering) {
        AtomicU32::store(self, v, o)
    }
    #[inline(always)]
    fn fetch_add(&self, v: u32, o: Ordering) -> u32 {
        AtomicU32::fetch_add(self, v, o)
    }
    #[inline(always)]
    fn swap(&self, v: u32, o: Ordering) -> u32 {
        AtomicU32::swap(self, v, o)
    }
}

impl Atomic64 for AtomicU64 {
    #[inline(always)]
    fn load(&self, o: Ordering) -> u64 {
        AtomicU64::load(self, o)
    }
    #[inline(always)]
    fn store(&self, v: u64, o: Ordering) {
        AtomicU64::store(self, v, o)
    }
}

/// Where one queue's control words, slots and in-use flags are.
pub trait QueueMemory {
    type A32: Atomic32;
    type A64: Atomic64;
    /// Number of frames in the pool: a power of two.
    fn frames(&self) -> u32;
    /// Number of slots in the receive queue: a power of two.
    fn slots(&self) -> u32;
    /// Whether at most one process ever sends into this queue.
    fn exclusive(&self) -> bool;
    fn free_head(&self) -> &Self::A32;
    fn rq_tail(&self) -> &Self::A32;
    /// Non-zero: a sender found no free frame ([`mark_starved`]).
    fn starved(&self) -> &Self::A32;
    /// Slot `i`, `i < slots()`.
    fn slot(&self, i: u32) -> &Self::A64;
    /// In-use flag of frame `i`, `i < frames()`.
    fn in_use(&self, frame: u32) -> &Self::A32;
    /// Record in frame `frame` the position it is being published at (so a
    /// receiver can tell it from a frame a stray write named); nothing
    /// where frames have no header (the model).
    fn stamp_frame(&self, frame: u32, position: u32) {
        let _ = (frame, position);
    }
    /// A sequentially consistent fence (loom's, under the model).
    fn fence(&self) {
        std::sync::atomic::fence(Ordering::SeqCst);
    }
}

/// The slot value that says "position `pos` holds `frame`".
#[inline(always)]
pub fn slot_value(pos: u32, frame: u32) -> u64 {
    ((pos as u64) << 32) | frame as u64
}

/// Whether slot value `v` was written for position `pos`.
#[inline(always)]
fn holds_position(v: u64, pos: u32) -> bool {
    (v >> 32) as u32 == pos
}

/// A tag's low word with this bit set says "the packet is in the slot
/// itself" (frame indices are far below it); the device puts the packet's
/// length and source in the rest, to check the slot's own copy against.
pub const INLINE_FLAG: u32 = 1 << 31;

/// An inline tag that says nothing more (the model; received tokens).
pub const INLINE: u32 = u32::MAX - 1;

/// Whether a tag's low word says the packet is in the slot itself.
#[inline(always)]
pub fn is_inline(f: u32) -> bool {
    f & INLINE_FLAG != 0
}

/// The value a fresh slot `i` starts with: a position one lap back, no frame.
pub fn initial_slot_value(i: u32, slots: u32) -> u64 {
    slot_value(i.wrapping_sub(slots), u32::MAX)
}

/// Ask for the cache line at `p` to be brought into this core's cache,
/// ready to be written (x86's PREFETCHW); elsewhere, nothing.
#[inline(always)]
fn prefetch_for_write(p: *const i8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is only a hint; it never faults.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_ET0};
        _mm_prefetch::<_MM_HINT_ET0>(p);
    }
}

/// Steps 1–2: take a free frame. `None` when `2 × F` candidates were all
/// taken, which the credit protocol rules out; the caller reports back-pressure.
#[inline]
pub fn acquire_frame<Q: QueueMemory>(q: &Q) -> Option<u32> {
    let mask = q.frames() - 1;
    if q.exclusive() {
        // Single sender: frames come back in the order they were used.
        for _ in 0..2 * q.frames() {
            let h = q.free_head().load(Relaxed);
            q.free_head().store(h.wrapping_add(1), Relaxed);
            let f = h & mask;
            if q.in_use(f).load(Acquire) == 0 {
                q.in_use(f).store(1, Relaxed);
                // The next send's frame: its header's line was last written
                // by the receiver when it freed the frame. Asking for it now,
                // while this send is being filled, takes that line's trip
                // between cores off the next send's path (measured with the
                // MPI ping-pong, docs/PERFORMANCE.md).
                prefetch_for_write(std::ptr::from_ref(q.in_use(h.wrapping_add(1) & mask)).cast());
                return Some(f);
            }
        }
        return None;
    }
    for _ in 0..2 * q.frames() {
        let f = q.free_head().fetch_add(1, Relaxed) & mask;
        if q.in_use(f).swap(1, Acquire) == 0 {
            return Some(f);
        }
    }
    None
}

/// Steps 4–5: put a filled frame on the receive queue, at the position
/// returned.
#[inline]
pub fn publish<Q: QueueMemory>(q: &Q, frame: u32) -> u32 {
    let pos = if q.exclusive() {
        let t = q.rq_tail().load(Relaxed);
        q.rq_tail().store(t.wrapping_add(1), Relaxed);
        t
    } else {
        // AcqRel, not Relaxed: a sender whose position comes one lap after a
        // slow sender's must store after it. The chain is: slow store →
        // receiver reads it → receiver frees a frame → a sender takes it and
        // increments the tail (Release) → we increment (Acquire) → our store.
        // With Relaxed, C11 lets our store precede the slow one in the slot's
        // modification order and the message is lost (found by loom).
        q.rq_tail().fetch_add(1, AcqRel)
    };
    q.stamp_frame(frame, pos);
    q.slot(pos & (q.slots() - 1))
        .store(slot_value(pos, frame), Release);
    pos
}

/// Steps 4–5 for a packet carried in the slot itself (an extension of the
/// paper's queue for small packets: no frame is taken, and the receiver
/// reads one cache line). `fill(index, position)` writes the slot's inline
/// area, then the tag is stored last, as for a frame index, with `marker`
/// (which has [`INLINE_FLAG`]) for the frame.
#[inline]
pub fn publish_inline<Q: QueueMemory>(q: &Q, marker: u32, fill: impl FnOnce(u32, u32)) -> u32 {
    let pos = if q.exclusive() {
        let t = q.rq_tail().load(Relaxed);
        q.rq_tail().store(t.wrapping_add(1), Relaxed);
        t
    } else {
        // AcqRel for the same reason as in `publish`.
        q.rq_tail().fetch_add(1, AcqRel)
    };
    let i = pos & (q.slots() - 1);
    fill(i, pos);
    debug_assert!(is_inline(marker));
    q.slot(i).store(slot_value(pos, marker), Release);
    pos
}

/// Give a frame back without publishing it.
#[inline]
pub fn abandon<Q: QueueMemory>(q: &Q, frame: u32) {
    q.in_use(frame).store(0, Release);
}

/// Receive: the frame at `head`, if a sender has published it. The returned
/// index is whatever the slot holds: callers check it is `< frames()`.
#[inline(always)]
pub fn poll<Q: QueueMemory>(q: &Q, head: &mut u32) -> Option<u32> {
    let h = *head;
    let v = q.slot(h & (q.slots() - 1)).load(Acquire);
    if holds_position(v, h) {
        *head = h.wrapping_add(1);
        Some(v as u32)
    } else {
        None
    }
}

/// Whether the slot at `head` is published (a [`poll`] that does not take it).
#[inline]
pub fn published<Q: QueueMemory>(q: &Q, head: u32) -> bool {
    let v = q.slot(head & (q.slots() - 1)).load(Acquire);
    holds_position(v, head)
}

/// Receive, last step: the frame is free again.
#[inline(always)]
pub fn release<Q: QueueMemory>(q: &Q, frame: u32) {
    q.in_use(frame).store(0, Release);
}

/// A sender found no free frame and may sleep: flag the queue, so that the
/// receiver's next [`take_starved`] says to wake it, then look again
/// ([`has_free_frame`]) — a frame released before the receiver could see
/// the flag is seen here (the fences pair: one side or the other sees the
/// other's store).
#[inline]
pub fn mark_starved<Q: QueueMemory>(q: &Q) {
    q.starved().store(1, Relaxed);
    q.fence();
}

/// Whether some frame of the pool is free now (a look that takes nothing).
pub fn has_free_frame<Q: QueueMemory>(q: &Q) -> bool {
    (0..q.frames()).any(|f| q.in_use(f).load(Relaxed) == 0)
}

/// After [`release`], with a pool senders can exhaust: whether a sender
/// flagged the queue as starved (the flag is cleared), so the receiver
/// wakes the queue's senders.
#[inline]
pub fn take_starved<Q: QueueMemory>(q: &Q) -> bool {
    q.fence();
    q.starved().load(Relaxed) != 0 && q.starved().swap(0, Relaxed) != 0
}
