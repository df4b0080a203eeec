//! Host-aware collectives: on a communicator whose members are spread
//! over several hosts, the members of each host combine among themselves
//! first (their messages go through the host's shared memory), one
//! *leader* per host runs the algorithm between hosts, and each leader
//! hands the result on to its host's members. Only leaders send on the
//! network, once per host instead of once per member (Karonis et al.'s
//! MPICH-G2 and today's MPICH and Open MPI "hierarchical" collectives do
//! the same); fm's device table already says who shares a host.
//!
//! Each stage is an ordinary algorithm of [`super::algorithms`] run on a
//! group of members ([`Plan::within`]); the stages' messages never meet,
//! since a stage's pairs are all on one host or all leaders of different
//! hosts, and one pair's messages keep their order.

use crate::algorithms;
use crate::plan::{Plan, Span};

/// A member's rank in its job.
pub type Rank = u32;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

/// The hosts of the communicators that ran collectives last, by their
/// ranks (every copy of a communicator shares its `Arc<[Rank]>`, and a
/// `Weak` keeps the address from being reused): without it each
/// collective would sort its n members by host anew.
static RECENT: Mutex<Vec<Known>> = Mutex::new(Vec::new());
type Known = (Weak<[Rank]>, Arc<Hosts>);
const RECENT_KEPT: usize = 8;

/// Which members of a communicator share a host.
#[derive(Clone, Debug)]
pub struct Hosts {
    /// Each host's members (communicator ranks, ascending), the hosts in
    /// the order of their lowest member.
    pub groups: Vec<Vec<usize>>,
    /// The host (index in `groups`) of each member.
    pub host: Vec<usize>,
}

impl Hosts {
    /// The hosts of a communicator's members, whose job ranks are
    /// `ranks`, from the host of each job rank (`job_hosts`).
    pub fn of(ranks: &[Rank], job_hosts: &[u32]) -> Hosts {
        let mut index: HashMap<u64, usize> = HashMap::new();
        let mut groups: Vec<Vec<usize>> = Vec::new();
        let host = ranks
            .iter()
            .enumerate()
            .map(|(i, &r)| {
                // A rank the table does not name is a host of its own.
                let h = job_hosts
                    .get(r as usize)
                    .map_or(1 << 32 | u64::from(r), |&h| u64::from(h));
                let g = *index.entry(h).or_insert_with(|| {
                    groups.push(Vec::new());
                    groups.len() - 1
                });
                groups[g].push(i);
                g
            })
            .collect();
        Hosts { groups, host }
    }

    /// [`Hosts::of`] a communicator whose job ranks are `ranks`, kept
    /// for its next collectives.
    pub fn of_comm(ranks: &Arc<[Rank]>, job_hosts: &[u32]) -> Arc<Hosts> {
        let mut recent = RECENT.lock().unwrap_or_else(|e| e.into_inner());
        let known = (recent.iter()).position(|(w, _)| std::ptr::eq(w.as_ptr(), Arc::as_ptr(ranks)));
        let entry = match known {
            Some(i) => recent.remove(i),
            None => (Arc::downgrade(ranks), Arc::new(Hosts::of(ranks, job_hosts))),
        };
        let hosts = entry.1.clone();
        recent.insert(0, entry);
        recent.retain(|(w, _)| w.strong_count() > 0);
        recent.truncate(RECENT_KEPT);
        hosts
    }

    /// Whether two levels save anything: more than one host, and more
    /// than one member on some host.
    pub fn worth_it(&self) -> bool {
        self.groups.len() > 1 && self.groups.len() < self.host.len()
    }

    /// One leader per host, by host: its lowest member, except that
    /// `root` leads its own host.
    pub fn leaders(&self, root: Option<usize>) -> Vec<usize> {
        let mut l: Vec<usize> = self.groups.iter().map(|g| g[0]).collect();
        if let Some(r) = root {
            l[self.host[r]] = r;
        }
        l
    }

    /// The members of `member`'s host, and where its leader (of
    /// `leaders`) is among them.
    fn local(&self, member: usize, leaders: &[usize]) -> (&[usize], usize) {
        let h = self.host[member];
        let g = &self.groups[h];
        let at = g.iter().position(|&m| m == leaders[h]).unwrap_or(0);
        (g, at)
    }
}

/// Barrier: each host's members report to its leader, the leaders run
/// the dissemination barrier, and each leader releases its members.
pub fn barrier<R>(p: &mut Plan<R>, h: &Hosts) {
    let leaders = h.leaders(None);
    let (local, lead) = h.local(p.rank, &leaders);
    let nothing = p.scratch(0);
    p.within(local, |p| algorithms::fan_in(p, lead, nothing));
    p.within(&leaders, algorithms::barrier);
    p.within(local, |p| algorithms::bcast_binomial(p, lead, nothing));
}

/// Broadcast of `data` from `root`: among the leaders (`root` leading its
/// host) by `between(plan, root among them, data)`, then from each
/// leader down a binomial tree of its host.
pub fn bcast<R>(
    p: &mut Plan<R>,
    h: &Hosts,
    root: usize,
    data: Span,
    between: impl FnOnce(&mut Plan<R>, usize, Span),
) {
    let leaders = h.leaders(Some(root));
    let (local, lead) = h.local(p.rank, &leaders);
    p.within(&leaders, |p| between(p, h.host[root], data));
    p.within(local, |p| algorithms::bcast_binomial(p, lead, data));
}

/// Reduction to `root` of a commutative operation on each member's
/// `input`, formed in `acc` (as [`algorithms::reduce_binomial`]'s): each
/// host's members reduce to its leader (`root` leading its host), then
/// the leaders to `root`.
pub fn reduce<R>(p: &mut Plan<R>, h: &Hosts, root: usize, input: Span, acc: Option<Span>) {
    let leaders = h.leaders(Some(root));
    let (local, lead) = h.local(p.rank, &leaders);
    // A leader forms its host's part where the leaders' stage can use it.
    let acc = match acc {
        None if leaders.contains(&p.rank) => Some(p.scratch(input.len)),
        acc => acc,
    };
    p.within(local, |p| {
        algorithms::reduce_binomial(p, lead, input, acc, true);
    });
    if let Some(acc) = acc {
        p.within(&leaders, |p| {
            algorithms::reduce_binomial(p, h.host[root], acc, Some(acc), true);
        });
    }
}

/// Allreduce of a commutative operation: each host reduces to its
/// leader, the leaders allreduce by `between`, and each leader
/// broadcasts the result to its host.
pub fn allreduce<R>(
    p: &mut Plan<R>,
    h: &Hosts,
    acc: Span,
    between: impl FnOnce(&mut Plan<R>, Span),
) {
    let leaders = h.leaders(None);
    let (local, lead) = h.local(p.rank, &leaders);
    p.within(local, |p| {
        algorithms::reduce_binomial(p, lead, acc, Some(acc), true);
    });
    p.within(&leaders, |p| between(p, acc));
    p.within(local, |p| algorithms::bcast_binomial(p, lead, acc));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model;
    use crate::op::{Checked, Op};
    use proptest::prelude::*;

    fn sum() -> Checked<i32> {
        Op::Sum.checked().expect("defined on i32")
    }

    /// Member `i`'s vector of `len` ints.
    fn vector(i: usize, len: usize) -> Vec<i32> {
        (0..len).map(|k| (i * 1000 + k * 7) as i32 - 50).collect()
    }

    fn bytes(v: &[i32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_ne_bytes()).collect()
    }

    fn sum_of(n: usize, len: usize) -> Vec<u8> {
        let s: Vec<i32> = (0..len)
            .map(|k| (0..n).map(|i| vector(i, len)[k]).sum())
            .collect();
        bytes(&s)
    }

    /// A random placement of `n` members on up to 4 hosts.
    fn placement() -> impl Strategy<Value = Vec<usize>> {
        (1usize..=11).prop_flat_map(|n| proptest::collection::vec(0usize..4, n))
    }

    /// Each member's plan of `write(plan, its vector)` over its vector
    /// of `len` ints summed; the run's end, and each member's vector
    /// there.
    fn run(
        host: &[usize],
        len: usize,
        write: impl Fn(&mut Plan<Checked<i32>>, &Hosts, Span),
    ) -> (model::Run, Vec<Vec<u8>>) {
        let n = host.len();
        let ranks: Vec<Rank> = (0..n as Rank).collect();
        let job: Vec<u32> = host.iter().map(|&h| h as u32).collect();
        let h = Hosts::of(&ranks, &job);
        let plans = (0..n)
            .map(|i| {
                let mut p = Plan::new(n, i);
                p.reducing(sum());
                let data = p.buffer(bytes(&vector(i, len)));
                write(&mut p, &h, data);
                p
            })
            .collect();
        let r = model::run(plans, host).unwrap_or_else(|e| panic!("{host:?}: {e}"));
        let v = r.bufs.iter().map(|b| b[0].clone()).collect();
        (r, v)
    }

    /// Only the leaders (`root` leading its host) send off their host.
    fn only_leaders_left_their_host(host: &[usize], root: Option<usize>, r: &model::Run) {
        let ranks: Vec<Rank> = (0..host.len() as Rank).collect();
        let job: Vec<u32> = host.iter().map(|&h| h as u32).collect();
        let leaders = Hosts::of(&ranks, &job).leaders(root);
        for (i, &sent) in r.sent_off_host.iter().enumerate() {
            assert!(
                sent == 0 || leaders.contains(&i),
                "{host:?}: member {i}, no leader, sent {sent} off its host"
            );
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        #[test]
        fn every_member_of_a_two_level_barrier_hears_from_all(host in placement()) {
            let (r, _) = run(&host, 0, |p, h, _| barrier(p, h));
            let all = (1u128 << host.len()) - 1;
            prop_assert!(r.heard.iter().all(|&h| h == all), "{host:?}: {:?}", r.heard);
            only_leaders_left_their_host(&host, None, &r);
        }

        #[test]
        fn a_two_level_broadcast_gives_everyone_the_roots_data(
            host in placement(), root in 0usize..11, len in 0usize..40, long in any::<bool>()
        ) {
            let root = root % host.len();
            let (r, v) = run(&host, len, |p, h, data| {
                bcast(p, h, root, data, |p, root, data| {
                    if long && p.n >= 4 {
                        algorithms::bcast_scatter_allgather(p, root, data, 4);
                    } else {
                        algorithms::bcast_binomial(p, root, data);
                    }
                });
            });
            let want = bytes(&vector(root, len));
            prop_assert!(v.iter().all(|b| *b == want), "{host:?} root {root}");
            only_leaders_left_their_host(&host, Some(root), &r);
        }

        #[test]
        fn a_two_level_reduce_sums_every_members_vector_at_the_root(
            host in placement(), root in 0usize..11, len in 0usize..40, in_place in any::<bool>()
        ) {
            let root = root % host.len();
            // The root's result in its input (in place) or in a buffer of
            // its own (buffer 1, filled with garbage first); the other
            // members' inputs are only read.
            let (r, v) = run(&host, len, |p, h, input| {
                let acc = (p.rank == root).then(|| match in_place {
                    true => input,
                    false => p.buffer(vec![0xa5; input.len]),
                });
                reduce(p, h, root, input, acc);
            });
            let at = usize::from(!in_place);
            prop_assert_eq!(&r.bufs[root][at], &sum_of(host.len(), len), "{:?} root {}", host, root);
            for (i, mine) in v.iter().enumerate().filter(|&(i, _)| in_place.then_some(root) != Some(i)) {
                prop_assert_eq!(mine, &bytes(&vector(i, len)), "member {}'s input was written", i);
            }
            only_leaders_left_their_host(&host, Some(root), &r);
        }

        #[test]
        fn an_allreduce_from_a_separate_input_gives_everyone_the_sum_and_reads_the_input_only(
            host in placement(), len in 0usize..40
        ) {
            // Rabenseifner's (it needs an element per member of the
            // largest power of two) forms the result in buffer 1, filled
            // with garbage first, from the input in buffer 0.
            let n = host.len();
            let (r, v) = run(&host, len, |p, _, input| {
                let acc = p.buffer(vec![0xa5; input.len]);
                if len >= 1 << n.ilog2() {
                    algorithms::allreduce_rabenseifner(p, input, acc, 4);
                } else {
                    crate::choose::Rules::default().allreduce(p, input, acc, 4, false);
                }
            });
            let want = sum_of(n, len);
            for (i, (bufs, input)) in r.bufs.iter().zip(&v).enumerate() {
                prop_assert_eq!(&bufs[1], &want, "{:?}: member {}", host, i);
                prop_assert_eq!(input, &bytes(&vector(i, len)), "member {}'s input was written", i);
            }
        }

        #[test]
        fn a_two_level_allreduce_gives_everyone_the_sum(
            host in placement(), len in 0usize..40, long in any::<bool>()
        ) {
            let (r, v) = run(&host, len, |p, h, acc| {
                allreduce(p, h, acc, |p, acc| {
                    if long && len >= 1 << p.n.ilog2() {
                        algorithms::allreduce_rabenseifner(p, acc, acc, 4);
                    } else {
                        algorithms::allreduce_recursive_doubling(p, acc);
                    }
                });
            });
            let want = sum_of(host.len(), len);
            prop_assert!(v.iter().all(|b| *b == want), "{:?}", host);
            only_leaders_left_their_host(&host, None, &r);
        }
    }

    /// A communicator's hosts are worked out once and kept while it
    /// lives: its copies (which share its ranks) get the same answer,
    /// another communicator its own.
    #[test]
    fn a_communicators_hosts_are_kept_for_its_next_collectives() {
        let a: Arc<[Rank]> = Arc::from(vec![0, 1, 2, 3]);
        let b: Arc<[Rank]> = Arc::from(vec![3, 2, 1, 0]);
        let job = [0, 0, 1, 1];
        let first = Hosts::of_comm(&a, &job);
        assert!(Arc::ptr_eq(&first, &Hosts::of_comm(&a.clone(), &job)));
        let other = Hosts::of_comm(&b, &job);
        assert!(!Arc::ptr_eq(&first, &other));
        assert_eq!(other.groups, vec![vec![0, 1], vec![2, 3]]);
        assert_eq!(other.host, vec![0, 0, 1, 1]);
    }

    /// The model's checks can fail: a receive nobody sends to is a
    /// deadlock, a message of the wrong length an error, and a plan that
    /// forgets its host's members leaves them without the data.
    #[test]
    fn the_model_sees_deadlocks_wrong_lengths_and_wrong_data() {
        let one =
            |n: usize, f: &dyn Fn(&mut Plan<Checked<i32>>, Span)| -> Vec<Plan<Checked<i32>>> {
                (0..n)
                    .map(|i| {
                        let mut p = Plan::new(n, i);
                        let s = p.buffer(vec![i as u8; 4]);
                        f(&mut p, s);
                        p
                    })
                    .collect()
            };
        let e = model::run(
            one(2, &|p, s| {
                if p.me == 1 {
                    p.recv(0, s);
                }
            }),
            &[0, 0],
        );
        assert!(e.is_err_and(|e| e.contains("deadlock")));
        let e = model::run(
            one(2, &|p, s| match p.me {
                0 => p.send(1, s.part(0, 2)),
                _ => p.recv(0, s),
            }),
            &[0, 0],
        );
        assert!(e.is_err_and(|e| e.contains("expected 4 bytes from 0 and got 2")));
        // Only the leaders' stage: the members that lead nothing keep
        // their own data, and the property above would see it.
        let host = [0, 0, 1, 1];
        let ranks: Vec<Rank> = (0..4).collect();
        let h = Hosts::of(&ranks, &[0, 0, 1, 1]);
        let plans = one(4, &|p, s| {
            p.within(&h.leaders(Some(0)), |p| algorithms::bcast_binomial(p, 0, s));
        });
        let r = model::run(plans, &host).expect("runs");
        assert_eq!(r.bufs[2][0], vec![0; 4]);
        assert_eq!(r.bufs[3][0], vec![3; 4]);
    }
}
