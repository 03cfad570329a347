/*
 * latency.c - per-command latency histograms; see latency.h for what is
 * measured, why per batch, and the threading rules.
 *
 * Concurrency: a recorder's batch fields are its worker's alone; its bucket
 * counters and sums are written by that worker with relaxed load+store and
 * read by latency_stats() from any thread with relaxed loads.
 */
#include "latency.h"

#include <stdio.h>
#include <stdlib.h>

#include "proto_parser.h"

_Static_assert(CMD_REFRESH_CERTS < LATENCY_COMMANDS, "a command has no latency slot: raise LATENCY_COMMANDS");

struct latency_recorder *latency_recorders;

/* 1, 2.5, 5 per decade; the last bucket (+Inf) has no bound here. */
static const uint64_t bounds_ns[LATENCY_BUCKETS - 1] = {
    250, 500,
    1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000, 500000,
    1000000, 2500000, 5000000, 10000000, 25000000, 50000000, 100000000, 250000000, 500000000,
    1000000000, 2500000000u,
};

static const char *const command_names[LATENCY_COMMANDS] = {
    [CMD_GET] = "get", [CMD_GETS] = "gets", [CMD_GAT] = "gat", [CMD_GATS] = "gats",
    [CMD_SET] = "set", [CMD_ADD] = "add", [CMD_REPLACE] = "replace", [CMD_APPEND] = "append",
    [CMD_PREPEND] = "prepend", [CMD_CAS] = "cas", [CMD_INCR] = "incr", [CMD_DECR] = "decr",
    [CMD_TOUCH] = "touch", [CMD_DELETE] = "delete", [CMD_FLUSH_ALL] = "flush_all",
    [CMD_VERSION] = "version", [CMD_VERBOSITY] = "verbosity", [CMD_QUIT] = "quit",
    [CMD_STATS] = "stats", [CMD_MG] = "mg", [CMD_MS] = "ms", [CMD_MD] = "md", [CMD_MA] = "ma",
    [CMD_MN] = "mn", [CMD_ME] = "me", [CMD_SHUTDOWN] = "shutdown", [CMD_SLABS_AUTOMOVE] = "slabs",
    [CMD_SLABS_REASSIGN] = "slabs", [CMD_WATCH] = "watch", [CMD_EXTSTORE] = "extstore",
    [CMD_REFRESH_CERTS] = "refresh_certs",
};

static int nrecorders;

int latency_init(int nworkers)
{
    if (nworkers <= 0) return -1;
    struct latency_recorder *r = aligned_alloc(64, sizeof(*r) * (size_t)nworkers);
    if (!r) return -1;
    for (int i = 0; i < nworkers; i++) r[i] = (struct latency_recorder){ 0 };
    nrecorders = nworkers;
    __atomic_store_n(&latency_recorders, r, __ATOMIC_RELEASE);
    return 0;
}

uint64_t latency_bucket_bound_ns(int i)
{
    return i < LATENCY_BUCKETS - 1 ? bounds_ns[i] : UINT64_MAX;
}

int latency_bucket_of(uint64_t ns)
{
    /* a binary search over 22 bounds: five compares, once per batch */
    int lo = 0, hi = LATENCY_BUCKETS - 1;       /* answer in [lo, hi] */
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (ns <= bounds_ns[mid]) hi = mid; else lo = mid + 1;
    }
    return lo;
}

const char *latency_command_name(unsigned cmd)
{
    return cmd < LATENCY_COMMANDS ? command_names[cmd] : NULL;
}

static inline void owner_add(uint64_t *counter, uint64_t n)
{
    __atomic_store_n(counter, __atomic_load_n(counter, __ATOMIC_RELAXED) + n, __ATOMIC_RELAXED);
}

void latency_batch_end(int worker)
{
    struct latency_recorder *r = latency_recorders;
    if (!r) return;
    r += worker;
    uint32_t cmds = r->batch_commands;
    if (!cmds) return;
    uint64_t now = latency_clock_ns();
    uint64_t took = now > r->batch_start_ns ? now - r->batch_start_ns : 0;
    int b = latency_bucket_of(took);
    do {
        unsigned cmd = (unsigned)__builtin_ctz(cmds);
        cmds &= cmds - 1;
        uint32_t n = r->batch_count[cmd];
        r->batch_count[cmd] = 0;
        owner_add(&r->buckets[cmd][b], n);
        owner_add(&r->sum_ns[cmd], took * n);
    } while (cmds);
    r->batch_commands = 0;
}

void latency_stats(stat_writer w, void *ctx)
{
    struct latency_recorder *recs = __atomic_load_n(&latency_recorders, __ATOMIC_ACQUIRE);
    if (!recs) return;
    char name[48];
    for (unsigned cmd = 0; cmd < LATENCY_COMMANDS; cmd++) {
        if (!command_names[cmd]) continue;
        uint64_t counts[LATENCY_BUCKETS] = { 0 }, sum = 0, total = 0;
        for (int i = 0; i < nrecorders; i++) {
            for (int b = 0; b < LATENCY_BUCKETS; b++)
                counts[b] += __atomic_load_n(&recs[i].buckets[cmd][b], __ATOMIC_RELAXED);
            sum += __atomic_load_n(&recs[i].sum_ns[cmd], __ATOMIC_RELAXED);
        }
        for (int b = 0; b < LATENCY_BUCKETS; b++) total += counts[b];
        if (!total) continue;
        /* cumulative from one snapshot of the buckets, so every le count
         * is at most the next and the last equals count */
        uint64_t running = 0;
        for (int b = 0; b < LATENCY_BUCKETS - 1; b++) {
            running += counts[b];
            snprintf(name, sizeof name, "%s:le_%llu", command_names[cmd], (unsigned long long)bounds_ns[b]);
            w(ctx, name, "%llu", (unsigned long long)running);
        }
        snprintf(name, sizeof name, "%s:count", command_names[cmd]);
        w(ctx, name, "%llu", (unsigned long long)total);
        snprintf(name, sizeof name, "%s:sum_ns", command_names[cmd]);
        w(ctx, name, "%llu", (unsigned long long)sum);
    }
}
