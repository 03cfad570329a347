/*
 * ext_io.c - extstore's IO threads: the reads GETs of on-disk items wait for
 * (why a pool: ext_io.h).
 *
 * Concurrency: workers push jobs on one queue under `lock` and wake one IO
 * thread (round robin); each IO thread is a bgthread whose pass takes up to
 * io_depth jobs under the lock, then reads them all at once outside it
 * (ext_batch.h: one io_uring_enter for the batch, or pread after pread where
 * io_uring is refused) and completes each. A job owns its reply handle until
 * reply_complete(), which may run on this thread (reply.h) and copies the
 * value out of the reader's buffer; the connection may be gone by then, the
 * handle is then freed by its worker. A value over EXT_SEND_PIECE is sent in
 * pieces: its job belongs to its handle from the start (freed with it, on
 * the worker), and goes back on the queue, from the worker, for each piece
 * after the first once the one before is sent; the IO thread reads those
 * pieces with pread before its batch, into its reader's first buffer; the
 * record's page is pinned (extstore.h, ext_stream_pin) from the first
 * piece until the job is freed, so the disk reuses it last. Each IO thread has its own storage
 * context (a stub whose read failed is unlinked, a recache relinks the
 * value: extstore's item side does both, reached through the hook table of
 * ext_hooks.h, never by calling item code) and its own reader (ring and io_depth buffers of the largest
 * record), so a read allocates nothing.
 *
 * A worker's own reads (struct ext_worker) never leave that worker: its
 * jobs, reader and storage context are its own, and its replies are
 * completed on it. `lock` also guards the list of worker readers, which
 * `stats settings` walks from any thread.
 */
#include "ext_io.h"

#include <pthread.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bgthread.h"
#include "ext_batch.h"
#include "extstore.h"
#include "bufmem.h"
#include "conn.h"
#include "ext_hooks.h"
#include "reply.h"
#include "server.h"
#include "trace.h"

#define IO_THREADS_MAX 64

struct job {
    struct job          *next;
    struct reply_handle *h;
    struct item_view     v;
    struct ext_fetch     f;       /* a worker's own read: its fetch */
    bool                 streamed;/* a value sent in pieces: the handle owns this job */
    uint32_t             voff;    /* streamed: the piece to read (0: the first read) */
    uint8_t              at[12];  /* streamed: where the first read found the record */
    int32_t              pinned;  /* streamed: the page ext_stream_pin holds for it, or -1 */
    uint32_t             nkey;
#ifdef CACHET_TRACE
    uint64_t             trace_asked;  /* its GET dispatched (trace.h, disk_read) */
#endif
    char                 key[KEY_MAX_LENGTH];
};

/* memory_budget.c counts EXT_WORKER_JOB_BYTES (1 KiB) for each of a
 * worker's jobs[] and its ring slot */
_Static_assert(sizeof(struct job) <= 1024 - 64, "a job outgrew the memory formula's EXT_WORKER_JOB_BYTES");

struct ext_worker {
    struct ext_worker *next;      /* the list ext_io_engine walks, under lock */
    struct ext_reader *reader;
    storage_thread    *st;
    bool               reaping;   /* completions are drained by the caller next */
    struct job         jobs[EXT_WORKER_READS];   /* one per reader slot, same index */
};

struct io_thread {
    struct bgthread    bg;
    storage_thread    *st;
    struct ext_reader *reader;
    struct ext_fetch  *fetch;     /* io_depth of them */
    struct job       **jobs;      /* the job of each fetch */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct job *head, *tail;   /* FIFO: oldest first */
static struct io_thread threads[IO_THREADS_MAX];
static unsigned nthreads, depth;
static _Atomic unsigned next_thread;
static struct ext_worker *worker_readers;

static void job_free(void *arg)
{
    struct job *j = arg;
    if (j->pinned >= 0) ext_stream_unpin(ext_hooks()->store, (uint32_t)j->pinned);
    free(arg);
    bufmem_release(sizeof(struct job));
}

static uint32_t piece_len(const struct job *j, uint32_t voff)
{
    uint32_t left = j->v.nbytes - voff;
    return left < EXT_SEND_PIECE ? left : EXT_SEND_PIECE;
}

/* Keeps the page the job's record is on (j->at) from being reused while
 * its value is streamed (extstore.h, ext_stream_pin); false if that page
 * is no longer the record's. */
static bool stream_pin(struct job *j)
{
    struct extstore *e = ext_hooks()->store;
    struct ext_locator loc;
    memcpy(&loc, j->at, sizeof loc);
    if (!e || !ext_stream_pin(e, &loc)) return false;
    j->pinned = (int32_t)ext_loc_page(&loc);
    return true;
}

/* A piece was read: the stream still advances, and holds the page the
 * record is on now (the compactor may have moved it). */
static void stream_advanced(struct job *j)
{
    struct extstore *e = ext_hooks()->store;
    struct ext_locator loc;
    memcpy(&loc, j->at, sizeof loc);
    if (j->pinned == (int32_t)ext_loc_page(&loc)) {
        ext_stream_touch(e, (uint32_t)j->pinned);
        return;
    }
    if (j->pinned >= 0) ext_stream_unpin(e, (uint32_t)j->pinned);
    j->pinned = -1;
    stream_pin(j);
}

/* One read of the batch is over: its reply leaves (copied from the reader's
 * buffer) and its job is freed; a streamed value's first piece leaves, and
 * its job stays with the handle for the pieces after it. The whole record
 * was read and its CRC checked here, so a value whose first piece is sent
 * was good on disk as a whole. */
static void fetched(void *arg, struct ext_fetch *f)
{
    struct io_thread *t = arg;
    struct job *j = t->jobs[f - t->fetch];
    if (j->streamed) {
        memcpy(j->at, f->at, sizeof j->at);
        /* its page is kept for the pieces after this one; a page that went
         * since the read is a clean miss: nothing of the value was sent */
        bool hit = f->hit && stream_pin(j);
        /* the handle (and, when freed, this job) is the worker's from here */
        reply_complete(j->h, hit ? REPLY_HIT : REPLY_MISS, NULL, hit ? f->value : NULL, hit ? piece_len(j, 0) : 0);
        return;
    }
    reply_complete(j->h, f->hit ? REPLY_HIT : REPLY_MISS, NULL, f->hit ? f->value : NULL, f->hit ? j->v.nbytes : 0);
    job_free(j);
}

/* A later piece of a streamed value: read from where the first read found
 * the record, on the page the stream holds (stream_pin). Its page reused
 * all the same (its stream took no piece for 2 s, or streams held every
 * page), its record replaced, or an IO error cuts the value short:
 * REPLY_ABORT, and its connection closes. */
static void read_piece(struct io_thread *t, struct job *j)
{
    const char *piece = NULL;
    uint32_t n = piece_len(j, j->voff);
    enum ext_read_result r = ext_reader_read_range(t->reader, j->key, j->nkey, &j->v, j->at, j->voff, n, &piece);
    if (r == EXT_HIT) {
        stream_advanced(j);
        reply_complete(j->h, REPLY_HIT, NULL, piece, n);
        return;
    }
    storage_ext_count_stream_cut();
    reply_complete(j->h, REPLY_ABORT, NULL, NULL, 0);
}

static bool io_pass(void *arg)
{
    struct io_thread *t = arg;
    struct job *batch = NULL, **bt = &batch;
    unsigned n = 0;
    pthread_mutex_lock(&lock);
    while (head && n < depth) {
        struct job *j = head;
        head = j->next;
        if (!head) tail = NULL;
        j->next = NULL;
        *bt = j;
        bt = &j->next;
        n++;
    }
    bool more = head != NULL;
    pthread_mutex_unlock(&lock);
    unsigned k = 0;
    for (struct job *j = batch, *nx; j; j = nx) {
        nx = j->next;
        storage_ext_count_queue(-1);
        if (j->voff) { read_piece(t, j); continue; }
        t->jobs[k++] = j;
        t->fetch[k - 1] = (struct ext_fetch){ .key = j->key, .nkey = j->nkey, .v = &j->v };
    }
    ext_reader_fetch(t->reader, t->st, t->fetch, k, fetched, t);
    return more;
}

static bool use_uring(void)
{
#ifdef CACHET_TEST_HOOKS
    /* test builds: the pread path on a kernel that has io_uring */
    if (getenv("CACHET_TEST_NO_URING")) return false;
#endif
    return true;
}

int ext_io_start(unsigned n, unsigned d)
{
    if (n > IO_THREADS_MAX) n = IO_THREADS_MAX;
    depth = d ? d : 1;
    for (unsigned i = 0; i < n; i++) {
        struct io_thread *t = &threads[i];
        t->st = storage_thread_register();
        t->reader = ext_reader_new(depth, (uint32_t)settings.item_size_max, use_uring());
        t->fetch = calloc(depth, sizeof *t->fetch);
        t->jobs = calloc(depth, sizeof *t->jobs);
        if (!t->st || !t->reader || !t->fetch || !t->jobs) return -1;
        t->bg = (struct bgthread){ .name = "cachet-extio", .pass = io_pass, .arg = t, .period_ms = 0 };
        if (bgthread_start(&t->bg) != 0) return -1;
        nthreads = i + 1;
    }
    return 0;
}

const char *ext_io_engine(void)
{
    for (unsigned i = 0; i < nthreads; i++)
        if (!ext_reader_uses_uring(threads[i].reader)) return "pread";
    const char *engine = "io_uring";
    pthread_mutex_lock(&lock);
    for (struct ext_worker *xw = worker_readers; xw; xw = xw->next)
        if (!ext_reader_uses_uring(xw->reader)) engine = "pread";
    pthread_mutex_unlock(&lock);
    return engine;
}

void ext_io_stats_settings(stat_writer w, void *ctx)
{
    if (nthreads) w(ctx, "ext_io_engine", "%s", ext_io_engine());
}

void ext_io_stop(void)
{
    for (unsigned i = 0; i < nthreads; i++) bgthread_stop(&threads[i].bg);
    /* what is still queued was never read: its slots get the miss */
    pthread_mutex_lock(&lock);
    struct job *j = head;
    head = tail = NULL;
    pthread_mutex_unlock(&lock);
    while (j) {
        struct job *nx = j->next;
        bool owned = j->streamed;
        reply_complete(j->h, REPLY_MISS, NULL, NULL, 0);   /* a later piece: REPLY_ABORT */
        if (!owned) job_free(j);
        j = nx;
    }
}

/* ---------------------------------------------------- a worker's own reads */

struct ext_worker *ext_io_worker_new(storage_thread *st)
{
    if (!storage_ext_enabled() || !use_uring()) return NULL;
    struct ext_worker *xw = calloc(1, sizeof *xw);
    if (!xw) return NULL;
    xw->st = st;
    xw->reader = ext_reader_new(EXT_WORKER_READS, EXT_WORKER_READ_BYTES - EXT_ALIGN - EXT_RECORD_HEADER - KEY_MAX_LENGTH,
                                true);
    if (!xw->reader || ext_reader_fd(xw->reader) < 0) {
        ext_reader_free(xw->reader);
        free(xw);
        return NULL;
    }
    pthread_mutex_lock(&lock);
    xw->next = worker_readers;
    worker_readers = xw;
    pthread_mutex_unlock(&lock);
    return xw;
}

int ext_io_worker_fd(const struct ext_worker *xw)
{
    return ext_reader_fd(xw->reader);
}

static void worker_fetched(void *arg, struct ext_fetch *f)
{
    struct ext_worker *xw = arg;
    struct job *j = (struct job *)((char *)f - offsetof(struct job, f));
    enum reply_status st = f->hit ? REPLY_HIT : REPLY_MISS;
    /* only reads that went to the disk: one that ended inside its start
     * (not on disk any more, or in the write buffer) is not reaped */
    if (xw->reaping) TRACE_REC_HERE(TRACE_DISK_READ, TRACE_NOW() - j->trace_asked);
    /* reaped: the worker drains its queue right after, no wake-up needed;
     * finished at start or by a failed ring's pread: the usual wake-up */
    if (xw->reaping) reply_complete_here(j->h, st, NULL, f->hit ? f->value : NULL, f->hit ? j->v.nbytes : 0);
    else reply_complete(j->h, st, NULL, f->hit ? f->value : NULL, f->hit ? j->v.nbytes : 0);
    j->h = NULL;
}

void ext_io_worker_submit(struct ext_worker *xw)
{
    ext_reader_submit(xw->reader, xw->st, worker_fetched, xw);
}

void ext_io_worker_reap(struct ext_worker *xw)
{
    xw->reaping = true;
    ext_reader_reap(xw->reader, xw->st, false, worker_fetched, xw);
    xw->reaping = false;
}

void ext_io_worker_free(struct ext_worker *xw)
{
    if (!xw) return;
    /* the kernel writes into these buffers until each read completes */
    ext_reader_reap(xw->reader, xw->st, true, worker_fetched, xw);
    pthread_mutex_lock(&lock);
    for (struct ext_worker **p = &worker_readers; *p; p = &(*p)->next)
        if (*p == xw) { *p = xw->next; break; }
    pthread_mutex_unlock(&lock);
    ext_reader_free(xw->reader);
    free(xw);
}

/* A disk reply holds its value (or, over EXT_SEND_PIECE, one piece of it)
 * from the connection buffer budget until it is sent, so a connection's
 * share of it is bounded: one that already holds 1/CONN_SHARE_DIV of the
 * budget in disk replies (always at least one) waits for its client to read
 * them before it starts another. */
#define CONN_SHARE_DIV 16
/* How long a disk read with nothing queued waits for budget others hold
 * before it fails as before (SERVER_ERROR): while they read their replies it
 * is freed within moments; clients that never read are held to their share
 * (above), so only very many of them at once can use up this wait. */
#define BUDGET_WAIT_MAX_S 5

/* A value sent in pieces starts only while the connection holds at most
 * one more such piece's worth: a client pipelining GETs of large disk
 * values holds two pieces, not 1/CONN_SHARE_DIV of the budget (30 clients
 * that each asked for 300 KB values and did not read held 9 MB, more than
 * the 8 MiB at -m 64, one value each, and every other disk GET failed). */
#define CONN_STREAMED_PIECES 2

static bool over_share(const struct conn *c, size_t need, bool streamed)
{
    size_t limit = bufmem_limit();
    size_t held = out_deferred_bytes(c);
    size_t share = limit / CONN_SHARE_DIV;
    if (streamed && share > CONN_STREAMED_PIECES * need) share = CONN_STREAMED_PIECES * need;
    return limit && held && held + need > share;
}

/* Disk reads waiting for budget others hold: the last second one waited
 * (starved_at) and the second the waits began (starved_since, reset after a
 * second with none). Workers close the clients that hold budget and take
 * nothing (kick_slow) once reads have waited STARVED_MIN_S clock ticks (at
 * least a second): a wait that ends sooner on its own (its key deleted, a
 * reader catching up) costs nobody a connection. Approximate under races
 * (two relaxed atomics), which moves a kick by a second at most. */
#define STARVED_MIN_S 2
static _Atomic uint32_t starved_at, starved_since;

static void note_starved(uint32_t now)
{
    uint32_t at = atomic_exchange_explicit(&starved_at, now, memory_order_relaxed);
    if (!at || now - at > 1) atomic_store_explicit(&starved_since, now, memory_order_relaxed);
}

bool ext_io_budget_starved(uint32_t now)
{
    uint32_t at = atomic_load_explicit(&starved_at, memory_order_relaxed);
    uint32_t since = atomic_load_explicit(&starved_since, memory_order_relaxed);
    return at && since && now - at <= 1 && at - since >= STARVED_MIN_S;
}

/* With nothing queued, a disk read whose reply does not fit the budget now
 * waits for it (the worker retries the request, see worker_before_sleep),
 * when it fits the budget at all and for a bounded time. */
static bool wait_for_budget(struct conn *c, size_t need)
{
    size_t limit = bufmem_limit();
    uint32_t now = conn_clock_s();
    if (!limit || need > limit / 2) return false;
    note_starved(now);
    if (!c->budget_wait_since) c->budget_wait_since = now;
    else if (now - c->budget_wait_since >= BUDGET_WAIT_MAX_S) return false;
    c->waits_budget = true;
    return true;
}

static void budget_wait_over(struct conn *c)
{
    c->waits_budget = false;
    c->budget_wait_since = 0;
}

/* "No slot now" is never a miss: with output queued (and somewhere for the
 * read to go) the request waits for it to drain and asks again (false);
 * with nothing queued it waits for the budget (wait_for_budget); when that
 * cannot help the reply fails (SERVER_ERROR), as a RAM value without room
 * does. */
static bool no_slot(struct conn *c, bool can_wait, size_t need)
{
    if (can_wait && out_can_wait(c)) { c->waits_budget = false; return false; }
    if (can_wait && wait_for_budget(c, need)) return false;
    budget_wait_over(c);
    storage_ext_count_oom();
    out_fail(c);
    return true;
}

static void enqueue(struct job *j)
{
    storage_ext_count_queue(1);
    pthread_mutex_lock(&lock);
    if (tail) tail->next = j; else head = j;
    tail = j;
    pthread_mutex_unlock(&lock);
    bgthread_wake(&threads[atomic_fetch_add_explicit(&next_thread, 1, memory_order_relaxed) % nthreads].bg);
}

/* The worker sent a streamed value's piece: the next one is read now. */
static void next_piece(void *arg, struct reply_handle *h, size_t offset)
{
    struct job *j = arg;
    j->h = h;
    j->next = NULL;
    j->voff = (uint32_t)offset;
    enqueue(j);
}

static void job_fill(struct job *j, struct reply_handle *h, const char *key, uint32_t nkey,
                     const struct item_view *v)
{
    j->next = NULL;
    j->voff = 0;
    j->pinned = -1;
    j->h = h;
    j->v = *v;
    j->nkey = nkey;
    memcpy(j->key, key, nkey);
}

bool ext_io_value(struct conn *c, const char *hd, size_t nhead, const char *miss, size_t nmiss,
                  const char *key, uint32_t nkey, const struct item_view *v)
{
    struct reply_spec spec = { .head = hd, .nhead = nhead, .tail = "\r\n", .ntail = 2,
                               .miss = miss, .nmiss = nmiss, .max_bytes = v->nbytes, .ext = true };
    bool streamed = v->nbytes > EXT_SEND_PIECE;
    if (streamed) spec.max_bytes = EXT_SEND_PIECE;
    size_t need = nhead + 2 + nmiss + spec.max_bytes + sizeof(struct job);
    if (over_share(c, need, streamed)) return no_slot(c, true, need);
    /* on the worker's own ring when it has a free slot that fits */
    struct ext_worker *xw = c->w->ext;
    if (!streamed && xw && ext_reader_can_start(xw->reader, nkey, v->nbytes)) {
        struct reply_handle *h = reply_defer(c, &spec);
        if (!h) return no_slot(c, true, need);
        budget_wait_over(c);
        storage_ext_count_get();
        struct job *j = &xw->jobs[ext_reader_next_slot(xw->reader)];
        job_fill(j, h, key, nkey, v);
        TRACE_STAMP(j->trace_asked, TRACE_NOW());
        j->f = (struct ext_fetch){ .key = j->key, .nkey = nkey, .v = &j->v };
        ext_reader_start(xw->reader, xw->st, &j->f, worker_fetched, xw);
        return true;
    }
    /* else to the IO threads; the job is connection memory like the slot:
     * reserved from the budget */
    bool reserved = nthreads && bufmem_reserve(sizeof(struct job));
    struct job *j = reserved ? malloc(sizeof *j) : NULL;
    if (j && streamed)
        spec.stream = (struct reply_stream){ .total = v->nbytes, .next = next_piece, .release = job_free, .arg = j };
    struct reply_handle *h = j ? reply_defer(c, &spec) : NULL;
    if (!h) {
        free(j);
        if (reserved) bufmem_release(sizeof(struct job));
        return no_slot(c, nthreads != 0, need);
    }
    budget_wait_over(c);
    storage_ext_count_get();
    job_fill(j, h, key, nkey, v);
    j->streamed = streamed;
    enqueue(j);
    return true;
}
