/*
 * harness.h - the smallest test harness that does the job: CHECK records a
 * pass or a failure with file:line, TEST runs a named function, and
 * harness_finish prints "N passed, N failed" as the last line and returns the
 * exit code. Header-only so each test_*.c is one self-contained binary.
 */
#ifndef CACHET_HARNESS_H
#define CACHET_HARNESS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int h_passed, h_failed;
static const char *h_current = "";

#define CHECK(cond) do { \
    if (cond) { h_passed++; } \
    else { h_failed++; fprintf(stderr, "FAIL %s: %s:%d: %s\n", h_current, __FILE__, __LINE__, #cond); } \
} while (0)

#define CHECK_EQ_U64(a, b) do { \
    unsigned long long _a = (unsigned long long)(a), _b = (unsigned long long)(b); \
    if (_a == _b) { h_passed++; } \
    else { h_failed++; fprintf(stderr, "FAIL %s: %s:%d: %s == %s (%llu != %llu)\n", \
                               h_current, __FILE__, __LINE__, #a, #b, _a, _b); } \
} while (0)

#define TEST(fn) do { h_current = #fn; int _f = h_failed; fn(); \
    printf("%-44s %s\n", #fn, h_failed == _f ? "ok" : "FAILED"); fflush(stdout); } while (0)

static inline int harness_finish(void)
{
    printf("%d passed, %d failed\n", h_passed, h_failed);
    return h_failed ? 1 : 0;
}

#endif
