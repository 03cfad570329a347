/*
 * test_reply_numbers.c - the decimal writer every GET reply header uses
 * (u64_to_str in src/proto_reply.h) against printf, at every length from one
 * digit to twenty and at each power-of-ten edge.
 */
#include <inttypes.h>
#include <stdio.h>

#include "harness.h"
#include "proto_reply.h"

static int agrees(uint64_t v)
{
    char got[32], want[32];
    char *end = u64_to_str(got, v);
    *end = 0;
    snprintf(want, sizeof want, "%" PRIu64, v);
    if (strcmp(got, want)) {
        fprintf(stderr, "u64_to_str(%s) wrote %s\n", want, got);
        return 0;
    }
    return 1;
}

static void every_value_below_a_million(void)
{
    int bad = 0;
    for (uint64_t v = 0; v < 1000000; v++) bad += !agrees(v);
    CHECK_EQ_U64(bad, 0);
}

static void power_of_ten_edges_and_the_largest(void)
{
    uint64_t p = 1;
    for (int digits = 1; digits <= 19; digits++) {
        p *= 10;
        CHECK(agrees(p - 1));
        CHECK(agrees(p));
        CHECK(agrees(p + 1));
    }
    CHECK(agrees(UINT64_MAX));
    CHECK(agrees(UINT64_MAX - 1));
    for (uint64_t v = 1; v < UINT64_MAX / 7; v = v * 7 + 3) CHECK(agrees(v));
}

int main(void)
{
    TEST(every_value_below_a_million);
    TEST(power_of_ten_edges_and_the_largest);
    return harness_finish();
}
