//! An explicit-state model of a few ranks exchanging messages, whose every
//! decision about credits, the stash and the outbox is made by the
//! production code: [`Accounts`] (what may be sent, owed, withheld; what a
//! rank that cannot send does next) and [`waits_for_room`] (the outbox's
//! bound). The model owns only what the endpoint does with packets — the
//! control flow of `acquire_data_slot`, `absorb`, `next_packet_from`,
//! `extract` and the handlers — over channels with a bounded pool of frames
//! and slots. A breadth-first search visits every interleaving of the
//! ranks' steps and of which peer's packet is taken in, and reports a state
//! where no rank can move while work remains (a wait cycle), a channel
//! holding more packets than its slots, or a peer returning more credits
//! than were out.
//!
//! Sizes are in packets: a message is some packets, the stash's bound some
//! packets, windows and frame pools a few, so that every bound is reached.

use super::{Accounts, Standing, WhileWaiting};
use crate::sender::{waits_for_room, OUTBOX_BYTES};
use std::collections::{HashSet, VecDeque};

/// Slots a sender's control packets may use beyond its window (the shmem
/// device's `CONTROL_RESERVE`).
const CONTROL_RESERVE: usize = 4;
/// Bytes of one message queued on the outbox: two pass its bound.
const OWN_BYTES: usize = OUTBOX_BYTES / 4 * 3;

/// What a message's handler does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Tag {
    /// Only read.
    Plain,
    /// Reply to the source with a message of this many packets before
    /// reading (possibly more than a window).
    Request(u8),
    /// Queue a one-packet message to the source on this rank's own
    /// sender (`FmSender`), then read.
    OwnRequest,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Pkt {
    Data {
        tag: Tag,
        len: u8,
        first: bool,
        credits: u32,
    },
    Credit(u32),
}

/// One step of a rank's main code.
#[derive(Clone, Copy, Debug)]
enum Op {
    /// Send a message of `len` packets to `dest`.
    Send { dest: usize, len: u8, tag: Tag },
    /// Queue a message on the rank's own sender.
    Own { dest: usize, len: u8 },
    /// Run the handlers of what has arrived (`extract`).
    Extract,
}

/// What a rank is doing, innermost last.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Activity {
    /// Main code, at step `i`.
    Main(usize),
    /// Sending a message; `open` once its first packet's slot was taken.
    Send {
        dest: usize,
        left: u8,
        tag: Tag,
        open: bool,
        first: bool,
    },
    /// A handler for a message of `src`, `unread` packets still to come,
    /// `acted` once it did what its tag says.
    Handler {
        src: usize,
        unread: u8,
        tag: Tag,
        acted: bool,
    },
    /// Waiting for room in the own outbox to queue a message to `dest`.
    QueueOwn { dest: usize, len: u8 },
    /// `extract` sending what the outbox holds.
    SendOutbox,
    /// Main code is done: extract for ever.
    Drain,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Rank {
    acct: Accounts,
    stash: Vec<VecDeque<(Pkt, bool)>>,
    stack: Vec<Activity>,
    /// Messages queued on the own sender: (dest, packets).
    outbox: VecDeque<(usize, u8)>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct State {
    ranks: Vec<Rank>,
    /// `chan[src][dst]`: packets sent and not yet taken in.
    chan: Vec<Vec<VecDeque<Pkt>>>,
}

/// How the outbox decides whether a sender waits (production, or a rule
/// of an earlier commit).
type OutboxRule = fn(bool, usize, usize, usize) -> bool;

struct Model {
    plans: Vec<Vec<Op>>,
    window: u32,
    frames: usize,
    outbox_rule: OutboxRule,
}

/// What the search found.
#[derive(Debug, PartialEq)]
enum Found {
    /// Every reachable state was visited; every run can finish.
    NoCycle { states: usize },
    /// A state where no rank can move and work remains.
    Deadlock(String),
    /// A rule was broken (slots overrun, credits past the window).
    Broken(String),
}

impl Model {
    fn initial(&self, stash_packets: usize) -> State {
        let n = self.plans.len();
        let rank = |_| Rank {
            acct: Accounts::new(vec![self.window; n], stash_packets),
            stash: vec![VecDeque::new(); n],
            stack: vec![Activity::Main(0)],
            outbox: VecDeque::new(),
        };
        State {
            ranks: (0..n).map(rank).collect(),
            chan: vec![vec![VecDeque::new(); n]; n],
        }
    }

    /// Breadth-first over every state reachable from the start.
    fn search(&self, stash_packets: usize, limit: usize) -> Found {
        self.search_from(self.initial(stash_packets), limit)
    }

    /// Breadth-first over every state reachable from `start`.
    fn search_from(&self, start: State, limit: usize) -> Found {
        let mut seen = HashSet::from([start.clone()]);
        let mut todo = VecDeque::from([start]);
        while let Some(s) = todo.pop_front() {
            let next = match self.successors(&s) {
                Ok(next) => next,
                Err(why) => return Found::Broken(why),
            };
            if next.is_empty() && !Self::finished(&s) {
                return Found::Deadlock(Self::describe(&s));
            }
            for t in next {
                if seen.len() >= limit {
                    panic!("more than {limit} states: make the model smaller");
                }
                if seen.insert(t.clone()) {
                    todo.push_back(t);
                }
            }
        }
        Found::NoCycle { states: seen.len() }
    }

    fn finished(s: &State) -> bool {
        s.ranks.iter().all(|r| {
            r.stack == [Activity::Drain]
                && r.outbox.is_empty()
                && r.stash.iter().all(VecDeque::is_empty)
        }) && s
            .chan
            .iter()
            .flatten()
            .all(|c| c.iter().all(|p| matches!(p, Pkt::Credit(_))))
    }

    fn describe(s: &State) -> String {
        let mut out = String::new();
        for (i, r) in s.ranks.iter().enumerate() {
            out += &format!(
                "rank {i}: {:?} credits {:?} owed {:?} withheld {:?} stashed {} outbox {}\n",
                r.stack,
                r.acct.credits,
                r.acct.owed,
                r.acct.withheld,
                r.acct.stashed_bytes,
                r.outbox.len()
            );
        }
        for (a, row) in s.chan.iter().enumerate() {
            for (b, c) in row.iter().enumerate() {
                if !c.is_empty() {
                    out += &format!("{a} -> {b}: {c:?}\n");
                }
            }
        }
        out
    }

    /// Every state one step of one rank leads to.
    fn successors(&self, s: &State) -> Result<Vec<State>, String> {
        let mut next = Vec::new();
        for r in 0..s.ranks.len() {
            next.extend(self.steps(s, r)?);
        }
        Ok(next)
    }

    fn standing(rank: &Rank) -> Standing {
        Standing {
            in_handler: rank
                .stack
                .iter()
                .any(|a| matches!(a, Activity::Handler { .. })),
            message_open: rank
                .stack
                .iter()
                .any(|a| matches!(a, Activity::Send { open: true, .. })),
        }
    }

    /// Frames of `src`'s pool towards `dst` in use: its data packets not
    /// yet taken in.
    fn frame_free(&self, s: &State, src: usize, dst: usize) -> bool {
        let used = s.chan[src][dst]
            .iter()
            .filter(|p| matches!(p, Pkt::Data { .. }))
            .count();
        used < self.frames
    }

    /// The steps rank `r` can take from `s`.
    fn steps(&self, s: &State, r: usize) -> Result<Vec<State>, String> {
        let Some(top) = s.ranks[r].stack.last().cloned() else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        match top {
            Activity::Main(i) => {
                let mut t = s.clone();
                let rank = &mut t.ranks[r];
                rank.stack.pop();
                match self.plans[r].get(i) {
                    None => {
                        rank.stack.push(Activity::Drain);
                        return Ok(vec![t]);
                    }
                    Some(&op) => {
                        rank.stack.push(Activity::Main(i + 1));
                        match op {
                            Op::Send { dest, len, tag } => rank.stack.push(Activity::Send {
                                dest,
                                left: len,
                                tag,
                                open: false,
                                first: true,
                            }),
                            Op::Own { dest, len } => {
                                rank.stack.push(Activity::QueueOwn { dest, len })
                            }
                            Op::Extract => {
                                // `extract` returns at once when nothing is there.
                                let handled = self.extract(&t, r);
                                if !handled.is_empty() {
                                    return Ok(handled);
                                }
                            }
                        }
                        out.push(t);
                    }
                }
            }
            Activity::Drain => out.extend(self.extract(s, r)),
            Activity::SendOutbox => {
                let mut t = s.clone();
                let rank = &mut t.ranks[r];
                rank.stack.pop();
                if let Some((dest, len)) = rank.outbox.pop_front() {
                    rank.stack.push(Activity::SendOutbox);
                    rank.stack.push(Activity::Send {
                        dest,
                        left: len,
                        tag: Tag::Plain,
                        open: false,
                        first: true,
                    });
                }
                out.push(t);
            }
            Activity::QueueOwn { dest, len } => {
                let rank = &s.ranks[r];
                let bytes = rank.outbox.len() * OWN_BYTES;
                // Every send of the model's own sender is on the owner's thread.
                if !(self.outbox_rule)(true, rank.outbox.len(), bytes, OWN_BYTES) {
                    let mut t = s.clone();
                    t.ranks[r].stack.pop();
                    t.ranks[r].outbox.push_back((dest, len));
                    out.push(t);
                }
                // Else it waits for room that only this thread makes: no step.
            }
            Activity::Send {
                dest,
                left,
                tag,
                open,
                first,
            } => out.extend(self.send_step(s, r, dest, left, tag, open, first)?),
            Activity::Handler {
                src,
                unread,
                tag,
                acted,
            } => out.extend(self.handler_step(s, r, src, unread, tag, acted)?),
        }
        Ok(out)
    }

    /// `acquire_data_slot` and `send_piece`: one packet if a credit and a
    /// frame are at hand, else what [`Accounts::while_waiting`] says.
    #[allow(clippy::too_many_arguments)]
    fn send_step(
        &self,
        s: &State,
        r: usize,
        dest: usize,
        left: u8,
        tag: Tag,
        open: bool,
        first: bool,
    ) -> Result<Vec<State>, String> {
        let rank = &s.ranks[r];
        let standing = Self::standing(rank);
        let set_aside = rank.stash.iter().any(|q| !q.is_empty());
        if !open && rank.acct.runs_set_aside_before_sending(standing) && set_aside {
            // `open_message`: run set-aside handlers first.
            return Ok(vec![self.run_set_aside(s, r)]);
        }
        if rank.acct.credits[dest] > 0 && self.frame_free(s, r, dest) {
            let mut t = s.clone();
            let rank = &mut t.ranks[r];
            rank.acct.credits[dest] -= 1;
            let credits = rank.acct.take_owed(dest);
            rank.stack.pop();
            if left > 1 {
                rank.stack.push(Activity::Send {
                    dest,
                    left: left - 1,
                    tag,
                    open: true,
                    first: false,
                });
            }
            let len = left; // the receiver learns the rest from the first
            t.chan[r][dest].push_back(Pkt::Data {
                tag,
                len,
                first,
                credits,
            });
            self.check_slots(&t, r, dest)?;
            return Ok(vec![t]);
        }
        // Stalled: a handler gives back what it withholds.
        let mut base = s.clone();
        let standing = Standing {
            message_open: open || standing.message_open,
            ..standing
        };
        if base.ranks[r].acct.returns_withheld_when_waiting(standing) {
            Self::return_withheld(&mut base, r)?;
        }
        let rank = &base.ranks[r];
        let set_aside = rank.stash.iter().any(|q| !q.is_empty());
        match rank.acct.while_waiting(standing, set_aside) {
            WhileWaiting::RunSetAside => Ok(vec![self.run_set_aside(&base, r)]),
            WhileWaiting::TakeIn => self.take_in_any(&base, r, standing),
        }
    }

    /// `release_withheld`: every set-aside message's withheld credit is owed.
    fn return_withheld(t: &mut State, r: usize) -> Result<(), String> {
        for src in 0..t.ranks.len() {
            for i in 0..t.ranks[r].stash[src].len() {
                if std::mem::take(&mut t.ranks[r].stash[src][i].1) {
                    Self::owe(t, r, src, true)?;
                }
            }
        }
        Ok(())
    }

    /// A packet of `src` consumed (`withheld`: its credit was withheld):
    /// owe its credit, and return credits when a return is due.
    fn owe(t: &mut State, r: usize, src: usize, withheld: bool) -> Result<(), String> {
        let acct = &mut t.ranks[r].acct;
        let due = match withheld {
            true => acct.withheld_consumed(src),
            false => acct.consumed(src),
        };
        if due {
            let n = acct.take_owed(src);
            t.chan[r][src].push_back(Pkt::Credit(n));
            Self::check_control(t, r, src)?;
        }
        Ok(())
    }

    /// The oldest set-aside message's handler runs (lowest source first).
    fn run_set_aside(&self, s: &State, r: usize) -> State {
        let mut t = s.clone();
        let src = (0..t.ranks.len())
            .find(|&q| !t.ranks[r].stash[q].is_empty())
            .expect("something set aside");
        let (p, withheld) = t.ranks[r].stash[src].pop_front().expect("set aside");
        t.ranks[r].acct.stashed_bytes -= 1;
        // Its credit was owed when set aside, or is now.
        if withheld {
            // The handler consumes it; owed as it is read.
            let _ = Self::owe(&mut t, r, src, true);
        }
        Self::start_handler(&mut t, r, src, p);
        t
    }

    /// `dispatch` of a first packet whose credit is already dealt with.
    fn start_handler(t: &mut State, r: usize, src: usize, p: Pkt) {
        if let Pkt::Data { tag, len, .. } = p {
            t.ranks[r].stack.push(Activity::Handler {
                src,
                unread: len - 1,
                tag,
                acted: false,
            });
        }
    }

    /// `progress_stalled`/`absorb`: take in one packet from any peer.
    fn take_in_any(&self, s: &State, r: usize, standing: Standing) -> Result<Vec<State>, String> {
        let mut out = Vec::new();
        for src in 0..s.ranks.len() {
            if s.chan[src][r].is_empty() {
                continue;
            }
            let mut t = s.clone();
            let p = t.chan[src][r].pop_front().expect("nonempty");
            Self::absorb(&mut t, r, src, p, standing)?;
            out.push(t);
        }
        Ok(out)
    }

    fn apply_credits(t: &mut State, r: usize, src: usize, n: u32) -> Result<(), String> {
        t.ranks[r]
            .acct
            .returned(src, n)
            .map_err(|c| format!("rank {r} holds {c} credits towards {src}, past its window"))
    }

    /// Credits applied; data set aside, its credit owed or withheld.
    fn absorb(t: &mut State, r: usize, src: usize, p: Pkt, s: Standing) -> Result<(), String> {
        match p {
            Pkt::Credit(n) => Self::apply_credits(t, r, src, n),
            Pkt::Data {
                tag,
                len,
                first,
                credits,
            } => {
                Self::apply_credits(t, r, src, credits)?;
                let withheld = t.ranks[r].acct.withholds(src, first, s);
                t.ranks[r].acct.stashed_bytes += 1;
                let aside = Pkt::Data {
                    tag,
                    len,
                    first,
                    credits: 0,
                };
                t.ranks[r].stash[src].push_back((aside, withheld));
                if !withheld {
                    Self::owe(t, r, src, false)?;
                }
                Ok(())
            }
        }
    }

    /// `extract`: send the outbox, then handle the next packet (set aside
    /// first, then any peer's).
    fn extract(&self, s: &State, r: usize) -> Vec<State> {
        if !s.ranks[r].outbox.is_empty() {
            let mut t = s.clone();
            t.ranks[r].stack.push(Activity::SendOutbox);
            return vec![t];
        }
        if s.ranks[r].stash.iter().any(|q| !q.is_empty()) {
            return vec![self.run_set_aside(s, r)];
        }
        let mut out = Vec::new();
        for src in 0..s.ranks.len() {
            let Some(&p) = s.chan[src][r].front() else {
                continue;
            };
            let mut t = s.clone();
            t.chan[src][r].pop_front();
            let ok = match p {
                Pkt::Credit(n) => Self::apply_credits(&mut t, r, src, n),
                Pkt::Data { credits, .. } => Self::apply_credits(&mut t, r, src, credits)
                    // Copied aside before the handler can send (the credit
                    // rule): its credit is owed now.
                    .and_then(|()| Self::owe(&mut t, r, src, false))
                    .map(|()| Self::start_handler(&mut t, r, src, p)),
            };
            if ok.is_ok() {
                out.push(t);
            }
        }
        out
    }

    /// A handler: do what its tag says, then read the rest of its message
    /// (`next_packet_from`: others' packets are taken in meanwhile).
    fn handler_step(
        &self,
        s: &State,
        r: usize,
        src: usize,
        unread: u8,
        tag: Tag,
        acted: bool,
    ) -> Result<Vec<State>, String> {
        let mut t = s.clone();
        let set = |t: &mut State, unread: u8, acted: bool| {
            *t.ranks[r].stack.last_mut().expect("handler") = Activity::Handler {
                src,
                unread,
                tag,
                acted,
            };
        };
        if !acted {
            set(&mut t, unread, true);
            match tag {
                Tag::Plain => {}
                Tag::Request(len) => t.ranks[r].stack.push(Activity::Send {
                    dest: src,
                    left: len,
                    tag: Tag::Plain,
                    open: false,
                    first: true,
                }),
                Tag::OwnRequest => t.ranks[r]
                    .stack
                    .push(Activity::QueueOwn { dest: src, len: 1 }),
            }
            return Ok(vec![t]);
        }
        if unread == 0 {
            t.ranks[r].stack.pop();
            return Ok(vec![t]);
        }
        // The next packet of this message: set aside, or from the source.
        if let Some((_, withheld)) = t.ranks[r].stash[src].pop_front() {
            t.ranks[r].acct.stashed_bytes -= 1;
            if withheld {
                Self::owe(&mut t, r, src, true)?;
            }
            set(&mut t, unread - 1, true);
            return Ok(vec![t]);
        }
        let standing = Self::standing(&s.ranks[r]);
        let mut out = Vec::new();
        for from in 0..s.ranks.len() {
            let Some(&p) = s.chan[from][r].front() else {
                continue;
            };
            let mut t = s.clone();
            t.chan[from][r].pop_front();
            match (from == src, p) {
                (true, Pkt::Data { credits, .. }) => {
                    Self::apply_credits(&mut t, r, src, credits)?;
                    Self::owe(&mut t, r, src, false)?;
                    set(&mut t, unread - 1, true);
                }
                _ => Self::absorb(&mut t, r, from, p, standing)?,
            }
            out.push(t);
        }
        Ok(out)
    }

    /// A sender keeps within its window (plus the control reserve): the
    /// queue's slots are never overrun.
    fn check_slots(&self, t: &State, src: usize, dst: usize) -> Result<(), String> {
        let data = t.chan[src][dst]
            .iter()
            .filter(|p| matches!(p, Pkt::Data { .. }))
            .count();
        if data > self.window as usize {
            return Err(format!(
                "{data} data packets from {src} to {dst} with a window of {}",
                self.window
            ));
        }
        Ok(())
    }

    fn check_control(t: &State, src: usize, dst: usize) -> Result<(), String> {
        let control = t.chan[src][dst]
            .iter()
            .filter(|p| matches!(p, Pkt::Credit(_)))
            .count();
        if control > CONTROL_RESERVE {
            return Err(format!(
                "{control} credit returns from {src} to {dst}, past the control reserve"
            ));
        }
        Ok(())
    }
}

/// The outbox's rule at 67f5fab: wait while queued messages and this one
/// would pass the bound, on any thread — the owner's too.
fn outbox_rule_67f5fab(_on_owner_thread: bool, queued: usize, bytes: usize, len: usize) -> bool {
    queued > 0 && bytes + len > OUTBOX_BYTES
}

fn send(dest: usize, len: u8, tag: Tag) -> Op {
    Op::Send { dest, len, tag }
}

/// Each rank's main code and the model's bounds, for one check.
struct Case {
    name: &'static str,
    plans: Vec<Vec<Op>>,
    window: u32,
    frames: usize,
    stash: usize,
}

impl Case {
    /// The model of this case's plans and bounds, under `rule` for the outbox.
    fn model(&self, rule: OutboxRule) -> Model {
        Model {
            plans: self.plans.clone(),
            window: self.window,
            frames: self.frames,
            outbox_rule: rule,
        }
    }
}

// A table of cases: long, and clearer whole.
#[allow(clippy::too_many_lines)]
fn cases() -> Vec<Case> {
    use Tag::*;
    vec![
        Case {
            // Two ranks sending each other requests head to head, whose
            // handlers reply with more than a window.
            name: "head-to-head requests with replies past the window",
            plans: vec![
                vec![send(1, 2, Request(3)), send(1, 1, Request(3))],
                vec![send(0, 2, Request(3)), send(0, 1, Plain)],
            ],
            window: 2,
            frames: 2,
            stash: 2,
        },
        Case {
            // Three ranks in a ring of multi-packet requests, the stash's
            // bound at one packet, a frame pool smaller than the window.
            name: "a ring of multi-packet requests, a tiny stash and frame pool",
            plans: vec![
                vec![send(1, 2, Request(3))],
                vec![send(2, 2, Request(3))],
                vec![send(0, 2, Request(3))],
            ],
            window: 2,
            frames: 1,
            stash: 1,
        },
        Case {
            // Two ranks sending to one, which sends to both.
            name: "two ranks sending to one, which answers both",
            plans: vec![
                vec![send(1, 2, Request(3))],
                vec![send(0, 2, Request(2)), send(2, 1, Plain)],
                vec![send(1, 2, Request(3))],
            ],
            window: 2,
            frames: 2,
            stash: 1,
        },
        Case {
            // Four ranks: three send requests to one, which replies past
            // its window to each while sending to the last.
            name: "four ranks, three requesting from one",
            plans: vec![
                vec![send(1, 1, Request(3))],
                vec![send(3, 2, Plain)],
                vec![send(1, 1, Request(3))],
                vec![send(1, 1, Request(2))],
            ],
            window: 2,
            frames: 1,
            stash: 1,
        },
        Case {
            // Small messages head to head past the stash's bound, then a
            // message longer than the window: what is withheld must leave
            // a peer part way through a message able to finish it.
            name: "small messages head to head past the stash's bound",
            plans: vec![
                vec![
                    send(1, 1, Plain),
                    send(1, 1, Plain),
                    send(1, 1, Plain),
                    send(1, 3, Plain),
                ],
                vec![
                    send(0, 1, Plain),
                    send(0, 1, Plain),
                    send(0, 1, Plain),
                    send(0, 3, Plain),
                ],
            ],
            window: 2,
            frames: 2,
            stash: 1,
        },
        Case {
            // Main code and a handler sending through the rank's own
            // sender, past the outbox's bound.
            name: "the owner's own sender past the outbox's bound",
            plans: vec![
                vec![
                    Op::Own { dest: 1, len: 1 },
                    Op::Own { dest: 1, len: 2 },
                    send(1, 1, OwnRequest),
                    Op::Extract,
                ],
                vec![send(0, 2, Request(2)), send(0, 1, OwnRequest)],
            ],
            window: 2,
            frames: 2,
            stash: 2,
        },
    ]
}

const STATES: usize = 2_000_000;

/// Today's rules: no wait cycle, no overrun, in any interleaving.
#[test]
fn no_interleaving_of_the_production_rules_deadlocks() {
    for c in cases() {
        let m = c.model(waits_for_room);
        match m.search(c.stash, STATES) {
            Found::NoCycle { states } => println!("{}: {states} states, no cycle", c.name),
            other => panic!("{}: {other:?}", c.name),
        }
    }
}

/// The outbox's rule at 67f5fab: the owner's thread waits for room only it
/// makes. The search finds that wait cycle.
#[test]
fn the_model_finds_the_owner_waiting_for_its_own_outbox_on_67f5fab_rules() {
    let c = cases().pop().expect("the outbox case");
    let m = c.model(outbox_rule_67f5fab);
    match m.search(c.stash, STATES) {
        Found::Deadlock(state) => {
            println!("{state}");
            assert!(state.contains("QueueOwn"), "{state}");
        }
        other => panic!("expected the wait cycle, found {other:?}"),
    }
}

/// The checker is not blind: a rule that never gives credits back (no
/// return is ever due) is found to deadlock.
#[test]
fn the_model_finds_a_cycle_when_credits_are_never_returned() {
    let c = cases().remove(0);
    let m = c.model(waits_for_room);
    let mut start = m.initial(c.stash);
    for r in &mut start.ranks {
        // Returns due only past anything a window can owe.
        r.acct.return_at = vec![u32::MAX; r.acct.return_at.len()];
    }
    assert!(
        matches!(m.search_from(start, STATES), Found::Deadlock(_)),
        "a model that never returns credits must deadlock"
    );
}
