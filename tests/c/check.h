/* check.h — the assertion macros of wick's C unit tests. A failed check
 * prints file:line and the expression, and the test exits non-zero at the
 * end (all checks run, so one run shows every failure). */
#ifndef WICK_CHECK_H
#define WICK_CHECK_H
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static int check_failures;
static int check_count;

#define CHECK(cond)                                                             \
    do {                                                                        \
        check_count++;                                                          \
        if (!(cond)) {                                                          \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
            check_failures++;                                                   \
        }                                                                       \
    } while (0)

#define CHECK_EQ_INT(a, b)                                                      \
    do {                                                                        \
        long long check_a = (long long)(a), check_b = (long long)(b);           \
        check_count++;                                                          \
        if (check_a != check_b) {                                               \
            fprintf(stderr, "%s:%d: %s == %s failed: %lld != %lld\n", __FILE__, __LINE__, #a, #b, \
                    check_a, check_b);                                          \
            check_failures++;                                                   \
        }                                                                       \
    } while (0)

#define CHECK_STR_CONTAINS(hay, needle)                                         \
    do {                                                                        \
        const char *check_h = (hay), *check_n = (needle);                       \
        check_count++;                                                          \
        if (!check_h || !strstr(check_h, check_n)) {                            \
            fprintf(stderr, "%s:%d: expected \"%s\" in:\n%s\n", __FILE__, __LINE__, check_n, \
                    check_h ? check_h : "(null)");                              \
            check_failures++;                                                   \
        }                                                                       \
    } while (0)

#define CHECK_DONE()                                                            \
    (fprintf(stderr, "%s: %d checks, %d failed\n", __FILE__, check_count, check_failures), \
     check_failures ? 1 : 0)

#endif
