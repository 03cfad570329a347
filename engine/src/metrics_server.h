/*
 * metrics_server.h - the metrics port (-o metrics_port): GET /metrics
 * (Prometheus text format) and GET /healthz, over HTTP/1.1 (HTTPS with
 * -o metrics_tls), served by one thread of its own.
 *
 * Why its own thread and port: a scrape must never slow a request, so the
 * workers never see this traffic. The thread only reads the stats registry
 * (as `stats` does) and talks to the engine through its public memcached
 * port for /healthz. The port is unauthenticated, so everything a client
 * can make it do is bounded: connections (16, the longest-idle one gives way
 * to a new one), request head size, time to send a head, time to read a
 * reply, requests per connection, and how often /healthz may reach the
 * engine (one round trip per second, shared with memcached_up).
 *
 * Concurrency: start/stop are called by main() only. The server thread
 * owns all of its state; it shares nothing with the workers but the
 * registry's relaxed counters.
 */
#ifndef CACHET_METRICS_SERVER_H
#define CACHET_METRICS_SERVER_H

#include <stdbool.h>

/* connections served at once; memory_budget.c charges each */
#define METRICS_HTTP_CONNS_MAX 16

struct metrics_server_config {
    int         port;          /* -o metrics_port */
    const char *listen;        /* -l list ("" = all interfaces) */
    int         engine_port;   /* the memcached port, already bound */
    int         verbose;
    bool        authfile;      /* -Y: the probe expects CLIENT_ERROR unauthenticated */
    bool        tls;           /* -o metrics_tls: HTTPS with -Z's context (tls_start ran) */
};

/* Binds the port on every -l address and starts the thread. 0, or -1 after
 * printing why (a port in use, no address). */
int  metrics_server_start(const struct metrics_server_config *cfg);
/* Stops the thread and closes every socket; a no-op if never started. */
void metrics_server_stop(void);

#endif
