/* Partitioned communication (MPI-4.0 §4): around a ring, each rank sends
 * PARTS parts to the next and receives as many from the one before, three
 * starts of the same requests, marking parts ready one by one in an order
 * of its own, by range and by list; the receiver polls MPI_Parrived until
 * every part is there, then waits; the data is each start's. An ordinary
 * receive with the same tag never takes a partitioned message; a derived
 * datatype's parts; a part out of range refused.
 *
 *   partitioned [sabotage]   sabotage: expect one wrong value */
#include <mpi.h>
#include <string.h>
#include "check.h"

enum { PARTS = 8, COUNT = 16 };
static int rank, size, sabotage;

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    sabotage = argc > 1 && !strcmp(argv[1], "sabotage");
    int to = (rank + 1) % size, from = (rank + size - 1) % size;
    static int out[PARTS * COUNT], in[PARTS * COUNT];
    MPI_Request send, recv;
    MPI_Psend_init(out, PARTS, COUNT, MPI_INT, to, 5, MPI_COMM_WORLD, MPI_INFO_NULL, &send);
    MPI_Precv_init(in, PARTS, COUNT, MPI_INT, from, 5, MPI_COMM_WORLD, MPI_INFO_NULL, &recv);
    int flag;

    /* An ordinary receive of the same tag, posted first: it must take the
     * ordinary message sent after all the partitioned ones. */
    int ordinary = -1, note = 1000 + rank;
    MPI_Request plain;
    MPI_Irecv(&ordinary, 1, MPI_INT, from, 5, MPI_COMM_WORLD, &plain);

    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < PARTS * COUNT; i++)
            out[i] = rank * 1000000 + round * 10000 + i;
        memset(in, 0xff, sizeof in);
        MPI_Start(&recv);
        MPI_Start(&send);
        switch (round) {
        case 0: /* one by one, from the last */
            for (int p = PARTS - 1; p >= 0; p--)
                MPI_Pready(p, send);
            break;
        case 1: /* two ranges */
            MPI_Pready_range(PARTS / 2, PARTS - 1, send);
            MPI_Pready_range(0, PARTS / 2 - 1, send);
            break;
        default: { /* a list in a rank's own order */
            int list[PARTS];
            for (int p = 0; p < PARTS; p++)
                list[p] = (p * 3 + rank) % PARTS;
            MPI_Pready_list(PARTS, list, send);
        }
        }
        for (int p = 0; p < PARTS; p++) {
            do
                MPI_Parrived(recv, p, &flag);
            while (!flag);
        }
        MPI_Wait(&recv, MPI_STATUS_IGNORE);
        MPI_Wait(&send, MPI_STATUS_IGNORE);
        for (int i = 0; i < PARTS * COUNT; i++)
            CHECK(in[i] == from * 1000000 + round * 10000 + i + (sabotage && round == 2 && i == 5),
                  "round %d: element %d is %d", round, i, in[i]);
    }
    MPI_Send(&note, 1, MPI_INT, to, 5, MPI_COMM_WORLD);
    MPI_Wait(&plain, MPI_STATUS_IGNORE);
    CHECK(ordinary == 1000 + from, "the ordinary receive got %d", ordinary);

    /* A part out of range is refused. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Start(&recv);
    MPI_Start(&send);
    int rc = MPI_Pready(PARTS, send);
    CHECK(rc != MPI_SUCCESS, "MPI_Pready of part %d of %d succeeded", PARTS, PARTS);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    MPI_Pready_range(0, PARTS - 1, send);
    MPI_Wait(&recv, MPI_STATUS_IGNORE);
    MPI_Wait(&send, MPI_STATUS_IGNORE);
    MPI_Request_free(&send);
    MPI_Request_free(&recv);

    /* A derived datatype's parts: every other int of 2 * 4 per part. */
    MPI_Datatype pairs;
    MPI_Type_vector(4, 1, 2, MPI_INT, &pairs);
    MPI_Type_commit(&pairs);
    static int vin[4 * 8 * 2], vout[4 * 8 * 2];
    for (int i = 0; i < 64; i++)
        vout[i] = rank * 100 + i;
    memset(vin, 0, sizeof vin);
    MPI_Psend_init(vout, 4, 1, pairs, to, 6, MPI_COMM_WORLD, MPI_INFO_NULL, &send);
    MPI_Precv_init(vin, 4, 1, pairs, from, 6, MPI_COMM_WORLD, MPI_INFO_NULL, &recv);
    MPI_Type_free(&pairs);
    MPI_Start(&recv);
    MPI_Start(&send);
    MPI_Pready_range(0, 3, send);
    MPI_Wait(&send, MPI_STATUS_IGNORE);
    MPI_Wait(&recv, MPI_STATUS_IGNORE);
    /* The vector's extent is 7 ints: part p starts at 7p. */
    for (int p = 0; p < 4; p++)
        for (int k = 0; k < 4; k++) {
            int at = p * 7 + 2 * k;
            CHECK(vin[at] == from * 100 + at, "vector part %d element %d: %d", p, k, vin[at]);
        }
    MPI_Request_free(&send);
    MPI_Request_free(&recv);

    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0)
        printf("all partitioned checks passed on %d ranks\n", size);
    MPI_Finalize();
    return 0;
}
