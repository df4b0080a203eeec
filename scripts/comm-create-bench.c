/* comm-create-bench.c — the time a communicator costs to make and free:
 * MPI_Comm_split (two colours, keys reversed), MPI_Comm_dup and
 * MPI_Comm_create (the whole group), each N times after a barrier; rank 0
 * prints the average of each in microseconds, one "name us" line each.
 * Usage: comm-create-bench [N]   (default 2000)
 * Built with mpicc.mpich (run under fmrun and mpiexec.mpich) and
 * mpicc.openmpi by scripts/bench-comm-create.sh. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    int rank, n = argc > 1 ? atoi(argv[1]) : 2000;
    MPI_Group world;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    for (int way = 0; way < 3; way++) {
        static const char *names[] = {"split", "dup", "create"};
        MPI_Barrier(MPI_COMM_WORLD);
        double t = MPI_Wtime();
        for (int i = 0; i < n; i++) {
            MPI_Comm c;
            if (way == 0)
                MPI_Comm_split(MPI_COMM_WORLD, rank % 2, -rank, &c);
            else if (way == 1)
                MPI_Comm_dup(MPI_COMM_WORLD, &c);
            else
                MPI_Comm_create(MPI_COMM_WORLD, world, &c);
            MPI_Comm_free(&c);
        }
        t = MPI_Wtime() - t;
        if (rank == 0)
            printf("%s %.2f\n", names[way], t / n * 1e6);
    }
    MPI_Group_free(&world);
    MPI_Finalize();
    return 0;
}
