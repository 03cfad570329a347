/*
 * shards.c - fixed-size SHARDS, byte-weighted (see shards.h for why).
 *
 * The sampled keys form an LRU stack. A reference's stack distance is the
 * bytes of the keys referenced since the key's previous reference, its own
 * included: an LRU cache of at least that many bytes would have hit. Keys
 * are stamped with a logical time; a Fenwick tree over the times sums the
 * bytes of every key stamped after a given one (O(log n) per reference).
 * When the times run out, the keys are renumbered in stamp order.
 *
 * Memory (shards_bytes): per sampled key an entry (24 bytes), two slots of
 * the open-addressing index (8), a heap slot (4) and four time slots of the
 * Fenwick tree (32) and of the time -> entry map (16); plus the distance
 * histogram (8 KiB). 8192 keys: about 690 KiB.
 *
 * Concurrency: none (shards.h).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "shards.h"

/* Distances in a log-linear histogram: 16 buckets per power of two, so a
 * bucket's width is at most 1/16 of its lower bound. */
#define SUB_BITS     4
#define SUB          (1u << SUB_BITS)
#define NBUCKETS     ((64 - SUB_BITS + 1) * SUB)
#define TIME_FACTOR  4     /* time slots per sampled key before renumbering */

struct entry {
    uint64_t key;
    uint32_t size;
    uint32_t when;          /* time slot, 1-based */
    int32_t  heap_pos;
};

struct shards {
    unsigned      capacity;
    uint32_t      threshold;
    uint32_t      max_threshold;
    struct entry *entries;   /* [capacity + 1]: one over while evicting */
    unsigned      nentries;
    uint32_t     *index;     /* open addressing: entry + 1, 0 = empty */
    uint32_t      index_mask;
    int32_t      *heap;      /* max-heap of entries by sample value */
    uint64_t     *fenwick;   /* [tslots + 1]: bytes stamped at each time */
    int32_t      *at_time;   /* [tslots + 1]: entry stamped there, or -1 */
    uint32_t      tslots, now;
    uint64_t      bytes;     /* sum of the sampled keys' sizes */
    double        hist[NBUCKETS];
    double        cold;      /* first references (infinite distance) */
    double        sampled;   /* references counted, scaled to the current rate */
};

static unsigned bucket_of(uint64_t v)
{
    if (v < SUB) return (unsigned)v;
    unsigned e = 63u - (unsigned)__builtin_clzll(v);
    return (e - SUB_BITS + 1) * SUB + (unsigned)((v >> (e - SUB_BITS)) & (SUB - 1));
}

static double bucket_low(unsigned b)
{
    if (b < SUB) return b;
    unsigned e = b / SUB + SUB_BITS - 1, sub = b % SUB;
    return ldexp((double)(SUB + sub), (int)e - SUB_BITS);
}

static uint32_t index_size(unsigned capacity)
{
    uint32_t n = 16;
    while (n < 2u * (capacity + 1)) n <<= 1;
    return n;
}

size_t shards_bytes(unsigned capacity)
{
    size_t tslots = (size_t)capacity * TIME_FACTOR;
    return sizeof(struct shards) + (capacity + 1) * sizeof(struct entry) + index_size(capacity) * sizeof(uint32_t) +
           (capacity + 1) * sizeof(int32_t) + (tslots + 1) * (sizeof(uint64_t) + sizeof(int32_t));
}

void shards_clear(struct shards *s)
{
    s->threshold = s->max_threshold;
    s->nentries = 0;
    memset(s->index, 0, (size_t)(s->index_mask + 1) * sizeof(uint32_t));
    memset(s->fenwick, 0, (size_t)(s->tslots + 1) * sizeof(uint64_t));
    for (uint32_t i = 0; i <= s->tslots; i++) s->at_time[i] = -1;
    s->now = 0;
    s->bytes = 0;
    memset(s->hist, 0, sizeof s->hist);
    s->cold = s->sampled = 0;
}

struct shards *shards_new(unsigned capacity)
{
    if (capacity < 2) capacity = 2;
    struct shards *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->capacity = capacity;
    s->max_threshold = SHARDS_FULL_RATE;
    s->tslots = capacity * TIME_FACTOR;
    s->index_mask = index_size(capacity) - 1;
    s->entries = calloc(capacity + 1, sizeof *s->entries);
    s->index = calloc((size_t)s->index_mask + 1, sizeof *s->index);
    s->heap = calloc(capacity + 1, sizeof *s->heap);
    s->fenwick = calloc((size_t)s->tslots + 1, sizeof *s->fenwick);
    s->at_time = calloc((size_t)s->tslots + 1, sizeof *s->at_time);
    if (!s->entries || !s->index || !s->heap || !s->fenwick || !s->at_time) {
        shards_free(s);
        return NULL;
    }
    shards_clear(s);
    return s;
}

void shards_free(struct shards *s)
{
    if (!s) return;
    free(s->entries);
    free(s->index);
    free(s->heap);
    free(s->fenwick);
    free(s->at_time);
    free(s);
}

uint32_t shards_threshold(const struct shards *s) { return s->threshold; }

void shards_limit_rate(struct shards *s, uint32_t threshold)
{
    s->max_threshold = threshold && threshold < SHARDS_FULL_RATE ? threshold : SHARDS_FULL_RATE;
    shards_clear(s);
}
unsigned shards_keys(const struct shards *s) { return s->nentries; }
double shards_sampled_references(const struct shards *s) { return s->sampled; }

/* ---- Fenwick tree over time slots ---- */
static void fw_add(struct shards *s, uint32_t i, int64_t delta)
{
    for (; i <= s->tslots; i += i & -i) s->fenwick[i] += (uint64_t)delta;
}

static uint64_t fw_prefix(const struct shards *s, uint32_t i)
{
    uint64_t sum = 0;
    for (; i > 0; i -= i & -i) sum += s->fenwick[i];
    return sum;
}

/* ---- index ---- */
static uint32_t slot_of(const struct shards *s, uint64_t key)
{
    return (uint32_t)((key * 0x9E3779B97F4A7C15ull) >> 32) & s->index_mask;
}

static int find(const struct shards *s, uint64_t key)
{
    for (uint32_t i = slot_of(s, key);; i = (i + 1) & s->index_mask) {
        uint32_t e = s->index[i];
        if (!e) return -1;
        if (s->entries[e - 1].key == key) return (int)e - 1;
    }
}

static void index_put(struct shards *s, uint64_t key, int e)
{
    uint32_t i = slot_of(s, key);
    while (s->index[i]) i = (i + 1) & s->index_mask;
    s->index[i] = (uint32_t)e + 1;
}

/* Backward-shift deletion keeps probe chains whole. */
static void index_del(struct shards *s, uint64_t key)
{
    uint32_t i = slot_of(s, key);
    while (s->entries[s->index[i] - 1].key != key) i = (i + 1) & s->index_mask;
    for (uint32_t j = i;;) {
        j = (j + 1) & s->index_mask;
        if (!s->index[j]) break;
        uint32_t home = slot_of(s, s->entries[s->index[j] - 1].key);
        /* j's entry may move to i if its home is not in (i, j] cyclically */
        if (((j - home) & s->index_mask) >= ((j - i) & s->index_mask)) {
            s->index[i] = s->index[j];
            i = j;
        }
    }
    s->index[i] = 0;
}

static void index_move(struct shards *s, uint64_t key, int from, int to)
{
    for (uint32_t i = slot_of(s, key);; i = (i + 1) & s->index_mask)
        if (s->index[i] == (uint32_t)from + 1) { s->index[i] = (uint32_t)to + 1; return; }
}

/* ---- max-heap by sample value ---- */
static uint32_t hval(const struct shards *s, int32_t e) { return shards_sample_value(s->entries[e].key); }

static void heap_set(struct shards *s, unsigned pos, int32_t e)
{
    s->heap[pos] = e;
    s->entries[e].heap_pos = (int32_t)pos;
}

static void heap_up(struct shards *s, unsigned pos)
{
    int32_t e = s->heap[pos];
    while (pos > 0 && hval(s, s->heap[(pos - 1) / 2]) < hval(s, e)) {
        heap_set(s, pos, s->heap[(pos - 1) / 2]);
        pos = (pos - 1) / 2;
    }
    heap_set(s, pos, e);
}

static void heap_down(struct shards *s, unsigned pos, unsigned n)
{
    int32_t e = s->heap[pos];
    for (;;) {
        unsigned c = 2 * pos + 1;
        if (c >= n) break;
        if (c + 1 < n && hval(s, s->heap[c + 1]) > hval(s, s->heap[c])) c++;
        if (hval(s, s->heap[c]) <= hval(s, e)) break;
        heap_set(s, pos, s->heap[c]);
        pos = c;
    }
    heap_set(s, pos, e);
}

/* ---- the stack ---- */
/* Renumbers the stamps 1..n in order, so time can go on. */
static void renumber(struct shards *s)
{
    unsigned n = 0;
    for (uint32_t t = 1; t <= s->tslots; t++)
        if (s->at_time[t] >= 0) s->at_time[++n] = s->at_time[t];
    for (uint32_t t = n + 1; t <= s->tslots; t++) s->at_time[t] = -1;
    memset(s->fenwick, 0, (size_t)(s->tslots + 1) * sizeof(uint64_t));
    for (uint32_t t = 1; t <= n; t++) {
        struct entry *en = &s->entries[s->at_time[t]];
        en->when = t;
        fw_add(s, t, en->size);
    }
    s->now = n;
}

static void stamp(struct shards *s, int e)
{
    if (s->now == s->tslots) renumber(s);
    struct entry *en = &s->entries[e];
    en->when = ++s->now;
    s->at_time[en->when] = e;
    fw_add(s, en->when, en->size);
}

static void unstamp(struct shards *s, int e)
{
    struct entry *en = &s->entries[e];
    fw_add(s, en->when, -(int64_t)en->size);
    s->at_time[en->when] = -1;
}

/* Drops entry e (the last entry takes its place in the array). */
static void remove_entry(struct shards *s, int e)
{
    unstamp(s, e);
    s->bytes -= s->entries[e].size;
    index_del(s, s->entries[e].key);
    int last = (int)--s->nentries;
    if (e != last) {
        s->entries[e] = s->entries[last];
        index_move(s, s->entries[e].key, last, e);
        s->at_time[s->entries[e].when] = e;
        s->heap[s->entries[e].heap_pos] = e;
    }
}

static void lower_rate(struct shards *s)
{
    /* the key with the largest sample value leaves, with every key of that
     * value (they share the threshold), and sampling stops above it */
    uint32_t top = hval(s, s->heap[0]);
    double old_rate = (double)s->threshold;
    while (s->nentries && hval(s, s->heap[0]) == top) {
        int e = s->heap[0];
        unsigned n = s->nentries;
        heap_set(s, 0, s->heap[n - 1]);
        if (n > 1) heap_down(s, 0, n - 1);
        remove_entry(s, e);
    }
    s->threshold = top;
    double scale = (double)s->threshold / old_rate;
    for (unsigned b = 0; b < NBUCKETS; b++) s->hist[b] *= scale;
    s->cold *= scale;
    s->sampled *= scale;
}

static uint32_t mean_size(const struct shards *s)
{
    return s->nentries ? (uint32_t)(s->bytes / s->nentries) : 64;
}

void shards_reference(struct shards *s, uint64_t key_hash, uint32_t size)
{
    if (!shards_sampled(s->threshold, key_hash)) return;
    double rate = (double)s->threshold / SHARDS_FULL_RATE;
    s->sampled += 1;
    int e = find(s, key_hash);
    if (e >= 0) {
        struct entry *en = &s->entries[e];
        /* bytes of this key and every key referenced after it */
        uint64_t d = s->bytes - fw_prefix(s, en->when - 1);
        s->hist[bucket_of((uint64_t)((double)d / rate))] += 1;
        unstamp(s, e);
        if (size && size != en->size) {
            s->bytes += size;
            s->bytes -= en->size;
            en->size = size;
        }
        stamp(s, e);
        return;
    }
    s->cold += 1;
    e = (int)s->nentries++;
    struct entry *en = &s->entries[e];
    *en = (struct entry){ .key = key_hash, .size = size ? size : mean_size(s) };
    s->bytes += en->size;
    index_put(s, key_hash, e);
    stamp(s, e);
    heap_set(s, (unsigned)e, e);
    heap_up(s, (unsigned)e);
    if (s->nentries > s->capacity) lower_rate(s);
}

void shards_resize(struct shards *s, uint64_t key_hash, uint32_t size)
{
    if (!size || !shards_sampled(s->threshold, key_hash)) return;
    int e = find(s, key_hash);
    if (e < 0) return;
    struct entry *en = &s->entries[e];
    fw_add(s, en->when, (int64_t)size - (int64_t)en->size);
    s->bytes += size;
    s->bytes -= en->size;
    en->size = size;
}

double shards_miss_ratio(const struct shards *s, uint64_t cache_bytes, uint64_t references)
{
    double rate = (double)s->threshold / SHARDS_FULL_RATE;
    /* SHARDS_adj: the sample saw `sampled` references where `references`
     * at this rate should give references x rate; the difference goes to
     * the smallest distance (the paper's correction for a few hot keys
     * sampled or not) */
    double adjust = references ? (double)references * rate - s->sampled : 0;
    double total = s->sampled + adjust;
    if (total <= 0) return 1.0;
    double hits = adjust, c = (double)cache_bytes;
    for (unsigned b = 0; b < NBUCKETS; b++) {
        double lo = bucket_low(b), hi = b + 1 < NBUCKETS ? bucket_low(b + 1) : INFINITY;
        if (hi <= c + 1) hits += s->hist[b];          /* every distance in it is <= c */
        else {
            if (lo <= c) hits += s->hist[b] * (c + 1 - lo) / (hi - lo);
            break;
        }
    }
    double miss = 1.0 - hits / total;
    return miss < 0 ? 0 : miss > 1 ? 1 : miss;
}
