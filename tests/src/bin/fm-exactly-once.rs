//! Exactly-once, intact and in order, whatever handlers do: the program the
//! regression and stress tests launch (tests/tests/exactly_once.rs), one
//! process per rank.
//!
//! fm-exactly-once reply-before-read MESSAGES
//!     rank 0 sends rank 1 small requests (0–48 bytes, inline in shared
//!     memory) and keeps sending; rank 1's handler replies several times
//!     before it reads its request, then checks every byte.
//! fm-exactly-once chains HOPS
//!     after a barrier ranks 2k and 2k + 1 each start a chain of HOPS 0-byte
//!     messages to the other, each handler replying to the source before its
//!     packet is released (run with FM_CREDITS=1; a rank without a partner
//!     chains with itself).
//! fm-exactly-once barrier-retry
//!     every rank's barrier meets a failing handler; the barrier is called
//!     again, and must complete, as must the barriers after it.
//! fm-exactly-once open-in-handler
//!     rank 1's handlers return with a message to rank 0 still open (one
//!     that fits a packet, one that does not); rank 0 must see neither as a
//!     whole message, the long one reported aborted.
//! fm-exactly-once stress SEED REQUESTS MAX_SIZE
//!     every rank sends REQUESTS requests to random ranks (itself included),
//!     sizes from every class (0, inline, one packet, several packets,
//!     single copy), in bursts without extracting (storms); each request's
//!     handler replies before, during or after reading it, each reply may
//!     get a reply of its own. Every message's length and bytes follow from
//!     (SEED, kind, source, destination, sequence), so each receiver checks
//!     every byte, that every message arrives exactly once, and in order
//!     per sender and kind.
//!
//! Each prints "rank R: ok ..." on success and fails with a message naming
//! what went wrong otherwise. FM_TEST_SABOTAGE=1 makes the stress checker
//! expect one wrong byte, so a test can show the checker fails.

use fm::{ErrorKind, Fm, FmError, Incoming};
use fm_tests::{fill, Rng};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::Mutex;

type Res = Result<(), String>;

fn err(e: FmError) -> String {
    e.to_string()
}

fn main() -> ExitCode {
    fm_tests::init_tracing();
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize| -> u64 { args.get(i).and_then(|s| s.parse().ok()).unwrap_or(0) };
    let r = match args.get(1).map(String::as_str) {
        Some("reply-before-read") => reply_before_read(arg(2)),
        Some("chains") => chains(arg(2)),
        Some("barrier-retry") => barrier_retry(),
        Some("open-in-handler") => open_in_handler(),
        Some("stress") => stress(arg(2), arg(3), arg(4)),
        _ => Err("usage: fm-exactly-once reply-before-read|chains|barrier-retry|open-in-handler|stress ...".into()),
    };
    fm_tests::exit_with("fm-exactly-once", r)
}

const REQ: u16 = 1;
const REP: u16 = 2;
const REP2: u16 = 3;
const FAIL: u16 = 4;

/// Rank 1 replies `REPLIES` times from the handler, then reads.
fn reply_before_read(messages: u64) -> Res {
    const REPLIES: usize = 8;
    let errors = Arc::new(Mutex::new(Vec::<String>::new()));
    let got = Arc::new(Mutex::new(0u64));
    let (e2, g2) = (errors.clone(), got.clone());
    let mut fm = Fm::builder()
        .handler(REQ, "request", move |m| {
            let seq = *g2.lock().unwrap();
            *g2.lock().unwrap() += 1;
            for _ in 0..REPLIES {
                m.reply(REP, b"reply")?;
            }
            let v = m.receive_vec()?;
            let mut want = vec![0u8; (seq % 49) as usize];
            fill(&mut want, 0, 1, seq);
            if v != want {
                let at = v.iter().zip(&want).position(|(a, b)| a != b);
                e2.lock().unwrap().push(format!(
                    "request {seq} ({} bytes): byte {at:?} differs after replying first: got {v:02x?}, expected {want:02x?}",
                    want.len()
                ));
            }
            Ok(())
        })
        .handler(REP, "reply", |_| Ok(()))
        .from_env()
        .map_err(err)?
        .build()
        .map_err(err)?;
    if fm.rank() == 0 {
        for seq in 0..messages {
            let mut b = vec![0u8; (seq % 49) as usize];
            fill(&mut b, 0, 1, seq);
            fm.send(1, REQ, &b).map_err(err)?;
            fm.extract(usize::MAX).map_err(err)?;
        }
    } else {
        while *got.lock().unwrap() < messages {
            fm.extract_wait(usize::MAX).map_err(err)?;
        }
    }
    fm.barrier().map_err(err)?;
    let errors = errors.lock().unwrap();
    if !errors.is_empty() {
        return Err(format!("{} errors, first: {}", errors.len(), errors[0]));
    }
    println!("rank {}: ok, {:?}", fm.rank(), fm.stats());
    Ok(())
}

/// Chains of 0-byte messages, each handler replying before its packet is
/// released. The handler ID is the hop: a message to handler h is answered
/// to handler h + 1, up to `hops`, so every rank handles exactly `hops`.
fn chains(hops: u64) -> Res {
    let hops = hops.clamp(1, 4000) as u16;
    let handled = Arc::new(Mutex::new(0u64));
    let mut b = Fm::builder();
    for h in 1..=hops {
        let h2 = handled.clone();
        b = b.handler(h, &format!("hop {h}"), move |m| {
            *h2.lock().unwrap() += 1;
            if h < hops {
                m.reply(h + 1, &[])?;
            }
            Ok(())
        });
    }
    let mut fm = b.from_env().map_err(err)?.build().map_err(err)?;
    let (rank, size) = (fm.rank(), fm.size() as u32);
    // Ranks 2k and 2k + 1 start a chain each way at the same moment, so
    // both run a handler for the other's message at once; a rank without a
    // partner chains with itself.
    let partner = Some(rank ^ 1).filter(|&p| p < size).unwrap_or(rank);
    fm.barrier().map_err(err)?;
    fm.send(partner, 1, &[]).map_err(err)?;
    let want = hops as u64;
    while *handled.lock().unwrap() < want {
        fm.extract_wait(usize::MAX).map_err(err)?;
    }
    fm.barrier().map_err(err)?;
    if *handled.lock().unwrap() != want {
        return Err(format!(
            "handled {}, expected {want}",
            handled.lock().unwrap()
        ));
    }
    println!("rank {}: ok, handled {want}", fm.rank());
    Ok(())
}

fn barrier_retry() -> Res {
    let failed = Arc::new(Mutex::new(0u32));
    let f2 = failed.clone();
    let mut fm = Fm::builder()
        .handler(FAIL, "fail", move |_| {
            *f2.lock().unwrap() += 1;
            Err(FmError::handler("this handler fails on purpose"))
        })
        .from_env()
        .map_err(err)?
        .build()
        .map_err(err)?;
    let (rank, size) = (fm.rank(), fm.size() as u32);
    // A handler error out of a call that runs handlers: counted, and the
    // call made again.
    let mut errors = 0u32;
    let mut retry = |fm: &mut Fm, what: &str, f: &dyn Fn(&mut Fm) -> fm::Result<()>| -> Res {
        loop {
            match f(fm) {
                Ok(()) => return Ok(()),
                Err(e) if matches!(e.kind(), ErrorKind::Handler(_)) => errors += 1,
                Err(e) => return Err(format!("{what}: {e}")),
            }
        }
    };
    for round in 0..2 {
        fm.send((rank + 1) % size, FAIL, b"x").map_err(err)?;
        for b in 0..3 {
            retry(&mut fm, &format!("barrier {b} of round {round}"), &|fm| {
                fm.barrier()
            })?;
        }
    }
    while *failed.lock().unwrap() < 2 {
        retry(&mut fm, "extract", &|fm| {
            fm.extract_wait(usize::MAX).map(|_| ())
        })?;
    }
    retry(&mut fm, "the last barrier", &|fm| fm.barrier())?;
    if *failed.lock().unwrap() != 2 || errors != 2 {
        return Err(format!(
            "the failing handler ran {} times and {errors} errors came out, not 2 and 2",
            failed.lock().unwrap()
        ));
    }
    println!("rank {rank}: ok, both handler errors came out once, every barrier completed");
    Ok(())
}

fn open_in_handler() -> Res {
    const SHORT: u16 = 10;
    const LONG: u16 = 11;
    let seen = Arc::new(Mutex::new(Vec::<String>::new()));
    let s2 = seen.clone();
    let mut fm = Fm::builder()
        .handler(SHORT, "open-short", |m| {
            m.endpoint().begin_message(0, 100, REQ)?;
            m.endpoint().send_piece(&[1; 10])?;
            Ok(())
        })
        .handler(LONG, "open-long", |m| {
            let n = 3 * m.endpoint().mtu(0);
            m.endpoint().begin_message(0, n, REQ)?;
            let piece = vec![2; 2 * m.endpoint().mtu(0) + 7];
            m.endpoint().send_piece(&piece)?;
            Ok(())
        })
        .handler(REQ, "collect", move |m| {
            let r = m.receive_vec();
            s2.lock().unwrap().push(match r {
                Ok(v) => format!("{} bytes", v.len()),
                Err(e) if matches!(e.kind(), ErrorKind::Aborted { src: 1 }) => "aborted".into(),
                Err(e) => format!("error {e}"),
            });
            Ok(())
        })
        .from_env()
        .map_err(err)?
        .build()
        .map_err(err)?;
    if fm.rank() == 1 {
        let mut left_open = 0;
        let mut handled = 0;
        while handled < 2 {
            match fm.extract_wait(usize::MAX) {
                Ok(n) => handled += n,
                Err(e) => match e.kind() {
                    ErrorKind::HandlerLeftMessageOpen { dest: 0, .. } => {
                        left_open += 1;
                        handled += 1;
                    }
                    _ => return Err(err(e)),
                },
            }
        }
        if left_open != 2 {
            return Err(format!(
                "{left_open} of 2 handlers reported leaving a message open"
            ));
        }
        // Nothing is left open: main code sends as usual.
        fm.send(0, REQ, b"after").map_err(err)?;
    } else {
        fm.send(1, SHORT, &[]).map_err(err)?;
        fm.send(1, LONG, &[]).map_err(err)?;
        while seen.lock().unwrap().len() < 2 {
            fm.extract_wait(usize::MAX).map_err(err)?;
        }
        let seen = seen.lock().unwrap();
        if seen[..] != ["aborted", "5 bytes"] {
            return Err(format!(
                "rank 0 received {seen:?}, expected [\"aborted\", \"5 bytes\"]"
            ));
        }
    }
    fm.barrier().map_err(err)?;
    println!("rank {}: ok", fm.rank());
    Ok(())
}

// ------------------------------------------------------------------ stress

/// Everything about message `seq` of `kind` from `src` to `dst` follows from
/// these: its length, its bytes, and what its handler does.
#[derive(Clone, Copy)]
struct Plan {
    seed: u64,
    size: u32,
    max_size: u64,
    /// The shapes of sizes: one packet's payload, the single-copy threshold.
    mtu: u64,
    cma: u64,
}

impl Plan {
    fn rng(&self, kind: u16, src: u32, dst: u32, seq: u64) -> Rng {
        fm_tests::message_rng(self.seed, kind, src, dst, seq)
    }

    /// The length: one of the size classes.
    fn len(&self, kind: u16, src: u32, dst: u32, seq: u64) -> usize {
        let mut r = self.rng(kind, src, dst, seq);
        let max = self.max_size;
        let n = match r.upto(9) {
            0 => 0,
            1 | 2 => 1 + r.upto(31),                              // inline
            3 | 4 => 33 + r.upto(self.mtu.saturating_sub(33)),    // one packet
            5 => self.mtu + r.upto(1),                            // at the boundary
            6 | 7 => self.mtu + 1 + r.upto(3 * self.mtu),         // several packets
            8 => self.cma.saturating_sub(1) + r.upto(2),          // single-copy boundary
            _ => self.cma + r.upto(max.saturating_sub(self.cma)), // single copy
        };
        n.min(max) as usize
    }

    /// The bytes.
    fn bytes(&self, kind: u16, src: u32, dst: u32, seq: u64) -> Vec<u8> {
        fm_tests::message_bytes(self.len(kind, src, dst, seq), kind, src, dst, seq)
    }

    /// Where request `i` of `src` goes (itself included).
    fn dest(&self, src: u32, i: u64) -> u32 {
        (self.rng(0, src, 0, i).next_u64() % self.size as u64) as u32
    }

    /// When a handler replies: 0 before reading, 1 half way, 2 after, 3 not at all.
    fn reply_when(&self, kind: u16, src: u32, dst: u32, seq: u64) -> u64 {
        let mut r = self.rng(kind, src, dst, seq);
        r.next_u64();
        match kind {
            REQ => r.upto(2),
            _ => r.upto(3),
        }
    }
}

/// What one rank has received: next sequence number per (kind, source).
struct Checker {
    plan: Plan,
    me: u32,
    next: [Vec<u64>; 3],
    /// Sequence numbers of the replies this rank sends, per (kind, dest).
    sent: [Vec<u64>; 3],
    errors: Vec<String>,
    sabotage: bool,
    rng: Rng,
}

impl Checker {
    fn slot(kind: u16) -> usize {
        (kind - REQ) as usize
    }

    /// Check one message, replying as planned. Reads in random chunks.
    fn handle(&mut self, m: &mut Incoming<'_>) -> fm::Result<()> {
        let (kind, src) = (m.handler(), m.src());
        let seq = self.next[Self::slot(kind)][src as usize];
        self.next[Self::slot(kind)][src as usize] += 1;
        let mut want = self.plan.bytes(kind, src, self.me, seq);
        if self.sabotage && kind == REQ && want.len() > 1 && seq == 1 {
            let mid = want.len() / 2;
            want[mid] ^= 1; // the checker must notice
        }
        if m.len() != want.len() {
            self.errors.push(format!(
                "kind {kind} from {src} seq {seq}: {} bytes, expected {} (lost, duplicated or reordered)",
                m.len(),
                want.len()
            ));
            return Ok(());
        }
        let when = self.plan.reply_when(kind, src, self.me, seq);
        let reply_kind = kind + 1;
        let mut got = vec![0u8; want.len()];
        let mut off = 0;
        let half = got.len() / 2;
        let mut replied = false;
        loop {
            if !replied && kind != REP2 && (when == 0 || (when == 1 && off >= half)) {
                self.reply(m, reply_kind)?;
                replied = true;
            }
            if off == got.len() {
                break;
            }
            let chunk = (self.rng.upto((got.len() - off) as u64) as usize).max(1);
            let end = if !replied && when == 1 && off < half {
                (off + chunk).min(half.max(1))
            } else {
                off + chunk
            };
            let n = m.receive(&mut got[off..end])?;
            if n != end - off {
                self.errors
                    .push(format!("kind {kind} from {src} seq {seq}: short receive"));
                return Ok(());
            }
            off = end;
        }
        if !replied && kind != REP2 && when == 2 {
            self.reply(m, reply_kind)?;
        }
        if got != want {
            let at = got.iter().zip(&want).position(|(a, b)| a != b).unwrap_or(0);
            self.errors.push(format!(
                "kind {kind} from {src} seq {seq} ({} bytes): byte {at} is {:#04x}, expected {:#04x}",
                want.len(),
                got[at],
                want[at]
            ));
        }
        Ok(())
    }

    fn reply(&mut self, m: &mut Incoming<'_>, kind: u16) -> fm::Result<()> {
        let dest = m.src();
        let seq = self.sent[Self::slot(kind)][dest as usize];
        self.sent[Self::slot(kind)][dest as usize] += 1;
        let b = self.plan.bytes(kind, self.me, dest, seq);
        m.send(dest, kind, &b)
    }
}

// Long because the randomized stress is one loop whose checker, handlers
// and reply patterns share the state they check.
#[allow(clippy::too_many_lines)]
fn stress(seed: u64, requests: u64, max_size: u64) -> Res {
    let cfg = fm::Config::from_env().map_err(err)?;
    let cma = cfg.cma_threshold as u64;
    // The checker needs the job's size and MTUs: it is made once fm is.
    let slot: Arc<Mutex<Option<Checker>>> = Arc::new(Mutex::new(None));
    let handler = |slot: Arc<Mutex<Option<Checker>>>| {
        move |m: &mut Incoming<'_>| -> fm::Result<()> {
            let mut c = slot.lock().unwrap();
            c.as_mut()
                .expect("checker made before extracting")
                .handle(m)
        }
    };
    let mut fm = Fm::builder()
        .handler(REQ, "request", handler(slot.clone()))
        .handler(REP, "reply", handler(slot.clone()))
        .handler(REP2, "reply-to-reply", handler(slot.clone()))
        .config(cfg)
        .build()
        .map_err(err)?;
    let (me, size) = (fm.rank(), fm.size() as u32);
    // Every route's packet payload is the same size class boundary here:
    // take the smallest of the routes to others, or to itself.
    let mtu = (0..size)
        .map(|r| fm.mtu(r) as u64)
        .filter(|&m| m > 0)
        .min()
        .unwrap_or(4096);
    let plan = Plan {
        seed,
        size,
        max_size,
        mtu,
        cma,
    };
    *slot.lock().unwrap() = Some(Checker {
        plan,
        me,
        next: std::array::from_fn(|_| vec![0; size as usize]),
        sent: std::array::from_fn(|_| vec![0; size as usize]),
        errors: Vec::new(),
        sabotage: std::env::var("FM_TEST_SABOTAGE").is_ok_and(|v| v == "1"),
        rng: Rng::new(seed ^ me as u64),
    });
    // How many of each kind this rank must receive from each source.
    let mut expect = [
        vec![0u64; size as usize],
        vec![0; size as usize],
        vec![0; size as usize],
    ];
    for src in 0..size {
        let mut to = vec![0u64; size as usize];
        for i in 0..requests {
            to[plan.dest(src, i) as usize] += 1;
        }
        // src's requests to me, my replies to src, and src's replies to those.
        expect[0][src as usize] = to[me as usize];
        let mut mine = 0;
        for i in 0..requests {
            if plan.dest(me, i) == src {
                mine += 1;
            }
        }
        // Requests I sent to src come back as replies from src (REP)...
        expect[1][src as usize] = mine;
        // ...and my replies to src's requests may get a REP2 back.
        expect[2][src as usize] = (0..to[me as usize])
            .filter(|&seq| plan.reply_when(REP, me, src, seq) != 3)
            .count() as u64;
    }
    let mut rng = Rng::new(seed ^ 0xABCD ^ me as u64);
    let mut seq_to = vec![0u64; size as usize];
    let mut i = 0;
    while i < requests {
        // A storm: a burst of requests with no extract between.
        let burst = 1 + rng.upto(15);
        for _ in 0..burst {
            if i == requests {
                break;
            }
            let d = plan.dest(me, i);
            let b = plan.bytes(REQ, me, d, seq_to[d as usize]);
            seq_to[d as usize] += 1;
            // Gather in random pieces.
            fm.begin_message(d, b.len(), REQ).map_err(err)?;
            let mut off = 0;
            while off < b.len() {
                let n = (rng.upto((b.len() - off) as u64) as usize).max(1);
                fm.send_piece(&b[off..off + n]).map_err(err)?;
                off += n;
            }
            fm.end_message().map_err(err)?;
            i += 1;
        }
        fm.extract(usize::MAX).map_err(err)?;
    }
    // What the checker saw: all expected arrived, its errors, the counts.
    // Looked at between extracts (the handlers lock it too).
    let look = || {
        let g = slot.lock().unwrap();
        let c = g.as_ref().expect("made");
        let done = (0..3).all(|k| c.next[k] == expect[k]);
        (done, c.errors.clone(), c.next.clone())
    };
    let start = std::time::Instant::now();
    let (mut done, mut errors, _) = look();
    while !done && errors.is_empty() {
        fm.extract_wait_timeout(usize::MAX, std::time::Duration::from_secs(1))
            .map_err(err)?;
        let next;
        (done, errors, next) = look();
        if start.elapsed() > std::time::Duration::from_secs(120) {
            return Err(format!(
                "waited 120 s: received {next:?}, expected {expect:?}; stats {:?}",
                fm.stats()
            ));
        }
    }
    if !errors.is_empty() {
        return Err(format!("{} errors, first: {}", errors.len(), errors[0]));
    }
    fm.barrier().map_err(err)?;
    let (_, errors, next) = look();
    if !errors.is_empty() {
        return Err(format!("{} errors, first: {}", errors.len(), errors[0]));
    }
    let total: u64 = next.iter().flatten().sum();
    println!(
        "rank {me}: ok, received {total} messages, all checked; {:?}",
        fm.stats()
    );
    Ok(())
}
