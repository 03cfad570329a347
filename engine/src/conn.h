/*
 * conn.h - a client connection and the worker that owns it: the boundary
 * between the network layer (net_listen.c, net_worker.c, net_conn.c) and the protocol layer
 * (proto_text.c, proto_meta.c). The protocol sees a connection through this
 * header only: its input state, its output queue (outbuf.h, through the
 * out_* calls below), its worker's storage context and counters.
 *
 * Why the buffers look like this: on this kind of machine a syscall costs
 * more than parsing and answering a small request, so a connection reads
 * everything the kernel has in one read(), answers every complete request in
 * that batch into its output queue, and sends the whole batch with one
 * send() (or one sendmsg() when values are sent in place). memcached 1.6.18
 * does one sendmsg per request; that is the difference.
 *
 *  - rbuf: bytes read but not yet consumed. Requests are parsed in place.
 *    A value too large for rbuf is read straight into its item memory. It
 *    never grows: a get line longer than it is answered as it arrives
 *    (get_stream), and any other line may not pass 2048 bytes.
 *  - out: the output queue, see outbuf.h for its segments and bounds.
 *
 * Concurrency: a connection belongs to its worker thread. Other threads
 * read only addr, stat_state and last_cmd_time (for `stats conns`, under
 * the registry lock; the latter two are relaxed atomics), and reach the
 * connection otherwise only through its worker's completion queue.
 */
#ifndef CACHET_CONN_H
#define CACHET_CONN_H

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "outbuf.h"
#include "reply.h"
#include "settings.h"
#include "storage.h"

struct ae_loop;
struct uring;
struct worker;

enum conn_state {
    CONN_CMD,       /* waiting for / parsing command lines */
    CONN_NREAD,     /* reading a storage command's data block into an item */
    CONN_SWALLOW,   /* discarding a data block we could not store */
    CONN_CLOSING,   /* flush what is queued, then close */
};

struct conn {
    int              fd;
    struct worker   *w;
    enum conn_state  state;
    char            *rbuf;
    size_t           rsize, rstart, rend;
    struct outbuf    out;
    /* data block in progress (CONN_NREAD / CONN_SWALLOW) */
    item            *it;
    size_t           nread_off;     /* bytes of value + "\r\n" read so far */
    size_t           nread_left;    /* bytes of value + "\r\n" still to read */
    char             nread_crlf[2]; /* the data block's terminator (not stored in the item) */
    size_t           swallow_left;
    char            *pending_line;  /* the storage command line, re-parsed on completion */
    size_t           pending_len;
    /* A multi-key GET that had to wait for its output to drain stopped
     * before the key at this offset of its line (0: none). The line stays
     * in rbuf and the GET resumes there. An mg that waited for a deferred
     * slot (ext_io.h) sets 1: its line is kept and dispatched again. */
    uint32_t         resume_off;
    /* A get/gets/gat/gats line longer than rbuf, answered key by key as its
     * bytes arrive (proto_get_stream): only its unanswered keys stay in
     * rbuf. skipping: a bad key (or head) was answered with an error, the
     * rest of the line is dropped, as memcached drops a line it refuses. */
    struct {
        bool    active, skipping, answered_any;
        uint8_t cmd;             /* enum req_cmd */
        int32_t exptime;         /* gat, gats */
    } get_stream;
    /* A long stats reply waiting for its output to drain (resume_off = 1):
     * the lines already queued, skipped when it is written again. */
    uint32_t         stats_done;
    bool             write_blocked; /* waiting for EPOLLOUT */
    uint32_t         blocked_since; /* while write_blocked: conn_clock_s() of the last byte its
                                     * client took (or of the block), for kick_slow (net_worker.c) */
    bool             peer_eof;      /* the client shut its side (shutdown(SHUT_WR), nc -N):
                                     * what it sent is answered, then the connection closes */
    bool             yielded;       /* on the worker's pending list */
    bool             waits_output;  /* yielded for output room, not for fairness (-R) */
    bool             waits_budget;  /* of those, a disk read with nothing queued waits for
                                     * the buffer budget others hold (ext_io.c) */
    uint32_t         budget_wait_since; /* monotonic second it began (ext_io.c), 0: not waiting */
    /* A store waiting for extstore's flusher (storage.h item_alloc_parking):
     * its line stays in rbuf, the connection is on the pending list and the
     * request asks again each turn; store_parked says the request that
     * just ran parked, store_park is the wait's state. */
    bool             store_parked;
    bool             waits_store;   /* yielded for that: the worker polls, as for waits_budget */
    struct store_park store_park;
    bool             started;       /* the first byte has been looked at */
    bool             authenticated; /* -Y: passed auth.c's gate (always true without -Y) */
    bool             tls_unread;    /* -Z: on the pending list for records OpenSSL decrypted
                                     * or read ahead but rbuf had no room for (epoll cannot
                                     * announce them) */
    bool             tls_read_wants_write; /* -Z: a read (or the handshake under it) stopped
                                     * on WANT_WRITE: EPOLLOUT resumes the read */
    bool             tls_write_wants_read; /* -Z: a send stopped on WANT_READ: EPOLLIN
                                     * resumes the send, EPOLLOUT would spin */
    struct ssl_st   *ssl;           /* -Z: the connection's TLS session (tls.c); NULL: plaintext */
    bool             tcp;           /* TCP (not a unix socket): idle_timeout applies */
    int              batch_idx;     /* io_uring mode: slot in the worker's batch, -1 if none */
    bool             batch_send_only; /* in the batch for its completed disk replies: sent
                                     * with the batch's replies, not read (drain_completions) */
    struct conn     *next_pending;
    struct conn     *prev, *next;   /* worker's connection list */
    /* for stats conns (read by other threads under the registry lock) */
    char             addr[128];     /* "tcp:host:port" or "unix:path" */
    int              stat_state;    /* relaxed atomic: enum conn_state */
    uint32_t         last_cmd_time; /* relaxed atomic: rel_time_t */
#ifdef CACHET_TRACE
    /* trace.h, this connection's stamps (ns; 0: none) */
    uint64_t         trace_woke;    /* the epoll_wait that found it ready */
    uint64_t         trace_queued;  /* its batch's replies queued */
    uint64_t         trace_yielded; /* it yielded */
#endif
};

/* Per-worker protocol counters: written only by the owning thread with
 * relaxed atomics, summed by whoever runs `stats`. */
struct server_stats {
    uint64_t cmd_get, cmd_set, cmd_flush, cmd_touch, cmd_meta;
    uint64_t bytes_read, bytes_written, conn_yields;
    uint64_t response_obj_oom, read_buf_oom, idle_kicks;
    uint64_t slow_kicks;                        /* clients closed for holding the budget others wait for */
    uint64_t store_too_large, store_no_memory;  /* a store's item could not be allocated */
    uint64_t auth_cmds, auth_errors;            /* -Y: authentication attempts, and failures (auth.c) */
    uint64_t tls_staged_reads;                  /* -Z: ciphertext an io_uring batch received for OpenSSL (tls_stage) */
    uint64_t tls_staged_sends;                  /* -Z: sealed records an io_uring batch sent (tls_encrypt) */
};

#define STAT_ADD(w, field, n) \
    __atomic_store_n(&(w)->stats.field, __atomic_load_n(&(w)->stats.field, __ATOMIC_RELAXED) + (n), __ATOMIC_RELAXED)
#define STAT_INC(w, field) STAT_ADD(w, field, 1)

/* The GET keys of the current read batch (they point into the connection's
 * rbuf), hashed and prefetched (prefetch.h). */
#define PREFETCH_MAX 64

/* -o conn_placement: connections another worker accepted for this one
 * (net_listen.c). The accepting worker pushes under the lock and writes
 * wake_fd; this worker pops them in its loop. Full: the acceptor keeps the
 * connection itself. */
#define HANDOFF_SLOTS 64
/* the worker's io_uring batch (struct worker's batch): its ring's entries */
#define WORKER_BATCH_MAX 1024
struct conn_handoff {
    pthread_mutex_t  lock;
    int              fds[HANDOFF_SLOTS];
    int              head, count;
};

struct worker {
    int              id;
    int              cpu;          /* -1 when not pinned */
    pthread_t        thread;
    struct ae_loop  *loop;
    storage_thread  *st;
    int              listen_fds[16];
    int              nlisten;
    uint64_t         accept_paused_ms; /* EMFILE: listeners unwatched since then (monotonic ms); 0 = watched */
    int              wake_fd;      /* eventfd: shutdown, deferred replies completed, connections handed over */
    struct conn_handoff handoff;
    struct reply_queue replies;    /* deferred replies completed by any thread */
    struct conn     *conns;        /* all connections of this worker */
    struct conn     *pending;      /* connections with unparsed input left */
    struct server_stats stats;
    struct uring    *ring;         /* io_uring: batch reads and sends per loop turn */
    struct ext_worker *ext;        /* extstore reads this worker makes itself (ext_io.h) */
    int              ext_fd;       /* its ring's fd while in the loop, else -1 */
    struct conn    **batch;        /* connections found readable this turn, and those whose
                                    * disk replies completed (WORKER_BATCH_MAX of them) */
    int              nbatch;
    rel_time_t       idle_checked; /* last idle_timeout sweep */
    int64_t          parks_checked_us; /* CLOCK_MONOTONIC us of the last look at parked stores */
    uint32_t         slow_checked; /* conn_clock_s() of the last kick_slow sweep */
    bool             stopping;     /* shutdown seen: listeners closed, connections closing */
    struct storage_key pf[PREFETCH_MAX]; /* GET keys of the batch being answered */
    int              npf, pf_pos;
};

#ifdef CACHET_TEST_HOOKS
/* Seconds `debugtime` moved the clocks on (server.c): a test passes the IO
 * layer's waits and cut-offs as it passes TTLs, without sleeping through
 * them, as memcached's debugtime moves its one clock. */
extern _Atomic uint32_t conn_clock_test_offset_s;
#endif

/* Whole seconds of the monotonic clock, never 0 (0 means "not set"): the
 * IO layer's own clock for its waits and cut-offs; storage's clock is item
 * code, which the IO layer never calls. */
static inline uint32_t conn_clock_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
#ifdef CACHET_TEST_HOOKS
    return (uint32_t)ts.tv_sec + 1 + atomic_load_explicit(&conn_clock_test_offset_s, memory_order_relaxed);
#else
    return (uint32_t)ts.tv_sec + 1;
#endif
}

/* ---- output, for the protocol (see outbuf.h) ---- */
/* At least n free bytes at out_tail(); false: the reply failed (the
 * read loop takes it back and answers SERVER_ERROR). */
static inline bool out_reserve(struct conn *c, size_t n) { return outbuf_reserve(&c->out, n); }
static inline void out_add(struct conn *c, const char *s, size_t n) { outbuf_add(&c->out, s, n); }
static inline void out_str(struct conn *c, const char *s) { outbuf_str(&c->out, s); }  /* s + "\r\n" */
static inline void out_printf(struct conn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline void out_printf(struct conn *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    outbuf_vprintf(&c->out, fmt, ap);
    va_end(ap);
}
/* See outbuf_value_room(). */
static inline bool out_value_room(struct conn *c, size_t hdr_max, size_t *copy_cap)
{
    return outbuf_value_room(&c->out, hdr_max, copy_cap);
}
static inline void out_ref(struct conn *c, const struct item_view *v) { outbuf_push_ref(&c->out, v); }
/* Output queued that the connection can wait for (to resume a request). */
static inline bool out_can_wait(const struct conn *c) { return !outbuf_empty(&c->out); }
/* A reply written in place, then committed: see outbuf_tail(). */
static inline char *out_tail(const struct conn *c) { return outbuf_tail(&c->out); }
static inline void out_commit(struct conn *c, const char *end) { outbuf_commit(&c->out, end); }
/* This reply cannot be built: SERVER_ERROR instead (see outbuf_fail()). */
static inline void out_fail(struct conn *c) { outbuf_fail(&c->out); }
static inline bool out_defer_full(const struct conn *c) { return outbuf_defer_full(&c->out); }
static inline size_t out_deferred_bytes(const struct conn *c) { return outbuf_deferred_bytes(&c->out); }
static inline size_t out_budget_bytes(const struct conn *c) { return outbuf_budget_bytes(&c->out); }
/* A reply slot filled later, by any thread: see reply.h. */
static inline struct reply_handle *reply_defer(struct conn *c, const struct reply_spec *spec)
{
    return outbuf_defer(&c->out, spec);
}

/* storage_get, using the hash computed when the batch was prefetched
 * (prefetch.c). */
bool  conn_storage_get(struct conn *c, const char *key, uint32_t nkey, const struct get_opts *opts,
                       char *copy_buf, size_t copy_cap, struct item_view *out);

#endif
