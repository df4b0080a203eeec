/* The subarray and hindexed-block constructors, MPI-1's datatype names,
 * the _x queries, the status setters, attributes on datatypes and
 * distributed arrays, each checked against what this
 * rank computes alone: a subarray's bytes as MPI_Pack lays them out and
 * as they arrive at rank 1 (C and Fortran order, 1 to 3 dimensions,
 * every start that fits in a small array), its size and its bounds.
 *
 *   typemaps [sabotage]   sabotage: expect one wrong value (must fail) */
#include <mpi.h>
#include <stdio.h>
#include <string.h>
#include "check.h"

static int rank, size, sabotage;

/* Element (i, j, k) of an array of sizes s in order `order`, as an index. */
static int at(const int *s, const int *c, int nd, int order)
{
    int idx = 0;
    for (int d = 0; d < nd; d++) {
        int dim = order == MPI_ORDER_C ? d : nd - 1 - d;
        idx = idx * s[dim] + c[dim];
    }
    return idx;
}

static void subarrays(void)
{
    int sizes[3] = {4, 3, 5}, full = 60, array[60], packed[60], expect[60];
    for (int i = 0; i < full; i++)
        array[i] = 1000 + i;
    for (int nd = 1; nd <= 3; nd++)
        for (int order = MPI_ORDER_C; order <= MPI_ORDER_FORTRAN; order++)
            for (int trial = 0; trial < 8; trial++) {
                int sub[3], start[3], n = 1, whole = 1;
                for (int d = 0; d < nd; d++) {
                    sub[d] = 1 + (trial + d) % sizes[d];
                    start[d] = (trial * (d + 1)) % (sizes[d] - sub[d] + 1);
                    n *= sub[d];
                    whole *= sizes[d];
                }
                MPI_Datatype t;
                MPI_Type_create_subarray(nd, sizes, sub, start, order, MPI_INT, &t);
                MPI_Type_commit(&t);
                int tsize;
                MPI_Aint lb, extent;
                MPI_Type_size(t, &tsize);
                MPI_Type_get_extent(t, &lb, &extent);
                CHECK(tsize == n * 4 && lb == 0 && extent == whole * 4, "subarray %dd order %d: size %d lb %ld extent %ld",
                      nd, order, tsize, (long)lb, (long)extent);
                /* The elements in the order of the array's memory. */
                int m = 0, c[3];
                for (int idx = 0; idx < whole; idx++) {
                    int left = idx, in = 1;
                    for (int d = nd - 1; d >= 0; d--) {
                        int dim = order == MPI_ORDER_C ? d : nd - 1 - d;
                        c[dim] = left % sizes[dim];
                        left /= sizes[dim];
                    }
                    for (int d = 0; d < nd; d++)
                        in &= c[d] >= start[d] && c[d] < start[d] + sub[d];
                    if (in)
                        expect[m++] = array[at(sizes, c, nd, order)];
                }
                int pos = 0;
                MPI_Pack(array, 1, t, packed, sizeof packed, &pos, MPI_COMM_SELF);
                CHECK(pos == n * 4, "packed %d bytes", pos);
                for (int i = 0; i < n; i++)
                    CHECK(packed[i] == expect[i] + (sabotage && i == 0 && trial == 3), "subarray %dd order %d trial %d: element %d is %d, not %d",
                          nd, order, trial, i, packed[i], expect[i]);
                if (size > 1 && rank < 2) {
                    int got[60];
                    if (rank == 0)
                        MPI_Send(array, 1, t, 1, trial, MPI_COMM_WORLD);
                    else {
                        MPI_Recv(got, n, MPI_INT, 0, trial, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                        CHECK(!memcmp(got, expect, n * 4), "a subarray sent: %d", got[0]);
                    }
                }
                MPI_Type_free(&t);
            }
}

/* A message received into MPI_BOTTOM with a type of absolute addresses
 * after it arrived (the unexpected path unpacks it), and sent from one. */
static void bottom(MPI_Comm pair)
{
    if (size < 2 || rank > 1)
        return;
    int x[3] = {-1, -1, -1}, blocks[3] = {1, 1, 1};
    MPI_Aint where[3];
    MPI_Datatype types[3] = {MPI_INT, MPI_INT, MPI_INT}, abs;
    for (int i = 0; i < 3; i++)
        MPI_Get_address(&x[2 - i], &where[i]);
    MPI_Type_create_struct(3, blocks, where, types, &abs);
    MPI_Type_commit(&abs);
    if (rank == 0) {
        x[0] = 10, x[1] = 20, x[2] = 30;
        MPI_Send(MPI_BOTTOM, 1, abs, 1, 5, MPI_COMM_WORLD);
        MPI_Barrier(pair);
    } else {
        MPI_Barrier(pair);
        MPI_Recv(MPI_BOTTOM, 1, abs, 0, 5, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        CHECK(x[0] == 10 && x[1] == 20 && x[2] == 30, "MPI_BOTTOM: %d %d %d", x[0], x[1], x[2]);
    }
    MPI_Type_free(&abs);
}

static void others(void)
{
    /* Hindexed block: blocks of 2 ints at byte offsets. */
    int a[10] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, out[6], pos = 0;
    MPI_Aint displs[3] = {32, 0, 16};
    MPI_Datatype hb, hv, st;
    MPI_Type_create_hindexed_block(3, 2, displs, MPI_INT, &hb);
    MPI_Type_commit(&hb);
    MPI_Pack(a, 1, hb, out, sizeof out, &pos, MPI_COMM_SELF);
    CHECK(out[0] == 8 && out[1] == 9 && out[2] == 0 && out[3] == 1 && out[4] == 4 && out[5] == 5,
          "hindexed block: %d %d %d %d %d %d", out[0], out[1], out[2], out[3], out[4], out[5]);
    /* MPI-1 names. */
    MPI_Aint ext, lb, ub, addr;
    MPI_Type_hvector(2, 1, 12, MPI_INT, &hv);
    MPI_Type_extent(hv, &ext);
    MPI_Type_lb(hv, &lb);
    MPI_Type_ub(hv, &ub);
    CHECK(ext == 16 && lb == 0 && ub == 16, "MPI_Type_hvector: extent %ld lb %ld ub %ld", (long)ext, (long)lb, (long)ub);
    int bl[2] = {1, 1};
    MPI_Aint sd[2] = {0, 8};
    MPI_Datatype ts[2] = {MPI_INT, MPI_DOUBLE};
    MPI_Type_struct(2, bl, sd, ts, &st);
    MPI_Count sx, lbx, extx;
    MPI_Type_size_x(st, &sx);
    MPI_Type_get_extent_x(st, &lbx, &extx);
    CHECK(sx == 12 && lbx == 0 && extx == 16, "MPI_Type_struct: size %lld extent %lld", (long long)sx, (long long)extx);
    MPI_Address(&a[3], &addr);
    CHECK(addr == (MPI_Aint)&a[3], "MPI_Address");
    /* Status setters, for layered libraries and generalized requests. */
    MPI_Status s;
    int n, flag;
    MPI_Count nx;
    MPI_Status_set_elements(&s, MPI_DOUBLE, 5);
    MPI_Status_set_cancelled(&s, 1);
    MPI_Get_count(&s, MPI_DOUBLE, &n);
    MPI_Get_elements_x(&s, MPI_INT, &nx);
    MPI_Test_cancelled(&s, &flag);
    CHECK(n == 5 && nx == 10 && flag, "status setters: %d %lld %d", n, (long long)nx, flag);
    /* A count past 2^31 (MPICH's pt2pt/big_count_status): whole through
     * MPI_Get_elements_x, MPI_UNDEFINED from MPI_Get_elements, the
     * cancelled bit kept apart. */
    MPI_Count big = 0x7654321ff1234567LL;
    MPI_Status_set_elements_x(&s, MPI_BYTE, big);
    MPI_Get_elements_x(&s, MPI_BYTE, &nx);
    MPI_Get_elements(&s, MPI_BYTE, &n);
    MPI_Test_cancelled(&s, &flag);
    CHECK(nx == big && n == MPI_UNDEFINED && flag, "a big count: %llx, %x, cancelled %d", (long long)nx, n, flag);
    MPI_Type_free(&hb);
    MPI_Type_free(&hv);
    MPI_Type_free(&st);
}

/* MPI_Type_get_envelope and _contents give back each constructor's
 * arguments; a derived type among them is a new type, usable after the
 * original is freed, and freed by the program. */
static void decoding(void)
{
    int ni, na, nt, comb, ints[8];
    MPI_Aint adds[4];
    MPI_Datatype types[4], vec, st, sub, got;
    MPI_Type_get_envelope(MPI_INT, &ni, &na, &nt, &comb);
    CHECK(comb == MPI_COMBINER_NAMED && ni == 0 && na == 0 && nt == 0, "MPI_INT's envelope: combiner %d", comb);
    MPI_Type_vector(3, 2, 5, MPI_DOUBLE, &vec);
    MPI_Type_get_envelope(vec, &ni, &na, &nt, &comb);
    CHECK(comb == MPI_COMBINER_VECTOR && ni == 3 && na == 0 && nt == 1, "a vector's envelope: %d %d %d %d", comb,
          ni, na, nt);
    MPI_Type_get_contents(vec, 8, 4, 4, ints, adds, types);
    CHECK(ints[0] == 3 && ints[1] == 2 && ints[2] == 5 + (sabotage && rank == 0) && types[0] == MPI_DOUBLE,
          "a vector's contents: %d %d %d", ints[0], ints[1], ints[2]);
    int bl[2] = {1, 4};
    MPI_Aint at[2] = {0, 16};
    MPI_Datatype ts[2] = {MPI_CHAR, vec};
    MPI_Type_create_struct(2, bl, at, ts, &st);
    MPI_Type_free(&vec);
    MPI_Type_get_envelope(st, &ni, &na, &nt, &comb);
    CHECK(comb == MPI_COMBINER_STRUCT && ni == 3 && na == 2 && nt == 2, "a struct's envelope: %d %d %d %d", comb,
          ni, na, nt);
    MPI_Type_get_contents(st, 8, 4, 4, ints, adds, types);
    CHECK(ints[0] == 2 && ints[1] == 1 && ints[2] == 4 && adds[0] == 0 && adds[1] == 16 && types[0] == MPI_CHAR,
          "a struct's contents");
    /* The vector, freed above, comes back as a new type of the same shape. */
    MPI_Type_get_envelope(types[1], &ni, &na, &nt, &comb);
    int size;
    MPI_Type_size(types[1], &size);
    CHECK(comb == MPI_COMBINER_VECTOR && size == 6 * 8, "the struct's vector: combiner %d, size %d", comb, size);
    MPI_Type_free(&types[1]);
    int sizes[2] = {4, 5}, subs[2] = {2, 3}, starts[2] = {1, 2};
    MPI_Type_create_subarray(2, sizes, subs, starts, MPI_ORDER_FORTRAN, MPI_INT, &sub);
    MPI_Type_dup(sub, &got);
    MPI_Type_get_envelope(got, &ni, &na, &nt, &comb);
    CHECK(comb == MPI_COMBINER_DUP && nt == 1, "a duplicate's envelope: %d", comb);
    MPI_Type_get_contents(got, 8, 4, 4, ints, adds, types);
    MPI_Type_get_envelope(types[0], &ni, &na, &nt, &comb);
    CHECK(comb == MPI_COMBINER_SUBARRAY && ni == 8, "a subarray's envelope: %d %d", comb, ni);
    MPI_Type_get_contents(types[0], 8, 4, 4, ints, adds, &vec);
    CHECK(ints[0] == 2 && ints[1] == 4 && ints[3] == 2 && ints[5] == 1 && ints[7] == MPI_ORDER_FORTRAN,
          "a subarray's contents");
    MPI_Type_free(&types[0]);
    MPI_Type_free(&got);
    MPI_Type_free(&sub);
    MPI_Type_free(&st);
}

/* Complex numbers are aligned as their parts, as C aligns them (a char
 * then a double complex: 24 bytes, not 32); predefined types and MPI-1's
 * bound markers have MPICH's names. */
static void alignment_and_names(void)
{
    int bl[2] = {1, 1};
    MPI_Aint at[2] = {0, 8}, lb, extent;
    MPI_Datatype ts[2] = {MPI_CHAR, MPI_C_DOUBLE_COMPLEX}, t;
    MPI_Type_create_struct(2, bl, at, ts, &t);
    MPI_Type_get_extent(t, &lb, &extent);
    CHECK(extent == 24, "a char and a double complex: extent %ld, not 24", (long)extent);
    MPI_Type_free(&t);
    at[1] = 4;
    ts[1] = MPI_C_FLOAT_COMPLEX;
    MPI_Type_create_struct(2, bl, at, ts, &t);
    MPI_Type_get_extent(t, &lb, &extent);
    CHECK(extent == 12, "a char and a float complex: extent %ld, not 12", (long)extent);
    MPI_Type_free(&t);
    struct {
        MPI_Datatype t;
        const char *name;
    } names[] = {{MPI_C_FLOAT_COMPLEX, "MPI_C_COMPLEX"}, {MPI_INTEGER4, "MPI_INTEGER4"},
                 {MPI_CXX_BOOL, "MPI_CXX_BOOL"},       {MPI_LB, "MPI_LB"},
                 {MPI_UB, "MPI_UB"},                   {MPI_LONG_LONG_INT, "MPI_LONG_LONG_INT"}};
    for (unsigned i = 0; i < sizeof names / sizeof *names; i++) {
        char got[MPI_MAX_OBJECT_NAME] = "";
        int len = 0;
        MPI_Type_get_name(names[i].t, got, &len);
        CHECK(!strcmp(got, names[i].name), "the name of %s: \"%s\"", names[i].name, got);
    }
}

/* Which process of a dimension of `g` elements spread as `distrib`
 * (argument `darg`) over `p` processes holds element `i`. */
static int owner(int i, int g, int p, int distrib, int darg)
{
    if (distrib == MPI_DISTRIBUTE_NONE)
        return 0;
    int k = darg != MPI_DISTRIBUTE_DFLT_DARG ? darg : distrib == MPI_DISTRIBUTE_BLOCK ? (g + p - 1) / p : 1;
    return (i / k) % p;
}

/* MPI_Type_create_darray on a 7 x 5 array over every grid of the ranks
 * (2 dimensions), BLOCK, CYCLIC(2), default arguments and NONE, in both
 * orders: packing the array with a rank's type gives exactly the elements
 * that rank holds, in array order, and every element is held once. */
static void darrays(void)
{
    enum { G0 = 7, G1 = 5 };
    int a[G0 * G1], packed[G0 * G1], want[G0 * G1];
    for (int i = 0; i < G0 * G1; i++)
        a[i] = i;
    int kinds[][2] = {{MPI_DISTRIBUTE_BLOCK, MPI_DISTRIBUTE_DFLT_DARG},
                      {MPI_DISTRIBUTE_CYCLIC, 2},
                      {MPI_DISTRIBUTE_CYCLIC, MPI_DISTRIBUTE_DFLT_DARG},
                      {MPI_DISTRIBUTE_BLOCK, 4}};
    for (int p0 = 1; p0 <= size; p0++) {
        if (size % p0)
            continue;
        int ps[2] = {p0, size / p0}, me[2] = {rank / ps[1], rank % ps[1]};
        for (int order = 0; order < 2; order++)
            for (int k0 = 0; k0 < 4; k0++)
                for (int k1 = 0; k1 < 4; k1++) {
                    int gs[2] = {G0, G1}, d[2] = {kinds[k0][0], kinds[k1][0]},
                        da[2] = {kinds[k0][1], kinds[k1][1]};
                    /* BLOCK(4) covers 7 only on 2 or more processes. */
                    if ((da[0] == 4 && 4 * ps[0] < G0) || (da[1] == 4 && 4 * ps[1] < G1))
                        continue;
                    int ord = order ? MPI_ORDER_FORTRAN : MPI_ORDER_C;
                    MPI_Datatype t;
                    MPI_Type_create_darray(size, rank, 2, gs, d, da, ps, ord, MPI_INT, &t);
                    MPI_Type_commit(&t);
                    int n = 0, bytes = 0, pos = 0;
                    MPI_Aint lb, extent;
                    MPI_Type_get_extent(t, &lb, &extent);
                    CHECK(lb == 0 && extent == (MPI_Aint)sizeof a, "darray extent %ld", (long)extent);
                    /* In C order element (i, j) is a[i * G1 + j]; in
                     * Fortran order a[i + j * G0]; memory order first. */
                    for (int x = 0; x < G0 * G1; x++) {
                        int i = order ? x % G0 : x / G1, j = order ? x / G0 : x % G1;
                        if (owner(i, G0, ps[0], d[0], da[0]) == me[0] &&
                            owner(j, G1, ps[1], d[1], da[1]) == me[1])
                            want[n++] = x;
                    }
                    MPI_Type_size(t, &bytes);
                    MPI_Pack(a, 1, t, packed, sizeof packed, &pos, MPI_COMM_SELF);
                    CHECK(bytes == n * (int)sizeof(int) && pos == bytes,
                          "darray on %dx%d, kinds %d %d, order %d: %d bytes, %d wanted", ps[0], ps[1], k0,
                          k1, order, bytes, n * (int)sizeof(int));
                    for (int e = 0; e < n; e++)
                        CHECK(packed[e] == want[e] + (sabotage && e == n - 1),
                              "darray on %dx%d, kinds %d %d, order %d: element %d is %d, not %d", ps[0],
                              ps[1], k0, k1, order, e, packed[e], want[e]);
                    int total = 0;
                    MPI_Allreduce(&n, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
                    CHECK(total == G0 * G1, "the processes hold %d elements of %d", total, G0 * G1);
                    MPI_Type_free(&t);
                }
    }
}

static int copies, deletions;

static int count_copy(MPI_Datatype t, int key, void *extra, void *in, void *out, int *flag)
{
    (void)t, (void)key, (void)extra;
    copies++;
    *(void **)out = (char *)in + 1;
    *flag = 1;
    return MPI_SUCCESS;
}

static int count_delete(MPI_Datatype t, int key, void *value, void *extra)
{
    (void)t, (void)key, (void)value, (void)extra;
    deletions++;
    return MPI_SUCCESS;
}

static int refuse_delete(MPI_Datatype t, int key, void *value, void *extra)
{
    (void)t, (void)key, (void)value, (void)extra;
    return MPI_ERR_OTHER;
}

/* Attributes on datatypes: set, replaced (the old value's delete callback
 * runs), copied by MPI_Type_dup as the copy callback says, deleted by
 * MPI_Type_free; a comm keyval refused on a datatype; a failing delete
 * callback fails the call and keeps the value. */
static void type_attributes(void)
{
    int key, plain, refusing, comm_key, flag;
    char *v;
    MPI_Datatype t, twin;
    MPI_Type_contiguous(3, MPI_INT, &t);
    MPI_Type_create_keyval(count_copy, count_delete, &key, NULL);
    MPI_Type_create_keyval(MPI_TYPE_NULL_COPY_FN, MPI_TYPE_NULL_DELETE_FN, &plain, NULL);
    static char base[8];
    MPI_Type_set_attr(t, key, base);
    MPI_Type_set_attr(t, key, base + 2);
    CHECK(deletions == 1, "replacing a value ran %d deletions", deletions);
    MPI_Type_set_attr(t, plain, base + 5);
    MPI_Type_get_attr(t, key, &v, &flag);
    CHECK(flag && v == base + 2 + sabotage, "the datatype's attribute is %p, not %p", (void *)v,
          (void *)(base + 2));
    MPI_Type_dup(t, &twin);
    MPI_Type_get_attr(twin, key, &v, &flag);
    CHECK(copies == 1 && flag && v == base + 3, "the dup's attribute: %d copies, flag %d", copies, flag);
    MPI_Type_get_attr(twin, plain, &v, &flag);
    CHECK(!flag, "an attribute without a copy callback was copied");
    MPI_Type_free(&twin);
    CHECK(deletions == 2, "freeing the dup ran %d deletions", deletions);
    MPI_Type_delete_attr(t, key);
    MPI_Type_get_attr(t, key, &v, &flag);
    CHECK(deletions == 3 && !flag, "deleting: %d deletions, flag %d", deletions, flag);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, MPI_COMM_NULL_DELETE_FN, &comm_key, NULL);
    int rc = MPI_Type_set_attr(t, comm_key, base);
    int cls = -1;
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_KEYVAL, "a communicator's keyval on a datatype: class %d", cls);
    MPI_Type_create_keyval(MPI_TYPE_NULL_COPY_FN, refuse_delete, &refusing, NULL);
    MPI_Type_set_attr(t, refusing, base + 7);
    rc = MPI_Type_delete_attr(t, refusing);
    MPI_Type_get_attr(t, refusing, &v, &flag);
    CHECK(rc != MPI_SUCCESS && flag && v == base + 7, "a refused deletion: rc %d, flag %d", rc, flag);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    MPI_Type_free_keyval(&plain);
    CHECK(plain == MPI_KEYVAL_INVALID, "a freed keyval is %d", plain);
    MPI_Type_free_keyval(&key);
    MPI_Comm_free_keyval(&comm_key);
}

/* Fortran 90's parameterized types: the size each (p, r) selects, the
 * same handle again for the same arguments, and the envelope. */
static void f90_types(void)
{
    struct {
        int p, r, size;
    } reals[] = {{6, 30, 4}, {6, 37, 4}, {7, 37, 8}, {15, 307, 8}, {MPI_UNDEFINED, 37, 4}, {6, MPI_UNDEFINED, 4}};
    for (unsigned i = 0; i < sizeof reals / sizeof reals[0]; i++) {
        MPI_Datatype t, again, c;
        int size, ni, na, nd, combiner, ints[2];
        MPI_Type_create_f90_real(reals[i].p, reals[i].r, &t);
        MPI_Type_create_f90_real(reals[i].p, reals[i].r, &again);
        MPI_Type_size(t, &size);
        MPI_Type_get_envelope(t, &ni, &na, &nd, &combiner);
        MPI_Type_get_contents(t, 2, 0, 0, ints, NULL, NULL);
        CHECK(size == reals[i].size && t == again && combiner == MPI_COMBINER_F90_REAL && ni == 2 &&
                  ints[0] == reals[i].p && ints[1] == reals[i].r,
              "f90 real (%d, %d): size %d combiner %d", reals[i].p, reals[i].r, size, combiner);
        MPI_Type_create_f90_complex(reals[i].p, reals[i].r, &c);
        MPI_Type_size(c, &size);
        CHECK(size == 2 * reals[i].size, "f90 complex (%d, %d): size %d", reals[i].p, reals[i].r, size);
    }
    int digits[] = {1, 2, 3, 4, 5, 9, 10, 18}, sizes[] = {1, 1, 2, 2, 4, 4, 8, 8};
    for (int i = 0; i < 8; i++) {
        MPI_Datatype t;
        int size;
        MPI_Type_create_f90_integer(digits[i], &t);
        MPI_Type_size(t, &size);
        CHECK(size == sizes[i], "f90 integer of %d digits: size %d", digits[i], size);
    }
    MPI_Datatype t;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    CHECK(MPI_Type_create_f90_real(16, 307, &t) != MPI_SUCCESS, "a real of 16 digits");
    CHECK(MPI_Type_create_f90_integer(19, &t) != MPI_SUCCESS, "an integer of 19 digits");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    sabotage = argc > 1 && !strcmp(argv[1], "sabotage");
    subarrays();
    others();
    decoding();
    alignment_and_names();
    type_attributes();
    darrays();
    f90_types();
    MPI_Comm split;
    MPI_Comm_split(MPI_COMM_WORLD, rank < 2, rank, &split);
    bottom(split);
    MPI_Comm_free(&split);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0)
        printf("all datatype checks passed on %d ranks\n", size);
    MPI_Finalize();
    return 0;
}
