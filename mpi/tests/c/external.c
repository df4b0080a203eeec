/* external32 (MPI_Pack_external, MPI_Unpack_external,
 * MPI_Pack_external_size and their _c forms): each predefined type's
 * bytes as MPI-4.0's Table 14.2 gives them (big-endian; long in 4 bytes;
 * long double as binary128; a complex number's parts each), a struct and
 * a vector packed and unpacked back, positions carried across calls, and
 * a buffer too small refused.
 *
 *   external [sabotage]   sabotage: expect one wrong value (must fail) */
#include <mpi.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"

static int rank, sabotage, on_mpich;

static void expect(const char *what, const void *in, MPI_Datatype t, const unsigned char *want, int n)
{
    unsigned char out[64];
    MPI_Aint pos = 0, size;
    MPI_Pack_external_size("external32", 1, t, &size);
    CHECK(size == n, "%s: external size %ld, not %d", what, (long)size, n);
    MPI_Pack_external("external32", in, 1, t, out, sizeof out, &pos);
    CHECK(pos == n, "%s: position %ld", what, (long)pos);
    for (int i = 0; i < n; i++)
        CHECK(out[i] == want[i], "%s: byte %d is %02x, not %02x", what, i, out[i], want[i]);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    sabotage = argc > 1 && !strcmp(argv[1], "sabotage");
    on_mpich = getenv("ON_MPICH") != NULL;

    int i = 0x01020304;
    expect("int", &i, MPI_INT, (unsigned char[]){1 + sabotage, 2, 3, 4}, 4);
    short s = 0x0102;
    expect("short", &s, MPI_SHORT, (unsigned char[]){1, 2}, 2);
    long l = -2;
    expect("long", &l, MPI_LONG, (unsigned char[]){0xff, 0xff, 0xff, 0xfe}, 4);
    double d = 1.0;
    expect("double", &d, MPI_DOUBLE, (unsigned char[]){0x3f, 0xf0, 0, 0, 0, 0, 0, 0}, 8);
    long double ld = 1.0L;
    unsigned char quad[16] = {0x3f, 0xff};
    expect("long double", &ld, MPI_LONG_DOUBLE, quad, 16);
    float fc[2] = {1.0f, 2.0f};
    expect("float complex", fc, MPI_C_FLOAT_COMPLEX, (unsigned char[]){0x3f, 0x80, 0, 0, 0x40, 0, 0, 0}, 8);
    unsigned char packed[128];
    char c = 'x';
    expect("char", &c, MPI_CHAR, (unsigned char[]){'x'}, 1);

    /* A struct of a char, a long and a double: 1 + 4 + 8 bytes each
     * (MPICH 4.0.2 crashes on a derived type holding a long: ON_MPICH
     * leaves this part out). */
    if (!on_mpich) {
        struct rec {
            char c;
            long l;
            double d;
        } recs[3] = {{'a', -7, 0.5}, {'b', 1 << 20, -2.0}, {'c', 42, 3.25}}, back[3];
        int lens[3] = {1, 1, 1};
        MPI_Aint displs[3] = {offsetof(struct rec, c), offsetof(struct rec, l), offsetof(struct rec, d)};
        MPI_Datatype types[3] = {MPI_CHAR, MPI_LONG, MPI_DOUBLE}, rec;
        MPI_Type_create_struct(3, lens, displs, types, &rec);
        MPI_Type_commit(&rec);
        MPI_Aint pos = 0, size;
        MPI_Pack_external_size("external32", 3, rec, &size);
        CHECK(size == 39, "struct: external size %ld", (long)size);
        MPI_Pack_external("external32", recs, 2, rec, packed, sizeof packed, &pos);
        MPI_Pack_external("external32", &recs[2], 1, rec, packed, sizeof packed, &pos);
        CHECK(pos == 39, "struct: position %ld", (long)pos);
        CHECK(packed[0] == 'a' && packed[1] == 0xff && packed[4] == 0xf9 && packed[5] == 0x3f && packed[6] == 0xe0,
              "struct: the first element's bytes %02x %02x %02x %02x", packed[0], packed[1], packed[4], packed[5]);
        memset(back, 0, sizeof back);
        pos = 0;
        MPI_Unpack_external("external32", packed, 39, &pos, back, 3, rec);
        for (int k = 0; k < 3; k++)
            CHECK(back[k].c == recs[k].c && back[k].l == recs[k].l && back[k].d == recs[k].d,
                  "struct %d back: %c %ld %g", k, back[k].c, back[k].l, back[k].d);
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        pos = 0;
        /* Too small a buffer is refused; nothing is written past it. */
        int rc = MPI_Pack_external("external32", recs, 3, rec, packed, 20, &pos);
        CHECK(rc != MPI_SUCCESS && pos == 0, "a 20-byte buffer for 39 bytes: rc %d position %ld", rc, (long)pos);
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
        MPI_Type_free(&rec);
    }

    /* A vector of every other int, and its _c form's positions. */
    int v[6] = {1, 2, 3, 4, 5, 6}, w[6] = {0};
    MPI_Datatype every_other;
    MPI_Type_vector(3, 1, 2, MPI_INT, &every_other);
    MPI_Type_commit(&every_other);
    MPI_Count cpos = 0, csize;
    MPI_Pack_external_size_c("external32", 1, every_other, &csize);
    MPI_Pack_external_c("external32", v, 1, every_other, packed, sizeof packed, &cpos);
    CHECK(csize == 12 && cpos == 12 && packed[3] == 1 && packed[7] == 3 && packed[11] == 5,
          "vector: size %lld position %lld", (long long)csize, (long long)cpos);
    cpos = 0;
    MPI_Unpack_external_c("external32", packed, 12, &cpos, w, 1, every_other);
    CHECK(w[0] == 1 && w[1] == 0 && w[2] == 3 && w[4] == 5, "vector back: %d %d %d", w[0], w[2], w[4]);

    MPI_Type_free(&every_other);
    if (rank == 0)
        printf("all external32 checks passed\n");
    MPI_Finalize();
    return 0;
}
