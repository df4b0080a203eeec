/* Collectives on intercommunicators, each result checked against what
 * this rank computes alone: the world split into two groups (odd and even
 * ranks, so neither group's first member is the job's first, and groups
 * of unequal size), every collective with an intercommunicator form in
 * both directions, a non-commutative operation to check the order of a
 * reduction, the non-blocking and persistent forms, and the collectives
 * again on a duplicate, a split and a MPI_Comm_create of the
 * intercommunicator. Needs at least 2 ranks.
 *
 *   intercoll [sabotage]   sabotage: expect one wrong value (must fail)
 *
 * Rank 0 prints "all intercommunicator collectives passed on N ranks". */
#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"

static int rank, size, sabotage;

/* This rank's group (0: even world ranks, 1: odd), its rank in it, and
 * both groups' sizes. */
static int side, me, nlocal, nremote;

/* The world rank of member i of group g. */
static int world_of(int g, int i) { return 2 * i + g; }

/* Member i of group g's value for element k. */
static int val(int g, int i, int k) { return 100 * world_of(g, i) + k + 1; }

/* A non-commutative operation on pairs (a, b): (a1, b1) . (a2, b2) =
 * (a1 * b2 + a2, b1 * b2), an affine map composition (mod 2^31). */
static void compose(void *in, void *inout, int *len, MPI_Datatype *t)
{
    (void)t;
    int *x = in, *y = inout;
    for (int i = 0; i < *len; i++) {
        int a = x[2 * i] * y[2 * i + 1] + y[2 * i], b = x[2 * i + 1] * y[2 * i + 1];
        y[2 * i] = a & 0x7fffffff;
        y[2 * i + 1] = b & 0x7fffffff;
    }
}

static void pair(int g, int i, int *p)
{
    p[0] = val(g, i, 0) % 7;
    p[1] = val(g, i, 0) % 5 + 2;
}

/* The composition over group g in rank order. */
static void composed(int g, int n, int *acc)
{
    pair(g, 0, acc);
    for (int i = 1; i < n; i++) {
        int p[2], len = 1;
        pair(g, i, p);
        compose(acc, p, &len, NULL);
        acc[0] = p[0];
        acc[1] = p[1];
    }
}

static void collectives(MPI_Comm ic, const char *what)
{
    int other = !side, buf[64], big[256], counts[32], displs[32];
    MPI_Comm_size(ic, &nlocal);
    MPI_Comm_remote_size(ic, &nremote);
    MPI_Comm_rank(ic, &me);
    MPI_Barrier(ic);

    /* Bcast and reduce, each group the root's in turn (its member 1 if it
     * has one: not the first). */
    for (int g = 0; g < 2; g++) {
        int r = nlocal > 1 && side == g ? 1 : 0, rr = (side == g ? nlocal : nremote) > 1;
        int root = side == g ? (me == r ? MPI_ROOT : MPI_PROC_NULL) : rr;
        for (int k = 0; k < 5; k++)
            buf[k] = side == g && me == r ? val(g, r, k) : -1;
        MPI_Bcast(buf, 5, MPI_INT, root, ic);
        for (int k = 0; k < 5 && side != g; k++)
            CHECK(buf[k] == val(g, rr, k) + (sabotage && rank == 1 && k == 0), "%s: bcast from group %d: %d",
                  what, g, buf[k]);

        int mine[2], got[2] = {-1, -1}, expect[2];
        MPI_Op op;
        MPI_Datatype two;
        MPI_Type_contiguous(2, MPI_INT, &two);
        MPI_Type_commit(&two);
        MPI_Op_create(compose, 0, &op);
        pair(side, me, mine);
        MPI_Reduce(mine, got, 1, two, op, root, ic);
        if (root == MPI_ROOT) {
            composed(other, nremote, expect);
            CHECK(got[0] == expect[0] && got[1] == expect[1], "%s: reduce in order: %d %d, not %d %d", what,
                  got[0], got[1], expect[0], expect[1]);
        }
        MPI_Op_free(&op);
        MPI_Type_free(&two);

        /* Gather(v) and scatter(v): member i of the other group sends i + 1 ints. */
        int n = side == g ? nremote : 0, at = 0;
        for (int i = 0; i < n; i++) {
            counts[i] = i + 1;
            displs[i] = at;
            at += i + 1;
        }
        for (int k = 0; k < me + 1; k++)
            buf[k] = val(side, me, k);
        for (int i = 0; i < 256; i++)
            big[i] = -1;
        MPI_Gatherv(buf, me + 1, MPI_INT, big, counts, displs, MPI_INT, root, ic);
        for (int i = 0; root == MPI_ROOT && i < n; i++)
            for (int k = 0; k < counts[i]; k++)
                CHECK(big[displs[i] + k] == val(other, i, k), "%s: gatherv from %d: %d", what, i, big[displs[i] + k]);
        for (int i = 0; i < 32; i++)
            buf[i] = -1;
        if (root == MPI_ROOT)
            for (int i = 0; i < n; i++)
                for (int k = 0; k < counts[i]; k++)
                    big[displs[i] + k] = val(g, me, 10 * i + k);
        MPI_Scatterv(big, counts, displs, MPI_INT, buf, me + 1, MPI_INT, root, ic);
        for (int k = 0; side != g && k < me + 1; k++)
            CHECK(buf[k] == val(g, rr, 10 * me + k), "%s: scatterv to %d: %d", what, me, buf[k]);
        int one = -1;
        MPI_Gather(&buf[0], 1, MPI_INT, big, 1, MPI_INT, root, ic);
        MPI_Scatter(big, 1, MPI_INT, &one, 1, MPI_INT, root, ic);
        if (side != g)
            CHECK(one == buf[0], "%s: gather then scatter: %d, not %d", what, one, buf[0]);
    }

    /* Allreduce: each group gets the other's sum. */
    int x = world_of(side, me), sum = -1, expect = 0;
    for (int i = 0; i < nremote; i++)
        expect += world_of(other, i);
    MPI_Allreduce(&x, &sum, 1, MPI_INT, MPI_SUM, ic);
    CHECK(sum == expect, "%s: allreduce %d, not %d", what, sum, expect);

    /* Allgather(v): member i of the other group gives i + 1 ints. */
    int at = 0;
    for (int i = 0; i < nremote; i++) {
        counts[i] = i + 1;
        displs[i] = at;
        at += i + 1;
    }
    for (int k = 0; k < me + 1; k++)
        buf[k] = val(side, me, k);
    MPI_Allgatherv(buf, me + 1, MPI_INT, big, counts, displs, MPI_INT, ic);
    for (int i = 0; i < nremote; i++)
        for (int k = 0; k < counts[i]; k++)
            CHECK(big[displs[i] + k] == val(other, i, k), "%s: allgatherv %d.%d", what, i, k);
    MPI_Allgather(buf, 1, MPI_INT, big, 1, MPI_INT, ic);
    for (int i = 0; i < nremote; i++)
        CHECK(big[i] == val(other, i, 0), "%s: allgather %d: %d", what, i, big[i]);

    /* Alltoall: block i to member i of the other group. */
    for (int i = 0; i < nremote; i++)
        buf[i] = val(side, me, i);
    MPI_Alltoall(buf, 1, MPI_INT, big, 1, MPI_INT, ic);
    for (int i = 0; i < nremote; i++)
        CHECK(big[i] == val(other, i, me), "%s: alltoall from %d: %d", what, i, big[i]);

    /* Reduce_scatter_block: the other group's vectors summed; member i of
     * this group gets elements 2i and 2i + 1. The other group's vectors
     * are as long: 2 * nlocal elements each. */
    int vec[64], piece[2], total[64];
    for (int k = 0; k < 2 * nremote; k++)
        vec[k] = val(side, me, k);
    if (nlocal == nremote) {
        MPI_Reduce_scatter_block(vec, piece, 2, MPI_INT, MPI_SUM, ic);
        for (int k = 0; k < 2; k++) {
            total[k] = 0;
            for (int i = 0; i < nremote; i++)
                total[k] += val(other, i, 2 * me + k);
            CHECK(piece[k] == total[k], "%s: reduce_scatter_block %d: %d, not %d", what, k, piece[k], total[k]);
        }
    }

    /* Non-blocking and persistent, overlapped. */
    MPI_Request r[3];
    int nb = -1, ps = -1, bc[3] = {-1, -1, -1};
    MPI_Iallreduce(&x, &nb, 1, MPI_INT, MPI_SUM, ic, &r[0]);
    MPI_Allreduce_init(&x, &ps, 1, MPI_INT, MPI_SUM, ic, MPI_INFO_NULL, &r[1]);
    MPI_Start(&r[1]);
    int root = side == 0 ? (me == 0 ? MPI_ROOT : MPI_PROC_NULL) : 0;
    if (side == 0 && me == 0)
        bc[0] = 7, bc[1] = 8, bc[2] = 9;
    MPI_Ibcast(bc, 3, MPI_INT, root, ic, &r[2]);
    MPI_Waitall(3, r, MPI_STATUSES_IGNORE);
    CHECK(nb == expect && ps == expect, "%s: iallreduce %d, persistent %d, not %d", what, nb, ps, expect);
    if (side == 1)
        CHECK(bc[0] == 7 && bc[1] == 8 && bc[2] == 9, "%s: ibcast", what);
    MPI_Request_free(&r[1]);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    sabotage = argc > 1 && !strcmp(argv[1], "sabotage");
    CHECK(size >= 2 && size <= 32, "2 to 32 ranks");
    side = rank % 2;
    MPI_Comm local, ic, dup, half;
    MPI_Comm_split(MPI_COMM_WORLD, side, rank, &local);
    MPI_Intercomm_create(local, 0, MPI_COMM_WORLD, !side, 5, &ic);
    collectives(ic, "intercommunicator");

    MPI_Comm_dup(ic, &dup);
    collectives(dup, "duplicate");

    /* A split of one colour, keyed by world rank: the same groups in the
     * same order, on a new context. */
    MPI_Comm_split(ic, 0, rank, &half);
    collectives(half, "split");
    MPI_Comm_free(&half);

    MPI_Group g;
    MPI_Comm_group(ic, &g);
    MPI_Comm created;
    MPI_Comm_create(ic, g, &created);
    collectives(created, "created");
    MPI_Comm_free(&created);
    MPI_Group_free(&g);

    /* A split by colour that leaves one group's members out: they get
     * MPI_COMM_NULL, and so do the others, whose colour has no match. */
    MPI_Comm none;
    MPI_Comm_split(ic, side == 0 ? 1 : MPI_UNDEFINED, 0, &none);
    CHECK(none == MPI_COMM_NULL, "a split with no match across");

    MPI_Comm_free(&dup);
    MPI_Comm_free(&ic);
    MPI_Comm_free(&local);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0)
        printf("all intercommunicator collectives passed on %d ranks\n", size);
    MPI_Finalize();
    return 0;
}
