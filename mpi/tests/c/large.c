/* MPI-4.0's large-count (_c) functions: the same program's classic and
 * _c calls must agree where the counts fit an int; datatypes a _c
 * constructor made report their counts as large counts (the classic
 * queries refuse them); sizes, extents and counts past an int come back
 * whole from the _c queries and as MPI_UNDEFINED from the classic ones;
 * point-to-point, collective (MPI_Aint displacements) and pack calls
 * move the same data as their classic forms.
 *
 *   large [sabotage]   sabotage: expect one wrong value (must fail) */
#include <mpi.h>
#include <stdio.h>
#include <string.h>
#include "check.h"

static int rank, size, sabotage;

static void constructors(void)
{
    const MPI_Count big = (MPI_Count)3 << 30;
    MPI_Datatype t, classic;
    MPI_Count n, lb, extent, ni, na, nl, nt;
    int combiner, isize;

    /* A vector: the same type map as the classic constructor's. */
    MPI_Type_vector_c(3, 2, 5, MPI_INT, &t);
    MPI_Type_vector(3, 2, 5, MPI_INT, &classic);
    MPI_Aint clb, cext;
    MPI_Type_get_extent(classic, &clb, &cext);
    MPI_Type_get_extent_c(t, &lb, &extent);
    MPI_Type_size_c(t, &n);
    CHECK(lb == clb && extent == cext && n == 24, "vector_c: lb %lld extent %lld size %lld", (long long)lb,
          (long long)extent, (long long)n);
    MPI_Type_get_envelope_c(t, &ni, &na, &nl, &nt, &combiner);
    CHECK(ni == 0 && na == 0 && nl == 3 && nt == 1 && combiner == MPI_COMBINER_VECTOR,
          "vector_c's envelope: %lld %lld %lld %lld %d", (long long)ni, (long long)na, (long long)nl,
          (long long)nt, combiner);
    MPI_Count large[3];
    MPI_Datatype types[1];
    MPI_Type_get_contents_c(t, 0, 0, 3, 1, NULL, NULL, large, types);
    CHECK(large[0] == 3 && large[1] == 2 && large[2] == 5 + (sabotage && rank == 0) && types[0] == MPI_INT,
          "vector_c's contents: %lld %lld %lld", (long long)large[0], (long long)large[1], (long long)large[2]);
    /* The classic query has no place for large counts. */
    int cni, cna, cnt;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int rc = MPI_Type_get_envelope(t, &cni, &cna, &cnt, &combiner);
    CHECK(rc != MPI_SUCCESS, "MPI_Type_get_envelope of a _c-made type succeeded");
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    /* A classic type through the _c query: integers, no large counts. */
    MPI_Type_get_envelope_c(classic, &ni, &na, &nl, &nt, &combiner);
    CHECK(ni == 3 && nl == 0 && combiner == MPI_COMBINER_VECTOR, "vector's envelope_c: %lld %lld", (long long)ni,
          (long long)nl);
    MPI_Type_free(&t);
    MPI_Type_free(&classic);

    /* hindexed_c: counts, then the displacements, all large counts. */
    MPI_Count bls[2] = {2, 3}, displs[2] = {0, 16};
    MPI_Type_create_hindexed_c(2, bls, displs, MPI_INT, &t);
    MPI_Type_get_envelope_c(t, &ni, &na, &nl, &nt, &combiner);
    CHECK(ni == 0 && na == 0 && nl == 5 && combiner == MPI_COMBINER_HINDEXED, "hindexed_c's envelope");
    MPI_Count five[5];
    MPI_Type_get_contents_c(t, 0, 0, 5, 1, NULL, NULL, five, types);
    CHECK(five[0] == 2 && five[1] == 2 && five[2] == 3 && five[3] == 0 && five[4] == 16,
          "hindexed_c's contents: %lld %lld %lld %lld %lld", (long long)five[0], (long long)five[1],
          (long long)five[2], (long long)five[3], (long long)five[4]);
    MPI_Type_size_c(t, &n);
    MPI_Type_get_true_extent_c(t, &lb, &extent);
    CHECK(n == 20 && lb == 0 && extent == 28, "hindexed_c: size %lld true extent %lld", (long long)n,
          (long long)extent);
    MPI_Type_free(&t);

    /* Sizes past an int: whole from the _c query, MPI_UNDEFINED from the
     * classic one (no memory is touched). */
    MPI_Type_contiguous_c(big, MPI_CHAR, &t);
    MPI_Type_size_c(t, &n);
    MPI_Type_size(t, &isize);
    MPI_Type_get_extent_c(t, &lb, &extent);
    CHECK(n == big && isize == MPI_UNDEFINED && extent == big, "contiguous_c of 3 GiB: %lld %d %lld",
          (long long)n, isize, (long long)extent);
    MPI_Type_free(&t);

    /* Subarray: ndims and order stay integers. */
    MPI_Count sizes[2] = {4, 6}, subs[2] = {2, 3}, starts[2] = {1, 2};
    MPI_Type_create_subarray_c(2, sizes, subs, starts, MPI_ORDER_C, MPI_INT, &t);
    MPI_Type_get_envelope_c(t, &ni, &na, &nl, &nt, &combiner);
    CHECK(ni == 2 && nl == 6 && combiner == MPI_COMBINER_SUBARRAY, "subarray_c's envelope: %lld %lld",
          (long long)ni, (long long)nl);
    int two[2];
    MPI_Count six[6];
    MPI_Type_get_contents_c(t, 2, 0, 6, 1, two, NULL, six, types);
    CHECK(two[0] == 2 && two[1] == MPI_ORDER_C && six[0] == 4 && six[5] == 2, "subarray_c's contents");
    MPI_Type_free(&t);

    /* A status that says more elements arrived than an int holds. */
    MPI_Status st;
    MPI_Status_set_elements_x(&st, MPI_CHAR, big);
    int icount;
    MPI_Get_count_c(&st, MPI_CHAR, &n);
    MPI_Get_count(&st, MPI_CHAR, &icount);
    CHECK(n == big && icount == MPI_UNDEFINED, "Get_count_c %lld, Get_count %d", (long long)n, icount);
    MPI_Get_elements_c(&st, MPI_CHAR, &n);
    CHECK(n == big, "Get_elements_c %lld", (long long)n);
}

static void traffic(void)
{
    enum { N = 1000 };
    int out[N], in[N];
    for (int i = 0; i < N; i++)
        out[i] = rank * 100000 + i;
    int to = (rank + 1) % size, from = (rank + size - 1) % size;
    MPI_Status st;
    MPI_Sendrecv_c(out, N, MPI_INT, to, 7, in, N, MPI_INT, from, 7, MPI_COMM_WORLD, &st);
    MPI_Count got;
    MPI_Get_count_c(&st, MPI_INT, &got);
    CHECK(got == N && in[N - 1] == from * 100000 + N - 1, "Sendrecv_c: %lld, last %d", (long long)got,
          in[N - 1]);
    MPI_Request r[2];
    MPI_Irecv_c(in, N, MPI_INT, from, 8, MPI_COMM_WORLD, &r[0]);
    MPI_Isend_c(out, N, MPI_INT, to, 8, MPI_COMM_WORLD, &r[1]);
    MPI_Waitall(2, r, MPI_STATUSES_IGNORE);
    CHECK(in[0] == from * 100000, "Isend_c/Irecv_c: %d", in[0]);

    /* Allgatherv_c with MPI_Aint displacements, in reverse order. */
    MPI_Count counts[64];
    MPI_Aint adispls[64];
    int all[64];
    for (int i = 0; i < size; i++) {
        counts[i] = 1;
        adispls[i] = size - 1 - i;
    }
    MPI_Allgatherv_c(&rank, 1, MPI_INT, all, counts, adispls, MPI_INT, MPI_COMM_WORLD);
    for (int i = 0; i < size; i++)
        CHECK(all[size - 1 - i] == i, "Allgatherv_c: slot %d has %d", size - 1 - i, all[size - 1 - i]);

    /* Alltoallw_c: byte displacements as MPI_Aint. */
    MPI_Datatype ts[64];
    int sendw[64], recvw[64];
    for (int i = 0; i < size; i++) {
        sendw[i] = rank * 1000 + i;
        counts[i] = 1;
        adispls[i] = i * (MPI_Aint)sizeof(int);
        ts[i] = MPI_INT;
    }
    MPI_Alltoallw_c(sendw, counts, adispls, ts, recvw, counts, adispls, ts, MPI_COMM_WORLD);
    for (int i = 0; i < size; i++)
        CHECK(recvw[i] == i * 1000 + rank, "Alltoallw_c: from %d got %d", i, recvw[i]);

    /* Reduce_scatter_block_c and Allreduce_c against the sums. */
    long sum = 0, one = rank;
    MPI_Allreduce_c(&one, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    CHECK(sum == (long)size * (size - 1) / 2, "Allreduce_c: %ld", sum);

    /* Pack_c and Unpack_c with MPI_Count positions. */
    char packed[64];
    MPI_Count pos = 0, psize;
    double d = 2.5, d2 = 0;
    int i7 = 7, i2 = 0;
    MPI_Pack_size_c(1, MPI_DOUBLE, MPI_COMM_WORLD, &psize);
    MPI_Pack_c(&d, 1, MPI_DOUBLE, packed, sizeof packed, &pos, MPI_COMM_WORLD);
    MPI_Pack_c(&i7, 1, MPI_INT, packed, sizeof packed, &pos, MPI_COMM_WORLD);
    CHECK(pos == 12 && psize >= 8, "Pack_c: position %lld, size %lld", (long long)pos, (long long)psize);
    pos = 0;
    MPI_Unpack_c(packed, sizeof packed, &pos, &d2, 1, MPI_DOUBLE, MPI_COMM_WORLD);
    MPI_Unpack_c(packed, sizeof packed, &pos, &i2, 1, MPI_INT, MPI_COMM_WORLD);
    CHECK(d2 == 2.5 && i2 == 7 && pos == 12, "Unpack_c: %g %d", d2, i2);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    sabotage = argc > 1 && !strcmp(argv[1], "sabotage");
    CHECK(size <= 64, "at most 64 ranks");
    constructors();
    traffic();
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0)
        printf("all large-count checks passed on %d ranks\n", size);
    MPI_Finalize();
    return 0;
}
