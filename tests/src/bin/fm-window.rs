//! fm-window: FM's one-sided windows (`fm::Window`) checked against a
//! reference every member computes locally.
//!
//! Each round, every member puts random byte ranges (random offsets and
//! lengths, the ends and empty ones among them) into its own stripe of
//! every member's window, gets some back after a flush and compares, then
//! fences; every member then checks its whole window against what all
//! members' puts must have left, including guard bytes that no operation
//! names (the first bytes of the window) and the bytes just past its end
//! (the spare capacity of the vector it was made over), which must never
//! change. Then every member adds to a counter on every member
//! (`fetch_add` under contention: each sum, and each origin's answers
//! rising), and all race for one word with `compare_swap` (one wins).
//! Last, what cannot be done must say so: an origin asking past a
//! window's end, a forged request past the end and one for a window the
//! target does not have (refused there and counted; nothing written), and
//! a get from a member that dropped its window.
//!
//! fm-window ROUNDS SEED [sabotage]
//!     rank 0 prints "windows ok: N checks on S ranks". With `sabotage`,
//!     the reference is off by one byte: the checks must fail.

use fm::{ErrorKind, Fm, Window};
use fm_tests::{exit_with, Rng};

/// Guard bytes at the front of each window and past its end.
const GUARD: usize = 64;
const GUARD_BYTE: u8 = 0xA5;

type Res = Result<(), String>;

fn err(e: fm::FmError) -> String {
    e.to_string()
}

/// Member `m`'s window length in round `round`: different on each
/// member, past 4 MiB on the last member in odd rounds.
fn window_len(round: u64, m: usize, n: usize) -> usize {
    let big = round % 2 == 1 && m == n - 1;
    GUARD
        + if big {
            (4 << 20) + 4099
        } else {
            1000 + 4096 * m + 37 * round as usize
        }
}

/// Origin `o`'s stripe of a window of `len` bytes shared by `n` members.
fn stripe(len: usize, n: usize, o: usize) -> std::ops::Range<usize> {
    let each = (len - GUARD) / n;
    GUARD + o * each..GUARD + (o + 1) * each
}

/// The puts origin `o` makes to member `t` in a round: (offset, bytes).
fn puts(
    seed: u64,
    round: u64,
    o: usize,
    t: usize,
    s: &std::ops::Range<usize>,
) -> Vec<(usize, Vec<u8>)> {
    let mut rng = Rng::new(seed ^ (round << 32) ^ ((o as u64) << 16) ^ t as u64);
    let count = 1 + rng.upto(12) as usize;
    (0..count)
        .map(|k| {
            let room = (s.end - s.start) as u64;
            let len = rng.size(room) as usize;
            let at = s.start + rng.upto(room - len as u64) as usize;
            let fill = (rng.next_u64() as u8) ^ k as u8;
            let bytes = (0..len).map(|i| fill.wrapping_add(i as u8)).collect();
            (at, bytes)
        })
        .collect()
}

/// Member `t`'s window as every member's puts of the round leave it.
fn reference(seed: u64, round: u64, t: usize, n: usize) -> Vec<u8> {
    let len = window_len(round, t, n);
    let mut w = initial(round, t, len);
    for o in 0..n {
        for (at, b) in puts(seed, round, o, t, &stripe(len, n, o)) {
            w[at..at + b.len()].copy_from_slice(&b);
        }
    }
    w
}

fn initial(round: u64, t: usize, len: usize) -> Vec<u8> {
    let mut w: Vec<u8> = (0..len)
        .map(|i| (i as u64 ^ round ^ t as u64) as u8)
        .collect();
    w[..GUARD].fill(GUARD_BYTE);
    w
}

struct Checker {
    checks: u64,
    off: u8,
}

impl Checker {
    fn same(&mut self, what: &str, got: &[u8], want: &[u8]) -> Res {
        self.checks += 1;
        let mut want = want.to_vec();
        if let Some(b) = want.first_mut() {
            *b = b.wrapping_add(self.off);
        }
        if got == want {
            return Ok(());
        }
        let at = got.iter().zip(&want).position(|(a, b)| a != b);
        Err(format!(
            "{what}: {} bytes, {} was expected (first difference at byte {at:?})",
            got.len(),
            want.len()
        ))
    }

    fn holds(&mut self, what: &str, ok: bool) -> Res {
        self.checks += 1;
        match ok {
            true => Ok(()),
            false => Err(format!("{what}: not as was expected")),
        }
    }
}

/// A vector of `w`'s bytes whose spare capacity, `GUARD` bytes, holds
/// the guard pattern.
fn guarded(w: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(w.len() + GUARD);
    v.extend_from_slice(w);
    for b in v.spare_capacity_mut().iter_mut().take(GUARD) {
        b.write(GUARD_BYTE);
    }
    v
}

/// The guard bytes past the vector's end, as the window left them.
fn past_end(v: &mut Vec<u8>) -> Vec<u8> {
    let spare = v.spare_capacity_mut();
    // SAFETY: `guarded` wrote these bytes, and only a write past the
    // window's end could have changed them since.
    spare[..GUARD]
        .iter()
        .map(|b| unsafe { b.assume_init() })
        .collect()
}

/// Puts and gets on a window over a vector (`shared` false: messages
/// carry every operation but a member's to itself) or on one fm
/// allocates (shared memory among the members of a host: loads and
/// stores between them).
fn puts_and_gets(fm: &mut Fm, c: &mut Checker, seed: u64, round: u64, shared: bool) -> Res {
    let world = fm.world().map_err(err)?;
    let (me, n) = (world.me(), world.size());
    let first = initial(round, me, window_len(round, me, n));
    let mut win = match shared {
        false => fm.window_over(&world, guarded(&first)).map_err(err)?,
        true => {
            let mut w = fm.window(&world, first.len()).map_err(err)?;
            w.local_mut(fm).copy_from_slice(&first);
            // Nobody writes into a window before its member filled it.
            fm.barrier().map_err(err)?;
            // Its file is gone once every member mapped it: nothing is
            // left in /dev/shm however the job ends.
            let prefix = format!("fm-window-{}-", std::process::id());
            let files = std::fs::read_dir("/dev/shm").map_or(0, |d| {
                d.flatten()
                    .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
                    .count()
            });
            c.holds("a shared window's file unlinked once made", files == 0)?;
            w
        }
    };
    for t in 0..n {
        c.holds(
            "a member's window length",
            win.len_of(t) == Some(window_len(round, t, n)),
        )?;
    }
    let mut rng = Rng::new(seed ^ round ^ 0xfeed ^ me as u64);
    let targets: Vec<usize> = (0..n).map(|k| (me + k) % n).collect();
    for &t in &targets {
        let s = stripe(window_len(round, t, n), n, me);
        let mut expect = reference(seed, round, t, n)[s.clone()].to_vec();
        // Before the puts, this stripe holds the initial bytes: only
        // this member's own puts change it, so a get after a flush sees
        // exactly them.
        let before = initial(round, t, window_len(round, t, n));
        let mut seen = before[s.clone()].to_vec();
        for (at, b) in puts(seed, round, me, t, &s) {
            win.put(fm, t, at, &b).map_err(err)?;
            seen[at - s.start..at - s.start + b.len()].copy_from_slice(&b);
        }
        c.holds("the puts' reference", seen == expect)?;
        win.flush(fm, t).map_err(err)?;
        for _ in 0..3 {
            let len = rng.size((s.end - s.start) as u64) as usize;
            let at = rng.upto((s.end - s.start - len) as u64) as usize;
            let mut got = vec![0u8; len];
            win.get(fm, t, s.start + at, &mut got).map_err(err)?;
            c.same(
                &format!("get of {len} bytes at {} of member {t}", s.start + at),
                &got,
                &expect[at..at + len],
            )?;
        }
        expect.clear();
    }
    win.fence(fm).map_err(err)?;
    let want = reference(seed, round, me, n);
    c.same(
        "this member's whole window after the fence",
        win.local(fm),
        &want,
    )?;
    if shared {
        return win.free(fm).map(drop).map_err(err);
    }
    let mut back = win
        .free(fm)
        .map_err(err)?
        .ok_or("free gave no vector back")?;
    c.same("the window's vector, given back", &back, &want)?;
    c.same(
        "the guard bytes past the window's end",
        &past_end(&mut back),
        &[GUARD_BYTE; GUARD],
    )
}

fn atomics(fm: &mut Fm, c: &mut Checker, seed: u64, round: u64) -> Res {
    let world = fm.world().map_err(err)?;
    let (me, n) = (world.me(), world.size());
    let mut win = fm.window(&world, 64).map_err(err)?;
    let k = 20 + (seed % 7) as usize;
    // Each origin's answers from one target rise: its own adds are
    // applied in order, others' only add more.
    let mut last = vec![None; n];
    for _ in 0..k {
        for step in 0..n {
            let t = (me + step) % n;
            let before = win.fetch_add(fm, t, 0, 1 + me as u64).map_err(err)?;
            c.holds(
                "a fetch-add's answers rising",
                last[t].is_none_or(|l| before >= l + 1 + me as u64),
            )?;
            last[t] = Some(before);
        }
    }
    // Exactly one member wins the word at offset 8 of member 0.
    let old = win.compare_swap(fm, 0, 8, 0, me as u64 + 1).map_err(err)?;
    let mut won = [u64::from(old == 0)];
    fm.world()
        .map_err(err)?
        .allreduce(fm, &mut won, fm::coll::Op::Sum)
        .map_err(err)?;
    c.holds("one compare-and-swap won", won[0] == 1)?;
    win.fence(fm).map_err(err)?;
    let sum: u64 = (0..n as u64).map(|m| (1 + m) * k as u64).sum();
    let local = win.local(fm);
    let word = |at: usize| u64::from_ne_bytes(local[at..at + 8].try_into().unwrap_or([0; 8]));
    let mut want = sum.to_ne_bytes().to_vec();
    c.same(
        "the counter every member added to",
        &word(0).to_ne_bytes(),
        &want,
    )?;
    if me == 0 {
        c.holds(
            "the compare-and-swap's winner stored",
            (1..=n as u64).contains(&word(8)),
        )?;
    }
    // A swap gives the word back and leaves its value.
    let prev = win.swap(fm, me, 16, 7 + round).map_err(err)?;
    c.holds("a swap's old value", prev == 0)?;
    win.flush(fm, me).map_err(err)?;
    want = (7 + round).to_ne_bytes().to_vec();
    c.same("a swapped word", &win.local(fm)[16..24], &want)?;
    win.free(fm).map_err(err)?;
    Ok(())
}

fn is_window_error(r: fm::Result<impl Sized>, says: &str) -> bool {
    match r {
        Err(e) => matches!(e.kind(), ErrorKind::Window(_)) && e.to_string().contains(says),
        Ok(_) => false,
    }
}

fn refusals(fm: &mut Fm, c: &mut Checker) -> Res {
    let world = fm.world().map_err(err)?;
    let (me, n) = (world.me(), world.size());
    let len = 256;
    let mut win: Window = fm.window_over(&world, guarded(&[1u8; 256])).map_err(err)?;
    let next = (me + 1) % n;
    // At the origin: past the end, a member that is not, a misplaced word.
    c.holds(
        "a put past the end",
        is_window_error(win.put(fm, next, len - 1, &[0, 0]), "window of 256 bytes"),
    )?;
    c.holds(
        "a get past the end",
        is_window_error(win.get(fm, next, len, &mut [0]), "window of 256 bytes"),
    )?;
    c.holds(
        "no such member",
        is_window_error(win.put(fm, n, 0, &[0]), "member"),
    )?;
    c.holds(
        "an offset that overflows",
        is_window_error(win.put(fm, next, usize::MAX, &[0]), "offset"),
    )?;
    // At the target: requests forged past the origin's checks.
    let to = world.members()[next];
    let forged = |window: u64, offset: u64, data: &[u8]| {
        let mut head = [0u8; 48];
        head[0] = 1; // put
        head[8..16].copy_from_slice(&window.to_le_bytes());
        head[16..24].copy_from_slice(&u64::MAX.to_le_bytes());
        head[24..32].copy_from_slice(&offset.to_le_bytes());
        [&head[..], data].concat()
    };
    let one_sided = fm::RESERVED_HANDLERS + 1;
    for (window, offset) in [
        (win.id(), len as u64 - 4),
        (win.id(), u64::MAX - 2),
        (win.id() ^ 1, 0),
    ] {
        fm.send(to, one_sided, &forged(window, offset, &[9; 8]))
            .map_err(err)?;
    }
    // And an answer to no operation of the member's.
    let mut answer = [0u8; 32];
    answer[0] = 6;
    answer[16..24].copy_from_slice(&u64::MAX.to_le_bytes());
    fm.send(to, one_sided, &answer).map_err(err)?;
    // Each member gets its predecessor's three requests and refuses them
    // (no answer: puts are answered at flushes), and drops the answer.
    while fm.stats().window_refused < 3 || fm.stats().window_answers_dropped < 1 {
        fm.extract_wait(usize::MAX).map_err(err)?;
    }
    // A put past the end, forged as above after a real one (so that the
    // next flush asks that target), comes back from the flush. (A
    // member's own window it reaches directly: nothing to ask.)
    if n > 1 {
        win.put(fm, next, 0, &[1]).map_err(err)?;
        fm.send(to, one_sided, &forged(win.id(), len as u64, &[9]))
            .map_err(err)?;
        c.holds(
            "a refused put reported by the flush",
            is_window_error(win.flush(fm, next), "not in its window"),
        )?;
        c.holds("and only once", win.flush(fm, next).is_ok())?;
    } else {
        fm.send(to, one_sided, &forged(win.id(), len as u64, &[9]))
            .map_err(err)?;
        while fm.stats().window_refused < 4 {
            fm.extract_wait(usize::MAX).map_err(err)?;
        }
    }
    win.fence(fm).map_err(err)?;
    let mut back = win
        .free(fm)
        .map_err(err)?
        .ok_or("free gave no vector back")?;
    c.same("a window after forged requests", &back, &[1u8; 256])?;
    c.same(
        "the guard bytes past its end",
        &past_end(&mut back),
        &[GUARD_BYTE; GUARD],
    )?;
    dropped_window(fm, c)
}

/// A member that dropped its window refuses what comes for it.
fn dropped_window(fm: &mut Fm, c: &mut Checker) -> Res {
    let world = fm.world().map_err(err)?;
    let (me, n) = (world.me(), world.size());
    // A member that dropped its window refuses what comes for it (one
    // whose window is a shared mapping on this host is not asked: the
    // others read its memory themselves).
    let mut w = fm.window_over(&world, vec![0; 64]).map_err(err)?;
    let mut g = fm.world().map_err(err)?;
    if me == n - 1 {
        drop(w);
        g.barrier(fm).map_err(err)?;
        g.barrier(fm).map_err(err)?;
    } else {
        g.barrier(fm).map_err(err)?;
        let r = w.get(fm, n - 1, 0, &mut [0u8; 8]);
        c.holds(
            "a get from a dropped window",
            is_window_error(r, "no such window"),
        )?;
        w.flush_all(fm).map_err(err)?;
        g.barrier(fm).map_err(err)?;
    }
    Ok(())
}

fn run() -> Res {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rounds: u64 = args
        .first()
        .and_then(|a| a.parse().ok())
        .ok_or("usage: fm-window ROUNDS SEED [sabotage]")?;
    let seed: u64 = args
        .get(1)
        .and_then(|a| a.parse().ok())
        .ok_or("usage: fm-window ROUNDS SEED [sabotage]")?;
    let off = u8::from(args.get(2).is_some_and(|a| a == "sabotage"));
    let mut fm = Fm::init().map_err(err)?;
    let mut c = Checker { checks: 0, off };
    for round in 0..rounds {
        puts_and_gets(&mut fm, &mut c, seed, round, false)?;
        puts_and_gets(&mut fm, &mut c, seed, round, true)?;
        atomics(&mut fm, &mut c, seed, round)?;
    }
    refusals(&mut fm, &mut c)?;
    // Refused: the four forged requests, and on the last member the
    // others' gets from the window it dropped.
    let (me, n) = (fm.rank() as u64, fm.size() as u64);
    let gets = if me == n - 1 { n - 1 } else { 0 };
    let s = fm.stats();
    c.holds(
        "refusals and dropped answers counted",
        (s.window_refused, s.window_answers_dropped) == (4 + gets, 1),
    )?;
    fm.barrier().map_err(err)?;
    if fm.rank() == 0 {
        println!("windows ok: {} checks on {} ranks", c.checks, fm.size());
    }
    Ok(())
}

fn main() -> std::process::ExitCode {
    exit_with("fm-window", run())
}
