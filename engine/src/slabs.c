/*
 * slabs.c - item memory: one reserved region cut into 1 MB pages, pages cut
 * into equal chunks per size class.
 *
 * Why one reserved region: a chunk is then named by a 32-bit handle
 * (offset / 8), which halves the hash chain and bag links, and the memory is
 * type-stable: it is never unmapped, so a lock-free reader holding a stale
 * handle still points at item-shaped memory (the grace period in epoch.c
 * guarantees the chunk was not reused under it). The region is reserved with
 * MAP_NORESERVE and touched page by page (the next one ahead of use, by
 * slabs_prefault.c), so RSS follows what is used and never exceeds -m:
 * pages are handed out only while fewer than -m / page_size are in use, and
 * the hash table and bookkeeping are, as in memcached, on top.
 *
 * Why size classes from -n/-f or an explicit list: as memcached, so operators'
 * knowledge carries over; the smallest class holds -n bytes of key+value with
 * every optional header field present (24 + cas 8 + flags 4 + "\r\n" 2), so
 * with the defaults the ladder is 88, 112, 144, 184, ... and a 9-byte key with
 * a 100-byte value (143 bytes) wastes one byte.
 *
 * Pages move between classes (slabs_mover.c): a class that needs memory and
 * has nothing of its own to evict takes a page from another class within
 * the same request, and a background pass moves pages from classes holding
 * old items to classes evicting young ones.
 *
 * Locking: see slabs_internal.h.
 */
#include "slabs_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

char *g_region;
unsigned g_page_shift;
_Atomic uint8_t *g_page_cls;   /* class of each page; 0 = not yet handed out */
struct slabclass g_classes[MAX_SLAB_CLASSES + 1];
unsigned g_nclasses;
static unsigned g_first_item_class = 1;   /* the -n class; below it, extstore's stub classes */
struct slab_page *g_pages;
size_t g_page_size, g_pages_max;
_Atomic size_t g_pages_next;
static char *raw_region;
static size_t region_bytes, raw_bytes;

size_t slabs_page_size(void) { return g_page_size; }
size_t slabs_pages_max(void) { return g_pages_max; }
size_t slabs_pages_used(void)
{
    size_t n = 0;
    for (unsigned c = 1; c <= g_nclasses; c++) n += atomic_load(&g_classes[c].pages);
    return n;
}
size_t slabs_pages_unused(void)
{
    size_t next = atomic_load(&g_pages_next);
    return next < g_pages_max ? g_pages_max - next : 0;
}
uint64_t slabs_class_free_bytes(int clsid)
{
    struct slabclass *sc = &g_classes[clsid];
    pthread_mutex_lock(&sc->lock);
    uint64_t fr = slabs_free_bytes_locked(sc);
    pthread_mutex_unlock(&sc->lock);
    return fr;
}
size_t slabs_total_malloced(void) { return slabs_pages_used() * g_page_size; }
unsigned slabs_class_count(void) { return g_nclasses; }
unsigned slabs_first_item_class(void) { return g_first_item_class; }
uint32_t slabs_chunk_size(int c) { return g_classes[c].size; }
unsigned slabs_class_pages(int c) { return atomic_load(&g_classes[c].pages); }

#define page_of slabs_page_index
#define chunk_at slabs_chunk_at

#define STUB_CLASSES_MAX 16
#define STUB_KEY_MIN 2   /* the smallest stub class fits a 2-byte key's stub */
static uint32_t round8(double v) { uint32_t x = (uint32_t)v; if ((double)x < v) x++; return (x + 7) & ~7u; }

uint32_t g_class_size[MAX_SLAB_CLASSES + 1];
_Atomic uint32_t g_class_chained_heads[MAX_SLAB_CLASSES + 1];
static size_t chunk_max;

size_t slabs_chunk_max(void) { return chunk_max; }

/* The page size, chunk_max and the class ladder for g_cfg: arithmetic only,
 * no memory reserved. slabs_init runs it first; storage_check_config runs
 * it alone so that --check-args refuses what a start would. */
int slabs_plan(void)
{
    size_t limit = g_cfg.mem_limit ? g_cfg.mem_limit : (size_t)64 << 20;
    /* 1 MB pages as memcached, but never fewer than 64 of them while they
     * are at least 64 KB: with a few megabytes of memory, whole-megabyte
     * pages strand memory in classes that hold a handful of items (seed
     * 003: at -m 3 only three classes could hold anything at all). Values
     * above slab_chunk_max are chained from chunks, so no item needs a page
     * of its own size. */
    g_page_size = 1024 * 1024;
    while (g_page_size > 64 * 1024 && limit / g_page_size < 64) g_page_size >>= 1;
    g_page_shift = (unsigned)__builtin_ctzll(g_page_size);
    g_pages_max = limit / g_page_size;
    if (g_pages_max < 1) g_pages_max = 1;
    region_bytes = g_pages_max * g_page_size;
    if (region_bytes / 8 >= 0xfffffff0u) {
        fprintf(stderr, "cachetd: -m above %llu MB is not supported (32-bit chunk handles)\n",
                (unsigned long long)((size_t)0xfffffff0u * 8 / (1024 * 1024)) - 1);
        return -1;
    }
    /* memcached: half a page unless -o slab_chunk_max says otherwise; never
     * more than a page */
    chunk_max = g_cfg.slab_chunk_max ? g_cfg.slab_chunk_max : g_page_size / 2;
    if (chunk_max > g_page_size) chunk_max = g_page_size;
    if (chunk_max > g_page_size / 2 && !g_cfg.slab_chunk_max) chunk_max = g_page_size / 2;
    chunk_max &= ~(size_t)7;

    /* class ladder: the smallest class holds -n bytes of key, value, flags and
     * expiry behind the fixed header and the CAS */
    uint32_t fixed = ITEM_HDR + (g_cfg.use_cas ? 8 : 0);
    uint32_t min_chunk = (fixed + 16 + 7) & ~7u;
    g_nclasses = 0;
    g_first_item_class = 1;
    if (g_cfg.slab_sizes && g_cfg.slab_sizes_count > 0) {
        uint32_t prev = 0;
        for (int i = 0; i < g_cfg.slab_sizes_count; i++) {
            uint32_t sz = (g_cfg.slab_sizes[i] + 7) & ~7u;
            if (sz < min_chunk || sz <= prev || sz > chunk_max) {
                fprintf(stderr, "cachetd: slab_sizes: %u is not valid (need ascending sizes from %u to %zu)\n",
                        g_cfg.slab_sizes[i], min_chunk, chunk_max);
                return -1;
            }
            if (g_nclasses >= MAX_SLAB_CLASSES - 1) {
                fprintf(stderr, "cachetd: slab_sizes: at most %d classes\n", MAX_SLAB_CLASSES - 1);
                return -1;
            }
            g_classes[++g_nclasses].size = sz;
            prev = sz;
        }
    } else {
        double f = g_cfg.growth_factor > 1.0 ? g_cfg.growth_factor : 1.25;
        uint32_t n = g_cfg.chunk_size_min ? g_cfg.chunk_size_min : 48;
        double sz_next = (double)(fixed + n);
        uint32_t prev = 0;
        while (g_nclasses < MAX_SLAB_CLASSES - 1) {
            uint32_t sz = round8(sz_next);
            if (sz <= prev) sz = prev + 8;
            if (sz >= chunk_max) break;
            g_classes[++g_nclasses].size = sz;
            prev = sz;
            sz_next = (double)sz * f;
        }
    }
    if (g_classes[g_nclasses].size < chunk_max) g_classes[++g_nclasses].size = (uint32_t)chunk_max;
    /* Extstore: every value on disk leaves a stub (header, key, locator,
     * CAS, an expiry only if it expires) in RAM, and the stubs are what
     * grows with the disk. The -n ladder would put a short key's 45-byte
     * stub in an 80-byte chunk; 8-byte classes below it waste at most 7
     * bytes a stub. They start at a 2-byte key's stub that never expires
     * (41 B, so 48 with a CAS): keys up to 9 bytes then cost memcached's
     * 96-byte header chunk halved. The hash table is budgeted (the
     * operator's engine.MaxItems, memory_budget.c) for item memory / 48
     * items, as RAM can fill with stubs whose page was evicted. Only stubs
     * use them. At most STUB_CLASSES_MAX, and only in the room the -n ladder
     * leaves: it is built first. Explicit slab_sizes are taken as given. */
    if (g_cfg.stub_classes && !(g_cfg.slab_sizes && g_cfg.slab_sizes_count > 0)) {
        uint32_t first = round8((double)item_ntotal_for(ITEM_ON_DISK, STUB_KEY_MIN, EXT_LOC_BYTES));
        unsigned k = 0;
        while (k < STUB_CLASSES_MAX && g_nclasses + k < MAX_SLAB_CLASSES - 1 && first + 8 * k < g_classes[1].size) k++;
        memmove(&g_classes[1 + k], &g_classes[1], g_nclasses * sizeof g_classes[0]);
        for (unsigned i = 0; i < k; i++) g_classes[1 + i].size = first + 8 * i;
        g_nclasses += k;
        g_first_item_class = 1 + k;
    }
    g_class_size[0] = 0;
    for (unsigned c = 1; c <= g_nclasses; c++) g_class_size[c] = g_classes[c].size;
    return 0;
}

int slabs_init(void)
{
    if (slabs_plan() != 0) return -1;
    for (unsigned c = 1; c <= g_nclasses; c++) {
        struct slabclass *sc = &g_classes[c];
        pthread_mutex_init(&sc->lock, NULL);
        sc->perpage = (uint32_t)(g_page_size / sc->size);
        sc->free_head = 0;
        sc->free_count = 0;
        sc->bump_page = -1;
        sc->bump_next = 0;
        atomic_store(&sc->last_move_in, 0);
        atomic_store(&sc->pages_moved_in, 0);
        atomic_store(&sc->pages_moved_out, 0);
        atomic_store(&sc->pages, 0);
        atomic_store(&sc->used_chunks, 0);
    }

    /* Reserve with 2 MB alignment and ask for transparent huge pages: a GET
     * touches a random item, and on a virtual machine a TLB miss (a
     * two-dimensional page walk) costs more than the cache miss itself. */
    const size_t huge = (size_t)2 << 20;
    raw_bytes = region_bytes + huge;
    raw_region = mmap(NULL, raw_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (raw_region == MAP_FAILED) {
        fprintf(stderr, "cachetd: cannot reserve %zu bytes of item memory: %s\n", region_bytes, strerror(errno));
        raw_region = NULL;
        return -1;
    }
    g_region = (char *)(((uintptr_t)raw_region + huge - 1) & ~(uintptr_t)(huge - 1));
#ifdef MADV_HUGEPAGE
    madvise(g_region, region_bytes, MADV_HUGEPAGE);
#endif
    g_pages = calloc(g_pages_max, sizeof(*g_pages));
    g_page_cls = calloc(g_pages_max, sizeof(*g_page_cls));
    if (!g_pages || !g_page_cls) return -1;
    atomic_store(&g_pages_next, 0);
    return 0;
}

void slabs_destroy(void)
{
    if (raw_region) munmap(raw_region, raw_bytes);
    raw_region = g_region = NULL;
    free(g_pages);
    free((void *)g_page_cls);
    g_pages = NULL;
    g_page_cls = NULL;
}

static int slabs_clsid_from(size_t ntotal, unsigned lo)
{
    if (ntotal > g_classes[g_nclasses].size) return 0;
    unsigned hi = g_nclasses;
    while (lo < hi) {
        unsigned mid = (lo + hi) / 2;
        if (g_classes[mid].size >= ntotal) hi = mid; else lo = mid + 1;
    }
    return (int)lo;
}

/* The stub classes hold only stubs: an ordinary item keeps -n's classes. */
int slabs_clsid(size_t ntotal) { return slabs_clsid_from(ntotal, g_first_item_class); }
int slabs_stub_clsid(size_t ntotal) { return slabs_clsid_from(ntotal, 1); }

/* Whether a stub class holds a page. */
static bool stub_pages_any(void)
{
    for (unsigned c = 1; c < g_first_item_class; c++)
        if (atomic_load(&g_classes[c].pages)) return true;
    return false;
}

/* Hands the class a never-used page; class lock held.
 * With stub classes, the last never-used page waits for the first stub:
 * the flusher starts writing values when two pages are left
 * (ext_items.c, memory_low), and a fill took both before its first stub,
 * which then took a page of the values it was writing and evicted them all
 * (242 values of 4 KB at -m 64, before a single one reached the disk).
 * Until a stub class has a page, a store in an ordinary class evicts in its
 * own class instead, as it would a moment later anyway. */
static bool grab_fresh_page(struct slabclass *sc, int clsid)
{
    size_t pg = atomic_load(&g_pages_next);
    for (;;) {
        if (pg >= g_pages_max) return false;
        if ((unsigned)clsid >= g_first_item_class && g_first_item_class > 1 && pg + 1 == g_pages_max &&
            !stub_pages_any())
            return false;
        if (atomic_compare_exchange_weak(&g_pages_next, &pg, pg + 1)) break;
    }
    atomic_store(&g_page_cls[pg], (uint8_t)clsid);
    g_pages[pg].used = 0;
    g_pages[pg].draining = false;
    sc->bump_page = (int64_t)pg;
    sc->bump_next = 0;
    atomic_fetch_add(&sc->pages, 1);
    return true;
}

item *slabs_alloc_chunk(int clsid)
{
    struct slabclass *sc = &g_classes[clsid];
    item *it = NULL;
    bool took_fresh = false;
    pthread_mutex_lock(&sc->lock);
    if (sc->free_head) {
        it = handle_item(sc->free_head);
        sc->free_head = atomic_load_explicit(&it->lru_next, memory_order_relaxed);
        sc->free_count--;
    } else {
        if (sc->bump_page < 0 || sc->bump_next >= sc->perpage) {
            sc->bump_page = -1;
            took_fresh = grab_fresh_page(sc, clsid);
        }
        if (sc->bump_page >= 0) it = chunk_at((size_t)sc->bump_page, sc->bump_next++, sc->size);
        atomic_store_explicit(&sc->end_free, sc->bump_page >= 0 ? sc->perpage - sc->bump_next : 0,
                              memory_order_relaxed);
    }
    if (it) {
        g_pages[page_of(it)].used++;
        atomic_fetch_add_explicit(&sc->used_chunks, 1, memory_order_relaxed);
        atomic_store_explicit(&it->iflags, 0, memory_order_relaxed);
    }
    pthread_mutex_unlock(&sc->lock);
    /* the next fresh page gets faulted in off the request path */
    if (took_fresh) slabs_prefault_wake();
    return it;
}

/* The concurrent checker sets this: a freed chunk's bytes (all but the
 * free-list link and flags) are overwritten at once, so a reader that can
 * still reach a freed or reused chunk reads garbage it cannot mistake for a
 * value (and ThreadSanitizer sees the write racing with its read). */
#ifdef CACHET_TEST_HOOKS
_Atomic unsigned g_test_poison_free;

static void poison_chunk(item *it, uint32_t size)
{
    /* everything but the free-list link and the flags byte: a chain walk
     * that lands here follows a handle that points nowhere useful, and no
     * key length or value can match */
    memset((char *)it, 0xA5, offsetof(struct item, lru_next));
    memset((char *)it + offsetof(struct item, time), 0xA5, offsetof(struct item, iflags) - offsetof(struct item, time));
    memset((char *)it + offsetof(struct item, iflags) + 1, 0xA5, size - offsetof(struct item, iflags) - 1);
}
#endif

void slabs_free_chunk(item *it)
{
    size_t pg = page_of(it);
    int clsid = atomic_load_explicit(&g_page_cls[pg], memory_order_relaxed);
    struct slabclass *sc = &g_classes[clsid];
    pthread_mutex_lock(&sc->lock);
    /* under the lock: the mover reads a data chunk's owner under it */
#ifdef CACHET_TEST_HOOKS
    if (atomic_load_explicit(&g_test_poison_free, memory_order_relaxed)) poison_chunk(it, sc->size);
#endif
    g_pages[pg].used--;
    atomic_fetch_sub_explicit(&sc->used_chunks, 1, memory_order_relaxed);
    atomic_store_explicit(&it->iflags, ITEM_FREE, memory_order_relaxed);
    if (!g_pages[pg].draining) {
        atomic_store_explicit(&it->lru_next, sc->free_head, memory_order_relaxed);
        sc->free_head = item_handle(it);
        sc->free_count++;
    }
    pthread_mutex_unlock(&sc->lock);
}

void slabs_give_page(size_t pg, int dst)
{
    struct slabclass *dc = &g_classes[dst];
    pthread_mutex_lock(&dc->lock);
    atomic_store(&g_page_cls[pg], (uint8_t)dst);
    g_pages[pg].used = 0;
    g_pages[pg].draining = false;
    /* Carve the new shape onto the free list (the old chunks were all free),
     * lowest address first out. */
    for (uint32_t i = dc->perpage; i-- > 0;) {
        item *it = chunk_at(pg, i, dc->size);
        atomic_store_explicit(&it->iflags, ITEM_FREE, memory_order_relaxed);
        atomic_store_explicit(&it->lru_next, dc->free_head, memory_order_relaxed);
        dc->free_head = item_handle(it);
        dc->free_count++;
    }
    atomic_fetch_add(&dc->pages, 1);
    atomic_fetch_add(&dc->pages_moved_in, 1);
    atomic_store(&dc->last_move_in, now_time());
    pthread_mutex_unlock(&dc->lock);
}

struct prefault_region slabs_prefault_region(void)
{
    return (struct prefault_region){ .base = g_region, .page_size = g_page_size,
                                     .pages_max = g_pages_max, .pages_next = &g_pages_next };
}
