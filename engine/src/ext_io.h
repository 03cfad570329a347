/*
 * ext_io.h - the IO threads that read extstore values for GETs (ext_io.c).
 *
 * Why a pool of its own: a disk read takes from tens of microseconds to
 * milliseconds; a worker that waited for it would stall every connection it
 * serves. So a GET of an on-disk item reserves its reply slot (reply.h) and
 * hands the read to one of ext_threads IO threads, which completes the slot.
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
/* "io_uring" when every IO thread reads through its ring, else "pread"
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
bool ext_io_value(struct conn *c, const char *head, size_t nhead, const char *miss, size_t nmiss,
                  const char *key, uint32_t nkey, const struct item_view *v);

#endif
