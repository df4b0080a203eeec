/* rma-bench.c — one-sided latency and bandwidth between ranks 0 and 1,
 * the same source compiled with fm-mpicc, mpicc.mpich and mpicc.openmpi
 * (scripts/bench-rma.sh runs all three in one sitting).
 *
 * For each size: put and get latency (one MPI_Put or MPI_Get then
 * MPI_Win_flush, inside one MPI_Win_lock epoch: the origin waits for each
 * access to complete at the target), the latency of a whole passive epoch
 * (lock, put, unlock), and put bandwidth (WINDOW puts, then one flush).
 * Rank 1 only waits in MPI_Barrier: passive target. Prints one line per
 * size: bytes, put µs, get µs, lock+put+unlock µs, put MB/s.
 *
 *   rma-bench [max_bytes]      (default 1 MiB; sizes 8, 64, 1 KiB ... max)
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { WINDOW = 32 };

static int iterations(size_t bytes)
{
    return bytes <= 1024 ? 2000 : bytes <= 65536 ? 500 : 50;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    size_t max = argc > 1 ? (size_t)atol(argv[1]) : 1 << 20;
    char *buf, *base;
    MPI_Alloc_mem(max, MPI_INFO_NULL, &buf);
    memset(buf, 1, max);
    MPI_Win win;
    MPI_Win_allocate(max, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
    if (rank == 0)
        printf("%10s %10s %10s %12s %10s\n", "bytes", "put_us", "get_us", "epoch_us", "put_MBps");
    size_t sizes[32];
    int n = 0;
    for (size_t s = 8; s <= max; s = s == 8 ? 64 : s == 64 ? 1024 : s * 4)
        sizes[n++] = s;
    for (int k = 0; k < n; k++) {
        size_t bytes = sizes[k];
        int iters = iterations(bytes);
        double put = 0, get = 0, epoch = 0, bw = 0;
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank == 0) {
            MPI_Win_lock(MPI_LOCK_SHARED, 1, 0, win);
            for (int i = 0; i < 10; i++) {
                MPI_Put(buf, (int)bytes, MPI_BYTE, 1, 0, (int)bytes, MPI_BYTE, win);
                MPI_Win_flush(1, win);
            }
            double t = MPI_Wtime();
            for (int i = 0; i < iters; i++) {
                MPI_Put(buf, (int)bytes, MPI_BYTE, 1, 0, (int)bytes, MPI_BYTE, win);
                MPI_Win_flush(1, win);
            }
            put = (MPI_Wtime() - t) / iters * 1e6;
            t = MPI_Wtime();
            for (int i = 0; i < iters; i++) {
                MPI_Get(buf, (int)bytes, MPI_BYTE, 1, 0, (int)bytes, MPI_BYTE, win);
                MPI_Win_flush(1, win);
            }
            get = (MPI_Wtime() - t) / iters * 1e6;
            t = MPI_Wtime();
            int rounds = iters / WINDOW > 4 ? iters / WINDOW : 4;
            for (int i = 0; i < rounds; i++) {
                for (int j = 0; j < WINDOW; j++)
                    MPI_Put(buf, (int)bytes, MPI_BYTE, 1, 0, (int)bytes, MPI_BYTE, win);
                MPI_Win_flush(1, win);
            }
            bw = (double)bytes * WINDOW * rounds / (MPI_Wtime() - t) / 1e6;
            MPI_Win_unlock(1, win);
            t = MPI_Wtime();
            for (int i = 0; i < iters; i++) {
                MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 1, 0, win);
                MPI_Put(buf, (int)bytes, MPI_BYTE, 1, 0, (int)bytes, MPI_BYTE, win);
                MPI_Win_unlock(1, win);
            }
            epoch = (MPI_Wtime() - t) / iters * 1e6;
            printf("%10zu %10.2f %10.2f %12.2f %10.1f\n", bytes, put, get, epoch, bw);
            fflush(stdout);
        }
        MPI_Barrier(MPI_COMM_WORLD);
    }
    MPI_Win_free(&win);
    MPI_Free_mem(buf);
    MPI_Finalize();
    return 0;
}
