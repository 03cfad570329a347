/*
 * net_worker.c - the worker threads: one event loop (ae.c) each, pinned to
 * one CPU, serving the connections it accepted until shutdown.
 *
 * Why pinned one per CPU (settings.worker_cpus): a connection's buffers stay
 * in one CPU's cache, and the operator can verify the pinning through
 * `stats settings`.
 *
 * A loop turn: events (accepts, reads, sends, the eventfd that deferred
 * replies and shutdown write, the worker's own disk-read ring; io_uring
 * batches of URING_CHUNK connections as they fill), then before sleeping
 * the rest of the io_uring batch, the connections that yielded, the idle
 * sweep and the disk reads started this turn. On shutdown a worker closes
 * its listeners, finishes the replies already queued and stops once its
 * connections are gone, or at the deadline.
 *
 * Concurrency: everything here runs on the worker's thread, except
 * server_create_workers, server_start_workers and server_shutdown (main
 * thread: shutdown sets the atomic shutdown flag, writes each worker's
 * eventfd and joins).
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "ae.h"
#include "conn.h"
#include "ext_io.h"
#include "net.h"
#include "net_internal.h"
#include "outbuf.h"
#include "reply.h"
#include "server.h"
#include "trace.h"
#include "uring.h"

/* ------------------------------------------------------------ idle timeout */

/* memcached's idle_timeout: a TCP connection waiting for a command (nothing
 * queued, no request half done) whose last command is more than
 * idle_timeout seconds old is closed and counted (idle_kicks). A client
 * that has replies coming, or is sending a value, is not idle. */
static void close_idle(struct worker *w)
{
    rel_time_t now = storage_now();
    if (now == w->idle_checked) return;
    w->idle_checked = now;
    struct conn *c = w->conns;
    while (c) {
        struct conn *next = c->next;
        uint32_t last = c->last_cmd_time;
        if (c->tcp && c->state == CONN_CMD && outbuf_empty(&c->out) && !c->resume_off && !c->waits_store &&
            now > last && now - last > (uint32_t)settings.idle_timeout) {
            if (verbosity() > 1) fprintf(stderr, "Closing idle fd %d\n", c->fd);
            STAT_INC(w, idle_kicks);
            conn_close(c);
        }
        c = next;
    }
}

/* ------------------------------------------------------ slow clients' budget */

/* A client that holds connection buffer budget and has taken no byte for
 * SLOW_KICK_S seconds while disk reads have waited over a second for that
 * budget (ext_io_budget_starved) is closed and counted (slow_kicks): the
 * budget belongs to a slow client only while nobody else needs it, as
 * memcached closes a client whose output it cannot queue. A disk read
 * waits up to 5 s for budget (ext_io.c); this frees it after 1 to 3. A
 * client that reads, however slowly, keeps its connection. */
#define SLOW_KICK_S 2

static void kick_slow(struct worker *w)
{
    uint32_t now = conn_clock_s();
    if (now == w->slow_checked) return;
    w->slow_checked = now;
    if (!ext_io_budget_starved(now)) return;
    struct conn *c = w->conns;
    while (c) {
        struct conn *next = c->next;
        if (c->write_blocked && now - c->blocked_since >= SLOW_KICK_S && out_budget_bytes(c) > 0) {
            if (verbosity() > 1) fprintf(stderr, "Closing slow fd %d: holds budget others wait for\n", c->fd);
            STAT_INC(w, slow_kicks);
            conn_close(c);
        }
        c = next;
    }
}

/* ----------------------------------------------------------------- workers */

static void wake_ready(struct ae_loop *l, int fd, void *data, int mask)
{
    struct worker *w = data;
    uint64_t v;
    ssize_t ignored = read(fd, &v, sizeof(v));
    (void)ignored;
    drain_completions(w);
    net_listen_take_handoffs(w);
    if (!server_shutting_down() || w->stopping) return;
    w->stopping = true;
    net_listen_detach(w);
    /* finish replies already queued (deferred ones included), then close;
     * new requests are not read */
    struct conn *c = w->conns;
    while (c) {
        struct conn *next = c->next;
        ae_del(l, c->fd, AE_READABLE);
        if (c->state != CONN_NREAD && !c->resume_off && !c->waits_store) c->state = CONN_CLOSING;
        /* resume, not just flush: a GET waiting for its queue to drain is
         * otherwise never called back once this flush empties the queue
         * (no EPOLLOUT is armed then), and the drain deadline cuts it */
        conn_resume(c);
        c = next;
    }
}

/* The worker's own disk reads (ext_io.h): a ring that failed leaves the
 * loop (its reads were finished with pread; the IO threads take over). */
static void ext_fd_sync(struct worker *w)
{
    if (w->ext_fd >= 0 && ext_io_worker_fd(w->ext) != w->ext_fd) {
        ae_del(w->loop, w->ext_fd, AE_READABLE);
        w->ext_fd = -1;
    }
}

static void disk_ready(struct ae_loop *l, int fd, void *data, int mask)
{
    struct worker *w = data;
    ext_io_worker_reap(w->ext);
    drain_completions(w);
    ext_fd_sync(w);
}

static int worker_before_sleep(struct ae_loop *l, void *data)
{
    struct worker *w = data;
    if (w->ring) uring_turn(w);
    /* connections that yielded continue where they stopped; those waiting
     * for the client (EPOLLOUT) or for a deferred reply are resumed by that
     * event instead (conn_writable, drain_completions) */
    struct conn *c = w->pending;
    w->pending = NULL;
    /* stores parked for the flusher are looked at once a millisecond (the
     * poll's period), with one clock read for all: hundreds of parked
     * writers must not tax every request of the worker's other clients */
    int64_t parks_now = -1;
    while (c) {
        struct conn *next = c->next_pending;
        if (c->waits_store) {
            if (parks_now < 0) {
                struct timespec ts;
                clock_gettime(CLOCK_MONOTONIC, &ts);
                int64_t now = (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
                parks_now = now - w->parks_checked_us >= 1000 ? now : 0;
                if (parks_now) w->parks_checked_us = now;
            }
            if (!parks_now || !storage_park_due(&c->store_park, parks_now)) {
                /* its wait cannot be over yet: not worth parsing its line again */
                c->next_pending = w->pending;
                w->pending = c;
                c = next;
                continue;
            }
        }
        c->yielded = false;
        TRACE_SINCE(w->id, TRACE_YIELD_WAIT, c->trace_yielded, TRACE_NOW());
        if (!c->write_blocked && !(c->waits_output && outbuf_blocked_on_deferred(&c->out)))
            conn_continue(c);
        c = next;
    }
    if (settings.idle_timeout) close_idle(w);
    kick_slow(w);
    /* every disk read this turn started, in one io_uring_enter */
    if (w->ext) {
        ext_io_worker_submit(w->ext);
        ext_fd_sync(w);
    }
    if (server_shutting_down() && !w->conns) ae_stop(l);
#ifdef CACHET_TRACE
    if (l->last_fired > 0) {
        TRACE_SINCE(w->id, TRACE_TURN, l->woke_ns, TRACE_NOW());
        TRACE_REC(w->id, TRACE_TURN_READY, (uint64_t)l->last_fired);
        l->last_fired = 0;
    }
#endif
    int paused = net_listen_resume_due(w);
    /* a disk read waiting for budget other connections hold, or a store
     * parked for the flusher, is retried every millisecond, not in a busy
     * loop */
    bool only_budget = w->pending != NULL;
    for (struct conn *p = w->pending; p && only_budget; p = p->next_pending)
        only_budget = p->waits_budget || p->waits_store;
    if (w->pending) return only_budget ? 1 : 0;
    return paused >= 0 && paused < 100 ? paused : 100;
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    if (w->cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(w->cpu, &set);
        int rc = pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
        if (rc) fprintf(stderr, "cachetd: worker %d: cannot pin to CPU %d: %s\n", w->id, w->cpu, strerror(rc));
    }
    char name[16];
    snprintf(name, sizeof(name), "cachet-w%d", w->id);
    TRACE_SET_WORKER(w->id);
    pthread_setname_np(pthread_self(), name);
    w->st = storage_thread_register();
    w->ext_fd = -1;
    w->ext = ext_io_worker_new(w->st);
    if (w->ext) {
        w->ext_fd = ext_io_worker_fd(w->ext);
        /* a ring the loop cannot watch would never be reaped */
        if (ae_add(w->loop, w->ext_fd, AE_READABLE, disk_ready, w) < 0) {
            ext_io_worker_free(w->ext);
            w->ext = NULL;
            w->ext_fd = -1;
        }
    }
    w->loop->before_sleep = worker_before_sleep;
    w->loop->hook_data = w;
    ae_run(w->loop, 100);
    /* deadline passed or everything closed: close what is left */
    while (w->conns) conn_close(w->conns);
    if (w->ext) {
        if (w->ext_fd >= 0) ae_del(w->loop, w->ext_fd, AE_READABLE);
        struct ext_worker *xw = w->ext;
        w->ext = NULL;
        ext_io_worker_free(xw);   /* waits for its reads; their connections are gone */
        drain_completions(w);
    }
    return NULL;
}

/* The event table's size (settings_fd_table_size: -c plus the process's own
 * fds), not RLIMIT_NOFILE's: that limit is raised to cover it, and a table
 * larger than the fds the process can open is never needed. */
static int fd_setsize(void)
{
    int table = settings_fd_table_size(&settings);
    struct rlimit rl;
    rlim_t want = (rlim_t)table;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        if (rl.rlim_cur < want) {
            rl.rlim_cur = want < rl.rlim_max ? want : rl.rlim_max;
            setrlimit(RLIMIT_NOFILE, &rl);
            getrlimit(RLIMIT_NOFILE, &rl);
        }
        /* as memcached: a -c the process cannot hold is refused at start
         * (71), not found out later as accept() failing with EMFILE */
        rlim_t need = (rlim_t)settings.maxconns + (rlim_t)FD_TABLE_PER_WORKER * (rlim_t)settings.num_threads + 64;
        if (rl.rlim_cur < need) {
            fprintf(stderr, "cachetd: failed to set rlimit for open files (-c %d and %d workers need %llu, "
                    "the limit is %llu). Try starting as root or requesting smaller maxconns value.\n",
                    settings.maxconns, settings.num_threads, (unsigned long long)need,
                    (unsigned long long)rl.rlim_cur);
            return -1;
        }
        if (rl.rlim_cur < want) return (int)rl.rlim_cur;   /* no fd can pass it */
    }
    return table;
}

int server_create_workers(void)
{
    num_workers = settings.num_threads;
    workers = calloc((size_t)num_workers, sizeof(*workers));
    if (!workers) return -1;
    int setsize = fd_setsize();
    if (setsize < 0) return -1;
    for (int i = 0; i < num_workers; i++) {
        struct worker *w = &workers[i];
        w->id = i;
        w->cpu = settings.pin_workers && settings.num_cpus_listed > 0
                     ? settings.worker_cpus[i % settings.num_cpus_listed] : -1;
        w->loop = ae_create(setsize, 1024);
        w->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (!w->loop || w->wake_fd < 0) return -1;
        reply_queue_init(&w->replies, w->wake_fd);
        if (settings.io_uring != IO_URING_OFF) {
            w->ring = uring_create(WORKER_BATCH_MAX);
            w->batch = calloc(WORKER_BATCH_MAX, sizeof(*w->batch));
            if (!w->ring || !w->batch) {
                if (settings.io_uring == IO_URING_REQUIRED) {
                    fprintf(stderr, "cachetd: -o io_uring: the kernel refused io_uring (%s); "
                            "run without it\n", strerror(errno));
                    return -1;
                }
                if (settings.verbose)
                    fprintf(stderr, "cachetd: io_uring unavailable (%s), using epoll read/send\n", strerror(errno));
                /* all workers use one mode: undo what earlier workers set up */
                for (int j = 0; j <= i; j++) {
                    uring_free(workers[j].ring);
                    workers[j].ring = NULL;
                    free(workers[j].batch);
                    workers[j].batch = NULL;
                }
                settings.io_uring = IO_URING_OFF;
                conn_use_uring(false);
                continue;
            }
            conn_use_uring(true);
        }
    }
    return 0;
}

int server_start_workers(void)
{
    /* before any thread runs: a listener or wake fd outside a worker's
     * event table would silently never be served, so it stops the start */
    for (int i = 0; i < num_workers; i++) {
        struct worker *w = &workers[i];
        if (net_listen_attach(w) != 0) return -1;
        if (ae_add(w->loop, w->wake_fd, AE_READABLE, wake_ready, w) < 0) {
            fprintf(stderr, "cachetd: worker %d cannot watch its wake fd %d (event table of %d): %s\n",
                    i, w->wake_fd, w->loop->setsize, strerror(errno));
            return -1;
        }
    }
    for (int i = 0; i < num_workers; i++) {
        int rc = pthread_create(&workers[i].thread, NULL, worker_main, &workers[i]);
        if (rc) {
            fprintf(stderr, "cachetd: cannot start worker %d: %s\n", i, strerror(rc));
            return -1;
        }
    }
    return 0;
}

void server_shutdown(void)
{
    server_set_shutting_down();
    for (int i = 0; i < num_workers; i++) {
        uint64_t one = 1;
        ssize_t ignored = write(workers[i].wake_fd, &one, sizeof(one));
        (void)ignored;
    }
    /* give in-flight replies a few seconds, then stop the loops regardless */
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += 3;
    for (int i = 0; i < num_workers; i++) {
        if (pthread_timedjoin_np(workers[i].thread, NULL, &deadline) != 0) {
            ae_stop(workers[i].loop);
            uint64_t one = 1;
            ssize_t ignored = write(workers[i].wake_fd, &one, sizeof(one));
            (void)ignored;
            pthread_join(workers[i].thread, NULL);
        }
    }
    net_listen_close_shared();
}


