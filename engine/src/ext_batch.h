/*
 * ext_batch.h - reads of many extstore values at once (ext_batch.c), for the
 * IO threads (ext_io.c) and the concurrent checker.
 *
 * Why: a disk serves reads in parallel (an NVMe drive reaches its IOPS only
 * with tens of reads outstanding), and one blocking pread per IO thread
 * gives it one. A reader owns an io_uring of `depth` entries and `depth`
 * aligned buffers, each large enough for the largest record (-I): a batch of
 * up to `depth` reads is submitted with one io_uring_enter, so the disk sees
 * them all at once. Where io_uring is refused (old kernel, seccomp, sysctl)
 * the same batch is read with one pread after another. Either way every read
 * is checked by extstore.c (ext_read_prepare / ext_read_finish: version,
 * length, header, key, CRC) and counted the same.
 *
 * Concurrency: a reader belongs to one thread. A batch's reads are in flight
 * only inside ext_reader_fetch; the values it hands out live in its buffers
 * until that thread's next batch. Started reads (below) stay in flight across
 * calls, each in its own slot and buffer until it is finished.
 */
#ifndef CACHET_EXT_BATCH_H
#define CACHET_EXT_BATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "storage.h"

struct ext_fetch {
    const char             *key;      /* in */
    uint32_t                nkey;
    const struct item_view *v;        /* an on-disk view (v->on_disk) */
    bool                    hit;      /* out */
    const char             *value;    /* out: v->nbytes bytes, valid until the next batch */
    uint8_t                 at[12];   /* out, on a hit: the locator the record was read at
                                       * (the view's, or where compaction moved it) */
};

struct ext_reader;

/* A reader for batches of up to `depth` values of up to max_value bytes;
 * with use_uring false (or io_uring refused) it reads with pread. NULL
 * without memory. */
struct ext_reader *ext_reader_new(unsigned depth, uint32_t max_value, bool use_uring);
void ext_reader_free(struct ext_reader *r);
bool ext_reader_uses_uring(const struct ext_reader *r);

/* Reads f[0..n) (n <= depth) and calls done(arg, &f[i]) for each once its
 * value is there or it is a miss (counted; a failed read's stub unlinked).
 * On the ring, done runs after the whole batch completed; with pread after
 * each read. */
void ext_reader_fetch(struct ext_reader *r, storage_thread *t, struct ext_fetch *f, unsigned n,
                      void (*done)(void *arg, struct ext_fetch *f), void *arg);

/* A later piece of a value an earlier fetch found good (ext_read_range):
 * read with pread into the reader's first buffer, so only between batches
 * and never on a reader with started reads in flight. *piece is valid until
 * the reader's next read. A piece whose page was re-versioned because the
 * compactor moved this very record (same CAS and CRC: the same bytes) is
 * read where the record is now, and at follows it. */
enum ext_read_result ext_reader_read_range(struct ext_reader *r, const char *key, uint32_t nkey,
                                           const struct item_view *v, uint8_t at[12], uint32_t voff,
                                           uint32_t len, const char **piece);

/* Started reads, for a worker that keeps serving while its reads are in
 * flight (ext_io.c). A reader is used either with ext_reader_fetch or with
 * these, never both.
 *
 * ext_reader_can_start: a slot is free, the ring works (never with pread:
 * the worker would wait for the disk) and the record fits a buffer.
 * ext_reader_start (only after can_start said yes): prepares f's read and
 * queues it on the ring, or finishes f at once (done) when no disk read is
 * needed (a value still in a write buffer, a stale locator). f must live
 * until done(arg, f) is called.
 * ext_reader_submit: submits what was started since the last call, without
 * waiting. ext_reader_reap: finishes every read the ring has completed (all
 * in flight with wait_all, for a worker that is stopping). A ring that
 * fails in either reads what it never reported again with pread, finishes
 * it, and ext_reader_fd is -1 from then on.
 * ext_reader_fd: the ring's fd, readable while completions wait; -1 when
 * the reader does not (or no longer) read through a ring, or once the file
 * refused a ring read (EOPNOTSUPP, EINVAL) and the reads then in flight are
 * finished: a worker must not fall back to pread, which waits for the disk. */
int  ext_reader_fd(const struct ext_reader *r);
/* The slot the next ext_reader_start takes (only after can_start said yes):
 * a caller keeps per-read state of its own in an array indexed by it. */
unsigned ext_reader_next_slot(const struct ext_reader *r);
bool ext_reader_can_start(const struct ext_reader *r, uint32_t nkey, uint32_t nbytes);
void ext_reader_start(struct ext_reader *r, storage_thread *t, struct ext_fetch *f,
                      void (*done)(void *arg, struct ext_fetch *f), void *arg);
void ext_reader_submit(struct ext_reader *r, storage_thread *t,
                       void (*done)(void *arg, struct ext_fetch *f), void *arg);
void ext_reader_reap(struct ext_reader *r, storage_thread *t, bool wait_all,
                     void (*done)(void *arg, struct ext_fetch *f), void *arg);

#endif
