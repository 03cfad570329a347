/*
 * slabs.c - item memory: one reserved region cut into 1 MB pages, pages cut
 * into equal chunks per size class, and a mover that gives pages back to a
 * class that starves.
 *
 * Why one reserved region: a chunk is then named by a 32-bit handle
 * (offset / 8), which halves the hash chain and bag links, and the memory is
 * type-stable: it is never unmapped, so a lock-free reader holding a stale
 * handle still points at item-shaped memory (the grace period in epoch.c
 * guarantees the chunk was not reused under it). The region is reserved with
 * MAP_NORESERVE and touched page by page, so RSS follows what is used and
 * never exceeds -m: pages are handed out only while fewer than -m / page_size
 * are in use, and the hash table and bookkeeping are, as in memcached, on top.
 *
 * Why size classes from -n/-f or an explicit list: as memcached, so operators'
 * knowledge carries over; the smallest class holds -n bytes of key+value with
 * every optional header field present (24 + cas 8 + flags 4 + "\r\n" 2), so
 * with the defaults the ladder is 88, 112, 144, 184, ... and a 9-byte key with
 * a 100-byte value (143 bytes) wastes one byte.
 *
 * Why a mover: classes fill in the order the workload arrives; when the mix
 * shifts, a class can starve (nothing of its own to evict) or keep evicting
 * young items while another class sits on much older ones. The mover then
 * picks the page of the other class with the fewest live chunks, takes its
 * free chunks off the free list, evicts its live items, waits for the grace
 * period (and for zero-copy readers) and hands the page over. A class that
 * just received a page does not give one back for a few seconds.
 */
#include "storage_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

struct page {
    bool draining;
    uint32_t used;           /* chunks allocated and not yet freed (class lock) */
};
/* The class of each page, apart from the counters above: every GET reads it,
 * every store writes `used`, and they must not share cache lines. */
/* g_page_cls (storage_internal.h): 0 = not yet handed out */

struct slabclass {
    pthread_mutex_t lock;
    uint32_t size, perpage;
    uint32_t free_head;      /* handle, linked through lru_next */
    uint32_t free_count;
    int64_t  bump_page;      /* page being carved, -1 if none */
    uint32_t bump_next;
    _Atomic uint32_t pages;
    _Atomic uint32_t used_chunks;
    _Atomic bool starving;
    _Atomic uint64_t pages_moved_in, pages_moved_out;
    _Atomic uint32_t last_move_in;   /* rel_time of the last page it received */
} __attribute__((aligned(64)));

char *g_region;
unsigned g_page_shift;
_Atomic uint8_t *g_page_cls;
#define region g_region
#define page_shift g_page_shift
#define page_cls g_page_cls
static char *raw_region;
static size_t region_bytes, raw_bytes, page_size, pages_max;
static struct page *pages;
static _Atomic size_t pages_next;        /* first page never handed out */
static struct slabclass classes[MAX_SLAB_CLASSES + 1];
static unsigned nclasses;
_Atomic uint64_t g_slab_moves;
static _Atomic uint64_t moves_failed;

static uint64_t last_evicted[MAX_SLAB_CLASSES + 1];   /* mover thread only */
static rel_time_t last_balance;
static pthread_t mover;
static _Atomic bool mover_stop;
static bool mover_running;

size_t slabs_page_size(void) { return page_size; }
size_t slabs_pages_max(void) { return pages_max; }
size_t slabs_pages_used(void)
{
    size_t n = 0;
    for (unsigned c = 1; c <= nclasses; c++) n += atomic_load(&classes[c].pages);
    return n;
}
size_t slabs_total_malloced(void) { return slabs_pages_used() * page_size; }
unsigned slabs_class_count(void) { return nclasses; }
uint32_t slabs_chunk_size(int c) { return classes[c].size; }
unsigned slabs_class_pages(int c) { return atomic_load(&classes[c].pages); }

static inline size_t page_of(const void *p) { return (size_t)((const char *)p - region) >> page_shift; }

static uint32_t round8(double v) { uint32_t x = (uint32_t)v; if ((double)x < v) x++; return (x + 7) & ~7u; }

int slabs_init(void)
{
    size_t ism = g_cfg.item_size_max ? g_cfg.item_size_max : 1024 * 1024;
    if (ism < 1024) { fprintf(stderr, "cachetd: item_size_max must be at least 1024 bytes\n"); return -1; }
    ism = (ism + 7) & ~(size_t)7;
    page_size = 1024 * 1024;
    while (page_size < ism) page_size <<= 1;
    page_shift = (unsigned)__builtin_ctzll(page_size);
    size_t limit = g_cfg.mem_limit ? g_cfg.mem_limit : (size_t)64 << 20;
    pages_max = limit / page_size;
    if (pages_max < 1) pages_max = 1;
    region_bytes = pages_max * page_size;
    if (region_bytes / 8 >= 0xfffffff0u) {
        fprintf(stderr, "cachetd: -m above %llu MB is not supported (32-bit chunk handles)\n",
                (unsigned long long)((size_t)0xfffffff0u * 8 / (1024 * 1024)) - 1);
        return -1;
    }

    /* class ladder */
    uint32_t min_chunk = (uint32_t)(sizeof(struct item) + 8 + 4 + 2 + 8);
    nclasses = 0;
    if (g_cfg.slab_sizes && g_cfg.slab_sizes_count > 0) {
        uint32_t prev = 0;
        for (int i = 0; i < g_cfg.slab_sizes_count; i++) {
            uint32_t s = (g_cfg.slab_sizes[i] + 7) & ~7u;
            if (s < min_chunk || s <= prev || s > ism) {
                fprintf(stderr, "cachetd: slab_sizes: %u is not valid (need ascending sizes from %u to %zu)\n",
                        g_cfg.slab_sizes[i], min_chunk, ism);
                return -1;
            }
            if (nclasses >= MAX_SLAB_CLASSES - 1) {
                fprintf(stderr, "cachetd: slab_sizes: at most %d classes\n", MAX_SLAB_CLASSES - 1);
                return -1;
            }
            classes[++nclasses].size = s;
            prev = s;
        }
    } else {
        double f = g_cfg.growth_factor > 1.0 ? g_cfg.growth_factor : 1.25;
        uint32_t n = g_cfg.chunk_size_min ? g_cfg.chunk_size_min : 48;
        double s = (double)(sizeof(struct item) + 8 + 4 + 2 + n);
        uint32_t prev = 0;
        while (nclasses < MAX_SLAB_CLASSES - 1) {
            uint32_t sz = round8(s);
            if (sz <= prev) sz = prev + 8;
            if (sz >= ism) break;
            classes[++nclasses].size = sz;
            prev = sz;
            s = (double)sz * f;
        }
    }
    if (classes[nclasses].size < ism) classes[++nclasses].size = (uint32_t)ism;
    for (unsigned c = 1; c <= nclasses; c++) {
        struct slabclass *sc = &classes[c];
        pthread_mutex_init(&sc->lock, NULL);
        sc->perpage = (uint32_t)(page_size / sc->size);
        sc->free_head = 0;
        sc->free_count = 0;
        sc->bump_page = -1;
        sc->bump_next = 0;
        atomic_store(&sc->last_move_in, 0);
        atomic_store(&sc->pages_moved_in, 0);
        atomic_store(&sc->pages_moved_out, 0);
        atomic_store(&sc->pages, 0);
        atomic_store(&sc->used_chunks, 0);
        atomic_store(&sc->starving, false);
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
    region = (char *)(((uintptr_t)raw_region + huge - 1) & ~(uintptr_t)(huge - 1));
#ifdef MADV_HUGEPAGE
    madvise(region, region_bytes, MADV_HUGEPAGE);
#endif
    pages = calloc(pages_max, sizeof(*pages));
    page_cls = calloc(pages_max, sizeof(*page_cls));
    if (!pages || !page_cls) return -1;
    atomic_store(&pages_next, 0);
    memset(last_evicted, 0, sizeof last_evicted);
    last_balance = 0;
    return 0;
}

void slabs_destroy(void)
{
    if (raw_region) munmap(raw_region, raw_bytes);
    raw_region = region = NULL;
    free(pages);
    free((void *)page_cls);
    pages = NULL;
    page_cls = NULL;
}

int slabs_clsid(size_t ntotal)
{
    if (ntotal > classes[nclasses].size) return 0;
    unsigned lo = 1, hi = nclasses;
    while (lo < hi) {
        unsigned mid = (lo + hi) / 2;
        if (classes[mid].size >= ntotal) hi = mid; else lo = mid + 1;
    }
    return (int)lo;
}

static item *chunk_at(size_t pg, uint32_t idx, uint32_t size)
{
    return (item *)(region + pg * page_size + (size_t)idx * size);
}

/* Hands the class a never-used page; class lock held. */
static bool grab_fresh_page(struct slabclass *sc, int clsid)
{
    size_t pg = atomic_load(&pages_next);
    for (;;) {
        if (pg >= pages_max) return false;
        if (atomic_compare_exchange_weak(&pages_next, &pg, pg + 1)) break;
    }
    atomic_store(&page_cls[pg], (uint8_t)clsid);
    pages[pg].used = 0;
    pages[pg].draining = false;
    sc->bump_page = (int64_t)pg;
    sc->bump_next = 0;
    atomic_fetch_add(&sc->pages, 1);
    return true;
}

item *slabs_alloc_chunk(int clsid)
{
    struct slabclass *sc = &classes[clsid];
    item *it = NULL;
    pthread_mutex_lock(&sc->lock);
    if (sc->free_head) {
        it = handle_item(sc->free_head);
        sc->free_head = atomic_load_explicit(&it->lru_next, memory_order_relaxed);
        sc->free_count--;
    } else {
        if (sc->bump_page < 0 || sc->bump_next >= sc->perpage) {
            sc->bump_page = -1;
            grab_fresh_page(sc, clsid);
        }
        if (sc->bump_page >= 0) it = chunk_at((size_t)sc->bump_page, sc->bump_next++, sc->size);
    }
    if (it) {
        pages[page_of(it)].used++;
        atomic_fetch_add_explicit(&sc->used_chunks, 1, memory_order_relaxed);
        atomic_store_explicit(&it->iflags, 0, memory_order_relaxed);
    }
    pthread_mutex_unlock(&sc->lock);
    return it;
}

void slabs_free_chunk(item *it)
{
    size_t pg = page_of(it);
    int clsid = atomic_load_explicit(&page_cls[pg], memory_order_relaxed);
    struct slabclass *sc = &classes[clsid];
    pthread_mutex_lock(&sc->lock);
    pages[pg].used--;
    atomic_fetch_sub_explicit(&sc->used_chunks, 1, memory_order_relaxed);
    atomic_store_explicit(&it->iflags, ITEM_FREE, memory_order_relaxed);
    if (!pages[pg].draining) {
        atomic_store_explicit(&it->lru_next, sc->free_head, memory_order_relaxed);
        sc->free_head = item_handle(it);
        sc->free_count++;
    }
    pthread_mutex_unlock(&sc->lock);
}

void slabs_mark_starving(int clsid)
{
    if (!atomic_load_explicit(&classes[clsid].starving, memory_order_relaxed))
        atomic_store_explicit(&classes[clsid].starving, true, memory_order_relaxed);
}

/* ---- the mover ---- */

/* Takes page pg out of service: its free chunks leave the free list and it
 * stops being carved. Class lock held. */
static void start_draining(struct slabclass *sc, size_t pg)
{
    pages[pg].draining = true;
    if (sc->bump_page == (int64_t)pg) {
        for (uint32_t i = sc->bump_next; i < sc->perpage; i++)
            atomic_store_explicit(&chunk_at(pg, i, sc->size)->iflags, ITEM_FREE, memory_order_relaxed);
        sc->bump_page = -1;
    }
    item *prev = NULL;
    uint32_t h = sc->free_head;
    while (h) {
        item *it = handle_item(h);
        uint32_t next = atomic_load_explicit(&it->lru_next, memory_order_relaxed);
        if (page_of(it) == pg) {
            if (prev) atomic_store_explicit(&prev->lru_next, next, memory_order_relaxed);
            else sc->free_head = next;
            sc->free_count--;
        } else {
            prev = it;
        }
        h = next;
    }
}

/* Gives a drained page's chunks back to its own class (the move failed). */
static void stop_draining(struct slabclass *sc, size_t pg)
{
    pages[pg].draining = false;
    for (uint32_t i = 0; i < sc->perpage; i++) {
        item *it = chunk_at(pg, i, sc->size);
        if (atomic_load_explicit(&it->iflags, memory_order_relaxed) == ITEM_FREE) {
            atomic_store_explicit(&it->lru_next, sc->free_head, memory_order_relaxed);
            sc->free_head = item_handle(it);
            sc->free_count++;
        }
    }
}

static storage_thread *mover_ctx;

/* Hysteresis: a class that just received a page does not give one back
 * within the same few seconds (no ping-pong between classes). */
static bool recently_grown(struct slabclass *sc)
{
    uint32_t lm = atomic_load(&sc->last_move_in);
    return lm && now_time() - lm < 3;
}

/* Urgent case: a class that needs memory and has nothing of its own to
 * evict. Source: the class with the most free space, else the most pages. */
static bool pick_for_starving(int *src_out, int *dst_out)
{
    int dst = 0;
    for (unsigned c = 1; c <= nclasses; c++)
        if (atomic_load(&classes[c].starving)) { dst = (int)c; break; }
    if (!dst) return false;
    /* A fresh page may have appeared since the class starved. */
    if (atomic_load(&pages_next) < pages_max) {
        atomic_store(&classes[dst].starving, false);
        return false;
    }
    int src = 0;
    uint64_t best_free = 0, best_pages = 0;
    for (unsigned c = 1; c <= nclasses; c++) {
        if ((int)c == dst) continue;
        struct slabclass *sc = &classes[c];
        if (recently_grown(sc)) continue;
        unsigned np = atomic_load(&sc->pages);
        if (np == 0) continue;
        pthread_mutex_lock(&sc->lock);
        uint64_t fr = (uint64_t)sc->free_count * sc->size;
        if (sc->bump_page >= 0) fr += (uint64_t)(sc->perpage - sc->bump_next) * sc->size;
        pthread_mutex_unlock(&sc->lock);
        if (fr >= page_size / 4 && fr > best_free) { best_free = fr; src = (int)c; }
        else if (best_free == 0 && np > best_pages) { best_pages = np; src = (int)c; }
    }
    if (!src) return false;
    *src_out = src;
    *dst_out = dst;
    return true;
}

/* Balancing case (memcached's automove idea): once a second, if a class is
 * evicting items that are much younger than the oldest items another class
 * keeps, memory is stranded in the other class: move one of its pages. */
static bool pick_by_age(int *src_out, int *dst_out)
{
    rel_time_t now = now_time();
    if (now == last_balance) return false;
    last_balance = now;
    if (atomic_load(&pages_next) < pages_max) return false;   /* memory not full yet */
    int dst = 0;
    rel_time_t dst_age = 0;
    for (unsigned c = 1; c <= nclasses; c++) {
        uint64_t ev = atomic_load(&g_class_stats[c].evicted);
        uint64_t delta = ev - last_evicted[c];
        last_evicted[c] = ev;
        if (delta == 0) continue;
        rel_time_t age = bags_oldest_age((int)c);
        if (!dst || age < dst_age) { dst = (int)c; dst_age = age; }
    }
    if (!dst) return false;
    int src = 0;
    rel_time_t src_age = 0;
    for (unsigned c = 1; c <= nclasses; c++) {
        if ((int)c == dst || atomic_load(&classes[c].pages) < 2 || recently_grown(&classes[c])) continue;
        rel_time_t age = bags_oldest_age((int)c);
        if (age > src_age) { src = (int)c; src_age = age; }
    }
    if (!src || src_age <= 2 * dst_age + 5) return false;
    *src_out = src;
    *dst_out = dst;
    return true;
}

bool slabs_rebalance_once(void)
{
    int src = 0, dst = 0;
    if (!pick_for_starving(&src, &dst) && !pick_by_age(&src, &dst)) return false;
    struct slabclass *sc = &classes[src];
    pthread_mutex_lock(&sc->lock);
    size_t victim = pages_max;
    uint32_t least = UINT32_MAX;
    size_t lim = atomic_load(&pages_next);
    for (size_t pg = 0; pg < lim; pg++) {
        if (atomic_load_explicit(&page_cls[pg], memory_order_relaxed) != src || pages[pg].draining) continue;
        if (pages[pg].used < least) { least = pages[pg].used; victim = pg; }
    }
    if (victim == pages_max) { pthread_mutex_unlock(&sc->lock); return false; }
    start_draining(sc, victim);
    pthread_mutex_unlock(&sc->lock);

    const char *lo = region + victim * page_size, *hi = lo + page_size;
    bool drained = false;
    for (int attempt = 0; attempt < 200 && !drained; attempt++) {
        if (mover_ctx) bags_purge_range(mover_ctx, src, lo, hi);
        pthread_mutex_lock(&sc->lock);
        drained = pages[victim].used == 0;
        pthread_mutex_unlock(&sc->lock);
        if (!drained) {
            struct timespec ts = {0, 2 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
    }
    pthread_mutex_lock(&sc->lock);
    if (pages[victim].used != 0) {
        stop_draining(sc, victim);
        pthread_mutex_unlock(&sc->lock);
        atomic_fetch_add(&moves_failed, 1);
        return false;
    }
    pages[victim].draining = false;
    atomic_fetch_sub(&sc->pages, 1);
    atomic_fetch_add(&sc->pages_moved_out, 1);
    pthread_mutex_unlock(&sc->lock);

    struct slabclass *dc = &classes[dst];
    pthread_mutex_lock(&dc->lock);
    atomic_store(&page_cls[victim], (uint8_t)dst);
    pages[victim].used = 0;
    /* Carve the new shape onto the free list (the old chunks were all free). */
    for (uint32_t i = dc->perpage; i-- > 0;) {
        item *it = chunk_at(victim, i, dc->size);
        atomic_store_explicit(&it->iflags, ITEM_FREE, memory_order_relaxed);
        atomic_store_explicit(&it->lru_next, dc->free_head, memory_order_relaxed);
        dc->free_head = item_handle(it);
        dc->free_count++;
    }
    atomic_fetch_add(&dc->pages, 1);
    atomic_fetch_add(&dc->pages_moved_in, 1);
    atomic_store(&dc->last_move_in, now_time());
    atomic_store(&dc->starving, false);
    pthread_mutex_unlock(&dc->lock);
    atomic_fetch_add(&g_slab_moves, 1);
    if (g_cfg.verbose > 1) fprintf(stderr, "cachetd: slab page moved from class %d to class %d\n", src, dst);
    return true;
}

static void *mover_main(void *arg)
{
    (void)arg;
    while (!atomic_load(&mover_stop)) {
        if (!slabs_rebalance_once()) {
            struct timespec ts = {0, 10 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
    }
    return NULL;
}

int slabs_start_thread(void)
{
    if (!mover_ctx) mover_ctx = storage_thread_register();
    atomic_store(&mover_stop, false);
    int rc = pthread_create(&mover, NULL, mover_main, NULL);
    mover_running = rc == 0;
    return rc;
}

void slabs_stop_thread(void)
{
    if (!mover_running) return;
    atomic_store(&mover_stop, true);
    pthread_join(mover, NULL);
    mover_running = false;
}

/* Tests without the mover thread still want a context for purges. */
void slabs_set_mover_ctx(storage_thread *t) { mover_ctx = t; }

void slabs_stats(stat_writer w, void *ctx)
{
    unsigned active = 0;
    char name[64];
    for (unsigned c = 1; c <= nclasses; c++) {
        struct slabclass *sc = &classes[c];
        unsigned np = atomic_load(&sc->pages);
        if (np == 0) continue;
        active++;
        pthread_mutex_lock(&sc->lock);
        uint32_t free_chunks = sc->free_count;
        uint32_t end_free = sc->bump_page >= 0 ? sc->perpage - sc->bump_next : 0;
        pthread_mutex_unlock(&sc->lock);
        uint32_t used = atomic_load(&sc->used_chunks);
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
    w(ctx, "slab_reassign_busy_items", "%llu", (unsigned long long)atomic_load(&moves_failed));
    w(ctx, "slabs_moved", "%llu", (unsigned long long)atomic_load(&g_slab_moves));
}
