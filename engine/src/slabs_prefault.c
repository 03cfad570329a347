/*
 * slabs_prefault.c - faults in the item region's next never-used page before
 * a store needs it, on a thread of its own at idle priority.
 *
 * Why: the region is reserved with MAP_NORESERVE and MADV_HUGEPAGE (slabs.c),
 * so the first store into a fresh 2 MB stretch takes a transparent-huge-page
 * fault that zeroes 2 MB inside the worker, while every connection behind it
 * waits. On the benchmark VM that fault took 7.5-8.5 ms (a first touch of
 * guest memory; measured with a bare mmap+touch loop). GETs never allocate,
 * but sets do, and while an overwritten item's chunk waits in its bag for
 * the cleaner (bags.c), overwrites carve fresh pages: W2 with 10% sets took
 * three new pages in a 2 s step at 40,000 requests/s, each at most one such
 * fault in a store, where memcached (which frees an overwritten chunk at
 * once) took none (docs/benchmarks.md, "W2 with 10% sets").
 *
 * What it does: after the allocator hands out a never-used page (it wakes
 * this thread), it populates (MADV_POPULATE_WRITE, which writes no byte and
 * so cannot race with a store carving the same page) the region up to the
 * end of the huge page holding the next page to be handed out. RSS runs at
 * most one page plus one huge page ahead of the pages in use and never past
 * -m (g_pages_max), so the memory formula's item term (-m) still bounds it.
 * A kernel without MADV_POPULATE_WRITE (before 5.14) answers EINVAL, and the
 * thread stops trying: stores fault as before.
 *
 * Why idle priority: the fault costs the same CPU wherever it runs. On the
 * worker's core, a thread at the worker's priority (SCHED_FIFO in the
 * benchmark, or equal CFS weight) would still hold the worker off for the
 * whole fault; at SCHED_IDLE the worker preempts it at the fault's next
 * resched point, and a core the workers keep busy simply leaves the fault to
 * the store, as before.
 *
 * Concurrency: populated_to is this thread's alone. g_pages_next is read
 * relaxed: a stale value only populates less, never past -m.
 */
#include "slabs_internal.h"
#include "bgthread.h"

#include <errno.h>
#include <sched.h>
#include <sys/mman.h>

#define HUGE_PAGE ((size_t)2 << 20)

static size_t populated_to;          /* bytes from g_region known to be resident */
static bool populate_unsupported;

static bool prefault_pass(void *arg);
static struct bgthread prefaulter = { .name = "cachet-prefault", .pass = prefault_pass, .period_ms = 0 };

static bool prefault_pass(void *arg)
{
    (void)arg;
    if (populate_unsupported || !g_region) return false;
    size_t region_end = g_pages_max * g_page_size;
    size_t handed_end = atomic_load_explicit(&g_pages_next, memory_order_relaxed) * g_page_size;
    if (handed_end >= region_end) return false;
    /* pages handed out since were faulted by their stores */
    if (populated_to < handed_end) populated_to = handed_end;
    size_t want = (handed_end + g_page_size + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
    if (want > region_end) want = region_end;
    if (populated_to >= want) return false;
#ifdef MADV_POPULATE_WRITE
    if (madvise(g_region + populated_to, want - populated_to, MADV_POPULATE_WRITE) != 0) {
        if (errno == EINVAL) populate_unsupported = true;
        return false;
    }
    populated_to = want;
#else
    populate_unsupported = true;
#endif
    return false;
}

/* The thread's first act: idle priority for itself alone (Linux applies
 * sched_setscheduler with pid 0 to the calling thread). */
static bool prefault_first_pass(void *arg)
{
    struct sched_param p = { .sched_priority = 0 };
    (void)sched_setscheduler(0, SCHED_IDLE, &p);
    prefaulter.pass = prefault_pass;
    return prefault_pass(arg);
}

void slabs_prefault_wake(void) { bgthread_wake(&prefaulter); }

int slabs_prefault_start(void)
{
    populated_to = 0;
    prefaulter.pass = prefault_first_pass;
    return bgthread_start(&prefaulter);
}

void slabs_prefault_stop(void) { bgthread_stop(&prefaulter); }
