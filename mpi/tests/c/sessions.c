/* MPI-4.0's Sessions: a program that never calls MPI_Init starts MPI with
 * MPI_Session_init (MPI_Initialized stays false), reads the thread level
 * it got and the process sets (mpi://WORLD and mpi://SELF, their names
 * through the length protocol of MPI_Session_get_nth_pset, their sizes),
 * makes communicators from their groups and from a subgroup (two string
 * tags at once), reduces over them, routes a session's errors to its own
 * handler, and runs two sessions at once. "world": the same inside
 * MPI_Init; MPI_Finalize while a session is open leaves its communicator
 * working until MPI_Session_finalize.
 *
 * With ON_MPICH set, the unknown process set is left out: MPICH 4.0.2
 * aborts there instead of calling the session's handler.
 *
 *   sessions [world] [sabotage]   sabotage: expect one wrong value */
#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"

static int rank, sabotage, handled;

static void on_error(MPI_Session *s, int *code, ...)
{
    (void)s;
    handled = *code;
}

static MPI_Comm comm_of(MPI_Session s, const char *pset, const char *tag)
{
    MPI_Group g;
    MPI_Comm c;
    MPI_Group_from_session_pset(s, pset, &g);
    MPI_Comm_create_from_group(g, tag, MPI_INFO_NULL, MPI_ERRORS_ARE_FATAL, &c);
    MPI_Group_free(&g);
    return c;
}

int main(int argc, char **argv)
{
    int world = 0, flag;
    for (int i = 1; i < argc; i++) {
        world |= !strcmp(argv[i], "world");
        sabotage |= !strcmp(argv[i], "sabotage");
    }
    if (world)
        MPI_Init(&argc, &argv);
    MPI_Initialized(&flag);
    rank = -1;
    CHECK(flag == world, "MPI_Initialized %d before the session", flag);

    MPI_Info want;
    MPI_Info_create(&want);
    MPI_Info_set(want, "thread_level", "MPI_THREAD_SERIALIZED");
    MPI_Session s, t;
    MPI_Session_init(want, MPI_ERRORS_RETURN, &s);
    MPI_Info_free(&want);
    MPI_Initialized(&flag);
    CHECK(flag == world, "MPI_Initialized %d with a session", flag);

    MPI_Info used;
    char value[64];
    MPI_Session_get_info(s, &used);
    MPI_Info_get(used, "thread_level", sizeof value - 1, value, &flag);
    CHECK(flag && (!strcmp(value, "MPI_THREAD_SERIALIZED") || !strcmp(value, "MPI_THREAD_MULTIPLE")),
          "thread_level %s", flag ? value : "(none)");
    MPI_Info_free(&used);

    /* The process sets: names through the length protocol. */
    int n, got_world = 0, got_self = 0, world_size = 0;
    MPI_Session_get_num_psets(s, MPI_INFO_NULL, &n);
    for (int i = 0; i < n; i++) {
        int len = 0;
        MPI_Session_get_nth_pset(s, MPI_INFO_NULL, i, &len, NULL);
        char *name = malloc(len);
        MPI_Session_get_nth_pset(s, MPI_INFO_NULL, i, &len, name);
        CHECK((int)strlen(name) + 1 == len, "pset %d: \"%s\" and length %d", i, name, len);
        MPI_Info info;
        MPI_Session_get_pset_info(s, name, &info);
        MPI_Info_get(info, "mpi_size", sizeof value - 1, value, &flag);
        CHECK(flag && atoi(value) > 0, "pset %s: mpi_size %s", name, flag ? value : "(none)");
        if (!strcmp(name, "mpi://WORLD")) {
            got_world = 1;
            world_size = atoi(value);
        }
        if (!strcmp(name, "mpi://SELF")) {
            got_self = 1;
            CHECK(atoi(value) == 1, "mpi://SELF has %s processes", value);
        }
        MPI_Info_free(&info);
        free(name);
    }
    CHECK(got_world && got_self, "the process sets: WORLD %d SELF %d", got_world, got_self);

    /* A communicator of every process, and one of mpi://self (any case). */
    MPI_Comm all = comm_of(s, "mpi://WORLD", "all"), self = comm_of(s, "mpi://self", "self");
    int size;
    MPI_Comm_rank(all, &rank);
    MPI_Comm_size(all, &size);
    CHECK(size == world_size, "the WORLD communicator has %d of %d", size, world_size);
    int sum = 0;
    MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, all);
    CHECK(sum == size * (size - 1) / 2 + (sabotage && rank == 0), "sum of ranks %d", sum);
    MPI_Comm_size(self, &n);
    CHECK(n == 1, "the SELF communicator has %d", n);

    /* A second session; a subgroup's communicator beside a whole one, both
     * made at once under different tags. */
    MPI_Session_init(MPI_INFO_NULL, MPI_ERRORS_RETURN, &t);
    MPI_Group g, evens;
    MPI_Group_from_session_pset(t, "mpi://WORLD", &g);
    int range[1][3] = {{0, size - 1, 2}};
    MPI_Group_range_incl(g, 1, range, &evens);
    MPI_Comm even = MPI_COMM_NULL, again;
    if (rank % 2 == 0)
        MPI_Comm_create_from_group(evens, "evens", MPI_INFO_NULL, MPI_ERRORS_ARE_FATAL, &even);
    MPI_Comm_create_from_group(g, "again", MPI_INFO_NULL, MPI_ERRORS_ARE_FATAL, &again);
    if (even != MPI_COMM_NULL) {
        int m, er;
        MPI_Comm_size(even, &m);
        MPI_Comm_rank(even, &er);
        CHECK(m == (size + 1) / 2 && er == rank / 2, "evens: %d of %d", er, m);
        MPI_Comm_free(&even);
    }
    int b = rank == 0 ? 42 : 0;
    MPI_Bcast(&b, 1, MPI_INT, 0, again);
    CHECK(b == 42, "bcast over the second session's communicator: %d", b);
    MPI_Comm_free(&again);
    MPI_Group_free(&evens);
    MPI_Group_free(&g);

    /* The session's errors go to its own handler (MPICH 4.0.2 aborts on an
     * unknown process set whatever the handler). */
    MPI_Errhandler h;
    MPI_Session_create_errhandler(on_error, &h);
    MPI_Session_set_errhandler(t, h);
    MPI_Errhandler_free(&h);
    if (!getenv("ON_MPICH")) {
        int rc = MPI_Group_from_session_pset(t, "mpi://NO_SUCH_SET", &g);
        CHECK(rc != MPI_SUCCESS && handled == rc, "an unknown process set: rc %d, handler saw %d", rc,
              handled);
    }
    handled = 0;
    MPI_Session_call_errhandler(t, MPI_ERR_OTHER);
    CHECK(handled == MPI_ERR_OTHER, "MPI_Session_call_errhandler: the handler saw %d", handled);
    MPI_Session_finalize(&t);
    CHECK(t == MPI_SESSION_NULL, "the finalized session's handle");

    if (world) {
        /* The World model ends; the session's communicator goes on. */
        MPI_Finalize();
        MPI_Finalized(&flag);
        CHECK(flag, "MPI_Finalized after MPI_Finalize with a session open");
        sum = 0;
        MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, all);
        CHECK(sum == size * (size - 1) / 2, "after MPI_Finalize: sum %d", sum);
    }
    MPI_Comm_free(&self);
    MPI_Comm_free(&all);
    MPI_Session_finalize(&s);
    if (rank == 0)
        printf("all session checks passed on %d ranks%s\n", size, world ? " (world)" : "");
    return 0;
}
