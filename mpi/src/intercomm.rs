//! Intercommunicators (`MPI_Intercomm_create`, `MPI_Intercomm_merge`) and
//! `MPI_Comm_create_group`: communicators agreed on by some members only.
//!
//! Their exchanges go on a *view* of a communicator: the same members (or
//! some, or the remote group) under the communicator's context with bit
//! 28 set, so that they never meet the communicator's own library
//! messages, whose sources are numbered the same.

use crate::coll::inter::Sides;
use crate::comm::agree_later;
use crate::context::start_send;
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
        area: Default::default(),
        ..comm.clone()
    }
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

/// `MPI_Intercomm_create`'s groups agree on its context on the peer
/// communicator's context with this bit and the view's set (no
/// communicator's, no other view's, not [`FROM_GROUPS`]), the leaders'
/// tag telling concurrent calls apart.
const CREATED: u32 = (2 * crate::context::CONTEXT_IDS as u32) | VIEW;

/// What a leader of `MPI_Intercomm_create` tells its group (16 bytes),
/// before the other group's ranks: how many they are, which of them is
/// their leader, and the agreement's context and tag.
pub(crate) struct Met {
    pub(crate) remotes: u32,
    remote_leader: u32,
    context: u32,
    tag: c_int,
}

impl Met {
    pub(crate) const LEN: usize = 16;

    pub(crate) fn bytes(&self) -> [u8; Met::LEN] {
        let mut b = [0u8; Met::LEN];
        for (i, w) in [
            self.remotes,
            self.remote_leader,
            self.context,
            self.tag as u32,
        ]
        .into_iter()
        .enumerate()
        {
            b[4 * i..4 * i + 4].copy_from_slice(&w.to_le_bytes());
        }
        b
    }

    pub(crate) fn read(b: &[u8]) -> MpiResult<Met> {
        Ok(Met {
            remotes: u32_at(b, 0)?,
            remote_leader: u32_at(b, 4)?,
            context: u32_at(b, 8)?,
            tag: u32_at(b, 12)? as c_int,
        })
    }
}

/// `MPI_Intercomm_create`, first step, at the local leader only (`None`
/// elsewhere): send this group (its leader's index, then its ranks) to
/// the remote leader over `peer_comm` with `tag`, and start receiving
/// theirs into `theirs`: the requests of both, for the caller to wait
/// for, `mine` and `theirs` living until then.
#[allow(clippy::too_many_arguments)]
pub(crate) fn start_swap(
    m: &mut Mpi,
    local_comm: Handle,
    local_leader: c_int,
    peer_comm: Handle,
    remote_leader: c_int,
    user_tag: c_int,
    mine: &mut Vec<u8>,
    theirs: &mut Vec<u8>,
) -> MpiResult<Option<(u32, u32)>> {
    let local = m.intracomm(local_comm, "MPI_Intercomm_create")?.clone();
    let leader = crate::coll::root(&local, local_leader)?;
    if local.rank as usize != leader {
        return Ok(None);
    }
    let peer = m.comm(peer_comm)?.clone();
    let them = crate::coll::root(&peer, remote_leader).map_err(|_| MpiError {
        class: MPI_ERR_RANK,
        message: format!("remote leader {remote_leader} is not a rank of the peer communicator"),
    })?;
    if !(0..=TAG_UB).contains(&user_tag) {
        return err(
            MPI_ERR_TAG,
            format!("tag {user_tag} is outside 0..={TAG_UB}"),
        );
    }
    let peer_view = view(&peer, peer.ranks.clone(), peer.rank);
    *mine = [
        (leader as u32).to_le_bytes().to_vec(),
        ranks_bytes(&local.ranks),
    ]
    .concat();
    *theirs = vec![0u8; 4 + 4 * m.engine.fm.size()];
    let sent = start_send(&mut m.engine, &peer_view, them, user_tag, mine)?;
    let context = peer_view.context | crate::context::COLLECTIVE_CONTEXT;
    // SAFETY: the caller keeps `theirs` until it has waited for this.
    let got = unsafe {
        m.engine.irecv(
            context,
            them as c_int,
            user_tag,
            theirs.as_mut_ptr(),
            theirs.len(),
        )?
    };
    Ok(Some((sent, got)))
}

/// `MPI_Intercomm_create`, at the local leader once the swap is done
/// (`theirs`, `len` bytes of it): what it tells its group, and the other
/// group's ranks.
pub(crate) fn met(
    m: &Mpi,
    peer_comm: Handle,
    user_tag: c_int,
    theirs: &[u8],
) -> MpiResult<(Met, Vec<fm::Rank>)> {
    let remote_leader = u32_at(theirs, 0)?;
    let remote = ranks_of(&theirs[4..])?;
    if remote.is_empty() || remote_leader as usize >= remote.len() {
        return err(MPI_ERR_INTERN, "the remote leader sent no group of its own");
    }
    let met = Met {
        remotes: remote.len() as u32,
        remote_leader,
        context: m.comm(peer_comm)?.context | CREATED,
        tag: user_tag,
    };
    Ok((met, remote))
}

/// `MPI_Intercomm_create`, last step, at every member once its leader
/// told it `met` and the other group's ranks: the intercommunicator, and
/// the request of the agreement on its context among both groups (the
/// group whose leader has the lower rank in the job first).
pub(crate) fn created(
    m: &mut Mpi,
    local_comm: Handle,
    local_leader: c_int,
    met: &Met,
    remote: Vec<fm::Rank>,
) -> MpiResult<(Handle, Option<u32>)> {
    let local = m.intracomm(local_comm, "MPI_Intercomm_create")?.clone();
    let leader = crate::coll::root(&local, local_leader)?;
    let theirs = remote
        .get(met.remote_leader as usize)
        .copied()
        .unwrap_or(fm::Rank::MAX);
    let me = m.engine.fm.rank();
    if remote.contains(&me) {
        return err(
            MPI_ERR_COMM,
            "the two groups of an intercommunicator overlap",
        );
    }
    let (first, second) = if local.ranks[leader] < theirs {
        (&local.ranks[..], &remote[..])
    } else {
        (&remote[..], &local.ranks[..])
    };
    let ranks: Arc<[fm::Rank]> = first.iter().chain(second).copied().collect();
    let everyone = Comm {
        context: met.context,
        rank: ranks.iter().position(|&r| r == me).unwrap_or(0) as c_int,
        ranks,
        remote: None,
        collectives: 0,
        children: 0,
        area: Default::default(),
        ..local.clone()
    };
    let new = m.add_comm(Comm {
        context: crate::context::UNAGREED,
        remote: Some(remote.into()),
        collectives: 0,
        children: 0,
        area: Default::default(),
        ..local
    })?;
    let channel = Channel::Tagged(met.tag);
    Ok((
        new,
        Some(agree_later(m, new, &everyone, met.context, channel)),
    ))
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
        area: Default::default(),
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
        area: Default::default(),
        ..parent
    })?;
    let channel = Channel::Tagged(user_tag);
    Ok((new, Some(agree_later(m, new, &v, parent.context, channel))))
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
/// apart, as the standard asks of the program. The handle and the
/// agreement's request (`comm::agree_later`).
pub(crate) fn create_from_groups(
    m: &mut Mpi,
    local: Arc<[fm::Rank]>,
    local_leader: c_int,
    remote: Arc<[fm::Rank]>,
    remote_leader: c_int,
    stringtag: &[u8],
    errhandler: Handle,
) -> MpiResult<(Handle, Option<u32>)> {
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
        area: Default::default(),
    };
    let new = m.add_comm(Comm {
        context: crate::context::UNAGREED,
        ranks: local,
        rank: rank as c_int,
        remote: Some(remote),
        errhandler,
        collectives: 0,
        children: 0,
        area: Default::default(),
    })?;
    let channel = Channel::Tagged(tag_of(stringtag));
    Ok((
        new,
        Some(agree_later(m, new, &everyone, FROM_GROUPS, channel)),
    ))
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
        area: Default::default(),
    };
    let new = m.add_comm(Comm {
        context: crate::context::UNAGREED,
        area: Default::default(),
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
        area: Default::default(),
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
        area: Default::default(),
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
            area: Default::default(),
            ..ic.clone()
        })?,
    };
    let view = both(&ic);
    let req = agree_later(m, new, &view, view.context, Channel::Child(epoch));
    Ok((new, Some(req)))
}
