/*
 * net.c - listening sockets, worker threads, connections and their I/O.
 *
 * Accept path: every worker owns its own listening socket(s), all bound to
 * the same port with SO_REUSEPORT. The kernel spreads new connections over
 * the workers, each accept happens on the CPU that will serve the
 * connection, and no acceptor thread has to hand a descriptor over (no
 * cross-thread queue, no wake-up per connection). The cost is the kernel's
 * hash-based spread (uneven with a handful of connections); with the
 * workloads we serve (tens to thousands of long-lived client connections)
 * that is the better trade. Because SO_REUSEPORT would also let a second
 * cachetd silently share the port, we first bind a plain socket to prove the
 * port is free, so "address in use" is still an error.
 *
 * Workers are pinned one per CPU (settings.worker_cpus) so a connection's
 * buffers stay in one CPU's cache and the operator can verify the pinning
 * through `stats settings`.
 *
 * Syscalls per request: see conn.h. One read() per batch (a short read means
 * the socket is drained; level-triggered epoll tells us if more arrives),
 * every complete request answered, one send()/writev() per batch.
 */
#include <arpa/inet.h>
#include <stddef.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "conn.h"
#include "latency.h"
#include "proto_parser.h"
#include "uring.h"

#define RBUF_INITIAL   (16 * 1024)
#define RBUF_MAX       (LINE_MAX_RETRIEVAL + 4096)
#define OUT_INITIAL    (16 * 1024)
#define OUT_KEEP_MAX   (512u << 10)  /* larger output buffers are freed once sent */
#define OUT_HIGH_WATER (4u << 20)    /* stop parsing a client that does not read */
#define DIRECT_READ_MIN 4096          /* values this large are read straight into the item */
#define MAX_IOV        512

struct settings  settings;
struct worker   *workers;
int              num_workers;
volatile uint32_t curr_conns_global;
uint64_t         total_conns_global, rejected_conns_global;
time_t           server_started;
size_t           conn_buffer_bytes;

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static volatile int shutting_down;

/* ------------------------------------------------------------------ output */

void out_reserve(struct conn *c, size_t n)
{
    struct outbuf *o = &c->out;
    if (o->cap - o->len >= n) return;
    size_t cap = o->cap ? o->cap : OUT_INITIAL;
    while (cap - o->len < n) cap *= 2;
    char *b = realloc(o->buf, cap);
    if (!b) { perror("cachetd: out of memory for output buffer"); abort(); }
    o->buf = b;
    o->cap = cap;
}

void out_add(struct conn *c, const char *s, size_t n)
{
    out_reserve(c, n);
    memcpy(c->out.buf + c->out.len, s, n);
    c->out.len += n;
}

void out_str(struct conn *c, const char *s)
{
    size_t n = strlen(s);
    out_reserve(c, n + 2);
    memcpy(c->out.buf + c->out.len, s, n);
    memcpy(c->out.buf + c->out.len + n, "\r\n", 2);
    c->out.len += n + 2;
}

void out_printf(struct conn *c, const char *fmt, ...)
{
    va_list ap;
    out_reserve(c, 256);
    va_start(ap, fmt);
    int n = vsnprintf(c->out.buf + c->out.len, c->out.cap - c->out.len, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n >= c->out.cap - c->out.len) {
        out_reserve(c, (size_t)n + 1);
        va_start(ap, fmt);
        vsnprintf(c->out.buf + c->out.len, c->out.cap - c->out.len, fmt, ap);
        va_end(ap);
    }
    c->out.len += (size_t)n;
}

static void seg_push(struct conn *c, struct out_seg s)
{
    struct outbuf *o = &c->out;
    if (o->nsegs == o->segcap) {
        int cap = o->segcap ? o->segcap * 2 : 16;
        struct out_seg *ns = realloc(o->segs, sizeof(*ns) * (size_t)cap);
        if (!ns) { perror("cachetd: out of memory"); abort(); }
        o->segs = ns;
        o->segcap = cap;
    }
    o->segs[o->nsegs++] = s;
}

void out_ref(struct conn *c, const struct item_view *v)
{
    struct outbuf *o = &c->out;
    if (o->len > o->seg_start)
        seg_push(c, (struct out_seg){ .off = o->seg_start, .len = o->len - o->seg_start });
    /* a chained value is several pieces; the first segment holds the view */
    struct iovec iov[16];
    size_t done = 0;
    bool first = true;
    for (;;) {
        size_t k = item_view_pieces(v, done, iov, 16);
        if (k == 0) break;
        for (size_t i = 0; i < k; i++) {
            struct out_seg sg = { .ptr = iov[i].iov_base, .len = iov[i].iov_len, .in_item = true };
            if (first) { sg.view = *v; first = false; }
            seg_push(c, sg);
            done += iov[i].iov_len;
        }
    }
    if (first) item_view_release(c->w->st, (struct item_view *)v);   /* an empty value */
    o->seg_start = o->len;
}

static size_t out_pending(const struct conn *c)
{
    const struct outbuf *o = &c->out;
    size_t total = o->len - o->seg_start;
    for (int i = 0; i < o->nsegs; i++) total += o->segs[i].len;
    return total - o->sent;
}

/* Connection buffer memory beyond the resting RBUF_INITIAL + OUT_INITIAL,
 * kept in conn_buffer_bytes so -o conn_buffer_limit can bound the total
 * that clients can make the server hold (the operator budgets pod memory
 * with it). */
static size_t conn_excess(const struct conn *c)
{
    size_t ex = c->owned_bytes;
    /* values sent in place count too: if the client stalls they are copied */
    for (int i = 0; i < c->out.nsegs; i++)
        if (c->out.segs[i].in_item) ex += c->out.segs[i].len;
    if (c->out.cap > OUT_INITIAL) ex += c->out.cap - OUT_INITIAL;
    if (c->rsize > RBUF_INITIAL) ex += c->rsize - RBUF_INITIAL;
    return ex;
}

static void conn_account(struct conn *c)
{
    size_t ex = conn_excess(c);
    if (ex == c->accounted) return;
    if (ex > c->accounted) __atomic_add_fetch(&conn_buffer_bytes, ex - c->accounted, __ATOMIC_RELAXED);
    else __atomic_sub_fetch(&conn_buffer_bytes, c->accounted - ex, __ATOMIC_RELAXED);
    c->accounted = ex;
}

static bool over_buffer_limit(struct conn *c)
{
    if (!settings.conn_buffer_limit) return false;
    conn_account(c);
    return __atomic_load_n(&conn_buffer_bytes, __ATOMIC_RELAXED) > settings.conn_buffer_limit;
}

static void out_reset(struct conn *c)
{
    struct outbuf *o = &c->out;
    for (int i = 0; i < o->nsegs; i++) {
        struct out_seg *s = &o->segs[i];
        if (s->view.ref) item_view_release(c->w->st, &s->view);
        if (s->owned) free((void *)s->ptr);
    }
    o->nsegs = 0;
    o->len = o->seg_start = o->sent = 0;
    c->owned_bytes = 0;
    /* over the connection buffer limit: give back everything above resting */
    if (o->cap > OUT_INITIAL && over_buffer_limit(c)) {
        free(o->buf);
        o->buf = NULL;
        o->cap = 0;
    }
    /* A burst (a multi-get of large values) can grow the buffer a lot; give
     * that back. Ordinary pipelined batches reach ~150 KB and keep theirs,
     * so they do not pay a malloc and regrowth on every batch. */
    if (o->cap > OUT_KEEP_MAX) {
        free(o->buf);
        o->buf = NULL;
        o->cap = 0;
    }
}

/* The kernel buffer is full: copy the unsent part of referenced values and
 * release the views now, so a stalled client pins heap memory (bounded by
 * the high-water mark and conn_buffer_limit) rather than cache chunks that
 * could then be neither reused nor evicted. */
static void out_detach_refs(struct conn *c)
{
    struct outbuf *o = &c->out;
    for (int i = 0; i < o->nsegs; i++) {
        struct out_seg *s = &o->segs[i];
        if (!s->in_item) continue;
        char *copy = malloc(s->len ? s->len : 1);
        if (!copy) { perror("cachetd: out of memory"); abort(); }
        memcpy(copy, s->ptr, s->len);
        c->owned_bytes += s->len;
        s->ptr = copy;
        s->owned = true;
        s->in_item = false;
    }
    /* every piece is copied: now the items may go */
    for (int i = 0; i < o->nsegs; i++)
        if (o->segs[i].view.ref) item_view_release(c->w->st, &o->segs[i].view);
}

/* Sends what is queued with one send() or writev(). Returns -1 if the
 * connection failed, 0 if everything went, 1 if the kernel buffer is full. */
static int out_flush(struct conn *c)
{
    struct outbuf *o = &c->out;
    while (out_pending(c) > 0) {
        ssize_t n;
        if (o->nsegs == 0) {
            n = send(c->fd, o->buf + o->sent, o->len - o->sent, MSG_NOSIGNAL | MSG_DONTWAIT);
        } else {
            struct iovec iov[MAX_IOV];
            int niov = 0;
            size_t skip = o->sent;
            for (int i = 0; i < o->nsegs && niov < MAX_IOV; i++) {
                const struct out_seg *s = &o->segs[i];
                if (skip >= s->len) { skip -= s->len; continue; }
                const char *base = s->ptr ? s->ptr : o->buf + s->off;
                iov[niov].iov_base = (void *)(base + skip);
                iov[niov].iov_len = s->len - skip;
                skip = 0;
                niov++;
            }
            if (niov < MAX_IOV && o->len > o->seg_start + skip) {
                iov[niov].iov_base = o->buf + o->seg_start + skip;
                iov[niov].iov_len = o->len - o->seg_start - skip;
                niov++;
            }
            struct msghdr mh = { .msg_iov = iov, .msg_iovlen = (size_t)niov };
            n = sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        }
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                out_detach_refs(c);
                return 1;
            }
            return -1;
        }
        STAT_ADD(c->w, bytes_written, (uint64_t)n);
        o->sent += (size_t)n;
    }
    out_reset(c);
    return 0;
}

/* -------------------------------------------------------------- connections */

static void conn_readable(struct ae_loop *l, int fd, void *data, int mask);
static void conn_writable(struct ae_loop *l, int fd, void *data, int mask);
static void conn_mark_ready(struct ae_loop *l, int fd, void *data, int mask);
/* conn_readable (epoll: read at once) or conn_mark_ready (io_uring: batch) */
static ae_file_proc *read_proc = conn_readable;

void conn_close(struct conn *c)
{
    struct worker *w = c->w;
    ae_del(w->loop, c->fd, AE_READABLE | AE_WRITABLE);
    pthread_mutex_lock(&registry_lock);
    if (c->prev) c->prev->next = c->next; else w->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    pthread_mutex_unlock(&registry_lock);
    if (c->yielded) {
        struct conn **pp = &w->pending;
        while (*pp && *pp != c) pp = &(*pp)->next_pending;
        if (*pp) *pp = c->next_pending;
    }
    if (c->batch_idx >= 0) w->batch[c->batch_idx] = NULL;
    /* Closing a socket with unread input makes the kernel send RST, and the
     * client may then lose replies it has not read yet (a pipeline cut short
     * by quit, a line-too-long error or shutdown). Drain what is there first. */
    for (int i = 0; i < 256; i++) {
        char scratch[16384];
        if (recv(c->fd, scratch, sizeof(scratch), MSG_DONTWAIT) <= 0) break;
    }
    close(c->fd);
    if (c->it) item_discard(w->st, c->it);
    c->out.len = c->out.seg_start;   /* nothing more will be sent */
    c->out.sent = 0;
    out_reset(c);
    free(c->out.buf);
    free(c->out.segs);
    free(c->rbuf);
    free(c->pending_line);
    if (c->accounted) __atomic_sub_fetch(&conn_buffer_bytes, c->accounted, __ATOMIC_RELAXED);
    free(c);
    __atomic_sub_fetch(&curr_conns_global, 1, __ATOMIC_RELAXED);
}

static void conn_set_yielded(struct conn *c)
{
    if (c->yielded) return;
    c->yielded = true;
    c->next_pending = c->w->pending;
    c->w->pending = c;
    STAT_INC(c->w, conn_yields);
}

/* Batched lookups: a pipeline of GETs would otherwise pay two dependent
 * cache misses per key (bucket word, then item header), one key after the
 * other. Before answering a read batch, hash every GET key in it and
 * prefetch its bucket, then prefetch every item, so the misses overlap.
 * The scan stops at the first storage command (its data block could look
 * like a command line); prefetches are only hints, a key not found here is
 * looked up the ordinary way. */
static void prefetch_batch(struct conn *c)
{
    struct worker *w = c->w;
    w->npf = w->pf_pos = 0;
    const char *p = c->rbuf + c->rstart, *end = c->rbuf + c->rend;
    for (int lines = 0; p < end && w->npf < PREFETCH_MAX && lines < PREFETCH_MAX; lines++) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl) break;
        const char *lend = nl > p && nl[-1] == '\r' ? nl - 1 : nl;
        size_t len = (size_t)(lend - p);
        const char *keys = NULL;
        bool first_only = false;
        if (len > 4 && !memcmp(p, "get ", 4)) keys = p + 4;
        else if (len > 5 && !memcmp(p, "gets ", 5)) keys = p + 5;
        else if (len > 3 && !memcmp(p, "mg ", 3)) { keys = p + 3; first_only = true; }
        else if (len > 3 && (!memcmp(p, "set", 3) || !memcmp(p, "add", 3) || !memcmp(p, "cas", 3) ||
                             !memcmp(p, "ms ", 3) || !memcmp(p, "rep", 3) || !memcmp(p, "app", 3) ||
                             !memcmp(p, "pre", 3)))
            break;
        if (keys) {
            const char *k;
            uint32_t nk;
            while (w->npf < PREFETCH_MAX && next_key(&keys, lend, &k, &nk)) {
                if (nk > KEY_MAX) break;
                w->pf[w->npf].key = k;
                w->pf[w->npf].nkey = nk;
                w->pf[w->npf].hv = storage_prefetch_bucket(w->st, k, nk);
                w->npf++;
                if (first_only) break;
            }
        }
        p = nl + 1;
    }
    if (w->npf < 2) {          /* a lone GET gains nothing from the extra pass */
        w->npf = 0;
        return;
    }
    for (int i = 0; i < w->npf; i++) storage_prefetch_item(w->st, w->pf[i].hv);
}

bool conn_storage_get(struct conn *c, const char *key, uint32_t nkey, const struct get_opts *opts,
                      char *copy_buf, size_t copy_cap, struct item_view *out)
{
    struct worker *w = c->w;
    for (int i = w->pf_pos; i < w->npf; i++) {
        if (w->pf[i].key == key && w->pf[i].nkey == nkey) {
            w->pf_pos = i + 1;
            return storage_get_hashed(w->st, key, nkey, w->pf[i].hv, opts, copy_buf, copy_cap, out);
        }
    }
    return storage_get(w->st, key, nkey, opts, copy_buf, copy_cap, out);
}

/* Parses and answers every complete request in rbuf. */
static void process_input(struct conn *c)
{
    int handled = 0;
    if (c->state == CONN_CMD && c->rend > c->rstart) prefetch_batch(c);
    while (c->state != CONN_CLOSING) {
        size_t avail = c->rend - c->rstart;
        if (c->state == CONN_NREAD) {
            if (!avail) break;
            size_t n;
            char *dst = proto_nread_dst(c, &n);
            if (n > avail) n = avail;
            memcpy(dst, c->rbuf + c->rstart, n);
            c->rstart += n;
            proto_nread_advance(c, n);
            continue;
        }
        if (c->state == CONN_SWALLOW) {
            if (!avail) break;
            size_t n = avail < c->swallow_left ? avail : c->swallow_left;
            c->rstart += n;
            c->swallow_left -= n;
            if (c->swallow_left == 0) c->state = CONN_CMD;
            continue;
        }
        if (!avail) break;
        if (!c->started) {
            c->started = true;
            /* a binary-protocol client would wait forever for a newline */
            if ((unsigned char)c->rbuf[c->rstart] == 0x80) {
                out_str(c, "SERVER_ERROR binary protocol is not supported; use the ASCII or meta protocol");
                c->state = CONN_CLOSING;
                break;
            }
        }
        /* back-pressure: a client that does not read (per connection), all
         * clients together holding too much buffer memory (conn_buffer_limit:
         * only connections with unsent output wait, so others still progress),
         * and fairness between connections (-R) */
        if (out_pending(c) > OUT_HIGH_WATER || handled >= settings.reqs_per_event ||
            (out_pending(c) > 0 && over_buffer_limit(c))) {
            conn_set_yielded(c);
            break;
        }
        size_t consumed;
        const char *line = c->rbuf + c->rstart;
        long ll = find_line(line, avail, &consumed);
        if (ll < 0) {
            if (avail > line_limit_for(line, avail)) {
                out_str(c, "CLIENT_ERROR line too long");
                c->state = CONN_CLOSING;
            }
            break;
        }
        if ((size_t)ll > line_limit_for(line, (size_t)ll)) {
            out_str(c, "CLIENT_ERROR line too long");
            c->state = CONN_CLOSING;
            break;
        }
        c->rstart += consumed;
        handled++;
        c->last_cmd_time = (uint32_t)storage_now();
        struct request r;
        enum parse_status st = parse_request(line, (size_t)ll, &r);
        if (st == PARSE_ERROR) {
            out_str(c, "ERROR");
            continue;
        }
        if (st == PARSE_CLIENT_ERROR) {
            out_str(c, r.error);
            if (r.swallow) {
                c->swallow_left = (size_t)r.vlen + 2;
                c->state = CONN_SWALLOW;
            }
            continue;
        }
        latency_note(c->w->id, r.cmd);
        if (!proto_dispatch(c, &r, line, (size_t)ll)) {
            if (c->state == CONN_CMD) break;   /* e.g. quit */
        }
    }
    latency_batch_end(c->w->id);   /* every reply of the batch is queued */
    /* the hashes point into rbuf, which the next read may move */
    c->w->npf = c->w->pf_pos = 0;
    if (c->rstart == c->rend) c->rstart = c->rend = 0;
    if (c->rend - c->rstart == 0 || c->state == CONN_CLOSING) {
        /* nothing left to parse: no need to be called back for this */
        if (c->yielded) {
            struct conn **pp = &c->w->pending;
            while (*pp && *pp != c) pp = &(*pp)->next_pending;
            if (*pp) *pp = c->next_pending;
            c->yielded = false;
        }
    }
}

/* Flushes output, then decides what the connection waits for next. Returns
 * false if the connection was closed. */
static bool conn_after_work(struct conn *c)
{
    int rc = out_flush(c);
    if (rc < 0) { conn_close(c); return false; }
    conn_account(c);
    struct ae_loop *l = c->w->loop;
    if (rc == 1) {
        if (!c->write_blocked) {
            c->write_blocked = true;
            ae_add(l, c->fd, AE_WRITABLE, conn_writable, c);
        }
        /* a client that does not read its replies must not make us buffer
         * without bound: stop reading it until it catches up */
        if (out_pending(c) > OUT_HIGH_WATER && (ae_mask(l, c->fd) & AE_READABLE))
            ae_del(l, c->fd, AE_READABLE);
        return true;
    }
    if (c->write_blocked) {
        c->write_blocked = false;
        ae_del(l, c->fd, AE_WRITABLE);
    }
    if (c->state == CONN_CLOSING || shutting_down) {
        if (c->state == CONN_CLOSING || c->state == CONN_CMD) { conn_close(c); return false; }
    }
    if (!(ae_mask(l, c->fd) & AE_READABLE))
        ae_add(l, c->fd, AE_READABLE, read_proc, c);
    return true;
}

static bool rbuf_make_room(struct conn *c)
{
    if (c->rstart > 0 && c->rend == c->rsize) {
        memmove(c->rbuf, c->rbuf + c->rstart, c->rend - c->rstart);
        c->rend -= c->rstart;
        c->rstart = 0;
    }
    if (c->rend < c->rsize) return true;
    if (c->rsize >= RBUF_MAX) return false;
    size_t ns = c->rsize * 2 > RBUF_MAX ? RBUF_MAX : c->rsize * 2;
    char *nb = realloc(c->rbuf, ns);
    if (!nb) return false;
    c->rbuf = nb;
    c->rsize = ns;
    return true;
}

static void conn_readable(struct ae_loop *l, int fd, void *data, int mask)
{
    struct conn *c = data;
    for (int round = 0; round < 8 && c->state != CONN_CLOSING; round++) {
        ssize_t n;
        size_t want;
        if (c->state == CONN_NREAD && c->rstart == c->rend && c->nread_left >= DIRECT_READ_MIN) {
            /* a large value: read it straight into item memory, piece by
             * piece (the terminator goes to the connection's two bytes) */
            char *dst = proto_nread_dst(c, &want);
            n = read(fd, dst, want);
            if (n > 0) {
                STAT_ADD(c->w, bytes_read, (uint64_t)n);
                proto_nread_advance(c, (size_t)n);
                if (c->state != CONN_NREAD) process_input(c);
                if ((size_t)n < want) break;
                continue;
            }
        } else {
            if (!rbuf_make_room(c)) {
                /* only reachable if the parser left a full buffer unparsed */
                out_str(c, "CLIENT_ERROR line too long");
                c->state = CONN_CLOSING;
                break;
            }
            want = c->rsize - c->rend;
            n = read(fd, c->rbuf + c->rend, want);
            if (n > 0) {
                c->rend += (size_t)n;
                STAT_ADD(c->w, bytes_read, (uint64_t)n);
                process_input(c);
                if ((size_t)n < want || c->yielded) break;
                continue;
            }
        }
        if (n == 0) { conn_close(c); return; }
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        conn_close(c);
        return;
    }
    conn_after_work(c);
}

/* ---------------------------------------------------------------- io_uring
 * One loop turn in io_uring mode: epoll marked connections readable; here
 * one io_uring_enter reads all of them, every complete request is answered
 * into the output buffers, and one more io_uring_enter sends all replies.
 * See uring.h for why every operation completes inside its submit. */

static void conn_mark_ready(struct ae_loop *l, int fd, void *data, int mask)
{
    struct conn *c = data;
    struct worker *w = c->w;
    if (c->batch_idx >= 0) return;
    if (w->nbatch >= (int)uring_capacity(w->ring)) {
        conn_readable(l, fd, data, mask);   /* batch full: the plain path */
        return;
    }
    c->batch_idx = w->nbatch;
    w->batch[w->nbatch++] = c;
}

static void uring_turn(struct worker *w)
{
    int n = w->nbatch;
    if (!n) return;
    /* phase 1: read every ready connection in one submit */
    int queued = 0;
    for (int i = 0; i < n; i++) {
        struct conn *c = w->batch[i];
        if (!c) continue;
        bool direct = c->state == CONN_NREAD && c->rstart == c->rend && c->nread_left >= DIRECT_READ_MIN;
        if (direct || c->state == CONN_CLOSING || !rbuf_make_room(c)) {
            /* large values go straight into item memory; odd cases use the plain path */
            w->batch[i] = NULL;
            c->batch_idx = -1;
            conn_readable(w->loop, c->fd, c, AE_READABLE);
            continue;
        }
        uring_prep_recv(w->ring, c->fd, c->rbuf + c->rend, c->rsize - c->rend, (uint64_t)i);
        queued++;
    }
    if (queued && uring_submit_and_wait(w->ring) < 0) {
        /* the ring failed: finish this turn with plain syscalls */
        for (int i = 0; i < n; i++) {
            struct conn *c = w->batch[i];
            if (!c) continue;
            w->batch[i] = NULL;
            c->batch_idx = -1;
            conn_readable(w->loop, c->fd, c, AE_READABLE);
        }
        w->nbatch = 0;
        return;
    }
    uint64_t ud;
    int32_t res;
    while (uring_next_cqe(w->ring, &ud, &res)) {
        struct conn *c = w->batch[ud];
        if (!c) continue;
        if (res > 0) {
            c->rend += (size_t)res;
            STAT_ADD(w, bytes_read, (uint64_t)res);
            process_input(c);
        } else if (res == 0 || (res != -EAGAIN && res != -EINTR)) {
            conn_close(c);   /* clears w->batch[ud] */
        }
    }
    /* phase 2: send every connection's replies in one submit */
    queued = 0;
    for (int i = 0; i < n; i++) {
        struct conn *c = w->batch[i];
        if (!c || c->write_blocked || c->out.nsegs || out_pending(c) == 0) continue;
        uring_prep_send(w->ring, c->fd, c->out.buf + c->out.sent, c->out.len - c->out.sent, (uint64_t)i);
        queued++;
    }
    if (queued && uring_submit_and_wait(w->ring) >= 0) {
        while (uring_next_cqe(w->ring, &ud, &res)) {
            struct conn *c = w->batch[ud];
            if (!c || res <= 0) continue;    /* errors and EAGAIN: conn_after_work retries and decides */
            STAT_ADD(w, bytes_written, (uint64_t)res);
            c->out.sent += (size_t)res;
        }
    }
    /* whatever is left (partial sends, in-place values, closing) takes the plain path */
    for (int i = 0; i < n; i++) {
        struct conn *c = w->batch[i];
        if (!c) continue;
        w->batch[i] = NULL;
        c->batch_idx = -1;
        conn_after_work(c);
    }
    w->nbatch = 0;
}

static void conn_writable(struct ae_loop *l, int fd, void *data, int mask)
{
    struct conn *c = data;
    int rc = out_flush(c);
    if (rc < 0) { conn_close(c); return; }
    if (rc == 1) return;
    if (c->rend > c->rstart && c->state != CONN_CLOSING) process_input(c);
    conn_after_work(c);
}

/* ------------------------------------------------------------------ accept */

static void reject_conn(int fd)
{
    static const char msg[] = "ERROR Too many open connections\r\n";
    ssize_t ignored = send(fd, msg, sizeof(msg) - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
    (void)ignored;
    close(fd);
    __atomic_add_fetch(&rejected_conns_global, 1, __ATOMIC_RELAXED);
}

static void accept_ready(struct ae_loop *l, int lfd, void *data, int mask)
{
    struct worker *w = data;
    for (int i = 0; i < 64; i++) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        int fd = accept4(lfd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR) continue;
            if (errno == EMFILE || errno == ENFILE)
                fprintf(stderr, "cachetd: accept: %s\n", strerror(errno));
            return;
        }
        uint32_t now = __atomic_add_fetch(&curr_conns_global, 1, __ATOMIC_RELAXED);
        if (now > (uint32_t)settings.maxconns || fd >= l->setsize) {
            __atomic_sub_fetch(&curr_conns_global, 1, __ATOMIC_RELAXED);
            reject_conn(fd);
            continue;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        struct conn *c = calloc(1, sizeof(*c));
        char *rb = malloc(RBUF_INITIAL);
        if (!c || !rb) {
            free(c); free(rb);
            __atomic_sub_fetch(&curr_conns_global, 1, __ATOMIC_RELAXED);
            reject_conn(fd);
            continue;
        }
        c->fd = fd;
        c->w = w;
        c->rbuf = rb;
        c->rsize = RBUF_INITIAL;
        c->state = CONN_CMD;
        char host[INET6_ADDRSTRLEN] = "?";
        int port = 0;
        if (ss.ss_family == AF_INET) {
            struct sockaddr_in *a = (struct sockaddr_in *)&ss;
            inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
            port = ntohs(a->sin_port);
        } else if (ss.ss_family == AF_INET6) {
            struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
            inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
            port = ntohs(a->sin6_port);
        }
        snprintf(c->addr, sizeof(c->addr), ss.ss_family == AF_INET6 ? "[%s]:%d" : "%s:%d", host, port);
        c->last_cmd_time = (uint32_t)storage_now();
        c->batch_idx = -1;
        if (ae_add(l, fd, AE_READABLE, read_proc, c) < 0) {
            free(rb); free(c);
            __atomic_sub_fetch(&curr_conns_global, 1, __ATOMIC_RELAXED);
            reject_conn(fd);
            continue;
        }
        pthread_mutex_lock(&registry_lock);
        c->next = w->conns;
        if (w->conns) w->conns->prev = c;
        w->conns = c;
        pthread_mutex_unlock(&registry_lock);
        __atomic_add_fetch(&total_conns_global, 1, __ATOMIC_RELAXED);
        if (settings.verbose > 1) fprintf(stderr, "<%d new client connection from %s on worker %d\n", fd, c->addr, w->id);
    }
}

/* ------------------------------------------------------------------ listen */

static int make_listener(const struct addrinfo *ai, int port, bool reuseport)
{
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (reuseport) setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
    if (ai->ai_family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    struct sockaddr_storage ss;
    memcpy(&ss, ai->ai_addr, ai->ai_addrlen);
    if (ss.ss_family == AF_INET) ((struct sockaddr_in *)&ss)->sin_port = htons((uint16_t)port);
    else ((struct sockaddr_in6 *)&ss)->sin6_port = htons((uint16_t)port);
    if (bind(fd, (struct sockaddr *)&ss, ai->ai_addrlen) < 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

static int bound_port(int fd)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) < 0) return -1;
    return ss.ss_family == AF_INET ? ntohs(((struct sockaddr_in *)&ss)->sin_port)
                                   : ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
}

int server_listen_all(void)
{
    char list[sizeof(settings.listen)];
    snprintf(list, sizeof(list), "%s", settings.listen[0] ? settings.listen : "");
    int port = settings.port;
    int bound_any = 0;
    char *save = NULL;
    char *host = settings.listen[0] ? strtok_r(list, ",", &save) : NULL;
    do {
        char hostbuf[256];
        const char *h = host;
        if (h && h[0] == '[') {
            snprintf(hostbuf, sizeof(hostbuf), "%s", h + 1);
            char *rb = strchr(hostbuf, ']');
            if (rb) *rb = '\0';
            h = hostbuf;
        }
        struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                                  .ai_flags = AI_PASSIVE | (h ? 0 : AI_ADDRCONFIG) };
        struct addrinfo *res;
        int rc = getaddrinfo(h, "0", &hints, &res);
        if (rc) {
            fprintf(stderr, "cachetd: cannot resolve listen address '%s': %s\n", h ? h : "*", gai_strerror(rc));
            return -1;
        }
        for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
            /* prove the port is ours before sharing it with SO_REUSEPORT */
            int probe = make_listener(ai, port, false);
            if (probe < 0) {
                if (errno == EAFNOSUPPORT || errno == EADDRNOTAVAIL) continue;
                fprintf(stderr, "cachetd: cannot bind %s port %d: %s\n", h ? h : "*", port, strerror(errno));
                freeaddrinfo(res);
                return -1;
            }
            if (port == 0) port = bound_port(probe);
            close(probe);
            for (int i = 0; i < num_workers; i++) {
                struct worker *w = &workers[i];
                if (w->nlisten >= (int)(sizeof(w->listen_fds) / sizeof(int))) break;
                int fd = make_listener(ai, port, true);
                if (fd < 0 || listen(fd, settings.backlog) < 0) {
                    fprintf(stderr, "cachetd: cannot listen on %s port %d: %s\n", h ? h : "*", port, strerror(errno));
                    freeaddrinfo(res);
                    return -1;
                }
                w->listen_fds[w->nlisten++] = fd;
            }
            bound_any++;
        }
        freeaddrinfo(res);
    } while (host && (host = strtok_r(NULL, ",", &save)));
    if (!bound_any) {
        fprintf(stderr, "cachetd: no address to listen on\n");
        return -1;
    }
    settings.port = port;
    return 0;
}

/* ----------------------------------------------------------------- workers */

static void wake_ready(struct ae_loop *l, int fd, void *data, int mask)
{
    struct worker *w = data;
    uint64_t v;
    ssize_t ignored = read(fd, &v, sizeof(v));
    (void)ignored;
    if (!shutting_down) return;
    for (int i = 0; i < w->nlisten; i++) {
        ae_del(l, w->listen_fds[i], AE_READABLE);
        close(w->listen_fds[i]);
    }
    w->nlisten = 0;
    /* finish replies already queued, then close; new requests are not read */
    struct conn *c = w->conns;
    while (c) {
        struct conn *next = c->next;
        ae_del(l, c->fd, AE_READABLE);
        if (c->state != CONN_NREAD) c->state = CONN_CLOSING;
        conn_after_work(c);
        c = next;
    }
}

static int worker_before_sleep(struct ae_loop *l, void *data)
{
    struct worker *w = data;
    if (w->ring) uring_turn(w);
    /* connections that yielded (-R limit) continue where they stopped */
    struct conn *c = w->pending;
    w->pending = NULL;
    while (c) {
        struct conn *next = c->next_pending;
        c->yielded = false;
        if (!c->write_blocked) {
            process_input(c);
            conn_after_work(c);
        }
        c = next;
    }
    if (shutting_down && !w->conns) l->stop = 1;
    return w->pending ? 0 : 100;
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
    pthread_setname_np(pthread_self(), name);
    w->st = storage_thread_register();
    for (int i = 0; i < w->nlisten; i++)
        ae_add(w->loop, w->listen_fds[i], AE_READABLE, accept_ready, w);
    ae_add(w->loop, w->wake_fd, AE_READABLE, wake_ready, w);
    w->loop->before_sleep = worker_before_sleep;
    w->loop->hook_data = w;
    ae_run(w->loop, 100);
    /* deadline passed or everything closed: close what is left */
    while (w->conns) conn_close(w->conns);
    return NULL;
}

static int fd_setsize(void)
{
    struct rlimit rl;
    rlim_t want = (rlim_t)settings.maxconns + 1024;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        if (rl.rlim_cur < want) {
            rl.rlim_cur = want < rl.rlim_max ? want : rl.rlim_max;
            setrlimit(RLIMIT_NOFILE, &rl);
            getrlimit(RLIMIT_NOFILE, &rl);
        }
        if ((rlim_t)settings.maxconns + 64 > rl.rlim_cur)
            fprintf(stderr, "cachetd: warning: -c %d exceeds the open file limit (%llu)\n",
                    settings.maxconns, (unsigned long long)rl.rlim_cur);
        return (int)(rl.rlim_cur > 1u << 22 ? 1u << 22 : rl.rlim_cur);
    }
    return settings.maxconns + 1024;
}

int server_create_workers(void);
int server_create_workers(void)
{
    num_workers = settings.num_threads;
    workers = calloc((size_t)num_workers, sizeof(*workers));
    if (!workers) return -1;
    int setsize = fd_setsize();
    for (int i = 0; i < num_workers; i++) {
        struct worker *w = &workers[i];
        w->id = i;
        w->cpu = settings.pin_workers && settings.num_cpus_listed > 0
                     ? settings.worker_cpus[i % settings.num_cpus_listed] : -1;
        w->loop = ae_create(setsize, 1024);
        w->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (!w->loop || w->wake_fd < 0) return -1;
        if (settings.io_uring != IO_URING_OFF) {
            w->ring = uring_create(1024);
            w->batch = calloc(1024, sizeof(*w->batch));
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
                read_proc = conn_readable;
                continue;
            }
            read_proc = conn_mark_ready;
        }
    }
    return 0;
}

int server_start_workers(void)
{
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
    shutting_down = 1;
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
            workers[i].loop->stop = 1;
            uint64_t one = 1;
            ssize_t ignored = write(workers[i].wake_fd, &one, sizeof(one));
            (void)ignored;
            pthread_join(workers[i].thread, NULL);
        }
    }
}

/* ------------------------------------------------------------------- stats */

void server_stats_reset(void)
{
    for (int i = 0; i < num_workers; i++)
        memset(&workers[i].stats, 0, sizeof(workers[i].stats));
    __atomic_store_n(&total_conns_global, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&rejected_conns_global, 0, __ATOMIC_RELAXED);
}

static uint64_t sum_stat(size_t offset)
{
    uint64_t s = 0;
    for (int i = 0; i < num_workers; i++)
        s += __atomic_load_n((uint64_t *)((char *)&workers[i].stats + offset), __ATOMIC_RELAXED);
    return s;
}
#define SUM(field) sum_stat(offsetof(struct server_stats, field))

void server_stats_general(stat_writer w, void *ctx)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    time_t now = time(NULL);
    w(ctx, "pid", "%d", (int)getpid());
    w(ctx, "uptime", "%ld", (long)(now - server_started));
    w(ctx, "time", "%ld", (long)now);
    w(ctx, "version", "%s", CACHET_PROTO_VERSION);
    w(ctx, "libevent", "%s", "none");
    w(ctx, "pointer_size", "%d", (int)(8 * sizeof(void *)));
    w(ctx, "rusage_user", "%ld.%06ld", (long)ru.ru_utime.tv_sec, (long)ru.ru_utime.tv_usec);
    w(ctx, "rusage_system", "%ld.%06ld", (long)ru.ru_stime.tv_sec, (long)ru.ru_stime.tv_usec);
    w(ctx, "max_connections", "%d", settings.maxconns);
    w(ctx, "curr_connections", "%u", __atomic_load_n(&curr_conns_global, __ATOMIC_RELAXED));
    w(ctx, "total_connections", "%llu", (unsigned long long)__atomic_load_n(&total_conns_global, __ATOMIC_RELAXED));
    w(ctx, "rejected_connections", "%llu", (unsigned long long)__atomic_load_n(&rejected_conns_global, __ATOMIC_RELAXED));
    w(ctx, "connection_structures", "%u", __atomic_load_n(&curr_conns_global, __ATOMIC_RELAXED));
    w(ctx, "cmd_get", "%llu", (unsigned long long)SUM(cmd_get));
    w(ctx, "cmd_set", "%llu", (unsigned long long)SUM(cmd_set));
    w(ctx, "cmd_flush", "%llu", (unsigned long long)SUM(cmd_flush));
    w(ctx, "cmd_touch", "%llu", (unsigned long long)SUM(cmd_touch));
    w(ctx, "cmd_meta", "%llu", (unsigned long long)SUM(cmd_meta));
    w(ctx, "bytes_read", "%llu", (unsigned long long)SUM(bytes_read));
    w(ctx, "bytes_written", "%llu", (unsigned long long)SUM(bytes_written));
    w(ctx, "accepting_conns", "%d", shutting_down ? 0 : 1);
    w(ctx, "threads", "%d", num_workers);
    w(ctx, "conn_yields", "%llu", (unsigned long long)SUM(conn_yields));
    w(ctx, "conn_buffer_bytes", "%zu", __atomic_load_n(&conn_buffer_bytes, __ATOMIC_RELAXED));
}

void server_stats_settings(stat_writer w, void *ctx)
{
    char cpus[1024];
    int list[MAX_WORKERS];
    int n = 0;
    for (int i = 0; i < num_workers; i++) {
        if (workers[i].cpu < 0) continue;
        bool seen = false;
        for (int j = 0; j < n; j++) if (list[j] == workers[i].cpu) seen = true;
        if (!seen) list[n++] = workers[i].cpu;
    }
    for (int i = 1; i < n; i++)        /* tiny insertion sort */
        for (int j = i; j > 0 && list[j - 1] > list[j]; j--) { int t = list[j]; list[j] = list[j - 1]; list[j - 1] = t; }
    format_cpu_list(list, n, cpus, sizeof(cpus));
    w(ctx, "maxconns", "%d", settings.maxconns);
    w(ctx, "tcpport", "%d", settings.port);
    w(ctx, "udpport", "%d", 0);
    w(ctx, "inter", "%s", settings.listen[0] ? settings.listen : "NULL");
    w(ctx, "verbosity", "%d", settings.verbose);
    w(ctx, "evictions", "%s", settings.evict_disabled ? "off" : "on");
    w(ctx, "cas_enabled", "%s", settings.use_cas ? "yes" : "no");
    w(ctx, "tcp_backlog", "%d", settings.backlog);
    w(ctx, "binding_protocol", "%s", "ascii");
    w(ctx, "num_threads", "%d", num_workers);
    w(ctx, "reqs_per_event", "%d", settings.reqs_per_event);
    w(ctx, "worker_cpus", "%s", n ? cpus : "none");
    w(ctx, "io_uring", "%s", settings.io_uring != IO_URING_OFF ? "yes" : "no");
    w(ctx, "conn_buffer_limit", "%zu", settings.conn_buffer_limit);
}

static const char *state_name(const struct conn *c)
{
    switch (c->state) {
    case CONN_CMD: return "conn_parse_cmd";
    case CONN_NREAD: return "conn_nread";
    case CONN_SWALLOW: return "conn_swallow";
    default: return "conn_closing";
    }
}

void server_stats_conns(stat_writer w, void *ctx)
{
    uint32_t now = (uint32_t)storage_now();
    char name[48];
    pthread_mutex_lock(&registry_lock);
    for (int i = 0; i < num_workers; i++) {
        for (struct conn *c = workers[i].conns; c; c = c->next) {
            snprintf(name, sizeof name, "%d:addr", c->fd);
            w(ctx, name, "tcp:%s", c->addr);
            snprintf(name, sizeof name, "%d:state", c->fd);
            w(ctx, name, "%s", state_name(c));
            uint32_t last = c->last_cmd_time;
            snprintf(name, sizeof name, "%d:secs_since_last_cmd", c->fd);
            w(ctx, name, "%u", now >= last ? now - last : 0);
        }
    }
    pthread_mutex_unlock(&registry_lock);
}
