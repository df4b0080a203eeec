//! Groups.

use crate::*;
use fm_mpi_macros::mpi;

#[mpi]
fn PMPI_Group_size(group: Handle, size: *mut c_int) -> c_int {
    call("MPI_Group_size", MPI_COMM_WORLD, |m| {
        *arg(size, "the size")? = m.group(group)?.len() as c_int;
        Ok(())
    })
}

#[mpi]
fn PMPI_Group_rank(group: Handle, rank: *mut c_int) -> c_int {
    call("MPI_Group_rank", MPI_COMM_WORLD, |m| {
        let me = m.engine.fm.rank();
        let members = m.group(group)?;
        *arg(rank, "the rank")? = members
            .iter()
            .position(|&r| r == me)
            .map_or(MPI_UNDEFINED, |i| i as c_int);
        Ok(())
    })
}

#[mpi]
fn PMPI_Group_incl(group: Handle, n: c_int, ranks: *const c_int, newgroup: *mut Handle) -> c_int {
    call("MPI_Group_incl", MPI_COMM_WORLD, |m| {
        let newgroup = arg(newgroup, "the new group")?;
        let members = m.group(group)?;
        let picked = group_ranks(&members, n, ranks)?;
        *newgroup = m.add_group(picked.iter().map(|&i| members[i]).collect())?;
        Ok(())
    })
}

#[mpi]
fn PMPI_Group_excl(group: Handle, n: c_int, ranks: *const c_int, newgroup: *mut Handle) -> c_int {
    call("MPI_Group_excl", MPI_COMM_WORLD, |m| {
        let newgroup = arg(newgroup, "the new group")?;
        let members = m.group(group)?;
        let left_out = group_ranks(&members, n, ranks)?;
        let kept = (0..members.len())
            .filter(|i| !left_out.contains(i))
            .map(|i| members[i])
            .collect();
        *newgroup = m.add_group(kept)?;
        Ok(())
    })
}

#[mpi]
fn PMPI_Group_translate_ranks(
    group1: Handle,
    n: c_int,
    ranks1: *const c_int,
    group2: Handle,
    ranks2: *mut c_int,
) -> c_int {
    call("MPI_Group_translate_ranks", MPI_COMM_WORLD, |m| {
        let (g1, g2) = (m.group(group1)?, m.group(group2)?);
        if n < 0 || (n > 0 && (ranks1.is_null() || ranks2.is_null())) {
            return err(
                MPI_ERR_ARG,
                format!("{n} ranks at {ranks1:?} and {ranks2:?}"),
            );
        }
        for i in 0..n as usize {
            let r = *ranks1.add(i);
            *ranks2.add(i) = if r == MPI_PROC_NULL {
                MPI_PROC_NULL
            } else {
                let p = usize::try_from(r)
                    .ok()
                    .and_then(|r| g1.get(r))
                    .ok_or_else(|| MpiError {
                        class: MPI_ERR_RANK,
                        message: format!("rank {r} is not in a group of {}", g1.len()),
                    })?;
                g2.iter()
                    .position(|x| x == p)
                    .map_or(MPI_UNDEFINED, |j| j as c_int)
            };
        }
        Ok(())
    })
}

#[mpi]
fn PMPI_Group_compare(group1: Handle, group2: Handle, result: *mut c_int) -> c_int {
    call("MPI_Group_compare", MPI_COMM_WORLD, |m| {
        let (a, b) = (m.group(group1)?, m.group(group2)?);
        *arg(result, "the result")? = if a == b {
            MPI_IDENT
        } else {
            compare_members(&a, &b)
        };
        Ok(())
    })
}

#[mpi]
fn PMPI_Group_free(group: *mut Handle) -> c_int {
    call("MPI_Group_free", MPI_COMM_WORLD, |m| {
        let group = arg(group, "the group")?;
        match *group {
            // Group constructors give MPI_GROUP_EMPTY for no members, so
            // it is freed like the groups they give (as in MPICH).
            MPI_GROUP_EMPTY => {
                *group = MPI_GROUP_NULL;
                Ok(())
            }
            h if h & !HANDLE_INDEX == GROUP_DIRECT
                && m.groups
                    .get((h & HANDLE_INDEX) as usize)
                    .is_some_and(Option::is_some) =>
            {
                m.groups[(h & HANDLE_INDEX) as usize] = None;
                *group = MPI_GROUP_NULL;
                Ok(())
            }
            h => err(
                MPI_ERR_GROUP,
                format!("{h:#x} is not a group that can be freed"),
            ),
        }
    })
}

/// The ranks `n` (first, last, stride) triplets name, in order.
unsafe fn range_ranks(size: usize, n: c_int, ranges: *const [c_int; 3]) -> MpiResult<Vec<c_int>> {
    let n = nonneg(n, "number of ranges")?;
    if n > 0 && ranges.is_null() {
        return err(MPI_ERR_ARG, "a null array of ranges");
    }
    let mut out = Vec::new();
    for i in 0..n {
        let [first, last, stride] = *ranges.add(i);
        let in_group = |r: c_int| usize::try_from(r).is_ok_and(|r| r < size);
        if stride == 0 || !in_group(first) || !in_group(last) {
            return err(
                MPI_ERR_RANK,
                format!("range ({first}, {last}, {stride}) is not one of a group of {size}"),
            );
        }
        let mut r = first;
        while (stride > 0 && r <= last) || (stride < 0 && r >= last) {
            if out.len() >= size {
                return err(MPI_ERR_RANK, "the ranges name a rank twice");
            }
            out.push(r);
            r += stride;
        }
    }
    Ok(out)
}

#[mpi]
fn PMPI_Group_range_incl(
    group: Handle,
    n: c_int,
    ranges: *const [c_int; 3],
    newgroup: *mut Handle,
) -> c_int {
    call("MPI_Group_range_incl", MPI_COMM_WORLD, |m| {
        let newgroup = arg(newgroup, "the new group")?;
        let members = m.group(group)?;
        let named = range_ranks(members.len(), n, ranges)?;
        let picked = group_ranks(&members, named.len() as c_int, named.as_ptr())?;
        *newgroup = m.add_group(picked.iter().map(|&i| members[i]).collect())?;
        Ok(())
    })
}

#[mpi]
fn PMPI_Group_range_excl(
    group: Handle,
    n: c_int,
    ranges: *const [c_int; 3],
    newgroup: *mut Handle,
) -> c_int {
    call("MPI_Group_range_excl", MPI_COMM_WORLD, |m| {
        let newgroup = arg(newgroup, "the new group")?;
        let members = m.group(group)?;
        let named = range_ranks(members.len(), n, ranges)?;
        let left_out = group_ranks(&members, named.len() as c_int, named.as_ptr())?;
        let kept = (0..members.len())
            .filter(|i| !left_out.contains(i))
            .map(|i| members[i])
            .collect();
        *newgroup = m.add_group(kept)?;
        Ok(())
    })
}

/// The members of `a` that `keep` says to keep (in `a`'s order), then,
/// with `then_b`, those of `b` not in `a`.
fn set_op(
    m: &mut Mpi,
    a: Handle,
    b: Handle,
    keep: impl Fn(bool) -> bool,
    then_b: bool,
    out: *mut Handle,
) -> MpiResult<()> {
    // SAFETY: the caller's handle.
    let out = unsafe { arg(out, "the new group")? };
    let (x, y) = (m.group(a)?, m.group(b)?);
    let mut members: Vec<fm::Rank> = x.iter().copied().filter(|r| keep(y.contains(r))).collect();
    if then_b {
        members.extend(y.iter().filter(|r| !x.contains(r)));
    }
    *out = m.add_group(members.into())?;
    Ok(())
}

#[mpi]
fn PMPI_Group_union(group1: Handle, group2: Handle, newgroup: *mut Handle) -> c_int {
    call("MPI_Group_union", MPI_COMM_WORLD, |m| {
        set_op(m, group1, group2, |_| true, true, newgroup)
    })
}

#[mpi]
fn PMPI_Group_intersection(group1: Handle, group2: Handle, newgroup: *mut Handle) -> c_int {
    call("MPI_Group_intersection", MPI_COMM_WORLD, |m| {
        set_op(m, group1, group2, |in_b| in_b, false, newgroup)
    })
}

#[mpi]
fn PMPI_Group_difference(group1: Handle, group2: Handle, newgroup: *mut Handle) -> c_int {
    call("MPI_Group_difference", MPI_COMM_WORLD, |m| {
        set_op(m, group1, group2, |in_b| !in_b, false, newgroup)
    })
}
