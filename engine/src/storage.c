/*
 * storage.c - the storage layer's lifecycle, clock, thread registry, CAS ids
 * and the general/settings statistics.
 *
 * Why a registry of per-thread contexts: the read sections of epoch.c need to
 * know every thread that may read items, and per-thread counters keep hit and
 * miss counting off shared cache lines (a GET writes nothing shared). The
 * stats call sums the contexts; `stats reset` records a baseline instead of
 * writing into other threads' counters.
 *
 * Why a clock thread: memcached's rel_time: one relaxed load per request
 * instead of a clock_gettime() call, one-second resolution like the protocol.
 *
 * Why flush_all moves a time floor instead of comparing CAS ids: an
 * immediate flush in second T invalidates every item whose last access is
 * at or before T (items touched in the same second included), and from then
 * on until the clock leaves T, stores and reads stamp items with T+1, so an
 * item stored after the flush in that same second survives it. This does
 * not depend on CAS ids at all, so it holds with -C and for items whose CAS
 * a client chose (meta E); memcached 1.6 gets the same outcome by unlinking
 * the items of the flush second synchronously. An item's time may then run
 * up to a second ahead of the clock; `mg l` reports 0 for it.
 */
#include "storage_internal.h"
#include "bgthread.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct storage_config g_cfg;
bool g_use_cas;
_Atomic uint32_t g_current_time;
_Atomic uint64_t g_flush_word;
_Atomic uint64_t g_flush_later;
_Atomic uint32_t g_flush_pending;
time_t storage_process_started;

static storage_thread *threads[STORAGE_MAX_THREADS];
static _Atomic int nthreads;
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
/* Written by every store: on its own cache line, away from the clock and
 * flush words every GET reads. */
static struct { _Atomic uint64_t v; char pad[56]; } cas_line __attribute__((aligned(64)));
#define cas_counter (cas_line.v)
static uint64_t stats_baseline[THREAD_STATS_N];
static uint64_t class_baseline[MAX_SLAB_CLASSES + 1][CLASS_STATS_N];

static void sum_class(int clsid, uint64_t out[CLASS_STATS_N])
{
    memset(out, 0, sizeof(uint64_t) * CLASS_STATS_N);
    int n = storage_thread_count();
    for (int i = 0; i < n; i++) {
        _Atomic uint64_t *f = (_Atomic uint64_t *)&threads[i]->cls[clsid];
        for (size_t k = 0; k < CLASS_STATS_N; k++) out[k] += atomic_load_explicit(&f[k], memory_order_relaxed);
    }
}

void storage_class_thread_stats(int clsid, uint64_t out[CLASS_STATS_N])
{
    sum_class(clsid, out);
    for (size_t k = 0; k < CLASS_STATS_N; k++) out[k] -= class_baseline[clsid][k];
}
static _Atomic int32_t clock_offset;     /* tests move time forward */
static struct timespec mono_start;
static bool clock_pass(void *arg);
static struct bgthread clock_thread = { .name = "cachet-clock", .pass = clock_pass, .period_ms = 100 };
static bool threads_started;
static storage_thread *bg_ctx;

int items_init(void);
void items_destroy(void);

storage_thread *storage_thread_get(int i) { return threads[i]; }
int storage_thread_count(void) { return atomic_load_explicit(&nthreads, memory_order_acquire); }

storage_thread *storage_thread_register(void)
{
    storage_thread *t = aligned_alloc(64, (sizeof(storage_thread) + 63) & ~(size_t)63);
    if (!t) return NULL;
    memset(t, 0, sizeof *t);
    pthread_mutex_lock(&reg_lock);
    int n = atomic_load(&nthreads);
    if (n >= STORAGE_MAX_THREADS) {
        pthread_mutex_unlock(&reg_lock);
        free(t);
        fprintf(stderr, "cachetd: more than %d storage threads\n", STORAGE_MAX_THREADS);
        return NULL;
    }
    t->index = n;
    threads[n] = t;
    atomic_store_explicit(&nthreads, n + 1, memory_order_release);
    pthread_mutex_unlock(&reg_lock);
    return t;
}

uint64_t storage_next_cas(storage_thread *t)
{
    (void)t;
    return atomic_fetch_add_explicit(&cas_counter, 1, memory_order_relaxed) + 1;
}

/* ---- clock ---- */

static uint32_t compute_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    int64_t s = (int64_t)(ts.tv_sec - mono_start.tv_sec) + 2 + atomic_load(&clock_offset);
    return (uint32_t)s;
}

static bool clock_pass(void *arg)
{
    (void)arg;
    uint32_t now = compute_now();
    /* store only on change: every GET reads this cache line */
    if (atomic_load_explicit(&g_current_time, memory_order_relaxed) != now)
        atomic_store_explicit(&g_current_time, now, memory_order_relaxed);
    return false;
}

int clock_start(void) { return bgthread_start(&clock_thread); }
void clock_stop(void) { bgthread_stop(&clock_thread); }

void storage_test_advance_clock(uint32_t seconds)
{
    atomic_fetch_add(&clock_offset, (int32_t)seconds);
    atomic_store(&g_current_time, compute_now());
}

rel_time_t storage_now(void) { return now_time(); }

#define REALTIME_MAXDELTA (60 * 60 * 24 * 30)

rel_time_t storage_exptime(int64_t wire)
{
    if (wire == 0) return 0;
    if (wire < 0) return 1;   /* already expired: 1 is always in the past */
    if (wire > REALTIME_MAXDELTA) {
        /* absolute unix time; in the past (before we started) means expired */
        if (wire <= (int64_t)storage_process_started + 1) return 1;
        int64_t rel = wire - (int64_t)storage_process_started;
        return rel > UINT32_MAX ? UINT32_MAX : (rel_time_t)rel;
    }
    int64_t rel = (int64_t)now_time() + wire;
    return rel > UINT32_MAX ? UINT32_MAX : (rel_time_t)rel;
}

int64_t storage_ttl_remaining(rel_time_t exptime)
{
    if (exptime == 0) return -1;
    rel_time_t now = now_time();
    return exptime > now ? (int64_t)(exptime - now) : 0;
}

/* ---- lifecycle ---- */

int storage_init(const struct storage_config *cfg)
{
    g_cfg = *cfg;
    if (!g_cfg.mem_limit) g_cfg.mem_limit = (size_t)64 << 20;
    if (!g_cfg.item_size_max) g_cfg.item_size_max = 1024 * 1024;
    if (g_cfg.growth_factor <= 1.0) g_cfg.growth_factor = 1.25;
    if (!g_cfg.chunk_size_min) g_cfg.chunk_size_min = 48;
    if (!g_cfg.hashpower_init) g_cfg.hashpower_init = 16;
    if (!g_cfg.young_window) g_cfg.young_window = 60;
    if (g_cfg.item_size_max > g_cfg.mem_limit) {
        fprintf(stderr, "cachetd: item size max (-I %zu) cannot exceed the memory limit (-m %zu)\n",
                g_cfg.item_size_max, g_cfg.mem_limit);
        return -1;
    }
    if (g_cfg.hashpower_init < 8 || g_cfg.hashpower_init > 30) {
        fprintf(stderr, "cachetd: hashpower must be between 8 and 30\n");
        return -1;
    }
    clock_gettime(CLOCK_MONOTONIC, &mono_start);
    storage_process_started = time(NULL) - 2;
    atomic_store(&clock_offset, 0);
    atomic_store(&g_current_time, compute_now());
    atomic_store(&g_flush_word, 0);
    atomic_store(&g_flush_later, 0);
    atomic_store(&g_flush_pending, 0);
    g_use_cas = g_cfg.use_cas;
    atomic_store(&cas_counter, 0);
    memset(class_baseline, 0, sizeof class_baseline);
    if (slabs_init() != 0) return -1;
    if (assoc_init(g_cfg.hashpower_init) != 0) return -1;
    if (bags_init() != 0) return -1;
    if (items_init() != 0) return -1;
    return 0;
}

int storage_start_threads(void)
{
    if (threads_started) return 0;
    threads_started = true;
    /* Without any one of these the cache silently degrades (a frozen clock
     * never expires items, no expander means ever-longer chains, no cleaner
     * means no eviction), so a failure to start one is fatal to the caller. */
    int rc = clock_start();
    if (rc == 0) rc = assoc_start_thread();
    if (rc == 0) rc = bags_start_thread();
    if (rc == 0) rc = slabs_start_thread();
    if (rc != 0) {
        fprintf(stderr, "cachetd: cannot start storage threads: %s\n", strerror(rc));
        storage_stop_threads();
        return -1;
    }
    return 0;
}

void storage_stop_threads(void)
{
    if (!threads_started) return;
    slabs_stop_thread();
    bags_stop_thread();
    assoc_stop_thread();
    clock_stop();
    threads_started = false;
}

/* Tests: tear everything down so the next storage_init starts clean. */
void storage_test_shutdown(void)
{
    storage_stop_threads();
    items_destroy();
    bags_destroy();
    assoc_destroy();
    slabs_destroy();
    (void)bg_ctx;
}

void storage_flush(rel_time_t when)
{
    struct time_view prev = time_view_now();
    rel_time_t now = prev.now;
    if (when == 0 || when <= now) {
        /* Everything stamped up to `base` goes; later stamps are above it
         * (the floor, in the same word). A GET that checked its item against
         * the previous word stamps it with that word's floor and the `now`
         * it read before that word: at most the clock when the new word was
         * stored. So the word is stored again if the clock ticked meanwhile,
         * and a hit racing the flush can never lift its item past it (an
         * item stamped after the check would otherwise survive the flush).
         * What was stored between the two stores is covered too; that is
         * still before this flush_all answered. A second flush within the
         * same second also covers what was stored between the two flushes:
         * base is at least the previous floor. */
        for (;;) {
            rel_time_t base = stamp_time_in((struct time_view){ .now = now, .fw = prev.fw });
            prev.fw = flush_word(base, now, true);
            atomic_store_explicit(&g_flush_word, prev.fw, memory_order_seq_cst);
            rel_time_t after = now_time();
            if (after == now) break;
            now = after;
        }
        atomic_store_explicit(&g_flush_later, 0, memory_order_release);
    } else {
        /* a delayed flush already in force is not undone by the next one:
         * its horizon moves into the immediate word first (without a floor:
         * the clock is past it) */
        uint64_t in_force = prev.later;
        if (in_force && flush_effective(in_force) <= now &&
            (!prev.fw || flush_oldest(in_force) > flush_oldest(prev.fw) || flush_effective(prev.fw) > now)) {
            uint64_t w = prev.fw & FLUSH_IMMEDIATE
                ? flush_word(flush_oldest(in_force) > flush_oldest(prev.fw) ? flush_oldest(in_force) : flush_oldest(prev.fw),
                             flush_effective(in_force), true)
                : flush_word(flush_oldest(in_force), flush_effective(in_force), false);
            atomic_store_explicit(&g_flush_word, w, memory_order_release);
        }
        atomic_store_explicit(&g_flush_later, flush_word(when - 1, when - 1, false), memory_order_release);
    }
    atomic_store(&g_flush_pending, 1);
}

/* ---- stats ---- */

static void sum_threads(uint64_t out[THREAD_STATS_N])
{
    memset(out, 0, sizeof(uint64_t) * THREAD_STATS_N);
    int n = storage_thread_count();
    for (int i = 0; i < n; i++) {
        _Atomic uint64_t *f = (_Atomic uint64_t *)&threads[i]->st;
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
    w(ctx, "slab_reassign", "%s", "yes");
    w(ctx, "lru_type", "%s", "bags");
    w(ctx, "item_header_bytes", "%u", ITEM_HDR);
    w(ctx, "slab_chunk_max", "%zu", slabs_chunk_max());
    w(ctx, "young_window", "%u", g_cfg.young_window);
}

void storage_stats_items(stat_writer w, void *ctx) { bags_stats_items(w, ctx); }
void storage_stats_slabs(stat_writer w, void *ctx) { slabs_stats(w, ctx); }
