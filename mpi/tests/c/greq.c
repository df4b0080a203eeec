/* Generalized requests (MPI_Grequest_start/complete): a wait or test
 * completes one only after MPI_Grequest_complete; its query function gives
 * the status (called again by each MPI_Request_get_status), its free
 * function runs once, when it is both complete and freed (by the wait, or
 * by MPI_Request_free, then at its completion); MPI_Cancel calls the cancel
 * function with whether it is complete; a query function's error is the
 * wait's; the functions may call MPI; Waitall, Waitany and Testsome mix
 * them with point-to-point requests.
 *
 * With ON_MPICH set, the free function may run at MPI_Request_free before
 * the completion, as MPICH 4.0.2 runs it.
 *
 *   greq [sabotage]   sabotage: expect one wrong value (must fail) */
#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"

static int rank, size, sabotage, on_mpich;

struct state {
    int queries, frees, cancels, last_complete, fail;
};

static int query_fn(void *extra, MPI_Status *status)
{
    struct state *s = extra;
    int me;
    MPI_Comm_rank(MPI_COMM_WORLD, &me); /* the functions may call MPI */
    s->queries++;
    status->MPI_SOURCE = me;
    status->MPI_TAG = 77;
    MPI_Status_set_cancelled(status, 0);
    MPI_Status_set_elements(status, MPI_BYTE, 5);
    return s->fail ? MPI_ERR_OTHER : MPI_SUCCESS;
}

static int free_fn(void *extra)
{
    ((struct state *)extra)->frees++;
    return MPI_SUCCESS;
}

static int cancel_fn(void *extra, int complete)
{
    struct state *s = extra;
    s->cancels++;
    s->last_complete = complete;
    return MPI_SUCCESS;
}

static void check_status(MPI_Status *st, const char *where)
{
    int n;
    MPI_Get_count(st, MPI_BYTE, &n);
    CHECK(st->MPI_SOURCE == rank && st->MPI_TAG == 77 && n == 5 + (sabotage && rank == 0),
          "%s: source %d tag %d count %d", where, st->MPI_SOURCE, st->MPI_TAG, n);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    sabotage = argc > 1 && !strcmp(argv[1], "sabotage");
    on_mpich = getenv("ON_MPICH") != NULL;
    MPI_Status st;
    MPI_Request r;
    int flag;

    /* Not complete until the program says so; then the query's status. */
    struct state a = {0};
    MPI_Grequest_start(query_fn, free_fn, cancel_fn, &a, &r);
    MPI_Test(&r, &flag, &st);
    CHECK(!flag && a.queries == 0 && a.frees == 0, "complete before MPI_Grequest_complete");
    MPI_Grequest_complete(r);
    MPI_Request_get_status(r, &flag, &st);
    CHECK(flag && a.queries == 1 && a.frees == 0, "get_status: flag %d queries %d frees %d", flag, a.queries,
          a.frees);
    check_status(&st, "get_status");
    MPI_Test(&r, &flag, &st);
    CHECK(flag && r == MPI_REQUEST_NULL && a.queries == 2 && a.frees == 1, "test: queries %d frees %d",
          a.queries, a.frees);
    check_status(&st, "test");

    /* Freed first: the free function waits for the completion. */
    struct state b = {0};
    MPI_Grequest_start(query_fn, free_fn, cancel_fn, &b, &r);
    MPI_Request keep = r;
    MPI_Request_free(&r);
    /* MPI-4.0 §13.2: the free function runs at MPI_Request_free or
     * MPI_Grequest_complete, whichever comes last. MPICH 4.0.2 runs it at
     * MPI_Request_free already. */
    CHECK(r == MPI_REQUEST_NULL && (b.frees == 0 || on_mpich), "freed before complete: frees %d", b.frees);
    MPI_Grequest_complete(keep);
    CHECK(b.frees == 1 && b.queries == 0, "complete after free: frees %d queries %d", b.frees, b.queries);

    /* Cancel, before and after completion. */
    struct state c = {0};
    MPI_Grequest_start(query_fn, free_fn, cancel_fn, &c, &r);
    MPI_Cancel(&r);
    CHECK(c.cancels == 1 && c.last_complete == 0, "cancel before: %d %d", c.cancels, c.last_complete);
    MPI_Grequest_complete(r);
    MPI_Cancel(&r);
    CHECK(c.cancels == 2 && c.last_complete == 1, "cancel after: %d %d", c.cancels, c.last_complete);
    MPI_Wait(&r, MPI_STATUS_IGNORE);
    CHECK(c.queries == 1 && c.frees == 1, "wait with status ignored: queries %d frees %d", c.queries, c.frees);

    /* A query function's error is the wait's. */
    struct state d = {0};
    d.fail = 1;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Grequest_start(query_fn, free_fn, cancel_fn, &d, &r);
    MPI_Grequest_complete(r);
    int rc = MPI_Wait(&r, &st);
    CHECK(rc != MPI_SUCCESS && d.frees == 1, "a failing query: rc %d frees %d", rc, d.frees);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);

    /* Mixed with point-to-point: Waitall, Waitany, Testsome. */
    struct state e[3] = {{0}};
    MPI_Request rs[4];
    MPI_Status sts[4];
    int out = rank, in = -1, to = (rank + 1) % size, from = (rank + size - 1) % size;
    MPI_Irecv(&in, 1, MPI_INT, from, 5, MPI_COMM_WORLD, &rs[0]);
    MPI_Grequest_start(query_fn, free_fn, cancel_fn, &e[0], &rs[1]);
    MPI_Isend(&out, 1, MPI_INT, to, 5, MPI_COMM_WORLD, &rs[2]);
    MPI_Grequest_start(query_fn, free_fn, cancel_fn, &e[1], &rs[3]);
    MPI_Grequest_complete(rs[1]);
    MPI_Grequest_complete(rs[3]);
    MPI_Waitall(4, rs, sts);
    CHECK(in == from && sts[0].MPI_SOURCE == from, "Waitall's receive: %d from %d", in, sts[0].MPI_SOURCE);
    check_status(&sts[1], "Waitall [1]");
    check_status(&sts[3], "Waitall [3]");
    CHECK(e[0].frees == 1 && e[1].frees == 1 && e[0].queries == 1, "Waitall: frees %d %d", e[0].frees,
          e[1].frees);

    MPI_Grequest_start(query_fn, free_fn, cancel_fn, &e[2], &rs[0]);
    rs[1] = MPI_REQUEST_NULL;
    int outcount, idx[2];
    MPI_Testsome(2, rs, &outcount, idx, sts);
    CHECK(outcount == 0, "Testsome before completion: %d", outcount);
    MPI_Grequest_complete(rs[0]);
    int index;
    MPI_Waitany(2, rs, &index, &st);
    CHECK(index == 0 && e[2].frees == 1, "Waitany: index %d frees %d", index, e[2].frees);
    check_status(&st, "Waitany");

    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0)
        printf("all generalized request checks passed on %d ranks\n", size);
    MPI_Finalize();
    return 0;
}
