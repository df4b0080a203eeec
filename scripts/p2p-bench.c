/* p2p-bench.c — point-to-point patterns between ranks 0 and 1, the way
 * MPI benchmarks time them (issue 34's table):
 *
 *   stream   rank 0 posts a window of 64 MPI_Isend, rank 1 a window of 64
 *            MPI_Irecv; both MPI_Waitall; rank 1 answers each window with
 *            a 4-byte message. Bandwidth (MB/s) and message rate (Mmsg/s).
 *   bidir    both ranks run that window at once, each to the other:
 *            the bytes both ways per second (MB/s).
 *   pingpong blocking MPI_Send / MPI_Recv with the same buffers, a fixed
 *            count of round trips (1,000 up to 8 KiB, 100 beyond): half a
 *            round trip (µs).
 *
 * One source for every MPI library: scripts/bench-p2p.sh builds it with
 * mpicc.mpich (run by fm's fmrun and by MPICH's mpiexec, the same binary)
 * and with mpicc.openmpi.
 *
 *   p2p-bench [SIZES]   SIZES: bytes, comma-separated (default: every
 *                       power of two from 1 B to 4 MiB)
 * Prints, from rank 0, one line per pattern and size:
 *   p2p PATTERN BYTES VALUE UNIT */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { WINDOW = 64 };

/* Windows per measurement: about 64 MiB moved, at least 20 windows and at
 * most 2,000. */
static int windows_for(long bytes)
{
    long w = (64L << 20) / ((bytes > 0 ? bytes : 1) * WINDOW);
    return w < 20 ? 20 : w > 2000 ? 2000 : (int)w;
}

/* One window from `from` to `to` (both ranks call it), then the ack. */
static void window(char *buf, int bytes, int me, int from, int to, MPI_Request *req)
{
    int ack = 0;
    for (int i = 0; i < WINDOW; i++) {
        char *at = buf + (size_t)i * bytes;
        if (me == from)
            MPI_Isend(at, bytes, MPI_BYTE, to, 1, MPI_COMM_WORLD, &req[i]);
        else
            MPI_Irecv(at, bytes, MPI_BYTE, from, 1, MPI_COMM_WORLD, &req[i]);
    }
    MPI_Waitall(WINDOW, req, MPI_STATUSES_IGNORE);
    if (me == to)
        MPI_Send(&ack, 1, MPI_INT, from, 2, MPI_COMM_WORLD);
    else
        MPI_Recv(&ack, 1, MPI_INT, to, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
}

static double stream(char *buf, int bytes, int me, int n)
{
    MPI_Request req[WINDOW];
    for (int w = 0; w < 2; w++)
        window(buf, bytes, me, 0, 1, req);
    MPI_Barrier(MPI_COMM_WORLD);
    double t = MPI_Wtime();
    for (int w = 0; w < n; w++)
        window(buf, bytes, me, 0, 1, req);
    return MPI_Wtime() - t;
}

/* Both directions at once: each rank sends a window from the first half
 * of its buffer and receives one into the second. */
static void both_ways(char *out, char *in, int bytes, int other, MPI_Request *req)
{
    int ack = 0, got = 0;
    for (int i = 0; i < WINDOW; i++)
        MPI_Irecv(in + (size_t)i * bytes, bytes, MPI_BYTE, other, 1, MPI_COMM_WORLD, &req[i]);
    for (int i = 0; i < WINDOW; i++)
        MPI_Isend(out + (size_t)i * bytes, bytes, MPI_BYTE, other, 1, MPI_COMM_WORLD, &req[WINDOW + i]);
    MPI_Waitall(2 * WINDOW, req, MPI_STATUSES_IGNORE);
    MPI_Sendrecv(&ack, 1, MPI_INT, other, 2, &got, 1, MPI_INT, other, 2, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
}

static double bidir(char *buf, int bytes, int me, int n)
{
    MPI_Request req[2 * WINDOW];
    char *in = buf + (size_t)WINDOW * bytes;
    int other = 1 - me;
    for (int w = 0; w < 2; w++)
        both_ways(buf, in, bytes, other, req);
    MPI_Barrier(MPI_COMM_WORLD);
    double t = MPI_Wtime();
    for (int w = 0; w < n; w++)
        both_ways(buf, in, bytes, other, req);
    return MPI_Wtime() - t;
}

static void round_trip(char *out, char *in, int bytes, int me)
{
    if (me == 0) {
        MPI_Send(out, bytes, MPI_BYTE, 1, 3, MPI_COMM_WORLD);
        MPI_Recv(in, bytes, MPI_BYTE, 1, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else {
        MPI_Recv(in, bytes, MPI_BYTE, 0, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        MPI_Send(out, bytes, MPI_BYTE, 0, 3, MPI_COMM_WORLD);
    }
}

static double pingpong(char *buf, int bytes, int me, int iters)
{
    char *in = buf + bytes;
    for (int i = 0; i < 10; i++)
        round_trip(buf, in, bytes, me);
    MPI_Barrier(MPI_COMM_WORLD);
    double t = MPI_Wtime();
    for (int i = 0; i < iters; i++)
        round_trip(buf, in, bytes, me);
    return MPI_Wtime() - t;
}

int main(int argc, char **argv)
{
    int me, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 2) {
        if (me == 0)
            fprintf(stderr, "p2p-bench runs on 2 ranks\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    long sizes[64];
    int count = 0;
    if (argc > 1) {
        char *s = strdup(argv[1]);
        for (char *t = strtok(s, ","); t && count < 64; t = strtok(NULL, ","))
            sizes[count++] = atol(t);
        free(s);
    } else {
        for (long b = 1; b <= 4L << 20; b *= 2)
            sizes[count++] = b;
    }
    long most = 0;
    for (int i = 0; i < count; i++)
        most = sizes[i] > most ? sizes[i] : most;
    char *buf = malloc((size_t)(2 * WINDOW) * (most > 0 ? most : 1));
    memset(buf, me + 1, (size_t)(2 * WINDOW) * (most > 0 ? most : 1));
    for (int i = 0; i < count; i++) {
        int bytes = (int)sizes[i];
        int n = windows_for(bytes);
        double t = stream(buf, bytes, me, n);
        double msgs = (double)n * WINDOW;
        if (me == 0) {
            printf("p2p stream %d %.2f MB/s\n", bytes, msgs * bytes / t / 1e6);
            printf("p2p rate %d %.3f Mmsg/s\n", bytes, msgs / t / 1e6);
        }
        t = bidir(buf, bytes, me, n);
        if (me == 0)
            printf("p2p bidir %d %.2f MB/s\n", bytes, 2 * msgs * bytes / t / 1e6);
        int iters = bytes <= 8192 ? 1000 : 100;
        t = pingpong(buf, bytes, me, iters);
        if (me == 0)
            printf("p2p pingpong %d %.3f us\n", bytes, t / (2.0 * iters) * 1e6);
        fflush(stdout);
    }
    free(buf);
    MPI_Finalize();
    return 0;
}
