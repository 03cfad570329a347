/*
 * test_trace.c - the request-path trace's histograms (src/trace.c), built
 * here with CACHET_TRACE on whatever the build's flags: counts, sums and
 * maxima are exact, every quantile read back is within one bucket (at most
 * 25% above the true value, never below it), and `stats reset` empties them.
 */
#define CACHET_TRACE 1
#include "trace.c"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

static char stats_text[8192];

static void collect(void *ctx, const char *name, const char *fmt, ...)
{
    (void)ctx;
    char value[64];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(value, sizeof value, fmt, ap);
    va_end(ap);
    size_t used = strlen(stats_text);
    snprintf(stats_text + used, sizeof stats_text - used, "%s=%s\n", name, value);
}

static unsigned long long stat_of(const char *name)
{
    stats_text[0] = 0;
    trace_stats(collect, NULL);
    char want[64];
    snprintf(want, sizeof want, "%s=", name);
    for (char *line = stats_text; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL)
        if (!strncmp(line, want, strlen(want))) return strtoull(line + strlen(want), NULL, 10);
    return ~0ull;
}

static void exact_counts_and_bounded_quantiles(void)
{
    trace_reset();
    /* 1..10000 ns, on two workers: the quantiles are known exactly */
    unsigned long long sum = 0;
    for (uint64_t v = 1; v <= 10000; v++) {
        trace_record((int)(v % 2), TRACE_PARSE, v);
        sum += v;
    }
    CHECK_EQ_U64(stat_of("parse:count"), 10000);
    CHECK_EQ_U64(stat_of("parse:mean"), sum / 10000);
    CHECK_EQ_U64(stat_of("parse:max"), 10000);
    static const struct { const char *name; uint64_t exact; } q[] = {
        { "parse:p50", 5000 }, { "parse:p90", 9000 }, { "parse:p99", 9900 }, { "parse:p999", 9990 },
    };
    for (size_t i = 0; i < sizeof q / sizeof q[0]; i++) {
        unsigned long long got = stat_of(q[i].name);
        CHECK(got >= q[i].exact);
        CHECK(got <= q[i].exact + q[i].exact / 4);
    }
    /* a stage nothing was recorded in says so, and nothing more */
    CHECK_EQ_U64(stat_of("turn:count"), 0);
    CHECK_EQ_U64(stat_of("turn:p99"), ~0ull);
}

static void small_values_and_outliers(void)
{
    trace_reset();
    for (int i = 0; i < 999; i++) trace_record(0, TRACE_TURN_READY, 2);
    trace_record(0, TRACE_TURN_READY, 250);
    CHECK_EQ_U64(stat_of("turn_ready:p50"), 2);
    CHECK_EQ_U64(stat_of("turn_ready:p99"), 2);
    /* the one outlier is the 1000th of 1000: p999 is still 2, max shows it */
    CHECK_EQ_U64(stat_of("turn_ready:p999"), 2);
    CHECK_EQ_U64(stat_of("turn_ready:max"), 250);
    /* a huge value lands in a bucket, not past the table */
    trace_record(1, TRACE_WAKE_SENT, UINT64_MAX / 2);
    CHECK_EQ_U64(stat_of("wake_sent:count"), 1);
    CHECK_EQ_U64(stat_of("wake_sent:p50"), UINT64_MAX / 2);
}

static void reset_empties_and_unknown_workers_are_ignored(void)
{
    trace_record(3, TRACE_READ, 100);
    trace_record(TRACE_MAX_WORKERS, TRACE_READ, 100);   /* past the table: dropped */
    trace_record(-1, TRACE_READ, 100);
    trace_reset();
    CHECK_EQ_U64(stat_of("read:count"), 0);
    trace_record(3, TRACE_READ, 100);
    CHECK_EQ_U64(stat_of("read:count"), 1);
}

int main(void)
{
    TEST(exact_counts_and_bounded_quantiles);
    TEST(small_values_and_outliers);
    TEST(reset_empties_and_unknown_workers_are_ignored);
    return harness_finish();
}
