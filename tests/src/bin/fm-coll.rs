//! fm-coll: every FM collective checked against a reference computed
//! locally, on the whole job and on sub-groups (the job's ranks reversed,
//! and the even ones), with sizes from 0 to past 4 MiB, every root, every
//! operation and a user operation that does not commute, and non-blocking
//! collectives overlapped with each other and with point-to-point
//! messages, and through a handler's error (the collective completes,
//! then the error comes out, once).
//!
//! fm-coll ROUNDS SEED [sabotage]
//!     rank 0 prints "collectives ok: N checks on S ranks". With
//!     `sabotage`, each member's expected data is off by one: the checks
//!     must fail (the test of the checker).
//! fm-coll allreduce
//!     only barriers and checked allreduces on the whole job; each rank
//!     prints "rank R on HOST", rank 0 "allreduces ok on S ranks" (to see
//!     in the device counters who sent on the network).
//! fm-coll ahead [sabotage]
//!     on 2 ranks: the root starts a broadcast of 1 MiB and tests it a
//!     thousand times before rank 1 starts its own; it must not complete
//!     (its bytes wait for rank 1 to ask); rank 1 prints "ahead: the root
//!     waited for its member". With `sabotage` the broadcast is of 1 KiB,
//!     sent at once, and the check must fail.
//! fm-coll given-up [sabotage]
//!     on 2 ranks: rank 1 gives up a broadcast of 1 MiB (drops its
//!     `Pending`) once it has cleared the root's rendezvous message, then
//!     the root sends the bytes; rank 1 prints "given-up broadcast: its
//!     memory untouched" if none landed in its buffer. With `sabotage`
//!     rank 1 checks that its buffer holds the root's data (it must not:
//!     the test of this check).

use fm::coll::{Bitwise, Element, Group, Op};
use fm::{ErrorKind, Fm, FmError, Rank};
use fm_tests::{exit_with, Rng};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

const DATA: u16 = 1;
/// A handler that fails, once per message.
const FAIL: u16 = 2;
/// A step of `given-up`'s protocol between its two ranks.
const STEP: u16 = 3;

type Res = Result<(), String>;

fn err(e: FmError) -> String {
    e.to_string()
}

/// Member `m`'s element `i` in check `k` (`off`: the sabotage).
fn value(k: u64, m: usize, i: usize, off: u64) -> u64 {
    let x = (k << 40) ^ ((m as u64) << 20) ^ i as u64;
    x.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(17) ^ off
}

fn vector(k: u64, m: usize, len: usize, off: u64) -> Vec<u64> {
    (0..len).map(|i| value(k, m, i, off)).collect()
}

/// The affine map x ↦ a·x + b (mod 2^32), `a` in the high half: composing
/// them is associative but does not commute, so a reduction by it shows
/// whether members' order was kept.
fn compose(f: u64, g: u64) -> u64 {
    let (a1, b1) = ((f >> 32) as u32, f as u32);
    let (a2, b2) = ((g >> 32) as u32, g as u32);
    (u64::from(a1.wrapping_mul(a2)) << 32) | u64::from(a1.wrapping_mul(b2).wrapping_add(b1))
}

/// An operation checked: its name, itself, its reference fold.
type Checked = (&'static str, Op<u64>, fn(u64, u64) -> u64);

fn ops() -> Vec<Checked> {
    vec![
        ("sum", Op::Sum, u64::wrapping_add),
        ("max", Op::Max, u64::max),
        ("xor", Op::Bits(Bitwise::Xor), |a, b| a ^ b),
        ("compose", Op::user(compose, false), compose),
    ]
}

struct Checker {
    k: u64,
    off: u64,
    checks: u64,
}

impl Checker {
    fn same<T: Element + PartialEq + std::fmt::Debug>(
        &mut self,
        what: &str,
        got: &[T],
        want: &[T],
    ) -> Res {
        self.checks += 1;
        if got.len() != want.len() {
            return Err(format!(
                "{what}: {} elements where {} were expected",
                got.len(),
                want.len()
            ));
        }
        match got.iter().zip(want).position(|(a, b)| a != b) {
            None => Ok(()),
            Some(i) => Err(format!(
                "{what}: element {i} is {:?} where {:?} was expected",
                got[i], want[i]
            )),
        }
    }

    fn next(&mut self) -> u64 {
        self.k += 1;
        self.k
    }
}

/// Every collective once on group `g`, vectors of `len` elements, root
/// `root`.
fn round(fm: &mut Fm, g: &mut Group, c: &mut Checker, len: usize, root: usize) -> Res {
    let (n, me) = (g.size(), g.me());
    let name = format!("{n} members, {len} elements, root {root}");
    g.barrier(fm).map_err(err)?;

    let k = c.next();
    let mut v = if me == root {
        vector(k, root, len, 0)
    } else {
        vec![0; len]
    };
    g.broadcast(fm, root, &mut v).map_err(err)?;
    c.same(
        &format!("broadcast of {name}"),
        &v,
        &vector(k, root, len, c.off),
    )?;

    for (op_name, op, fold) in ops() {
        let k = c.next();
        let want: Vec<u64> = (0..len)
            .map(|i| (1..n).fold(value(k, 0, i, c.off), |a, m| fold(a, value(k, m, i, c.off))))
            .collect();
        let mut v = vector(k, me, len, 0);
        g.reduce(fm, root, &mut v, op.clone()).map_err(err)?;
        let mine = if me == root {
            &want
        } else {
            &vector(k, me, len, c.off)
        };
        c.same(&format!("reduce ({op_name}) of {name}"), &v, mine)?;
        let mut v = vector(k, me, len, 0);
        g.allreduce(fm, &mut v, op).map_err(err)?;
        c.same(&format!("allreduce ({op_name}) of {name}"), &v, &want)?;
    }

    let k = c.next();
    let everyone: Vec<u64> = (0..n).flat_map(|m| vector(k, m, len, c.off)).collect();
    let mine = vector(k, me, len, 0);
    let mut all = vec![0; if me == root { n * len } else { 0 }];
    g.gather(fm, root, &mine, &mut all).map_err(err)?;
    if me == root {
        c.same(&format!("gather of {name}"), &all, &everyone)?;
    }
    let mut all = vec![0; n * len];
    g.allgather(fm, &mine, &mut all).map_err(err)?;
    c.same(&format!("allgather of {name}"), &all, &everyone)?;

    let k = c.next();
    let source: Vec<u64> = if me == root {
        (0..n).flat_map(|m| vector(k, m, len, 0)).collect()
    } else {
        Vec::new()
    };
    let mut mine = vec![0; len];
    g.scatter(fm, root, &source, &mut mine).map_err(err)?;
    c.same(
        &format!("scatter of {name}"),
        &mine,
        &vector(k, me, len, c.off),
    )?;

    // Block j of member i: vector (k, i·n + j).
    let k = c.next();
    let send: Vec<u64> = (0..n).flat_map(|j| vector(k, me * n + j, len, 0)).collect();
    let want: Vec<u64> = (0..n)
        .flat_map(|i| vector(k, i * n + me, len, c.off))
        .collect();
    let mut recv = vec![0; n * len];
    g.alltoall(fm, &send, &mut recv).map_err(err)?;
    c.same(&format!("alltoall of {name}"), &recv, &want)
}

/// Two non-blocking collectives on two groups at once, with messages to
/// every rank sent while they are under way.
fn overlapped(
    fm: &mut Fm,
    world: &mut Group,
    other: &mut Group,
    c: &mut Checker,
    seen: &AtomicU64,
) -> Res {
    let (k1, k2) = (c.next(), c.next());
    let len = 5000;
    let mut sum = vector(k1, world.me(), len, 0);
    let mut data = if other.me() == 0 {
        vector(k2, 0, len, 0)
    } else {
        vec![0; len]
    };
    let mut a = world.iallreduce(fm, &mut sum, Op::Sum).map_err(err)?;
    let mut b = other.ibroadcast(fm, 0, &mut data).map_err(err)?;
    for r in 0..fm.size() as Rank {
        fm.send(r, DATA, &[7; 100]).map_err(err)?;
    }
    while !(a.test(fm).map_err(err)? & b.test(fm).map_err(err)?) {}
    b.wait(fm).map_err(err)?;
    a.wait(fm).map_err(err)?;
    let n = world.size();
    let want: Vec<u64> = (0..len)
        .map(|i| (0..n).fold(0u64, |s, m| s.wrapping_add(value(k1, m, i, c.off))))
        .collect();
    c.same("overlapped allreduce", &sum, &want)?;
    c.same("overlapped broadcast", &data, &vector(k2, 0, len, c.off))?;
    // Each rank's message to this one, handled by any of the waits.
    while seen.load(Ordering::Relaxed) < fm.size() as u64 {
        fm.extract_wait(usize::MAX).map_err(err)?;
    }
    Ok(())
}

/// A handler's error while an allreduce and a barrier run: the allreduce
/// completes with the right sum, and the error comes out once, from the
/// allreduce, the barrier (called again: it completes the same barrier)
/// or the extracts that wait for the failing handler to have run (and
/// for the error of one that a stalled send ran).
fn through_a_handlers_error(
    fm: &mut Fm,
    world: &mut Group,
    c: &mut Checker,
    failed: &AtomicU64,
) -> Res {
    let mut errors = 0;
    let mut counted = |r: fm::Result<()>| -> Result<bool, String> {
        match r {
            Ok(()) => Ok(true),
            Err(e) if matches!(e.kind(), ErrorKind::Handler(_)) => {
                errors += 1;
                Ok(false)
            }
            Err(e) => Err(err(e)),
        }
    };
    // Every rank past the checks before (a rank the barrier released
    // first may fail its neighbour's barrier: every call from here on
    // counts the error).
    while !counted(world.barrier(fm))? {}
    let next = (fm.rank() + 1) % fm.size() as Rank;
    fm.send(next, FAIL, &[]).map_err(err)?;
    let (k, len, n) = (c.next(), 100, world.size());
    let mut v = vector(k, world.me(), len, 0);
    counted(world.allreduce(fm, &mut v, Op::Sum))?;
    let want: Vec<u64> = (0..len)
        .map(|i| (0..n).fold(0u64, |s, m| s.wrapping_add(value(k, m, i, c.off))))
        .collect();
    c.same("an allreduce through a handler's error", &v, &want)?;
    while !counted(world.barrier(fm))? {}
    while failed.load(Ordering::Relaxed) < 1 {
        counted(fm.extract_wait(usize::MAX).map(drop))?;
    }
    // A handler a stalled send ran has its error come out of the next
    // extract.
    while !counted(fm.extract(usize::MAX).map(drop))? {}
    match errors {
        1 => Ok(()),
        e => Err(format!(
            "the failing handler's error came out {e} times, not once"
        )),
    }
}

fn run(rounds: u64, seed: u64, sabotage: bool) -> Res {
    let seen = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let (s, f) = (seen.clone(), failed.clone());
    let mut fm = Fm::builder()
        .handler(DATA, "data", move |m| {
            m.receive_vec()?;
            s.fetch_add(1, Ordering::Relaxed);
            Ok(())
        })
        .handler(FAIL, "fail", move |_| {
            f.fetch_add(1, Ordering::Relaxed);
            Err(FmError::handler("this handler fails on purpose"))
        })
        .from_env()
        .map_err(err)?
        .build()
        .map_err(err)?;
    let size = fm.size();
    let mut world = fm.world().map_err(err)?;
    let reversed: Vec<Rank> = (0..size as Rank).rev().collect();
    let mut backwards = fm.group(&reversed).map_err(err)?;
    let evens: Vec<Rank> = (0..size as Rank).step_by(2).collect();
    let mut even = match fm.rank() % 2 {
        0 => Some(fm.group(&evens).map_err(err)?),
        _ => None,
    };
    let mut c = Checker {
        k: 0,
        off: u64::from(sabotage),
        checks: 0,
    };
    let mut rng = Rng::new(seed);
    // Past 4 MiB (u64 elements) once, then boundary and random sizes.
    let mut lens: Vec<usize> = vec![0, 1, (4 << 20) / 8 + 3, 1023, 1024, 2049, 8193];
    lens.extend((0..rounds).map(|_| rng.size(70_000) as usize));
    // Each group's checks are numbered apart: ranks outside a group
    // skip its rounds.
    for (i, &len) in lens.iter().enumerate() {
        let root = i % size;
        c.k = (i as u64) << 8;
        round(&mut fm, &mut world, &mut c, len, root)?;
        c.k = 1 << 32 | (i as u64) << 8;
        round(
            &mut fm,
            &mut backwards,
            &mut c,
            len.min(3000),
            (root + 1) % size,
        )?;
        if let Some(g) = even.as_mut() {
            c.k = 2 << 32 | (i as u64) << 8;
            round(&mut fm, g, &mut c, len.min(3000), root % g.size())?;
        }
    }
    c.k = 3 << 32;
    overlapped(&mut fm, &mut world, &mut backwards, &mut c, &seen)?;
    c.k = 4 << 32;
    through_a_handlers_error(&mut fm, &mut world, &mut c, &failed)
        .map_err(|e| format!("through a handler's error: {e}"))?;
    world
        .barrier(&mut fm)
        .map_err(|e| format!("the last barrier: {e}"))?;
    if fm.rank() == 0 {
        println!("collectives ok: {} checks on {size} ranks", c.checks);
    }
    Ok(())
}

fn allreduces() -> Res {
    let mut fm = Fm::init().map_err(err)?;
    let mut world = fm.world().map_err(err)?;
    let n = fm.size();
    let mut c = Checker {
        k: 0,
        off: 0,
        checks: 0,
    };
    for len in [1, 1000, 20_000] {
        world.barrier(&mut fm).map_err(err)?;
        let k = c.next();
        let mut v = vector(k, world.me(), len, 0);
        world.allreduce(&mut fm, &mut v, Op::Sum).map_err(err)?;
        let want: Vec<u64> = (0..len)
            .map(|i| (0..n).fold(0u64, |s, m| s.wrapping_add(value(k, m, i, 0))))
            .collect();
        c.same(&format!("allreduce of {len}"), &v, &want)?;
    }
    println!("rank {} on {}", fm.rank(), fm.config().host);
    world.barrier(&mut fm).map_err(err)?;
    if fm.rank() == 0 {
        println!("allreduces ok on {n} ranks");
    }
    Ok(())
}

/// Two ranks' endpoint with a `STEP` handler, the world group, and the
/// steps received so far (for the two-rank modes below).
struct TwoRanks {
    fm: Fm,
    world: Group,
    steps: Arc<AtomicU64>,
}

impl TwoRanks {
    fn new(mode: &str) -> Result<TwoRanks, String> {
        let steps = Arc::new(AtomicU64::new(0));
        let s = steps.clone();
        let mut fm = Fm::builder()
            .handler(STEP, "step", move |_| {
                s.fetch_add(1, Ordering::Relaxed);
                Ok(())
            })
            .from_env()
            .map_err(err)?
            .build()
            .map_err(err)?;
        if fm.size() != 2 {
            return Err(format!("{mode} runs on 2 ranks"));
        }
        let world = fm.world().map_err(err)?;
        Ok(TwoRanks { fm, world, steps })
    }

    /// Run handlers until `n` steps have come from the other rank.
    fn wait_for(&mut self, n: u64) -> Res {
        while self.steps.load(Ordering::Relaxed) < n {
            self.fm.extract_wait(usize::MAX).map_err(err)?;
        }
        Ok(())
    }

    fn step_to(&mut self, rank: Rank) -> Res {
        self.fm.send(rank, STEP, &[]).map_err(err)
    }
}

/// 1 MiB of elements: past the rendezvous threshold.
const RENDEZVOUS_LEN: usize = 1 << 17;

/// A broadcast given up once its rendezvous message was cleared: the
/// bytes that come afterwards must not be written into its receive's
/// memory (`mailbox.rs`'s landings), which the program may already have
/// reused. Each rank's messages to the other arrive in the order sent,
/// which orders the steps: the root's rendezvous message before its
/// first step, the bytes before its second.
fn given_up(sabotage: bool) -> Res {
    let mut t = TwoRanks::new("given-up")?;
    let len = RENDEZVOUS_LEN;
    let mut data = vector(1, 0, len, 0);
    if t.fm.rank() == 0 {
        let mut p = t.world.ibroadcast(&mut t.fm, 0, &mut data).map_err(err)?;
        t.step_to(1)?;
        t.wait_for(1)?;
        p.wait(&mut t.fm).map_err(err)?;
        t.step_to(1)?;
    } else {
        let mut buf = vec![0x55u64; len];
        t.wait_for(1)?;
        let mut p = t.world.ibroadcast(&mut t.fm, 0, &mut buf).map_err(err)?;
        if p.test(&mut t.fm).map_err(err)? {
            return Err("the broadcast completed before its bytes were sent".into());
        }
        drop(p);
        t.step_to(0)?;
        t.wait_for(2)?;
        let (what, want) = match sabotage {
            false => ("untouched", vec![0x55u64; len]),
            true => ("the root's data", data),
        };
        if buf != want {
            return Err(format!(
                "a given-up broadcast's memory was expected to be {what}, and is not"
            ));
        }
        println!("given-up broadcast: its memory {what}");
    }
    Ok(())
}

/// A root that runs ahead of its member sends a large broadcast's bytes
/// only once the member asks for them (`mailbox.rs`'s rendezvous), so a
/// root broadcasting in a loop cannot fill its members' memory with
/// messages they have not asked for: however often the root tests its
/// broadcast before the member starts its own, it must not complete.
/// With `sabotage` the broadcast is of 1 KiB, sent at once, and the check
/// must fail.
fn ahead(sabotage: bool) -> Res {
    let mut t = TwoRanks::new("ahead")?;
    let len = if sabotage { 128 } else { RENDEZVOUS_LEN };
    let mut data = vector(2, 0, len, 0);
    if t.fm.rank() == 0 {
        let mut p = t.world.ibroadcast(&mut t.fm, 0, &mut data).map_err(err)?;
        for _ in 0..1000 {
            if p.test(&mut t.fm).map_err(err)? {
                return Err(format!(
                    "a broadcast of {} bytes completed at the root before its member asked for it",
                    len * 8
                ));
            }
        }
        t.step_to(1)?;
        p.wait(&mut t.fm).map_err(err)?;
    } else {
        let mut buf = vec![0u64; len];
        t.wait_for(1)?;
        t.world.broadcast(&mut t.fm, 0, &mut buf).map_err(err)?;
        if buf != data {
            return Err("the broadcast's data is wrong".into());
        }
        println!("ahead: the root waited for its member");
    }
    Ok(())
}

fn main() -> std::process::ExitCode {
    fm_tests::init_tracing();
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).is_some_and(|a| a == "allreduce") {
        return exit_with("fm-coll", allreduces());
    }
    let sabotage = args.get(2).is_some_and(|a| a == "sabotage");
    match args.get(1).map(String::as_str) {
        Some("given-up") => return exit_with("fm-coll", given_up(sabotage)),
        Some("ahead") => return exit_with("fm-coll", ahead(sabotage)),
        _ => {}
    }
    let arg = |i: usize| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(4);
    let sabotage = args.get(3).is_some_and(|a| a == "sabotage");
    exit_with("fm-coll", run(arg(1), arg(2), sabotage))
}
