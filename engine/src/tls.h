/*
 * tls.h - TLS on the memcached port (-Z, -o ssl_*, refresh_certs); see tls.c.
 *
 * Concurrency: tls_start before the workers; tls_refresh from any thread;
 * an SSL object only on its connection's worker (or the metrics thread).
 */
#ifndef CACHET_TLS_H
#define CACHET_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

typedef struct ssl_st SSL;

/* Builds the context from settings.tls when -Z is on. -1 with err filled
 * (memcached's words) when a file does not load. */
int  tls_start(char *err, size_t errlen);
bool tls_enabled(void);
/* Reloads the certificate, key and CA files into a new context for the
 * connections accepted from now on. -1 with err: the old one stays. */
int  tls_refresh(char *err, size_t errlen);

/* A server-side SSL on an accepted socket; NULL: no memory. */
SSL *tls_accept(int fd);
/* The same for the metrics port (-o metrics_tls): the current certificate,
 * but no client certificate asked whatever ssl_verify_mode says, since the
 * kubelet's HTTPS probes present none. */
SSL *tls_accept_without_client_cert(int fd);
bool tls_handshake_done(SSL *ssl);
/* The client's whole ClientHello is in and the server has answered it: a
 * client that stops before this cost one packet, one after it a handshake. */
bool tls_hello_answered(SSL *ssl);
void tls_close(SSL *ssl);
/* read()/send() with OpenSSL underneath: >0 bytes, 0 on the client's
 * close_notify, -1 with errno EAGAIN (wait for the socket) or another
 * errno (close the connection). */
ssize_t tls_read(SSL *ssl, void *buf, size_t len);
ssize_t tls_write(void *ssl, const void *buf, size_t len);
/* The /healthz round trip over TLS (metrics_server.c): sends request to
 * host:port and expects exactly `expect`; false with why. */
bool tls_probe(const char *host, int port, int timeout_ms, const char *request, const char *expect,
               char *why, size_t why_cap);
/* io_uring batching (net_conn.c uring_turn): ciphertext already received
 * for the connection, handed to OpenSSL by the next tls_read before the
 * socket. Only when tls_can_stage (the handshake is done and OpenSSL holds
 * no bytes) and at most TLS_STAGE_MAX: OpenSSL's first read then takes all
 * of it, so the bytes may sit where that tls_read's plaintext goes. The
 * staging ends with that tls_read (which fails, ECONNRESET, if OpenSSL
 * left any). */
#define TLS_STAGE_MAX (16 * 1024)
bool tls_can_stage(SSL *ssl);
void tls_stage(SSL *ssl, const void *ciphertext, size_t len);
/* Bytes OpenSSL holds (decrypted, or read ahead) that epoll cannot announce. */
bool tls_pending(SSL *ssl);
/* After tls_read/tls_write failed with EAGAIN: which way the socket must
 * turn before the call can go on (the handshake, inside a read, may need to
 * write, and a send may need to read). */
bool tls_wants_write(SSL *ssl);
bool tls_wants_read(SSL *ssl);

/* Sends batched (net_conn.c): tls_encrypt is tls_write's contract, but after
 * the handshake its records are sealed into a buffer of the connection's
 * (TLS_SEND_MAX, kept until the connection closes) rather than written: EAGAIN means
 * the buffer is full. Its bytes go out through tls_unsent + tls_sent (an
 * io_uring send) or tls_send_unsent (send(); returns the bytes still unsent,
 * -1 on a socket error). tls_close tries once to send what is left. */
#define TLS_SEND_MAX (17 * 1024)   /* a full record (16 KiB + its overhead) */
ssize_t tls_encrypt(void *ssl, const void *buf, size_t len);
size_t  tls_unsent(SSL *ssl, const void **p);
void    tls_sent(SSL *ssl, size_t n);
ssize_t tls_send_unsent(SSL *ssl);
/* A send stopped on WANT_READ with nothing sealed left to send: EPOLLIN, not
 * EPOLLOUT, lets it go on. */
bool    tls_send_wants_read(SSL *ssl);

#endif
