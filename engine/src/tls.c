/*
 * tls.c - TLS on the memcached port (-Z, memcached's -o ssl_* options and
 * `refresh_certs`), with Debian's OpenSSL.
 *
 * Why it exists: the protocol is plaintext; anyone on the path reads every
 * value. memcached 1.6.45's flags are what operators and clients know, so
 * they mean what they mean there: ssl_verify_mode 0 none, 1 request a client
 * certificate, 2 require one, 3 require one and verify it only once;
 * ssl_min_version 0-3 is TLS 1.0-1.3 (default 1.2); renegotiation is off.
 *
 * How records reach the event loop: a connection's SSL object reads and
 * writes its own non-blocking socket; tls_read and tls_write map OpenSSL's
 * WANT_READ/WANT_WRITE onto EAGAIN, so net_conn.c's epoll path (readable,
 * writable, after-work) drives the handshake and the records exactly as it
 * drives plain reads and sends; tls_wants_write/tls_wants_read tell it which
 * way to wait when that is not the call's own (a read whose handshake must
 * write a chain larger than the send buffer). io_uring batching is off with -Z (settings.c):
 * its reads and sends bypass OpenSSL. A client that stops mid-handshake is
 * an idle connection like any other (idle_timeout, -c, the memory term).
 *
 * Rotation: `refresh_certs` (and SIGHUP, as memcached) builds a new SSL_CTX
 * from the files and swaps it in; connections already open keep the context
 * they were accepted with (OpenSSL counts its references), so rotating a
 * certificate never drops an established connection. A file that fails to
 * load leaves the current context in place and says why.
 *
 * Memory (memory_budget.c "tls"): per connection the SSL object and, while a
 * record is in flight, OpenSSL's read and write buffers (each a record,
 * ~17 KiB); SSL_MODE_RELEASE_BUFFERS frees them on an idle connection.
 *
 * Concurrency: the current context is swapped and taken (SSL_new) under one
 * mutex (tls_enabled reads the pointer atomically, without it); an SSL object belongs to its connection's worker.
 */
#include "tls.h"

#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "server.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static SSL_CTX *current;

static const char session_context[] = "cachetd";

/* workers and the metrics thread ask without the lock while tls_refresh
 * swaps the pointer: an atomic load, never a torn or cached one */
bool tls_enabled(void) { return __atomic_load_n(&current, __ATOMIC_ACQUIRE) != NULL; }

static void openssl_error(char *err, size_t errlen, const char *what, const char *file)
{
    char reason[160] = "";
    unsigned long e = ERR_get_error();
    if (e) ERR_error_string_n(e, reason, sizeof reason);
    ERR_clear_error();
    snprintf(err, errlen, "%s%s%s : %s", what, file ? ": " : "", file ? file : "", reason);
}

static int verify_flags(int mode)
{
    switch (mode) {
    case 1: return SSL_VERIFY_PEER;
    case 2: return SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT;
    case 3: return SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT | SSL_VERIFY_CLIENT_ONCE;
    default: return SSL_VERIFY_NONE;
    }
}

static SSL_CTX *build_context(char *err, size_t errlen)
{
    static const int versions[] = { TLS1_VERSION, TLS1_1_VERSION, TLS1_2_VERSION, TLS1_3_VERSION };
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    if (!ctx) {
        openssl_error(err, errlen, "Error creating the TLS context", NULL);
        return NULL;
    }
    SSL_CTX_set_min_proto_version(ctx, versions[settings.tls.min_version & 3]);
    /* memcached's words for what failed */
    if (!SSL_CTX_use_certificate_chain_file(ctx, settings.tls.chain_cert)) {
        openssl_error(err, errlen, "Error loading the certificate chain", settings.tls.chain_cert);
    } else if (!SSL_CTX_use_PrivateKey_file(ctx, settings.tls.key, SSL_FILETYPE_PEM)) {
        openssl_error(err, errlen, "Error loading the key", settings.tls.key);
    } else if (!SSL_CTX_check_private_key(ctx)) {
        openssl_error(err, errlen, "Error validating the certificate", NULL);
    } else if (settings.tls.ca_cert[0] && !SSL_CTX_load_verify_locations(ctx, settings.tls.ca_cert, NULL)) {
        openssl_error(err, errlen, "Error loading the CA certificate", settings.tls.ca_cert);
    } else if (settings.tls.ciphers[0] && !SSL_CTX_set_cipher_list(ctx, settings.tls.ciphers)) {
        openssl_error(err, errlen, "Error setting the provided cipher(s)", settings.tls.ciphers);
    } else {
        if (settings.tls.ca_cert[0])   /* the CAs a client may pick its certificate by */
            SSL_CTX_set_client_CA_list(ctx, SSL_load_client_CA_file(settings.tls.ca_cert));
        SSL_CTX_set_verify(ctx, verify_flags(settings.tls.verify_mode), NULL);
        if (settings.tls.session_cache) {
            SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_SERVER);
            SSL_CTX_set_session_id_context(ctx, (const unsigned char *)session_context, sizeof session_context - 1);
        } else {
            SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
            SSL_CTX_set_num_tickets(ctx, 0);
        }
        SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION);
        SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS | SSL_MODE_ENABLE_PARTIAL_WRITE |
                              SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
        return ctx;
    }
    SSL_CTX_free(ctx);
    return NULL;
}

int tls_start(char *err, size_t errlen)
{
    if (!settings.tls.enabled) return 0;
    OPENSSL_init_ssl(0, NULL);
    SSL_CTX *ctx = build_context(err, errlen);
    if (!ctx) return -1;
    pthread_mutex_lock(&lock);
    __atomic_store_n(&current, ctx, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&lock);
    return 0;
}

int tls_refresh(char *err, size_t errlen)
{
    if (!tls_enabled()) {
        snprintf(err, errlen, "Error TLS not enabled");
        return -1;
    }
    SSL_CTX *ctx = build_context(err, errlen);
    if (!ctx) return -1;
    pthread_mutex_lock(&lock);
    SSL_CTX *old = current;
    __atomic_store_n(&current, ctx, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&lock);
    SSL_CTX_free(old);   /* freed when its last connection closes */
    return 0;
}

SSL *tls_accept(int fd)
{
    pthread_mutex_lock(&lock);
    SSL *ssl = current ? SSL_new(current) : NULL;
    pthread_mutex_unlock(&lock);
    if (!ssl) return NULL;
    if (!SSL_set_fd(ssl, fd)) {
        SSL_free(ssl);
        return NULL;
    }
    SSL_set_accept_state(ssl);
    return ssl;
}

void tls_close(SSL *ssl)
{
    SSL_set_quiet_shutdown(ssl, 1);   /* no close_notify round: the socket closes now */
    SSL_free(ssl);
}

/* -1 with errno EAGAIN when OpenSSL waits for the socket, else ECONNRESET
 * (a failed handshake, a refused certificate, a bad record). */
static ssize_t failed(SSL *ssl, int rc)
{
    int e = SSL_get_error(ssl, rc);
    ERR_clear_error();
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
        errno = EAGAIN;
        return -1;
    }
    if (e == SSL_ERROR_SYSCALL && errno == EINTR) return -1;
    errno = ECONNRESET;
    return -1;
}

ssize_t tls_read(SSL *ssl, void *buf, size_t len)
{
    /* records already decrypted must all be taken now: epoll only says
     * when the socket has bytes, not when OpenSSL holds some */
    size_t got = 0;
    while (got < len) {
        size_t n = 0;
        int rc = SSL_read_ex(ssl, (char *)buf + got, len - got, &n);
        if (rc > 0) {
            got += n;
            continue;
        }
        if (got) {
            ERR_clear_error();
            return (ssize_t)got;
        }
        if (SSL_get_error(ssl, rc) == SSL_ERROR_ZERO_RETURN) return 0;   /* close_notify */
        return failed(ssl, rc);
    }
    return (ssize_t)got;
}

bool tls_pending(SSL *ssl) { return SSL_pending(ssl) > 0; }
bool tls_wants_write(SSL *ssl) { return SSL_want_write(ssl); }
bool tls_wants_read(SSL *ssl) { return SSL_want_read(ssl); }

ssize_t tls_write(void *ssl, const void *buf, size_t len)
{
    size_t n = 0;
    int rc = SSL_write_ex(ssl, buf, len, &n);
    if (rc > 0) return (ssize_t)n;
    return failed(ssl, rc);
}

/* The metrics thread's /healthz round trip over TLS: the engine's own port,
 * so the server certificate is not verified; it shows the server's own
 * certificate as its client certificate, which passes ssl_verify_mode 2-3
 * when ssl_ca_cert signed it for client use too. Blocking, bounded by
 * timeout_ms per send and receive; only the metrics thread calls it. */
bool tls_probe(const char *host, int port, int timeout_ms, const char *request, const char *expect,
               char *why, size_t why_cap)
{
    bool ok = false;
    char service[16];
    snprintf(service, sizeof service, "%d", port);
    struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICHOST }, *res = NULL;
    if (getaddrinfo(host, service, &hints, &res) != 0 || !res) {
        snprintf(why, why_cap, "cannot resolve %s", host);
        return false;
    }
    int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct timeval tv = { .tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000 };
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    SSL *ssl = NULL;
    if (fd < 0 || !ctx) {
        snprintf(why, why_cap, "no socket or TLS context for the probe");
        goto out;
    }
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (connect(fd, res->ai_addr, res->ai_addrlen) != 0) {
        snprintf(why, why_cap, "cannot connect to %s port %d: %s", host, port, strerror(errno));
        goto out;
    }
    SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
    SSL_CTX_use_certificate_chain_file(ctx, settings.tls.chain_cert);
    SSL_CTX_use_PrivateKey_file(ctx, settings.tls.key, SSL_FILETYPE_PEM);
    ERR_clear_error();
    ssl = SSL_new(ctx);
    if (!ssl || !SSL_set_fd(ssl, fd) || SSL_connect(ssl) != 1) {
        openssl_error(why, why_cap, "TLS handshake with the engine failed", NULL);
        goto out;
    }
    size_t n = 0, explen = strlen(expect);
    char reply[128];
    if (!SSL_write_ex(ssl, request, strlen(request), &n)) {
        openssl_error(why, why_cap, "cannot send the probe", NULL);
        goto out;
    }
    size_t got = 0;
    while (got < explen && got < sizeof reply - 1 && SSL_read_ex(ssl, reply + got, sizeof reply - 1 - got, &n))
        got += n;
    reply[got] = '\0';
    if (got == explen && !memcmp(reply, expect, explen)) ok = true;
    else snprintf(why, why_cap, "unexpected reply over TLS (%zu bytes)", got);
out:
    ERR_clear_error();
    if (ssl) SSL_free(ssl);
    if (ctx) SSL_CTX_free(ctx);
    if (fd >= 0) close(fd);
    freeaddrinfo(res);
    return ok;
}
