//! Both ends of one-sided operations inside `extract`: the target applies
//! a request to its window's memory in the handler and answers; the
//! origin counts the answer, and receives a get's data straight into the
//! buffer its caller waits with.
//!
//! Nothing is ever written outside a window: a request is checked against
//! the window's length before a byte of it is read into the memory, and a
//! request for a window this process does not have (never made, or freed)
//! is refused with [`Status::NoWindow`], whatever its offset.

use super::wire::{Answer, Kind, Request, Status, ANSWER, ONE_SIDED, REQUEST};
use super::Memory;
use crate::incoming::Incoming;
use crate::{Endpoint, Rank, Result};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

/// Where an operation's answer goes: `len` bytes at `ptr` (a get), or
/// nothing but its value (an atomic).
struct Destination {
    ptr: *mut u8,
    len: usize,
}

/// What an answered operation said: its status and value.
pub(crate) type Outcome = (Status, u64);

/// The endpoint's one-sided state. A process has few windows and waits
/// for one answer at a time, so short vectors searched in order serve
/// better than hash maps on every operation's path.
#[derive(Default)]
pub(crate) struct Windows {
    /// The memory of each window of this process, by ID (weak: dropping
    /// the `Window` is what frees it, and a request for it is then
    /// refused).
    memory: Vec<(u64, Weak<Memory>)>,
    /// Per target rank, its operations not answered yet, oldest first:
    /// (number, window). A target answers in the order it was asked (one
    /// handler at a time, FM's order per pair), so an answer is for the
    /// oldest; any other is forged or replayed, and dropped.
    in_flight: Vec<std::collections::VecDeque<(u64, u64)>>,
    /// Per window, the first error a target reported of an operation
    /// nobody waits for (a flush): flush returns it.
    errors: Vec<(u64, Rank, Status)>,
    /// Targets of puts not flushed yet: (window, rank).
    unflushed: Vec<(u64, Rank)>,
    /// As a target: the first refusal of a put per (window, origin), for
    /// the origin's next flush (puts are not answered one by one).
    refusals: Vec<(u64, Rank, Status)>,
    /// The operation whose caller waits for its answer, and the answer.
    waiting: Option<(u64, Destination)>,
    answered: Option<(u64, Outcome)>,
    next_op: u64,
}

// SAFETY: a `Destination` points into a buffer its caller borrows
// mutably until its answer came or it gave up (`Windows::forget`); it is
// only written from the endpoint's own `extract`, on the thread that has
// the endpoint.
unsafe impl Send for Windows {}

impl Windows {
    pub(crate) fn register(&mut self, id: u64, memory: Weak<Memory>) {
        self.memory.retain(|(_, m)| m.strong_count() > 0);
        self.memory.push((id, memory));
    }

    pub(crate) fn deregister(&mut self, id: u64) {
        self.memory.retain(|(w, _)| *w != id);
        self.unflushed.retain(|(w, _)| *w != id);
        self.refusals.retain(|(w, _, _)| *w != id);
        self.errors.retain(|(w, _, _)| *w != id);
        for q in &mut self.in_flight {
            q.retain(|(_, w)| *w != id);
        }
    }

    fn memory_of(&self, id: u64) -> Option<Arc<Memory>> {
        let (_, m) = self.memory.iter().find(|(w, _)| *w == id)?;
        m.upgrade()
    }

    /// A new operation of window `id` to `target`: its number. With
    /// `answer_into`, its caller waits for the answer, whose data goes
    /// there (a get's `len` bytes).
    pub(crate) fn start(
        &mut self,
        id: u64,
        target: Rank,
        answer_into: Option<(*mut u8, usize)>,
    ) -> u64 {
        let op = self.next_op;
        self.next_op += 1;
        let t = target as usize;
        if self.in_flight.len() <= t {
            self.in_flight.resize_with(t + 1, Default::default);
        }
        self.in_flight[t].push_back((op, id));
        if let Some((ptr, len)) = answer_into {
            self.waiting = Some((op, Destination { ptr, len }));
        }
        op
    }

    /// The outcome of operation `op`, once answered (taken).
    pub(crate) fn outcome(&mut self, op: u64) -> Option<Outcome> {
        match self.answered {
            Some((o, outcome)) if o == op => {
                self.answered = None;
                Some(outcome)
            }
            _ => None,
        }
    }

    /// The caller of `op` stops waiting (answered or not): a late answer
    /// writes nowhere.
    pub(crate) fn forget(&mut self, op: u64) {
        self.waiting.take_if(|(o, _)| *o == op);
        self.answered.take_if(|(o, _)| *o == op);
    }

    /// A put of window `id` went to `target`: the next flush there asks.
    pub(crate) fn put_to(&mut self, id: u64, target: Rank) {
        if !self.unflushed.contains(&(id, target)) {
            self.unflushed.push((id, target));
        }
    }

    /// The targets of window `id`'s puts since the last flush to them, or
    /// (with `only`) whether `only` is one: taken, to be flushed now.
    pub(crate) fn take_unflushed(&mut self, id: u64, only: Option<Rank>) -> Vec<Rank> {
        let mut taken = Vec::new();
        self.unflushed.retain(|&(w, r)| {
            let take = w == id && only.is_none_or(|o| o == r);
            if take {
                taken.push(r);
            }
            !take
        });
        taken
    }

    /// Whether an operation of window `id` waits for its answer, from
    /// `target` or (None) from anyone. (Only gets, atomics and flushes
    /// are answered, so the queues are short.)
    pub(crate) fn unanswered(&self, id: u64, target: Option<Rank>) -> bool {
        let of = |q: &std::collections::VecDeque<(u64, u64)>| q.iter().any(|(_, w)| *w == id);
        match target {
            Some(t) => self.in_flight.get(t as usize).is_some_and(of),
            None => self.in_flight.iter().any(of),
        }
    }

    /// The first error a target of window `id` reported (taken).
    pub(crate) fn take_error(&mut self, id: u64) -> Option<(Rank, Status)> {
        let at = self.errors.iter().position(|(w, _, _)| *w == id)?;
        let (_, rank, status) = self.errors.remove(at);
        Some((rank, status))
    }

    /// Count the answer to `a.op` from `src`: `false` if it is not for the
    /// oldest operation that went there (a forged or replayed answer).
    fn answered_one(&mut self, a: &Answer, src: Rank) -> bool {
        let Some(q) = self.in_flight.get_mut(src as usize) else {
            return false;
        };
        if q.front() != Some(&(a.op, a.window)) {
            return false;
        }
        q.pop_front();
        let waited = matches!(self.waiting, Some((op, _)) if op == a.op);
        // A refusal a waiting caller gets itself is not reported again.
        if a.status != Status::Ok && !waited && !self.errors.iter().any(|(w, _, _)| *w == a.window)
        {
            self.errors.push((a.window, src, a.status));
        }
        true
    }
}

/// A one-sided message arrived (the reserved handler [`ONE_SIDED`]).
pub(crate) fn intake(m: &mut Incoming<'_>) -> Result<()> {
    let mut head = [0u8; REQUEST];
    let got = m.receive(&mut head[..ANSWER])?;
    if got == ANSWER && head[0] == Kind::Done as u8 {
        return match head.first_chunk::<ANSWER>().and_then(Answer::parse) {
            Some(a) => answer(m, a),
            None => refuse(m, "an answer fm cannot read"),
        };
    }
    let rest = m.receive(&mut head[ANSWER..])?;
    match (got + rest == REQUEST)
        .then(|| Request::parse(&head))
        .flatten()
    {
        Some(r) => serve(m, r),
        None => refuse(m, "a request fm cannot read"),
    }
}

/// Refusals kept for flushes at most: beyond, a refused put is counted
/// and logged only (a peer naming ever new windows costs no memory).
const REFUSALS_KEPT: usize = 1024;

#[cold]
fn refuse(m: &mut Incoming<'_>, what: &str) -> Result<()> {
    m.ep_mut().stats.window_refused += 1;
    tracing::warn!(src = m.src(), "fm: dropped {what} (one-sided)");
    Ok(())
}

/// The target's side: check, apply, answer.
fn serve(m: &mut Incoming<'_>, r: Request) -> Result<()> {
    let src = m.src();
    let memory = m.ep_mut().windows.memory_of(r.window);
    if r.kind == Kind::Flush {
        return flushed(m, &r, memory.is_some());
    }
    let len = match r.kind {
        Kind::Put => m.remaining() as u64,
        Kind::Get => r.a,
        _ => 8,
    };
    let at = match &memory {
        None => Err(Status::NoWindow),
        Some(mem) => mem.range(r.offset, len),
    };
    let at = at.and_then(|at| {
        let atomic = !matches!(r.kind, Kind::Put | Kind::Get);
        match atomic && !(at as usize).is_multiple_of(8) {
            true => Err(Status::Misaligned),
            false => Ok(at),
        }
    });
    let mut a = Answer {
        status: Status::Ok,
        window: r.window,
        op: r.op,
        value: 0,
    };
    let at = match at {
        Ok(at) => at,
        Err(status) => {
            let ep = m.ep_mut();
            ep.stats.window_refused += 1;
            tracing::debug!(src, ?status, ?r, "fm: one-sided request refused");
            if r.kind == Kind::Put {
                let kept = &mut ep.windows.refusals;
                if kept.len() < REFUSALS_KEPT
                    && !kept.iter().any(|&(w, o, _)| (w, o) == (r.window, src))
                {
                    kept.push((r.window, src, status));
                }
                return Ok(());
            }
            a.status = status;
            return m.endpoint().send(src, ONE_SIDED, &a.bytes());
        }
    };
    // SAFETY (all three arms): `at..at + len` lies in the window's memory
    // (`Memory::range`), which `memory` keeps alive; this process reaches
    // that memory otherwise only through `Window::local` and `local_mut`,
    // which borrow the endpoint this handler runs on, so no borrow of the
    // program's is alive now. (Other processes on this host may store
    // into a shared window at the same time: what their stores and these
    // do to the same bytes is the program's to order, as in MPI.)
    match r.kind {
        Kind::Put => {
            let into = unsafe { std::slice::from_raw_parts_mut(at, len as usize) };
            m.receive(into).map(drop)
        }
        Kind::Get => {
            let from = unsafe { std::slice::from_raw_parts(at, len as usize) };
            let ep = m.endpoint();
            ep.begin_message(src, ANSWER + from.len(), ONE_SIDED)?;
            ep.send_piece(&a.bytes())?;
            ep.send_piece(from)?;
            ep.end_message()
        }
        _ => {
            let word = unsafe { AtomicU64::from_ptr(at.cast::<u64>()) };
            a.value = match r.kind {
                Kind::FetchAdd => word.fetch_add(r.a, Ordering::SeqCst),
                Kind::Swap => word.swap(r.a, Ordering::SeqCst),
                _ => word
                    .compare_exchange(r.a, r.b, Ordering::SeqCst, Ordering::SeqCst)
                    .unwrap_or_else(|old| old),
            };
            m.endpoint().send(src, ONE_SIDED, &a.bytes())
        }
    }
}

/// A flush: every put of its origin before it has been applied (one
/// handler at a time, in FM's order); the answer says the first that was
/// refused, if one was.
fn flushed(m: &mut Incoming<'_>, r: &Request, window_here: bool) -> Result<()> {
    let src = m.src();
    let kept = &mut m.ep_mut().windows.refusals;
    let refused = (kept.iter())
        .position(|&(w, o, _)| (w, o) == (r.window, src))
        .map(|at| kept.remove(at).2);
    let status = match (refused, window_here) {
        (Some(s), _) => s,
        (None, true) => Status::Ok,
        (None, false) => Status::NoWindow,
    };
    let a = Answer {
        status,
        window: r.window,
        op: r.op,
        value: 0,
    };
    m.endpoint().send(src, ONE_SIDED, &a.bytes())
}

/// The origin's side: count the answer; a get's data goes straight into
/// the buffer its caller waits with.
fn answer(m: &mut Incoming<'_>, a: Answer) -> Result<()> {
    let src = m.src();
    let ep = m.ep_mut();
    if !ep.windows.answered_one(&a, src) {
        ep.stats.window_answers_dropped += 1;
        tracing::debug!(src, ?a, "fm: dropped an answer to no operation of ours");
        return Ok(());
    }
    let Some((_, d)) = ep.windows.waiting.take_if(|(op, _)| *op == a.op) else {
        return Ok(());
    };
    if a.status == Status::Ok && m.remaining() != d.len {
        m.ep_mut().windows.answered = Some((a.op, (Status::Malformed, 0)));
        return Ok(());
    }
    if a.status == Status::Ok && d.len > 0 {
        // SAFETY: the caller of the get borrows these `len` bytes
        // mutably until its answer is here or it forgot the operation
        // (then `waiting` no longer has it).
        let into = unsafe { std::slice::from_raw_parts_mut(d.ptr, d.len) };
        m.receive(into)?;
    }
    m.ep_mut().windows.answered = Some((a.op, (a.status, a.value)));
    Ok(())
}

impl Endpoint {
    /// Send a one-sided request, with `data` after its head.
    pub(crate) fn send_request(&mut self, to: Rank, r: &Request, data: &[u8]) -> Result<()> {
        self.begin_message(to, REQUEST + data.len(), ONE_SIDED)?;
        self.send_piece(&r.bytes())?;
        if !data.is_empty() {
            self.send_piece(data)?;
        }
        self.end_message()
    }
}
