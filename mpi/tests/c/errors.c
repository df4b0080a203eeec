/* The program's own error handlers and error classes: a handler created
 * with MPI_Comm_create_errhandler runs on a failing call (with the
 * communicator and the code, and may call MPI itself), on
 * MPI_Comm_call_errhandler, after MPI_Errhandler_free while a communicator
 * holds it, and on a duplicate (which inherits it); MPI_Add_error_class,
 * _code and _string make classes and codes that MPI_Error_class and
 * MPI_Error_string know and MPI_LASTUSEDCODE covers.
 *
 *   errors [sabotage]   sabotage: expect one wrong value (must fail) */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"

static int rank, size, sabotage, calls, last_code;
static MPI_Comm expected;

static void handler(MPI_Comm *comm, int *code, ...)
{
    calls++;
    last_code = *code;
    CHECK(*comm == expected, "the handler got communicator %#x, not %#x", (unsigned)*comm, (unsigned)expected);
    /* A handler may call MPI. */
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(*code, s, &len);
    CHECK(len > 0, "MPI_Error_string inside the handler");
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    sabotage = argc > 1 && !strcmp(argv[1], "sabotage");

    MPI_Errhandler eh, got;
    MPI_Comm c, d;
    MPI_Comm_dup(MPI_COMM_WORLD, &c);
    MPI_Comm_create_errhandler(handler, &eh);
    MPI_Comm_set_errhandler(c, eh);
    MPI_Comm_get_errhandler(c, &got);
    CHECK(got == eh, "MPI_Comm_get_errhandler");
    expected = c;

    /* A failing call: a send to a rank past the last. */
    int x = 0, rc = MPI_Send(&x, 1, MPI_INT, size, 0, c), cls;
    MPI_Error_class(rc, &cls);
    CHECK(calls == 1 + sabotage && cls == MPI_ERR_RANK, "after a bad send: %d calls, class %d", calls, cls);
    CHECK(last_code == rc, "the handler saw code %d, the call returned %d", last_code, rc);

    /* Raised by the program; then freed while held, and inherited. */
    CHECK(MPI_Comm_call_errhandler(c, MPI_ERR_OTHER) == MPI_SUCCESS && calls == 2 && last_code == MPI_ERR_OTHER,
          "MPI_Comm_call_errhandler: %d calls", calls);
    MPI_Errhandler_free(&eh);
    CHECK(eh == MPI_ERRHANDLER_NULL, "MPI_Errhandler_free sets the handle to null");
    MPI_Comm_dup(c, &d);
    expected = d;
    MPI_Comm_call_errhandler(d, MPI_ERR_ARG);
    CHECK(calls == 3 && last_code == MPI_ERR_ARG, "the duplicate's inherited handler: %d calls", calls);

    /* Added classes, codes and strings. */
    int newclass, code1, code2, *lastused, flag, len;
    char s[MPI_MAX_ERROR_STRING];
    MPI_Add_error_class(&newclass);
    MPI_Add_error_code(newclass, &code1);
    MPI_Add_error_code(newclass, &code2);
    MPI_Add_error_string(code2, "the second code of fm's test class");
    MPI_Error_class(code1, &cls);
    CHECK(cls == newclass && newclass > MPI_ERR_LASTCODE && code1 != code2, "added class %d, code %d of class %d",
          newclass, code1, cls);
    MPI_Error_class(newclass, &cls);
    CHECK(cls == newclass, "an added class is its own class");
    MPI_Error_string(code2, s, &len);
    CHECK(!strcmp(s, "the second code of fm's test class"), "MPI_Error_string: %s", s);
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_LASTUSEDCODE, &lastused, &flag);
    /* MPI-4.0 §9.1.2: at least every code in use; MPICH 4.0.2's covers
     * the classes only. */
    CHECK(flag && *lastused >= newclass && (*lastused >= code2 || getenv("ON_MPICH")), "MPI_LASTUSEDCODE %d",
          flag ? *lastused : -1);
    MPI_Comm_call_errhandler(d, code2);
    CHECK(calls == 4 && last_code == code2, "an added code raised");

    MPI_Comm_set_errhandler(d, MPI_ERRORS_ARE_FATAL);
    MPI_Comm_free(&d);
    MPI_Comm_free(&c);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0)
        printf("all error handler checks passed on %d ranks\n", size);
    MPI_Finalize();
    return 0;
}
