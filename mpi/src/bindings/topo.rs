//! Process topologies: Cartesian grids, graphs and distributed graphs
//! (`topo`), and `MPI_Dims_create`.

use crate::collective::ints;
use crate::topo::{self, Edge, Topology};
use crate::*;
use fm_mpi_macros::mpi;

/// What `MPI_UNWEIGHTED` and `MPI_WEIGHTS_EMPTY` point at: MPICH's
/// header reads both as data of the library (`extern int * const`), so a
/// program passes these addresses and the library knows them by address.
#[no_mangle]
pub static MPIR_C_MPI_UNWEIGHTED: c_int = 0;
#[no_mangle]
pub static MPIR_C_MPI_WEIGHTS_EMPTY: c_int = 0;

/// A pointer exported as C data.
#[repr(transparent)]
pub struct ExportedPointer(*const c_int);
// SAFETY: it points at an immutable static.
unsafe impl Sync for ExportedPointer {}

#[no_mangle]
pub static MPI_UNWEIGHTED: ExportedPointer = ExportedPointer(&MPIR_C_MPI_UNWEIGHTED);
#[no_mangle]
pub static MPI_WEIGHTS_EMPTY: ExportedPointer = ExportedPointer(&MPIR_C_MPI_WEIGHTS_EMPTY);

fn unweighted(w: *const c_int) -> bool {
    std::ptr::eq(w, MPI_UNWEIGHTED.0)
}

/// `n` weights, or `None` for `MPI_UNWEIGHTED`; `MPI_WEIGHTS_EMPTY` (or
/// any array) with `n == 0` is weighted and empty.
unsafe fn weights(w: *const c_int, n: usize) -> MpiResult<Option<Vec<c_int>>> {
    if unweighted(w) {
        return Ok(None);
    }
    if std::ptr::eq(w, MPI_WEIGHTS_EMPTY.0) && n == 0 {
        return Ok(Some(Vec::new()));
    }
    ints(w, n, "weights").map(|w| Some(w.to_vec()))
}

fn dims_arg(ndims: c_int) -> MpiResult<usize> {
    nonneg(ndims, "number of dimensions").map_err(|e| MpiError {
        class: MPI_ERR_DIMS,
        ..e
    })
}

#[mpi]
fn PMPI_Dims_create(nnodes: c_int, ndims: c_int, dims: *mut c_int) -> c_int {
    call("MPI_Dims_create", MPI_COMM_WORLD, |_| {
        let n = dims_arg(ndims)?;
        if n > 0 && dims.is_null() {
            return err(MPI_ERR_ARG, "a null array of dimensions");
        }
        let d = match n {
            0 => &mut [],
            n => std::slice::from_raw_parts_mut(dims, n),
        };
        topo::dims_create(nnodes, d)
    })
}

#[mpi]
fn PMPI_Cart_create(
    comm_old: Handle,
    ndims: c_int,
    dims: *const c_int,
    periods: *const c_int,
    _reorder: c_int,
    comm_cart: *mut Handle,
) -> c_int {
    super::comm::made_when_agreed("MPI_Cart_create", comm_old, comm_cart, |m| {
        let n = dims_arg(ndims)?;
        let dims = ints(dims, n, "dimensions")?;
        let periods: Vec<bool> = ints(periods, n, "periods")?
            .iter()
            .map(|&p| p != 0)
            .collect();
        let size = m.intracomm(comm_old, "MPI_Cart_create")?.ranks.len();
        let t = Topology::cart(dims, &periods, size)?;
        let (new, req) = topo::with_topology(m, comm_old, t)?;
        Ok((new, Some(req)))
    })
}

#[mpi]
fn PMPI_Cart_map(
    comm: Handle,
    ndims: c_int,
    dims: *const c_int,
    periods: *const c_int,
    newrank: *mut c_int,
) -> c_int {
    call("MPI_Cart_map", comm, |m| {
        let out = arg(newrank, "the new rank")?;
        let n = dims_arg(ndims)?;
        let periods: Vec<bool> = ints(periods, n, "periods")?
            .iter()
            .map(|&p| p != 0)
            .collect();
        let c = m.intracomm(comm, "MPI_Cart_map")?;
        let t = Topology::cart(ints(dims, n, "dimensions")?, &periods, c.ranks.len())?;
        *out = placed(c.rank, &t);
        Ok(())
    })
}

/// Where `MPI_Cart_map` and `MPI_Graph_map` put a member: fm keeps ranks
/// in order, so its own rank if the topology has room for it.
fn placed(rank: c_int, t: &Topology) -> c_int {
    match t.nodes() {
        Some(n) if (rank as usize) < n => rank,
        _ => MPI_UNDEFINED,
    }
}

#[mpi]
fn PMPI_Cartdim_get(comm: Handle, ndims: *mut c_int) -> c_int {
    call("MPI_Cartdim_get", comm, |m| {
        let out = arg(ndims, "the number of dimensions")?;
        match &*m.topology(comm)? {
            Topology::Cart { dims, .. } => *out = dims.len() as c_int,
            _ => {
                return err(
                    MPI_ERR_TOPOLOGY,
                    "the communicator has no Cartesian topology",
                )
            }
        }
        Ok(())
    })
}

#[mpi]
fn PMPI_Cart_get(
    comm: Handle,
    maxdims: c_int,
    dims: *mut c_int,
    periods: *mut c_int,
    coords: *mut c_int,
) -> c_int {
    call("MPI_Cart_get", comm, |m| {
        let t = m.topology(comm)?;
        let Topology::Cart {
            dims: d,
            periods: p,
        } = &*t
        else {
            return err(
                MPI_ERR_TOPOLOGY,
                "the communicator has no Cartesian topology",
            );
        };
        let p: Vec<c_int> = p.iter().map(|&p| p as c_int).collect();
        put_array(dims, maxdims, d, "dimensions")?;
        put_array(periods, maxdims, &p, "periods")?;
        put_array(
            coords,
            maxdims,
            &t.coords(m.comm(comm)?.rank)?,
            "coordinates",
        )
    })
}

#[mpi]
fn PMPI_Cart_rank(comm: Handle, coords: *const c_int, rank: *mut c_int) -> c_int {
    call("MPI_Cart_rank", comm, |m| {
        let out = arg(rank, "the rank")?;
        let t = m.topology(comm)?;
        let n = match &*t {
            Topology::Cart { dims, .. } => dims.len(),
            _ => 0,
        };
        *out = t.rank_at(ints(coords, n, "coordinates")?)?;
        Ok(())
    })
}

#[mpi]
fn PMPI_Cart_coords(comm: Handle, rank: c_int, maxdims: c_int, coords: *mut c_int) -> c_int {
    call("MPI_Cart_coords", comm, |m| {
        let c = m.topology(comm)?.coords(rank)?;
        put_array(coords, maxdims, &c, "coordinates")
    })
}

#[mpi]
fn PMPI_Cart_shift(
    comm: Handle,
    direction: c_int,
    disp: c_int,
    rank_source: *mut c_int,
    rank_dest: *mut c_int,
) -> c_int {
    call("MPI_Cart_shift", comm, |m| {
        let (source, dest) = (
            arg(rank_source, "the source")?,
            arg(rank_dest, "the destination")?,
        );
        let me = m.comm(comm)?.rank;
        (*source, *dest) = m.topology(comm)?.shift(me, direction, disp)?;
        Ok(())
    })
}

#[mpi]
fn PMPI_Cart_sub(comm: Handle, remain_dims: *const c_int, newcomm: *mut Handle) -> c_int {
    super::comm::made_when_agreed("MPI_Cart_sub", comm, newcomm, |m| {
        let n = match &*m.topology(comm)? {
            Topology::Cart { dims, .. } => dims.len(),
            _ => {
                return err(
                    MPI_ERR_TOPOLOGY,
                    "the communicator has no Cartesian topology",
                )
            }
        };
        let keep: Vec<bool> = ints(remain_dims, n, "dimensions kept")?
            .iter()
            .map(|&k| k != 0)
            .collect();
        let (new, req) = topo::cart_sub(m, comm, &keep)?;
        Ok((new, Some(req)))
    })
}

/// A graph's arrays, checked against a communicator of `size`.
unsafe fn graph(
    size: usize,
    nnodes: c_int,
    index: *const c_int,
    edges: *const c_int,
) -> MpiResult<Topology> {
    let index = ints(index, nonneg(nnodes, "number of nodes")?, "index")?;
    let nedges = nonneg(index.last().copied().unwrap_or(0), "number of edges")?;
    Topology::graph(index, ints(edges, nedges, "edges")?, size)
}

#[mpi]
fn PMPI_Graph_create(
    comm_old: Handle,
    nnodes: c_int,
    index: *const c_int,
    edges: *const c_int,
    _reorder: c_int,
    comm_graph: *mut Handle,
) -> c_int {
    super::comm::made_when_agreed("MPI_Graph_create", comm_old, comm_graph, |m| {
        let size = m.intracomm(comm_old, "MPI_Graph_create")?.ranks.len();
        let t = graph(size, nnodes, index, edges)?;
        let (new, req) = topo::with_topology(m, comm_old, t)?;
        Ok((new, Some(req)))
    })
}

#[mpi]
fn PMPI_Graph_map(
    comm: Handle,
    nnodes: c_int,
    index: *const c_int,
    edges: *const c_int,
    newrank: *mut c_int,
) -> c_int {
    call("MPI_Graph_map", comm, |m| {
        let out = arg(newrank, "the new rank")?;
        let c = m.intracomm(comm, "MPI_Graph_map")?;
        *out = placed(c.rank, &graph(c.ranks.len(), nnodes, index, edges)?);
        Ok(())
    })
}

/// Communicator `comm`'s graph: its index and edges.
fn graph_of(m: &Mpi, comm: Handle) -> MpiResult<(Vec<c_int>, Vec<c_int>)> {
    match &*m.topology(comm)? {
        Topology::Graph { index, edges } => Ok((index.clone(), edges.clone())),
        _ => err(MPI_ERR_TOPOLOGY, "the communicator has no graph topology"),
    }
}

#[mpi]
fn PMPI_Graphdims_get(comm: Handle, nnodes: *mut c_int, nedges: *mut c_int) -> c_int {
    call("MPI_Graphdims_get", comm, |m| {
        let (index, edges) = graph_of(m, comm)?;
        *arg(nnodes, "the number of nodes")? = index.len() as c_int;
        *arg(nedges, "the number of edges")? = edges.len() as c_int;
        Ok(())
    })
}

#[mpi]
fn PMPI_Graph_get(
    comm: Handle,
    maxindex: c_int,
    maxedges: c_int,
    index: *mut c_int,
    edges: *mut c_int,
) -> c_int {
    call("MPI_Graph_get", comm, |m| {
        let (i, e) = graph_of(m, comm)?;
        put_array(index, maxindex, &i, "index")?;
        put_array(edges, maxedges, &e, "edges")
    })
}

#[mpi]
fn PMPI_Graph_neighbors_count(comm: Handle, rank: c_int, nneighbors: *mut c_int) -> c_int {
    call("MPI_Graph_neighbors_count", comm, |m| {
        let out = arg(nneighbors, "the number of neighbours")?;
        *out = m.topology(comm)?.graph_neighbors(rank)?.len() as c_int;
        Ok(())
    })
}

#[mpi]
fn PMPI_Graph_neighbors(
    comm: Handle,
    rank: c_int,
    maxneighbors: c_int,
    neighbors: *mut c_int,
) -> c_int {
    call("MPI_Graph_neighbors", comm, |m| {
        let t = m.topology(comm)?;
        put_array(
            neighbors,
            maxneighbors,
            t.graph_neighbors(rank)?,
            "neighbours",
        )
    })
}

#[mpi]
fn PMPI_Topo_test(comm: Handle, status: *mut c_int) -> c_int {
    call("MPI_Topo_test", comm, |m| {
        let out = arg(status, "the status")?;
        m.comm(comm)?;
        *out = m.topologies.get(&comm).map_or(MPI_UNDEFINED, |t| t.kind());
        Ok(())
    })
}

#[mpi]
fn PMPI_Dist_graph_create_adjacent(
    comm_old: Handle,
    indegree: c_int,
    sources: *const c_int,
    sourceweights: *const c_int,
    outdegree: c_int,
    destinations: *const c_int,
    destweights: *const c_int,
    info: Handle,
    _reorder: c_int,
    comm_dist_graph: *mut Handle,
) -> c_int {
    super::comm::made_when_agreed(
        "MPI_Dist_graph_create_adjacent",
        comm_old,
        comm_dist_graph,
        |m| {
            if info != MPI_INFO_NULL {
                m.info(info)?;
            }
            let size = m
                .intracomm(comm_old, "MPI_Dist_graph_create_adjacent")?
                .ranks
                .len();
            let (ins, outs) = (
                nonneg(indegree, "indegree")?,
                nonneg(outdegree, "outdegree")?,
            );
            let (sources, destinations) = (
                ints(sources, ins, "sources")?,
                ints(destinations, outs, "destinations")?,
            );
            if let Some(r) = sources
                .iter()
                .chain(destinations)
                .find(|&&r| r < 0 || r as usize >= size)
            {
                return err(
                    MPI_ERR_RANK,
                    format!("neighbour {r} is not a rank of a communicator of {size}"),
                );
            }
            let t = Topology::DistGraph {
                sources: sources.to_vec(),
                source_weights: weights(sourceweights, ins)?,
                destinations: destinations.to_vec(),
                destination_weights: weights(destweights, outs)?,
            };
            let (new, req) = topo::with_topology(m, comm_old, t)?;
            Ok((new, Some(req)))
        },
    )
}

#[mpi]
fn PMPI_Dist_graph_create(
    comm_old: Handle,
    n: c_int,
    sources: *const c_int,
    degrees: *const c_int,
    destinations: *const c_int,
    weights_: *const c_int,
    info: Handle,
    _reorder: c_int,
    comm_dist_graph: *mut Handle,
) -> c_int {
    let func = "MPI_Dist_graph_create";
    let mut tell = Vec::new();
    let mut weighted = false;
    let rc = call(func, comm_old, |m| {
        arg(comm_dist_graph, "the new communicator")?;
        if info != MPI_INFO_NULL {
            m.info(info)?;
        }
        let size = m.intracomm(comm_old, func)?.ranks.len();
        let n = nonneg(n, "number of sources")?;
        let (sources, degrees) = (ints(sources, n, "sources")?, ints(degrees, n, "degrees")?);
        let total = degrees
            .iter()
            .try_fold(0usize, |t, &d| Ok::<_, MpiError>(t + nonneg(d, "degree")?))?;
        let destinations = ints(destinations, total, "destinations")?;
        let w = weights(weights_, total)?;
        let mut edges: Vec<Edge> = Vec::with_capacity(total);
        let mut at = 0;
        for (&s, &d) in sources.iter().zip(degrees) {
            for k in at..at + d as usize {
                edges.push((s, destinations[k], w.as_ref().map_or(1, |w| w[k])));
            }
            at += d as usize;
        }
        weighted = w.is_some();
        tell = topo::edges_to_tell(&edges, size)?;
        Ok(())
    });
    if rc != MPI_SUCCESS {
        return rc;
    }
    // How much each member tells each, then what: two exchanges, waited
    // for without the library's lock.
    let lens: Vec<Vec<u8>> = (tell.iter())
        .map(|t| (t.len() as u32).to_le_bytes().to_vec())
        .collect();
    let mut told_lens = vec![vec![0u8; 4]; lens.len()];
    let rc = super::comm::exchanged(func, comm_old, &lens, &mut told_lens);
    if rc != MPI_SUCCESS {
        return rc;
    }
    let mut told: Vec<Vec<u8>> = (told_lens.iter())
        .map(|l| vec![0u8; u32::from_le_bytes([l[0], l[1], l[2], l[3]]) as usize])
        .collect();
    let rc = super::comm::exchanged(func, comm_old, &tell, &mut told);
    if rc != MPI_SUCCESS {
        return rc;
    }
    super::comm::made_when_agreed(func, comm_old, comm_dist_graph, |m| {
        let t = topo::dist_graph_told(&told, weighted);
        let (new, req) = topo::with_topology(m, comm_old, t)?;
        Ok((new, Some(req)))
    })
}

/// Communicator `comm`'s distributed graph (or a grid's or graph's
/// neighbours seen as one): sources, their weights, destinations, theirs.
type Adjacency = (
    Vec<c_int>,
    Option<Vec<c_int>>,
    Vec<c_int>,
    Option<Vec<c_int>>,
);

fn adjacency(m: &Mpi, comm: Handle) -> MpiResult<Adjacency> {
    match &*m.topology(comm)? {
        Topology::DistGraph {
            sources,
            source_weights,
            destinations,
            destination_weights,
        } => Ok((
            sources.clone(),
            source_weights.clone(),
            destinations.clone(),
            destination_weights.clone(),
        )),
        _ => {
            let n = m.neighbors(comm)?;
            Ok((n.ins, None, n.outs, None))
        }
    }
}

#[mpi]
fn PMPI_Dist_graph_neighbors_count(
    comm: Handle,
    indegree: *mut c_int,
    outdegree: *mut c_int,
    weighted: *mut c_int,
) -> c_int {
    call("MPI_Dist_graph_neighbors_count", comm, |m| {
        let (s, sw, d, _) = adjacency(m, comm)?;
        *arg(indegree, "the indegree")? = s.len() as c_int;
        *arg(outdegree, "the outdegree")? = d.len() as c_int;
        *arg(weighted, "the weighted flag")? = sw.is_some() as c_int;
        Ok(())
    })
}

#[mpi]
fn PMPI_Dist_graph_neighbors(
    comm: Handle,
    maxindegree: c_int,
    sources: *mut c_int,
    sourceweights: *mut c_int,
    maxoutdegree: c_int,
    destinations: *mut c_int,
    destweights: *mut c_int,
) -> c_int {
    call("MPI_Dist_graph_neighbors", comm, |m| {
        let (s, sw, d, dw) = adjacency(m, comm)?;
        put_array(sources, maxindegree, &s, "sources")?;
        put_array(destinations, maxoutdegree, &d, "destinations")?;
        if let (Some(w), false) = (sw, unweighted(sourceweights)) {
            put_array(sourceweights, maxindegree, &w, "source weights")?;
        }
        if let (Some(w), false) = (dw, unweighted(destweights)) {
            put_array(destweights, maxoutdegree, &w, "destination weights")?;
        }
        Ok(())
    })
}
