/*
 * slabs_gain.c - the page mover's choice by marginal gain (-o slab_mover=gain).
 *
 * Why: the age balancer (slabs_mover.c, pick_by_age) gives a page to the
 * class that evicts the youngest items. A class that streams keys nobody
 * reads again evicts young items too, and wins pages it cannot use, while a
 * class whose working set is one page short of fitting loses hits on every
 * pass. What matters is how many hits one more page buys each class, and
 * how many one page less costs it: the slope of each class's miss-ratio
 * curve at its current size.
 *
 * Method: Cliffhanger's shadow queues and hill climbing (Cidon, Eisenman,
 * Alizadeh, Katti, "Cliffhanger: Scaling Performance Cliffs in Web Memory
 * Caches", NSDI'16, section 3.1). Each class remembers the keys it evicted
 * most recently, one page's worth of its items deep. A GET that misses on a
 * key its class evicted within the last page's worth of evictions is a hit
 * that one more page in that class would have given: a point on the slope
 * of that class's curve, in hits per page, since the depth is one page for
 * every class. Once a second the mover gives a page to the class with the
 * most such hits (decayed by half each second) and takes it from the class
 * with the fewest, as Cliffhanger's hill climbing does; the slope at the
 * current size stands for both the gain of a page and the loss of one (a
 * concave curve; Cliffhanger's cliff scaling is not done here).
 *
 * Bounded memory: one table of GAIN_SLOTS 8-byte slots shared by all
 * classes (64 KiB, the memory formula's miss_ratio_curve term), indexed by
 * the key's hash; a slot holds the hash, the class and the class's eviction
 * count when it was written. A newer eviction overwrites an older one in
 * its slot, so the shadow depth reaches a page only while the classes
 * together evict fewer than about GAIN_SLOTS (8192) keys per page's worth:
 * a class of small items (a 1 MB page holds 10,922 chunks of 96 bytes) is
 * then undercounted and looks less worth a page than it is. The table is
 * kept this small so the default pod's memory limit does not change; a
 * larger one is the first thing to try if the benchmark shows the bias.
 *
 * Concurrency: slots and counters are atomics updated without a lock by the
 * evicting threads (bags.c) and the readers that miss (items.c); a lost
 * update only blurs an estimate. A missing read claims its slot with a
 * compare-exchange, so one eviction is counted once. The choice
 * (slabs_gain_pick) runs on the mover thread alone, under the mover lock.
 * With the age mover selected the hooks return at once.
 */
#include "slabs_internal.h"

#include <stdio.h>

#define GAIN_SLOT_BITS 13
#define GAIN_SLOTS (1u << GAIN_SLOT_BITS)
#define SEQ_MASK 0xffffffu

static _Atomic uint64_t shadow[GAIN_SLOTS];
static _Atomic uint32_t class_evictions[MAX_SLAB_CLASSES + 1];
static _Atomic uint64_t shadow_hits[MAX_SLAB_CLASSES + 1];
static _Atomic bool gain_on;

/* mover thread only */
static uint64_t hits_seen[MAX_SLAB_CLASSES + 1];
static double score[MAX_SLAB_CLASSES + 1];
static rel_time_t last_pick;

size_t slabs_gain_memory_bytes(void) { return sizeof shadow; }

void slabs_gain_enable(bool on) { atomic_store(&gain_on, on); }
bool slabs_gain_enabled(void) { return atomic_load_explicit(&gain_on, memory_order_relaxed); }

static inline size_t slot_of(uint32_t hv) { return (size_t)((hv * 2654435761u) >> (32 - GAIN_SLOT_BITS)); }

void slabs_gain_evicted(int clsid, const char *key, size_t nkey)
{
    if (!slabs_gain_enabled() || clsid <= 0 || clsid > MAX_SLAB_CLASSES) return;
    uint32_t hv = hash_key(key, nkey);
    uint32_t seq = atomic_fetch_add_explicit(&class_evictions[clsid], 1, memory_order_relaxed) & SEQ_MASK;
    uint64_t v = (uint64_t)hv << 32 | (uint64_t)clsid << 24 | seq;
    atomic_store_explicit(&shadow[slot_of(hv)], v, memory_order_relaxed);
}

void slabs_gain_missed(uint32_t hv)
{
    if (!slabs_gain_enabled()) return;
    _Atomic uint64_t *s = &shadow[slot_of(hv)];
    uint64_t v = atomic_load_explicit(s, memory_order_relaxed);
    if (v == 0 || (uint32_t)(v >> 32) != hv) return;
    int clsid = (int)((v >> 24) & 0xff);
    if (clsid <= 0 || clsid > (int)g_nclasses) return;
    uint32_t depth = (atomic_load_explicit(&class_evictions[clsid], memory_order_relaxed) - (uint32_t)v) & SEQ_MASK;
    if (depth >= g_classes[clsid].perpage) return;   /* deeper than one more page would reach */
    if (atomic_compare_exchange_strong_explicit(s, &v, 0, memory_order_relaxed, memory_order_relaxed))
        atomic_fetch_add_explicit(&shadow_hits[clsid], 1, memory_order_relaxed);
}

/* The background pass's choice, once a second when memory is full: the
 * class with the most hits per page to gain, and the one with the fewest to
 * lose among those that can give a page (more than one page, not extstore's
 * stub classes, not grown in the last few seconds: the same rules as the
 * age balancer). */
bool slabs_gain_pick(int *src_out, int *dst_out)
{
    rel_time_t now = now_time();
    if (now == last_pick) return false;
    last_pick = now;
    for (unsigned c = 1; c <= g_nclasses; c++) {
        uint64_t h = atomic_load_explicit(&shadow_hits[c], memory_order_relaxed);
        score[c] = score[c] / 2 + (double)(h - hits_seen[c]);
        hits_seen[c] = h;
    }
    if (atomic_load(&g_pages_next) < g_pages_max) return false;   /* memory not full yet */
    int dst = 0;
    for (unsigned c = 1; c <= g_nclasses; c++)
        if (score[c] >= 4 && (!dst || score[c] > score[dst])) dst = (int)c;
    if (!dst) return false;
    int src = 0;
    for (unsigned c = 1; c <= g_nclasses; c++) {
        if ((int)c == dst || atomic_load(&g_classes[c].pages) < 2 || c < slabs_first_item_class()) continue;
        uint32_t lm = atomic_load(&g_classes[c].last_move_in);
        if (lm && now - lm < 3) continue;
        if (!src || score[c] < score[src]) src = (int)c;
    }
    if (!src || score[dst] <= 2 * score[src] + 2) return false;
    *src_out = src;
    *dst_out = dst;
    return true;
}

void slabs_gain_reset(void)
{
    for (size_t i = 0; i < GAIN_SLOTS; i++) atomic_store(&shadow[i], 0);
    for (unsigned c = 0; c <= MAX_SLAB_CLASSES; c++) {
        atomic_store(&class_evictions[c], 0);
        atomic_store(&shadow_hits[c], 0);
        hits_seen[c] = 0;
        score[c] = 0;
    }
    last_pick = 0;
}

/* `stats slabs`-style per-class shadow hits, in `stats`: how many misses one
 * more page would have turned into hits, summed over the classes. */
uint64_t slabs_gain_shadow_hits(void)
{
    uint64_t sum = 0;
    for (unsigned c = 1; c <= MAX_SLAB_CLASSES; c++) sum += atomic_load_explicit(&shadow_hits[c], memory_order_relaxed);
    return sum;
}
