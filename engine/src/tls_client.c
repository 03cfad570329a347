/*
 * tls_client.c - the client side of a TLS round trip (see tls_client.h):
 * why it is its own file: cachet-probe links it without the rest of the
 * engine, and the engine's /healthz uses the same code, so the pod's probe
 * and /healthz make the same round trip over TLS as they do in plaintext
 * (engine_probe.c).
 *
 * One deadline bounds the whole round trip (probe_io.h): a non-blocking
 * socket, and each wait OpenSSL asks for (WANT_READ/WANT_WRITE) polls only
 * for the time left, so connect, the handshake's reads and the reply
 * cannot each take the whole timeout.
 *
 * Concurrency: stateless; each call has its own socket and context.
 */
#include "tls_client.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "probe_io.h"

static void say(char *why, size_t why_cap, const char *what)
{
    char reason[160] = "";
    unsigned long e = ERR_get_error();
    if (e) ERR_error_string_n(e, reason, sizeof reason);
    ERR_clear_error();
    snprintf(why, why_cap, "%s%s%s", what, reason[0] ? ": " : "", reason);
}

/* Runs one OpenSSL step until it completes, waiting on the socket for what
 * OpenSSL wants until the deadline; false when it failed or time ran out
 * (*timed_out says which). */
static bool step(SSL *ssl, int fd, int64_t deadline, bool *timed_out, int (*op)(SSL *, void *, size_t, size_t *),
                 void *buf, size_t len, size_t *done)
{
    for (;;) {
        int rc = op(ssl, buf, len, done);
        if (rc > 0) return true;
        int e = SSL_get_error(ssl, rc);
        short events = e == SSL_ERROR_WANT_READ ? POLLIN : e == SSL_ERROR_WANT_WRITE ? POLLOUT : 0;
        if (!events) return false;
        if (!probe_wait(fd, events, deadline)) {
            *timed_out = true;
            return false;
        }
    }
}

static int connect_op(SSL *ssl, void *buf, size_t len, size_t *done) { return SSL_connect(ssl); }
static int write_op(SSL *ssl, void *buf, size_t len, size_t *done) { return SSL_write_ex(ssl, buf, len, done); }

bool tls_client_exchange(const char *host, const char *port, int timeout_ms, const char *ca_file,
                         const char *cert, const char *key, const char *request, const char *expect,
                         char *why, size_t why_cap)
{
    bool ok = false, timed_out = false;
    int64_t deadline = probe_now_ms() + timeout_ms;
    int fd = probe_connect(host, port, deadline, timeout_ms, why, why_cap);
    if (fd < 0) return false;
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    SSL *ssl = NULL;
    if (!ctx) {
        say(why, why_cap, "no TLS context");
        goto out;
    }
    if (ca_file && ca_file[0]) {
        if (!SSL_CTX_load_verify_locations(ctx, ca_file, NULL)) {
            say(why, why_cap, "cannot load the CA file");
            goto out;
        }
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    } else {
        SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
    }
    if (cert && cert[0] && (!SSL_CTX_use_certificate_chain_file(ctx, cert) ||
                            !SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM))) {
        say(why, why_cap, "cannot load the client certificate");
        goto out;
    }
    ssl = SSL_new(ctx);
    if (!ssl || !SSL_set_fd(ssl, fd) || !step(ssl, fd, deadline, &timed_out, connect_op, NULL, 0, NULL)) {
        if (timed_out) snprintf(why, why_cap, "TLS handshake not done within %d ms", timeout_ms);
        else say(why, why_cap, "TLS handshake failed");
        goto out;
    }
    size_t n = 0, explen = strlen(expect), got = 0;
    char reply[256];
    if (!step(ssl, fd, deadline, &timed_out, write_op, (void *)request, strlen(request), &n)) {
        if (timed_out) snprintf(why, why_cap, "cannot send the request within %d ms", timeout_ms);
        else say(why, why_cap, "cannot send the request");
        goto out;
    }
    while (got < explen && got < sizeof reply - 1 &&
           step(ssl, fd, deadline, &timed_out, SSL_read_ex, reply + got, sizeof reply - 1 - got, &n))
        got += n;
    reply[got] = '\0';
    if (got == explen && !memcmp(reply, expect, explen)) ok = true;
    else if (timed_out) snprintf(why, why_cap, "no reply over TLS within %d ms (%zu bytes)", timeout_ms, got);
    else snprintf(why, why_cap, "unexpected reply over TLS (%zu bytes): %.60s", got, reply);
out:
    ERR_clear_error();
    if (ssl) SSL_free(ssl);
    if (ctx) SSL_CTX_free(ctx);
    close(fd);
    return ok;
}
