/*
 * engine_probe.c - the `mn` round trip of /healthz and memcached_up; see
 * engine_probe.h for why it goes through the memcached port. The cachet-probe
 * tool is built from this file too (with tls_client.c, no other engine code), so the
 * pod's probe and /healthz make the same round trip.
 *
 * One deadline bounds the whole round trip (probe_io.h).
 *
 * Concurrency: stateless; the socket is the caller's for the call's length.
 */
#include "engine_probe.h"
#include "probe_io.h"

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

/* One line of printable text for a reply in a message. */
static void one_line(char *s)
{
    for (; *s; s++) if (*s == '\r' || *s == '\n') *s = ' ';
}

bool engine_probe_exchange(const char *host, const char *port, int timeout_ms, const char *request,
                           const char *expect, char *why, size_t why_cap)
{
    int64_t deadline = probe_now_ms() + timeout_ms;
    int fd = probe_connect(host, port, deadline, timeout_ms, why, why_cap);
    if (fd < 0) return false;

    bool ok = false;
    char verb[8];   /* the request's first word, for messages */
    snprintf(verb, sizeof verb, "%.*s", (int)strcspn(request, " \r\n"), request);
    size_t reqlen = strlen(request), sent = 0;
    while (sent < reqlen) {
        ssize_t n = send(fd, request + sent, reqlen - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) { sent += (size_t)n; continue; }
        if (n < 0 && (errno == EAGAIN || errno == EINTR) && probe_wait(fd, POLLOUT, deadline)) continue;
        snprintf(why, why_cap, "cannot send %s: %s", verb, n < 0 ? strerror(errno) : "timed out");
        goto out;
    }
    char reply[128], want[128];
    size_t explen = strlen(expect), got = 0;
    /* read until the whole expected reply came, or what came already differs */
    while (got < explen && got < sizeof reply - 1 && !memcmp(reply, expect, got)) {
        if (!probe_wait(fd, POLLIN, deadline)) {
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
