//! The algorithms, each written as a [`Plan`] for one member: which spans
//! it sends to and receives from whom, in which stage, and what it
//! combines. They are the classic ones MPICH and Open MPI choose from
//! (Thakur, Rabenseifner and Gropp, "Optimization of Collective
//! Communication Operations in MPICH", 2005); [`super::tuning`] says
//! which runs when.
//!
//! Ranks here are ranks in the communicator; `rel` is a rank relative to
//! the root of a rooted collective.

use crate::plan::{Plan, Span};

/// Dissemination barrier: in round k each member tells the one 2^k after
/// it and hears from the one 2^k before it; after ⌈log2 n⌉ rounds each
/// has heard, through some chain, from every member.
pub fn barrier<R>(p: &mut Plan<R>) {
    let (n, me) = (p.n, p.me);
    let nothing = p.scratch(0);
    let mut step = 1;
    while step < n {
        p.send((me + step) % n, nothing);
        p.recv((me + n - step) % n, nothing);
        p.fence();
        step *= 2;
    }
}

/// A member's place in the binomial tree over relative ranks `0..n`
/// (rooted at 0): the distance to its parent (its lowest set bit; none
/// for the root), and the distances to its children, `rel + d` for each
/// power of two `d` below that bit with `rel + d < n`, nearest first.
fn binomial(n: usize, rel: usize) -> (Option<usize>, Vec<usize>) {
    let parent = (rel > 0).then(|| 1 << rel.trailing_zeros());
    let below = parent.unwrap_or(n.next_power_of_two());
    let children = (0..usize::BITS)
        .map(|k| 1usize << k)
        .take_while(|&d| d < below && rel + d < n)
        .collect();
    (parent, children)
}

/// Binomial-tree broadcast of `data` (filled at `root`): ⌈log2 n⌉ rounds;
/// a member receives once from its parent, then sends to its children,
/// the farthest subtree first.
pub fn bcast_binomial<R>(p: &mut Plan<R>, root: usize, data: Span) {
    let n = p.n;
    let rel = (p.me + n - root) % n;
    let (parent, children) = binomial(n, rel);
    if let Some(d) = parent {
        p.recv((rel - d + root) % n, data);
        p.fence();
    }
    for d in children.into_iter().rev() {
        p.send((rel + d + root) % n, data);
    }
    p.fence();
}

/// Binomial fan-in to `root` (`nothing`: a span of no bytes): a member
/// hears from all its children, then tells its parent; the mirror of
/// [`bcast_binomial`].
pub fn fan_in<R>(p: &mut Plan<R>, root: usize, nothing: Span) {
    let n = p.n;
    let rel = (p.me + n - root) % n;
    let (parent, children) = binomial(n, rel);
    for d in children {
        p.recv((rel + d + root) % n, nothing);
    }
    p.fence();
    if let Some(d) = parent {
        p.send((rel - d + root) % n, nothing);
        p.fence();
    }
}

/// The pieces `data` is cut into for `n` members: `n` spans of whole
/// elements of `unit` bytes, as even as can be (the first ones longer).
pub fn pieces(data: Span, n: usize, unit: usize) -> Vec<Span> {
    let units = data.len / unit.max(1);
    let (each, extra) = (units / n, units % n);
    let mut at = 0;
    (0..n)
        .map(|i| {
            let len = (each + usize::from(i < extra)) * unit;
            let s = data.part(at, len);
            at += len;
            s
        })
        .collect()
}

/// Large broadcast (van de Geijn): the root scatters a piece to each
/// member along a binomial tree, then a ring allgather gives every
/// member all the pieces: about 2 × the data's time instead of log2 n ×.
pub fn bcast_scatter_allgather<R>(p: &mut Plan<R>, root: usize, data: Span, unit: usize) {
    let n = p.n;
    let parts = pieces(data, n, unit);
    // Binomial scatter over relative ranks: the member at `rel` gets the
    // pieces rel..rel+subtree from its parent, and passes on the upper
    // halves to its children.
    let rel = (p.me + n - root) % n;
    let piece = |r: usize| parts[(r + root) % n];
    let run = |from: usize, to: usize| -> Option<Span> {
        // Pieces of relative ranks from..to, which are contiguous in
        // `data` unless the run wraps past the end of the ranks.
        let to = to.min(n);
        if from >= to {
            return None;
        }
        let (a, b) = (piece(from), piece(to - 1));
        (a.at <= b.at).then(|| data.part(a.at - data.at, b.at + b.len - a.at))
    };
    let (parent, children) = binomial(n, rel);
    if let Some(d) = parent {
        for s in spans_of(n, rel, rel + d, &run, &piece) {
            p.recv((rel - d + root) % n, s);
        }
        p.fence();
    }
    for d in children.into_iter().rev() {
        for s in spans_of(n, rel + d, rel + 2 * d, &run, &piece) {
            p.send((rel + d + root) % n, s);
        }
    }
    p.fence();
    allgather_ring(p, &parts);
}

/// The spans of relative ranks `from..to`'s pieces: one when they are
/// contiguous, else piece by piece (a run that wraps past the last rank).
fn spans_of(
    n: usize,
    from: usize,
    to: usize,
    run: &impl Fn(usize, usize) -> Option<Span>,
    piece: &impl Fn(usize) -> Span,
) -> Vec<Span> {
    match run(from, to) {
        Some(s) => vec![s],
        None => (from..to.min(n)).map(piece).collect(),
    }
}

/// Binomial-tree reduction to `root` of every member's `input`, formed
/// in `acc`: the root's result; elsewhere where a member with children
/// combines (made here when `None`). `input` is only read, and may be
/// `acc` itself (in place). Where they differ, the first child's data is
/// received straight into `acc` and combined with `input` there, and a
/// member without children sends `input` itself: no copy of the input
/// is made. Operands are combined lower ranks first; a non-commutative
/// operation's tree is rooted at rank 0, whose result then goes to the
/// root, so that the order is rank order.
pub fn reduce_binomial<R>(
    p: &mut Plan<R>,
    root: usize,
    input: Span,
    acc: Option<Span>,
    commutative: bool,
) {
    let n = p.n;
    let base = if commutative { root } else { 0 };
    let rel = (p.me + n - base) % n;
    let (parent, children) = binomial(n, rel);
    let acc = match acc {
        Some(acc) => acc,
        None if children.is_empty() => input,
        None => p.scratch(input.len),
    };
    // This member's subtree's contribution so far.
    let mut sum = input;
    let mut tmp = None;
    for d in children {
        let child = (rel + d + base) % n;
        if sum != acc {
            p.recv(child, acc);
            p.fence();
            p.reduce(sum, acc, false);
            sum = acc;
        } else {
            let t = *tmp.get_or_insert_with(|| p.scratch(acc.len));
            p.recv(child, t);
            p.fence();
            p.reduce(acc, t, true);
        }
    }
    if let Some(d) = parent {
        p.send((rel - d + base) % n, sum);
        p.fence();
    }
    if base != root {
        if p.me == base {
            p.send(root, sum);
        } else if p.me == root {
            p.recv(base, acc);
        }
        p.fence();
    } else if p.me == root && sum != acc {
        p.copy(sum, acc);
    }
}

/// Recursive-doubling allreduce: with p the largest power of two up to n,
/// the first 2(n − p) members fold pairwise (the odd ones keep the pair's
/// sum), the p left exchange with partner `r ^ 2^k` for each k, and the
/// folded ones get the result back. log2 p rounds of the whole vector:
/// the choice for short vectors.
pub fn allreduce_recursive_doubling<R>(p: &mut Plan<R>, acc: Span) {
    let (n, me) = (p.n, p.me);
    let pow = 1 << n.ilog2();
    let rem = n - pow;
    let tmp = p.scratch(acc.len);
    let new = fold_in(p, acc, tmp, rem);
    if let Some(new) = new {
        let mut mask = 1;
        while mask < pow {
            let partner = unfolded(new ^ mask, rem);
            p.send(partner, acc);
            p.recv(partner, tmp);
            p.fence();
            if partner < me {
                p.reduce(tmp, acc, false);
            } else {
                p.reduce(acc, tmp, true);
            }
            mask <<= 1;
        }
    }
    fold_out(p, acc, rem);
}

/// The fold of the first `2 rem` members into `rem`: an even one hands
/// its vector to the odd one after it and sits out (`None`); the others'
/// new ranks, 0..p.
fn fold_in<R>(p: &mut Plan<R>, acc: Span, tmp: Span, rem: usize) -> Option<usize> {
    let me = p.me;
    if me < 2 * rem {
        if me.is_multiple_of(2) {
            p.send(me + 1, acc);
            p.fence();
            None
        } else {
            p.recv(me - 1, tmp);
            p.fence();
            p.reduce(tmp, acc, false);
            Some(me / 2)
        }
    } else {
        Some(me - rem)
    }
}

/// The rank of new rank `new` (the inverse of [`fold_in`]).
fn unfolded(new: usize, rem: usize) -> usize {
    if new < rem {
        new * 2 + 1
    } else {
        new + rem
    }
}

/// The result back to the members that sat out of the fold.
fn fold_out<R>(p: &mut Plan<R>, acc: Span, rem: usize) {
    let me = p.me;
    if me < 2 * rem {
        if me % 2 == 1 {
            p.send(me - 1, acc);
        } else {
            p.recv(me + 1, acc);
        }
        p.fence();
    }
}

/// Rabenseifner's allreduce for long vectors of a commutative operation:
/// a reduce-scatter by recursive halving (each of the p members ends with
/// the reduced piece it owns), then an allgather by recursive doubling;
/// each member sends about 2 × the vector instead of log2 p ×.
///
/// The result forms in `acc`; `input`, only read, may be `acc` itself.
/// Where it is not, on a power of two members, the first halving sends
/// from `input` and receives straight into `acc`, which the input's
/// kept half is then combined into: the input is never copied whole.
pub fn allreduce_rabenseifner<R>(p: &mut Plan<R>, input: Span, acc: Span, unit: usize) {
    let (n, me) = (p.n, p.me);
    let pow = 1 << n.ilog2();
    let rem = n - pow;
    // The fold sends and combines whole vectors: it starts from `acc`.
    if rem > 0 && input != acc {
        p.copy(input, acc);
    }
    let mut from = if rem > 0 { acc } else { input };
    // The partner's halves arrive in `tmp`, except in a first halving
    // from a separate input (straight into `acc`): on two members that is
    // the only one, and `tmp`, never used, is made empty rather than
    // allocated and zeroed on every call.
    let unused = rem == 0 && pow <= 2 && from != acc;
    let tmp = p.scratch(if unused { 0 } else { acc.len });
    if let Some(new) = fold_in(p, acc, tmp, rem) {
        let parts = pieces(acc, pow, unit);
        let tparts = pieces(tmp, pow, unit);
        let iparts = pieces(from, pow, unit);
        let range = |lo: usize, hi: usize, of: &[Span]| -> Span {
            let (a, b) = (of[lo], of[hi - 1]);
            Span {
                buf: a.buf,
                at: a.at,
                len: b.at + b.len - a.at,
            }
        };
        // Recursive halving: keep the half of the current range that
        // holds this member's piece, send the other half to the partner.
        let (mut lo, mut hi) = (0, pow);
        let mut mask = pow / 2;
        let mut steps = Vec::new();
        while mask > 0 {
            let partner_new = new ^ mask;
            let partner = unfolded(partner_new, rem);
            let mid = (lo + hi) / 2;
            let (keep, give) = if new & mask == 0 {
                ((lo, mid), (mid, hi))
            } else {
                ((mid, hi), (lo, mid))
            };
            if from != acc {
                // The operation commutes: the input's half combines into
                // the partner's, whatever their order.
                let mine = range(keep.0, keep.1, &parts);
                p.send(partner, range(give.0, give.1, &iparts));
                p.recv(partner, mine);
                p.fence();
                p.reduce(range(keep.0, keep.1, &iparts), mine, false);
                from = acc;
            } else {
                p.send(partner, range(give.0, give.1, &parts));
                p.recv(partner, range(keep.0, keep.1, &tparts));
                p.fence();
                let (mine, theirs) = (
                    range(keep.0, keep.1, &parts),
                    range(keep.0, keep.1, &tparts),
                );
                if partner < me {
                    p.reduce(theirs, mine, false);
                } else {
                    p.reduce(mine, theirs, true);
                }
            }
            steps.push((partner, keep, give));
            (lo, hi) = keep;
            mask /= 2;
        }
        // One member alone halves nothing.
        if from != acc {
            p.copy(from, acc);
        }
        // Recursive doubling back: the halves in reverse order.
        for (partner, keep, give) in steps.into_iter().rev() {
            p.send(partner, range(keep.0, keep.1, &parts));
            p.recv(partner, range(give.0, give.1, &parts));
            p.fence();
        }
    }
    fold_out(p, acc, rem);
}

/// Linear gather: every member sends its span to the root, which
/// receives each into its block (its own copied).
pub fn gather_linear<R>(p: &mut Plan<R>, root: usize, mine: Option<Span>, blocks: &[Span]) {
    if p.me == root {
        for (i, &b) in blocks.iter().enumerate() {
            if i != root {
                p.recv(i, b);
            }
        }
        if let Some(mine) = mine {
            p.copy(mine, blocks[root]);
        }
    } else if let Some(mine) = mine {
        p.send(root, mine);
    }
    p.fence();
}

/// Linear scatter: the root sends each member its block.
pub fn scatter_linear<R>(p: &mut Plan<R>, root: usize, blocks: &[Span], mine: Option<Span>) {
    if p.me == root {
        for (i, &b) in blocks.iter().enumerate() {
            if i != root {
                p.send(i, b);
            }
        }
        if let Some(mine) = mine {
            p.copy(blocks[root], mine);
        }
    } else if let Some(mine) = mine {
        p.recv(root, mine);
    }
    p.fence();
}

/// Ring allgather: in step k each member passes the block it got in the
/// step before to the next member; n − 1 steps, each block crosses each
/// link once. `blocks[me]` is filled beforehand.
pub fn allgather_ring<R>(p: &mut Plan<R>, blocks: &[Span]) {
    let (n, me) = (p.n, p.me);
    let (right, left) = ((me + 1) % n, (me + n - 1) % n);
    for k in 0..n.saturating_sub(1) {
        p.send(right, blocks[(me + n - k) % n]);
        p.recv(left, blocks[(me + 2 * n - k - 1) % n]);
        p.fence();
    }
}

/// Recursive-doubling allgather for a power-of-two n: in round k each
/// member exchanges the 2^k blocks it has with partner `me ^ 2^k`;
/// log2 n rounds. Blocks must be one after another in one buffer.
pub fn allgather_recursive_doubling<R>(p: &mut Plan<R>, blocks: &[Span]) {
    let (n, me) = (p.n, p.me);
    let run = |first: usize, k: usize| -> Span {
        let (a, b) = (blocks[first], blocks[first + k - 1]);
        Span {
            buf: a.buf,
            at: a.at,
            len: b.at + b.len - a.at,
        }
    };
    let mut mask = 1;
    while mask < n {
        let partner = me ^ mask;
        let mine = me & !(mask - 1);
        let theirs = partner & !(mask - 1);
        p.send(partner, run(mine, mask));
        p.recv(partner, run(theirs, mask));
        p.fence();
        mask <<= 1;
    }
}

/// All-to-all with every send and receive posted at once, each member
/// starting with the one after it so that no member is everyone's first
/// (`send[me]` is copied to `recv[me]`).
pub fn alltoall_pairwise<R>(p: &mut Plan<R>, send: &[Span], recv: &[Span]) {
    let (n, me) = (p.n, p.me);
    for i in 1..n {
        let (to, from) = ((me + i) % n, (me + n - i) % n);
        p.recv(from, recv[from]);
        p.send(to, send[to]);
    }
    p.copy(send[me], recv[me]);
    p.fence();
}

/// Recursive-doubling scan (MPICH's): `partial` is the reduction over
/// the members this one has heard from (a run of ranks around it),
/// `result` over those up to itself. With `exclusive` (`MPI_Exscan`),
/// `result` starts empty and gets only lower members' data; `Some(false)`
/// is returned when it never got any (rank 0), else whether it did.
pub fn scan_recursive_doubling<R>(
    p: &mut Plan<R>,
    partial: Span,
    result: Span,
    exclusive: bool,
) -> bool {
    let (n, me) = (p.n, p.me);
    let tmp = p.scratch(partial.len);
    let mut has_result = !exclusive;
    let mut mask = 1;
    while mask < n {
        let partner = me ^ mask;
        if partner < n {
            p.send(partner, partial);
            p.recv(partner, tmp);
            p.fence();
            if partner < me {
                // theirs (lower) op mine
                if has_result {
                    p.reduce(tmp, result, false);
                } else {
                    p.copy(tmp, result);
                    has_result = true;
                }
                p.reduce(tmp, partial, false);
            } else {
                p.reduce(partial, tmp, true);
            }
        }
        mask <<= 1;
    }
    has_result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_binomial_tree_reaches_every_member_once() {
        for n in 1..40 {
            let mut reached = vec![0; n];
            reached[0] = 1;
            for rel in 0..n {
                let (parent, children) = binomial(n, rel);
                assert_eq!(parent.is_none(), rel == 0);
                if let Some(d) = parent {
                    assert!(binomial(n, rel - d).1.contains(&d), "n {n}: {rel}'s parent");
                }
                for d in children {
                    reached[rel + d] += 1;
                }
            }
            assert!(reached.iter().all(|&r| r == 1), "n {n}: {reached:?}");
        }
    }
}
