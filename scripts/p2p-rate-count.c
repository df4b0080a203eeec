/* p2p-rate-count.c — the streaming message-rate pattern of p2p-bench.c
 * alone, for counting instructions (scripts/count-p2p-rate.sh): rank 0
 * posts windows of 64 MPI_Isend of 8 B, rank 1 windows of 64 MPI_Irecv;
 * both MPI_Waitall; rank 1 acks each window with a 4-byte message.
 *
 *   p2p-rate-count WINDOWS */
#include <mpi.h>
#include <stdlib.h>

enum { WINDOW = 64, BYTES = 8 };

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int me, ack = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    int n = argc > 1 ? atoi(argv[1]) : 1000;
    static char buf[WINDOW * BYTES];
    MPI_Request req[WINDOW];
    for (int w = 0; w < n; w++) {
        for (int i = 0; i < WINDOW; i++) {
            if (me == 0)
                MPI_Isend(buf + i * BYTES, BYTES, MPI_BYTE, 1, 1, MPI_COMM_WORLD, &req[i]);
            else if (me == 1)
                MPI_Irecv(buf + i * BYTES, BYTES, MPI_BYTE, 0, 1, MPI_COMM_WORLD, &req[i]);
        }
        if (me < 2)
            MPI_Waitall(WINDOW, req, MPI_STATUSES_IGNORE);
        if (me == 1)
            MPI_Send(&ack, 1, MPI_INT, 0, 2, MPI_COMM_WORLD);
        else if (me == 0)
            MPI_Recv(&ack, 1, MPI_INT, 1, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    }
    MPI_Finalize();
    return 0;
}
