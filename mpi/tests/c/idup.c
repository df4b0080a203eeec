/* MPI_Comm_idup and MPI_Comm_idup_with_info: several in flight on one
 * communicator among non-blocking collectives; overlapping ones started in
 * different orders at different ranks (blocking, this would deadlock);
 * random splits duplicated in a random order per rank with blocking
 * MPI_Comm_dup and MPI_Comm_create_group between; blocking splits while an
 * idup of their parent runs; an intercommunicator;
 * attributes copied. Every communicator made must have a context of its
 * own: each one carries a ring of messages at once, all with the same tag,
 * and each message must arrive on its own communicator. With "sabotage"
 * one rank expects a wrong value.
 *
 * With ON_MPICH set, the blocking MPI_Comm_dup and MPI_Comm_create_group
 * among the random splits' idups are left out: MPICH 4.0.2 never ends
 * them on 4 ranks or more, allocating memory until the kernel kills it. */
#include <mpi.h>
#include <string.h>

#include "check.h"

static int rank, size, sabotage, on_mpich;

enum { MAX_COMMS = 256 };
static MPI_Comm comms[MAX_COMMS];
static int names[MAX_COMMS]; /* the same at every member of a communicator */
static int ncomms;

static void add(MPI_Comm c, int name)
{
    CHECK(ncomms < MAX_COMMS, "too many communicators");
    comms[ncomms] = c;
    names[ncomms] = name;
    ncomms++;
}

static unsigned next_random(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return (*s >> 8) & 0xffffff;
}

/* Each communicator (in an order of this rank's own) sends its name to the
 * next member and receives from the one before, all at once, same tag. */
static void each_has_its_own_context(unsigned seed)
{
    static MPI_Request reqs[2 * MAX_COMMS];
    static int got[MAX_COMMS];
    int order[MAX_COMMS];
    for (int i = 0; i < ncomms; i++)
        order[i] = i;
    for (int i = ncomms - 1; i > 0; i--) {
        int j = next_random(&seed) % (i + 1), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    for (int k = 0; k < ncomms; k++) {
        int i = order[k], n, me, inter;
        MPI_Comm_test_inter(comms[i], &inter);
        if (inter) {
            MPI_Comm_remote_size(comms[i], &n);
            MPI_Comm_rank(comms[i], &me);
            /* Both groups' member 0 swap names. */
            int peer = me == 0 ? 0 : MPI_PROC_NULL;
            got[i] = me == 0 ? -1 : names[i];
            MPI_Irecv(&got[i], 1, MPI_INT, peer, 5, comms[i], &reqs[2 * i]);
            MPI_Isend(&names[i], 1, MPI_INT, peer, 5, comms[i], &reqs[2 * i + 1]);
            continue;
        }
        MPI_Comm_size(comms[i], &n);
        MPI_Comm_rank(comms[i], &me);
        got[i] = -1;
        MPI_Irecv(&got[i], 1, MPI_INT, (me + n - 1) % n, 5, comms[i], &reqs[2 * i]);
        MPI_Isend(&names[i], 1, MPI_INT, (me + 1) % n, 5, comms[i], &reqs[2 * i + 1]);
    }
    MPI_Waitall(2 * ncomms, reqs, MPI_STATUSES_IGNORE);
    for (int i = 0; i < ncomms; i++) {
        int want = names[i] + (sabotage && rank == size - 1 && i == ncomms - 1);
        CHECK(got[i] == want, "communicator %d (name %d) carried %d", i, want, got[i]);
    }
}

/* Four idups of one communicator in flight, among an Ibarrier and an
 * Iallreduce on it, completed in one Waitall. */
static void several_in_flight(void)
{
    MPI_Request reqs[6];
    MPI_Comm dups[4];
    int one = 1, sum = 0;
    MPI_Ibarrier(MPI_COMM_WORLD, &reqs[0]);
    MPI_Comm_idup(MPI_COMM_WORLD, &dups[0], &reqs[1]);
    MPI_Iallreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &reqs[2]);
    MPI_Comm_idup(MPI_COMM_WORLD, &dups[1], &reqs[3]);
    MPI_Info info;
    MPI_Info_create(&info);
    MPI_Info_set(info, "mpi_assert_no_any_tag", "false");
    MPI_Comm_idup_with_info(MPI_COMM_WORLD, info, &dups[2], &reqs[4]);
    MPI_Info_free(&info);
    MPI_Comm_idup(MPI_COMM_WORLD, &dups[3], &reqs[5]);
    MPI_Waitall(6, reqs, MPI_STATUSES_IGNORE);
    CHECK(sum == size, "the Iallreduce among the idups gave %d", sum);
    for (int i = 0; i < 4; i++) {
        int r, n, cmp;
        MPI_Comm_rank(dups[i], &r);
        MPI_Comm_size(dups[i], &n);
        MPI_Comm_compare(dups[i], MPI_COMM_WORLD, &cmp);
        CHECK(r == rank && n == size && cmp == MPI_CONGRUENT, "idup %d: rank %d of %d, compare %d", i,
              r, n, cmp);
        add(dups[i], 1000 + i);
    }
}

/* Member i and i + 1 share a communicator; each rank idups the one where
 * it is first, then the one where it is second. */
static void overlapping_in_a_ring(void)
{
    MPI_Comm first = MPI_COMM_NULL, second = MPI_COMM_NULL, tmp;
    for (int i = 0; i < size; i++) {
        int in = rank == i || rank == (i + 1) % size;
        MPI_Comm_split(MPI_COMM_WORLD, in ? 0 : MPI_UNDEFINED, rank == i ? 0 : 1, &tmp);
        if (rank == i)
            first = tmp;
        else if (in)
            second = tmp;
    }
    MPI_Comm d[2];
    MPI_Request reqs[2];
    MPI_Comm_idup(first, &d[0], &reqs[0]);
    MPI_Comm_idup(second, &d[1], &reqs[1]);
    MPI_Waitall(2, reqs, MPI_STATUSES_IGNORE);
    add(first, 2000 + rank);
    add(second, 2000 + (rank + size - 1) % size);
    add(d[0], 3000 + rank);
    add(d[1], 3000 + (rank + size - 1) % size);
}

/* Random splits of the world; each rank idups its parts, each three
 * times, in an order of its own, with a blocking dup and a
 * create_group of the world while they run. */
static void random_splits(unsigned seed)
{
    enum { SPLITS = 4, TIMES = 3 };
    MPI_Comm parts[SPLITS];
    int colors[SPLITS];
    for (int s = 0; s < SPLITS; s++) {
        unsigned common = seed + 77 * s;
        for (int r = 0; r <= rank; r++)
            colors[s] = next_random(&common) % 3;
        MPI_Comm_split(MPI_COMM_WORLD, colors[s], size - rank, &parts[s]);
        add(parts[s], 4000 + 10 * s + colors[s]);
    }
    int todo[SPLITS * TIMES];
    for (int i = 0; i < SPLITS * TIMES; i++)
        todo[i] = i % SPLITS;
    unsigned mine = seed ^ (rank * 2654435761u);
    for (int i = SPLITS * TIMES - 1; i > 0; i--) {
        int j = next_random(&mine) % (i + 1), t = todo[i];
        todo[i] = todo[j];
        todo[j] = t;
    }
    MPI_Request reqs[SPLITS * TIMES];
    int times[SPLITS] = {0};
    for (int i = 0; i < SPLITS * TIMES; i++) {
        if (i == SPLITS && !on_mpich) {
            MPI_Comm d;
            MPI_Comm_dup(MPI_COMM_WORLD, &d);
            add(d, 5000);
        }
        if (i == 2 * SPLITS && !on_mpich) {
            MPI_Group g;
            MPI_Comm c;
            MPI_Comm_group(MPI_COMM_WORLD, &g);
            MPI_Comm_create_group(MPI_COMM_WORLD, g, 9, &c);
            MPI_Group_free(&g);
            add(c, 5001);
        }
        /* Every member idups part s in the same order: its k-th idup is
         * the same communicator at each. */
        int s = todo[i];
        CHECK(ncomms < MAX_COMMS, "too many communicators");
        names[ncomms] = 6000 + 100 * s + 10 * colors[s] + times[s]++;
        MPI_Comm_idup(parts[s], &comms[ncomms++], &reqs[i]);
    }
    MPI_Waitall(SPLITS * TIMES, reqs, MPI_STATUSES_IGNORE);
}

static int copied_key;

/* An intercommunicator of the even and the odd ranks, and its idup, which
 * copies an attribute set with MPI_COMM_DUP_FN. */
static void intercomm_and_attributes(void)
{
    MPI_Comm half, inter, twin;
    MPI_Request req;
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half);
    MPI_Intercomm_create(half, 0, MPI_COMM_WORLD, rank % 2 ? 0 : 1, 3, &inter);
    MPI_Comm_create_keyval(MPI_COMM_DUP_FN, MPI_COMM_NULL_DELETE_FN, &copied_key, NULL);
    static int value = 42;
    MPI_Comm_set_attr(inter, copied_key, &value);
    MPI_Comm_idup(inter, &twin, &req);
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    int *got, flag, remote;
    MPI_Comm_get_attr(twin, copied_key, &got, &flag);
    CHECK(flag && got == &value, "the idup of an intercommunicator lost an attribute");
    MPI_Comm_remote_size(twin, &remote);
    CHECK(remote == size / 2 + (rank % 2 ? size % 2 : 0), "remote size %d", remote);
    add(half, 7000 + rank % 2);
    add(inter, 7002);
    add(twin, 7003);
}

/* An idup in flight while blocking splits of the same communicator run
 * (a fresh one, so the children's numbers are small): the idup's rounds
 * and the splits' exchanges must not take each other's messages (fm's
 * round tags once met the tags of the parent's fourth to seventh child,
 * whose splits then read a round's bytes as colours and keys, or hung). */
static void splits_while_an_idup_runs(void)
{
    enum { SPLITS = 8 };
    MPI_Comm base, d, parts[SPLITS];
    MPI_Request req;
    MPI_Comm_dup(MPI_COMM_WORLD, &base);
    MPI_Comm_idup(base, &d, &req);
    for (int i = 0; i < SPLITS; i++) {
        int colour = (rank + i) % 3;
        MPI_Comm_split(base, colour, (i % 2 ? -1 : 1) * rank, &parts[i]);
        int n, me, want_n = 0, want_me = 0;
        for (int r = 0; r < size; r++)
            want_n += (r + i) % 3 == colour;
        for (int r = 0; r < size; r++)
            if ((r + i) % 3 == colour && (i % 2 ? r > rank : r < rank))
                want_me++;
        MPI_Comm_size(parts[i], &n);
        MPI_Comm_rank(parts[i], &me);
        CHECK(n == want_n && me == want_me, "split %d beside an idup: rank %d of %d, not %d of %d", i,
              me, n, want_me, want_n);
        add(parts[i], 4000 + 3 * i + colour);
    }
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    add(d, 5000);
    MPI_Comm_free(&base);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    sabotage = argc > 1 && !strcmp(argv[1], "sabotage");
    on_mpich = getenv("ON_MPICH") != NULL;
    several_in_flight();
    if (size > 1)
        overlapping_in_a_ring();
    random_splits(12345);
    splits_while_an_idup_runs();
    if (size > 1)
        intercomm_and_attributes();
    each_has_its_own_context(rank + 1);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0)
        printf("all idup checks passed on %d ranks\n", size);
    MPI_Finalize();
    return 0;
}
