//! `MPI_Type_create_darray`: one process's part of an array distributed
//! over a grid of processes (HPF's BLOCK, CYCLIC(k) and none), as MPI-4.0
//! §5.1.4 defines it.

use crate::types;
use crate::*;
use fm_mpi_macros::mpi;

use super::datatype::{recipe, Args};

/// How one dimension is spread over the grid's processes along it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Spread {
    /// Blocks of this many, one per process in turn (BLOCK: one each).
    Cyclic(usize),
    /// Not spread: every process holds the whole dimension.
    Whole,
}

/// Of a dimension of `size` elements spread as `spread` over `procs`
/// processes, the runs process `coord` holds: (first element, length).
fn runs(size: usize, procs: usize, coord: usize, spread: Spread) -> Vec<(usize, usize)> {
    match spread {
        Spread::Whole => vec![(0, size)],
        Spread::Cyclic(k) => (coord * k..size)
            .step_by(procs * k)
            .map(|first| (first, k.min(size - first)))
            .collect(),
    }
}

/// The spread of one dimension as its distribution and argument say.
fn spread(size: usize, procs: usize, distrib: c_int, darg: c_int) -> MpiResult<Spread> {
    let bad = |why: String| err(MPI_ERR_ARG, why);
    match distrib {
        MPI_DISTRIBUTE_NONE if procs != 1 => bad(format!(
            "an undistributed dimension over {procs} processes (it needs 1)"
        )),
        MPI_DISTRIBUTE_NONE => Ok(Spread::Whole),
        MPI_DISTRIBUTE_BLOCK => {
            let block = match darg {
                MPI_DISTRIBUTE_DFLT_DARG => size.div_ceil(procs),
                d => match usize::try_from(d) {
                    Ok(d) if d >= 1 && d * procs >= size => d,
                    _ => {
                        return bad(format!(
                            "blocks of {d} over {procs} processes do not cover {size} elements"
                        ))
                    }
                },
            };
            Ok(Spread::Cyclic(block.max(1)))
        }
        MPI_DISTRIBUTE_CYCLIC => match darg {
            MPI_DISTRIBUTE_DFLT_DARG => Ok(Spread::Cyclic(1)),
            d => match usize::try_from(d) {
                Ok(d) if d >= 1 => Ok(Spread::Cyclic(d)),
                _ => bad(format!("cyclic blocks of {d} elements")),
            },
        },
        d => bad(format!("{d} is not an MPI_DISTRIBUTE_ value")),
    }
}

#[mpi]
#[allow(clippy::too_many_arguments)]
fn PMPI_Type_create_darray(
    size: c_int,
    rank: c_int,
    ndims: c_int,
    gsizes: *const IntOrCount,
    distribs: *const c_int,
    dargs: *const c_int,
    psizes: *const c_int,
    order: c_int,
    oldtype: Handle,
    newtype: *mut Handle,
) -> c_int {
    call("MPI_Type_create_darray", MPI_COMM_WORLD, |m| {
        let n = nonneg(ndims, "number of dimensions")?;
        let ints = |p, what| crate::collective::ints(p, n, what).map(<[c_int]>::to_vec);
        let (gsizes, distribs, dargs, psizes) = (
            counts(gsizes, n, "global sizes")?,
            ints(distribs, "distributions")?,
            ints(dargs, "distribution arguments")?,
            ints(psizes, "process grid sizes")?,
        );
        let after = [&distribs[..], &dargs, &psizes, &[order]].concat();
        let args = Args::counted(
            IntOrCount::LARGE,
            &[size, rank, ndims],
            &gsizes,
            &after,
            &[],
        );
        let r = recipe(MPI_COMBINER_DARRAY, args, &[oldtype])?;
        let procs: usize = (psizes.iter())
            .map(|&p| nonneg(p, "process grid size"))
            .product::<MpiResult<usize>>()?;
        if procs != nonneg(size, "size")? || rank < 0 || rank >= size {
            return err(
                MPI_ERR_ARG,
                format!("rank {rank} of {size} processes on a grid of {psizes:?}"),
            );
        }
        // The grid is numbered row-major whatever the array's order.
        let mut coords = vec![0; n];
        let mut left = rank as usize;
        for d in (0..n).rev() {
            let p = psizes[d] as usize;
            coords[d] = left % p;
            left /= p;
        }
        // The fastest dimension first: the last in C's order.
        let dims: Vec<usize> = match order {
            MPI_ORDER_C => (0..n).rev().collect(),
            MPI_ORDER_FORTRAN => (0..n).collect(),
            o => {
                return err(
                    MPI_ERR_ARG,
                    format!("order {o} is neither MPI_ORDER_C nor MPI_ORDER_FORTRAN"),
                )
            }
        };
        let old = m.layout(oldtype)?;
        // Each dimension's runs of the faster ones' type, which spans a
        // whole row of them (`row` bytes): then resized to its own row.
        let mut t = (*old).clone();
        let mut row = old.extent as i128;
        for d in dims {
            let g = nonneg(gsizes[d], "global size")?;
            let p = psizes[d] as usize;
            let s = spread(g, p, distribs[d], dargs[d])?;
            let blocks: Vec<(usize, i128)> = runs(g, p, coords[d], s)
                .into_iter()
                .map(|(first, len)| (len, first as i128 * row))
                .collect();
            let placed = Layout::hindexed(&blocks, &t)?;
            row *= g as i128;
            let Ok(extent) = isize::try_from(row) else {
                return err(MPI_ERR_ARG, "the array's extent does not fit an address");
            };
            t = Layout::resized(&placed, 0, extent);
        }
        // A zero-dimensional array is one element.
        *arg(newtype, "the new datatype")? = types::add_made(t, r)?;
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_element_is_held_by_exactly_one_process() {
        for size in 0..40 {
            for procs in 1..6 {
                for spread in [
                    Spread::Cyclic(1),
                    Spread::Cyclic(3),
                    Spread::Cyclic(size.max(1)),
                ] {
                    let mut held = vec![0; size];
                    for coord in 0..procs {
                        for (first, len) in runs(size, procs, coord, spread) {
                            for h in &mut held[first..first + len] {
                                *h += 1;
                            }
                        }
                    }
                    assert!(held.iter().all(|&h| h == 1), "{size} {procs} {spread:?}");
                }
            }
        }
        // BLOCK's default block: the ceiling, so the last process may
        // hold fewer or none.
        assert_eq!(
            spread(10, 4, MPI_DISTRIBUTE_BLOCK, MPI_DISTRIBUTE_DFLT_DARG).unwrap(),
            Spread::Cyclic(3)
        );
        assert_eq!(runs(10, 4, 3, Spread::Cyclic(3)), [(9, 1)]);
        assert!(spread(10, 4, MPI_DISTRIBUTE_BLOCK, 2).is_err());
        assert!(spread(10, 2, MPI_DISTRIBUTE_NONE, 0).is_err());
        assert_eq!(runs(7, 1, 0, Spread::Whole), [(0, 7)]);
    }
}
