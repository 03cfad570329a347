/*
 * bufmem.c - the connection buffer budget; see bufmem.h for why it is a hard
 * reservation. Lock-free: one atomic counter.
 */
#include "bufmem.h"


static size_t limit_bytes;          /* written before any worker starts */
size_t bufmem_pressure_bytes;
_Atomic size_t bufmem_used_bytes;

void bufmem_set_limit(size_t bytes)
{
    limit_bytes = bytes;
    bufmem_pressure_bytes = bytes / 4 * 3;
}
size_t bufmem_limit(void) { return limit_bytes; }
size_t bufmem_used(void) { return atomic_load_explicit(&bufmem_used_bytes, memory_order_relaxed); }

bool bufmem_reserve(size_t n)
{
    if (!n) return true;
    size_t cur = atomic_load_explicit(&bufmem_used_bytes, memory_order_relaxed);
    do {
        if (limit_bytes && (n > limit_bytes || cur > limit_bytes - n)) return false;
    } while (!atomic_compare_exchange_weak_explicit(&bufmem_used_bytes, &cur, cur + n,
                                                    memory_order_relaxed, memory_order_relaxed));
    return true;
}

void bufmem_release(size_t n)
{
    if (n) atomic_fetch_sub_explicit(&bufmem_used_bytes, n, memory_order_relaxed);
}
