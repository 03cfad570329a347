/*
 * storage_internal.h - what the storage files (items.c, assoc.c, slabs.c,
 * slabs_mover.c, bags.c, epoch.c, clock.c, storage.c, storage_stats.c and
 * extstore's item side) share with each other and with the unit tests, and
 * nothing the protocol layer or the IO threads should see.
 *
 * Why the item header looks like this (19 bytes, optional fields at the END
 * of the chunk): benchmark W3 wants at most 0.70x memcached's RSS per item
 * for 9-byte keys and 100-byte values. memcached spends 48 bytes on its
 * header plus 8-byte hash and LRU pointers. Here:
 *   0  h_next    hash chain link (32-bit chunk handle, see slabs.c)
 *   4  lru_next  bag link / free-list link
 *   8  time      last access (rel_time_t)
 *  12  size_key  value length (low 24 bits) and key length (high 8), fixed;
 *                an extstore stub's value is on disk, its length here too
 *  16  bag       bag stamp | ITEM_FETCHED_BIT
 *  18  iflags    state and layout bits
 *  19  key, then the value. The "\r\n" after a value is not stored: it is
 *      added when the value is sent.
 * Fields only some items need live at the end of the chunk, where the chunk
 * size (a multiple of 8) keeps them aligned: the 8-byte CAS (unless -C), the
 * expiry (only when non-zero, or when the chunk has room to spare), the
 * client flags (only when non-zero) and a refcount (only for values large
 * enough to be sent zero-copy). A 9+100 item with CAS is 19+9+100+8 = 136
 * bytes and lands in the 136-byte class of the default ladder.
 *
 * Values longer than the largest class (slab_chunk_max) are chained: the
 * item (the head) holds a descriptor of data chunks (total length, count,
 * handles) and the last piece of the value; each data chunk carries the
 * head's handle in h_next so the page mover can find its owner.
 *
 * Fields a lock-free reader may see change are C11 atomics (time, bag,
 * iflags, links, the CAS, the expiry); everything else is written once before
 * the item is published with a release store and never changes while any
 * reader can reach the chunk (see the reclamation notes in assoc.c).
 */
#ifndef CACHET_STORAGE_INTERNAL_H
#define CACHET_STORAGE_INTERNAL_H

#include "storage.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

/* ---- item layout ---- */
struct item {
    _Atomic uint32_t h_next;    /* next item in the hash chain (handle); a data chunk's head */
    _Atomic uint32_t lru_next;  /* next item in its bag; free-list link when free */
    _Atomic uint32_t time;      /* last access (rel_time_t) */
    uint32_t size_key;          /* nbytes (24 bits) | nkey << 24 */
    _Atomic uint16_t bag;       /* id of the bag it was last stamped with | ITEM_FETCHED_BIT */
    _Atomic uint8_t iflags;
    /* the key starts at ITEM_HDR (byte 19), overlapping the padding */
};
#define ITEM_HDR 19u
_Static_assert(offsetof(struct item, iflags) == 18, "iflags is the last header byte");

#define ITEM_FETCHED_BIT 0x8000u
#define ITEM_BAG_MASK    0x7fffu
#define ITEM_NBYTES_MAX  0xffffffu  /* longer values are chained */

enum {
    /* state: changes while readers may look */
    ITEM_LINKED      = 1,   /* reachable from the hash table */
    ITEM_STALE       = 2,   /* md I / ms I: serve, but flag X and hand out a win */
    ITEM_WIN_SENT    = 4,   /* a client already got W for this item */
    /* layout: fixed when the chunk is allocated */
    ITEM_HAS_FLAGS   = 8,   /* client flags field at the chunk end */
    ITEM_HAS_EXPTIME = 16,  /* expiry field at the chunk end (absent = never expires) */
    ITEM_CHAINED     = 32,  /* the value is in data chunks (see above) */
    ITEM_ON_DISK     = 64,  /* extstore: the value lives on disk, the item holds its locator */
    ITEM_KEY_BINARY  = 128, /* the key was stored in base64 form (meta b): echo it so */
};
/* Whole-byte values no item can have: chunks that are not items. */
#define ITEM_FREE  0xffu     /* on a free list, or never handed out */
/* a data chunk of a chained value; 0xfe has the ITEM_ON_DISK bit set, so
 * layout-reading helpers (item_nstored, item_ntotal, item_nbytes) must never
 * be called on a data chunk: its size field is its piece's length, read
 * directly with item_size_field */
#define ITEM_DATA  0xfeu
#define ITEM_STATE_BITS  (ITEM_LINKED | ITEM_STALE | ITEM_WIN_SENT)
#define ITEM_LAYOUT_BITS (ITEM_HAS_FLAGS | ITEM_HAS_EXPTIME | ITEM_CHAINED | ITEM_ON_DISK | ITEM_KEY_BINARY)

/* Values above this carry a refcount and may be handed out zero-copy;
 * smaller ones are always copied out (a copy beats two atomic RMWs). */
#define ITEM_REF_MIN_BYTES 1024u

/* Whether CAS ids are kept (-C turns them off for every item). */
extern bool g_use_cas;
/* Chunk size of each class, indexed by class id; set by slabs_init. */
extern uint32_t g_class_size[];
/* Heads of chained values each class holds now: a head can sit in any
 * class, however small, because it keeps only the value's last piece, so
 * extstore's flusher and the chained-value eviction look in these classes
 * too. Counted when a head is allocated and when its memory is freed
 * (items.c), so a class that held one once is not watched forever: a
 * small class full of small items read as "memory low" to the flusher
 * long after its one chained value was gone. */
extern _Atomic uint32_t g_class_chained_heads[];
static inline bool class_holds_chained(unsigned clsid)
{
    return atomic_load_explicit(&g_class_chained_heads[clsid], memory_order_relaxed) != 0;
}
extern char *g_region;
extern unsigned g_page_shift;
extern _Atomic uint8_t *g_page_cls;

static inline int slabs_clsid_of(const item *it)
{
    return atomic_load_explicit(&g_page_cls[(size_t)((const char *)it - g_region) >> g_page_shift],
                                memory_order_relaxed);
}
static inline uint32_t item_handle(const item *it) { return (uint32_t)(((const char *)it - g_region) >> 3) + 1; }
static inline item *handle_item(uint32_t h) { return (item *)(g_region + ((size_t)(h - 1) << 3)); }

static inline uint8_t item_fl(const item *it) { return atomic_load_explicit(&((item *)it)->iflags, memory_order_acquire); }
/* Layout bits never change after allocation, so a relaxed read is enough. */
static inline uint8_t item_layout(const item *it)
{
    return atomic_load_explicit(&((item *)it)->iflags, memory_order_relaxed) & ITEM_LAYOUT_BITS;
}
static inline uint32_t item_nkey(const item *it) { return it->size_key >> 24; }
/* The 24-bit size field: the bytes stored after the key, except in an
 * extstore stub (ITEM_ON_DISK), where it is the length of the value on disk
 * (see "extstore stubs" below). */
static inline uint32_t item_size_field(const item *it) { return it->size_key & ITEM_NBYTES_MAX; }
/* An extstore stub stores the 12-byte locator after its key, and the value's
 * length in the size field, where a RAM item keeps its own length: a stub's
 * own length follows from the value's. A value of 2^24 - 1 bytes or more
 * (-I allows 128 MiB) has the field at ITEM_NBYTES_MAX and its length in 4
 * more bytes after the locator. */
#define EXT_LOC_BYTES 12u
#define EXT_STUB_NSTORED_MAX (EXT_LOC_BYTES + 4u)
static inline size_t ext_stub_nstored(uint64_t nbytes)
{
    return nbytes < ITEM_NBYTES_MAX ? EXT_LOC_BYTES : EXT_STUB_NSTORED_MAX;
}
/* Bytes stored in the item itself: the value, or for a chained item its
 * descriptor and last piece, or for a stub its locator (and long length). */
static inline uint32_t item_nstored(const item *it)
{
    uint32_t n = item_size_field(it);
    return (item_layout(it) & ITEM_ON_DISK) ? (uint32_t)ext_stub_nstored(n) : n;
}
static inline char *item_key(item *it) { return (char *)it + ITEM_HDR; }
static inline char *item_data(item *it) { return item_key(it) + item_nkey(it); }
/* nbytes: the bytes stored (item_nstored), so a stub (12 or 16) has none */
static inline bool item_has_ref(uint8_t layout, size_t nbytes)
{
    return (layout & ITEM_CHAINED) || nbytes > ITEM_REF_MIN_BYTES;
}
/* Bytes the optional tail fields take. */
static inline size_t item_tail_size(uint8_t layout, size_t nstored)
{
    return (g_use_cas ? 8 : 0) + ((layout & ITEM_HAS_EXPTIME) ? 4 : 0) + ((layout & ITEM_HAS_FLAGS) ? 4 : 0)
         + (item_has_ref(layout, nstored) ? 4 : 0);
}
/* Chunk bytes an item needs. */
static inline size_t item_ntotal_for(uint8_t layout, size_t nkey, size_t nstored)
{
    return ITEM_HDR + nkey + nstored + item_tail_size(layout, nstored);
}
static inline char *item_end(const item *it) { return (char *)it + g_class_size[slabs_clsid_of(it)]; }
/* Tail fields, from the chunk end backwards: CAS, expiry, flags, refcount. */
static inline _Atomic uint64_t *item_cas_ptr(item *it) { return (_Atomic uint64_t *)(item_end(it) - 8); }
static inline char *item_tail_after_cas(item *it) { return item_end(it) - (g_use_cas ? 8 : 0); }
static inline _Atomic uint32_t *item_exptime_ptr(item *it)
{
    return (_Atomic uint32_t *)(item_tail_after_cas(it) - 4);
}
static inline char *item_tail_after_exptime(item *it)
{
    return item_tail_after_cas(it) - ((item_layout(it) & ITEM_HAS_EXPTIME) ? 4 : 0);
}
static inline char *item_cflags_ptr(item *it) { return item_tail_after_exptime(it) - 4; }
static inline _Atomic uint32_t *item_ref_ptr(item *it)
{
    return (_Atomic uint32_t *)(item_tail_after_exptime(it) - ((item_layout(it) & ITEM_HAS_FLAGS) ? 4 : 0) - 4);
}
/* A stub is never handed out zero-copy: it holds no value. */
static inline bool item_refcounted(item *it)
{
    uint8_t layout = item_layout(it);
    return !(layout & ITEM_ON_DISK) && item_has_ref(layout, item_size_field(it));
}
static inline uint32_t item_cflags(item *it)
{
    if (!(item_layout(it) & ITEM_HAS_FLAGS)) return 0;
    uint32_t v;
    memcpy(&v, item_cflags_ptr(it), 4);
    return v;
}
static inline rel_time_t item_exptime(item *it)
{
    return (item_layout(it) & ITEM_HAS_EXPTIME) ? atomic_load_explicit(item_exptime_ptr(it), memory_order_relaxed) : 0;
}
/* Whether the item can take this expiry in place (0 needs no field). */
static inline bool item_exptime_fits(item *it, rel_time_t exptime)
{
    return exptime == 0 || (item_layout(it) & ITEM_HAS_EXPTIME);
}
static inline uint64_t item_get_cas(item *it)
{
    return g_use_cas ? atomic_load_explicit(item_cas_ptr(it), memory_order_relaxed) : 0;
}

/* Chained values: the descriptor at the start of the head's stored bytes. */
struct chain_desc {
    uint64_t total;      /* value length */
    uint32_t nchunks;    /* data chunks, in value order, before the head's own piece */
    /* then uint32_t handles[nchunks], then the last piece of the value */
};
static inline struct chain_desc item_chain(item *it)
{
    struct chain_desc d;
    memcpy(&d, item_data(it), sizeof d);
    return d;
}
static inline uint32_t item_chain_handle(item *it, uint32_t i)
{
    uint32_t h;
    memcpy(&h, item_data(it) + sizeof(struct chain_desc) + 4 * (size_t)i, 4);
    return h;
}
/* Bytes a data chunk of a class holds. */
static inline size_t chunk_capacity(int clsid) { return g_class_size[clsid] - ITEM_HDR; }
static inline char *chunk_data(item *chunk) { return (char *)chunk + ITEM_HDR; }
/* The value's length, chained, on disk or neither. */
static inline uint64_t item_nbytes(item *it)
{
    uint8_t layout = item_layout(it);
    if (layout & ITEM_CHAINED) return item_chain(it).total;
    uint32_t n = item_size_field(it);
    if ((layout & ITEM_ON_DISK) && n == ITEM_NBYTES_MAX) memcpy(&n, item_data(it) + EXT_LOC_BYTES, 4);
    return n;
}
/* Bytes of memory the item occupies, as memcached reports them (me size=). */
static inline size_t item_ntotal(item *it)
{
    uint8_t layout = item_layout(it);   /* one load: every GET asks (mrc_get) */
    size_t n = item_size_field(it);
    if (layout & ITEM_ON_DISK) n = ext_stub_nstored(n);
    return item_ntotal_for(layout, item_nkey(it), n) + ((layout & ITEM_CHAINED) ? item_chain(it).total : 0);
}

/* ---- per-thread context ---- */
/* STORAGE_MAX_THREADS: storage.h */

struct thread_stats {
    _Atomic uint64_t get_hits, get_misses, get_expired, get_flushed;
    _Atomic uint64_t delete_hits, delete_misses, incr_hits, incr_misses, decr_hits, decr_misses;
    _Atomic uint64_t cas_hits, cas_misses, cas_badval, touch_hits, touch_misses;
    _Atomic uint64_t total_items, get_copied, get_referenced;
};
#define THREAD_STATS_N (sizeof(struct thread_stats) / sizeof(_Atomic uint64_t))

/* memcached's per-class counters of `stats slabs` */
struct class_thread_stats {
    _Atomic uint64_t get_hits, cmd_set, delete_hits, incr_hits, decr_hits, cas_hits, cas_badval, touch_hits;
};
#define CLASS_STATS_N (sizeof(struct class_thread_stats) / sizeof(_Atomic uint64_t))
/* GET hits in class clsid since start, all threads (storage_stats.c; not
 * moved by `stats reset`: for rates taken as differences) */
uint64_t storage_class_get_hits_total(int clsid);

/* mrc.c: the GETs and stores of sampled keys a thread made, waiting for the
 * estimator. The owner writes ev[] and tail; whoever holds mrc.c's lock
 * reads them and moves head. refs counts every GET (owner only). */
#define MRC_RING_SLOTS 1024
struct mrc_event { uint64_t key_hash; uint32_t size; uint32_t is_store; };
struct mrc_ring {
    _Atomic uint32_t head, tail;
    _Atomic uint64_t refs;
    struct mrc_event ev[MRC_RING_SLOTS];
};

struct storage_thread {
    _Atomic uint64_t epoch;          /* 0 = outside any read section; see epoch.c */
    int      index;
    int      section_depth;
#ifdef CACHET_TEST_HOOKS
    unsigned stall_tick;             /* g_test_reader_stall */
    /* concurrent checker: the next lock-free GET holds the item it found for
     * this many microseconds, published in test_held meanwhile */
    _Atomic unsigned test_hold_us;
    _Atomic(item *) test_held;
#endif
    /* alloc_chunk's sleeps before it evicts (extstore's flusher, the
     * cleaner's limbo; store_wait_allowance_us): what the store being
     * allocated may still sleep (0 outside alloc_item and for callers that
     * may not wait), and this thread's sleeping in the current second.
     * Owner only. */
    int64_t  wait_left_us;
    /* item_alloc_parking's park while it runs (NULL otherwise): the
     * flusher wait parks the connection instead of sleeping. Owner only. */
    struct store_park *park;
    int64_t  wait_window_used_us;
    uint32_t wait_window_second;     /* the item clock's second it is for */
    struct thread_stats st;
    struct class_thread_stats cls[64 + 1];
    struct mrc_ring mrc;             /* sampled GETs and stores, for mrc.c */
    char pad[64];
};

/* Owner-only counter bump: a relaxed load+store is a plain increment in the
 * generated code, but keeps the stats reader's concurrent load race-free. */
#define STAT_INC(t, f) atomic_store_explicit(&(t)->st.f, atomic_load_explicit(&(t)->st.f, memory_order_relaxed) + 1, memory_order_relaxed)
#define CLS_INC(t, c, f) atomic_store_explicit(&(t)->cls[c].f, atomic_load_explicit(&(t)->cls[c].f, memory_order_relaxed) + 1, memory_order_relaxed)

/* ---- global settings, clock, flush_all words and CAS ids (clock.c) ---- */
extern struct storage_config g_cfg;
extern _Atomic uint32_t g_current_time;
/* flush_all, in one word so a reader sees all of one flush at once: items
 * whose time is <= oldest are gone once the clock reaches effective (an
 * immediate flush takes effect at once, a delayed one at its time), and
 * after an immediate flush no access or store is stamped at or below
 * oldest (the stamp floor, oldest + 1). The floor lives in the same word as
 * the flush it belongs to because a reader stamps an item with the floor of
 * the flush word it checked the item against: see storage_flush(). */
extern _Atomic uint64_t g_flush_word;
#define FLUSH_IMMEDIATE (1ULL << 31)
static inline uint64_t flush_word(rel_time_t oldest, rel_time_t effective, bool immediate)
{
    return (uint64_t)oldest << 32 | (effective & 0x7fffffffu) | (immediate ? FLUSH_IMMEDIATE : 0);
}
static inline rel_time_t flush_oldest(uint64_t w) { return (rel_time_t)(w >> 32); }
static inline rel_time_t flush_effective(uint64_t w) { return (rel_time_t)(w & 0x7fffffffu); }
/* A delayed flush_all waits in its own word until its time. Stored over
 * g_flush_word it would lift an immediate flush already in force: items that
 * flush had covered but the cleaner had not yet reclaimed came back to life.
 * An immediate flush clears it (a newer flush replaces a pending delayed one,
 * as in memcached); a delayed one replaces the previous delayed one. */
extern _Atomic uint64_t g_flush_later;
extern _Atomic uint32_t g_flush_pending;   /* cleaner should cut bags once the flush is effective */

static inline rel_time_t now_time(void) { return atomic_load_explicit(&g_current_time, memory_order_relaxed); }
/* One reader's view of time and flush: the clock first, then the word (so
 * `now` is never later than the flush word it is paired with). */
struct time_view { rel_time_t now; uint64_t fw, later; };
static inline struct time_view time_view_now(void)
{
    struct time_view v;
    /* acquire, so the word's load cannot move before the clock's */
    v.now = atomic_load_explicit(&g_current_time, memory_order_acquire);
    v.fw = atomic_load_explicit(&g_flush_word, memory_order_acquire);
    v.later = atomic_load_explicit(&g_flush_later, memory_order_acquire);
    return v;
}
/* The time an access or store records in an item, in that view: now, but
 * above everything an immediate flush_all covers, and, once the clock has
 * left the second a delayed one took effect in, above everything that one
 * covers (its horizon may be ahead of the clock: see storage_flush; in its
 * own second, as in memcached, what is stored is flushed too). */
static inline rel_time_t stamp_time_in(struct time_view v)
{
    rel_time_t t = v.now;
    if ((v.fw & FLUSH_IMMEDIATE) && t <= flush_oldest(v.fw)) t = flush_oldest(v.fw) + 1;
    if (v.later && flush_effective(v.later) < v.now && t <= flush_oldest(v.later))
        t = flush_oldest(v.later) + 1;
    return t;
}
static inline rel_time_t stamp_time(void) { return stamp_time_in(time_view_now()); }
void clock_init(void);   /* storage_init, after g_cfg is set */
void clock_publish(uint32_t now);   /* raises the clock to now, never lowers it */
int clock_start(void);   /* 0 or pthread_create's error */
void clock_stop(void);

uint64_t storage_next_cas(storage_thread *t);

/* once per bucket moved while the table grows, off the request path */
extern _Atomic unsigned g_test_migrate_stall; /* unit test only, see assoc.c */
#ifdef CACHET_TEST_HOOKS
extern _Atomic unsigned g_test_reader_stall;  /* stress test only, see items.c */
extern _Atomic unsigned g_test_poison_free;   /* stress test only, see slabs.c */
#endif
/* Concurrent checker hooks: reclaim every dead item now (full cleaner sweep),
 * and move the page holding `it` to another class (returns false if it could
 * not). Neither may be called inside a read section. */
void bags_test_reclaim_all(void);
bool slabs_test_move_page_of(storage_thread *t, const item *it);

/* ---- thread registry, read sections / grace periods (epoch.c) ---- */
storage_thread *storage_thread_get(int index);
int storage_thread_count(void);
void epoch_enter(storage_thread *t);
void epoch_exit(storage_thread *t);
/* Waits until every read section that began before the call has ended. The
 * caller must not be inside a section nor hold a stripe or class lock. */
void epoch_synchronize(void);
uint64_t epoch_current(void);
/* True once every section that began before epoch_advance() returned `e` ended. */
bool epoch_passed(uint64_t e);
uint64_t epoch_advance(void);
/* Around a blocking wait inside a storage call (a store waiting for
 * extstore's flusher or the cleaner): no caller waits inside a read section
 * (a section spans one lookup or copy, and allocating happens outside any),
 * which test builds check (the section would stop protecting the item
 * pointers its caller holds); the returned depth is for epoch_step_in. */
unsigned epoch_step_out(storage_thread *t);
void epoch_step_in(storage_thread *t, unsigned depth);

/* ---- how long a store may sleep before it evicts ----
 * A store about to evict may first wait for extstore's flusher (ext_items.c
 * ext_await_flusher) and for the cleaner's limbo (bags.c cleaner_wait), so
 * values a moment from disk or from the free list are not lost. A client's
 * store waits for the flusher with its connection parked, not asleep
 * (item_alloc_parking; bounded by STORE_WAIT_MAX_US of its own and charged
 * to neither budget below). The sleeping waits
 * draw on one budget: STORE_WAIT_MAX_US for the whole store (alloc_item
 * sets it; data chunks, recaches, materialize and the compactor get none),
 * and at most STORE_WAIT_SHARE_US of fruitless waiting (store_wait_spent)
 * in each second of the item clock per thread, so a slow or stuck disk
 * costs a worker's other clients (RAM GETs included) at most a tenth of
 * its time in waits that did not help, where memcached would just evict.
 * (Charging every wait to the share lost 2,502 values of
 * test_a_paced_fill_loses_no_value's 70,000 on a busy machine: the fill
 * outran the flusher by more than a tenth, and paced waits are the point.)
 * Owner only: t is the calling thread. */
#define STORE_WAIT_MAX_US 100000
#define STORE_WAIT_SHARE_US 100000
static inline int64_t store_wait_clock_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}
static inline int64_t store_wait_allowance_us(storage_thread *t)
{
    if (!t || t->wait_left_us <= 0) return 0;
    /* the window is a second of the item clock (a test's debugtime moves it) */
    rel_time_t second = now_time();
    if (second != t->wait_window_second) {
        t->wait_window_second = second;
        t->wait_window_used_us = 0;
    }
    int64_t share = STORE_WAIT_SHARE_US - t->wait_window_used_us;
    if (share <= 0) return 0;
    return share < t->wait_left_us ? share : t->wait_left_us;
}
/* A wait that got what it waited for (the flusher moved values out, the
 * cleaner's chunks came free) paced the store to the disk, which is its
 * point: only the store's budget pays for it. One that did not (a slow or
 * stuck disk) counts against the thread's share too. */
static inline void store_wait_spent(storage_thread *t, int64_t us, bool fruitful)
{
    t->wait_left_us -= us;
    if (!fruitful) t->wait_window_used_us += us;
}

/* ---- hash table (assoc.c) ---- */
uint32_t hash_key(const char *key, size_t nkey);
/* The same hash with another seed: independent bits (mrc.c's key identity). */
uint32_t hash_key_seeded(const char *key, size_t nkey, uint32_t seed);
int  assoc_init(int hashpower);
void assoc_destroy(void);
item *assoc_find(storage_thread *t, const char *key, size_t nkey, uint32_t hv); /* in a read section */
void stripe_lock(uint32_t hv);
void stripe_unlock(uint32_t hv);
bool stripe_trylock(uint32_t hv);
item *assoc_find_locked(const char *key, size_t nkey, uint32_t hv);
void assoc_insert_locked(item *it, uint32_t hv);
void assoc_replace_locked(item *old_it, item *new_it, uint32_t hv);
void assoc_unlink_locked(item *it, uint32_t hv);
void assoc_prefetch_bucket(uint32_t hv);
void assoc_prefetch_item(uint32_t hv);
int assoc_start_thread(void);   /* 0 or pthread_create's error */
void assoc_stop_thread(void);
void assoc_stats(stat_writer w, void *ctx);
uint64_t assoc_item_count(void);
unsigned assoc_hashpower(void);
/* Tests: block until the current expansion (if any) finished. */
void assoc_wait_expansion(void);

/* ---- slabs (slabs.c) ---- */
#define MAX_SLAB_CLASSES 64
_Static_assert(MAX_SLAB_CLASSES == 64, "storage_thread.cls is sized for 64 classes");
int  slabs_plan(void);                           /* page size and class ladder only: 0 or -1 with a message */
int  slabs_init(void);
void slabs_destroy(void);
int  slabs_clsid(size_t ntotal);                 /* an item's class; 0 if too large */
int  slabs_stub_clsid(size_t ntotal);            /* an extstore stub's: the stub classes too */
unsigned slabs_class_count(void);                /* classes are 1..count */
unsigned slabs_first_item_class(void);           /* the -n class; below it, extstore's stub classes */
uint32_t slabs_chunk_size(int clsid);
item *slabs_alloc_chunk(int clsid);              /* NULL if no free chunk and no free page */
void slabs_free_chunk(item *it);
int slabs_start_thread(void);   /* 0 or pthread_create's error */
void slabs_stop_thread(void);
/* slabs_prefault.c: the thread that faults in the next never-used page
 * before a store needs it; the allocator wakes it when it takes one. */
struct prefault_region {
    char *base;                     /* the item region (slabs.c's g_region) */
    size_t page_size, pages_max;
    _Atomic size_t *pages_next;     /* first page never handed out */
};
struct prefault_region slabs_prefault_region(void);  /* slabs.c: the region as slabs_init made it */
int slabs_prefault_start(struct prefault_region r);   /* 0 or pthread_create's error */
void slabs_prefault_stop(void);
void slabs_prefault_wake(void);
/* slabs_mover.c: gives class clsid a page from another class now (evicting
 * there), for a store that has nothing of its own to evict. No lock held,
 * not in a read section. True if the class got memory. */
bool slabs_acquire_page(storage_thread *t, int clsid);
/* The extstore flusher gives stub class clsid its next page before it runs
 * out (ext_items.c): a page whose values are written to disk (their stubs
 * going to clsid's free chunks) or moved to free chunks of their class,
 * from the class with the oldest items among those of more than one page;
 * what can be neither is evicted. False if no page moved. */
bool slabs_acquire_page_for_stubs(storage_thread *t, int clsid);
void slabs_mover_stats(stat_writer w, void *ctx);
void slabs_mover_reset(void);
size_t slabs_total_malloced(void);
size_t slabs_chunk_max(void);                    /* largest class: longer items are chained */
size_t slabs_page_size(void);
size_t slabs_pages_max(void);
size_t slabs_pages_used(void);
size_t slabs_pages_unused(void);                 /* pages never handed to a class */
uint64_t slabs_class_free_bytes(int clsid);      /* free list + rest of the page being carved; takes the class lock */
unsigned slabs_class_pages(int clsid);
/* One background balancing pass: returns true if a page changed class
 * (tests call it directly). */
bool slabs_rebalance_once(void);
int  slabs_automove_level(void);   /* `slabs automove`: 0 stops the background pass */
extern _Atomic uint64_t g_slab_moves, g_slab_rescues;   /* slabs_mover.c */

/* ---- the mover's choice by marginal gain (slabs_gain.c) ---- */
void slabs_gain_enable(bool on);
bool slabs_gain_enabled(void);
void slabs_gain_evicted(int clsid, const char *key, size_t nkey);   /* bags.c, on an eviction */
void slabs_gain_missed(uint32_t hv);                                 /* items.c, on a GET miss */
bool slabs_gain_pick(int *src_out, int *dst_out);                    /* mover thread, mover lock */
void slabs_gain_reset(void);
uint64_t slabs_gain_shadow_hits(void);

/* ---- bag LRU and cleaner (bags.c) ---- */
int  bags_init(void);
void bags_destroy(void);
void bags_append(storage_thread *t, item *it);   /* in a read section */
/* An access: the bag id and the time `stamp` (stamp_time_in of the view the
 * caller checked the item's liveness in, taken before that check). */
void bags_stamp(item *it, int clsid, rel_time_t stamp);  /* GET: marks fetched */
void bags_bump(item *it, int clsid, rel_time_t stamp);   /* same without marking it fetched */
/* Frees memory in class clsid by reclaiming dead/expired items or evicting
 * from the oldest bag. Returns how many chunks it freed. No locks held. */
int  bags_evict(storage_thread *t, int clsid);
/* Evicts every item of class clsid whose chunk lies in [lo, hi), and the
 * items named by the `heads` handles (owners of data chunks in that range),
 * for the slab mover. */
void bags_purge(storage_thread *t, int clsid, const char *lo, const char *hi,
                const uint32_t *heads, size_t nheads);
int bags_start_thread(void);   /* 0 or pthread_create's error */
void bags_stop_thread(void);
bool bags_clean_once(storage_thread *t);         /* one cleaner pass (tests) */
struct ext_candidate { item *it; uint8_t nkey; char key[KEY_MAX_LENGTH]; };
unsigned bags_ext_candidates(int clsid, struct ext_candidate *out, unsigned max,
                             uint32_t min_bytes, rel_time_t min_age, bool any_age);
uint32_t bags_flusher_hold_max(void);   /* stats: lru_flusher_hold_max */
#ifdef CACHET_TEST_HOOKS
/* unit test: called between two holds of bags_ext_candidates' walk, no lock held */
extern void (*g_test_flusher_between_holds)(int clsid);
#endif
void bags_stats_items(stat_writer w, void *ctx);
void bags_stats_general(stat_writer w, void *ctx);
void bags_note_unlinked(item *it, int clsid);    /* counts dead items waiting in bags */
unsigned bags_count(int clsid);
rel_time_t bags_oldest_age(int clsid);           /* now - last access of the oldest item, 0 if none */
rel_time_t bags_oldest_age_cached(int clsid);    /* the same as of the last cleaner pass, without a lock */

/* ---- statistics (storage_stats.c) ---- */
void storage_stats_init(void);   /* storage_init: forget the last stats reset */

/* per-class item statistics kept by items.c/bags.c */
struct class_stats {
    _Atomic uint64_t curr_items, bytes_requested;
    _Atomic uint64_t evicted, evicted_nonzero, evicted_unfetched, evicted_time;
    _Atomic uint64_t expired_unfetched, expired, reclaimed, outofmemory, moves_to_alt;
    _Atomic uint64_t dead_waiting, reassign_evicted;
    _Atomic uint64_t evicted_young;   /* evicted within young_window of its last access: the cache is too small */
};
/* Age (now - last access) of the item most recently evicted, any class. */
extern _Atomic uint32_t g_last_eviction_age;
extern struct class_stats g_class_stats[MAX_SLAB_CLASSES + 1];

/* item lifecycle helpers (items.c) */
bool item_is_live(item *it, rel_time_t now);     /* not expired, not flushed */
bool item_is_flushed(item *it, rel_time_t now);
/* The same in a reader's view: a reader that stamps the item afterwards
 * (bags_stamp) checks it in the view it stamps with. */
bool item_is_live_in(item *it, struct time_view v);
bool item_is_flushed_in(item *it, struct time_view v);
void item_unlink_locked(item *it, uint32_t hv);  /* unlink + account; stays in its bag */
void item_free_dead(item *it);                   /* after grace: drop the table's reference */
void sizes_account(size_t ntotal, int delta);
/* `stats sizes` buckets, memcached's: 32 bytes wide, named by their upper
 * bound; the last of n holds everything larger */
static inline size_t size_bucket(size_t ntotal, size_t n)
{
    size_t b = (ntotal + 31) / 32;
    return b < n ? b : n - 1;
}

/* ---- the miss-ratio curve and the size-after-miss histogram (mrc.c) ---- */
/* -1: no memory; size_buckets: of the missed-sizes histogram (items.c's) */
int  mrc_init(size_t size_buckets);
uint64_t mrc_missed_in(size_t bucket);   /* items stored right after a miss, by size bucket */
void mrc_destroy(void);
int  mrc_start_thread(void);         /* 0 or pthread_create's error */
void mrc_stop_thread(void);
void mrc_reset(void);
extern _Atomic uint32_t g_mrc_threshold;   /* published copy of the estimator's */
void mrc_sampled(storage_thread *t, uint32_t hv, const char *key, size_t nkey, uint32_t size, bool is_store);
void mrc_note_miss(uint32_t hv);
void mrc_store_after_miss(uint32_t hv, size_t ntotal);
/* A GET (size: the item's bytes, 0 = a miss): a counter bump, and work
 * only for a sampled key (one compare decides). */
static inline void mrc_get(storage_thread *t, uint32_t hv, const char *key, size_t nkey, uint32_t size)
{
    atomic_store_explicit(&t->mrc.refs, atomic_load_explicit(&t->mrc.refs, memory_order_relaxed) + 1,
                          memory_order_relaxed);
    if (!size) mrc_note_miss(hv);
    if ((hv >> 8) < atomic_load_explicit(&g_mrc_threshold, memory_order_relaxed))
        mrc_sampled(t, hv, key, nkey, size, false);
}
static inline void mrc_store(storage_thread *t, uint32_t hv, const char *key, size_t nkey, uint32_t size)
{
    mrc_store_after_miss(hv, size);
    if ((hv >> 8) < atomic_load_explicit(&g_mrc_threshold, memory_order_relaxed))
        mrc_sampled(t, hv, key, nkey, size, true);
}
/* items.c's building blocks, for ext_items.c */
/* may_wait: the store may sleep a little before it evicts (see "how long a
 * store may sleep"); false for what no client waits on and for IO threads
 * (recaches, materialize, the compactor): they evict, or skip, at once */
item *alloc_item(storage_thread *t, const char *key, size_t nkey, uint32_t client_flags,
                 rel_time_t exptime, uint64_t nbytes, uint8_t extra_layout, enum store_result *err,
                 bool may_wait);
void replace_locked(storage_thread *t, item *old_it, item *new_it, uint32_t hv, bool new_item);
void enter_bag(storage_thread *t, item *it);              /* not in a read section */
bool item_rescue(storage_thread *t, item *expect, const char *key, size_t nkey);   /* slabs_mover.c */
void copy_value_out(item *it, size_t off, char *dst, size_t len);

/* ---- extstore stubs (ext_items.c) ----
 * An ITEM_ON_DISK item keeps header, key and tail fields as any item (the
 * expiry only when it has one, or room for it, as any item); it stores the
 * 12-byte locator, and the value's length in the size field (above). With
 * a CAS, a stub of a 6-byte key that never expires is 19 + 6 + 12 + 8 = 45
 * bytes, a 48-byte chunk. alloc_item(..., nbytes = the value's length,
 * ITEM_ON_DISK) sizes it; the caller writes the locator. */
struct ext_stub { uint8_t loc[EXT_LOC_BYTES]; uint32_t nbytes; };
static inline struct ext_stub item_ext_stub(item *it)
{
    struct ext_stub s;
    memcpy(s.loc, item_data(it), sizeof s.loc);
    s.nbytes = (uint32_t)item_nbytes(it);
    return s;
}
static inline void item_set_ext_locator(item *stub, const void *loc)
{
    memcpy(item_data(stub), loc, EXT_LOC_BYTES);
}
/* What the item code calls on extstore's behalf goes through the hook
 * table (ext_hooks.h), not into ext_items.c. */

/* ---- extstore (ext_items.c), for the concurrent checker ---- */
#include "extstore.h"
struct extstore *storage_ext_store(void);   /* NULL without ext_path */

#endif
