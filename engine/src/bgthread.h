/*
 * bgthread.h - the one shape every background thread of the engine has.
 *
 * Why one helper: the clock, the bag-LRU cleaner, the slab page mover and the
 * hash-table expander (and extstore's flusher and compactor after them) all
 * do the same thing: run a pass, sleep until a period passes or somebody asks
 * for a pass now, stop promptly on request. Written four times it drifted
 * four ways (a condition variable here, a polled flag there, nanosleep loops
 * that could not be woken); written once, every thread can be woken, waited
 * for and stopped the same way, and a failure to start is reported the same
 * way.
 *
 * Threading: bgthread_wake/bgthread_wait_pass/bgthread_stop may be called from
 * any thread except the background thread itself (wake is also safe there).
 * The pass function runs only on the background thread, never concurrently
 * with itself.
 */
#ifndef CACHET_BGTHREAD_H
#define CACHET_BGTHREAD_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

struct bgthread {
    /* set by the owner before bgthread_start */
    const char *name;                 /* thread name, at most 15 characters */
    /* One pass of work. Returns true if there may be more to do right away
     * (the next pass then starts without sleeping). */
    bool (*pass)(void *arg);
    void *arg;
    unsigned period_ms;               /* sleep between passes; 0 = only when woken (later: bgthread_set_period) */
    /* private */
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;              /* wake-ups and stop, for the thread */
    pthread_cond_t done;              /* pass completions, for waiters */
    uint64_t passes_started, passes_done;
    bool running, stop, woken;
};

/* 0, or pthread_create's error (the thread is then not running). */
int  bgthread_start(struct bgthread *t);
/* Asks for a pass as soon as possible (no effect if not running). */
void bgthread_wake(struct bgthread *t);
/* Wakes the thread and waits until a pass that started after this call has
 * finished (returns at once if the thread is not running). */
void bgthread_wait_pass(struct bgthread *t);
/* Changes period_ms; a thread asleep sleeps the new period from now. */
void bgthread_set_period(struct bgthread *t, unsigned period_ms);
/* Stops and joins the thread; the pass in progress finishes first. */
void bgthread_stop(struct bgthread *t);
bool bgthread_running(const struct bgthread *t);

#endif
