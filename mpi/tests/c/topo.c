/* Process topologies and the neighbourhood collectives, each answer
 * checked against what this rank computes alone: Cartesian grids of 1 to
 * 3 dimensions, periodic or not, their shifts and sub-grids; graphs and
 * distributed graphs (adjacent and general, weighted and not), and every
 * neighbourhood collective, blocking, non-blocking and persistent, on all
 * three kinds, neighbours named twice and off-grid (MPI_PROC_NULL) ones
 * included. Errors are checked for their class under MPI_ERRORS_RETURN.
 *
 *   topo [sabotage]   sabotage: expect one wrong value (must fail)
 *
 * Rank 0 prints "all topology checks passed on N ranks". */
#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"

static int rank, size, sabotage, on_mpich;
/* The communicator `exchange` runs on. */
static MPI_Comm current;

#define MAXN 64
#define UNTOUCHED (-7)

/* What rank q puts in its block for out-neighbour t (`alltoall`), or for
 * all of them (`allgather`, t = 0). */
static int val(int q, int t) { return 1000 * q + t + 1; }

/* A grid's neighbours of any rank q, as MPI lists them: per dimension the
 * rank below, then the one above. */
static int cart_neighbors(MPI_Comm c, int q, int *out)
{
    int nd, dims[8], periods[8], coords[8], mine[8], n = 0;
    MPI_Cartdim_get(c, &nd);
    MPI_Cart_get(c, nd, dims, periods, mine);
    MPI_Cart_coords(c, q, nd, coords);
    for (int d = 0; d < nd; d++)
        for (int step = -1; step <= 1; step += 2) {
            int at[8];
            memcpy(at, coords, sizeof at);
            at[d] += step;
            if (!periods[d] && (at[d] < 0 || at[d] >= dims[d]))
                out[n++] = MPI_PROC_NULL;
            else {
                at[d] = (at[d] + dims[d]) % dims[d];
                MPI_Cart_rank(c, at, &out[n++]);
            }
        }
    return n;
}

/* Which of q's out-blocks arrives in my in-slot k. In a grid, by
 * direction: the slot of the rank below gets what it sent up, and the
 * other way round (so also where below and above are one rank, or this
 * one). In a graph, the j-th time q is in my list is the j-th time I am in
 * q's (messages between two ranks keep their order). */
static int block_from(const int *in, int k, const int *q_out, int q_outs)
{
    int kind;
    MPI_Topo_test(current, &kind);
    if (kind == MPI_CART)
        return k ^ 1;
    int j = 0;
    for (int i = 0; i < k; i++)
        j += in[i] == in[k];
    for (int t = 0; t < q_outs; t++)
        if (q_out[t] == rank && j-- == 0)
            return t;
    CHECK(0, "rank %d is not an out-neighbour of %d often enough", rank, in[k]);
    return -1;
}

typedef int (*outs_of)(MPI_Comm c, int q, int *out);

/* Every neighbourhood collective on c, whose in- and out-lists for this
 * rank are `in` and `out`; outs(c, q, list) gives any rank's out-list. */
static void exchange(MPI_Comm c, const char *what, const int *in, int ins, const int *out, int outs,
                     outs_of outs_fn)
{
    int send[MAXN], recv[MAXN], expect[MAXN];
    int q_out[MAXN];
    current = c;
    /* MPICH 4.0.2 gets blocks wrong where two ranks name each other more
     * than once: it reverses the whole receive list in alltoall (right for
     * a grid of one such dimension only), and not even that in alltoallv
     * and alltoallw (pmodels/mpich#5777, #7945). Those checks are skipped
     * under MPICH. */
    int twice = 0, kind;
    for (int k = 0; k < ins; k++)
        for (int i = 0; i < k; i++)
            twice |= in[k] != MPI_PROC_NULL && in[i] == in[k];
    MPI_Topo_test(c, &kind);
    int mpich_bug = on_mpich && twice;
    for (int t = 0; t < outs; t++)
        send[t] = val(rank, t);
    for (int k = 0; k < ins; k++) {
        expect[k] = UNTOUCHED;
        if (in[k] != MPI_PROC_NULL) {
            int n = outs_fn(c, in[k], q_out);
            expect[k] = val(in[k], block_from(in, k, q_out, n));
        }
    }
    /* Blocking, non-blocking and persistent (started twice). */
    for (int form = 0; form < 4; form++) {
        for (int k = 0; k < ins; k++)
            recv[k] = UNTOUCHED;
        MPI_Request r;
        if (form == 0)
            MPI_Neighbor_alltoall(send, 1, MPI_INT, recv, 1, MPI_INT, c);
        else if (form == 1) {
            MPI_Ineighbor_alltoall(send, 1, MPI_INT, recv, 1, MPI_INT, c, &r);
            MPI_Wait(&r, MPI_STATUS_IGNORE);
        } else {
            MPI_Neighbor_alltoall_init(send, 1, MPI_INT, recv, 1, MPI_INT, c, MPI_INFO_NULL, &r);
            for (int i = 0; i < form - 1; i++) {
                for (int k = 0; k < ins; k++)
                    recv[k] = UNTOUCHED;
                MPI_Start(&r);
                MPI_Wait(&r, MPI_STATUS_IGNORE);
            }
            MPI_Request_free(&r);
        }
        for (int k = 0; k < ins && !mpich_bug; k++)
            CHECK(recv[k] == expect[k] + (sabotage && rank == 0 && k == 0 && in[0] != MPI_PROC_NULL),
                  "%s alltoall form %d: slot %d from %d: %d, not %d", what, form, k, in[k], recv[k], expect[k]);
    }

    /* Allgather: the same block to every out-neighbour. */
    int one = val(rank, 0);
    for (int k = 0; k < ins; k++)
        recv[k] = UNTOUCHED;
    MPI_Neighbor_allgather(&one, 1, MPI_INT, recv, 1, MPI_INT, c);
    for (int k = 0; k < ins; k++)
        CHECK(recv[k] == (in[k] == MPI_PROC_NULL ? UNTOUCHED : val(in[k], 0)), "%s allgather slot %d: %d", what,
              k, recv[k]);

    /* Allgatherv: rank q sends 1 + q % 3 ints, laid out backwards. */
    int mine[3] = {val(rank, 0), val(rank, 1), val(rank, 2)};
    int counts[MAXN], displs[MAXN], big[3 * MAXN], at = 0;
    for (int k = ins - 1; k >= 0; k--) {
        counts[k] = in[k] == MPI_PROC_NULL ? 0 : 1 + in[k] % 3;
        displs[k] = at;
        at += counts[k];
    }
    for (int i = 0; i < at; i++)
        big[i] = UNTOUCHED;
    MPI_Request r;
    MPI_Ineighbor_allgatherv(mine, 1 + rank % 3, MPI_INT, big, counts, displs, MPI_INT, c, &r);
    MPI_Wait(&r, MPI_STATUS_IGNORE);
    for (int k = 0; k < ins; k++)
        for (int i = 0; i < counts[k]; i++)
            CHECK(big[displs[k] + i] == val(in[k], i), "%s allgatherv slot %d.%d: %d", what, k, i,
                  big[displs[k] + i]);

    /* Alltoallv: block t of rank q holds 1 + (q + t) % 2 ints. */
    int scounts[MAXN], sdispls[MAXN], sbig[2 * MAXN], rcounts[MAXN], rdispls[MAXN];
    at = 0;
    for (int t = 0; t < outs; t++) {
        scounts[t] = 1 + (rank + t) % 2;
        sdispls[t] = at;
        for (int i = 0; i < scounts[t]; i++)
            sbig[at + i] = val(rank, t) * 10 + i;
        at += scounts[t];
    }
    int from[MAXN];
    at = 0;
    for (int k = 0; k < ins; k++) {
        from[k] = -1;
        rcounts[k] = 0;
        if (in[k] != MPI_PROC_NULL) {
            int n = outs_fn(c, in[k], q_out);
            from[k] = block_from(in, k, q_out, n);
            rcounts[k] = 1 + (in[k] + from[k]) % 2;
        }
        rdispls[k] = at;
        at += rcounts[k];
    }
    for (int i = 0; i < at; i++)
        big[i] = UNTOUCHED;
    MPI_Neighbor_alltoallv(sbig, scounts, sdispls, MPI_INT, big, rcounts, rdispls, MPI_INT, c);
    for (int k = 0; k < ins && !mpich_bug; k++)
        for (int i = 0; i < rcounts[k]; i++)
            CHECK(big[rdispls[k] + i] == val(in[k], from[k]) * 10 + i, "%s alltoallv slot %d.%d: %d", what, k, i,
                  big[rdispls[k] + i]);

    /* Alltoallw: the same blocks, displacements in bytes, as MPI_Aint. */
    MPI_Aint sbytes[MAXN], rbytes[MAXN];
    MPI_Datatype types[MAXN];
    for (int t = 0; t < outs; t++)
        sbytes[t] = sdispls[t] * (MPI_Aint)sizeof(int);
    for (int k = 0; k < ins; k++) {
        rbytes[k] = rdispls[k] * (MPI_Aint)sizeof(int);
        types[k] = MPI_INT;
    }
    for (int t = 0; t < outs; t++)
        types[t] = MPI_INT;
    for (int i = 0; i < at; i++)
        big[i] = UNTOUCHED;
    MPI_Neighbor_alltoallw(sbig, scounts, sbytes, types, big, rcounts, rbytes, types, c);
    for (int k = 0; k < ins && !mpich_bug; k++)
        for (int i = 0; i < rcounts[k]; i++)
            CHECK(big[rdispls[k] + i] == val(in[k], from[k]) * 10 + i, "%s alltoallw slot %d.%d", what, k, i);
}

static void grids(void)
{
    for (int nd = 1; nd <= 3; nd++)
        for (int per = 0; per < 2; per++) {
            int dims[3] = {0, 0, 0}, periods[3] = {per, !per, per};
            MPI_Dims_create(size, nd, dims);
            MPI_Comm c;
            MPI_Cart_create(MPI_COMM_WORLD, nd, dims, periods, 1, &c);
            CHECK(c != MPI_COMM_NULL, "a grid of every rank left rank %d out", rank);
            int kind, got_nd, gd[3], gp[3], gc[3], back;
            MPI_Topo_test(c, &kind);
            CHECK(kind == MPI_CART, "MPI_Topo_test: %d", kind);
            MPI_Cartdim_get(c, &got_nd);
            CHECK(got_nd == nd, "MPI_Cartdim_get: %d", got_nd);
            MPI_Cart_get(c, nd, gd, gp, gc);
            int r, expect = 0;
            MPI_Comm_rank(c, &r);
            CHECK(r == rank, "fm keeps ranks in order: %d", r);
            for (int d = 0; d < nd; d++) {
                CHECK(gd[d] == dims[d] && gp[d] == periods[d], "MPI_Cart_get dim %d", d);
                expect = expect * dims[d] + gc[d];
            }
            CHECK(expect == rank, "coordinates of rank %d are row-major", rank);
            MPI_Cart_rank(c, gc, &back);
            CHECK(back == rank, "MPI_Cart_rank: %d", back);
            int nb[8];
            cart_neighbors(c, rank, nb);
            for (int d = 0; d < nd; d++) {
                int src, dst;
                MPI_Cart_shift(c, d, 1, &src, &dst);
                CHECK(src == nb[2 * d] && dst == nb[2 * d + 1], "MPI_Cart_shift dim %d: %d %d", d, src, dst);
            }
            exchange(c, "grid", nb, 2 * nd, nb, 2 * nd, cart_neighbors);

            /* The sub-grids of the last dimension: rows. */
            int keep[3] = {0, 0, 0};
            keep[nd - 1] = 1;
            MPI_Comm row;
            MPI_Cart_sub(c, keep, &row);
            int rr, rs, sum, cd;
            MPI_Comm_rank(row, &rr);
            MPI_Comm_size(row, &rs);
            MPI_Cartdim_get(row, &cd);
            CHECK(rs == dims[nd - 1] && rr == gc[nd - 1] && cd == 1, "MPI_Cart_sub: rank %d of %d", rr, rs);
            MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, row);
            int first = rank - rr;
            CHECK(sum == rs * first + rs * (rs - 1) / 2, "a row's sum: %d", sum);
            MPI_Comm_free(&row);
            /* Keeping no dimension: a grid of none, which has one member,
             * the grid's rank 0 (MPICH's answer); the rest get null. */
            int none[3] = {0, 0, 0};
            MPI_Cart_sub(c, none, &row);
            CHECK((row != MPI_COMM_NULL) == (rank == 0), "MPI_Cart_sub keeping no dimension: %s on rank %d",
                  row == MPI_COMM_NULL ? "null" : "a communicator", rank);
            if (row != MPI_COMM_NULL) {
                MPI_Comm_size(row, &rs);
                MPI_Cartdim_get(row, &cd);
                CHECK(rs == 1 && cd == 0, "a grid of no dimension: %d members, %d dimensions", rs, cd);
                MPI_Comm_free(&row);
            }
            MPI_Comm dup;
            MPI_Comm_dup(c, &dup);
            MPI_Topo_test(dup, &kind);
            CHECK(kind == MPI_CART, "MPI_Comm_dup keeps the topology: %d", kind);
            MPI_Comm_free(&dup);
            MPI_Comm_free(&c);
        }

    /* A grid smaller than the communicator leaves the last rank out. */
    if (size > 1) {
        int d = size - 1, p = 1;
        MPI_Comm c;
        MPI_Cart_create(MPI_COMM_WORLD, 1, &d, &p, 0, &c);
        CHECK((c == MPI_COMM_NULL) == (rank == size - 1), "MPI_Cart_create of %d: %s", d,
              c == MPI_COMM_NULL ? "null" : "a communicator");
        int newrank;
        MPI_Cart_map(MPI_COMM_WORLD, 1, &d, &p, &newrank);
        CHECK(newrank == (rank == size - 1 ? MPI_UNDEFINED : rank), "MPI_Cart_map: %d", newrank);
        if (c != MPI_COMM_NULL)
            MPI_Comm_free(&c);
    }
}

/* The ring graph: each node's neighbours are the next and the one before
 * (twice the same on 2 nodes, itself on 1). */
static int ring_outs(MPI_Comm c, int q, int *out)
{
    int n;
    MPI_Graph_neighbors_count(c, q, &n);
    MPI_Graph_neighbors(c, q, n, out);
    return n;
}

static void graphs(void)
{
    int index[MAXN], edges[2 * MAXN];
    for (int i = 0; i < size; i++) {
        index[i] = 2 * (i + 1);
        edges[2 * i] = (i + 1) % size;
        edges[2 * i + 1] = (i + size - 1) % size;
    }
    MPI_Comm g;
    MPI_Graph_create(MPI_COMM_WORLD, size, index, edges, 0, &g);
    int kind, nn, ne, gi[MAXN], ge[2 * MAXN];
    MPI_Topo_test(g, &kind);
    CHECK(kind == MPI_GRAPH, "MPI_Topo_test: %d", kind);
    MPI_Graphdims_get(g, &nn, &ne);
    CHECK(nn == size && ne == 2 * size, "MPI_Graphdims_get: %d %d", nn, ne);
    MPI_Graph_get(g, size, 2 * size, gi, ge);
    CHECK(!memcmp(gi, index, size * sizeof(int)) && !memcmp(ge, edges, 2 * size * sizeof(int)),
          "MPI_Graph_get");
    int nb[2];
    ring_outs(g, rank, nb);
    CHECK(nb[0] == (rank + 1) % size && nb[1] == (rank + size - 1) % size, "MPI_Graph_neighbors");
    exchange(g, "graph", nb, 2, nb, 2, ring_outs);
    MPI_Comm_free(&g);
}

/* The distributed graph: from r - 1 and r - 2, to r + 1 and r + 2. */
static int dist_outs(MPI_Comm c, int q, int *out)
{
    (void)c;
    out[0] = (q + 1) % size;
    out[1] = (q + 2) % size;
    return 2;
}

static void dist_graphs(void)
{
    int in[2] = {(rank + size - 1) % size, (rank + 2 * size - 2) % size}, out[2];
    dist_outs(MPI_COMM_WORLD, rank, out);
    int inw[2] = {in[0] * 10 + rank, in[1] * 10 + rank}, outw[2] = {rank * 10 + out[0], rank * 10 + out[1]};
    MPI_Comm g;
    MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, 2, in, inw, 2, out, outw, MPI_INFO_NULL, 0, &g);
    int kind, ins, outs, weighted, s[2], sw[2], d[2], dw[2];
    MPI_Topo_test(g, &kind);
    CHECK(kind == MPI_DIST_GRAPH, "MPI_Topo_test: %d", kind);
    MPI_Dist_graph_neighbors_count(g, &ins, &outs, &weighted);
    CHECK(ins == 2 && outs == 2 && weighted, "MPI_Dist_graph_neighbors_count: %d %d %d", ins, outs, weighted);
    MPI_Dist_graph_neighbors(g, 2, s, sw, 2, d, dw);
    CHECK(!memcmp(s, in, sizeof s) && !memcmp(sw, inw, sizeof sw) && !memcmp(d, out, sizeof d) &&
              !memcmp(dw, outw, sizeof dw),
          "MPI_Dist_graph_neighbors");
    exchange(g, "adjacent graph", in, 2, out, 2, dist_outs);
    MPI_Comm_free(&g);

    /* The same graph, all of it named by rank 0, unweighted. */
    int n = rank == 0 ? size : 0, srcs[MAXN], degrees[MAXN], dsts[2 * MAXN];
    for (int q = 0; q < n; q++) {
        srcs[q] = q;
        degrees[q] = 2;
        dist_outs(MPI_COMM_WORLD, q, &dsts[2 * q]);
    }
    MPI_Dist_graph_create(MPI_COMM_WORLD, n, srcs, degrees, dsts, MPI_UNWEIGHTED, MPI_INFO_NULL, 0, &g);
    MPI_Dist_graph_neighbors_count(g, &ins, &outs, &weighted);
    CHECK(ins == 2 && outs == 2 && !weighted, "general: MPI_Dist_graph_neighbors_count: %d %d %d", ins, outs,
          weighted);
    MPI_Dist_graph_neighbors(g, 2, s, MPI_UNWEIGHTED, 2, d, MPI_UNWEIGHTED);
    /* Which order is the library's: compare as sets. */
    CHECK((s[0] == in[0] && s[1] == in[1]) || (s[0] == in[1] && s[1] == in[0]), "general: sources %d %d", s[0],
          s[1]);
    CHECK((d[0] == out[0] && d[1] == out[1]) || (d[0] == out[1] && d[1] == out[0]), "general: destinations");
    int one = val(rank, 0), got[2] = {UNTOUCHED, UNTOUCHED};
    MPI_Neighbor_allgather(&one, 1, MPI_INT, got, 1, MPI_INT, g);
    CHECK(got[0] == val(s[0], 0) && got[1] == val(s[1], 0), "general: allgather %d %d", got[0], got[1]);
    MPI_Comm_free(&g);

    /* No edges at all. */
    MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, 0, NULL, MPI_WEIGHTS_EMPTY, 0, NULL, MPI_WEIGHTS_EMPTY,
                                   MPI_INFO_NULL, 0, &g);
    MPI_Dist_graph_neighbors_count(g, &ins, &outs, &weighted);
    CHECK(ins == 0 && outs == 0, "empty graph: %d %d", ins, outs);
    MPI_Neighbor_allgather(&one, 1, MPI_INT, got, 1, MPI_INT, g);
    MPI_Comm_free(&g);
}

static void errors(void)
{
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int kind, cls, d = size + 1, p = 0;
    MPI_Comm c = MPI_COMM_NULL;
    MPI_Topo_test(MPI_COMM_WORLD, &kind);
    CHECK(kind == MPI_UNDEFINED, "MPI_Topo_test of a plain communicator: %d", kind);
    MPI_Error_class(MPI_Cart_create(MPI_COMM_WORLD, 1, &d, &p, 0, &c), &cls);
    CHECK(cls == MPI_ERR_ARG && c == MPI_COMM_NULL, "a grid larger than the communicator: class %d", cls);
    d = -1;
    MPI_Error_class(MPI_Cart_create(MPI_COMM_WORLD, 1, &d, &p, 0, &c), &cls);
    /* MPICH 4.0.2 does not check. */
    CHECK(cls == MPI_ERR_DIMS || on_mpich, "a negative extent: class %d", cls);
    int x, y;
    MPI_Error_class(MPI_Neighbor_allgather(&x, 1, MPI_INT, &y, 1, MPI_INT, MPI_COMM_WORLD), &cls);
    CHECK(cls == MPI_ERR_TOPOLOGY, "a neighbourhood collective without a topology: class %d", cls);
    MPI_Error_class(MPI_Cart_shift(MPI_COMM_WORLD, 0, 1, &x, &y), &cls);
    CHECK(cls == MPI_ERR_TOPOLOGY, "MPI_Cart_shift without a grid: class %d", cls);
    d = size;
    MPI_Cart_create(MPI_COMM_WORLD, 1, &d, &p, 0, &c);
    MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
    MPI_Error_class(MPI_Cart_shift(c, 1, 1, &x, &y), &cls);
    CHECK(cls == MPI_ERR_ARG, "MPI_Cart_shift of a dimension past the last: class %d", cls);
    int at = size;
    MPI_Error_class(MPI_Cart_rank(c, &at, &x), &cls);
    CHECK(cls == MPI_ERR_ARG, "MPI_Cart_rank outside a non-periodic grid: class %d", cls);
    MPI_Error_class(MPI_Graphdims_get(c, &x, &y), &cls);
    CHECK(cls == MPI_ERR_TOPOLOGY, "MPI_Graphdims_get of a grid: class %d", cls);
    MPI_Comm_free(&c);
    int dims[2] = {0, 0};
    MPI_Error_class(MPI_Dims_create(7, 2, (int[]){0, 3}), &cls);
    CHECK(cls == MPI_ERR_DIMS, "MPI_Dims_create that cannot be met: class %d", cls);
    MPI_Dims_create(72, 2, dims);
    CHECK(dims[0] == 9 && dims[1] == 8, "MPI_Dims_create(72, 2): %d %d", dims[0], dims[1]);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    sabotage = argc > 1 && !strcmp(argv[1], "sabotage");
    on_mpich = getenv("ON_MPICH") != NULL;
    CHECK(size <= MAXN / 2, "at most %d ranks", MAXN / 2);
    grids();
    graphs();
    dist_graphs();
    errors();
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0)
        printf("all topology checks passed on %d ranks\n", size);
    MPI_Finalize();
    return 0;
}
