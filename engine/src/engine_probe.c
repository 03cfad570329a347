/*
 * engine_probe.c - the `mn` round trip of /healthz and memcached_up; see
 * engine_probe.h for why it goes through the memcached port. The cachet-probe
 * tool is built from this file too (with tls_client.c, no other engine code), so the
 * pod's probe and /healthz make the same round trip.
 *
 * Concurrency: stateless; the socket is the caller's for the call's length.
 */
#include "engine_probe.h"

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

bool engine_probe_target_from(const char *listen, int port, struct engine_probe_target *t)
{
    char first[256];
    size_t n = strcspn(listen, ",");
    if (n >= sizeof first) return false;
    memcpy(first, listen, n);
    first[n] = '\0';
    char *host = first;
    if (host[0] == '[') {                      /* [v6] as -l accepts it */
        host++;
        char *rb = strchr(host, ']');
        if (rb) *rb = '\0';
    }
    /* everything-addresses are reached through loopback */
    if (!*host || !strcmp(host, "0.0.0.0")) host = "127.0.0.1";
    else if (!strcmp(host, "::")) host = "::1";
    struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *res;
    if (getaddrinfo(host, NULL, &hints, &res) != 0) return false;
    int rc = getnameinfo(res->ai_addr, res->ai_addrlen, t->host, sizeof t->host, NULL, 0, NI_NUMERICHOST);
    freeaddrinfo(res);
    t->port = port;
    t->authfile = false;   /* the metrics server says otherwise with -Y */
    return rc == 0;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Waits for events on fd until the deadline; false on timeout. */
static bool wait_for(int fd, short events, int64_t deadline)
{
    for (;;) {
        int64_t left = deadline - now_ms();
        if (left <= 0) return false;
        struct pollfd p = { .fd = fd, .events = events };
        int rc = poll(&p, 1, (int)left);
        if (rc > 0) return true;
        if (rc < 0 && errno != EINTR) return false;
    }
}

/* Connects to one address within the deadline; the socket, or -1 with why set. */
static int connect_by(const struct addrinfo *ai, const char *host, const char *port, int64_t deadline,
                      int timeout_ms, char *why, size_t why_cap)
{
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(why, why_cap, "cannot create a socket: %s", strerror(errno));
        return -1;
    }
    int err = connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 ? 0 : errno;
    if (err == EINPROGRESS) {
        if (!wait_for(fd, POLLOUT, deadline)) {
            snprintf(why, why_cap, "connecting to %s port %s timed out after %d ms", host, port, timeout_ms);
            close(fd);
            return -1;
        }
        socklen_t len = sizeof err;
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
    }
    if (err) {
        snprintf(why, why_cap, "cannot connect to %s port %s: %s", host, port, strerror(err));
        close(fd);
        return -1;
    }
    return fd;
}

/* One line of printable text for a reply in a message. */
static void one_line(char *s)
{
    for (; *s; s++) if (*s == '\r' || *s == '\n') *s = ' ';
}

bool engine_probe_exchange(const char *host, const char *port, int timeout_ms, const char *request,
                           const char *expect, char *why, size_t why_cap)
{
    int64_t deadline = now_ms() + timeout_ms;
    struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *res;
    int rc = getaddrinfo(host, port, &hints, &res);
    if (rc != 0) {
        snprintf(why, why_cap, "cannot resolve %s port %s: %s", host, port, gai_strerror(rc));
        return false;
    }
    int fd = -1;
    snprintf(why, why_cap, "no address for %s", host);
    for (const struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next)
        fd = connect_by(ai, host, port, deadline, timeout_ms, why, why_cap);
    freeaddrinfo(res);
    if (fd < 0) return false;

    bool ok = false;
    char verb[8];   /* the request's first word, for messages */
    snprintf(verb, sizeof verb, "%.*s", (int)strcspn(request, " \r\n"), request);
    size_t reqlen = strlen(request), sent = 0;
    while (sent < reqlen) {
        ssize_t n = send(fd, request + sent, reqlen - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) { sent += (size_t)n; continue; }
        if (n < 0 && (errno == EAGAIN || errno == EINTR) && wait_for(fd, POLLOUT, deadline)) continue;
        snprintf(why, why_cap, "cannot send %s: %s", verb, n < 0 ? strerror(errno) : "timed out");
        goto out;
    }
    char reply[128], want[128];
    size_t explen = strlen(expect), got = 0;
    /* read until the whole expected reply came, or what came already differs */
    while (got < explen && got < sizeof reply - 1 && !memcmp(reply, expect, got)) {
        if (!wait_for(fd, POLLIN, deadline)) {
            snprintf(why, why_cap, "no reply to %s within %d ms", verb, timeout_ms);
            goto out;
        }
        ssize_t r = recv(fd, reply + got, sizeof reply - 1 - got, MSG_DONTWAIT);
        if (r > 0) { got += (size_t)r; continue; }
        if (r < 0 && (errno == EAGAIN || errno == EINTR)) continue;
        snprintf(why, why_cap, "connection closed without a reply to %s%s%s", verb,
                 r < 0 ? ": " : "", r < 0 ? strerror(errno) : "");
        goto out;
    }
    reply[got] = '\0';
    if (got == explen && !memcmp(reply, expect, explen)) {
        ok = true;
    } else {
        snprintf(want, sizeof want, "%s", expect);
        one_line(want);
        one_line(reply);
        snprintf(why, why_cap, "unexpected reply to %s: expected '%s', got '%s'", verb, want, reply);
    }
out:
    close(fd);
    return ok;
}

void engine_probe_words(const struct engine_probe_target *t, const char **request, const char **expect)
{
    if (t->authfile) {   /* at least 6 bytes: a shorter line closes an unauthenticated connection */
        *request = "version\r\n";
        *expect = "CLIENT_ERROR unauthenticated\r\n";
    } else {
        *request = "mn\r\n";
        *expect = "MN\r\n";
    }
}

bool engine_probe(const struct engine_probe_target *t, int timeout_ms, char *why, size_t why_cap)
{
    char port[16];
    snprintf(port, sizeof port, "%d", t->port);
    const char *request, *expect;
    engine_probe_words(t, &request, &expect);
    return engine_probe_exchange(t->host, port, timeout_ms, request, expect, why, why_cap);
}
