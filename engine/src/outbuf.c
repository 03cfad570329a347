/*
 * outbuf.c - a connection's output queue; see outbuf.h for the segment model
 * and the memory bounds. Worker-thread only.
 *
 * Sending position: `head` is the first segment not fully sent and
 * `head_sent` the bytes of it already gone (head == nsegs: the tail run).
 * A segment's reference or deferred handle is released the moment its last
 * byte is sent, not when the whole queue drains, so a slow client holds
 * only what it has not read yet.
 */
#include "outbuf.h"
#include "nocancel.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "bufmem.h"
#include "trace.h"

#define MAX_IOV 512

static size_t buf_excess(size_t cap) { return cap > OUT_RESTING ? cap - OUT_RESTING : 0; }

static size_t segs_bytes(const struct outbuf *o)
{
    return o->segs == o->inline_segs ? 0 : (size_t)o->segcap * sizeof(struct out_seg);
}

void outbuf_init(struct outbuf *o, storage_thread *st, struct reply_queue *rq, void *owner)
{
    memset(o, 0, sizeof(*o));
    o->segs = o->inline_segs;
    o->segcap = OUT_INLINE_SEGS;
    o->st = st;
    o->rq = rq;
    o->owner = owner;
}

/* Makes `need` bytes free at buf + len, within OUT_BUF_MAX and the budget. */
static bool grow_buf(struct outbuf *o, size_t need)
{
    if (o->cap - o->len >= need) return true;
    if (need > OUT_BUF_MAX || o->len > OUT_BUF_MAX - need) return false;
    size_t ncap = o->cap ? o->cap : OUT_RESTING;
    while (ncap - o->len < need) ncap *= 2;
    if (ncap > OUT_BUF_MAX) ncap = OUT_BUF_MAX;
    size_t extra = buf_excess(ncap) - buf_excess(o->cap);
    if (!bufmem_reserve(extra)) return false;
    char *b = realloc(o->buf, ncap);
    if (!b) {
        bufmem_release(extra);
        return false;
    }
    o->buf = b;
    o->cap = ncap;
    o->reserved += extra;
    return true;
}

static bool grow_segs(struct outbuf *o, uint32_t want)
{
    if (want <= o->segcap) return true;
    if (want > OUT_MAX_SEGS) return false;
    uint32_t ncap = o->segcap * 2;
    while (ncap < want) ncap *= 2;
    if (ncap > OUT_MAX_SEGS) ncap = OUT_MAX_SEGS;
    size_t old_bytes = segs_bytes(o), new_bytes = (size_t)ncap * sizeof(struct out_seg);
    if (!bufmem_reserve(new_bytes - old_bytes)) return false;
    struct out_seg *ns = malloc(new_bytes);
    if (!ns) {
        bufmem_release(new_bytes - old_bytes);
        return false;
    }
    memcpy(ns, o->segs, sizeof(*ns) * o->nsegs);
    if (o->segs != o->inline_segs) free(o->segs);
    o->segs = ns;
    o->segcap = ncap;
    o->reserved += new_bytes - old_bytes;
    return true;
}

bool outbuf_try_room_slow(struct outbuf *o, size_t n)
{
    return grow_buf(o, n + OUT_TAIL_ROOM);
}

bool outbuf_reserve_slow(struct outbuf *o, size_t n)
{
    if (o->failed) return false;
    if (o->cap - o->len >= n + OUT_TAIL_ROOM) return true;
    if (grow_buf(o, n + OUT_TAIL_ROOM)) return true;
    o->failed = true;
    return false;
}

void outbuf_error_line(struct outbuf *o, const char *msg)
{
    size_t n = strlen(msg);
    if (!o->buf || o->cap - o->len < n + 2) return;
    memcpy(o->buf + o->len, msg, n);
    memcpy(o->buf + o->len + n, "\r\n", 2);
    o->len += n + 2;
}

void outbuf_str(struct outbuf *o, const char *s)
{
    size_t n = strlen(s);
    if (!outbuf_reserve(o, n + 2)) return;
    memcpy(o->buf + o->len, s, n);
    memcpy(o->buf + o->len + n, "\r\n", 2);
    o->len += n + 2;
}

void outbuf_vprintf(struct outbuf *o, const char *fmt, va_list ap)
{
    va_list again;
    va_copy(again, ap);
    if (outbuf_reserve(o, 256)) {
        size_t room = o->cap - o->len - OUT_TAIL_ROOM;
        int n = vsnprintf(o->buf + o->len, room + 1, fmt, ap);
        if (n >= 0 && (size_t)n > room && outbuf_reserve(o, (size_t)n + 1))
            vsnprintf(o->buf + o->len, (size_t)n + 1, fmt, again);
        if (n >= 0 && !o->failed) o->len += (size_t)n;
    }
    va_end(again);
}

bool outbuf_value_room_slow(struct outbuf *o, size_t hdr_max, size_t *copy_cap)
{
    if (o->failed) return false;
    size_t fixed = hdr_max + 2 + OUT_TAIL_ROOM;
    if (outbuf_pending(o) > OUT_HIGH_WATER) return false;
    if (o->nsegs + 2 > o->segcap && !grow_segs(o, o->nsegs + 2)) return false;
    /* Copy what fits in the room left, reference the rest: the buffer grows
     * only when not even a small value fits, never to make room for a
     * value that can be sent in place; and not at all, when the budget is
     * nearly spent, for a reply that can wait for its client instead (the
     * rest of the budget goes to connections with nothing queued). */
    if (o->cap - o->len < fixed + OUT_COPY_MIN && outbuf_pending(o) > 0 && bufmem_under_pressure())
        return false;
    if (!grow_buf(o, fixed + OUT_COPY_MIN)) return false;
    size_t room = o->cap - o->len - fixed;
    *copy_cap = room < OUT_COPY_MAX ? room : OUT_COPY_MAX;
    return true;
}

/* Closes the tail run into a RUN segment (the caller made room for it). */
static void close_run(struct outbuf *o)
{
    if (o->len == o->run_start) return;
    o->segs[o->nsegs++] = (struct out_seg){ .kind = SEG_RUN, .len = o->len - o->run_start,
                                            .off = o->run_start };
    o->seg_bytes += o->len - o->run_start;
    o->run_start = o->len;
}

void outbuf_push_ref(struct outbuf *o, const struct item_view *v)
{
    close_run(o);
    o->segs[o->nsegs++] = (struct out_seg){ .kind = SEG_REF, .len = v->nbytes, .ptr = v->value,
                                            .ref = v->ref };
    o->seg_bytes += v->nbytes;
}

struct reply_handle *outbuf_defer(struct outbuf *o, const struct reply_spec *spec)
{
    if (o->failed || o->ndeferred >= OUT_DEFER_MAX) return NULL;
    if (o->nsegs + 2 > o->segcap && !grow_segs(o, o->nsegs + 2)) return NULL;
    struct reply_handle *h = reply_handle_new(o->rq, o->st, o->owner, spec);
    if (!h) return NULL;
    close_run(o);
    o->segs[o->nsegs++] = (struct out_seg){ .kind = SEG_DEFER, .len = 0, .h = h };
    o->ndeferred++;
    o->deferred_bytes += reply_handle_size(h);
    o->nwaiting++;
    return h;
}

static bool seg_waiting(const struct out_seg *s) { return s->kind == SEG_DEFER && !s->ready; }

void outbuf_deferred_ready(struct outbuf *o, struct reply_handle *h)
{
    for (uint32_t i = o->head; i < o->nsegs; i++) {
        struct out_seg *s = &o->segs[i];
        if (s->kind == SEG_DEFER && s->h == h && !s->ready) {
#ifdef CACHET_TRACE
            bool behind = false;
            for (uint32_t k = o->head; k < i && !behind; k++) behind = seg_waiting(&o->segs[k]);
            TRACE_REC_HERE(TRACE_DISK_BEHIND, behind ? 1000 : 0);
            s->ready_ns = TRACE_NOW();
#endif
            s->ready = true;
            s->len = reply_handle_len(h);
            o->seg_bytes += s->len;
            o->nwaiting--;
            return;
        }
    }
}

bool outbuf_blocked_on_deferred(const struct outbuf *o)
{
    return o->head < o->nsegs && seg_waiting(&o->segs[o->head]);
}

/* A segment is finished with: sent, rolled back or dropped. */
static void seg_drop(struct outbuf *o, struct out_seg *s)
{
    if (s->kind == SEG_REF) {
        struct item_view v = { .value = s->ptr, .nbytes = (uint32_t)s->len, .ref = s->ref };
        item_view_release(o->st, &v);
    } else if (s->kind == SEG_DEFER) {
        if (seg_waiting(s)) o->nwaiting--;
        o->ndeferred--;
        o->deferred_bytes -= reply_handle_size(s->h);
        reply_handle_drop(s->h);
    }
}

void outbuf_rollback(struct outbuf *o, const struct out_mark *m)
{
    while (o->nsegs > m->nsegs) {
        struct out_seg *s = &o->segs[--o->nsegs];
        o->seg_bytes -= s->len;
        seg_drop(o, s);
    }
    o->len = m->len;
    o->run_start = m->run_start;
    o->failed = false;
}

/* Everything is sent: start over, giving back memory the budget needs. */
static void reset(struct outbuf *o)
{
    o->nsegs = o->head = 0;
    o->head_sent = o->len = o->run_start = o->sent = o->seg_bytes = 0;
    bool pressure = bufmem_under_pressure();
    /* A burst (a multi-get of large values) can grow the buffer a lot; give
     * that back. Ordinary pipelined batches stay below OUT_KEEP_MAX and keep
     * theirs, so they do not pay a realloc on every batch. */
    if (o->cap > OUT_RESTING && (o->cap > OUT_KEEP_MAX || pressure)) {
        char *b = realloc(o->buf, OUT_RESTING);
        if (b) {
            bufmem_release(buf_excess(o->cap));
            o->reserved -= buf_excess(o->cap);
            o->buf = b;
            o->cap = OUT_RESTING;
        }
    }
    if (o->segs != o->inline_segs && (o->segcap > 64 || pressure)) {
        size_t bytes = segs_bytes(o);
        free(o->segs);
        o->segs = o->inline_segs;
        o->segcap = OUT_INLINE_SEGS;
        bufmem_release(bytes);
        o->reserved -= bytes;
    }
}

void outbuf_free(struct outbuf *o)
{
    while (o->nsegs > o->head) seg_drop(o, &o->segs[--o->nsegs]);
    free(o->buf);
    if (o->segs != o->inline_segs) free(o->segs);
    bufmem_release(o->reserved);
    memset(o, 0, sizeof(*o));
    o->segs = o->inline_segs;
    o->segcap = OUT_INLINE_SEGS;
}

/* A streamed slot (reply.h) whose piece is all sent and whose value has
 * more: it waits again, in place, for the next piece, which its producer
 * reads only now that the client took this one. seg_bytes keeps the sent
 * piece, as `sent` does, so outbuf_pending stays their difference. */
static bool rearm_piece(struct outbuf *o, struct out_seg *s)
{
    if (s->kind != SEG_DEFER || !s->ready || !reply_handle_more(s->h)) return false;
    s->ready = false;
    s->len = 0;
    o->head_sent = 0;
    o->nwaiting++;
    reply_handle_next_piece(s->h);
    return true;
}

/* Releases segments whose bytes are all sent (and empty ready slots). */
static void skip_sent(struct outbuf *o)
{
    while (o->head < o->nsegs) {
        struct out_seg *s = &o->segs[o->head];
        if (seg_waiting(s) || o->head_sent < s->len) return;
        if (rearm_piece(o, s)) return;
        seg_drop(o, s);
        o->head++;
        o->head_sent = 0;
    }
}

static void advance(struct outbuf *o, size_t n)
{
    o->sent += n;
    while (n > 0) {
        if (o->head == o->nsegs) {
            o->head_sent += n;
            return;
        }
        struct out_seg *s = &o->segs[o->head];
        size_t take = s->len - o->head_sent;
        if (take > n) take = n;
        o->head_sent += take;
        n -= take;
        if (o->head_sent == s->len) {
            /* nothing behind a piece with more to come was sent (build_iov) */
            if (rearm_piece(o, s)) return;
#ifdef CACHET_TRACE
            if (s->kind == SEG_DEFER) TRACE_REC_HERE(TRACE_DISK_HELD, TRACE_NOW() - s->ready_ns);
#endif
            seg_drop(o, s);
            o->head++;
            o->head_sent = 0;
        }
    }
    skip_sent(o);
}

void outbuf_consumed(struct outbuf *o, size_t n)
{
    advance(o, n);
}

/* iovecs (at most max, max >= 3) from the send position up to a waiting
 * slot (or the end). */
static int build_iov(const struct outbuf *o, struct iovec *iov, int max, bool *waiting)
{
    int n = 0;
    size_t skip = o->head_sent;
    *waiting = false;
    uint32_t i;
    for (i = o->head; i < o->nsegs && n <= max - 3; i++) {
        const struct out_seg *s = &o->segs[i];
        struct iovec piece[3];
        int np = 0;
        if (s->kind == SEG_REF) {
            /* a value in place may be in several pieces (a chained value) */
            if (skip >= s->len) { skip -= s->len; continue; }
            struct item_view v = { .value = s->ptr, .nbytes = (uint32_t)s->len, .ref = s->ref };
            size_t got = 0, k = item_view_pieces(&v, skip, iov + n, (size_t)(max - n));
            for (size_t j = 0; j < k; j++) got += iov[n + j].iov_len;
            n += (int)k;
            if (got < s->len - skip) return n;   /* out of iovecs inside this value */
            skip = 0;
            continue;
        }
        if (s->kind == SEG_RUN) piece[np++] = (struct iovec){ o->buf + s->off, s->len };
        else if (seg_waiting(s)) { *waiting = true; return n; }
        else np = reply_handle_iov(s->h, piece);
        for (int k = 0; k < np; k++) {
            if (skip >= piece[k].iov_len) { skip -= piece[k].iov_len; continue; }
            iov[n].iov_base = (char *)piece[k].iov_base + skip;
            iov[n].iov_len = piece[k].iov_len - skip;
            skip = 0;
            n++;
        }
        /* the rest of a streamed value comes before anything behind it */
        if (s->kind == SEG_DEFER && reply_handle_more(s->h)) { *waiting = true; return n; }
    }
    if (i == o->nsegs && n < max && o->len > o->run_start + skip) {
        iov[n].iov_base = o->buf + o->run_start + skip;
        iov[n].iov_len = o->len - o->run_start - skip;
        n++;
    }
    return n;
}

int outbuf_send_iov(struct outbuf *o, struct iovec *iov, int max)
{
    bool waiting;
    skip_sent(o);
    return build_iov(o, iov, max, &waiting);
}

/* A TLS record's worth of plaintext: what one write_fn call is given when
 * the queue is in pieces (headers, values in place, trailers). */
#define GATHER_MAX (16u * 1024)

/* Copies the pieces' first bytes, up to GATHER_MAX, into dst. */
static size_t gather(const struct iovec *iov, int niov, char *dst)
{
    size_t len = 0;
    for (int i = 0; i < niov && len < GATHER_MAX; i++) {
        size_t take = iov[i].iov_len < GATHER_MAX - len ? iov[i].iov_len : GATHER_MAX - len;
        memcpy(dst + len, iov[i].iov_base, take);
        len += take;
    }
    return len;
}

/* write_fn encrypts each call into records of its own and sends them (TLS),
 * so pieces are gathered into one call of up to a record, not written one
 * record and one syscall each. A retry after EAGAIN gathers the same bytes
 * again, and at least as many (the queue only grows at its tail), as
 * OpenSSL's retry of a pending write requires (SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER). */
enum out_flush_result outbuf_flush_with(struct outbuf *o, out_write_fn write_fn, void *ctx, uint64_t *written)
{
    char gathered[GATHER_MAX];
    *written = 0;
    for (;;) {
        skip_sent(o);
        const void *p;
        size_t len;
        if (outbuf_contiguous(o)) {
            len = outbuf_contig_len(o);
            if (len == 0) {
                reset(o);
                return OUT_FLUSH_DONE;
            }
            p = outbuf_contig_ptr(o);
        } else {
            struct iovec iov[MAX_IOV];
            bool waiting;
            int niov = build_iov(o, iov, MAX_IOV, &waiting);
            if (niov == 0) return OUT_FLUSH_WAITING;
            p = iov[0].iov_base;
            len = iov[0].iov_len;
            if (len < GATHER_MAX && niov > 1) {
                len = gather(iov, niov, gathered);
                p = gathered;
            }
        }
        ssize_t n = write_fn(ctx, p, len);
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return OUT_FLUSH_BLOCKED;
            return OUT_FLUSH_ERROR;
        }
        *written += (uint64_t)n;
        advance(o, (size_t)n);
    }
}

enum out_flush_result outbuf_flush(struct outbuf *o, int fd, uint64_t *written)
{
    *written = 0;
    for (;;) {
        skip_sent(o);
        ssize_t n;
        if (outbuf_contiguous(o)) {
            size_t len = outbuf_contig_len(o);
            if (len == 0) {
                reset(o);
                return OUT_FLUSH_DONE;
            }
            n = send_nocancel(fd, outbuf_contig_ptr(o), len, MSG_NOSIGNAL | MSG_DONTWAIT);
        } else {
            struct iovec iov[MAX_IOV];
            bool waiting;
            int niov = build_iov(o, iov, MAX_IOV, &waiting);
            if (niov == 0) return OUT_FLUSH_WAITING;
            struct msghdr mh = { .msg_iov = iov, .msg_iovlen = (size_t)niov };
            n = sendmsg_nocancel(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        }
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return OUT_FLUSH_BLOCKED;
            return OUT_FLUSH_ERROR;
        }
        *written += (uint64_t)n;
        advance(o, (size_t)n);
    }
}
