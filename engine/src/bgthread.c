/*
 * bgthread.c - the background-thread helper described in bgthread.h.
 *
 * Concurrency: every field below `private` is read and written under
 * t->lock, except `thread`, which only start/stop touch. The pass function
 * runs without the lock held, so a pass may take its own locks freely and a
 * waker never waits for a pass to finish (only bgthread_wait_pass does).
 */
#include "bgthread.h"

#include <errno.h>
#include <string.h>
#include <time.h>

static void deadline_after(struct timespec *ts, unsigned ms)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

static void *bg_main(void *arg)
{
    struct bgthread *t = arg;
    pthread_setname_np(pthread_self(), t->name);
    pthread_mutex_lock(&t->lock);
    while (!t->stop) {
        t->woken = false;
        t->passes_started++;
        pthread_mutex_unlock(&t->lock);
        bool more = t->pass(t->arg);
        pthread_mutex_lock(&t->lock);
        t->passes_done++;
        pthread_cond_broadcast(&t->done);
        if (more || t->woken || t->stop) continue;
        if (t->period_ms) {
            struct timespec ts;
            deadline_after(&ts, t->period_ms);
            while (!t->stop && !t->woken &&
                   pthread_cond_timedwait(&t->cond, &t->lock, &ts) != ETIMEDOUT) { }
        } else {
            while (!t->stop && !t->woken) pthread_cond_wait(&t->cond, &t->lock);
        }
    }
    pthread_mutex_unlock(&t->lock);
    return NULL;
}

int bgthread_start(struct bgthread *t)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&t->lock, NULL);
    pthread_cond_init(&t->cond, &ca);
    pthread_cond_init(&t->done, NULL);
    pthread_condattr_destroy(&ca);
    t->passes_started = t->passes_done = 0;
    t->stop = t->woken = false;
    /* set before the thread exists: it shares a word with the flags the
     * thread reads, and a thread that failed to start never reads it */
    t->running = true;
    int rc = pthread_create(&t->thread, NULL, bg_main, t);
    if (rc) t->running = false;
    return rc;
}

bool bgthread_running(const struct bgthread *t) { return t->running; }

void bgthread_set_period(struct bgthread *t, unsigned period_ms)
{
    if (!t->running) { t->period_ms = period_ms; return; }
    pthread_mutex_lock(&t->lock);
    t->period_ms = period_ms;
    /* the sleep in progress was computed from the old period */
    t->woken = true;
    pthread_cond_signal(&t->cond);
    pthread_mutex_unlock(&t->lock);
}

void bgthread_wake(struct bgthread *t)
{
    if (!t->running) return;
    pthread_mutex_lock(&t->lock);
    t->woken = true;
    pthread_cond_signal(&t->cond);
    pthread_mutex_unlock(&t->lock);
}

void bgthread_wait_pass(struct bgthread *t)
{
    if (!t->running) return;
    pthread_mutex_lock(&t->lock);
    /* a pass that starts after now: the one after any pass in progress */
    uint64_t want = t->passes_started + 1;
    t->woken = true;
    pthread_cond_signal(&t->cond);
    while (t->passes_done < want && !t->stop) pthread_cond_wait(&t->done, &t->lock);
    pthread_mutex_unlock(&t->lock);
}

void bgthread_stop(struct bgthread *t)
{
    if (!t->running) return;
    pthread_mutex_lock(&t->lock);
    t->stop = true;
    pthread_cond_signal(&t->cond);
    pthread_cond_broadcast(&t->done);
    pthread_mutex_unlock(&t->lock);
    pthread_join(t->thread, NULL);
    t->running = false;
    pthread_cond_destroy(&t->cond);
    pthread_cond_destroy(&t->done);
    pthread_mutex_destroy(&t->lock);
}
