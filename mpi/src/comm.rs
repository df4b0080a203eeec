//! Communicator and group helpers shared by the bindings.

use crate::engine::Channel;
use crate::*;

/// `MPI_CONGRUENT` is for communicators; for members alone: the same in
/// another order is `MPI_SIMILAR`, else `MPI_UNEQUAL`.
pub(crate) fn compare_members(a: &[fm::Rank], b: &[fm::Rank]) -> c_int {
    let (mut x, mut y) = (a.to_vec(), b.to_vec());
    x.sort_unstable();
    y.sort_unstable();
    if x == y {
        MPI_SIMILAR
    } else {
        MPI_UNEQUAL
    }
}

/// `n` distinct ranks of a group of `members`, read from `ranks`.
///
/// # Safety
/// `ranks` holds `n` ints.
pub(crate) unsafe fn group_ranks(
    members: &[fm::Rank],
    n: c_int,
    ranks: *const c_int,
) -> MpiResult<Vec<usize>> {
    if n < 0 || (n > 0 && ranks.is_null()) {
        return err(MPI_ERR_ARG, format!("{n} ranks at {ranks:?}"));
    }
    let mut v = Vec::with_capacity(n as usize);
    for i in 0..n as usize {
        let r = *ranks.add(i);
        match usize::try_from(r) {
            Ok(r) if r < members.len() && !v.contains(&r) => v.push(r),
            _ => {
                return err(
                    MPI_ERR_RANK,
                    format!(
                        "rank {r} is not a rank of a group of {}, or is named twice",
                        members.len()
                    ),
                )
            }
        }
    }
    Ok(v)
}

/// A communicator of the same members in the same order, with a context
/// of its own and the same topology (`MPI_Comm_dup` without the
/// attributes). Collective over `comm`.
pub(crate) fn dup(m: &mut Mpi, comm: Handle) -> MpiResult<Handle> {
    if m.comm(comm)?.remote.is_some() {
        return crate::intercomm::dup(m, comm);
    }
    let (epoch, parent) = m.child_of(comm)?;
    let context = m.new_context(&parent, epoch, true)?;
    copy(m, comm, parent, context)
}

/// `MPI_Comm_idup`: [`dup`] (of an intra- or intercommunicator) whose
/// context the members agree on as their calls progress
/// (`engine::agreements`): the new communicator's handle at once, usable
/// when the request, also returned, completes.
pub(crate) fn idup(m: &mut Mpi, comm: Handle) -> MpiResult<(Handle, u32)> {
    let (epoch, parent) = m.any_child_of(comm)?;
    let view = match parent.remote {
        Some(_) => crate::intercomm::both(&parent),
        None => parent.clone(),
    };
    let new = copy(m, comm, parent, context::UNAGREED)?;
    let req = agree_later(m, new, &view, view.context, Channel::Child(epoch));
    Ok((new, req))
}

/// `MPI_Comm_create` of an intracommunicator (and a split's
/// communicator), agreed as [`idup`] is (the members of `comm` outside
/// `members` take part and get `MPI_COMM_NULL`): the handle and the
/// request.
pub(crate) fn icreate(
    m: &mut Mpi,
    comm: Handle,
    members: Arc<[fm::Rank]>,
) -> MpiResult<(Handle, u32)> {
    let (epoch, parent) = m.child_of(comm)?;
    if let Some(r) = members.iter().find(|r| !parent.ranks.contains(r)) {
        return err(
            MPI_ERR_GROUP,
            format!("the group holds process {r}, which is not in the communicator"),
        );
    }
    let me = m.engine.fm.rank();
    let new = match members.iter().position(|&r| r == me) {
        None => MPI_COMM_NULL,
        Some(rank) => m.add_comm(Comm {
            context: context::UNAGREED,
            ranks: members,
            rank: rank as c_int,
            errhandler: parent.errhandler,
            collectives: 0,
            children: 0,
            area: Default::default(),
            remote: None,
        })?,
    };
    Ok((
        new,
        agree_later(m, new, &parent, parent.context, Channel::Child(epoch)),
    ))
}

/// Start the agreement of `view`'s members on the context of `new`, a
/// child of the communicator whose context is `parent`, which gets it
/// when the request returned completes (`MPI_COMM_NULL`: this process
/// takes part only). The handle is made first: nothing after the
/// agreement's start can fail and leave it running for no one.
pub(crate) fn agree_later(
    m: &mut Mpi,
    new: Handle,
    view: &Comm,
    parent: u32,
    channel: Channel,
) -> u32 {
    let join = new != MPI_COMM_NULL;
    let (req, id) = m.engine.start_agreement(view, parent, channel, join);
    if join {
        m.unagreed.insert(new, id);
    }
    req
}

/// A copy of `parent` (communicator `comm`) with `context`, its children
/// and collectives not counted yet, and `comm`'s topology.
fn copy(m: &mut Mpi, comm: Handle, parent: Comm, context: u32) -> MpiResult<Handle> {
    let new = m.add_comm(Comm {
        context,
        collectives: 0,
        children: 0,
        area: Default::default(),
        ..parent
    })?;
    if let Some(t) = m.topologies.get(&comm).cloned() {
        m.topologies.insert(new, t);
    }
    Ok(new)
}

/// Of the members `among` (indices into `all`), those of `color`, ordered
/// by key and then by index: their indices less `among`'s first.
pub(crate) fn of_color(
    all: &[(c_int, c_int)],
    among: std::ops::Range<usize>,
    color: c_int,
) -> Vec<usize> {
    let first = among.start;
    let mut chosen: Vec<(c_int, usize)> = among
        .filter(|&i| all[i].0 == color)
        .map(|i| (all[i].1, i - first))
        .collect();
    chosen.sort_unstable();
    chosen.into_iter().map(|(_, i)| i).collect()
}
