//! A model of the members of a collective running their plans together,
//! in one process, so that the algorithms can be checked on any number of
//! members, hosts and roots in a property test.
//!
//! Each member runs its steps as [`crate::Schedule`] does: a stage's
//! sends and receives are posted together, its local steps run when
//! reached, and a fence waits for the stage's sends and receives. A
//! receive takes the oldest message from its source, as FM's order per
//! pair and the collective's one tag make the engine do. Sends are
//! *synchronous* here: one completes only when its receive takes it, so a
//! plan that finishes in the model finishes whatever the engine buffers
//! (eager or rendezvous), and one that needs buffering to finish is
//! reported as a deadlock.

use crate::plan::{Plan, Span, Step};
use crate::schedule::Combine;
use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt::Debug;

/// Messages sent and not yet received, by (sender, receiver), oldest
/// first, each with its send's number.
type Queues = HashMap<(usize, usize), VecDeque<Message>>;

/// A message: its send's number, the members its sender had heard from
/// (itself included, through any chain of messages), and its bytes.
type Message = (u64, u128, Vec<u8>);

/// One member running its plan.
struct Member<R> {
    steps: Vec<Step>,
    bufs: Vec<Vec<u8>>,
    reduction: Option<R>,
    next: usize,
    /// Receives of the stage under way not yet matched, in posting order.
    recvs: Vec<(usize, Span)>,
    /// Sends of the stage under way not yet received.
    sends: Vec<u64>,
    /// The members it has heard from, through any chain of messages
    /// (bit i: member i; itself included).
    heard: u128,
}

impl<R: Combine> Member<R>
where
    R::Error: Debug,
{
    fn bytes(&self, s: Span) -> &[u8] {
        &self.bufs[s.buf][s.at..s.at + s.len]
    }

    fn bytes_mut(&mut self, s: Span) -> &mut [u8] {
        &mut self.bufs[s.buf][s.at..s.at + s.len]
    }

    /// A local step.
    fn local(&mut self, step: Step) {
        match step {
            Step::Reduce {
                lower,
                higher,
                into_lower,
            } => {
                // As the schedule does: a commutative operation forms a
                // result wanted in `lower` there directly.
                let r = self.reduction.take().expect("a reduction step's operation");
                if into_lower && r.commutative() {
                    let b = self.bytes(higher).to_vec();
                    r.combine(&b, self.bytes_mut(lower)).expect("combine");
                } else {
                    let a = self.bytes(lower).to_vec();
                    r.combine(&a, self.bytes_mut(higher)).expect("combine");
                    if into_lower {
                        let b = self.bytes(higher).to_vec();
                        self.bytes_mut(lower).copy_from_slice(&b);
                    }
                }
                self.reduction = Some(r);
            }
            Step::Copy { from, to } => {
                let a = self.bytes(from).to_vec();
                self.bytes_mut(to).copy_from_slice(&a);
            }
            other => panic!("the model runs no {other:?}"),
        }
    }
}

impl<R: Combine> Member<R>
where
    R::Error: Debug,
{
    /// Its receives matched with what has arrived, the oldest message
    /// from a source to the first receive from it; whether any was.
    fn take_arrivals(
        &mut self,
        me: usize,
        queues: &mut Queues,
        received: &mut HashSet<u64>,
    ) -> Result<bool, String> {
        let mut waiting: HashSet<usize> = HashSet::new();
        let mut still = Vec::new();
        let mut took = false;
        for (from, span) in std::mem::take(&mut self.recvs) {
            let q = queues.entry((from, me)).or_default();
            if waiting.contains(&from) || q.is_empty() {
                waiting.insert(from);
                still.push((from, span));
                continue;
            }
            let (id, heard, data) = q.pop_front().expect("a message");
            if data.len() != span.len {
                return Err(format!(
                    "member {me} expected {} bytes from {from} and got {}",
                    span.len,
                    data.len()
                ));
            }
            self.heard |= heard;
            self.bytes_mut(span).copy_from_slice(&data);
            received.insert(id);
            took = true;
        }
        self.recvs = still;
        Ok(took)
    }
}

/// What a run of the model ended with.
pub struct Run {
    /// Each member's buffers at the end, as its plan numbered them.
    pub bufs: Vec<Vec<Vec<u8>>>,
    /// Each member's sends to a member of another host.
    pub sent_off_host: Vec<usize>,
    /// Each member's members heard from ([`Member::heard`]): a barrier
    /// must end with every member having heard from all.
    pub heard: Vec<u128>,
}

/// Run the plans of every member (`plans[i]` is member i's) to the end;
/// `host[i]` is member i's host. An error names what went wrong: a
/// deadlock (every member waiting), or a message whose length is not the
/// one its receive expects.
pub fn run<R: Combine>(plans: Vec<Plan<R>>, host: &[usize]) -> Result<Run, String>
where
    R::Error: Debug,
{
    assert!(plans.len() <= 128, "the model runs up to 128 members");
    let mut members: Vec<Member<R>> = plans
        .into_iter()
        .enumerate()
        .map(|(i, p)| {
            let (steps, bufs, reduction) = p.parts();
            Member {
                heard: 1 << i,
                steps,
                bufs,
                reduction,
                next: 0,
                recvs: Vec::new(),
                sends: Vec::new(),
            }
        })
        .collect();
    let mut queues = Queues::new();
    let mut received: HashSet<u64> = HashSet::new();
    let mut sent_off_host = vec![0; members.len()];
    loop {
        let mut moved = false;
        for (me, m) in members.iter_mut().enumerate() {
            moved |= m.take_arrivals(me, &mut queues, &mut received)?;
            m.sends.retain(|id| !received.contains(id));
            // Past the fence, and on through the next stage.
            while m.recvs.is_empty() && m.sends.is_empty() && m.next < m.steps.len() {
                if matches!(m.steps[m.next], Step::Fence) {
                    m.next += 1;
                }
                post_stage(m, me, host, &mut queues, &mut sent_off_host);
                moved = true;
            }
        }
        let done = members
            .iter()
            .all(|m| m.next == m.steps.len() && m.recvs.is_empty() && m.sends.is_empty());
        if done {
            break;
        }
        if !moved {
            let stuck: Vec<String> = (members.iter().enumerate())
                .filter(|(_, m)| !m.recvs.is_empty() || !m.sends.is_empty())
                .map(|(i, m)| {
                    let from: Vec<usize> = m.recvs.iter().map(|r| r.0).collect();
                    format!(
                        "{i} (receiving from {from:?}, {} sends open)",
                        m.sends.len()
                    )
                })
                .collect();
            return Err(format!("deadlock: {}", stuck.join("; ")));
        }
    }
    Ok(Run {
        heard: members.iter().map(|m| m.heard).collect(),
        bufs: members.into_iter().map(|m| m.bufs).collect(),
        sent_off_host,
    })
}

/// The stage at `m.next`: its sends and receives posted and its local
/// steps run, up to its fence (left for the caller to pass).
fn post_stage<R: Combine>(
    m: &mut Member<R>,
    me: usize,
    host: &[usize],
    queues: &mut Queues,
    off: &mut [usize],
) where
    R::Error: Debug,
{
    while let Some(step) = m.steps.get(m.next).cloned() {
        match step {
            Step::Fence => return,
            Step::Send { to, data } => {
                // Numbered by sender and step: unique in the run.
                let id = (me as u64) << 32 | m.next as u64;
                let bytes = m.bytes(data).to_vec();
                let heard = m.heard;
                queues
                    .entry((me, to))
                    .or_default()
                    .push_back((id, heard, bytes));
                m.sends.push(id);
                off[me] += usize::from(host[me] != host[to]);
            }
            Step::Recv { from, into } => m.recvs.push((from, into)),
            local => m.local(local),
        }
        m.next += 1;
    }
}
