/*
 * tls_client.c - the client side of a TLS round trip (see tls_client.h):
 * why it is its own file: cachet-probe links it without the rest of the
 * engine, and the engine's /healthz uses the same code, so the pod's probe
 * and /healthz make the same round trip over TLS as they do in plaintext
 * (engine_probe.c).
 *
 * Concurrency: stateless; blocking calls bounded by SO_RCVTIMEO/SO_SNDTIMEO.
 */
#include "tls_client.h"

#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

static void say(char *why, size_t why_cap, const char *what)
{
    char reason[160] = "";
    unsigned long e = ERR_get_error();
    if (e) ERR_error_string_n(e, reason, sizeof reason);
    ERR_clear_error();
    snprintf(why, why_cap, "%s%s%s", what, reason[0] ? ": " : "", reason);
}

static int connect_within(const struct addrinfo *res, int timeout_ms)
{
    struct timeval tv = { .tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000 };
    for (const struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) continue;
        /* SO_SNDTIMEO bounds connect() too */
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) return fd;
        close(fd);
    }
    return -1;
}

bool tls_client_exchange(const char *host, const char *port, int timeout_ms, const char *ca_file,
                         const char *cert, const char *key, const char *request, const char *expect,
                         char *why, size_t why_cap)
{
    bool ok = false;
    struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *res = NULL;
    if (getaddrinfo(host, port, &hints, &res) != 0 || !res) {
        snprintf(why, why_cap, "cannot resolve %s", host);
        return false;
    }
    int fd = connect_within(res, timeout_ms);
    freeaddrinfo(res);
    if (fd < 0) {
        snprintf(why, why_cap, "cannot connect to %s port %s: %s", host, port, strerror(errno));
        return false;
    }
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
    if (!ssl || !SSL_set_fd(ssl, fd) || SSL_connect(ssl) != 1) {
        say(why, why_cap, "TLS handshake failed");
        goto out;
    }
    size_t n = 0, explen = strlen(expect), got = 0;
    char reply[256];
    if (!SSL_write_ex(ssl, request, strlen(request), &n)) {
        say(why, why_cap, "cannot send the request");
        goto out;
    }
    while (got < explen && got < sizeof reply - 1 && SSL_read_ex(ssl, reply + got, sizeof reply - 1 - got, &n))
        got += n;
    reply[got] = '\0';
    if (got == explen && !memcmp(reply, expect, explen)) ok = true;
    else snprintf(why, why_cap, "unexpected reply over TLS (%zu bytes): %.60s", got, reply);
out:
    ERR_clear_error();
    if (ssl) SSL_free(ssl);
    if (ctx) SSL_CTX_free(ctx);
    close(fd);
    return ok;
}
