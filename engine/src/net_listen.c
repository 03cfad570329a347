/*
 * net_listen.c - the listening sockets and the accept path.
 *
 * Why every worker owns its own listening socket(s), all bound to the same
 * port with SO_REUSEPORT: the kernel spreads new connections over the
 * workers, each accept happens on the CPU that will serve the connection,
 * and no acceptor thread has to hand a descriptor over (no cross-thread
 * queue, no wake-up per connection). The cost is the kernel's hash-based
 * spread (uneven with a handful of connections); with the workloads we
 * serve (tens to thousands of long-lived client connections) that is the
 * better trade. Because SO_REUSEPORT would also let a second cachetd
 * silently share the port, we first bind a plain socket to prove the port
 * is free, so "address in use" is still an error. A unix socket (-s)
 * cannot be shared that way: its one listening socket is in every worker's
 * epoll set with EPOLLEXCLUSIVE, so a new connection wakes one worker.
 *
 * A client beyond -c gets memcached's "ERROR Too many open connections"
 * (not under -Z, where it would be plaintext in a TLS stream) and is
 * closed (rejected_connections), or with -o no_maxconns_fast waits
 * in the backlog until a connection closes; an accepted one is handed to
 * the connection state machine (net_conn.c). With -o conn_placement the
 * accepting worker may instead queue it for the worker net_place.c picks
 * (the one on the CPU that received it): a handoff, under that worker's
 * handoff lock, then a write to its wake eventfd.
 *
 * Concurrency: server_listen_all runs on the main thread before the workers
 * start (listen_unix changes the process umask); accepts run on the worker
 * whose loop the socket is in; the -s socket is closed by the main thread
 * after every worker was joined.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "ae.h"
#include "net.h"
#include "net_internal.h"
#include "server.h"
#include "tls.h"

static int unix_listen_fd = -1;   /* -s: shared by every worker's loop */

/* ------------------------------------------------------------------ reject */

static void reject_conn(int fd, const struct sockaddr_storage *peer)
{
    static const char msg[] = "ERROR Too many open connections\r\n";
    /* -Z: the TCP port speaks TLS, where this line would be plaintext in
     * what the client reads as records; just close */
    if (peer->ss_family == AF_UNIX || !tls_enabled()) {
        ssize_t ignored = send(fd, msg, sizeof(msg) - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        (void)ignored;
    }
    close(fd);
    __atomic_add_fetch(&rejected_conns_global, 1, __ATOMIC_RELAXED);
}

static uint64_t monotonic_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void accept_ready(struct ae_loop *l, int lfd, void *data, int mask);

static void watch_listeners(struct worker *w, bool on)
{
    for (int i = 0; i < w->nlisten; i++) {
        if (on) ae_add(w->loop, w->listen_fds[i], AE_READABLE, accept_ready, w);
        else ae_del(w->loop, w->listen_fds[i], AE_READABLE);
    }
    if (unix_listen_fd >= 0) {
        if (on) ae_add(w->loop, unix_listen_fd, AE_READABLE | AE_EXCLUSIVE, accept_ready, w);
        else ae_del(w->loop, unix_listen_fd, AE_READABLE);
    }
}

/* Out of file descriptors (EMFILE, ENFILE): the connection stays queued and
 * the listener readable, so accepting again at once would spin the worker
 * and flood the log. Like memcached, stop accepting for a while: this
 * worker's listeners are unwatched until net_listen_resume_due() (one loop
 * turn at most ACCEPT_PAUSE_MS later); the queued clients wait meanwhile. */
static void accept_pause(struct worker *w, int err)
{
    if (w->accept_paused_ms) return;
    watch_listeners(w, false);
    w->accept_paused_ms = monotonic_ms();
    if (err)
        fprintf(stderr, "cachetd: accept: %s; worker %d stops accepting for %d ms\n",
                strerror(err), w->id, ACCEPT_PAUSE_MS);
}

int net_listen_resume_due(struct worker *w)
{
    if (!w->accept_paused_ms) return -1;
    uint64_t waited = monotonic_ms() - w->accept_paused_ms;
    if (waited < ACCEPT_PAUSE_MS) return (int)(ACCEPT_PAUSE_MS - waited);
    w->accept_paused_ms = 0;
    watch_listeners(w, true);
    return -1;
}

/* ---------------------------------------------------------------- handoff */

/* -o conn_placement: the accepting worker queues the connection for the
 * worker placement chose and wakes it; false when its queue is full (the
 * acceptor serves it then). */
static bool handoff_push(struct worker *to, int fd)
{
    struct conn_handoff *h = &to->handoff;
    pthread_mutex_lock(&h->lock);
    bool room = h->count < HANDOFF_SLOTS;
    if (room) h->fds[(h->head + h->count++) % HANDOFF_SLOTS] = fd;
    pthread_mutex_unlock(&h->lock);
    if (room) {
        uint64_t one = 1;
        ssize_t ignored = write(to->wake_fd, &one, sizeof one);
        (void)ignored;
    }
    return room;
}

void net_listen_take_handoffs(struct worker *w)
{
    int fds[HANDOFF_SLOTS], n = 0;
    struct conn_handoff *h = &w->handoff;
    pthread_mutex_lock(&h->lock);
    while (h->count) {
        fds[n++] = h->fds[h->head];
        h->head = (h->head + 1) % HANDOFF_SLOTS;
        h->count--;
    }
    pthread_mutex_unlock(&h->lock);
    for (int i = 0; i < n; i++) {
        struct sockaddr_storage ss = { 0 };
        socklen_t sl = sizeof ss;
        /* a worker that is stopping takes no new connection: closed, as the
         * listener it would have come through is */
        if (w->stopping || getpeername(fds[i], (struct sockaddr *)&ss, &sl) != 0 || !conn_open(w, fds[i], &ss)) {
            __atomic_sub_fetch(&curr_conns_global, 1, __ATOMIC_RELAXED);
            if (w->stopping) close(fds[i]);
            else reject_conn(fds[i], &ss);
        }
    }
}

/* ------------------------------------------------------------------ accept */

/* -o no_maxconns_fast: a connection's place under -c is taken before the
 * accept, never after it. Every worker accepts from its own listener, so a
 * look at the count followed by an accept lets two workers both see room
 * for one and the second answer ERROR, the very error the option promises
 * not to send (make check hit it on a busy machine). */
static bool reserve_conn_under_limit(void)
{
    uint32_t n = __atomic_load_n(&curr_conns_global, __ATOMIC_RELAXED);
    do {
        if (n >= (uint32_t)settings.maxconns) return false;
    } while (!__atomic_compare_exchange_n(&curr_conns_global, &n, n + 1, true,
                                          __ATOMIC_RELAXED, __ATOMIC_RELAXED));
    return true;
}

static void accept_ready(struct ae_loop *l, int lfd, void *data, int mask)
{
    struct worker *w = data;
    for (int i = 0; i < 64; i++) {
        /* -o no_maxconns_fast: memcached accepts until it runs out of
         * descriptors, then stops accepting and the clients wait in the
         * backlog. Here -c is what the memory formula holds, so at -c the
         * clients wait (no error, nothing closed) and the listeners are
         * looked at again ACCEPT_PAUSE_MS later. */
        bool reserved = settings.no_maxconns_fast;
        if (reserved && !reserve_conn_under_limit()) {
            accept_pause(w, 0);
            return;
        }
        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        int fd = accept4(lfd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (reserved) __atomic_sub_fetch(&curr_conns_global, 1, __ATOMIC_RELAXED);
            if (errno == EINTR) continue;
            if (errno == EMFILE || errno == ENFILE) accept_pause(w, errno);
            return;
        }
        uint32_t now = reserved ? 0 : __atomic_add_fetch(&curr_conns_global, 1, __ATOMIC_RELAXED);
        if (now > (uint32_t)settings.maxconns || fd >= l->setsize) {
            __atomic_sub_fetch(&curr_conns_global, 1, __ATOMIC_RELAXED);
            reject_conn(fd, &ss);
            continue;
        }
        if (settings.conn_placement != PLACE_OFF && ss.ss_family != AF_UNIX) {
            int kind;
            struct worker *to = net_place_pick(w, fd, &kind);
            bool handed = to != w && handoff_push(to, fd);
            if (to != w && !handed) kind = PLACED_FALLBACK;
            __atomic_add_fetch(&placed_conns_global[kind], 1, __ATOMIC_RELAXED);
            if (handed) continue;
        }
        /* a failed allocation refuses this one connection, nothing more */
        if (!conn_open(w, fd, &ss)) {
            __atomic_sub_fetch(&curr_conns_global, 1, __ATOMIC_RELAXED);
            reject_conn(fd, &ss);
        }
    }
}

/* ------------------------------------------------------------------ listen */
static int make_listener(const struct addrinfo *ai, int port, bool reuseport)
{
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (reuseport) setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
    if (ai->ai_family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    /* accepted sockets are born with the listener's buffer sizes; conn_open
     * sets them again on each (and on unix sockets) */
    net_fix_socket_buffers(fd);
    struct sockaddr_storage ss;
    memcpy(&ss, ai->ai_addr, ai->ai_addrlen);
    if (ss.ss_family == AF_INET) ((struct sockaddr_in *)&ss)->sin_port = htons((uint16_t)port);
    else ((struct sockaddr_in6 *)&ss)->sin6_port = htons((uint16_t)port);
    if (bind(fd, (struct sockaddr *)&ss, ai->ai_addrlen) < 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

static int bound_port(int fd)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) < 0) return -1;
    return ss.ss_family == AF_INET ? ntohs(((struct sockaddr_in *)&ss)->sin_port)
                                   : ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
}

/* -s PATH, as memcached: a socket file left by an earlier run is replaced,
 * the file gets the permissions of -a (umask ~mask while binding), and no
 * TCP port is opened. Runs before any thread exists (umask is per process). */
static int listen_unix(void)
{
    const char *path = settings.socketpath;
    struct stat st;
    if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode)) unlink(path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        fprintf(stderr, "cachetd: cannot create unix socket: %s\n", strerror(errno));
        return -1;
    }
    struct sockaddr_un addr;
    memset(&addr, 0, sizeof(addr));
    addr.sun_family = AF_UNIX;
    snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", path);
    mode_t old = umask((mode_t)~(settings.access_mask & 0777));
    int rc = bind(fd, (struct sockaddr *)&addr, sizeof(addr));
    int e = errno;
    umask(old);
    if (rc < 0 || listen(fd, settings.backlog) < 0) {
        if (rc == 0) e = errno;
        fprintf(stderr, "cachetd: cannot listen on unix socket %s: %s\n", path, strerror(e));
        close(fd);
        return -1;
    }
    unix_listen_fd = fd;
    return 0;
}

int server_listen_all(void)
{
    if (net_place_init() != 0) return -1;
    if (settings.socketpath[0]) return listen_unix();
    char list[sizeof(settings.listen)];
    snprintf(list, sizeof(list), "%s", settings.listen[0] ? settings.listen : "");
    int port = settings.port;
    int bound_any = 0;
    char *save = NULL;
    char *host = settings.listen[0] ? strtok_r(list, ",", &save) : NULL;
    do {
        char hostbuf[256];
        const char *h = host;
        if (h && h[0] == '[') {
            snprintf(hostbuf, sizeof(hostbuf), "%s", h + 1);
            char *rb = strchr(hostbuf, ']');
            if (rb) *rb = '\0';
            h = hostbuf;
        }
        struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                                  .ai_flags = AI_PASSIVE | (h ? 0 : AI_ADDRCONFIG) };
        struct addrinfo *res;
        int rc = getaddrinfo(h, "0", &hints, &res);
        if (rc) {
            fprintf(stderr, "cachetd: cannot resolve listen address '%s': %s\n", h ? h : "*", gai_strerror(rc));
            return -1;
        }
        for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
            /* prove the port is ours before sharing it with SO_REUSEPORT */
            int probe = make_listener(ai, port, false);
            if (probe < 0) {
                if (errno == EAFNOSUPPORT || errno == EADDRNOTAVAIL) continue;
                fprintf(stderr, "cachetd: cannot bind %s port %d: %s\n", h ? h : "*", port, strerror(errno));
                freeaddrinfo(res);
                return -1;
            }
            if (port == 0) port = bound_port(probe);
            close(probe);
            for (int i = 0; i < num_workers; i++) {
                struct worker *w = &workers[i];
                if (w->nlisten >= LISTEN_FDS_PER_WORKER) {
                    fprintf(stderr, "cachetd: too many listen addresses: at most %d (-l %s)\n",
                            LISTEN_FDS_PER_WORKER, settings.listen);
                    freeaddrinfo(res);
                    return -1;
                }
                int fd = make_listener(ai, port, true);
                if (fd < 0 || listen(fd, settings.backlog) < 0) {
                    fprintf(stderr, "cachetd: cannot listen on %s port %d: %s\n", h ? h : "*", port, strerror(errno));
                    freeaddrinfo(res);
                    return -1;
                }
                w->listen_fds[w->nlisten++] = fd;
            }
            bound_any++;
        }
        freeaddrinfo(res);
    } while (host && (host = strtok_r(NULL, ",", &save)));
    if (!bound_any) {
        fprintf(stderr, "cachetd: no address to listen on\n");
        return -1;
    }
    settings.port = port;
    return 0;
}


_Static_assert(sizeof(((struct worker *)0)->listen_fds) / sizeof(int) == LISTEN_FDS_PER_WORKER,
               "the event table is sized for LISTEN_FDS_PER_WORKER listeners per worker");

/* A listener the loop does not watch is never accepted from: fatal. */
int net_listen_attach(struct worker *w)
{
    for (int i = 0; i < w->nlisten; i++)
        if (ae_add(w->loop, w->listen_fds[i], AE_READABLE, accept_ready, w) < 0) {
            fprintf(stderr, "cachetd: worker %d cannot watch listening socket fd %d (event table of %d): %s\n",
                    w->id, w->listen_fds[i], w->loop->setsize, strerror(errno));
            return -1;
        }
    if (unix_listen_fd >= 0 &&
        ae_add(w->loop, unix_listen_fd, AE_READABLE | AE_EXCLUSIVE, accept_ready, w) < 0) {
        fprintf(stderr, "cachetd: worker %d cannot watch the unix socket fd %d (event table of %d): %s\n",
                w->id, unix_listen_fd, w->loop->setsize, strerror(errno));
        return -1;
    }
    return 0;
}

void net_listen_detach(struct worker *w)
{
    for (int i = 0; i < w->nlisten; i++) {
        ae_del(w->loop, w->listen_fds[i], AE_READABLE);
        close(w->listen_fds[i]);
    }
    w->nlisten = 0;
    if (unix_listen_fd >= 0) ae_del(w->loop, unix_listen_fd, AE_READABLE);   /* closed by main */
}

void net_listen_close_shared(void)
{
    if (unix_listen_fd >= 0) close(unix_listen_fd);
}
