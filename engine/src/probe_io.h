/*
 * probe_io.h - the socket steps of a probe's round trip (connect, wait for
 * readiness), all against one deadline for the whole round trip.
 *
 * Why its own file: the plaintext round trip (engine_probe.c, metrics layer)
 * and the TLS one (tls_client.c, base layer, linked into cachet-probe
 * without the engine) must both end within the caller's one timeout, and a
 * timeout per step (SO_RCVTIMEO) let the steps add up past it: the kubelet's
 * readiness probe gave up before /healthz answered.
 *
 * Concurrency: stateless; each call works on its caller's socket.
 */
#ifndef CACHET_PROBE_IO_H
#define CACHET_PROBE_IO_H

#include <netdb.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* CLOCK_MONOTONIC in milliseconds: what deadlines are measured in. */
int64_t probe_now_ms(void);

/* Waits for events (POLLIN/POLLOUT) on fd until the deadline; false when it
 * passed first or poll failed. */
bool probe_wait(int fd, short events, int64_t deadline);

/* Resolves host:port and connects to each address in turn until one
 * accepts, within the deadline: a non-blocking socket, or -1 with why set
 * (timeout_ms is only for the message). */
int probe_connect(const char *host, const char *port, int64_t deadline, int timeout_ms, char *why,
                  size_t why_cap);

#endif
