/*
 * outbuf.h - a connection's output queue: reply bytes in request order,
 * sent with as few syscalls as possible, in bounded memory.
 *
 * Why it looks like this: on this kind of machine a syscall costs more than
 * answering a small request, so the replies of a whole read batch go into
 * one contiguous buffer and leave with one send(). Small values are copied
 * straight into that buffer by storage (copy-out: no reference count). The
 * queue is a list of segments only when it has to be:
 *
 *   RUN    bytes of the contiguous buffer (buf[off, off+len))
 *   REF    a value sent in place from item memory; the segment holds the
 *          item's reference until its bytes are sent
 *   DEFER  a slot filled later (reply.h); sending stops in front of a slot
 *          whose completion has not arrived
 *
 * followed by the "tail run": buffer bytes not yet closed into a RUN
 * segment. With no segments the queue is simply buf[0, len) and the io_uring
 * path can send it as one piece.
 *
 * Memory bounds, all enforced before anything is allocated:
 *  - the buffer rests at OUT_RESTING; growth above it is reserved from the
 *    connection buffer budget (bufmem.h) and never passes OUT_BUF_MAX;
 *  - the segment array starts inline (OUT_INLINE_SEGS, enough for one
 *    referenced value) and never passes OUT_MAX_SEGS;
 *  - values are copied only while the buffer has room (at most OUT_COPY_MAX
 *    each); a larger value, or any value once the buffer is full, is
 *    referenced instead, so a slow client never makes the server copy
 *    cache memory: it keeps item references (what memcached does), whose
 *    memory is inside -m, and the request waits at OUT_HIGH_WATER bytes
 *    queued;
 *  - at most OUT_DEFER_MAX deferred slots per connection.
 * When one of these says no, the caller waits if it has output to send
 * (the queue drains and the request resumes), else the request fails: an
 * allocation that fails sets `failed`, the caller rolls the reply back to
 * its mark and answers with one SERVER_ERROR line, for which the buffer
 * always keeps OUT_TAIL_ROOM bytes.
 *
 * Concurrency: an outbuf belongs to the worker thread that owns its
 * connection; nothing here is shared. Completions of deferred slots reach
 * the worker through reply.h's queue, never by touching an outbuf.
 */
#ifndef CACHET_OUTBUF_H
#define CACHET_OUTBUF_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <string.h>

#include "reply.h"
#include "storage.h"

#define OUT_RESTING      (16u * 1024)
#define OUT_BUF_MAX      (512u * 1024)   /* a reply needing more fails (counted) */
#define OUT_KEEP_MAX     (128u * 1024)   /* larger buffers are given back once sent */
#define OUT_TAIL_ROOM    64u             /* always free: room for an error line */
#define OUT_HIGH_WATER   (4u << 20)      /* queued bytes at which a request waits */
#define OUT_INLINE_SEGS  4
#define OUT_MAX_SEGS     4096
#define OUT_DEFER_MAX    64
/* Values up to this size are copied into the buffer when it has room. */
#define OUT_COPY_MAX     (16u * 1024)
/* Storage keeps no reference count for values up to 1 KiB (ITEM_REF_MIN_BYTES
 * in storage_internal.h, checked by tests/unit/test_outbuf.c): those can only
 * be copied, so a value reply always needs at least this much copy room. */
#define OUT_COPY_MIN     1024u

enum out_seg_kind { SEG_RUN, SEG_REF, SEG_DEFER };

struct out_seg {
    uint8_t kind;
    bool    ready;                   /* DEFER: its completion has arrived */
    size_t  len;                     /* DEFER: 0 until ready */
    union { size_t off; const char *ptr; };
    union { item *ref; struct reply_handle *h; };
#ifdef CACHET_TRACE
    uint64_t ready_ns;               /* DEFER: when its completion was reaped (trace.h, disk_held) */
#endif
};

struct outbuf {
    char           *buf;
    size_t          len, cap;
    size_t          run_start;   /* where the tail run begins */
    struct out_seg *segs;
    uint32_t        nsegs, segcap;
    uint32_t        head;        /* first segment not fully sent (nsegs: the tail run) */
    size_t          head_sent;   /* bytes of it already sent */
    size_t          seg_bytes;   /* bytes in segments (ready ones) */
    size_t          sent;        /* bytes sent since the queue was last empty */
    uint32_t        ndeferred;   /* deferred slots not yet sent */
    uint32_t        nwaiting;    /* of those, slots whose completion has not arrived */
    size_t          deferred_bytes; /* budget those slots hold (a connection's share, ext_io.c) */
    size_t          reserved;    /* bytes held from the buffer budget */
    bool            failed;      /* an allocation failed while building a reply */
    storage_thread *st;
    struct reply_queue *rq;
    void           *owner;       /* handed to deferred slots, see reply.h */
    struct out_seg  inline_segs[OUT_INLINE_SEGS];
};

/* Where a reply began, so a failed one can be taken back whole. */
struct out_mark {
    size_t   len, run_start;
    uint32_t nsegs;
};

void outbuf_init(struct outbuf *o, storage_thread *st, struct reply_queue *rq, void *owner);
/* Drops everything queued (refs released, deferred slots cancelled) and
 * frees the memory. */
void outbuf_free(struct outbuf *o);

/* Bytes queued and not yet sent (a waiting deferred slot counts as 0). */
static inline size_t outbuf_pending(const struct outbuf *o)
{
    return o->seg_bytes + (o->len - o->run_start) - o->sent;
}
/* Budget held by deferred slots not yet sent. */
static inline size_t outbuf_deferred_bytes(const struct outbuf *o) { return o->deferred_bytes; }
/* Everything it holds from the buffer budget: grown buffer and segments,
 * deferred slots. */
static inline size_t outbuf_budget_bytes(const struct outbuf *o) { return o->reserved + o->deferred_bytes; }
static inline bool outbuf_empty(const struct outbuf *o)
{
    return outbuf_pending(o) == 0 && o->ndeferred == 0;
}
/* Only the tail run is left to send: it can go as one piece. */
static inline bool outbuf_contiguous(const struct outbuf *o) { return o->head == o->nsegs; }
static inline const char *outbuf_contig_ptr(const struct outbuf *o)
{
    return o->buf + o->run_start + o->head_sent;
}
static inline size_t outbuf_contig_len(const struct outbuf *o)
{
    return o->len - o->run_start - o->head_sent;
}
/* n bytes from the send position were sent (io_uring path). */
void outbuf_consumed(struct outbuf *o, size_t n);
/* What can be sent now, as at most max (>= 3) iovecs from the send
 * position up to the first reply still waiting (io_uring's sendmsg: a
 * queue in pieces, such as disk replies between RAM replies); 0: nothing. */
struct iovec;
int outbuf_send_iov(struct outbuf *o, struct iovec *iov, int max);

/* At least n + OUT_TAIL_ROOM free bytes at buf + len. On failure sets
 * `failed` and returns false: the reply under construction is lost. */
bool outbuf_reserve_slow(struct outbuf *o, size_t n);
static inline bool outbuf_reserve(struct outbuf *o, size_t n)
{
    if (o->cap - o->len >= n + OUT_TAIL_ROOM && !o->failed) return true;
    return outbuf_reserve_slow(o, n);
}
/* Same without marking the reply failed: false means "not now". */
bool outbuf_try_room_slow(struct outbuf *o, size_t n);
static inline bool outbuf_try_room(struct outbuf *o, size_t n)
{
    return o->cap - o->len >= n + OUT_TAIL_ROOM || outbuf_try_room_slow(o, n);
}
static inline void outbuf_add(struct outbuf *o, const char *s, size_t n)
{
    if (!outbuf_reserve(o, n)) return;
    memcpy(o->buf + o->len, s, n);
    o->len += n;
}
/* A reply written in place: after outbuf_reserve() or outbuf_value_room()
 * said yes, the caller writes its bytes from outbuf_tail() on (no more than
 * it asked room for) and then commits them up to `end`. Nothing else
 * outside this file moves `len`. */
static inline char *outbuf_tail(const struct outbuf *o) { return o->buf + o->len; }
static inline void outbuf_commit(struct outbuf *o, const char *end) { o->len = (size_t)(end - o->buf); }
/* The reply under construction cannot be built: the read loop takes it back
 * to its mark and answers one SERVER_ERROR line (see `failed`). */
static inline void outbuf_fail(struct outbuf *o) { o->failed = true; }
/* Every deferred slot of this connection is taken (OUT_DEFER_MAX). */
static inline bool outbuf_defer_full(const struct outbuf *o) { return o->ndeferred >= OUT_DEFER_MAX; }
/* A reply under construction failed (see `failed`). */
static inline bool outbuf_failed(const struct outbuf *o) { return o->failed; }
/* At the queue's bounds for one more reply: OUT_HIGH_WATER bytes queued, or
 * no room for the segments of a referenced value. */
static inline bool outbuf_full(const struct outbuf *o)
{
    return outbuf_pending(o) > OUT_HIGH_WATER || o->nsegs + 2 > OUT_MAX_SEGS;
}
/* After a rollback: msg + "\r\n" into the OUT_TAIL_ROOM the buffer always
 * keeps for exactly this line (nothing if msg does not fit, or no buffer). */
void outbuf_error_line(struct outbuf *o, const char *msg);
void outbuf_str(struct outbuf *o, const char *s);     /* s + "\r\n" */
void outbuf_vprintf(struct outbuf *o, const char *fmt, va_list ap);

/* Room for one value reply: a header of at most hdr_max bytes at buf + len,
 * then the value, copied if it is at most *copy_cap bytes, referenced if
 * not (room for the segments included). *copy_cap is at least OUT_COPY_MIN.
 * False when the queue is at one of its bounds or memory is refused: wait
 * if outbuf_pending() > 0, else the reply fails. */
bool outbuf_value_room_slow(struct outbuf *o, size_t hdr_max, size_t *copy_cap);
static inline bool outbuf_value_room(struct outbuf *o, size_t hdr_max, size_t *copy_cap)
{
    /* the common case, inline: no segments queued (so at most OUT_BUF_MAX
     * bytes queued, below OUT_HIGH_WATER) and room for a small value */
    size_t fixed = hdr_max + 2 + OUT_TAIL_ROOM;
    size_t room = o->cap - o->len;
    if (!o->nsegs && room >= fixed + OUT_COPY_MIN && !o->failed) {
        room -= fixed;
        *copy_cap = room < OUT_COPY_MAX ? room : OUT_COPY_MAX;
        return true;
    }
    return outbuf_value_room_slow(o, hdr_max, copy_cap);
}
/* Queues v's value in place; the queue takes over v's reference. The
 * segment room must come from outbuf_value_room(). */
void outbuf_push_ref(struct outbuf *o, const struct item_view *v);
/* A deferred slot at the end of the queue; NULL when this connection has
 * OUT_DEFER_MAX of them, or memory is refused (see reply.h). */
struct reply_handle *outbuf_defer(struct outbuf *o, const struct reply_spec *spec);
/* A slot of this queue completed (its handle is ready). */
void outbuf_deferred_ready(struct outbuf *o, struct reply_handle *h);
/* Waiting on a deferred slot with nothing sendable in front of it. */
bool outbuf_blocked_on_deferred(const struct outbuf *o);

static inline void outbuf_mark(const struct outbuf *o, struct out_mark *m)
{
    m->len = o->len;
    m->run_start = o->run_start;
    m->nsegs = o->nsegs;
}
/* Takes back everything queued after m (releasing refs, cancelling slots)
 * and clears `failed`. Nothing after m may have been sent. */
void outbuf_rollback(struct outbuf *o, const struct out_mark *m);

enum out_flush_result {
    OUT_FLUSH_DONE = 0,     /* everything sent, the queue is empty */
    OUT_FLUSH_BLOCKED = 1,  /* the socket is full: wait for EPOLLOUT */
    OUT_FLUSH_WAITING = 2,  /* sent up to a deferred slot still waiting */
    OUT_FLUSH_ERROR = -1,
};
/* Sends with one send() or sendmsg() per call when it can; *written gets
 * the bytes sent. */
enum out_flush_result outbuf_flush(struct outbuf *o, int fd, uint64_t *written);
/* The same through a writer that is not a socket (TLS, tls.c): write_fn
 * has send()'s contract (-1 with errno EAGAIN when it would block) and is
 * given one contiguous piece at a time, so a record layer sees each retry
 * begin with the bytes it was refused. */
typedef ssize_t (*out_write_fn)(void *ctx, const void *buf, size_t len);
enum out_flush_result outbuf_flush_with(struct outbuf *o, out_write_fn write_fn, void *ctx, uint64_t *written);

#endif
