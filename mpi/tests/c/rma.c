/* One-sided communication, each result checked against what every rank
 * computes alone from the seed:
 *  - fence epochs on MPI_Win_create and MPI_Win_allocate windows (the
 *    latter's parts on one host are loaded and stored directly): puts and
 *    gets of random
 *    offsets and lengths (0 included) to and from every rank, accumulates
 *    (MPI_SUM, MPI_MAX, MPI_REPLACE) from every rank, a vector datatype at
 *    the target; guard bytes around every window must stay untouched;
 *  - passive target: MPI_Fetch_and_op and MPI_Compare_and_swap under
 *    contention from every rank on one counter (exclusive and shared
 *    locks, lock_all with flushes), MPI_Rput/MPI_Rget/MPI_Rget_accumulate;
 *  - post/start/complete/wait (and MPI_Win_test) around a ring;
 *  - MPI_Win_allocate, MPI_Win_allocate_shared read directly through
 *    MPI_Win_shared_query, and a dynamic window with a region attached;
 *  - an access past the end of the target's window fails with
 *    MPI_ERR_RMA_RANGE under MPI_ERRORS_RETURN, one before its start with
 *    MPI_ERR_DISP (as MPICH's), and neither writes anything.
 * With "sabotage" one rank expects a wrong value. */
#include <mpi.h>
#include <stdint.h>
#include <string.h>

#include "check.h"

static int rank, size, sabotage;

enum { WIN = 4096, GUARD = 64, OPS = 24 };

static unsigned next_random(unsigned *s)
{
    *s = *s * 1103515245u + 12345u;
    return (*s >> 8) & 0xffffff;
}

static unsigned char pattern(int from, int op, int i)
{
    return (unsigned char)(from * 31 + op * 7 + i * 13 + 1);
}

/* The puts of `from` in round `seed`: op k writes len bytes at off of
 * target `to`; the targets' parts never overlap (each origin owns a slice
 * of every window). */
static void put_of(unsigned seed, int from, int k, int *to, int *off, int *len)
{
    unsigned s = seed * 7919u + (unsigned)from * 104729u + (unsigned)k * 15485863u;
    int slice = WIN / size;
    *to = next_random(&s) % size;
    *len = next_random(&s) % (slice / OPS + 1);
    *off = from * slice + k * (slice / OPS) + next_random(&s) % (slice / OPS - *len + 1);
}

/* With `allocate`, the window is MPI_Win_allocate's, guard bytes and all
 * (accesses are shifted past the first guard); else MPI_Win_create's over
 * the bytes between the guards. */
static void fence_epochs(unsigned seed, int allocate)
{
    unsigned char *mem, *want = malloc(WIN);
    MPI_Win win;
    MPI_Aint shift = allocate ? GUARD : 0;
    if (allocate) {
        MPI_Win_allocate(WIN + 2 * GUARD, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &mem, &win);
    } else {
        mem = malloc(WIN + 2 * GUARD);
        MPI_Win_create(mem + GUARD, WIN, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win);
    }
    unsigned char *base = mem + GUARD;
    memset(mem, 0xEE, WIN + 2 * GUARD);
    memset(base, 0, WIN);
    memset(want, 0, WIN);
    MPI_Win_fence(MPI_MODE_NOPRECEDE, win);
    unsigned char src[OPS][WIN];
    for (int k = 0; k < OPS; k++) {
        int to, off, len;
        put_of(seed, rank, k, &to, &off, &len);
        for (int i = 0; i < len; i++)
            src[k][i] = pattern(rank, k, i);
        MPI_Put(src[k], len, MPI_BYTE, to, shift + off, len, MPI_BYTE, win);
    }
    MPI_Win_fence(0, win);
    for (int from = 0; from < size; from++)
        for (int k = 0; k < OPS; k++) {
            int to, off, len;
            put_of(seed, from, k, &to, &off, &len);
            if (to == rank)
                for (int i = 0; i < len; i++)
                    want[off + i] = pattern(from, k, i);
        }
    if (sabotage && rank == size - 1)
        want[WIN / 2] ^= 1;
    for (int i = 0; i < WIN; i++)
        CHECK(base[i] == want[i], "fence put: byte %d is %d, want %d", i, base[i], want[i]);
    for (int i = 0; i < GUARD; i++)
        CHECK(mem[i] == 0xEE && mem[GUARD + WIN + i] == 0xEE, "a guard byte was written");

    /* Gets of what every other rank's window holds now. */
    unsigned char got[OPS][WIN];
    int to[OPS], off[OPS], len[OPS];
    for (int k = 0; k < OPS; k++) {
        unsigned s = seed + 77u * (unsigned)k + (unsigned)rank;
        put_of(seed, next_random(&s) % size, k, &to[k], &off[k], &len[k]);
        to[k] = next_random(&s) % size;
        MPI_Get(got[k], len[k], MPI_BYTE, to[k], shift + off[k], len[k], MPI_BYTE, win);
    }
    MPI_Win_fence(0, win);
    for (int k = 0; k < OPS; k++) {
        /* What target to[k] holds at off[k]: recomputed from every put. */
        for (int i = 0; i < len[k]; i++) {
            int at = off[k] + i, w = 0;
            for (int from = 0; from < size; from++)
                for (int j = 0; j < OPS; j++) {
                    int t, o, l;
                    put_of(seed, from, j, &t, &o, &l);
                    if (t == to[k] && at >= o && at < o + l)
                        w = pattern(from, j, at - o);
                }
            CHECK(got[k][i] == w, "get %d byte %d: %d, want %d", k, i, got[k][i], w);
        }
    }

    /* Accumulates from every rank into the same ints. */
    int *ints = (int *)base;
    MPI_Win_fence(0, win);
    for (int i = 0; i < 64; i++)
        ints[i] = 0;
    MPI_Win_fence(0, win);
    int mine[64];
    for (int i = 0; i < 64; i++)
        mine[i] = rank * 100 + i;
    for (int t = 0; t < size; t++) {
        MPI_Accumulate(mine, 32, MPI_INT, t, shift, 32, MPI_INT, MPI_SUM, win);
        MPI_Accumulate(mine + 32, 16, MPI_INT, t, shift + 32 * sizeof(int), 16, MPI_INT, MPI_MAX, win);
    }
    /* Every other int of 48..63 replaced by this rank's rank (vector target). */
    MPI_Datatype every_other;
    MPI_Type_vector(8, 1, 2, MPI_INT, &every_other);
    MPI_Type_commit(&every_other);
    int r8[8];
    for (int i = 0; i < 8; i++)
        r8[i] = 1000 + i;
    MPI_Accumulate(r8, 8, MPI_INT, (rank + 1) % size, shift + 48 * sizeof(int), 1, every_other, MPI_REPLACE, win);
    MPI_Win_fence(0, win);
    for (int i = 0; i < 32; i++) {
        int w = 0;
        for (int r = 0; r < size; r++)
            w += r * 100 + i;
        CHECK(ints[i] == w, "sum %d: %d, want %d", i, ints[i], w);
    }
    for (int i = 32; i < 48; i++)
        CHECK(ints[i] == (size - 1) * 100 + i, "max %d: %d", i, ints[i]);
    for (int i = 48; i < 64; i++)
        CHECK(ints[i] == ((i - 48) % 2 ? 0 : 1000 + (i - 48) / 2), "replace %d: %d", i, ints[i]);
    MPI_Type_free(&every_other);
    MPI_Win_fence(MPI_MODE_NOSUCCEED, win);
    for (int i = 0; i < GUARD; i++)
        CHECK(mem[i] == 0xEE && mem[GUARD + WIN + i] == 0xEE, "a guard byte was written");
    MPI_Win_free(&win);
    CHECK(win == MPI_WIN_NULL, "MPI_Win_free did not set MPI_WIN_NULL");
    if (!allocate)
        free(mem);
    free(want);
}

static void passive_target(void)
{
    int64_t *counter;
    MPI_Win win;
    MPI_Win_allocate(2 * sizeof(int64_t), sizeof(int64_t), MPI_INFO_NULL, MPI_COMM_WORLD, &counter, &win);
    MPI_Win_lock(MPI_LOCK_EXCLUSIVE, rank, 0, win);
    counter[0] = counter[1] = 0;
    MPI_Win_unlock(rank, win);
    MPI_Barrier(MPI_COMM_WORLD);
    enum { N = 50 };
    int64_t one = 1, old, seen_max = -1;
    for (int i = 0; i < N; i++) {
        MPI_Win_lock(i % 2 ? MPI_LOCK_SHARED : MPI_LOCK_EXCLUSIVE, 0, 0, win);
        MPI_Fetch_and_op(&one, &old, MPI_INT64_T, 0, 0, MPI_SUM, win);
        MPI_Win_unlock(0, win);
        CHECK(old > seen_max, "fetch_and_op went back: %lld after %lld", (long long)old, (long long)seen_max);
        seen_max = old;
    }
    /* Compare-and-swap: each rank claims slot 1 once with its rank + 1
     * where it holds its predecessor's claim (a ticket lock's order). Not
     * before every rank's exclusive locks above are over: a shared lock
     * held while waiting for a rank that waits for an exclusive one would
     * be a deadlock. */
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Win_lock_all(0, win);
    for (;;) {
        int64_t want = rank, mine = rank + 1, found;
        MPI_Compare_and_swap(&mine, &want, &found, MPI_INT64_T, 0, 1, win);
        MPI_Win_flush(0, win);
        if (found == want)
            break;
        CHECK(found <= rank, "slot 1 holds %lld before rank %d claimed it", (long long)found, rank);
    }
    MPI_Win_unlock_all(win);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win);
        int64_t total = counter[0] + (sabotage ? 1 : 0);
        CHECK(total == (int64_t)N * size, "counter %lld, want %lld", (long long)total, (long long)N * size);
        CHECK(counter[1] == size, "slot 1 %lld, want %d", (long long)counter[1], size);
        MPI_Win_unlock(0, win);
    }
    MPI_Barrier(MPI_COMM_WORLD);

    /* Request-based accesses in one lock_all epoch. */
    int64_t put = 1000 + rank, fetched = -1, acc = 1, before = -1;
    MPI_Request r[3];
    MPI_Win_lock_all(0, win);
    int next = (rank + 1) % size;
    MPI_Rget_accumulate(&acc, 1, MPI_INT64_T, &before, 1, MPI_INT64_T, 0, 0, 1, MPI_INT64_T, MPI_SUM, win, &r[0]);
    MPI_Wait(&r[0], MPI_STATUS_IGNORE);
    CHECK(before >= N * size, "Rget_accumulate: %lld", (long long)before);
    MPI_Win_unlock_all(win);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Win_lock_all(0, win);
    MPI_Rput(&put, 1, MPI_INT64_T, next, 1, 1, MPI_INT64_T, win, &r[1]);
    MPI_Wait(&r[1], MPI_STATUS_IGNORE);
    MPI_Win_flush_all(win);
    MPI_Win_unlock_all(win);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Win_lock_all(0, win);
    MPI_Rget(&fetched, 1, MPI_INT64_T, next, 1, 1, MPI_INT64_T, win, &r[2]);
    MPI_Wait(&r[2], MPI_STATUS_IGNORE);
    MPI_Win_unlock_all(win);
    CHECK(fetched == 1000 + rank, "Rget of the Rput: %lld, want %d", (long long)fetched, 1000 + rank);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Win_free(&win);
}

static void pscw_ring(void)
{
    int cell[2] = {-1, -1};
    MPI_Win win;
    MPI_Win_create(cell, sizeof cell, sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &win);
    MPI_Group world, left, right;
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    int l = (rank + size - 1) % size, r = (rank + 1) % size;
    MPI_Group_incl(world, 1, &l, &left);
    MPI_Group_incl(world, 1, &r, &right);
    for (int round = 0; round < 20; round++) {
        MPI_Win_post(left, 0, win); /* the left neighbour writes here */
        MPI_Win_start(right, 0, win);
        int v = rank * 1000 + round;
        MPI_Put(&v, 1, MPI_INT, r, round % 2, 1, MPI_INT, win);
        MPI_Win_complete(win);
        if (round % 2) {
            int flag = 0;
            while (!flag)
                MPI_Win_test(win, &flag);
        } else {
            MPI_Win_wait(win);
        }
        CHECK(cell[round % 2] == l * 1000 + round, "round %d: %d", round, cell[round % 2]);
    }
    MPI_Group_free(&left);
    MPI_Group_free(&right);
    MPI_Group_free(&world);
    MPI_Win_free(&win);
}

static void shared_and_dynamic(void)
{
    /* Shared memory within the host: every rank's part read directly. */
    MPI_Comm host;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &host);
    int hr, hn;
    MPI_Comm_rank(host, &hr);
    MPI_Comm_size(host, &hn);
    int *part;
    MPI_Win win;
    MPI_Win_allocate_shared((hr + 1) * sizeof(int), sizeof(int), MPI_INFO_NULL, host, &part, &win);
    MPI_Win_lock_all(0, win);
    for (int i = 0; i <= hr; i++)
        part[i] = hr * 10 + i;
    MPI_Win_sync(win);
    MPI_Barrier(host);
    MPI_Win_sync(win);
    for (int p = 0; p < hn; p++) {
        MPI_Aint sz;
        int unit, *theirs;
        MPI_Win_shared_query(win, p, &sz, &unit, &theirs);
        CHECK(sz == (MPI_Aint)((p + 1) * sizeof(int)) && unit == sizeof(int), "shared_query %d", p);
        for (int i = 0; i <= p; i++)
            CHECK(theirs[i] == p * 10 + i, "shared part %d[%d]: %d", p, i, theirs[i]);
    }
    MPI_Win_unlock_all(win);
    int flavor = 0, *fp, flag;
    MPI_Win_get_attr(win, MPI_WIN_CREATE_FLAVOR, &fp, &flag);
    flavor = *fp;
    CHECK(flag && flavor == MPI_WIN_FLAVOR_SHARED, "flavor %d", flavor);
    MPI_Win_free(&win);
    MPI_Comm_free(&host);

    /* A dynamic window: each rank attaches a region and says where. */
    MPI_Win_create_dynamic(MPI_INFO_NULL, MPI_COMM_WORLD, &win);
    int region[8] = {0};
    MPI_Win_attach(win, region, sizeof region);
    MPI_Aint mine, *addrs = malloc(size * sizeof(MPI_Aint));
    MPI_Get_address(region, &mine);
    MPI_Allgather(&mine, 1, MPI_AINT, addrs, 1, MPI_AINT, MPI_COMM_WORLD);
    MPI_Win_fence(0, win);
    int v = rank + 1;
    MPI_Accumulate(&v, 1, MPI_INT, (rank + 1) % size, addrs[(rank + 1) % size] + 4 * sizeof(int), 1, MPI_INT,
                   MPI_SUM, win);
    MPI_Win_fence(0, win);
    CHECK(region[4] == (rank + size - 1) % size + 1, "dynamic: %d", region[4]);
    MPI_Win_detach(win, region);
    MPI_Win_free(&win);
    free(addrs);
}

/* With `allocate`, on an MPI_Win_allocate window of the guards and the
 * bytes between (puts to a part on this host are the origin's stores:
 * checked at the origin). */
static void out_of_range(int allocate)
{
    unsigned char stack[3 * GUARD], *mem = stack;
    MPI_Win win;
    MPI_Aint shift = allocate ? GUARD : 0;
    if (allocate)
        MPI_Win_allocate(3 * GUARD, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &mem, &win);
    else
        MPI_Win_create(mem + GUARD, GUARD, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win);
    memset(mem, 0xEE, 3 * GUARD);
    MPI_Win_fence(0, win);
    MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN);
    unsigned char junk[2 * GUARD];
    memset(junk, 0x11, sizeof junk);
    int t = (rank + 1) % size;
    MPI_Win_lock(MPI_LOCK_EXCLUSIVE, t, 0, win);
    int rc = MPI_Put(junk, 2 * GUARD, MPI_BYTE, t, 2 * shift, 2 * GUARD, MPI_BYTE, win);
    if (rc == MPI_SUCCESS)
        rc = MPI_Win_flush(t, win);
    int rc2 = MPI_Put(junk, 1, MPI_BYTE, t, -1, 1, MPI_BYTE, win);
    if (rc2 == MPI_SUCCESS)
        rc2 = MPI_Win_flush(t, win);
    MPI_Win_unlock(t, win);
    int cls, cls2;
    MPI_Error_class(rc, &cls);
    MPI_Error_class(rc2, &cls2);
    CHECK(cls == MPI_ERR_RMA_RANGE && cls2 == MPI_ERR_DISP, "out of range: classes %d and %d", cls, cls2);
    MPI_Barrier(MPI_COMM_WORLD);
    for (size_t i = 0; i < 3 * GUARD; i++)
        CHECK(mem[i] == 0xEE, "byte %zu written by an access out of range", i);
    MPI_Win_free(&win);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    sabotage = argc > 1 && !strcmp(argv[1], "sabotage");
    unsigned seed = argc > 1 && !sabotage ? (unsigned)atoi(argv[1]) : 1;
    for (unsigned s = seed; s < seed + 3; s++) {
        fence_epochs(s, 0);
        fence_epochs(s, 1);
    }
    passive_target();
    pscw_ring();
    shared_and_dynamic();
    if (!getenv("ON_MPICH")) {
        /* MPICH 4.0.2 checks no target's bounds (it writes past them) */
        out_of_range(0);
        out_of_range(1);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0)
        printf("all one-sided checks passed on %d ranks\n", size);
    MPI_Finalize();
    return 0;
}
