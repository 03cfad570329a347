/*
 * storage_stats.c - the storage layer's statistics: `stats`, `stats
 * settings`, `stats items` and `stats slabs`, and `stats reset`.
 *
 * Why per-thread counters summed here: hit and miss counting stays off
 * shared cache lines (a GET writes nothing shared). The stats call sums the
 * contexts of the thread registry (epoch.c); `stats reset` records a
 * baseline instead of writing into other threads' counters.
 *
 * Why a file of its own: the counters it reads live in every storage file;
 * reading them from here keeps the allocator and the LRU from calling each
 * other (or storage.c) only to print numbers.
 *
 * Concurrency: no lock the request path takes; counters are loaded relaxed,
 * so a report is a near snapshot, as memcached's. stats reset runs on the
 * thread that asked for it; two resets at once may leave either baseline.
 */
#include "slabs_internal.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

static uint64_t stats_baseline[THREAD_STATS_N];
static uint64_t class_baseline[MAX_SLAB_CLASSES + 1][CLASS_STATS_N];

static void sum_class(int clsid, uint64_t out[CLASS_STATS_N])
{
    memset(out, 0, sizeof(uint64_t) * CLASS_STATS_N);
    int n = storage_thread_count();
    for (int i = 0; i < n; i++) {
        _Atomic uint64_t *f = (_Atomic uint64_t *)&storage_thread_get(i)->cls[clsid];
        for (size_t k = 0; k < CLASS_STATS_N; k++) out[k] += atomic_load_explicit(&f[k], memory_order_relaxed);
    }
}

static void storage_class_thread_stats(int clsid, uint64_t out[CLASS_STATS_N])
{
    sum_class(clsid, out);
    for (size_t k = 0; k < CLASS_STATS_N; k++) out[k] -= class_baseline[clsid][k];
}
uint64_t storage_class_get_hits_total(int clsid)
{
    uint64_t cs[CLASS_STATS_N];
    sum_class(clsid, cs);
    return cs[offsetof(struct class_thread_stats, get_hits) / sizeof(_Atomic uint64_t)];
}
void storage_stats_init(void) { memset(class_baseline, 0, sizeof class_baseline); }

/* ---- stats ---- */

static void sum_threads(uint64_t out[THREAD_STATS_N])
{
    memset(out, 0, sizeof(uint64_t) * THREAD_STATS_N);
    int n = storage_thread_count();
    for (int i = 0; i < n; i++) {
        _Atomic uint64_t *f = (_Atomic uint64_t *)&storage_thread_get(i)->st;
        for (size_t k = 0; k < THREAD_STATS_N; k++) out[k] += atomic_load_explicit(&f[k], memory_order_relaxed);
    }
}

static uint64_t total_evictions(void)
{
    uint64_t e = 0;
    for (unsigned c = 1; c <= slabs_class_count(); c++) e += atomic_load(&g_class_stats[c].evicted);
    return e;
}

void storage_stats_general(stat_writer w, void *ctx)
{
    uint64_t s[THREAD_STATS_N];
    sum_threads(s);
    for (size_t k = 0; k < THREAD_STATS_N; k++) s[k] -= stats_baseline[k];
    struct thread_stats *ts = NULL;
#define F(name) s[offsetof(struct thread_stats, name) / sizeof(_Atomic uint64_t)]
#define W(name) w(ctx, #name, "%llu", (unsigned long long)F(name))
    (void)ts;
    W(get_hits); W(get_misses); W(get_expired); W(get_flushed);
    W(delete_hits); W(delete_misses); W(incr_hits); W(incr_misses); W(decr_hits); W(decr_misses);
    W(cas_hits); W(cas_misses); W(cas_badval); W(touch_hits); W(touch_misses);
    uint64_t curr = 0, bytes = 0, reclaimed = 0, exp_unf = 0, ev_unf = 0, oom = 0, young = 0;
    for (unsigned c = 1; c <= slabs_class_count(); c++) {
        struct class_stats *cs = &g_class_stats[c];
        curr += atomic_load(&cs->curr_items);
        bytes += atomic_load(&cs->bytes_requested);
        reclaimed += atomic_load(&cs->reclaimed);
        exp_unf += atomic_load(&cs->expired_unfetched);
        ev_unf += atomic_load(&cs->evicted_unfetched);
        oom += atomic_load(&cs->outofmemory);
        young += atomic_load(&cs->evicted_young);
    }
    w(ctx, "curr_items", "%llu", (unsigned long long)curr);
    W(total_items);
    w(ctx, "bytes", "%llu", (unsigned long long)bytes);
    w(ctx, "evictions", "%llu", (unsigned long long)total_evictions());
    w(ctx, "reclaimed", "%llu", (unsigned long long)reclaimed);
    w(ctx, "expired_unfetched", "%llu", (unsigned long long)exp_unf);
    w(ctx, "evicted_unfetched", "%llu", (unsigned long long)ev_unf);
    w(ctx, "outofmemory", "%llu", (unsigned long long)oom);
    /* cache-pressure signals: evictions of items still being read, and the
     * idle age of the last item evicted (small = the cache is too small) */
    w(ctx, "evictions_young", "%llu", (unsigned long long)young);
    w(ctx, "eviction_age_last", "%u", atomic_load(&g_last_eviction_age));
    w(ctx, "limit_maxbytes", "%zu", g_cfg.mem_limit);
    w(ctx, "total_malloced", "%zu", slabs_total_malloced());
    W(get_copied); W(get_referenced);
    assoc_stats(w, ctx);
    w(ctx, "slab_global_page_pool", "%zu", slabs_pages_max() - slabs_pages_used());
    w(ctx, "slabs_moved", "%llu", (unsigned long long)atomic_load(&g_slab_moves));
    w(ctx, "slab_reassign_rescues", "%llu", (unsigned long long)atomic_load(&g_slab_rescues));   /* memcached's place */
    bags_stats_general(w, ctx);
#undef W
#undef F
}

void storage_stats_reset(void)
{
    sum_threads(stats_baseline);
    /* memcached's stats reset also zeroes the per-class item counters
     * (items:N:evicted and the rest); the gauges (number, bytes, waiting
     * dead items) describe what is stored now and stay */
    for (unsigned c = 1; c <= slabs_class_count(); c++) {
        struct class_stats *cs = &g_class_stats[c];
        _Atomic uint64_t *counters[] = { &cs->evicted, &cs->evicted_nonzero, &cs->evicted_unfetched,
                                         &cs->expired_unfetched, &cs->expired, &cs->reclaimed, &cs->outofmemory,
                                         &cs->moves_to_alt, &cs->reassign_evicted, &cs->evicted_young };
        for (size_t k = 0; k < sizeof counters / sizeof counters[0]; k++) atomic_store(counters[k], 0);
    }
    for (unsigned c = 1; c <= slabs_class_count(); c++) sum_class((int)c, class_baseline[c]);
    mrc_reset();
}

void storage_stats_settings(stat_writer w, void *ctx)
{
    w(ctx, "maxbytes", "%zu", g_cfg.mem_limit);
    w(ctx, "growth_factor", "%.2f", g_cfg.growth_factor);
    w(ctx, "chunk_size", "%u", g_cfg.chunk_size_min);
    w(ctx, "item_size_max", "%zu", g_cfg.item_size_max);
    w(ctx, "slab_page_size", "%zu", slabs_page_size());
    w(ctx, "hashpower_init", "%d", g_cfg.hashpower_init);
    char buf[64 * 12] = "";
    size_t off = 0;
    for (unsigned c = 1; c <= slabs_class_count() && off + 16 < sizeof buf; c++)
        off += (size_t)snprintf(buf + off, sizeof buf - off, "%s%u", c > 1 ? "-" : "", slabs_chunk_size((int)c));
    w(ctx, "slab_sizes", "%s", buf);
    w(ctx, "slab_reassign", "%s", g_cfg.no_slab_reassign ? "no" : "yes");
    w(ctx, "slab_automove", "%d", slabs_automove_level());
    w(ctx, "temp_lru", "%s", g_cfg.temp_lru ? "yes" : "no");
    w(ctx, "temporary_ttl", "%u", g_cfg.temporary_ttl);
    w(ctx, "slab_mover", "%s", slabs_gain_enabled() ? "gain" : "age");
    w(ctx, "lru_type", "%s", "bags");
    w(ctx, "item_header_bytes", "%u", ITEM_HDR);
    w(ctx, "slab_chunk_max", "%zu", slabs_chunk_max());
    w(ctx, "young_window", "%u", g_cfg.young_window);
}

/* memcached's `stats slabs`: the classes' pages and chunks (slabs.c), their
 * request counters, bags (bags.c) and page moves (slabs_mover.c). */
static void stats_slabs(stat_writer w, void *ctx)
{
    unsigned active = 0;
    char name[64];
    for (unsigned c = 1; c <= g_nclasses; c++) {
        struct slabclass *sc = &g_classes[c];
        unsigned np = atomic_load(&sc->pages);
        if (np == 0) continue;
        active++;
        /* no class lock: stats (and the metrics thread) never wait on what
         * the request path takes */
        uint32_t end_free = atomic_load_explicit(&sc->end_free, memory_order_relaxed);
        uint32_t used = atomic_load(&sc->used_chunks);
        uint64_t total = (uint64_t)np * sc->perpage;
        uint32_t free_chunks = (uint32_t)(total > used + end_free ? total - used - end_free : 0);
#define S(n, f, v) do { snprintf(name, sizeof name, "%u:%s", c, n); w(ctx, name, f, v); } while (0)
        S("chunk_size", "%u", sc->size);
        S("chunks_per_page", "%u", sc->perpage);
        S("total_pages", "%u", np);
        S("total_chunks", "%llu", (unsigned long long)np * sc->perpage);
        S("used_chunks", "%u", used);
        S("free_chunks", "%u", free_chunks + end_free);
        S("free_chunks_end", "%u", end_free);
        S("mem_requested", "%llu", (unsigned long long)atomic_load(&g_class_stats[c].bytes_requested));
        uint64_t cs[CLASS_STATS_N];
        storage_class_thread_stats((int)c, cs);
        static const char *cs_names[CLASS_STATS_N] = {"get_hits", "cmd_set", "delete_hits", "incr_hits",
                                                      "decr_hits", "cas_hits", "cas_badval", "touch_hits"};
        for (size_t k = 0; k < CLASS_STATS_N; k++) S(cs_names[k], "%llu", (unsigned long long)cs[k]);
        S("pages_moved_in", "%llu", (unsigned long long)atomic_load(&sc->pages_moved_in));
        S("pages_moved_out", "%llu", (unsigned long long)atomic_load(&sc->pages_moved_out));
        S("bags", "%u", bags_count((int)c));
#undef S
    }
    w(ctx, "active_slabs", "%u", active);
    w(ctx, "total_malloced", "%zu", slabs_total_malloced());
    slabs_mover_stats(w, ctx);
    w(ctx, "slab_gain_shadow_hits", "%llu", (unsigned long long)slabs_gain_shadow_hits());
}

void storage_stats_items(stat_writer w, void *ctx) { bags_stats_items(w, ctx); }
void storage_stats_slabs(stat_writer w, void *ctx) { stats_slabs(w, ctx); }
