/*
 * ext_batch.c - a batch of extstore reads through io_uring, or pread where
 * io_uring is refused (why: ext_batch.h).
 *
 * Concurrency: a reader and its ring and buffers belong to one thread. The
 * page store's lock is taken only inside ext_read_prepare (one read at a
 * time, never across the wait for the disk); the version is checked again
 * in ext_read_finish, so a page evicted while its read was in flight is a
 * miss.
 */
#include "ext_batch.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "ext_hooks.h"
#include "uring.h"

struct slot {
    struct ext_read_op   op;
    struct ext_locator   loc;
    enum ext_read_result r;
    bool                 disk;      /* a disk read is (or was) in flight */
    bool                 reaped;    /* the ring completed it: the kernel is done with buf */
    int64_t              got;       /* its result: bytes, or -errno */
    char                *buf;       /* where its record is (NULL: no buffer) */
    struct ext_fetch    *f;         /* started reads only: whose read it is */
};

struct ext_reader {
    struct uring *ring;             /* NULL: pread */
    _Atomic bool  ring_broken;      /* an io_uring_enter failed: pread from then on
                                     * (read by `stats settings` on other threads) */
    unsigned      depth;
    uint64_t      buf_size;
    char         *bufs;             /* depth x buf_size, EXT_ALIGN aligned */
    struct slot  *slots;
    char         *leaked;           /* the buffers of a broken ring's last batch */
    /* started reads only (ext_reader_start) */
    bool          refused;          /* the file refused a ring read: start no more */
    unsigned     *free;             /* slots not in flight */
    unsigned      nfree;
    unsigned      inflight;         /* submitted or queued, not yet finished */
};

struct ext_reader *ext_reader_new(unsigned depth, uint32_t max_value, bool use_uring)
{
    struct ext_reader *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->depth = depth ? depth : 1;
    r->buf_size = ext_read_buf_size(KEY_MAX_LENGTH, max_value);
    r->slots = calloc(r->depth, sizeof *r->slots);
    r->free = calloc(r->depth, sizeof *r->free);
    if (r->free)
        for (unsigned i = 0; i < r->depth; i++) r->free[r->nfree++] = r->depth - 1 - i;
    if (!r->slots || !r->free || posix_memalign((void **)&r->bufs, EXT_ALIGN, r->depth * r->buf_size)) {
        ext_reader_free(r);
        return NULL;
    }
    if (use_uring) r->ring = uring_create_reader(r->depth);
    return r;
}

void ext_reader_free(struct ext_reader *r)
{
    if (!r) return;
    uring_free(r->ring);
    free(r->bufs);
    /* r->leaked is never freed: a broken ring's reads may still land in it
     * after the ring's fd is closed (the kernel tears it down later) */
    free(r->slots);
    free(r->free);
    free(r);
}

bool ext_reader_uses_uring(const struct ext_reader *r)
{
    return r->ring && !atomic_load_explicit(&r->ring_broken, memory_order_relaxed);
}

/* The ring's completion for slot s: a short read (the kernel may stop at any
 * length), a retry answer, or a file the ring will not read (a filesystem
 * refusing this read through io_uring) is finished with pread. */
static void ring_result(struct slot *s, char *buf, int32_t res)
{
    res = ext_read_fault(res);
    if (res == -EAGAIN || res == -EINTR || res == -EOPNOTSUPP || res == -EINVAL) s->got = ext_read_pread(&s->op, buf, 0);
    else if (res > 0 && (uint32_t)res < s->op.len) s->got = ext_read_pread(&s->op, buf, (uint64_t)res);
    else s->got = res;
}

/* Not expected once the self-test passed (ENOMEM, a signal storm): what did
 * not complete is read again with pread into new buffers, and this reader
 * reads with pread from now on, never reusing a buffer the kernel may still
 * write into. */
static void ring_broke(struct ext_reader *r)
{
    atomic_store_explicit(&r->ring_broken, true, memory_order_relaxed);
    r->leaked = r->bufs;   /* left to the kernel: never reused, never freed */
    r->bufs = NULL;
    if (posix_memalign((void **)&r->bufs, EXT_ALIGN, r->depth * r->buf_size)) r->bufs = NULL;
    for (unsigned i = 0; i < r->depth; i++) {
        struct slot *s = &r->slots[i];
        if (!s->disk || s->reaped) continue;
        s->buf = r->bufs ? r->bufs + i * r->buf_size : NULL;
        s->got = s->buf ? ext_read_pread(&s->op, s->buf, 0) : -ENOMEM;
    }
}

/* Submits every slot's read in one io_uring_enter and waits for all. A
 * failing ring's unfinished reads are done again with pread, into new
 * buffers: the values are on disk, and a ring error is no reason to lose
 * them. */
static void ring_pass(struct ext_reader *r, unsigned inflight)
{
    int rc = uring_submit_and_wait(r->ring);
    bool reap = true;
#ifdef CACHET_TEST_HOOKS
    /* test builds: the ring fails after submitting, none of its reads reported */
    if (getenv("CACHET_TEST_BREAK_URING")) rc = -ENOMEM, reap = false;
#endif
    unsigned reaped = 0;
    while (reap) {
        uint64_t ud;
        int32_t res;
        while (uring_next_cqe(r->ring, &ud, &res)) {
            if (ud < r->depth && r->slots[ud].disk && !r->slots[ud].reaped) {
                ring_result(&r->slots[ud], r->slots[ud].buf, res);
                r->slots[ud].reaped = true;
                reaped++;
            }
        }
        if (rc < 0 || reaped >= inflight) break;
        rc = uring_wait(r->ring, inflight - reaped);
    }
    if (rc < 0) ring_broke(r);
}

/* The read of f is over (s->r): count it, recache or unlink, reply. A read
 * that found its page re-versioned because the compactor moved this very
 * record is done again, at once and with pread, where the record is now
 * (into the same buffer: this slot's, or none). */
static void finish_one(storage_thread *t, struct ext_fetch *f, struct slot *s, char *buf,
                       void (*done)(void *arg, struct ext_fetch *f), void *arg)
{
    uint8_t at[12];
    memcpy(at, f->v->ext_loc, sizeof at);
    struct extstore *e = ext_hooks()->store;
    if (s->r == EXT_MISS_STALE && buf && e && ext_hooks()->moved(f->key, f->nkey, f->v, at)) {
        memcpy(&s->loc, at, sizeof s->loc);
        f->value = NULL;
        if (ext_read_prepare(e, &s->loc, f->key, f->nkey, buf, f->v->nbytes, &s->op, &s->r))
            s->r = ext_read_finish(e, &s->op, buf, ext_read_pread(&s->op, buf, 0), &s->loc, f->key, f->nkey,
                                   f->v->nbytes, &f->value);
        else if (s->r == EXT_HIT)
            f->value = buf;   /* copied from a write buffer */
    }
    f->hit = ext_hooks()->fetch_done(t, f->key, f->nkey, f->v, s->r, f->value, at);
    if (!f->hit) f->value = NULL;
    memcpy(f->at, at, sizeof f->at);
    done(arg, f);
}

void ext_reader_fetch(struct ext_reader *r, storage_thread *t, struct ext_fetch *f, unsigned n,
                      void (*done)(void *arg, struct ext_fetch *f), void *arg)
{
    /* more than the reader holds: one batch after another, each fetch done */
    for (; n > r->depth; f += r->depth, n -= r->depth) ext_reader_fetch(r, t, f, r->depth, done, arg);
    struct extstore *e = ext_hooks()->store;
    bool ring = ext_reader_uses_uring(r);
    /* no slot of an earlier batch may pass for one of this batch's reads */
    for (unsigned i = 0; i < r->depth; i++) r->slots[i].disk = r->slots[i].reaped = false;
    if (!r->bufs && posix_memalign((void **)&r->bufs, EXT_ALIGN, r->depth * r->buf_size)) r->bufs = NULL;
    char *bufs = r->bufs;
    unsigned inflight = 0;
    for (unsigned i = 0; i < n; i++) {
        struct slot *s = &r->slots[i];
        char *buf = bufs ? bufs + i * r->buf_size : NULL;
        f[i].hit = false;
        f[i].value = NULL;
        s->disk = s->reaped = false;
        s->buf = buf;
        s->r = EXT_MISS_IOERR;
        if (!e || !f[i].v->on_disk) { done(arg, &f[i]); continue; }   /* nothing to read: a miss, uncounted */
        memcpy(&s->loc, f[i].v->ext_loc, sizeof s->loc);
        /* a record larger than a buffer (a value over -I) cannot be read here */
        bool fits = buf && ext_record_size(f[i].nkey, f[i].v->nbytes) + EXT_ALIGN <= r->buf_size;
        if (fits && ext_read_prepare(e, &s->loc, f[i].key, f[i].nkey, buf, f[i].v->nbytes, &s->op, &s->r)) {
            if (ring) {
                s->disk = true;
                s->got = -EIO;
                uring_prep_read(r->ring, s->op.fd, buf, s->op.len, s->op.pos, i);
                inflight++;
                continue;
            }
            /* pread: one at a time, each reply leaves as soon as its read is done */
            s->r = ext_read_finish(e, &s->op, buf, ext_read_pread(&s->op, buf, 0), &s->loc, f[i].key, f[i].nkey,
                                   f[i].v->nbytes, &f[i].value);
        } else if (s->r == EXT_HIT) {
            f[i].value = buf;   /* copied from a write buffer */
        }
        finish_one(t, &f[i], s, buf, done, arg);
    }
    if (!inflight) return;
    ring_pass(r, inflight);
    for (unsigned i = 0; i < n; i++) {
        struct slot *s = &r->slots[i];
        if (!s->disk) continue;
        /* no buffer (s->got is -ENOMEM then): a counted read error */
        s->r = ext_read_finish(e, &s->op, s->buf, s->got, &s->loc, f[i].key, f[i].nkey, f[i].v->nbytes, &f[i].value);
        finish_one(t, &f[i], s, s->buf, done, arg);
    }
}

/* How often a piece follows its record to where the compactor moved it
 * before the stream is cut: each move needs a whole compaction pass over
 * the record's new page meanwhile, so a few is plenty; bounded so a value
 * moved faster than it can be read cannot hold an IO thread. */
#define RANGE_MOVES_MAX 4

enum ext_read_result ext_reader_read_range(struct ext_reader *r, const char *key, uint32_t nkey,
                                           const struct item_view *v, uint8_t at[12], uint32_t voff,
                                           uint32_t len, const char **piece)
{
    struct extstore *e = ext_hooks()->store;
    if (!r->bufs && posix_memalign((void **)&r->bufs, EXT_ALIGN, r->depth * r->buf_size)) r->bufs = NULL;
    if (!e || !r->bufs) return EXT_MISS_IOERR;
    enum ext_read_result res = EXT_MISS_STALE;
    uint8_t now[12];
    memcpy(now, at, sizeof now);
    for (int moves = 0; moves <= RANGE_MOVES_MAX; moves++) {
        struct ext_locator loc;
        memcpy(&loc, now, sizeof loc);
        res = ext_read_range(e, &loc, nkey, v->nbytes, voff, len, r->bufs, r->buf_size, piece);
        if (res == EXT_HIT) memcpy(at, now, sizeof now);
        uint8_t tried[12];
        memcpy(tried, now, sizeof tried);
        /* the stub still at the locator just found stale: nowhere to go */
        if (res != EXT_MISS_STALE || !ext_hooks()->moved(key, nkey, v, now) || !memcmp(now, tried, sizeof now))
            break;
    }
    return res;
}

/* ------------------------------------------------------------ started reads
 * A worker's own reads (ext_io.c): each started as its GET is parsed, all
 * of a loop turn submitted together, each finished as soon as its own
 * completion is reaped, so a slow read holds up no other. */

int ext_reader_fd(const struct ext_reader *r)
{
    if (!ext_reader_uses_uring(r) || (r->refused && !r->inflight)) return -1;
    return uring_fd(r->ring);
}

bool ext_reader_can_start(const struct ext_reader *r, uint32_t nkey, uint32_t nbytes)
{
    return r->nfree && r->bufs && !r->refused && ext_reader_uses_uring(r) &&
           ext_record_size(nkey, nbytes) + EXT_ALIGN <= r->buf_size;
}

unsigned ext_reader_next_slot(const struct ext_reader *r)
{
    return r->free[r->nfree - 1];
}

/* A started read is over and replied to: its slot is free again. */
static void slot_release(struct ext_reader *r, struct slot *s)
{
    s->f = NULL;
    r->inflight--;
    r->free[r->nfree++] = (unsigned)(s - r->slots);
}

/* Slot s's read is back (or was read again with pread): finish it, free
 * the slot. */
static void finish_started(struct ext_reader *r, storage_thread *t, struct slot *s,
                           void (*done)(void *arg, struct ext_fetch *f), void *arg)
{
    struct ext_fetch *f = s->f;
    struct extstore *e = ext_hooks()->store;
    s->r = ext_read_finish(e, &s->op, s->buf, s->got, &s->loc, f->key, f->nkey, f->v->nbytes, &f->value);
    s->disk = false;
    finish_one(t, f, s, s->buf, done, arg);
    slot_release(r, s);
}

void ext_reader_start(struct ext_reader *r, storage_thread *t, struct ext_fetch *f,
                      void (*done)(void *arg, struct ext_fetch *f), void *arg)
{
    struct extstore *e = ext_hooks()->store;
    f->hit = false;
    f->value = NULL;
    if (!e || !f->v->on_disk) { done(arg, f); return; }   /* nothing to read: a miss, uncounted */
    unsigned i = r->free[--r->nfree];
    struct slot *s = &r->slots[i];
    char *buf = r->bufs + i * r->buf_size;
    s->disk = s->reaped = false;
    s->buf = buf;
    s->r = EXT_MISS_IOERR;
    s->f = f;
    memcpy(&s->loc, f->v->ext_loc, sizeof s->loc);
    r->inflight++;
    if (ext_read_prepare(e, &s->loc, f->key, f->nkey, buf, f->v->nbytes, &s->op, &s->r)) {
        s->disk = true;
        s->got = -EIO;
        uring_prep_read(r->ring, s->op.fd, buf, s->op.len, s->op.pos, i);
        return;
    }
    /* no disk read: a miss found by the page table, or a value still in a
     * write buffer, copied into this slot's buffer */
    if (s->r == EXT_HIT) f->value = buf;
    finish_one(t, f, s, buf, done, arg);
    slot_release(r, s);
}

/* The ring failed: the reads it never reported are read again with pread
 * (ring_broke) and finished here. */
static void finish_after_break(struct ext_reader *r, storage_thread *t,
                               void (*done)(void *arg, struct ext_fetch *f), void *arg)
{
    ring_broke(r);
    for (unsigned i = 0; i < r->depth; i++) {
        struct slot *s = &r->slots[i];
        if (s->f && s->disk && !s->reaped) finish_started(r, t, s, done, arg);
    }
}

void ext_reader_submit(struct ext_reader *r, storage_thread *t,
                       void (*done)(void *arg, struct ext_fetch *f), void *arg)
{
    if (!r->ring || !r->inflight) return;
    int rc = uring_submit(r->ring);
#ifdef CACHET_TEST_HOOKS
    /* test builds: the ring fails after submitting, none of its reads reported */
    if (rc > 0 && getenv("CACHET_TEST_BREAK_URING")) rc = -ENOMEM;
#endif
    if (rc < 0) finish_after_break(r, t, done, arg);
}

void ext_reader_reap(struct ext_reader *r, storage_thread *t, bool wait_all,
                     void (*done)(void *arg, struct ext_fetch *f), void *arg)
{
    if (!ext_reader_uses_uring(r)) return;
    for (;;) {
        uint64_t ud;
        int32_t res;
        while (uring_next_cqe(r->ring, &ud, &res)) {
            if (ud >= r->depth) continue;
            struct slot *s = &r->slots[ud];
            if (!s->f || !s->disk || s->reaped) continue;
            /* a filesystem that will not read this file through the ring:
             * this read is done with pread (ring_result), and the worker's
             * next reads go to the IO threads, which may block */
            if (res == -EOPNOTSUPP || res == -EINVAL) r->refused = true;
            ring_result(s, s->buf, res);
            s->reaped = true;
            finish_started(r, t, s, done, arg);
        }
        if (!wait_all || !r->inflight) return;
        int rc = uring_submit(r->ring);   /* reads started since the last submit */
        if (rc >= 0) rc = uring_wait(r->ring, 1);
        if (rc < 0) { finish_after_break(r, t, done, arg); return; }
    }
}
