/*
 * probe_io.c - connect and wait against one deadline, for the probes'
 * round trips (engine_probe.c in plaintext, tls_client.c over TLS); see
 * probe_io.h for why the deadline is one for the whole round trip.
 *
 * Concurrency: stateless; the socket is the caller's.
 */
#include "probe_io.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

int64_t probe_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

bool probe_wait(int fd, short events, int64_t deadline)
{
    for (;;) {
        int64_t left = deadline - probe_now_ms();
        if (left <= 0) return false;
        struct pollfd p = { .fd = fd, .events = events };
        int rc = poll(&p, 1, (int)left);
        if (rc > 0) return true;
        if (rc < 0 && errno != EINTR) return false;
    }
}

/* One address; the socket, or -1 with why set. */
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
        if (!probe_wait(fd, POLLOUT, deadline)) {
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

int probe_connect(const char *host, const char *port, int64_t deadline, int timeout_ms, char *why,
                  size_t why_cap)
{
    struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *res;
    int rc = getaddrinfo(host, port, &hints, &res);
    if (rc != 0) {
        snprintf(why, why_cap, "cannot resolve %s port %s: %s", host, port, gai_strerror(rc));
        return -1;
    }
    int fd = -1;
    snprintf(why, why_cap, "no address for %s", host);
    for (const struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next)
        fd = connect_by(ai, host, port, deadline, timeout_ms, why, why_cap);
    freeaddrinfo(res);
    return fd;
}
