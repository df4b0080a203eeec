/* Point-to-point semantics, compiled against MPICH's own mpi.h (so the
 * handles, constants and MPI_Status layout are MPICH's) and run on fm's
 * libmpich.so.12 under fmrun. Every check prints what it saw; the program
 * exits 1 at the first failure.
 *
 *   p2p            the whole suite (2 or more ranks)
 *   p2p sabotage   rank 0 corrupts one byte of one message: must fail
 *   p2p fatal      rank 1 sends to an invalid rank under
 *                  MPI_ERRORS_ARE_FATAL: the job must end, naming it
 *   p2p abort      rank 1 calls MPI_Abort(7) while the others wait for it
 *   p2p die        rank 1 is killed while the others wait for it
 *   p2p short      only the short blocking sends (safe under any
 *                  FM_MPI_EAGER_LIMIT, 0 included); `short-sabotage`:
 *                  with one byte corrupted, which must fail
 *   p2p windows    only the windows both ways at once (2 or more
 *                  ranks); `windows-sabotage`: with one byte flipped,
 *                  which must fail
 *   p2p type-fuzz  datatype constructors with random and extreme
 *                  arguments under MPI_ERRORS_RETURN: every call returns,
 *                  with success or an error class, and the types built
 *                  answer their queries
 *   p2p minus-one  under FM_MPI_SOURCE_MINUS_ONE=any-source: every way of
 *                  receiving or probing from source -1 takes a message
 *                  from any rank (Open MPI's numbering, NetPIPE's -z)
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <stddef.h>
#include <limits.h>
#include "check.h"

static int rank, size, sabotage, is_fm;


static unsigned char pattern(int seed, long i) { return (unsigned char)(seed * 131 + i * 7 + (i >> 8)); }

static void fill(unsigned char *b, long n, int seed) {
    for (long i = 0; i < n; i++) b[i] = pattern(seed, i);
}

static void expect(const unsigned char *b, long n, int seed, const char *what) {
    for (long i = 0; i < n; i++)
        CHECK(b[i] == pattern(seed, i), "%s: byte %ld of %ld is %d, not %d", what, i, n, b[i], pattern(seed, i));
}

/* Messages of every size around the protocol's boundaries, both ways. */
static void sizes(void) {
    long limits[] = {0, 1, 2, 7, 8, 19, 20, 21, 4095, 4096, 4097, 65535, 65536, 65537, 65538,
                     131072, 1 << 20, (1 << 20) + 3, 3 << 20};
    int n = sizeof limits / sizeof limits[0];
    unsigned char *s = malloc(3 << 21), *r = malloc(3 << 21);
    for (int k = 0; k < n; k++) {
        long len = limits[k];
        if (rank < 2) {
            int other = 1 - rank;
            fill(s, len, k + rank);
            if (sabotage && rank == 0 && len > 100) s[len / 2] ^= 1;
            memset(r, 0xee, len + 1);
            MPI_Status st;
            MPI_Sendrecv(s, (int)len, MPI_BYTE, other, k, r, (int)len + 1, MPI_BYTE, other, k,
                         MPI_COMM_WORLD, &st);
            int c;
            MPI_Get_count(&st, MPI_BYTE, &c);
            CHECK(c == len && st.MPI_SOURCE == other && st.MPI_TAG == k,
                  "size %ld: count %d source %d tag %d", len, c, st.MPI_SOURCE, st.MPI_TAG);
            expect(r, len, k + other, "sizes");
            CHECK(r[len] == 0xee, "size %ld: a byte past the message was written", len);
        }
    }
    free(s);
    free(r);
    if (rank == 0) printf("sizes: ok\n");
}

/* Ranks 0 and 1 stream windows of non-blocking messages to each other at
 * once, one tag, sizes drawn around the eager limit and the rendezvous
 * data's pieces (256 KiB, or half a credit window): each must land whole,
 * in the order sent, with nothing past its buffer written. Then a
 * rendezvous message of several pieces into a shorter receive, both ways
 * at once: MPI_ERR_TRUNCATE, nothing written past the receive. With `sabotage`, rank 0 flips one byte of one message. */
static unsigned long long windows_state = 0x9e3779b97f4a7c15ULL;
static long windows_len(void) {
    static const long pick[] = {0, 1, 20, 4096, 65535, 65536, 65537, 131072, 262143, 262144,
                                262145, 262144 * 2 + 12, 1 << 20, 3 << 20};
    windows_state = windows_state * 6364136223846793005ULL + 1442695040888963407ULL;
    unsigned long long x = windows_state >> 33;
    if (x % 4 == 0) return (long)(x % (3 << 20));
    return pick[x % (sizeof pick / sizeof pick[0])];
}

static void windows(void) {
    enum { W = 12, ROUNDS = 6 };
    int other = 1 - rank;
    for (int round = 0; round < ROUNDS && rank < 2; round++) {
        unsigned char *s[W], *r[W];
        long len[W];
        MPI_Request req[2 * W];
        for (int i = 0; i < W; i++) {
            len[i] = windows_len(); /* the same draws on both ranks */
            s[i] = malloc(len[i] + 1);
            r[i] = malloc(len[i] + 1);
            fill(s[i], len[i], round * W + i + 100 * rank);
            if (sabotage && rank == 0 && round == ROUNDS - 1 && i == W / 2 && len[i] > 0) s[i][len[i] - 1] ^= 1;
            memset(r[i], 0xee, len[i] + 1);
        }
        /* Receives first in even rounds (all matched on arrival), sends
         * first in odd ones (arrivals wait as unexpected). */
        for (int i = 0; i < W; i++) {
            MPI_Request *rr = &req[round % 2 ? W + i : i], *sr = &req[round % 2 ? i : W + i];
            MPI_Irecv(r[i], (int)len[i], MPI_BYTE, other, 9, MPI_COMM_WORLD, rr);
            MPI_Isend(s[i], (int)len[i], MPI_BYTE, other, 9, MPI_COMM_WORLD, sr);
        }
        MPI_Status st[2 * W];
        MPI_Waitall(2 * W, req, st);
        for (int i = 0; i < W; i++) {
            MPI_Status *rs = &st[round % 2 ? W + i : i];
            int c;
            MPI_Get_count(rs, MPI_BYTE, &c);
            CHECK(c == len[i] && rs->MPI_SOURCE == other && rs->MPI_TAG == 9,
                  "windows: round %d message %d: count %d of %ld, source %d", round, i, c, len[i], rs->MPI_SOURCE);
            expect(r[i], len[i], round * W + i + 100 * other, "windows");
            CHECK(r[i][len[i]] == 0xee, "windows: round %d message %d: a byte past it was written", round, i);
            free(s[i]);
            free(r[i]);
        }
    }
    if (rank < 2) {
        long len = 3 * 262144 + 5, cap = 262144 + 7;
        unsigned char *b = malloc(len), *t = malloc(len);
        fill(b, len, 7 + rank);
        memset(t, 0, len);
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        MPI_Request q[2];
        MPI_Irecv(t, (int)cap, MPI_BYTE, other, 10, MPI_COMM_WORLD, &q[0]);
        MPI_Isend(b, (int)len, MPI_BYTE, other, 10, MPI_COMM_WORLD, &q[1]);
        MPI_Status st;
        int e = MPI_Wait(&q[0], &st), cls;
        MPI_Error_class(e, &cls);
        /* (The count of a truncated receive MPI leaves open: MPICH's is
         * neither the message's nor the buffer's.) */
        CHECK(cls == MPI_ERR_TRUNCATE && st.MPI_SOURCE == other && st.MPI_TAG == 10,
              "windows: a truncated receive: class %d, source %d, tag %d", cls, st.MPI_SOURCE, st.MPI_TAG);
        CHECK(MPI_Wait(&q[1], MPI_STATUS_IGNORE) == MPI_SUCCESS, "windows: the truncated message's send");
        for (long i = cap; i < len; i++) CHECK(t[i] == 0, "windows: byte %ld past the receive written", i);
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
        free(b);
        free(t);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) printf("windows: ok\n");
}

/* With MPI_ANY_SOURCE, each sender's messages still come in the order sent. */
static void any_source_order(void) {
    const int per = 40;
    if (rank == 0) {
        int next[64] = {0};
        for (int i = 0; i < per * (size - 1); i++) {
            int v[2];
            MPI_Status st;
            MPI_Recv(v, 2, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
            CHECK(v[0] == st.MPI_SOURCE && v[1] == next[st.MPI_SOURCE] && st.MPI_TAG == v[1] % 3,
                  "from %d: message %d (tag %d), expected %d", st.MPI_SOURCE, v[1], st.MPI_TAG,
                  next[st.MPI_SOURCE]);
            next[st.MPI_SOURCE]++;
        }
        printf("any source order: ok\n");
    } else {
        for (int i = 0; i < per; i++) {
            int v[2] = {rank, i};
            MPI_Send(v, 2, MPI_INT, 0, i % 3, MPI_COMM_WORLD);
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

/* A receive for one tag is not matched by an earlier message of another,
 * and messages of one tag stay in order around it. */
static void tag_matching(void) {
    if (rank == 0) {
        int a = 1, b = 2, c = 3;
        MPI_Send(&a, 1, MPI_INT, 1, 10, MPI_COMM_WORLD);
        MPI_Send(&b, 1, MPI_INT, 1, 20, MPI_COMM_WORLD);
        MPI_Send(&c, 1, MPI_INT, 1, 10, MPI_COMM_WORLD);
    } else if (rank == 1) {
        int x, y, z;
        MPI_Recv(&y, 1, MPI_INT, 0, 20, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Recv(&x, 1, MPI_INT, 0, 10, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Recv(&z, 1, MPI_INT, 0, MPI_ANY_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        CHECK(x == 1 && y == 2 && z == 3, "got %d %d %d", x, y, z);
        printf("tag matching: ok\n");
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

/* A receive too small: MPI_ERR_TRUNCATE under MPI_ERRORS_RETURN, the
 * status names the message, and nothing past the buffer is written. */
static void truncation(void) {
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    long lens[] = {16, 200000};
    for (int k = 0; k < 2; k++) {
        long len = lens[k];
        unsigned char *b = malloc(len);
        if (rank == 0) {
            fill(b, len, 5);
            MPI_Send(b, (int)len, MPI_BYTE, 1, 4, MPI_COMM_WORLD);
        } else if (rank == 1) {
            memset(b, 0, len);
            MPI_Status st;
            int e = MPI_Recv(b, (int)(len / 2), MPI_BYTE, 0, 4, MPI_COMM_WORLD, &st);
            int cls;
            MPI_Error_class(e, &cls);
            CHECK(cls == MPI_ERR_TRUNCATE, "len %ld: error class %d, not MPI_ERR_TRUNCATE", len, cls);
            CHECK(st.MPI_SOURCE == 0 && st.MPI_TAG == 4, "status %d %d", st.MPI_SOURCE, st.MPI_TAG);
            /* What fits may or may not have been written (MPI leaves it
             * undefined); nothing past the buffer may be. */
            for (long i = len / 2; i < len; i++) CHECK(b[i] == 0, "byte %ld past the buffer written", i);
        }
        free(b);
    }
    if (rank == 1) printf("truncation: ok\n");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    MPI_Barrier(MPI_COMM_WORLD);
}

/* An Issend is not complete before its receive is posted; an Isend of a
 * small message is (the control, which shows the check can fail). */
static void ssend_completion(void) {
    for (int sync = 1; sync >= 0; sync--) {
        int v = 7, w = 0, flag = 0;
        if (rank == 0) {
            MPI_Request q;
            if (sync) MPI_Issend(&v, 1, MPI_INT, 1, 30, MPI_COMM_WORLD, &q);
            else MPI_Isend(&v, 1, MPI_INT, 1, 30, MPI_COMM_WORLD, &q);
            for (int i = 0; i < 200 && !flag; i++) MPI_Test(&q, &flag, MPI_STATUS_IGNORE);
            CHECK(flag == !sync, "%s: complete=%d before the receive was posted", sync ? "Issend" : "Isend", flag);
            MPI_Send(&v, 1, MPI_INT, 1, 31, MPI_COMM_WORLD); /* now post it */
            if (!flag) MPI_Wait(&q, MPI_STATUS_IGNORE);
        } else if (rank == 1) {
            MPI_Recv(&w, 1, MPI_INT, 0, 31, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Recv(&w, 1, MPI_INT, 0, 30, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            CHECK(w == 7, "got %d", w);
        }
        MPI_Barrier(MPI_COMM_WORLD);
    }
    /* Blocking Ssend of a large message too. */
    if (rank < 2) {
        long len = 300000;
        unsigned char *b = malloc(len);
        if (rank == 0) {
            fill(b, len, 9);
            MPI_Ssend(b, (int)len, MPI_BYTE, 1, 32, MPI_COMM_WORLD);
        } else {
            MPI_Recv(b, (int)len, MPI_BYTE, 0, 32, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            expect(b, len, 9, "ssend");
        }
        free(b);
    }
    if (rank == 0) printf("ssend completion: ok\n");
}

/* Probe and Iprobe see a message without taking it; Get_count sizes it. */
static void probing(void) {
    if (rank == 0) {
        double d[5] = {1, 2, 3, 4, 5};
        MPI_Send(d, 5, MPI_DOUBLE, 1, 40, MPI_COMM_WORLD);
        MPI_Send(d, 3, MPI_DOUBLE, 1, 41, MPI_COMM_WORLD);
    } else if (rank == 1) {
        MPI_Status st;
        int flag = 0, c;
        MPI_Iprobe(0, 99, MPI_COMM_WORLD, &flag, &st);
        CHECK(!flag, "Iprobe found a message of a tag never sent");
        MPI_Probe(0, 41, MPI_COMM_WORLD, &st);
        MPI_Get_count(&st, MPI_DOUBLE, &c);
        CHECK(c == 3 && st.MPI_TAG == 41, "probe: count %d tag %d", c, st.MPI_TAG);
        MPI_Get_count(&st, MPI_INT, &c);
        CHECK(c == 6, "probe: %d ints", c);
        MPI_Get_count(&st, MPI_LONG_DOUBLE, &c);
        CHECK(c == MPI_UNDEFINED, "probe: %d long doubles", c);
        while (!flag) MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st);
        CHECK(st.MPI_TAG == 40, "the first message is tag %d", st.MPI_TAG);
        double d[5];
        MPI_Recv(d, 5, MPI_DOUBLE, 0, 40, MPI_COMM_WORLD, &st);
        CHECK(d[4] == 5, "d[4] %f", d[4]);
        MPI_Recv(d, 5, MPI_DOUBLE, 0, 41, MPI_COMM_WORLD, &st);
        MPI_Get_count(&st, MPI_DOUBLE, &c);
        CHECK(c == 3 && d[2] == 3, "count %d", c);
        printf("probing: ok\n");
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

/* Waitany, Testany, Testall, Request_free and Cancel. */
static void completion_calls(void) {
    if (rank < 2) {
        int other = 1 - rank, in[4] = {0}, out[4] = {10, 11, 12, 13};
        MPI_Request q[4], s[4];
        for (int i = 0; i < 4; i++) MPI_Irecv(&in[i], 1, MPI_INT, other, 50 + i, MPI_COMM_WORLD, &q[i]);
        for (int i = 3; i >= 0; i--) MPI_Isend(&out[i], 1, MPI_INT, other, 50 + i, MPI_COMM_WORLD, &s[i]);
        int seen = 0;
        for (int k = 0; k < 4; k++) {
            int idx;
            MPI_Status st;
            MPI_Waitany(4, q, &idx, &st);
            CHECK(idx >= 0 && idx < 4 && q[idx] == MPI_REQUEST_NULL && st.MPI_TAG == 50 + idx, "waitany %d", idx);
            seen |= 1 << idx;
        }
        int idx, flag;
        MPI_Waitany(4, q, &idx, MPI_STATUS_IGNORE);
        CHECK(seen == 15 && idx == MPI_UNDEFINED, "waitany of nulls: %d", idx);
        MPI_Testany(4, q, &idx, &flag, MPI_STATUS_IGNORE);
        CHECK(flag && idx == MPI_UNDEFINED, "testany of nulls");
        for (int i = 0; i < 4; i++) CHECK(in[i] == 10 + i, "in[%d] = %d", i, in[i]);
        flag = 0;
        while (!flag) MPI_Testall(4, s, &flag, MPI_STATUSES_IGNORE);
        for (int i = 0; i < 4; i++) CHECK(s[i] == MPI_REQUEST_NULL, "testall left request %d", i);
        /* A freed send still arrives. */
        MPI_Request f;
        MPI_Isend(&out[0], 1, MPI_INT, other, 60, MPI_COMM_WORLD, &f);
        MPI_Request_free(&f);
        CHECK(f == MPI_REQUEST_NULL, "freed request not nulled");
        int got = 0;
        MPI_Recv(&got, 1, MPI_INT, other, 60, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        CHECK(got == 10, "freed send delivered %d", got);
        /* A cancelled receive completes, cancelled, and takes nothing. */
        MPI_Request c;
        MPI_Status st;
        MPI_Irecv(&got, 1, MPI_INT, other, 61, MPI_COMM_WORLD, &c);
        MPI_Cancel(&c);
        MPI_Wait(&c, &st);
        MPI_Test_cancelled(&st, &flag);
        CHECK(flag, "not cancelled");
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) printf("completion calls: ok\n");
}

/* Small MPI_Isends, many at once: most complete as they start (FM takes
 * them at once), the rest once credit returns. Sends complete as they
 * start may share one handle (MPICH 4.0.2's do, and fm's), never with a
 * receive; every completion call treats them as sends, and the data
 * arrives whole, in order, however each send's request was completed or
 * freed. */
static void completed_sends(void) {
    enum { N = 48 };
    if (rank < 2) {
        int other = 1 - rank, out[N], in[N], flag, idx, n, idxs[N];
        MPI_Request s[N], r[N];
        MPI_Status st;
        for (int i = 0; i < N; i++) out[i] = 1000 * rank + i;
        for (int i = 0; i < N; i++) MPI_Irecv(&in[i], 1, MPI_INT, other, 70, MPI_COMM_WORLD, &r[i]);
        for (int i = 0; i < N; i++) MPI_Isend(&out[i], 1, MPI_INT, other, 70, MPI_COMM_WORLD, &s[i]);
        for (int i = 0; i < N; i++) {
            CHECK(s[i] != MPI_REQUEST_NULL, "send %d has no request", i);
            for (int j = 0; j < N; j++) CHECK(s[i] != r[j], "send %d and receive %d share a handle", i, j);
        }
        MPI_Wait(&s[0], &st);
        CHECK(s[0] == MPI_REQUEST_NULL, "wait left send 0's request");
        for (flag = 0; !flag;) MPI_Test(&s[1], &flag, &st);
        CHECK(s[1] == MPI_REQUEST_NULL, "test left send 1's request");
        for (flag = 0; !flag;) MPI_Request_get_status(s[2], &flag, &st);
        CHECK(s[2] != MPI_REQUEST_NULL, "get_status freed send 2's request");
        MPI_Wait(&s[2], MPI_STATUS_IGNORE);
        MPI_Request_free(&s[3]);
        CHECK(s[3] == MPI_REQUEST_NULL, "freed send 3's request not nulled");
        MPI_Waitany(N, s, &idx, &st);
        CHECK(idx >= 4 && idx < N && s[idx] == MPI_REQUEST_NULL, "waitany took %d", idx);
        MPI_Testsome(N, s, &n, idxs, MPI_STATUSES_IGNORE);
        CHECK(n == MPI_UNDEFINED || (n >= 0 && n <= N - 5), "testsome: %d", n);
        for (int k = 0; n != MPI_UNDEFINED && k < n; k++)
            CHECK(s[idxs[k]] == MPI_REQUEST_NULL, "testsome left send %d", idxs[k]);
        MPI_Waitall(N, s, MPI_STATUSES_IGNORE);
        for (int i = 0; i < N; i++) CHECK(s[i] == MPI_REQUEST_NULL, "waitall left send %d", i);
        MPI_Waitall(N, r, MPI_STATUSES_IGNORE);
        for (int i = 0; i < N; i++) CHECK(in[i] == 1000 * other + i, "message %d: %d", i, in[i]);
        /* A persistent send started again and again: its handle stays. */
        MPI_Request p;
        MPI_Send_init(&out[0], 1, MPI_INT, other, 71, MPI_COMM_WORLD, &p);
        for (int k = 0; k < 2 * N; k++) {
            out[0] = k;
            MPI_Start(&p);
            MPI_Wait(&p, MPI_STATUS_IGNORE);
            CHECK(p != MPI_REQUEST_NULL, "a persistent send's request was nulled");
        }
        MPI_Request_free(&p);
        for (int k = 0; k < 2 * N; k++) {
            MPI_Recv(&in[0], 1, MPI_INT, other, 71, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            CHECK(in[0] == k, "persistent send %d brought %d", k, in[0]);
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) printf("completed sends: ok\n");
}

/* Sendrecv_replace, Waitsome/Testsome, and matched probes. */
static void more_calls(void) {
    if (rank < 2) {
        int other = 1 - rank;
        MPI_Status st;
        long len = 100000; /* by rendezvous */
        unsigned char *b = malloc(len);
        fill(b, len, 40 + rank);
        MPI_Sendrecv_replace(b, (int)len, MPI_BYTE, other, 70, other, 70, MPI_COMM_WORLD, &st);
        expect(b, len, 40 + other, "sendrecv_replace");
        int v = rank + 1, c;
        MPI_Sendrecv_replace(&v, 1, MPI_INT, other, 71, other, 71, MPI_COMM_WORLD, &st);
        MPI_Get_count(&st, MPI_INT, &c);
        CHECK(v == other + 1 && c == 1 && st.MPI_SOURCE == other, "sendrecv_replace: %d", v);

        int in[3] = {0}, out[3] = {1, 2, 3}, idx[3], outc, got = 0;
        MPI_Request q[3];
        for (int i = 0; i < 3; i++) MPI_Irecv(&in[i], 1, MPI_INT, other, 80 + i, MPI_COMM_WORLD, &q[i]);
        for (int i = 2; i >= 0; i--) MPI_Send(&out[i], 1, MPI_INT, other, 80 + i, MPI_COMM_WORLD);
        while (got < 3) {
            MPI_Status sts[3];
            MPI_Waitsome(3, q, &outc, idx, sts);
            CHECK(outc >= 1 && outc <= 3 - got, "waitsome gave %d", outc);
            for (int k = 0; k < outc; k++)
                CHECK(q[idx[k]] == MPI_REQUEST_NULL && sts[k].MPI_TAG == 80 + idx[k], "waitsome entry %d", k);
            got += outc;
        }
        MPI_Waitsome(3, q, &outc, idx, MPI_STATUSES_IGNORE);
        CHECK(outc == MPI_UNDEFINED, "waitsome of nulls gave %d", outc);
        for (int i = 0; i < 3; i++) CHECK(in[i] == i + 1, "in[%d] = %d", i, in[i]);
        if (rank == 0) {
            MPI_Irecv(&in[0], 1, MPI_INT, other, 90, MPI_COMM_WORLD, &q[0]);
            MPI_Testsome(1, q, &outc, idx, MPI_STATUSES_IGNORE);
            CHECK(outc == 0, "testsome before the send gave %d", outc);
            MPI_Send(&v, 1, MPI_INT, other, 91, MPI_COMM_WORLD);
            do MPI_Testsome(1, q, &outc, idx, MPI_STATUSES_IGNORE); while (outc == 0);
            CHECK(outc == 1 && idx[0] == 0 && in[0] == 42, "testsome gave %d, %d", outc, in[0]);
        } else {
            int x = 42;
            MPI_Recv(&v, 1, MPI_INT, other, 91, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(&x, 1, MPI_INT, other, 90, MPI_COMM_WORLD);
        }

        /* A matched probe takes its message out of matching: a later
         * receive of the same tag gets the next one. */
        if (rank == 0) {
            int a = 1, z = 2;
            MPI_Send(&a, 1, MPI_INT, other, 95, MPI_COMM_WORLD);
            MPI_Send(&z, 1, MPI_INT, other, 95, MPI_COMM_WORLD);
            fill(b, len, 96);
            MPI_Send(b, (int)len, MPI_BYTE, other, 96, MPI_COMM_WORLD);
        } else {
            MPI_Message msg, big;
            int x = 0, y = 0, flag = 0;
            MPI_Mprobe(other, 95, MPI_COMM_WORLD, &msg, &st);
            MPI_Get_count(&st, MPI_INT, &c);
            CHECK(c == 1 && st.MPI_TAG == 95, "mprobe: count %d", c);
            MPI_Recv(&y, 1, MPI_INT, other, 95, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Mrecv(&x, 1, MPI_INT, &msg, &st);
            CHECK(x == 1 && y == 2 && msg == MPI_MESSAGE_NULL, "mrecv %d, recv %d", x, y);
            while (!flag) MPI_Improbe(MPI_ANY_SOURCE, 96, MPI_COMM_WORLD, &flag, &big, &st);
            MPI_Get_count(&st, MPI_BYTE, &c);
            CHECK(c == len && st.MPI_SOURCE == other, "improbe: count %d", c);
            MPI_Request r;
            memset(b, 0, len);
            MPI_Imrecv(b, (int)len, MPI_BYTE, &big, &r);
            MPI_Wait(&r, &st);
            expect(b, len, 96, "imrecv");
            MPI_Mprobe(MPI_PROC_NULL, 0, MPI_COMM_WORLD, &msg, &st);
            CHECK(msg == MPI_MESSAGE_NO_PROC && st.MPI_SOURCE == MPI_PROC_NULL, "mprobe of proc null");
            MPI_Mrecv(&x, 1, MPI_INT, &msg, &st);
            CHECK(st.MPI_SOURCE == MPI_PROC_NULL, "mrecv of no proc");
        }
        free(b);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) printf("more calls: ok\n");
}

/* Buffered sends complete before their receive is posted, within the
 * attached buffer; beyond it they fail with MPI_ERR_BUFFER. */
static void buffered_sends(void) {
    if (rank < 2) {
        int other = 1 - rank;
        long len = 100000;
        int size = (int)(2 * (len + MPI_BSEND_OVERHEAD));
        char *attached = malloc(size);
        unsigned char *b = malloc(len), *r = malloc(len);
        MPI_Buffer_attach(attached, size);
        fill(b, len, 50 + rank);
        MPI_Bsend(b, (int)len, MPI_BYTE, other, 110, MPI_COMM_WORLD);
        fill(b, len, 60 + rank); /* the first send took a copy */
        MPI_Request q;
        MPI_Ibsend(b, (int)len, MPI_BYTE, other, 111, MPI_COMM_WORLD, &q);
        int flag = 0;
        MPI_Test(&q, &flag, MPI_STATUS_IGNORE);
        CHECK(flag, "an Ibsend is complete once copied");
        /* A message larger than the whole buffer never fits (whether the
         * two above are still in it depends on the peer's progress). */
        char *big = calloc(size, 1);
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        int cls, e = MPI_Bsend(big, size, MPI_BYTE, other, 112, MPI_COMM_WORLD);
        MPI_Error_class(e, &cls);
        CHECK(cls == MPI_ERR_BUFFER, "a Bsend beyond the buffer: class %d", cls);
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
        free(big);
        /* Both sides sent before either receives: buffered, so no deadlock. */
        MPI_Recv(r, (int)len, MPI_BYTE, other, 111, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        expect(r, len, 60 + other, "ibsend");
        MPI_Recv(r, (int)len, MPI_BYTE, other, 110, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        expect(r, len, 50 + other, "bsend");
        void *back;
        int back_size;
        MPI_Buffer_detach(&back, &back_size);
        CHECK(back == attached && back_size == size, "detach gave %p %d", back, back_size);
        free(attached);
        free(b);
        free(r);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) printf("buffered sends: ok\n");
}

/* Persistent requests: made once, started many times, inactive between. */
static void persistent_requests(void) {
    if (rank < 2) {
        int other = 1 - rank;
        long lens[2] = {64, 150000}; /* eager and rendezvous */
        for (int k = 0; k < 2; k++) {
            long len = lens[k];
            unsigned char *s = malloc(len), *r = malloc(len);
            MPI_Request q[2];
            MPI_Send_init(s, (int)len, MPI_BYTE, other, 100 + k, MPI_COMM_WORLD, &q[0]);
            MPI_Recv_init(r, (int)len, MPI_BYTE, other, 100 + k, MPI_COMM_WORLD, &q[1]);
            int flag = 0;
            MPI_Status st;
            MPI_Test(&q[1], &flag, &st);
            CHECK(flag && q[1] != MPI_REQUEST_NULL, "an inactive persistent request tests complete");
            for (int round = 0; round < 5; round++) {
                fill(s, len, 200 + 10 * round + rank);
                MPI_Startall(2, q);
                MPI_Status sts[2];
                MPI_Waitall(2, q, sts);
                CHECK(q[0] != MPI_REQUEST_NULL && q[1] != MPI_REQUEST_NULL, "persistent requests nulled");
                int c;
                MPI_Get_count(&sts[1], MPI_BYTE, &c);
                CHECK(c == len && sts[1].MPI_SOURCE == other, "persistent round %d: count %d", round, c);
                expect(r, len, 200 + 10 * round + other, "persistent");
            }
            /* Started with Start and finished with Wait too. */
            MPI_Start(&q[1]);
            MPI_Start(&q[0]);
            MPI_Wait(&q[0], MPI_STATUS_IGNORE);
            MPI_Wait(&q[1], MPI_STATUS_IGNORE);
            CHECK(q[0] != MPI_REQUEST_NULL, "wait nulled a persistent request");
            MPI_Request_free(&q[0]);
            MPI_Request_free(&q[1]);
            CHECK(q[0] == MPI_REQUEST_NULL && q[1] == MPI_REQUEST_NULL, "freed persistent requests not nulled");
            free(s);
            free(r);
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) printf("persistent requests: ok\n");
}

/* MPI_PROC_NULL, zero bytes and messages to oneself. */
static void edges(void) {
    MPI_Status st;
    int v = 3, w = 0, c = -1;
    MPI_Send(&v, 1, MPI_INT, MPI_PROC_NULL, 1, MPI_COMM_WORLD);
    MPI_Recv(&w, 1, MPI_INT, MPI_PROC_NULL, 1, MPI_COMM_WORLD, &st);
    MPI_Get_count(&st, MPI_INT, &c);
    CHECK(st.MPI_SOURCE == MPI_PROC_NULL && st.MPI_TAG == MPI_ANY_TAG && c == 0 && w == 0, "proc null");
    /* To oneself: small and rendezvous-sized, nonblocking send first. */
    long len = 1 << 18;
    unsigned char *s = malloc(len), *r = malloc(len);
    fill(s, len, 77);
    MPI_Request q;
    MPI_Isend(&v, 1, MPI_INT, rank, 2, MPI_COMM_WORLD, &q);
    MPI_Recv(&w, 1, MPI_INT, rank, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Wait(&q, MPI_STATUS_IGNORE);
    CHECK(w == 3, "self: %d", w);
    MPI_Irecv(r, (int)len, MPI_BYTE, rank, 3, MPI_COMM_WORLD, &q);
    MPI_Send(s, (int)len, MPI_BYTE, rank, 3, MPI_COMM_WORLD);
    MPI_Wait(&q, &st);
    expect(r, len, 77, "self large");
    /* Zero bytes carry their envelope. */
    MPI_Sendrecv(NULL, 0, MPI_BYTE, (rank + 1) % size, 5, NULL, 0, MPI_BYTE, (rank + size - 1) % size, 5,
                 MPI_COMM_WORLD, &st);
    MPI_Get_count(&st, MPI_BYTE, &c);
    CHECK(c == 0 && st.MPI_SOURCE == (rank + size - 1) % size && st.MPI_TAG == 5, "zero bytes");
    free(s);
    free(r);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) printf("edges: ok\n");
}

/* A duplicated communicator's messages never match the original's. */
static void dup_isolation(void) {
    MPI_Comm d;
    MPI_Comm_dup(MPI_COMM_WORLD, &d);
    int dr, ds;
    MPI_Comm_rank(d, &dr);
    MPI_Comm_size(d, &ds);
    CHECK(dr == rank && ds == size, "dup rank %d size %d", dr, ds);
    if (rank == 0) {
        int a = 1, b = 2;
        MPI_Send(&a, 1, MPI_INT, 1, 7, d);
        MPI_Send(&b, 1, MPI_INT, 1, 7, MPI_COMM_WORLD);
    } else if (rank == 1) {
        int x = 0, y = 0;
        MPI_Recv(&y, 1, MPI_INT, 0, 7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Recv(&x, 1, MPI_INT, 0, 7, d, MPI_STATUS_IGNORE);
        CHECK(x == 1 && y == 2, "dup got %d, world got %d", x, y);
    }
    MPI_Barrier(d);
    MPI_Comm_free(&d);
    CHECK(d == MPI_COMM_NULL, "freed communicator not nulled");
    if (rank == 0) printf("dup isolation: ok\n");
}

/* Many communicators at once, each its own: a message on each, all sent
 * before any is received, received in the reverse order, each on the
 * communicator it was sent on. Then more made and freed one after another
 * than a process may hold at once (their ids must come back), and, on
 * fm, the clear error past the limit. */
static void many_communicators(void) {
    enum { LIVE = 300, CYCLES = 4200, FM_LIMIT = 4094 };
    static MPI_Comm c[FM_LIMIT + 1];
    for (int i = 0; i < LIVE; i++) {
        if (i % 3 == 2)
            MPI_Comm_split(c[i - 1], 7, rank, &c[i]);
        else
            MPI_Comm_dup(i ? c[i - 1] : MPI_COMM_WORLD, &c[i]);
    }
    if (rank == 0)
        for (int i = 0; i < LIVE; i++) MPI_Send(&i, 1, MPI_INT, 1, 5, c[i]);
    if (rank == 1)
        for (int i = LIVE - 1; i >= 0; i--) {
            int v = -1;
            MPI_Recv(&v, 1, MPI_INT, 0, 5, c[i], MPI_STATUS_IGNORE);
            CHECK(v == i, "communicator %d received the message sent on %d", i, v);
        }
    for (int i = 0; i < LIVE; i++) MPI_Comm_free(&c[i]);
    /* Ranks 0 and 1 hold communicators the others do not; one made from
     * MPI_COMM_WORLD afterwards must still be told apart from them. */
    MPI_Comm half, hd[3], all;
    MPI_Comm_split(MPI_COMM_WORLD, rank < 2, rank, &half);
    if (rank < 2)
        for (int k = 0; k < 3; k++) MPI_Comm_dup(half, &hd[k]);
    MPI_Comm_dup(MPI_COMM_WORLD, &all);
    if (rank == 0) {
        for (int k = 0; k < 3; k++) {
            int v = 100 + k;
            MPI_Send(&v, 1, MPI_INT, 1, 6, hd[k]);
        }
        int v = 200;
        MPI_Send(&v, 1, MPI_INT, 1, 6, all);
    } else if (rank == 1) {
        int v = -1;
        MPI_Recv(&v, 1, MPI_INT, 0, 6, all, MPI_STATUS_IGNORE);
        CHECK(v == 200, "the world's duplicate received %d", v);
        for (int k = 2; k >= 0; k--) {
            MPI_Recv(&v, 1, MPI_INT, 0, 6, hd[k], MPI_STATUS_IGNORE);
            CHECK(v == 100 + k, "duplicate %d of the half received %d", k, v);
        }
    }
    if (rank < 2)
        for (int k = 0; k < 3; k++) MPI_Comm_free(&hd[k]);
    MPI_Comm_free(&all);
    MPI_Comm_free(&half);
    for (int i = 0; i < CYCLES; i++) {
        MPI_Comm d;
        MPI_Comm_dup(MPI_COMM_WORLD, &d);
        MPI_Comm_free(&d);
    }
    if (is_fm) {
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        int n = 0, rc = MPI_SUCCESS;
        while (n <= FM_LIMIT && (rc = MPI_Comm_dup(MPI_COMM_WORLD, &c[n])) == MPI_SUCCESS) n++;
        CHECK(n == FM_LIMIT && rc == MPI_ERR_OTHER, "%d communicators at once, then error %d", n, rc);
        CHECK(c[n] == MPI_COMM_NULL, "the failed MPI_Comm_dup left communicator %#x", (unsigned)c[n]);
        while (n > 0) MPI_Comm_free(&c[--n]);
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) printf("many communicators: ok\n");
}

/* Groups and the communicators made from them: split (by colour and key,
 * and by host), create, compare, translate; traffic on each. */
static void communicators(void) {
    int tag_ub_found = 0, *tag_ub = NULL;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &tag_ub_found);
    CHECK(tag_ub_found && *tag_ub >= 32767, "MPI_TAG_UB");

    /* One colour, keys reversing the order: the same members, reordered. */
    MPI_Comm rev;
    MPI_Comm_split(MPI_COMM_WORLD, 0, -rank, &rev);
    int r, n, cmp;
    MPI_Comm_rank(rev, &r);
    MPI_Comm_size(rev, &n);
    CHECK(n == size && r == size - 1 - rank, "reversed: rank %d of %d", r, n);
    MPI_Comm_compare(MPI_COMM_WORLD, rev, &cmp);
    CHECK(size == 1 ? cmp == MPI_CONGRUENT : cmp == MPI_SIMILAR, "compare(world, reversed) = %d", cmp);
    /* A ring on it: each gets its predecessor's rank in it. */
    int got = -1;
    MPI_Sendrecv(&r, 1, MPI_INT, (r + 1) % n, 3, &got, 1, MPI_INT, (r + n - 1) % n, 3, rev, MPI_STATUS_IGNORE);
    CHECK(got == (r + n - 1) % n, "ring on the reversed communicator: got %d", got);

    /* Odd and even ranks; MPI_UNDEFINED leaves the last rank out. */
    MPI_Comm half;
    int color = rank == size - 1 && size > 2 ? MPI_UNDEFINED : rank % 2;
    MPI_Comm_split(MPI_COMM_WORLD, color, rank, &half);
    if (color == MPI_UNDEFINED) {
        CHECK(half == MPI_COMM_NULL, "left out, but given a communicator");
    } else {
        MPI_Comm_rank(half, &r);
        MPI_Comm_size(half, &n);
        CHECK(r == rank / 2, "half: rank %d", r);
        int sum = rank, v;
        for (int step = 1; step < n; step++) {
            MPI_Sendrecv(&rank, 1, MPI_INT, (r + step) % n, 4, &v, 1, MPI_INT, (r + n - step) % n, 4, half, MPI_STATUS_IGNORE);
            CHECK(v % 2 == rank % 2, "half: %d from the other half", v);
            sum += v;
        }
        MPI_Comm_free(&half);
    }

    /* By host: the ranks that share this one's FM_HOST. */
    MPI_Comm local;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local);
    MPI_Comm_size(local, &n);
    const char *h = getenv("FM_HOST");
    char mine[64] = {0}, theirs[64];
    snprintf(mine, sizeof mine, "%s", h ? h : "");
    int same = 1;
    for (int step = 1; step < size; step++) {
        MPI_Sendrecv(mine, 64, MPI_CHAR, (rank + step) % size, 5, theirs, 64, MPI_CHAR, (rank + size - step) % size, 5,
                     MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        same += !strcmp(mine, theirs);
    }
    CHECK(n == same, "split by host: %d ranks, but %d share host %s", n, same, mine);
    MPI_Comm_free(&local);

    /* A group without rank 0, and the communicator made of it. */
    MPI_Group world, rest;
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    int zero = 0, gs, gr;
    MPI_Group_excl(world, 1, &zero, &rest);
    MPI_Group_size(rest, &gs);
    MPI_Group_rank(rest, &gr);
    CHECK(gs == size - 1 && gr == (rank == 0 ? MPI_UNDEFINED : rank - 1), "group: %d of %d", gr, gs);
    if (gs >= 2) {
        int in[2] = {0, 1}, out[2];
        MPI_Group_translate_ranks(rest, 2, in, world, out);
        CHECK(out[0] == 1 && out[1] == 2, "translate: %d %d", out[0], out[1]);
    }
    MPI_Group again;
    int all[64];
    for (int i = 0; i < size && i < 64; i++) all[i] = i;
    MPI_Group_incl(world, size, all, &again);
    MPI_Group_compare(world, again, &cmp);
    CHECK(cmp == MPI_IDENT, "incl of all: %d", cmp);
    MPI_Comm made;
    MPI_Comm_create(MPI_COMM_WORLD, rest, &made);
    if (rank == 0) {
        CHECK(made == MPI_COMM_NULL, "rank 0 got a communicator of a group without it");
    } else {
        MPI_Comm_rank(made, &r);
        CHECK(r == rank - 1, "created: rank %d", r);
        MPI_Barrier(made);
        MPI_Comm_free(&made);
    }
    MPI_Group_free(&world);
    MPI_Group_free(&rest);
    MPI_Group_free(&again);
    CHECK(world == MPI_GROUP_NULL, "freed group not nulled");
    MPI_Comm_free(&rev);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) printf("communicators: ok\n");
}

/* Every derived datatype constructor against a hand-packed reference:
 * its size and extent, MPI_Pack's bytes, and the same elements sent to
 * the other rank as the type and received as plain bytes (and back). */
struct rec { char c; double d; int i; };

static void check_type(MPI_Datatype t, const void *elems, int count, const unsigned char *ref, int refbytes,
                       const char *what) {
    int size;
    MPI_Type_size(t, &size);
    CHECK(size * count == refbytes, "%s: size %d x %d, reference %d", what, size, count, refbytes);
    unsigned char packed[4096];
    int pos = 0;
    MPI_Pack(elems, count, t, packed, sizeof packed, &pos, MPI_COMM_WORLD);
    CHECK(pos == refbytes && !memcmp(packed, ref, refbytes), "%s: MPI_Pack differs from the reference", what);
    if (rank < 2) {
        int other = 1 - rank;
        unsigned char got[4096];
        /* The type out, plain bytes in: the wire carries the packed data. */
        MPI_Sendrecv(elems, count, t, other, 120, got, refbytes, MPI_BYTE, other, 120, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
        CHECK(!memcmp(got, ref, refbytes), "%s: sent as the type, received as bytes", what);
        /* Bytes in, the type out: received (by MPI_Recv, by MPI_Mrecv, and
         * in place by MPI_Sendrecv_replace, each rank its own bytes) into
         * an area, then packed again to compare. */
        static unsigned char area[3][8192];
        unsigned char mine[4096], theirs[4096], again[4096];
        for (int i = 0; i < refbytes; i++) mine[i] = ref[i] ^ (rank + 1), theirs[i] = ref[i] ^ (other + 1);
        memset(area, 0, sizeof area);
        unsigned char *at[3] = {area[0] + 2048, area[1] + 2048, area[2] + 2048};
        MPI_Sendrecv(ref, refbytes, MPI_BYTE, other, 121, at[0], count, t, other, 121, MPI_COMM_WORLD,
                     MPI_STATUS_IGNORE);
        MPI_Send(ref, refbytes, MPI_BYTE, other, 122, MPI_COMM_WORLD);
        MPI_Message msg;
        MPI_Status st;
        MPI_Mprobe(other, 122, MPI_COMM_WORLD, &msg, &st);
        MPI_Mrecv(at[1], count, t, &msg, &st);
        int upos = 0;
        MPI_Unpack(mine, refbytes, &upos, at[2], count, t, MPI_COMM_WORLD);
        MPI_Sendrecv_replace(at[2], count, t, other, 123, other, 123, MPI_COMM_WORLD, &st);
        const unsigned char *want[3] = {ref, ref, theirs};
        const char *how[3] = {"MPI_Recv", "MPI_Mrecv", "MPI_Sendrecv_replace"};
        for (int k = 0; k < 3; k++) {
            pos = 0;
            MPI_Pack(at[k], count, t, again, sizeof again, &pos, MPI_COMM_WORLD);
            CHECK(pos == refbytes && !memcmp(again, want[k], refbytes), "%s: received as the type by %s", what,
                  how[k]);
        }
    }
}

/* C's pair types (MINLOC and MAXLOC's value-and-index structs): size the
 * data's alone, extent and true extent the C struct's, as MPICH says; three
 * elements sent from an array of the struct arrive in the members of
 * another, the padding untouched; Get_count 3, Get_elements 6 (on fm:
 * Debian's MPICH 4.0 divides by zero in MPI_Get_elements of a pair type). */
#define PAIR(TYPE, VT)                                                              \
    do {                                                                            \
        struct pair { VT v; int i; } a[3], b[3];                                    \
        int size;                                                                   \
        MPI_Aint lb, ext, tlb, text;                                                \
        MPI_Type_size(TYPE, &size);                                                 \
        MPI_Type_get_extent(TYPE, &lb, &ext);                                       \
        MPI_Type_get_true_extent(TYPE, &tlb, &text);                                \
        CHECK(size == (int)(sizeof(VT) + sizeof(int)) && lb == 0 &&                 \
                  ext == (MPI_Aint)sizeof(struct pair) && tlb == 0 &&               \
                  text == (MPI_Aint)(offsetof(struct pair, i) + sizeof(int)),        \
              #TYPE ": size %d extent %ld true extent %ld", size, (long)ext, (long)text); \
        memset(a, 0x5a, sizeof a);                                                  \
        memset(b, 0xee, sizeof b);                                                  \
        for (int k = 0; k < 3; k++) {                                               \
            a[k].v = (VT)(10 * k + 1 + rank);                                       \
            a[k].i = 100 + k;                                                       \
        }                                                                           \
        MPI_Status st;                                                              \
        MPI_Sendrecv(a, 3, TYPE, 1 - rank, 9, b, 3, TYPE, 1 - rank, 9, MPI_COMM_WORLD, &st); \
        int n, e = 6;                                                               \
        MPI_Get_count(&st, TYPE, &n);                                               \
        if (is_fm) MPI_Get_elements(&st, TYPE, &e);                                 \
        CHECK(n == 3 && e == 6, #TYPE ": count %d, elements %d", n, e);             \
        for (int k = 0; k < 3; k++) {                                               \
            CHECK(b[k].v == (VT)(10 * k + 2 - rank) && b[k].i == 100 + k,           \
                  #TYPE ": element %d is (%g, %d)", k, (double)b[k].v, b[k].i);      \
            const unsigned char *gap = (const unsigned char *)&b[k] + sizeof(VT);   \
            for (size_t g = 0; g < offsetof(struct pair, i) - sizeof(VT); g++)      \
                CHECK(gap[g] == 0xee, #TYPE ": the padding of element %d was written", k); \
        }                                                                           \
    } while (0)

static void pair_types(void) {
    if (rank < 2) {
        PAIR(MPI_2INT, int);
        PAIR(MPI_FLOAT_INT, float);
        PAIR(MPI_DOUBLE_INT, double);
        PAIR(MPI_LONG_INT, long);
        PAIR(MPI_SHORT_INT, short);
        PAIR(MPI_LONG_DOUBLE_INT, long double);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) printf("pair types: ok\n");
}

static void datatypes(void) {
    /* A 6x5 matrix of ints; its column 1 is a vector. */
    int mat[6][5], col[6];
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < 5; j++) mat[i][j] = 100 * i + j;
    for (int i = 0; i < 6; i++) col[i] = mat[i][1];
    MPI_Datatype column, two_cols, hcol, idx, hidx, blk, st, rs, cont;
    MPI_Type_vector(6, 1, 5, MPI_INT, &column);
    MPI_Type_commit(&column);
    MPI_Aint lb, ext;
    MPI_Type_get_extent(column, &lb, &ext);
    CHECK(lb == 0 && ext == (5 * 5 + 1) * 4, "vector extent %ld", (long)ext);
    check_type(column, &mat[0][1], 1, (unsigned char *)col, sizeof col, "vector");

    int pairs[12];
    for (int i = 0; i < 6; i++) pairs[2 * i] = mat[i][1], pairs[2 * i + 1] = mat[i][2];
    MPI_Type_vector(6, 2, 5, MPI_INT, &two_cols);
    MPI_Type_commit(&two_cols);
    check_type(two_cols, &mat[0][1], 1, (unsigned char *)pairs, sizeof pairs, "vector of 2-blocks");
    if (rank < 2) {
        /* MPI_Get_elements counts basic elements, also of a partial element. */
        int other = 1 - rank, got[6][5], c, e;
        MPI_Status st;
        for (int n = 12; n >= 5; n -= 7) {
            MPI_Sendrecv(pairs, n, MPI_INT, other, 124, got, 1, two_cols, other, 124, MPI_COMM_WORLD, &st);
            MPI_Get_count(&st, two_cols, &c);
            MPI_Get_elements(&st, two_cols, &e);
            CHECK(e == n && c == (n == 12 ? 1 : MPI_UNDEFINED), "%d ints as a vector: count %d, elements %d", n, c,
                  e);
        }
    }

    MPI_Type_create_hvector(6, 1, 5 * sizeof(int), MPI_INT, &hcol);
    MPI_Type_commit(&hcol);
    check_type(hcol, &mat[0][1], 1, (unsigned char *)col, sizeof col, "hvector");

    int lens[3] = {2, 1, 3}, displs[3] = {7, 0, 20};
    int ref_idx[6] = {mat[1][2], mat[1][3], mat[0][0], mat[4][0], mat[4][1], mat[4][2]};
    MPI_Type_indexed(3, lens, displs, MPI_INT, &idx);
    MPI_Type_commit(&idx);
    check_type(idx, mat, 1, (unsigned char *)ref_idx, sizeof ref_idx, "indexed");

    MPI_Aint hdispls[3] = {7 * 4, 0, 20 * 4};
    MPI_Type_create_hindexed(3, lens, hdispls, MPI_INT, &hidx);
    MPI_Type_commit(&hidx);
    check_type(hidx, mat, 1, (unsigned char *)ref_idx, sizeof ref_idx, "hindexed");

    int bdispls[2] = {5, 26};
    int ref_blk[4] = {mat[1][0], mat[1][1], mat[5][1], mat[5][2]};
    MPI_Type_create_indexed_block(2, 2, bdispls, MPI_INT, &blk);
    MPI_Type_commit(&blk);
    check_type(blk, mat, 1, (unsigned char *)ref_blk, sizeof ref_blk, "indexed block");

    /* A struct with C's padding, three of them; packed without the padding. */
    struct rec recs[3];
    unsigned char ref_st[3 * 13], *p = ref_st;
    for (int i = 0; i < 3; i++) {
        memset(&recs[i], 0x5a, sizeof recs[i]);
        recs[i].c = (char)('a' + i);
        recs[i].d = 1.5 * i;
        recs[i].i = -i;
        memcpy(p, &recs[i].c, 1), p += 1;
        memcpy(p, &recs[i].d, 8), p += 8;
        memcpy(p, &recs[i].i, 4), p += 4;
    }
    int bl[3] = {1, 1, 1};
    MPI_Aint sd[3];
    MPI_Aint base;
    MPI_Get_address(&recs[0], &base);
    MPI_Get_address(&recs[0].c, &sd[0]);
    MPI_Get_address(&recs[0].d, &sd[1]);
    MPI_Get_address(&recs[0].i, &sd[2]);
    for (int i = 0; i < 3; i++) sd[i] -= base;
    MPI_Datatype tys[3] = {MPI_CHAR, MPI_DOUBLE, MPI_INT};
    MPI_Type_create_struct(3, bl, sd, tys, &st);
    MPI_Type_get_extent(st, &lb, &ext);
    CHECK(ext == sizeof(struct rec), "struct extent %ld, sizeof %zu", (long)ext, sizeof(struct rec));
    /* Resized to the C struct's size, so arrays of it step right. */
    MPI_Type_create_resized(st, 0, sizeof(struct rec), &rs);
    MPI_Type_commit(&rs);
    check_type(rs, recs, 3, ref_st, sizeof ref_st, "struct, resized");
    MPI_Aint tlb, text;
    MPI_Type_get_true_extent(rs, &tlb, &text);
    CHECK(tlb == 0 && text == 20, "true extent %ld %ld", (long)tlb, (long)text);

    MPI_Type_contiguous(4, MPI_DOUBLE, &cont);
    MPI_Type_commit(&cont);
    double dd[8];
    for (int i = 0; i < 8; i++) dd[i] = i * 0.25;
    check_type(cont, dd, 2, (unsigned char *)dd, sizeof dd, "contiguous");

    /* One block that starts past the element's start: moved as plain bytes
     * from an offset (and so received, also in place, at that offset). */
    MPI_Datatype off;
    int offd[1] = {2};
    MPI_Type_create_indexed_block(1, 4, offd, MPI_INT, &off);
    MPI_Type_commit(&off);
    check_type(off, mat[2], 1, (unsigned char *)&mat[2][2], 4 * sizeof(int), "one block at an offset");
    MPI_Type_free(&off);

    /* Plain bytes out, the type in: received into the matrix's column,
     * the rest of the matrix untouched; a large vector goes by rendezvous. */
    if (rank < 2) {
        int other = 1 - rank;
        int m2[6][5], news[6];
        memset(m2, 0, sizeof m2);
        for (int i = 0; i < 6; i++) news[i] = 1000 + i + 10 * rank;
        MPI_Status st2;
        MPI_Sendrecv(news, 6, MPI_INT, other, 121, &m2[0][3], 1, column, other, 121, MPI_COMM_WORLD, &st2);
        int c;
        MPI_Get_count(&st2, column, &c);
        CHECK(c == 1, "count of columns %d", c);
        for (int i = 0; i < 6; i++)
            for (int j = 0; j < 5; j++)
                CHECK(m2[i][j] == (j == 3 ? 1000 + i + 10 * other : 0), "m2[%d][%d] = %d", i, j, m2[i][j]);
        int n = 40000; /* 2 ints of every 3: 320,000 bytes on the wire */
        MPI_Datatype big;
        MPI_Type_vector(n, 2, 3, MPI_INT, &big);
        MPI_Type_commit(&big);
        int *src = malloc(3 * n * sizeof(int)), *dst = calloc(3 * n, sizeof(int));
        for (int i = 0; i < 3 * n; i++) src[i] = i * (rank + 1);
        MPI_Sendrecv(src, 1, big, other, 122, dst, 1, big, other, 122, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        for (int i = 0; i < 3 * n; i++) CHECK(dst[i] == (i % 3 == 2 ? 0 : i * (other + 1)), "big vector at %d", i);
        free(src);
        free(dst);
        MPI_Type_free(&big);
    }
    /* Unpack undoes Pack. */
    unsigned char buf[256];
    int pos = 0;
    MPI_Pack(&mat[0][1], 1, column, buf, sizeof buf, &pos, MPI_COMM_WORLD);
    int back[6][5];
    memset(back, 0, sizeof back);
    int upos = 0;
    MPI_Unpack(buf, pos, &upos, &back[0][1], 1, column, MPI_COMM_WORLD);
    CHECK(upos == pos, "unpack position %d of %d", upos, pos);
    for (int i = 0; i < 6; i++) CHECK(back[i][1] == mat[i][1] && back[i][0] == 0, "unpack row %d", i);
    int psize;
    MPI_Pack_size(3, rs, MPI_COMM_WORLD, &psize);
    CHECK(psize >= 39, "pack size %d", psize);
    MPI_Type_free(&column);
    CHECK(column == MPI_DATATYPE_NULL, "freed type not nulled");
    MPI_Type_free(&two_cols);
    MPI_Type_free(&hcol);
    MPI_Type_free(&idx);
    MPI_Type_free(&hidx);
    MPI_Type_free(&blk);
    MPI_Type_free(&st);
    MPI_Type_free(&rs);
    MPI_Type_free(&cont);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) printf("datatypes: ok\n");
}

/* Every rank sends a large message with a blocking MPI_Send before it
 * receives: to its neighbour (a ring; with 2 ranks, head to head). MPI
 * does not promise this completes; fm's library does (docs/MPI.md, "Sends
 * that wait for each other") by copying a send's data aside when its
 * receiver may be blocked sending to it. The buffer is overwritten as soon
 * as MPI_Send returns: what arrives must still be what was sent. */
static void blocked_senders(void) {
    long lens[] = {(1 << 20) + 5, 65537, 3 << 20};
    unsigned char *s = malloc(3 << 20), *r = malloc(3 << 20);
    int right = (rank + 1) % size, left = (rank + size - 1) % size;
    for (int k = 0; k < 3; k++) {
        long len = lens[k];
        fill(s, len, 60 + k + rank);
        MPI_Send(s, (int)len, MPI_BYTE, right, 70 + k, MPI_COMM_WORLD);
        memset(s, 0xa5, len);
        MPI_Status st;
        MPI_Recv(r, (int)len, MPI_BYTE, left, 70 + k, MPI_COMM_WORLD, &st);
        int c;
        MPI_Get_count(&st, MPI_BYTE, &c);
        CHECK(c == len && st.MPI_SOURCE == left, "blocked senders %ld: count %d source %d", len, c, st.MPI_SOURCE);
        expect(r, len, 60 + k + left, "blocked senders");
    }
    free(s);
    free(r);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) printf("blocked senders: ok\n");
}

/* Attributes: keyvals with copy and delete callbacks (which may call MPI
 * themselves), values replaced, copied by MPI_Comm_dup, deleted, and the
 * values on MPI_COMM_SELF deleted at MPI_Finalize. */
static int copies, deletes, self_deleted;

static int copy_cb(MPI_Comm old, int key, void *extra, void *in, void *out, int *flag) {
    int r;
    MPI_Comm_rank(old, &r);
    CHECK(r == rank && extra == &copies, "copy callback: rank %d extra %p", r, extra);
    copies++;
    *(void **)out = (char *)in + 1;
    *flag = 1;
    return MPI_SUCCESS;
}

static int delete_cb(MPI_Comm comm, int key, void *val, void *extra) {
    int n;
    MPI_Comm_size(comm, &n);
    CHECK(n == size && extra == &copies, "delete callback: size %d", n);
    deletes++;
    return MPI_SUCCESS;
}

static int failing_copy_cb(MPI_Comm old, int key, void *extra, void *in, void *out, int *flag) {
    return MPI_ERR_OTHER;
}

static int self_delete_cb(MPI_Comm comm, int key, void *val, void *extra) {
    CHECK(comm == MPI_COMM_SELF && val == &self_deleted, "self delete callback");
    self_deleted++;
    return MPI_SUCCESS;
}

static void attributes(void) {
    static char vals[4];
    int key, plain, dupkey, selfkey, flag, cls;
    void *v;
    MPI_Comm_create_keyval(copy_cb, delete_cb, &key, &copies);
    MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, MPI_COMM_NULL_DELETE_FN, &plain, NULL);
    MPI_Comm_create_keyval(MPI_COMM_DUP_FN, MPI_COMM_NULL_DELETE_FN, &dupkey, NULL);
    CHECK(key != plain && plain != dupkey && key != MPI_KEYVAL_INVALID, "keyvals %d %d %d", key, plain, dupkey);
    MPI_Comm c, d;
    MPI_Comm_dup(MPI_COMM_WORLD, &c);
    MPI_Comm_get_attr(c, key, &v, &flag);
    CHECK(!flag, "an attribute never set was found");
    MPI_Comm_set_attr(c, key, &vals[0]);
    MPI_Comm_set_attr(c, plain, &vals[2]);
    MPI_Comm_set_attr(c, dupkey, &vals[3]);
    MPI_Comm_get_attr(c, key, &v, &flag);
    CHECK(flag && v == &vals[0], "get_attr gave %p (flag %d)", v, flag);
    MPI_Comm_set_attr(c, key, &vals[1]);
    CHECK(deletes == 1, "replacing a value called delete %d times", deletes);
    MPI_Comm_dup(c, &d);
    CHECK(copies == 1, "dup called copy %d times", copies);
    MPI_Comm_get_attr(d, key, &v, &flag);
    CHECK(flag && v == &vals[2], "the copy callback's value: %p", v);
    MPI_Comm_get_attr(d, plain, &v, &flag);
    CHECK(!flag, "a value without a copy callback was copied");
    MPI_Comm_get_attr(d, dupkey, &v, &flag);
    CHECK(flag && v == &vals[3], "MPI_COMM_DUP_FN's value: %p", v);
    int *ub;
    MPI_Comm_get_attr(d, MPI_TAG_UB, &ub, &flag);
    CHECK(flag && *ub >= 32767, "tag ub");
    MPI_Comm_delete_attr(c, key);
    CHECK(deletes == 2, "delete_attr called delete %d times", deletes);
    MPI_Comm_get_attr(c, key, &v, &flag);
    CHECK(!flag, "a deleted value was found");
    MPI_Comm_delete_attr(c, key); /* no value: nothing happens */
    CHECK(deletes == 2, "deleting nothing called delete");
    MPI_Comm_free_keyval(&key);
    CHECK(key == MPI_KEYVAL_INVALID, "freed keyval not invalidated");
    /* d still holds a value under the freed keyval: freeing d deletes it. */
    MPI_Comm_free(&d);
    CHECK(deletes == 3, "comm_free called delete %d times", deletes);
    MPI_Comm_free(&c);
    /* MPI-1's names. */
    int old;
    MPI_Keyval_create(MPI_NULL_COPY_FN, MPI_NULL_DELETE_FN, &old, NULL);
    MPI_Attr_put(MPI_COMM_WORLD, old, &vals[1]);
    MPI_Attr_get(MPI_COMM_WORLD, old, &v, &flag);
    CHECK(flag && v == &vals[1], "attr_get");
    MPI_Attr_delete(MPI_COMM_WORLD, old);
    MPI_Attr_get(MPI_COMM_WORLD, old, &v, &flag);
    CHECK(!flag, "attr_delete");
    MPI_Keyval_free(&old);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Error_class(MPI_Comm_set_attr(MPI_COMM_WORLD, MPI_TAG_UB, &vals[0]), &cls);
    CHECK(cls == MPI_ERR_KEYVAL, "setting a predefined attribute: class %d", cls);
    if (is_fm) {
        /* A copy callback that fails fails MPI_Comm_dup, with no communicator. */
        int failing;
        MPI_Comm_create_keyval(failing_copy_cb, MPI_COMM_NULL_DELETE_FN, &failing, NULL);
        MPI_Comm_set_attr(MPI_COMM_WORLD, failing, &vals[0]);
        MPI_Comm e = MPI_COMM_WORLD;
        MPI_Error_class(MPI_Comm_dup(MPI_COMM_WORLD, &e), &cls);
        CHECK(cls == MPI_ERR_OTHER && e == MPI_COMM_NULL, "a failing copy callback: class %d", cls);
        MPI_Comm_delete_attr(MPI_COMM_WORLD, failing);
        MPI_Comm_free_keyval(&failing);
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    MPI_Comm_free_keyval(&plain);
    MPI_Comm_free_keyval(&dupkey);
    MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, self_delete_cb, &selfkey, NULL);
    MPI_Comm_set_attr(MPI_COMM_SELF, selfkey, &self_deleted);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) printf("attributes: ok\n");
}

/* Invalid arguments give their error class under MPI_ERRORS_RETURN. */
static void bad_arguments(void) {
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int v = 0, cls;
#define CLASS_OF(call, want)                                              \
    do {                                                                  \
        MPI_Error_class((call), &cls);                                    \
        CHECK(cls == (want), "%s: class %d, not %s", #call, cls, #want);  \
    } while (0)
    CLASS_OF(MPI_Send(&v, 1, MPI_INT, size, 0, MPI_COMM_WORLD), MPI_ERR_RANK);
    CLASS_OF(MPI_Send(&v, 1, MPI_INT, -5, 0, MPI_COMM_WORLD), MPI_ERR_RANK);
    CLASS_OF(MPI_Send(&v, 1, MPI_INT, 0, -3, MPI_COMM_WORLD), MPI_ERR_TAG);
    CLASS_OF(MPI_Send(&v, -1, MPI_INT, 0, 0, MPI_COMM_WORLD), MPI_ERR_COUNT);
    CLASS_OF(MPI_Send(&v, 1, MPI_DATATYPE_NULL, 0, 0, MPI_COMM_WORLD), MPI_ERR_TYPE);
    CLASS_OF(MPI_Send(NULL, 4, MPI_INT, 0, 0, MPI_COMM_WORLD), MPI_ERR_BUFFER);
    CLASS_OF(MPI_Recv(&v, 1, MPI_INT, size + 3, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE), MPI_ERR_RANK);
    MPI_Request bogus = (MPI_Request)0x12345;
    CLASS_OF(MPI_Wait(&bogus, MPI_STATUS_IGNORE), MPI_ERR_REQUEST);
    if (is_fm) {
        /* Beyond what MPICH itself reports (it aborts on these): fm's
         * library answers a null pointer or an unknown handle with its
         * class, never a crash. */
        int flag = 0;
        CLASS_OF(MPI_Testall(1, &bogus, &flag, MPI_STATUSES_IGNORE), MPI_ERR_REQUEST);
        CLASS_OF(MPI_Wait(NULL, MPI_STATUS_IGNORE), MPI_ERR_ARG);
        CLASS_OF(MPI_Irecv(&v, 1, MPI_INT, 0, 0, MPI_COMM_WORLD, NULL), MPI_ERR_ARG);
        CLASS_OF(MPI_Comm_rank((MPI_Comm)0x44000007, &v), MPI_ERR_COMM);
        /* Types fm cannot hold are refused at once (this one hung
         * MPI_Type_vector before): bounds past an address, and more
         * separate blocks than fm builds. */
        MPI_Datatype t;
        CLASS_OF(MPI_Type_vector(INT_MAX, INT_MAX, INT_MAX, MPI_DOUBLE, &t), MPI_ERR_ARG);
        CLASS_OF(MPI_Type_create_hvector(INT_MAX, 1, 16, MPI_DOUBLE, &t), MPI_ERR_OTHER);
        /* A message past one FM message (4 GiB) is refused before
         * anything is sent or read: 5 GiB of a 1 GiB contiguous type. */
        CLASS_OF(MPI_Type_contiguous(1 << 30, MPI_BYTE, &t), MPI_SUCCESS);
        MPI_Type_commit(&t);
        CLASS_OF(MPI_Send(&v, 5, t, rank, 0, MPI_COMM_WORLD), MPI_ERR_COUNT);
        MPI_Request big;
        CLASS_OF(MPI_Isend(&v, 5, t, rank, 0, MPI_COMM_WORLD, &big), MPI_ERR_COUNT);
        MPI_Type_free(&t);
    }
    {
        /* A contiguous type of INT_MAX doubles is a type (16 GiB): its size
         * does not fit an int, so MPI_Type_size says MPI_UNDEFINED. */
        MPI_Datatype big;
        CLASS_OF(MPI_Type_contiguous(INT_MAX, MPI_DOUBLE, &big), MPI_SUCCESS);
        int sz = 0;
        MPI_Aint lb, ext;
        MPI_Type_size(big, &sz);
        MPI_Type_get_extent(big, &lb, &ext);
        CHECK(sz == MPI_UNDEFINED && lb == 0 && ext == (MPI_Aint)INT_MAX * 8, "INT_MAX doubles: size %d extent %ld", sz, (long)ext);
        MPI_Type_free(&big);
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) printf("bad arguments: ok\n");
}

/* Blocking sends of every length around fm's short-message path (64
 * bytes of data) and of every predefined element size, received in order:
 * a safe program, whatever the eager limit. */
static void short_sends(void) {
    unsigned char s[200], r[200];
    if (rank < 2) {
        int other = 1 - rank;
        for (int len = 0; len <= 90; len++) {
            for (int dir = 0; dir < 2; dir++) {
                MPI_Status st;
                if (rank == dir) {
                    fill(s, len, len + 3 * dir);
                    if (sabotage && len == 33) s[len / 2] ^= 1;
                    MPI_Send(s, len, MPI_BYTE, other, len, MPI_COMM_WORLD);
                } else {
                    memset(r, 0xee, sizeof r);
                    MPI_Recv(r, sizeof r, MPI_BYTE, other, MPI_ANY_TAG, MPI_COMM_WORLD, &st);
                    int c;
                    MPI_Get_count(&st, MPI_BYTE, &c);
                    CHECK(c == len && st.MPI_TAG == len, "short send of %d bytes: count %d, tag %d", len, c, st.MPI_TAG);
                    expect(r, len, len + 3 * dir, "short send");
                    CHECK(r[len] == 0xee, "short send of %d bytes wrote past them", len);
                }
            }
        }
        MPI_Datatype types[] = {MPI_CHAR, MPI_SHORT, MPI_INT, MPI_DOUBLE, MPI_LONG_DOUBLE, MPI_2INT, MPI_FLOAT_INT};
        for (int t = 0; t < 7; t++) {
            int size;
            MPI_Type_size(types[t], &size);
            for (int n = 0; n * size <= 80; n++) {
                MPI_Status st;
                if (rank == 0) {
                    fill(s, n * size, 7 * t + n);
                    MPI_Send(s, n, types[t], 1, t, MPI_COMM_WORLD);
                } else {
                    memset(r, 0xee, sizeof r);
                    MPI_Recv(r, n, types[t], 0, t, MPI_COMM_WORLD, &st);
                    int c;
                    MPI_Get_count(&st, types[t], &c);
                    CHECK(c == n, "type %d: count %d of %d", t, c, n);
                    expect(r, n * size, 7 * t + n, "short send of a predefined type");
                }
            }
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) printf("short sends: ok\n");
}

/* Datatype constructors on random and extreme arguments (fixed seed):
 * no crash, no hang, only success or an error class; built types answer
 * size, extent and pack-size queries and are freed, or reused as old
 * types. */
static unsigned long long fuzz_state = 88172645463325252ULL;
static unsigned long long fuzz_next(void) {
    fuzz_state ^= fuzz_state << 13;
    fuzz_state ^= fuzz_state >> 7;
    fuzz_state ^= fuzz_state << 17;
    return fuzz_state;
}
static int fuzz_int(void) {
    static const int v[] = {0, 1, 2, 3, 7, 100, 1000, 65536, 1 << 20, INT_MAX, INT_MAX - 1, -1, -2, INT_MIN, 1 << 30};
    return fuzz_next() % 3 == 0 ? (int)(fuzz_next() % 50) - 10 : v[fuzz_next() % 15];
}
static MPI_Aint fuzz_aint(void) {
    static const MPI_Aint v[] = {0, 1, 8, -8, 1 << 30, LONG_MAX, LONG_MIN, LONG_MAX / 2, -(1L << 40)};
    return fuzz_next() % 2 ? fuzz_int() : v[fuzz_next() % 9];
}
static void type_fuzz(void) {
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Datatype base[] = {MPI_BYTE, MPI_INT, MPI_DOUBLE, MPI_DOUBLE_INT, MPI_SHORT_INT, MPI_2INT, MPI_LONG_DOUBLE};
    MPI_Datatype pool[32];
    int np = 0, built = 0, refused = 0;
    for (int it = 0; it < 3000; it++) {
        MPI_Datatype old = np && fuzz_next() % 2 ? pool[fuzz_next() % np] : base[fuzz_next() % 7];
        int n = (int)(fuzz_next() % 4), bl[4], di[4];
        MPI_Aint ad[4];
        MPI_Datatype ty[4], t;
        for (int k = 0; k < 4; k++) {
            bl[k] = fuzz_int();
            di[k] = fuzz_int();
            ad[k] = fuzz_aint();
            ty[k] = np && fuzz_next() % 2 ? pool[fuzz_next() % np] : base[fuzz_next() % 7];
        }
        int e;
        switch (fuzz_next() % 8) {
        case 0: e = MPI_Type_contiguous(fuzz_int(), old, &t); break;
        case 1: e = MPI_Type_vector(fuzz_int(), fuzz_int(), fuzz_int(), old, &t); break;
        case 2: e = MPI_Type_create_hvector(fuzz_int(), fuzz_int(), fuzz_aint(), old, &t); break;
        case 3: e = MPI_Type_indexed(n, bl, di, old, &t); break;
        case 4: e = MPI_Type_create_hindexed(n, bl, ad, old, &t); break;
        case 5: e = MPI_Type_create_indexed_block(n, fuzz_int(), di, old, &t); break;
        case 6: e = MPI_Type_create_struct(n, bl, ad, ty, &t); break;
        default: e = MPI_Type_create_resized(old, fuzz_aint(), fuzz_aint(), &t); break;
        }
        int cls;
        MPI_Error_class(e, &cls);
        CHECK(cls == MPI_SUCCESS || cls == MPI_ERR_COUNT || cls == MPI_ERR_ARG || cls == MPI_ERR_OTHER || cls == MPI_ERR_TYPE,
              "type fuzz call %d: class %d", it, cls);
        if (e != MPI_SUCCESS) {
            refused++;
            continue;
        }
        built++;
        int sz, ps;
        MPI_Aint lb, ext;
        CHECK(MPI_Type_commit(&t) == MPI_SUCCESS && MPI_Type_size(t, &sz) == MPI_SUCCESS &&
                  MPI_Type_get_extent(t, &lb, &ext) == MPI_SUCCESS && MPI_Type_get_true_extent(t, &lb, &ext) == MPI_SUCCESS,
              "type fuzz call %d: a built type does not answer", it);
        CHECK(sz >= 0 || sz == MPI_UNDEFINED, "type fuzz call %d: size %d", it, sz);
        MPI_Pack_size(fuzz_int(), t, MPI_COMM_WORLD, &ps);
        if (np < 32) {
            pool[np++] = t;
        } else {
            int k = (int)(fuzz_next() % 32);
            MPI_Type_free(&pool[k]);
            pool[k] = t;
        }
    }
    for (int k = 0; k < np; k++) MPI_Type_free(&pool[k]);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    printf("type fuzz: %d built, %d refused\n", built, refused);
}

/* Source -1 read as any source: rank 0 takes one message from each other
 * rank per receive kind, naming -1 as the source; the rest send theirs. */
static void minus_one_is_any_source(void) {
    enum { KINDS = 7 };
    if (rank != 0) {
        for (int k = 0; k < KINDS; k++) {
            int v = rank * 100 + k;
            MPI_Send(&v, 1, MPI_INT, 0, k, MPI_COMM_WORLD);
        }
        int back = 0;
        MPI_Recv(&back, 1, MPI_INT, 0, KINDS, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        CHECK(back == rank, "Sendrecv's reply to rank %d was %d", rank, back);
        return;
    }
    int seen[KINDS] = {0};
    for (int n = 1; n < size; n++) {
        for (int k = 0; k < KINDS; k++) {
            int v = -7, flag = 0;
            MPI_Status st;
            MPI_Request rq;
            MPI_Message msg;
            switch (k) {
            case 0: MPI_Recv(&v, 1, MPI_INT, -1, k, MPI_COMM_WORLD, &st); break;
            case 1:
                MPI_Irecv(&v, 1, MPI_INT, -1, k, MPI_COMM_WORLD, &rq);
                MPI_Wait(&rq, &st);
                break;
            case 2:
                MPI_Probe(-1, k, MPI_COMM_WORLD, &st);
                MPI_Recv(&v, 1, MPI_INT, st.MPI_SOURCE, k, MPI_COMM_WORLD, &st);
                break;
            case 3:
                while (!flag) MPI_Iprobe(-1, k, MPI_COMM_WORLD, &flag, &st);
                MPI_Recv(&v, 1, MPI_INT, st.MPI_SOURCE, k, MPI_COMM_WORLD, &st);
                break;
            case 4:
                MPI_Mprobe(-1, k, MPI_COMM_WORLD, &msg, &st);
                CHECK(msg != MPI_MESSAGE_NO_PROC, "MPI_Mprobe from -1 matched no process");
                MPI_Mrecv(&v, 1, MPI_INT, &msg, &st);
                break;
            case 5:
                MPI_Recv_init(&v, 1, MPI_INT, -1, k, MPI_COMM_WORLD, &rq);
                MPI_Start(&rq);
                MPI_Wait(&rq, &st);
                MPI_Request_free(&rq);
                break;
            case 6: {
                /* The reply goes to whoever sent (the status says). */
                MPI_Recv(&v, 1, MPI_INT, -1, k, MPI_COMM_WORLD, &st);
                int back = st.MPI_SOURCE;
                MPI_Send(&back, 1, MPI_INT, st.MPI_SOURCE, KINDS, MPI_COMM_WORLD);
                break;
            }
            }
            CHECK(st.MPI_SOURCE >= 1 && st.MPI_SOURCE < size && v == st.MPI_SOURCE * 100 + k,
                  "receive kind %d from -1: source %d, value %d", k, st.MPI_SOURCE, v);
            seen[k] |= 1 << st.MPI_SOURCE;
        }
    }
    for (int k = 0; k < KINDS; k++)
        CHECK(seen[k] == (1 << size) - 2, "receive kind %d from -1 saw ranks %#x", k, seen[k]);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *mode = argc > 1 ? argv[1] : "";
    sabotage = !strcmp(mode, "sabotage") || !strcmp(mode, "short-sabotage") || !strcmp(mode, "windows-sabotage");
    if (!strcmp(mode, "abort") || !strcmp(mode, "die")) {
        /* Rank 1 ends the job while the others wait for it in MPI_Recv. */
        int v = 0;
        if (rank == 1) {
            if (!strcmp(mode, "abort")) MPI_Abort(MPI_COMM_WORLD, 7);
            raise(SIGKILL);
        }
        MPI_Recv(&v, 1, MPI_INT, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        printf("rank %d: MPI_Recv returned though rank 1 is gone\n", rank);
        return 3;
    }
    if (!strcmp(mode, "type-fuzz")) {
        type_fuzz();
        MPI_Finalize();
        return 0;
    }
    if (!strncmp(mode, "short", 5)) {
        short_sends();
        MPI_Finalize();
        return 0;
    }
    if (!strncmp(mode, "windows", 7)) {
        windows();
        MPI_Finalize();
        return 0;
    }
    if (!strcmp(mode, "minus-one")) {
        minus_one_is_any_source();
        MPI_Finalize();
        if (rank == 0) printf("source -1 is any source on %d ranks\n", size);
        return 0;
    }
    if (!strcmp(mode, "fatal")) {
        int v = 0;
        if (rank == 1) MPI_Send(&v, 1, MPI_INT, size + 1, 0, MPI_COMM_WORLD);
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_Finalize();
        return 0;
    }
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int len;
    MPI_Get_library_version(lib, &len);
    is_fm = strstr(lib, "fm MPI") != NULL;
    int version, sub;
    MPI_Get_version(&version, &sub);
    CHECK(version >= 3, "MPI version %d.%d", version, sub);
    sizes();
    windows();
    short_sends();
    any_source_order();
    tag_matching();
    truncation();
    ssend_completion();
    probing();
    completion_calls();
    completed_sends();
    more_calls();
    persistent_requests();
    buffered_sends();
    edges();
    dup_isolation();
    many_communicators();
    communicators();
    datatypes();
    pair_types();
    bad_arguments();
    if (is_fm) blocked_senders();
    attributes();
    MPI_Finalize();
    CHECK(self_deleted == 1, "MPI_Finalize called the MPI_COMM_SELF delete callback %d times", self_deleted);
    if (rank == 0) printf("all passed on %d ranks\n", size);
    return 0;
}
