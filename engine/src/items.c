/*
 * items.c - memcached's item semantics on top of the hash table, slabs and
 * bags: get/gat/mg, the six store modes, delete, touch, incr/decr, flush, and
 * the meta protocol's vivify/recache/stale/win rules.
 *
 * Why every change builds a new item (copy-on-write) instead of editing in
 * place: a GET takes no lock, so it may be copying a value at the very moment
 * a writer changes it. Swapping in a complete new item with one release store
 * means a reader sees the old value or the new one, never a mix; incr/decr
 * and append/prepend pay one allocation and copy for that, which is what
 * memcached does for them anyway whenever the item is in use.
 *
 * Why allocation happens outside every lock: allocating may evict, eviction
 * takes other stripes' locks and waits for a grace period; doing that while
 * holding a stripe lock would stall that stripe's writers for the wait and
 * invite lock-order cycles. So read-modify-write commands (append, prepend,
 * incr/decr, vivify) look up the old item under the lock, drop the lock,
 * allocate, retake it and check that the old item is still the current one
 * (retrying, bounded, if not).
 */
#include "storage_internal.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define RMW_RETRIES 16

static item heap_view_marker;   /* view->ref for values copied into malloc'd memory */
static _Atomic uint64_t *size_hist;
static size_t size_hist_n;

int items_init(void)
{
    size_hist_n = slabs_chunk_size((int)slabs_class_count()) / 32 + 2;
    size_hist = calloc(size_hist_n, sizeof(*size_hist));
    return size_hist ? 0 : -1;
}

void items_destroy(void)
{
    free(size_hist);
    size_hist = NULL;
}

void sizes_account(size_t ntotal, int delta)
{
    size_t b = (ntotal + 31) / 32;
    if (b >= size_hist_n) b = size_hist_n - 1;
    atomic_fetch_add_explicit(&size_hist[b], (uint64_t)(int64_t)delta, memory_order_relaxed);
}

void storage_stats_sizes(stat_writer w, void *ctx)
{
    char name[32];
    for (size_t b = 0; b < size_hist_n; b++) {
        uint64_t n = atomic_load_explicit(&size_hist[b], memory_order_relaxed);
        if (n == 0 || (int64_t)n < 0) continue;
        snprintf(name, sizeof name, "%zu", b * 32);
        w(ctx, name, "%llu", (unsigned long long)n);
    }
}

bool item_is_flushed(item *it, rel_time_t now)
{
    rel_time_t ol = atomic_load_explicit(&g_oldest_live, memory_order_acquire);
    if (ol == 0 || ol > now) return false;
    if (atomic_load_explicit(&it->time, memory_order_relaxed) <= ol) return true;
    extern _Atomic uint64_t g_oldest_cas;
    uint64_t oc = atomic_load_explicit(&g_oldest_cas, memory_order_relaxed);
    uint64_t cas = item_get_cas(it);
    return oc != 0 && cas != 0 && cas < oc;
}

bool item_is_live(item *it, rel_time_t now)
{
    rel_time_t exp = atomic_load_explicit(&it->exptime, memory_order_relaxed);
    if (exp != 0 && exp <= now) return false;
    return !item_is_flushed(it, now);
}

/* Once ITEM_LINKED is cleared the cleaner may reclaim the chunk at any time
 * (a stripe-lock holder is not in a read section): read what the accounting
 * needs first, clear the flag last. */
void item_unlink_locked(item *it, uint32_t hv)
{
    int c = slabs_clsid_of(it);
    size_t nt = item_ntotal(it);
    assoc_unlink_locked(it, hv);
    atomic_fetch_and_explicit(&it->iflags, (uint8_t)~ITEM_LINKED, memory_order_release);
    atomic_fetch_sub_explicit(&g_class_stats[c].curr_items, 1, memory_order_relaxed);
    atomic_fetch_sub_explicit(&g_class_stats[c].bytes_requested, nt, memory_order_relaxed);
    atomic_fetch_add_explicit(&g_class_stats[c].dead_waiting, 1, memory_order_relaxed);
    sizes_account(nt, -1);
}

static void account_link(storage_thread *t, item *it)
{
    atomic_fetch_or_explicit(&it->iflags, ITEM_LINKED, memory_order_release);
    int c = slabs_clsid_of(it);
    size_t nt = item_ntotal(it);
    atomic_fetch_add_explicit(&g_class_stats[c].curr_items, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&g_class_stats[c].bytes_requested, nt, memory_order_relaxed);
    sizes_account(nt, 1);
    STAT_INC(t, total_items);
}

static void link_new_locked(storage_thread *t, item *it, uint32_t hv)
{
    account_link(t, it);
    assoc_insert_locked(it, hv);
}

static void replace_locked(storage_thread *t, item *old_it, item *new_it, uint32_t hv)
{
    account_link(t, new_it);
    assoc_replace_locked(old_it, new_it, hv);
    /* The table no longer reaches old_it; account it like an unlink (read
     * first: see item_unlink_locked). */
    int c = slabs_clsid_of(old_it);
    size_t nt = item_ntotal(old_it);
    atomic_fetch_and_explicit(&old_it->iflags, (uint8_t)~ITEM_LINKED, memory_order_release);
    atomic_fetch_sub_explicit(&g_class_stats[c].curr_items, 1, memory_order_relaxed);
    atomic_fetch_sub_explicit(&g_class_stats[c].bytes_requested, nt, memory_order_relaxed);
    atomic_fetch_add_explicit(&g_class_stats[c].dead_waiting, 1, memory_order_relaxed);
    sizes_account(nt, -1);
}

/* After the grace period: the chunk goes back unless a zero-copy reader
 * still holds it (then the last item_view_release frees it). */
void item_free_dead(item *it)
{
    if (item_layout(it) & ITEM_HAS_REF) {
        if (atomic_fetch_sub_explicit(item_ref_ptr(it), 1, memory_order_acq_rel) != 1) return;
    }
    slabs_free_chunk(it);
}

/* Linked items enter their bag inside a read section (bags may be closing). */
static void enter_bag(storage_thread *t, item *it)
{
    epoch_enter(t);
    bags_append(t, it);
    epoch_exit(t);
}

/* Finds a live item under the stripe lock; unlinks it if expired/flushed. */
static item *find_live_locked(const char *key, size_t nkey, uint32_t hv)
{
    item *it = assoc_find_locked(key, nkey, hv);
    if (it && !item_is_live(it, now_time())) {
        item_unlink_locked(it, hv);
        it = NULL;
    }
    return it;
}

/* ---- allocation ---- */

static item *alloc_chunk(storage_thread *t, size_t ntotal, enum store_result *err)
{
    int clsid = slabs_clsid(ntotal);
    if (clsid == 0) { if (err) *err = STORE_TOO_LARGE; return NULL; }
    /* memcached's order: a free chunk, a new page, the class's own dead or
     * expired items, its oldest live items (unless -M); and, when the class
     * has nothing of its own to give, a page from another class, now. A store
     * is refused only when nothing anywhere can be freed. Bounded: each round
     * either frees memory for this class or gives up. */
    for (int round = 0; round < 8; round++) {
        item *it = slabs_alloc_chunk(clsid);
        if (it) return it;
        if (bags_evict(t, clsid) > 0) continue;
        if (!slabs_acquire_page(clsid)) break;
    }
    item *it = slabs_alloc_chunk(clsid);   /* a concurrent free may have landed */
    if (it) return it;
    atomic_fetch_add_explicit(&g_class_stats[clsid].outofmemory, 1, memory_order_relaxed);
    if (err) *err = STORE_NO_MEMORY;
    return NULL;
}

static item *alloc_item(storage_thread *t, const char *key, size_t nkey, uint32_t client_flags,
                        rel_time_t exptime, uint32_t nbytes, enum store_result *err)
{
    uint8_t fl = 0;
    if (g_cfg.use_cas) fl |= ITEM_HAS_CAS;
    if (nbytes > ITEM_REF_MIN_BYTES) fl |= ITEM_HAS_REF;
    if (client_flags) fl |= ITEM_HAS_FLAGS;
    if (nkey == 0 || nkey > KEY_MAX_LENGTH) { if (err) *err = STORE_NOT_STORED; return NULL; }
    size_t ntotal = item_ntotal_for(fl, nkey, nbytes);
    if (ntotal > g_cfg.item_size_max) { if (err) *err = STORE_TOO_LARGE; return NULL; }
    item *it = alloc_chunk(t, ntotal, err);
    if (!it) return NULL;
    atomic_store_explicit(&it->h_next, 0, memory_order_relaxed);
    atomic_store_explicit(&it->lru_next, 0, memory_order_relaxed);
    atomic_store_explicit(&it->time, now_time(), memory_order_relaxed);
    atomic_store_explicit(&it->exptime, exptime, memory_order_relaxed);
    it->nbytes = nbytes;
    atomic_store_explicit(&it->bag, 0, memory_order_relaxed);
    it->nkey = (uint8_t)nkey;
    atomic_store_explicit(&it->iflags, fl, memory_order_relaxed);
    if (fl & ITEM_HAS_CAS) atomic_store_explicit(item_cas_ptr(it), 0, memory_order_relaxed);
    if (fl & ITEM_HAS_REF) atomic_store_explicit(item_ref_ptr(it), 1, memory_order_relaxed);
    if (fl & ITEM_HAS_FLAGS) memcpy((char *)it + item_header_size(fl) - 4, &client_flags, 4);
    memcpy(item_key(it), key, nkey);
    return it;
}

item *item_alloc(storage_thread *t, const char *key, size_t nkey, uint32_t client_flags,
                 rel_time_t exptime, uint32_t nbytes, enum store_result *err)
{
    return alloc_item(t, key, nkey, client_flags, exptime, nbytes, err);
}

char *item_value(item *it) { return item_data(it); }

void item_discard(storage_thread *t, item *it)
{
    (void)t;
    if (it) slabs_free_chunk(it);
}

static void set_cas(storage_thread *t, item *it, uint64_t explicit_cas)
{
    if (!(item_layout(it) & ITEM_HAS_CAS)) return;
    uint64_t c = explicit_cas ? explicit_cas : storage_next_cas(t);
    atomic_store_explicit(item_cas_ptr(it), c, memory_order_relaxed);
}

/* ---- reads ---- */

static void fill_view(storage_thread *t, item *it, int clsid, char *copy_buf, size_t copy_cap, struct item_view *out)
{
    uint8_t fl = item_fl(it);
    out->nbytes = it->nbytes;
    out->client_flags = item_cflags(it);
    out->cas = item_get_cas(it);
    out->exptime = atomic_load_explicit(&it->exptime, memory_order_relaxed);
    out->last_access = atomic_load_explicit(&it->time, memory_order_relaxed);
    out->fetched_before = (atomic_load_explicit(&it->bag, memory_order_relaxed) & ITEM_FETCHED_BIT) != 0;
    out->stale = (fl & ITEM_STALE) != 0;
    out->slab_class = (uint8_t)clsid;
    out->item_size = (uint32_t)item_ntotal_for(fl & (ITEM_HAS_CAS | ITEM_HAS_REF | ITEM_HAS_FLAGS), it->nkey, it->nbytes);
    out->ref = NULL;
    if (!copy_buf && copy_cap == 0) {
        /* metadata only (mg without v): no copy, no reference */
        out->value = NULL;
    } else if (copy_buf && it->nbytes <= copy_cap) {
        memcpy(copy_buf, item_data(it), it->nbytes);
        out->value = copy_buf;
        STAT_INC(t, get_copied);
    } else if (fl & ITEM_HAS_REF) {
        atomic_fetch_add_explicit(item_ref_ptr(it), 1, memory_order_relaxed);
        out->value = item_data(it);
        out->ref = it;
        STAT_INC(t, get_referenced);
    } else {
        /* Small value and no room in the caller's buffer: a private copy. */
        char *p = malloc(it->nbytes ? it->nbytes : 1);
        if (p) memcpy(p, item_data(it), it->nbytes);
        out->value = p ? p : "";
        out->ref = p ? &heap_view_marker : NULL;
        if (!p) out->nbytes = 0;
    }
}

static void count_miss(storage_thread *t, item *it, rel_time_t now)
{
    STAT_INC(t, get_misses);
    if (!it) return;
    if (item_is_flushed(it, now)) STAT_INC(t, get_flushed);
    else STAT_INC(t, get_expired);
}

static bool get_locked(storage_thread *t, const char *key, size_t nkey, uint32_t hv,
                       const struct get_opts *opts, char *copy_buf, size_t copy_cap, struct item_view *out)
{
    item *fresh = NULL;
    for (int attempt = 0; attempt < 2; attempt++) {
        stripe_lock(hv);
        rel_time_t now = now_time();
        item *it = assoc_find_locked(key, nkey, hv);
        if (it && !item_is_live(it, now)) {
            count_miss(t, it, now);
            item_unlink_locked(it, hv);
            it = NULL;
            if (!opts->vivify) { stripe_unlock(hv); return false; }
        }
        bool created = false;
        if (!it && opts->vivify) {
            if (!fresh) {
                stripe_unlock(hv);
                fresh = alloc_item(t, key, nkey, 0, opts->vivify_exptime, 0, NULL);
                if (!fresh) { STAT_INC(t, get_misses); return false; }
                continue;   /* retake the lock and look again */
            }
            atomic_fetch_or_explicit(&fresh->iflags, ITEM_WIN_SENT, memory_order_relaxed);
            set_cas(t, fresh, opts->vivify_cas);
            link_new_locked(t, fresh, hv);
            it = fresh;
            fresh = NULL;
            created = true;
        }
        if (!it) {
            stripe_unlock(hv);
            STAT_INC(t, get_misses);
            return false;
        }
        if (opts->touch) atomic_store_explicit(&it->exptime, opts->new_exptime, memory_order_relaxed);
        int clsid = slabs_clsid_of(it);
        fill_view(t, it, clsid, copy_buf, copy_cap, out);
        out->win = false;
        out->win_sent_before = false;
        if (created) {
            out->win = true;
        } else {
            uint8_t fl = item_fl(it);
            bool wants = (fl & ITEM_STALE) && opts->win_tokens;
            if (opts->recache) {
                rel_time_t exp = atomic_load_explicit(&it->exptime, memory_order_relaxed);
                if (exp != 0 && exp - now < opts->recache_below) wants = true;
            }
            if (fl & ITEM_WIN_SENT) {
                out->win_sent_before = true;
            } else if (wants) {
                atomic_fetch_or_explicit(&it->iflags, ITEM_WIN_SENT, memory_order_relaxed);
                out->win = true;
            }
        }
        if (!opts->no_lru_bump) bags_stamp(it, clsid);
        stripe_unlock(hv);
        if (created) enter_bag(t, it);
        if (fresh) item_discard(t, fresh);   /* somebody else created it first */
        STAT_INC(t, get_hits);
        CLS_INC(t, clsid, get_hits);
        return true;
    }
    if (fresh) item_discard(t, fresh);
    STAT_INC(t, get_misses);
    return false;
}

/* The concurrent checker sets this so that now and then a reader stalls
 * between finding an item and copying it, the window in which a broken
 * reclamation scheme would hand the chunk to somebody else. One relaxed load
 * of a read-mostly word per GET otherwise. */
_Atomic unsigned g_test_reader_stall;

static void test_reader_stall(storage_thread *t)
{
    if ((++t->stall_tick & 63) == 0) {
        struct timespec ts = {0, 200 * 1000};
        nanosleep(&ts, NULL);
    }
}

void storage_read_batch_begin(storage_thread *t) { epoch_enter(t); }
void storage_read_batch_end(storage_thread *t) { epoch_exit(t); }

uint32_t storage_prefetch_bucket(storage_thread *t, const char *key, size_t nkey)
{
    uint32_t hv = hash_key(key, nkey);
    epoch_enter(t);
    assoc_prefetch_bucket(hv);
    epoch_exit(t);
    return hv;
}

void storage_prefetch_item(storage_thread *t, uint32_t hv)
{
    epoch_enter(t);
    assoc_prefetch_item(hv);
    epoch_exit(t);
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
        return get_locked(t, key, nkey, hv, opts, copy_buf, copy_cap, out);

    epoch_enter(t);
    item *it = assoc_find(t, key, nkey, hv);
    rel_time_t now = now_time();
    if (!it || !item_is_live(it, now)) {
        count_miss(t, it, now);
        epoch_exit(t);
        return false;
    }
    if (atomic_load_explicit(&g_test_reader_stall, memory_order_relaxed)) test_reader_stall(t);
    uint8_t fl = item_fl(it);
    if (opts->win_tokens && (fl & (ITEM_STALE | ITEM_WIN_SENT))) {
        /* Handing out the win token must be exclusive: take the lock. */
        epoch_exit(t);
        return get_locked(t, key, nkey, hv, opts, copy_buf, copy_cap, out);
    }
    int clsid = slabs_clsid_of(it);
    fill_view(t, it, clsid, copy_buf, copy_cap, out);
    if (!opts->no_lru_bump) bags_stamp(it, clsid);
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
        if (atomic_fetch_sub_explicit(item_ref_ptr(it), 1, memory_order_acq_rel) == 1) slabs_free_chunk(it);
    }
    v->ref = NULL;
    v->value = NULL;
}

/* ---- writes ---- */

static bool cas_mismatch(item *it, uint64_t cas_in)
{
    return item_get_cas(it) != cas_in;
}

/* Fills n (allocated for old->nbytes + add->nbytes) with old+add (append)
 * or add+old (prepend). Caller holds the stripe lock, so old is current. */
static void combine_into(item *n, item *old_it, item *add, bool append)
{
    char *d = item_data(n);
    if (append) {
        memcpy(d, item_data(old_it), old_it->nbytes);
        memcpy(d + old_it->nbytes, item_data(add), add->nbytes);
    } else {
        memcpy(d, item_data(add), add->nbytes);
        memcpy(d + add->nbytes, item_data(old_it), old_it->nbytes);
    }
    memcpy(d + n->nbytes, "\r\n", 2);
    atomic_store_explicit(&n->exptime, atomic_load_explicit(&old_it->exptime, memory_order_relaxed),
                          memory_order_relaxed);
}

enum store_result storage_store(storage_thread *t, item *it, enum store_mode mode,
                                const struct store_opts *opts, uint64_t *cas_out)
{
    static const struct store_opts none;
    if (!opts) opts = &none;
    const char *key = item_key(it);
    size_t nkey = it->nkey;
    uint32_t hv = hash_key(key, nkey);
    enum store_result res = STORE_NOT_STORED;
    item *combined = NULL;
    if (cas_out) *cas_out = 0;
    bool check_cas = mode == MODE_CAS || opts->cas_in != 0;

    for (int attempt = 0; attempt < RMW_RETRIES; attempt++) {
        stripe_lock(hv);
        item *old = find_live_locked(key, nkey, hv);
        bool stale_store = false;

        if (mode == MODE_CAS && !old) { res = STORE_NOT_FOUND; STAT_INC(t, cas_misses); goto out_unlock; }
        if (old && check_cas && cas_mismatch(old, opts->cas_in)) {
            if (opts->invalidate && opts->cas_in < item_get_cas(old)) {
                stale_store = true;   /* ms I: store, but mark it stale */
            } else {
                res = STORE_EXISTS;
                if (mode == MODE_CAS) { STAT_INC(t, cas_badval); CLS_INC(t, slabs_clsid_of(old), cas_badval); }
                goto out_unlock;
            }
        }
        if (!old && check_cas && mode != MODE_CAS && mode != MODE_ADD) {
            /* ms with C on a missing item */
            res = STORE_NOT_FOUND;
            goto out_unlock;
        }
        if (mode == MODE_ADD && old) {
            /* memcached bumps the existing item on a failed add (not a fetch) */
            bags_bump(old, slabs_clsid_of(old));
            res = STORE_NOT_STORED;
            goto out_unlock;
        }
        if (mode == MODE_REPLACE && !old) { res = STORE_NOT_STORED; goto out_unlock; }
        if ((mode == MODE_APPEND || mode == MODE_PREPEND) && !old) {
            if (!opts->vivify_on_miss) { res = STORE_NOT_STORED; goto out_unlock; }
            atomic_store_explicit(&it->exptime, opts->vivify_exptime, memory_order_relaxed);
        }

        item *store_it = it;
        if ((mode == MODE_APPEND || mode == MODE_PREPEND) && old) {
            uint64_t total = (uint64_t)old->nbytes + it->nbytes;
            uint32_t cf = item_cflags(old);
            if (!combined || combined->nbytes != total || item_cflags(combined) != cf) {
                stripe_unlock(hv);
                if (combined) item_discard(t, combined);
                combined = NULL;
                enum store_result err = STORE_NO_MEMORY;
                if (total <= UINT32_MAX)
                    combined = alloc_item(t, key, nkey, cf, 0, (uint32_t)total, &err);
                /* memcached answers an oversized append with out-of-memory */
                if (!combined) { res = STORE_NO_MEMORY; goto out; }
                continue;   /* retake the lock; `old` may have changed meanwhile */
            }
            combine_into(combined, old, it, mode == MODE_APPEND);
            store_it = combined;
        }

        set_cas(t, store_it, opts->cas_set);
        if (stale_store) {
            /* memcached: the stale value replaces the old one but keeps its
             * TTL and whether a win token was already handed out */
            atomic_fetch_or_explicit(&store_it->iflags, ITEM_STALE | (item_fl(old) & ITEM_WIN_SENT),
                                     memory_order_relaxed);
            atomic_store_explicit(&store_it->exptime, atomic_load_explicit(&old->exptime, memory_order_relaxed),
                                  memory_order_relaxed);
        }
        if (old) replace_locked(t, old, store_it, hv);
        else link_new_locked(t, store_it, hv);
        if (cas_out) *cas_out = item_get_cas(store_it);
        int sclsid = slabs_clsid_of(store_it);
        stripe_unlock(hv);
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
    stripe_lock(hv);
    item *it = find_live_locked(key, nkey, hv);
    enum store_result res;
    if (!it) {
        res = STORE_NOT_FOUND;
        STAT_INC(t, delete_misses);
    } else if (opts->cas_in && cas_mismatch(it, opts->cas_in)) {
        res = STORE_EXISTS;
    } else if (opts->invalidate) {
        /* md I: keep serving it, flagged stale; the next mg wins the recache. */
        atomic_fetch_and_explicit(&it->iflags, (uint8_t)~ITEM_WIN_SENT, memory_order_relaxed);
        atomic_fetch_or_explicit(&it->iflags, ITEM_STALE, memory_order_relaxed);
        set_cas(t, it, 0);
        if (opts->update_ttl) atomic_store_explicit(&it->exptime, opts->new_exptime, memory_order_relaxed);
        res = STORE_STORED;
        STAT_INC(t, delete_hits);
        CLS_INC(t, slabs_clsid_of(it), delete_hits);
    } else {
        CLS_INC(t, slabs_clsid_of(it), delete_hits);
        item_unlink_locked(it, hv);
        res = STORE_STORED;
        STAT_INC(t, delete_hits);
    }
    stripe_unlock(hv);
    return res;
}

enum store_result storage_touch(storage_thread *t, const char *key, size_t nkey, rel_time_t exptime)
{
    uint32_t hv = hash_key(key, nkey);
    stripe_lock(hv);
    item *it = find_live_locked(key, nkey, hv);
    if (it) {
        atomic_store_explicit(&it->exptime, exptime, memory_order_relaxed);
        bags_stamp(it, slabs_clsid_of(it));
        STAT_INC(t, touch_hits);
        CLS_INC(t, slabs_clsid_of(it), touch_hits);
    } else {
        STAT_INC(t, touch_misses);
    }
    stripe_unlock(hv);
    return it ? STORE_STORED : STORE_NOT_FOUND;
}

/* memcached's safe_strtoull on the stored value: leading spaces and '+'
 * allowed, digits, then the end or a space (so "12 abc" is 12, as in
 * memcached); no digits, a '-' sign on a huge number, or more than 64 bits is
 * not a number. An empty value is not a number. */
static bool parse_u64(const char *p, size_t n, uint64_t *out)
{
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
        item *old = find_live_locked(key, nkey, hv);
        uint64_t value;
        uint32_t cf = 0;
        if (!old) {
            if (!opts->vivify) {
                res = ARITH_NOT_FOUND;
                if (incr) STAT_INC(t, incr_misses); else STAT_INC(t, decr_misses);
                break;
            }
            value = opts->initial;
        } else {
            if (opts->cas_in && cas_mismatch(old, opts->cas_in)) { res = ARITH_EXISTS; break; }
            if (!parse_u64(item_data(old), old->nbytes, &value)) { res = ARITH_NON_NUMERIC; break; }
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
        bool same_item = old && (uint32_t)dlen <= old->nbytes;
        uint32_t len = same_item ? old->nbytes : (uint32_t)dlen;
        if (!fresh || fresh->nbytes != len || item_cflags(fresh) != cf) {
            stripe_unlock(hv);
            locked = false;
            res = ARITH_NO_MEMORY;
            if (fresh) item_discard(t, fresh);
            fresh = alloc_item(t, key, nkey, cf, 0, len, NULL);
            if (!fresh) { res = ARITH_NO_MEMORY; goto out; }
            continue;
        }
        memcpy(item_data(fresh), digits, (size_t)dlen);
        memset(item_data(fresh) + dlen, ' ', len - (uint32_t)dlen);
        memcpy(item_data(fresh) + len, "\r\n", 2);
        rel_time_t exp = old ? atomic_load_explicit(&old->exptime, memory_order_relaxed) : opts->vivify_exptime;
        if (opts->update_ttl) exp = opts->new_exptime;
        atomic_store_explicit(&fresh->exptime, exp, memory_order_relaxed);
        set_cas(t, fresh, 0);
        if (same_item) {
            atomic_fetch_or_explicit(&fresh->iflags, item_fl(old) & (ITEM_STALE | ITEM_WIN_SENT), memory_order_relaxed);
            atomic_store_explicit(&fresh->bag, atomic_load_explicit(&old->bag, memory_order_relaxed) & ITEM_FETCHED_BIT,
                                  memory_order_relaxed);
            atomic_store_explicit(&fresh->time, atomic_load_explicit(&old->time, memory_order_relaxed),
                                  memory_order_relaxed);
        }
        if (old) replace_locked(t, old, fresh, hv);
        else link_new_locked(t, fresh, hv);
        if (value_out) *value_out = value;
        if (cas_out) *cas_out = item_get_cas(fresh);
        if (exptime_out) *exptime_out = exp;
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
