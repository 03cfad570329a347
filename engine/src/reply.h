/*
 * reply.h - deferred replies: a reply slot that is filled later, possibly by
 * another thread, while the connection keeps parsing.
 *
 * Why: extstore will keep cold values on disk. A GET whose value is on disk
 * must wait for the read without blocking its worker, whose other
 * connections (and the rest of this connection's pipeline) keep being
 * served. So a request may reserve its place in the connection's output
 * queue (outbuf.h) with reply_defer(), and whoever fetches the value calls
 * reply_complete() when it has it. The output queue sends bytes in request
 * order up to the first slot still waiting; replies behind it are built
 * and buffered (bounded, see OUT_DEFER_MAX) but not sent.
 *
 * How a producer uses it (e.g. an extstore read):
 *
 *     struct reply_spec spec = { .head = "VALUE k 0 5\r\n", .nhead = 13,
 *                                .tail = "\r\n", .ntail = 2,
 *                                .miss = "", .nmiss = 0, .max_bytes = 5 };
 *     struct reply_handle *h = reply_defer(c, &spec);   // worker thread
 *     if (!h) ... no room now: the request waits or fails (see outbuf.h)
 *     ... hand h to the IO thread ...
 *     reply_complete(h, REPLY_HIT, NULL, buf, 5);       // any thread, once
 *
 * On REPLY_HIT the slot sends head + value + tail; on REPLY_MISS it sends the
 * miss text (memcached drops the VALUE of a failed extstore read, so a GET
 * sends nothing there and an mg sends "EN"). The value is either bytes
 * (copied into the slot, at most max_bytes, reserved up front so completion
 * never allocates) or an item_view whose reference the slot takes over
 * (zero copy; released after sending).
 *
 * State machine of a handle:
 *
 *   WAITING --reply_complete()--> QUEUED --worker drains--> READY --sent--> freed
 *      |                                                      |
 *      +-- connection closed / reply rolled back: the slot is CANCELLED (the
 *          worker clears its owner); the handle stays alive until its
 *          completion is drained, then is freed without being sent.
 *
 * Thread rules:
 *  - reply_defer, cancel, drain and sending run on the owning worker only.
 *  - reply_complete may run on any thread, exactly once per handle; after it
 *    returns the caller must not touch the handle. It writes the result into
 *    the handle, pushes the handle on the worker's completion queue (a
 *    lock-free LIFO swapped out whole by the worker: release on push,
 *    acquire on take), and writes the worker's eventfd if the queue was
 *    empty, so a burst of completions costs one wake-up.
 *  - the owner pointer (the connection) is read and written by the worker
 *    only, so closing a connection never races with a completion: a closed
 *    connection's waiting handles are simply orphaned and freed when their
 *    completion arrives. A connection is therefore freed at once, never
 *    kept alive for its producers.
 *  - memory: each handle reserves its size from the connection buffer
 *    budget (bufmem.h) when it is created and gives it back when freed.
 */
#ifndef CACHET_REPLY_H
#define CACHET_REPLY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "storage.h"

/* REPLY_ABORT: a later piece of a streamed value could not be had after
 * earlier pieces were sent; the connection must close (a client must never
 * take a value cut short for a whole one). */
enum reply_status { REPLY_HIT, REPLY_MISS, REPLY_ABORT };

struct reply_handle;

/* A value sent in pieces (an extstore value over EXT_SEND_PIECE): the slot
 * holds room for one piece (max_bytes) and is completed once per piece.
 * When a piece's bytes are sent and value bytes remain, the worker calls
 * next(arg, h, offset) and the slot waits again, in place, for the piece at
 * that offset; its producer completes it as before. So the slot never
 * holds more than one piece of the buffer budget, and the next piece is
 * read only once the client has taken the last one. release(arg) runs on
 * the worker when the handle is freed, whatever happened to it. */
struct reply_stream {
    size_t total;                      /* value bytes in all; 0: not streamed */
    void (*next)(void *arg, struct reply_handle *h, size_t offset);
    void (*release)(void *arg);
    void  *arg;
};

struct reply_spec {
    const char *head;  size_t nhead;   /* sent before the value on a hit */
    const char *tail;  size_t ntail;   /* sent after the value on a hit */
    const char *miss;  size_t nmiss;   /* sent instead on a miss (may be empty) */
    size_t      max_bytes;             /* largest value (streamed: piece) reply_complete may pass as bytes */
    bool        ext;                   /* an extstore read: an orphaned one counts get_aborted_extstore */
    struct reply_stream stream;        /* zero: the value comes whole */
};

/* Any thread, exactly once. A hit passes the value either as bytes (copied;
 * more than max_bytes makes it a miss) or as a view: a view with a
 * reference (v->ref) hands that reference to the slot; a view without one
 * is copied like bytes. */
void reply_complete(struct reply_handle *h, enum reply_status status,
                    const struct item_view *v, const void *bytes, size_t nbytes);
/* The same, on the handle's own worker when it drains its queue before it
 * next sleeps (a worker reaping its own disk reads, ext_io.c): the
 * eventfd write, and the wasted loop turn it causes, are skipped. */
void reply_complete_here(struct reply_handle *h, enum reply_status status,
                         const struct item_view *v, const void *bytes, size_t nbytes);

/* ---- worker side (outbuf.c, net_conn.c, net_worker.c) ---- */

/* A worker's completion queue; efd is written when it becomes non-empty. */
struct reply_queue {
    struct reply_handle *_Atomic head;
    int                 efd;
};
void reply_queue_init(struct reply_queue *q, int efd);

/* Creates a waiting handle owned by `owner` (opaque to this file). NULL if
 * the buffer budget has no room or malloc fails. */
struct reply_handle *reply_handle_new(struct reply_queue *q, storage_thread *st,
                                      void *owner, const struct reply_spec *spec);
/* Takes every completed handle, oldest completion first; follow the list
 * with reply_handle_next() (read it before handling the handle). */
struct reply_handle *reply_queue_take(struct reply_queue *q);
struct reply_handle *reply_handle_next(const struct reply_handle *h);
/* Marks a taken handle ready and returns its owner; NULL if the slot was
 * cancelled meanwhile: then the caller frees it (reply_handle_free). */
void *reply_handle_arrived(struct reply_handle *h);
/* The slot's bytes once ready: up to 3 pieces, returns how many. */
int   reply_handle_iov(const struct reply_handle *h, struct iovec iov[3]);
size_t reply_handle_len(const struct reply_handle *h);
/* A streamed slot whose piece (just made ready) is not the value's last:
 * once that piece is sent, reply_handle_next_piece re-arms it (worker). */
bool  reply_handle_more(const struct reply_handle *h);
void  reply_handle_next_piece(struct reply_handle *h);
/* A later piece failed (REPLY_ABORT): the owner closes the connection. */
bool  reply_handle_aborted(const struct reply_handle *h);
/* Bytes it holds from the connection buffer budget. */
size_t reply_handle_size(const struct reply_handle *h);
/* The slot is no longer wanted (sent, connection closed, reply rolled back):
 * frees a ready handle now, or orphans a waiting one (freed when drained). */
void  reply_handle_drop(struct reply_handle *h);
/* Frees a handle that arrived without an owner (see reply_handle_arrived). */
void  reply_handle_free(struct reply_handle *h);

/* Handles alive in the process (waiting, ready or orphaned): a gauge for
 * stats and for tests that check nothing leaks. */
uint64_t reply_handles_alive(void);
uint64_t reply_deferred_total(void);

#endif
