/*
 * engine_probe.h - one `mn` round trip through cachetd's own memcached port.
 *
 * Why a real round trip and not a flag: /healthz and memcached_up must say
 * whether a client would be served, and only a client's path proves that:
 * the listener accepts (connection limit, backlog), a worker reads, parses
 * and answers (not wedged). Asking in-process state would report "healthy"
 * for a server whose workers are stuck. The same check as cachet-probe's
 * default, done from inside the process.
 *
 * Concurrency: none of its own; each call uses its own socket. It blocks
 * its caller for at most the timeout.
 */
#ifndef CACHET_ENGINE_PROBE_H
#define CACHET_ENGINE_PROBE_H

#include <stdbool.h>
#include <stddef.h>

/* Where the engine listens, as -l and -p give it: the first -l address
 * ("" = all interfaces; a wildcard address means loopback). */
struct engine_probe_target {
    char host[256];   /* numeric address to connect to */
    int  port;
    /* -Y: the engine answers every command with CLIENT_ERROR unauthenticated
     * until a client authenticates; that answer is the worker's round trip */
    bool authfile;
};

/* Resolves the target from -l's list and the bound port; false if none. */
bool engine_probe_target_from(const char *listen, int port, struct engine_probe_target *t);

/* Connects to host:port (a name or a numeric address; each address in
 * turn), sends request and expects exactly `expect` back (under 128 bytes),
 * all within timeout_ms. Returns true if so; else why holds one line saying
 * what went wrong. cachet-probe's --set-get sends its own request here. */
bool engine_probe_exchange(const char *host, const char *port, int timeout_ms, const char *request,
                           const char *expect, char *why, size_t why_cap);

/* engine_probe_exchange of "mn\r\n", expecting "MN\r\n". */
/* The round trip's request and the reply that proves a worker answered. */
void engine_probe_words(const struct engine_probe_target *t, const char **request, const char **expect);
bool engine_probe(const struct engine_probe_target *t, int timeout_ms, char *why, size_t why_cap);

#endif
