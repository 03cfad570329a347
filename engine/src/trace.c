/*
 * trace.c - the request-path trace's histograms (a `make TRACE=1` build
 * only); see trace.h for the stages, why they exist and the threading rules.
 *
 * Buckets are log-linear: four per power of two, so a quantile read back is
 * within 19% of the value recorded, from 1 ns to hours, in 256 counters.
 */
#include "trace.h"

#ifdef CACHET_TRACE
#include <stdio.h>

#define TRACE_MAX_WORKERS 64
#define TRACE_BUCKETS     256

struct trace_recorder {
    uint64_t buckets[TRACE_STAGES][TRACE_BUCKETS];
    uint64_t sum[TRACE_STAGES];
    uint64_t max[TRACE_STAGES];
} __attribute__((aligned(64)));

static struct trace_recorder recorders[TRACE_MAX_WORKERS];

static const char *const stage_names[TRACE_STAGES] = {
    [TRACE_TURN] = "turn", [TRACE_TURN_READY] = "turn_ready", [TRACE_READY_WAIT] = "ready_wait",
    [TRACE_READ] = "read", [TRACE_PARSE] = "parse", [TRACE_DISPATCH] = "dispatch",
    [TRACE_DISPATCH_STORE] = "dispatch_store",
    [TRACE_QUEUED_SENT] = "queued_sent", [TRACE_WAKE_SENT] = "wake_sent",
    [TRACE_YIELD_WAIT] = "yield_wait",
    [TRACE_DISK_READ] = "disk_read", [TRACE_DISK_HELD] = "disk_held", [TRACE_DISK_BEHIND] = "disk_behind",
};

static _Thread_local int this_worker = -1;

void trace_set_worker(int worker) { this_worker = worker; }

void trace_record_here(enum trace_stage stage, uint64_t value)
{
    trace_record(this_worker, stage, value);
}

static int bucket_of(uint64_t v)
{
    if (v < 4) return (int)v;
    int msb = 63 - __builtin_clzll(v);
    return msb * 4 + (int)((v >> (msb - 2)) & 3);
}

/* the largest value bucket b holds */
static uint64_t bucket_top(int b)
{
    if (b < 4) return (uint64_t)b;
    int msb = b / 4, sub = b % 4;
    if (msb >= 63) return UINT64_MAX;
    return ((uint64_t)(4 + sub + 1) << (msb - 2)) - 1;
}

static inline void owner_set(uint64_t *p, uint64_t v) { __atomic_store_n(p, v, __ATOMIC_RELAXED); }
static inline uint64_t load(const uint64_t *p) { return __atomic_load_n(p, __ATOMIC_RELAXED); }

void trace_record(int worker, enum trace_stage stage, uint64_t value)
{
    if (worker < 0 || worker >= TRACE_MAX_WORKERS) return;
    struct trace_recorder *r = &recorders[worker];
    uint64_t *b = &r->buckets[stage][bucket_of(value)];
    owner_set(b, load(b) + 1);
    owner_set(&r->sum[stage], load(&r->sum[stage]) + value);
    if (value > load(&r->max[stage])) owner_set(&r->max[stage], value);
}

void trace_reset(void)
{
    for (int i = 0; i < TRACE_MAX_WORKERS; i++) {
        struct trace_recorder *r = &recorders[i];
        for (int s = 0; s < TRACE_STAGES; s++) {
            for (int b = 0; b < TRACE_BUCKETS; b++) owner_set(&r->buckets[s][b], 0);
            owner_set(&r->sum[s], 0);
            owner_set(&r->max[s], 0);
        }
    }
}

void trace_stats(stat_writer w, void *ctx)
{
    static const struct { const char *name; double q; } quantiles[] = {
        { "p50", 0.5 }, { "p90", 0.9 }, { "p99", 0.99 }, { "p999", 0.999 },
    };
    char name[48];
    for (int s = 0; s < TRACE_STAGES; s++) {
        uint64_t counts[TRACE_BUCKETS] = { 0 }, total = 0, sum = 0, max = 0;
        for (int i = 0; i < TRACE_MAX_WORKERS; i++) {
            for (int b = 0; b < TRACE_BUCKETS; b++) counts[b] += load(&recorders[i].buckets[s][b]);
            sum += load(&recorders[i].sum[s]);
            uint64_t m = load(&recorders[i].max[s]);
            if (m > max) max = m;
        }
        for (int b = 0; b < TRACE_BUCKETS; b++) total += counts[b];
        snprintf(name, sizeof name, "%s:count", stage_names[s]);
        w(ctx, name, "%llu", (unsigned long long)total);
        if (!total) continue;
        snprintf(name, sizeof name, "%s:mean", stage_names[s]);
        w(ctx, name, "%llu", (unsigned long long)(sum / total));
        for (size_t q = 0; q < sizeof quantiles / sizeof quantiles[0]; q++) {
            uint64_t want = (uint64_t)(quantiles[q].q * (double)total), seen = 0;
            if (want == 0) want = 1;
            int b = 0;
            while (b < TRACE_BUCKETS - 1 && seen + counts[b] < want) seen += counts[b++];
            uint64_t top = bucket_top(b);
            snprintf(name, sizeof name, "%s:%s", stage_names[s], quantiles[q].name);
            w(ctx, name, "%llu", (unsigned long long)(top < max ? top : max));
        }
        snprintf(name, sizeof name, "%s:max", stage_names[s]);
        w(ctx, name, "%llu", (unsigned long long)max);
    }
}
#endif
