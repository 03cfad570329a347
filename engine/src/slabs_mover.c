/*
 * slabs_mover.c - moving 1 MB slab pages from one size class to another.
 *
 * Why pages move: classes fill in the order the workload arrives. When the
 * mix shifts, a class can need memory while every page belongs to other
 * classes (a store of a new size after the cache filled up with another), or
 * keep evicting young items while another class sits on much older ones.
 *
 * Two callers, one mechanism:
 *  - slabs_acquire_page(): the request path. A store whose class has no free
 *    chunk and nothing of its own to evict takes a page from another class
 *    within the same request, so a store is never refused while something
 *    anywhere could be evicted (memcached 1.6 behaves the same way). It never
 *    waits for a background pass.
 *  - slabs_rebalance_once(): the background pass (memcached's automove idea):
 *    once a second, if one class evicts items much younger than the oldest
 *    items another class keeps, a page of the latter moves over.
 *
 * Extstore's stub classes (below slabs_first_item_class) are never a source
 * by age, and on the request path only after every other class with more
 * than one page, and after every other one-page class: a stub is
 * the only trace of a value already on disk, and stubs are old because
 * nobody reads them, not because they are worth less. A 1 MB page holds
 * some 18,000 of them, and taking it for 256 values of 4 KB lost them all
 * (measured: 38,204 stubs in 33 moves under uniform disk reads whose values
 * came back to RAM). memcached's extstore automover likewise never balances
 * its small classes by age. A stub class with a page's worth of free chunks
 * outside the page it gives up still gives it first (its stubs move to
 * those chunks: nothing live is lost). The other way round, a stub class
 * gets its pages early from the flusher (slabs_acquire_page_for_stubs),
 * and the values on such a page are written to disk as it empties: the
 * values' class has no free chunk to rescue them into while a fill runs.
 *
 * Moving a page: it stops taking part in its class (its free chunks leave
 * the free list, it is no longer carved), its live items move to free chunks
 * elsewhere in their class while there are any (item_rescue: a class that
 * the extstore flusher thinned out has plenty, and its cheapest page still
 * holds live values and stubs that must not be lost), the rest are evicted
 * through the bag LRU (bags_purge, which waits for the grace period) together with
 * the heads of chained values that own data chunks in it, and once
 * its last chunk is free (zero-copy readers may still hold one for a moment)
 * it is carved into the new class. If it does not empty within a bounded
 * time it goes back to its class.
 *
 * Locking: one mover lock serialises moves (request path and background
 * alike); it is taken with no other storage lock held and never inside a
 * read section, because draining waits for grace periods. Under it: a class
 * lock, then stripe locks (the same order as the cleaner).
 */
#include "slabs_internal.h"
#include "bgthread.h"
#include "logger.h"
#include "ext_hooks.h"

#include <stdio.h>
#include <time.h>

_Atomic uint64_t g_slab_moves, g_slab_rescues;
static _Atomic uint64_t moves_failed, moves_on_demand;
static pthread_mutex_t mover_lock = PTHREAD_MUTEX_INITIALIZER;
static storage_thread *mover_ctx;
/* Set while this thread holds mover_lock to write a page's values to disk:
 * a stub allocated then must not ask for a page (the lock is not recursive). */
static _Thread_local bool moving_for_stubs;

static uint64_t last_evicted[MAX_SLAB_CLASSES + 1];   /* background pass only */
static rel_time_t last_balance;

static bool mover_pass(void *arg);

/* `slabs automove` / -o slab_automove: 0 stops the background pass and the
 * request path's moves (memcached's default is 1) */
static _Atomic int g_slab_automove = 1;
static struct bgthread mover = { .name = "cachet-mover", .pass = mover_pass, .period_ms = 100 };

/* Takes page pg out of service: its free chunks leave the free list and it
 * stops being carved. Class lock held. */
static void start_draining(struct slabclass *sc, size_t pg)
{
    g_pages[pg].draining = true;
    if (sc->bump_page == (int64_t)pg) {
        for (uint32_t i = sc->bump_next; i < sc->perpage; i++)
            atomic_store_explicit(&slabs_chunk_at(pg, i, sc->size)->iflags, ITEM_FREE, memory_order_relaxed);
        sc->bump_page = -1;
        atomic_store_explicit(&sc->end_free, 0, memory_order_relaxed);
    }
    item *prev = NULL;
    uint32_t h = sc->free_head;
    while (h) {
        item *it = handle_item(h);
        uint32_t next = atomic_load_explicit(&it->lru_next, memory_order_relaxed);
        if (slabs_page_index(it) == pg) {
            if (prev) atomic_store_explicit(&prev->lru_next, next, memory_order_relaxed);
            else sc->free_head = next;
            sc->free_count--;
        } else {
            prev = it;
        }
        h = next;
    }
}

/* Gives a drained page's free chunks back to its own class (the move
 * failed). Class lock held. */
static void stop_draining(struct slabclass *sc, size_t pg)
{
    g_pages[pg].draining = false;
    for (uint32_t i = 0; i < sc->perpage; i++) {
        item *it = slabs_chunk_at(pg, i, sc->size);
        if (atomic_load_explicit(&it->iflags, memory_order_relaxed) == ITEM_FREE) {
            atomic_store_explicit(&it->lru_next, sc->free_head, memory_order_relaxed);
            sc->free_head = item_handle(it);
            sc->free_count++;
        }
    }
}

/* The page of class src with the fewest allocated chunks (cheapest to empty),
 * not one of the nskip pages in skip, or g_pages_max if none. */
static size_t cheapest_page_but(int src, const size_t *skip, unsigned nskip)
{
    struct slabclass *sc = &g_classes[src];
    size_t victim = g_pages_max;
    uint32_t least = UINT32_MAX;
    size_t lim = atomic_load(&g_pages_next);
    pthread_mutex_lock(&sc->lock);
    for (size_t pg = 0; pg < lim && least > 0; pg++) {
        if (atomic_load_explicit(&g_page_cls[pg], memory_order_relaxed) != src || g_pages[pg].draining) continue;
        bool skipped = false;
        for (unsigned k = 0; k < nskip && !skipped; k++) skipped = skip[k] == pg;
        if (skipped) continue;
        if (g_pages[pg].used < least) { least = g_pages[pg].used; victim = pg; }
    }
    pthread_mutex_unlock(&sc->lock);
    return victim;
}

static size_t cheapest_page(int src) { return cheapest_page_but(src, NULL, 0); }

/* Evicts what lives in page pg of class src: its items, and the chained
 * values whose data chunks sit in it (their heads may be in any class). A
 * data chunk names its head in h_next, read under the class lock while the
 * chunk is still allocated; the head is only unlinked if it still owns the
 * chunk (bags_purge checks that it is linked; a freed chunk in a draining
 * page cannot be handed out again). */
#define PURGE_HEADS_MAX 512
static void purge_page(int src, size_t pg, const char *lo, const char *hi)
{
    struct slabclass *sc = &g_classes[src];
    static uint32_t heads[PURGE_HEADS_MAX];   /* mover lock held: one user */
    size_t n = 0;
    pthread_mutex_lock(&sc->lock);
    for (uint32_t i = 0; i < sc->perpage && n < PURGE_HEADS_MAX; i++) {
        item *c = slabs_chunk_at(pg, i, sc->size);
        if (atomic_load_explicit(&c->iflags, memory_order_acquire) != ITEM_DATA) continue;
        uint32_t h = atomic_load_explicit(&c->h_next, memory_order_relaxed);
        bool seen = false;
        for (size_t k = 0; k < n && !seen; k++) seen = heads[k] == h;
        if (!seen && h) heads[n++] = h;
    }
    pthread_mutex_unlock(&sc->lock);
    /* group the heads by their class: one pass over each class's bags */
    uint32_t group[PURGE_HEADS_MAX];
    size_t ng = 0;
    for (size_t k = 0; k < n; k++)
        if (slabs_clsid_of(handle_item(heads[k])) == src) { group[ng++] = heads[k]; heads[k] = 0; }
    bags_purge(mover_ctx, src, lo, hi, group, ng);
    for (size_t k = 0; k < n; k++) {
        if (!heads[k]) continue;
        int c = slabs_clsid_of(handle_item(heads[k]));
        ng = 0;
        for (size_t j = k; j < n; j++) {
            if (heads[j] && slabs_clsid_of(handle_item(heads[j])) == c) { group[ng++] = heads[j]; heads[j] = 0; }
        }
        if (c != 0) bags_purge(mover_ctx, c, NULL, NULL, group, ng);
    }
}

/* Free chunks a rescue leaves to the stores of the class (see rescue_page). */
static uint32_t rescue_reserve(const struct slabclass *sc) { return sc->perpage / 4 + 8; }

/* Whether every live item of page pg fits in the free chunks of its class
 * outside that page, above the rescue's reserve: only then does moving the
 * page lose nothing. A class's free bytes alone do not say it: a stub class
 * whose only page holds 62 stubs has a page's worth free, all in that page,
 * and moving it evicted every stub (the values on disk became misses with
 * `evictions` 0). Class lock held. */
static bool page_rescuable_locked(const struct slabclass *sc, size_t pg)
{
    uint64_t free_chunks = slabs_free_bytes_locked(sc) / sc->size;
    uint64_t free_in_page = sc->perpage - g_pages[pg].used;
    uint64_t free_elsewhere = free_chunks > free_in_page ? free_chunks - free_in_page : 0;
    return free_elsewhere >= (uint64_t)g_pages[pg].used + rescue_reserve(sc);
}

/* Moves the linked items of page pg (draining) to free chunks elsewhere in
 * class src, while the class has any. A linked chunk's key was written
 * before it was linked and stays until the chunk is freed, which waits for
 * the grace period: read inside a read section. item_rescue checks again
 * under the key's stripe lock that the key still names this chunk. */
static void rescue_page(storage_thread *t, int src, size_t pg, bool to_disk)
{
    struct slabclass *sc = &g_classes[src];
    char key[KEY_MAX_LENGTH];
    /* Stores into this class may be evicting for a chunk right now (they
     * give up after a few rounds): a rescue that took the chunks they free
     * made one answer "out of memory" in a cold make check. So the rescue
     * leaves a reserve of free chunks to them, and what it cannot place
     * above the reserve is evicted, as before. */
    uint32_t reserve = rescue_reserve(sc);
    for (uint32_t i = 0; i < sc->perpage; i++) {
        pthread_mutex_lock(&sc->lock);
        bool room = sc->free_count > reserve || (sc->bump_page >= 0 && sc->bump_next < sc->perpage) ||
                    atomic_load(&g_pages_next) < g_pages_max;
        pthread_mutex_unlock(&sc->lock);
        if (!room && !to_disk) return;
        item *it = slabs_chunk_at(pg, i, sc->size);
        epoch_enter(t);
        uint8_t fl = atomic_load_explicit(&it->iflags, memory_order_acquire);
        bool linked = fl != ITEM_FREE && fl != ITEM_DATA && (fl & ITEM_LINKED);
        size_t nkey = linked ? item_nkey(it) : 0;
        if (linked) memcpy(key, item_key(it), nkey);
        epoch_exit(t);
        if (!linked) continue;
        /* a page for stubs: its values go to disk, as the flusher's would */
        if ((to_disk && ext_hooks()->flush_item(t, it, key, nkey)) || (room && item_rescue(t, it, key, nkey)))
            atomic_fetch_add(&g_slab_rescues, 1);
    }
}

/* Empties page pg of class src and gives it to dst. Mover lock held.
 * evict=false only takes a page that is already empty (-M). */
static bool move_page(storage_thread *t, int src, int dst, size_t pg, bool evict, bool to_disk)
{
    struct slabclass *sc = &g_classes[src];
    pthread_mutex_lock(&sc->lock);
    if (atomic_load_explicit(&g_page_cls[pg], memory_order_relaxed) != src || g_pages[pg].draining ||
        (!evict && g_pages[pg].used != 0)) {
        pthread_mutex_unlock(&sc->lock);
        return false;
    }
    start_draining(sc, pg);
    bool drained = g_pages[pg].used == 0;
    pthread_mutex_unlock(&sc->lock);

    if (!drained) rescue_page(t, src, pg, to_disk);
    const char *lo = g_region + pg * g_page_size, *hi = lo + g_page_size;
    /* Zero-copy readers hold a chunk only while its bytes are sent: give
     * them a bounded moment, then give up on this page. */
    for (int attempt = 0; attempt < 100 && !drained; attempt++) {
        if (attempt > 0) {
            struct timespec ts = {0, 1000 * 1000};
            nanosleep(&ts, NULL);
        }
        purge_page(src, pg, lo, hi);
        pthread_mutex_lock(&sc->lock);
        drained = g_pages[pg].used == 0;
        pthread_mutex_unlock(&sc->lock);
    }
    pthread_mutex_lock(&sc->lock);
    if (g_pages[pg].used != 0) {
        stop_draining(sc, pg);
        pthread_mutex_unlock(&sc->lock);
        atomic_fetch_add(&moves_failed, 1);
        if (log_wants(LOG_SYSEVENTS)) log_sysevent("type=slab_move src=%d dst=%d state=fail", src, dst);
        return false;
    }
    if (dst == 0) {
        /* memcached's global page pool: here the emptied page's chunks stay
         * free in src, and slabs_acquire_page takes a class's page's worth
         * of free chunks before anything that holds items */
        stop_draining(sc, pg);
        pthread_mutex_unlock(&sc->lock);
        atomic_fetch_add(&g_slab_moves, 1);
        return true;
    }
    atomic_fetch_sub(&sc->pages, 1);
    atomic_fetch_add(&sc->pages_moved_out, 1);
    pthread_mutex_unlock(&sc->lock);
    slabs_give_page(pg, dst);
    atomic_fetch_add(&g_slab_moves, 1);
    if (log_wants(LOG_SYSEVENTS)) log_sysevent("type=slab_move src=%d dst=%d state=ok", src, dst);
    if (g_cfg.verbose > 1) fprintf(stderr, "cachetd: slab page moved from class %d to class %d\n", src, dst);
    return true;
}

/* A class other than dst with a spare page, round robin from where the last
 * pick stopped (memcached's slabs_pick_any_for_reassign), or -1. */
static int pick_any_source(int dst)
{
    static unsigned cur;
    for (unsigned tries = 0; tries < g_nclasses; tries++) {
        cur = cur % g_nclasses + 1;
        if ((int)cur != dst && atomic_load(&g_classes[cur].pages) > 1) return (int)cur;
    }
    return -1;
}

enum slabs_reassign_result storage_slabs_reassign(storage_thread *t, int src, int dst)
{
    if (g_cfg.no_slab_reassign) return SLABS_REASSIGN_DISABLED;
    if (pthread_mutex_trylock(&mover_lock) != 0) return SLABS_REASSIGN_BUSY;
    enum slabs_reassign_result res = SLABS_REASSIGN_OK;
    if (src == dst) {
        res = SLABS_REASSIGN_SAME;
    } else {
        if (src == -1) src = pick_any_source(dst);
        if (src < 0 || (unsigned)src > g_nclasses || dst < 0 || (unsigned)dst > g_nclasses)
            res = SLABS_REASSIGN_BADCLASS;
        else if (atomic_load(&g_classes[src].pages) < 2)
            res = SLABS_REASSIGN_NOSPARE;
    }
    if (res == SLABS_REASSIGN_OK) {
        size_t pg = cheapest_page(src);
        /* memcached answers OK once the move is scheduled, and a move can
         * still fail on busy items (slab_reassign_busy_items) */
        if (pg < g_pages_max) move_page(t, src, dst, pg, true, false);
    }
    pthread_mutex_unlock(&mover_lock);
    return res;
}

bool slabs_test_move_page_of(storage_thread *t, const item *it)
{
    size_t pg = slabs_page_index(it);
    int src = atomic_load_explicit(&g_page_cls[pg], memory_order_relaxed);
    int dst = src == 1 ? 2 : 1;
    if (src == 0 || (int)g_nclasses < 2) return false;
    pthread_mutex_lock(&mover_lock);
    bool moved = move_page(t, src, dst, pg, true, false);
    pthread_mutex_unlock(&mover_lock);
    return moved;
}

/* Hysteresis for the background pass: a class that just received a page
 * does not give one back within the same few seconds. */
static bool recently_grown(int c)
{
    uint32_t lm = atomic_load(&g_classes[c].last_move_in);
    return lm && now_time() - lm < 3;
}

static bool is_stub_class(int c) { return (unsigned)c < slabs_first_item_class(); }

bool slabs_acquire_page_for_stubs(storage_thread *t, int dst)
{
    if (g_cfg.no_slab_reassign || g_cfg.evict_disabled ||
        atomic_load_explicit(&g_slab_automove, memory_order_relaxed) == 0)
        return false;
    pthread_mutex_lock(&mover_lock);
    int src = 0;
    rel_time_t oldest = 0;
    for (unsigned c = 1; c <= g_nclasses; c++) {
        if ((int)c == dst || is_stub_class((int)c) || atomic_load(&g_classes[c].pages) < 2) continue;
        rel_time_t age = bags_oldest_age((int)c);
        if (!src || age > oldest) { src = (int)c; oldest = age; }
    }
    size_t pg = src ? cheapest_page(src) : g_pages_max;
    moving_for_stubs = true;
    bool moved = pg < g_pages_max && move_page(t, src, dst, pg, true, true);
    moving_for_stubs = false;
    pthread_mutex_unlock(&mover_lock);
    return moved;
}

bool slabs_acquire_page(storage_thread *t, int dst)
{
    if (moving_for_stubs) return false;
    /* Where to take a page from, cheapest first:
     *  1. a class holding at least a page's worth of free chunks whose
     *     cheapest page's live items fit in its other free chunks (nothing
     *     live is lost);
     *  2. the class whose oldest item is the oldest, among classes with
     *     more than one page (the LRU across classes, and no class is left
     *     with nothing), extstore's stub classes after all others (see the
     *     header);
     *  3. any class with a page.
     * With -M (evict_disabled) only an empty page may move. */
    bool evict = !g_cfg.evict_disabled;
    /* memcached moves no page at slab_automove 0 or without slab_reassign
     * (only `slabs reassign` at level 0): a store whose class has nothing
     * to evict is refused instead. Users set these to keep a class's items
     * from being evicted for another class. */
    if (g_cfg.no_slab_reassign || atomic_load_explicit(&g_slab_automove, memory_order_relaxed) == 0) {
        struct slabclass *dc = &g_classes[dst];
        pthread_mutex_lock(&dc->lock);
        bool have = dc->free_count > 0 || (dc->bump_page >= 0 && dc->bump_next < dc->perpage) ||
                    atomic_load(&g_pages_next) < g_pages_max;
        pthread_mutex_unlock(&dc->lock);
        return have;
    }
    pthread_mutex_lock(&mover_lock);
    /* Somebody may have given us memory while we waited for the lock. */
    struct slabclass *dc = &g_classes[dst];
    pthread_mutex_lock(&dc->lock);
    bool have = dc->free_count > 0 || (dc->bump_page >= 0 && dc->bump_next < dc->perpage) ||
                atomic_load(&g_pages_next) < g_pages_max;
    pthread_mutex_unlock(&dc->lock);
    if (have) { pthread_mutex_unlock(&mover_lock); return true; }

    int order[MAX_SLAB_CLASSES];
    int n = 0;
    int by_free = 0;
    uint64_t most_free = 0;
    for (unsigned c = 1; c <= g_nclasses; c++) {
        if ((int)c == dst || atomic_load(&g_classes[c].pages) == 0) continue;
        struct slabclass *sc = &g_classes[c];
        pthread_mutex_lock(&sc->lock);
        uint64_t fr = slabs_free_bytes_locked(sc);
        pthread_mutex_unlock(&sc->lock);
        if (fr < g_page_size || fr <= most_free) continue;
        size_t pg = cheapest_page((int)c);
        if (pg >= g_pages_max) continue;
        pthread_mutex_lock(&sc->lock);
        bool rescuable = page_rescuable_locked(sc, pg);
        pthread_mutex_unlock(&sc->lock);
        if (rescuable) { most_free = fr; by_free = (int)c; }
    }
    if (by_free) order[n++] = by_free;
    if (evict) {
        /* classes with more than one page, oldest items first, the stub
         * classes last; then the classes with one page, the stub classes
         * last again */
        for (int pass = 0; pass < 4; pass++) {
            int picked[MAX_SLAB_CLASSES + 1] = {0};
            for (;;) {
                int best = 0;
                rel_time_t best_age = 0;
                for (unsigned c = 1; c <= g_nclasses; c++) {
                    unsigned np = atomic_load(&g_classes[c].pages);
                    if ((int)c == dst || (int)c == by_free || picked[c] || np == 0) continue;
                    if ((pass < 2 ? np < 2 : np != 1) || is_stub_class((int)c) != (pass % 2 == 1)) continue;
                    rel_time_t age = bags_oldest_age((int)c);
                    if (!best || age > best_age) { best = (int)c; best_age = age; }
                }
                if (!best) break;
                picked[best] = 1;
                order[n++] = best;
            }
        }
    }
    /* A page that does not empty (a store in progress holds a chunk of it,
     * not yet linked, so nothing can evict it) is not the class's only one:
     * its next cheapest pages are tried before the next class. Going on to
     * the next class at once gave away a stub class's only page, and with it
     * every stub of a value on disk, while the class of chained heads before
     * it had 31 more pages. */
    enum { TRIES_PER_CLASS = 4 };
    bool moved = false;
    for (int i = 0; i < n && !moved; i++) {
        size_t tried[TRIES_PER_CLASS];
        for (unsigned k = 0; k < TRIES_PER_CLASS && !moved; k++) {
            size_t pg = cheapest_page_but(order[i], tried, k);
            if (pg >= g_pages_max) break;
            tried[k] = pg;
            moved = move_page(t, order[i], dst, pg, evict, false);
        }
    }
    if (!evict && !moved) {
        /* -M: any class's empty page */
        for (unsigned c = 1; c <= g_nclasses && !moved; c++) {
            if ((int)c == dst || atomic_load(&g_classes[c].pages) == 0) continue;
            size_t pg = cheapest_page((int)c);
            if (pg < g_pages_max) moved = move_page(t, (int)c, dst, pg, false, false);
        }
    }
    if (moved) atomic_fetch_add(&moves_on_demand, 1);
    pthread_mutex_unlock(&mover_lock);
    return moved;
}

/* Balancing by age: if a class is evicting items that are much younger than
 * the oldest items another class keeps, memory is stranded in the other. */
static bool pick_by_age(int *src_out, int *dst_out)
{
    rel_time_t now = now_time();
    if (now == last_balance) return false;
    last_balance = now;
    if (atomic_load(&g_pages_next) < g_pages_max) return false;   /* memory not full yet */
    int dst = 0;
    rel_time_t dst_age = 0;
    for (unsigned c = 1; c <= g_nclasses; c++) {
        uint64_t ev = atomic_load(&g_class_stats[c].evicted);
        uint64_t delta = ev - last_evicted[c];
        last_evicted[c] = ev;
        if (delta == 0) continue;
        rel_time_t age = bags_oldest_age((int)c);
        if (!dst || age < dst_age) { dst = (int)c; dst_age = age; }
    }
    if (!dst) return false;
    int src = 0;
    rel_time_t src_age = 0;
    for (unsigned c = 1; c <= g_nclasses; c++) {
        if ((int)c == dst || atomic_load(&g_classes[c].pages) < 2 || recently_grown((int)c) || is_stub_class((int)c))
            continue;
        rel_time_t age = bags_oldest_age((int)c);
        if (age > src_age) { src = (int)c; src_age = age; }
    }
    if (!src || src_age <= 2 * dst_age + 5) return false;
    *src_out = src;
    *dst_out = dst;
    return true;
}

bool slabs_rebalance_once(void)
{
    if (g_cfg.evict_disabled) return false;
    pthread_mutex_lock(&mover_lock);
    int src = 0, dst = 0;
    bool moved = false;
    if (slabs_gain_enabled() ? slabs_gain_pick(&src, &dst) : pick_by_age(&src, &dst)) {
        size_t pg = cheapest_page(src);
        if (pg < g_pages_max) moved = move_page(mover_ctx, src, dst, pg, true, false);
    }
    pthread_mutex_unlock(&mover_lock);
    return moved;
}


void storage_set_slab_automove(int level) { atomic_store(&g_slab_automove, level); }
int  slabs_automove_level(void) { return atomic_load(&g_slab_automove); }

static bool mover_pass(void *arg)
{
    (void)arg;
    if (atomic_load_explicit(&g_slab_automove, memory_order_relaxed) == 0) return false;
    return slabs_rebalance_once();
}

int slabs_start_thread(void)
{
    if (!mover_ctx) mover_ctx = storage_thread_register();
    return bgthread_start(&mover);
}

void slabs_stop_thread(void) { bgthread_stop(&mover); }

/* Tests without the mover thread still want a context for purges. */
void slabs_set_mover_ctx(storage_thread *t) { mover_ctx = t; }

void slabs_mover_reset(void)
{
    memset(last_evicted, 0, sizeof last_evicted);
    last_balance = 0;
}

void slabs_mover_stats(stat_writer w, void *ctx)
{
    w(ctx, "slab_reassign_busy_items", "%llu", (unsigned long long)atomic_load(&moves_failed));
    w(ctx, "slab_reassign_rescues", "%llu", (unsigned long long)atomic_load(&g_slab_rescues));
    w(ctx, "slabs_moved", "%llu", (unsigned long long)atomic_load(&g_slab_moves));
    w(ctx, "slabs_moved_on_demand", "%llu", (unsigned long long)atomic_load(&moves_on_demand));
}
