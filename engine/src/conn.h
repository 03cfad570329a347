/*
 * conn.h - a client connection, its buffers, and the worker that owns it.
 *
 * Why the buffers look like this: on this kind of machine a syscall costs
 * more than parsing and answering a small request, so a connection reads
 * everything the kernel has in one read(), answers every complete request in
 * that batch into one contiguous output buffer, and sends the whole batch
 * with one send() (or one writev() when large values are sent in place).
 * memcached 1.6.18 does one sendmsg per request; that is the difference.
 *
 *  - rbuf: bytes read but not yet consumed. Requests are parsed in place.
 *    A value too large for rbuf is read straight into its item memory.
 *  - out: reply bytes, contiguous. A GET copies small values straight into
 *    it (storage_get's copy-out), so the common hit needs no reference count.
 *    Large values are "ref" segments pointing into item memory (zero copy);
 *    their views are released once sent. If the client is slow, the unsent
 *    rest is copied out and the view released at once: a referenced item's
 *    chunk cannot be reused or evicted, so a stalled reader would otherwise
 *    pin cache memory for as long as it stalls. The copy is connection
 *    buffer memory instead, counted against -o conn_buffer_limit.
 */
#ifndef CACHET_CONN_H
#define CACHET_CONN_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ae.h"
#include "settings.h"
#include "storage.h"

struct worker;

enum conn_state {
    CONN_CMD,       /* waiting for / parsing command lines */
    CONN_NREAD,     /* reading a storage command's data block into an item */
    CONN_SWALLOW,   /* discarding a data block we could not store */
    CONN_CLOSING,   /* flush what is queued, then close */
};

struct out_seg {
    size_t      off, len;     /* bytes in out.buf, or in ptr when ptr != NULL */
    const char *ptr;
    bool        owned;        /* ptr was malloc'ed (a copied-out ref) */
    bool        in_item;      /* ptr points into item memory (a piece of a referenced value) */
    struct item_view view;    /* view.ref != NULL: release after send */
};

struct outbuf {
    char           *buf;
    size_t          len, cap;
    size_t          seg_start;  /* where the current in-buffer run begins */
    struct out_seg *segs;       /* only non-empty when ref segments were added */
    int             nsegs, segcap;
    size_t          sent;       /* bytes of the queued output already sent */
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
    bool             write_blocked; /* waiting for EPOLLOUT */
    bool             yielded;       /* on the worker's pending list */
    bool             started;       /* the first byte has been looked at */
    int              batch_idx;     /* io_uring mode: slot in the worker's batch, -1 if none */
    struct conn     *next_pending;
    struct conn     *prev, *next;   /* worker's connection list */
    /* for stats conns (read by other threads under the registry lock) */
    char             addr[64];
    volatile int     stat_state;
    volatile uint32_t last_cmd_time;
    /* connection buffer memory above the resting size, as last added to
     * conn_buffer_bytes (see -o conn_buffer_limit) */
    size_t           accounted;
    size_t           owned_bytes;   /* ref values copied out for a slow client */
};

/* Per-worker protocol counters: written only by the owning thread with
 * relaxed atomics, summed by whoever runs `stats`. */
struct server_stats {
    uint64_t cmd_get, cmd_set, cmd_flush, cmd_touch, cmd_meta;
    uint64_t bytes_read, bytes_written, conn_yields;
};

#define STAT_ADD(w, field, n) \
    __atomic_store_n(&(w)->stats.field, __atomic_load_n(&(w)->stats.field, __ATOMIC_RELAXED) + (n), __ATOMIC_RELAXED)
#define STAT_INC(w, field) STAT_ADD(w, field, 1)

/* A key of the current read batch whose hash bucket and item were prefetched. */
struct prefetched {
    const char *key;      /* points into the connection's rbuf */
    uint32_t    nkey;
    uint32_t    hv;
};
#define PREFETCH_MAX 64

struct worker {
    int              id;
    int              cpu;          /* -1 when not pinned */
    pthread_t        thread;
    struct ae_loop  *loop;
    storage_thread  *st;
    int              listen_fds[16];
    int              nlisten;
    int              wake_fd;      /* eventfd: shutdown */
    struct conn     *conns;        /* all connections of this worker */
    struct conn     *pending;      /* connections with unparsed input left */
    struct server_stats stats;
    struct uring    *ring;         /* -o io_uring: batch reads and sends per loop turn */
    struct conn    **batch;        /* connections found readable this turn */
    int              nbatch;
    struct prefetched pf[PREFETCH_MAX];  /* GET keys of the batch being answered */
    int              npf, pf_pos;
};

/* ---- output API used by proto_text.c and proto_meta.c ---- */
void  out_reserve(struct conn *c, size_t n);      /* ensure n free bytes in out.buf */
void  out_add(struct conn *c, const char *s, size_t n);
void  out_str(struct conn *c, const char *s);     /* s + "\r\n" */
void  out_ref(struct conn *c, const struct item_view *v);  /* value sent in place */
void  out_printf(struct conn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Finishes a value reply whose header runs from the end of out.buf to p:
 * a copied-out value (it sits behind the header's reserved room) slides up
 * against the header, a referenced one becomes a zero-copy segment. */
void  out_value(struct conn *c, char *p, const struct item_view *v);

/* storage_get, using the hash computed when the batch was prefetched. */
bool  conn_storage_get(struct conn *c, const char *key, uint32_t nkey, const struct get_opts *opts,
                       char *copy_buf, size_t copy_cap, struct item_view *out);

/* ---- global server state ---- */
extern struct settings settings;
extern struct worker  *workers;
extern int             num_workers;
extern volatile uint32_t curr_conns_global;
extern uint64_t total_conns_global, rejected_conns_global;
extern time_t   server_started;
extern size_t   conn_buffer_bytes;   /* sum of every connection's accounted bytes */

/* Providers for the stats registry (stats.c). */
void server_stats_reset(void);
void server_stats_general(stat_writer w, void *ctx);
void server_stats_settings(stat_writer w, void *ctx);
void server_stats_conns(stat_writer w, void *ctx);

/* net.c */
int  server_listen_all(void);     /* binds every worker's sockets; 0 or -1 */
int  server_start_workers(void);
void server_shutdown(void);       /* stop accepting, flush, close, join */
void conn_close(struct conn *c);

/* proto_text.c / proto_meta.c: dispatch one parsed request. The request's
 * line starts at line (len bytes); for storage commands the data block
 * follows in the connection's input. Returns false if the connection must
 * stop processing input (closing, or waiting for a data block). */
struct request;
bool proto_dispatch(struct conn *c, struct request *r, const char *line, size_t len);
/* A data block in progress (CONN_NREAD): where its next bytes go (value
 * pieces of c->it, then the terminator) and how many fit there; then how
 * many arrived (completes the store when the block is whole). */
char *proto_nread_dst(struct conn *c, size_t *len);
void proto_nread_advance(struct conn *c, size_t n);
bool proto_meta_dispatch(struct conn *c, struct request *r);
void proto_meta_complete_set(struct conn *c, struct request *r, item *it, bool bad_chunk);

#endif
