//! The reliable protocol's model test in virtual time: two sans-IO
//! [`Protocol`]s exchange messages both ways over a simulated network that
//! drops, duplicates, reorders, delays and corrupts datagrams, with a clock
//! that only the test moves. Deterministic (the faults come from a seed),
//! no sleeping, no threads: every message arrives exactly once, in order and
//! intact, and nothing arrives after the last one. Small receive pools and
//! windows bring in STOP/GO; `reorder` runs the trunk's reorder queue.
//! A forger on the network races every packet with an altered copy; with
//! the job's MAC on, none of them gets through. A replayer sends every
//! control packet again, intact, at random later moments; none of them
//! changes the run.
//!
//! `devices/tests/reliable_model.rs` runs the same exchange through the
//! driver (`ReliableDevice`) on the wall clock.

mod common;

use common::{check_arrival, message, shape};

use fm_devices::reliable::header::{checksum, Header, Kind, MacKey, HEADER};
use fm_devices::reliable::{Faults, Protocol, ReliableConfig, ReliableStats};
use fm_devices::{DeviceError, JobKey, Rank};
use proptest::prelude::*;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

/// One network hop.
const LATENCY: Duration = Duration::from_micros(20);
/// How often each side's application polls.
const POLL: Duration = Duration::from_micros(5);

fn config(rank: Rank, window: u32, pool: usize, reorder: bool) -> ReliableConfig {
    let mut c = ReliableConfig::new("virtual", JobKey(0xAB), rank, 2);
    c.epoch = 0x1000 + rank;
    c.mtu = HEADER + 256;
    c.window = window;
    c.pool = pool;
    c.rto = Duration::from_micros(300);
    c.rto_max = Duration::from_millis(5);
    c.dead_after = Duration::from_secs(3);
    c.reorder = reorder;
    c
}

/// xorshift64*: the network's faults, from the seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && ((self.next() >> 11) as f64) < p * (1u64 << 53) as f64
    }
}

/// A datagram in flight, ordered by arrival (then by when it was sent).
#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct InFlight {
    at: std::cmp::Reverse<(Instant, u64)>,
    dest: Rank,
    bytes: Vec<u8>,
}

/// The simulated network: each side's datagrams meet that side's faults.
struct Net {
    faults: [Faults; 2],
    rng: [Rng; 2],
    flight: BinaryHeap<InFlight>,
    sent: u64,
    /// Corrupt payload bytes only (the header stays valid): for the test
    /// that shows the checker catches what a protocol without a payload
    /// checksum lets through.
    corrupt_payload_only: bool,
    /// Race every datagram with a forged copy (see [`forge`]).
    forger: bool,
}

/// What the network does besides its faults, and whether the job MACs.
#[derive(Clone, Copy, PartialEq)]
enum Mode {
    /// The CRC covers payloads.
    Checked,
    /// The CRC covers headers only, and the network corrupts only payloads.
    PayloadUnchecked,
    /// A forger races every packet; the job uses MACs (or not).
    Forged { mac: bool },
    /// Every control packet that arrives is sent again, one to three
    /// times, at random moments up to 20 ms later (see [`Replayer`]).
    Replayed { seed: u64, bump: bool },
}

/// Someone on the path who captures each control packet as it arrives
/// and replays it later. With `bump` it also raises the control number
/// and fixes the CRC, which only a job without MACs lets it do: the test
/// that the checks see what replays would do if they were acted on.
struct Replayer {
    rng: Rng,
    bump: bool,
    bumped: u32,
    /// Replays in flight, by arrival.
    flight: BinaryHeap<InFlight>,
    sent: u64,
}

impl Replayer {
    fn for_mode(mode: Mode) -> Option<Replayer> {
        match mode {
            Mode::Replayed { seed, bump } => Some(Replayer {
                rng: Rng(seed | 1),
                bump,
                bumped: 0,
                flight: BinaryHeap::new(),
                sent: 0,
            }),
            _ => None,
        }
    }

    /// Replays arrive at the polls the run makes anyway: they must not
    /// move its clock, so that a run they do not change is the same run.
    fn deliver_due(&mut self, sides: &mut [Side; 2], now: Instant) {
        while self.flight.peek().is_some_and(|d| d.at.0 .0 <= now) {
            let Some(d) = self.flight.pop() else { break };
            deliver(&mut sides[d.dest as usize].p, &d.bytes, now);
        }
    }

    fn capture(&mut self, dest: Rank, d: &[u8], now: Instant) {
        let Ok(h) = Header::parse(d) else { return };
        if h.kind == Kind::Data {
            return;
        }
        let mut d = d.to_vec();
        if self.bump {
            self.bumped += 1;
            d[HEADER..HEADER + 4].copy_from_slice(&(h.control + (self.bumped << 16)).to_le_bytes());
            d[40..44].fill(0);
            let crc = checksum(&d);
            d[40..44].copy_from_slice(&crc.to_le_bytes());
        }
        for _ in 0..1 + self.rng.next() % 3 {
            let at = now + Duration::from_micros(1 + self.rng.next() % 20_000);
            self.sent += 1;
            self.flight.push(InFlight {
                at: std::cmp::Reverse((at, self.sent)),
                dest,
                bytes: d.clone(),
            });
        }
    }
}

/// What someone who sees a packet but lacks the job's key can make of it:
/// DATA with its payload (or, empty, its number) changed, a control packet
/// turned into a STOP with a new control number, the CRC made right again. It arrives before the real packet.
fn forge(d: &[u8]) -> Vec<u8> {
    let mut f = d.to_vec();
    if f[3] == Kind::Data as u8 {
        match f.len() > HEADER {
            true => f[HEADER] ^= 0xff,
            false => f[28] ^= 1, // another sequence number
        }
    } else {
        f[3] = Kind::Stop as u8;
        f[HEADER] = f[HEADER].wrapping_add(1); // a control number not yet seen
    }
    f[40..44].fill(0);
    let covered = if u32::from_le_bytes([f[44], f[45], f[46], f[47]]) & 1 != 0 {
        f.len()
    } else {
        HEADER.min(f.len())
    };
    let crc = checksum(&f[..covered]);
    f[40..44].copy_from_slice(&crc.to_le_bytes());
    f
}

impl Net {
    fn send(&mut self, from: usize, dest: Rank, datagram: &[u8], now: Instant) {
        if self.forger && datagram.len() >= HEADER {
            self.sent += 1;
            self.flight.push(InFlight {
                at: std::cmp::Reverse((now + LATENCY / 2, self.sent)),
                dest,
                bytes: forge(datagram),
            });
        }
        let f = self.faults[from];
        let rng = &mut self.rng[from];
        if rng.chance(f.drop) {
            return;
        }
        let mut d = datagram.to_vec();
        // Payload-only corruption leaves the header alone.
        let first = if self.corrupt_payload_only { HEADER } else { 0 };
        if d.len() > first && rng.chance(f.corrupt) {
            let r = rng.next() as usize;
            let at = first + r % (d.len() - first);
            d[at] ^= 1 << (r >> 61);
        }
        let copies = if rng.chance(f.dup) { 2 } else { 1 };
        for _ in 0..copies {
            let mut at = now + LATENCY;
            if rng.chance(f.delay) {
                at += f.delay_for;
            } else if rng.chance(f.reorder) {
                // Overtaken by what is sent in the next few microseconds.
                at += Duration::from_micros(1 + rng.next() % 30);
            }
            self.sent += 1;
            self.flight.push(InFlight {
                at: std::cmp::Reverse((at, self.sent)),
                dest,
                bytes: d.clone(),
            });
        }
    }

    fn next_arrival(&self) -> Option<Instant> {
        self.flight.peek().map(|d| d.at.0 .0)
    }
}

struct Side {
    p: Protocol,
    me: Rank,
    next_send: u32,
    next_recv: u32,
    /// Received but not yet released (a slow receiver).
    held: Vec<u64>,
}

impl Side {
    /// The application's poll: send what the window allows, receive and
    /// check, release some.
    fn step(&mut self, now: Instant, total: u32, release: bool) -> Result<(), String> {
        let peer = 1 - self.me;
        while self.next_send < total {
            let m = message(self.me, self.next_send);
            match self.p.send_buffer(peer, m.len()) {
                Ok(b) => {
                    // SAFETY: the slot has `cap` ≥ len bytes.
                    unsafe { std::ptr::copy_nonoverlapping(m.as_ptr(), b.ptr, m.len()) };
                    self.p.commit(b, m.len(), now);
                    self.next_send += 1;
                }
                Err(DeviceError::NoBuffer { .. }) => break,
                Err(e) => return Err(format!("rank {}: {e}", self.me)),
            }
        }
        while self.held.len() <= 8 {
            let Some(r) = self.p.receive() else { break };
            check_arrival(self.me, peer, self.next_recv, &r)?;
            if self.next_recv >= total {
                return Err(format!("rank {} got an extra packet", self.me));
            }
            self.next_recv += 1;
            self.held.push(r.token);
        }
        if release || self.held.len() > 8 {
            for t in self.held.drain(..) {
                self.p.release(t);
            }
        }
        Ok(())
    }
}

/// Two sides exchange `total` messages each; then the network runs on for
/// 50 ms of virtual time and nothing more may arrive. Returns the virtual
/// time it took and each side's counters.
fn run(
    f: [Faults; 2],
    window: u32,
    pool: usize,
    total: u32,
    release_every: u32,
    reorder: bool,
    mode: Mode,
) -> Result<(Duration, [ReliableStats; 2]), String> {
    let t0 = Instant::now();
    let mut now = t0;
    let mut s = [0, 1].map(|me: Rank| {
        let mut c = config(me, window, pool, reorder);
        c.payload_crc = mode != Mode::PayloadUnchecked;
        if mode == (Mode::Forged { mac: true }) {
            c.mac = Some(MacKey::from_token("the-job-token-0123456789abcdef"));
        }
        let peer = config(1 - me, window, pool, reorder).epoch;
        let epochs = if me == 0 {
            [None, Some(peer)]
        } else {
            [Some(peer), None]
        };
        Side {
            p: Protocol::new(c, &epochs, now).expect("valid configuration"),
            me,
            next_send: 0,
            next_recv: 0,
            held: Vec::new(),
        }
    });
    let mut net = Net {
        faults: f,
        rng: f.map(|f| Rng(f.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)),
        flight: BinaryHeap::new(),
        sent: 0,
        corrupt_payload_only: mode == Mode::PayloadUnchecked,
        forger: matches!(mode, Mode::Forged { .. }),
    };
    let mut replayer = Replayer::for_mode(mode);
    let mut done_at = None;
    for tick in 0u64.. {
        for (i, side) in s.iter_mut().enumerate() {
            side.step(now, total, tick.is_multiple_of(release_every as u64))?;
            side.p.handle_timeout(now);
            while let Some(t) = side.p.poll_transmit(now) {
                net.send(i, t.dest, t.datagram, now);
            }
        }
        let finished = s.iter().all(|x| x.next_recv == total);
        match (finished, done_at) {
            (true, None) => done_at = Some(now),
            (true, Some(d)) if now > d + Duration::from_millis(50) => {
                return Ok((d - t0, s.map(|x| x.p.reliable_stats())))
            }
            _ => {}
        }
        if now - t0 > Duration::from_secs(60) {
            return Err(format!(
                "no completion in 60 s of virtual time: received {} and {} of {total}; {:?} / {:?}",
                s[0].next_recv,
                s[1].next_recv,
                s[0].p.reliable_stats(),
                s[1].p.reliable_stats()
            ));
        }
        // Idle (nothing in flight, nothing to send, nothing held): jump to
        // the next event instead of polling through empty time.
        let idle = net.flight.is_empty() && s.iter().all(|x| x.held.is_empty());
        now = match (idle, s.iter().filter_map(|x| x.p.poll_timeout()).min()) {
            (true, Some(t)) if t > now + POLL => t,
            _ => now + POLL,
        };
        while net.next_arrival().is_some_and(|t| t <= now) {
            let Some(d) = net.flight.pop() else { break };
            deliver(&mut s[d.dest as usize].p, &d.bytes, now);
            if let Some(r) = replayer.as_mut() {
                r.capture(d.dest, &d.bytes, now);
            }
        }
        if let Some(r) = replayer.as_mut() {
            r.deliver_due(&mut s, now);
        }
    }
    unreachable!("the loop returns")
}

/// `bytes` arrive at `p`.
fn deliver(p: &mut Protocol, bytes: &[u8], now: Instant) {
    let buf = p.recv_buffer();
    let n = bytes.len().min(buf.len());
    buf[..n].copy_from_slice(&bytes[..n]);
    p.handle_datagram(now, n, |_| true);
}

proptest! {
    // Ten times the wall-clock model's 80 cases, in a fraction of its time.
    #![proptest_config(ProptestConfig { cases: 1000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn exactly_once_in_order_intact_under_any_faults_in_virtual_time(s in shape()) {
        let r = run(s.faults, s.window, s.pool, 300, s.release_every, s.reorder, Mode::Checked);
        prop_assert!(r.is_ok(), "{:?}", r);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, failure_persistence: None, ..ProptestConfig::default() })]

    /// Every control packet of a run replayed at random later moments
    /// leaves the run as it was: the same transfer time to the virtual
    /// nanosecond and the same counters, but for the replays counted.
    #[test]
    fn replayed_control_packets_change_nothing_but_a_counter(s in shape(), seed in any::<u64>()) {
        let go = |mode| run(s.faults, s.window, s.pool, 200, s.release_every, s.reorder, mode);
        let (t, base) = go(Mode::Checked).map_err(TestCaseError::fail)?;
        let (t_replayed, replayed) =
            go(Mode::Replayed { seed, bump: false }).map_err(TestCaseError::fail)?;
        prop_assert_eq!(t_replayed, t);
        for (b, r) in base.iter().zip(&replayed) {
            prop_assert!(r.replayed_control >= b.replayed_control);
            prop_assert_eq!(ReliableStats { replayed_control: 0, ..*r }, ReliableStats { replayed_control: 0, ..*b });
        }
    }
}

/// The replay test is not blind: a replayer that may also raise the
/// control number (a job without MACs lets it fix the CRC) gets its
/// control packets acted on, and the run changes.
#[test]
fn replays_with_raised_control_numbers_would_be_seen() {
    let clean = [Faults::default(); 2];
    let base = run(clean, 8, 4, 300, 3, false, Mode::Checked).expect("completes");
    let replayed = Mode::Replayed {
        seed: 5,
        bump: false,
    };
    let (t_r, r) = run(clean, 8, 4, 300, 3, false, replayed).expect("completes");
    assert_eq!(t_r, base.0);
    assert!(r[0].replayed_control + r[1].replayed_control > 0, "{r:?}");
    let bumped = Mode::Replayed {
        seed: 5,
        bump: true,
    };
    let (t_b, b) = run(clean, 8, 4, 300, 3, false, bumped).expect("completes");
    assert!(t_b > base.0, "{t_b:?} against {:?}", base.0);
    assert_ne!(b, base.1);
}

/// A clean network: no retransmission, no timeout, ACKs coalesced — and
/// the same run twice takes the same virtual time (deterministic).
#[test]
fn a_clean_network_needs_no_retransmission_and_runs_the_same_twice() {
    let clean = [Faults::default(); 2];
    let a = run(clean, 16, 64, 1000, 1, false, Mode::Checked);
    assert_eq!(a, run(clean, 16, 64, 1000, 1, false, Mode::Checked));
    let (_, [s0, s1]) = a.expect("a clean run completes");
    for s in [s0, s1] {
        assert_eq!(
            (s.retransmits, s.timeouts, s.data_sent),
            (0, 0, 1000),
            "{s:?}"
        );
        assert!(s.acks_sent < 1000, "ACKs are coalesced: {s:?}");
    }
}

/// The checker is not blind: with the payload checksum off, a network
/// that corrupts payloads (headers intact) gets bad bytes through the
/// protocol, and the check of the received message says so.
#[test]
fn the_checker_catches_a_corrupted_payload() {
    let f = Faults {
        corrupt: 0.5,
        seed: 3,
        ..Faults::default()
    };
    let r = run([f, f], 8, 16, 300, 1, false, Mode::PayloadUnchecked);
    let e = r.expect_err("corrupted payloads went unnoticed");
    assert!(e.contains("expected message"), "{e}");
}

/// A forger who sees every packet and races it with an altered copy
/// (payload changed or turned into STOP, CRC fixed up) gets nothing
/// through the MAC: every message arrives exactly once and intact, each
/// forgery is counted, and the forged STOPs do not stall the senders.
/// Without the MAC the same forger gets its payloads delivered, and the
/// check says so.
#[test]
fn forged_packets_are_dropped_and_counted_under_the_mac() {
    let f = Faults {
        drop: 0.02,
        seed: 11,
        ..Faults::default()
    };
    let (_, [s0, s1]) = run([f, f], 8, 16, 500, 1, false, Mode::Forged { mac: true })
        .expect("exactly once and intact despite the forger");
    for s in [s0, s1] {
        assert!(s.dropped_unauthenticated >= 500, "{s:?}");
        assert_eq!(s.stops_received, 0, "a forged STOP was taken: {s:?}");
    }
    let e = run([f, f], 8, 16, 500, 1, false, Mode::Forged { mac: false })
        .expect_err("forged payloads went unnoticed without the MAC");
    assert!(e.contains("expected message"), "{e}");
}

/// Under total loss the protocol declares the peer unreachable after
/// `dead_after` of virtual time, and sends to it fail.
#[test]
fn total_loss_reports_the_peer_unreachable_at_the_deadline() {
    let t0 = Instant::now();
    let c = config(0, 4, 8, false);
    let dead_after = c.dead_after;
    let mut p = Protocol::new(c, &[None, Some(7)], t0).unwrap();
    let b = p.send_buffer(1, 10).unwrap();
    p.commit(b, 10, t0);
    let mut now = t0;
    let err = loop {
        while p.poll_transmit(now).is_some() {} // all lost
        match p.send_buffer(1, 10) {
            Ok(b) => p.commit(b, 10, now),
            Err(DeviceError::NoBuffer { .. }) => {}
            Err(e) => break e,
        }
        now = p
            .poll_timeout()
            .expect("a timer runs while packets are outstanding");
        p.handle_timeout(now);
    };
    assert!(
        matches!(err, DeviceError::Unreachable { dest: 1, .. }),
        "{err}"
    );
    assert!(now - t0 >= dead_after && now - t0 < dead_after + Duration::from_millis(50));
    let st = p.reliable_stats();
    assert_eq!(st.unreachable, 1, "{st:?}");
    // F-RTO: the first timeout resends one packet, the next goes back over all.
    assert!(st.timeouts >= 2 && st.retransmits >= st.timeouts, "{st:?}");
}

/// A receive pool too large to allocate is a clear error naming the
/// setting, not an abort (65536 datagrams of 64 KiB would be 4 GiB).
#[test]
fn a_pool_beyond_the_memory_limit_is_a_configuration_error() {
    let mut c = config(0, 4, 65536, false);
    c.mtu = 65_507;
    let e = Protocol::new(c, &[None, Some(7)], Instant::now())
        .err()
        .expect("refused");
    assert!(matches!(e, DeviceError::Config { .. }), "{e}");
    assert!(e.to_string().contains("FM_ETH_POOL"), "{e}");
    let mut c = config(0, 4, 16384, false);
    c.mtu = 65_507;
    assert!(Protocol::new(c, &[None, Some(7)], Instant::now()).is_ok());
}
