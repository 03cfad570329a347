/*
 * proto.h - what the network layer calls in the protocol layer (the other
 * half of the boundary is conn.h). net_conn.c parses a line with proto_parser.h
 * and hands the request here; the protocol answers into the connection's
 * output queue and may change the connection's input state (a data block
 * to read or swallow, closing).
 *
 * Concurrency: called on the connection's worker thread only.
 */
#ifndef CACHET_PROTO_H
#define CACHET_PROTO_H

#include <stdbool.h>
#include <stddef.h>

#include "conn.h"

struct request;

/* Dispatches one parsed request whose line starts at line (len bytes); for
 * storage commands the data block follows in the connection's input.
 * Returns false if the connection must stop processing input: it is
 * closing, it waits for a data block, or a multi-key GET has to wait for
 * its output to drain (then c->resume_off is set and the line must stay in
 * rbuf, to be dispatched again). A reply that could not get memory leaves
 * c->out.failed set (see outbuf.h). */
bool proto_dispatch(struct conn *c, struct request *r, const char *line, size_t len);
/* A long get line in progress (c->get_stream.active): answers the keys of
 * rbuf[rstart, rend) that are known to be whole and consumes them; at the
 * line's end, END (or the error a refused line gets) and active is cleared.
 * Returns false when a key has to wait for output room (rstart is at that
 * key); a reply that could not get memory leaves c->out.failed set. */
bool proto_get_stream(struct conn *c);
/* A data block in progress (CONN_NREAD): where its next bytes go (value
 * pieces of c->it, then the two-byte terminator, which is not stored) and
 * how many fit there; then how many arrived (completes the store when the
 * block is whole). */
char *proto_nread_dst(struct conn *c, size_t *len);
void proto_nread_advance(struct conn *c, size_t n);
/* The line that replaces a reply that could not get memory. */
const char *proto_oom_reply(const struct request *r);

#endif
