/*
 * prefetch.h - batched lookups for a read batch of GETs.
 *
 * Why: a pipeline of GETs would otherwise pay two dependent cache misses per
 * key (the bucket word, then the item header), one key after the other.
 * Before a read batch is answered, every GET key in it is hashed and its
 * bucket prefetched, then every item is prefetched, so the misses overlap;
 * the lookups then reuse the hashes (storage_prefetch_keys,
 * storage_get_hashed).
 *
 * Concurrency: the state lives in the worker and is used by its thread only;
 * the remembered keys point into one connection's rbuf and are forgotten
 * (prefetch_forget) before that buffer can move.
 */
#ifndef CACHET_PREFETCH_H
#define CACHET_PREFETCH_H

#include "conn.h"

/* Scans buf[0, len) (complete lines of one connection's input). */
void prefetch_batch(struct worker *w, const char *buf, size_t len);
void prefetch_forget(struct worker *w);
/* Connections just read together (an io_uring batch), before any of them
 * is answered: each one whose input is a lone GET line has its key's
 * bucket and item prefetched, so unpipelined GETs overlap their misses
 * across connections as a pipeline's keys do within one. Hints only:
 * nothing is remembered. */
void prefetch_conns(struct worker *w, struct conn *const *conns, int n);

#endif
