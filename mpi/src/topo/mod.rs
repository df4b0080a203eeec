//! Process topologies (MPI-4.0 §8): the Cartesian grid, the graph and the
//! distributed graph a communicator can carry, and the neighbours each
//! gives a member for the neighbourhood collectives.
//!
//! A topology is only a description: making one is a split (or dup) of
//! the old communicator with ranks kept in order (fm does not reorder,
//! which `reorder` allows but never requires), and its answers are
//! computed here from what every member was given.

use crate::abi::*;
use crate::engine::{err, MpiResult};
use std::ffi::c_int;

mod dims;
mod make;
pub use dims::dims_create;
pub(crate) use make::*;

/// One member's neighbours for the neighbourhood collectives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Neighbors {
    /// Where block i of the receive buffer comes from.
    pub ins: Vec<c_int>,
    /// Where block i of the send buffer goes.
    pub outs: Vec<c_int>,
    /// Which block of another member lands in which of this one's when
    /// two name each other more than once (a periodic dimension of extent
    /// 1 or 2, a graph's repeated edge). In a grid, by direction: the
    /// block sent up lands in the receiver's block from below and the
    /// other way round, block `s` in block `s ^ 1` (MPI-4.1 §8.6, an
    /// erratum to MPI-3.1 from mpi-forum/mpi-issues#153). In a graph, in
    /// order: the k-th edge to a member matches the k-th edge from it.
    pub by_direction: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Topology {
    /// A grid of `dims` (row-major: the last dimension varies fastest),
    /// each dimension periodic or not.
    Cart {
        dims: Vec<c_int>,
        periods: Vec<bool>,
    },
    /// Node i's neighbours are `edges[index[i-1]..index[i]]` (from 0 for
    /// node 0), as `MPI_Graph_create` takes them.
    Graph {
        index: Vec<c_int>,
        edges: Vec<c_int>,
    },
    /// This member's own edges: where messages come from and go to, with
    /// their weights (`None`: `MPI_UNWEIGHTED`).
    DistGraph {
        sources: Vec<c_int>,
        source_weights: Option<Vec<c_int>>,
        destinations: Vec<c_int>,
        destination_weights: Option<Vec<c_int>>,
    },
}

impl Topology {
    /// `MPI_Topo_test`'s answer.
    pub fn kind(&self) -> c_int {
        match self {
            Topology::Cart { .. } => MPI_CART,
            Topology::Graph { .. } => MPI_GRAPH,
            Topology::DistGraph { .. } => MPI_DIST_GRAPH,
        }
    }

    /// A Cartesian topology, checked: positive extents whose product is at
    /// most `size` (the old communicator's).
    pub fn cart(dims: &[c_int], periods: &[bool], size: usize) -> MpiResult<Topology> {
        if let Some(d) = dims.iter().find(|&&d| d <= 0) {
            return err(MPI_ERR_DIMS, format!("a dimension of extent {d}"));
        }
        let n = grid_size(dims)?;
        if n > size {
            return err(
                MPI_ERR_ARG,
                format!("a grid of {n} processes on a communicator of {size}"),
            );
        }
        Ok(Topology::Cart {
            dims: dims.to_vec(),
            periods: periods.to_vec(),
        })
    }

    /// A graph topology from `MPI_Graph_create`'s arrays, checked against
    /// a communicator of `size`.
    pub fn graph(index: &[c_int], edges: &[c_int], size: usize) -> MpiResult<Topology> {
        if index.len() > size {
            return err(
                MPI_ERR_ARG,
                format!(
                    "a graph of {} nodes on a communicator of {size}",
                    index.len()
                ),
            );
        }
        let mut last = 0;
        for &i in index {
            if i < last || i as usize > edges.len() {
                return err(
                    MPI_ERR_ARG,
                    format!("index {i} is not a running total of the edges"),
                );
            }
            last = i;
        }
        if let Some(e) = edges.iter().find(|&&e| e < 0 || e as usize >= index.len()) {
            return err(
                MPI_ERR_ARG,
                format!("edge to {e}, which is not a node of {}", index.len()),
            );
        }
        Ok(Topology::Graph {
            index: index.to_vec(),
            edges: edges.to_vec(),
        })
    }

    /// How many processes the topology has (those of the old
    /// communicator beyond get `MPI_COMM_NULL`); `None` for a distributed
    /// graph, which has all of them.
    pub fn nodes(&self) -> Option<usize> {
        match self {
            Topology::Cart { dims, .. } => grid_size(dims).ok(),
            Topology::Graph { index, .. } => Some(index.len()),
            Topology::DistGraph { .. } => None,
        }
    }

    /// The grid coordinates of `rank` (`MPI_Cart_coords`).
    pub fn coords(&self, rank: c_int) -> MpiResult<Vec<c_int>> {
        let dims = self.dims()?;
        let n = grid_size(dims)?;
        if rank < 0 || rank as usize >= n {
            return err(MPI_ERR_RANK, format!("rank {rank} is not in a grid of {n}"));
        }
        let mut left = rank;
        let mut c = vec![0; dims.len()];
        for (i, &d) in dims.iter().enumerate().rev() {
            c[i] = left % d;
            left /= d;
        }
        Ok(c)
    }

    /// The rank at `coords` (`MPI_Cart_rank`): taken modulo the extent
    /// in a periodic dimension, an error outside a non-periodic one.
    pub fn rank_at(&self, coords: &[c_int]) -> MpiResult<c_int> {
        let Topology::Cart { dims, periods } = self else {
            return self.dims().map(|_| 0);
        };
        let mut rank = 0;
        for ((&c, &d), &periodic) in coords.iter().zip(dims).zip(periods) {
            let c = match (periodic, c) {
                (true, c) => c.rem_euclid(d),
                (false, c) if (0..d).contains(&c) => c,
                (false, c) => {
                    return err(
                        MPI_ERR_ARG,
                        format!("coordinate {c} is outside a non-periodic dimension of {d}"),
                    )
                }
            };
            rank = rank * d + c;
        }
        Ok(rank)
    }

    /// `MPI_Cart_shift`: the ranks `disp` steps down and up dimension
    /// `direction` from `rank`, `MPI_PROC_NULL` off a non-periodic edge.
    pub fn shift(&self, rank: c_int, direction: c_int, disp: c_int) -> MpiResult<(c_int, c_int)> {
        let dims = self.dims()?;
        let Some(dim) = usize::try_from(direction).ok().filter(|&d| d < dims.len()) else {
            return err(
                MPI_ERR_ARG,
                format!(
                    "direction {direction} is not a dimension of a {}-dimensional grid",
                    dims.len()
                ),
            );
        };
        let Topology::Cart { periods, .. } = self else {
            unreachable!("dims() answers for grids only")
        };
        let at = self.coords(rank)?;
        let (extent, periodic) = (dims[dim] as i64, periods[dim]);
        let step = |by: i64| -> MpiResult<c_int> {
            let c = at[dim] as i64 + by;
            if !periodic && !(0..extent).contains(&c) {
                return Ok(MPI_PROC_NULL);
            }
            let mut to = at.clone();
            to[dim] = c.rem_euclid(extent) as c_int;
            self.rank_at(&to)
        };
        Ok((step(-(disp as i64))?, step(disp as i64)?))
    }

    /// The neighbours of `rank` in a graph topology (`MPI_Graph_neighbors`).
    pub fn graph_neighbors(&self, rank: c_int) -> MpiResult<&[c_int]> {
        let Topology::Graph { index, edges } = self else {
            return err(MPI_ERR_TOPOLOGY, "the communicator has no graph topology");
        };
        let Some(r) = usize::try_from(rank).ok().filter(|&r| r < index.len()) else {
            return err(
                MPI_ERR_RANK,
                format!("rank {rank} is not a node of {}", index.len()),
            );
        };
        let from = if r == 0 { 0 } else { index[r - 1] as usize };
        Ok(&edges[from..index[r] as usize])
    }

    /// Where member `rank`'s neighbourhood collectives receive from and
    /// send to, in the order of their buffers' blocks (MPI-4.1 §8.6): in
    /// a grid, for each dimension the member below then the one above
    /// (`MPI_PROC_NULL` off an edge: that block is neither sent nor
    /// written); in a graph, its neighbours both ways.
    pub fn neighbors(&self, rank: c_int) -> MpiResult<Neighbors> {
        let (ins, outs) = match self {
            Topology::Cart { dims, .. } => {
                let mut both = Vec::with_capacity(2 * dims.len());
                for d in 0..dims.len() {
                    let (below, above) = self.shift(rank, d as c_int, 1)?;
                    both.extend([below, above]);
                }
                (both.clone(), both)
            }
            Topology::Graph { .. } => {
                let n = self.graph_neighbors(rank)?.to_vec();
                (n.clone(), n)
            }
            Topology::DistGraph {
                sources,
                destinations,
                ..
            } => (sources.clone(), destinations.clone()),
        };
        let by_direction = matches!(self, Topology::Cart { .. });
        Ok(Neighbors {
            ins,
            outs,
            by_direction,
        })
    }

    fn dims(&self) -> MpiResult<&[c_int]> {
        match self {
            Topology::Cart { dims, .. } => Ok(dims),
            _ => err(
                MPI_ERR_TOPOLOGY,
                "the communicator has no Cartesian topology",
            ),
        }
    }
}

/// The number of processes in a grid of `dims`.
pub fn grid_size(dims: &[c_int]) -> MpiResult<usize> {
    dims.iter()
        .try_fold(1usize, |n, &d| n.checked_mul(usize::try_from(d).ok()?))
        .filter(|&n| n <= c_int::MAX as usize)
        .map_or_else(
            || err(MPI_ERR_DIMS, format!("a grid of {dims:?} is too large")),
            Ok,
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grid(dims: &[c_int], periods: &[bool]) -> Topology {
        Topology::cart(dims, periods, 1000).unwrap()
    }

    #[test]
    fn coordinates_and_ranks_are_inverse_row_major() {
        let t = grid(&[2, 3, 4], &[false, true, false]);
        for r in 0..24 {
            let c = t.coords(r).unwrap();
            assert_eq!(t.rank_at(&c).unwrap(), r);
        }
        assert_eq!(t.coords(5).unwrap(), vec![0, 1, 1]);
        assert_eq!(
            t.rank_at(&[1, -1, 3]).unwrap(),
            t.rank_at(&[1, 2, 3]).unwrap()
        );
        assert!(t.rank_at(&[2, 0, 0]).is_err());
        assert!(t.coords(24).is_err());
    }

    #[test]
    fn shifts_wrap_on_periodic_dimensions_and_fall_off_others() {
        let t = grid(&[3, 4], &[true, false]);
        // Rank 1 is (0, 1).
        assert_eq!(t.shift(1, 0, 1).unwrap(), (9, 5));
        assert_eq!(t.shift(1, 1, 1).unwrap(), (0, 2));
        assert_eq!(t.shift(1, 1, -2).unwrap(), (3, MPI_PROC_NULL));
        assert_eq!(t.shift(1, 1, 3).unwrap(), (MPI_PROC_NULL, MPI_PROC_NULL));
        assert_eq!(t.shift(1, 0, 4).unwrap(), (9, 5));
        assert!(t.shift(1, 2, 1).is_err());
        let n = t.neighbors(0).unwrap();
        assert_eq!(n.ins, vec![8, 4, MPI_PROC_NULL, 1]);
        assert_eq!(n.ins, n.outs);
        assert!(n.by_direction);
    }

    #[test]
    fn graphs_are_checked_and_give_each_node_its_edges() {
        let t = Topology::graph(&[2, 3, 4, 6], &[1, 3, 0, 3, 0, 2], 4).unwrap();
        assert_eq!(t.graph_neighbors(0).unwrap(), &[1, 3]);
        assert_eq!(t.graph_neighbors(3).unwrap(), &[0, 2]);
        assert!(t.graph_neighbors(4).is_err());
        assert!(Topology::graph(&[2, 1], &[0, 1], 2).is_err());
        assert!(Topology::graph(&[1], &[1], 1).is_err());
        assert!(Topology::graph(&[0, 0, 0], &[], 2).is_err());
    }
}
