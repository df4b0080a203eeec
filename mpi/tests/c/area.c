/* Small collectives called the way programs call them, in the patterns
 * that fm's collective area on a host must survive (docs/MPI.md,
 * "Collectives"): thousands in a row with a root that runs ahead, sizes
 * on both sides of the area's limit (FM_COLL_SHM_BYTES, 4096 by default)
 * interleaved on one communicator, a non-commutative operation (whose
 * result shows the order of combination), non-blocking ones started
 * together and completed in reverse order with a blocking one between,
 * two communicators used in turn, and a barrier that must hold every
 * rank until all arrived (seen through a shared window). Every value is
 * checked against what each rank computes alone; with "sabotage", rank
 * 0 expects one wrong value, and the run must fail.
 *
 * Usage: area [sabotage]   (prints "area collectives passed on N ranks") */
#include <mpi.h>
#include <stdint.h>
#include <string.h>
#include "check.h"

static int rank, size, sabotage;

#define ROUNDS 1500
/* Up to 5000 bytes of ints: past the area's 4096. */
#define MAX_INTS 1250

static unsigned val(int r, int i, int k)
{
    return (unsigned)r * 1000003u + (unsigned)i * 7919u + (unsigned)k * 31u + 1u;
}

/* Ints in a message of round i: mostly small, every fifth round past the
 * area's limit, the same on every rank. */
static int ints_of(int i)
{
    return i % 5 == 4 ? 1025 + (i * 37) % (MAX_INTS - 1025) : (i * 13) % 40;
}

/* The affine map t -> a t + b (mod 2^32): composition is associative and
 * not commutative, so a reduction's result shows its order. */
typedef struct {
    unsigned a, b;
} affine;

static affine map_of(int r, int i, int k)
{
    affine m = {2u * val(r, i, k) + 1u, val(r, i, k + 1)};
    return m;
}

/* (x ∘ y)(t) = x(y(t)) */
static affine after(affine x, affine y)
{
    affine z = {x.a * y.a, x.a * y.b + x.b};
    return z;
}

/* MPI's user function: inout = in op inout, in from the lower ranks. */
static void compose(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    (void)dt;
    affine *x = in, *y = inout;
    for (int i = 0; i < *len; i++)
        y[i] = after(x[i], y[i]);
}

static MPI_Datatype affine_type;
static MPI_Op compose_op;

/* v0 ∘ v1 ∘ … ∘ v(n-1) of element k in round i. */
static affine composed(int i, int k)
{
    affine z = {1u, 0u};
    for (int r = 0; r < size; r++)
        z = after(z, map_of(r, i, k));
    return z;
}

static unsigned buf[MAX_INTS];
static affine maps[MAX_INTS / 2];

static void bcasts(MPI_Comm comm)
{
    int me, n;
    MPI_Comm_rank(comm, &me);
    MPI_Comm_size(comm, &n);
    for (int i = 0; i < ROUNDS; i++) {
        int root = (i / 7) % n, count = ints_of(i);
        for (int k = 0; k < count; k++)
            buf[k] = me == root ? val(root, i, k) : 0;
        MPI_Bcast(buf, count, MPI_UNSIGNED, root, comm);
        for (int k = 0; k < count; k++)
            CHECK(buf[k] == val(root, i, k), "bcast round %d from %d: [%d] %u", i, root, k,
                  buf[k]);
    }
}

static void reductions(MPI_Comm comm)
{
    int me, n;
    MPI_Comm_rank(comm, &me);
    MPI_Comm_size(comm, &n);
    for (int i = 0; i < ROUNDS; i++) {
        int count = ints_of(i), half = count / 2, root = (i / 3) % n;
        for (int k = 0; k < count; k++)
            buf[k] = val(me, i, k);
        MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_UNSIGNED, MPI_SUM, comm);
        for (int k = 0; k < count; k++) {
            unsigned s = 0;
            for (int r = 0; r < n; r++)
                s += val(r, i, k);
            if (sabotage && me == 0 && i == ROUNDS / 2 && k == 0)
                s++;
            CHECK(buf[k] == s, "allreduce round %d: [%d] %u, not %u", i, k, buf[k], s);
        }
        for (int k = 0; k < half; k++)
            maps[k] = map_of(me, i, k);
        affine out[MAX_INTS / 2];
        if (i % 2)
            MPI_Allreduce(maps, out, half, affine_type, compose_op, comm);
        else
            MPI_Reduce(maps, out, half, affine_type, compose_op, root, comm);
        if (i % 2 || me == root)
            for (int k = 0; k < half; k++) {
                affine z = composed(i, k);
                CHECK(out[k].a == z.a && out[k].b == z.b,
                      "%s round %d: [%d] (%u, %u), not (%u, %u)", i % 2 ? "allreduce" : "reduce",
                      i, k, out[k].a, out[k].b, z.a, z.b);
            }
    }
}

static void gathers(MPI_Comm comm)
{
    int me, n;
    MPI_Comm_rank(comm, &me);
    MPI_Comm_size(comm, &n);
    static unsigned all[MAX_INTS * 8];
    int counts[64], displs[64];
    for (int i = 0; i < ROUNDS / 5; i++) {
        int each = i % 4, root = i % n;
        for (int k = 0; k < each; k++)
            buf[k] = val(me, i, k);
        memset(all, 0, sizeof all);
        if (i % 2)
            MPI_Allgather(buf, each, MPI_UNSIGNED, all, each, MPI_UNSIGNED, comm);
        else
            MPI_Gather(buf, each, MPI_UNSIGNED, all, each, MPI_UNSIGNED, root, comm);
        if (i % 2 || me == root)
            for (int r = 0; r < n; r++)
                for (int k = 0; k < each; k++)
                    CHECK(all[r * each + k] == val(r, i, k), "gather round %d: %d's [%d] %u", i,
                          r, k, all[r * each + k]);
        /* Rank r has (r + i) % 3 ints, one gap after each block. */
        int at = 0;
        for (int r = 0; r < n; r++) {
            counts[r] = (r + i) % 3;
            displs[r] = at;
            at += counts[r] + 1;
        }
        for (int k = 0; k < counts[me]; k++)
            buf[k] = val(me, i, k);
        memset(all, 0xff, sizeof all);
        MPI_Allgatherv(buf, counts[me], MPI_UNSIGNED, all, counts, displs, MPI_UNSIGNED, comm);
        for (int r = 0; r < n; r++) {
            for (int k = 0; k < counts[r]; k++)
                CHECK(all[displs[r] + k] == val(r, i, k), "allgatherv round %d: %d's [%d] %u",
                      i, r, k, all[displs[r] + k]);
            CHECK(all[displs[r] + counts[r]] == 0xffffffffu, "allgatherv round %d wrote a gap",
                  i);
        }
    }
}

/* Six non-blocking collectives started together, a blocking allreduce
 * after them (which goes only once they went), then completed in reverse. */
static void nonblocking(MPI_Comm comm)
{
    int me, n;
    MPI_Comm_rank(comm, &me);
    MPI_Comm_size(comm, &n);
    for (int i = 0; i < ROUNDS / 10; i++) {
        MPI_Request rq[6];
        unsigned b = me == 1 % n ? val(1 % n, i, 0) : 0, sum = val(me, i, 1), sumout = 0,
                 mx[3], g[64], red = val(me, i, 2), redout = 0, now = val(me, i, 3), nowsum = 0;
        for (int k = 0; k < 3; k++)
            mx[k] = val(me, i, k + 4) % 1000;
        MPI_Ibcast(&b, 1, MPI_UNSIGNED, 1 % n, comm, &rq[0]);
        MPI_Iallreduce(&sum, &sumout, 1, MPI_UNSIGNED, MPI_SUM, comm, &rq[1]);
        MPI_Ibarrier(comm, &rq[2]);
        MPI_Iallgather(&now, 1, MPI_UNSIGNED, g, 1, MPI_UNSIGNED, comm, &rq[3]);
        MPI_Ireduce(&red, &redout, 1, MPI_UNSIGNED, MPI_SUM, n - 1, comm, &rq[4]);
        MPI_Iallreduce(MPI_IN_PLACE, mx, 3, MPI_UNSIGNED, MPI_MAX, comm, &rq[5]);
        MPI_Allreduce(&now, &nowsum, 1, MPI_UNSIGNED, MPI_SUM, comm);
        for (int k = 5; k >= 0; k--)
            MPI_Wait(&rq[k], MPI_STATUS_IGNORE);
        unsigned s1 = 0, s2 = 0, s3 = 0, m[3] = {0, 0, 0};
        for (int r = 0; r < n; r++) {
            s1 += val(r, i, 1);
            s2 += val(r, i, 2);
            s3 += val(r, i, 3);
            for (int k = 0; k < 3; k++)
                if (val(r, i, k + 4) % 1000 > m[k])
                    m[k] = val(r, i, k + 4) % 1000;
            CHECK(g[r] == val(r, i, 3), "iallgather round %d: %d's %u", i, r, g[r]);
        }
        CHECK(b == val(1 % n, i, 0), "ibcast round %d: %u", i, b);
        CHECK(sumout == s1 && nowsum == s3, "iallreduce/allreduce round %d", i);
        CHECK(me != n - 1 || redout == s2, "ireduce round %d: %u, not %u", i, redout, s2);
        for (int k = 0; k < 3; k++)
            CHECK(mx[k] == m[k], "iallreduce in place round %d: [%d] %u, not %u", i, k, mx[k],
                  m[k]);
    }
}

/* Two communicators in turn: the world's duplicate and its reverse. */
static void two_comms(void)
{
    MPI_Comm a, b;
    MPI_Comm_dup(MPI_COMM_WORLD, &a);
    MPI_Comm_split(MPI_COMM_WORLD, 0, size - rank, &b);
    for (int i = 0; i < ROUNDS / 5; i++) {
        unsigned x = val(rank, i, 0), xa = 0, xb = 0, y = rank == 0 ? val(0, i, 1) : 0;
        MPI_Request r;
        MPI_Iallreduce(&x, &xa, 1, MPI_UNSIGNED, MPI_SUM, a, &r);
        MPI_Bcast(&y, 1, MPI_UNSIGNED, size - 1, b); /* b's last is world's 0 */
        MPI_Allreduce(&x, &xb, 1, MPI_UNSIGNED, MPI_SUM, b);
        MPI_Wait(&r, MPI_STATUS_IGNORE);
        MPI_Barrier(a);
        unsigned s = 0;
        for (int q = 0; q < size; q++)
            s += val(q, i, 0);
        CHECK(xa == s && xb == s && y == val(0, i, 1), "two communicators round %d", i);
    }
    MPI_Comm_free(&a);
    MPI_Comm_free(&b);
}

/* Nobody leaves a barrier before everyone entered it: each rank stores
 * the round into its word of a shared window before the barrier, and
 * every word reads at least that round after it. */
static void barriers(void)
{
    MPI_Comm host;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &host);
    int me, n;
    MPI_Comm_rank(host, &me);
    MPI_Comm_size(host, &n);
    volatile int *mine;
    MPI_Win win;
    MPI_Win_allocate_shared(sizeof(int), sizeof(int), MPI_INFO_NULL, host, (void *)&mine, &win);
    volatile int *word[64];
    for (int r = 0; r < n; r++) {
        MPI_Aint len;
        int unit;
        MPI_Win_shared_query(win, r, &len, &unit, (void *)&word[r]);
    }
    MPI_Win_lock_all(MPI_MODE_NOCHECK, win);
    *mine = -1;
    MPI_Win_sync(win);
    MPI_Barrier(host);
    for (int i = 0; i < ROUNDS; i++) {
        *mine = i;
        MPI_Win_sync(win);
        MPI_Barrier(host);
        MPI_Win_sync(win);
        for (int r = 0; r < n; r++)
            CHECK(*word[r] >= i, "left barrier %d before rank %d entered it (%d)", i, r,
                  *word[r]);
    }
    MPI_Win_unlock_all(win);
    MPI_Win_free(&win);
    MPI_Comm_free(&host);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    sabotage = argc > 1 && !strcmp(argv[1], "sabotage");
    CHECK(size <= 64, "at most 64 ranks");
    MPI_Type_contiguous(2, MPI_UNSIGNED, &affine_type);
    MPI_Type_commit(&affine_type);
    MPI_Op_create(compose, 0, &compose_op);
    bcasts(MPI_COMM_WORLD);
    reductions(MPI_COMM_WORLD);
    gathers(MPI_COMM_WORLD);
    nonblocking(MPI_COMM_WORLD);
    two_comms();
    barriers();
    MPI_Op_free(&compose_op);
    MPI_Type_free(&affine_type);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0)
        printf("area collectives passed on %d ranks\n", size);
    MPI_Finalize();
    return 0;
}
