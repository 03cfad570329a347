/*
 * reply.c - deferred reply handles and the per-worker completion queue; see
 * reply.h for the state machine and the thread rules.
 *
 * One allocation per handle: the header, then the head, tail and miss texts
 * and room for max_bytes of value, so completing never allocates (a
 * completion on an IO thread cannot fail for lack of memory, and the bytes
 * are counted against the connection buffer budget when the slot is made).
 */
#include "reply.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bufmem.h"

struct reply_handle {
    struct reply_handle *next;      /* completion queue link */
    struct reply_queue  *q;
    storage_thread      *st;        /* the worker's, to release a view */
    void                *owner;     /* worker only; NULL once cancelled */
    bool                 ready;     /* worker only: drained from the queue */
    bool                 ext;       /* fixed at creation: an extstore read */
    /* written by the completing thread before the release push */
    enum reply_status    status;
    struct item_view     view;      /* view.ref: a reference the slot owns */
    const char          *value;
    size_t               nvalue;
    /* fixed at creation */
    size_t               size;      /* the allocation, as reserved */
    size_t               nhead, ntail, nmiss, max_bytes;
    struct reply_stream  stream;
    size_t               voff;      /* streamed: where the piece in the slot starts */
    char                 text[];    /* head, tail, miss, value room */
};

static _Atomic uint64_t handles_alive, deferred_total;

uint64_t reply_handles_alive(void) { return atomic_load_explicit(&handles_alive, memory_order_relaxed); }
uint64_t reply_deferred_total(void) { return atomic_load_explicit(&deferred_total, memory_order_relaxed); }

void reply_queue_init(struct reply_queue *q, int efd)
{
    atomic_store_explicit(&q->head, NULL, memory_order_relaxed);
    q->efd = efd;
}

struct reply_handle *reply_handle_new(struct reply_queue *q, storage_thread *st,
                                      void *owner, const struct reply_spec *spec)
{
    size_t text = spec->nhead + spec->ntail + spec->nmiss + spec->max_bytes;
    size_t size = sizeof(struct reply_handle) + text;
    if (text < spec->max_bytes || !bufmem_reserve(size)) return NULL;
    struct reply_handle *h = malloc(size);
    if (!h) {
        bufmem_release(size);
        return NULL;
    }
    memset(h, 0, sizeof(*h));
    h->q = q;
    h->st = st;
    h->owner = owner;
    h->status = REPLY_MISS;
    h->size = size;
    h->nhead = spec->nhead;
    h->ntail = spec->ntail;
    h->nmiss = spec->nmiss;
    h->max_bytes = spec->max_bytes;
    h->ext = spec->ext;
    h->stream = spec->stream;
    char *p = h->text;
    if (spec->nhead) memcpy(p, spec->head, spec->nhead);
    p += spec->nhead;
    if (spec->ntail) memcpy(p, spec->tail, spec->ntail);
    p += spec->ntail;
    if (spec->nmiss) memcpy(p, spec->miss, spec->nmiss);
    atomic_fetch_add_explicit(&handles_alive, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&deferred_total, 1, memory_order_relaxed);
    return h;
}

static void complete(struct reply_handle *h, enum reply_status status,
                     const struct item_view *v, const void *bytes, size_t nbytes, bool wake)
{
    /* past the first piece a miss cannot be sent: the value is cut short */
    if (status == REPLY_MISS && h->voff) status = REPLY_ABORT;
    h->status = status == REPLY_ABORT ? REPLY_ABORT : REPLY_MISS;
    if (status == REPLY_HIT) {
        char *room = h->text + h->nhead + h->ntail + h->nmiss;
        if (v && v->ref) {
            h->view = *v;                   /* the slot now owns the reference */
            h->value = v->value;
            h->nvalue = v->nbytes;
            h->status = REPLY_HIT;
        } else {
            if (v) { bytes = v->value; nbytes = v->nbytes; }
            if (nbytes <= h->max_bytes && (bytes || !nbytes)) {
                if (nbytes) memcpy(room, bytes, nbytes);
                h->value = room;
                h->nvalue = nbytes;
                h->status = REPLY_HIT;
            }
        }
    }
    struct reply_queue *q = h->q;
    struct reply_handle *old = atomic_load_explicit(&q->head, memory_order_relaxed);
    do {
        h->next = old;
    } while (!atomic_compare_exchange_weak_explicit(&q->head, &old, h,
                                                    memory_order_release, memory_order_relaxed));
    if (!old && wake) {
        /* the queue was empty: the worker may be asleep */
        uint64_t one = 1;
        ssize_t ignored = write(q->efd, &one, sizeof(one));
        (void)ignored;
    }
}

void reply_complete(struct reply_handle *h, enum reply_status status,
                    const struct item_view *v, const void *bytes, size_t nbytes)
{
    complete(h, status, v, bytes, nbytes, true);
}

void reply_complete_here(struct reply_handle *h, enum reply_status status,
                         const struct item_view *v, const void *bytes, size_t nbytes)
{
    complete(h, status, v, bytes, nbytes, false);
}

struct reply_handle *reply_queue_take(struct reply_queue *q)
{
    struct reply_handle *h = atomic_exchange_explicit(&q->head, NULL, memory_order_acquire);
    /* the stack holds the newest first: reverse it into completion order */
    struct reply_handle *ordered = NULL;
    while (h) {
        struct reply_handle *next = h->next;
        h->next = ordered;
        ordered = h;
        h = next;
    }
    return ordered;
}

struct reply_handle *reply_handle_next(const struct reply_handle *h) { return h->next; }

void *reply_handle_arrived(struct reply_handle *h)
{
    h->ready = true;
    /* a disk read nobody waits for any more (connection closed, reply
     * rolled back): memcached's get_aborted_extstore */
    if (!h->owner && h->ext && !h->voff) storage_ext_count_aborted();
    return h->owner;
}

static bool streamed(const struct reply_handle *h) { return h->stream.total != 0; }
static bool first_piece(const struct reply_handle *h) { return !streamed(h) || h->voff == 0; }
static bool last_piece(const struct reply_handle *h)
{
    return !streamed(h) || h->voff + h->nvalue >= h->stream.total;
}

bool reply_handle_more(const struct reply_handle *h)
{
    return h->status == REPLY_HIT && !last_piece(h);
}

void reply_handle_next_piece(struct reply_handle *h)
{
    h->voff += h->nvalue;
    h->nvalue = 0;
    h->value = NULL;
    h->ready = false;
    h->status = REPLY_MISS;
    h->stream.next(h->stream.arg, h, h->voff);
}

bool reply_handle_aborted(const struct reply_handle *h) { return h->status == REPLY_ABORT; }

int reply_handle_iov(const struct reply_handle *h, struct iovec iov[3])
{
    int n = 0;
    if (h->status == REPLY_HIT) {
        if (h->nhead && first_piece(h)) iov[n++] = (struct iovec){ (void *)h->text, h->nhead };
        if (h->nvalue) iov[n++] = (struct iovec){ (void *)h->value, h->nvalue };
        if (h->ntail && last_piece(h)) iov[n++] = (struct iovec){ (void *)(h->text + h->nhead), h->ntail };
    } else if (h->status == REPLY_MISS && h->nmiss && first_piece(h)) {
        iov[n++] = (struct iovec){ (void *)(h->text + h->nhead + h->ntail), h->nmiss };
    }
    return n;
}

size_t reply_handle_len(const struct reply_handle *h)
{
    if (h->status == REPLY_HIT)
        return (first_piece(h) ? h->nhead : 0) + h->nvalue + (last_piece(h) ? h->ntail : 0);
    return h->status == REPLY_MISS && first_piece(h) ? h->nmiss : 0;
}

size_t reply_handle_size(const struct reply_handle *h) { return h->size; }

void reply_handle_free(struct reply_handle *h)
{
    if (h->view.ref) item_view_release(h->st, &h->view);
    if (h->stream.release) h->stream.release(h->stream.arg);
    size_t size = h->size;
    free(h);
    bufmem_release(size);
    atomic_fetch_sub_explicit(&handles_alive, 1, memory_order_relaxed);
}

void reply_handle_drop(struct reply_handle *h)
{
    if (h->ready) reply_handle_free(h);
    else h->owner = NULL;   /* its completion is still to come: freed when drained */
}
