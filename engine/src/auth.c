/*
 * auth.c - memcached's ASCII authentication (-Y authfile): the authfile and
 * the gate every connection passes before its first real command.
 *
 * Why it exists: without it anyone who reaches the port reads and
 * overwrites every key. memcached 1.6.45's `-Y` is what clients and the
 * memcached operators already speak, so this is that protocol:
 *   - the authfile holds `user:password` lines;
 *   - until a connection authenticates, each line it sends is answered
 *     `CLIENT_ERROR unauthenticated` (its data, if any, is not swallowed:
 *     memcached reads it as the next line too), except a `set` whose data
 *     block is `user password`: `STORED` and the connection is in, or
 *     `CLIENT_ERROR authentication failure`; both count in auth_cmds, a
 *     failure in auth_errors, as memcached;
 *   - memcached's other replies and limits: a token over 16384 bytes is
 *     `CLIENT_ERROR auth token too long`, a block not ending in CRLF
 *     `CLIENT_ERROR bad command line termination`, one with no space
 *     `CLIENT_ERROR bad authentication token format`; a line under 6 bytes,
 *     or 2048 bytes without a newline, closes the connection.
 * Where cachetd differs: every pipelined line gets its reply (memcached
 * 1.6.45 keeps only the last reply of each read before authentication); a
 * token must fit the 16 KiB read buffer with its command line (about 16,300
 * bytes instead of 16384); the authfile may hold any number of entries
 * within AUTH_FILE_MAX (memcached silently keeps the first 8).
 *
 * Reload: SIGHUP (as memcached; main.c's sigwait calls auth_reload), and a
 * file watch for Kubernetes, whose Secret volumes swap a symlink: an
 * authentication attempt stats the file when a second has passed since the
 * last look, and reloads it if its inode, size or mtime changed. A file
 * that cannot be read, is too large or has a line without ':' leaves the
 * entries already loaded in place.
 *
 * Memory: the file is held as one copy of at most AUTH_FILE_MAX bytes; a
 * reload reads the new copy before freeing the old, so 2 x AUTH_FILE_MAX at
 * most (memory_budget.c "auth").
 *
 * Concurrency: any worker checks a token and may reload; main reloads on
 * SIGHUP. The loaded copy is replaced and read under one mutex, taken only
 * by authentication attempts (once per connection), never by a command.
 */
#include "auth.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "conn.h"
#include "proto_parser.h"
#include "server.h"

/* memcached's limits on the auth request (proto_text.c) */
#define AUTH_TOKEN_MAX      16384
#define AUTH_LINE_MIN       6
#define AUTH_RECHECK_NS     1000000000LL

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static char    path[AUTH_PATH_MAX];
static char   *text;            /* the file as read, NUL-terminated */
static size_t  text_len;
static struct stat loaded_st;   /* the file that text was read from */
static long long next_look_ns;
static bool    enabled;

bool auth_enabled(void) { return enabled; }

static long long mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Every line either empty or user:password (CR before LF allowed). */
static bool well_formed(const char *t, size_t n, char *err, size_t errlen)
{
    size_t line = 1;
    for (const char *p = t, *end = t + n; p < end; line++) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        if (le > p && le[-1] == '\r') le--;
        if (le > p && !memchr(p, ':', (size_t)(le - p))) {
            snprintf(err, errlen, "line %zu is not 'user:password'", line);
            return false;
        }
        p = nl ? nl + 1 : end;
    }
    return true;
}

static int load_locked(char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "cannot open: %s", strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        snprintf(err, errlen, "cannot stat: %s", strerror(errno));
        close(fd);
        return -1;
    }
    /* read to the end, whatever size stat said: the file may change under us */
    char *t = malloc(AUTH_FILE_MAX + 1);
    if (!t) {
        snprintf(err, errlen, "out of memory");
        close(fd);
        return -1;
    }
    size_t n = 0;
    for (;;) {
        ssize_t r = read(fd, t + n, AUTH_FILE_MAX + 1 - n);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            snprintf(err, errlen, "cannot read: %s", strerror(errno));
            free(t);
            close(fd);
            return -1;
        }
        if (r == 0) break;
        n += (size_t)r;
        if (n > AUTH_FILE_MAX) {
            snprintf(err, errlen, "larger than %d bytes", AUTH_FILE_MAX);
            free(t);
            close(fd);
            return -1;
        }
    }
    close(fd);
    char *fit = realloc(t, n + 1);   /* a small file keeps only its bytes */
    if (fit) t = fit;
    t[n] = '\0';
    if (!well_formed(t, n, err, errlen)) {
        free(t);
        return -1;
    }
    free(text);
    text = t;
    text_len = n;
    loaded_st = st;
    return 0;
}

int auth_start(const char *file, char *err, size_t errlen)
{
    pthread_mutex_lock(&lock);
    snprintf(path, sizeof(path), "%s", file);
    int rc = load_locked(err, errlen);
    if (rc == 0) {
        enabled = true;
        next_look_ns = mono_ns() + AUTH_RECHECK_NS;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

void auth_reload(void)
{
    if (!enabled) return;
    char err[160];
    pthread_mutex_lock(&lock);
    if (load_locked(err, sizeof(err)) != 0)
        fprintf(stderr, "cachetd: authfile %s not reloaded (%s); the entries loaded before stay\n", path, err);
    pthread_mutex_unlock(&lock);
}

/* the file watch: under lock */
static void look_at_file_locked(void)
{
    long long now = mono_ns();
    if (now < next_look_ns) return;
    next_look_ns = now + AUTH_RECHECK_NS;
    struct stat st;
    if (stat(path, &st) != 0) return;
    if (st.st_ino == loaded_st.st_ino && st.st_dev == loaded_st.st_dev && st.st_size == loaded_st.st_size &&
        st.st_mtim.tv_sec == loaded_st.st_mtim.tv_sec && st.st_mtim.tv_nsec == loaded_st.st_mtim.tv_nsec)
        return;
    char err[160];
    if (load_locked(err, sizeof(err)) != 0)
        fprintf(stderr, "cachetd: authfile %s changed but not reloaded (%s)\n", path, err);
}

/* Compares every byte whatever the first difference, so the time taken
 * does not tell how much of a password was right. */
static bool same(const char *a, const char *b, size_t n)
{
    unsigned char d = 0;
    for (size_t i = 0; i < n; i++) d |= (unsigned char)(a[i] ^ b[i]);
    return d == 0;
}

static bool token_matches(const char *user, size_t ulen, const char *pass, size_t plen)
{
    bool ok = false;
    pthread_mutex_lock(&lock);
    look_at_file_locked();
    for (const char *p = text, *end = text + text_len; p < end && !ok;) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *le = nl ? nl : end;
        if (le > p && le[-1] == '\r') le--;
        const char *colon = memchr(p, ':', (size_t)(le - p));
        if (colon) {
            size_t eu = (size_t)(colon - p), ep = (size_t)(le - colon - 1);
            ok = eu == ulen && ep == plen && same(p, user, ulen) && same(colon + 1, pass, plen);
        }
        p = nl ? nl + 1 : end;
    }
    pthread_mutex_unlock(&lock);
    return ok;
}

/* The fifth word of `set key flags exptime bytes`, as memcached reads it. */
static bool auth_request_size(const char *line, size_t len, uint32_t *size)
{
    if (len < 3 || memcmp(line, "set", 3) != 0) return false;
    size_t i = 0, word = 0;
    while (i < len) {
        while (i < len && line[i] == ' ') i++;
        if (i == len) break;
        size_t start = i;
        while (i < len && line[i] != ' ') i++;
        if (word++ == 4) {
            uint64_t v = 0;
            for (size_t k = start; k < i; k++) {
                if (line[k] < '0' || line[k] > '9' || v > UINT32_MAX / 10) return false;
                v = v * 10 + (uint64_t)(line[k] - '0');
            }
            if (v > UINT32_MAX) return false;
            *size = (uint32_t)v;
            return true;
        }
    }
    return false;
}

static void count(struct conn *c, bool failed)
{
    STAT_INC(c->w, auth_cmds);
    if (failed) STAT_INC(c->w, auth_errors);
}

enum auth_step auth_step(struct conn *c)
{
    const char *line = c->rbuf + c->rstart;
    size_t avail = c->rend - c->rstart;
    if (avail < 3) return AUTH_WAIT;
    const char *nl = memchr(line, '\n', avail);
    if (!nl) {
        if (avail > LINE_MAX_PLAIN) {
            c->state = CONN_CLOSING;
            return AUTH_CLOSE;
        }
        return AUTH_WAIT;
    }
    size_t consumed = (size_t)(nl - line) + 1;
    if (consumed - 1 < AUTH_LINE_MIN) {
        c->state = CONN_CLOSING;
        return AUTH_CLOSE;
    }
    size_t len = consumed - 1;
    if (line[len - 1] == '\r') len--;
    uint32_t size = 0;
    if (!auth_request_size(line, len, &size)) {
        c->rstart += consumed;
        out_str(c, "CLIENT_ERROR unauthenticated");
        return AUTH_ANSWERED;
    }
    if (size > AUTH_TOKEN_MAX || consumed + (size_t)size + 2 > c->rsize) {
        c->rstart += consumed;
        out_str(c, "CLIENT_ERROR auth token too long");
        return AUTH_ANSWERED;
    }
    /* the line stays in rbuf until its block is whole: no state to keep */
    if (avail < consumed + (size_t)size + 2) return AUTH_WAIT;
    const char *block = line + consumed;
    c->rstart += consumed + (size_t)size + 2;
    if (memcmp(block + size, "\r\n", 2) != 0) {
        out_str(c, "CLIENT_ERROR bad command line termination");
        return AUTH_ANSWERED;
    }
    const char *mid = memchr(block, ' ', size);
    if (!mid) {
        out_str(c, "CLIENT_ERROR bad authentication token format");
        return AUTH_ANSWERED;
    }
    size_t ulen = (size_t)(mid - block);
    if (token_matches(block, ulen, mid + 1, size - ulen - 1)) {
        c->authenticated = true;
        count(c, false);
        out_str(c, "STORED");
    } else {
        count(c, true);
        out_str(c, "CLIENT_ERROR authentication failure");
    }
    return AUTH_ANSWERED;
}
