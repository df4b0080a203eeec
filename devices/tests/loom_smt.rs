//! Loom model of the SMT queue: several senders, one receiver, credits, wrap-around.
//!
//! The queue code is the production code (`fm_devices::shmem::queue`), run on
//! loom's atomics; frame payloads are loom cells, so a receiver reading a frame
//! a sender is still writing (or a sender overwriting a frame not yet released)
//! is reported as a data race.

use fm_devices::shmem::queue::{self, initial_slot_value, Atomic32, Atomic64, QueueMemory};
use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicU32, AtomicU64};
use loom::sync::Arc;
use std::sync::atomic::Ordering;

struct A32(AtomicU32);
struct A64(AtomicU64);

impl Atomic32 for A32 {
    fn load(&self, o: Ordering) -> u32 {
        self.0.load(o)
    }
    fn store(&self, v: u32, o: Ordering) {
        self.0.store(v, o)
    }
    fn fetch_add(&self, v: u32, o: Ordering) -> u32 {
        self.0.fetch_add(v, o)
    }
    fn swap(&self, v: u32, o: Ordering) -> u32 {
        self.0.swap(v, o)
    }
}
impl Atomic64 for A64 {
    fn load(&self, o: Ordering) -> u64 {
        self.0.load(o)
    }
    fn store(&self, v: u64, o: Ordering) {
        self.0.store(v, o)
    }
}

struct Model {
    frames: u32,
    slots: u32,
    exclusive: bool,
    free_head: A32,
    rq_tail: A32,
    starved: A32,
    slot_tags: Vec<A64>,
    in_use: Vec<A32>,
    /// Payload of each frame: (sender, sequence number).
    data: Vec<UnsafeCell<(u32, u32)>>,
    /// Payload carried inline in each slot.
    slot_data: Vec<UnsafeCell<(u32, u32)>>,
    /// Senders put odd sequence numbers inline instead of in a frame.
    inline_odd: bool,
    /// Credits each sender holds (returned by the receiver on release).
    credits: Vec<AtomicU32>,
}

impl QueueMemory for Model {
    type A32 = A32;
    type A64 = A64;
    fn frames(&self) -> u32 {
        self.frames
    }
    fn slots(&self) -> u32 {
        self.slots
    }
    fn exclusive(&self) -> bool {
        self.exclusive
    }
    fn free_head(&self) -> &A32 {
        &self.free_head
    }
    fn starved(&self) -> &A32 {
        &self.starved
    }
    fn fence(&self) {
        loom::sync::atomic::fence(Ordering::SeqCst);
    }
    fn rq_tail(&self) -> &A32 {
        &self.rq_tail
    }
    fn slot(&self, i: u32) -> &A64 {
        &self.slot_tags[i as usize]
    }
    fn in_use(&self, f: u32) -> &A32 {
        &self.in_use[f as usize]
    }
}

fn model(frames: u32, senders: u32, exclusive: bool) -> Arc<Model> {
    Arc::new(model_of(frames, senders, exclusive))
}

fn model_of(frames: u32, senders: u32, exclusive: bool) -> Model {
    pooled_model(frames, frames, senders, exclusive)
}

/// A queue of `slots` slots (credits: `slots / senders` each) and a pool
/// of `frames` frames its senders share.
fn pooled_model(slots: u32, frames: u32, senders: u32, exclusive: bool) -> Model {
    let window = slots / senders;
    Model {
        frames,
        slots,
        exclusive,
        free_head: A32(AtomicU32::new(0)),
        rq_tail: A32(AtomicU32::new(0)),
        starved: A32(AtomicU32::new(0)),
        slot_tags: (0..slots)
            .map(|i| A64(AtomicU64::new(initial_slot_value(i, slots))))
            .collect(),
        in_use: (0..frames).map(|_| A32(AtomicU32::new(0))).collect(),
        data: (0..frames).map(|_| UnsafeCell::new((0, 0))).collect(),
        slot_data: (0..slots).map(|_| UnsafeCell::new((0, 0))).collect(),
        inline_odd: false,
        credits: (0..senders).map(|_| AtomicU32::new(window)).collect(),
    }
}

/// Send up to `msgs` messages; a sender that finds no credit after a few
/// tries stops (every wait in the model is bounded, so loom's search is
/// finite). Returns how many it sent.
fn sender(m: &Model, me: u32, msgs: u32) -> u32 {
    for seq in 0..msgs {
        let mut credit = false;
        for _ in 0..3 {
            if m.credits[me as usize].load(Ordering::Acquire) > 0 {
                m.credits[me as usize].fetch_sub(1, Ordering::Relaxed);
                credit = true;
                break;
            }
            loom::thread::yield_now();
        }
        if !credit {
            return seq;
        }
        if m.inline_odd && seq % 2 == 1 {
            // Small packet: into the slot itself, tag stored last.
            queue::publish_inline(m, queue::INLINE, |i, _| {
                m.slot_data[i as usize].with_mut(|p| unsafe { *p = (me, seq) })
            });
            continue;
        }
        // Under adversarial scheduling another sender can take each free frame
        // just before we reach it; the queue then reports back-pressure after
        // 2F tries (fm retries later). Here: give the credit back and stop.
        let Some(f) = queue::acquire_frame(m) else {
            m.credits[me as usize].fetch_add(1, Ordering::Relaxed);
            return seq;
        };
        m.data[f as usize].with_mut(|p| unsafe { *p = (me, seq) });
        queue::publish(m, f);
    }
    msgs
}

/// Check and consume one message; returns whether there was one.
fn take_one(m: &Model, head: &mut u32, next: &mut [u32]) -> bool {
    let Some(f) = queue::poll(m, head) else {
        return false;
    };
    let slot = head.wrapping_sub(1) & (m.slots - 1);
    let (src, seq) = if f == queue::INLINE {
        m.slot_data[slot as usize].with(|p| unsafe { *p })
    } else {
        assert!(f < m.frames, "slot names a frame that does not exist");
        m.data[f as usize].with(|p| unsafe { *p })
    };
    assert_eq!(
        seq, next[src as usize],
        "per-sender FIFO order broken or message duplicated"
    );
    next[src as usize] += 1;
    if f != queue::INLINE {
        queue::release(m, f);
    }
    m.credits[src as usize].fetch_add(1, Ordering::Release);
    true
}

/// Run `senders` senders of `msgs` messages each against a receiver that polls
/// `polls` times while they run and drains the queue after they finish.
fn run(frames: u32, senders: u32, msgs: u32, exclusive: bool, polls: u32) {
    run_model(model(frames, senders, exclusive), senders, msgs, polls)
}

fn run_model(m: Arc<Model>, senders: u32, msgs: u32, polls: u32) {
    let hs: Vec<_> = (0..senders)
        .map(|me| {
            let m = m.clone();
            loom::thread::spawn(move || sender(&m, me, msgs))
        })
        .collect();
    let mut head = 0u32;
    let mut next = vec![0u32; senders as usize];
    for _ in 0..polls {
        if !take_one(&m, &mut head, &mut next) {
            loom::thread::yield_now();
        }
    }
    let sent: Vec<u32> = hs.into_iter().map(|h| h.join().unwrap()).collect();
    // Joining made every publication visible: the rest must all be there.
    while take_one(&m, &mut head, &mut next) {}
    if next != sent {
        let slots: Vec<u64> = (0..m.slots)
            .map(|i| m.slot_tags[i as usize].0.load(Ordering::SeqCst))
            .collect();
        let iu: Vec<u32> = (0..m.frames)
            .map(|i| m.in_use[i as usize].0.load(Ordering::SeqCst))
            .collect();
        panic!(
            "a message was lost: received {next:?} sent {sent:?}; head {head} tail {} free head {} slots {slots:x?} in_use {iu:?}",
            m.rq_tail.0.load(Ordering::SeqCst),
            m.free_head.0.load(Ordering::SeqCst)
        );
    }
}

/// Two senders share one queue of 2 frames (one credit each) and send 2
/// messages each: frames and slots wrap, senders leapfrog each other, and
/// every message arrives exactly once and in order per sender.
#[test]
fn two_senders_one_receiver_wraps() {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(|| run(2, 2, 2, false, 3));
}

/// The exclusive (one sender per queue, M = N) variant without read-modify-write.
#[test]
fn exclusive_sender_wraps() {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(|| run(2, 1, 4, true, 4));
}

/// Three senders on a queue of 4 frames (one credit each, plus spare frames).
#[test]
fn three_senders_one_receiver() {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(2);
    b.check(|| run(4, 3, 2, false, 3));
}

/// Two senders share a queue of 2 slots and alternate frame and inline
/// packets: an inline packet's slot is never rewritten while the receiver
/// reads it, and order and exactly-once hold across both kinds.
#[test]
fn inline_and_frame_packets_two_senders() {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(|| {
        let mut m = model_of(2, 2, false);
        m.inline_odd = true;
        run_model(Arc::new(m), 2, 2, 3)
    });
}

/// Two senders with two credits each share four slots and a pool of two
/// frames (PM's buffers per channel, the default for many local ranks): a
/// sender may find the pool empty while it has credit (back-pressure), and
/// slot and frame indices part ways; every message still arrives exactly
/// once and in order per sender.
#[test]
fn two_senders_share_a_pool_smaller_than_their_windows() {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(2);
    b.check(|| run_model(Arc::new(pooled_model(4, 2, 2, false)), 2, 3, 3));
}

/// The receive path when a receiver holds a packet while it goes on
/// receiving (an FM handler replying before it reads): one sender, two
/// slots, two credits. The receiver takes message 0 and holds it (its credit
/// not returned), then takes and releases the rest; with message 0 held, the
/// sender's next packets lap the ring, so message 2 is published into
/// message 0's slot. `copy_at_poll` is what the shmem device does (an
/// inline packet is copied out the moment it is polled, `ShmemDevice::accept`):
/// the held message stays intact. Read in place, it is overwritten.
fn hold_while_receiving(copy_at_poll: bool) {
    let mut m = model_of(2, 1, true);
    m.inline_odd = false;
    let m = Arc::new(m);
    let s = {
        let m = m.clone();
        loom::thread::spawn(move || {
            // Every message inline, as the small requests of the bug.
            for seq in 0..3u32 {
                while m.credits[0].load(Ordering::Acquire) == 0 {
                    loom::thread::yield_now();
                }
                m.credits[0].fetch_sub(1, Ordering::Relaxed);
                queue::publish_inline(&*m, queue::INLINE, |i, _| {
                    m.slot_data[i as usize].with_mut(|p| unsafe { *p = (0, seq) })
                });
            }
        })
    };
    let mut head = 0u32;
    let poll = |head: &mut u32| loop {
        if let Some(f) = queue::poll(&*m, head) {
            assert_eq!(f, queue::INLINE);
            return head.wrapping_sub(1) & (m.slots - 1);
        }
        loom::thread::yield_now();
    };
    let first_slot = poll(&mut head);
    let copy = copy_at_poll.then(|| m.slot_data[first_slot as usize].with(|p| unsafe { *p }));
    for seq in 1..3u32 {
        let slot = poll(&mut head);
        let got = m.slot_data[slot as usize].with(|p| unsafe { *p });
        assert_eq!(got, (0, seq));
        m.credits[0].fetch_add(1, Ordering::Release); // released
    }
    s.join().unwrap();
    let held = copy.unwrap_or_else(|| m.slot_data[first_slot as usize].with(|p| unsafe { *p }));
    assert_eq!(held, (0, 0), "the held packet was overwritten");
}

#[test]
fn a_held_inline_packet_copied_at_poll_survives_later_packets() {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(|| hold_while_receiving(true));
}

/// The model is not blind: read in place (the old device), the held packet
/// is overwritten.
#[test]
#[should_panic(expected = "overwritten")]
fn a_held_inline_packet_read_in_place_is_overwritten() {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(|| hold_while_receiving(false));
}
