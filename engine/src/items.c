/*
 * items.c - memcached's item semantics on top of the hash table, slabs and
 * bags: get/gat/mg, the six store modes, delete, touch, incr/decr, flush, and
 * the meta protocol's vivify/recache/stale/win rules; chained values.
 *
 * Why every change builds a new item (copy-on-write) instead of editing in
 * place: a GET takes no lock (only one that finds its item expired or
 * flushed takes the stripe lock, having copied nothing, to unlink it:
 * miss_on_dead_item), so it may be copying a value at the very moment a
 * writer changes it. Swapping in a complete new item with one release store
 * means a reader sees the old value or the new one, never a mix; incr/decr
 * and append/prepend pay one allocation and copy for that, which is what
 * memcached does for them anyway whenever the item is in use. The same
 * applies to giving an item an expiry it has no field for (touch of an item
 * stored without a TTL whose chunk has no spare bytes).
 *
 * Why allocation happens outside every lock: allocating may evict, eviction
 * takes other stripes' locks and waits for a grace period; doing that while
 * holding a stripe lock would stall that stripe's writers for the wait and
 * invite lock-order cycles. So read-modify-write commands (append, prepend,
 * incr/decr, vivify, touch needing a new shape) look up the old item under
 * the lock, note the sizes, drop the lock, allocate, retake it and check that
 * the old item is still the current one (retrying, bounded, if not).
 *
 * Chained values (longer than the largest class, slab_chunk_max): the item
 * is a head holding a descriptor and the value's last piece; the rest sits in
 * data chunks that name their head (storage_internal.h). Heads always carry a
 * refcount, so a chained value is only ever sent in place, piece by piece,
 * and its chunks go back to the allocator with the head.
 */
#include "storage_internal.h"
#include "ext_hooks.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/uio.h>
#include <time.h>

#define RMW_RETRIES 16

static item heap_view_marker;   /* view->ref for values copied into malloc'd memory */
static _Atomic uint64_t *size_hist;
static size_t size_hist_n;

static int check_item_size_max(void);
void items_destroy(void);

int items_check_config(void) { return check_item_size_max(); }

int items_init(void)
{
    if (check_item_size_max() != 0) return -1;
    size_hist_n = slabs_chunk_max() / 32 + 2;
    size_hist = calloc(size_hist_n, sizeof(*size_hist));
    if (!size_hist || mrc_init(size_hist_n) != 0) {
        items_destroy();
        return -1;
    }
    return 0;
}

void items_destroy(void)
{
    mrc_destroy();
    free(size_hist);
    size_hist = NULL;
}

void sizes_account(size_t ntotal, int delta)
{
    atomic_fetch_add_explicit(&size_hist[size_bucket(ntotal, size_hist_n)], (uint64_t)(int64_t)delta,
                              memory_order_relaxed);
}

/* bucket b of the stored (missed: of the missed) histogram */
static uint64_t sizes_in(bool missed, size_t b)
{
    uint64_t n = missed ? mrc_missed_in(b) : atomic_load_explicit(&size_hist[b], memory_order_relaxed);
    return (int64_t)n > 0 ? n : 0;
}

void storage_stats_sizes(stat_writer w, void *ctx)
{
    char name[48];
    for (int missed = 0; missed < 2; missed++) {
        for (size_t b = 0; b < size_hist_n; b++) {
            uint64_t n = sizes_in(missed, b);
            if (n == 0) continue;
            snprintf(name, sizeof name, "%s%zu", missed ? "missed:" : "", b * 32);
            w(ctx, name, "%llu", (unsigned long long)n);
        }
    }
}

/* /metrics wants a bounded number of series: 32-byte buckets up to 512
 * bytes, then 8 per power of two, cumulative. */
void storage_stats_sizes_coarse(stat_writer w, void *ctx)
{
    char name[48];
    size_t last = size_hist_n - 1;   /* holds everything larger: only in le_inf */
    for (int missed = 0; missed < 2; missed++) {
        uint64_t cum = 0;
        size_t b = 0;
        for (size_t le = 32; b < last; le += le < 512 ? 32 : ((size_t)1 << (63 - __builtin_clzll(le))) / 8) {
            for (; b < last && b * 32 <= le; b++) cum += sizes_in(missed, b);
            snprintf(name, sizeof name, "%s:le_%zu", missed ? "missed" : "stored", le);
            w(ctx, name, "%llu", (unsigned long long)cum);
        }
        cum += sizes_in(missed, last);
        snprintf(name, sizeof name, "%s:le_inf", missed ? "missed" : "stored");
        w(ctx, name, "%llu", (unsigned long long)cum);
    }
}

/* One word's verdict: gone once the word is effective, if stamped at or
 * before its oldest. */
static bool flushed_by(uint64_t fw, item *it, rel_time_t now)
{
    if (fw == 0 || flush_effective(fw) > now) return false;
    return atomic_load_explicit(&it->time, memory_order_relaxed) <= flush_oldest(fw);
}

bool item_is_flushed_in(item *it, struct time_view v)
{
    return flushed_by(v.fw, it, v.now) || flushed_by(v.later, it, v.now);
}

bool item_is_live_in(item *it, struct time_view v)
{
    rel_time_t exp = item_exptime(it);
    if (exp != 0 && exp <= v.now) return false;
    return !item_is_flushed_in(it, v);
}

bool item_is_flushed(item *it, rel_time_t now)
{
    struct time_view v = time_view_now();
    v.now = now;
    return item_is_flushed_in(it, v);
}

bool item_is_live(item *it, rel_time_t now)
{
    struct time_view v = time_view_now();
    v.now = now;
    return item_is_live_in(it, v);
}

/* Once ITEM_LINKED is cleared the cleaner may reclaim the chunk at any time
 * (a stripe-lock holder is not in a read section): read what the accounting
 * needs first, clear the flag last. */
static void account_unlinked_as(item *it, bool record_goes)
{
    int c = slabs_clsid_of(it);
    size_t nt = item_ntotal(it);
    if (record_goes && (item_layout(it) & ITEM_ON_DISK)) ext_hooks()->item_gone(it);
    atomic_fetch_and_explicit(&it->iflags, (uint8_t)~ITEM_LINKED, memory_order_release);
    atomic_fetch_sub_explicit(&g_class_stats[c].curr_items, 1, memory_order_relaxed);
    atomic_fetch_sub_explicit(&g_class_stats[c].bytes_requested, nt, memory_order_relaxed);
    atomic_fetch_add_explicit(&g_class_stats[c].dead_waiting, 1, memory_order_relaxed);
    sizes_account(nt, -1);
}

/* A stub's record on disk goes with it, unless its copy keeps it (a rescue). */
static void account_unlinked(item *it) { account_unlinked_as(it, true); }

void item_unlink_locked(item *it, uint32_t hv)
{
    assoc_unlink_locked(it, hv);
    account_unlinked(it);
}

static void account_link(storage_thread *t, item *it, bool new_item)
{
    /* a store's time is when it becomes visible, as in memcached: stamped at
     * allocation, a value still arriving when a flush_all came would be
     * linked under the flush and vanish right after its STORED */
    if (new_item) atomic_store_explicit(&it->time, stamp_time(), memory_order_relaxed);
    atomic_fetch_or_explicit(&it->iflags, ITEM_LINKED, memory_order_release);
    int c = slabs_clsid_of(it);
    size_t nt = item_ntotal(it);
    atomic_fetch_add_explicit(&g_class_stats[c].curr_items, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&g_class_stats[c].bytes_requested, nt, memory_order_relaxed);
    sizes_account(nt, 1);
    if (new_item) STAT_INC(t, total_items);
}

static void link_new_locked(storage_thread *t, item *it, uint32_t hv)
{
    account_link(t, it, true);
    assoc_insert_locked(it, hv);
}

/* new_item: a store (counted in total_items), not a reshape of the same item. */
void replace_locked(storage_thread *t, item *old_it, item *new_it, uint32_t hv, bool new_item)
{
    account_link(t, new_it, new_item);
    assoc_replace_locked(old_it, new_it, hv);
    /* the table no longer reaches old_it: account it like an unlink */
    account_unlinked(old_it);
}

/* The same for a copy of the same item (a page move's rescue, a copy that
 * makes room for an expiry): a stub's disk record stays live, the copy
 * points at it. */
static void replace_with_copy_locked(storage_thread *t, item *old_it, item *copy, uint32_t hv)
{
    account_link(t, copy, false);
    assoc_replace_locked(old_it, copy, hv);
    account_unlinked_as(old_it, false);
}

/* Frees a chunk that was never reachable, or is no longer (grace passed and
 * no reference left), with the data chunks of a chained value. */
static void free_item_memory(item *it)
{
    if (item_layout(it) & ITEM_CHAINED) {
        atomic_fetch_sub_explicit(&g_class_chained_heads[slabs_clsid_of(it)], 1, memory_order_relaxed);
        struct chain_desc d = item_chain(it);
        for (uint32_t i = 0; i < d.nchunks; i++) {
            uint32_t h = item_chain_handle(it, i);
            if (h) slabs_free_chunk(handle_item(h));
        }
    }
    slabs_free_chunk(it);
}

/* After the grace period: the chunk goes back unless a zero-copy reader
 * still holds it (then the last item_view_release frees it). */
void item_free_dead(item *it)
{
    if (item_refcounted(it)) {
        if (atomic_fetch_sub_explicit(item_ref_ptr(it), 1, memory_order_acq_rel) != 1) return;
    }
    free_item_memory(it);
}

/* Linked items enter their bag inside a read section (bags may be closing). */
void enter_bag(storage_thread *t, item *it)
{
    epoch_enter(t);
    bags_append(t, it);
    epoch_exit(t);
}

/* Finds a live item under the stripe lock; unlinks it if expired/flushed. */
static item *find_live_locked(const char *key, size_t nkey, uint32_t hv, struct time_view tv)
{
    item *it = assoc_find_locked(key, nkey, hv);
    if (it && !item_is_live_in(it, tv)) {
        item_unlink_locked(it, hv);
        it = NULL;
    }
    return it;
}

/* ---- allocation ---- */

/* A data chunk of a chained value is in no LRU, so its class may have
 * nothing of its own to evict while chained values fill it: evicting the
 * oldest items of the classes that hold chained heads frees data chunks, and
 * counts as evictions. Without it the chunk came from another class's page,
 * a stub class's or a head class's only one, and every item on it was lost
 * uncounted (slab_reassign_evictions, `evictions` 0). Oldest class first. */
static bool evict_chained_values(storage_thread *t, int data_clsid)
{
    unsigned n = slabs_class_count();
    bool tried[MAX_SLAB_CLASSES + 1] = {0};
    for (;;) {
        int best = 0;
        rel_time_t best_age = 0;
        for (unsigned c = 1; c <= n; c++) {
            if ((int)c == data_clsid || tried[c] || !class_holds_chained(c))
                continue;
            rel_time_t age = bags_oldest_age((int)c);
            if (!best || age > best_age) { best = (int)c; best_age = age; }
        }
        if (!best) return false;
        tried[best] = true;
        if (bags_evict(t, best) > 0) return true;
    }
}

static item *alloc_chunk(storage_thread *t, int clsid, int owner_cls, bool prefer_page, enum store_result *err)
{
    /* memcached's order: a free chunk, a new page, the class's own dead or
     * expired items, its oldest live items (unless -M); and, when the class
     * has nothing of its own to give, a page from another class, now. A store
     * is refused only when nothing anywhere can be freed. Bounded: each round
     * either frees memory for this class or gives up.
     * owner_cls (0: none) is the class of the chained head the chunk is for.
     * Data chunks are in no bag: the largest class's own bags hold few items
     * or none, and a page taken from another class cost a whole page of
     * items (the 200 values of 530,000 bytes at -m 64 kept 74 items, none
     * counted as evicted). The oldest heads of the same class as this one
     * most likely own chunks of this class too, and evicting them is what
     * memcached does (its chunked item pulls its header's LRU first).
     * An eviction may free nothing this store can take: the oldest items sit
     * on the page the mover is draining for another class (extstore's first
     * stubs take one), and a chunk freed there goes with the page, not to
     * the free list. Seen as "out of memory storing object" in a heavy fill
     * (8 rounds, 8 items evicted in each, no chunk): rounds that evicted do
     * not count towards giving up, up to 64 (512 items: more than a page
     * holds of chunks of 2 KiB and up), so the store evicts past that page. */
    for (int round = 0, idle = 0; idle < 8 && round < 64; round++) {
        item *it = slabs_alloc_chunk(clsid);
        if (it) return it;
        /* an extstore stub: evicting another stub of its class would lose a
         * value already on disk for a few dozen bytes; a page from another
         * class costs a few large values instead, and holds thousands */
        if (prefer_page && round == 0 && slabs_acquire_page(t, clsid)) continue;
        /* extstore: the oldest values of a class the flusher serves may be
         * a moment from disk; evicted now they would be lost (ext_items.c).
         * Not for a data chunk (owner_cls): the flusher's progress is
         * counted in heads, and a chained value would wait once per chunk;
         * its head already waited. */
        if (round == 0 && !owner_cls) {
            enum await_result aw = ext_hooks()->await_flusher(t, clsid);
            if (aw == AWAIT_PARKED) {
                if (err) *err = STORE_PARKED;
                return NULL;
            }
            if (aw == AWAIT_WAITED) continue;
        }
        ext_hooks()->note_pressure();   /* extstore: move cold values out before the next store must evict */
        if (bags_evict(t, clsid) > 0) continue;
        idle++;
        /* The head's class is shared with ordinary items: evicting there is
         * progress only when it freed a chunk of this class (the victim was
         * a chained head). Else a page for this class is what helps; one
         * that cannot be had lets the next round evict again, 8 rounds at
         * most, so no store evicts without bound. */
        bool evicted = owner_cls && owner_cls != clsid && bags_evict(t, owner_cls) > 0;
        if (!evicted && owner_cls && !g_cfg.evict_disabled) evicted = evict_chained_values(t, clsid);
        if (evicted && (it = slabs_alloc_chunk(clsid))) return it;
        if (slabs_acquire_page(t, clsid)) continue;
        if (!evicted) break;
    }
    item *it = slabs_alloc_chunk(clsid);   /* a concurrent free may have landed */
    if (it) return it;
    atomic_fetch_add_explicit(&g_class_stats[clsid].outofmemory, 1, memory_order_relaxed);
    if (err) *err = STORE_NO_MEMORY;
    return NULL;
}

/* How a value of nbytes is laid out: stored in the item itself, or chained
 * (chunks of the largest class, maybe one smaller last chunk, and a last
 * piece in the head). */
struct shape {
    uint8_t  layout;
    size_t   nstored;       /* bytes in the item after its key */
    uint32_t nchunks;       /* data chunks */
    size_t   tail;          /* chained: value bytes in the head */
    size_t   last_chunk;    /* chained: bytes in the last data chunk */
    int      clsid;         /* class of the item */
};

static bool plan_shape(size_t nkey, uint64_t nbytes, uint8_t layout, struct shape *sh)
{
    size_t cmax = slabs_chunk_max();
    sh->layout = layout & ~ITEM_CHAINED;
    sh->nchunks = 0;
    sh->tail = sh->last_chunk = 0;
    /* a stub's value is on disk: it stores the locator */
    sh->nstored = (layout & ITEM_ON_DISK) ? ext_stub_nstored(nbytes) : (size_t)nbytes;
    size_t nt = item_ntotal_for(sh->layout, nkey, sh->nstored);
    if (nt <= cmax) {
        sh->clsid = (sh->layout & ITEM_ON_DISK) ? slabs_stub_clsid(nt) : slabs_clsid(nt);
        /* an expiry field costs nothing when the chunk has room for it, and
         * spares a copy if the item is ever touched */
        if (!(sh->layout & ITEM_HAS_EXPTIME) &&
            item_ntotal_for(sh->layout | ITEM_HAS_EXPTIME, nkey, sh->nstored) <= g_class_size[sh->clsid])
            sh->layout |= ITEM_HAS_EXPTIME;
        return sh->clsid != 0;
    }
    /* chained: heads always keep an expiry field (they are large anyway) */
    sh->layout |= ITEM_CHAINED | ITEM_HAS_EXPTIME;
    int top = (int)slabs_class_count();
    size_t cap = chunk_capacity(top);
    uint64_t full = nbytes / cap, rem = nbytes % cap;
    if (full + 1 > UINT32_MAX / 8) return false;
    /* the remainder in the head if it fits, else in one more chunk sized to it */
    size_t head_nt = item_ntotal_for(sh->layout, nkey, sizeof(struct chain_desc) + 4 * (size_t)full + rem);
    if (head_nt <= cmax) {
        sh->nchunks = (uint32_t)full;
        sh->tail = (size_t)rem;
        sh->last_chunk = full ? cap : 0;
    } else {
        sh->nchunks = (uint32_t)full + 1;
        sh->tail = 0;
        sh->last_chunk = (size_t)rem;
    }
    sh->nstored = sizeof(struct chain_desc) + 4 * (size_t)sh->nchunks + sh->tail;
    if (sh->nstored > ITEM_NBYTES_MAX) return false;
    nt = item_ntotal_for(sh->layout, nkey, sh->nstored);
    if (nt > cmax) return false;
    sh->clsid = slabs_clsid(nt);
    return sh->clsid != 0;
}

/* A chained head lists its data chunks, and the head itself must fit the
 * largest class: a small -o slab_chunk_max (1 or 2 KB) cannot chain a value
 * of -I. Refuse the configuration at start rather than answer "too large"
 * for values the operator allowed. */
static int check_item_size_max(void)
{
    const uint8_t worst = ITEM_HAS_FLAGS | ITEM_HAS_EXPTIME;
    struct shape sh;
    if (plan_shape(KEY_MAX_LENGTH, g_cfg.item_size_max, worst, &sh)) return 0;
    size_t lo = 0, hi = g_cfg.item_size_max;   /* plan_shape(lo) holds, (hi) does not */
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (plan_shape(KEY_MAX_LENGTH, mid, worst, &sh)) lo = mid; else hi = mid;
    }
    fprintf(stderr, "cachetd: slab_chunk_max (bytes: %zu) can chain values of at most %zu bytes, "
            "less than -I (item_size_max %zu): raise -o slab_chunk_max or lower -I\n",
            slabs_chunk_max(), lo, g_cfg.item_size_max);
    return -1;
}

/* Allocates the data chunks of a chained head; false (and nothing held) if
 * memory ran out. */
static bool alloc_chain(storage_thread *t, item *head, const struct shape *sh, enum store_result *err)
{
    int top = (int)slabs_class_count();
    struct chain_desc d = { .total = 0, .nchunks = sh->nchunks };
    size_t cap = chunk_capacity(top);
    for (uint32_t i = 0; i < sh->nchunks; i++) {
        bool last = i + 1 == sh->nchunks;
        size_t len = last ? sh->last_chunk : cap;
        int cls = last ? slabs_clsid(ITEM_HDR + len) : top;
        item *c = cls ? alloc_chunk(t, cls, slabs_clsid_of(head), false, err) : NULL;
        if (!c) {
            for (uint32_t j = 0; j < i; j++) slabs_free_chunk(handle_item(item_chain_handle(head, j)));
            return false;
        }
        atomic_store_explicit(&c->h_next, item_handle(head), memory_order_relaxed);
        atomic_store_explicit(&c->lru_next, 0, memory_order_relaxed);
        c->size_key = (uint32_t)len;
        atomic_store_explicit(&c->iflags, ITEM_DATA, memory_order_release);
        uint32_t h = item_handle(c);
        memcpy(item_data(head) + sizeof d + 4 * (size_t)i, &h, 4);
        d.total += len;
    }
    d.total += sh->tail;
    memcpy(item_data(head), &d, sizeof d);
    return true;
}

/* memcached 1.6.45's -I bounds the whole item as it counts one, not the
 * value alone: its 48-byte header, the key and a NUL, the value's "\r\n",
 * the CAS (not with -C) and 4 bytes of client flags when they are not 0. At
 * -I 1m the largest value under key "k" is 1,048,516 bytes, at any -I. */
#define MEMCACHED_ITEM_HEADER 48
static bool fits_item_size_max(size_t nkey, uint32_t client_flags, uint64_t nbytes)
{
    uint64_t whole = MEMCACHED_ITEM_HEADER + nkey + 1 + nbytes + 2 + (g_use_cas ? 8 : 0) +
                     (client_flags ? 4 : 0);
    return whole <= g_cfg.item_size_max;
}

/* alloc_item's work, with wait_us to sleep at most before evicting. */
static item *alloc_item_unbudgeted(storage_thread *t, const char *key, size_t nkey, uint32_t client_flags,
                                   rel_time_t exptime, uint64_t nbytes, uint8_t extra_layout,
                                   enum store_result *err, int64_t wait_us)
{
    if (nkey == 0 || nkey > KEY_MAX_LENGTH) { if (err) *err = STORE_NOT_STORED; return NULL; }
    bool stub = (extra_layout & ITEM_ON_DISK) != 0;   /* nbytes: the length of the value on disk */
    if (!stub && !fits_item_size_max(nkey, client_flags, nbytes)) { if (err) *err = STORE_TOO_LARGE; return NULL; }
    if (stub && nbytes > UINT32_MAX) { if (err) *err = STORE_TOO_LARGE; return NULL; }
    uint8_t layout = extra_layout & (ITEM_HAS_EXPTIME | ITEM_KEY_BINARY | ITEM_ON_DISK);
    if (client_flags) layout |= ITEM_HAS_FLAGS;
    if (exptime) layout |= ITEM_HAS_EXPTIME;
    struct shape sh;
    if (!plan_shape(nkey, nbytes, layout, &sh)) { if (err) *err = STORE_TOO_LARGE; return NULL; }
    if (t) t->wait_left_us = wait_us;
    item *it = alloc_chunk(t, sh.clsid, 0, (sh.layout & ITEM_ON_DISK) != 0, err);
    if (!it) return NULL;
    atomic_store_explicit(&it->h_next, 0, memory_order_relaxed);
    atomic_store_explicit(&it->lru_next, 0, memory_order_relaxed);
    atomic_store_explicit(&it->time, stamp_time(), memory_order_relaxed);
    uint32_t size_field = stub ? (uint32_t)(nbytes < ITEM_NBYTES_MAX ? nbytes : ITEM_NBYTES_MAX) : (uint32_t)sh.nstored;
    it->size_key = size_field | (uint32_t)nkey << 24;
    if (stub && size_field == ITEM_NBYTES_MAX) {
        uint32_t n32 = (uint32_t)nbytes;
        memcpy(item_data(it) + EXT_LOC_BYTES, &n32, 4);
    }
    atomic_store_explicit(&it->bag, 0, memory_order_relaxed);
    atomic_store_explicit(&it->iflags, sh.layout, memory_order_relaxed);
    memcpy(item_key(it), key, nkey);
    if (g_use_cas) atomic_store_explicit(item_cas_ptr(it), 0, memory_order_relaxed);
    if (sh.layout & ITEM_HAS_EXPTIME) atomic_store_explicit(item_exptime_ptr(it), exptime, memory_order_relaxed);
    if (sh.layout & ITEM_HAS_FLAGS) memcpy(item_cflags_ptr(it), &client_flags, 4);
    if (item_refcounted(it)) atomic_store_explicit(item_ref_ptr(it), 1, memory_order_relaxed);
    if ((sh.layout & ITEM_CHAINED) && !alloc_chain(t, it, &sh, err)) {
        slabs_free_chunk(it);
        return NULL;
    }
    if (sh.layout & ITEM_CHAINED)
        atomic_fetch_add_explicit(&g_class_chained_heads[slabs_clsid_of(it)], 1, memory_order_relaxed);
    return it;
}

item *alloc_item(storage_thread *t, const char *key, size_t nkey, uint32_t client_flags,
                 rel_time_t exptime, uint64_t nbytes, uint8_t extra_layout, enum store_result *err,
                 bool may_wait)
{
    item *it = alloc_item_unbudgeted(t, key, nkey, client_flags, exptime, nbytes, extra_layout, err,
                                     may_wait ? STORE_WAIT_MAX_US : 0);
    if (t) t->wait_left_us = 0;   /* no leftover for the next caller's evictions */
    return it;
}

item *item_alloc(storage_thread *t, const char *key, size_t nkey, uint32_t client_flags,
                 rel_time_t exptime, uint32_t nbytes, enum store_result *err)
{
    return alloc_item(t, key, nkey, client_flags, exptime, nbytes, 0, err, true);
}

item *item_alloc_parking(storage_thread *t, const char *key, size_t nkey, uint32_t client_flags,
                         rel_time_t exptime, uint32_t nbytes, struct store_park *park,
                         enum store_result *err)
{
    if (t) t->park = park;
    item *it = alloc_item(t, key, nkey, client_flags, exptime, nbytes, 0, err, true);
    if (t) t->park = NULL;
    return it;
}

unsigned item_slab_class(const item *it)
{
    return (unsigned)slabs_clsid_of(it);
}

void item_set_key_binary(item *it)
{
    atomic_fetch_or_explicit(&it->iflags, ITEM_KEY_BINARY, memory_order_relaxed);
}

/* The value, piece by piece: data chunks in order, then the head's piece. */
static size_t value_pieces(item *it, size_t skip, struct iovec *iov, size_t max)
{
    uint8_t layout = item_layout(it);
    /* a stub's value is not in RAM (its size field is the length on disk,
     * up to 16 MiB): there are no pieces to hand out */
    if (layout & ITEM_ON_DISK) return 0;
    if (!(layout & ITEM_CHAINED)) {
        size_t n = item_size_field(it);
        if (max == 0 || skip >= n) return 0;
        iov[0].iov_base = item_data(it) + skip;
        iov[0].iov_len = n - skip;
        return 1;
    }
    struct chain_desc d = item_chain(it);
    size_t k = 0;
    for (uint32_t i = 0; i <= d.nchunks && k < max; i++) {
        char *p;
        size_t len;
        if (i < d.nchunks) {
            item *c = handle_item(item_chain_handle(it, i));
            p = chunk_data(c);
            len = item_size_field(c);   /* a data chunk's flags byte (ITEM_DATA) is no layout */
        } else {
            p = item_data(it) + sizeof d + 4 * (size_t)d.nchunks;
            len = item_nstored(it) - sizeof d - 4 * (size_t)d.nchunks;
        }
        if (skip >= len) { skip -= len; continue; }
        iov[k].iov_base = p + skip;
        iov[k].iov_len = len - skip;
        skip = 0;
        if (iov[k].iov_len) k++;
    }
    return k;
}

char *item_value_span(item *it, size_t off, size_t *len)
{
    struct iovec v;
    if (value_pieces(it, off, &v, 1) == 0) { *len = 0; return NULL; }
    *len = v.iov_len;
    return v.iov_base;
}

char *item_value(item *it) { return item_data(it); }

/* Copies len bytes of the value starting at off into dst. */
void copy_value_out(item *it, size_t off, char *dst, size_t len)
{
    while (len) {
        size_t n;
        char *p = item_value_span(it, off, &n);
        if (!p) break;
        if (n > len) n = len;
        memcpy(dst, p, n);
        dst += n; off += n; len -= n;
    }
}

/* Copies len bytes of src's value from src_off into dst's value at dst_off. */
static void copy_value(item *dst, size_t dst_off, item *src, size_t src_off, size_t len)
{
    while (len) {
        size_t n;
        char *p = item_value_span(dst, dst_off, &n);
        if (!p) break;
        if (n > len) n = len;
        copy_value_out(src, src_off, p, n);
        dst_off += n; src_off += n; len -= n;
    }
}

void item_discard(storage_thread *t, item *it)
{
    (void)t;
    if (it) free_item_memory(it);
}

static void set_cas(storage_thread *t, item *it, uint64_t explicit_cas)
{
    if (!g_use_cas) return;
    uint64_t c = explicit_cas ? explicit_cas : storage_next_cas(t);
    atomic_store_explicit(item_cas_ptr(it), c, memory_order_relaxed);
}

static void set_exptime(item *it, rel_time_t exptime)
{
    if (item_layout(it) & ITEM_HAS_EXPTIME)
        atomic_store_explicit(item_exptime_ptr(it), exptime, memory_order_relaxed);
}

/* The sizes a copy of `it` needs, read under its stripe lock. */
struct copy_plan { size_t nkey; uint64_t nbytes; uint32_t cflags; uint8_t layout; };
static struct copy_plan plan_copy(item *it)
{
    return (struct copy_plan){ item_nkey(it), item_nbytes(it), item_cflags(it), item_layout(it) };
}
static bool plan_equal(const struct copy_plan *a, const struct copy_plan *b)
{
    return a->nkey == b->nkey && a->nbytes == b->nbytes && a->cflags == b->cflags && a->layout == b->layout;
}

/* A copy of the current item `old` (stripe lock held) into `fresh` (allocated
 * from plan_copy(old) with an expiry field): same value (a stub: the same
 * locator, so the copy reads the same record), flags, CAS, state and
 * fetched bit. */
static void fill_copy(item *fresh, item *old)
{
    if (item_layout(old) & ITEM_ON_DISK) memcpy(item_data(fresh), item_data(old), item_nstored(old));
    else copy_value(fresh, 0, old, 0, (size_t)item_nbytes(old));
    if (g_use_cas) atomic_store_explicit(item_cas_ptr(fresh), item_get_cas(old), memory_order_relaxed);
    set_exptime(fresh, item_exptime(old));
    atomic_fetch_or_explicit(&fresh->iflags, item_fl(old) & (ITEM_STALE | ITEM_WIN_SENT), memory_order_relaxed);
    atomic_store_explicit(&fresh->bag, atomic_load_explicit(&old->bag, memory_order_relaxed) & ITEM_FETCHED_BIT,
                          memory_order_relaxed);
    atomic_store_explicit(&fresh->time, atomic_load_explicit(&old->time, memory_order_relaxed), memory_order_relaxed);
}

static item *alloc_copy(storage_thread *t, const char *key, const struct copy_plan *p)
{
    return alloc_item(t, key, p->nkey, p->cflags, 0, p->nbytes,
                      (uint8_t)((p->layout & (ITEM_KEY_BINARY | ITEM_ON_DISK)) | ITEM_HAS_EXPTIME), NULL, true);
}

/* The slab mover's rescue (memcached counts these as slab_reassign_rescues):
 * the item `expect`, found at `key` in a page being emptied, moves to another
 * chunk of its own class, one already free or never carved, so nothing is
 * evicted for it and no page moves (the caller holds the mover lock).
 * Same layout, key, value (or disk locator), flags, expiry, CAS, state and
 * last access; the old chunk is unlinked and freed after the grace period,
 * like any replaced item. Chained values stay where they are (their data
 * chunks would move too). The chunk is taken before the stripe lock: class
 * locks come before stripe locks. False: left for eviction. */
bool item_rescue(storage_thread *t, item *expect, const char *key, size_t nkey)
{
    uint8_t layout = item_layout(expect);
    if (layout & ITEM_CHAINED) return false;
    int cls = slabs_clsid_of(expect);
    item *fresh = slabs_alloc_chunk(cls);
    if (!fresh) return false;
    uint32_t hv = hash_key(key, nkey);
    stripe_lock(hv);
    item *it = assoc_find_locked(key, nkey, hv);
    bool ok = it == expect && item_layout(it) == layout && item_is_live(it, now_time()) &&
              slabs_clsid_of(it) == cls;
    if (ok) {
        atomic_store_explicit(&fresh->h_next, 0, memory_order_relaxed);
        atomic_store_explicit(&fresh->lru_next, 0, memory_order_relaxed);
        atomic_store_explicit(&fresh->time, atomic_load_explicit(&it->time, memory_order_relaxed), memory_order_relaxed);
        fresh->size_key = it->size_key;
        atomic_store_explicit(&fresh->bag, atomic_load_explicit(&it->bag, memory_order_relaxed) & ITEM_FETCHED_BIT,
                              memory_order_relaxed);
        atomic_store_explicit(&fresh->iflags, layout, memory_order_relaxed);
        memcpy(item_key(fresh), item_key(it), nkey);
        memcpy(item_data(fresh), item_data(it), item_nstored(it));
        if (g_use_cas) atomic_store_explicit(item_cas_ptr(fresh), item_get_cas(it), memory_order_relaxed);
        if (layout & ITEM_HAS_EXPTIME) atomic_store_explicit(item_exptime_ptr(fresh), item_exptime(it), memory_order_relaxed);
        if (layout & ITEM_HAS_FLAGS) memcpy(item_cflags_ptr(fresh), item_cflags_ptr(it), 4);
        if (item_refcounted(fresh)) atomic_store_explicit(item_ref_ptr(fresh), 1, memory_order_relaxed);
        atomic_fetch_or_explicit(&fresh->iflags, item_fl(it) & (ITEM_STALE | ITEM_WIN_SENT), memory_order_relaxed);
        replace_with_copy_locked(t, it, fresh, hv);
    }
    stripe_unlock(hv);
    if (!ok) {
        slabs_free_chunk(fresh);
        return false;
    }
    enter_bag(t, fresh);
    return true;
}

/* Under the stripe lock: gives *itp an expiry field if it needs one for
 * `exptime`, by replacing it with a copy (the copy-on-write of items.c's
 * header). The copy is allocated outside the lock: RESHAPE_RETRY means the
 * lock was dropped for that, retake it and look the key up again (the copy
 * waits in *fresh, sized for *want); RESHAPE_NOMEM means the lock was dropped
 * and there is no memory. On RESHAPE_OK *itp may be the copy, now linked in
 * place of the old item (*reshaped set: it must enter a bag after the lock). */
enum reshape { RESHAPE_OK, RESHAPE_RETRY, RESHAPE_NOMEM };
static enum reshape reshape_for_exptime(storage_thread *t, const char *key, uint32_t hv, item **itp,
                                        rel_time_t exptime, item **fresh, struct copy_plan *want, bool *reshaped)
{
    item *it = *itp;
    if (item_exptime_fits(it, exptime)) return RESHAPE_OK;
    struct copy_plan p = plan_copy(it);
    if (!*fresh || !plan_equal(&p, want)) {
        stripe_unlock(hv);
        if (*fresh) item_discard(t, *fresh);
        *want = p;
        *fresh = alloc_copy(t, key, &p);
        return *fresh ? RESHAPE_RETRY : RESHAPE_NOMEM;
    }
    fill_copy(*fresh, it);
    replace_with_copy_locked(t, it, *fresh, hv);
    *itp = *fresh;
    *fresh = NULL;
    *reshaped = true;
    return RESHAPE_OK;
}

/* ---- reads ---- */

/* What only meta commands and extstore's reads use: a text GET, the
 * commonest request, leaves it out (get_opts.value_only). */
static void fill_view_meta(item *it, int clsid, uint8_t fl, struct item_view *out)
{
    out->exptime = item_exptime(it);
    out->last_access = atomic_load_explicit(&it->time, memory_order_relaxed);
    out->fetched_before = (atomic_load_explicit(&it->bag, memory_order_relaxed) & ITEM_FETCHED_BIT) != 0;
    out->stale = (fl & ITEM_STALE) != 0;
    out->key_binary = (fl & ITEM_KEY_BINARY) != 0;
    out->created = false;
    out->exptime_before = out->exptime;
    out->slab_class = (uint8_t)clsid;
    out->item_size = (uint32_t)item_ntotal(it);
}

static void fill_view(storage_thread *t, item *it, int clsid, bool value_only, char *copy_buf, size_t copy_cap,
                      struct item_view *out)
{
    uint8_t fl = item_fl(it);
    /* item_nbytes without loading the flags again; a stub's is below */
    uint64_t nbytes = (fl & ITEM_CHAINED) ? item_chain(it).total : item_size_field(it);
    out->nbytes = (uint32_t)nbytes;
    out->client_flags = item_cflags(it);
    out->cas = item_get_cas(it);
    if (!value_only || (fl & ITEM_ON_DISK)) fill_view_meta(it, clsid, fl, out);
    out->ref = NULL;
    out->on_disk = false;
    if (fl & ITEM_ON_DISK) {
        /* the value is on disk: the caller reads it (ext_io.c) with the
         * locator, or asks for metadata only */
        struct ext_stub st = item_ext_stub(it);
        out->on_disk = true;
        out->nbytes = st.nbytes;
        memcpy(out->ext_loc, &st.loc, sizeof out->ext_loc);
        out->value = NULL;
        return;
    }
    if (!copy_buf && copy_cap == 0) {
        /* metadata only (mg without v): no copy, no reference */
        out->value = NULL;
    } else if (copy_buf && nbytes <= copy_cap) {
        copy_value_out(it, 0, copy_buf, (size_t)nbytes);
        out->value = copy_buf;
        STAT_INC(t, get_copied);
    } else if (item_refcounted(it)) {
        atomic_fetch_add_explicit(item_ref_ptr(it), 1, memory_order_relaxed);
        size_t first;
        out->value = item_value_span(it, 0, &first);
        out->ref = it;
        STAT_INC(t, get_referenced);
    } else {
        /* Small value and no room in the caller's buffer: a private copy. */
        char *p = malloc(nbytes ? (size_t)nbytes : 1);
        if (p) copy_value_out(it, 0, p, (size_t)nbytes);
        out->value = p ? p : "";
        out->ref = p ? &heap_view_marker : NULL;
        if (!p) out->nbytes = 0;
    }
}

size_t item_view_pieces(const struct item_view *v, size_t skip, struct iovec *iov, size_t max)
{
    if (v->ref && v->ref != &heap_view_marker) return value_pieces(v->ref, skip, iov, max);
    if (max == 0 || skip >= v->nbytes) return 0;
    iov[0].iov_base = (char *)v->value + skip;
    iov[0].iov_len = v->nbytes - skip;
    return 1;
}

/* memcached's get_flushed or get_expired, for a miss on a dead item */
static void count_dead_miss(storage_thread *t, item *dead, rel_time_t now)
{
    if (item_is_flushed(dead, now)) STAT_INC(t, get_flushed);
    else STAT_INC(t, get_expired);
}

static void count_miss(storage_thread *t, item *it, rel_time_t now)
{
    STAT_INC(t, get_misses);
    if (it) count_dead_miss(t, it, now);
}

/* A lock-free GET that found an expired or flushed item: counts the miss's
 * kind, leaves the read section, and takes the item out, as memcached's
 * do_item_get does: curr_items, bytes and a stub's disk record go at once, not
 * at the cleaner's next sweep (up to SWEEP_INTERVAL later); the chunk then
 * waits for the cleaner like a deleted one. The stripe lock is taken after
 * the read section: a stripe-lock holder may not be waited for inside one.
 * So `dead` may have been reclaimed and reused by then, and is only compared:
 * the key's current item goes if it is still that one and still dead (if the
 * chunk now holds a newer item with the key that is dead too, it had to go
 * anyway; a live one stays). Cold and out of line: a hit and a plain miss pay
 * nothing for it. */
static __attribute__((noinline, cold)) void miss_on_dead_item(storage_thread *t, const char *key, size_t nkey,
                                                              uint32_t hv, item *dead, rel_time_t now)
{
    count_dead_miss(t, dead, now);
    epoch_exit(t);
    stripe_lock(hv);
    item *it = assoc_find_locked(key, nkey, hv);
    if (it == dead && !item_is_live_in(it, time_view_now())) item_unlink_locked(it, hv);
    stripe_unlock(hv);
}

/* The locked GET: touch (gat, mg T), vivify (mg N), recache (mg R) and win
 * tokens. `fresh` is memory allocated outside the lock on an earlier round:
 * a vivified item, or a copy of the item with room for a new expiry. */
static bool get_locked(storage_thread *t, const char *key, size_t nkey, uint32_t hv,
                       const struct get_opts *opts, char *copy_buf, size_t copy_cap, struct item_view *out)
{
    item *fresh = NULL;
    struct copy_plan want = {0};
    for (int attempt = 0; attempt < RMW_RETRIES; attempt++) {
        stripe_lock(hv);
        struct time_view tv = time_view_now();
        rel_time_t now = tv.now;
        item *it = assoc_find_locked(key, nkey, hv);
        if (it && !item_is_live_in(it, tv)) {
            count_miss(t, it, now);
            item_unlink_locked(it, hv);
            it = NULL;
            if (!opts->vivify) { stripe_unlock(hv); break; }
        }
        bool created = false, reshaped = false;
        if (!it && opts->vivify) {
            if (!fresh || plan_copy(fresh).nbytes != 0 || item_nkey(fresh) != nkey) {
                stripe_unlock(hv);
                if (fresh) item_discard(t, fresh);
                fresh = alloc_item(t, key, nkey, 0, opts->vivify_exptime, 0, 0, NULL, true);
                if (!fresh) { STAT_INC(t, get_misses); return false; }
                continue;   /* retake the lock and look again */
            }
            atomic_fetch_or_explicit(&fresh->iflags, ITEM_WIN_SENT, memory_order_relaxed);
            set_exptime(fresh, opts->vivify_exptime);
            set_cas(t, fresh, opts->vivify_cas);
            link_new_locked(t, fresh, hv);
            it = fresh;
            fresh = NULL;
            created = true;
        }
        if (!it) {
            stripe_unlock(hv);
            STAT_INC(t, get_misses);
            break;
        }
        /* memcached applies T and N in request order: an item N creates
         * keeps N's expiry when N comes after T */
        bool touch = opts->touch && !(created && opts->vivify_last);
        rel_time_t before = created ? 0 : item_exptime(it);
        if (touch) {
            enum reshape r = reshape_for_exptime(t, key, hv, &it, opts->new_exptime, &fresh, &want, &reshaped);
            if (r == RESHAPE_NOMEM) { STAT_INC(t, get_misses); return false; }
            if (r == RESHAPE_RETRY) continue;
        }
        if (touch) set_exptime(it, opts->new_exptime);
        int clsid = slabs_clsid_of(it);
        fill_view(t, it, clsid, false, copy_buf, copy_cap, out);
        out->created = created;
        out->exptime_before = before;
        out->win = false;
        out->win_sent_before = false;
        if (created) {
            out->win = true;
        } else {
            uint8_t fl = item_fl(it);
            bool wants = (fl & ITEM_STALE) && opts->win_tokens;
            if (opts->recache) {
                rel_time_t exp = opts->recache_before_touch ? before : item_exptime(it);
                /* an expiry already past (T-1 earlier on the line) is below any R
                 * too; memcached compares absolute times, R0 never wins */
                if (exp != 0 && opts->recache_below != 0 && (exp < now || exp - now < opts->recache_below))
                    wants = true;
            }
            if (fl & ITEM_WIN_SENT) {
                out->win_sent_before = true;
            } else if (wants) {
                atomic_fetch_or_explicit(&it->iflags, ITEM_WIN_SENT, memory_order_relaxed);
                out->win = true;
            }
        }
        if (!opts->no_lru_bump) bags_stamp(it, clsid, stamp_time_in(tv));
        stripe_unlock(hv);
        if (created || reshaped) enter_bag(t, it);
        if (fresh) item_discard(t, fresh);   /* somebody else created it first */
        STAT_INC(t, get_hits);
        CLS_INC(t, clsid, get_hits);
        return true;
    }
    if (fresh) item_discard(t, fresh);
    return false;
}

#ifdef CACHET_TEST_HOOKS
/* The concurrent checker sets this so that now and then a reader stalls
 * between finding an item and copying it, the window in which a broken
 * reclamation scheme would hand the chunk to somebody else. Test builds
 * only: a release GET should not pay even a relaxed load for it. */
_Atomic unsigned g_test_reader_stall;

static void test_reader_stall(storage_thread *t)
{
    if ((++t->stall_tick & 63) == 0) {
        struct timespec ts = {0, 200 * 1000};
        nanosleep(&ts, NULL);
    }
}
#endif

void storage_prefetch_keys(storage_thread *t, struct storage_key *keys, int n)
{
    for (int i = 0; i < n; i++) keys[i].hv = hash_key(keys[i].key, keys[i].nkey);
    /* a lone key would only pay the read section's fence for a miss its
     * lookup takes anyway */
    if (n < 2) return;
    epoch_enter(t);
    for (int i = 0; i < n; i++) assoc_prefetch_bucket(keys[i].hv);
    for (int i = 0; i < n; i++) assoc_prefetch_item(keys[i].hv);
    epoch_exit(t);
}

/* get_locked, seen by the miss-ratio curve: the item's size is that of
 * its view (the item may be gone once the lock is dropped). */
static bool get_locked_noted(storage_thread *t, const char *key, size_t nkey, uint32_t hv,
                             const struct get_opts *opts, char *copy_buf, size_t copy_cap, struct item_view *out)
{
    bool hit = get_locked(t, key, nkey, hv, opts, copy_buf, copy_cap, out);
    mrc_get(t, hv, key, nkey, hit ? (uint32_t)item_ntotal_for(0, nkey, out->nbytes) : 0);
    return hit;
}

bool storage_get(storage_thread *t, const char *key, size_t nkey, const struct get_opts *opts,
                 char *copy_buf, size_t copy_cap, struct item_view *out)
{
    return storage_get_hashed(t, key, nkey, hash_key(key, nkey), opts, copy_buf, copy_cap, out);
}

bool storage_get_hashed(storage_thread *t, const char *key, size_t nkey, uint32_t hv,
                        const struct get_opts *opts, char *copy_buf, size_t copy_cap, struct item_view *out)
{
    static const struct get_opts none;
    if (!opts) opts = &none;
    memset(out, 0, sizeof *out);
    if (opts->touch || opts->vivify || opts->recache)
        return get_locked_noted(t, key, nkey, hv, opts, copy_buf, copy_cap, out);

    epoch_enter(t);
    item *it = assoc_find(t, key, nkey, hv);
    struct time_view tv = time_view_now();
    if (!it || !item_is_live_in(it, tv)) {
        STAT_INC(t, get_misses);
        if (it) miss_on_dead_item(t, key, nkey, hv, it, tv.now);
        else epoch_exit(t);
        mrc_get(t, hv, key, nkey, 0);
        slabs_gain_missed(hv);
        return false;
    }
#ifdef CACHET_TEST_HOOKS
    if (atomic_load_explicit(&g_test_reader_stall, memory_order_relaxed)) test_reader_stall(t);
    unsigned hold = atomic_load_explicit(&t->test_hold_us, memory_order_relaxed);
    if (hold) {
        /* the checker's reclaim race: another thread now deletes this key and
         * forces the item's reclamation; the grace period must outlast us */
        atomic_store_explicit(&t->test_hold_us, 0, memory_order_relaxed);
        atomic_store_explicit(&t->test_held, it, memory_order_release);
        struct timespec ts = {0, (long)hold * 1000};
        nanosleep(&ts, NULL);
        atomic_store_explicit(&t->test_held, NULL, memory_order_release);
    }
#endif
    uint8_t fl = item_fl(it);
    if (opts->win_tokens && (fl & (ITEM_STALE | ITEM_WIN_SENT))) {
        /* Handing out the win token must be exclusive: take the lock. */
        epoch_exit(t);
        return get_locked_noted(t, key, nkey, hv, opts, copy_buf, copy_cap, out);
    }
    int clsid = slabs_clsid_of(it);
    fill_view(t, it, clsid, opts->value_only, copy_buf, copy_cap, out);
    if (!opts->no_lru_bump) bags_stamp(it, clsid, stamp_time_in(tv));
    mrc_get(t, hv, key, nkey, (uint32_t)item_ntotal(it));
    epoch_exit(t);
    STAT_INC(t, get_hits);
    CLS_INC(t, clsid, get_hits);
    return true;
}

void item_view_release(storage_thread *t, struct item_view *v)
{
    (void)t;
    if (!v->ref) return;
    if (v->ref == &heap_view_marker) {
        free((void *)v->value);
    } else {
        item *it = v->ref;
        if (atomic_fetch_sub_explicit(item_ref_ptr(it), 1, memory_order_acq_rel) == 1) free_item_memory(it);
    }
    v->ref = NULL;
    v->value = NULL;
}

/* ---- writes ---- */

static bool cas_mismatch(item *it, uint64_t cas_in)
{
    return item_get_cas(it) != cas_in;
}

/* Fills n (allocated for old + add) with old+add (append) or add+old
 * (prepend). Caller holds the stripe lock, so old is current. */
static void combine_into(item *n, item *old_it, item *add, bool append)
{
    size_t on = (size_t)item_nbytes(old_it), an = (size_t)item_nbytes(add);
    if (append) {
        copy_value(n, 0, old_it, 0, on);
        copy_value(n, on, add, 0, an);
    } else {
        copy_value(n, 0, add, 0, an);
        copy_value(n, an, old_it, 0, on);
    }
    set_exptime(n, item_exptime(old_it));
}

enum store_result storage_store(storage_thread *t, item *it, enum store_mode mode,
                                const struct store_opts *opts, uint64_t *cas_out)
{
    static const struct store_opts none;
    if (!opts) opts = &none;
    const char *key = item_key(it);
    size_t nkey = item_nkey(it);
    uint32_t hv = hash_key(key, nkey);
    enum store_result res = STORE_NOT_STORED;
    item *combined = NULL;   /* append/prepend result, or `it` reshaped to take an expiry */
    if (cas_out) *cas_out = 0;
    bool check_cas = mode == MODE_CAS || opts->cas_in != 0;

    for (int attempt = 0; attempt < RMW_RETRIES; attempt++) {
        stripe_lock(hv);
        struct time_view tv = time_view_now();
        item *old = find_live_locked(key, nkey, hv, tv);
        bool stale_store = false;
        if (old && (item_layout(old) & ITEM_ON_DISK) && (mode == MODE_APPEND || mode == MODE_PREPEND)) {
            /* the value is on disk: bring it back to RAM first (a failed
             * read drops the item, as a miss), then combine as usual */
            stripe_unlock(hv);
            if (!ext_hooks()->materialize(t, key, nkey, hv)) { res = STORE_NO_MEMORY; goto out; }
            continue;
        }

        if (mode == MODE_CAS && !old) { res = STORE_NOT_FOUND; STAT_INC(t, cas_misses); goto out_unlock; }
        if (old && check_cas && cas_mismatch(old, opts->cas_in)) {
            /* memcached: a C of 0 is no CAS to be older than, so I never
             * makes it a stale store */
            if (opts->invalidate && opts->cas_in != 0 && opts->cas_in < item_get_cas(old)) {
                stale_store = true;   /* ms I: store, but mark it stale */
            } else {
                res = STORE_EXISTS;
                if (mode == MODE_CAS) { STAT_INC(t, cas_badval); CLS_INC(t, slabs_clsid_of(old), cas_badval); }
                goto out_unlock;
            }
        }
        bool may_vivify = (mode == MODE_APPEND || mode == MODE_PREPEND) && opts->vivify_on_miss;
        if (!old && check_cas && mode != MODE_CAS && mode != MODE_ADD && !may_vivify) {
            /* ms with C on a missing item (memcached compares C only with an
             * item there: append/prepend with N create the missing one) */
            res = STORE_NOT_FOUND;
            goto out_unlock;
        }
        if (mode == MODE_ADD && old) {
            /* memcached bumps the existing item on a failed add (not a fetch) */
            bags_bump(old, slabs_clsid_of(old), stamp_time_in(tv));
            res = STORE_NOT_STORED;
            goto out_unlock;
        }
        if (mode == MODE_REPLACE && !old) { res = STORE_NOT_STORED; goto out_unlock; }
        bool vivify = (mode == MODE_APPEND || mode == MODE_PREPEND) && !old;
        if (vivify && !opts->vivify_on_miss) { res = STORE_NOT_STORED; goto out_unlock; }

        item *store_it = it;
        /* an expiry the new item must carry but has no field for */
        rel_time_t keep_exp = stale_store ? item_exptime(old) : vivify ? opts->vivify_exptime : 0;
        bool needs_exp_field = (stale_store || vivify) && !item_exptime_fits(it, keep_exp);
        if (((mode == MODE_APPEND || mode == MODE_PREPEND) && old) || needs_exp_field) {
            bool combine = !needs_exp_field;
            uint64_t total = combine ? item_nbytes(old) + item_nbytes(it) : item_nbytes(it);
            uint32_t cf = combine ? item_cflags(old) : item_cflags(it);
            uint8_t extra = (uint8_t)(item_layout(combine ? old : it) & ITEM_KEY_BINARY) |
                            (needs_exp_field || (combine && item_exptime(old)) ? ITEM_HAS_EXPTIME : 0);
            if (!combined || item_nbytes(combined) != total || item_cflags(combined) != cf ||
                (item_layout(combined) & extra) != extra) {
                stripe_unlock(hv);
                if (combined) item_discard(t, combined);
                combined = NULL;
                /* no sleeping wait for the flusher here: the request's data
                 * is read, so it cannot park and run again, and a sleep
                 * would hold every other client of this worker (its own
                 * data item parked already, in start_store); it evicts at
                 * once, as memcached's append does */
                if (total <= UINT32_MAX)
                    combined = alloc_item(t, key, nkey, cf, 0, total, extra, NULL, false);
                /* memcached 1.6.45 answers an append or prepend whose result
                 * it cannot allocate (past -I, or no memory) with NOT_STORED
                 * and keeps the old value; only a store's own item failing is
                 * a SERVER_ERROR */
                if (!combined) { res = combine ? STORE_NOT_STORED : STORE_NO_MEMORY; goto out; }
                continue;   /* retake the lock; `old` may have changed meanwhile */
            }
            if (combine) {
                combine_into(combined, old, it, mode == MODE_APPEND);
            } else {
                copy_value(combined, 0, it, 0, (size_t)item_nbytes(it));
                set_exptime(combined, item_exptime(it));
            }
            store_it = combined;
        }
        if (vivify) set_exptime(store_it, opts->vivify_exptime);

        set_cas(t, store_it, opts->cas_set);
        if (stale_store) {
            /* memcached: the stale value replaces the old one but keeps its
             * TTL and whether a win token was already handed out */
            atomic_fetch_or_explicit(&store_it->iflags, ITEM_STALE | (item_fl(old) & ITEM_WIN_SENT),
                                     memory_order_relaxed);
            set_exptime(store_it, item_exptime(old));
        }
        if (old) replace_locked(t, old, store_it, hv, true);
        else link_new_locked(t, store_it, hv);
        if (cas_out) *cas_out = item_get_cas(store_it);
        if (opts->nbytes_out) *opts->nbytes_out = item_nbytes(store_it);
        int sclsid = slabs_clsid_of(store_it);
        uint32_t stored_bytes = (uint32_t)item_ntotal(store_it);
        stripe_unlock(hv);
        mrc_store(t, hv, key, nkey, stored_bytes);
        enter_bag(t, store_it);
        if (store_it != it) item_discard(t, it);
        else if (combined) item_discard(t, combined);   /* built on an earlier attempt, not needed */
        CLS_INC(t, sclsid, cmd_set);
        if (mode == MODE_CAS) { STAT_INC(t, cas_hits); CLS_INC(t, sclsid, cas_hits); }
        return STORE_STORED;
    }
    res = STORE_NOT_STORED;
    goto out;
out_unlock:
    stripe_unlock(hv);
out:
    if (combined) item_discard(t, combined);
    item_discard(t, it);
    return res;
}

enum store_result storage_delete(storage_thread *t, const char *key, size_t nkey, const struct delete_opts *opts)
{
    static const struct delete_opts none;
    if (!opts) opts = &none;
    uint32_t hv = hash_key(key, nkey);
    item *fresh = NULL;
    struct copy_plan want = {0};
    item *empty = NULL;      /* md x: the empty item that takes the old one's place */
    enum store_result res = STORE_NOT_FOUND;
    for (int attempt = 0; attempt < RMW_RETRIES; attempt++) {
        stripe_lock(hv);
        item *it = find_live_locked(key, nkey, hv, time_view_now());
        if (!it) {
            res = STORE_NOT_FOUND;
            STAT_INC(t, delete_misses);
        } else if ((opts->check_cas || opts->cas_in) && cas_mismatch(it, opts->cas_in)) {
            res = STORE_EXISTS;
        } else if (opts->remove_value) {
            /* md x, as memcached 1.6.45: a new empty item replaces the old
             * one; it has md's F flags and T expiry (none without T), keeps
             * the old CAS unless E names one, and with I is then marked stale
             * with a new CAS. Allocated only for an item that is there. */
            if (!empty) {
                stripe_unlock(hv);
                empty = alloc_item(t, key, nkey, opts->client_flags,
                                   opts->update_ttl ? opts->new_exptime : 0, 0, 0, NULL, true);
                if (!empty) return STORE_NO_MEMORY;
                continue;   /* retake the lock; the item may have changed meanwhile */
            }
            set_cas(t, empty, opts->cas_set ? opts->cas_set : item_get_cas(it));
            if (opts->invalidate) {
                atomic_fetch_or_explicit(&empty->iflags, ITEM_STALE, memory_order_relaxed);
                set_cas(t, empty, opts->cas_set);
            } else {
                CLS_INC(t, slabs_clsid_of(it), delete_hits);
                STAT_INC(t, delete_hits);
            }
            replace_locked(t, it, empty, hv, true);
            stripe_unlock(hv);
            enter_bag(t, empty);
            return STORE_STORED;
        } else if (opts->invalidate) {
            /* md I: keep serving it, flagged stale; the next mg wins the recache. */
            bool reshaped = false;
            if (opts->update_ttl) {
                enum reshape r = reshape_for_exptime(t, key, hv, &it, opts->new_exptime, &fresh, &want, &reshaped);
                if (r == RESHAPE_NOMEM) return STORE_NO_MEMORY;
                if (r == RESHAPE_RETRY) continue;
            }
            atomic_fetch_and_explicit(&it->iflags, (uint8_t)~ITEM_WIN_SENT, memory_order_relaxed);
            atomic_fetch_or_explicit(&it->iflags, ITEM_STALE, memory_order_relaxed);
            set_cas(t, it, opts->cas_set);
            if (opts->update_ttl) set_exptime(it, opts->new_exptime);
            res = STORE_STORED;
            STAT_INC(t, delete_hits);
            CLS_INC(t, slabs_clsid_of(it), delete_hits);
            if (reshaped) {
                stripe_unlock(hv);
                enter_bag(t, it);
                return res;
            }
        } else {
            CLS_INC(t, slabs_clsid_of(it), delete_hits);
            item_unlink_locked(it, hv);
            res = STORE_STORED;
            STAT_INC(t, delete_hits);
        }
        stripe_unlock(hv);
        break;
    }
    if (fresh) item_discard(t, fresh);
    if (empty) item_discard(t, empty);
    return res;
}

enum store_result storage_touch(storage_thread *t, const char *key, size_t nkey, rel_time_t exptime)
{
    uint32_t hv = hash_key(key, nkey);
    item *fresh = NULL;
    struct copy_plan want = {0};
    enum store_result res = STORE_NOT_FOUND;
    for (int attempt = 0; attempt < RMW_RETRIES; attempt++) {
        stripe_lock(hv);
        struct time_view tv = time_view_now();
        item *it = find_live_locked(key, nkey, hv, tv);
        bool reshaped = false;
        if (it) {
            enum reshape r = reshape_for_exptime(t, key, hv, &it, exptime, &fresh, &want, &reshaped);
            if (r == RESHAPE_NOMEM) return STORE_NO_MEMORY;
            if (r == RESHAPE_RETRY) continue;
        }
        if (it) {
            set_exptime(it, exptime);
            bags_stamp(it, slabs_clsid_of(it), stamp_time_in(tv));
            STAT_INC(t, touch_hits);
            CLS_INC(t, slabs_clsid_of(it), touch_hits);
            res = STORE_STORED;
        } else {
            STAT_INC(t, touch_misses);
        }
        stripe_unlock(hv);
        if (reshaped) enter_bag(t, it);
        break;
    }
    if (fresh) item_discard(t, fresh);
    return res;
}

/* memcached's safe_strtoull on the stored value: leading spaces and '+'
 * allowed, digits, then the end or a space (so "12 abc" is 12, as in
 * memcached); no digits, a '-' sign on a huge number, or more than 64 bits is
 * not a number. An empty value is not a number, nor is a chained one (far
 * longer than any number). */
static bool value_to_u64(item *it, uint64_t *out)
{
    if (item_layout(it) & ITEM_CHAINED) return false;
    const char *p = item_data(it);
    size_t n = item_nstored(it);
    if (n == 0) return false;
    char stackbuf[64];
    char *buf = n < sizeof stackbuf ? stackbuf : malloc(n + 1);
    if (!buf) return false;
    memcpy(buf, p, n);
    buf[n] = '\0';
    char *end;
    errno = 0;
    unsigned long long v = strtoull(buf, &end, 10);
    bool ok = errno != ERANGE && end != buf && (isspace((unsigned char)*end) || *end == '\0');
    if (ok && (long long)v < 0 && memchr(buf, '-', (size_t)(end - buf))) ok = false;
    if (buf != stackbuf) free(buf);
    if (ok) *out = v;
    return ok;
}

enum arith_result storage_arith(storage_thread *t, const char *key, size_t nkey, bool incr, uint64_t delta,
                                const struct arith_opts *opts, uint64_t *value_out, uint64_t *cas_out,
                                rel_time_t *exptime_out)
{
    static const struct arith_opts none;
    if (!opts) opts = &none;
    uint32_t hv = hash_key(key, nkey);
    item *fresh = NULL;
    enum arith_result res = ARITH_NOT_FOUND;
    char digits[24];

    bool locked = false;
    for (int attempt = 0; attempt < RMW_RETRIES; attempt++) {
        stripe_lock(hv);
        locked = true;
        item *old = find_live_locked(key, nkey, hv, time_view_now());
        uint64_t value;
        uint32_t cf = 0;
        if (old && (item_layout(old) & ITEM_ON_DISK)) {
            stripe_unlock(hv);
            locked = false;
            if (!ext_hooks()->materialize(t, key, nkey, hv)) { res = ARITH_NO_MEMORY; goto out; }   /* see storage_store */
            continue;
        }
        if (!old) {
            if (!opts->vivify) {
                res = ARITH_NOT_FOUND;
                if (incr) STAT_INC(t, incr_misses); else STAT_INC(t, decr_misses);
                break;
            }
            value = opts->initial;
        } else {
            /* memcached: an empty value is non-numeric before the CAS is compared */
            if (item_nbytes(old) == 0) { res = ARITH_NON_NUMERIC; break; }
            if (opts->cas_in && cas_mismatch(old, opts->cas_in)) { res = ARITH_EXISTS; break; }
            if (!value_to_u64(old, &value)) { res = ARITH_NON_NUMERIC; break; }
            if (incr) value += delta;                      /* wraps at 2^64, as memcached */
            else value = delta > value ? 0 : value - delta; /* floors at 0 */
            cf = item_cflags(old);
        }
        int dlen = snprintf(digits, sizeof digits, "%" PRIu64, value);
        /* memcached rewrites the number in place when it fits in the old
         * value (padding with spaces: decr 10 -> "9 ") and the item keeps
         * its flags (stale, win, fetched); a longer number gets a new item.
         * We always build a new item (readers never see a half-written
         * number) but reproduce both outcomes byte for byte. */
        bool same_item = old && (uint32_t)dlen <= item_nstored(old);
        uint32_t len = same_item ? item_nstored(old) : (uint32_t)dlen;
        rel_time_t exp = old ? item_exptime(old) : opts->vivify_exptime;
        /* request order, as memcached: a counter N creates keeps N's expiry when N comes after T */
        if (opts->update_ttl && (old || !opts->vivify_last)) exp = opts->new_exptime;
        uint8_t keybin = old ? (item_layout(old) & ITEM_KEY_BINARY) : 0;
        if (!fresh || item_nstored(fresh) != len || item_cflags(fresh) != cf || !item_exptime_fits(fresh, exp) ||
            (item_layout(fresh) & ITEM_KEY_BINARY) != keybin) {
            stripe_unlock(hv);
            locked = false;
            res = ARITH_NO_MEMORY;
            if (fresh) item_discard(t, fresh);
            fresh = alloc_item(t, key, nkey, cf, exp, len, keybin, NULL, true);
            if (!fresh) { res = ARITH_NO_MEMORY; goto out; }
            continue;
        }
        memcpy(item_data(fresh), digits, (size_t)dlen);
        memset(item_data(fresh) + dlen, ' ', len - (uint32_t)dlen);
        set_exptime(fresh, exp);
        set_cas(t, fresh, opts->cas_set);
        if (same_item) {
            atomic_fetch_or_explicit(&fresh->iflags, item_fl(old) & (ITEM_STALE | ITEM_WIN_SENT), memory_order_relaxed);
            atomic_store_explicit(&fresh->bag, atomic_load_explicit(&old->bag, memory_order_relaxed) & ITEM_FETCHED_BIT,
                                  memory_order_relaxed);
            atomic_store_explicit(&fresh->time, atomic_load_explicit(&old->time, memory_order_relaxed),
                                  memory_order_relaxed);
        }
        if (old) replace_locked(t, old, fresh, hv, true);
        else link_new_locked(t, fresh, hv);
        if (value_out) *value_out = value;
        if (cas_out) *cas_out = item_get_cas(fresh);
        if (exptime_out) *exptime_out = exp;
        if (opts->created_out) *opts->created_out = !old;
        if (opts->exptime_before_out) *opts->exptime_before_out = old ? item_exptime(old) : 0;
        if (old) {
            int oc = slabs_clsid_of(old);
            if (incr) { STAT_INC(t, incr_hits); CLS_INC(t, oc, incr_hits); }
            else { STAT_INC(t, decr_hits); CLS_INC(t, oc, decr_hits); }
        }
        stripe_unlock(hv);
        enter_bag(t, fresh);
        return ARITH_OK;
    }
    if (locked) stripe_unlock(hv);
out:
    if (fresh) item_discard(t, fresh);
    return res;
}
