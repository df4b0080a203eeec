/*
 * MPI ping-pong between ranks 0 and 1 while every other rank waits in
 * MPI_Barrier: the oversubscribed situation of docs/PERFORMANCE.md
 * ("Blocking waits"), for Open MPI and MPICH beside fm-bench.
 *
 * Build: mpicc -O2 -o mpi-oversub-pingpong scripts/mpi-oversub-pingpong.c
 * Run:   mpirun -np 8 ./mpi-oversub-pingpong [iters [size]]
 *        (size: that one message size instead of 8 B and 64 KiB)
 * Output (rank 0): one line per size: size_bytes iters median_oneway_us
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    int rank, size, iters = argc > 1 ? atoi(argv[1]) : 2000;
    int sizes[] = {8, 65536}, nsizes = 2;
    if (argc > 2) {
        sizes[0] = atoi(argv[2]);
        nsizes = 1;
    }
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    char *buf = calloc(1, sizes[0] > 65536 ? sizes[0] : 65536);
    double *t = calloc(iters, sizeof(double));
    if (rank < 2 && size >= 2) {
        int peer = 1 - rank;
        for (int s = 0; s < nsizes; s++) {
            for (int i = -iters / 10; i < iters; i++) {
                double t0 = now_us();
                if (rank == 0) {
                    MPI_Send(buf, sizes[s], MPI_BYTE, peer, 0, MPI_COMM_WORLD);
                    MPI_Recv(buf, sizes[s], MPI_BYTE, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                } else {
                    MPI_Recv(buf, sizes[s], MPI_BYTE, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                    MPI_Send(buf, sizes[s], MPI_BYTE, peer, 0, MPI_COMM_WORLD);
                }
                if (i >= 0)
                    t[i] = (now_us() - t0) / 2;
            }
            if (rank == 0) {
                qsort(t, iters, sizeof(double), cmp);
                printf("%d %d %.3f\n", sizes[s], iters, t[iters / 2]);
                fflush(stdout);
            }
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    return 0;
}
