/* What fm's MPI does not implement yet is exported and fails cleanly:
 * a not-yet function returns MPI_ERR_UNSUPPORTED_OPERATION under
 * MPI_ERRORS_RETURN and, under the default handler, ends the job naming
 * itself; the tool interface starts, counts no variables and ends.
 *
 *   notyet returns | fatal */
#include <mpi.h>
#include <stdio.h>
#include <string.h>
#include "check.h"

static int rank;

int main(int argc, char **argv)
{
    int provided = -1, n = -1, cls;
    /* MPI_T may start before MPI_Init. */
    CHECK(MPI_T_init_thread(MPI_THREAD_SINGLE, &provided) == MPI_SUCCESS && provided == MPI_THREAD_SINGLE,
          "MPI_T_init_thread: %d", provided);
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    CHECK(MPI_T_cvar_get_num(&n) == MPI_SUCCESS && n == 0, "MPI_T_cvar_get_num: %d", n);
    CHECK(MPI_T_pvar_get_num(&n) == MPI_SUCCESS && n == 0, "MPI_T_pvar_get_num: %d", n);
    CHECK(MPI_T_category_get_num(&n) == MPI_SUCCESS && n == 0, "MPI_T_category_get_num: %d", n);
    CHECK(MPI_T_cvar_get_index("no_such_variable", &n) == MPI_T_ERR_INVALID_NAME, "MPI_T_cvar_get_index");
    CHECK(MPI_T_finalize() == MPI_SUCCESS, "MPI_T_finalize");
    CHECK(MPI_Aint_diff(MPI_Aint_add(1000, 24), 1000) == 24, "MPI_Aint_add and MPI_Aint_diff");

    MPI_File f;
    if (argc > 1 && !strcmp(argv[1], "returns")) {
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        MPI_Error_class(MPI_File_open(MPI_COMM_WORLD, "x", MPI_MODE_RDONLY, MPI_INFO_NULL, &f), &cls);
        CHECK(cls == MPI_ERR_UNSUPPORTED_OPERATION, "MPI_File_open: class %d", cls);
        MPI_Comm child;
        MPI_Error_class(MPI_Comm_spawn("x", MPI_ARGV_NULL, 1, MPI_INFO_NULL, 0, MPI_COMM_SELF, &child,
                                       MPI_ERRCODES_IGNORE),
                        &cls);
        CHECK(cls == MPI_ERR_UNSUPPORTED_OPERATION, "MPI_Comm_spawn: class %d", cls);
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank == 0)
            printf("not-yet functions fail cleanly\n");
    } else {
        MPI_File_open(MPI_COMM_WORLD, "x", MPI_MODE_RDONLY, MPI_INFO_NULL, &f);
        printf("rank %d: FAILED: MPI_File_open returned under MPI_ERRORS_ARE_FATAL\n", rank);
    }
    MPI_Finalize();
    return 0;
}
