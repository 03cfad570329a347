/*
 * ext_compact.c - extstore's compactor: turns pages that are mostly garbage
 * back into free pages before the disk fills, by moving their live records
 * to the compaction bucket (memcached 1.6.45's ext_compact_under,
 * ext_max_frag, ext_drop_under, ext_drop_unread, ext_max_sleep). It starts
 * while one page is still free, one page earlier than memcached's rule
 * (ext_compact_due, ext_items.h): that page takes the records it moves,
 * where memcached's compactor, starting with none free, evicts one for them.
 *
 * Why: a set or delete of a key on disk leaves its old record on its page.
 * Without compaction a full disk evicts its oldest page whole, live records
 * with the garbage, so values still in use become misses. When fewer than
 * ext_compact_under pages are free, the compactor takes the closed page with
 * the smallest live share (under ext_max_frag), rewrites every record whose
 * key still points at it into the compaction bucket, swaps the key's stub
 * for one with the new locator, and frees the page
 * (extstore_page_reclaims). The pages freed go to new writes instead of an
 * eviction. As memcached 1.6.45 (storage_compact_check): when no page is
 * fragmented enough and fewer than ext_drop_under pages are free, with
 * ext_drop_unread the compactor takes the oldest closed page instead and
 * drops the records of items not read since they went to disk
 * (extstore_compact_skipped), rewriting only the others: rewriting values
 * nobody reads only fills the next page. Without ext_drop_unread that page
 * stays (memcached would move it to an "old" bucket, which cachetd lacks)
 * and the disk evicts its oldest page when full.
 *
 * Counters, as memcached names them: rescues (records moved), lost (live,
 * but no memory for the new stub, no room on disk, a page that could not
 * be read, or a piece whose footer is damaged: the page goes anyway and the
 * key reads as a miss; counted as the live records the drop left), skipped (dropped as unread). resc_cold and
 * resc_old count, in memcached 1.6.45, only rescues into a "coldcompact" or
 * "old" bucket, which exist only when an ext_path names them
 * (FILE:SIZE:coldcompact); without them it shows 0 however many cold
 * values it rescued (measured: 1245 rescues, resc_cold 0; 1747 of 2344 with
 * a coldcompact file). cachetd has no such buckets (its ext_path takes no
 * bucket), so they stay 0 the same way, counted where memcached counts
 * them: rescues into those buckets, of which there are none. All five are
 * zeroed by `stats reset`, as memcached does (page reclaims are not).
 *
 * Concurrency: one bgthread; a pass runs alone. The page is picked and
 * walked as of one page version; ext_page_walk reads it without extstore's
 * lock and ext_page_drop refuses the page if it was evicted and reused
 * since, so records written after the pick are never freed unmoved. Each
 * stub is swapped by ext_relocate (ext_items.c, handed over by
 * ext_compact_start) under the key's stripe lock
 * only if the key still has the stub with this record's locator; a set,
 * delete or read-back in between wins. A GET that read the old locator and
 * reaches the disk after the page was dropped sees a new page version: a
 * miss, never a wrong value. Lock order: walk_lock (extstore), then a
 * stripe lock, then extstore's lock. Counters are relaxed atomics, read by
 * the stats registry (storage_ext_stats_general).
 */
#include "ext_items.h"
#include "bgthread.h"

#include <errno.h>
#include <stdatomic.h>
#include <time.h>

static _Atomic uint64_t n_lost, n_rescues, n_resc_cold, n_resc_old, n_skipped;
static storage_thread *cctx;
/* as ext_compact_start was given them; the settings' thresholds change
 * with the `extstore` command (relaxed atomic reads, see ext_items.c) */
static struct extstore *store;
static const struct ext_settings *conf;
static ext_relocate_fn relocate;

static bool compact_pass(void *arg);
static struct bgthread compactor = { .name = "cachet-extcomp", .pass = compact_pass };

struct walk {
    rel_time_t written;     /* the page was opened then: records are no older */
    bool drop_unread;
    uint64_t rescues, skipped;
};

static int on_record(void *arg, const struct ext_record *r)
{
    struct walk *w = arg;
    bool cold = false;
    switch (relocate(cctx, r, EXT_BUCKET_COMPACT, w->written, w->drop_unread, &cold)) {
    case EXT_RELOC_MOVED:
        /* into the one compaction bucket: never a coldcompact or old one
         * (resc_cold, resc_old: see the header) */
        w->rescues++;
        break;
    case EXT_RELOC_DROPPED: w->skipped++; break;
    case EXT_RELOC_LOST:    /* still live on the page: counted when it is dropped */
    case EXT_RELOC_GONE:    break;
    }
    return 0;
}

static void count(_Atomic uint64_t *c, uint64_t n)
{
    if (n) atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

/* One page per pass; true (another pass at once) while pages stay short and
 * a page was freed. */
static bool compact_pass(void *arg)
{
    (void)arg;
    struct extstore *e = store;
    const struct ext_settings *x = conf;
    uint64_t free_pages = atomic_load_explicit(&ext_get_stats(e)->pages_free, memory_order_relaxed);
    if (!ext_compact_due(free_pages, __atomic_load_n(&x->compact_under, __ATOMIC_RELAXED))) return false;
    uint32_t version = 0;
    int page = ext_compact_pick(e, ext_max_frag_now(x), &version);
    bool drop_unread = false;
    /* dropping unread values stays memcached's strict "fewer than
     * ext_drop_under pages free": ext_compact_due's page of headroom is for
     * the compaction bucket's writes, and dropping a page earlier would lose
     * values memcached keeps */
    uint32_t drop_under = __atomic_load_n(&x->drop_under, __ATOMIC_RELAXED);
    if (page < 0 && free_pages < drop_under &&
        __atomic_load_n(&x->drop_unread, __ATOMIC_RELAXED)) {
        page = ext_compact_oldest(e, &version);
        drop_unread = true;
    }
    if (page < 0) return false;
    struct ext_page_info pi;
    if (!ext_page_info(e, (uint32_t)page, &pi) || pi.version != version) return true;   /* evicted: pick again */

    /* the page's opening time in the item clock's seconds */
    int64_t age = (int64_t)time(NULL) - pi.opened_at;
    rel_time_t now = now_time();
    struct walk w = { .written = age <= 0 ? now : (age >= (int64_t)now ? 0 : now - (rel_time_t)age),
                      .drop_unread = drop_unread };
    int rc = ext_page_walk(e, (uint32_t)page, version, on_record, &w);
    bool dropped = false;
    uint64_t lost = 0;
    /* A page that cannot be read (EIO) is freed too: its records read as
     * misses anyway, and keeping it would make every pass pick it again.
     * Without memory for the walk's buffer the page stays, whole, for a
     * later pass. A page whose walk could not reach its first records past
     * a damaged footer (-EBADMSG) stays too: those records still read, and
     * dropping them would lose them silently; the walk marked it so no pass
     * picks it again (extstore.c, ext_page_walk). */
    if (rc != -ESTALE && rc != -ENOMEM && rc != -EBADMSG) dropped = ext_page_drop(e, (uint32_t)page, version, &lost);
    count(&n_rescues, w.rescues);
    count(&n_skipped, w.skipped);
    count(&n_lost, lost);
    return dropped || rc == -ESTALE;
}

static unsigned sleep_period_ms(uint32_t max_sleep_us)
{
    uint32_t ms = max_sleep_us / 1000;
    return ms ? ms : 1;
}

int ext_compact_start(storage_thread *t, struct extstore *e, const struct ext_settings *x,
                      ext_relocate_fn relocate_fn)
{
    cctx = t;
    store = e;
    conf = x;
    relocate = relocate_fn;
    compactor.period_ms = sleep_period_ms(x->max_sleep);
    return bgthread_start(&compactor);
}

void ext_compact_set_sleep(uint32_t max_sleep_us) { bgthread_set_period(&compactor, sleep_period_ms(max_sleep_us)); }

void ext_compact_stop(void) { bgthread_stop(&compactor); }
void ext_compact_wake(void) { bgthread_wake(&compactor); }

void ext_compact_counts_reset(void)
{
    atomic_store_explicit(&n_lost, 0, memory_order_relaxed);
    atomic_store_explicit(&n_rescues, 0, memory_order_relaxed);
    atomic_store_explicit(&n_resc_cold, 0, memory_order_relaxed);
    atomic_store_explicit(&n_resc_old, 0, memory_order_relaxed);
    atomic_store_explicit(&n_skipped, 0, memory_order_relaxed);
}

void ext_compact_counts(struct ext_compact_counts *out)
{
    out->lost = atomic_load_explicit(&n_lost, memory_order_relaxed);
    out->rescues = atomic_load_explicit(&n_rescues, memory_order_relaxed);
    out->resc_cold = atomic_load_explicit(&n_resc_cold, memory_order_relaxed);
    out->resc_old = atomic_load_explicit(&n_resc_old, memory_order_relaxed);
    out->skipped = atomic_load_explicit(&n_skipped, memory_order_relaxed);
}
