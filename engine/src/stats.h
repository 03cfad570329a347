/*
 * stats.h - the one registry of cachetd's statistics.
 *
 * Why a registry: `stats`, `stats settings|items|slabs|sizes|conns` and the
 * Prometheus endpoint must print the same numbers under the same names, so no
 * reader assembles statistics itself. Each layer (network, storage, and later
 * extstore) provides functions that emit "name value" pairs for a group
 * through a stat_writer; readers ask the registry for a group and format the
 * pairs their own way (STAT lines, Prometheus text). Providers are listed in
 * one table in stats.c, in the order `stats` prints them.
 *
 * Threading: providers read counters that other threads write (relaxed
 * atomics, per-thread counters summed at read time), so any thread may emit
 * any group at any time; nothing here takes a lock on the request path.
 */
#ifndef CACHET_STATS_H
#define CACHET_STATS_H

#include <stdbool.h>
#include <stddef.h>

#include "storage.h"   /* stat_writer */

enum stats_group {
    STATS_GENERAL,    /* `stats` */
    STATS_SETTINGS,   /* `stats settings` */
    STATS_ITEMS,      /* `stats items`: items:<class>:<name> */
    STATS_SLABS,      /* `stats slabs`: <class>:<name>, then totals */
    STATS_SIZES,      /* `stats sizes`: <size> <count> */
    STATS_CONNS,      /* `stats conns`: <fd>:<name> */
    STATS_EXTSTORE,   /* `stats extstore`: <page>:<name> (empty without extstore) */
    STATS_MRC,        /* `stats mrc`: the live miss-ratio curve (mrc.c) */
    STATS_SIZES_COARSE, /* no `stats` argument: /metrics's size histograms */
    STATS_LATENCY,    /* no `stats` argument: the Prometheus endpoint's command
                         latency histograms (latency.h) */
    STATS_TRACE,      /* `stats trace`, a `make TRACE=1` build only: where a
                         request's time goes (trace.h) */
    STATS_GROUP_COUNT,
};

/* The group a `stats` argument names ("" is STATS_GENERAL); false if none
 * (and for groups that only other readers ask for). */
bool stats_group_by_name(const char *arg, size_t len, enum stats_group *out);

/* Emits every statistic of the group, in `stats` order. */
void stats_emit(enum stats_group group, stat_writer w, void *ctx);

/* `stats reset`: every resettable counter of every layer. */
void stats_reset(void);

#endif
