/*
 * testhook.h - a fake slow value source for the deferred-reply tests,
 * compiled in only when CACHET_TEST_HOOKS is defined (the ASan and TSan
 * builds of `make check`); the release binary has no trace of it.
 *
 * The same switch also builds in, where they are used: the `debugtime <s>`
 * command that moves the clock forward (proto_parser.c, proto_text.c), so
 * protocol tests need not sleep through TTLs; the concurrent checker's reader
 * stalls and freed-chunk poisoning (items.c, assoc.c, slabs.c); and
 * storage_ext_fetch (ext_items.c). A release GET reads none of them.
 *
 * Why: extstore (values read from disk) is what deferred replies are for,
 * and it does not exist yet. The protocol tests still have to drive the real
 * path end to end: a GET whose reply is completed later, by another thread,
 * while the connection keeps parsing. In a test build a GET key of the form
 *
 *     __cachet_defer:<gate>:<anything>
 *
 * is looked up as usual, but its reply slot is deferred (reply.h) and
 * completed by the hook's own thread: when <gate> is a number, that many
 * milliseconds later; otherwise when some connection asks for the key
 * `__cachet_open:<gate>` (a normal miss for that connection).
 *
 * Concurrency: testhook_get runs on workers; the hook thread owns the list of
 * waiting slots under its mutex and is the only caller of reply_complete.
 */
#ifndef CACHET_TESTHOOK_H
#define CACHET_TESTHOOK_H

#ifdef CACHET_TEST_HOOKS
#include "conn.h"

/* 0: not a hook key (answer it normally); 1: deferred; -1: no room for
 * another deferred slot now, the GET must wait. */
int testhook_get(struct conn *c, const char *key, uint32_t nkey, const struct get_opts *opts, bool with_cas);
#endif

#endif
