/*
 * slabs_internal.h - what the allocator (slabs.c) shares with the page mover
 * (slabs_mover.c), and the stats code (storage_stats.c) reads: the page
 * table and the classes.
 *
 * Locking: a class's free list, bump pointer and its pages' `used` and
 * `draining` fields change only under that class's lock. g_page_cls[pg]
 * changes only while the page has no allocated chunk (a move), under the
 * destination class's lock; readers load it relaxed (a page that holds an
 * item the reader can reach cannot change class). Page moves are serialised
 * by the mover lock in slabs_mover.c.
 */
#ifndef CACHET_SLABS_INTERNAL_H
#define CACHET_SLABS_INTERNAL_H

#include "storage_internal.h"

struct slab_page {
    bool draining;           /* being emptied for a move: frees do not refill the free list */
    uint32_t used;           /* chunks allocated and not yet freed */
};

struct slabclass {
    pthread_mutex_t lock;
    uint32_t size, perpage;
    uint32_t free_head;      /* handle, linked through lru_next */
    uint32_t free_count;
    int64_t  bump_page;      /* page being carved, -1 if none */
    uint32_t bump_next;
    _Atomic uint32_t pages;
    _Atomic uint32_t used_chunks;
    _Atomic uint32_t end_free;       /* chunks of the page being carved not yet handed out (stats) */
    _Atomic uint64_t pages_moved_in, pages_moved_out;
    _Atomic uint32_t last_move_in;   /* rel_time of the last page it received */
} __attribute__((aligned(64)));

extern struct slabclass g_classes[MAX_SLAB_CLASSES + 1];
extern unsigned g_nclasses;
extern struct slab_page *g_pages;
extern size_t g_page_size, g_pages_max;
extern _Atomic size_t g_pages_next;      /* first page never handed out */

static inline size_t slabs_page_index(const void *p) { return (size_t)((const char *)p - g_region) >> g_page_shift; }
static inline item *slabs_chunk_at(size_t pg, uint32_t idx, uint32_t size)
{
    return (item *)(g_region + pg * g_page_size + (size_t)idx * size);
}

/* Bytes a class could hand out without a new page (free list + bump rest);
 * class lock held. */
static inline uint64_t slabs_free_bytes_locked(const struct slabclass *sc)
{
    uint64_t fr = (uint64_t)sc->free_count * sc->size;
    if (sc->bump_page >= 0) fr += (uint64_t)(sc->perpage - sc->bump_next) * sc->size;
    return fr;
}

/* Gives page pg (no chunk allocated in it) to class dst, carved onto its free
 * list. dst's lock NOT held. */
void slabs_give_page(size_t pg, int dst);

#endif
