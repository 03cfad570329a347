/*
 * bufmem.c - the connection buffer budget; see bufmem.h for why it is a hard
 * reservation. Lock-free: one atomic counter.
 */
#include "bufmem.h"

#include <stdatomic.h>

static size_t limit_bytes;          /* written before any worker starts */
static _Atomic size_t used_bytes;

void bufmem_set_limit(size_t bytes) { limit_bytes = bytes; }
size_t bufmem_limit(void) { return limit_bytes; }
size_t bufmem_used(void) { return atomic_load_explicit(&used_bytes, memory_order_relaxed); }

bool bufmem_reserve(size_t n)
{
    if (!n) return true;
    size_t cur = atomic_load_explicit(&used_bytes, memory_order_relaxed);
    do {
        if (limit_bytes && (n > limit_bytes || cur > limit_bytes - n)) return false;
    } while (!atomic_compare_exchange_weak_explicit(&used_bytes, &cur, cur + n,
                                                    memory_order_relaxed, memory_order_relaxed));
    return true;
}

void bufmem_release(size_t n)
{
    if (n) atomic_fetch_sub_explicit(&used_bytes, n, memory_order_relaxed);
}

bool bufmem_under_pressure(void)
{
    return limit_bytes && bufmem_used() > limit_bytes / 4 * 3;
}
