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
 * write a chain larger than the send buffer). Reads run ahead: one read()
 * takes whatever the socket holds into OpenSSL's record buffer, tls_read
 * takes every whole record in it, and tls_pending tells net_conn.c about
 * whole records left there (epoll cannot). An unpipelined request so costs
 * one read(), as in plaintext; without read-ahead OpenSSL reads a record in
 * two (header, then body), and draining until EAGAIN cost a third. Writes
 * get up to a record's worth at once (outbuf_flush_with gathers a queue in
 * pieces), so a reply is not one record and one send per piece.
 * io_uring: the connection's BIO is this file's own (the socket BIO's
 * read()/write(), plus ciphertext handed over by tls_stage), so a worker's
 * io_uring batch receives the ciphertext of many ready connections in one
 * io_uring_enter and the plain read path decrypts it (net_conn.c
 * uring_turn). Sends are batched too: after the handshake the BIO seals
 * records into a buffer of the connection's (tls_encrypt, at most a
 * record's worth, TLS_SEND_MAX) that the worker's io_uring send batch, or
 * one send(), takes; what a partial send leaves waits there for EPOLLOUT,
 * and a full buffer is a full socket to OpenSSL (SSL_write's retry). A client
 * that stops mid-handshake is an idle connection like any other
 * (idle_timeout, -c, the memory term).
 *
 * Rotation: `refresh_certs` (and SIGHUP, as memcached) builds a new SSL_CTX
 * from the files and swaps it in; so does a file watch, for Kubernetes,
 * whose Secret volumes swap a symlink when cert-manager renews and where
 * nothing sends a command: an accept stats the three files when a second
 * has passed since the last look, and refreshes if one's inode, size or
 * mtime changed (as auth.c watches the authfile); connections already open keep the context
 * they were accepted with (OpenSSL counts its references), so rotating a
 * certificate never drops an established connection. A file that fails to
 * load leaves the current context in place and says why.
 *
 * Memory (memory_budget.c "tls"): per connection the SSL object and
 * OpenSSL's read and write buffers (each a record, ~17 KiB), which a data
 * connection keeps from its first record to its close (build_context says
 * why); a metrics connection frees them whenever it is idle. A data
 * connection that has answered also keeps its sealed-record buffer
 * (TLS_SEND_MAX, 17 KiB).
 *
 * The metrics port (-o metrics_tls, metrics_server.c) takes its SSL objects
 * from the same context, so the same files, reloads and file watch serve
 * it; it never asks for a client certificate, and its sessions have their
 * own session ID context, so none resumes on the data port
 * (tls_accept_without_client_cert).
 *
 * Concurrency: the current context, and the files' identity it was built
 * from, are swapped and taken (SSL_new) under one mutex (tls_enabled reads
 * the pointer atomically, without it); the BIO method is made once by
 * tls_start, before the workers, and only read after; an SSL object and
 * its BIO (staged ciphertext included) belong to its connection's worker,
 * or to the metrics thread for its connections (never staged).
 */
#include "tls.h"

#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "server.h"
#include "tls_client.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static SSL_CTX *current;

static const char session_context[] = "cachetd";

#define TLS_RECHECK_NS 1000000000LL

/* What the watch compares: a file's identity when its context was built
 * (zeros for a file that is not set or cannot be stat'ed). */
struct file_id {
    dev_t dev;
    ino_t ino;
    off_t size;
    long long mtime_ns;
};
#define TLS_FILES 3
static struct file_id loaded_ids[TLS_FILES];   /* under lock */
static long long next_look_ns;                 /* under lock */

static long long mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void identify_files(struct file_id ids[TLS_FILES])
{
    const char *paths[TLS_FILES] = { settings.tls.chain_cert, settings.tls.key, settings.tls.ca_cert };
    memset(ids, 0, sizeof(struct file_id) * TLS_FILES);
    for (int i = 0; i < TLS_FILES; i++) {
        struct stat st;
        if (!paths[i][0] || stat(paths[i], &st) != 0) continue;
        ids[i] = (struct file_id){ st.st_dev, st.st_ino, st.st_size,
                                   (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec };
    }
}

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
        /* always: with client verification on, OpenSSL refuses to resume a
         * session (a TLS 1.3 ticket too) without a session ID context, with
         * a fatal internal_error alert, and every reconnect of a client that
         * keeps sessions (Go's ClientSessionCache, Java) failed.
         * memcached 1.6.45 sets it only with ssl_session_cache. */
        SSL_CTX_set_session_id_context(ctx, (const unsigned char *)session_context, sizeof session_context - 1);
        if (settings.tls.session_cache) {
            SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_SERVER);
        } else {
            /* no server-side cache; TLS 1.3 session tickets stay on, as in
             * memcached: they are the bytes the server sends after the
             * client's Finished, and without them a client with Nagle on
             * holds its first request until the delayed ACK (~40 ms) */
            SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
        }
        /* a client that ends its side with a FIN and no close_notify has
         * still asked what it sent: the end of its stream, as in plaintext
         * (net_conn.c peer_eof), answered before the close. Otherwise
         * OpenSSL makes it a fatal error and every reply not yet encrypted
         * was lost. A request the FIN cuts short is never complete (lines
         * end in \r\n, data blocks have their length), so no truncation
         * reaches storage. */
        SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_IGNORE_UNEXPECTED_EOF);
        /* one read() takes what the socket holds into the record buffer
         * (no bigger: the memory term is unchanged), rather than two per
         * record (its header, then its body): an unpipelined GET costs one
         * read() as in plaintext */
        SSL_CTX_set_read_ahead(ctx, 1);
        /* no SSL_MODE_RELEASE_BUFFERS (memcached sets it): its malloc and
         * free of both record buffers around every record were 7% of an
         * unpipelined GET's instructions (1,114 of 15,614; callgrind). The
         * memory formula already charged a connection both buffers
         * (TLS_CONN_BYTES), so keeping them costs no new term. */
        SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
        return ctx;
    }
    SSL_CTX_free(ctx);
    return NULL;
}

/* ---- the connection's BIO: its socket, plus ciphertext io_uring received --
 * OpenSSL's socket BIO reads the socket itself; this one first hands out
 * ciphertext the worker's io_uring batch already received for the
 * connection (tls_stage), so a batch of TLS connections costs one
 * io_uring_enter for its reads, as plaintext ones do. Otherwise it is the
 * socket BIO: read()/write() on the non-blocking fd, EAGAIN as a retry, 0
 * as the end of the stream. */
struct tls_io {
    int fd;
    bool eof;
    const char *staged;   /* received, not yet taken by OpenSSL */
    size_t staged_len;
    /* tls_encrypt: OpenSSL's records go to `sealed` (TLS_SEND_MAX, held only
     * while unsent) instead of the socket, and leave through tls_unsent /
     * tls_sent (io_uring) or tls_send_unsent (write()). One way: once on,
     * every later record of the session queues behind the ones before. */
    bool batched;
    char *sealed;                    /* allocated at the first reply, freed with the connection */
    size_t sealed_off, sealed_len;   /* sealed[sealed_off, sealed_len) is unsent */
};

static BIO_METHOD *sock_method;   /* made once in tls_start, read-only after */

static int io_read(BIO *b, char *buf, int len)
{
    struct tls_io *io = BIO_get_data(b);
    BIO_clear_retry_flags(b);
    if (len <= 0) return 0;
    if (io->staged_len) {
        size_t n = io->staged_len < (size_t)len ? io->staged_len : (size_t)len;
        memcpy(buf, io->staged, n);
        io->staged += n;
        io->staged_len -= n;
        return (int)n;
    }
    ssize_t n = read(io->fd, buf, (size_t)len);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) BIO_set_retry_read(b);
    if (n == 0) io->eof = true;
    return (int)n;
}

/* Appends what fits of a record to `sealed`; full: a retry, as a full
 * socket would be (OpenSSL keeps the rest of the record and SSL_write's
 * retry hands it over). */
static int seal(BIO *b, struct tls_io *io, const char *buf, size_t len)
{
    if (!io->sealed && !(io->sealed = malloc(TLS_SEND_MAX))) return -1;   /* no memory: the connection ends */
    if (io->sealed_off && io->sealed_len + len > TLS_SEND_MAX) {
        memmove(io->sealed, io->sealed + io->sealed_off, io->sealed_len - io->sealed_off);
        io->sealed_len -= io->sealed_off;
        io->sealed_off = 0;
    }
    size_t n = TLS_SEND_MAX - io->sealed_len;
    if (n == 0) {
        BIO_set_retry_write(b);
        return -1;
    }
    if (n > len) n = len;
    memcpy(io->sealed + io->sealed_len, buf, n);
    io->sealed_len += n;
    return (int)n;
}

static int io_write(BIO *b, const char *buf, int len)
{
    struct tls_io *io = BIO_get_data(b);
    BIO_clear_retry_flags(b);
    if (len <= 0) return 0;
    if (io->batched) return seal(b, io, buf, (size_t)len);
    ssize_t n = write(io->fd, buf, (size_t)len);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) BIO_set_retry_write(b);
    return (int)n;
}

static long io_ctrl(BIO *b, int cmd, long num, void *ptr)
{
    struct tls_io *io = BIO_get_data(b);
    switch (cmd) {
    case BIO_CTRL_FLUSH: return 1;
    case BIO_CTRL_EOF: return io->eof;   /* OpenSSL tells an unexpected EOF from an error by it */
    case BIO_CTRL_PENDING: return (long)io->staged_len;
    case BIO_CTRL_WPENDING: return (long)(io->sealed_len - io->sealed_off);
    case BIO_C_GET_FD:
        if (ptr) *(int *)ptr = io->fd;
        return io->fd;
    default: return 0;
    }
}

static int io_destroy(BIO *b)
{
    struct tls_io *io = BIO_get_data(b);
    if (io) free(io->sealed);
    free(io);   /* the socket is the connection's to close */
    BIO_set_data(b, NULL);
    return 1;
}

static bool make_sock_method(void)
{
    sock_method = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK | BIO_TYPE_DESCRIPTOR, "cachetd socket");
    return sock_method && BIO_meth_set_read(sock_method, io_read) && BIO_meth_set_write(sock_method, io_write) &&
           BIO_meth_set_ctrl(sock_method, io_ctrl) && BIO_meth_set_destroy(sock_method, io_destroy);
}

/* OpenSSL's first read asks for its whole record buffer (16 KiB of plaintext
 * and the encryption overhead) when it holds no bytes (read-ahead,
 * build_context), so up to TLS_STAGE_MAX handed over before that read is all
 * taken by it at once. A session with a smaller maximum fragment (RFC 6066)
 * may have a smaller buffer: not staged. */
bool tls_can_stage(SSL *ssl)
{
    /* after a close_notify (read together with data), OpenSSL's next read
     * returns 0 without taking staged bytes: they would look left over */
    return SSL_is_init_finished(ssl) && !SSL_has_pending(ssl) &&
           !(SSL_get_shutdown(ssl) & SSL_RECEIVED_SHUTDOWN) &&
           SSL_SESSION_get_max_fragment_length(SSL_get0_session(ssl)) == TLSEXT_max_fragment_length_DISABLED;
}

void tls_stage(SSL *ssl, const void *ciphertext, size_t len)
{
    struct tls_io *io = BIO_get_data(SSL_get_rbio(ssl));
    io->staged = ciphertext;
    io->staged_len = len;
}

int tls_start(char *err, size_t errlen)
{
    if (!settings.tls.enabled) return 0;
    OPENSSL_init_ssl(0, NULL);
    if (!sock_method && !make_sock_method()) {
        openssl_error(err, errlen, "Error creating the TLS socket BIO", NULL);
        return -1;
    }
    struct file_id ids[TLS_FILES];
    identify_files(ids);
    SSL_CTX *ctx = build_context(err, errlen);
    if (!ctx) return -1;
    pthread_mutex_lock(&lock);
    __atomic_store_n(&current, ctx, __ATOMIC_RELEASE);
    memcpy(loaded_ids, ids, sizeof ids);
    next_look_ns = mono_ns() + TLS_RECHECK_NS;
    pthread_mutex_unlock(&lock);
    return 0;
}

int tls_refresh(char *err, size_t errlen)
{
    if (!tls_enabled()) {
        snprintf(err, errlen, "Error TLS not enabled");
        return -1;
    }
    /* identified before loading: a change while loading is seen next time */
    struct file_id ids[TLS_FILES];
    identify_files(ids);
    SSL_CTX *ctx = build_context(err, errlen);
    pthread_mutex_lock(&lock);
    /* a failed load is not retried by the watch until the files change again */
    memcpy(loaded_ids, ids, sizeof ids);
    SSL_CTX *old = current;
    if (ctx) __atomic_store_n(&current, ctx, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&lock);
    if (!ctx) return -1;
    SSL_CTX_free(old);   /* freed when its last connection closes */
    return 0;
}

/* The file watch: true when a look is due and a file changed since the
 * current context was built. */
static bool files_changed(void)
{
    long long now = mono_ns();
    pthread_mutex_lock(&lock);
    bool due = now >= next_look_ns;
    if (due) next_look_ns = now + TLS_RECHECK_NS;
    pthread_mutex_unlock(&lock);
    if (!due) return false;
    struct file_id ids[TLS_FILES];
    identify_files(ids);
    pthread_mutex_lock(&lock);
    bool changed = memcmp(ids, loaded_ids, sizeof ids) != 0;
    pthread_mutex_unlock(&lock);
    return changed;
}

SSL *tls_accept(int fd)
{
    if (files_changed()) {
        char err[256];
        if (tls_refresh(err, sizeof err) != 0)
            fprintf(stderr, "cachetd: certificate files changed but not reloaded (%s); the current certificate stays\n", err);
    }
    pthread_mutex_lock(&lock);
    SSL *ssl = current ? SSL_new(current) : NULL;
    pthread_mutex_unlock(&lock);
    if (!ssl) return NULL;
    BIO *bio = BIO_new(sock_method);
    struct tls_io *io = calloc(1, sizeof *io);
    if (!bio || !io) {
        BIO_free(bio);
        free(io);
        SSL_free(ssl);
        return NULL;
    }
    io->fd = fd;
    BIO_set_data(bio, io);
    BIO_set_init(bio, 1);
    SSL_set_bio(ssl, bio, bio);   /* one reference, for both directions */
    SSL_set_accept_state(ssl);
    return ssl;
}

/* The metrics port's clients are Prometheus and the kubelet: what they
 * read are counters, not values, and a probe has no certificate to show;
 * ssl_verify_mode guards the data port. A session made here was made
 * without a client certificate, so it must never resume on the data port:
 * its own session ID context makes the data port refuse it (a session
 * resumes only where its context matches), whether it comes back as a
 * session ID from the shared cache or as a ticket; and no tickets are
 * issued here at all, which its clients never use. */
static const char metrics_session_context[] = "cachetd-metrics";

SSL *tls_accept_without_client_cert(int fd)
{
    SSL *ssl = tls_accept(fd);
    if (!ssl) return NULL;
    SSL_set_verify(ssl, SSL_VERIFY_NONE, NULL);
    if (!SSL_set_session_id_context(ssl, (const unsigned char *)metrics_session_context,
                                    sizeof metrics_session_context - 1)) {
        tls_close(ssl);
        return NULL;
    }
    SSL_set_options(ssl, SSL_OP_NO_TICKET);
    /* a scrape every few seconds: its buffers are not worth keeping */
    SSL_set_mode(ssl, SSL_MODE_RELEASE_BUFFERS);
    return ssl;
}

bool tls_handshake_done(SSL *ssl) { return SSL_is_init_finished(ssl); }

bool tls_hello_answered(SSL *ssl)
{
    OSSL_HANDSHAKE_STATE st = SSL_get_state(ssl);
    return st != TLS_ST_BEFORE && st != TLS_ST_SR_CLNT_HELLO;
}

void tls_close(SSL *ssl)
{
    /* records sealed but unsent (the last replies, an alert a failed read
     * wrote) get one try: what the socket takes now reaches the client */
    if (tls_send_unsent(ssl) < 0) ERR_clear_error();
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

static ssize_t read_records(SSL *ssl, void *buf, size_t len);

ssize_t tls_read(SSL *ssl, void *buf, size_t len)
{
    ssize_t n = read_records(ssl, buf, len);
    struct tls_io *io = BIO_get_data(SSL_get_rbio(ssl));
    if (io->staged) {
        /* Staged ciphertext (tls_stage) lives only for this read: OpenSSL's
         * first read took all of it (tls_can_stage says why). Were any left,
         * the next read would write over them: the stream would go on
         * without them, so it ends here instead. */
        bool left = io->staged_len != 0;
        io->staged = NULL;
        io->staged_len = 0;
        if (left) {
            fprintf(stderr, "cachetd: TLS: OpenSSL left ciphertext received through io_uring; connection closed\n");
            errno = ECONNRESET;
            return -1;
        }
    }
    return n;
}

static ssize_t read_records(SSL *ssl, void *buf, size_t len)
{
    /* Takes every whole record the one read() behind the first call brought
     * in (read-ahead, build_context), and stops when OpenSSL holds nothing
     * more: another call would be a read() that fails with EAGAIN, one
     * syscall per request for nothing (what the socket receives later,
     * epoll announces). */
    size_t got = 0;
    while (got < len) {
        size_t n = 0;
        int rc = SSL_read_ex(ssl, (char *)buf + got, len - got, &n);
        if (rc > 0) {
            got += n;
            if (!SSL_has_pending(ssl)) break;
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

/* Bytes read ahead but not yet taken: decrypted ones, or whole records
 * behind them. A partial record after a read that stopped for more
 * (SSL_want_read) waits for epoll instead: calling again would only find
 * the socket empty. */
bool tls_pending(SSL *ssl) { return SSL_pending(ssl) > 0 || (SSL_has_pending(ssl) && !SSL_want_read(ssl)); }
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
 * when ssl_ca_cert signed it for client use too. Only the metrics thread
 * calls it. */
bool tls_probe(const char *host, int port, int timeout_ms, const char *request, const char *expect,
               char *why, size_t why_cap)
{
    char service[16];
    snprintf(service, sizeof service, "%d", port);
    return tls_client_exchange(host, service, timeout_ms, NULL, settings.tls.chain_cert, settings.tls.key,
                               request, expect, why, why_cap);
}

/* ---- sends batched: records sealed into the connection's buffer ----------
 * net_conn.c encrypts a connection's queued replies with this (through
 * outbuf_flush_with, which gathers them up to a record at a time), then
 * sends the sealed records in the worker's io_uring batch or with one
 * write(). The handshake writes its flights to the socket itself (a read
 * drives it, and its WANT_WRITE waits on EPOLLOUT as before); the first
 * reply after it turns sealing on for good, so no record ever overtakes
 * one sealed before it. A full buffer is a full socket to OpenSSL: the
 * caller sends, then retries the same bytes (never re-encrypted, never
 * dropped), as SSL_write requires. */
ssize_t tls_encrypt(void *ssl, const void *buf, size_t len)
{
    struct tls_io *io = BIO_get_data(SSL_get_wbio(ssl));
    if (!io->batched && SSL_is_init_finished(ssl)) io->batched = true;
    return tls_write(ssl, buf, len);
}

size_t tls_unsent(SSL *ssl, const void **p)
{
    struct tls_io *io = BIO_get_data(SSL_get_wbio(ssl));
    *p = io->sealed ? io->sealed + io->sealed_off : NULL;
    return io->sealed_len - io->sealed_off;
}

void tls_sent(SSL *ssl, size_t n)
{
    struct tls_io *io = BIO_get_data(SSL_get_wbio(ssl));
    io->sealed_off += n;
    /* drained: kept for the next reply, not freed. Freed and taken again
     * per reply, it sat at the top of the heap and glibc gave it back and
     * grew the heap again: two brk() per unpipelined GET in 5. The formula
     * counts it for every connection anyway (memory_budget.c). */
    if (io->sealed_off == io->sealed_len) io->sealed_off = io->sealed_len = 0;
}

ssize_t tls_send_unsent(SSL *ssl)
{
    struct tls_io *io = BIO_get_data(SSL_get_wbio(ssl));
    while (io->sealed_off < io->sealed_len) {
        ssize_t n = send(io->fd, io->sealed + io->sealed_off, io->sealed_len - io->sealed_off,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) break;
            return -1;
        }
        tls_sent(ssl, (size_t)n);
    }
    return (ssize_t)(io->sealed_len - io->sealed_off);
}

bool tls_send_wants_read(SSL *ssl)
{
    const void *p;
    return tls_unsent(ssl, &p) == 0 && SSL_want_read(ssl);
}
