/*
 * server.h - process-wide server state shared by the network layer, the
 * protocol layer and `stats`: the settings, the worker table, connection
 * counters, the shutdown flag, and the registry of live connections.
 *
 * Why a file of its own: `stats` (protocol) reads what the network layer
 * counts, and the network layer calls into the protocol. Keeping the shared
 * state below both means neither calls the other to get at it, so the
 * layers form no circle (the include graph is in engine/README.md).
 *
 * Concurrency: settings and the worker table are written before the
 * workers start and read-only afterwards (except settings.verbose, a relaxed
 * atomic). Counters are relaxed atomics. The registry lock guards every
 * worker's connection list against `stats conns` running on another worker;
 * a worker changes its own list only under it.
 */
#ifndef CACHET_SERVER_H
#define CACHET_SERVER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "conn.h"
#include "settings.h"

extern struct settings settings;
extern struct worker  *workers;
extern int             num_workers;
extern uint32_t        curr_conns_global;     /* relaxed atomics */
extern uint64_t        total_conns_global, rejected_conns_global;
/* -o conn_placement: how each new TCP connection found its worker (net_place.c) */
enum { PLACED_CPU, PLACED_SIBLING, PLACED_NAPI, PLACED_FALLBACK, PLACED_KINDS };
extern uint64_t        placed_conns_global[PLACED_KINDS];
extern time_t          server_started;

/* SIGTERM/SIGINT arrived: stop accepting, finish queued replies, close. */
void server_set_shutting_down(void);
/* The `shutdown` command (-A): any thread. Sends the process SIGTERM, so
 * the main thread runs exactly the drain a pod's SIGTERM gets. */
void server_request_shutdown(void);
/* An atomic: written by the main thread at SIGTERM, read by every worker
 * (TSan reported the plain int this was). Inline: read once per request. */
extern atomic_bool server_stopping;
static inline bool server_shutting_down(void)
{
    return atomic_load_explicit(&server_stopping, memory_order_acquire);
}

void registry_lock(void);
void registry_unlock(void);

/* Providers for the stats registry (stats.c). */
void server_stats_reset(void);
void server_stats_general(stat_writer w, void *ctx);
void server_stats_settings(stat_writer w, void *ctx);
void server_stats_conns(stat_writer w, void *ctx);

#endif
