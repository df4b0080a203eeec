/* MPI_THREAD_MULTIPLE: four threads per rank send to and receive from
 * every other rank at once, each in its own way — ordered blocking
 * sends and receives, non-blocking ones with MPI_Waitall, MPI_Sendrecv
 * around a ring, and receives from MPI_ANY_SOURCE completed by
 * MPI_Waitsome — two threads on MPI_COMM_WORLD and two sharing one
 * duplicated communicator, each on a tag of its own. Every message must
 * arrive once, intact, and in the order its thread sent it; sizes range
 * from 4 bytes to past the eager limit.
 *
 * Then: a thread blocked in MPI_Recv, MPI_Probe, MPI_Wait, MPI_Sendrecv
 * or MPI_Barrier must not stop another thread of its process from
 * sending the message that lets the wait end, nor its MPI_Wtime and
 * MPI_Initialized before that (MPI_Initialized takes the library's lock
 * outside its usual path, as MPI_Wtime once did: not counting them once
 * hung; with one lock held across
 * a blocking call, each of these hangs, and so do the four threads
 * above; an alarm turns a hang into a failure).
 *
 * Then: four threads make communicators at once with MPI_Comm_create,
 * MPI_Comm_create_group, MPI_Comm_dup and MPI_Comm_split, each from a
 * parent of its own, the threads of odd ranks in the opposite order to
 * even ranks' (when the members of such a call agreed on its context
 * holding the library's lock, two processes reaching two calls in
 * opposite orders hung); each communicator is used once. (Threads calling MPI_Comm_create_group on
 * one parent with tags of their own, as MPICH's suite does in
 * threads/comm/comm_create_group_threads2, crash MPICH 4.0.2 beside the
 * calls here.)
 *
 * Arguments: none, or "sabotage" (one expected byte is wrong: the
 * checker must fail). Prints "all thread checks passed on N ranks".
 *
 * "mixed": even ranks ask for MPI_THREAD_MULTIPLE, odd ones for
 * MPI_THREAD_SINGLE (the rank from PMI_RANK, which fmrun and hydra set),
 * and all make communicators every way, then use each: the members of a
 * call must agree by one protocol whatever level each asked for (when
 * MPI_Comm_dup was a non-blocking agreement under MULTIPLE only, this
 * hung). Prints "mixed thread levels passed on N ranks". */
#include <mpi.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int rank, size, sabotage;
#include "check.h"

#define THREADS 4
#define MESSAGES 24
static MPI_Comm shared;

/* Message SEQ from SRC's thread T to DST: its length and its bytes (the
 * first four are SEQ). */
static const int lens[] = {4, 8, 100, 1000, 4096, 16384, 65539, 150000};
static int length(int src, int t, int seq, int dst) {
    unsigned h = (unsigned)(src * 7919 + t * 104729 + seq * 31 + dst * 131);
    return lens[(h ^ (h >> 7)) % (sizeof lens / sizeof lens[0])];
}
static unsigned char byte(int src, int t, int seq, int j) {
    return (unsigned char)(src * 131 + t * 31 + seq * 7 + j);
}
static unsigned char *message(int src, int t, int seq, int dst, int *len) {
    *len = length(src, t, seq, dst);
    unsigned char *b = malloc(*len);
    memcpy(b, &seq, 4);
    for (int j = 4; j < *len; j++)
        b[j] = byte(src, t, seq, j);
    return b;
}
/* Check message SEQ of SRC's thread T, which arrived with COUNT bytes. */
static void check(const unsigned char *b, int count, int src, int t, int seq) {
    int want = length(src, t, seq, rank), got_seq;
    CHECK(count == want, "thread %d: message %d from %d: %d bytes, not %d", t, seq, src, count, want);
    memcpy(&got_seq, b, 4);
    CHECK(got_seq == seq, "thread %d: from %d, message %d where %d was next", t, src, got_seq, seq);
    for (int j = 4; j < count; j++) {
        unsigned char e = byte(src, t, seq, j);
        if (sabotage && t == 1 && seq == 5 && j == 4)
            e ^= 1;
        CHECK(b[j] == e, "thread %d: message %d from %d: byte %d is %d, not %d", t, seq, src, j, b[j], e);
    }
}

/* Thread 0, MPI_COMM_WORLD: with each peer in turn, the lower rank sends
 * all its messages and then receives, the higher the other way round. */
static void ordered(int t) {
    MPI_Status st;
    for (int peer = 0; peer < size; peer++) {
        if (peer == rank)
            continue;
        for (int phase = 0; phase < 2; phase++) {
            int sending = (phase == 0) == (rank < peer);
            for (int seq = 0; seq < MESSAGES; seq++) {
                int len;
                if (sending) {
                    unsigned char *b = message(rank, t, seq, peer, &len);
                    MPI_Send(b, len, MPI_BYTE, peer, t, MPI_COMM_WORLD);
                    free(b);
                } else {
                    unsigned char *b = malloc(lens[7]);
                    MPI_Recv(b, lens[7], MPI_BYTE, peer, t, MPI_COMM_WORLD, &st);
                    MPI_Get_count(&st, MPI_BYTE, &len);
                    check(b, len, peer, t, seq);
                    free(b);
                }
            }
        }
    }
}

/* Thread 1, MPI_COMM_WORLD: everything posted at once, one MPI_Waitall. */
static void posted(int t) {
    int n = (size - 1) * MESSAGES, k = 0;
    MPI_Request *rq = malloc(sizeof *rq * 2 * n);
    MPI_Status *st = malloc(sizeof *st * 2 * n);
    unsigned char **in = malloc(sizeof *in * n), **out = malloc(sizeof *out * n);
    int *from = malloc(sizeof *from * n);
    for (int peer = 0; peer < size; peer++)
        for (int seq = 0; peer != rank && seq < MESSAGES; seq++, k++) {
            in[k] = malloc(lens[7]);
            from[k] = peer;
            MPI_Irecv(in[k], lens[7], MPI_BYTE, peer, t, MPI_COMM_WORLD, &rq[k]);
        }
    k = 0;
    for (int peer = 0; peer < size; peer++)
        for (int seq = 0; peer != rank && seq < MESSAGES; seq++, k++) {
            int len;
            out[k] = message(rank, t, seq, peer, &len);
            MPI_Isend(out[k], len, MPI_BYTE, peer, t, MPI_COMM_WORLD, &rq[n + k]);
        }
    CHECK(MPI_Waitall(2 * n, rq, st) == MPI_SUCCESS, "thread %d: MPI_Waitall failed", t);
    for (k = 0; k < n; k++) {
        int len;
        MPI_Get_count(&st[k], MPI_BYTE, &len);
        check(in[k], len, from[k], t, k % MESSAGES);
        free(in[k]);
        free(out[k]);
    }
    free(rq), free(st), free(in), free(out), free(from);
}

/* Thread 2, the shared communicator: MPI_Sendrecv around rings of every
 * stride. */
static void ring(int t) {
    MPI_Status st;
    unsigned char *b = malloc(lens[7]);
    for (int stride = 1; stride < size; stride++) {
        int to = (rank + stride) % size, from = (rank - stride + size) % size;
        for (int seq = 0; seq < MESSAGES; seq++) {
            int len, got;
            unsigned char *o = message(rank, t, seq, to, &len);
            MPI_Sendrecv(o, len, MPI_BYTE, to, t, b, lens[7], MPI_BYTE, from, t, shared, &st);
            MPI_Get_count(&st, MPI_BYTE, &got);
            check(b, got, from, t, seq);
            free(o);
        }
    }
    free(b);
}

/* Thread 3, the shared communicator: receives from any source posted in
 * order; the k-th of them a source's message matched is its k-th. */
static void any_source(int t) {
    int n = (size - 1) * MESSAGES, k = 0, done = 0;
    MPI_Request *rq = malloc(sizeof *rq * n), *sq = malloc(sizeof *sq * n);
    MPI_Status *st = malloc(sizeof *st * n);
    int *idx = malloc(sizeof *idx * n), *next = calloc(size, sizeof *next);
    unsigned char **in = malloc(sizeof *in * n), **out = malloc(sizeof *out * n);
    for (k = 0; k < n; k++) {
        in[k] = malloc(lens[7]);
        MPI_Irecv(in[k], lens[7], MPI_BYTE, MPI_ANY_SOURCE, t, shared, &rq[k]);
    }
    k = 0;
    for (int peer = 0; peer < size; peer++)
        for (int seq = 0; peer != rank && seq < MESSAGES; seq++, k++) {
            int len;
            out[k] = message(rank, t, seq, peer, &len);
            MPI_Isend(out[k], len, MPI_BYTE, peer, t, shared, &sq[k]);
        }
    MPI_Status *all = malloc(sizeof *all * n);
    while (done < n) {
        int outcount;
        MPI_Waitsome(n, rq, &outcount, idx, st);
        CHECK(outcount != MPI_UNDEFINED && outcount > 0, "thread %d: MPI_Waitsome gave %d", t, outcount);
        for (int i = 0; i < outcount; i++)
            all[idx[i]] = st[i];
        done += outcount;
    }
    for (k = 0; k < n; k++) {
        int len, src = all[k].MPI_SOURCE;
        CHECK(src >= 0 && src < size && src != rank, "thread %d: source %d", t, src);
        MPI_Get_count(&all[k], MPI_BYTE, &len);
        check(in[k], len, src, t, next[src]++);
        free(in[k]);
    }
    MPI_Waitall(n, sq, MPI_STATUSES_IGNORE);
    for (k = 0; k < n; k++)
        free(out[k]);
    free(rq), free(sq), free(st), free(all), free(idx), free(next), free(in), free(out);
}

static void *worker(void *arg) {
    int t = (int)(intptr_t)arg, main_thread = 1;
    MPI_Is_thread_main(&main_thread);
    CHECK(!main_thread, "thread %d: MPI_Is_thread_main says it is the main thread", t);
    void (*ways[THREADS])(int) = {ordered, posted, ring, any_source};
    ways[t](t);
    return NULL;
}

/* --- A blocked thread does not block another ---------------------------- */

static void on_alarm(int sig) {
    (void)sig;
    static const char m[] = "FAILED: still running after 100 s: a thread blocked in MPI "
                            "stopped another thread's call\n";
    (void)!write(1, m, sizeof m - 1);
    _exit(1);
}

enum { RECV, PROBE, WAIT, SENDRECV, BARRIER, WAYS };
static const char *names[] = {"MPI_Recv", "MPI_Probe", "MPI_Wait", "MPI_Sendrecv", "MPI_Barrier"};
static MPI_Comm pair;

/* Rank 0's blocked thread: waits in `way` for what rank 1 sends only
 * after rank 0's other thread's message reached it. */
static void *blocked(void *arg) {
    int way = (int)(intptr_t)arg, v = -1, mine = 7;
    MPI_Status st;
    MPI_Request r;
    switch (way) {
    case RECV:
        MPI_Recv(&v, 1, MPI_INT, 1, 99, MPI_COMM_WORLD, &st);
        break;
    case PROBE:
        MPI_Probe(1, 99, MPI_COMM_WORLD, &st);
        MPI_Recv(&v, 1, MPI_INT, 1, 99, MPI_COMM_WORLD, &st);
        break;
    case WAIT:
        MPI_Irecv(&v, 1, MPI_INT, 1, 99, MPI_COMM_WORLD, &r);
        MPI_Wait(&r, &st);
        break;
    case SENDRECV:
        MPI_Sendrecv(&mine, 1, MPI_INT, 1, 97, &v, 1, MPI_INT, 1, 99, MPI_COMM_WORLD, &st);
        break;
    case BARRIER:
        MPI_Barrier(pair);
        MPI_Recv(&v, 1, MPI_INT, 1, 99, MPI_COMM_WORLD, &st);
        break;
    }
    CHECK(v == 1000 + way, "%s: got %d, not %d", names[way], v, 1000 + way);
    return NULL;
}

static void blocked_waits(void) {
    MPI_Comm_split(MPI_COMM_WORLD, rank < 2, rank, &pair);
    for (int way = 0; way < WAYS; way++) {
        int v = 1000 + way, got, mine;
        if (rank == 0) {
            pthread_t th;
            pthread_create(&th, NULL, blocked, (void *)(intptr_t)way);
            usleep(100000); /* the other thread is inside its wait by now */
            /* Calls that take the library's lock outside its usual path
             * must end the waiting thread's hold of it too. */
            int flag = 0;
            double t = MPI_Wtime();
            MPI_Initialized(&flag);
            CHECK(flag && t >= 0, "%s: MPI_Initialized %d, MPI_Wtime %f", names[way], flag, t);
            MPI_Send(&v, 1, MPI_INT, 1, 98, MPI_COMM_WORLD);
            pthread_join(th, NULL);
        } else if (rank == 1) {
            MPI_Recv(&got, 1, MPI_INT, 0, 98, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            CHECK(got == v, "%s: rank 0's main thread sent %d, not %d", names[way], got, v);
            if (way == SENDRECV)
                MPI_Recv(&mine, 1, MPI_INT, 0, 97, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            if (way == BARRIER)
                MPI_Barrier(pair);
            MPI_Send(&v, 1, MPI_INT, 0, 99, MPI_COMM_WORLD);
        }
    }
    MPI_Comm_free(&pair);
}

/* --- Threads making communicators at once ------------------------------ */

static MPI_Comm parents[THREADS];
/* Per thread: an intercommunicator of the even ranks and the odd ones. */
static MPI_Comm inters[THREADS];

/* The colour of rank `r` in round `i` of the intercommunicator splits. */
static int inter_color(int r, int i) {
    return i % 2 ? r % 3 : 0;
}

/* `c`, made by `how` in thread `t`, works: its ranks sum as they should. */
static void used(MPI_Comm c, const char *how, int t) {
    int r, m, sum;
    MPI_Comm_rank(c, &r);
    MPI_Comm_size(c, &m);
    MPI_Allreduce(&r, &sum, 1, MPI_INT, MPI_SUM, c);
    CHECK(sum == m * (m - 1) / 2 + sabotage, "thread %d: %s: ranks sum to %d", t, how, sum);
}

static int split_color(int r, int i) {
    return (r + i) % 3 == 2 ? MPI_UNDEFINED : (r + i) % 2;
}

static void *maker(void *arg) {
    int t = (int)(intptr_t)arg;
    /* Even ranks' threads start each call in the order 0, 1, 2, 3; odd
     * ranks' in the order 3, 2, 1, 0. */
    int place = rank % 2 ? THREADS - 1 - t : t;
    /* Groups of the thread's own (MPICH 4.0.2 crashes in
     * MPI_Comm_create_group when threads share one group handle). */
    MPI_Group world_group, evens_group;
    int range[1][3] = {{0, size - 1, 2}};
    MPI_Comm_group(parents[t], &world_group);
    MPI_Group_range_incl(world_group, 1, range, &evens_group);
    for (int i = 0; i < 16; i++) {
        MPI_Group g = i % 2 ? evens_group : world_group;
        int member = i % 2 == 0 || rank % 2 == 0;
        MPI_Comm c;
        usleep(300 * place);
        MPI_Comm_create(parents[t], g, &c);
        CHECK((c != MPI_COMM_NULL) == member, "thread %d: MPI_Comm_create at rank %d", t, rank);
        if (c != MPI_COMM_NULL) {
            used(c, "MPI_Comm_create", t);
            MPI_Comm_free(&c);
        }
        usleep(300 * place);
        if (member) {
            MPI_Comm_create_group(parents[t], g, i, &c);
            used(c, "MPI_Comm_create_group", t);
            MPI_Comm_free(&c);
        }
        usleep(300 * place);
        MPI_Comm_dup(parents[t], &c);
        used(c, "MPI_Comm_dup", t);
        MPI_Comm_free(&c);
        usleep(300 * place);
        /* Colours by rank and round, some MPI_UNDEFINED, keys reversed. */
        int mine = split_color(rank, i), n = 0, below = 0, r;
        MPI_Comm_split(parents[t], mine, -rank, &c);
        CHECK((c == MPI_COMM_NULL) == (mine == MPI_UNDEFINED), "thread %d: MPI_Comm_split", t);
        if (c != MPI_COMM_NULL) {
            for (int q = 0; q < size; q++)
                if (split_color(q, i) == mine)
                    n++, below += q > rank;
            MPI_Comm_size(c, &r);
            CHECK(r == n, "thread %d: MPI_Comm_split made %d members, not %d", t, r, n);
            MPI_Comm_rank(c, &r);
            CHECK(r == below, "thread %d: MPI_Comm_split gave rank %d, not %d", t, r, below);
            used(c, "MPI_Comm_split", t);
            MPI_Comm_free(&c);
        }
        usleep(300 * place);
        /* A ring of all but the last rank, and its sub-grids: keeping the
         * dimension (the same ring) or none (rank 0 alone). */
        int dims[1] = {size > 1 ? size - 1 : 1}, periods[1] = {1}, keep[1] = {i % 2};
        MPI_Cart_create(parents[t], 1, dims, periods, 0, &c);
        CHECK((c != MPI_COMM_NULL) == (rank < dims[0]), "thread %d: MPI_Cart_create at rank %d", t, rank);
        if (c != MPI_COMM_NULL) {
            MPI_Comm sub;
            MPI_Cart_sub(c, keep, &sub);
            CHECK((sub != MPI_COMM_NULL) == (keep[0] || rank == 0), "thread %d: MPI_Cart_sub at rank %d", t, rank);
            if (sub != MPI_COMM_NULL) {
                used(sub, "MPI_Cart_sub", t);
                MPI_Comm_free(&sub);
            }
            used(c, "MPI_Cart_create", t);
            MPI_Comm_free(&c);
        }
        usleep(300 * place);
        int left = (rank + size - 1) % size, right = (rank + 1) % size;
        MPI_Dist_graph_create_adjacent(parents[t], 1, &left, MPI_UNWEIGHTED, 1, &right,
                                       MPI_UNWEIGHTED, MPI_INFO_NULL, 0, &c);
        used(c, "MPI_Dist_graph_create_adjacent", t);
        MPI_Comm_free(&c);
        usleep(300 * place);
        /* The same ring, each rank naming the edge it starts. */
        int degree = 1, in, out, weighted;
        MPI_Dist_graph_create(parents[t], 1, &rank, &degree, &right, MPI_UNWEIGHTED,
                              MPI_INFO_NULL, 0, &c);
        MPI_Dist_graph_neighbors_count(c, &in, &out, &weighted);
        CHECK(in == 1 && out == 1, "thread %d: MPI_Dist_graph_create: %d in, %d out", t, in, out);
        used(c, "MPI_Dist_graph_create", t);
        MPI_Comm_free(&c);
    }
    MPI_Group_free(&evens_group);
    MPI_Group_free(&world_group);
    return NULL;
}

static void makers(void) {
    pthread_t th[THREADS];
    for (int t = 0; t < THREADS; t++)
        MPI_Comm_dup(MPI_COMM_WORLD, &parents[t]);
    for (int t = 0; t < THREADS; t++)
        pthread_create(&th[t], NULL, maker, (void *)(intptr_t)t);
    for (int t = 0; t < THREADS; t++)
        pthread_join(th[t], NULL);
    for (int t = 0; t < THREADS; t++)
        MPI_Comm_free(&parents[t]);
}

/* The same with intercommunicators of the even ranks and the odd ones:
 * MPI_Intercomm_create, _create_from_groups, MPI_Intercomm_merge and
 * splits, in opposite orders at odd and even ranks. Only under fm: under MPICH
 * 4.0.2 on 4 ranks, even with one thread, the allreduce on the second
 * split (ranks 0 and 3) returns at rank 0 and never at rank 3. */
static void *inter_maker(void *arg) {
    int t = (int)(intptr_t)arg;
    int place = rank % 2 ? THREADS - 1 - t : t, r;
    MPI_Group world_group, evens_group, odds_group;
    int evens_range[1][3] = {{0, size - 1, 2}}, odds_range[1][3] = {{1, size - 1, 2}};
    MPI_Comm_group(parents[t], &world_group);
    MPI_Group_range_incl(world_group, 1, evens_range, &evens_group);
    MPI_Group_range_incl(world_group, 1, odds_range, &odds_group);
    for (int i = 0; i < 16; i++) {
        MPI_Comm c;
        if (i % 4 == 2) {
            /* The same groups with no communicator to start from. */
            char stringtag[32];
            int mine = rank, sum, want = sabotage;
            snprintf(stringtag, sizeof stringtag, "threads-%d-%d", t, i);
            usleep(300 * place);
            MPI_Intercomm_create_from_groups(rank % 2 ? odds_group : evens_group, 0,
                                             rank % 2 ? evens_group : odds_group, 0, stringtag,
                                             MPI_INFO_NULL, MPI_ERRORS_ARE_FATAL, &c);
            MPI_Allreduce(&mine, &sum, 1, MPI_INT, MPI_SUM, c);
            for (int q = 0; q < size; q++)
                want += q % 2 != rank % 2 ? q : 0;
            CHECK(sum == want, "thread %d: MPI_Intercomm_create_from_groups: the other group sums to %d, not %d", t, sum, want);
            MPI_Comm_free(&c);
        }
        if (i % 4 == 0) {
            /* A new intercommunicator every few rounds. */
            MPI_Comm side;
            if (inters[t] != MPI_COMM_NULL)
                MPI_Comm_free(&inters[t]);
            usleep(300 * place);
            MPI_Comm_split(parents[t], rank % 2, rank, &side);
            usleep(300 * place);
            MPI_Intercomm_create(side, 0, parents[t], rank % 2 ? 0 : 1, 100 + t, &inters[t]);
            MPI_Comm_free(&side);
            MPI_Comm_remote_size(inters[t], &r);
            CHECK(r == (rank % 2 ? (size + 1) / 2 : size / 2), "thread %d: MPI_Intercomm_create made a remote group of %d", t, r);
        }
        usleep(300 * place);
        /* The odd ranks said high: the even ones come first. */
        MPI_Intercomm_merge(inters[t], rank % 2, &c);
        MPI_Comm_rank(c, &r);
        int evens = (size + 1) / 2;
        CHECK(r == (rank % 2 ? evens : 0) + rank / 2, "thread %d: MPI_Intercomm_merge gave rank %d", t, r);
        used(c, "MPI_Intercomm_merge", t);
        MPI_Comm_free(&c);
        usleep(300 * place);
        int partner = 0;
        for (int q = 0; q < size; q++)
            partner |= q % 2 != rank % 2 && inter_color(q, i) == inter_color(rank, i);
        MPI_Comm_split(inters[t], inter_color(rank, i), rank, &c);
        CHECK((c != MPI_COMM_NULL) == partner, "thread %d: MPI_Comm_split of an intercommunicator at rank %d", t, rank);
        if (c != MPI_COMM_NULL) {
            int remote, sum, mine = rank;
            MPI_Comm_remote_size(c, &remote);
            /* On an intercommunicator the sum is the other group's. */
            MPI_Allreduce(&mine, &sum, 1, MPI_INT, MPI_SUM, c);
            int want = sabotage;
            for (int q = 0; q < size; q++)
                if (q % 2 != rank % 2 && inter_color(q, i) == inter_color(rank, i))
                    want += q;
            CHECK(sum == want, "thread %d: the split's other group sums to %d, not %d", t, sum, want);
            MPI_Comm_free(&c);
        }
    }
    MPI_Group_free(&odds_group);
    MPI_Group_free(&evens_group);
    MPI_Group_free(&world_group);
    return NULL;
}

static void inter_makers(void) {
    pthread_t th[THREADS];
    for (int t = 0; t < THREADS; t++) {
        MPI_Comm_dup(MPI_COMM_WORLD, &parents[t]);
        inters[t] = MPI_COMM_NULL;
    }
    for (int t = 0; t < THREADS; t++)
        pthread_create(&th[t], NULL, inter_maker, (void *)(intptr_t)t);
    for (int t = 0; t < THREADS; t++)
        pthread_join(th[t], NULL);
    for (int t = 0; t < THREADS; t++) {
        MPI_Comm_free(&inters[t]);
        MPI_Comm_free(&parents[t]);
    }
}

/* Every way of making a communicator, each used once. */
static void mixed_levels(void) {
    MPI_Comm c[5];
    MPI_Group world, evens;
    int n = 0, r, sum;
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    int range[1][3] = {{0, size - 1, 2}};
    MPI_Group_range_incl(world, 1, range, &evens);
    MPI_Comm_dup(MPI_COMM_WORLD, &c[n++]);
    MPI_Comm_create(MPI_COMM_WORLD, world, &c[n++]);
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, -rank, &c[n++]);
    MPI_Comm_create(MPI_COMM_WORLD, evens, &c[n]);
    n += c[n] != MPI_COMM_NULL;
    CHECK((rank % 2 == 0) == (n == 4), "MPI_Comm_create of the even ranks at rank %d", rank);
    if (rank % 2 == 0)
        MPI_Comm_create_group(MPI_COMM_WORLD, evens, 7, &c[n++]);
    for (int i = 0; i < n; i++) {
        MPI_Comm_rank(c[i], &r);
        MPI_Allreduce(&r, &sum, 1, MPI_INT, MPI_SUM, c[i]);
        int m;
        MPI_Comm_size(c[i], &m);
        CHECK(sum == m * (m - 1) / 2 + (sabotage && i == 0), "communicator %d: ranks sum to %d", i, sum);
        MPI_Comm_free(&c[i]);
    }
    MPI_Group_free(&evens);
    MPI_Group_free(&world);
}

int main(int argc, char **argv) {
    int provided, main_thread = 0;
    signal(SIGALRM, on_alarm);
    alarm(100);
    if (argc > 1 && strcmp(argv[1], "mixed") == 0) {
        const char *r = getenv("PMI_RANK");
        int want = r && atoi(r) % 2 == 0 ? MPI_THREAD_MULTIPLE : MPI_THREAD_SINGLE;
        MPI_Init_thread(&argc, &argv, want, &provided);
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        MPI_Comm_size(MPI_COMM_WORLD, &size);
        CHECK(provided >= want, "asked for %d, provided %d", want, provided);
        mixed_levels();
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank == 0)
            printf("mixed thread levels passed on %d ranks\n", size);
        MPI_Finalize();
        return 0;
    }
    MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int inter = argc > 1 && strcmp(argv[1], "inter") == 0;
    sabotage = argc > 1 && strcmp(argv[argc - 1], "sabotage") == 0;
    CHECK(provided == MPI_THREAD_MULTIPLE, "provided %d", provided);
    MPI_Query_thread(&provided);
    CHECK(provided == MPI_THREAD_MULTIPLE, "MPI_Query_thread gave %d", provided);
    MPI_Is_thread_main(&main_thread);
    CHECK(main_thread, "MPI_Is_thread_main says the main thread is not");
    if (inter) {
        CHECK(size > 1, "the intercommunicators need 2 ranks or more");
        inter_makers();
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank == 0)
            printf("intercommunicator thread checks passed on %d ranks\n", size);
        MPI_Finalize();
        return 0;
    }
    MPI_Comm_dup(MPI_COMM_WORLD, &shared);

    if (size > 1) {
        pthread_t th[THREADS];
        for (int t = 0; t < THREADS; t++)
            pthread_create(&th[t], NULL, worker, (void *)(intptr_t)t);
        for (int t = 0; t < THREADS; t++)
            pthread_join(th[t], NULL);
        blocked_waits();
    }
    makers();
    MPI_Comm_free(&shared);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0)
        printf("all thread checks passed on %d ranks\n", size);
    MPI_Finalize();
    return 0;
}
