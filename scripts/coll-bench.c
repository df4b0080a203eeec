/* coll-bench.c — each collective's time by size, OSU-style: per size,
 * a warm-up, then ITERS calls between barriers; each rank's mean time per
 * call, and the mean and the largest over the ranks, in µs.
 *
 * One source for every MPI library: scripts/bench-coll.sh builds it with
 * mpicc.mpich (run by fm's fmrun and by MPICH's mpiexec, the same binary)
 * and with mpicc.openmpi (run by Open MPI's mpirun).
 *
 *   coll-bench [SIZES [DIVIDE]]   SIZES: bytes per rank, comma-separated
 *                        (default 8,1024,65536,1048576); DIVIDE: run
 *                        1/DIVIDE of the usual calls (default 1), for
 *                        many ranks that poll on few CPUs
 * Prints one line per collective and size:
 *   coll OP BYTES RANKS MEAN_US MAX_US */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { BARRIER, BCAST, REDUCE, ALLREDUCE, ALLGATHER, ALLTOALL, OPS };
static const char *names[OPS] = {"barrier", "bcast", "reduce", "allreduce", "allgather", "alltoall"};

static void once(int op, char *a, char *b, int bytes)
{
    int ints = bytes / (int)sizeof(int);
    switch (op) {
    case BARRIER:
        MPI_Barrier(MPI_COMM_WORLD);
        break;
    case BCAST:
        MPI_Bcast(a, bytes, MPI_BYTE, 0, MPI_COMM_WORLD);
        break;
    case REDUCE:
        MPI_Reduce(a, b, ints, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
        break;
    case ALLREDUCE:
        MPI_Allreduce(a, b, ints, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        break;
    case ALLGATHER:
        MPI_Allgather(a, bytes, MPI_BYTE, b, bytes, MPI_BYTE, MPI_COMM_WORLD);
        break;
    case ALLTOALL:
        MPI_Alltoall(a, bytes, MPI_BYTE, b, bytes, MPI_BYTE, MPI_COMM_WORLD);
        break;
    }
}

int main(int argc, char **argv)
{
    int rank, size, sizes[16], nsizes = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    char *list = strdup(argc > 1 ? argv[1] : "8,1024,65536,1048576");
    int divide = argc > 2 && atoi(argv[2]) > 0 ? atoi(argv[2]) : 1;
    for (char *s = strtok(list, ","); s && nsizes < 16; s = strtok(NULL, ","))
        sizes[nsizes++] = atoi(s);
    int largest = 0;
    for (int i = 0; i < nsizes; i++)
        largest = sizes[i] > largest ? sizes[i] : largest;
    /* alltoall sends `bytes` to each rank: room for all of them. */
    char *a = calloc((size_t)largest * size, 1), *b = calloc((size_t)largest * size, 1);
    for (int op = 0; op < OPS; op++) {
        for (int i = 0; i < nsizes; i++) {
            int bytes = sizes[i];
            if (op == BARRIER && i > 0)
                break;
            /* About the same total time per size: fewer calls when large. */
            int iters = (bytes <= 1024 ? 2000 : bytes <= 65536 ? 200 : 20) / divide;
            iters = iters > 0 ? iters : 1;
            for (int w = 0; w < iters / 10 + 1; w++)
                once(op, a, b, bytes);
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            for (int k = 0; k < iters; k++)
                once(op, a, b, bytes);
            double mine = (MPI_Wtime() - t0) / iters * 1e6, sum, max;
            MPI_Reduce(&mine, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
            MPI_Reduce(&mine, &max, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
            if (rank == 0)
                printf("coll %s %d %d %.3f %.3f\n", names[op], op == BARRIER ? 0 : bytes, size, sum / size, max);
        }
    }
    free(a);
    free(b);
    free(list);
    MPI_Finalize();
    return 0;
}
