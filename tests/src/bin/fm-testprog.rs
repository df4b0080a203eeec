//! The program the multi-process tests launch, one process per rank.
//!
//! fm-testprog alltoall MESSAGES MAX_SIZE SEED
//!     every rank sends MESSAGES messages spread over all other ranks, sizes
//!     log-uniform in 0..=MAX_SIZE, in random pieces; receivers read in random
//!     chunks and check every byte, the count and the order per sender.
//! fm-testprog headtohead MESSAGES SIZE
//!     ranks 0 and 1 each send all their messages to the other before
//!     extracting once (run it with FM_CREDITS=1); prints the peak resident
//!     memory and the most the stash held.
//! fm-testprog ring ROUNDS
//!     a token goes round the ring ROUNDS times, every rank replying from its handler.
//! fm-testprog barrier ROUNDS
//!     every rank enters ROUNDS barriers; rank 0 prints "barriers done".
//! fm-testprog busy SECS
//!     every rank polls (extract, never sleeping) for SECS seconds, then
//!     enters a barrier and prints "rank R: busy ok".
//! fm-testprog noroute
//!     rank 0 sends to the last rank, which FM_HOSTS places on another host.
//! fm-testprog launcher N
//!     starts N ranks of an endless head-to-head exchange and waits for them
//!     (for testing what happens when a launcher is killed).
//! fm-testprog isolation TAG MESSAGES
//!     every rank sends MESSAGES messages carrying TAG to every other rank and
//!     fails if it receives one with another tag (two jobs side by side).
//! fm-testprog serve
//!     prints "rank R pid P ready", then handles messages until the job ends.
//! fm-testprog exit RANK CODE
//!     after a barrier, RANK leaves the job and exits with CODE; the others serve.
//! fm-testprog stream MESSAGES SIZE
//!     rank 0 sends MESSAGES messages of SIZE bytes to rank 1, which checks
//!     them (slowly with FM_TEST_SLOW_RANK=1) and says how long they took;
//!     prints the ethernet counters.
//! fm-testprog handlers RANK
//!     RANK registers handler 2 under another name than the other ranks.
//! fm-testprog tcp-sink PORT | tcp-source ADDR:PORT BYTES
//!     ordinary TCP traffic next to a job: the sink counts what arrives.
//! fm-testprog threads N
//!     rank 0's four threads send N messages each to rank 1 through one
//!     FmSender-shared endpoint while rank 0's main thread extracts; rank 1
//!     checks each thread's messages arrive once, in order, intact.
//! fm-testprog claim
//!     rank 0 sends rank 1 a forged first packet claiming a message of
//!     4 GiB − 1 bytes; rank 1's handler reads it with `receive_vec` and
//!     must fail at its 2 s wait limit, not abort (run it under a limit on
//!     the address space).
//! fm-testprog claim-remote
//!     the same for a forged single-copy piece of 4 GiB − 1 bytes that
//!     rank 1 must set aside while it waits for credit (`FM_CREDITS=1`):
//!     its send fails, naming the piece, instead of aborting.
//! fm-testprog frames IFACE COUNT
//!     broadcasts COUNT foreign frames of fm's EtherType on IFACE: another
//!     job's headers, truncated headers, random bytes.
//! fm-testprog bend control WORD XOR | bend slot BACK WORD XOR
//!     a stray write into the segment: after a barrier, rank 0 XORs XOR
//!     into 32-bit word WORD of the control block of the queue it sends
//!     rank 1 through (and then sends), or sends 3 messages that rank 1,
//!     asleep, has not taken and bends word WORD of the slot BACK positions
//!     before the queue's tail; then 64 messages of 8 B to 20 KB, which
//!     rank 1 checks. "rank 1: bend ok" when every message arrived intact.
//! fm-testprog cutshort
//!     rank 0 sends rank 1, past fm, the first 100 bytes of a message that
//!     claims 1,000, then a real message: rank 1's handler must be told the
//!     first was cut short (not handed 100 bytes as if whole), the second
//!     must arrive intact, and its byte counter must be what arrived.
//! fm-testprog replay-stop IFACE RATE PORT...
//!     an attacker on the path (needs CAP_NET_RAW): captures the first
//!     reliable-layer STOP that IFACE carries to one of the UDP PORTs and
//!     sends that frame again, unchanged, RATE times a second until its
//!     stdin closes; prints "captured STOP" and at the end "replayed N".

use fm::{Fm, FmError, Incoming};
use fm_devices::{Device, DeviceExt};
use fm_tests::threads::{thread_message, ThreadsSeen};
use fm_tests::{fill, Rng};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::Mutex;

const DATA: u16 = 1;
const TOKEN: u16 = 2;
const DONE: u16 = 3;

fn main() -> ExitCode {
    fm_tests::init_tracing();
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize| -> u64 { args.get(i).and_then(|s| s.parse().ok()).unwrap_or(0) };
    let r = match args.get(1).map(String::as_str) {
        Some("alltoall") => alltoall(arg(2), arg(3), arg(4)),
        Some("headtohead") => headtohead(arg(2), arg(3) as usize),
        Some("ring") => ring(arg(2)),
        Some("noroute") => noroute(),
        Some("barrier") => barriers(arg(2)),
        Some("busy") => busy(arg(2)),
        Some("launcher") => launcher(arg(2) as usize),
        Some("isolation") => isolation(args.get(2).cloned().unwrap_or_default(), arg(3)),
        Some("serve") => serve(None),
        Some("exit") => serve(Some((arg(2) as u32, arg(3) as i32))),
        Some("handlers") => handlers(arg(2) as u32),
        Some("stream") => stream(arg(2), arg(3) as usize),
        Some("tcp-sink") => tcp_sink(arg(2) as u16),
        Some("tcp-source") => tcp_source(args.get(2).cloned().unwrap_or_default(), arg(3)),
        Some("frames") => frames(args.get(2).cloned().unwrap_or_default(), arg(3)),
        Some("replay-stop") => replay_stop(&args[2.min(args.len())..]),
        Some("bend") => bend(&args[2.min(args.len())..]),
        Some("cutshort") => cut_short(),
        Some("threads") => threads(arg(2)),
        Some("claim") => claim(),
        Some("claim-remote") => claim_remote(),
        Some("corrupt") => corrupt(),
        Some("flood") => flood(args.get(2).cloned().unwrap_or_default(), arg(3)),
        Some("config") => fm::config::Config::from_env()
            .map(|_| println!("config ok"))
            .map_err(err),
        _ => Err("usage: fm-testprog alltoall|headtohead|ring|noroute ...".into()),
    };
    fm_tests::exit_with("fm-testprog", r)
}

type Res = Result<(), String>;

fn err(e: FmError) -> String {
    e.to_string()
}

/// What a receiver has seen: next expected sequence number per sender, and errors.
struct Seen {
    next: Vec<u64>,
    errors: Vec<String>,
    rng: Rng,
}

/// Message layout: seq (u64), then payload bytes made by `fill`.
fn check_message(m: &mut Incoming<'_>, seen: &mut Seen, me: u32) -> fm::Result<()> {
    let src = m.src();
    let len = m.len();
    let mut head = [0u8; 8];
    if len < 8 {
        seen.errors.push(format!(
            "message of {len} bytes from {src} is shorter than its header"
        ));
        return Ok(());
    }
    m.receive(&mut head)?;
    let seq = u64::from_le_bytes(head);
    if seq != seen.next[src as usize] {
        seen.errors.push(format!(
            "from {src}: got seq {seq}, expected {}",
            seen.next[src as usize]
        ));
    }
    seen.next[src as usize] = seq + 1;
    let mut got = vec![0u8; len - 8];
    // Scatter: read in random chunks.
    let mut off = 0;
    while off < got.len() {
        let chunk = (seen.rng.upto(got.len() as u64 - off as u64) as usize).max(1);
        let n = m.receive(&mut got[off..off + chunk])?;
        if n != chunk {
            seen.errors.push(format!(
                "from {src} seq {seq}: receive gave {n} of {chunk} bytes"
            ));
            return Ok(());
        }
        off += n;
    }
    let mut want = vec![0u8; got.len()];
    fill(&mut want, src, me, seq);
    if got != want {
        let at = got.iter().zip(&want).position(|(a, b)| a != b).unwrap_or(0);
        seen.errors.push(format!(
            "from {src} seq {seq} len {len}: payload differs at byte {}",
            at + 8
        ));
    }
    Ok(())
}

// Long because the all-to-all test is one exchange whose handlers, sends
// and checks share the record of what was seen.
#[allow(clippy::too_many_lines)]
fn alltoall(messages: u64, max_size: u64, seed: u64) -> Res {
    let seen = Arc::new(Mutex::new(Seen {
        next: Vec::new(),
        errors: Vec::new(),
        rng: Rng::new(seed),
    }));
    let s2 = seen.clone();
    let slow: Option<u32> = std::env::var("FM_TEST_SLOW_RANK")
        .ok()
        .and_then(|v| v.parse().ok());
    let gap_us = gap_us();
    let mut fm = Fm::builder()
        .handler(DATA, "data", move |m| {
            let me = m.endpoint_ref().rank();
            if slow == Some(me) {
                // A receiver that extracts slowly (FM_TEST_SLOW_RANK).
                std::thread::sleep(std::time::Duration::from_micros(200));
            }
            check_message(m, &mut s2.lock().unwrap(), me)
        })
        .from_env()
        .map_err(err)?
        .build()
        .map_err(err)?;
    pause_at_endpoint(&fm);
    // The rank the job gave (under Slurm, FM_RANK is not set).
    let rank = fm.rank();
    let size = fm.size() as u32;
    seen.lock().unwrap().next = vec![0; size as usize];
    seen.lock().unwrap().rng = Rng::new(seed ^ 0xabc ^ rank as u64);
    let mut rng = Rng::new(seed.wrapping_add(rank as u64 * 7919));
    let mut seq = vec![0u64; size as usize];
    let mut payload = vec![0u64; size as usize];
    let mut buf = Vec::new();
    for i in 0..messages {
        let dst = (rank + 1 + (i % (size as u64 - 1)) as u32) % size;
        let len = rng.size(max_size).max(8) as usize;
        buf.resize(len, 0);
        let s = seq[dst as usize];
        buf[..8].copy_from_slice(&s.to_le_bytes());
        fill(&mut buf[8..], rank, dst, s);
        seq[dst as usize] += 1;
        payload[dst as usize] += len as u64;
        // Gather: up to three pieces.
        fm.begin_message(dst, len, DATA).map_err(err)?;
        let a = rng.upto(len as u64) as usize;
        let b = a + rng.upto((len - a) as u64) as usize;
        for piece in [&buf[..a], &buf[a..b], &buf[b..]] {
            fm.send_piece(piece).map_err(err)?;
        }
        fm.end_message().map_err(err)?;
        if gap_us > 0 {
            // FM_TEST_GAP_US: wait a random while in fm (sleeping, with
            // FM_WAIT=block), woken early by what arrives.
            let pause = std::time::Duration::from_micros(rng.upto(gap_us));
            fm.extract_wait_timeout(usize::MAX, pause).map_err(err)?;
        } else if i % 16 == 0 {
            fm.extract(usize::MAX).map_err(err)?;
        }
    }
    // Everyone tells everyone how many they sent, then waits for its own.
    let expected: Vec<u64> = (0..size)
        .map(|src| {
            if src == rank {
                0
            } else {
                count_sent(messages, src, rank, size)
            }
        })
        .collect();
    loop {
        let done = seen
            .lock()
            .unwrap()
            .next
            .iter()
            .zip(&expected)
            .all(|(a, b)| a >= b);
        if done {
            break;
        }
        fm.extract_wait(usize::MAX).map_err(err)?;
    }
    fm.barrier().map_err(err)?;
    fm.extract(usize::MAX).map_err(err)?;
    let s = seen.lock().unwrap();
    if s.next != expected {
        return Err(format!(
            "received counts {:?}, expected {:?}",
            s.next, expected
        ));
    }
    if !s.errors.is_empty() {
        return Err(format!(
            "{} errors, first: {:?}",
            s.errors.len(),
            &s.errors[..s.errors.len().min(5)]
        ));
    }
    let st = fm.stats();
    if st.dropped_malformed != 0 || st.dropped_unknown_handler != 0 {
        return Err(format!("drops: {st:?}"));
    }
    // FM_TEST_WANT_SINGLE_COPY: with the default settings, long pieces to a
    // peer that allows single copy must have gone both ways (the endpoint
    // measures both before choosing).
    let cma_peer = (0..size).any(|r| r != rank && fm.composite().remote_memory_to(r));
    if std::env::var_os("FM_TEST_WANT_SINGLE_COPY").is_some()
        && cma_peer
        && st.single_copy_pieces == 0
    {
        return Err(format!("no piece went by single copy: {st:?}"));
    }
    eprintln!(
        "rank {rank}: ok, received {} messages; stats {:?}",
        expected.iter().sum::<u64>(),
        st
    );
    print_network_counters(&fm);
    print_route_bytes(&fm, &payload);
    Ok(())
}

/// One line per member device (`fm_tests::route_bytes` parses them):
/// "route rank R: DEVICE payload P sent B" — P the message bytes this rank
/// sent to the ranks its table routes through DEVICE (for shmem, less the
/// bytes the receivers read by single copy), B the packet bytes
/// the device counted. B is P plus headers and control packets only when
/// each destination's traffic went through the device its table names.
fn print_route_bytes(fm: &Fm, payload: &[u64]) {
    let c = fm.composite();
    for (dev, st) in c.member_stats() {
        let mut p: u64 = (0..payload.len() as u32)
            .filter(|&d| c.info_for(d).is_some_and(|i| i.name == dev))
            .map(|d| payload[d as usize])
            .sum();
        if dev == "shmem" {
            // Single copy: the receiver reads these from our memory.
            p -= fm.stats().single_copy_bytes;
        }
        println!(
            "route rank {}: {dev} payload {p} sent {}",
            fm.rank(),
            st.bytes_sent
        );
    }
}

/// How many of `src`'s `messages` go to `dst` (same round-robin as the sender).
fn count_sent(messages: u64, src: u32, dst: u32, size: u32) -> u64 {
    (0..messages)
        .filter(|i| (src + 1 + (i % (size as u64 - 1)) as u32) % size == dst)
        .count() as u64
}

fn headtohead(messages: u64, size: usize) -> Res {
    let got = Arc::new(Mutex::new(0u64));
    let g2 = got.clone();
    let mut fm = Fm::builder()
        .handler(DATA, "data", move |m| {
            let v = m.receive_vec()?;
            if v.len() == m.len() {
                *g2.lock().unwrap() += 1;
            }
            Ok(())
        })
        .from_env()
        .map_err(err)?
        .build()
        .map_err(err)?;
    let peer = 1 - fm.rank();
    let buf = vec![7u8; size];
    for _ in 0..messages {
        fm.send(peer, DATA, &buf).map_err(err)?;
    }
    while *got.lock().unwrap() < messages {
        fm.extract_wait(usize::MAX).map_err(err)?;
    }
    fm.barrier().map_err(err)?;
    // Peak resident memory: what the set-aside stream cost (FM_STASH_BYTES).
    let hwm_kib = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let l = s.lines().find(|l| l.starts_with("VmHWM:"))?;
            l.split_whitespace().nth(1)?.parse::<u64>().ok()
        })
        .unwrap_or(0);
    let st = fm.stats();
    println!(
        "rank {}: head-to-head ok; peak resident {hwm_kib} KiB; stash peak {} bytes; stats {st:?}",
        fm.rank(),
        st.stash_peak_bytes
    );
    Ok(())
}

/// Sending threads of `threads N`.
const THREADS: usize = 4;

/// `threads N` (module docs).
fn threads(per_thread: u64) -> Res {
    let seen = Arc::new(Mutex::new(ThreadsSeen::new(THREADS)));
    let (s1, s2) = (seen.clone(), seen.clone());
    let mut fm = Fm::builder()
        .handler(DATA, "data", move |m| {
            let v = m.receive_vec()?;
            s1.lock().unwrap().see(&v);
            Ok(())
        })
        .handler(DONE, "done", move |_| {
            s2.lock().unwrap().done += 1;
            Ok(())
        })
        .from_env()
        .map_err(err)?
        .build()
        .map_err(err)?;
    if fm.rank() == 0 {
        let senders: Vec<_> = (0..THREADS as u64)
            .map(|t| {
                let s = fm.sender();
                std::thread::spawn(move || -> fm::Result<()> {
                    for seq in 0..per_thread {
                        s.send(1, DATA, &thread_message(t, seq))?;
                    }
                    // After its data in the outbox: the owner has sent all
                    // of this thread's messages when it handles this.
                    s.send(0, DONE, &[])
                })
            })
            .collect();
        while seen.lock().unwrap().done < THREADS {
            fm.extract_wait(usize::MAX).map_err(err)?;
        }
        for t in senders {
            t.join()
                .map_err(|_| "a sending thread panicked")?
                .map_err(err)?;
        }
    } else if fm.rank() == 1 {
        while seen.lock().unwrap().next.iter().sum::<u64>() < THREADS as u64 * per_thread {
            fm.extract_wait(usize::MAX).map_err(err)?;
        }
    }
    fm.barrier().map_err(err)?;
    let g = seen.lock().unwrap();
    if !g.errors.is_empty() {
        let first = &g.errors[..g.errors.len().min(5)];
        return Err(format!("{} errors, first: {first:?}", g.errors.len()));
    }
    if fm.rank() == 1 && g.next != vec![per_thread; THREADS] {
        return Err(format!(
            "received {:?}, expected {per_thread} per thread",
            g.next
        ));
    }
    Ok(())
}

/// Send rank 1, past fm, the first packet of a message claiming `len`
/// bytes: a header of `kind`, then `payload`.
fn forge_first_packet(fm: &mut Fm, kind: fm::wire::Kind, len: u32, payload: &[u8]) -> Res {
    let forged = fm::wire::Header {
        kind,
        flags: fm::wire::FIRST,
        handler: DATA,
        credits: 0,
        msg_len: len,
    };
    let mut p = vec![0u8; fm::wire::HEADER + payload.len()];
    forged.encode(&mut p);
    p[fm::wire::HEADER..].copy_from_slice(payload);
    let dev = fm.composite_mut();
    let mut b = dev.get_send_buffer(1, p.len()).map_err(|e| e.to_string())?;
    b.copy_from_slice(&p);
    b.send();
    Ok(())
}

/// `claim` (module docs).
fn claim() -> Res {
    let done = Arc::new(Mutex::new(false));
    let mut fm = Fm::builder()
        .handler(DATA, "data", |m| m.receive_vec().map(drop))
        .handler(DONE, "done", done_handler(&done))
        .from_env()
        .map_err(err)?
        .build()
        .map_err(err)?;
    if fm.rank() == 0 {
        forge_first_packet(&mut fm, fm::wire::Kind::Data, u32::MAX, &[0; 100])?;
        wait_done(&mut fm, &done)?;
    } else {
        fm.set_wait_timeout(Some(std::time::Duration::from_secs(2)));
        let e = loop {
            if let Err(e) = fm.extract_wait(usize::MAX) {
                break e;
            }
        };
        if !matches!(e.kind(), fm::ErrorKind::Timeout { what, .. } if what.contains("rest of a message"))
        {
            return Err(format!(
                "expected a timeout reading the rest of the message, got: {e}"
            ));
        }
        fm.set_wait_timeout(None);
        fm.send(0, DONE, &[]).map_err(err)?;
    }
    fm.barrier().map_err(err)
}

/// A handler that marks `done`.
fn done_handler(
    done: &Arc<Mutex<bool>>,
) -> impl FnMut(&mut Incoming<'_>) -> fm::Result<()> + Send + 'static {
    let d = done.clone();
    move |_| {
        *d.lock().unwrap() = true;
        Ok(())
    }
}

/// Rank 0 of `claim` and `cutshort`: nothing more goes to rank 1 (the
/// barrier's first message would cut the forged message short, or add to
/// the counters it checks) until it says it is done.
fn wait_done(fm: &mut Fm, done: &Mutex<bool>) -> Res {
    while !*done.lock().unwrap() {
        fm.extract_wait(usize::MAX).map_err(err)?;
    }
    Ok(())
}

/// `claim-remote` (module docs).
fn claim_remote() -> Res {
    let mut fm = Fm::init().map_err(err)?;
    if fm.rank() == 0 {
        // Any address of this process: the read must not be reached.
        let mut piece = [0u8; fm::wire::REMOTE_PAYLOAD];
        let addr = piece.as_ptr() as u64;
        piece[..8].copy_from_slice(&addr.to_le_bytes());
        piece[8..].copy_from_slice(&u64::from(u32::MAX).to_le_bytes());
        forge_first_packet(&mut fm, fm::wire::Kind::Remote, u32::MAX, &piece)?;
        // Not extracting for a while: rank 1 waits for credit meanwhile.
        std::thread::sleep(std::time::Duration::from_secs(1));
        fm.extract_wait_timeout(usize::MAX, std::time::Duration::from_secs(2))
            .map_err(err)?;
        return Ok(());
    }
    fm.send(0, DATA, b"first").map_err(err)?;
    match fm.send(0, DATA, b"second") {
        Err(e)
            if e.to_string()
                .contains("single-copy piece of 4294967295 bytes from rank 0") =>
        {
            Ok(())
        }
        other => Err(format!("expected the set-aside to fail, got {other:?}")),
    }
}

/// `FM_TEST_GAP_US`: the longest random pause between sends (0: none).
fn gap_us() -> u64 {
    std::env::var("FM_TEST_GAP_US")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn ring(rounds: u64) -> Res {
    let seen = Arc::new(Mutex::new(0u64));
    let gap_us = gap_us();
    let s2 = seen.clone();
    let mut fm = Fm::builder()
        .handler(TOKEN, "token", move |m| {
            let v = m.receive_vec()?;
            let hop = u64::from_le_bytes(v[..8].try_into().unwrap_or([0; 8]));
            *s2.lock().unwrap() += 1;
            let ep = m.endpoint();
            let next = (ep.rank() + 1) % ep.size() as u32;
            let size = ep.size() as u64;
            if gap_us > 0 {
                // FM_TEST_GAP_US: hold the token a random while, so the
                // next rank is sometimes asleep when it comes, sometimes not.
                let us = hop.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40;
                std::thread::sleep(std::time::Duration::from_micros(us % gap_us));
            }
            if hop + 1 < rounds * size {
                ep.send(next, TOKEN, &(hop + 1).to_le_bytes())?;
            }
            Ok(())
        })
        .from_env()
        .map_err(err)?
        .build()
        .map_err(err)?;
    // Hop h is received by rank (h + 1) mod size: every rank sees `rounds` hops.
    if fm.rank() == 0 {
        let first = 1 % fm.size() as u32;
        fm.send(first, TOKEN, &0u64.to_le_bytes()).map_err(err)?;
    }
    while *seen.lock().unwrap() < rounds {
        fm.extract_wait(usize::MAX).map_err(err)?;
    }
    fm.barrier().map_err(err)
}

fn barriers(rounds: u64) -> Res {
    let mut fm = Fm::init().map_err(err)?;
    for _ in 0..rounds {
        fm.barrier().map_err(err)?;
    }
    if fm.rank() == 0 {
        println!("barriers done: {rounds} rounds of {} ranks", fm.size());
    }
    Ok(())
}

fn busy(secs: u64) -> Res {
    let mut fm = Fm::init().map_err(err)?;
    let until = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    while std::time::Instant::now() < until {
        fm.extract(usize::MAX).map_err(err)?;
    }
    fm.barrier().map_err(err)?;
    println!("rank {}: busy ok", fm.rank());
    Ok(())
}

fn noroute() -> Res {
    let mut fm = Fm::init().map_err(err)?;
    let last = fm.size() as u32 - 1;
    if fm.rank() != 0 {
        return Ok(());
    }
    match fm.send(last, DATA, b"x") {
        Err(e)
            if matches!(
                e.device_error(),
                Some(fm_devices::DeviceError::NoRoute { .. })
            ) =>
        {
            println!("no-route: {e}");
            Ok(())
        }
        other => Err(format!("expected a no-route error, got {other:?}")),
    }
}

fn launcher(n: usize) -> Res {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let job = fm_launcher::LocalJob::spawn(n, false, |_| {
        let mut c = std::process::Command::new(&exe);
        c.args(["headtohead", "1000000000", "64"]);
        c
    })
    .map_err(|e| e.to_string())?;
    println!("job {}", job.job_key);
    let out = job.wait(std::time::Duration::from_secs(3600));
    if out.success() {
        Ok(())
    } else {
        Err(format!("{out:?}"))
    }
}

fn isolation(tag: String, messages: u64) -> Res {
    let tag = Arc::new(tag.into_bytes());
    let got = Arc::new(Mutex::new((0u64, Vec::<String>::new())));
    let (t2, g2) = (tag.clone(), got.clone());
    let mut fm = Fm::builder()
        .handler(DATA, "tagged", move |m| {
            let body = m.receive_vec()?;
            let mut g = g2.lock().unwrap();
            g.0 += 1;
            if !body.starts_with(&t2) {
                let seen = String::from_utf8_lossy(&body[..body.len().min(40)]).into_owned();
                g.1.push(format!("from rank {}: {seen:?}", m.src()));
            }
            Ok(())
        })
        .from_env()
        .map_err(err)?
        .build()
        .map_err(err)?;
    let (me, size) = (fm.rank(), fm.size() as u32);
    let mut body = tag.to_vec();
    body.extend_from_slice(&[0u8; 56]);
    for i in 0..messages {
        for dst in (0..size).filter(|&d| d != me) {
            let at = tag.len();
            body[at..at + 8].copy_from_slice(&i.to_le_bytes());
            fm.send(dst, DATA, &body).map_err(err)?;
        }
        fm.extract(usize::MAX).map_err(err)?;
    }
    let want = messages * (size as u64 - 1);
    while got.lock().unwrap().0 < want {
        fm.extract_wait(usize::MAX).map_err(err)?;
    }
    fm.barrier().map_err(err)?;
    let g = got.lock().unwrap();
    if !g.1.is_empty() {
        return Err(format!("{} foreign messages, first {}", g.1.len(), g.1[0]));
    }
    println!(
        "isolation ok: rank {me} got {} messages tagged {:?}",
        g.0,
        String::from_utf8_lossy(&tag)
    );
    Ok(())
}

/// A rank whose one handler ignores what it gets.
fn idle_fm() -> Result<Fm, String> {
    Fm::builder()
        .handler(DATA, "data", |_| Ok(()))
        .from_env()
        .map_err(err)?
        .build()
        .map_err(err)
}

/// Handle messages until the job ends; with `exit`, that rank leaves and
/// exits with the code after the first barrier.
fn serve(exit: Option<(u32, i32)>) -> Res {
    let mut fm = idle_fm()?;
    println!("rank {} pid {} ready", fm.rank(), std::process::id());
    use std::io::Write;
    let _ = std::io::stdout().flush();
    fm.barrier().map_err(err)?;
    if let Some((rank, code)) = exit {
        if fm.rank() == rank {
            drop(fm);
            std::process::exit(code);
        }
    }
    loop {
        fm.extract_wait(usize::MAX).map_err(err)?;
    }
}

/// Open `n` connections to the GRM at `addr` and hold them, saying
/// nothing, until killed: a client that would lock others out.
fn flood(addr: String, n: u64) -> Res {
    let held: Vec<std::net::TcpStream> = (0..n)
        .filter_map(|_| std::net::TcpStream::connect(&addr).ok())
        .collect();
    println!("flood: holding {} connections", held.len());
    use std::io::Write;
    let _ = std::io::stdout().flush();
    loop {
        std::thread::sleep(std::time::Duration::from_secs(1));
    }
}

/// Rank 0 puts a packet no sender could have made into rank 1's queue
/// (an inline packet claiming more bytes than a slot holds), as a stray
/// write into the shared segment would; then every rank waits.
fn corrupt() -> Res {
    let mut fm = idle_fm()?;
    fm.barrier().map_err(err)?;
    if fm.rank() == 0 {
        let shm = fm.composite_mut().shmem_mut().ok_or("no shmem device")?;
        shm.debug_publish_inline(1, 0, 200)
            .map_err(|e| e.to_string())?;
    }
    loop {
        fm.extract_wait(usize::MAX).map_err(err)?;
    }
}

fn handlers(odd_rank: u32) -> Res {
    let me: u32 = std::env::var("FM_RANK")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let name = if me == odd_rank { "reply-v2" } else { "reply" };
    let mut fm = Fm::builder()
        .handler(DATA, "data", |_| Ok(()))
        .handler(TOKEN, name, |_| Ok(()))
        .from_env()
        .map_err(err)?
        .build()
        .map_err(err)?;
    fm.barrier().map_err(err)
}

/// The next message from `src` to `dst`, `len` bytes of `fill` by its
/// number, is `body`: counted in `g.0`, and a difference noted in `g.1`.
fn check_next(g: &mut (u64, Vec<String>), body: &[u8], len: usize, src: u32, dst: u32) {
    let n = g.0;
    let mut want = vec![0u8; len];
    fill(&mut want, src, dst, n);
    if body != want {
        g.1.push(format!("message {n}: {} bytes, not as sent", body.len()));
    }
    g.0 += 1;
}

/// FM_TEST_PAUSE_MS: say where the ethernet device listens, then wait
/// (a test sprays garbage at the devices, or starts an attacker, meanwhile).
fn pause_at_endpoint(fm: &Fm) {
    if let Some(ms) = std::env::var("FM_TEST_PAUSE_MS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        if let Some(e) = fm.ethernet_endpoint() {
            println!("endpoint {}", e.addrs[0]);
        }
        println!("paused rank {}", fm.rank());
        use std::io::Write;
        let _ = std::io::stdout().flush();
        std::thread::sleep(std::time::Duration::from_millis(ms));
    }
}

fn stream(messages: u64, size: usize) -> Res {
    let slow: Option<u32> = std::env::var("FM_TEST_SLOW_RANK")
        .ok()
        .and_then(|v| v.parse().ok());
    let got = Arc::new(Mutex::new((0u64, Vec::<String>::new())));
    let g2 = got.clone();
    let mut fm = Fm::builder()
        .handler(DATA, "data", move |m| {
            let me = m.endpoint_ref().rank();
            if slow == Some(me) {
                std::thread::sleep(std::time::Duration::from_micros(300));
            }
            let body = m.receive_vec()?;
            check_next(&mut g2.lock().unwrap(), &body, body.len(), m.src(), me);
            Ok(())
        })
        .from_env()
        .map_err(err)?
        .build()
        .map_err(err)?;
    pause_at_endpoint(&fm);
    let t0 = std::time::Instant::now();
    let me = fm.rank();
    if me == 0 {
        let mut body = vec![0u8; size];
        for i in 0..messages {
            fill(&mut body, 0, 1, i);
            fm.send(1, DATA, &body).map_err(err)?;
        }
    } else if me == 1 {
        while got.lock().unwrap().0 < messages {
            fm.extract_wait(usize::MAX).map_err(err)?;
        }
        let g = got.lock().unwrap();
        if !g.1.is_empty() {
            return Err(format!("{} bad messages, first: {}", g.1.len(), g.1[0]));
        }
        eprintln!(
            "rank 1: ok, received {} messages in {:.3} s",
            g.0,
            t0.elapsed().as_secs_f64()
        );
    }
    fm.barrier().map_err(err)?;
    print_network_counters(&fm);
    Ok(())
}

/// One line per network device the tests parse (`fm_tests::network_counter`):
/// "ethernet rank R: retransmits N timeouts N …", for the devices the job has.
fn print_network_counters(fm: &Fm) {
    for dev in [
        fm_devices::DeviceKind::Nic,
        fm_devices::DeviceKind::Ethernet,
    ] {
        let Some(e) = fm.composite().network_stats(dev) else {
            continue;
        };
        println!(
            "{dev} rank {}: data-sent {} data-accepted {} retransmits {} timeouts {} loses {} duplicates {} invalid-drops {} out-of-order {} stops-sent {} stops-received {} gos-sent {} probes {} kernel-drops {} spurious-timeouts {} replayed-control {}",
            fm.rank(), e.data_sent, e.data_accepted, e.retransmits, e.timeouts, e.loses_received, e.duplicates, e.invalid_drops(),
            e.out_of_order, e.stops_sent, e.stops_received, e.gos_sent, e.probes, e.kernel_drops, e.spurious_timeouts, e.replayed_control
        );
        if std::env::var_os("FM_TEST_DEBUG").is_some() {
            eprintln!("{dev}: {e:?}");
        }
    }
}

fn tcp_sink(port: u16) -> Res {
    use std::io::Read;
    let l = std::net::TcpListener::bind(("0.0.0.0", port)).map_err(|e| e.to_string())?;
    println!("tcp-sink: listening");
    let (mut s, _) = l.accept().map_err(|e| e.to_string())?;
    let (mut total, mut buf) = (0u64, vec![0u8; 1 << 16]);
    loop {
        match s.read(&mut buf).map_err(|e| e.to_string())? {
            0 => break,
            n => total += n as u64,
        }
    }
    println!("tcp-sink: received {total} bytes");
    Ok(())
}

fn tcp_source(to: String, bytes: u64) -> Res {
    use std::io::Write;
    let t0 = std::time::Instant::now();
    let mut s = loop {
        match std::net::TcpStream::connect(&to) {
            Ok(s) => break s,
            Err(e) if t0.elapsed().as_secs() >= 10 => return Err(format!("connect {to}: {e}")),
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(20)),
        }
    };
    let chunk = vec![0x5au8; 1 << 16];
    let mut left = bytes;
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        s.write_all(&chunk[..n]).map_err(|e| e.to_string())?;
        left -= n as u64;
    }
    println!("tcp-source: sent {bytes} bytes");
    Ok(())
}

/// Broadcast foreign frames of fm's EtherType on `iface` (needs CAP_NET_RAW).
fn frames(iface: String, count: u64) -> Res {
    use fm_devices::reliable::header::{Header, Kind, HEADER};
    let mac = fm_platform::interface_mac(&iface).ok_or(format!("no interface {iface}"))?;
    let (fd, mut sll) = packet_socket(&iface, 0)?;
    // SAFETY: plain syscalls on a socket this function owns and closes.
    unsafe {
        sll.sll_halen = 6;
        sll.sll_addr[..6].copy_from_slice(&[0xff; 6]);
        let mut rng = Rng::new(count ^ 0x5eed);
        let mut sent = 0;
        for i in 0..count {
            let mut f = vec![0xffu8; 6];
            f.extend_from_slice(&mac);
            f.extend_from_slice(&fm_devices::nic::DEFAULT_ETHERTYPE.to_be_bytes());
            match i % 3 {
                0 => {
                    // A well-formed packet of another job, to a real rank.
                    let h = Header {
                        kind: Kind::Data,
                        job_key: rng.next_u64(),
                        src: 1,
                        dst: (i % 8) as u32,
                        src_epoch: 3,
                        dst_epoch: 5,
                        number: 1,
                        ack: 0,
                        len: 16,
                        control: 0,
                        payload_crc: false,
                        mac: false,
                    };
                    let mut d = vec![0u8; HEADER + 16];
                    h.write(&mut d, None);
                    f.extend_from_slice(&d);
                }
                1 => f.extend_from_slice(&b"Fm\x03\x01truncated header"[..]),
                _ => f.extend((0..40 + rng.upto(1400)).map(|_| rng.next_u64() as u8)),
            }
            let rc = libc::sendto(
                fd,
                f.as_ptr().cast(),
                f.len(),
                0,
                (&sll as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            );
            if rc > 0 {
                sent += 1;
            }
            if i % 64 == 63 {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
        libc::close(fd);
        println!("frames: sent {sent}");
    }
    Ok(())
}

/// Capture the first reliable-layer STOP on `iface` to one of the UDP
/// ports in `args[2..]`, then replay that frame `args[1]` times a second
/// until stdin closes (needs CAP_NET_RAW).
fn replay_stop(args: &[String]) -> Res {
    use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
    let [iface, rate, ports @ ..] = args else {
        return Err("usage: replay-stop IFACE RATE PORT...".into());
    };
    let rate: u64 = rate.parse().map_err(|_| format!("bad rate {rate}"))?;
    let ports: Vec<u16> = (ports.iter())
        .map(|p| p.parse().map_err(|_| format!("bad port {p}")))
        .collect::<Result<_, _>>()?;
    let done = Arc::new(AtomicBool::new(false));
    let d2 = done.clone();
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
        d2.store(true, Relaxed);
    });
    let Some((mut frame, sll)) = capture_stop(iface, &ports, &done)? else {
        println!("no STOP seen; replayed 0");
        return Ok(());
    };
    // Loopback and veth leave the UDP checksum for the hardware to finish
    // (it only holds the pseudo-header's sum): replayed as captured, the
    // kernel would drop it. 0 says "no checksum" in IPv4.
    let udp = 14 + (frame[14] & 0x0f) as usize * 4;
    frame[udp + 6..udp + 8].fill(0);
    println!("captured STOP ({} bytes)", frame.len());
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let gap = std::time::Duration::from_secs_f64(1.0 / rate.max(1) as f64);
    let t0 = std::time::Instant::now();
    let (mut sent, mut tries) = (0u64, 0u32);
    // A socket that receives nothing: one that sees every frame costs the
    // machine a copy of each, which an attacker elsewhere on the path would
    // not cost the job's hosts.
    let (fd, _) = packet_socket(iface, 0)?;
    // SAFETY: plain syscalls on a socket this function owns and closes;
    // the frame and address outlive each call.
    unsafe {
        while !done.load(Relaxed) {
            let to = (&sll as *const libc::sockaddr_ll).cast();
            let len = std::mem::size_of::<libc::sockaddr_ll>() as u32;
            if libc::sendto(fd, frame.as_ptr().cast(), frame.len(), 0, to, len) > 0 {
                sent += 1;
            }
            // Paced from the start, so sleeping late does not lower the rate.
            tries += 1;
            let next = t0 + gap * tries;
            std::thread::sleep(next.saturating_duration_since(std::time::Instant::now()));
        }
        libc::close(fd);
    }
    println!("replayed {sent}");
    Ok(())
}

/// The first STOP to one of `ports` that `iface` carries, and the
/// interface's address to send it back out of; `None` once `done`.
fn capture_stop(
    iface: &str,
    ports: &[u16],
    done: &std::sync::atomic::AtomicBool,
) -> Result<Option<(Vec<u8>, libc::sockaddr_ll)>, String> {
    let all = (libc::ETH_P_ALL as u16).to_be();
    let (fd, sll) = packet_socket(iface, all)?;
    // SAFETY: plain syscalls on a socket this function owns and closes;
    // the buffers outlive each call.
    unsafe {
        let sll_len = std::mem::size_of::<libc::sockaddr_ll>() as u32;
        let tv = libc::timeval {
            tv_sec: 0,
            tv_usec: 100_000,
        };
        let tv_len = std::mem::size_of::<libc::timeval>() as u32;
        if libc::bind(fd, (&sll as *const libc::sockaddr_ll).cast(), sll_len) != 0
            || libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&tv as *const libc::timeval).cast(),
                tv_len,
            ) != 0
        {
            let e = std::io::Error::last_os_error();
            libc::close(fd);
            return Err(format!("bind to {iface}: {e}"));
        }
        let mut buf = vec![0u8; 65_536];
        let mut found = None;
        while found.is_none() && !done.load(std::sync::atomic::Ordering::Relaxed) {
            let n = libc::recv(fd, buf.as_mut_ptr().cast(), buf.len(), 0);
            if n > 0 && is_stop(&buf[..n as usize], ports) {
                found = Some((buf[..n as usize].to_vec(), sll));
            }
        }
        libc::close(fd);
        Ok(found)
    }
}

/// A raw packet socket of `protocol` (network order; 0: one that receives
/// nothing) and the address of interface `iface` for it (needs CAP_NET_RAW).
fn packet_socket(iface: &str, protocol: u16) -> Result<(i32, libc::sockaddr_ll), String> {
    let name = std::ffi::CString::new(iface).map_err(|e| e.to_string())?;
    // SAFETY: plain syscalls; the name outlives the call.
    unsafe {
        let index = libc::if_nametoindex(name.as_ptr());
        let fd = libc::socket(libc::AF_PACKET, libc::SOCK_RAW, protocol.into());
        if fd < 0 || index == 0 {
            let e = std::io::Error::last_os_error();
            if fd >= 0 {
                libc::close(fd);
            }
            return Err(format!("packet socket on {iface}: {e}"));
        }
        let mut sll: libc::sockaddr_ll = std::mem::zeroed();
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = protocol;
        sll.sll_ifindex = index as i32;
        Ok((fd, sll))
    }
}

/// Whether an Ethernet frame (14 bytes, IPv4 with its IHL, UDP's 8, then
/// fm's header) is a reliable-layer STOP of this version to one of `ports`.
fn is_stop(f: &[u8], ports: &[u16]) -> bool {
    use fm_devices::reliable::header::{Kind, VERSION};
    if f.len() < 14 + 20 || f[12..14] != [0x08, 0x00] || f[14 + 9] != 17 {
        return false;
    }
    let udp = 14 + (f[14] & 0x0f) as usize * 4;
    let fm_at = udp + 8;
    f.len() > fm_at + 4
        && ports.contains(&u16::from_be_bytes([f[udp + 2], f[udp + 3]]))
        && f[fm_at..fm_at + 2] == *b"Fm"
        && f[fm_at + 2] == VERSION
        && f[fm_at + 3] == Kind::Stop as u8
}

/// See `bend` in the module's help: a stray write into the queue rank 0
/// sends rank 1 through, then a stream rank 1 checks.
fn bend(args: &[String]) -> Res {
    let num = |s: &String| -> Result<u32, String> {
        let v = s.trim_start_matches("0x");
        u32::from_str_radix(v, if s.starts_with("0x") { 16 } else { 10 })
            .map_err(|_| format!("bad number {s}"))
    };
    let (back, word, xor) = match args {
        [w, word, xor] if w == "control" => (None, num(word)?, num(xor)?),
        [w, back, word, xor] if w == "slot" => (Some(num(back)?), num(word)?, num(xor)?),
        _ => return Err("usage: bend control WORD XOR | bend slot BACK WORD XOR".into()),
    };
    const SIZES: [usize; 4] = [8, 40, 1000, 20_000];
    const MESSAGES: u64 = 64;
    let got = Arc::new(Mutex::new((0u64, Vec::<String>::new())));
    let g2 = got.clone();
    let mut fm = Fm::builder()
        .handler(DATA, "data", move |m| {
            let body = m.receive_vec()?;
            let mut g = g2.lock().unwrap();
            let len = SIZES[g.0 as usize % SIZES.len()];
            check_next(&mut g, &body, len, 0, 1);
            Ok(())
        })
        .from_env()
        .map_err(err)?
        .build()
        .map_err(err)?;
    fm.barrier().map_err(err)?;
    let send = |fm: &mut Fm, i: u64| {
        let mut body = vec![0u8; SIZES[i as usize % SIZES.len()]];
        fill(&mut body, 0, 1, i);
        fm.send(1, DATA, &body).map_err(err)
    };
    match fm.rank() {
        0 => {
            let first = if back.is_some() { 3 } else { 0 };
            for i in 0..first {
                send(&mut fm, i)?;
            }
            let shm = fm.composite_mut().shmem_mut().ok_or("no shmem device")?;
            shm.debug_bend(1, back, word, xor)
                .map_err(|e| e.to_string())?;
            for i in first..MESSAGES {
                send(&mut fm, i)?;
            }
        }
        1 => {
            // Asleep while rank 0 sends its first messages and bends.
            std::thread::sleep(std::time::Duration::from_millis(300));
            while got.lock().unwrap().0 < MESSAGES {
                fm.extract_wait(usize::MAX).map_err(err)?;
            }
            let g = got.lock().unwrap();
            if let Some(first) = g.1.first() {
                return Err(format!("{} bad messages, first: {first}", g.1.len()));
            }
        }
        _ => {}
    }
    fm.barrier().map_err(err)?;
    eprintln!("rank {}: bend ok", fm.rank());
    Ok(())
}

/// `cutshort` (module docs).
fn cut_short() -> Res {
    let seen = Arc::new(Mutex::new(Vec::<Result<Vec<u8>, String>>::new()));
    let s2 = seen.clone();
    let done = Arc::new(Mutex::new(false));
    let mut fm = Fm::builder()
        .handler(DATA, "data", move |m| {
            let r = m.receive_vec().map_err(|e| e.to_string());
            s2.lock().unwrap().push(r);
            Ok(())
        })
        .handler(DONE, "done", done_handler(&done))
        .from_env()
        .map_err(err)?
        .build()
        .map_err(err)?;
    let whole = b"the real message after the forged one";
    if fm.rank() == 0 {
        forge_first_packet(&mut fm, fm::wire::Kind::Data, 1000, &[7; 100])?;
        fm.send(1, DATA, whole).map_err(err)?;
        wait_done(&mut fm, &done)?;
    } else if fm.rank() == 1 {
        while seen.lock().unwrap().len() < 2 {
            fm.extract_wait(usize::MAX).map_err(err)?;
        }
        let s = seen.lock().unwrap();
        let said = "rank 0's message of 1000 bytes was cut short by its sender after 100 bytes";
        if !matches!(&s[0], Err(e) if e.contains(said)) {
            return Err(format!("the cut message was read as {:?}", s[0]));
        }
        if s[1].as_deref() != Ok(&whole[..]) {
            return Err(format!("the next message was read as {:?}", s[1]));
        }
        let st = fm.stats();
        if st.bytes_received != 100 + whole.len() as u64 || st.dropped_malformed != 1 {
            return Err(format!("the counters disagree with what arrived: {st:?}"));
        }
        eprintln!("rank 1: cut short, counted as it came");
        drop(s);
        fm.send(0, DONE, &[]).map_err(err)?;
    }
    fm.barrier().map_err(err)
}
