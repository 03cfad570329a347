/*
 * proto_reply.h - reply helpers shared by the protocol files (proto_text.c,
 * proto_meta.c), and the meta entry points proto_text.c dispatches to.
 * Protocol-internal: the network layer never includes it.
 *
 * Concurrency: the connection's worker thread only.
 */
#ifndef CACHET_PROTO_REPLY_H
#define CACHET_PROTO_REPLY_H

#include <stdbool.h>
#include <stdint.h>

#include "conn.h"

struct request;

/* Decimal writers for reply headers: on a pipelined GET load formatting
 * numbers is the largest cost after the syscalls, so no printf. */
char *u64_to_str(char *p, uint64_t v);
char *i64_to_str(char *p, int64_t v);

/* Finishes a value reply whose header runs from out.buf + out.len to p: a
 * value copied by storage (it sits behind the header's reserved room) slides
 * up against the header, a referenced one is queued in place. The room
 * came from out_value_room(). */
void out_value(struct conn *c, char *p, const struct item_view *v);

/* proto_meta.c */
bool proto_meta_dispatch(struct conn *c, struct request *r);
void proto_meta_complete_set(struct conn *c, struct request *r, item *it, bool bad_chunk);

#endif
