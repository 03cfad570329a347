/*
 * mrc.c - the live miss-ratio curve (`stats mrc`) and the sizes of items
 * stored right after a miss (`stats sizes`, missed:<size>).
 *
 * Why: how much memory a hit ratio needs is the question a cache's owner
 * asks, and only the live GET stream answers it. SHARDS (shards.c) gives
 * the whole curve from a hashed sample of the keys, in fixed memory. The
 * sizes of the items that were missed and then stored are the sizes the
 * cache failed to hold, which the operator's slab sizing wants beside the
 * sizes it holds.
 *
 * The GET path pays a counter bump and one compare of the key's hash
 * against the sampling threshold (mrc_get, storage_internal.h); a miss also
 * writes one word of the miss tags. Only a sampled key (a fraction that
 * is at most 1/32 and falls as the key count grows: 8192 keys are kept) costs more: a second
 * hash of the key and an event in the thread's ring.
 *
 * The estimator runs off the GET path: a background thread drains every
 * thread's ring each MRC_PERIOD_MS; a thread whose ring is full drains it
 * itself (so no reference is dropped, which would bias the distances); the
 * `stats mrc` reader drains them all before it reads the curve. The
 * threshold never starts above 1/32 (MRC_MAX_THRESHOLD): with 1/8, a small
 * key set (all keys sampled) cost 94 instructions per GET, estimator
 * included (callgrind, docs/benchmarks.md); with 1/32, 52.
 *
 * What the curve models: an LRU cache that stores every missed key, by the
 * bytes of its items (header, key and value: memcached's `bytes`), without
 * TTLs or deletes. `-m` holds somewhat fewer item bytes than it says (slab
 * chunk rounding): compare `bytes` with `limit_maxbytes` to translate.
 *
 * Memory (memory_budget.c "miss_ratio_curve"): shards_bytes(8192) plus the
 * miss tags (16 KiB); the rings live in each storage thread's context
 * (MRC_RING_SLOTS x 16 bytes, in the per-thread term).
 *
 * Concurrency: a ring has one writer (its thread) and readers that hold
 * est_lock; the estimator is touched only under est_lock; the threshold is
 * published with a relaxed store after every change (a GET that reads a
 * stale one records an event the estimator then ignores, or misses one
 * sample: harmless). Miss tags are relaxed atomics: a lost race loses one
 * entry of the missed histogram, never corrupts it.
 */
#include <stdio.h>
#include <stdlib.h>

#include "bgthread.h"
#include "shards.h"
#include "storage_internal.h"

#define MRC_PERIOD_MS 100
#define MRC_MAX_THRESHOLD (SHARDS_FULL_RATE / 32)
#define MISS_TAGS 4096
#define HASH2_SEED 0x5bd1e995u

_Atomic uint32_t g_mrc_threshold;
static struct shards *est;
static pthread_mutex_t est_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t refs_base;                    /* under est_lock: references before the last reset */
static _Atomic uint32_t miss_tags[MISS_TAGS]; /* hv | 1 of a recent miss in that slot */
static _Atomic uint64_t *missed_hist;         /* stored right after a miss, by size bucket */
static size_t missed_n;

size_t mrc_memory_bytes(void) { return shards_bytes(MRC_SAMPLE_KEYS) + sizeof miss_tags; }

static bool mrc_pass(void *arg);
static struct bgthread mrc_thread = { .name = "cachet-mrc", .pass = mrc_pass, .period_ms = MRC_PERIOD_MS };

int mrc_init(size_t size_buckets)
{
    missed_n = size_buckets;
    missed_hist = calloc(size_buckets, sizeof *missed_hist);
    est = shards_new(MRC_SAMPLE_KEYS);
    if (!est || !missed_hist) {
        mrc_destroy();
        return -1;
    }
    shards_limit_rate(est, MRC_MAX_THRESHOLD);
    atomic_store_explicit(&g_mrc_threshold, shards_threshold(est), memory_order_relaxed);
    return 0;
}

void mrc_destroy(void)
{
    atomic_store_explicit(&g_mrc_threshold, 0, memory_order_relaxed);
    shards_free(est);
    est = NULL;
    free(missed_hist);
    missed_hist = NULL;
}

uint64_t mrc_missed_in(size_t bucket)
{
    return missed_hist && bucket < missed_n ? atomic_load_explicit(&missed_hist[bucket], memory_order_relaxed) : 0;
}

/* under est_lock */
static void drain(storage_thread *t)
{
    struct mrc_ring *r = &t->mrc;
    uint32_t head = atomic_load_explicit(&r->head, memory_order_relaxed);
    uint32_t tail = atomic_load_explicit(&r->tail, memory_order_acquire);
    for (; head != tail; head++) {
        const struct mrc_event *e = &r->ev[head % MRC_RING_SLOTS];
        if (e->is_store) shards_resize(est, e->key_hash, e->size);
        else shards_reference(est, e->key_hash, e->size);
    }
    atomic_store_explicit(&r->head, head, memory_order_release);
    atomic_store_explicit(&g_mrc_threshold, shards_threshold(est), memory_order_relaxed);
}

static void drain_all(void)
{
    int n = storage_thread_count();
    for (int i = 0; i < n; i++) drain(storage_thread_get(i));
}

static bool mrc_pass(void *arg)
{
    pthread_mutex_lock(&est_lock);
    if (est) drain_all();
    pthread_mutex_unlock(&est_lock);
    return false;
}

int mrc_start_thread(void) { return est ? bgthread_start(&mrc_thread) : 0; }
void mrc_stop_thread(void) { if (bgthread_running(&mrc_thread)) bgthread_stop(&mrc_thread); }

void mrc_sampled(storage_thread *t, uint32_t hv, const char *key, size_t nkey, uint32_t size, bool is_store)
{
    if (!est) return;
    struct mrc_ring *r = &t->mrc;
    uint32_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed);
    if (tail - atomic_load_explicit(&r->head, memory_order_acquire) == MRC_RING_SLOTS) {
        pthread_mutex_lock(&est_lock);
        drain(t);
        pthread_mutex_unlock(&est_lock);
    }
    r->ev[tail % MRC_RING_SLOTS] = (struct mrc_event){
        .key_hash = (uint64_t)hv << 32 | hash_key_seeded(key, nkey, HASH2_SEED), .size = size, .is_store = is_store };
    atomic_store_explicit(&r->tail, tail + 1, memory_order_release);
}

void mrc_note_miss(uint32_t hv)
{
    _Atomic uint32_t *tag = &miss_tags[hv % MISS_TAGS];
    if (atomic_load_explicit(tag, memory_order_relaxed) != (hv | 1))
        atomic_store_explicit(tag, hv | 1, memory_order_relaxed);
}

void mrc_store_after_miss(uint32_t hv, size_t ntotal)
{
    if (!missed_hist) return;
    _Atomic uint32_t *tag = &miss_tags[hv % MISS_TAGS];
    uint32_t want = hv | 1;
    if (atomic_load_explicit(tag, memory_order_relaxed) == want &&
        atomic_compare_exchange_strong_explicit(tag, &want, 0, memory_order_relaxed, memory_order_relaxed))
        atomic_fetch_add_explicit(&missed_hist[size_bucket(ntotal, missed_n)], 1, memory_order_relaxed);
}

static uint64_t refs_total(void)
{
    uint64_t n = 0;
    int threads = storage_thread_count();
    for (int i = 0; i < threads; i++)
        n += atomic_load_explicit(&storage_thread_get(i)->mrc.refs, memory_order_relaxed);
    return n;
}

void mrc_reset(void)
{
    pthread_mutex_lock(&est_lock);
    if (est) {
        drain_all();
        shards_clear(est);
        atomic_store_explicit(&g_mrc_threshold, shards_threshold(est), memory_order_relaxed);
    }
    refs_base = refs_total();
    pthread_mutex_unlock(&est_lock);
}

/* Cache sizes of the curve, as fractions of -m. */
static const struct { unsigned num, den; } points[] = {
    {1, 16}, {1, 8}, {1, 4}, {1, 2}, {3, 4}, {1, 1}, {5, 4}, {3, 2}, {2, 1}, {3, 1}, {4, 1}, {8, 1},
};

void storage_stats_mrc(stat_writer w, void *ctx)
{
    pthread_mutex_lock(&est_lock);
    if (!est) { pthread_mutex_unlock(&est_lock); return; }
    drain_all();
    uint64_t refs = refs_total() - refs_base;
    w(ctx, "sample_keys_max", "%u", MRC_SAMPLE_KEYS);
    w(ctx, "sample_keys", "%u", shards_keys(est));
    w(ctx, "sample_rate", "%.6f", (double)shards_threshold(est) / SHARDS_FULL_RATE);
    w(ctx, "references", "%llu", (unsigned long long)refs);
    w(ctx, "sampled_references", "%.0f", shards_sampled_references(est));
    w(ctx, "memory_bytes", "%zu", mrc_memory_bytes());
    w(ctx, "limit_maxbytes", "%zu", g_cfg.mem_limit);
    char name[48];
    for (size_t i = 0; i < sizeof points / sizeof points[0]; i++) {
        uint64_t bytes = (uint64_t)g_cfg.mem_limit * points[i].num / points[i].den;
        snprintf(name, sizeof name, "%llu:miss_ratio", (unsigned long long)bytes);
        w(ctx, name, "%.6f", shards_miss_ratio(est, bytes, refs));
    }
    pthread_mutex_unlock(&est_lock);
}
