/*
 * assoc.c - the key -> item hash table: chained, power-of-two sized, striped
 * write locks, no lock at all on the GET path, online doubling.
 *
 * Why chained with 32-bit handles: a bucket is 4 bytes and the chain link
 * lives in the item header (4 bytes), so the table costs ~4 bytes per item at
 * a load factor of 1 (memcached: 8 + 8). Handles are offsets into the slab
 * region (slabs.c), so they are also what makes chunk memory type-stable.
 *
 * Writers (store, delete, unlink by the cleaner or evictor, bucket moves)
 * take one of STRIPES mutexes, stripe = hash & (STRIPES-1) (seed 000, Z
 * locks). Every table has at least STRIPES buckets, so a bucket and the two
 * buckets it splits into during expansion share a stripe. Chain pointers are
 * changed in an order a concurrent reader can follow: a new item is fully
 * written before the release store that makes it reachable; an unlinked
 * item keeps its h_next, so a reader standing on it walks on into the chain.
 *
 * Reclamation scheme (what makes lock-free reads safe):
 *  1. Items are never modified in place where a reader could see a torn
 *     value: set/append/prepend/incr/decr build a new item and swap it into
 *     the chain with one release store. Key, value, length, client flags are
 *     immutable for the life of a chunk; the few fields that do change (time,
 *     exptime, bag stamp, flag bits, the CAS of md I) are C11 atomics.
 *  2. An unlinked item stays in its bag until the cleaner or the evictor
 *     takes it out; its chunk goes back to the free list only after a grace
 *     period (epoch.c): every GET runs inside a read section, so by then no
 *     reader can still hold a pointer to it. Chunks are never unmapped and a
 *     chunk is only reused after the grace period, so a reader never sees
 *     another key's bytes where it expected its own.
 *  3. Values big enough to be sent zero-copy carry a refcount; the table's
 *     reference is dropped after the grace period, the last holder frees.
 *  4. An old table array is freed after a grace period.
 *  5. Bucket moves during expansion are the one change that can divert a
 *     reader from the chain it was walking (an item's h_next is redirected
 *     into the new table). Each stripe has a sequence counter, odd while a
 *     bucket of that stripe is being moved. A reader that finds it odd waits
 *     for the move to end (seed 000: "wait until the old bucket is empty");
 *     a reader that missed re-checks it and retries if it changed. A hit
 *     needs no check: items are immutable, so a found key is a right answer.
 *
 * The race the concurrent checker found (engine issue, failure 0): moving a
 * bucket redirects the h_next of items readers may be standing on, and that
 * store was relaxed. A reader that followed the redirected link reached items
 * of the new chain without any happens-before edge to the writes that filled
 * them (they were published to the mover under the stripe lock, not to the
 * reader), which ThreadSanitizer reports as the reader's key compare racing
 * with the allocation that wrote the key: C11 calls it a data race, and a
 * compiler may move those reads. The redirecting store is now a release, like
 * every other store that makes an item reachable, so a reader that loads a
 * link (acquire) sees everything written before the item it names was
 * published. To be sure no chunk is in fact handed out while reachable, the
 * checker (tests/stress) also overwrites every freed chunk with garbage at
 * once: a reader reaching a freed or reused chunk would read a key and a
 * value no item can have, and ThreadSanitizer would see the overwrite race
 * with it. With that in place no wrong value and no report were seen in the
 * runs recorded in docs/benchmarks.md (make bench-soak).
 *
 * Expansion (seed 000/004): when items exceed 1.5x buckets, the expander
 * thread allocates a table twice the size, publishes {new, old}, and moves
 * old buckets one at a time under their stripe lock, advancing `migrated`.
 * Readers and writers pick the old bucket if it has not moved yet, else the
 * new one; stores and deletes carry on throughout.
 */
#include "storage_internal.h"
#include "bgthread.h"

#include <sched.h>
#include <sys/mman.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>

#define STRIPES 256u
#define MIN_HASHPOWER 8u   /* log2(STRIPES) */
#define MAX_HASHPOWER 30u
#define MAX_CHAIN_WALK (1u << 20)
#define READ_RETRIES 16

struct stripe {
    pthread_mutex_t lock;
    _Atomic int64_t count;
} __attribute__((aligned(64)));

struct tstate {
    _Atomic uint32_t *cur;
    unsigned cur_power;
    _Atomic uint32_t *old;      /* non-NULL while expanding */
    unsigned old_power;
};

static struct stripe stripes[STRIPES];
/* Bucket-move sequence counters, apart from the mutexes: every GET reads its
 * stripe's counter, every store writes its stripe's mutex; sharing a cache
 * line would make GETs miss whenever a neighbour stores. Written only while
 * the table grows. */
static _Atomic uint32_t stripe_seq[STRIPES];
#define SEQ(sp) (stripe_seq[(sp) - stripes])
_Atomic unsigned g_test_migrate_stall;
/* Table descriptors (32 bytes each, one or two per doubling) are kept until
 * assoc_destroy: stats and the growth check read them without a read
 * section, and there are at most ~2 * MAX_HASHPOWER of them. */
static struct tstate *retired_states[2 * MAX_HASHPOWER + 4];
static unsigned n_retired;

static void retire_state(struct tstate *st)
{
    if (n_retired < sizeof retired_states / sizeof retired_states[0]) retired_states[n_retired++] = st;
}
static _Atomic(struct tstate *) state;
static _Atomic uint32_t migrated;          /* old buckets already moved */
static _Atomic bool expanding;
static _Atomic uint64_t expansions;

static bool expander_pass(void *arg);
static struct bgthread expander = { .name = "cachet-expand", .pass = expander_pass, .period_ms = 0 };

/* murmur3 x86_32: fast, good spread in the low bits we mask with. */
uint32_t hash_key(const char *key, size_t len) { return hash_key_seeded(key, len, 0x9747b28cu); }

uint32_t hash_key_seeded(const char *key, size_t len, uint32_t seed)
{
    const uint8_t *data = (const uint8_t *)key;
    const size_t nblocks = len / 4;
    uint32_t h1 = seed;
    const uint32_t c1 = 0xcc9e2d51u, c2 = 0x1b873593u;
    for (size_t i = 0; i < nblocks; i++) {
        uint32_t k1;
        memcpy(&k1, data + i * 4, 4);
        k1 *= c1; k1 = (k1 << 15) | (k1 >> 17); k1 *= c2;
        h1 ^= k1; h1 = (h1 << 13) | (h1 >> 19); h1 = h1 * 5 + 0xe6546b64u;
    }
    const uint8_t *tail = data + nblocks * 4;
    uint32_t k1 = 0;
    switch (len & 3) {
    case 3: k1 ^= (uint32_t)tail[2] << 16; /* fall through */
    case 2: k1 ^= (uint32_t)tail[1] << 8;  /* fall through */
    case 1: k1 ^= tail[0];
        k1 *= c1; k1 = (k1 << 15) | (k1 >> 17); k1 *= c2; h1 ^= k1;
    }
    h1 ^= (uint32_t)len;
    h1 ^= h1 >> 16; h1 *= 0x85ebca6bu; h1 ^= h1 >> 13; h1 *= 0xc2b2ae35u; h1 ^= h1 >> 16;
    return h1;
}

/* Bucket arrays come straight from mmap (zeroed) with huge pages requested
 * when large: every lookup starts with a random bucket. */
static _Atomic uint32_t *alloc_buckets(unsigned power)
{
    size_t bytes = ((size_t)1 << power) * sizeof(_Atomic uint32_t);
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
#ifdef MADV_HUGEPAGE
    if (bytes >= ((size_t)2 << 20)) madvise(p, bytes, MADV_HUGEPAGE);
#endif
    return p;
}

static void free_buckets(_Atomic uint32_t *b, unsigned power)
{
    if (b) munmap((void *)b, ((size_t)1 << power) * sizeof(_Atomic uint32_t));
}

int assoc_init(int hashpower)
{
    unsigned p = hashpower > 0 ? (unsigned)hashpower : 16;
    if (p < MIN_HASHPOWER) p = MIN_HASHPOWER;
    if (p > MAX_HASHPOWER) p = MAX_HASHPOWER;
    for (unsigned i = 0; i < STRIPES; i++) {
        pthread_mutex_init(&stripes[i].lock, NULL);
        atomic_store(&stripe_seq[i], 0);
        atomic_store(&stripes[i].count, 0);
    }
    struct tstate *st = calloc(1, sizeof(*st));
    if (!st) return -1;
    st->cur = alloc_buckets(p);
    st->cur_power = p;
    if (!st->cur) { free(st); return -1; }
    atomic_store(&state, st);
    atomic_store(&migrated, 0);
    atomic_store(&expanding, false);
    return 0;
}

void assoc_destroy(void)
{
    for (unsigned i = 0; i < n_retired; i++) free(retired_states[i]);
    n_retired = 0;
    struct tstate *st = atomic_load(&state);
    if (st) {
        free_buckets(st->cur, st->cur_power);
        free_buckets(st->old, st->old_power);
        free(st);
    }
    atomic_store(&state, NULL);
}

static inline struct stripe *stripe_of(uint32_t hv) { return &stripes[hv & (STRIPES - 1)]; }
void stripe_lock(uint32_t hv) { pthread_mutex_lock(&stripe_of(hv)->lock); }
void stripe_unlock(uint32_t hv) { pthread_mutex_unlock(&stripe_of(hv)->lock); }
bool stripe_trylock(uint32_t hv) { return pthread_mutex_trylock(&stripe_of(hv)->lock) == 0; }

static inline _Atomic uint32_t *bucket_for(struct tstate *st, uint32_t hv, uint32_t moved)
{
    if (st->old) {
        uint32_t ob = hv & (((uint32_t)1 << st->old_power) - 1);
        if (ob >= moved) return &st->old[ob];
    }
    return &st->cur[hv & (((uint32_t)1 << st->cur_power) - 1)];
}

static inline bool key_matches(item *it, const char *key, size_t nkey)
{
    return item_nkey(it) == nkey && memcmp(item_key(it), key, nkey) == 0;
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static uint32_t wait_even(struct stripe *sp)
{
    uint32_t s = 0;
    for (unsigned i = 0; i < 100000; i++) {
        s = atomic_load_explicit(&SEQ(sp), memory_order_acquire);
        if (!(s & 1)) return s;
        if (i < 256) cpu_relax();
        else sched_yield();
    }
    return s;
}

#ifdef CACHET_TEST_HOOKS
/* The concurrent checker's stall between reading an item and following its
 * link: the window in which a bucket move redirects that link. */
static void walk_stall(storage_thread *t)
{
    if ((++t->stall_tick & 127) == 0) {
        struct timespec ts = {0, 100 * 1000};
        nanosleep(&ts, NULL);
    }
}
#endif

item *assoc_find(storage_thread *t, const char *key, size_t nkey, uint32_t hv)
{
    struct stripe *sp = stripe_of(hv);
    for (int attempt = 0; attempt < READ_RETRIES; attempt++) {
        uint32_t s1 = atomic_load_explicit(&SEQ(sp), memory_order_acquire);
        if (s1 & 1) {
            /* A bucket of this stripe is being moved right now. As in seed
             * 000, the reader waits for the move to finish (a few pointer
             * stores; longer only if the mover was preempted) rather than
             * walking a chain in flux. Bounded: after ~a second of waiting
             * the lookup reports a miss. */
            s1 = wait_even(sp);
            if (s1 & 1) return NULL;
        }
        struct tstate *st = atomic_load_explicit(&state, memory_order_acquire);
        uint32_t moved = atomic_load_explicit(&migrated, memory_order_acquire);
        _Atomic uint32_t *b = bucket_for(st, hv, moved);
        uint32_t h = atomic_load_explicit(b, memory_order_acquire);
        for (unsigned steps = 0; h && steps < MAX_CHAIN_WALK; steps++) {
            item *it = handle_item(h);
            if (key_matches(it, key, nkey)) return it;
#ifdef CACHET_TEST_HOOKS
            if (atomic_load_explicit(&g_test_reader_stall, memory_order_relaxed)) walk_stall(t);
#endif
            h = atomic_load_explicit(&it->h_next, memory_order_acquire);
        }
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit(&SEQ(sp), memory_order_relaxed) == s1) return NULL;
    }
    return NULL;
}

/* Prefetch hints for batched GETs (in a read section): plain loads and
 * prefetches, no stores, so the GET path stays lock-free. */
void assoc_prefetch_bucket(uint32_t hv)
{
    struct tstate *st = atomic_load_explicit(&state, memory_order_acquire);
    __builtin_prefetch((const void *)bucket_for(st, hv, atomic_load_explicit(&migrated, memory_order_relaxed)));
}

void assoc_prefetch_item(uint32_t hv)
{
    struct tstate *st = atomic_load_explicit(&state, memory_order_acquire);
    _Atomic uint32_t *b = bucket_for(st, hv, atomic_load_explicit(&migrated, memory_order_relaxed));
    uint32_t h = atomic_load_explicit(b, memory_order_relaxed);
    if (h) __builtin_prefetch(handle_item(h));
}

/* Caller holds the stripe lock: the bucket cannot move under us. */
static _Atomic uint32_t *locked_bucket(uint32_t hv)
{
    struct tstate *st = atomic_load_explicit(&state, memory_order_acquire);
    return bucket_for(st, hv, atomic_load_explicit(&migrated, memory_order_acquire));
}

static _Atomic uint32_t *find_link(_Atomic uint32_t *b, item *target)
{
    uint32_t th = item_handle(target);
    _Atomic uint32_t *link = b;
    uint32_t h;
    while ((h = atomic_load_explicit(link, memory_order_relaxed)) != 0) {
        if (h == th) return link;
        link = &handle_item(h)->h_next;
    }
    return NULL;
}

item *assoc_find_locked(const char *key, size_t nkey, uint32_t hv)
{
    _Atomic uint32_t *b = locked_bucket(hv);
    uint32_t h = atomic_load_explicit(b, memory_order_relaxed);
    while (h) {
        item *it = handle_item(h);
        if (key_matches(it, key, nkey)) return it;
        h = atomic_load_explicit(&it->h_next, memory_order_relaxed);
    }
    return NULL;
}

static void maybe_request_expansion(struct stripe *sp);

void assoc_insert_locked(item *it, uint32_t hv)
{
    _Atomic uint32_t *b = locked_bucket(hv);
    atomic_store_explicit(&it->h_next, atomic_load_explicit(b, memory_order_relaxed), memory_order_relaxed);
    atomic_store_explicit(b, item_handle(it), memory_order_release);
    struct stripe *sp = stripe_of(hv);
    int64_t c = atomic_load_explicit(&sp->count, memory_order_relaxed) + 1;
    atomic_store_explicit(&sp->count, c, memory_order_relaxed);
    if ((c & 15) == 0) maybe_request_expansion(sp);
}

void assoc_replace_locked(item *old_it, item *new_it, uint32_t hv)
{
    _Atomic uint32_t *link = find_link(locked_bucket(hv), old_it);
    if (!link) { assoc_insert_locked(new_it, hv); return; }
    atomic_store_explicit(&new_it->h_next, atomic_load_explicit(&old_it->h_next, memory_order_relaxed),
                          memory_order_relaxed);
    atomic_store_explicit(link, item_handle(new_it), memory_order_release);
}

void assoc_unlink_locked(item *it, uint32_t hv)
{
    _Atomic uint32_t *link = find_link(locked_bucket(hv), it);
    if (!link) return;
    /* it->h_next stays: a reader standing on `it` walks on into the chain. */
    atomic_store_explicit(link, atomic_load_explicit(&it->h_next, memory_order_relaxed), memory_order_release);
    struct stripe *sp = stripe_of(hv);
    atomic_store_explicit(&sp->count, atomic_load_explicit(&sp->count, memory_order_relaxed) - 1,
                          memory_order_relaxed);
}

uint64_t assoc_item_count(void)
{
    int64_t n = 0;
    for (unsigned i = 0; i < STRIPES; i++) n += atomic_load_explicit(&stripes[i].count, memory_order_relaxed);
    return n < 0 ? 0 : (uint64_t)n;
}

unsigned assoc_hashpower(void)
{
    return atomic_load_explicit(&state, memory_order_acquire)->cur_power;
}


static bool needs_expansion(void)
{
    struct tstate *st = atomic_load_explicit(&state, memory_order_acquire);
    if (st->old || st->cur_power >= MAX_HASHPOWER) return false;
    uint64_t buckets = (uint64_t)1 << st->cur_power;
    return assoc_item_count() > buckets + buckets / 2;
}

static void maybe_request_expansion(struct stripe *sp)
{
    struct tstate *st = atomic_load_explicit(&state, memory_order_acquire);
    uint64_t buckets = (uint64_t)1 << st->cur_power;
    /* Cheap pre-check from one stripe's share before summing all of them. */
    if ((uint64_t)atomic_load_explicit(&sp->count, memory_order_relaxed) * STRIPES <= buckets + buckets / 2) return;
    if (g_cfg.no_hashexpand) return;   /* chains just grow longer, as in memcached */
    if (atomic_load_explicit(&expanding, memory_order_relaxed) || !needs_expansion()) return;
    bgthread_wake(&expander);
}

/* Expansion in three steps (begin, move buckets, finish) so the unit tests
 * can stop half way and check reads and writes against a half-moved table. */
static struct tstate *exp_prev, *exp_mid;



static bool expansion_begin(void)
{
    struct tstate *st = atomic_load_explicit(&state, memory_order_acquire);
    if (st->old || st->cur_power >= MAX_HASHPOWER) return false;
    unsigned np = st->cur_power + 1;
    _Atomic uint32_t *nb = alloc_buckets(np);
    struct tstate *mid = calloc(1, sizeof(*mid));
    if (!nb || !mid) {
        fprintf(stderr, "cachetd: hash table expansion to 2^%u failed: out of memory\n", np);
        free_buckets(nb, np);
        free(mid);
        return false;
    }
    mid->cur = nb; mid->cur_power = np; mid->old = st->cur; mid->old_power = st->cur_power;
    atomic_store_explicit(&migrated, 0, memory_order_release);
    atomic_store_explicit(&expanding, true, memory_order_release);
    /* A writer that read the previous state under its stripe lock inserts
     * into what is now the old table; the move of that bucket waits for its
     * lock, so the item moves with the rest. */
    atomic_store_explicit(&state, mid, memory_order_release);
    exp_prev = st;
    exp_mid = mid;
    return true;
}

/* Moves up to n more old buckets; returns true when all have moved. */
static bool expansion_migrate(uint32_t n)
{
    struct tstate *mid = exp_mid;
    uint32_t old_n = (uint32_t)1 << mid->old_power;
    uint32_t new_mask = ((uint32_t)1 << mid->cur_power) - 1;
    uint32_t ob = atomic_load_explicit(&migrated, memory_order_relaxed);
    for (uint32_t done = 0; ob < old_n && done < n; ob++, done++) {
        struct stripe *sp = &stripes[ob & (STRIPES - 1)];
        pthread_mutex_lock(&sp->lock);
        uint32_t h = atomic_load_explicit(&mid->old[ob], memory_order_relaxed);
        if (h) {
            /* Hash the keys before the odd window so readers wait only for
             * a handful of pointer stores. */
            uint32_t dest[64];
            unsigned nd = 0;
            for (uint32_t x = h; x && nd < 64; nd++) {
                item *it = handle_item(x);
                dest[nd] = hash_key(item_key(it), item_nkey(it)) & new_mask;
                x = atomic_load_explicit(&it->h_next, memory_order_relaxed);
            }
            uint32_t s = atomic_load_explicit(&SEQ(sp), memory_order_relaxed);
            atomic_store_explicit(&SEQ(sp), s + 1, memory_order_relaxed);
            atomic_thread_fence(memory_order_release);
            if (atomic_load_explicit(&g_test_migrate_stall, memory_order_relaxed) && (ob & 15) == 0) {
                /* tests: a mover preempted in the middle of a bucket move */
                struct timespec ts = {0, 100 * 1000};
                nanosleep(&ts, NULL);
            }
            for (unsigned k = 0; h; k++) {
                item *it = handle_item(h);
                uint32_t next = atomic_load_explicit(&it->h_next, memory_order_relaxed);
                uint32_t nbk = k < nd ? dest[k] : (hash_key(item_key(it), item_nkey(it)) & new_mask);
                /* Release, not relaxed: `it` is already reachable, and a
                 * reader standing on it follows this link into the new
                 * chain; the release carries the contents of the items there
                 * (published to us under the stripe lock) to that reader. */
                atomic_store_explicit(&it->h_next, atomic_load_explicit(&mid->cur[nbk], memory_order_relaxed),
                                      memory_order_release);
                atomic_store_explicit(&mid->cur[nbk], h, memory_order_release);
                h = next;
            }
            atomic_store_explicit(&mid->old[ob], 0, memory_order_release);
            atomic_store_explicit(&migrated, ob + 1, memory_order_release);
            atomic_store_explicit(&SEQ(sp), s + 2, memory_order_release);
        } else {
            atomic_store_explicit(&migrated, ob + 1, memory_order_release);
        }
        pthread_mutex_unlock(&sp->lock);
    }
    return ob >= old_n;
}

static void expansion_finish(void)
{
    struct tstate *mid = exp_mid, *prev = exp_prev;
    struct tstate *fin = calloc(1, sizeof(*fin));
    if (!fin) { fin = mid; mid = NULL; }   /* keep serving from the mid state */
    else { fin->cur = exp_mid->cur; fin->cur_power = exp_mid->cur_power; }
    if (mid) atomic_store_explicit(&state, fin, memory_order_release);
    atomic_store_explicit(&expanding, false, memory_order_release);
    atomic_fetch_add(&expansions, 1);
    /* Writers read the state under their stripe lock (no read section):
     * passing through every stripe lock once waits them out. Readers may
     * still be walking the old array: wait for a grace period. */
    for (unsigned i = 0; i < STRIPES; i++) {
        pthread_mutex_lock(&stripes[i].lock);
        pthread_mutex_unlock(&stripes[i].lock);
    }
    epoch_synchronize();
    if (mid) {
        free_buckets(prev->cur, prev->cur_power);
        retire_state(mid);
    }
    retire_state(prev);
    exp_mid = exp_prev = NULL;
    if (g_cfg.verbose > 0) fprintf(stderr, "cachetd: hash table expanded to 2^%u buckets\n", fin->cur_power);
}

/* Old buckets moved between two offers of the CPU. The expander shares a
 * pod's cores with the workers, at their priority (SCHED_FIFO in the
 * benchmark and RT pods): a table of 2^18 buckets moved in one go, or in
 * chunks of 1,024 without a yield, kept a worker woken meanwhile off its
 * core for hundreds of microseconds at a time (387 us on average per turn
 * after an overload). 128 buckets are ~200 items, tens of microseconds. */
#define EXPAND_SLICE 128

static void expand(void)
{
    if (!expansion_begin()) return;
    while (!expansion_migrate(EXPAND_SLICE)) sched_yield();
    expansion_finish();
}

/* Test hooks (the expander thread must not be running). */
bool assoc_test_expansion_begin(void) { return expansion_begin(); }
bool assoc_test_expansion_migrate(uint32_t n) { return expansion_migrate(n); }
void assoc_test_expansion_finish(void) { expansion_finish(); }

static bool expander_pass(void *arg)
{
    (void)arg;
    while (needs_expansion()) expand();
    return false;
}

int assoc_start_thread(void) { return bgthread_start(&expander); }
void assoc_stop_thread(void) { bgthread_stop(&expander); }

void assoc_wait_expansion(void)
{
    if (!bgthread_running(&expander)) {
        while (needs_expansion()) expand();
        return;
    }
    while (atomic_load(&expanding) || needs_expansion()) bgthread_wait_pass(&expander);
}

void assoc_stats(stat_writer w, void *ctx)
{
    struct tstate *st = atomic_load_explicit(&state, memory_order_acquire);
    size_t bytes = ((size_t)1 << st->cur_power) * sizeof(uint32_t);
    if (st->old) bytes += ((size_t)1 << st->old_power) * sizeof(uint32_t);
    w(ctx, "hash_power_level", "%u", st->cur_power);
    w(ctx, "hash_bytes", "%zu", bytes);
    w(ctx, "hash_is_expanding", "%d", st->old ? 1 : 0);
    w(ctx, "hash_expansions", "%llu", (unsigned long long)atomic_load(&expansions));
    w(ctx, "hash_lock_stripes", "%u", STRIPES);
}
