/*
 * tls_client.h - one request/reply round trip to a TLS server: the engine's
 * /healthz probe of its own -Z port (tls.c) and cachet-probe --tls share it.
 *
 * Concurrency: none of its own; each call has its own socket and context.
 * It blocks its caller for at most timeout_ms in all.
 */
#ifndef CACHET_TLS_CLIENT_H
#define CACHET_TLS_CLIENT_H

#include <stdbool.h>
#include <stddef.h>

/* Connects to host:port, handshakes (the server's certificate verified
 * against ca_file when it is set, else not verified; cert and key, when
 * set, are the client certificate for ssl_verify_mode 2-3), sends request
 * and expects exactly `expect` (under 256 bytes) back, all within
 * timeout_ms. false with one line
 * in why saying what went wrong. */
bool tls_client_exchange(const char *host, const char *port, int timeout_ms, const char *ca_file,
                         const char *cert, const char *key, const char *request, const char *expect,
                         char *why, size_t why_cap);

#endif
