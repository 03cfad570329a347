/*
 * metrics.h - cachetd's statistics in Prometheus' text exposition format
 * (version 0.0.4).
 *
 * Why a mapping table over the stats registry: `stats` and /metrics must
 * report the same numbers, so the metrics are not counted a second time;
 * every value comes from stats_emit() (stats.h), and metrics.c only says
 * which stat becomes which metric. The names, labels and types are those of
 * prometheus/memcached_exporter wherever that exporter has the metric, so a
 * dashboard or alert written for memcached works unchanged; cachetd's own
 * metrics are named cachet_*. A new stat (extstore's, say) becomes a metric
 * by adding one table entry.
 *
 * Concurrency: rendering only reads the registry, whose providers are safe
 * from any thread (stats.h); it keeps no state between calls and allocates
 * per call, so calls may run on any thread. It never takes a lock of its own.
 */
#ifndef CACHET_METRICS_H
#define CACHET_METRICS_H

#include <stdbool.h>
#include <stddef.h>

#include "stats.h"

#define METRICS_TEXT_MAX (4u << 20)   /* a scrape larger than this is refused */

struct metrics_text {
    char  *buf;
    size_t len, cap;
    bool   failed;      /* out of memory or over METRICS_TEXT_MAX */
};

/* Where the statistics come from: stats_emit, or a test's own table. */
typedef void (*metrics_source)(enum stats_group group, stat_writer w, void *ctx);

/* Renders every metric into out (which must start zeroed). engine_up is the
 * outcome of the latest round trip through the memcached port
 * (memcached_up). Returns false, with out freed, if memory ran out. */
bool metrics_render(struct metrics_text *out, bool engine_up);
bool metrics_render_from(struct metrics_text *out, bool engine_up, metrics_source source);
void metrics_text_free(struct metrics_text *t);

#endif
