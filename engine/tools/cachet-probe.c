/*
 * cachet-probe - a Kubernetes readiness/liveness probe for cachetd.
 *
 *   cachet-probe [-h host] [-p port] [-t timeout_ms] [--set-get]
 *                [--tls [--ca FILE] [--cert FILE --key FILE]]
 *                [--auth-file FILE [--user NAME]]
 *
 * Sends the meta no-op "mn\r\n" and expects "MN\r\n". With --set-get it
 * instead stores a probe key (30 s TTL, so it cannot linger), reads it back
 * and deletes it, proving a real client round trip through storage. Exit 0
 * when the server answered correctly in time; otherwise exit 1 with one line
 * on stderr saying why (2 for a usage error).
 *
 * Against a -Z server, --tls makes the round trip over TLS (the server's
 * certificate checked against --ca when given; --cert/--key is the client
 * certificate a server with ssl_verify_mode 2-3 requires). Against a -Y
 * server, --auth-file authenticates first with the file's first user (or
 * --user's line), as a client would: `set` carrying "user password", then
 * the round trip.
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
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "engine_probe.h"
#include "tls_client.h"

static int fail(const char *what, const char *why)
{
    fprintf(stderr, "cachet-probe: %s: %s\n", what, why);
    return 1;
}

/* The auth `set` of user's line in the authfile (the first line without
 * user): "set a 0 0 N\r\nuser password\r\n" into out; false with why. */
static bool auth_request(const char *path, const char *user, char *out, size_t cap, char *why, size_t why_cap)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(why, why_cap, "cannot read %s", path);
        return false;
    }
    char line[1024];
    bool found = false;
    while (!found && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = '\0';
        char *colon = strchr(line, ':');
        if (!colon) continue;
        *colon = '\0';
        if (user && strcmp(line, user)) continue;
        int n = snprintf(out, cap, "set a 0 0 %zu\r\n%s %s\r\n", strlen(line) + 1 + strlen(colon + 1), line, colon + 1);
        found = n > 0 && (size_t)n < cap;
    }
    fclose(f);
    if (!found) snprintf(why, why_cap, "no %s%s line in %s", user ? "user " : "user:password", user ? user : "", path);
    return found;
}

int main(int argc, char **argv)
{
    const char *host = "127.0.0.1", *port = "11211";
    long timeout = 1000;
    int opt;
    int set_get = 0, tls = 0;
    const char *ca = NULL, *cert = NULL, *key_file = NULL, *auth_file = NULL, *user = NULL;
    static const struct option longopts[] = {
        {"set-get", no_argument, 0, 'S'},
        {"tls", no_argument, 0, 'T'},
        {"ca", required_argument, 0, 'C'},
        {"cert", required_argument, 0, 'c'},
        {"key", required_argument, 0, 'k'},
        {"auth-file", required_argument, 0, 'A'},
        {"user", required_argument, 0, 'u'},
        {0, 0, 0, 0},
    };
    while ((opt = getopt_long(argc, argv, "h:p:t:", longopts, NULL)) != -1) {
        switch (opt) {
        case 'S': set_get = 1; break;
        case 'T': tls = 1; break;
        case 'C': ca = optarg; break;
        case 'c': cert = optarg; break;
        case 'k': key_file = optarg; break;
        case 'A': auth_file = optarg; break;
        case 'u': user = optarg; break;
        case 'h': host = optarg; break;
        case 'p': port = optarg; break;
        case 't': {
            char *end;
            timeout = strtol(optarg, &end, 10);
            if (*end || timeout <= 0 || timeout > 3600 * 1000) return fail("usage", "-t needs a positive number of milliseconds");
            break;
        }
        default:
            fprintf(stderr, "usage: cachet-probe [-h host] [-p port] [-t timeout_ms] [--set-get] "
                            "[--tls [--ca FILE] [--cert FILE --key FILE]] [--auth-file FILE [--user NAME]]\n");
            return 2;
        }
    }
    if (optind < argc) return fail("usage", "unexpected argument");
    if (!tls && (ca || cert || key_file)) return fail("usage", "--ca, --cert and --key need --tls");
    if (!cert != !key_file) return fail("usage", "--cert and --key go together");
    if (user && !auth_file) return fail("usage", "--user needs --auth-file");

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
    char full_req[1600], full_exp[128];
    if (auth_file) {
        char auth[1200];
        if (!auth_request(auth_file, user, auth, sizeof auth, why, sizeof why)) return fail("--auth-file", why);
        snprintf(full_req, sizeof full_req, "%s%s", auth, request);
        snprintf(full_exp, sizeof full_exp, "STORED\r\n%s", expect);
        request = full_req;
        expect = full_exp;
    }
    bool ok = tls ? tls_client_exchange(host, port, (int)timeout, ca, cert, key_file, request, expect, why, sizeof why)
                  : engine_probe_exchange(host, port, (int)timeout, request, expect, why, sizeof why);
    if (!ok) return fail(host, why);
    return 0;
}
