/* Info objects (MPI-4.0 §10), memory from MPI_Alloc_mem, object names,
 * MPI_Type_dup and MPI_Dims_create, against the standard's words and
 * MPICH's behaviour. Compiled with MPICH's mpicc; any number of ranks.
 * Exits 1 at the first failure, printing it.
 *
 *   info [sabotage]   sabotage: expect one wrong value (must fail)
 *
 * With ON_MPICH set, what MPICH 4.0.2 does otherwise than the standard is
 * left out: MPI_Info_get of a value longer than valuelen is an error there
 * ("Value is too long"), where MPI says the value is cut; and a predefined
 * operation on a duplicate of MPI_INT is refused there, where MPI says
 * the duplicate has "exactly the same properties".
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"

static int rank, sabotage, on_mpich;

static void infos(void)
{
    MPI_Info info, dup;
    char value[64], key[MPI_MAX_INFO_KEY + 1];
    int flag = -1, n = -1, len = -1, cls = 0;

    MPI_Info_create(&info);
    MPI_Info_get_nkeys(info, &n);
    CHECK(n == 0, "a new info object has %d keys", n);
    MPI_Info_set(info, "alpha", "one");
    MPI_Info_set(info, "beta", "two two");
    MPI_Info_set(info, "alpha", "uno"); /* replaces, keeps its place */
    MPI_Info_get_nkeys(info, &n);
    CHECK(n == 2, "%d keys after three sets of two", n);
    MPI_Info_get_nthkey(info, 0, key);
    CHECK(!strcmp(key, sabotage ? "beta" : "alpha"), "key 0 is %s", key);
    MPI_Info_get(info, "alpha", sizeof value - 1, value, &flag);
    CHECK(flag && !strcmp(value, "uno"), "alpha: flag %d value %s", flag, value);
    if (!on_mpich) {
        MPI_Info_get(info, "beta", 3, value, &flag);
        CHECK(flag && !strcmp(value, "two"), "beta cut to 3: %s", value);
    }
    MPI_Info_get_valuelen(info, "beta", &len, &flag);
    CHECK(flag && len == 7, "beta's length: %d", len);
    len = 0;
    MPI_Info_get_string(info, "beta", &len, value, &flag);
    CHECK(flag && len == 8, "MPI_Info_get_string's length with the NUL: %d", len);
    len = sizeof value;
    MPI_Info_get_string(info, "beta", &len, value, &flag);
    CHECK(flag && !strcmp(value, "two two"), "MPI_Info_get_string: %s", value);
    MPI_Info_get(info, "gamma", sizeof value - 1, value, &flag);
    CHECK(!flag, "a missing key is found");
    MPI_Info_dup(info, &dup);
    MPI_Info_delete(info, "alpha");
    MPI_Info_get_nkeys(dup, &n);
    CHECK(n == 2, "the duplicate changed with the original: %d keys", n);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Error_class(MPI_Info_delete(info, "alpha"), &cls);
    CHECK(cls == MPI_ERR_INFO_NOKEY, "deleting a missing key: class %d", cls);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
    MPI_Info_free(&info);
    MPI_Info_free(&dup);
    CHECK(info == MPI_INFO_NULL, "a freed info object is %#x", info);
    MPI_Info_get_nkeys(MPI_INFO_ENV, &n);
    CHECK(n >= 0, "MPI_INFO_ENV has %d keys", n);
}

static void memory_names_dims(void)
{
    double *p = NULL;
    char name[MPI_MAX_OBJECT_NAME];
    int len = -1, dims[3] = { 0, 0, 0 };
    MPI_Comm c;
    MPI_Datatype t;

    MPI_Alloc_mem(1000 * sizeof(double), MPI_INFO_NULL, &p);
    CHECK(p != NULL, "MPI_Alloc_mem gave null");
    for (int i = 0; i < 1000; i++)
        p[i] = i;
    MPI_Free_mem(p);
    MPI_Comm_get_name(MPI_COMM_WORLD, name, &len);
    CHECK(!strcmp(name, "MPI_COMM_WORLD") && len == 14, "MPI_COMM_WORLD's name: %s (%d)", name, len);
    MPI_Comm_dup(MPI_COMM_WORLD, &c);
    MPI_Comm_get_name(c, name, &len);
    CHECK(len == 0 && !name[0], "a duplicate's name: %s", name);
    MPI_Comm_set_name(c, "mine");
    MPI_Comm_get_name(c, name, &len);
    CHECK(!strcmp(name, "mine") && len == 4, "a set name: %s", name);
    MPI_Comm_free(&c);
    MPI_Type_get_name(MPI_DOUBLE, name, &len);
    CHECK(!strcmp(name, "MPI_DOUBLE"), "MPI_DOUBLE's name: %s", name);
    MPI_Type_dup(MPI_INT, &t);
    int size = 0;
    MPI_Type_size(t, &size);
    CHECK(size == 4, "a duplicate of MPI_INT has size %d", size);
    int x = rank + 5, y = 0;
    if (!on_mpich) {
        MPI_Allreduce(&x, &y, 1, t, MPI_MAX, MPI_COMM_SELF);
        CHECK(y == x, "MPI_MAX on a duplicate of MPI_INT: %d", y);
    }
    MPI_Type_set_name(t, "dup");
    MPI_Type_get_name(t, name, &len);
    CHECK(!strcmp(name, "dup"), "a datatype's set name: %s", name);
    MPI_Type_free(&t);
    MPI_Dims_create(24, 3, dims);
    CHECK(dims[0] == 4 && dims[1] == 3 && dims[2] == 2, "24 in 3: %d %d %d", dims[0], dims[1], dims[2]);
    dims[0] = 0, dims[1] = 5, dims[2] = 0;
    MPI_Dims_create(30, 3, dims);
    CHECK(dims[0] == 3 && dims[1] == 5 && dims[2] == 2, "30 in (0,5,0): %d %d %d", dims[0], dims[1], dims[2]);
}

/* MPI-4.0 lets info objects be used before MPI_Init and after
 * MPI_Finalize; MPI_INFO_ENV's copy says the same in both. */
static MPI_Info before_init(void)
{
    MPI_Info i, env;
    char v[32];
    int flag = 0;
    CHECK(MPI_Info_create(&i) == MPI_SUCCESS, "MPI_Info_create before MPI_Init");
    MPI_Info_set(i, "early", "yes");
    MPI_Info_get(i, "early", 31, v, &flag);
    CHECK(flag && !strcmp(v, "yes"), "an info object before MPI_Init");
    MPI_Info_free(&i);
    MPI_Info_create_env(0, NULL, &env);
    return env;
}

/* The number of keys of `a` with the same value in `b`, and of `a`. */
static void same_env(MPI_Info a, const char *when)
{
    MPI_Info b;
    int n, m, flag;
    char k[MPI_MAX_INFO_KEY + 1], va[256], vb[256];
    MPI_Info_create_env(0, NULL, &b);
    MPI_Info_get_nkeys(a, &n);
    MPI_Info_get_nkeys(b, &m);
    CHECK(n == m && (n > 0 || on_mpich), "MPI_Info_create_env %s: %d keys, before MPI_Init %d", when, m, n);
    for (int i = 0; i < n; i++) {
        MPI_Info_get_nthkey(a, i, k);
        MPI_Info_get(a, k, 255, va, &flag);
        MPI_Info_get(b, k, 255, vb, &flag);
        CHECK(flag && !strcmp(va, vb), "MPI_Info_create_env %s: %s is %s, before MPI_Init %s", when, k, vb, va);
    }
    MPI_Info_free(&b);
}

int main(int argc, char **argv)
{
    on_mpich = getenv("ON_MPICH") != NULL;
    MPI_Info env = before_init();
    MPI_Init(&argc, &argv);
    same_env(env, "after MPI_Init");
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    sabotage = argc > 1 && !strcmp(argv[1], "sabotage");
    on_mpich = getenv("ON_MPICH") != NULL;
    infos();
    memory_names_dims();
    MPI_Finalize();
    same_env(env, "after MPI_Finalize");
    MPI_Info_free(&env);
    printf("info: all checks passed\n");
    return 0;
}
