//! Communicators with a topology. A grid or a graph is made of the old
//! communicator's first members in order; a distributed graph is a
//! duplicate of it. Collective over the old communicator. Every member
//! knows who the new communicator's members are without asking the
//! others, so each is made as `MPI_Comm_create` makes one and its context
//! agreed without the library's lock held ([`crate::comm::icreate`]).

use super::{Neighbors, Topology};
use crate::*;

/// An edge of a distributed graph as `MPI_Dist_graph_create` takes it:
/// source, destination, weight.
pub(crate) type Edge = (c_int, c_int, c_int);

/// What one member tells another of an edge: that it is the edge's
/// source (the other's rank is its destination) or its destination.
const SOURCE_OF: u32 = 0;
const DESTINATION_OF: u32 = 1;

impl Mpi {
    /// The topology communicator `comm` carries.
    pub(crate) fn topology(&self, comm: Handle) -> MpiResult<Arc<Topology>> {
        self.comm(comm)?;
        self.topologies.get(&comm).cloned().ok_or_else(|| MpiError {
            class: MPI_ERR_TOPOLOGY,
            message: format!("communicator {comm:#x} has no topology"),
        })
    }

    /// Where this member's neighbourhood collectives on `comm` receive
    /// from and send to ([`Topology::neighbors`]).
    pub(crate) fn neighbors(&self, comm: Handle) -> MpiResult<Neighbors> {
        let t = self.topology(comm)?;
        t.neighbors(self.comm(comm)?.rank)
    }
}

/// A communicator carrying `t`: of the first members of `comm` for a
/// grid or graph (the rest get `MPI_COMM_NULL`), of all of them for a
/// distributed graph; with the request of the agreement on its context,
/// which the caller waits for ([`crate::bindings::comm::made_when_agreed`]).
pub(crate) fn with_topology(m: &mut Mpi, comm: Handle, t: Topology) -> MpiResult<(Handle, u32)> {
    let c = m.intracomm(comm, "a topology")?;
    let (new, req) = match t.nodes() {
        Some(n) => {
            let members = c.ranks[..n.min(c.ranks.len())].into();
            icreate(m, comm, members)?
        }
        None => idup(m, comm)?,
    };
    if new != MPI_COMM_NULL {
        m.topologies.insert(new, Arc::new(t));
    }
    Ok((new, req))
}

/// `MPI_Cart_sub`: the members of `comm`'s grid that share the
/// coordinates of the dimensions not kept make a grid of those kept.
pub(crate) fn cart_sub(m: &mut Mpi, comm: Handle, keep: &[bool]) -> MpiResult<(Handle, u32)> {
    let t = m.topology(comm)?;
    let Topology::Cart { dims, periods } = &*t else {
        return err(MPI_ERR_TOPOLOGY, "MPI_Cart_sub needs a Cartesian topology");
    };
    let c = m.comm(comm)?;
    // The colour numbers the dropped coordinates, the key the kept ones,
    // both row-major: the new ranks follow the kept grid's order. Every
    // member's are known here, from its coordinates.
    let mut all = Vec::with_capacity(c.ranks.len());
    for rank in 0..c.ranks.len() as c_int {
        let (mut color, mut key) = (0, 0);
        for ((&d, &c), &k) in dims.iter().zip(&t.coords(rank)?).zip(keep) {
            if k {
                key = key * d + c;
            } else {
                color = color * d + c;
            }
        }
        // Keeping no dimension gives a grid of none, which has one
        // member: rank 0 of the old grid, as MPICH has it.
        if !keep.contains(&true) && rank != 0 {
            color = MPI_UNDEFINED;
        }
        all.push((color, key));
    }
    let mine = all[c.rank as usize].0;
    let members = match mine {
        MPI_UNDEFINED => Arc::from([]),
        _ => (of_color(&all, 0..all.len(), mine).iter())
            .map(|&i| c.ranks[i])
            .collect(),
    };
    let (new, req) = icreate(m, comm, members)?;
    if new != MPI_COMM_NULL {
        let sub = Topology::Cart {
            dims: kept(dims, keep),
            periods: kept(periods, keep),
        };
        m.topologies.insert(new, Arc::new(sub));
    }
    Ok((new, req))
}

/// `MPI_Dist_graph_create`, first half: each member names some edges of
/// the graph, and every edge is told to its source and its destination:
/// what this member tells each of `n` members (records of 12 bytes).
pub(crate) fn edges_to_tell(edges: &[Edge], n: usize) -> MpiResult<Vec<Vec<u8>>> {
    let mut tell = vec![Vec::new(); n];
    for &(s, d, w) in edges {
        for r in [s, d] {
            if r < 0 || r as usize >= n {
                return err(
                    MPI_ERR_ARG,
                    format!("an edge names rank {r} of a communicator of {n}"),
                );
            }
        }
        tell[s as usize].extend(record(SOURCE_OF, d, w));
        tell[d as usize].extend(record(DESTINATION_OF, s, w));
    }
    Ok(tell)
}

/// `MPI_Dist_graph_create`, second half: this member's lists are what it
/// was told (`told[r]`: by member r), in the order of the members that
/// named the edges.
pub(crate) fn dist_graph_told(told: &[Vec<u8>], weighted: bool) -> Topology {
    let (mut sources, mut destinations) = (Vec::new(), Vec::new());
    let (mut source_weights, mut destination_weights) = (Vec::new(), Vec::new());
    for rec in told.iter().flat_map(|t| t.chunks_exact(12)) {
        let word = |i: usize| [rec[i], rec[i + 1], rec[i + 2], rec[i + 3]];
        let (peer, w) = (c_int::from_le_bytes(word(4)), c_int::from_le_bytes(word(8)));
        if u32::from_le_bytes(word(0)) == SOURCE_OF {
            destinations.push(peer);
            destination_weights.push(w);
        } else {
            sources.push(peer);
            source_weights.push(w);
        }
    }
    Topology::DistGraph {
        sources,
        source_weights: weighted.then_some(source_weights),
        destinations,
        destination_weights: weighted.then_some(destination_weights),
    }
}

/// The entries of `v` whose `keep` is true.
fn kept<T: Copy>(v: &[T], keep: &[bool]) -> Vec<T> {
    v.iter()
        .zip(keep)
        .filter(|(_, &k)| k)
        .map(|(&x, _)| x)
        .collect()
}

fn record(kind: u32, peer: c_int, weight: c_int) -> impl Iterator<Item = u8> {
    [kind.to_le_bytes(), peer.to_le_bytes(), weight.to_le_bytes()]
        .into_iter()
        .flatten()
}
