/*
 * cachet-probe - a Kubernetes readiness/liveness probe for cachetd.
 *
 *   cachet-probe [-h host] [-p port] [-t timeout_ms] [--set-get]
 *
 * Sends the meta no-op "mn\r\n" and expects "MN\r\n". With --set-get it
 * instead stores a probe key (30 s TTL, so it cannot linger), reads it back
 * and deletes it, proving a real client round trip through storage. Exit 0
 * when the server answered correctly in time; otherwise exit 1 with one line
 * on stderr saying why (2 for a usage error).
 *
 * Why a tiny static C tool instead of `nc` in a shell probe: the engine image
 * has no shell or netcat, a TCP-only probe would call a server ready that
 * accepts but cannot answer, and the probe must never hang past its timeout
 * (every step below shares one deadline).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int fail(const char *what, const char *why)
{
    fprintf(stderr, "cachet-probe: %s: %s\n", what, why);
    return 1;
}

static int wait_for(int fd, short events, long long deadline)
{
    for (;;) {
        long long left = deadline - now_ms();
        if (left <= 0) return 0;
        struct pollfd p = { .fd = fd, .events = events };
        int rc = poll(&p, 1, (int)left);
        if (rc < 0 && errno == EINTR) continue;
        return rc;
    }
}

int main(int argc, char **argv)
{
    const char *host = "127.0.0.1", *port = "11211";
    long timeout = 1000;
    int opt;
    int set_get = 0;
    static const struct option longopts[] = {
        {"set-get", no_argument, 0, 'S'},
        {0, 0, 0, 0},
    };
    while ((opt = getopt_long(argc, argv, "h:p:t:", longopts, NULL)) != -1) {
        switch (opt) {
        case 'S': set_get = 1; break;
        case 'h': host = optarg; break;
        case 'p': port = optarg; break;
        case 't': {
            char *end;
            timeout = strtol(optarg, &end, 10);
            if (*end || timeout <= 0) return fail("usage", "-t needs a positive number of milliseconds");
            break;
        }
        default:
            fprintf(stderr, "usage: cachet-probe [-h host] [-p port] [-t timeout_ms] [--set-get]\n");
            return 2;
        }
    }
    if (optind < argc) return fail("usage", "unexpected argument");
    long long deadline = now_ms() + timeout;

    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *res;
    int rc = getaddrinfo(host, port, &hints, &res);
    if (rc) return fail(host, gai_strerror(rc));
    int fd = -1;
    char why[256] = "no address";
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) { snprintf(why, sizeof(why), "socket: %s", strerror(errno)); continue; }
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) break;
        if (errno == EINPROGRESS) {
            if (wait_for(fd, POLLOUT, deadline) > 0) {
                int err = 0;
                socklen_t el = sizeof(err);
                getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
                if (!err) break;
                snprintf(why, sizeof(why), "connect: %s", strerror(err));
            } else {
                snprintf(why, sizeof(why), "connect: timed out after %ld ms", timeout);
            }
        } else {
            snprintf(why, sizeof(why), "connect: %s", strerror(errno));
        }
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) return fail(host, why);

    char req[256], expect[64];
    size_t reqlen, expectlen;
    if (set_get) {
        char key[64];
        snprintf(key, sizeof(key), "cachet-probe:%d:%lld", (int)getpid(), now_ms());
        reqlen = (size_t)snprintf(req, sizeof(req),
                                  "ms %s 5 T30\r\nprobe\r\nmg %s v\r\nmd %s\r\n", key, key, key);
        expectlen = (size_t)snprintf(expect, sizeof(expect), "HD\r\nVA 5\r\nprobe\r\nHD\r\n");
    } else {
        reqlen = (size_t)snprintf(req, sizeof(req), "mn\r\n");
        expectlen = (size_t)snprintf(expect, sizeof(expect), "MN\r\n");
    }
    size_t sent = 0;
    while (sent < reqlen) {
        ssize_t n = send(fd, req + sent, reqlen - sent, MSG_NOSIGNAL);
        if (n > 0) { sent += (size_t)n; continue; }
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
            if (wait_for(fd, POLLOUT, deadline) <= 0) return fail("send", "timed out");
            continue;
        }
        return fail("send", strerror(errno));
    }
    char buf[128];
    size_t got = 0;
    while (got < expectlen) {
        if (wait_for(fd, POLLIN, deadline) <= 0) return fail("reply", "timed out waiting for the reply");
        ssize_t n = recv(fd, buf + got, sizeof(buf) - 1 - got, 0);
        if (n == 0) return fail("reply", "connection closed before the full reply");
        if (n < 0) {
            if (errno == EAGAIN || errno == EINTR) continue;
            return fail("reply", strerror(errno));
        }
        got += (size_t)n;
    }
    close(fd);
    buf[got] = '\0';
    if (got != expectlen || memcmp(buf, expect, expectlen) != 0) {
        for (char *p = buf; *p; p++) if (*p == '\r' || *p == '\n') *p = ' ';
        for (char *p = expect; *p; p++) if (*p == '\r' || *p == '\n') *p = ' ';
        fprintf(stderr, "cachet-probe: reply: expected '%s', got '%s'\n", expect, buf);
        return 1;
    }
    return 0;
}
