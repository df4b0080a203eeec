//! Misuse of the API and bad configuration give typed errors that name what
//! is wrong; a one-rank job (self device only) needs no other process.

use fm::{Config, ErrorKind, Fm, JobKey};
use std::sync::Arc;
use std::sync::Mutex;

fn solo() -> (Fm, Arc<Mutex<Vec<Vec<u8>>>>) {
    let got = Arc::new(Mutex::new(Vec::new()));
    let g = got.clone();
    let fm = Fm::builder()
        .handler(1, "collect", move |m| {
            g.lock().unwrap().push(m.receive_vec()?);
            Ok(())
        })
        .config(Config::local(0, 1, JobKey(7)))
        .build()
        .expect("one-rank job");
    (fm, got)
}

#[test]
fn misuse_of_streams_is_a_typed_error_and_the_stream_stays_consistent() {
    let (mut fm, got) = solo();
    assert!(matches!(
        fm.send_piece(b"x").unwrap_err().kind(),
        ErrorKind::NoMessageOpen
    ));
    assert!(matches!(
        fm.end_message().unwrap_err().kind(),
        ErrorKind::NoMessageOpen
    ));
    assert!(matches!(
        fm.send(3, 1, b"x").unwrap_err().kind(),
        ErrorKind::NoSuchRank { rank: 3, size: 1 }
    ));

    fm.begin_message(0, 4, 1).expect("begin");
    assert!(matches!(
        fm.begin_message(0, 1, 1).unwrap_err().kind(),
        ErrorKind::MessageOpen { dest: 0 }
    ));
    assert!(matches!(
        fm.extract(usize::MAX).unwrap_err().kind(),
        ErrorKind::MessageOpen { dest: 0 }
    ));
    // More than declared: refused, nothing of it sent.
    assert!(matches!(
        fm.send_piece(b"hello").unwrap_err().kind(),
        ErrorKind::LengthMismatch {
            declared: 4,
            given: 5,
            ..
        }
    ));
    fm.send_piece(b"ab").expect("piece");
    // Fewer than declared: reported, and padded so the receiver is not left waiting.
    assert!(matches!(
        fm.end_message().unwrap_err().kind(),
        ErrorKind::LengthMismatch {
            declared: 4,
            given: 2,
            ..
        }
    ));
    fm.send(0, 1, b"next").expect("send after the short one");
    while got.lock().unwrap().len() < 2 {
        fm.extract_wait(usize::MAX).expect("extract");
    }
    assert_eq!(
        got.lock().unwrap().as_slice(),
        &[b"ab\0\0".to_vec(), b"next".to_vec()]
    );
}

#[test]
fn handler_tables_are_checked() {
    let e = Fm::builder()
        .handler(2, "a", |_| Ok(()))
        .handler(2, "b", |_| Ok(()))
        .config(Config::local(0, 1, JobKey(8)))
        .build()
        .err()
        .expect("duplicate");
    assert!(
        e.to_string().contains("handler ID 2 is registered twice"),
        "{e}"
    );
    let e = Fm::builder()
        .handler(0xFF00, "mine", |_| Ok(()))
        .config(Config::local(0, 1, JobKey(9)))
        .build()
        .err()
        .expect("reserved");
    assert!(e.to_string().contains("reserved"), "{e}");
    let with = |names: &[(u16, &str)]| {
        let mut b = Fm::builder();
        for (id, n) in names {
            b = b.handler(*id, n, |_| Ok(()));
        }
        b.config(Config::local(0, 1, JobKey(10)))
            .build()
            .expect("fm")
            .handler_fingerprint()
    };
    assert_eq!(with(&[(1, "a"), (2, "b")]), with(&[(2, "b"), (1, "a")]));
    assert_ne!(with(&[(1, "a"), (2, "b")]), with(&[(1, "a"), (2, "c")]));
}

#[test]
fn a_handler_error_comes_out_of_extract_after_its_message() {
    let mut fm = Fm::builder()
        .handler(1, "fails", |_| Err(fm::FmError::handler("no thanks")))
        .config(Config::local(0, 1, JobKey(11)))
        .build()
        .expect("fm");
    fm.send(0, 1, &[1; 10_000]).expect("send");
    let e = fm.extract_wait(usize::MAX).unwrap_err();
    assert!(e.to_string().contains("no thanks"), "{e}");
    // The message was consumed: nothing is left half-read.
    assert_eq!(fm.extract(usize::MAX).expect("extract"), 0);
}

/// Environment parsing, in one test because the environment is process-wide.
#[test]
fn bad_environment_is_a_clear_error() {
    let clear = || {
        for v in [
            "FM_RANK",
            "FM_SIZE",
            "FM_JOB_KEY",
            "FM_HOSTS",
            "FM_HOST",
            "FM_NET",
            "FM_CREDITS",
            "FM_SHM_CMA",
            "FM_SHM_CMA_ADAPT",
        ] {
            std::env::remove_var(v);
        }
    };
    let err = |vars: &[(&str, &str)]| -> String {
        clear();
        for (k, v) in vars {
            std::env::set_var(k, v);
        }
        let r = Config::from_env();
        clear();
        match r {
            Ok(c) => panic!("accepted {vars:?}: {c:?}"),
            Err(e) => e.to_string(),
        }
    };
    assert!(err(&[("FM_RANK", "1")]).contains("FM_RANK and FM_SIZE"));
    assert!(err(&[("FM_RANK", "x"), ("FM_SIZE", "2")]).contains("FM_RANK"));
    assert!(
        err(&[("FM_RANK", "2"), ("FM_SIZE", "2"), ("FM_JOB_KEY", "1")]).contains("below FM_SIZE=2")
    );
    assert!(err(&[("FM_RANK", "0"), ("FM_SIZE", "2")]).contains("FM_JOB_KEY is not set"));
    assert!(
        err(&[("FM_RANK", "0"), ("FM_SIZE", "2"), ("FM_JOB_KEY", "zz")]).contains("hexadecimal")
    );
    assert!(err(&[
        ("FM_RANK", "0"),
        ("FM_SIZE", "2"),
        ("FM_JOB_KEY", "1"),
        ("FM_HOSTS", "a")
    ])
    .contains("one host for each"));
    assert!(err(&[("FM_NET", "carrier-pigeon")]).contains("FM_NET"));
    assert!(err(&[("FM_CREDITS", "0")]).contains("must be 1 to 65536 credits"));
    assert!(err(&[("FM_SHM_CMA", "maybe")]).contains("FM_SHM_CMA"));
    let e = err(&[("FM_SHM_CMA_ADAPT", "64k")]);
    assert!(
        e.contains("FM_SHM_CMA_ADAPT") && e.contains("64k") && e.contains("off"),
        "{e}"
    );
    // And a singleton needs nothing at all.
    clear();
    let c = Config::from_env().expect("singleton");
    assert_eq!((c.rank, c.size), (0, 1));
    assert_eq!(c.cma_adapt_from, Some(65536));
    for (v, want) in [("off", None), ("131072", Some(131072))] {
        std::env::set_var("FM_SHM_CMA_ADAPT", v);
        let c = Config::from_env();
        clear();
        assert_eq!(c.expect("valid").cma_adapt_from, want, "{v}");
    }
}

/// The non-blocking and time-limited forms, and the queries, on a job of one
/// rank (sending to itself).
#[test]
fn try_send_credits_mtu_and_timeouts() {
    let mut cfg = Config::local(0, 1, JobKey(9));
    cfg.max_credits = Some(3);
    let got = Arc::new(Mutex::new(Vec::new()));
    let g = got.clone();
    let mut fm = Fm::builder()
        .handler(1, "collect", move |m| {
            g.lock().unwrap().push(m.receive_vec()?);
            Ok(())
        })
        .config(cfg)
        .build()
        .expect("one-rank job");
    assert_eq!(fm.credits(0), 3);
    assert_eq!(fm.credits(7), 0, "no such rank");
    assert!(fm.mtu(0) >= 1024, "self's packets: {}", fm.mtu(0));
    assert_eq!(fm.mtu(7), 0);
    // Three one-packet messages take the three credits; the fourth would wait.
    for i in 0..3u8 {
        fm.try_send(0, 1, &[i; 10]).expect("a credit is at hand");
    }
    assert_eq!(fm.credits(0), 0);
    let e = fm.try_send(0, 1, b"x").expect_err("no credit");
    assert!(matches!(e.kind(), ErrorKind::WouldBlock { dest: 0 }), "{e}");
    let e = fm.try_begin_message(0, 1, 1).expect_err("no credit");
    assert!(matches!(e.kind(), ErrorKind::WouldBlock { dest: 0 }), "{e}");
    // Nothing was sent by the refusals; handling returns the credits.
    while got.lock().unwrap().len() < 3 {
        fm.extract_wait(usize::MAX).expect("extract");
    }
    assert_eq!(got.lock().unwrap().len(), 3);
    // Credits come back in batches of half the window (2 of 3 here).
    while fm.credits(0) < 2 {
        fm.extract(usize::MAX).expect("credit returns");
    }
    // A message longer than the credits allow is refused whole.
    let long = vec![5u8; 4 * fm.mtu(0)];
    let e = fm.try_send(0, 1, &long).expect_err("needs 4 packets");
    assert!(matches!(e.kind(), ErrorKind::WouldBlock { .. }), "{e}");
    fm.try_send(0, 1, b"after").expect("fits");
    while got.lock().unwrap().len() < 4 {
        fm.extract_wait(usize::MAX).expect("extract");
    }
    assert_eq!(got.lock().unwrap()[3], b"after");

    // Waits with a limit: nothing is coming.
    let t = std::time::Instant::now();
    let n = fm
        .extract_wait_timeout(usize::MAX, std::time::Duration::from_millis(30))
        .expect("no error, just nothing");
    assert_eq!(n, 0);
    assert!(t.elapsed() >= std::time::Duration::from_millis(30));
    fm.set_wait_timeout(Some(std::time::Duration::from_millis(30)));
    let e = fm.extract_wait(usize::MAX).expect_err("times out");
    assert!(
        matches!(e.kind(), ErrorKind::Timeout { what, .. } if what.contains("message")),
        "{e}"
    );
    fm.set_wait_timeout(None);
}

/// `send_packet_now` sends its parts as one message when they fit a packet
/// and a credit is at hand, and otherwise sends nothing; a handler reads
/// the rest of a message in place (`receive_in_place`) when all of it lies
/// in the packet at hand, and is refused that for a longer one.
#[test]
fn packets_sent_now_and_messages_read_in_place() {
    let mut cfg = Config::local(0, 1, JobKey(11));
    cfg.max_credits = Some(2);
    // What each message gave: its first byte read by `receive` (handler 2
    // only), the rest read in place or else by `receive_vec`.
    type Got = (Option<u8>, Option<Vec<u8>>, Vec<u8>);
    let got = Arc::new(Mutex::new(Vec::<Got>::new()));
    let (g1, g2) = (got.clone(), got.clone());
    let mut fm = Fm::builder()
        .handler(1, "in place", move |m| {
            let rest = m.receive_in_place(|b| b.to_vec());
            let after = m.receive_vec()?;
            g1.lock().unwrap().push((None, rest, after));
            Ok(())
        })
        .handler(2, "one byte first", move |m| {
            let mut first = [0u8; 1];
            m.receive(&mut first)?;
            let rest = m.receive_in_place(|b| b.to_vec());
            let after = m.receive_vec()?;
            assert!(m.receive_in_place(|_| ()).is_none(), "nothing is left");
            g2.lock().unwrap().push((Some(first[0]), rest, after));
            Ok(())
        })
        .config(cfg)
        .build()
        .expect("one-rank job");
    let wait_for = |fm: &mut Fm, n: usize| {
        while got.lock().unwrap().len() < n {
            fm.extract_wait(usize::MAX).expect("extract");
        }
        while fm.credits(0) < 1 {
            fm.extract(usize::MAX).expect("credit returns");
        }
    };
    let (head, body) = ([1u8, 2, 3], b"four");
    assert!(
        fm.send_packet_now(0, 1, [&head, body]),
        "fits, a credit at hand"
    );
    assert!(fm.send_packet_now(0, 2, [b"x".as_slice(), &[], b"yz"]));
    assert_eq!(fm.credits(0), 0);
    assert!(!fm.send_packet_now(0, 1, [b"no credit".as_slice()]));
    assert!(!fm.send_packet_now(7, 1, [b"no such rank".as_slice()]));
    wait_for(&mut fm, 2);
    let long = vec![9u8; 2 * fm.mtu(0)];
    assert!(!fm.send_packet_now(0, 1, [long.as_slice()]), "two packets");
    fm.send(0, 1, &long).expect("send waits as it must");
    wait_for(&mut fm, 3);
    fm.send(0, 2, &long).expect("send");
    wait_for(&mut fm, 4);
    let got = got.lock().unwrap();
    let some = |b: &[u8]| Some(b.to_vec());
    assert_eq!(got[0], (None, some(b"\x01\x02\x03four"), vec![]));
    assert_eq!(got[1], (Some(b'x'), some(b"yz"), vec![]));
    assert_eq!(
        got[2],
        (None, None, long.clone()),
        "two packets: not in place"
    );
    assert_eq!(got[3], (Some(9), None, long[1..].to_vec()));
}

/// An open message given up before any of it left sends nothing, and the
/// stream is usable again at once.
#[test]
fn abort_message_before_anything_left_sends_nothing() {
    let (mut fm, got) = solo();
    fm.begin_message(0, 100, 1).expect("begin");
    fm.send_piece(&[1; 40]).expect("piece");
    assert_eq!(fm.remaining_to_send(), 60);
    fm.abort_message().expect("abort");
    assert_eq!(fm.remaining_to_send(), 0);
    assert!(matches!(
        fm.abort_message().unwrap_err().kind(),
        ErrorKind::NoMessageOpen
    ));
    fm.send(0, 1, b"next").expect("send");
    while got.lock().unwrap().is_empty() {
        fm.extract_wait(usize::MAX).expect("extract");
    }
    assert_eq!(got.lock().unwrap().as_slice(), &[b"next".to_vec()]);
}
