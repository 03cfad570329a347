/*
 * stats.c - the registry of statistics providers; see stats.h for why.
 *
 * Concurrency: the table is constant; providers are safe to call from any
 * thread (each documents how it reads other threads' counters).
 */
#include "stats.h"

#include <string.h>

#include "ext_io.h"
#include "server.h"
#include "latency.h"
#include "logger.h"
#include "trace.h"

/* memcached's logger counters (logger.c). Lines go straight from the event
 * to the watchers' rings, so no worker buffer ever drops one: dropped is 0,
 * written counts every event a watcher wanted. */
static void log_stats_general(stat_writer w, void *ctx)
{
    struct log_stats s;
    log_stats(&s);
    w(ctx, "log_worker_dropped", "0");
    w(ctx, "log_worker_written", "%llu", (unsigned long long)s.written);
    w(ctx, "log_watcher_skipped", "%llu", (unsigned long long)s.skipped);
    w(ctx, "log_watcher_sent", "%llu", (unsigned long long)s.sent);
    w(ctx, "log_watchers", "%llu", (unsigned long long)s.watchers);
}

struct provider {
    enum stats_group group;
    void (*emit)(stat_writer w, void *ctx);
};

/* `stats` prints the server's counters first, then storage's, as memcached does. */
static const struct provider providers[] = {
    { STATS_GENERAL,  server_stats_general },
    { STATS_GENERAL,  storage_stats_general },
    { STATS_GENERAL,  log_stats_general },
    { STATS_GENERAL,  storage_ext_stats_general },   /* only with extstore, as memcached */
    { STATS_SETTINGS, server_stats_settings },
    { STATS_SETTINGS, storage_stats_settings },
    { STATS_SETTINGS, storage_ext_stats_settings },
    { STATS_SETTINGS, ext_io_stats_settings },       /* ext_io_engine, only with extstore */
    { STATS_ITEMS,    storage_stats_items },
    { STATS_SLABS,    storage_stats_slabs },
    { STATS_SIZES,    storage_stats_sizes },
    { STATS_CONNS,    server_stats_conns },
    { STATS_EXTSTORE, storage_ext_stats_extstore },
    { STATS_MRC,      storage_stats_mrc },
    { STATS_SIZES_COARSE, storage_stats_sizes_coarse },
    { STATS_LATENCY,  latency_stats },
#ifdef CACHET_TRACE
    { STATS_TRACE,    trace_stats },
#endif
};

static const char *const group_names[STATS_GROUP_COUNT] = {
    [STATS_GENERAL] = "", [STATS_SETTINGS] = "settings", [STATS_ITEMS] = "items",
    [STATS_SLABS] = "slabs", [STATS_SIZES] = "sizes", [STATS_CONNS] = "conns", [STATS_EXTSTORE] = "extstore", [STATS_MRC] = "mrc",
    [STATS_SIZES_COARSE] = NULL,   /* not a `stats` argument */
    [STATS_LATENCY] = NULL,   /* not a `stats` argument */
#ifdef CACHET_TRACE
    [STATS_TRACE] = "trace",
#endif
};

bool stats_group_by_name(const char *arg, size_t len, enum stats_group *out)
{
    for (int g = 0; g < STATS_GROUP_COUNT; g++) {
        if (group_names[g] && strlen(group_names[g]) == len && !memcmp(group_names[g], arg, len)) {
            *out = (enum stats_group)g;
            return true;
        }
    }
    return false;
}

void stats_emit(enum stats_group group, stat_writer w, void *ctx)
{
    for (size_t i = 0; i < sizeof providers / sizeof providers[0]; i++)
        if (providers[i].group == group) providers[i].emit(w, ctx);
}

void stats_reset(void)
{
    server_stats_reset();
    storage_stats_reset();
    storage_ext_stats_reset();
#ifdef CACHET_TRACE
    trace_reset();
#endif
}
