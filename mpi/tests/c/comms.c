/* Communicators made by some members only, and groups by ranges and set
 * operations: MPI_Intercomm_create (point-to-point across it, its remote
 * group), MPI_Intercomm_merge both ways round, MPI_Comm_create_group,
 * MPI_Group_range_incl/excl, MPI_Group_union/intersection/difference,
 * MPI_Intercomm_create_from_groups (the even ranks and the odd ones, with
 * no communicator of theirs to start from).
 * Compiled with MPICH's mpicc; run under fmrun and mpiexec.mpich. Needs
 * at least 2 ranks. Exits 1 at the first failure, printing it.
 *
 *   comms [sabotage]   sabotage: expect one wrong rank (must fail)
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"

static int rank, size, sabotage;

static void intercomms(void)
{
    int half = size / 2, left = rank < half, flag = 0, rsize = 0, lrank;
    MPI_Comm local, inter, merged;
    MPI_Group remote, world;

    MPI_Comm_split(MPI_COMM_WORLD, left, rank, &local);
    MPI_Comm_rank(local, &lrank);
    MPI_Intercomm_create(local, 0, MPI_COMM_WORLD, left ? half : 0, 99, &inter);
    MPI_Comm_test_inter(inter, &flag);
    CHECK(flag, "MPI_Comm_test_inter of an intercommunicator: %d", flag);
    MPI_Comm_test_inter(local, &flag);
    CHECK(!flag, "MPI_Comm_test_inter of an intracommunicator: %d", flag);
    MPI_Comm_remote_size(inter, &rsize);
    CHECK(rsize == (left ? size - half : half), "remote size %d", rsize);
    /* The remote group is the other half of the world, in order. */
    MPI_Comm_remote_group(inter, &remote);
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    for (int r = 0; r < rsize; r++) {
        int w = -1;
        MPI_Group_translate_ranks(remote, 1, &r, world, &w);
        CHECK(w == (left ? half : 0) + r + (sabotage && r == 0), "remote rank %d is world rank %d", r, w);
    }
    MPI_Group_free(&remote);
    MPI_Group_free(&world);
    /* Point-to-point across: local rank i sends its world rank to remote
     * rank i % rsize, and each receives from every remote rank that
     * sends to it. */
    int to = lrank % rsize, expect = 0;
    MPI_Request rq;
    MPI_Isend(&rank, 1, MPI_INT, to, 5, inter, &rq);
    for (int r = 0; r < (left ? size - half : half); r++)
        if (r % (left ? size - half : half) == lrank)
            expect++;
    for (int k = 0; k < expect; k++) {
        int w = -1;
        MPI_Status st;
        MPI_Recv(&w, 1, MPI_INT, MPI_ANY_SOURCE, 5, inter, &st);
        CHECK(w == (left ? half : 0) + st.MPI_SOURCE, "from remote rank %d: world rank %d",
              st.MPI_SOURCE, w);
    }
    MPI_Wait(&rq, MPI_STATUS_IGNORE);
    /* Merged with the left group low: the world's order. */
    int mrank = -1, msize = -1, sum = 0;
    MPI_Intercomm_merge(inter, !left, &merged);
    MPI_Comm_rank(merged, &mrank);
    MPI_Comm_size(merged, &msize);
    CHECK(msize == size && mrank == rank, "merged (left low): rank %d of %d", mrank, msize);
    MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, merged);
    CHECK(sum == size * (size - 1) / 2, "MPI_Allreduce on a merged communicator: %d", sum);
    MPI_Comm_free(&merged);
    /* Merged with the left group high: the right half first. */
    MPI_Intercomm_merge(inter, left, &merged);
    MPI_Comm_rank(merged, &mrank);
    CHECK(mrank == (left ? rank + size - half : rank - half), "merged (left high): rank %d",
          mrank);
    MPI_Barrier(merged);
    MPI_Comm_free(&merged);
    MPI_Comm_free(&inter);
    MPI_Comm_free(&local);
}

static void create_group(void)
{
    MPI_Group world, evens;
    int ranges[1][3] = { { 0, size - 1, 2 } }, n = 0, r = -1;
    MPI_Comm c = MPI_COMM_NULL;

    MPI_Comm_group(MPI_COMM_WORLD, &world);
    MPI_Group_range_incl(world, 1, ranges, &evens);
    MPI_Group_size(evens, &n);
    CHECK(n == (size + 1) / 2, "MPI_Group_range_incl of the even ranks: %d members", n);
    if (rank % 2 == 0) {
        MPI_Comm_create_group(MPI_COMM_WORLD, evens, 7, &c);
        MPI_Comm_rank(c, &r);
        CHECK(r == rank / 2, "MPI_Comm_create_group: rank %d", r);
        int sum = 0;
        MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, c);
        CHECK(sum == (n - 1) * n, "MPI_Allreduce on a group's communicator: %d", sum);
        MPI_Comm_free(&c);
    }
    /* Ranges the other way round, and excluded. */
    int down[1][3] = { { size - 1, 0, -1 } }, odd[1][3] = { { 1, size - 1, 2 } };
    MPI_Group rev, odds, u, i, d;
    MPI_Group_range_incl(world, 1, down, &rev);
    int zero = 0, w = -1;
    MPI_Group_translate_ranks(rev, 1, &zero, world, &w);
    CHECK(w == size - 1, "the reversed group's rank 0 is world rank %d", w);
    MPI_Group_range_excl(world, 1, ranges, &odds);
    MPI_Group_size(odds, &n);
    CHECK(n == size / 2, "MPI_Group_range_excl of the even ranks: %d left", n);
    MPI_Group_union(odds, evens, &u);
    MPI_Group_size(u, &n);
    CHECK(n == size, "union: %d", n);
    MPI_Group_translate_ranks(u, 1, &zero, world, &w);
    CHECK(w == 1, "the union's rank 0 is world rank %d (the first group's first)", w);
    MPI_Group_intersection(rev, odds, &i);
    MPI_Group_size(i, &n);
    CHECK(n == size / 2, "intersection: %d", n);
    MPI_Group_difference(world, odds, &d);
    MPI_Group_size(d, &n);
    CHECK(n == (size + 1) / 2, "difference: %d", n);
    int cmp = -1;
    MPI_Group_compare(d, evens, &cmp);
    CHECK(cmp == MPI_IDENT, "world minus odds is not the evens: %d", cmp);
    (void)odd;
    MPI_Group_free(&rev);
    MPI_Group_free(&odds);
    MPI_Group_free(&u);
    MPI_Group_free(&i);
    MPI_Group_free(&d);
    MPI_Group_free(&evens);
    MPI_Group_free(&world);
}

/* The even and the odd ranks make an intercommunicator from their groups
 * alone (the odd ones naming their last member leader), twice at once
 * with different string tags is not allowed, so one after another; each
 * leader swaps its world rank with the other side, and an allreduce
 * across gives each side the other's sum. */
static void from_groups(void)
{
    MPI_Group world, evens, odds;
    int ranges[1][3] = {{0, size - 1, 2}};
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    MPI_Group_range_incl(world, 1, ranges, &evens);
    MPI_Group_range_excl(world, 1, ranges, &odds);
    int even = rank % 2 == 0, nodds = size / 2, nevens = (size + 1) / 2;
    int my_leader = even ? 0 : nodds - 1, their_leader = even ? nodds - 1 : 0;
    for (int round = 0; round < 2; round++) {
        MPI_Comm ic;
        MPI_Intercomm_create_from_groups(even ? evens : odds, my_leader, even ? odds : evens,
                                         their_leader, round ? "again" : "first", MPI_INFO_NULL,
                                         MPI_ERRORS_RETURN, &ic);
        int inter = 0, rsize = 0, r = -1;
        MPI_Comm_test_inter(ic, &inter);
        MPI_Comm_remote_size(ic, &rsize);
        MPI_Comm_rank(ic, &r);
        CHECK(inter && rsize == (even ? nodds : nevens) && r == rank / 2,
              "from groups: inter %d, remote size %d, rank %d", inter, rsize, r);
        MPI_Errhandler eh;
        MPI_Comm_get_errhandler(ic, &eh);
        CHECK(eh == MPI_ERRORS_RETURN, "from groups: the error handler given is not the communicator's");
        MPI_Errhandler_free(&eh);
        int sum = 0;
        MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, ic);
        int want = 0;
        for (int k = even ? 1 : 0; k < size; k += 2)
            want += k;
        CHECK(sum == want + sabotage, "from groups: the other side's sum is %d, not %d", sum, want);
        if (r == my_leader) {
            int theirs = -1;
            MPI_Sendrecv(&rank, 1, MPI_INT, their_leader, 3, &theirs, 1, MPI_INT, their_leader, 3, ic,
                         MPI_STATUS_IGNORE);
            int want_leader = even ? 2 * (nodds - 1) + 1 : 0;
            CHECK(theirs == want_leader, "from groups: the other leader is world rank %d", theirs);
        }
        MPI_Comm_free(&ic);
    }
    /* A process in both groups is refused (MPICH 4.0.2 does not check,
     * and hangs). */
    MPI_Comm bad = MPI_COMM_NULL;
    if (getenv("ON_MPICH"))
        goto done;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int rc = MPI_Intercomm_create_from_groups(world, 0, world, 0, "both", MPI_INFO_NULL,
                                              MPI_ERRORS_RETURN, &bad), cls = -1;
    MPI_Error_class(rc, &cls);
    CHECK(rc != MPI_SUCCESS, "groups that overlap made an intercommunicator");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
done:
    MPI_Group_free(&world);
    MPI_Group_free(&evens);
    MPI_Group_free(&odds);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    sabotage = argc > 1 && !strcmp(argv[1], "sabotage");
    if (size < 2) {
        printf("comms needs at least 2 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    intercomms();
    create_group();
    from_groups();
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0)
        printf("all communicator checks passed on %d ranks\n", size);
    MPI_Finalize();
    return 0;
}
