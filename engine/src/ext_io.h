/*
 * ext_io.h - the IO threads that read extstore values for GETs (ext_io.c).
 *
 * Why a pool of its own: a disk read takes from tens of microseconds to
 * milliseconds; a worker that waited for it would stall every connection it
 * serves. So a GET of an on-disk item reserves its reply slot (reply.h) and
 * hands the read to one of ext_threads IO threads, which completes the slot.
 *
 * Why a worker reads most values itself, though: handing a read to a thread
 * and its reply back costs two wake-ups and two context switches, more than
 * the read's own CPU, and an IO thread waits for the slowest read of its
 * batch. Where io_uring works, each worker has a ring of its own
 * (EXT_WORKER_READS slots of EXT_WORKER_READ_BYTES): a GET's read is queued
 * on it as the GET is parsed, the turn's reads are submitted together before
 * the worker sleeps, and each reply is finished when its completion is
 * reaped, on the worker, with no other thread involved. A value too large
 * for a slot, a worker whose slots are all in flight, and every read where
 * io_uring is refused go to the IO threads as before; so do the pieces of a
 * value over EXT_SEND_PIECE (below).
 */
#ifndef CACHET_EXT_IO_H
#define CACHET_EXT_IO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "storage.h"

struct conn;

/* Starts `threads` IO threads (each takes up to `depth` reads per round);
 * 0, or -1 if one could not start. */
int  ext_io_start(unsigned threads, unsigned depth);
void ext_io_stop(void);
/* Disk reads have been waiting for the buffer budget for over a second and
 * still are (`now`: conn_clock_s()): the budget is held by others. */
bool ext_io_budget_starved(uint32_t now);
/* "io_uring" when every IO thread and worker reads through its ring, else "pread"
 * (io_uring refused, or CACHET_TEST_NO_URING in a test build). `stats
 * settings` shows it as ext_io_engine (cachetd's own). */
const char *ext_io_engine(void);
void ext_io_stats_settings(stat_writer w, void *ctx);

/* Worker thread, for a hit whose view is on disk (v->on_disk): queues the
 * reply "head, value, \r\n" (or `miss` if the read fails) in request order.
 * A disk value is never answered as a miss for want of a slot: false means
 * nothing was queued and the connection has output to wait for, so the
 * caller stops before this key and asks again once slots drain (its get
 * counters then count the key twice). With nothing to wait for the reply
 * fails (`failed`, get_oom_extstore): SERVER_ERROR, as for a RAM value. */
/* A worker's own reads (see above). NULL without extstore, where io_uring
 * is refused, or without memory: the worker then hands every read to the
 * IO threads. The rest run on that worker only: fd is the ring's, readable
 * while completions wait, and -1 once the ring failed (its reads were
 * finished with pread; the IO threads take the worker's reads from then
 * on); submit sends the reads started since the last call (before the
 * worker sleeps); reap finishes what completed, into the worker's reply
 * queue, which the caller drains next; free waits for the reads in flight
 * and finishes them first. */
/* A disk value longer than this is sent in pieces of it (reply.h's
 * streamed slots): a reply holds one piece of the buffer budget, whatever
 * the value's size, and reads the next only once its client took the last.
 * 64 KiB: 16 clients each waiting for a 1 MB value hold 1 MiB, not 16. */
#define EXT_SEND_PIECE        (64u << 10)
#define EXT_WORKER_READS      64
#define EXT_WORKER_READ_BYTES (32u << 10)
struct ext_worker;
struct ext_worker *ext_io_worker_new(storage_thread *st);
int  ext_io_worker_fd(const struct ext_worker *xw);
void ext_io_worker_submit(struct ext_worker *xw);
void ext_io_worker_reap(struct ext_worker *xw);
void ext_io_worker_free(struct ext_worker *xw);

bool ext_io_value(struct conn *c, const char *head, size_t nhead, const char *miss, size_t nmiss,
                  const char *key, uint32_t nkey, const struct item_view *v);

#endif
