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
 * (every step shares one deadline). The round trip is src/engine_probe.c's,
 * the one cachetd's /healthz makes: this file only reads the arguments.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "engine_probe.h"

static int fail(const char *what, const char *why)
{
    fprintf(stderr, "cachet-probe: %s: %s\n", what, why);
    return 1;
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
            if (*end || timeout <= 0 || timeout > 3600 * 1000) return fail("usage", "-t needs a positive number of milliseconds");
            break;
        }
        default:
            fprintf(stderr, "usage: cachet-probe [-h host] [-p port] [-t timeout_ms] [--set-get]\n");
            return 2;
        }
    }
    if (optind < argc) return fail("usage", "unexpected argument");

    char req[256], why[256];
    const char *request = "mn\r\n", *expect = "MN\r\n";
    if (set_get) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        char key[64];
        snprintf(key, sizeof(key), "cachet-probe:%d:%lld", (int)getpid(),
                 (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000);
        snprintf(req, sizeof(req), "ms %s 5 T30\r\nprobe\r\nmg %s v\r\nmd %s\r\n", key, key, key);
        request = req;
        expect = "HD\r\nVA 5\r\nprobe\r\nHD\r\n";
    }
    if (!engine_probe_exchange(host, port, (int)timeout, request, expect, why, sizeof why))
        return fail(host, why);
    return 0;
}
