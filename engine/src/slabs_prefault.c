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
 * Why the lowest CFS weight (SCHED_OTHER at nice 19), not SCHED_IDLE: the
 * fault costs the same CPU wherever it runs, so it must never run ahead of
 * a worker; but MADV_POPULATE_WRITE holds the mm's read lock while it zeroes
 * the huge page, and a worker that maps or unmaps a large buffer (main.c's
 * allocator maps every one of 64 KiB or more) waits for that lock. At
 * SCHED_IDLE, on cores the workers keep busy, the thread could sit preempted
 * inside the populate for as long as they stay busy, and the worker behind
 * the lock with it. At nice 19 the scheduler still gives it a slice within a
 * few milliseconds (weight 15 against a worker's 1024), which bounds that
 * wait; RT workers (SCHED_FIFO) leave it the kernel's RT throttling share.
 * If the thread cannot lower itself it does not prefault at all: zeroing
 * 2 MB at a worker's priority (inherited, SCHED_FIFO in the benchmark) would
 * be worse than the fault it saves.
 *
 * Concurrency: populated_to is this thread's alone. The page counter is read
 * relaxed: a stale value only populates less, never past -m. The region's
 * shape comes from slabs.c at start (slabs_prefault_start), so this file
 * reads no symbol of the allocator that wakes it (no call cycle).
 */
#include "storage_internal.h"
#include "bgthread.h"

#include <errno.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#define HUGE_PAGE ((size_t)2 << 20)

static struct prefault_region region;  /* set at start, read-only after */
static size_t populated_to;            /* bytes from the region's start known to be resident */
static bool populate_unsupported;

static bool prefault_pass(void *arg);
static struct bgthread prefaulter = { .name = "cachet-prefault", .pass = prefault_pass, .period_ms = 0 };

static bool prefault_pass(void *arg)
{
    (void)arg;
    if (populate_unsupported || !region.base) return false;
    size_t page_size = region.page_size;
    size_t region_end = region.pages_max * page_size;
    size_t handed_end = atomic_load_explicit(region.pages_next, memory_order_relaxed) * page_size;
    if (handed_end >= region_end) return false;
    /* pages handed out since were faulted by their stores */
    if (populated_to < handed_end) populated_to = handed_end;
    size_t want = (handed_end + page_size + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
    if (want > region_end) want = region_end;
    if (populated_to >= want) return false;
#ifdef MADV_POPULATE_WRITE
    if (madvise(region.base + populated_to, want - populated_to, MADV_POPULATE_WRITE) != 0) {
        if (errno == EINVAL) populate_unsupported = true;
        return false;
    }
    populated_to = want;
#else
    populate_unsupported = true;
#endif
    return false;
}

/* The thread's first act: the lowest CFS weight for itself alone (pid 0 is
 * the calling thread for sched_setscheduler; setpriority takes its tid). */
static bool prefault_first_pass(void *arg)
{
    struct sched_param p = { .sched_priority = 0 };
    if (sched_setscheduler(0, SCHED_OTHER, &p) != 0 ||
        setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), 19) != 0)
        populate_unsupported = true;
    prefaulter.pass = prefault_pass;
    return prefault_pass(arg);
}

void slabs_prefault_wake(void) { bgthread_wake(&prefaulter); }

int slabs_prefault_start(struct prefault_region r)
{
    region = r;
    populated_to = 0;
    prefaulter.pass = prefault_first_pass;
    return bgthread_start(&prefaulter);
}

void slabs_prefault_stop(void) { bgthread_stop(&prefaulter); }
