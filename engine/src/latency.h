/*
 * latency.h - per-command latency histograms, recorded by the workers.
 *
 * What is measured: the time from the first request of a read batch to the
 * end of that batch (every reply of the batch queued for sending), counted
 * once for every request in the batch under its command. That is the time the
 * worker makes a request wait for its reply: its own service time plus that
 * of the requests answered before it in the same batch, whose replies leave
 * in the same send. Kernel queues and the send itself are not included. A
 * storage command is counted in the batch that parsed its command line; a
 * value that needs more reads than that batch had is not waited for (that is
 * the client's transfer, not the server's work).
 *
 * Why per batch and not per request: a pipelined batch answers tens of
 * requests in a few microseconds, and two clock reads per request would cost
 * more than some requests do. Here a request costs one increment of a
 * worker-local counter (latency_note); a batch costs two clock_gettime calls
 * (vDSO) and one histogram update per distinct command in it
 * (latency_batch_end). Nothing is sampled: every request is counted.
 *
 * Buckets: Prometheus-style upper bounds, three per decade (1, 2.5, 5) from
 * 250 ns to 2.5 s, plus +Inf. The exported histogram uses exactly these
 * bounds, so there is no re-binning error between what is recorded and what
 * a scrape reports.
 *
 * Concurrency: recorder i belongs to worker i. Its batch state is plain
 * memory touched only by that worker. Its bucket counters and sums are
 * written only by that worker, with relaxed atomic load+store (no locked
 * read-modify-write), and read by any thread with relaxed loads
 * (latency_stats), so a scrape sees each counter whole and never makes a
 * worker wait. Recording is on only after latency_init(), which main() calls
 * before the workers start when -o metrics_port is given; otherwise
 * latency_note() is one predictable branch.
 */
#ifndef CACHET_LATENCY_H
#define CACHET_LATENCY_H

#include <stdint.h>
#include <time.h>

#include "storage.h"   /* stat_writer */

#define LATENCY_COMMANDS 32    /* enum req_cmd values; checked in latency.c */
#define LATENCY_BUCKETS  23    /* 22 finite upper bounds + Inf */

struct latency_recorder {
    /* the batch in progress: owner only */
    uint64_t batch_start_ns;            /* valid while batch_commands != 0 */
    uint32_t batch_commands;            /* bit per command noted in this batch */
    uint32_t batch_count[LATENCY_COMMANDS];
    /* the histogram: owner writes, anyone reads (relaxed) */
    uint64_t buckets[LATENCY_COMMANDS][LATENCY_BUCKETS];
    uint64_t sum_ns[LATENCY_COMMANDS];
} __attribute__((aligned(64)));

/* NULL while recording is off. */
extern struct latency_recorder *latency_recorders;

/* Turns recording on for workers 0..nworkers-1; 0, or -1 without memory. */
int latency_init(int nworkers);

static inline uint64_t latency_clock_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A request of command cmd (enum req_cmd) is being answered in this batch. */
static inline void latency_note(int worker, unsigned cmd)
{
    struct latency_recorder *r = latency_recorders;
    if (!r || cmd >= LATENCY_COMMANDS) return;
    r += worker;
    if (!r->batch_commands) r->batch_start_ns = latency_clock_ns();
    r->batch_commands |= 1u << cmd;
    r->batch_count[cmd]++;
}

/* The worker has answered its batch: count its requests. */
void latency_batch_end(int worker);

/* The upper bound of bucket i in ns (UINT64_MAX for the last, +Inf). */
uint64_t latency_bucket_bound_ns(int i);
/* Bucket index for a duration. */
int latency_bucket_of(uint64_t ns);
/* The command's protocol name ("get", "mg", ...), NULL if none. */
const char *latency_command_name(unsigned cmd);

/* Stats provider (group STATS_LATENCY): for each command seen,
 * "<cmd>:le_<bound_ns>" cumulative counts in bound order, then
 * "<cmd>:count" and "<cmd>:sum_ns". */
void latency_stats(stat_writer w, void *ctx);

#endif
