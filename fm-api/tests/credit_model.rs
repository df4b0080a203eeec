//! An explicit-state model check of FM's credit rule (endpoint.rs, "The
//! credit rule"): every interleaving of a few ranks whose handlers reply
//! before their packet is consumed, with a window of one credit, is
//! explored, and none may reach a state where some rank waits and nothing
//! can move. The model is FM's protocol reduced to what credits depend on:
//! a packet's credit is owed when it is released and returned once
//! `return_at` are owed (or piggybacked on data); a sender without credit
//! keeps taking packets in, copying data aside and releasing it. With the
//! rule — a handler's packet is released before the handler can wait — no
//! deadlock is reachable; without it (the old fm) the checker finds one.

use std::collections::{HashSet, VecDeque};

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Pkt {
    /// A message of a chain (0 bytes, like the bug's), with piggybacked credits.
    Data {
        hop: u8,
        credits: u8,
    },
    Credit(u8),
}

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
enum Mode {
    /// In `extract`: takes the next set-aside or arrived packet.
    Idle,
    /// A handler runs for chain message `hop` from `src`; `held`: its
    /// packet is still unreleased.
    Handling { src: u8, hop: u8, held: bool },
    /// The handler sends `hop` back to `src`, waiting for credit meanwhile.
    Replying { src: u8, hop: u8, held: bool },
}

#[derive(Clone, PartialEq, Eq, Hash, Debug)]
struct Rank {
    credits: Vec<u8>,
    owed: Vec<u8>,
    /// Arrived packets, (source, packet), in arrival order.
    queue: VecDeque<(u8, Pkt)>,
    /// Data set aside by a waiting sender, (source, hop), credit already owed.
    stash: VecDeque<(u8, u8)>,
    mode: Mode,
    handled: u8,
}

type State = Vec<Rank>;

struct Rules {
    window: u8,
    return_at: u8,
    hops: u8,
    /// The credit rule: release the handler's packet before it sends.
    release_before_send: bool,
}

impl Rules {
    fn release(&self, s: &mut State, r: usize, src: u8) {
        s[r].owed[src as usize] += 1;
        if s[r].owed[src as usize] >= self.return_at {
            let n = std::mem::take(&mut s[r].owed[src as usize]);
            s[src as usize].queue.push_back((r as u8, Pkt::Credit(n)));
        }
    }

    /// Every state one step from `s`.
    fn next(&self, s: &State) -> Vec<State> {
        let mut out = Vec::new();
        for r in 0..s.len() {
            let mut t = s.clone();
            match s[r].mode {
                Mode::Idle => {
                    if let Some((src, hop)) = t[r].stash.pop_front() {
                        t[r].mode = Mode::Handling {
                            src,
                            hop,
                            held: false,
                        };
                        t[r].handled += 1;
                    } else if let Some((src, p)) = t[r].queue.pop_front() {
                        match p {
                            Pkt::Credit(n) => t[r].credits[src as usize] += n,
                            Pkt::Data { hop, credits } => {
                                t[r].credits[src as usize] += credits;
                                t[r].mode = Mode::Handling {
                                    src,
                                    hop,
                                    held: true,
                                };
                                t[r].handled += 1;
                            }
                        }
                    } else {
                        continue;
                    }
                }
                Mode::Handling { src, hop, held } => {
                    if hop < self.hops {
                        let mut held = held;
                        if held && self.release_before_send {
                            self.release(&mut t, r, src);
                            held = false;
                        }
                        t[r].mode = Mode::Replying {
                            src,
                            hop: hop + 1,
                            held,
                        };
                    } else {
                        if held {
                            self.release(&mut t, r, src);
                        }
                        t[r].mode = Mode::Idle;
                    }
                }
                Mode::Replying { src, hop, held } => {
                    let d = src as usize;
                    if t[r].credits[d] > 0 {
                        t[r].credits[d] -= 1;
                        let credits = std::mem::take(&mut t[r].owed[d]);
                        t[d].queue.push_back((r as u8, Pkt::Data { hop, credits }));
                        if held {
                            self.release(&mut t, r, src);
                        }
                        t[r].mode = Mode::Idle;
                    } else if let Some((from, p)) = t[r].queue.pop_front() {
                        // Out of credit: keep receiving.
                        match p {
                            Pkt::Credit(n) => t[r].credits[from as usize] += n,
                            Pkt::Data { hop, credits } => {
                                t[r].credits[from as usize] += credits;
                                t[r].stash.push_back((from, hop));
                                self.release(&mut t, r, from);
                            }
                        }
                    } else {
                        continue;
                    }
                }
            }
            out.push(t);
        }
        out
    }

    /// Explore every interleaving from each rank starting a chain to
    /// `partner[r]` at once. Err: a reachable state where nothing moves but
    /// work is left, with the path's length.
    fn check(&self, partner: &[u8]) -> Result<usize, String> {
        let n = partner.len();
        let mut s: State = (0..n)
            .map(|_| Rank {
                credits: vec![self.window; n],
                owed: vec![0; n],
                queue: VecDeque::new(),
                stash: VecDeque::new(),
                mode: Mode::Idle,
                handled: 0,
            })
            .collect();
        for (r, &p) in partner.iter().enumerate() {
            s[r].credits[p as usize] -= 1;
            s[p as usize]
                .queue
                .push_back((r as u8, Pkt::Data { hop: 1, credits: 0 }));
        }
        let want: u32 = n as u32 * self.hops as u32;
        let mut seen = HashSet::new();
        let mut todo = vec![s.clone()];
        seen.insert(s);
        while let Some(s) = todo.pop() {
            let next = self.next(&s);
            if next.is_empty() {
                let handled: u32 = s.iter().map(|r| r.handled as u32).sum();
                if handled != want {
                    return Err(format!(
                        "deadlock after {handled} of {want} messages: {s:#?}"
                    ));
                }
            }
            for t in next {
                if seen.insert(t.clone()) {
                    todo.push(t);
                }
            }
        }
        Ok(seen.len())
    }
}

#[test]
fn window_of_one_two_ranks_replying_from_handlers_never_deadlocks() {
    let rules = Rules {
        window: 1,
        return_at: 1,
        hops: 12,
        release_before_send: true,
    };
    let states = rules.check(&[1, 0]).expect("no deadlock");
    assert!(states > 100, "only {states} states explored");
}

#[test]
fn window_of_one_one_rank_sending_to_itself_never_deadlocks() {
    let rules = Rules {
        window: 1,
        return_at: 1,
        hops: 6,
        release_before_send: true,
    };
    rules.check(&[0]).expect("no deadlock");
}

/// Four ranks in two pairs and a window of two, credits returned one at a
/// time, and three ranks in a cycle (each replying to the one before).
#[test]
fn more_ranks_and_windows_never_deadlock() {
    for (window, return_at, partners) in [
        (1, 1, vec![1, 0, 3, 2]),
        (2, 1, vec![1, 0]),
        (1, 1, vec![1, 2, 0]),
    ] {
        let rules = Rules {
            window,
            return_at,
            hops: 4,
            release_before_send: true,
        };
        rules
            .check(&partners)
            .unwrap_or_else(|e| panic!("window {window}, partners {partners:?}: {e}"));
    }
}

/// The checker is not blind: without the rule (a handler holds its packet
/// while it waits for credit, as fm did) it finds the deadlock the bug
/// report describes, for two ranks and for one rank sending to itself.
#[test]
fn without_the_rule_the_checker_finds_the_deadlock() {
    let rules = Rules {
        window: 1,
        return_at: 1,
        hops: 6,
        release_before_send: false,
    };
    for partners in [vec![1u8, 0], vec![0]] {
        let e = rules.check(&partners).expect_err("the old rule deadlocks");
        assert!(e.starts_with("deadlock"), "{e}");
    }
}
