//! The adversarial mix: every kind of traffic an FM program may make at
//! once, with every byte, count and order checked.
//!
//! fm-mix SEED REQUESTS MAX_SIZE [SIDE [HANG_S]]
//!
//! - Main code sends REQUESTS requests (chain hop 1) to random ranks, itself
//!   included, in storms of up to 16 without extracting, each gathered in
//!   random pieces.
//! - Request/reply chains up to [`HOPS`] deep: the handler of hop k replies
//!   to its source with hop k + 1 (three times in four) before, during or
//!   after reading its message, which it reads in random pieces. Replies are
//!   as large as requests: up to MAX_SIZE, single copy included.
//! - From inside handlers, fan-outs (a message to every rank) and bursts (up
//!   to 8 messages to one rank).
//! - A second thread sends SIDE messages (default 200) to random ranks
//!   through an [`fm::FmSender`] while main code and handlers send.
//! - The owner's own thread sends OWN messages through its `FmSender` too:
//!   main code after a quarter of its requests, and one handler in eight
//!   (to the message's source). Up to MAX_SIZE each, they take the outbox
//!   past its bound, which must not hold back the thread that empties it.
//!
//! Sizes run from 0 B to MAX_SIZE, skewed small, a fifth of them at a
//! device boundary (inline, one packet, single copy). Everything about
//! message `seq` of kind k from a to b — its length, its bytes, what its
//! handler does — follows from (SEED, k, a, b, seq), so every rank computes
//! what each rank must receive, and checks every byte, that each message
//! arrives exactly once, and in order per sender and kind.
//!
//! Prints "rank R: ok ..." on success; fails naming what went wrong, or
//! with what it has received when nothing arrived for HANG_S seconds
//! (default 60: a hang).
//! FM_TEST_SABOTAGE=1 makes the checker expect one wrong byte, so a test can
//! show the checker fails.

use fm::{Fm, FmError, Incoming};
use fm_tests::Rng;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Handler IDs 1..=HOPS are the hops of a chain.
const HOPS: u16 = 9;
const FAN: u16 = HOPS + 1;
const BURST: u16 = HOPS + 2;
const SIDE: u16 = HOPS + 3;
const OWN: u16 = HOPS + 4;
const KINDS: usize = OWN as usize;

fn main() -> ExitCode {
    fm_tests::init_tracing();
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize, d: u64| -> u64 { args.get(i).and_then(|s| s.parse().ok()).unwrap_or(d) };
    let r = match args.len() {
        4..=6 => mix(arg(1, 0), arg(2, 0), arg(3, 0), arg(4, 200), arg(5, 60)),
        _ => Err("usage: fm-mix SEED REQUESTS MAX_SIZE [SIDE [HANG_S]]".into()),
    };
    fm_tests::exit_with("fm-mix", r)
}

/// What a handler does besides reading its message.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Action {
    /// Reply to the source with the next hop: 0 before reading, 1 half
    /// way, 2 after; `None`: no reply.
    reply: Option<u8>,
    /// Send a FAN message to every rank, after reading.
    fan: bool,
    /// Send this many BURST messages to `burst_to`, before reading.
    burst: u32,
    burst_to: u32,
    /// Send an OWN message to the source through this rank's own sender.
    own: bool,
}

/// Everything about every message follows from these.
#[derive(Clone, Copy)]
struct Plan {
    seed: u64,
    size: u32,
    max_size: u64,
    /// One packet's payload and the single-copy threshold: the boundaries.
    mtu: u64,
    cma: u64,
}

impl Plan {
    fn rng(&self, kind: u16, src: u32, dst: u32, seq: u64) -> Rng {
        fm_tests::message_rng(self.seed, kind, src, dst, seq)
    }

    /// The length: skewed small, a fifth at a boundary.
    fn len(&self, kind: u16, src: u32, dst: u32, seq: u64) -> usize {
        let mut r = self.rng(kind, src, dst, seq);
        let (mtu, cma, max) = (self.mtu, self.cma, self.max_size);
        let n = match r.upto(99) {
            0..=9 => 0,
            10..=39 => 1 + r.upto(31),
            40..=59 => 33 + r.upto(mtu.saturating_sub(33)),
            60..=79 => {
                let edges = [
                    31,
                    32,
                    33,
                    mtu - 1,
                    mtu,
                    mtu + 1,
                    2 * mtu,
                    cma - 1,
                    cma,
                    cma + 1,
                ];
                edges[r.upto(edges.len() as u64 - 1) as usize]
            }
            80..=94 => mtu + 1 + r.upto(3 * mtu),
            // Large: from a few packets up, single copy included.
            _ => 4 * mtu + r.upto(max.saturating_sub(4 * mtu)),
        };
        n.min(max) as usize
    }

    fn bytes(&self, kind: u16, src: u32, dst: u32, seq: u64) -> Vec<u8> {
        fm_tests::message_bytes(self.len(kind, src, dst, seq), kind, src, dst, seq)
    }

    /// Where main code's request `i` of `src` goes, and the side thread's.
    fn dest(&self, kind: u16, src: u32, i: u64) -> u32 {
        (self.rng(kind, src, u32::MAX, i).next_u64() % self.size as u64) as u32
    }

    /// What the handler of message (kind, src → dst, seq) does.
    fn action(&self, kind: u16, src: u32, dst: u32, seq: u64) -> Action {
        let mut r = self.rng(kind, src, dst, seq);
        r.next_u64();
        let none = Action {
            reply: None,
            fan: false,
            burst: 0,
            burst_to: 0,
            own: false,
        };
        if kind > HOPS {
            return none;
        }
        Action {
            reply: (kind < HOPS && r.upto(3) != 0).then(|| r.upto(2) as u8),
            fan: r.upto(15) == 0,
            burst: if r.upto(15) == 0 {
                1 + r.upto(7) as u32
            } else {
                0
            },
            burst_to: r.upto(self.size as u64 - 1) as u32,
            own: r.upto(7) == 0,
        }
    }

    /// Whether main code follows its request `i` with an OWN message.
    fn own_after(&self, src: u32, i: u64) -> bool {
        self.rng(OWN, src, u32::MAX - 1, i).upto(3) == 0
    }

    /// How many messages of each kind each rank sends each rank:
    /// `count[kind - 1][src][dst]`, from main code's and the side thread's
    /// plans and every handler's action.
    fn counts(&self, requests: u64, side: u64) -> Vec<Vec<Vec<u64>>> {
        let n = self.size as usize;
        let mut c = vec![vec![vec![0u64; n]; n]; KINDS];
        for src in 0..self.size {
            for i in 0..requests {
                c[0][src as usize][self.dest(1, src, i) as usize] += 1;
                if self.own_after(src, i) {
                    c[OWN as usize - 1][src as usize][self.dest(OWN, src, i) as usize] += 1;
                }
            }
            for i in 0..side {
                c[SIDE as usize - 1][src as usize][self.dest(SIDE, src, i) as usize] += 1;
            }
        }
        // Hop k's handlers decide hop k + 1's messages, fans and bursts.
        let pairs = (0..n).flat_map(|a| (0..n).map(move |b| (a, b)));
        for kind in 1..=HOPS {
            for (a, b) in pairs.clone() {
                for seq in 0..c[kind as usize - 1][a][b] {
                    let act = self.action(kind, a as u32, b as u32, seq);
                    if act.reply.is_some() {
                        c[kind as usize][b][a] += 1;
                    }
                    let from_b = &mut c[FAN as usize - 1][b];
                    from_b.iter_mut().for_each(|to| *to += u64::from(act.fan));
                    c[BURST as usize - 1][b][act.burst_to as usize] += act.burst as u64;
                    c[OWN as usize - 1][b][a] += u64::from(act.own);
                }
            }
        }
        c
    }
}

/// What one rank has received and sent, and what it found wrong.
struct Checker {
    plan: Plan,
    me: u32,
    /// Next sequence number per (kind, source), and per (kind, dest) of what
    /// this rank's handlers sent.
    next: Vec<Vec<u64>>,
    sent: Vec<Vec<u64>>,
    errors: Vec<String>,
    sabotage: bool,
    rng: Rng,
    /// This rank's own sender (OWN messages), once made.
    own: Option<fm::FmSender>,
}

impl Checker {
    /// Check one message, doing what its plan says meanwhile.
    fn handle(&mut self, m: &mut Incoming<'_>) -> fm::Result<()> {
        let (kind, src) = (m.handler(), m.src());
        let k = kind as usize - 1;
        let seq = self.next[k][src as usize];
        self.next[k][src as usize] += 1;
        let mut want = self.plan.bytes(kind, src, self.me, seq);
        if self.sabotage && want.len() > 1 {
            self.sabotage = false; // the first message longer than a byte
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
        let act = self.plan.action(kind, src, self.me, seq);
        for _ in 0..act.burst {
            self.send(m, BURST, act.burst_to)?;
        }
        let mut got = vec![0u8; want.len()];
        let (mut off, half) = (0, want.len() / 2);
        let mut reply = act.reply;
        loop {
            if reply == Some(0) || (reply == Some(1) && off >= half) {
                self.send(m, kind + 1, src)?;
                reply = None;
            }
            if off == got.len() {
                break;
            }
            let chunk = (self.rng.upto((got.len() - off) as u64) as usize).max(1);
            let end = match reply {
                Some(1) if off < half => (off + chunk).min(half.max(1)),
                _ => off + chunk,
            };
            if m.receive(&mut got[off..end])? != end - off {
                self.errors
                    .push(format!("kind {kind} from {src} seq {seq}: short receive"));
                return Ok(());
            }
            off = end;
        }
        if reply == Some(2) {
            self.send(m, kind + 1, src)?;
        }
        if act.fan {
            for t in 0..self.plan.size {
                self.send(m, FAN, t)?;
            }
        }
        if act.own {
            self.send_own(src)?;
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

    /// Queue the next OWN message to `dest` on this rank's own sender.
    fn send_own(&mut self, dest: u32) -> fm::Result<()> {
        let seq = self.sent[OWN as usize - 1][dest as usize];
        self.sent[OWN as usize - 1][dest as usize] += 1;
        let sender = self.own.as_ref().expect("own sender made");
        sender.send(dest, OWN, &self.plan.bytes(OWN, self.me, dest, seq))
    }

    /// Send the next message of `kind` to `dest` from a handler.
    fn send(&mut self, m: &mut Incoming<'_>, kind: u16, dest: u32) -> fm::Result<()> {
        let seq = self.sent[kind as usize - 1][dest as usize];
        self.sent[kind as usize - 1][dest as usize] += 1;
        m.send(dest, kind, &self.plan.bytes(kind, self.me, dest, seq))
    }
}

fn err(e: FmError) -> String {
    e.to_string()
}

// One loop whose checker, handlers and senders share the state they check.
#[allow(clippy::too_many_lines)]
fn mix(seed: u64, requests: u64, max_size: u64, side: u64, hang_s: u64) -> Result<(), String> {
    let cfg = fm::Config::from_env().map_err(err)?;
    let cma = cfg.cma_threshold as u64;
    let slot: Arc<Mutex<Option<Checker>>> = Arc::new(Mutex::new(None));
    let mut b = Fm::builder();
    for kind in 1..=OWN {
        let slot = slot.clone();
        b = b.handler(kind, &format!("kind {kind}"), move |m| {
            let mut c = slot.lock().unwrap();
            c.as_mut()
                .expect("checker made before extracting")
                .handle(m)
        });
    }
    let mut fm = b.config(cfg).build().map_err(err)?;
    let (me, size) = (fm.rank(), fm.size() as u32);
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
        // Its boundary is one only where the sizes reach it.
        cma: cma.clamp(mtu + 2, max_size.max(mtu + 2)),
    };
    let n = size as usize;
    *slot.lock().unwrap() = Some(Checker {
        plan,
        me,
        next: vec![vec![0; n]; KINDS],
        sent: vec![vec![0; n]; KINDS],
        errors: Vec::new(),
        sabotage: std::env::var("FM_TEST_SABOTAGE").is_ok_and(|v| v == "1"),
        rng: Rng::new(seed ^ me as u64),
        own: None,
    });
    let counts = plan.counts(requests, side);
    let expect: Vec<Vec<u64>> = (0..KINDS)
        .map(|k| (0..n).map(|src| counts[k][src][me as usize]).collect())
        .collect();
    // The side thread: messages through the sender while everything else runs.
    let sender = fm.sender();
    slot.lock().unwrap().as_mut().expect("made").own = Some(sender.clone());
    let side_thread = std::thread::spawn(move || -> Result<(), String> {
        let mut seq = vec![0u64; n];
        for i in 0..side {
            let d = plan.dest(SIDE, me, i);
            let b = plan.bytes(SIDE, me, d, seq[d as usize]);
            seq[d as usize] += 1;
            sender.send(d, SIDE, &b).map_err(err)?;
        }
        Ok(())
    });
    let mut rng = Rng::new(seed ^ 0xABCD ^ me as u64);
    let mut seq_to = vec![0u64; n];
    let mut i = 0;
    while i < requests {
        // A storm: a burst of requests with no extract between.
        for _ in 0..1 + rng.upto(15) {
            if i == requests {
                break;
            }
            let d = plan.dest(1, me, i);
            let b = plan.bytes(1, me, d, seq_to[d as usize]);
            seq_to[d as usize] += 1;
            fm.begin_message(d, b.len(), 1).map_err(err)?;
            let mut off = 0;
            while off < b.len() {
                let n = (rng.upto((b.len() - off) as u64) as usize).max(1);
                fm.send_piece(&b[off..off + n]).map_err(err)?;
                off += n;
            }
            fm.end_message().map_err(err)?;
            if plan.own_after(me, i) {
                let d = plan.dest(OWN, me, i);
                let mut c = slot.lock().unwrap();
                c.as_mut().expect("made").send_own(d).map_err(err)?;
            }
            i += 1;
        }
        fm.extract(usize::MAX).map_err(err)?;
    }
    let look = || {
        let g = slot.lock().unwrap();
        let c = g.as_ref().expect("made");
        (c.next == expect, c.errors.clone(), c.next.clone())
    };
    let (mut done, mut errors, mut seen) = look();
    // A hang: HANG_S one-second waits in a row found nothing, and as many
    // seconds have passed. Counting the waits too means a process that was merely not
    // scheduled (a loaded machine) is not taken for a hung one.
    let (mut last_change, mut empty_waits) = (Instant::now(), 0u32);
    while !done && errors.is_empty() {
        fm.extract_wait_timeout(usize::MAX, Duration::from_secs(1))
            .map_err(err)?;
        let before = seen;
        (done, errors, seen) = look();
        empty_waits = if seen != before { 0 } else { empty_waits + 1 };
        if empty_waits == 0 {
            last_change = Instant::now();
        } else if u64::from(empty_waits) >= hang_s
            && last_change.elapsed() > Duration::from_secs(hang_s)
        {
            let missing: Vec<String> = (0..KINDS)
                .flat_map(|k| (0..n).map(move |s| (k, s)))
                .filter(|&(k, s)| seen[k][s] != expect[k][s])
                .map(|(k, s)| {
                    format!(
                        "kind {} from {s}: {} of {}",
                        k + 1,
                        seen[k][s],
                        expect[k][s]
                    )
                })
                .collect();
            return Err(format!(
                "nothing arrived for {hang_s} s (hung): missing {missing:?}; stats {:?}",
                fm.stats()
            ));
        }
    }
    if !errors.is_empty() {
        return Err(format!("{} errors, first: {}", errors.len(), errors[0]));
    }
    // The side thread may still be queueing: keep extracting (which sends
    // what it queued) until it is done. Joining it without extracting
    // would leave it waiting for room in the outbox for ever.
    while !side_thread.is_finished() {
        fm.extract_wait_timeout(usize::MAX, Duration::from_millis(10))
            .map_err(err)?;
    }
    side_thread
        .join()
        .map_err(|_| "the side thread panicked".to_string())??;
    fm.barrier().map_err(err)?;
    let (_, errors, seen) = look();
    if !errors.is_empty() {
        return Err(format!("{} errors, first: {}", errors.len(), errors[0]));
    }
    // Nothing received is still held by fm once every message was handled.
    if let Some(held) = fm.composite_mut().shmem_mut().map(|s| s.held_inline()) {
        if held != 0 {
            return Err(format!(
                "{held} inline packets still held after the last message"
            ));
        }
    }
    let total: u64 = seen.iter().flatten().sum();
    println!(
        "rank {me}: ok, received {total} messages, all checked; {:?}",
        fm.stats()
    );
    Ok(())
}
