/*
 * logger.c - memcached's `watch`: a client connection becomes a stream of
 * log lines (fetches, stores, evictions, deletions, system events) in
 * memcached 1.6's format, "ts=... gid=... type=... key=..." (keys
 * URI-encoded), so operators can find hot keys in production with the tools
 * they use on memcached.
 *
 * Why it is built this way:
 *  - Nobody watching is the normal case, so the request path pays one relaxed
 *    load of g_log_watching (log_wants()) and nothing else.
 *  - A watcher can be slow or stopped; the engine must neither wait for it
 *    nor buffer for it without bound. Each watcher has one ring of
 *    LOG_RING_BYTES, allocated when it starts: a line that does not fit is
 *    dropped and counted, and the next line that fits is preceded by
 *    memcached's "skipped=N". LOG_WATCHERS_MAX watchers at most
 *    (memory_budget.c's "watchers" term); -W refuses them all.
 *  - The watcher's socket leaves its worker (the protocol hands over a dup
 *    of its fd and closes the connection) and belongs to this file's thread,
 *    which sends what the rings hold and closes a watcher whose client went
 *    away; what a watcher sends is read and ignored, as in memcached.
 *
 * Concurrency:
 *  - log_lock guards the watcher table, each ring's head and tail indexes,
 *    its bytes outside [tail, head), and the skipped counts. Event writers
 *    (workers, the storage core's evictors, the page mover) format a line on
 *    their stack, take log_lock only to copy it into the rings, and never
 *    block on a socket. Lock order: any storage lock, then log_lock; nothing
 *    is called under log_lock.
 *  - The sender thread owns the watchers' sockets and frees rings. It reads
 *    [tail, head) of a ring without the lock (writers only write outside
 *    it), then advances tail under the lock.
 *  - g_log_watching is written under log_lock, read anywhere relaxed: a line
 *    emitted just as a watcher arrives or leaves may be missed or dropped,
 *    which watching allows.
 */
#include "logger.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

_Atomic unsigned g_log_watching;

struct watcher {
    int       fd;               /* -1: free */
    unsigned  what;
    char     *ring;             /* LOG_RING_BYTES */
    uint64_t  head, tail;       /* bytes ever written / sent; head - tail <= LOG_RING_BYTES */
    uint64_t  skipped;          /* lines dropped since the last "skipped=N" */
};

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static struct watcher watchers[LOG_WATCHERS_MAX] = {
    [0 ... LOG_WATCHERS_MAX - 1] = { .fd = -1 },
};
static bool      sender_running;
static bool      sender_stop;
static pthread_t sender;
static int       wake_fd = -1;
static _Atomic uint64_t next_gid;
static uint64_t  stat_written, stat_sent, stat_skipped;   /* under log_lock */

/* ------------------------------------------------------------- arguments */

int log_parse_what(const char *args, size_t len, unsigned *what)
{
    /* memcached compares each word with strncmp over the word's length, in
     * this order, so "e" is evictions and "fetch" fetchers */
    static const struct { const char *word; unsigned bit; } words[] = {
        {"rawcmds", LOG_RAWCMDS}, {"evictions", LOG_EVICTIONS}, {"fetchers", LOG_FETCHERS},
        {"mutations", LOG_MUTATIONS}, {"sysevents", LOG_SYSEVENTS}, {"connevents", LOG_CONNEVENTS},
        {"proxyreqs", LOG_PROXYREQS}, {"proxyevents", LOG_PROXYEVENTS}, {"proxyuser", LOG_PROXYUSER},
        {"deletions", LOG_DELETIONS},
    };
    unsigned w = 0;
    size_t i = 0;
    bool any = false;
    while (i < len) {
        while (i < len && args[i] == ' ') i++;
        size_t start = i;
        while (i < len && args[i] != ' ') i++;
        size_t n = i - start;
        if (!n) break;
        any = true;
        size_t k;
        for (k = 0; k < sizeof words / sizeof words[0]; k++)
            if (n <= strlen(words[k].word) && !memcmp(args + start, words[k].word, n)) break;
        if (k == sizeof words / sizeof words[0]) return -1;
        w |= words[k].bit;
    }
    *what = any ? w : LOG_FETCHERS;   /* a bare `watch` is fetchers */
    return 0;
}

/* ----------------------------------------------------------------- rings */

static void ring_put(struct watcher *w, const char *s, size_t n)
{
    size_t at = (size_t)(w->head % LOG_RING_BYTES);
    size_t first = n < LOG_RING_BYTES - at ? n : LOG_RING_BYTES - at;
    memcpy(w->ring + at, s, first);
    memcpy(w->ring, s + first, n - first);
    w->head += n;
}

static void recompute_watching(void)
{
    unsigned m = 0;
    for (int i = 0; i < LOG_WATCHERS_MAX; i++)
        if (watchers[i].fd >= 0) m |= watchers[i].what;
    atomic_store_explicit(&g_log_watching, m, memory_order_relaxed);
}

static void wake_sender(void)
{
    uint64_t one = 1;
    ssize_t ignored = write(wake_fd, &one, sizeof one);
    (void)ignored;
}

/* Copies one whole line into every ring that wants it and has room. */
static void publish(unsigned what, const char *line, size_t n)
{
    bool wake = false;
    pthread_mutex_lock(&log_lock);
    stat_written++;
    for (int i = 0; i < LOG_WATCHERS_MAX; i++) {
        struct watcher *w = &watchers[i];
        if (w->fd < 0 || !(w->what & what)) continue;
        char skip[40];
        size_t sn = w->skipped ? (size_t)snprintf(skip, sizeof skip, "skipped=%llu\n",
                                                  (unsigned long long)w->skipped) : 0;
        if (LOG_RING_BYTES - (w->head - w->tail) < sn + n) {
            w->skipped++;
            stat_skipped++;
            continue;
        }
        if (w->head == w->tail) wake = true;
        if (sn) ring_put(w, skip, sn);
        w->skipped = 0;
        ring_put(w, line, n);
        stat_sent++;
    }
    pthread_mutex_unlock(&log_lock);
    if (wake) wake_sender();
}

/* ---------------------------------------------------------------- events */

/* memcached's uriencode: all but alphanumerics and "-._~" as %XX */
static size_t uri_encode(const char *src, size_t n, char *dst)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t d = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)src[i];
        if ((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
            ch == '-' || ch == '.' || ch == '_' || ch == '~') {
            dst[d++] = (char)ch;
        } else {
            dst[d++] = '%';
            dst[d++] = hex[ch >> 4];
            dst[d++] = hex[ch & 15];
        }
    }
    dst[d] = '\0';
    return d;
}

#define KEY_ENCODED_MAX (250 * 3 + 1)
#define LINE_MAX_BYTES  (KEY_ENCODED_MAX + 400)

/* "ts=SEC.USEC gid=N " (memcached prints the microseconds unpadded, "%d";
 * cachetd pads them to six digits so that the number reads right) */
static int line_prefix(char *buf, size_t cap)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t gid = atomic_fetch_add_explicit(&next_gid, 1, memory_order_relaxed) + 1;
    return snprintf(buf, cap, "ts=%lld.%06ld gid=%llu ", (long long)ts.tv_sec, ts.tv_nsec / 1000,
                    (unsigned long long)gid);
}

static void emit(unsigned what, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void emit(unsigned what, const char *fmt, ...)
{
    char line[LINE_MAX_BYTES];
    int p = line_prefix(line, sizeof line);
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line + p, sizeof line - (size_t)p, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    size_t len = (size_t)p + (size_t)n;
    if (len >= sizeof line) len = sizeof line - 1;   /* cannot happen: keys are at most 250 bytes */
    line[len - 1] = '\n';
    publish(what, line, len);
}

void log_item_get(const char *key, size_t nkey, enum log_get_status status, unsigned clsid, int cfd,
                  uint32_t nbytes)
{
    static const char *const names[] = { "not_found", "found", "flushed", "expired" };
    char k[KEY_ENCODED_MAX];
    uri_encode(key, nkey, k);
    emit(LOG_FETCHERS, "type=item_get key=%s status=%s clsid=%u cfd=%d size=%u\n",
         k, names[status], clsid, cfd, nbytes);
}

void log_item_store(const char *key, size_t nkey, const char *status, const char *cmd, uint32_t ttl,
                    unsigned clsid, int cfd, uint32_t nbytes)
{
    char k[KEY_ENCODED_MAX];
    uri_encode(key, nkey, k);
    emit(LOG_MUTATIONS, "type=item_store key=%s status=%s cmd=%s ttl=%u clsid=%u cfd=%d size=%u\n",
         k, status, cmd, ttl, clsid, cfd, nbytes);
}

void log_item_deleted(const char *key, size_t nkey, const char *cmd, unsigned clsid, uint32_t nbytes)
{
    char k[KEY_ENCODED_MAX];
    uri_encode(key, nkey, k);
    emit(LOG_DELETIONS, "type=deleted key=%s cmd=%s clsid=%u size=%u\n", k, cmd, clsid, nbytes);
}

void log_eviction(const char *key, size_t nkey, bool fetched, long long ttl, unsigned last_access,
                  unsigned clsid, uint32_t nbytes)
{
    char k[KEY_ENCODED_MAX];
    uri_encode(key, nkey, k);
    emit(LOG_EVICTIONS, "type=eviction key=%s fetch=%s ttl=%lld la=%u clsid=%u size=%u\n",
         k, fetched ? "yes" : "no", ttl, last_access, clsid, nbytes);
}

void log_sysevent(const char *fmt, ...)
{
    char body[400];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(body, sizeof body, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    emit(LOG_SYSEVENTS, "%s\n", body);
}

/* ---------------------------------------------------------------- sender */

static void drop_watcher(struct watcher *w)
{
    pthread_mutex_lock(&log_lock);
    int fd = w->fd;
    char *ring = w->ring;
    w->fd = -1;
    w->ring = NULL;
    w->head = w->tail = w->skipped = 0;
    recompute_watching();
    pthread_mutex_unlock(&log_lock);
    close(fd);
    free(ring);
}

/* Sends what w's ring holds until the socket is full. False: gone. */
static bool send_ring(struct watcher *w)
{
    for (;;) {
        pthread_mutex_lock(&log_lock);
        uint64_t head = w->head, tail = w->tail;
        pthread_mutex_unlock(&log_lock);
        if (head == tail) return true;
        size_t at = (size_t)(tail % LOG_RING_BYTES);
        size_t n = (size_t)(head - tail);
        if (n > LOG_RING_BYTES - at) n = LOG_RING_BYTES - at;
        ssize_t sent = send(w->fd, w->ring + at, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (sent < 0 && errno == EINTR) continue;
        if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
        if (sent <= 0) return false;
        pthread_mutex_lock(&log_lock);
        w->tail += (uint64_t)sent;
        pthread_mutex_unlock(&log_lock);
    }
}

static void *sender_main(void *arg)
{
    (void)arg;
    pthread_setname_np(pthread_self(), "cachet-logger");
    struct pollfd pfd[1 + LOG_WATCHERS_MAX];
    struct watcher *who[LOG_WATCHERS_MAX];
    for (;;) {
        int n = 0;
        pfd[n++] = (struct pollfd){ .fd = wake_fd, .events = POLLIN };
        pthread_mutex_lock(&log_lock);
        if (sender_stop) { pthread_mutex_unlock(&log_lock); break; }
        for (int i = 0; i < LOG_WATCHERS_MAX; i++) {
            struct watcher *w = &watchers[i];
            if (w->fd < 0) continue;
            who[n - 1] = w;
            pfd[n++] = (struct pollfd){ .fd = w->fd, .events = (short)(POLLIN | (w->head != w->tail ? POLLOUT : 0)) };
        }
        pthread_mutex_unlock(&log_lock);
        if (poll(pfd, (nfds_t)n, -1) < 0 && errno != EINTR) break;
        if (pfd[0].revents & POLLIN) {
            uint64_t v;
            ssize_t ignored = read(wake_fd, &v, sizeof v);
            (void)ignored;
        }
        for (int i = 1; i < n; i++) {
            struct watcher *w = who[i - 1];
            bool gone = false;
            if (pfd[i].revents & (POLLIN | POLLHUP | POLLERR)) {
                char scratch[4096];
                ssize_t r = recv(w->fd, scratch, sizeof scratch, MSG_DONTWAIT);
                gone = r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
            }
            if (!gone) gone = !send_ring(w);   /* also lines written since the poll */
            if (gone) drop_watcher(w);
        }
    }
    for (int i = 0; i < LOG_WATCHERS_MAX; i++)
        if (watchers[i].fd >= 0) drop_watcher(&watchers[i]);
    return NULL;
}

enum log_add_result log_add_watcher(int fd, unsigned what)
{
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    pthread_mutex_lock(&log_lock);
    enum log_add_result res = LOG_ADD_FAILED;
    struct watcher *w = NULL;
    for (int i = 0; i < LOG_WATCHERS_MAX && !w; i++)
        if (watchers[i].fd < 0) w = &watchers[i];
    if (!w) { res = LOG_ADD_TOO_MANY; goto out; }
    if (!sender_running) {
        if (wake_fd < 0) wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (wake_fd < 0 || pthread_create(&sender, NULL, sender_main, NULL) != 0) goto out;
        sender_running = true;
    }
    char *ring = malloc(LOG_RING_BYTES);
    if (!ring) goto out;
    *w = (struct watcher){ .fd = fd, .what = what, .ring = ring };
    ring_put(w, "OK\r\n", 4);
    recompute_watching();
    res = LOG_ADD_OK;
out:
    pthread_mutex_unlock(&log_lock);
    if (res == LOG_ADD_OK) wake_sender();
    else close(fd);
    return res;
}

void log_stats(struct log_stats *out)
{
    pthread_mutex_lock(&log_lock);
    out->watchers = 0;
    for (int i = 0; i < LOG_WATCHERS_MAX; i++) out->watchers += watchers[i].fd >= 0;
    out->written = stat_written;
    out->sent = stat_sent;
    out->skipped = stat_skipped;
    pthread_mutex_unlock(&log_lock);
}

void log_stop(void)
{
    pthread_mutex_lock(&log_lock);
    bool running = sender_running;
    sender_stop = true;
    pthread_mutex_unlock(&log_lock);
    if (!running) return;
    wake_sender();
    pthread_join(sender, NULL);
    sender_running = false;
}
