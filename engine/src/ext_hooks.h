/*
 * ext_hooks.h - the one table through which the item code (items.c,
 * bags.c) and the IO layer (ext_batch.c, ext_io.c, reply.c) reach
 * extstore's item side (ext_items.c), and the counters the IO layer keeps
 * for `stats`.
 *
 * Why a table: extstore's item side sits on top of the item code (it
 * allocates, links and evicts items), and the item code must still tell it
 * when a stub dies or memory runs short; the IO threads must tell it how a
 * read ended. Called directly, each such upcall ties the lower file to the
 * higher one, and the files become one knot (see the layer check,
 * tools/check-layers.py). Through this table the item code and the IO
 * layer depend only on this file; ext_items.c installs its functions when
 * extstore starts. Without ext_path the table's functions do nothing, so no
 * caller tests for extstore first.
 *
 * Concurrency: the table is installed once by storage_ext_start, before
 * any thread that calls it is started (the workers, the IO threads, the
 * cleaner), and published with a release store; callers load the pointer
 * with acquire (a plain load on x86). The counters are relaxed atomics.
 */
#ifndef CACHET_EXT_HOOKS_H
#define CACHET_EXT_HOOKS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "extstore.h"
#include "storage.h"

/* await_flusher's answer (below) */
enum await_result { AWAIT_NONE, AWAIT_WAITED, AWAIT_PARKED };

struct ext_hooks {
    struct extstore *store;     /* NULL without ext_path */

    /* ---- from the item code ---- */
    /* Stripe lock held: the stub leaves the table, its record is garbage now. */
    void (*item_gone)(item *it);
    /* No lock held: replaces the key's stub by the value read back from disk
     * (or unlinks it if the read fails). False: no memory for the value; the
     * stub is kept and the caller answers "out of memory". */
    bool (*materialize)(storage_thread *t, const char *key, size_t nkey, uint32_t hv);
    /* The page mover emptying a page for a stub class: writes this linked
     * item's value to disk and links its stub in its place, as the flusher
     * does (its chunk is freed). False if it did not (a value under
     * ext_item_size, the item changed, the disk refused). No lock held. */
    bool (*flush_item)(storage_thread *t, item *it, const char *key, size_t nkey);
    /* Memory pressure seen by an evictor: wake the flusher. */
    void (*note_pressure)(void);
    /* A store in class clsid found no free chunk and is about to evict:
     * while the flusher is writing this class's values out, wait for it
     * (bounded) so that the eviction finds values already on disk instead of
     * unwritten ones. No lock held; the caller may be in a read section
     * (left during the wait). AWAIT_WAITED: look for a free chunk again;
     * AWAIT_PARKED (only with t->park): the store's connection waits
     * instead of its thread, nothing was allocated; AWAIT_NONE: evict. */
    enum await_result (*await_flusher)(storage_thread *t, int clsid);
    /* The cleaner's view of stubs whose page was evicted or dropped since
     * they were written (a GET would find them stale): stub_orphaned tells
     * one, any item, under the class lock; records_orphaned_total counts
     * them as they are made; stub_class_max is the largest class a stub
     * takes (0 without extstore). */
    bool (*stub_orphaned)(item *it);
    uint64_t (*records_orphaned_total)(void);
    int (*stub_class_max)(void);

    /* ---- from the IO layer, as a read completes ---- */
    /* After a read of an on-disk view, at the locator `at` (the view's, or
     * where `moved` found the record): a miss is counted and the key's stub
     * unlinked if still the same; a hit may be recached (ext_recache_rate)
     * from val. Returns whether it was a hit. */
    bool (*fetch_done)(storage_thread *t, const char *key, size_t nkey, const struct item_view *v,
                       enum ext_read_result r, const char *val, const uint8_t at[12]);
    /* A read found its page re-versioned: whether the compactor moved this
     * very record (same length, CRC and CAS); if so `at` gets its new locator. */
    bool (*moved)(const char *key, size_t nkey, const struct item_view *v, uint8_t at[12]);
};

extern _Atomic(const struct ext_hooks *) g_ext_hooks;
static inline const struct ext_hooks *ext_hooks(void)
{
    return atomic_load_explicit(&g_ext_hooks, memory_order_acquire);
}
/* storage_ext_start: ext_items.c's functions, for the life of the process. */
void ext_hooks_install(const struct ext_hooks *h);

/* What the IO threads count (memcached's get_extstore, get_aborted_extstore,
 * get_oom_extstore, extstore_io_queue): written through storage.h's
 * storage_ext_count_*, read and reset by ext_items.c's stats. */
struct ext_io_counts {
    _Atomic uint64_t get, aborted, oom;
    _Atomic uint64_t streams_cut;   /* streamed values cut mid-value: a later piece failed */
    _Atomic int64_t queue;
};
extern struct ext_io_counts g_ext_io_counts;

#endif
