//! Loom model of the doorbell (`fm_devices::doorbell`): arm, re-check,
//! sleep against publish, ring. The protocol functions are the production
//! ones, run on loom's atomics; the futex is modelled as the kernel keeps
//! it — the word is compared under the futex's lock, and a wake with nobody
//! asleep is lost — so a lost wake-up shows as a deadlock, which loom
//! reports.
//!
//! Every test explores all executions with up to three preemptions (as
//! loom's own guide suggests: bugs need few, and the search stays within
//! seconds). Run with `cargo test -p fm-devices --test loom_doorbell`.

use fm_devices::doorbell::{self, BellWord};
use fm_devices::shmem::queue::Atomic32;
use loom::sync::atomic::{AtomicBool, AtomicU32};
use loom::sync::{Arc, Condvar, Mutex};
use std::sync::atomic::Ordering;
use std::sync::atomic::Ordering::{Relaxed, Release, SeqCst};
use std::time::Duration;

/// The futex: who sleeps, and whether a wake reached them.
#[derive(Default)]
struct Sleepers {
    asleep: u32,
    /// Wakes delivered to the current sleepers.
    woken: u32,
}

struct Word {
    value: AtomicU32,
    futex: Mutex<Sleepers>,
    cv: Condvar,
}

impl Word {
    fn new() -> Word {
        Word {
            value: AtomicU32::new(doorbell::AWAKE),
            futex: Mutex::new(Sleepers::default()),
            cv: Condvar::new(),
        }
    }
}

impl Atomic32 for Word {
    fn load(&self, o: Ordering) -> u32 {
        self.value.load(o)
    }
    fn store(&self, v: u32, o: Ordering) {
        self.value.store(v, o)
    }
    fn fetch_add(&self, v: u32, o: Ordering) -> u32 {
        self.value.fetch_add(v, o)
    }
    fn swap(&self, v: u32, o: Ordering) -> u32 {
        self.value.swap(v, o)
    }
}

impl BellWord for Word {
    fn fence(&self) {
        loom::sync::atomic::fence(SeqCst)
    }
    fn wait(&self, expected: u32, _timeout: Option<Duration>) {
        // No timeout in the model: a sleeper nobody wakes is a deadlock.
        let mut s = self.futex.lock().unwrap();
        if self.value.load(Relaxed) != expected {
            return;
        }
        s.asleep += 1;
        while s.woken == 0 {
            s = self.cv.wait(s).unwrap();
        }
        s.woken -= 1;
        s.asleep -= 1;
    }
    fn wake_all(&self) {
        let mut s = self.futex.lock().unwrap();
        s.woken = s.asleep;
        self.cv.notify_all();
    }
}

/// Explore `f`'s executions, up to three preemptions each.
fn check(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(3);
    b.check(f);
}

/// A mailbox the waiter re-checks: what a device's queue is to the rank.
struct Mailbox {
    bell: Word,
    full: AtomicBool,
}

/// The waiter's loop, as `fm::wait` runs it: poll, arm, re-check, sleep.
fn wait_for_mail(m: &Mailbox) {
    loop {
        if m.full.load(loom::sync::atomic::Ordering::Acquire) {
            return;
        }
        doorbell::arm(&m.bell);
        if m.full.load(loom::sync::atomic::Ordering::Acquire) {
            doorbell::disarm(&m.bell);
            return;
        }
        doorbell::sleep(&m.bell, None);
    }
}

fn post(m: &Mailbox) {
    m.full.store(true, Release);
    doorbell::ring(&m.bell);
}

#[test]
fn no_wake_up_is_lost() {
    check(|| {
        let m = Arc::new(Mailbox {
            bell: Word::new(),
            full: AtomicBool::new(false),
        });
        let s = m.clone();
        let sender = loom::thread::spawn(move || post(&s));
        wait_for_mail(&m);
        sender.join().unwrap();
    });
}

#[test]
fn two_senders_one_sleeper() {
    check(|| {
        let m = Arc::new(Mailbox {
            bell: Word::new(),
            full: AtomicBool::new(false),
        });
        let senders: Vec<_> = (0..2)
            .map(|_| {
                let s = m.clone();
                loom::thread::spawn(move || post(&s))
            })
            .collect();
        wait_for_mail(&m);
        for s in senders {
            s.join().unwrap();
        }
    });
}

/// Two rounds: a ring meant for the first sleep must not leave the second
/// one without its wake-up (the waiter disarms and re-arms in between).
#[test]
fn a_second_sleep_after_a_first() {
    check(|| {
        let m = Arc::new([0, 1].map(|_| Mailbox {
            bell: Word::new(),
            full: AtomicBool::new(false),
        }));
        // One doorbell for both mailboxes, as one process has one.
        let s = m.clone();
        let sender = loom::thread::spawn(move || {
            post_to(&s, 0);
            post_to(&s, 1);
        });
        wait_on(&m, 0);
        wait_on(&m, 1);
        sender.join().unwrap();
    });

    fn post_to(m: &[Mailbox; 2], i: usize) {
        m[i].full.store(true, Release);
        doorbell::ring(&m[0].bell);
    }
    fn wait_on(m: &[Mailbox; 2], i: usize) {
        let bell = &m[0].bell;
        loop {
            if m[i].full.load(loom::sync::atomic::Ordering::Acquire) {
                return;
            }
            doorbell::arm(bell);
            if m[i].full.load(loom::sync::atomic::Ordering::Acquire) {
                doorbell::disarm(bell);
                return;
            }
            doorbell::sleep(bell, None);
        }
    }
}

/// The checker catches the bug it is for: a ringer that skips the fence
/// (on the model's memory the waiter's re-check can then miss the packet
/// while the ringer misses the arm) deadlocks in some execution.
#[test]
fn a_ring_without_its_fence_is_caught() {
    let found = std::panic::catch_unwind(|| {
        check(|| {
            let m = Arc::new(Mailbox {
                bell: Word::new(),
                full: AtomicBool::new(false),
            });
            let s = m.clone();
            let sender = loom::thread::spawn(move || {
                s.full.store(true, Release);
                // The broken ring: no fence before the load.
                if s.bell.load(Relaxed) == doorbell::ARMED {
                    s.bell.store(doorbell::AWAKE, Relaxed);
                    s.bell.wake_all();
                }
            });
            wait_for_mail(&m);
            sender.join().unwrap();
        });
    });
    assert!(
        found.is_err(),
        "loom found no lost wake-up without the fence"
    );
}
