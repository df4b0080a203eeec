//! Collectives on intercommunicators (MPI-4.0 §6.2.2): data goes from one
//! group to the other. A plan is written over both groups at once, the
//! group whose first member has the lower job rank numbered first, so
//! both sides number every member alike; its messages use the
//! intercommunicator's context, which both groups share.
//!
//! The algorithms are the plain ones: a root sends to (or receives from)
//! each member of the other group; all-to-all forms exchange directly
//! between every pair across; the all-reduce forms reduce within each
//! group at its first member, the two swap, and each hands its result
//! on. Intercommunicator collectives are rare in programs; these are
//! correct first.

use super::op::Reduction;
use super::{Elements, Plan, Span};
use crate::abi::*;
use crate::engine::{err, Comm, MpiResult};
use fm::Rank;
use std::os::raw::c_int;
use std::sync::Arc;

/// Where each group sits in the plan's numbering.
#[derive(Clone, Copy, Debug)]
pub struct Sides {
    local_at: usize,
    remote_at: usize,
    pub locals: usize,
    pub remotes: usize,
    /// This member's rank in its group.
    pub me: usize,
}

impl Sides {
    pub fn of(c: &Comm) -> Sides {
        let remote = c.remote.as_deref().unwrap_or(&[]);
        let (locals, remotes) = (c.ranks.len(), remote.len());
        let local_first = remote.first().is_none_or(|&r| c.ranks[0] < r);
        let (local_at, remote_at) = if local_first {
            (0, locals)
        } else {
            (remotes, 0)
        };
        Sides {
            local_at,
            remote_at,
            locals,
            remotes,
            me: c.rank as usize,
        }
    }

    pub fn local(&self, i: usize) -> usize {
        self.local_at + i
    }

    pub fn remote(&self, i: usize) -> usize {
        self.remote_at + i
    }

    fn plan(&self) -> Plan {
        Plan::new(self.locals + self.remotes, self.local(self.me))
    }
}

/// Both groups' members in the plan's numbering (the job's ranks).
pub fn members(c: &Comm) -> Arc<[Rank]> {
    let remote = c.remote.as_deref().unwrap_or(&[]);
    match Sides::of(c).local_at {
        0 => c.ranks.iter().chain(remote).copied().collect(),
        _ => remote.iter().chain(c.ranks.iter()).copied().collect(),
    }
}

/// A rooted collective's `root` argument on an intercommunicator.
#[derive(Clone, Copy, Debug)]
pub enum Root {
    /// `MPI_ROOT`: this member is the root.
    Here,
    /// `MPI_PROC_NULL`: another member of this group is; nothing to do.
    Idle,
    /// The root is this rank of the other group.
    There(usize),
}

pub fn root(c: &Comm, root: c_int) -> MpiResult<Root> {
    let remotes = c.remote.as_ref().map_or(0, |r| r.len());
    match root {
        MPI_ROOT => Ok(Root::Here),
        MPI_PROC_NULL => Ok(Root::Idle),
        r if (0..remotes as c_int).contains(&r) => Ok(Root::There(r as usize)),
        r => err(
            MPI_ERR_ROOT,
            format!(
                "root {r} is neither MPI_ROOT, MPI_PROC_NULL nor a rank of the other group of {remotes}"
            ),
        ),
    }
}

pub fn barrier(c: &Comm) -> Plan {
    let mut p = Sides::of(c).plan();
    super::algorithms::barrier(&mut p);
    p
}

/// # Safety
/// `data` is the caller's buffer of its elements.
pub unsafe fn bcast(c: &Comm, data: &Elements, root: Root) -> Plan {
    let s = Sides::of(c);
    let mut p = s.plan();
    match root {
        Root::Here => {
            let all = p.buffer(data.pack());
            for i in 0..s.remotes {
                p.send(s.remote(i), all);
            }
        }
        Root::There(r) => {
            let into = p.scratch(data.bytes());
            p.recv(s.remote(r), into);
            p.fence();
            p.output(into, data.output());
        }
        Root::Idle => {}
    }
    p.fence();
    p
}

/// `send`'s elements from every member of the other group into `recv[i]`
/// at the root; the root's own input is not read.
///
/// # Safety
/// As [`bcast`].
pub unsafe fn gather(c: &Comm, send: &Elements, recv: &[Elements], root: Root) -> Plan {
    let s = Sides::of(c);
    let mut p = s.plan();
    match root {
        Root::Here => {
            let blocks: Vec<Span> = recv.iter().map(|e| p.scratch(e.bytes())).collect();
            for (i, &b) in blocks.iter().enumerate() {
                p.recv(s.remote(i), b);
            }
            p.fence();
            for (b, e) in blocks.into_iter().zip(recv) {
                p.output(b, e.output());
            }
        }
        Root::There(r) => {
            let mine = p.buffer(send.pack());
            p.send(s.remote(r), mine);
        }
        Root::Idle => {}
    }
    p.fence();
    p
}

/// # Safety
/// As [`bcast`].
pub unsafe fn scatter(c: &Comm, send: &[Elements], recv: &Elements, root: Root) -> Plan {
    let s = Sides::of(c);
    let mut p = s.plan();
    match root {
        Root::Here => {
            for (i, e) in send.iter().enumerate() {
                let b = p.buffer(e.pack());
                p.send(s.remote(i), b);
            }
        }
        Root::There(r) => {
            let into = p.scratch(recv.bytes());
            p.recv(s.remote(r), into);
            p.fence();
            p.output(into, recv.output());
        }
        Root::Idle => {}
    }
    p.fence();
    p
}

/// `MPI_Alltoall(v, w)` and `MPI_Allgather(v)` (every `send[i]` the same
/// elements): `send[i]` to member i of the other group, `recv[i]` from it.
///
/// # Safety
/// As [`bcast`].
pub unsafe fn alltoall(c: &Comm, send: &[Elements], recv: &[Elements]) -> Plan {
    let s = Sides::of(c);
    let mut p = s.plan();
    let blocks: Vec<Span> = recv.iter().map(|e| p.scratch(e.bytes())).collect();
    for (i, &b) in blocks.iter().enumerate() {
        p.recv(s.remote(i), b);
    }
    for (i, b) in super::packed(&mut p, send).into_iter().enumerate() {
        p.send(s.remote(i), b);
    }
    p.fence();
    for (b, e) in blocks.into_iter().zip(recv) {
        p.output(b, e.output());
    }
    p
}

/// `MPI_Reduce`: the root gets the reduction of the other group's inputs,
/// in their rank order.
///
/// # Safety
/// As [`bcast`].
pub unsafe fn reduce(
    c: &Comm,
    send: &Elements,
    recv: &Elements,
    reduction: Reduction,
    root: Root,
) -> Plan {
    let s = Sides::of(c);
    let mut p = s.plan();
    p.reducing(reduction);
    match root {
        Root::Here => {
            let acc = gather_reduced(&mut p, recv.bytes(), s.remotes, |i| s.remote(i));
            p.output(acc, recv.output());
        }
        Root::There(r) => {
            let mine = p.buffer(send.pack());
            p.send(s.remote(r), mine);
        }
        Root::Idle => {}
    }
    p.fence();
    p
}

/// Receive `len` bytes from each of `n` members (`at(i)` in the plan)
/// and reduce them in order: the span of the result, after a fence.
fn gather_reduced(p: &mut Plan, len: usize, n: usize, at: impl Fn(usize) -> usize) -> Span {
    let blocks: Vec<Span> = (0..n).map(|_| p.scratch(len)).collect();
    for (i, &b) in blocks.iter().enumerate() {
        p.recv(at(i), b);
    }
    p.fence();
    reduce_in_order(p, &blocks)
}

/// `blocks[0] op blocks[1] op …`, into `blocks[0]`.
fn reduce_in_order(p: &mut Plan, blocks: &[Span]) -> Span {
    for &b in &blocks[1..] {
        p.reduce(blocks[0], b, true);
    }
    blocks[0]
}

/// Each group's inputs reduced at its first member, in rank order; the
/// two first members swap theirs: the span that holds the other group's
/// reduction at the first member (`None` elsewhere), after a fence.
fn reduce_and_swap(p: &mut Plan, s: &Sides, mine: Span) -> Option<Span> {
    if s.me != 0 {
        p.send(s.local(0), mine);
        p.fence();
        return None;
    }
    let mut blocks = vec![mine];
    blocks.extend((1..s.locals).map(|_| p.scratch(mine.len)));
    for (i, &b) in blocks.iter().enumerate().skip(1) {
        p.recv(s.local(i), b);
    }
    p.fence();
    let ours = reduce_in_order(p, &blocks);
    let theirs = p.scratch(mine.len);
    p.recv(s.remote(0), theirs);
    p.send(s.remote(0), ours);
    p.fence();
    Some(theirs)
}

/// `MPI_Allreduce`: every member gets the reduction of the other group's
/// inputs.
///
/// # Safety
/// As [`bcast`].
pub unsafe fn allreduce(c: &Comm, send: &Elements, recv: &Elements, reduction: Reduction) -> Plan {
    let s = Sides::of(c);
    let mut p = s.plan();
    p.reducing(reduction);
    let mine = p.buffer(send.pack());
    let result = match reduce_and_swap(&mut p, &s, mine) {
        Some(theirs) => {
            for i in 1..s.locals {
                p.send(s.local(i), theirs);
            }
            theirs
        }
        None => {
            let into = p.scratch(mine.len);
            p.recv(s.local(0), into);
            into
        }
    };
    p.fence();
    p.output(result, recv.output());
    p
}

/// `MPI_Reduce_scatter(_block)`: the reduction of the other group's
/// inputs (`counts.sum()` elements each), member i of this group getting
/// `counts[i]` of them.
///
/// # Safety
/// As [`bcast`]; `input` is the whole input's elements.
pub unsafe fn reduce_scatter(
    c: &Comm,
    input: &Elements,
    recv: &Elements,
    counts: &[usize],
    reduction: Reduction,
) -> Plan {
    let s = Sides::of(c);
    let mut p = s.plan();
    p.reducing(reduction);
    let size = recv.layout.size;
    let mine = p.buffer(input.pack());
    let piece = match reduce_and_swap(&mut p, &s, mine) {
        Some(theirs) => {
            let mut at = counts[0] * size;
            for (i, &n) in counts.iter().enumerate().skip(1) {
                p.send(s.local(i), theirs.part(at, n * size));
                at += n * size;
            }
            theirs.part(0, counts[0] * size)
        }
        None => {
            let into = p.scratch(counts[s.me] * size);
            p.recv(s.local(0), into);
            into
        }
    };
    p.fence();
    p.output(piece, recv.output());
    p
}
