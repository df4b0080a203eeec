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
    exclusive: bool,
    free_head: A32,
    rq_tail: A32,
    slots: Vec<A64>,
    in_use: Vec<A32>,
    /// Payload of each frame: (sender, sequence number).
    data: Vec<UnsafeCell<(u32, u32)>>,
    /// Credits each sender holds (returned by the receiver on release).
    credits: Vec<AtomicU32>,
    /// Model-only: publications so far (see `receive_all`).
    published: AtomicU32,
}

impl QueueMemory for Model {
    type A32 = A32;
    type A64 = A64;
    fn frames(&self) -> u32 {
        self.frames
    }
    fn exclusive(&self) -> bool {
        self.exclusive
    }
    fn free_head(&self) -> &A32 {
        &self.free_head
    }
    fn rq_tail(&self) -> &A32 {
        &self.rq_tail
    }
    fn slot(&self, i: u32) -> &A64 {
        &self.slots[i as usize]
    }
    fn in_use(&self, f: u32) -> &A32 {
        &self.in_use[f as usize]
    }
}

fn model(frames: u32, senders: u32, exclusive: bool) -> Arc<Model> {
    let window = frames / senders;
    Arc::new(Model {
        frames,
        exclusive,
        free_head: A32(AtomicU32::new(0)),
        rq_tail: A32(AtomicU32::new(0)),
        slots: (0..frames)
            .map(|i| A64(AtomicU64::new(initial_slot_value(i, frames))))
            .collect(),
        in_use: (0..frames).map(|_| A32(AtomicU32::new(0))).collect(),
        data: (0..frames).map(|_| UnsafeCell::new((0, 0))).collect(),
        credits: (0..senders).map(|_| AtomicU32::new(window)).collect(),
        published: AtomicU32::new(0),
    })
}

fn sender(m: &Model, me: u32, msgs: u32) {
    for seq in 0..msgs {
        // FM credit: wait for one (the receiver returns it on release).
        loop {
            // An RMW, not a load: see the note in `receive_all`.
            let c = m.credits[me as usize].fetch_add(0, Ordering::Acquire);
            if c > 0 {
                m.credits[me as usize].fetch_sub(1, Ordering::Relaxed);
                break;
            }
            loom::thread::yield_now();
        }
        let f = queue::acquire_frame(m).expect("credits guarantee a free frame");
        m.data[f as usize].with_mut(|p| unsafe { *p = (me, seq) });
        queue::publish(m, f);
        m.published.fetch_add(1, Ordering::Release);
    }
}

fn receive_all(m: &Model, senders: u32, msgs: u32) {
    let mut head = 0u32;
    let mut next = vec![0u32; senders as usize];
    let mut got = 0;
    while got < senders * msgs {
        match queue::poll(m, &mut head) {
            Some(f) => {
                assert!(f < m.frames, "slot names a frame that does not exist");
                let (src, seq) = m.data[f as usize].with(|p| unsafe { *p });
                assert_eq!(seq, next[src as usize], "per-sender FIFO order broken");
                next[src as usize] += 1;
                queue::release(m, f);
                m.credits[src as usize].fetch_add(1, Ordering::Release);
                got += 1;
            }
            None => {
                // Loom may let a spinning load return the same old value
                // forever (legal in C11, never on hardware). This read-modify-
                // write of a model-only counter always sees the latest
                // publication, so the next poll sees every slot stored before it.
                m.published.fetch_add(0, Ordering::AcqRel);
                loom::thread::yield_now()
            }
        }
    }
    assert!(
        queue::poll(m, &mut head).is_none(),
        "extra message delivered"
    );
}

/// Two senders share one queue of 2 frames and each sends 2 messages: the
/// rings wrap, senders leapfrog each other, and every message arrives exactly
/// once and in order per sender.
#[test]
fn two_senders_one_receiver_wraps() {
    let mut b = loom::model::Builder::new();
    b.max_branches = 100_000;
    b.check(|| {
        let m = model(2, 2, false);
        let hs: Vec<_> = (0..2)
            .map(|me| {
                let m = m.clone();
                loom::thread::spawn(move || sender(&m, me, 2))
            })
            .collect();
        receive_all(&m, 2, 2);
        for h in hs {
            h.join().unwrap();
        }
    });
}

/// The exclusive (one sender per queue, M = N) variant without read-modify-write.
#[test]
fn exclusive_sender_wraps() {
    loom::model(|| {
        let m = model(2, 1, true);
        let s = {
            let m = m.clone();
            loom::thread::spawn(move || sender(&m, 0, 4))
        };
        receive_all(&m, 1, 4);
        s.join().unwrap();
    });
}
