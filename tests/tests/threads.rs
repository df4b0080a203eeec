//! Threads: an `Fm` moves between threads, and other threads send through
//! an `FmSender` while its owner extracts — each thread's messages exactly
//! once, in its order, intact. (The same across processes, the owner
//! sleeping: `tests/tests/multiprocess.rs`, `threads_send_through_one_endpoint`.)

use fm::{Config, Fm, JobKey};
use fm_tests::threads::{thread_message as message, ThreadsSeen};
use std::sync::{Arc, Mutex};

const DATA: u16 = 1;
const THREADS: u64 = 4;
const PER_THREAD: u64 = 3000;

#[test]
fn an_fm_moves_to_another_thread() {
    let fm = Fm::builder()
        .config(Config::local(0, 1, JobKey(11)))
        .build()
        .expect("one-rank job");
    let rank = std::thread::spawn(move || {
        let mut fm = fm;
        fm.barrier().map(|()| fm.rank())
    })
    .join()
    .expect("thread");
    assert_eq!(rank.expect("barrier"), 0);
}

#[test]
fn four_threads_send_through_one_endpoint_while_the_owner_extracts() {
    let check = Arc::new(Mutex::new(ThreadsSeen::new(THREADS as usize)));
    let c = check.clone();
    let mut fm = Fm::builder()
        .handler(DATA, "data", move |m| {
            let bytes = m.receive_vec()?;
            c.lock().unwrap().see(&bytes);
            Ok(())
        })
        .config(Config::local(0, 1, JobKey(12)))
        .build()
        .expect("one-rank job");
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let s = fm.sender();
            std::thread::spawn(move || {
                (0..PER_THREAD).try_for_each(|seq| s.send(0, DATA, &message(t, seq)))
            })
        })
        .collect();
    let all = THREADS * PER_THREAD;
    // A message lost fails the wait rather than hanging the test.
    fm.set_wait_timeout(Some(std::time::Duration::from_secs(30)));
    while fm.stats().messages_received < all {
        fm.extract_wait(usize::MAX).expect("extract");
    }
    for t in threads {
        t.join().expect("thread").expect("send");
    }
    fm.extract(usize::MAX).expect("extract");
    let c = check.lock().unwrap();
    assert!(
        c.errors.is_empty(),
        "{:?}",
        &c.errors[..c.errors.len().min(5)]
    );
    assert_eq!(c.next, vec![PER_THREAD; THREADS as usize]);
    assert_eq!(fm.stats().messages_received, all);
}

#[test]
fn the_checker_catches_a_lost_a_repeated_and_a_corrupted_message() {
    let mut c = ThreadsSeen::new(2);
    c.see(&message(0, 0));
    c.see(&message(0, 2)); // seq 1 lost
    c.see(&message(1, 0));
    c.see(&message(1, 0)); // repeated
    let mut bad = message(1, 1);
    *bad.last_mut().unwrap() ^= 1;
    c.see(&bad); // corrupted
    assert_eq!(c.errors.len(), 3, "{:?}", c.errors);
}

#[test]
fn a_sender_checks_its_arguments_and_fails_once_its_fm_is_gone() {
    let mut fm = Fm::builder()
        .config(Config::local(0, 1, JobKey(13)))
        .build()
        .expect("one-rank job");
    let s = fm.sender();
    let e = s.send(5, DATA, b"x").unwrap_err();
    assert!(
        matches!(e.kind(), fm::ErrorKind::NoSuchRank { rank: 5, .. }),
        "{e}"
    );
    assert!(s.send(0, fm::RESERVED_HANDLERS, b"x").is_err());
    drop(fm);
    let e = s.send(0, DATA, b"x").unwrap_err();
    assert!(e.to_string().contains("dropped"), "{e}");
}

/// The outbox's bound holds back other threads, never the owner's own: a
/// handler, or main code, sending through an `FmSender` of its own `Fm`
/// past the bound waited for room that only its own next `extract` makes,
/// for ever (on 67f5fab both calls below hang). Each message still arrives
/// exactly once, intact.
#[test]
fn the_owner_sending_through_its_own_sender_past_the_bound_does_not_wait_for_itself() {
    const BIG: usize = 3 << 20; // two are past the outbox's 4 MiB
    let slot: Arc<std::sync::OnceLock<fm::FmSender>> = Arc::default();
    let got: Arc<Mutex<Vec<(u8, usize)>>> = Arc::default();
    let (s, g) = (slot.clone(), got.clone());
    let mut fm = Fm::builder()
        .handler(DATA, "data", move |m| {
            let bytes = m.receive_vec()?;
            let tag = bytes.first().copied().unwrap_or(0);
            assert!(bytes.iter().all(|&b| b == tag), "message {tag} corrupted");
            g.lock().unwrap().push((tag, bytes.len()));
            if tag == 1 {
                // From inside a handler: two big messages through the sender.
                let sender = s.get().expect("sender made");
                sender.send(0, DATA, &vec![2u8; BIG])?;
                sender.send(0, DATA, &vec![3u8; BIG])?;
            }
            Ok(())
        })
        .config(Config::local(0, 1, JobKey(14)))
        .build()
        .expect("one-rank job");
    fm.set_wait_timeout(Some(std::time::Duration::from_secs(60)));
    let sender = fm.sender();
    slot.set(sender.clone()).ok().expect("set once");
    // From main code on the owner's thread, before any extract.
    sender.send(0, DATA, &vec![1u8; BIG]).expect("first");
    sender
        .send(0, DATA, &vec![4u8; BIG])
        .expect("second, past the bound");
    while got.lock().unwrap().len() < 4 {
        fm.extract_wait(usize::MAX).expect("extract");
    }
    let got = got.lock().unwrap().clone();
    assert_eq!(got, vec![(1, BIG), (4, BIG), (2, BIG), (3, BIG)]);
}

/// A thread that queues on an `FmSender` while the owner never extracts
/// (here: it waits for that thread) is not left waiting silently for ever:
/// it keeps the `Fm`'s wait limit and fails with a timeout naming the
/// outbox.
#[test]
fn a_sender_whose_owner_does_not_extract_times_out_with_the_wait_limit() {
    let mut fm = Fm::builder()
        .config(Config::local(0, 1, JobKey(15)))
        .build()
        .expect("one-rank job");
    fm.set_wait_timeout(Some(std::time::Duration::from_millis(500)));
    let sender = fm.sender();
    let t = std::thread::spawn(move || -> fm::Result<()> {
        sender.send(0, DATA, &vec![1u8; 3 << 20])?;
        sender.send(0, DATA, &vec![2u8; 3 << 20]) // past the bound: waits
    });
    // The owner joins the thread instead of extracting.
    let e = t
        .join()
        .expect("thread")
        .expect_err("the second send must fail");
    assert!(
        matches!(e.kind(), fm::ErrorKind::Timeout { .. }) && e.to_string().contains("outbox"),
        "{e}"
    );
    drop(fm);
}
