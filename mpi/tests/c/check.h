/* The test programs' check: on failure, print the rank (a `rank` variable
 * in scope), where, and what was seen, and exit 1. */
#ifndef FM_TEST_CHECK_H
#define FM_TEST_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#define CHECK(cond, ...)                                                   \
    do {                                                                   \
        if (!(cond)) {                                                     \
            printf("rank %d: FAILED %s:%d: ", rank, __FILE__, __LINE__);  \
            printf(__VA_ARGS__);                                           \
            printf("\n");                                                  \
            fflush(stdout);                                                \
            exit(1);                                                       \
        }                                                                  \
    } while (0)

#endif
