/*
 * proto_reply.h - reply helpers shared by the protocol files (proto_text.c,
 * proto_meta.c), and the meta entry points proto_text.c dispatches to.
 * Protocol-internal: the network layer never includes it.
 *
 * They are inline, in this one file: they run for every key of every GET.
 *
 * Concurrency: the connection's worker thread only.
 */
#ifndef CACHET_PROTO_REPLY_H
#define CACHET_PROTO_REPLY_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "conn.h"

struct request;

/* Decimal writers for reply headers: on a pipelined GET load formatting
 * numbers is the largest cost after the syscalls, so no printf, and inline
 * (they run for every key of every GET). */
static const char two_digits[201] =
    "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
    "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
    "8081828384858687888990919293949596979899";

/* Two digits per division: a GET's header has two or three numbers. */
static inline char *u64_to_str(char *p, uint64_t v)
{
    if (v < 10) { *p = (char)('0' + v); return p + 1; }
    char tmp[20];
    int n = 20;
    while (v >= 100) {
        unsigned i = (unsigned)(v % 100) * 2;
        v /= 100;
        tmp[--n] = two_digits[i + 1];
        tmp[--n] = two_digits[i];
    }
    if (v >= 10) {
        unsigned i = (unsigned)v * 2;
        tmp[--n] = two_digits[i + 1];
        tmp[--n] = two_digits[i];
    } else {
        tmp[--n] = (char)('0' + v);
    }
    memcpy(p, tmp + n, (size_t)(20 - n));
    return p + (20 - n);
}

static inline char *i64_to_str(char *p, int64_t v)
{
    if (v < 0) { *p++ = '-'; return u64_to_str(p, (uint64_t)0 - (uint64_t)v); }
    return u64_to_str(p, (uint64_t)v);
}

/* Finishes a value reply whose header runs from out_tail() to p: a
 * value copied by storage (it sits behind the header's reserved room) slides
 * up against the header, a referenced one is queued in place. The room
 * came from out_value_room(). */
static inline void out_value(struct conn *c, char *p, const struct item_view *v)
{
    if (!v->ref) {
        memmove(p, v->value, v->nbytes);
        p += v->nbytes;
        *p++ = '\r'; *p++ = '\n';
        out_commit(c, p);
    } else {
        out_commit(c, p);
        out_ref(c, v);
        out_add(c, "\r\n", 2);
    }
}

/* proto_meta.c */
bool proto_meta_dispatch(struct conn *c, struct request *r);
void proto_meta_complete_set(struct conn *c, struct request *r, item *it, bool bad_chunk);
/* memcached's words in a `watch mutations` line (logger.h): the status, the
 * command, and the seconds left of an expiry as sent (0: none) */
static inline const char *proto_store_status_word(enum store_result res)
{
    switch (res) {
    case STORE_STORED: return "stored";
    case STORE_NOT_STORED: return "not_stored";
    case STORE_EXISTS: return "exists";
    case STORE_NOT_FOUND: return "not_found";
    case STORE_TOO_LARGE: return "too_large";
    default: return "no_memory";
    }
}

static inline const char *proto_store_mode_word(enum store_mode mode)
{
    switch (mode) {
    case MODE_ADD: return "add";
    case MODE_REPLACE: return "replace";
    case MODE_APPEND: return "append";
    case MODE_PREPEND: return "prepend";
    case MODE_CAS: return "cas";
    default: return "set";
    }
}

static inline uint32_t proto_store_ttl(int64_t wire_exptime)
{
    rel_time_t exp = storage_exptime(wire_exptime), now = storage_now();
    return exp ? (uint32_t)(exp - now) : 0;
}

#endif
