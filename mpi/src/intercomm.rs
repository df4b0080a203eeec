//! Intercommunicators (`MPI_Intercomm_create`, `MPI_Intercomm_merge`) and
//! `MPI_Comm_create_group`: communicators agreed on by some members only.
//!
//! Their exchanges go on a *view* of a communicator: the same members (or
//! some, or the remote group) under the communicator's context with bit
//! 28 set, so that they never meet the communicator's own library
//! messages, whose sources are numbered the same.

use crate::coll::inter::Sides;
use crate::comm::agree_later;
use crate::context::{and_into, receive_up_to, send, start_send};
use crate::engine::Channel;
use crate::*;

/// Bit 28 of a context: a view's exchanges (bits 29 and 30: `coll`,
/// `context`).
const VIEW: u32 = 0x1000_0000;

/// `comm`'s members `ranks`, this process being `rank` of them, on its
/// view context.
fn view(comm: &Comm, ranks: Arc<[fm::Rank]>, rank: c_int) -> Comm {
    Comm {
        context: comm.context | VIEW,
        ranks,
        rank,
        remote: None,
        ..comm.clone()
    }
}

/// Tag `k` of the exchanges of child `epoch` of a communicator.
fn tag(epoch: u32, k: u32) -> c_int {
    (epoch.wrapping_mul(4).wrapping_add(k) & TAG_UB as u32) as c_int
}

fn u32_at(b: &[u8], at: usize) -> MpiResult<u32> {
    b.get(at..at + 4)
        .and_then(|s| s.try_into().ok())
        .map(u32::from_le_bytes)
        .ok_or_else(|| MpiError {
            class: MPI_ERR_INTERN,
            message: "a short message in the library's own exchange".into(),
        })
}

fn ranks_bytes(ranks: &[fm::Rank]) -> Vec<u8> {
    ranks.iter().flat_map(|r| r.to_le_bytes()).collect()
}

fn ranks_of(b: &[u8]) -> MpiResult<Vec<fm::Rank>> {
    (0..b.len() / 4).map(|i| u32_at(b, 4 * i)).collect()
}

/// The most bytes a list of this job's ranks and a free-id set take.
fn most(m: &Mpi) -> usize {
    8 + crate::context::CONTEXT_IDS / 8 + 4 * m.engine.fm.size()
}

/// `MPI_Intercomm_create`: the members of `local_comm` and those of
/// another group, whose leaders meet on `peer_comm` with `tag`.
pub(crate) fn create(
    m: &mut Mpi,
    local_comm: Handle,
    local_leader: c_int,
    peer_comm: Handle,
    remote_leader: c_int,
    user_tag: c_int,
) -> MpiResult<Handle> {
    m.holding_ids(|m| {
        create_holding(
            m,
            local_comm,
            local_leader,
            peer_comm,
            remote_leader,
            user_tag,
        )
    })
}

fn create_holding(
    m: &mut Mpi,
    local_comm: Handle,
    local_leader: c_int,
    peer_comm: Handle,
    remote_leader: c_int,
    user_tag: c_int,
) -> MpiResult<Handle> {
    let (epoch, local) = m.child_of(local_comm)?;
    let leader = crate::coll::root(&local, local_leader)?;
    let max = most(m);
    // The ids free on the whole local group.
    let lead = view(&local, local.ranks.clone(), local.rank);
    let mut free = crate::context::free_on(&mut m.engine, &lead, tag(epoch, 0))?;
    let me = local.rank as usize;
    let (id, remote) = if me == leader {
        // Leaders swap free sets and groups over the peer communicator.
        let peer = m.comm(peer_comm)?.clone();
        let theirs = crate::coll::root(&peer, remote_leader).map_err(|_| MpiError {
            class: MPI_ERR_RANK,
            message: format!(
                "remote leader {remote_leader} is not a rank of the peer communicator"
            ),
        })?;
        if !(0..=TAG_UB).contains(&user_tag) {
            return err(
                MPI_ERR_TAG,
                format!("tag {user_tag} is outside 0..={TAG_UB}"),
            );
        }
        let peer_view = view(&peer, peer.ranks.clone(), peer.rank);
        let mine = [free.clone(), ranks_bytes(&local.ranks)].concat();
        let sent = start_send(&mut m.engine, &peer_view, theirs, user_tag, &mine)?;
        let got = receive_up_to(&mut m.engine, &peer_view, theirs, user_tag, max)?;
        m.engine.wait(sent)?;
        let n = free.len();
        and_into(&mut free, got.get(..n).unwrap_or(&[]));
        let remote = ranks_of(&got[n.min(got.len())..])?;
        let id = m.engine.contexts.take_lowest(&free, false)?;
        let answer = [id.to_le_bytes().to_vec(), ranks_bytes(&remote)].concat();
        for r in (0..local.ranks.len()).filter(|&r| r != leader) {
            send(&mut m.engine, &lead, r, tag(epoch, 2), &answer)?;
        }
        (id, remote)
    } else {
        let b = receive_up_to(&mut m.engine, &lead, leader, tag(epoch, 2), max)?;
        (u32_at(&b, 0)?, ranks_of(&b[4..])?)
    };
    m.engine.contexts.take_lowest(&id_bits(id), true)?;
    m.add_comm(Comm {
        context: id,
        remote: Some(remote.into()),
        collectives: 0,
        children: 0,
        ..local
    })
}

/// A free set holding only `id`.
fn id_bits(id: u32) -> Vec<u8> {
    let mut b = vec![0u8; crate::context::CONTEXT_IDS / 8];
    if let Some(byte) = b.get_mut(id as usize / 8) {
        *byte = 1 << (id % 8);
    }
    b
}

/// `MPI_Intercomm_merge`: one intracommunicator of both groups, the
/// group that said `high` after the other (of two that said the same,
/// the one whose leader has the lower rank in the job first), from what
/// every member said (`all`: `high` first, numbered as [`both`] numbers
/// them): the handle and the request of the agreement on its context
/// over both groups.
pub(crate) fn merge_from(
    m: &mut Mpi,
    inter: Handle,
    high: bool,
    all: &[(c_int, c_int)],
) -> MpiResult<(Handle, Option<u32>)> {
    let (epoch, ic) = m.any_child_of(inter)?;
    let Some(remote) = ic.remote.clone() else {
        return err(
            MPI_ERR_COMM,
            format!("{inter:#x} is not an intercommunicator"),
        );
    };
    let s = Sides::of(&ic);
    let their_high = all.get(s.remote(0)).is_some_and(|&(h, _)| h != 0);
    let first = if high == their_high {
        ic.ranks[0] < remote[0]
    } else {
        !high
    };
    let (a, b) = if first {
        (&ic.ranks, &remote)
    } else {
        (&remote, &ic.ranks)
    };
    let ranks: Arc<[fm::Rank]> = a.iter().chain(b.iter()).copied().collect();
    let me = m.engine.fm.rank();
    let rank = ranks.iter().position(|&r| r == me).unwrap_or(0) as c_int;
    let new = m.add_comm(Comm {
        context: crate::context::UNAGREED,
        ranks,
        rank,
        remote: None,
        collectives: 0,
        children: 0,
        ..ic.clone()
    })?;
    let view = both(&ic);
    let req = agree_later(m, new, &view, view.context, Channel::Child(epoch));
    Ok((new, Some(req)))
}

/// `MPI_Comm_create_group`: the members of `group` (a subgroup of
/// `comm`'s) make a communicator, the others taking no part; `tag` tells
/// concurrent ones apart. The handle, and the request of the agreement
/// on its context (`comm::agree_later`; none off the group).
pub(crate) fn create_group(
    m: &mut Mpi,
    comm: Handle,
    group: Handle,
    user_tag: c_int,
) -> MpiResult<(Handle, Option<u32>)> {
    let parent = m.intracomm(comm, "MPI_Comm_create_group")?.clone();
    let members = m.group(group)?;
    if let Some(r) = members.iter().find(|r| !parent.ranks.contains(r)) {
        return err(
            MPI_ERR_GROUP,
            format!("the group holds process {r}, which is not in the communicator"),
        );
    }
    if !(0..=TAG_UB).contains(&user_tag) {
        return err(
            MPI_ERR_TAG,
            format!("tag {user_tag} is outside 0..={TAG_UB}"),
        );
    }
    let me = m.engine.fm.rank();
    let Some(rank) = members.iter().position(|&r| r == me) else {
        return Ok((MPI_COMM_NULL, None));
    };
    let v = view(&parent, members.clone(), rank as c_int);
    let new = m.add_comm(Comm {
        context: crate::context::UNAGREED,
        ranks: members,
        rank: rank as c_int,
        remote: None,
        collectives: 0,
        children: 0,
        ..parent
    })?;
    let channel = Channel::Tagged(user_tag);
    Ok((new, Some(agree_later(m, new, &v, parent.context, channel))))
}

/// The lowest context id free on every member of `v` (collective over
/// it, with `tag`), taken.
fn agree_among(m: &mut Mpi, v: &Comm, tag: c_int) -> MpiResult<u32> {
    m.holding_ids(|m| {
        let free = crate::context::free_on(&mut m.engine, v, tag)?;
        m.engine.contexts.take_lowest(&free, true)
    })
}

/// The context `MPI_Intercomm_create_from_groups` agrees on: no
/// communicator's (ids are below [`crate::context::CONTEXT_IDS`]), under
/// the view bit.
const FROM_GROUPS: u32 = crate::context::CONTEXT_IDS as u32 | VIEW;

/// `MPI_Intercomm_create_from_groups`: the members of `local` (this
/// process among them) and of `remote` make an intercommunicator, with
/// no communicator of both to start from. Both groups agree on its
/// context over the job, the group whose leader has the lower rank in
/// the job first; `stringtag` (its hash the tag) tells concurrent calls
/// apart, as the standard asks of the program.
pub(crate) fn create_from_groups(
    m: &mut Mpi,
    local: Arc<[fm::Rank]>,
    local_leader: c_int,
    remote: Arc<[fm::Rank]>,
    remote_leader: c_int,
    stringtag: &[u8],
    errhandler: Handle,
) -> MpiResult<Handle> {
    let me = m.engine.fm.rank();
    let Some(rank) = local.iter().position(|&r| r == me) else {
        return err(MPI_ERR_GROUP, "this process is not in the local group");
    };
    let leader = |g: &[fm::Rank], l: c_int, which: &str| match usize::try_from(l) {
        Ok(l) if l < g.len() => Ok(g[l]),
        _ => err(
            MPI_ERR_RANK,
            format!(
                "the {which} leader {l} is not a rank of a group of {}",
                g.len()
            ),
        ),
    };
    let ours = leader(&local, local_leader, "local")?;
    let theirs = leader(&remote, remote_leader, "remote")?;
    if let Some(r) = local.iter().find(|r| remote.contains(r)) {
        return err(MPI_ERR_GROUP, format!("process {r} is in both groups"));
    }
    let (first, second) = if ours < theirs {
        (&local, &remote)
    } else {
        (&remote, &local)
    };
    let ranks: Arc<[fm::Rank]> = first.iter().chain(second.iter()).copied().collect();
    let everyone = Comm {
        context: FROM_GROUPS,
        rank: ranks.iter().position(|&r| r == me).unwrap_or(0) as c_int,
        ranks,
        remote: None,
        errhandler,
        collectives: 0,
        children: 0,
    };
    let id = agree_among(m, &everyone, tag_of(stringtag))?;
    m.add_comm(Comm {
        context: id,
        ranks: local,
        rank: rank as c_int,
        remote: Some(remote),
        errhandler,
        collectives: 0,
        children: 0,
    })
}

/// The tag a string tag stands for: its FNV-1a hash, the same at every
/// member for the same string.
fn tag_of(stringtag: &[u8]) -> c_int {
    let hash = (stringtag.iter()).fold(0xcbf2_9ce4_8422_2325_u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    (hash as u32 & TAG_UB as u32) as c_int
}

/// `MPI_Comm_create_from_group` (MPI-4.0 §7.4.2): the members of `group`
/// (this process among them) make a communicator, with no communicator
/// of theirs to start from: they agree on its context over the job
/// (`comm::agree_later`, `stringtag`'s hash telling concurrent calls
/// apart). The handle and the agreement's request.
pub(crate) fn create_from_group(
    m: &mut Mpi,
    group: Arc<[fm::Rank]>,
    stringtag: &[u8],
    errhandler: Handle,
) -> MpiResult<(Handle, u32)> {
    let me = m.engine.fm.rank();
    let Some(rank) = group.iter().position(|&r| r == me) else {
        return err(MPI_ERR_GROUP, "this process is not in the group");
    };
    let c = Comm {
        context: FROM_GROUPS,
        rank: rank as c_int,
        ranks: group,
        remote: None,
        errhandler,
        collectives: 0,
        children: 0,
    };
    let new = m.add_comm(Comm {
        context: crate::context::UNAGREED,
        ..c.clone()
    })?;
    let channel = Channel::Tagged(tag_of(stringtag));
    Ok((new, agree_later(m, new, &c, FROM_GROUPS, channel)))
}

/// Both groups of intercommunicator `ic` as one communicator, numbered
/// as its collectives number them ([`crate::coll::inter::Sides`]), for
/// exchanges among all its members.
pub(crate) fn both(ic: &Comm) -> Comm {
    let s = Sides::of(ic);
    Comm {
        ranks: crate::coll::inter::members(ic),
        rank: s.local(s.me) as c_int,
        remote: None,
        ..ic.clone()
    }
}

/// `MPI_Comm_dup` of an intercommunicator: a context agreed over both
/// groups.
pub(crate) fn dup(m: &mut Mpi, comm: Handle) -> MpiResult<Handle> {
    let (epoch, ic) = m.any_child_of(comm)?;
    let context = m.new_context(&both(&ic), epoch, true)?;
    m.add_comm(Comm {
        context,
        collectives: 0,
        children: 0,
        ..ic
    })
}

/// `MPI_Comm_split` of an intercommunicator, from every member's colour
/// and key (`all`, numbered as [`both`] numbers them): the members of
/// each colour in each group (ordered by key, then rank) make an
/// intercommunicator with those of the same colour in the other group;
/// with none there, `MPI_COMM_NULL`. The handle and the request of the
/// agreement on its context over both groups, in which every member
/// takes part.
pub(crate) fn split_from(
    m: &mut Mpi,
    comm: Handle,
    color: c_int,
    all: &[(c_int, c_int)],
) -> MpiResult<(Handle, Option<u32>)> {
    let (epoch, ic) = m.any_child_of(comm)?;
    let s = Sides::of(&ic);
    let remote = ic.remote.clone().unwrap_or_else(|| Arc::from([]));
    let locals = of_color(all, s.local(0)..s.local(s.locals), color);
    let remotes = of_color(all, s.remote(0)..s.remote(s.remotes), color);
    let join = color != MPI_UNDEFINED && !locals.is_empty() && !remotes.is_empty();
    let new = match join {
        false => MPI_COMM_NULL,
        true => m.add_comm(Comm {
            context: crate::context::UNAGREED,
            ranks: locals.iter().map(|&i| ic.ranks[i]).collect(),
            rank: locals.iter().position(|&i| i == s.me).unwrap_or(0) as c_int,
            remote: Some(remotes.iter().map(|&i| remote[i]).collect()),
            collectives: 0,
            children: 0,
            ..ic.clone()
        })?,
    };
    let view = both(&ic);
    let req = agree_later(m, new, &view, view.context, Channel::Child(epoch));
    Ok((new, Some(req)))
}
