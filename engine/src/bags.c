/*
 * bags.c - the bag LRU of seed 000, one per slab class, its cleaner thread
 * and eviction.
 *
 * Why bags instead of memcached's doubly linked LRU: a doubly linked list
 * needs a lock for every bump, so every GET of a hot item would serialise on
 * the LRU lock. Here a class keeps a chain of bags (oldest -> ... -> newest
 * alternate -> newest); a bag is a singly linked list of items that were
 * stored or touched in the same window.
 *  - A store appends to the newest bag with a CAS on the last item's link
 *    (no lock).
 *  - A GET only stamps the item with the id of the newest bag and the time
 *    (two relaxed stores, skipped when unchanged): no list surgery, no CAS.
 *  - The cleaner thread opens a new bag when the newest is full, walks the
 *    old bags, moves items whose stamp says they were touched into the newest
 *    alternate bag (the previous newest, so workers appending to the newest
 *    do not contend with it), drops dead (deleted/replaced), expired and
 *    flushed items and extstore stubs whose page is gone, and merges small
 *    bags into their newer neighbour.
 *  - Eviction takes the class's eviction lock, walks the first N items of
 *    the oldest bag, gives touched items a second chance (move forward), and
 *    evicts the first untouched one nobody holds a reference to.
 *  - flush_all cuts the bags: a new bag is opened and everything older is
 *    swept by the cleaner (reads already treat flushed items as misses).
 *
 * Bags are only edited under the class's lock (cleaner and evictors), and a
 * bag is edited only once it has been closed for a grace period, so appends
 * that raced with closing it have landed. extstore's flusher only reads
 * them, under the same lock, in holds of WALK_HOLD_MAX items; between holds
 * the edits keep its place valid (bags_ext_candidates). Items leave a bag into a local
 * limbo list and go back to the slab allocator after the next grace period
 * (see assoc.c for the whole reclamation scheme).
 */
#include "storage_internal.h"
#include "ext_hooks.h"
#include "bgthread.h"
#include "logger.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define EVICT_SEARCH 32        /* seed 000: "among the first N items" */
#define EVICT_BATCH 8          /* chunks freed per eviction call: amortises the grace period */
#define BAG_TARGET_MIN 256
#define CLEAN_BUDGET 10000     /* items visited per class per pass: bounds a pass's work over a class */
/* Items visited per hold of the class lock. Between two slices the cleaner
 * drops the lock and yields: every thread of a pod shares its exclusive
 * cores, and under SCHED_FIFO (the benchmark, RT pods) a worker woken while
 * the cleaner runs waits until the cleaner blocks or yields. A whole
 * CLEAN_BUDGET in one hold was ~1.1 ms (a cache miss per item), which a
 * request arriving meanwhile waited out: p99 1.4-4.8 ms at 20k/s after an
 * overload. 256 items are a few tens of microseconds. */
#define CLEAN_SLICE 256
#define BAG_MAX_AGE 5          /* seconds before an idle newest bag is closed anyway */
#define SWEEP_INTERVAL 60      /* seconds between sweeps that only look for expired items */
/* A stub orphaned by a page eviction may sit in a bag still open to appends,
 * which a sweep skips; every such bag is closed and editable by then. */
#define ORPHAN_RESWEEP (2 * BAG_MAX_AGE + 2)

struct bag {
    _Atomic uint32_t head;      /* oldest item */
    _Atomic uint32_t tail;      /* hint: an item at or near the end */
    _Atomic uint32_t count;
    uint16_t id;
    struct bag *newer, *older;
    rel_time_t opened;
    uint64_t closed_epoch;      /* epoch_advance() when workers stopped appending; 0 = open */
    uint32_t flusher_at;        /* the flusher's walk, paused in this bag: the last item it looked at (0: none yet) */
};

struct lru {
    pthread_mutex_t lock;       /* the eviction lock of seed 000, per class */
    _Atomic(struct bag *) newest;
    struct bag *alt;
    struct bag *oldest;
    uint16_t next_id;
    _Atomic uint32_t nbags;
    struct bag *cursor;         /* the bag the cleaner's sweep resumes in (NULL: the oldest) */
    item *cursor_prev;          /* ... after this item of it (NULL: at its head); bag_remove keeps it in the bag */
    struct bag *flusher_bag;    /* where bags_ext_candidates' walk resumes after dropping the lock (NULL: no walk) */
    _Atomic uint32_t evictors_waiting;  /* bags_evict calls queued on `lock`: the flusher's walk lets them in */
    _Atomic uint32_t oldest_time;  /* last access of the oldest item, kept for readers that take no lock */
    bool sweeping;              /* a sweep over all bags is under way */
    rel_time_t last_sweep;
    uint64_t orphans_seen;      /* ext_hooks()->records_orphaned_total() a sweep last started with */
    rel_time_t orphan_resweep;  /* when to sweep again for them (0: no need) */
} __attribute__((aligned(64)));

struct class_stats g_class_stats[MAX_SLAB_CLASSES + 1] __attribute__((aligned(64)));
_Atomic uint32_t g_last_eviction_age;
static struct lru lrus[MAX_SLAB_CLASSES + 1];
/* What a GET stamps: kept apart from the lru structs, whose locks the
 * cleaner and evictors write all the time (no false sharing on GETs). */
static _Atomic uint16_t newest_ids[MAX_SLAB_CLASSES + 1];
static _Atomic uint64_t cleaner_passes, items_moved, bags_merged, items_merged, bags_opened;
/* items the cleaner visited (swept or retagged in a merge), and the most it
 * visited in one hold of a class lock: what a worker may wait behind */
static _Atomic uint64_t cleaner_items_visited, cleaner_slice_max, cleaner_sweeps;
static _Atomic uint32_t bag_target_min = BAG_TARGET_MIN;

static bool cleaner_pass(void *arg);
static struct bgthread cleaner = { .name = "cachet-cleaner", .pass = cleaner_pass, .period_ms = 50 };
static storage_thread *cleaner_ctx;
static pthread_mutex_t cleaner_lock = PTHREAD_MUTEX_INITIALIZER; /* one cleaner pass at a time */

void bags_set_target_min(uint32_t n) { atomic_store(&bag_target_min, n ? n : 1); }
unsigned bags_count(int clsid) { return atomic_load(&lrus[clsid].nbags); }

static struct bag *bag_new(struct lru *l)
{
    struct bag *b = calloc(1, sizeof(*b));
    if (!b) return NULL;
    b->id = l->next_id;
    l->next_id = (uint16_t)((l->next_id + 1) & ITEM_BAG_MASK);
    b->opened = now_time();
    atomic_fetch_add(&l->nbags, 1);
    atomic_fetch_add(&bags_opened, 1);
    return b;
}

int bags_init(void)
{
    unsigned n = slabs_class_count();
    for (unsigned c = 1; c <= n; c++) {
        struct lru *l = &lrus[c];
        pthread_mutex_init(&l->lock, NULL);
        l->next_id = 1;
        atomic_store(&l->nbags, 0);
        struct bag *b = bag_new(l);
        if (!b) return -1;
        l->oldest = b;
        l->alt = b;
        atomic_store(&l->newest, b);
        atomic_store(&newest_ids[c], b->id);
        l->cursor = NULL;
        l->sweeping = false;
        l->last_sweep = now_time();
    }
    memset(g_class_stats, 0, sizeof g_class_stats);
    return 0;
}

void bags_destroy(void)
{
    unsigned n = slabs_class_count();
    for (unsigned c = 1; c <= n; c++) {
        struct bag *b = lrus[c].oldest;
        while (b) { struct bag *nx = b->newer; free(b); b = nx; }
        lrus[c].oldest = lrus[c].alt = NULL;
        atomic_store(&lrus[c].newest, NULL);
    }
}

/* Lock-free append (seed 000 "insert a new item into the LRU"). */
static void append_to(struct bag *b, item *it)
{
    uint32_t h = item_handle(it);
    atomic_store_explicit(&it->lru_next, 0, memory_order_relaxed);
    for (;;) {
        uint32_t tail = atomic_load_explicit(&b->tail, memory_order_acquire);
        if (tail == 0) {
            uint32_t z = 0;
            if (atomic_compare_exchange_strong_explicit(&b->head, &z, h, memory_order_acq_rel,
                                                        memory_order_acquire)) {
                atomic_store_explicit(&b->tail, h, memory_order_release);
                break;
            }
            tail = z;   /* somebody else started the list: append behind it */
        }
        item *t = handle_item(tail);
        for (;;) {
            uint32_t n = atomic_load_explicit(&t->lru_next, memory_order_acquire);
            if (!n) break;
            t = handle_item(n);
        }
        uint32_t z = 0;
        if (atomic_compare_exchange_strong_explicit(&t->lru_next, &z, h, memory_order_acq_rel,
                                                    memory_order_acquire)) {
            atomic_store_explicit(&b->tail, h, memory_order_release);
            break;
        }
    }
    atomic_fetch_add_explicit(&b->count, 1, memory_order_relaxed);
}

void bags_append(storage_thread *t, item *it)
{
    (void)t;
    int clsid = slabs_clsid_of(it);
    struct bag *b = atomic_load_explicit(&lrus[clsid].newest, memory_order_acquire);
    uint16_t old = atomic_load_explicit(&it->bag, memory_order_relaxed);
    atomic_store_explicit(&it->bag, (uint16_t)((old & ITEM_FETCHED_BIT) | b->id), memory_order_relaxed);
    append_to(b, it);
}

/* Times only move forward: a reader whose view predates a flush_all stamps
 * at most the flush's base (see storage_flush), and must not pull back an
 * item that a newer reader stamped. Two readers racing may leave the lower
 * of two recent stamps, which only ages the item by a second. */
static void stamp_access(item *it, rel_time_t stamp)
{
    if (atomic_load_explicit(&it->time, memory_order_relaxed) < stamp)
        atomic_store_explicit(&it->time, stamp, memory_order_relaxed);
}

/* A bump that is not a fetch (memcached: a failed add refreshes the item
 * without marking it fetched). */
void bags_bump(item *it, int clsid, rel_time_t stamp)
{
    uint16_t cur = atomic_load_explicit(&it->bag, memory_order_relaxed);
    uint16_t want = (uint16_t)(atomic_load_explicit(&newest_ids[clsid], memory_order_relaxed) | (cur & ITEM_FETCHED_BIT));
    if (cur != want) atomic_store_explicit(&it->bag, want, memory_order_relaxed);
    stamp_access(it, stamp);
}

void bags_stamp(item *it, int clsid, rel_time_t stamp)
{
    uint16_t want = (uint16_t)(atomic_load_explicit(&newest_ids[clsid], memory_order_relaxed) | ITEM_FETCHED_BIT);
    if (atomic_load_explicit(&it->bag, memory_order_relaxed) != want)
        atomic_store_explicit(&it->bag, want, memory_order_relaxed);
    stamp_access(it, stamp);
}

/* Class lock held. The old newest becomes the newest alternate. */
static bool open_bag(struct lru *l)
{
    struct bag *b = bag_new(l);
    if (!b) return false;
    struct bag *cur = atomic_load_explicit(&l->newest, memory_order_relaxed);
    b->older = cur;
    cur->newer = b;
    atomic_store_explicit(&l->newest, b, memory_order_release);
    atomic_store_explicit(&newest_ids[l - lrus], b->id, memory_order_relaxed);
    l->alt = cur;
    /* Workers that loaded `cur` before the switch may still append to it. */
    cur->closed_epoch = epoch_advance();
    return true;
}

/* Can bag b be edited: not a target for appends, and closed long enough. */
static bool bag_editable(struct lru *l, struct bag *b)
{
    if (b == atomic_load_explicit(&l->newest, memory_order_relaxed) || b == l->alt) return false;
    return b->closed_epoch == 0 || epoch_passed(b->closed_epoch);
}

/* Unlinks b (empty or merged) from the chain; class lock held. */
static void drop_bag(struct lru *l, struct bag *b)
{
    if (b->older) b->older->newer = b->newer; else l->oldest = b->newer;
    if (b->newer) b->newer->older = b->older;
    if (l->cursor == b) l->cursor = b->newer;   /* merged into it ahead of its items, or empty (cursor_prev NULL) */
    if (l->flusher_bag == b) {   /* emptied while the walk was paused at its head (flusher_at 0) */
        l->flusher_bag = b->newer;
        if (b->newer) b->newer->flusher_at = 0;
    }
    atomic_fetch_sub(&l->nbags, 1);
    free(b);
}

/* Items out of their bags, freed after a grace period. The cleaner's
 * (tracked) also says which classes it holds items of (held, bit c-1). */
struct limbo { item *head; unsigned n; bool tracked; uint64_t held; };

/* Dead items of each class that the cleaner took out of their bags and
 * frees after its next grace period (bags_clean_once's limbo). Until then
 * they are neither in a bag, where an evictor would reclaim them first and
 * uncounted, nor on the free list: an evictor saw only live items at its
 * bags' heads and evicted eight of them, while thousands of chunks of its
 * class were a grace period from free (a depth-1 fill of 4 KB values with
 * extstore lost 80-130 values a run this way, one batch of 8 per sweep of
 * the values the flusher had replaced by stubs). So an evictor waits for
 * those instead (cleaner_wait). Written by the cleaner only (cleaner_lock),
 * raised under the class's lock before it lets an evictor in. */
static _Atomic uint32_t cleaner_holds[MAX_SLAB_CLASSES + 1];
/* Evictors sleeping in cleaner_wait, all classes: the cleaner frees its
 * limbo at its next yield rather than when it has gathered a batch. */
static _Atomic uint32_t cleaner_waiters;
#define CLEANER_WAIT_MAX_MS 20

static void limbo_push(struct limbo *lb, item *it)
{
    atomic_store_explicit(&it->lru_next, lb->head ? item_handle(lb->head) : 0, memory_order_relaxed);
    lb->head = it;
    lb->n++;
}

/* Everything in limbo left its bag (and the hash table) before this call. */
static void limbo_free(struct limbo *lb)
{
    if (!lb->head) return;
    epoch_synchronize();
    item *it = lb->head;
    while (it) {
        uint32_t nx = atomic_load_explicit(&it->lru_next, memory_order_relaxed);
        item_free_dead(it);
        it = nx ? handle_item(nx) : NULL;
    }
    lb->head = NULL;
    lb->n = 0;
}

/* The cleaner's limbo back to the free lists; then no evictor waits for it. */
static void cleaner_limbo_free(struct limbo *lb)
{
    limbo_free(lb);
    for (unsigned c = 1; lb->held; c++)
        if (lb->held & (1ull << (c - 1))) {
            atomic_store_explicit(&cleaner_holds[c], 0, memory_order_release);
            lb->held &= ~(1ull << (c - 1));
        }
}

/* An evictor of class clsid while the cleaner holds dead items of it: waits,
 * outside any read section (the cleaner's grace period waits for those),
 * until they are free, for what the store may still sleep (one budget with
 * the flusher wait: store_wait_allowance_us; none outside a store). True
 * only if this class's free chunks rose meanwhile: the limbo may have held
 * another class's items, or other stores took them, and the caller counts
 * true as progress (a store retrying on "progress" that freed it nothing
 * slept CLEANER_WAIT_MAX_MS in each of 64 rounds). */
static bool cleaner_wait(storage_thread *t, int clsid)
{
    if (!atomic_load_explicit(&cleaner_holds[clsid], memory_order_acquire)) return false;
    int64_t allowance = store_wait_allowance_us(t);
    if (allowance > CLEANER_WAIT_MAX_MS * 1000) allowance = CLEANER_WAIT_MAX_MS * 1000;
    if (allowance <= 0) return false;
    uint64_t free_before = slabs_class_free_bytes(clsid);
    unsigned depth = epoch_step_out(t);
    struct timespec step = { 0, 50 * 1000L };
    int64_t start = store_wait_clock_us(), slept = 0;
    atomic_fetch_add_explicit(&cleaner_waiters, 1, memory_order_relaxed);
    while (atomic_load_explicit(&cleaner_holds[clsid], memory_order_acquire) && slept < allowance) {
        nanosleep(&step, NULL);
        slept = store_wait_clock_us() - start;
    }
    atomic_fetch_sub_explicit(&cleaner_waiters, 1, memory_order_relaxed);
    epoch_step_in(t, depth);
    bool rose = slabs_class_free_bytes(clsid) > free_before;
    store_wait_spent(t, slept, rose);
    return rose;
}

static inline uint32_t item_refs(item *it)
{
    return item_refcounted(it) ? atomic_load_explicit(item_ref_ptr(it), memory_order_acquire) : 1;
}

/* Removes `it` (whose predecessor in b is prev, or NULL) from bag b, a bag
 * of l. Class lock held. The sweep's resume point moves back to prev. */
static void bag_remove(struct lru *l, struct bag *b, item *prev, item *it)
{
    if (l->cursor_prev == it) l->cursor_prev = prev;
    uint32_t next = atomic_load_explicit(&it->lru_next, memory_order_relaxed);
    if (b->flusher_at == item_handle(it)) b->flusher_at = prev ? item_handle(prev) : 0;
    if (prev) atomic_store_explicit(&prev->lru_next, next, memory_order_relaxed);
    else atomic_store_explicit(&b->head, next, memory_order_relaxed);
    if (atomic_load_explicit(&b->tail, memory_order_relaxed) == item_handle(it))
        atomic_store_explicit(&b->tail, prev ? item_handle(prev) : 0, memory_order_relaxed);
    atomic_fetch_sub_explicit(&b->count, 1, memory_order_relaxed);
}

static void move_to_alt(struct lru *l, struct bag *b, item *prev, item *it)
{
    bag_remove(l, b, prev, it);
    uint16_t old = atomic_load_explicit(&it->bag, memory_order_relaxed);
    atomic_store_explicit(&it->bag, (uint16_t)((old & ITEM_FETCHED_BIT) | l->alt->id), memory_order_relaxed);
    append_to(l->alt, it);
    atomic_fetch_add_explicit(&items_moved, 1, memory_order_relaxed);
}

enum fate { KEEP, REMOVED, BUSY };

/* Unlinks a linked item for eviction/expiry. UNLINK_BUSY if its stripe was
 * busy (we never wait for a stripe while holding the class lock on the
 * eviction path; the cleaner may); UNLINK_ALREADY if a request unlinked it
 * between the caller's unlocked look and the stripe lock (a GET that found it
 * dead, a delete, a store over it): it leaves the bag all the same, but that
 * request already counted it, so no eviction or reclaim is counted twice. */
enum unlink_result { UNLINK_BUSY, UNLINK_DONE, UNLINK_ALREADY };
static enum unlink_result unlink_for_reclaim(item *it, bool wait)
{
    uint32_t hv = hash_key(item_key(it), item_nkey(it));
    if (wait) stripe_lock(hv);
    else if (!stripe_trylock(hv)) return UNLINK_BUSY;
    bool linked = item_fl(it) & ITEM_LINKED;
    if (linked) item_unlink_locked(it, hv);
    stripe_unlock(hv);
    return linked ? UNLINK_DONE : UNLINK_ALREADY;
}

/* Dead or invalid items leave the bag; returns their fate. */
static enum fate reclaim_if_dead(struct bag *b, item *prev, item *it, int clsid, struct limbo *lb, bool wait)
{
    uint8_t fl = item_fl(it);
    rel_time_t now = now_time();
    if (fl & ITEM_LINKED) {
        /* a stub whose page is gone goes too, as memcached's LRU crawler
         * reclaims a header whose page was evicted: a GET would miss anyway */
        bool live = item_is_live(it, now);
        if (live && !ext_hooks()->stub_orphaned(it)) return KEEP;
        bool unfetched = !(atomic_load_explicit(&it->bag, memory_order_relaxed) & ITEM_FETCHED_BIT);
        enum unlink_result u = unlink_for_reclaim(it, wait);
        if (u == UNLINK_BUSY) return BUSY;
        /* memcached's reclaimed and expired_unfetched: an expired or
         * flushed item whose memory the LRU takes back (and an orphaned
         * stub, which memcached's crawler reclaims). A deleted or replaced
         * one is not counted: it left when it was unlinked. */
        struct class_stats *cs = &g_class_stats[clsid];
        if (u == UNLINK_DONE) atomic_fetch_add_explicit(&cs->reclaimed, 1, memory_order_relaxed);
        if (u == UNLINK_DONE && !live) {
            if (unfetched) atomic_fetch_add_explicit(&cs->expired_unfetched, 1, memory_order_relaxed);
            if (!item_is_flushed(it, now)) atomic_fetch_add_explicit(&cs->expired, 1, memory_order_relaxed);
        }
    }
    bag_remove(&lrus[clsid], b, prev, it);
    atomic_fetch_sub_explicit(&g_class_stats[clsid].dead_waiting, 1, memory_order_relaxed);
    limbo_push(lb, it);
    return REMOVED;
}

/* Cleans bag b from the item after *prevp (its head if NULL), at most
 * budget items; leaves *prevp at the last item kept and says whether the
 * bag's end was reached. Returns items visited. Class lock held. */
static unsigned clean_bag(struct lru *l, struct bag *b, item **prevp, int clsid, struct limbo *lb,
                          unsigned budget, bool *finished)
{
    unsigned visited = 0;
    item *prev = *prevp;
    uint32_t h = prev ? atomic_load_explicit(&prev->lru_next, memory_order_relaxed)
                      : atomic_load_explicit(&b->head, memory_order_relaxed);
    while (h && visited < budget) {
        item *it = handle_item(h);
        uint32_t next = atomic_load_explicit(&it->lru_next, memory_order_relaxed);
        visited++;
        enum fate f = reclaim_if_dead(b, prev, it, clsid, lb, true);
        if (f == KEEP) {
            if ((atomic_load_explicit(&it->bag, memory_order_relaxed) & ITEM_BAG_MASK) != b->id) {
                move_to_alt(l, b, prev, it);
            } else {
                prev = it;
            }
        } else if (f == BUSY) {
            prev = it;
        }
        h = next;
    }
    *prevp = prev;
    *finished = h == 0;
    return visited;
}

/* A merge's walk over bag `from`: its items untouched since they entered
 * it take id `to`; returns how many items it holds, *last its last one. */
static uint32_t retag_items(const struct bag *from, uint16_t to, item **last)
{
    uint32_t h = atomic_load_explicit(&from->head, memory_order_relaxed), n = 0;
    *last = NULL;
    while (h) {
        item *it = handle_item(h);
        uint16_t tag = atomic_load_explicit(&it->bag, memory_order_relaxed);
        if ((tag & ITEM_BAG_MASK) == from->id)
            atomic_store_explicit(&it->bag, (uint16_t)((tag & ITEM_FETCHED_BIT) | to), memory_order_relaxed);
        *last = it;
        n++;
        h = atomic_load_explicit(&it->lru_next, memory_order_relaxed);
    }
    return n;
}

/* Merges bag b into its newer neighbour (seed 000 "merge two bags");
 * returns the items retagged. */
static uint32_t merge_into_newer(struct lru *l, struct bag *b)
{
    struct bag *n = b->newer;
    item *last;
    uint32_t moved = retag_items(b, n->id, &last);
    if (last) {
        atomic_store_explicit(&last->lru_next, atomic_load_explicit(&n->head, memory_order_relaxed),
                              memory_order_relaxed);
        if (!atomic_load_explicit(&n->head, memory_order_relaxed))
            atomic_store_explicit(&n->tail, item_handle(last), memory_order_relaxed);
        atomic_store_explicit(&n->head, atomic_load_explicit(&b->head, memory_order_relaxed), memory_order_relaxed);
        atomic_fetch_add_explicit(&n->count, moved, memory_order_relaxed);
        atomic_fetch_add_explicit(&items_merged, moved, memory_order_relaxed);
    }
    /* a sweep about to enter n has swept b already: it resumes behind b's items */
    if (l->cursor == n && !l->cursor_prev && last) l->cursor_prev = last;
    if (n->closed_epoch < b->closed_epoch) n->closed_epoch = b->closed_epoch;
    /* the flusher's paused walk: in b, it goes on among the same items, now
     * n's first; at n's head, it has looked at b's already */
    if (l->flusher_bag == b) {
        l->flusher_bag = n;
        n->flusher_at = b->flusher_at;
    } else if (l->flusher_bag == n && n->flusher_at == 0 && last) {
        n->flusher_at = item_handle(last);
    }
    atomic_store_explicit(&b->head, 0, memory_order_relaxed);
    atomic_store_explicit(&b->count, 0, memory_order_relaxed);
    drop_bag(l, b);
    atomic_fetch_add_explicit(&bags_merged, 1, memory_order_relaxed);
    return moved;
}

/* The other way round, when b is the bigger of the two: bag n = b->newer
 * joins b behind b's last item and takes b's id; returns the items retagged
 * (n's). The merged bag lists the same items in the same order either way,
 * so the cleaner retags whichever bag is smaller, and a merge fits a slice
 * when either does. */
static uint32_t merge_newer_into(struct lru *l, struct bag *b)
{
    struct bag *n = b->newer;
    uint32_t last = atomic_load_explicit(&b->tail, memory_order_relaxed);
    if (!last) last = atomic_load_explicit(&b->head, memory_order_relaxed);
    for (uint32_t nx; last && (nx = atomic_load_explicit(&handle_item(last)->lru_next, memory_order_relaxed)); )
        last = nx;   /* a closed bag's tail hint is its end, or a step before it */
    item *n_last;
    uint32_t moved = retag_items(n, b->id, &n_last);
    if (n_last) {
        uint32_t first = atomic_load_explicit(&n->head, memory_order_relaxed);
        if (last) atomic_store_explicit(&handle_item(last)->lru_next, first, memory_order_relaxed);
        else atomic_store_explicit(&b->head, first, memory_order_relaxed);
        atomic_store_explicit(&b->tail, item_handle(n_last), memory_order_relaxed);
        atomic_fetch_add_explicit(&b->count, moved, memory_order_relaxed);
        atomic_fetch_add_explicit(&items_merged, moved, memory_order_relaxed);
    }
    if (l->cursor == n) {   /* the sweep resumes at the same item, now in b */
        l->cursor = b;
        if (!l->cursor_prev && last) l->cursor_prev = handle_item(last);
    }
    if (l->flusher_bag == n) {   /* the flusher's paused walk too; at n's head it has looked at b's items */
        l->flusher_bag = b;
        b->flusher_at = n->flusher_at ? n->flusher_at : last;
    }
    if (b->closed_epoch < n->closed_epoch) b->closed_epoch = n->closed_epoch;
    atomic_store_explicit(&n->head, 0, memory_order_relaxed);
    atomic_store_explicit(&n->count, 0, memory_order_relaxed);
    drop_bag(l, n);
    atomic_fetch_add_explicit(&bags_merged, 1, memory_order_relaxed);
    return moved;
}

static uint32_t bag_target(int clsid)
{
    uint64_t items = atomic_load_explicit(&g_class_stats[clsid].curr_items, memory_order_relaxed);
    uint64_t t = items / 32;
    uint32_t mn = atomic_load(&bag_target_min);
    return t < mn ? mn : (uint32_t)(t > 1u << 20 ? 1u << 20 : t);
}

/* Extstore orphaned enough stubs since this class's last sweep started to
 * be worth one (the dead items' rule: the orphans of all classes against
 * this one's items), or the bags open then have closed since: those stubs
 * read as misses but would stay in RAM until evicted. */
static bool many_orphans(const struct lru *l, uint64_t live)
{
    return ext_hooks()->records_orphaned_total() - l->orphans_seen > live / 8 + 64;
}

static bool class_has_new_orphans(int clsid, const struct lru *l, uint64_t live)
{
    if (clsid > ext_hooks()->stub_class_max()) return false;
    return many_orphans(l, live) || (l->orphan_resweep && now_time() >= l->orphan_resweep);
}

static void note_orphans_swept(int clsid, struct lru *l, rel_time_t now)
{
    uint64_t live = atomic_load_explicit(&g_class_stats[clsid].curr_items, memory_order_relaxed);
    if (clsid <= ext_hooks()->stub_class_max() && many_orphans(l, live))
        l->orphan_resweep = now + ORPHAN_RESWEEP;
    else if (l->orphan_resweep && now >= l->orphan_resweep)
        l->orphan_resweep = 0;
    l->orphans_seen = ext_hooks()->records_orphaned_total();
}

/* Sweeping every bag costs a pass over the class; do it when enough dead
 * (deleted/replaced) items or orphaned stubs wait to be reclaimed, or after
 * a flush. */
static bool class_needs_sweep(int clsid, const struct lru *l, bool flush)
{
    uint64_t dead = atomic_load_explicit(&g_class_stats[clsid].dead_waiting, memory_order_relaxed);
    uint64_t live = atomic_load_explicit(&g_class_stats[clsid].curr_items, memory_order_relaxed);
    return flush || dead > live / 8 + 64 || (live > 0 && class_has_new_orphans(clsid, l, live));
}

static void note_oldest(struct lru *l);

static void note_slice(unsigned visited)
{
    atomic_fetch_add_explicit(&cleaner_items_visited, visited, memory_order_relaxed);
    uint64_t mx = atomic_load_explicit(&cleaner_slice_max, memory_order_relaxed);
    while (visited > mx &&
           !atomic_compare_exchange_weak_explicit(&cleaner_slice_max, &mx, visited, memory_order_relaxed,
                                                  memory_order_relaxed)) { }
}

/* One hold of the class lock: on a pass's first slice (`first`) closes the
 * newest bag if due and decides whether to sweep; then sweeps at most
 * `budget` items from the cursor, and merges small bags while the slice has
 * budget left. Returns items visited; *more says the sweep is under way and
 * has editable bags left, or a merge waits for a slice of its own. */
static unsigned clean_class(int clsid, bool flush, bool full, bool first, struct limbo *lb,
                            unsigned budget, bool *more)
{
    struct lru *l = &lrus[clsid];
    unsigned before = lb->n;
    pthread_mutex_lock(&l->lock);
    uint32_t target = bag_target(clsid);
    rel_time_t now = now_time();
    if (first) {
        struct bag *nw = atomic_load_explicit(&l->newest, memory_order_relaxed);
        /* A full newest bag is closed; so is an idle one after BAG_MAX_AGE, so that
         * what sits in the two append targets is eventually cleaned too. */
        bool idle_items = atomic_load(&nw->count) > 0 || atomic_load(&l->alt->count) > 0;
        if (atomic_load(&nw->count) >= target || (flush && atomic_load(&nw->count) > 0) ||
            (idle_items && now - nw->opened >= BAG_MAX_AGE))
            open_bag(l);
        if (flush && atomic_load(&l->alt->count) > 0) open_bag(l);

        /* Walking items costs a cache miss each, so the cleaner only sweeps a
         * class (all its closed bags, CLEAN_BUDGET items per pass in slices,
         * resuming at the cursor) when there is something to gain: dead items
         * worth the memory, a flush, or the periodic look for expired items.
         * Touched items in the oldest bag need no sweep: eviction gives them
         * their second chance. */
        bool has_items = atomic_load_explicit(&g_class_stats[clsid].curr_items, memory_order_relaxed) > 0;
        if (!l->sweeping && (full || class_needs_sweep(clsid, l, flush) ||
                             (has_items && now - l->last_sweep >= SWEEP_INTERVAL))) {
            l->sweeping = true;
            l->cursor = NULL;
            l->cursor_prev = NULL;
            note_orphans_swept(clsid, l, now);
            atomic_fetch_add_explicit(&cleaner_sweeps, 1, memory_order_relaxed);
        }
    }
    unsigned visited = 0;
    if (l->sweeping) {
        /* The sweep resumes at the item it stopped at: an evictor that took
         * that item out meanwhile moved cursor_prev back (bag_remove), a merge
         * moved the bag's items into its neighbour (drop_bag). It ends only
         * at the bags workers append to, so it visits each closed item once
         * (resuming at the oldest bag instead restarted it for as long as the
         * bags stayed as they were: 25 ms of CPU a second, idle). */
        struct bag *b = l->cursor ? l->cursor : l->oldest;
        item *prev = l->cursor ? l->cursor_prev : NULL;
        l->cursor = NULL;
        l->cursor_prev = NULL;
        while (b && bag_editable(l, b) && visited < budget) {
            bool finished;
            visited += clean_bag(l, b, &prev, clsid, lb, budget - visited, &finished);
            if (!finished) break;
            b = b->newer;
            prev = NULL;
        }
        if (b && bag_editable(l, b)) {
            l->cursor = b;
            l->cursor_prev = prev;
        } else {   /* reached the bags workers append to: sweep done */
            l->sweeping = false;
            l->last_sweep = now;
        }
    }
    /* Bag counts are cheap, so empty bags go and small ones merge along the
     * whole chain. A merge retags the smaller bag's items, which spends the
     * slice's budget like a sweep: one that does not fit what is left of it
     * is left to a slice of its own (*more), where it goes first whatever
     * its size. Refusing merges bigger than a slice instead left every two
     * idle-closed bags of over CLEAN_SLICE items apart for good: a class
     * written slowly grew a bag every BAG_MAX_AGE, and each hold walks the
     * chain (2,000 bags of 300 items: 2,081 bags, 682 us a pass, against 48
     * bags and 49 us). A merge's smaller side is at most half the target. */
    bool merge_left = false;
    struct bag *b = l->oldest;
    while (b && bag_editable(l, b)) {
        struct bag *next = b->newer;
        uint32_t cnt = atomic_load(&b->count);
        if (cnt == 0) {
            drop_bag(l, b);
        } else if (next && bag_editable(l, next) && cnt + atomic_load(&next->count) <= target) {
            uint32_t ncnt = atomic_load(&next->count);
            uint32_t smaller = cnt <= ncnt ? cnt : ncnt;
            if (visited > 0 && visited + smaller > budget) {
                merge_left = true;
            } else if (cnt <= ncnt) {
                visited += merge_into_newer(l, b);
            } else {
                visited += merge_newer_into(l, b);
                next = b->newer;
            }
        }
        b = next;
    }
    note_oldest(l);
    if (lb->tracked && lb->n > before) {   /* before an evictor can look (cleaner_holds) */
        atomic_fetch_add_explicit(&cleaner_holds[clsid], lb->n - before, memory_order_release);
        lb->held |= 1ull << (clsid - 1);
    }
    *more = l->sweeping || merge_left;
    pthread_mutex_unlock(&l->lock);
    if (!full) note_slice(visited);   /* a test hook's walk over everything is no slice */
    return visited;
}

/* A pass over class c: slices of CLEAN_SLICE items up to CLEAN_BUDGET, with
 * the class lock dropped and the CPU offered between them (sched_yield: the
 * one way to let an equal-priority SCHED_FIFO worker in; under CFS it is a
 * hint). The limbo is freed once it holds two slices' worth, before a yield
 * an evictor is waiting for it behind (cleaner_wait), and at the end of the
 * class's pass: kept across yielded slices and the other classes' passes,
 * it left evicting stores asleep up to CLEANER_WAIT_MAX_MS for chunks a
 * grace period from free. */
static void clean_class_pass(int clsid, bool flush, struct limbo *lb)
{
    unsigned done = 0;
    bool more, first = true;
    do {
        done += clean_class(clsid, flush, false, first, lb, CLEAN_SLICE, &more);
        first = false;
        if (lb->n >= CLEAN_SLICE * 2 ||
            (lb->held && more && atomic_load_explicit(&cleaner_waiters, memory_order_relaxed)))
            cleaner_limbo_free(lb);
        if (more) sched_yield();
    } while (more && done < CLEAN_BUDGET);
    if (lb->held) cleaner_limbo_free(lb);
}

bool bags_clean_once(storage_thread *t)
{
    (void)t;
    pthread_mutex_lock(&cleaner_lock);
    rel_time_t now = now_time();
    /* the latest flush: a pending delayed one, else the immediate one */
    uint64_t fw = atomic_load(&g_flush_later);
    if (fw == 0) fw = atomic_load(&g_flush_word);
    bool flush = false;
    if (atomic_load(&g_flush_pending) && fw != 0 && flush_effective(fw) <= now) {
        atomic_store(&g_flush_pending, 0);
        flush = true;
    }
    struct limbo lb = {0};
    unsigned n = slabs_class_count();
    lb.tracked = true;
    for (unsigned c = 1; c <= n; c++) {
        if (atomic_load(&lrus[c].nbags) == 0) continue;
        clean_class_pass((int)c, flush, &lb);   /* even a flush sweeps in budgeted passes */
    }
    cleaner_limbo_free(&lb);
    atomic_fetch_add(&cleaner_passes, 1);
    pthread_mutex_unlock(&cleaner_lock);
    return true;
}

/* The oldest bag eviction may edit, starting at b; NULL if none. */
static struct bag *evictable_from(struct lru *l, struct bag *b)
{
    for (; b; b = b->newer) {
        if (!bag_editable(l, b)) {
            if (b == l->alt || b == atomic_load_explicit(&l->newest, memory_order_relaxed)) return NULL;
            continue;
        }
        if (atomic_load(&b->count) > 0) return b;
    }
    return NULL;
}

/* An item dropped for space, by the LRU or by a page move: memcached's
 * evictions, evicted_unfetched, evicted_young... and eviction_age_last, which
 * the operator's young-evictions alert and the autoscaler read. */
static rel_time_t count_eviction(int clsid, uint16_t tag, rel_time_t last, rel_time_t exp)
{
    struct class_stats *cs = &g_class_stats[clsid];
    atomic_fetch_add_explicit(&cs->evicted, 1, memory_order_relaxed);
    if (exp != 0) atomic_fetch_add_explicit(&cs->evicted_nonzero, 1, memory_order_relaxed);
    if (!(tag & ITEM_FETCHED_BIT)) atomic_fetch_add_explicit(&cs->evicted_unfetched, 1, memory_order_relaxed);
    rel_time_t now = now_time();
    rel_time_t age = now > last ? now - last : 0;   /* a flush second stamps ahead */
    atomic_store_explicit(&cs->evicted_time, age, memory_order_relaxed);
    atomic_store_explicit(&g_last_eviction_age, age, memory_order_relaxed);
    if ((tag & ITEM_FETCHED_BIT) && age < g_cfg.young_window)
        atomic_fetch_add_explicit(&cs->evicted_young, 1, memory_order_relaxed);
    return age;
}

/* `watch evictions` sees every item counted above. The key is read while the
 * class lock keeps the chunk from being reused. */
static void log_dropped_for_space(item *it, int clsid, uint16_t tag, rel_time_t exp, rel_time_t age)
{
    if (!log_wants(LOG_EVICTIONS)) return;
    log_eviction(item_key(it), item_nkey(it), (tag & ITEM_FETCHED_BIT) != 0,
                 exp ? (long long)exp - (long long)now_time() : -1, age, (unsigned)clsid,
                 (uint32_t)item_nbytes(it));
}

int bags_evict(storage_thread *t, int clsid)
{
    struct lru *l = &lrus[clsid];
    struct limbo lb = {0};
    int freed = 0, opened = 0, scanned = 0;
    /* A class holding nothing has nothing to evict: do not churn bags. */
    if (atomic_load_explicit(&g_class_stats[clsid].curr_items, memory_order_relaxed) == 0 &&
        atomic_load_explicit(&g_class_stats[clsid].dead_waiting, memory_order_relaxed) == 0)
        return 0;
    atomic_fetch_add_explicit(&l->evictors_waiting, 1, memory_order_relaxed);
    pthread_mutex_lock(&l->lock);
    atomic_fetch_sub_explicit(&l->evictors_waiting, 1, memory_order_relaxed);
    /* chunks of this class a grace period from free (the cleaner has just
     * taken them out of these bags, under this lock): take those, evict nothing */
    if (t && atomic_load_explicit(&cleaner_holds[clsid], memory_order_acquire)) {
        pthread_mutex_unlock(&l->lock);
        if (cleaner_wait(t, clsid)) return 1;
        pthread_mutex_lock(&l->lock);
    }
    /* Pass 0 gives touched items their second chance; if a whole search
     * found only touched, referenced or busy items, pass 1 evicts touched
     * ones too, so a store never fails while evictable memory exists. */
    for (int pass = 0; pass < 2 && freed == 0; pass++) {
    bool second_chance = pass == 0;
    scanned = 0;
    struct bag *b = evictable_from(l, l->oldest);
    while (freed == 0 && scanned < 16) {
        if (!b) {
            /* seed 000 step 4: every item sits in the bags workers append
             * to; open two bags so the old ones become editable once the
             * appends in flight have landed (one grace period). */
            if (opened >= 2) break;
            open_bag(l);
            open_bag(l);
            opened += 2;
            /* never wait for a grace period while holding the class lock:
             * a thread inside a read section may be queued on it */
            pthread_mutex_unlock(&l->lock);
            epoch_synchronize();
            pthread_mutex_lock(&l->lock);
            b = evictable_from(l, l->oldest);
            continue;
        }
        scanned++;
        unsigned looked = 0;
        item *prev = NULL;
        uint32_t h = atomic_load_explicit(&b->head, memory_order_relaxed);
        while (h && looked < EVICT_SEARCH && freed < EVICT_BATCH) {
            item *it = handle_item(h);
            uint32_t next = atomic_load_explicit(&it->lru_next, memory_order_relaxed);
            looked++;
            h = next;
            enum fate f = reclaim_if_dead(b, prev, it, clsid, &lb, false);
            if (f == REMOVED) { freed++; continue; }
            if (f == BUSY) { prev = it; continue; }
            uint16_t tag = atomic_load_explicit(&it->bag, memory_order_relaxed);
            if (second_chance && (tag & ITEM_BAG_MASK) != b->id) {   /* touched since: second chance */
                move_to_alt(l, b, prev, it);
                continue;
            }
            /* -M: only dead and expired items make room, never live ones */
            if (g_cfg.evict_disabled || item_refs(it) > 1) { prev = it; continue; }
            rel_time_t last = atomic_load_explicit(&it->time, memory_order_relaxed);
            rel_time_t exp = item_exptime(it);
            /* -o temporary_ttl: memcached puts an item whose TTL is at most
             * temporary_ttl when stored in an LRU that only expiry empties.
             * The bags keep no LRU per TTL; the TTL left at the item's last
             * store or touch says the same. */
            if (g_cfg.temp_lru && exp != 0 && exp > last && exp - last <= g_cfg.temporary_ttl) { prev = it; continue; }
            enum unlink_result u = unlink_for_reclaim(it, false);
            if (u == UNLINK_BUSY) { prev = it; continue; }
            bag_remove(l, b, prev, it);
            atomic_fetch_sub_explicit(&g_class_stats[clsid].dead_waiting, 1, memory_order_relaxed);
            if (u == UNLINK_DONE) {
                log_dropped_for_space(it, clsid, tag, exp, count_eviction(clsid, tag, last, exp));
                slabs_gain_evicted(clsid, item_key(it), item_nkey(it));
            }
            limbo_push(&lb, it);
            freed++;
        }
        struct bag *nb = b->newer;
        if (atomic_load(&b->count) == 0) drop_bag(l, b);
        if (freed == 0 && h == 0) b = evictable_from(l, nb);   /* bag exhausted: next one */
        else if (freed == 0 && looked >= EVICT_SEARCH) b = evictable_from(l, nb);
    }
    }
    pthread_mutex_unlock(&l->lock);
    limbo_free(&lb);
    return freed;
}

/* extstore's flusher: the coldest live items of class clsid whose value is
 * at least min_bytes and not on disk yet, idle at least min_age seconds
 * (any age when `any_age`: memory pressure). Walks the oldest bags under the
 * class lock, which keeps every item in them from being freed while it looks;
 * it only reads, and copies each key out, because the flusher revalidates
 * everything under the key's stripe lock afterwards.
 * Dead items (unlinked: the values the flusher has just replaced by stubs)
 * stay at the front of the oldest bags until the cleaner sweeps them. In a
 * paced 4 KB fill 4,096-10,000 of them led the class's bags; a walk that
 * counted them as looked at saw nothing else, the flusher reported nothing
 * to write with 5,000-11,000 unwritten values behind them, and stores
 * stopped waiting for it and evicted those values (ext_await_flusher,
 * FOUND_NONE_PASSES: 8-918 of 131,072 in the bench's fill, where memcached
 * 1.6.45 lost none). So dead items count apart from the live ones looked
 * at, up to DEAD_LOOK_MAX, four of the cleaner's passes over the class
 * (CLEAN_BUDGET each; a bound of one pass was still reached in those
 * fills). They are left to the cleaner. Taking them out here too was
 * tried (a limbo of the flusher's, counted in cleaner_holds): fills lost
 * no fewer values, and it moves what the "hotter than RAM" recache rule
 * (ext_items.c) sees as RAM's oldest value, the oldest bag's first item. */
#define DEAD_LOOK_MAX (4 * CLEAN_BUDGET)
/* Items one hold of the class lock looks at. A walk to DEAD_LOOK_MAX dead
 * items plus its live ones (~44,000 cache misses, 1-4 ms) in one hold kept
 * every store evicting in the class waiting, on the worker's CPU. So the
 * walk lets go of the lock every WALK_HOLD_MAX items and resumes where it
 * was: l->flusher_bag and that bag's flusher_at, the last item it looked at,
 * which the code that edits bags keeps pointing into the bag the walk is in
 * (bag_remove steps it back to the item before, merge_into_newer carries it
 * into the newer bag, drop_bag of the emptied bag moves it to the next
 * one's head). So between holds it names an item still in a bag, which
 * nothing frees (items leave bags before limbo), and the walk goes on
 * through items it has not looked at, oldest first, as one hold would. */
#define WALK_HOLD_MAX 256
#define WALK_YIELDS_MAX 64   /* sched_yield()s between holds while evictors queue */
static _Atomic uint32_t walk_hold_max;   /* the most items one hold looked at (stats: lru_flusher_hold_max) */
#ifdef CACHET_TEST_HOOKS
void (*g_test_flusher_between_holds)(int clsid);
#endif

static void note_walk_hold(unsigned visited)
{
    if (visited > atomic_load_explicit(&walk_hold_max, memory_order_relaxed))
        atomic_store_explicit(&walk_hold_max, visited, memory_order_relaxed);   /* one flusher writes it */
}

unsigned bags_ext_candidates(int clsid, struct ext_candidate *out, unsigned max,
                             uint32_t min_bytes, rel_time_t min_age, bool any_age)
{
    struct lru *l = &lrus[clsid];
    unsigned n = 0, looked = 0, dead = 0;
    rel_time_t now = now_time();
    pthread_mutex_lock(&l->lock);
    struct bag *b = l->oldest;
    uint32_t h = 0;
    if (b) {
        b->flusher_at = 0;
        h = atomic_load_explicit(&b->head, memory_order_acquire);
    }
    unsigned visited = 0;   /* in this hold */
    while (b && n < max && looked < 4 * EVICT_SEARCH * max && dead < DEAD_LOOK_MAX) {
        if (!h) {   /* this bag looked at: the next one from its head */
            b = b->newer;
            if (b) {
                b->flusher_at = 0;
                h = atomic_load_explicit(&b->head, memory_order_acquire);
            }
            continue;
        }
        if (visited >= WALK_HOLD_MAX) {
            /* h is the item after flusher_at (or b's head when it is 0) */
            l->flusher_bag = b;
            note_walk_hold(visited);
            pthread_mutex_unlock(&l->lock);
            for (unsigned y = 0; y < WALK_YIELDS_MAX &&
                 atomic_load_explicit(&l->evictors_waiting, memory_order_relaxed); y++)
                sched_yield();
#ifdef CACHET_TEST_HOOKS
            if (g_test_flusher_between_holds) g_test_flusher_between_holds(clsid);
#endif
            pthread_mutex_lock(&l->lock);
            b = l->flusher_bag;
            l->flusher_bag = NULL;
            visited = 0;
            if (!b) break;
            h = b->flusher_at ? atomic_load_explicit(&handle_item(b->flusher_at)->lru_next, memory_order_acquire)
                              : atomic_load_explicit(&b->head, memory_order_acquire);
            continue;
        }
        item *it = handle_item(h);
        b->flusher_at = h;
        visited++;
        h = atomic_load_explicit(&it->lru_next, memory_order_acquire);
        uint8_t fl = item_fl(it);
        if (!(fl & ITEM_LINKED)) { dead++; continue; }
        looked++;
        if (fl & (ITEM_ON_DISK | ITEM_STALE | ITEM_WIN_SENT)) continue;
        if (!item_is_live(it, now) || item_nbytes(it) < min_bytes) continue;
        rel_time_t last = atomic_load_explicit(&it->time, memory_order_relaxed);
        if (!any_age && (now < last || now - last < min_age)) continue;
        /* read since it entered this bag: not cold (eviction's second chance) */
        if ((atomic_load_explicit(&it->bag, memory_order_relaxed) & ITEM_BAG_MASK) != b->id) continue;
        out[n].it = it;
        out[n].nkey = (uint8_t)item_nkey(it);
        memcpy(out[n].key, item_key(it), out[n].nkey);
        n++;
    }
    note_walk_hold(visited);
    pthread_mutex_unlock(&l->lock);
    return n;
}

uint32_t bags_flusher_hold_max(void) { return atomic_load_explicit(&walk_hold_max, memory_order_relaxed); }

static bool is_listed(uint32_t h, const uint32_t *heads, size_t n)
{
    for (size_t i = 0; i < n; i++) if (heads[i] == h) return true;
    return false;
}

void bags_purge(storage_thread *t, int clsid, const char *lo, const char *hi,
                const uint32_t *heads, size_t nheads)
{
    (void)t;
    struct lru *l = &lrus[clsid];
    struct limbo lb = {0};
    pthread_mutex_lock(&l->lock);
    open_bag(l);
    open_bag(l);
    pthread_mutex_unlock(&l->lock);
    epoch_synchronize();   /* outside the class lock, see bags_evict */
    pthread_mutex_lock(&l->lock);
    for (struct bag *b = l->oldest; b;) {
        struct bag *next = b->newer;
        if (!bag_editable(l, b)) { b = next; continue; }
        item *prev = NULL;
        uint32_t h = atomic_load_explicit(&b->head, memory_order_relaxed);
        while (h) {
            item *it = handle_item(h);
            uint32_t nx = atomic_load_explicit(&it->lru_next, memory_order_relaxed);
            if (((const char *)it >= lo && (const char *)it < hi) || (nheads && is_listed(h, heads, nheads))) {
                if (item_fl(it) & ITEM_LINKED) {
                    uint16_t tag = atomic_load_explicit(&it->bag, memory_order_relaxed);
                    rel_time_t last = atomic_load_explicit(&it->time, memory_order_relaxed);
                    rel_time_t exp = item_exptime(it);
                    if (unlink_for_reclaim(it, true) == UNLINK_DONE) {
                        atomic_fetch_add_explicit(&g_class_stats[clsid].reassign_evicted, 1, memory_order_relaxed);
                        log_dropped_for_space(it, clsid, tag, exp, count_eviction(clsid, tag, last, exp));
                    }
                }
                bag_remove(l, b, prev, it);
                atomic_fetch_sub_explicit(&g_class_stats[clsid].dead_waiting, 1, memory_order_relaxed);
                limbo_push(&lb, it);
            } else {
                prev = it;
            }
            h = nx;
        }
        if (atomic_load(&b->count) == 0) drop_bag(l, b);
        b = next;
    }
    pthread_mutex_unlock(&l->lock);
    limbo_free(&lb);
}

void bags_test_reclaim_all(void)
{
    pthread_mutex_lock(&cleaner_lock);
    struct limbo lb = {0};
    unsigned n = slabs_class_count();
    for (unsigned c = 1; c <= n; c++) {
        struct lru *l = &lrus[c];
        /* the two append targets become editable after a grace period */
        pthread_mutex_lock(&l->lock);
        open_bag(l);
        open_bag(l);
        pthread_mutex_unlock(&l->lock);
    }
    epoch_synchronize();
    for (unsigned c = 1; c <= n; c++) {
        bool more;
        clean_class((int)c, false, true, true, &lb, UINT32_MAX, &more);
    }
    limbo_free(&lb);
    pthread_mutex_unlock(&cleaner_lock);
}

static bool cleaner_pass(void *arg)
{
    (void)arg;
    bags_clean_once(cleaner_ctx);
    return false;
}

int bags_start_thread(void)
{
    if (!cleaner_ctx) cleaner_ctx = storage_thread_register();
    return bgthread_start(&cleaner);
}

void bags_stop_thread(void) { bgthread_stop(&cleaner); }

/* Class lock held: remembers the oldest item's last access for readers
 * that must not take the lock (stats, metrics). */
static void note_oldest(struct lru *l)
{
    rel_time_t t = 0;
    for (struct bag *b = l->oldest; b; b = b->newer) {
        uint32_t h = atomic_load_explicit(&b->head, memory_order_relaxed);
        if (h) {
            t = atomic_load_explicit(&handle_item(h)->time, memory_order_relaxed);
            break;
        }
    }
    atomic_store_explicit(&l->oldest_time, t, memory_order_relaxed);
}

rel_time_t bags_oldest_age(int clsid)
{
    struct lru *l = &lrus[clsid];
    pthread_mutex_lock(&l->lock);
    note_oldest(l);
    pthread_mutex_unlock(&l->lock);
    return bags_oldest_age_cached(clsid);
}

rel_time_t bags_oldest_age_cached(int clsid)
{
    rel_time_t now = now_time(), t = atomic_load_explicit(&lrus[clsid].oldest_time, memory_order_relaxed);
    return t && now > t ? now - t : 0;
}

void bags_stats_items(stat_writer w, void *ctx)
{
    char name[80];
    unsigned n = slabs_class_count();
    rel_time_t now = now_time();
    for (unsigned c = 1; c <= n; c++) {
        struct class_stats *cs = &g_class_stats[c];
        uint64_t num = atomic_load(&cs->curr_items);
        if (slabs_class_pages((int)c) == 0 && num == 0) continue;
        struct lru *l = &lrus[c];
        rel_time_t age = bags_oldest_age_cached((int)c);   /* no class lock on the stats path */
        (void)now;
#define S(nm, v) do { snprintf(name, sizeof name, "items:%u:%s", c, nm); \
                      w(ctx, name, "%llu", (unsigned long long)(v)); } while (0)
        S("number", num);
        S("age", age);
        S("evicted", atomic_load(&cs->evicted));
        S("evicted_nonzero", atomic_load(&cs->evicted_nonzero));
        S("evicted_time", atomic_load(&cs->evicted_time));
        S("outofmemory", atomic_load(&cs->outofmemory));
        S("reclaimed", atomic_load(&cs->reclaimed));
        S("expired_unfetched", atomic_load(&cs->expired_unfetched));
        S("expired", atomic_load(&cs->expired));
        S("slab_reassign_evictions", atomic_load(&cs->reassign_evicted));
        S("evicted_unfetched", atomic_load(&cs->evicted_unfetched));
        S("evicted_young", atomic_load(&cs->evicted_young));
        S("bags", atomic_load(&l->nbags));
        S("dead_waiting", atomic_load(&cs->dead_waiting));
#undef S
    }
}

void bags_stats_general(stat_writer w, void *ctx)
{
    uint64_t nb = 0, expired = 0;
    unsigned n = slabs_class_count();
    for (unsigned c = 1; c <= n; c++) {
        nb += atomic_load(&lrus[c].nbags);
        expired += atomic_load(&g_class_stats[c].expired);
    }
    w(ctx, "lru_items_expired", "%llu", (unsigned long long)expired);
    w(ctx, "lru_bags", "%llu", (unsigned long long)nb);
    w(ctx, "lru_bags_opened", "%llu", (unsigned long long)atomic_load(&bags_opened));
    w(ctx, "lru_cleaner_passes", "%llu", (unsigned long long)atomic_load(&cleaner_passes));
    w(ctx, "lru_cleaner_sweeps", "%llu", (unsigned long long)atomic_load(&cleaner_sweeps));
    w(ctx, "lru_cleaner_items_visited", "%llu", (unsigned long long)atomic_load(&cleaner_items_visited));
    w(ctx, "lru_cleaner_slice_max", "%llu", (unsigned long long)atomic_load(&cleaner_slice_max));
    w(ctx, "lru_items_moved", "%llu", (unsigned long long)atomic_load(&items_moved));
    w(ctx, "lru_bags_merged", "%llu", (unsigned long long)atomic_load(&bags_merged));
    w(ctx, "lru_items_merged", "%llu", (unsigned long long)atomic_load(&items_merged));
    /* cachet's own: the most items extstore's flusher looked at in one hold
     * of a class's lock, which stores evicting in that class wait for */
    w(ctx, "lru_flusher_hold_max", "%u", (unsigned)bags_flusher_hold_max());
}
