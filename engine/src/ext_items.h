/*
 * ext_items.h - what ext_items.c (the item side of extstore) lends the
 * compactor (ext_compact.c), so that the stub swap exists once, and the
 * compactor's own entry points, which ext_items.c calls.
 *
 * Why a header of its own: the compactor relocates stubs exactly the way
 * the flusher and a recache replace items (swap only if the key still maps
 * to the same stub, under the key's stripe lock); that code and the store's
 * handles live in ext_items.c, and storage_internal.h is the item layer's,
 * not extstore's. Threading: as each function says.
 */
#ifndef CACHET_EXT_ITEMS_H
#define CACHET_EXT_ITEMS_H

#include "storage_internal.h"
#include "ext_hooks.h"
#include "extstore.h"
#include "settings.h"


enum ext_relocate_result {
    EXT_RELOC_MOVED,     /* the key's stub now points at the copy in bucket `to` */
    EXT_RELOC_GONE,      /* the key no longer maps to this record (replaced, deleted, expired): garbage */
    EXT_RELOC_DROPPED,   /* not read since `written` and drop_unread: the stub was unlinked */
    EXT_RELOC_LOST,      /* live, but no memory for a new stub or no room on disk: not moved */
};

/* One record of a page being compacted (r from ext_page_walk). If the key
 * still has the stub with r's locator: drops it when drop_unread and its
 * last access is before `written` (the record's page was opened then: the
 * item was not read since its value went to disk), else writes key and
 * value to bucket `to` and swaps in a stub with the new locator, only if the
 * key still has the same stub (a set, delete or read-back in between wins
 * and the copy is garbage). *cold says whether it was unread since then.
 * No lock held; may allocate (and so evict) and write. */
enum ext_relocate_result ext_relocate(storage_thread *t, const struct ext_record *r, enum ext_bucket to,
                                      rel_time_t written, bool drop_unread, bool *cold);

typedef enum ext_relocate_result (*ext_relocate_fn)(storage_thread *t, const struct ext_record *r,
                                                    enum ext_bucket to, rel_time_t written, bool drop_unread,
                                                    bool *cold);

/* The compactor (ext_compact.c): started and stopped with the flusher;
 * wake asks for a pass now (the flusher calls it when free pages run low);
 * the counters are memcached's extstore_compact_*. ext_items.c owns the
 * compactor and hands it the store, the settings (both fixed from then on)
 * and its relocate function, so the compactor never calls back into
 * ext_items.c by name (the two would otherwise be a cycle). */
int  ext_compact_start(storage_thread *t, struct extstore *e, const struct ext_settings *x,
                       ext_relocate_fn relocate);
void ext_compact_stop(void);
void ext_compact_wake(void);
/* `extstore max_sleep`: the compactor's period from its next sleep on */
void ext_compact_set_sleep(uint32_t max_sleep_us);
/* ext_max_frag as the `extstore` command last set it (a relaxed atomic read) */
static inline double ext_max_frag_now(const struct ext_settings *x)
{
    double d;
    __atomic_load(&x->max_frag, &d, __ATOMIC_RELAXED);
    return d;
}
/* Whether the compactor should free a page now: fewer than compact_under
 * pages free, counting one more as taken than memcached 1.6.45 does. Why:
 * the records it rescues go into the compaction bucket's own page, so a
 * compaction that starts only once no page is free has nothing to write into
 * but a page it evicts, live values and all (bench-extstore's Zipf rows lost
 * about 2,700 values a time so; memcached's compactor has the same flaw).
 * Starting while one page is still free leaves that page for it.
 * compact_under 0 still turns compaction off. */
static inline bool ext_compact_due(uint64_t pages_free, uint32_t compact_under)
{
    return compact_under && pages_free <= compact_under;
}
struct ext_compact_counts { uint64_t lost, rescues, resc_cold, resc_old, skipped; };
void ext_compact_counts(struct ext_compact_counts *out);
void ext_compact_counts_reset(void);   /* stats reset: memcached zeroes them too */

#endif
