/* Round-trip latency between ranks 0 and 1 with THREADS threads on each
 * rank, each thread running a ping-pong of its own on a tag of its own
 * (every thread's messages go over the same pair of processes at once).
 * THREADS 0 is the single-threaded program: MPI_Init, the main thread's
 * ping-pong (the path an MPI program that asked for no threads takes);
 * THREADS >= 1 asks MPI_Init_thread for MPI_THREAD_MULTIPLE.
 *
 * Usage: mpi-thread-latency THREADS [ITERS] [SIZE]  (2 ranks)
 * Prints: "threads T size S rtt_us X" — the median over REPS timed runs
 * of ITERS round trips of each thread's mean round trip, then the median
 * over threads. Built alike with fm-mpicc, mpicc.mpich and
 * mpicc.openmpi (scripts/bench-threads.sh). */
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define REPS 7
static int rank, iters, size;
static pthread_barrier_t start;

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* ITERS round trips on tag TAG, REPS times: the median mean (µs). */
static double pingpong(int tag, int threads) {
    char *buf = calloc(size ? size : 1, 1);
    double t[REPS];
    for (int rep = -1; rep < REPS; rep++) {
        if (threads)
            pthread_barrier_wait(&start);
        double t0 = MPI_Wtime();
        for (int i = 0; i < iters; i++) {
            if (rank == 0) {
                MPI_Send(buf, size, MPI_BYTE, 1, tag, MPI_COMM_WORLD);
                MPI_Recv(buf, size, MPI_BYTE, 1, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            } else {
                MPI_Recv(buf, size, MPI_BYTE, 0, tag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                MPI_Send(buf, size, MPI_BYTE, 0, tag, MPI_COMM_WORLD);
            }
        }
        if (rep >= 0) /* rep -1 warms up */
            t[rep] = (MPI_Wtime() - t0) / iters * 1e6;
    }
    free(buf);
    qsort(t, REPS, sizeof t[0], cmp);
    return t[REPS / 2];
}

static double result[64];
static int nthreads;

static void *worker(void *arg) {
    int i = (int)(long)arg;
    result[i] = pingpong(i, nthreads);
    return NULL;
}

int main(int argc, char **argv) {
    nthreads = argc > 1 ? atoi(argv[1]) : 0;
    iters = argc > 2 ? atoi(argv[2]) : 20000;
    size = argc > 3 ? atoi(argv[3]) : 8;
    if (nthreads < 0 || nthreads > 64)
        nthreads = 64;
    if (nthreads == 0) {
        MPI_Init(&argc, &argv);
    } else {
        int provided;
        MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
        if (provided != MPI_THREAD_MULTIPLE) {
            fprintf(stderr, "MPI_THREAD_MULTIPLE not provided (%d)\n", provided);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Barrier(MPI_COMM_WORLD);
    if (nthreads == 0) {
        result[0] = pingpong(0, 0);
    } else {
        pthread_t th[64];
        pthread_barrier_init(&start, NULL, nthreads);
        for (long i = 0; i < nthreads; i++)
            pthread_create(&th[i], NULL, worker, (void *)i);
        for (int i = 0; i < nthreads; i++)
            pthread_join(th[i], NULL);
    }
    int n = nthreads ? nthreads : 1;
    qsort(result, n, sizeof result[0], cmp);
    if (rank == 0)
        printf("threads %d size %d rtt_us %.3f\n", nthreads, size, result[n / 2]);
    MPI_Finalize();
    return 0;
}
