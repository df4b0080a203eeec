/* Every collective and every predefined reduction, checked against a
 * reference each rank computes alone from what every rank contributes
 * (each rank's data is a function of its rank), on any number of ranks.
 * Compiled with MPICH's mpicc; run under fmrun and, as the check of the
 * test itself, under mpiexec.mpich. Exits 1 at the first wrong value,
 * printing it.
 *
 *   coll [SEED] [sabotage]   sabotage: expect one wrong value (must fail)
 *
 * With ON_MPICH set, the cases where MPICH 4.0.2 itself is wrong
 * are left out (see `mpich_bug`).
 */
#include <complex.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"

static int rank, size, seed, sabotage;

/* MPICH 4.0.2's own bugs, seen running this file under mpiexec.mpich:
 *   - MPI_MAX and MPI_MIN of vectors of unsigned integers (37 elements
 *     here) compare as signed (255 < 5 for MPI_UNSIGNED_CHAR);
 *   - MPI_Allgatherv on one process ignores the displacement. */
static int on_mpich;

/* Rank r's element i: a small integer (so float sums are exact in any
 * order), negative ones included. */
static int val(int r, int i)
{
    return (r * 7 + i * 3 + seed) % 11 - 3;
}

/* The value rank r contributes, nudged when sabotaged (rank 0's idea of
 * rank 1's element 0 is off by one, so a correct result looks wrong). */
static int seen(int r, int i)
{
    return val(r, i) + (sabotage && rank == 0 && r == 1 && i == 0);
}

#define SUMF(a, b) ((a) + (b))
#define PRODF(a, b) ((a) * (b))
#define MAXF(a, b) ((a) > (b) ? (a) : (b))
#define MINF(a, b) ((a) < (b) ? (a) : (b))
#define LANDF(a, b) ((a) && (b))
#define LORF(a, b) ((a) || (b))
#define LXORF(a, b) (!(a) != !(b))
#define BANDF(a, b) ((a) & (b))
#define BORF(a, b) ((a) | (b))
#define BXORF(a, b) ((a) ^ (b))

enum { N = 37 };

/* MPI_Allreduce, MPI_Reduce to the last rank, and MPI_Scan of N elements
 * of T with operation OP, against the fold F over the ranks in order. */
#define TEST_OP(T, DT, OP, F)                                                         \
    do {                                                                              \
        T in[N], out[N], want[N], part[N];                                            \
        for (int i = 0; i < N; i++)                                                   \
            in[i] = (T)val(rank, i);                                                  \
        for (int i = 0; i < N; i++) {                                                 \
            T acc = (T)seen(0, i);                                                    \
            for (int r = 1; r < size; r++) {                                          \
                T b = (T)seen(r, i);                                                  \
                acc = (T)F(acc, b);                                                   \
                if (r == rank)                                                        \
                    part[i] = acc;                                                    \
            }                                                                         \
            if (rank == 0)                                                            \
                part[i] = (T)seen(0, i);                                              \
            want[i] = acc;                                                            \
        }                                                                             \
        MPI_Allreduce(in, out, N, DT, OP, MPI_COMM_WORLD);                            \
        for (int i = 0; i < N; i++)                                                   \
            CHECK(out[i] == want[i], "MPI_Allreduce %s %s [%d]: %g, expected %g", #DT, \
                  #OP, i, (double)out[i], (double)want[i]);                           \
        memset(out, 0, sizeof out);                                                   \
        MPI_Reduce(in, out, N, DT, OP, size - 1, MPI_COMM_WORLD);                     \
        for (int i = 0; rank == size - 1 && i < N; i++)                               \
            CHECK(out[i] == want[i], "MPI_Reduce %s %s [%d]: %g, expected %g", #DT,    \
                  #OP, i, (double)out[i], (double)want[i]);                           \
        MPI_Scan(in, out, N, DT, OP, MPI_COMM_WORLD);                                 \
        for (int i = 0; i < N; i++)                                                   \
            CHECK(out[i] == part[i], "MPI_Scan %s %s [%d]: %g, expected %g", #DT, #OP, \
                  i, (double)out[i], (double)part[i]);                                \
    } while (0)

#define ARITH(T, DT)                  \
    do {                              \
        TEST_OP(T, DT, MPI_SUM, SUMF);  \
        TEST_OP(T, DT, MPI_PROD, PRODF); \
        TEST_OP(T, DT, MPI_MAX, MAXF);  \
        TEST_OP(T, DT, MPI_MIN, MINF);  \
    } while (0)

#define LOGICAL(T, DT)                  \
    do {                                \
        TEST_OP(T, DT, MPI_LAND, LANDF); \
        TEST_OP(T, DT, MPI_LOR, LORF);   \
        TEST_OP(T, DT, MPI_LXOR, LXORF); \
    } while (0)

#define BITS(T, DT)                     \
    do {                                \
        TEST_OP(T, DT, MPI_BAND, BANDF); \
        TEST_OP(T, DT, MPI_BOR, BORF);   \
        TEST_OP(T, DT, MPI_BXOR, BXORF); \
    } while (0)

#define INTEGER(T, DT)                                       \
    do {                                                     \
        if (!(on_mpich && (T)-1 > 0)) {                      \
            ARITH(T, DT);                                    \
        } else {                                             \
            TEST_OP(T, DT, MPI_SUM, SUMF);                   \
            TEST_OP(T, DT, MPI_PROD, PRODF);                 \
        }                                                    \
        LOGICAL(T, DT); \
        BITS(T, DT);   \
    } while (0)

static void predefined_ops(void)
{
    INTEGER(signed char, MPI_SIGNED_CHAR);
    INTEGER(unsigned char, MPI_UNSIGNED_CHAR);
    INTEGER(short, MPI_SHORT);
    INTEGER(unsigned short, MPI_UNSIGNED_SHORT);
    INTEGER(int, MPI_INT);
    INTEGER(unsigned, MPI_UNSIGNED);
    INTEGER(long, MPI_LONG);
    INTEGER(unsigned long, MPI_UNSIGNED_LONG);
    INTEGER(long long, MPI_LONG_LONG);
    INTEGER(unsigned long long, MPI_UNSIGNED_LONG_LONG);
    INTEGER(int8_t, MPI_INT8_T);
    INTEGER(uint16_t, MPI_UINT16_T);
    INTEGER(int32_t, MPI_INT32_T);
    INTEGER(uint64_t, MPI_UINT64_T);
    BITS(unsigned char, MPI_BYTE);
    ARITH(float, MPI_FLOAT);
    ARITH(double, MPI_DOUBLE);
    ARITH(long double, MPI_LONG_DOUBLE);
    LOGICAL(_Bool, MPI_C_BOOL);
    TEST_OP(long, MPI_AINT, MPI_SUM, SUMF);
}

/* Complex sums and products of small values (exact in any order). */
#define TEST_COMPLEX(T, DT, OP, F)                                                     \
    do {                                                                               \
        T in[N], out[N], want[N];                                                      \
        for (int i = 0; i < N; i++)                                                    \
            in[i] = (rank % 3 - 1) + ((i + rank) % 2) * I;                             \
        for (int i = 0; i < N; i++) {                                                  \
            T acc = (0 % 3 - 1) + ((i + 0) % 2) * I + (sabotage && rank == 0 && !i);   \
            for (int r = 1; r < size; r++)                                             \
                acc = F(acc, (T)((r % 3 - 1) + ((i + r) % 2) * I));                    \
            want[i] = acc;                                                             \
        }                                                                              \
        MPI_Allreduce(in, out, N, DT, OP, MPI_COMM_WORLD);                             \
        for (int i = 0; i < N; i++)                                                    \
            CHECK(out[i] == want[i], "MPI_Allreduce %s %s [%d]: %g%+gi, expected %g%+gi", \
                  #DT, #OP, i, creal(out[i]), cimag(out[i]), creal(want[i]),           \
                  cimag(want[i]));                                                     \
    } while (0)

static void complex_ops(void)
{
    TEST_COMPLEX(float _Complex, MPI_C_FLOAT_COMPLEX, MPI_SUM, SUMF);
    TEST_COMPLEX(float _Complex, MPI_C_FLOAT_COMPLEX, MPI_PROD, PRODF);
    TEST_COMPLEX(double _Complex, MPI_C_DOUBLE_COMPLEX, MPI_SUM, SUMF);
    TEST_COMPLEX(double _Complex, MPI_C_DOUBLE_COMPLEX, MPI_PROD, PRODF);
    TEST_COMPLEX(long double _Complex, MPI_C_LONG_DOUBLE_COMPLEX, MPI_PROD, PRODF);
}

/* MINLOC and MAXLOC: values with many ties, the rank as the index. */
#define TEST_LOC(V, DT)                                                                \
    do {                                                                               \
        struct { V v; int i; } in[N], out[N], lo[N], hi[N];                            \
        for (int i = 0; i < N; i++) {                                                  \
            in[i].v = (V)(val(rank, i) % 3);                                           \
            in[i].i = rank;                                                            \
            lo[i].v = hi[i].v = (V)(seen(0, i) % 3);                                   \
            lo[i].i = hi[i].i = 0;                                                     \
            for (int r = 1; r < size; r++) {                                           \
                V v = (V)(seen(r, i) % 3);                                             \
                if (v < lo[i].v)                                                       \
                    lo[i].v = v, lo[i].i = r;                                          \
                if (v > hi[i].v)                                                       \
                    hi[i].v = v, hi[i].i = r;                                          \
            }                                                                          \
        }                                                                              \
        MPI_Allreduce(in, out, N, DT, MPI_MINLOC, MPI_COMM_WORLD);                     \
        for (int i = 0; i < N; i++)                                                    \
            CHECK(out[i].v == lo[i].v && out[i].i == lo[i].i,                          \
                  "MINLOC %s [%d]: (%g, %d), expected (%g, %d)", #DT, i,               \
                  (double)out[i].v, out[i].i, (double)lo[i].v, lo[i].i);               \
        MPI_Allreduce(in, out, N, DT, MPI_MAXLOC, MPI_COMM_WORLD);                     \
        for (int i = 0; i < N; i++)                                                    \
            CHECK(out[i].v == hi[i].v && out[i].i == hi[i].i,                          \
                  "MAXLOC %s [%d]: (%g, %d), expected (%g, %d)", #DT, i,               \
                  (double)out[i].v, out[i].i, (double)hi[i].v, hi[i].i);               \
    } while (0)

static void loc_ops(void)
{
    TEST_LOC(int, MPI_2INT);
    TEST_LOC(float, MPI_FLOAT_INT);
    TEST_LOC(double, MPI_DOUBLE_INT);
    TEST_LOC(long, MPI_LONG_INT);
    TEST_LOC(short, MPI_SHORT_INT);
    TEST_LOC(long double, MPI_LONG_DOUBLE_INT);
}

/* A non-commutative operation: products of 2x2 matrices (in * inout),
 * rank r's matrix [[r+2, 1], [1, 0]] (no two commute). Like many real
 * ones it asks MPI about its datatype (inside the library's reduction). */
static void matmul(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    unsigned *a = in, *b = inout;
    if (dt) {
        int sz = 0;
        MPI_Aint lb = -1, extent = 0;
        MPI_Type_size(*dt, &sz);
        MPI_Type_get_extent(*dt, &lb, &extent);
        CHECK(sz == 16 && lb == 0 && extent == 16, "inside the operation: size %d extent %ld",
              sz, (long)extent);
    }
    for (int k = 0; k < *len; k++, a += 4, b += 4) {
        unsigned c[4] = { a[0] * b[0] + a[1] * b[2], a[0] * b[1] + a[1] * b[3],
                          a[2] * b[0] + a[3] * b[2], a[2] * b[1] + a[3] * b[3] };
        memcpy(b, c, sizeof c);
    }
}

static void matrix(unsigned m[4], int r)
{
    m[0] = r + 2 + (sabotage && rank == 0 && r == 1);
    m[1] = m[2] = 1;
    m[3] = 0;
}

static void product(unsigned out[4], int from, int to)
{
    matrix(out, from);
    for (int r = from + 1; r < to; r++) {
        unsigned m[4];
        int one = 1;
        matrix(m, r);
        matmul(out, m, &one, NULL);
        memcpy(out, m, sizeof m);
    }
}

static void user_ops(void)
{
    MPI_Datatype mat;
    MPI_Op op;
    unsigned in[3][4], out[3][4], want[4];
    int commute = -1;

    MPI_Type_contiguous(4, MPI_UNSIGNED, &mat);
    MPI_Type_commit(&mat);
    MPI_Op_create(matmul, 0, &op);
    MPI_Op_commutative(op, &commute);
    CHECK(commute == 0, "MPI_Op_commutative of a non-commutative op: %d", commute);
    MPI_Op_commutative(MPI_SUM, &commute);
    CHECK(commute == 1, "MPI_Op_commutative of MPI_SUM: %d", commute);
    for (int k = 0; k < 3; k++) {
        int saved = sabotage;
        sabotage = 0;
        matrix(in[k], rank);
        sabotage = saved;
    }
    product(want, 0, size);
    for (int root = 0; root < size; root += size > 1 ? size - 1 : 1) {
        memset(out, 0, sizeof out);
        MPI_Reduce(in, out, 3, mat, op, root, MPI_COMM_WORLD);
        for (int k = 0; rank == root && k < 3; k++)
            CHECK(!memcmp(out[k], want, sizeof want),
                  "MPI_Reduce (root %d) of a non-commutative op: [%u %u %u %u], expected "
                  "[%u %u %u %u]", root, out[k][0], out[k][1], out[k][2], out[k][3],
                  want[0], want[1], want[2], want[3]);
    }
    MPI_Allreduce(in, out, 3, mat, op, MPI_COMM_WORLD);
    CHECK(!memcmp(out[2], want, sizeof want), "MPI_Allreduce of a non-commutative op");
    {
        MPI_Request rq;
        memset(out, 0, sizeof out);
        MPI_Iallreduce(in, out, 3, mat, op, MPI_COMM_WORLD, &rq);
        MPI_Wait(&rq, MPI_STATUS_IGNORE);
        CHECK(!memcmp(out[1], want, sizeof want), "MPI_Iallreduce of a non-commutative op");
    }
    MPI_Scan(in, out, 3, mat, op, MPI_COMM_WORLD);
    product(want, 0, rank + 1);
    CHECK(!memcmp(out[1], want, sizeof want), "MPI_Scan of a non-commutative op");
    MPI_Exscan(in, out, 3, mat, op, MPI_COMM_WORLD);
    if (rank > 0) {
        product(want, 0, rank);
        CHECK(!memcmp(out[0], want, sizeof want), "MPI_Exscan of a non-commutative op");
    }
    /* MPI_Reduce_local: inout = in op inout, here M3 x M5. */
    {
        unsigned m3[4], m35[4];
        int one = 1;
        matrix(in[0], 3);
        matrix(out[0], 5);
        matrix(m3, 3);
        matrix(m35, 5);
        matmul(m3, m35, &one, NULL);
        MPI_Reduce_local(in[0], out[0], 1, mat, op);
        CHECK(!memcmp(out[0], m35, sizeof m35), "MPI_Reduce_local of a non-commutative op");
    }
    MPI_Op_free(&op);
    CHECK(op == MPI_OP_NULL, "MPI_Op_free left %#x", op);
    MPI_Type_free(&mat);
}

/* A deterministic pseudo-random count below `max`, the same on every rank. */
static int pick(int k, int max)
{
    unsigned x = (unsigned)(seed * 2654435761u + k * 40503u);
    return (int)((x >> 7) % (unsigned)max);
}

/* Every data-moving collective, with rooted ones at the first and last
 * rank, plain and in place, counts from 0 up. */
static void data_movement(MPI_Comm comm, const char *name)
{
    int me, n;
    MPI_Comm_rank(comm, &me);
    MPI_Comm_size(comm, &n);
    const int counts[] = { 0, 1, 3, 1000, 20000 + pick(1, 5000) };
    for (unsigned c = 0; c < sizeof counts / sizeof *counts; c++) {
        int k = counts[c];
        int *mine = malloc((k + 1) * sizeof(int));
        int *all = malloc(((size_t)k * n + 1) * sizeof(int));
        for (int i = 0; i < k; i++)
            mine[i] = me * 100003 + i;
        for (int root = 0; root < n; root += n > 1 ? n - 1 : 1) {
            /* Bcast */
            for (int i = 0; i < k; i++)
                mine[i] = me == root ? root * 31 + i : -1;
            MPI_Bcast(mine, k, MPI_INT, root, comm);
            for (int i = 0; i < k; i++)
                CHECK(mine[i] == root * 31 + i + (sabotage && rank == 1 && !i),
                      "%s: MPI_Bcast of %d from %d [%d]: %d", name, k, root, i, mine[i]);
            /* Gather, plain and in place at the root */
            for (int i = 0; i < k; i++)
                mine[i] = me * 100003 + i;
            for (int inplace = 0; inplace < 2; inplace++) {
                memset(all, 0xff, (size_t)k * n * sizeof(int));
                if (inplace && me == root)
                    memcpy(all + (size_t)k * root, mine, k * sizeof(int));
                MPI_Gather(inplace && me == root ? MPI_IN_PLACE : mine, k, MPI_INT, all, k,
                           MPI_INT, root, comm);
                for (int r = 0; me == root && r < n; r++)
                    for (int i = 0; i < k; i++)
                        CHECK(all[(size_t)r * k + i] == r * 100003 + i,
                              "%s: MPI_Gather (in place %d) of %d to %d: [%d][%d] = %d", name,
                              inplace, k, root, r, i, all[(size_t)r * k + i]);
                /* Scatter back what was gathered. */
                for (int i = 0; i < k; i++)
                    mine[i] = -1;
                if (inplace && me == root)
                    MPI_Scatter(all, k, MPI_INT, MPI_IN_PLACE, k, MPI_INT, root, comm);
                else
                    MPI_Scatter(all, k, MPI_INT, mine, k, MPI_INT, root, comm);
                for (int i = 0; !(inplace && me == root) && i < k; i++)
                    CHECK(mine[i] == me * 100003 + i, "%s: MPI_Scatter of %d from %d [%d]: %d",
                          name, k, root, i, mine[i]);
                for (int i = 0; i < k; i++)
                    mine[i] = me * 100003 + i;
            }
        }
        /* Allgather, plain and in place */
        for (int inplace = 0; inplace < 2; inplace++) {
            memset(all, 0xff, (size_t)k * n * sizeof(int));
            if (inplace)
                memcpy(all + (size_t)k * me, mine, k * sizeof(int));
            MPI_Allgather(inplace ? MPI_IN_PLACE : mine, k, MPI_INT, all, k, MPI_INT, comm);
            for (int r = 0; r < n; r++)
                for (int i = 0; i < k; i++)
                    CHECK(all[(size_t)r * k + i] == r * 100003 + i,
                          "%s: MPI_Allgather (in place %d) of %d: [%d][%d] = %d", name, inplace,
                          k, r, i, all[(size_t)r * k + i]);
        }
        /* Alltoall: block j of rank r is r * 1000 + j * 10 + element. */
        {
            int per = k / n + 1;
            int *s = malloc((size_t)per * n * sizeof(int)), *d = malloc((size_t)per * n * sizeof(int));
            for (int inplace = 0; inplace < 2; inplace++) {
                for (int j = 0; j < n; j++)
                    for (int i = 0; i < per; i++)
                        (inplace ? d : s)[j * per + i] = me * 100000 + j * 100 + i;
                MPI_Alltoall(inplace ? MPI_IN_PLACE : s, per, MPI_INT, d, per, MPI_INT, comm);
                for (int j = 0; j < n; j++)
                    for (int i = 0; i < per; i++)
                        CHECK(d[j * per + i] == j * 100000 + me * 100 + i,
                              "%s: MPI_Alltoall (in place %d) of %d: [%d][%d] = %d", name,
                              inplace, per, j, i, d[j * per + i]);
            }
            free(s);
            free(d);
        }
        free(mine);
        free(all);
    }
}

/* The v- and w- forms: rank r has r + 1 elements (x k), displacements
 * leave gaps that must stay as they were. */
static void varying(MPI_Comm comm, int k)
{
    int me, n;
    MPI_Comm_rank(comm, &me);
    MPI_Comm_size(comm, &n);
    int *cnt = malloc(n * sizeof(int)), *dsp = malloc(n * sizeof(int));
    int total = 0;
    for (int r = 0; r < n; r++) {
        cnt[r] = (r + 1) * k;
        dsp[r] = total + 1; /* one element of gap before each */
        total += cnt[r] + 1;
    }
    int *mine = malloc((cnt[me] + 1) * sizeof(int)), *all = malloc((total + 1) * sizeof(int));
    for (int i = 0; i < cnt[me]; i++)
        mine[i] = me * 1000 + i;
    int root = n - 1;
    for (int i = 0; i < total; i++)
        all[i] = -7;
    MPI_Gatherv(mine, cnt[me], MPI_INT, all, cnt, dsp, MPI_INT, root, comm);
    for (int r = 0; me == root && r < n; r++) {
        CHECK(all[dsp[r] - 1] == -7, "MPI_Gatherv wrote into a gap before %d", r);
        for (int i = 0; i < cnt[r]; i++)
            CHECK(all[dsp[r] + i] == r * 1000 + i, "MPI_Gatherv [%d][%d] = %d", r, i,
                  all[dsp[r] + i]);
    }
    for (int i = 0; i < total; i++)
        all[i] = -7;
    MPI_Allgatherv(mine, cnt[me], MPI_INT, all, cnt, dsp, MPI_INT, comm);
    for (int r = 0; !(on_mpich && n == 1) && r < n; r++) {
        CHECK(all[dsp[r] - 1] == -7, "MPI_Allgatherv wrote into a gap before %d", r);
        for (int i = 0; i < cnt[r]; i++)
            CHECK(all[dsp[r] + i] == r * 1000 + i, "MPI_Allgatherv [%d][%d] = %d", r, i,
                  all[dsp[r] + i]);
    }
    for (int r = 0; r < n; r++)
        for (int i = 0; i < cnt[r]; i++)
            all[dsp[r] + i] = r * 1000 + i;
    for (int i = 0; i < cnt[me]; i++)
        mine[i] = -1;
    MPI_Scatterv(all, cnt, dsp, MPI_INT, mine, cnt[me], MPI_INT, 0, comm);
    for (int i = 0; i < cnt[me]; i++)
        CHECK(mine[i] == me * 1000 + i, "MPI_Scatterv [%d] = %d", i, mine[i]);
    /* Alltoallv: rank me sends j + 1 elements to rank j (value me*1000+j*10+i). */
    {
        int *sc = malloc(n * sizeof(int)), *sd = malloc(n * sizeof(int));
        int *rc = malloc(n * sizeof(int)), *rd = malloc(n * sizeof(int));
        int st = 0, rt = 0;
        for (int j = 0; j < n; j++) {
            sc[j] = j + 1;
            sd[j] = st;
            st += sc[j];
            rc[j] = me + 1;
            rd[j] = rt;
            rt += rc[j];
        }
        int *s = malloc(st * sizeof(int)), *d = malloc(rt * sizeof(int));
        for (int j = 0; j < n; j++)
            for (int i = 0; i < sc[j]; i++)
                s[sd[j] + i] = me * 1000 + j * 10 + i;
        MPI_Alltoallv(s, sc, sd, MPI_INT, d, rc, rd, MPI_INT, comm);
        for (int j = 0; j < n; j++)
            for (int i = 0; i < rc[j]; i++)
                CHECK(d[rd[j] + i] == j * 1000 + me * 10 + i, "MPI_Alltoallv [%d][%d] = %d", j,
                      i, d[rd[j] + i]);
        /* Alltoallw: the same with byte displacements and a type per peer. */
        MPI_Datatype *ty = malloc(n * sizeof(MPI_Datatype));
        for (int j = 0; j < n; j++) {
            ty[j] = MPI_INT;
            sd[j] *= sizeof(int);
            rd[j] *= sizeof(int);
        }
        memset(d, 0, rt * sizeof(int));
        MPI_Alltoallw(s, sc, sd, ty, d, rc, rd, ty, comm);
        for (int j = 0; j < n; j++)
            for (int i = 0; i < rc[j]; i++)
                CHECK(d[rd[j] / 4 + i] == j * 1000 + me * 10 + i, "MPI_Alltoallw [%d][%d] = %d",
                      j, i, d[rd[j] / 4 + i]);
        free(ty);
        free(s);
        free(d);
        free(sc);
        free(sd);
        free(rc);
        free(rd);
    }
    free(cnt);
    free(dsp);
    free(mine);
    free(all);
}

/* Reduce_scatter(_block) and in-place reductions. */
static void reductions_in_place(void)
{
    int per = 5, *in = malloc(per * size * sizeof(int)), out[5];
    for (int i = 0; i < per * size; i++)
        in[i] = val(rank, i);
    MPI_Reduce_scatter_block(in, out, per, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    for (int i = 0; i < per; i++) {
        int want = 0;
        for (int r = 0; r < size; r++)
            want += seen(r, rank * per + i);
        CHECK(out[i] == want, "MPI_Reduce_scatter_block [%d]: %d, expected %d", i, out[i], want);
    }
    int *counts = malloc(size * sizeof(int)), at = 0;
    for (int r = 0; r < size; r++)
        counts[r] = r % 3;
    for (int r = 0; r < rank; r++)
        at += counts[r];
    MPI_Reduce_scatter(in, out, counts, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    for (int i = 0; i < counts[rank]; i++) {
        int want = seen(0, at + i);
        for (int r = 1; r < size; r++)
            want = MAXF(want, seen(r, at + i));
        CHECK(out[i] == want, "MPI_Reduce_scatter [%d]: %d, expected %d", i, out[i], want);
    }
    /* In place: Allreduce, Reduce at the root, Reduce_scatter_block. */
    int buf[N];
    for (int i = 0; i < N; i++)
        buf[i] = val(rank, i);
    MPI_Allreduce(MPI_IN_PLACE, buf, N, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    for (int i = 0; i < N; i++) {
        int want = 0;
        for (int r = 0; r < size; r++)
            want += seen(r, i);
        CHECK(buf[i] == want, "MPI_Allreduce in place [%d]: %d, expected %d", i, buf[i], want);
        buf[i] = val(rank, i);
    }
    MPI_Reduce(rank == 0 ? MPI_IN_PLACE : buf, rank == 0 ? buf : NULL, N, MPI_INT, MPI_MIN, 0,
               MPI_COMM_WORLD);
    for (int i = 0; rank == 0 && i < N; i++) {
        int want = seen(0, i);
        for (int r = 1; r < size; r++)
            want = MINF(want, seen(r, i));
        CHECK(buf[i] == want, "MPI_Reduce in place [%d]: %d, expected %d", i, buf[i], want);
    }
    MPI_Reduce_scatter_block(MPI_IN_PLACE, in, per, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    for (int i = 0; i < per; i++) {
        int want = 0;
        for (int r = 0; r < size; r++)
            want += seen(r, rank * per + i);
        CHECK(in[i] == want, "MPI_Reduce_scatter_block in place [%d]: %d", i, in[i]);
    }
    free(in);
    free(counts);
}

/* Derived datatypes as buffers: every other int of a vector type; the
 * gaps must never be written. */
static void derived(void)
{
    MPI_Datatype vec;
    int buf[2 * 6], sum[2 * 6];
    MPI_Type_vector(3, 1, 2, MPI_INT, &vec);
    MPI_Type_commit(&vec);
    int root = 1 % size;
    for (int i = 0; i < 12; i++)
        buf[i] = rank == root ? 40 + i : -5;
    MPI_Bcast(buf, 2, vec, root, MPI_COMM_WORLD);
    /* Two elements of the vector: ints 0, 2, 4 and 5, 7, 9 (extent 5). */
    for (int i = 0; i < 12; i++) {
        int data = (i < 5 && i % 2 == 0) || (i >= 5 && i < 10 && i % 2 == 1);
        int want = data || rank == root ? 40 + i : -5;
        CHECK(buf[i] == want, "MPI_Bcast of a vector type: [%d] = %d, expected %d", i, buf[i],
              want);
    }
    /* A predefined operation on a vector of ints (fm takes any type made
     * of one predefined type; MPICH only contiguous ones). */
    for (int i = 0; i < 12; i++)
        buf[i] = rank + i, sum[i] = -9;
    if (!on_mpich) {
        MPI_Allreduce(buf, sum, 2, vec, MPI_SUM, MPI_COMM_WORLD);
        for (int i = 0; i < 12; i++) {
            int data = (i < 5 && i % 2 == 0) || (i >= 5 && i < 10 && i % 2 == 1);
            int want = data ? size * (size - 1) / 2 + size * i : -9;
            CHECK(sum[i] == want, "MPI_Allreduce of a vector type: [%d] = %d, expected %d", i,
                  sum[i], want);
        }
    }
    MPI_Type_free(&vec);
}

/* Large messages (>= 4 MiB): the long-message algorithms. */
static void large(void)
{
    int n = (4 << 20) / 4 + 3;
    int *a = malloc(n * sizeof(int)), *b = malloc(n * sizeof(int));
    for (int i = 0; i < n; i++)
        a[i] = rank == size - 1 ? i ^ 0x5a5a : 0;
    MPI_Bcast(a, n, MPI_INT, size - 1, MPI_COMM_WORLD);
    for (int i = 0; i < n; i++)
        CHECK(a[i] == (i ^ 0x5a5a), "large MPI_Bcast [%d] = %d", i, a[i]);
    for (int i = 0; i < n; i++)
        a[i] = rank + (i & 0xff);
    MPI_Allreduce(a, b, n, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    for (int i = 0; i < n; i++)
        CHECK(b[i] == size * (size - 1) / 2 + size * (i & 0xff), "large MPI_Allreduce [%d] = %d",
              i, b[i]);
    free(a);
    free(b);
}

/* On a communicator split into two, each in reversed rank order. */
static void split(void)
{
    MPI_Comm half;
    int me, n;
    MPI_Comm_split(MPI_COMM_WORLD, rank % 2, -rank, &half);
    MPI_Comm_rank(half, &me);
    MPI_Comm_size(half, &n);
    /* Member m of the half is world rank: the largest of its parity, down. */
    int top = size - 1 - ((size - 1 - rank % 2) % 2);
    CHECK(top - 2 * me == rank, "split: rank %d is member %d of %d", rank, me, n);
    int x = rank, sum = 0, first = -1;
    MPI_Allreduce(&x, &sum, 1, MPI_INT, MPI_SUM, half);
    int want = 0;
    for (int m = 0; m < n; m++)
        want += top - 2 * m;
    CHECK(sum == want, "MPI_Allreduce on a split: %d, expected %d", sum, want);
    MPI_Scan(&x, &first, 1, MPI_INT, MPI_MAX, half);
    CHECK(first == top, "MPI_Scan (max) on a reversed split: %d, expected %d", first, top);
    data_movement(half, "split");
    varying(half, 2);
    MPI_Comm_free(&half);
}

/* Non-blocking collectives overlapped with each other and with
 * point-to-point messages, completed by one Waitall. */
static void nonblocking(void)
{
    int n = 3000, *a = malloc(n * sizeof(int)), *b = malloc(n * sizeof(int));
    int x = rank + 1, y = 0, z[2] = { 0, 0 }, to = (rank + 1) % size, from = (rank + size - 1) % size;
    int token = rank * 3, got = -1, flag = 0;
    int *g = malloc(size * sizeof(int));
    MPI_Request rq[7];
    for (int i = 0; i < n; i++)
        a[i] = rank == 0 ? i * 7 : 0, b[i] = rank;
    MPI_Ibcast(a, n, MPI_INT, 0, MPI_COMM_WORLD, &rq[0]);
    MPI_Iallreduce(&x, &y, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &rq[1]);
    MPI_Irecv(&got, 1, MPI_INT, from, 9, MPI_COMM_WORLD, &rq[2]);
    MPI_Isend(&token, 1, MPI_INT, to, 9, MPI_COMM_WORLD, &rq[3]);
    MPI_Iallgather(&x, 1, MPI_INT, g, 1, MPI_INT, MPI_COMM_WORLD, &rq[4]);
    MPI_Iallreduce(MPI_IN_PLACE, b, n, MPI_INT, MPI_MAX, MPI_COMM_WORLD, &rq[5]);
    MPI_Iexscan(&x, z, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &rq[6]);
    MPI_Waitall(7, rq, MPI_STATUSES_IGNORE);
    for (int i = 0; i < n; i++)
        CHECK(a[i] == i * 7 && b[i] == size - 1, "MPI_Ibcast/Iallreduce [%d]: %d %d", i, a[i],
              b[i]);
    CHECK(y == size * (size + 1) / 2 + (sabotage && rank == 1), "MPI_Iallreduce: %d", y);
    CHECK(got == from * 3, "Irecv beside collectives: %d", got);
    for (int r = 0; r < size; r++)
        CHECK(g[r] == r + 1, "MPI_Iallgather [%d] = %d", r, g[r]);
    CHECK(rank == 0 || z[0] == rank * (rank + 1) / 2, "MPI_Iexscan: %d", z[0]);
    MPI_Ibarrier(MPI_COMM_WORLD, &rq[0]);
    while (!flag)
        MPI_Test(&rq[0], &flag, MPI_STATUS_IGNORE);
    CHECK(rq[0] == MPI_REQUEST_NULL, "a completed Ibarrier's request is not MPI_REQUEST_NULL");
    free(a);
    free(b);
    free(g);
}

/* Persistent collectives (MPI-4.0): made once, started again and again
 * with new data in the same buffers, beside a blocking collective. */
static void persistent(void)
{
    int x = 0, sum = -1, b[5], g[64];
    MPI_Request rq[3];
    MPI_Allreduce_init(&x, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, MPI_INFO_NULL, &rq[0]);
    MPI_Bcast_init(b, 5, MPI_INT, size - 1, MPI_COMM_WORLD, MPI_INFO_NULL, &rq[1]);
    MPI_Barrier_init(MPI_COMM_WORLD, MPI_INFO_NULL, &rq[2]);
    for (int round = 0; round < 4; round++) {
        x = rank * round;
        for (int i = 0; i < 5; i++)
            b[i] = rank == size - 1 ? round * 10 + i : -1;
        MPI_Startall(3, rq);
        MPI_Allgather(&x, 1, MPI_INT, g, 1, MPI_INT, MPI_COMM_WORLD);
        MPI_Waitall(3, rq, MPI_STATUSES_IGNORE);
        CHECK(sum == round * size * (size - 1) / 2 + (sabotage && rank == 1),
              "MPI_Allreduce_init, start %d: %d", round, sum);
        for (int i = 0; i < 5; i++)
            CHECK(b[i] == round * 10 + i, "MPI_Bcast_init, start %d: [%d] = %d", round, i, b[i]);
        for (int r = 0; r < size && size <= 64; r++)
            CHECK(g[r] == r * round, "MPI_Allgather between starts: [%d] = %d", r, g[r]);
    }
    for (int i = 0; i < 3; i++)
        MPI_Request_free(&rq[i]);
}

/* Errors that are the caller's: reported, not run, under MPI_ERRORS_RETURN. */
static void errors(void)
{
    double d = 1, e;
    int cls = 0;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Error_class(MPI_Allreduce(&d, &e, 1, MPI_DOUBLE, MPI_BAND, MPI_COMM_WORLD), &cls);
    CHECK(cls == MPI_ERR_OP, "MPI_BAND on MPI_DOUBLE: class %d, not MPI_ERR_OP", cls);
    MPI_Error_class(MPI_Bcast(&d, 1, MPI_DOUBLE, size, MPI_COMM_WORLD), &cls);
    CHECK(cls == MPI_ERR_ROOT, "a root out of range: class %d, not MPI_ERR_ROOT", cls);
    MPI_Error_class(MPI_Allreduce(&d, &e, 1, MPI_DOUBLE, MPI_OP_NULL, MPI_COMM_WORLD), &cls);
    CHECK(cls == MPI_ERR_OP, "MPI_OP_NULL: class %d, not MPI_ERR_OP", cls);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
}

static void self(void)
{
    int x = 5, y = 0;
    MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_PROD, MPI_COMM_SELF);
    CHECK(y == 5, "MPI_Allreduce on MPI_COMM_SELF: %d", y);
    MPI_Bcast(&x, 1, MPI_INT, 0, MPI_COMM_SELF);
    MPI_Barrier(MPI_COMM_SELF);
    data_movement(MPI_COMM_SELF, "self");
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    seed = argc > 1 ? atoi(argv[1]) : 1;
    sabotage = argc > 2 && !strcmp(argv[2], "sabotage");
    on_mpich = getenv("ON_MPICH") != NULL;
    MPI_Barrier(MPI_COMM_WORLD);
    predefined_ops();
    complex_ops();
    loc_ops();
    user_ops();
    reductions_in_place();
    data_movement(MPI_COMM_WORLD, "world");
    varying(MPI_COMM_WORLD, 3);
    varying(MPI_COMM_WORLD, 0);
    derived();
    large();
    split();
    nonblocking();
    persistent();
    errors();
    self();
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0)
        printf("all collectives passed on %d ranks\n", size);
    MPI_Finalize();
    return 0;
}
