/*
 * bufmem.h - one budget for the memory all client connections may hold
 * beyond their resting buffers (-o read_buf_mem_limit / conn_buffer_limit).
 *
 * Why a hard reservation and not a sum checked afterwards: the operator sizes
 * the pod's memory limit from a formula (engine/README.md, "Memory"), and a
 * formula only holds if no client behaviour can push the total past it. So
 * every growth of a connection buffer, every reference list that grows and
 * every deferred reply first reserves its bytes here; when the reservation
 * fails the caller waits (it has output to send first) or gives up on that
 * one connection with a counted error, as memcached does when its
 * read_buf_mem_limit is exhausted. The budget is never exceeded, not even by
 * "one reply per connection".
 *
 * Concurrency: any thread may reserve and release (workers, and a thread
 * completing a deferred reply); one atomic counter, compare-and-swap on
 * reserve. Growth is rare (buffers are kept once grown), so the shared
 * cache line is not on the per-request path.
 */
#ifndef CACHET_BUFMEM_H
#define CACHET_BUFMEM_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

/* 0 = no limit. Set once before the workers start. */
void   bufmem_set_limit(size_t bytes);

/* Reserves n bytes; false (and nothing reserved) if that would pass the limit. */
bool   bufmem_reserve(size_t n);
void   bufmem_release(size_t n);
size_t bufmem_used(void);
/* The limit (0 = none). */
size_t bufmem_limit(void);
/* True when more than three quarters of the budget is in use: connections
 * then give back grown buffers as soon as they are sent, and those with
 * output to send wait. Inline: it is asked before every pipelined request. */
extern size_t bufmem_pressure_bytes;        /* 3/4 of the limit; 0 = no limit */
extern _Atomic size_t bufmem_used_bytes;
static inline bool bufmem_under_pressure(void)
{
    return bufmem_pressure_bytes &&
           atomic_load_explicit(&bufmem_used_bytes, memory_order_relaxed) > bufmem_pressure_bytes;
}

#endif
