/*
 * storage_internal.h - what the storage files (items.c, assoc.c, slabs.c,
 * bags.c, epoch.c) share with each other and with the unit tests,
 * and nothing the protocol layer should see.
 *
 * Why the item header looks like this (24 bytes, then optional fields):
 * benchmark W3 wants <= 150 bytes of RSS per item for 9-byte keys and
 * 100-byte values. memcached spends 48 bytes on its header plus 8-byte hash
 * and LRU pointers; we spend 24: chain and bag links are 32-bit chunk handles
 * (offset/8 into one reserved region, see slabs.c), the slab class is found
 * from the page, and CAS, refcount and client flags are stored only when the
 * item needs them (CAS unless -C, refcount only for values large enough to be
 * sent zero-copy, client flags only when non-zero). With CAS a 9+100 item is
 * 24+8+9+100+2 = 143 bytes and lands in the 144-byte class of the default
 * -n 48 -f 1.25 ladder (88, 112, 144, ...).
 *
 * Fields a lock-free reader may see change are C11 atomics (time, exptime,
 * bag, iflags, links, cas); everything else is written once before the item
 * is published with a release store and never changes while any reader can
 * reach the chunk (see the reclamation notes in assoc.c).
 */
#ifndef CACHET_STORAGE_INTERNAL_H
#define CACHET_STORAGE_INTERNAL_H

#include "storage.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

/* ---- item layout ---- */
struct item {
    _Atomic uint32_t h_next;    /* next item in the hash chain (handle) */
    _Atomic uint32_t lru_next;  /* next item in its bag; free-list link when free */
    _Atomic uint32_t time;      /* last access (rel_time_t) */
    _Atomic uint32_t exptime;   /* 0 = never */
    uint32_t nbytes;            /* value length, without "\r\n" */
    _Atomic uint16_t bag;       /* id of the bag it was last stamped with | ITEM_FETCHED_BIT */
    uint8_t  nkey;
    _Atomic uint8_t iflags;
    /* then: [uint64 cas] [uint32 refcount] [uint32 client flags] key value "\r\n" */
};
_Static_assert(sizeof(struct item) == 24, "item header must stay 24 bytes");

#define ITEM_FETCHED_BIT 0x8000u
#define ITEM_BAG_MASK    0x7fffu

enum {
    ITEM_LINKED    = 1,   /* reachable from the hash table */
    ITEM_HAS_CAS   = 2,
    ITEM_HAS_REF   = 4,
    ITEM_HAS_FLAGS = 8,
    ITEM_STALE     = 16,  /* md I / ms I: serve, but flag X and hand out a win */
    ITEM_WIN_SENT  = 32,  /* a client already got W for this item */
    ITEM_FREE      = 64,  /* chunk sits on a free list */
    ITEM_LIMBO     = 128, /* unlinked, out of its bag, waiting for the grace period */
};

/* Values above this carry a refcount and may be handed out zero-copy;
 * smaller ones are always copied out (a copy beats two atomic RMWs). */
#define ITEM_REF_MIN_BYTES 1024u

static inline size_t item_header_size(uint8_t fl)
{
    return sizeof(struct item) + ((fl & ITEM_HAS_CAS) ? 8 : 0) + ((fl & ITEM_HAS_REF) ? 4 : 0)
         + ((fl & ITEM_HAS_FLAGS) ? 4 : 0);
}
static inline size_t item_ntotal_for(uint8_t fl, size_t nkey, size_t nbytes)
{
    return item_header_size(fl) + nkey + nbytes + 2;
}
static inline uint8_t item_fl(const item *it) { return atomic_load_explicit(&((item *)it)->iflags, memory_order_acquire); }
/* Layout bits (HAS_*) never change after allocation, so a relaxed read is enough. */
static inline uint8_t item_layout(const item *it)
{
    return atomic_load_explicit(&((item *)it)->iflags, memory_order_relaxed) & (ITEM_HAS_CAS | ITEM_HAS_REF | ITEM_HAS_FLAGS);
}
static inline _Atomic uint64_t *item_cas_ptr(item *it) { return (_Atomic uint64_t *)((char *)it + sizeof(struct item)); }
static inline _Atomic uint32_t *item_ref_ptr(item *it)
{
    return (_Atomic uint32_t *)((char *)it + sizeof(struct item) + ((item_layout(it) & ITEM_HAS_CAS) ? 8 : 0));
}
static inline uint32_t item_cflags(item *it)
{
    uint8_t fl = item_layout(it);
    if (!(fl & ITEM_HAS_FLAGS)) return 0;
    uint32_t v;
    memcpy(&v, (char *)it + item_header_size(fl) - 4, 4);
    return v;
}
static inline char *item_key(item *it) { return (char *)it + item_header_size(item_layout(it)); }
static inline char *item_data(item *it) { return item_key(it) + it->nkey; }
static inline size_t item_ntotal(item *it) { return item_ntotal_for(item_layout(it), it->nkey, it->nbytes); }
static inline uint64_t item_get_cas(item *it)
{
    return (item_layout(it) & ITEM_HAS_CAS) ? atomic_load_explicit(item_cas_ptr(it), memory_order_relaxed) : 0;
}

/* ---- per-thread context ---- */
#define STORAGE_MAX_THREADS 256

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

struct storage_thread {
    _Atomic uint64_t epoch;          /* 0 = outside any read section; see epoch.c */
    int      index;
    int      section_depth;
    unsigned stall_tick;             /* g_test_reader_stall */
    uint64_t cas_next, cas_end;      /* block of CAS ids owned by this thread */
    struct thread_stats st;
    struct class_thread_stats cls[64 + 1];
    char pad[64];
};

/* Owner-only counter bump: a relaxed load+store is a plain increment in the
 * generated code, but keeps the stats reader's concurrent load race-free. */
#define STAT_INC(t, f) atomic_store_explicit(&(t)->st.f, atomic_load_explicit(&(t)->st.f, memory_order_relaxed) + 1, memory_order_relaxed)
#define CLS_INC(t, c, f) atomic_store_explicit(&(t)->cls[c].f, atomic_load_explicit(&(t)->cls[c].f, memory_order_relaxed) + 1, memory_order_relaxed)

/* ---- global settings and clock (storage.c) ---- */
extern struct storage_config g_cfg;
extern _Atomic uint32_t g_current_time;
extern _Atomic uint32_t g_oldest_live;     /* flush_all: items with time <= this are gone once now >= it */
extern _Atomic uint32_t g_flush_pending;   /* cleaner should cut bags at g_oldest_live */

static inline rel_time_t now_time(void) { return atomic_load_explicit(&g_current_time, memory_order_relaxed); }
int clock_start(void);   /* 0 or pthread_create's error */
void clock_stop(void);
/* Tests move time forward instead of sleeping. */
void storage_test_advance_clock(uint32_t seconds);

storage_thread *storage_thread_get(int index);
int storage_thread_count(void);
uint64_t storage_next_cas(storage_thread *t);

extern _Atomic unsigned g_test_reader_stall;  /* stress test only, see items.c */
extern _Atomic unsigned g_test_migrate_stall; /* unit test only, see assoc.c */
extern _Atomic unsigned g_test_poison_free;   /* stress test only, see slabs.c */

/* ---- read sections / grace periods (epoch.c) ---- */
void epoch_enter(storage_thread *t);
void epoch_exit(storage_thread *t);
/* Waits until every read section that began before the call has ended. The
 * caller must not be inside a section nor hold a stripe or class lock. */
void epoch_synchronize(void);
uint64_t epoch_current(void);
/* True once every section that began before epoch_advance() returned `e` ended. */
bool epoch_passed(uint64_t e);
uint64_t epoch_advance(void);

/* ---- hash table (assoc.c) ---- */
uint32_t hash_key(const char *key, size_t nkey);
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
void storage_class_thread_stats(int clsid, uint64_t out[CLASS_STATS_N]);
int  slabs_init(void);
void slabs_destroy(void);
int  slabs_clsid(size_t ntotal);                 /* 0 if too large */
unsigned slabs_class_count(void);                /* classes are 1..count */
uint32_t slabs_chunk_size(int clsid);
/* Hot on every lookup, so inline: the region base and page table are set
 * once by slabs_init and never move. */
extern char *g_region;
extern unsigned g_page_shift;
extern _Atomic uint8_t *g_page_cls;
static inline int slabs_clsid_of(const item *it)
{
    return atomic_load_explicit(&g_page_cls[(size_t)((const char *)it - g_region) >> g_page_shift],
                                memory_order_relaxed);
}
item *slabs_alloc_chunk(int clsid);              /* NULL if no free chunk and no free page */
void slabs_free_chunk(item *it);
static inline uint32_t item_handle(const item *it) { return (uint32_t)(((const char *)it - g_region) >> 3) + 1; }
static inline item *handle_item(uint32_t h) { return (item *)(g_region + ((size_t)(h - 1) << 3)); }
int slabs_start_thread(void);   /* 0 or pthread_create's error */
void slabs_stop_thread(void);
void slabs_stats(stat_writer w, void *ctx);
/* slabs_mover.c: gives class clsid a page from another class now (evicting
 * there), for a store that has nothing of its own to evict. No lock held,
 * not in a read section. True if the class got memory. */
bool slabs_acquire_page(int clsid);
void slabs_mover_stats(stat_writer w, void *ctx);
void slabs_mover_reset(void);
size_t slabs_total_malloced(void);
size_t slabs_page_size(void);
size_t slabs_pages_max(void);
size_t slabs_pages_used(void);
unsigned slabs_class_pages(int clsid);
/* One background balancing pass: returns true if a page changed class
 * (tests call it directly). */
bool slabs_rebalance_once(void);
extern _Atomic uint64_t g_slab_moves;

/* ---- bag LRU and cleaner (bags.c) ---- */
int  bags_init(void);
void bags_destroy(void);
void bags_append(storage_thread *t, item *it);   /* in a read section */
void bags_stamp(item *it, int clsid);            /* GET: time + bag id only, marks fetched */
void bags_bump(item *it, int clsid);             /* same without marking it fetched */
/* Frees memory in class clsid by reclaiming dead/expired items or evicting
 * from the oldest bag. Returns how many chunks it freed. No locks held. */
int  bags_evict(storage_thread *t, int clsid);
/* Evicts every linked item whose chunk lies in [lo, hi) (slab mover). */
void bags_purge_range(storage_thread *t, int clsid, const char *lo, const char *hi);
int bags_start_thread(void);   /* 0 or pthread_create's error */
void bags_stop_thread(void);
bool bags_clean_once(storage_thread *t);         /* one cleaner pass (tests) */
void bags_stats_items(stat_writer w, void *ctx);
void bags_stats_general(stat_writer w, void *ctx);
void bags_note_unlinked(item *it, int clsid);    /* counts dead items waiting in bags */
unsigned bags_count(int clsid);
rel_time_t bags_oldest_age(int clsid);           /* now - last access of the oldest item, 0 if none */

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
void item_unlink_locked(item *it, uint32_t hv);  /* unlink + account; stays in its bag */
void item_free_dead(item *it);                   /* after grace: drop the table's reference */
void sizes_account(size_t ntotal, int delta);

#endif
