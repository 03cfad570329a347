/*
 * metrics_server.c - the HTTP side of the metrics port; see metrics_server.h
 * for why it is a thread of its own and what it bounds.
 *
 * One poll() loop serves every connection. A connection reads one request
 * head at a time (http.c parses it), answers it with one response built in
 * memory, sends that, and only then looks at the next request, so a client
 * pipelining requests gets them answered in order and can never make the
 * server hold more than one response for it. Each connection has one
 * deadline at a time:
 *   idle  (waiting for a request's first byte)   IDLE_TIMEOUT_MS, then closed
 *   head  (first byte seen, head incomplete)     HEAD_TIMEOUT_MS, then 408
 *   write (response queued, not all sent)        WRITE_TIMEOUT_MS, then closed
 * so a client that trickles bytes (slowloris) or stops reading holds a slot
 * for a few seconds at most. When all HTTP_CONNS_MAX slots are taken, a new
 * connection takes the slot of the one that has waited longest for a
 * request (idle or with a partial head; see pick_slot), or if every slot is
 * writing a response, of the one writing longest: clients that hold slots
 * with one byte each, or with responses they never read, cannot keep
 * /healthz from answering.
 *
 * Counting arrivals cannot protect a connection accepted before its request
 * arrived: sixteen reconnects can land between a probe's connect and its
 * request whenever the client is descheduled (CI saw it). So the listener
 * defers accept (TCP_DEFER_ACCEPT) until a connection's first bytes are in:
 * a probe is accepted with its request and answered at once, while clients
 * that connect and send nothing wait in the kernel for DEFER_ACCEPT_S first.
 * Accepting never stops while the table is full, so a flood of connections
 * cannot leave a probe queued behind it in the backlog; the backlog is the
 * kernel's largest, so deferred silent clients fill it only by thousands.
 *
 * With -o metrics_tls the port speaks HTTPS (tls.c: the data port's context,
 * so its certificate, reloads and file watch; no client certificate asked).
 * The handshake runs inside the connection's reads and sends, non-blocking
 * like everything else here, in a fourth phase:
 *   handshake (accepted, TLS not yet up)          HEAD_TIMEOUT_MS, then closed
 * A probe's whole ClientHello arrives with its connect and is answered its
 * server flight at once; its request follows a round trip later. From the
 * answer until its first request the connection is young and gives way to
 * nobody for HELLO_GRACE_MS: clients that send a whole hello, stop, and
 * reconnect whenever closed would otherwise push it out within sixteen
 * reconnects (2 of 20 probes were lost so). Clients that stop inside
 * their hello are never young and push out only each other, as one-byte
 * heads do. When every slot is young, accepting waits for the first to
 * come of age, and the backlog, first in first out, holds the probe ahead
 * of attackers that reconnect after it; the grace also bounds such clients
 * to 16 handshakes (the costly part) per grace. OpenSSL reads ahead,
 * so bytes it holds that poll() cannot see are read again without waiting.
 *
 * The /healthz round trip (engine_probe.c; tls_client.c when the engine
 * port is TLS, -Z) blocks this loop for at most PROBE_TIMEOUT_MS
 * (TLS_PROBE_TIMEOUT_MS) in all: connect, handshake and reply share one
 * deadline (probe_io.h). It takes that long only when the engine does not
 * answer; its result is reused for PROBE_REUSE_MS so that no client can
 * make this port load the engine with connections.
 *
 * Concurrency: everything here belongs to the server thread, except the
 * start/stop handshake (the wake eventfd, then pthread_join) with main().
 */
#include "metrics_server.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "engine_probe.h"
#include "http.h"
#include "metrics.h"
#include "tls.h"

#define HTTP_CONNS_MAX     METRICS_HTTP_CONNS_MAX
#define LISTEN_MAX         16
#define IDLE_TIMEOUT_MS    60000
#define HEAD_TIMEOUT_MS    5000
#define WRITE_TIMEOUT_MS   10000
#define REQUESTS_PER_CONN  1000
#define PROBE_TIMEOUT_MS   500
/* A TLS probe pays a full handshake (the engine signs, and verifies our
 * certificate under ssl_verify_mode 2-3) on a worker that may be busy: 500 ms
 * failed /healthz on a loaded two-core machine with the engine alive.
 * 1.5 s for the whole round trip (one deadline, not one per read) stays
 * inside the kubelet's 2 s readiness timeout. */
#define TLS_PROBE_TIMEOUT_MS 1500
#define PROBE_REUSE_MS     1000
#define ACCEPT_PAUSE_MS    100    /* after accept() ran out of descriptors or memory */
#define DEFER_ACCEPT_S     2      /* a silent connection is accepted after this (and SYN-ACK retries) */
#define HELLO_GRACE_MS     250    /* an answered ClientHello keeps its slot this long: the client's round trip */

enum hconn_phase { HANDSHAKE, IDLE, HEAD, WRITE };

struct hconn {
    int      fd;                 /* -1: free slot */
    SSL     *ssl;                /* -o metrics_tls; NULL: plain HTTP */
    int64_t  hello_answered_ms;  /* when tls_hello_answered turned true; 0: not yet, or plain HTTP */
    enum hconn_phase phase;
    int64_t  deadline_ms;
    int64_t  idle_since_ms;
    uint64_t idle_seq;           /* order of starting to wait for a request: the lowest gives way first */
    int      requests;
    bool     close_after;        /* close once the response is sent */
    char     in[HTTP_HEAD_MAX];
    size_t   in_len;
    char    *out;
    size_t   out_len, out_sent;
};

static struct {
    bool      running;
    pthread_t thread;
    int       wake_fd;
    int       listen_fds[LISTEN_MAX];
    int       nlisten;
    struct hconn conns[HTTP_CONNS_MAX];
    struct engine_probe_target target;
    bool      have_target;
    bool      tls;               /* -o metrics_tls */
    uint64_t  idle_seq;
    int64_t   accept_paused_until_ms;
    int64_t   probed_at_ms;      /* 0: never */
    bool      probe_ok;
    char      probe_why[200];
} srv = { .wake_fd = -1 };

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ------------------------------------------------------------ engine probe */

static bool engine_answers(const char **why)
{
    int64_t now = now_ms();
    if (!srv.probed_at_ms || now - srv.probed_at_ms >= PROBE_REUSE_MS) {
        const char *request, *expect;
        engine_probe_words(&srv.target, &request, &expect);
        if (srv.have_target && tls_enabled())   /* -Z: the port speaks nothing but TLS */
            srv.probe_ok = tls_probe(srv.target.host, srv.target.port, TLS_PROBE_TIMEOUT_MS, request, expect,
                                     srv.probe_why, sizeof srv.probe_why);
        else if (srv.have_target)
            srv.probe_ok = engine_probe(&srv.target, PROBE_TIMEOUT_MS, srv.probe_why, sizeof srv.probe_why);
        else
            snprintf(srv.probe_why, sizeof srv.probe_why, "no address to reach the memcached port");
        /* the reply is quoted in an HTTP body: keep it one printable line */
        for (char *p = srv.probe_why; *p; p++)
            if ((unsigned char)*p < 0x20 || (unsigned char)*p >= 0x7f) *p = '?';
        srv.probed_at_ms = now_ms();
    }
    *why = srv.probe_why;
    return srv.probe_ok;
}

/* -------------------------------------------------------------- responses */

static const char *status_text(int status)
{
    switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default:  return "Error";
    }
}

/* Unread input would make close() send an RST that can destroy a response
 * before the client reads it: end our side, drain what came, then close. */
static void close_lingering(int fd)
{
    shutdown(fd, SHUT_WR);
    char scratch[4096];
    for (int i = 0; i < 16 && recv(fd, scratch, sizeof scratch, MSG_DONTWAIT) > 0; i++) { }
    close(fd);
}

static void hconn_close(struct hconn *c)
{
    if (c->ssl) tls_close(c->ssl);
    if (c->fd >= 0) close(c->fd);
    free(c->out);
    c->fd = -1;
    c->ssl = NULL;
    c->out = NULL;
    c->out_len = c->out_sent = c->in_len = 0;
}

/* Queues one response; without memory for it the connection is closed. */
static void respond(struct hconn *c, int status, const char *ctype, const char *body, size_t body_len,
                    bool send_body, bool keep_alive)
{
    char head[512];
    int hn = snprintf(head, sizeof head,
                      "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                      "Cache-Control: no-store\r\n%sConnection: %s\r\n\r\n",
                      status, status_text(status), ctype, body_len,
                      status == 405 ? "Allow: GET, HEAD\r\n" : "", keep_alive ? "keep-alive" : "close");
    size_t total = (size_t)hn + (send_body ? body_len : 0);
    char *out = malloc(total);
    if (!out) { hconn_close(c); return; }
    memcpy(out, head, (size_t)hn);
    if (send_body) memcpy(out + hn, body, body_len);
    c->out = out;
    c->out_len = total;
    c->out_sent = 0;
    c->close_after = !keep_alive;
    c->phase = WRITE;
    c->deadline_ms = now_ms() + WRITE_TIMEOUT_MS;
}

static void respond_text(struct hconn *c, int status, const char *line, bool send_body, bool keep_alive)
{
    char body[256];
    int n = snprintf(body, sizeof body, "%s\n", line);
    if (n < 0 || (size_t)n >= sizeof body) n = (int)sizeof body - 1;
    respond(c, status, "text/plain; charset=utf-8", body, (size_t)n, send_body, keep_alive);
}

static void serve_metrics(struct hconn *c, bool send_body, bool keep_alive)
{
    const char *why;
    bool up = engine_answers(&why);
    struct metrics_text text = { 0 };
    if (!metrics_render(&text, up)) {
        respond_text(c, 500, "cannot render metrics: out of memory or too large", send_body, false);
        return;
    }
    respond(c, 200, "text/plain; version=0.0.4; charset=utf-8", text.buf, text.len, send_body, keep_alive);
    metrics_text_free(&text);
}

static void serve(struct hconn *c, const struct http_request *req)
{
    bool body = req->method != HTTP_HEAD;
    bool keep = req->keep_alive && c->requests < REQUESTS_PER_CONN;
    bool is_metrics = req->path_len == 8 && !memcmp(req->path, "/metrics", 8);
    bool is_healthz = req->path_len == 8 && !memcmp(req->path, "/healthz", 8);
    if (req->method == HTTP_OTHER) {
        respond_text(c, 405, "only GET and HEAD are served", body, keep);
    } else if (is_metrics) {
        serve_metrics(c, body, keep);
    } else if (is_healthz) {
        const char *why;
        if (engine_answers(&why)) respond_text(c, 200, "OK", body, keep);
        else respond_text(c, 503, why, body, keep);
    } else {
        respond_text(c, 404, "not found: the endpoints are /metrics and /healthz", body, keep);
    }
}

/* Answers the next request in the input, if it is all there. */
static void handle_input(struct hconn *c)
{
    if (c->fd < 0 || c->out || c->in_len == 0) return;
    struct http_request req;
    enum http_parse_result r = http_parse_request(c->in, c->in_len, &req);
    if (r == HTTP_INCOMPLETE) {
        if (c->phase == IDLE) {
            c->phase = HEAD;
            c->deadline_ms = now_ms() + HEAD_TIMEOUT_MS;
        }
        return;
    }
    if (r != HTTP_PARSED) {
        int status = r == HTTP_HEAD_TOO_LARGE ? 431 : r == HTTP_BAD_VERSION ? 505 : 400;
        c->in_len = 0;                          /* the rest cannot be framed: close after */
        respond_text(c, status, req.reason, true, false);
        return;
    }
    c->requests++;
    serve(c, &req);                             /* req points into c->in: consume after */
    if (c->fd < 0) return;
    memmove(c->in, c->in + req.head_len, c->in_len - req.head_len);
    c->in_len -= req.head_len;
}

/* send() and recv(), through OpenSSL on an HTTPS connection: -1 with
 * EAGAIN also when the handshake waits for the socket. */
static ssize_t conn_send(struct hconn *c, const void *buf, size_t len)
{
    if (c->ssl) return tls_write(c->ssl, buf, len);
    return send(c->fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
}

static ssize_t conn_recv(struct hconn *c, void *buf, size_t len)
{
    if (c->ssl) return tls_read(c->ssl, buf, len);
    return recv(c->fd, buf, len, MSG_DONTWAIT);
}

/* Sends what is queued; after a whole response, goes on with the next. */
static void flush_output(struct hconn *c)
{
    while (c->out_sent < c->out_len) {
        ssize_t n = conn_send(c, c->out + c->out_sent, c->out_len - c->out_sent);
        if (n > 0) { c->out_sent += (size_t)n; continue; }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        hconn_close(c);
        return;
    }
    free(c->out);
    c->out = NULL;
    c->out_len = c->out_sent = 0;
    if (c->close_after) {
        close_lingering(c->fd);
        c->fd = -1;
        hconn_close(c);
        return;
    }
    c->phase = IDLE;
    c->idle_since_ms = now_ms();
    c->idle_seq = ++srv.idle_seq;
    c->deadline_ms = c->idle_since_ms + IDLE_TIMEOUT_MS;
    handle_input(c);                            /* a pipelined request */
}

static void read_input(struct hconn *c)
{
    size_t room = sizeof c->in - c->in_len;
    if (room == 0) { handle_input(c); return; }   /* a full buffer: 431 */
    ssize_t n = conn_recv(c, c->in + c->in_len, room);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        hconn_close(c);   /* a plaintext request on an HTTPS port ends here: no TLS, no answer */
        return;
    }
    if (n > 0) c->in_len += (size_t)n;
    if (c->phase == HANDSHAKE) {
        if (tls_handshake_done(c->ssl)) {
            c->phase = IDLE;
            c->deadline_ms = now_ms() + IDLE_TIMEOUT_MS;
            if (!c->hello_answered_ms) c->hello_answered_ms = now_ms();
        } else if (!c->hello_answered_ms && tls_hello_answered(c->ssl)) {
            c->hello_answered_ms = now_ms();
        }
    }
    handle_input(c);
    if (c->fd >= 0 && c->out) flush_output(c);   /* most responses go at once */
}

static void expire(struct hconn *c, int64_t now)
{
    if (c->fd < 0 || now < c->deadline_ms) return;
    if (c->phase == HEAD) {   /* a handshake that overran it is closed: no TLS to say 408 in */
        c->in_len = 0;
        respond_text(c, 408, "request head not received in time", true, false);
        if (c->fd >= 0) flush_output(c);
    } else {
        hconn_close(c);
    }
}

/* ------------------------------------------------------------------ accept */

/* A full table gives way to the connection that has waited longest for a
 * request: idle, or holding an incomplete head. Clients that connect and
 * send one byte over and over then only push each other out, and a newcomer
 * that sends its whole request at once (a probe, a scrape) is answered
 * before sixteen later arrivals could take its slot. Ordering idle
 * connections before partial heads would hand the attackers the newcomer,
 * which is idle until its request arrives. Only when every slot is writing
 * a response (clients that pipeline requests and never read) does the one
 * writing longest give way, so no client can hold the port for the write
 * deadline either. A connection accepted in the current batch (its seq above
 * batch_seq) never gives way to a later one of the same batch: when this
 * thread was descheduled, the backlog can hold a newcomer and sixteen
 * reconnects behind it, and the newcomer must be read once before they may
 * push it out. With -o metrics_tls a young connection (see the top of the
 * file) never gives way. NULL: only such connections are
 * left; stop accepting, and when they are all young, *retry_at
 * says when the first comes of age (0: the next round). The
 * slot is only chosen here; its holder is closed by take_slot once there is
 * a newcomer to give it to. */
static struct hconn *pick_slot(uint64_t batch_seq, int64_t now, int64_t *retry_at)
{
    struct hconn *waiting = NULL, *writing = NULL;
    int64_t young_until = 0;
    bool this_batch = false;
    for (int i = 0; i < HTTP_CONNS_MAX; i++) {
        struct hconn *c = &srv.conns[i];
        if (c->fd < 0) return c;
        if ((c->phase == IDLE || c->phase == HANDSHAKE) && c->idle_seq > batch_seq) { this_batch = true; continue; }
        if (c->ssl && c->requests == 0 && c->hello_answered_ms && now < c->hello_answered_ms + HELLO_GRACE_MS) {
            int64_t due = c->hello_answered_ms + HELLO_GRACE_MS;
            if (!young_until || due < young_until) young_until = due;
            continue;
        }
        if (c->phase != WRITE) {
            if (!waiting || c->idle_seq < waiting->idle_seq) waiting = c;
        } else if (!writing || c->deadline_ms < writing->deadline_ms) {
            writing = c;
        }
    }
    *retry_at = this_batch ? 0 : young_until;
    return waiting ? waiting : writing;
}

static void take_slot(struct hconn *victim)
{
    if (victim->fd < 0) return;
    close_lingering(victim->fd);   /* bytes of its head not read yet must not turn into an RST */
    victim->fd = -1;
    hconn_close(victim);
}

static void http_accept(int lfd)
{
    uint64_t batch_seq = srv.idle_seq;
    for (int i = 0; i < HTTP_CONNS_MAX; i++) {
        int64_t retry_at;
        struct hconn *c = pick_slot(batch_seq, now_ms(), &retry_at);
        if (!c) {                        /* the rest wait in the backlog for the next round */
            /* young handshakes only: the listener stays readable, and
             * polling it before the first comes of age would spin */
            if (retry_at) srv.accept_paused_until_ms = retry_at;
            return;
        }
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            /* out of descriptors: the listener stays readable, and polling it
             * again at once would spin on the CPU a worker shares */
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
                srv.accept_paused_until_ms = now_ms() + ACCEPT_PAUSE_MS;
            return;
        }
        take_slot(c);
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        *c = (struct hconn){ .fd = fd, .phase = IDLE, .idle_since_ms = now_ms(), .idle_seq = ++srv.idle_seq };
        c->deadline_ms = c->idle_since_ms + IDLE_TIMEOUT_MS;
        if (srv.tls) {
            c->ssl = tls_accept_without_client_cert(fd);
            if (!c->ssl) { hconn_close(c); continue; }   /* no memory for it: the client sees a close */
            c->phase = HANDSHAKE;
            c->deadline_ms = c->idle_since_ms + HEAD_TIMEOUT_MS;
        }
        read_input(c);                   /* a probe's request is usually here already: answer it now */
    }
}

/* -------------------------------------------------------------------- loop */

static void *server_main(void *arg)
{
    (void)arg;
    pthread_setname_np(pthread_self(), "cachet-metrics");
    struct pollfd pfd[1 + LISTEN_MAX + HTTP_CONNS_MAX];
    struct hconn *who[HTTP_CONNS_MAX];
    bool pending[HTTP_CONNS_MAX];
    for (;;) {
        int n = 0, nc = 0;
        int64_t now = now_ms(), next = now + 1000;
        bool accepting = now >= srv.accept_paused_until_ms;
        if (!accepting) next = srv.accept_paused_until_ms;
        pfd[n++] = (struct pollfd){ .fd = srv.wake_fd, .events = POLLIN };
        for (int i = 0; i < srv.nlisten; i++)
            pfd[n++] = (struct pollfd){ .fd = srv.listen_fds[i], .events = accepting ? POLLIN : 0 };
        for (int i = 0; i < HTTP_CONNS_MAX; i++) {
            struct hconn *c = &srv.conns[i];
            if (c->fd < 0) continue;
            bool room = c->in_len < sizeof c->in;
            short ev = c->out ? POLLOUT : (room ? POLLIN : 0);
            if (c->ssl && c->out && tls_wants_read(c->ssl)) ev = POLLIN;         /* a send waiting on a record */
            else if (c->ssl && !c->out && tls_wants_write(c->ssl)) ev = POLLOUT; /* the handshake's flight */
            /* records OpenSSL read ahead: poll() cannot announce them */
            pending[nc] = c->ssl && !c->out && room && tls_pending(c->ssl);
            if (pending[nc]) next = now;
            pfd[n++] = (struct pollfd){ .fd = c->fd, .events = ev };
            who[nc++] = c;
            if (c->deadline_ms < next) next = c->deadline_ms;
        }
        int rc = poll(pfd, (nfds_t)n, next > now ? (int)(next - now) : 0);
        if (rc < 0 && errno != EINTR) break;
        if (pfd[0].revents) break;                         /* metrics_server_stop() */
        /* Connections first, then the listeners: a probe accepted last round
         * whose request has arrived since must be read before this round's
         * arrivals may push it out. */
        for (int i = 0; i < nc; i++) {
            struct hconn *c = who[i];
            short re = pfd[1 + srv.nlisten + i].revents;
            if (c->fd != pfd[1 + srv.nlisten + i].fd) continue;   /* closed this round */
            if (!re && !pending[i]) continue;
            if (c->out) flush_output(c);
            else read_input(c);
        }
        for (int i = 0; i < srv.nlisten; i++)
            if (pfd[1 + i].revents & POLLIN) http_accept(srv.listen_fds[i]);
        now = now_ms();
        for (int i = 0; i < HTTP_CONNS_MAX; i++) expire(&srv.conns[i], now);
    }
    for (int i = 0; i < HTTP_CONNS_MAX; i++)
        if (srv.conns[i].fd >= 0) hconn_close(&srv.conns[i]);
    return NULL;
}

/* ------------------------------------------------------------- start, stop */

static void close_listeners(void)
{
    for (int i = 0; i < srv.nlisten; i++) close(srv.listen_fds[i]);
    srv.nlisten = 0;
}

/* Binds port on every address of the -l list ("" = every interface). */
static int bind_listeners(const char *listen_list, int port)
{
    char list[512];
    snprintf(list, sizeof list, "%s", listen_list);
    char portstr[16], *save = NULL;
    snprintf(portstr, sizeof portstr, "%d", port);
    char *entry = strtok_r(list, ",", &save);
    do {
        char *host = entry;
        if (host && host[0] == '[') {
            host++;
            char *rb = strchr(host, ']');
            if (rb) *rb = '\0';
        }
        struct addrinfo hints = { .ai_socktype = SOCK_STREAM,
                                  .ai_flags = AI_PASSIVE | AI_NUMERICSERV | (host ? 0 : AI_ADDRCONFIG) }, *res;
        int gai = getaddrinfo(host, portstr, &hints, &res);
        if (gai) {
            fprintf(stderr, "cachetd: metrics port: cannot resolve '%s': %s\n", host ? host : "*", gai_strerror(gai));
            return -1;
        }
        for (struct addrinfo *ai = res; ai && srv.nlisten < LISTEN_MAX; ai = ai->ai_next) {
            int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
            if (fd < 0) continue;
            int one = 1;
            int defer_s = DEFER_ACCEPT_S;
            setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
            setsockopt(fd, IPPROTO_TCP, TCP_DEFER_ACCEPT, &defer_s, sizeof defer_s);
            if (ai->ai_family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
            if (bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, SOMAXCONN) < 0) {
                int e = errno;
                close(fd);
                if (e == EAFNOSUPPORT || e == EADDRNOTAVAIL) continue;
                fprintf(stderr, "cachetd: cannot bind metrics port %d on %s: %s\n", port, host ? host : "*", strerror(e));
                freeaddrinfo(res);
                return -1;
            }
            srv.listen_fds[srv.nlisten++] = fd;
        }
        freeaddrinfo(res);
    } while (entry && (entry = strtok_r(NULL, ",", &save)));
    if (!srv.nlisten) {
        fprintf(stderr, "cachetd: metrics port %d: no address to listen on\n", port);
        return -1;
    }
    return 0;
}

int metrics_server_start(const struct metrics_server_config *cfg)
{
    if (srv.running || cfg->port <= 0) return 0;
    for (int i = 0; i < HTTP_CONNS_MAX; i++) srv.conns[i] = (struct hconn){ .fd = -1 };
    srv.have_target = engine_probe_target_from(cfg->listen, cfg->engine_port, &srv.target);
    srv.target.authfile = cfg->authfile;
    srv.tls = cfg->tls;
    srv.probed_at_ms = 0;
    if (bind_listeners(cfg->listen, cfg->port) != 0) { close_listeners(); return -1; }
    srv.wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    int rc = srv.wake_fd < 0 ? errno : pthread_create(&srv.thread, NULL, server_main, NULL);
    if (rc) {
        fprintf(stderr, "cachetd: cannot start the metrics thread: %s\n", strerror(rc));
        if (srv.wake_fd >= 0) close(srv.wake_fd);
        srv.wake_fd = -1;
        close_listeners();
        return -1;
    }
    srv.running = true;
    if (cfg->verbose)
        fprintf(stderr, "cachetd: metrics on port %d (GET /metrics, /healthz%s)\n", cfg->port,
                cfg->tls ? ", HTTPS" : "");
    return 0;
}

void metrics_server_stop(void)
{
    if (!srv.running) return;
    uint64_t one = 1;
    ssize_t ignored = write(srv.wake_fd, &one, sizeof one);
    (void)ignored;
    pthread_join(srv.thread, NULL);
    close(srv.wake_fd);
    srv.wake_fd = -1;
    close_listeners();
    srv.running = false;
}
