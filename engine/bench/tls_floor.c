/*
 * tls_floor.c - the server-side CPU that TLS itself costs per W1 GET (the
 * "shared crypto floor" of `make bench-engine TLS=1`): what any server
 * speaking TLS 1.3 through this OpenSSL pays to decrypt the client's record
 * and encrypt its reply, whatever its engine does around them.
 *
 * Why it exists: cachetd -Z and memcached -Z run the same libssl, the same
 * cipher (TLS_AES_256_GCM_SHA384) and receive the same client records, so
 * this cost c is in both servers' CPU per GET and no engine work can shrink
 * it. With cachetd's other costs d and memcached's m, the TLS ratio is
 * (m + c) / (d + c), below the plaintext-like m / d whenever d < m;
 * subtracting c from both is what lets the plaintext target judge the part
 * an engine controls (docs/benchmarks.md, "W1 over TLS").
 *
 * What it measures: one TLS 1.3 session between two SSL objects on memory
 * BIOs (no sockets, no syscalls). The client's records are made first; then,
 * timed by the thread's CPU clock, the server takes each record (BIO_write
 * into its read BIO), decrypts it (SSL_read_ex) and encrypts its reply into
 * one record (SSL_write_ex), the ciphertext left in a memory BIO that is
 * emptied each exchange. The shapes are W1's (seed 000 with BENCH_QUICK=1:
 * 6-byte keys, 64-byte values): a record of `depth` requests of
 * "get NNNNNN\r\n" (12 bytes) answered by `depth` replies of 90 bytes in
 * ONE record: the fewest records a turn can take, so the floor is what the
 * best server pays. A server that writes a record per reply pays more, and
 * that is its own cost, not the floor (printed beside: depth16-per-reply).
 * The memory BIOs' copies (a few hundred bytes) are counted in, so the floor
 * is a little high by those copies; each figure is the best of 5 passes
 * (the least disturbed, so the floor is not inflated by a busy machine).
 *
 * Single-threaded; run pinned (bench-engine.sh runs it on the servers' CPU
 * and priority). Usage: tls_floor CERT KEY [EXCHANGES [ONLY]]; ONLY is one
 * of depth1, depth16, depth16_per_reply, for counting one shape's
 * instructions: valgrind --tool=callgrind --toggle-collect=serve counts the
 * server's side alone (docs/benchmarks.md).
 * Prints one machine-readable line: TLS_FLOOR depth1=US depth16=US
 * depth16_per_reply=US (microseconds of CPU per GET) cipher=NAME
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#define REQUEST "get 123456\r\n"
#define REPLY "VALUE 123456 0 64\r\n0123456789012345678901234567890123456789012345678901234567890123\r\nEND\r\n"
#define MAX_DEPTH 16
#define PASSES 5

static void die(const char *what)
{
    fprintf(stderr, "tls_floor: %s\n", what);
    ERR_print_errors_fp(stderr);
    exit(1);
}

/* the thread's CPU time: time other processes take from this CPU does not count */
static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

struct pair {
    SSL *client, *server;
    BIO *c_in, *c_out, *s_in, *s_out;   /* each side's read and write BIOs */
};

/* moves whatever one side wrote into the other side's read BIO */
static void pump(BIO *from, BIO *to)
{
    char buf[16384];
    int n;
    while ((n = BIO_read(from, buf, sizeof buf)) > 0)
        if (BIO_write(to, buf, n) != n) die("BIO_write");
}

static void connect_pair(struct pair *p, SSL_CTX *sctx, SSL_CTX *cctx)
{
    p->client = SSL_new(cctx);
    p->server = SSL_new(sctx);
    if (!p->client || !p->server) die("SSL_new");
    p->c_in = BIO_new(BIO_s_mem()); p->c_out = BIO_new(BIO_s_mem());
    p->s_in = BIO_new(BIO_s_mem()); p->s_out = BIO_new(BIO_s_mem());
    BIO_set_mem_eof_return(p->c_in, -1);
    BIO_set_mem_eof_return(p->s_in, -1);
    SSL_set_bio(p->client, p->c_in, p->c_out);
    SSL_set_bio(p->server, p->s_in, p->s_out);
    SSL_set_connect_state(p->client);
    SSL_set_accept_state(p->server);
    for (int i = 0; i < 20; i++) {
        int rc = SSL_do_handshake(p->client);
        pump(p->c_out, p->s_in);
        int rs = SSL_do_handshake(p->server);
        pump(p->s_out, p->c_in);
        if (rc == 1 && rs == 1) {
            /* the server's session tickets reach the client; nothing more is exchanged */
            char b[16];
            size_t n;
            SSL_read_ex(p->client, b, sizeof b, &n);
            ERR_clear_error();
            return;
        }
    }
    die("handshake did not finish");
}

/* The server's side, timed: a function of its own, so that callgrind can
 * count it alone (--toggle-collect=serve). */
static __attribute__((noinline)) void serve(struct pair *p, const unsigned char *recs, size_t rec_len, long exchanges,
                                            size_t req_len, const char *rep, size_t piece, int pieces)
{
    char got[16384];
    for (long e = 0; e < exchanges; e++) {
        BIO_write(p->s_in, recs + rec_len * (size_t)e, (int)rec_len);
        size_t n, total = 0;
        while (total < req_len) {
            if (!SSL_read_ex(p->server, got, sizeof got, &n)) die("server SSL_read");
            total += n;
        }
        for (int r = 0; r < pieces; r++) {
            size_t w;
            if (!SSL_write_ex(p->server, rep + piece * (size_t)r, piece, &w) || w != piece) die("server SSL_write");
        }
        (void)BIO_reset(p->s_out);
    }
}

/* CPU per GET (us) of the server's side of `exchanges` exchanges of
 * `depth` requests in one record, answered in `reply_records` records. */
static double server_us_per_get(SSL_CTX *sctx, SSL_CTX *cctx, int depth, int reply_records, long exchanges,
                                char *cipher, size_t cipher_cap)
{
    char req[MAX_DEPTH * sizeof REQUEST], rep[MAX_DEPTH * sizeof REPLY];
    size_t req_len = 0, rep_len = 0;
    for (int i = 0; i < depth; i++) {
        memcpy(req + req_len, REQUEST, sizeof REQUEST - 1);
        req_len += sizeof REQUEST - 1;
        memcpy(rep + rep_len, REPLY, sizeof REPLY - 1);
        rep_len += sizeof REPLY - 1;
    }
    double best = 1e30;
    for (int pass = 0; pass < PASSES; pass++) {
        struct pair p;
        connect_pair(&p, sctx, cctx);
        snprintf(cipher, cipher_cap, "%s", SSL_get_cipher_name(p.server));
        /* the client's records first, untimed: the client's work is not the server's */
        size_t rec_len = 0;
        unsigned char *recs = NULL;
        for (long e = 0; e < exchanges; e++) {
            size_t w;
            if (!SSL_write_ex(p.client, req, req_len, &w) || w != req_len) die("client SSL_write");
            if (!rec_len) {
                rec_len = (size_t)BIO_pending(p.c_out);
                recs = malloc(rec_len * (size_t)exchanges);
                if (!recs) die("no memory");
            }
            if ((size_t)BIO_pending(p.c_out) != rec_len) die("client records differ in size");
            if (BIO_read(p.c_out, recs + rec_len * (size_t)e, (int)rec_len) != (int)rec_len) die("BIO_read");
        }
        double t0 = cpu_s();
        serve(&p, recs, rec_len, exchanges, req_len, rep, rep_len / (size_t)reply_records, reply_records);
        double us = (cpu_s() - t0) * 1e6 / (double)(exchanges * depth);
        if (us < best) best = us;
        free(recs);
        SSL_free(p.client);
        SSL_free(p.server);
    }
    return best;
}

static SSL_CTX *server_context(const char *cert, const char *key)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    if (!ctx || !SSL_CTX_use_certificate_chain_file(ctx, cert) ||
        !SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM))
        die("server certificate");
    return ctx;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: tls_floor CERT KEY [EXCHANGES [depth1|depth16|depth16_per_reply]]\n");
        return 2;
    }
    long exchanges = argc > 3 ? atol(argv[3]) : 100000;
    SSL_CTX *sctx = server_context(argv[1], argv[2]);
    SSL_CTX *cctx = SSL_CTX_new(TLS_client_method());
    if (!cctx) die("client context");
    char cipher[64] = "?";
    /* ONLY (callgrind: one shape's instructions) runs one shape; the others print 0 */
    const char *only = argc > 4 ? argv[4] : "";
    double d1 = 0, d16 = 0, d16r = 0;
    if (!*only || !strcmp(only, "depth1")) d1 = server_us_per_get(sctx, cctx, 1, 1, exchanges, cipher, sizeof cipher);
    if (!*only || !strcmp(only, "depth16"))
        d16 = server_us_per_get(sctx, cctx, 16, 1, exchanges / 8, cipher, sizeof cipher);
    if (!*only || !strcmp(only, "depth16_per_reply"))
        d16r = server_us_per_get(sctx, cctx, 16, 16, exchanges / 8, cipher, sizeof cipher);
    printf("server-side TLS CPU per GET (best of %d passes): unpipelined %.3f us, pipelined 16 in one record "
           "%.3f us, 16 replies in 16 records %.3f us (%s)\n", PASSES, d1, d16, d16r, cipher);
    printf("TLS_FLOOR depth1=%.4f depth16=%.4f depth16_per_reply=%.4f cipher=%s\n", d1, d16, d16r, cipher);
    return 0;
}
