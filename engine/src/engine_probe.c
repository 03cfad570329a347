/*
 * engine_probe.c - the `mn` round trip of /healthz and memcached_up; see
 * engine_probe.h for why it goes through the memcached port.
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

bool engine_probe(const struct engine_probe_target *t, int timeout_ms, char *why, size_t why_cap)
{
    int64_t deadline = now_ms() + timeout_ms;
    char port[16];
    snprintf(port, sizeof port, "%d", t->port);
    struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV }, *res;
    if (getaddrinfo(t->host, port, &hints, &res) != 0) {
        snprintf(why, why_cap, "cannot use address %s", t->host);
        return false;
    }
    int fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(why, why_cap, "cannot create a socket: %s", strerror(errno));
        freeaddrinfo(res);
        return false;
    }
    int rc = connect(fd, res->ai_addr, res->ai_addrlen);
    freeaddrinfo(res);
    bool ok = false;
    int err = rc == 0 ? 0 : errno;
    if (err == EINPROGRESS) {
        if (!wait_for(fd, POLLOUT, deadline)) {
            snprintf(why, why_cap, "connecting to %s port %d timed out after %d ms", t->host, t->port, timeout_ms);
            goto out;
        }
        socklen_t len = sizeof err;
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
    }
    if (err) {
        snprintf(why, why_cap, "cannot connect to %s port %d: %s", t->host, t->port, strerror(err));
        goto out;
    }
    if (send(fd, "mn\r\n", 4, MSG_NOSIGNAL | MSG_DONTWAIT) != 4) {
        snprintf(why, why_cap, "cannot send mn: %s", strerror(errno));
        goto out;
    }
    char reply[128];
    size_t got = 0;
    while (got < sizeof reply - 1 && !memchr(reply, '\n', got)) {
        if (!wait_for(fd, POLLIN, deadline)) {
            snprintf(why, why_cap, "no reply to mn within %d ms", timeout_ms);
            goto out;
        }
        ssize_t r = recv(fd, reply + got, sizeof reply - 1 - got, MSG_DONTWAIT);
        if (r > 0) { got += (size_t)r; continue; }
        if (r < 0 && (errno == EAGAIN || errno == EINTR)) continue;
        snprintf(why, why_cap, "connection closed without a reply to mn%s%s",
                 r < 0 ? ": " : "", r < 0 ? strerror(errno) : "");
        goto out;
    }
    reply[got] = '\0';
    if (got == 4 && !memcmp(reply, "MN\r\n", 4)) {
        ok = true;
    } else {
        reply[strcspn(reply, "\r\n")] = '\0';
        snprintf(why, why_cap, "unexpected reply to mn: '%s'", reply);
    }
out:
    close(fd);
    return ok;
}
