/* Collectives whose network traffic fmrun --stats shows: barrier and
 * allreduce (short and long vectors, so both allreduce algorithms run
 * between the hosts' leaders), then broadcast and reduce from roots
 * all around, on MPI_COMM_WORLD, each checked. Each rank first prints
 * its host, so that the test can tell the hosts' leaders from the rest.
 *
 *   hostaware [allreduce] [sabotage]
 *
 * "allreduce": barrier and allreduce only (no rooted collectives, whose
 * root leads its host); "sabotage" expects a wrong sum: the check must
 * then fail. */
#include <mpi.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"

#define LONG (64 * 1024)

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size, len;
    char host[MPI_MAX_PROCESSOR_NAME];
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Get_processor_name(host, &len);
    printf("rank %d on %s\n", rank, host);
    fflush(stdout);
    int rooted = 1, wrong = 0;
    for (int a = 1; a < argc; a++) {
        rooted &= strcmp(argv[a], "allreduce") != 0;
        wrong |= strcmp(argv[a], "sabotage") == 0;
    }
    int *v = malloc(LONG * sizeof *v), *s = malloc(LONG * sizeof *s);
    for (int round = 0; round < 5; round++) {
        MPI_Barrier(MPI_COMM_WORLD);
        for (int n = 1; n <= LONG; n *= 64) {
            for (int i = 0; i < n; i++)
                v[i] = rank * 3 + i + round;
            MPI_Allreduce(v, s, n, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
            for (int i = 0; i < n; i++) {
                int want = 3 * size * (size - 1) / 2 + size * (i + round) + wrong;
                CHECK(s[i] == want, "allreduce of %d: [%d] = %d, not %d", n, i, s[i], want);
            }
            if (!rooted)
                continue;
            int root = (round + n) % size;
            MPI_Reduce(v, s, n, MPI_INT, MPI_MAX, root, MPI_COMM_WORLD);
            if (rank == root)
                CHECK(s[n - 1] == 3 * (size - 1) + n - 1 + round, "reduce of %d at %d: %d", n,
                      root, s[n - 1]);
            if (rank == root)
                for (int i = 0; i < n; i++)
                    s[i] = i ^ root;
            MPI_Bcast(s, n, MPI_INT, root, MPI_COMM_WORLD);
            for (int i = 0; i < n; i++)
                CHECK(s[i] == (i ^ root), "bcast of %d from %d: [%d] = %d", n, root, i, s[i]);
        }
    }
    free(v);
    free(s);
    if (rank == 0)
        printf("host-aware collectives passed on %d ranks\n", size);
    MPI_Finalize();
    return 0;
}
