/*
 * epoch.c - read sections and grace periods: the reason a lock-free GET can
 * never touch freed or reused memory; and the registry of the threads that
 * may read items.
 *
 * Why the registry lives here: a grace period has to know every thread that
 * may be inside a read section, so the list of per-thread contexts is this
 * file's data (the stats code sums their counters too, storage_stats.c).
 * A thread registers once and never leaves; registering takes a mutex, and
 * readers of the list load its length with acquire and take no lock.
 *
 * Why epochs scoped to one storage call, and not QSBR driven by the event
 * loop: a worker blocked in epoll_wait would stall every grace period unless
 * the network layer remembered to go "offline" around each blocking call.
 * Scoping sections to the storage calls themselves makes reclamation
 * self-contained: a section never spans network I/O, so it lasts for one hash
 * chain walk and one value copy (a few hundred nanoseconds), and a grace
 * period is over as soon as every thread has left the section it was in.
 * Values handed out zero-copy are protected by their refcount instead, so a
 * slow client never holds back reclamation.
 *
 * Cost on the GET path: one relaxed load of the global epoch, one store to a
 * per-thread cache line and one seq_cst fence (an mfence on x86), plus one
 * release store on exit. No lock, no CAS, no shared cache line written.
 *
 * Ordering (store-buffering with fences on both sides):
 *   reader:    epoch_slot = E (release); fence(seq_cst); ... load chain ...
 *   reclaimer: unlink (release); G++ (seq_cst RMW); fence(seq_cst); load slots
 * Either the reclaimer sees the reader's slot (and waits for it), or the
 * reader's loads see the unlink. Slots are read with acquire, and both slot
 * stores are releases, so the reclaimer also happens-after everything the
 * reader did before (which is what ThreadSanitizer checks).
 */
#include "storage_internal.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* ---- the thread registry ----
 * Workers, IO threads and the background threads; a slot is published with
 * a release store of the count, so a reader that loads the count with
 * acquire sees every context below it. */
static storage_thread *threads[STORAGE_MAX_THREADS];
static _Atomic int nthreads;
static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;

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

static _Atomic uint64_t global_epoch = 1;

/* The calling thread's context, so a grace-period wait started inside a
 * read section can step out of it (see epoch_synchronize). */
static __thread storage_thread *self;

uint64_t epoch_current(void) { return atomic_load_explicit(&global_epoch, memory_order_acquire); }

void epoch_enter(storage_thread *t)
{
    self = t;
    if (t->section_depth++ > 0) return;
    uint64_t e = atomic_load_explicit(&global_epoch, memory_order_acquire);
    atomic_store_explicit(&t->epoch, e, memory_order_release);
    atomic_thread_fence(memory_order_seq_cst);
}

void epoch_exit(storage_thread *t)
{
    if (--t->section_depth > 0) return;
    atomic_store_explicit(&t->epoch, 0, memory_order_release);
}

unsigned epoch_step_out(storage_thread *t)
{
    unsigned depth = t->section_depth;
#ifdef CACHET_TEST_HOOKS
    /* stepping out of a section its caller is in would let a grace period
     * free the items that caller still points at: no caller does (see
     * storage_internal.h), and test builds stop here if one ever does */
    if (depth) {
        fprintf(stderr, "cachetd: epoch_step_out inside a read section (depth %u)\n", depth);
        abort();
    }
#endif
    if (depth) {
        t->section_depth = 0;
        atomic_store_explicit(&t->epoch, 0, memory_order_release);
    }
    return depth;
}

void epoch_step_in(storage_thread *t, unsigned depth)
{
    if (!depth) return;
    epoch_enter(t);
    t->section_depth = depth;
}

uint64_t epoch_advance(void)
{
    uint64_t e = atomic_fetch_add_explicit(&global_epoch, 1, memory_order_seq_cst) + 1;
    atomic_thread_fence(memory_order_seq_cst);
    return e;
}

/* Every section still running started at an epoch >= target, or none runs. */
static bool all_at_least(uint64_t target)
{
    int n = storage_thread_count();
    for (int i = 0; i < n; i++) {
        storage_thread *t = storage_thread_get(i);
        uint64_t e = atomic_load_explicit(&t->epoch, memory_order_acquire);
        if (e != 0 && e < target) return false;
    }
    return true;
}

bool epoch_passed(uint64_t e)
{
    /* `e` is what epoch_advance() returned after the retire: sections that
     * began earlier may still see the retired memory. */
    atomic_thread_fence(memory_order_seq_cst);
    return all_at_least(e);
}

void epoch_synchronize(void)
{
    /* No caller waits inside a read section today: sections span one
     * storage call's lookup or copy (there is no read batch around
     * pipelined GETs any more), and eviction runs outside them. Should a
     * caller ever wait inside one, it steps out meanwhile, so two such
     * threads cannot wait for each other forever; its item pointers are then
     * unprotected, which is why storage_internal.h forbids it. */
    storage_thread *me = self;
    bool stepped_out = me && me->section_depth > 0;
    if (stepped_out) atomic_store_explicit(&me->epoch, 0, memory_order_release);
    uint64_t target = epoch_advance();
    for (unsigned spins = 0; !all_at_least(target); spins++) {
        if (spins < 64) {
            sched_yield();
        } else {
            struct timespec ts = {0, 50000};
            nanosleep(&ts, NULL);
        }
    }
    if (stepped_out) {
        atomic_store_explicit(&me->epoch, epoch_current(), memory_order_release);
        atomic_thread_fence(memory_order_seq_cst);
    }
}
