/*
 * trace.h - where one request's time goes inside the server: cheap
 * timestamps along its path, compiled in only by `make TRACE=1`
 * (-DCACHET_TRACE); a release build has none of it, every macro below
 * expands to nothing.
 *
 * Why: the tail at many connections (W2) is made of waits the per-command
 * latency histograms (latency.h) cannot see: a connection that epoll found
 * ready waits while the turn serves the others before it, the io_uring
 * batch reads every ready connection before any is answered and answers
 * every one before any reply is sent, and -R makes a busy connection wait
 * a turn. Each stage below is one such wait or one piece of work, measured
 * with clock_gettime (vDSO, ~20 ns) into a per-worker log-linear histogram,
 * read with `stats trace` (a trace build only) and zeroed by `stats reset`.
 *
 * Stages (ns unless said otherwise):
 *   turn         epoll_wait returned -> the loop is about to wait again
 *   turn_ready   connections epoll reported ready in the turn (a count)
 *   ready_wait   epoll_wait returned -> this connection's read starts
 *   read         its read() (io_uring: the batch's recv submit)
 *   parse        parse_request, per request
 *   dispatch     lookup/store and reply queued (proto_dispatch), per request
 *   dispatch_store  the same for storage commands (set/add/.../cas, ms) alone:
 *                whether a store's allocation, eviction or linking runs long
 *                and holds up the gets behind it on the worker
 *   queued_sent  its batch's replies queued -> sent (send returned)
 *   wake_sent    epoll_wait returned -> its replies sent: the server's share
 *                of the request's latency
 *   yield_wait   a connection yielded (-R or output room) -> resumed
 *   disk_read    a GET of a value on disk dispatched -> its read's completion
 *                reaped, on the worker's own ring (the IO threads' reads, and
 *                reads that end inside their start, are not recorded): the
 *                device's time and the wait for the turn to submit and reap
 *   disk_held    a deferred reply's completion drained -> its last byte
 *                handed to send (under TLS: sealed): how long a value read
 *                from disk waits behind the replies before it and for the
 *                send. Every deferred reply counts: the IO threads' too, and a
 *                value sent in pieces once, after its last piece
 *   disk_behind  per deferred completion drained (each piece of a value sent
 *                in pieces too), 1000 when an earlier reply of the same
 *                connection was still waiting for its read, else 0 (the mean
 *                is the share, per mille, of completions before their turn)
 *
 * Why the disk stages: a closed loop of pipelined GETs keeps fewer reads at
 * the device than fio at the same depth, each taking no longer there
 * (bench-extstore: reads in flight, time per read); these say whether the
 * rest wait in the server, behind an earlier reply or for a turn.
 *
 * Concurrency: recorder i belongs to worker i (at most TRACE_MAX_WORKERS;
 * others are not recorded) and is written only by it with relaxed
 * load+store; `stats trace` reads with relaxed loads from any thread;
 * `stats reset` stores zeros from another thread and may lose a count a
 * worker adds at the same instant, which a diagnostic build accepts.
 * The recorders are static memory of trace builds only, outside the memory
 * formula, which describes release builds.
 */
#ifndef CACHET_TRACE_H
#define CACHET_TRACE_H

#include <stdint.h>

#include "storage.h"   /* stat_writer */

enum trace_stage {
    TRACE_TURN, TRACE_TURN_READY, TRACE_READY_WAIT, TRACE_READ, TRACE_PARSE,
    TRACE_DISPATCH, TRACE_DISPATCH_STORE, TRACE_QUEUED_SENT, TRACE_WAKE_SENT, TRACE_YIELD_WAIT,
    TRACE_DISK_READ, TRACE_DISK_HELD, TRACE_DISK_BEHIND,
    TRACE_STAGES,
};

#ifdef CACHET_TRACE
#include <time.h>

static inline uint64_t trace_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
void trace_record(int worker, enum trace_stage stage, uint64_t value);
/* The calling thread's recorder, for code that has no worker at hand (the
 * output queue, extstore's reads): set once by each worker at its start;
 * other threads record nothing. */
void trace_set_worker(int worker);
void trace_record_here(enum trace_stage stage, uint64_t value);
void trace_stats(stat_writer w, void *ctx);
void trace_reset(void);

#define TRACE_NOW()                  trace_now()
#define TRACE_REC(worker, stage, v)  trace_record((worker), (stage), (v))
#define TRACE_REC_HERE(stage, v)     trace_record_here((stage), (v))
#define TRACE_SET_WORKER(worker)     trace_set_worker(worker)
/* a stamp field of a struct: set, and since-stamp records */
#define TRACE_STAMP(field, v)        ((field) = (v))
#define TRACE_SINCE(worker, stage, start, now) \
    do { if (start) trace_record((worker), (stage), (now) - (start)); } while (0)
#else
#define TRACE_NOW()                  ((uint64_t)0)
#define TRACE_REC(worker, stage, v)  ((void)(v))   /* v is 0 here: nothing is computed */
#define TRACE_REC_HERE(stage, v)     ((void)0)   /* v may name trace-only fields */
#define TRACE_SET_WORKER(worker)     ((void)0)
#define TRACE_STAMP(field, v)        ((void)0)
#define TRACE_SINCE(worker, stage, start, now) ((void)0)
#endif

#endif
