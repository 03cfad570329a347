/*
 * clock.c - the words every storage call reads: the configuration as
 * started, the clock, the flush_all words and the CAS counter.
 *
 * Why a file of their own: every storage file reads them, and none of them
 * calls anything; kept apart, they tie no storage file to another.
 *
 * Why a clock thread: memcached's rel_time: one relaxed load per request
 * instead of a clock_gettime() call, one-second resolution like the protocol.
 *
 * Why flush_all moves a time floor instead of comparing CAS ids: an
 * immediate flush in second T invalidates every item whose last access is
 * at or before T (items touched in the same second included), and from then
 * on until the clock leaves T, stores and reads stamp items with T+1, so an
 * item stored after the flush in that same second survives it. This does
 * not depend on CAS ids at all, so it holds with -C and for items whose CAS
 * a client chose (meta E); memcached 1.6 gets the same outcome by unlinking
 * the items of the flush second synchronously. An item's time may then run
 * up to a second ahead of the clock; `mg l` reports 0 for it.
 *
 * Concurrency: g_cfg and g_use_cas are written once by storage_init, before
 * any other thread starts. The clock is stored by its thread only (and by
 * tests moving it), the flush words by storage_flush, all atomics that
 * readers load without a lock (see time_view_now in storage_internal.h).
 */
#include "storage_internal.h"
#include "bgthread.h"

#include <string.h>
#include <time.h>

struct storage_config g_cfg;
bool g_use_cas;
_Atomic uint32_t g_current_time;
_Atomic uint64_t g_flush_word;
_Atomic uint64_t g_flush_later;
_Atomic uint32_t g_flush_pending;
time_t storage_process_started;

/* Written by every store: on its own cache line, away from the clock and
 * flush words every GET reads. */
static struct { _Atomic uint64_t v; char pad[56]; } cas_line __attribute__((aligned(64)));
#define cas_counter (cas_line.v)
static _Atomic int32_t clock_offset;     /* tests move time forward */
static struct timespec mono_start;
static uint32_t compute_now(void);
static bool clock_pass(void *arg);
static struct bgthread clock_thread = { .name = "cachet-clock", .pass = clock_pass, .period_ms = 100 };

void clock_init(void)
{
    clock_gettime(CLOCK_MONOTONIC, &mono_start);
    storage_process_started = time(NULL) - 2;
    atomic_store(&clock_offset, 0);
    atomic_store(&g_current_time, compute_now());
    atomic_store(&g_flush_word, 0);
    atomic_store(&g_flush_later, 0);
    atomic_store(&g_flush_pending, 0);
    g_use_cas = g_cfg.use_cas;
    atomic_store(&cas_counter, 0);
}

uint64_t storage_next_cas(storage_thread *t)
{
    (void)t;
    return atomic_fetch_add_explicit(&cas_counter, 1, memory_order_relaxed) + 1;
}

/* ---- clock ---- */

static uint32_t compute_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    int64_t s = (int64_t)(ts.tv_sec - mono_start.tv_sec) + 2 + atomic_load(&clock_offset);
    return (uint32_t)s;
}

/* The clock only moves forward: a tick that computed its time before a
 * test advanced the clock must not write the older time back (a test that
 * advances then reads at once would see an unexpired item for up to a
 * tick). Both writers raise it to the larger value; stores only on change,
 * as every GET reads this cache line. */
void clock_publish(uint32_t now)
{
    uint32_t cur = atomic_load_explicit(&g_current_time, memory_order_relaxed);
    while (cur < now &&
           !atomic_compare_exchange_weak_explicit(&g_current_time, &cur, now,
                                                  memory_order_relaxed, memory_order_relaxed))
        ;
}

static bool clock_pass(void *arg)
{
    (void)arg;
    clock_publish(compute_now());
    return false;
}

int clock_start(void) { return bgthread_start(&clock_thread); }
void clock_stop(void) { bgthread_stop(&clock_thread); }

void storage_test_advance_clock(uint32_t seconds)
{
    atomic_fetch_add(&clock_offset, (int32_t)seconds);
    clock_publish(compute_now());
}

rel_time_t storage_now(void) { return now_time(); }

#define REALTIME_MAXDELTA (60 * 60 * 24 * 30)

rel_time_t storage_exptime(int64_t wire)
{
    if (wire == 0) return 0;
    if (wire < 0) return 1;   /* already expired: 1 is always in the past */
    if (wire > REALTIME_MAXDELTA) {
        /* absolute unix time; in the past (before we started) means expired */
        if (wire <= (int64_t)storage_process_started + 1) return 1;
        int64_t rel = wire - (int64_t)storage_process_started;
        return rel > UINT32_MAX ? UINT32_MAX : (rel_time_t)rel;
    }
    int64_t rel = (int64_t)now_time() + wire;
    return rel > UINT32_MAX ? UINT32_MAX : (rel_time_t)rel;
}

int64_t storage_ttl_remaining(rel_time_t exptime)
{
    if (exptime == 0) return -1;
    rel_time_t now = now_time();
    return exptime > now ? (int64_t)(exptime - now) : 0;
}

/* ---- flush_all ---- */

void storage_flush(rel_time_t when)
{
    struct time_view prev = time_view_now();
    rel_time_t now = prev.now;
    if (when == 0 || when <= now) {
        /* Everything stamped up to `base` goes; later stamps are above it
         * (the floor, in the same word). A GET that checked its item against
         * the previous word stamps it with that word's floor and the `now`
         * it read before that word: at most the clock when the new word was
         * stored. So the word is stored again if the clock ticked meanwhile,
         * and a hit racing the flush can never lift its item past it (an
         * item stamped after the check would otherwise survive the flush).
         * What was stored between the two stores is covered too; that is
         * still before this flush_all answered. A second flush within the
         * same second also covers what was stored between the two flushes:
         * base is at least the previous floor. */
        for (;;) {
            rel_time_t base = stamp_time_in((struct time_view){ .now = now, .fw = prev.fw });
            prev.fw = flush_word(base, now, true);
            atomic_store_explicit(&g_flush_word, prev.fw, memory_order_seq_cst);
            rel_time_t after = now_time();
            if (after == now) break;
            now = after;
        }
        atomic_store_explicit(&g_flush_later, 0, memory_order_release);
    } else {
        /* a delayed flush already in force is not undone by the next one:
         * its horizon moves into the immediate word first, with a floor if
         * that horizon is not yet behind the clock (below) */
        uint64_t in_force = prev.later;
        if (in_force && flush_effective(in_force) <= now &&
            (!prev.fw || flush_oldest(in_force) > flush_oldest(prev.fw) || flush_effective(prev.fw) > now)) {
            bool floor = (prev.fw & FLUSH_IMMEDIATE) || flush_oldest(in_force) > now;
            rel_time_t oldest = flush_oldest(in_force);
            if ((prev.fw & FLUSH_IMMEDIATE) && flush_oldest(prev.fw) > oldest) oldest = flush_oldest(prev.fw);
            uint64_t w = flush_word(oldest, flush_effective(in_force), floor);
            atomic_store_explicit(&g_flush_word, w, memory_order_release);
            prev.fw = w;
        }
        /* Its horizon is in stamps, not seconds: everything stamped before
         * it takes effect goes. An immediate flush's floor can put stamps
         * ahead of the clock (flush_all, set, flush_all 1 in one second: the
         * set is stamped T+1, the old horizon when-1 = T missed it and the
         * item never went). So the horizon is at least the floor, and once
         * the clock has left the second it took effect in, the delayed word
         * is a floor of its own (stamp_time_in): what is stored after that
         * is stamped above it. */
        rel_time_t horizon = stamp_time_in((struct time_view){ .now = when - 1, .fw = prev.fw });
        atomic_store_explicit(&g_flush_later, flush_word(horizon, when - 1, false), memory_order_release);
    }
    atomic_store(&g_flush_pending, 1);
}

