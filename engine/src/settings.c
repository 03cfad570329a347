/*
 * settings.c - command line and --args-file parsing for cachetd.
 *
 * Why a hand-written front end around getopt_long: the Kubernetes operator
 * mounts the engine's arguments from a ConfigMap as a file, so arguments come
 * from two places (file first, then the command line, so a flag typed by hand
 * wins). Both are merged into one argv and parsed by the same getopt_long
 * loop, so a flag means exactly the same thing wherever it is written.
 * Every error is a one-line message and exit code 64 (EX_USAGE): an operator
 * must see a typo in a ConfigMap at once, never have it silently ignored.
 */
#include "settings.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ARGS 1024

void settings_usage(FILE *out)
{
    fprintf(out,
        "cachetd " CACHET_VERSION " - a memcached-compatible cache server\n"
        "Usage: cachetd [options]\n"
        "  -p, --port=NUM          TCP port to listen on (default 11211)\n"
        "  -l, --listen=ADDR       interface(s) to listen on, comma separated (default all)\n"
        "  -t, --threads=NUM       worker threads (default: one per allowed CPU)\n"
        "  -m, --memory-limit=NUM  item memory in megabytes (default 64; k/m/g suffix = bytes)\n"
        "  -c, --conn-limit=NUM    max simultaneous connections (default 1024)\n"
        "  -I, --max-item-size=SZ  max item size, k/m suffix (default 1m)\n"
        "  -f, --factor=NUM        slab chunk growth factor (default 1.25)\n"
        "  -n, --slab-min-size=NUM minimum space for key+value+flags (default 48)\n"
        "  -C, --disable-cas       do not keep CAS values\n"
        "  -M, --disable-evictions return an error when memory is full instead of evicting\n"
        "  -b, --listen-backlog=N  accept backlog (default 1024)\n"
        "  -R, --max-reqs-per-event=N  requests handled per read batch before yielding (default 200)\n"
        "  -U, --udp-port=0        UDP is not supported; only 0 is accepted\n"
        "  -v, --verbose           verbose (-vv more verbose)\n"
        "  -h, --help              this help\n"
        "  -o, --extended=OPTS     comma separated: slab_sizes=A-B-C, hashpower=N,\n"
        "                          cpus=LIST (e.g. 0-3,6; 'none' = no pinning),\n"
        "                          io_uring (require io_uring batching; default: use it if the\n"
        "                          kernel allows), no_io_uring (plain epoll read/send),\n"
        "                          conn_buffer_limit=SIZE (cap on connection buffer memory\n"
        "                          above 32 KiB per connection, all connections together)\n"
        "                          metrics_port=N (Prometheus GET /metrics and /healthz on port N,\n"
        "                          same addresses as -l; default off), young_window=SECS (an eviction\n"
        "                          of an item read this recently is young; default 60)\n"
        "      --args-file=PATH    read more arguments from PATH first (whitespace separated,\n"
        "                          '#' starts a comment line); the command line wins\n");
}

bool parse_size(const char *text, size_t *out)
{
    if (!text || !*text) return false;
    errno = 0;
    char *end;
    if (*text == '-') return false;
    unsigned long long v = strtoull(text, &end, 10);
    if (errno || end == text) return false;
    unsigned long long mul = 1;
    switch (*end) {
    case 'k': case 'K': mul = 1ULL << 10; end++; break;
    case 'm': case 'M': mul = 1ULL << 20; end++; break;
    case 'g': case 'G': mul = 1ULL << 30; end++; break;
    case '\0': break;
    default: return false;
    }
    if (*end) return false;
    if (v > SIZE_MAX / mul) return false;
    *out = (size_t)(v * mul);
    return true;
}

static bool parse_int(const char *text, long min, long max, long *out)
{
    if (!text || !*text) return false;
    errno = 0;
    char *end;
    long v = strtol(text, &end, 10);
    if (errno || end == text || *end || v < min || v > max) return false;
    *out = v;
    return true;
}

static int cmp_int(const void *a, const void *b)
{
    return *(const int *)a - *(const int *)b;
}

bool parse_cpu_list(const char *text, int *cpus, int max, int *count)
{
    int n = 0;
    const char *p = text;
    if (!*p) return false;
    while (*p) {
        char *end;
        if (!isdigit((unsigned char)*p)) return false;
        long a = strtol(p, &end, 10), b = a;
        p = end;
        if (*p == '-') {
            p++;
            if (!isdigit((unsigned char)*p)) return false;
            b = strtol(p, &end, 10);
            p = end;
        }
        if (a < 0 || b < a || b >= CPU_SETSIZE) return false;
        for (long c = a; c <= b; c++) {
            bool dup = false;
            for (int i = 0; i < n; i++) if (cpus[i] == c) dup = true;
            if (dup) continue;
            if (n >= max) return false;
            cpus[n++] = (int)c;
        }
        if (*p == ',') { p++; if (!*p) return false; }
        else if (*p) return false;
    }
    qsort(cpus, n, sizeof(int), cmp_int);
    *count = n;
    return true;
}

void format_cpu_list(const int *cpus, int n, char *buf, size_t cap)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && len < cap; i++)
        len += snprintf(buf + len, cap - len, "%s%d", i ? "," : "", cpus[i]);
}

/* -o takes a comma separated list, but cpus=0-3,5 itself contains commas:
 * a piece without '=' that looks like part of a CPU list continues cpus. */
static int parse_extended(struct settings *s, const char *arg, bool *cpus_given, FILE *err)
{
    char buf[1024];
    if (strlen(arg) >= sizeof(buf)) { fprintf(err, "cachetd: -o option too long\n"); return EX_USAGE_CODE; }
    strcpy(buf, arg);
    char *save = NULL;
    char cpu_text[1024] = "";
    bool in_cpus = false, cpus_here = false;   /* -o may be given more than once */
    for (char *opt = strtok_r(buf, ",", &save); opt; opt = strtok_r(NULL, ",", &save)) {
        if (in_cpus && !strchr(opt, '=') && isdigit((unsigned char)opt[0])) {
            strncat(cpu_text, ",", sizeof(cpu_text) - strlen(cpu_text) - 1);
            strncat(cpu_text, opt, sizeof(cpu_text) - strlen(cpu_text) - 1);
            continue;
        }
        in_cpus = false;
        char *eq = strchr(opt, '=');
        char *val = eq ? eq + 1 : NULL;
        if (eq) *eq = '\0';
        long v;
        if (!strcmp(opt, "slab_sizes") && val) {
            int n = 0;
            char *s2 = NULL;
            uint32_t last = 0;
            for (char *t = strtok_r(val, "-", &s2); t; t = strtok_r(NULL, "-", &s2)) {
                if (!parse_int(t, 1, INT32_MAX, &v) || n >= MAX_SLAB_SIZES || (uint32_t)v <= last) {
                    fprintf(err, "cachetd: -o slab_sizes must be ascending byte sizes separated by '-' (at most %d)\n", MAX_SLAB_SIZES);
                    return EX_USAGE_CODE;
                }
                last = (uint32_t)v;
                s->slab_sizes[n++] = (uint32_t)v;
            }
            if (!n) { fprintf(err, "cachetd: -o slab_sizes is empty\n"); return EX_USAGE_CODE; }
            s->slab_sizes_count = n;
        } else if (!strcmp(opt, "hashpower") && val) {
            if (!parse_int(val, 8, 30, &v)) {
                fprintf(err, "cachetd: -o hashpower must be between 8 and 30\n");
                return EX_USAGE_CODE;
            }
            s->hashpower = (int)v;
        } else if (!strcmp(opt, "cpus") && val) {
            snprintf(cpu_text, sizeof(cpu_text), "%s", val);
            in_cpus = true;
            cpus_here = true;
            *cpus_given = true;
        } else if (!strcmp(opt, "io_uring") && !val) {
            s->io_uring = IO_URING_REQUIRED;
        } else if (!strcmp(opt, "no_io_uring") && !val) {
            s->io_uring = IO_URING_OFF;
        } else if (!strcmp(opt, "conn_buffer_limit") && val) {
            if (!parse_size(val, &s->conn_buffer_limit)) {
                fprintf(err, "cachetd: -o conn_buffer_limit needs a size in bytes (k/m/g suffix allowed)\n");
                return EX_USAGE_CODE;
            }
        } else if (!strcmp(opt, "metrics_port") && val) {
            if (!parse_int(val, 0, 65535, &v)) {
                fprintf(err, "cachetd: -o metrics_port needs a port 0-65535 (0 = off), got '%s'\n", val);
                return EX_USAGE_CODE;
            }
            s->metrics_port = (int)v;
        } else if (!strcmp(opt, "young_window") && val) {
            if (!parse_int(val, 1, 30 * 24 * 3600, &v)) {
                fprintf(err, "cachetd: -o young_window needs seconds between 1 and 2592000, got '%s'\n", val);
                return EX_USAGE_CODE;
            }
            s->young_window = (uint32_t)v;
        } else if (!strcmp(opt, "modern") || !strcmp(opt, "no_modern")) {
            /* memcached compatibility: accepted, our defaults are "modern". */
        } else {
            fprintf(err, "cachetd: unknown -o option '%s'%s\n", opt,
                    val ? "" : " (or missing '=value')");
            return EX_USAGE_CODE;
        }
    }
    if (cpus_here) {
        if (!strcmp(cpu_text, "none")) {
            s->pin_workers = false;
            s->num_cpus_listed = 0;
        } else if (!parse_cpu_list(cpu_text, s->worker_cpus, MAX_WORKERS, &s->num_cpus_listed)) {
            fprintf(err, "cachetd: -o cpus='%s' is not a CPU list like 0-3,5\n", cpu_text);
            return EX_USAGE_CODE;
        } else {
            s->pin_workers = true;
    s->io_uring = IO_URING_AUTO;
        }
    }
    return 0;
}

/* Splits the file into arguments: whitespace separated, '#' lines skipped. */
static int read_args_file(const char *path, char **out, int max, int *n, FILE *err)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(err, "cachetd: --args-file %s: %s\n", path, strerror(errno));
        return EX_USAGE_CODE;
    }
    char line[4096];
    while (fgets(line, sizeof(line), f)) {
        if (!strchr(line, '\n') && !feof(f)) {
            fprintf(err, "cachetd: --args-file %s: line longer than %zu bytes\n", path, sizeof(line) - 1);
            fclose(f);
            return EX_USAGE_CODE;
        }
        char *p = line;
        while (isspace((unsigned char)*p)) p++;
        if (*p == '#' || !*p) continue;
        char *save = NULL;
        for (char *tok = strtok_r(p, " \t\r\n", &save); tok; tok = strtok_r(NULL, " \t\r\n", &save)) {
            if (*n >= max) {
                fprintf(err, "cachetd: --args-file %s: too many arguments\n", path);
                fclose(f);
                return EX_USAGE_CODE;
            }
            out[(*n)++] = strdup(tok);
        }
    }
    fclose(f);
    return 0;
}

static int allowed_cpus(int *cpus, int max)
{
    cpu_set_t set;
    int n = 0;
    if (sched_getaffinity(0, sizeof(set), &set) != 0) {
        cpus[0] = 0;
        return 1;
    }
    for (int c = 0; c < CPU_SETSIZE && n < max; c++)
        if (CPU_ISSET(c, &set)) cpus[n++] = c;
    return n ? n : (cpus[0] = 0, 1);
}

int settings_parse(struct settings *s, int argc, char **argv, FILE *err)
{
    memset(s, 0, sizeof(*s));
    s->port = 11211;
    s->maxbytes = 64u << 20;
    s->maxconns = 1024;
    s->item_size_max = 1u << 20;
    s->growth_factor = 1.25;
    s->chunk_size = 48;
    s->use_cas = true;
    s->backlog = 1024;
    s->reqs_per_event = 200;
    s->pin_workers = true;
    s->io_uring = IO_URING_AUTO;

    /* Merge: argv[0], the args file's arguments, then the command line minus --args-file. */
    static char *merged[MAX_ARGS + 1];
    int n = 0;
    merged[n++] = argv[0];
    const char *args_file = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--args-file")) {
            if (i + 1 >= argc) { fprintf(err, "cachetd: --args-file needs a path\n"); return EX_USAGE_CODE; }
            args_file = argv[++i];
        } else if (!strncmp(argv[i], "--args-file=", 12)) {
            args_file = argv[i] + 12;
        } else if (!strcmp(argv[i], "--")) {
            break;
        }
    }
    if (args_file) {
        int rc = read_args_file(args_file, merged, MAX_ARGS - argc, &n, err);
        if (rc) return rc;
    }
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--args-file")) { i++; continue; }
        if (!strncmp(argv[i], "--args-file=", 12)) continue;
        if (n >= MAX_ARGS) { fprintf(err, "cachetd: too many arguments\n"); return EX_USAGE_CODE; }
        merged[n++] = argv[i];
    }
    merged[n] = NULL;

    static const struct option longopts[] = {
        {"port", required_argument, 0, 'p'},
        {"listen", required_argument, 0, 'l'},
        {"threads", required_argument, 0, 't'},
        {"memory-limit", required_argument, 0, 'm'},
        {"conn-limit", required_argument, 0, 'c'},
        {"max-item-size", required_argument, 0, 'I'},
        {"factor", required_argument, 0, 'f'},
        {"slab-min-size", required_argument, 0, 'n'},
        {"disable-cas", no_argument, 0, 'C'},
        {"disable-evictions", no_argument, 0, 'M'},
        {"listen-backlog", required_argument, 0, 'b'},
        {"max-reqs-per-event", required_argument, 0, 'R'},
        {"udp-port", required_argument, 0, 'U'},
        {"verbose", no_argument, 0, 'v'},
        {"help", no_argument, 0, 'h'},
        {"extended", required_argument, 0, 'o'},
        {0, 0, 0, 0},
    };
    bool threads_given = false, cpus_given = false;
    long v;
    size_t sz;
    opterr = 0;
    optind = 0;   /* full re-initialisation: settings_parse may run more than once in tests */
    int c;
    while ((c = getopt_long(n, merged, ":p:l:t:m:c:I:f:n:CMb:R:U:vho:", longopts, NULL)) != -1) {
        switch (c) {
        case 'p':
            if (!parse_int(optarg, 0, 65535, &v)) { fprintf(err, "cachetd: -p needs a port 0-65535, got '%s'\n", optarg); return EX_USAGE_CODE; }
            s->port = (int)v; break;
        case 'l':
            if (strlen(optarg) >= sizeof(s->listen)) { fprintf(err, "cachetd: -l value too long\n"); return EX_USAGE_CODE; }
            strcpy(s->listen, optarg); break;
        case 't':
            if (!parse_int(optarg, 1, MAX_WORKERS, &v)) { fprintf(err, "cachetd: -t needs 1-%d threads, got '%s'\n", MAX_WORKERS, optarg); return EX_USAGE_CODE; }
            s->num_threads = (int)v; threads_given = true; break;
        case 'm':
            /* memcached: a bare number is megabytes; a suffix gives bytes. */
            if (parse_int(optarg, 1, 1L << 22, &v)) sz = (size_t)v << 20;
            else if (!parse_size(optarg, &sz)) { fprintf(err, "cachetd: -m needs megabytes (or a k/m/g size), got '%s'\n", optarg); return EX_USAGE_CODE; }
            if (sz < (1u << 20)) { fprintf(err, "cachetd: -m must be at least 1 megabyte\n"); return EX_USAGE_CODE; }
            s->maxbytes = sz; break;
        case 'c':
            if (!parse_int(optarg, 1, 1 << 20, &v)) { fprintf(err, "cachetd: -c needs a positive connection count, got '%s'\n", optarg); return EX_USAGE_CODE; }
            s->maxconns = (int)v; break;
        case 'I':
            if (!parse_size(optarg, &sz) || sz < 1024 || sz > (128u << 20)) { fprintf(err, "cachetd: -I needs a size between 1k and 128m, got '%s'\n", optarg); return EX_USAGE_CODE; }
            s->item_size_max = sz; break;
        case 'f': {
            char *end;
            errno = 0;
            double f = strtod(optarg, &end);
            if (errno || *end || end == optarg || !(f > 1.0) || f > 100.0) { fprintf(err, "cachetd: -f needs a growth factor above 1.0, got '%s'\n", optarg); return EX_USAGE_CODE; }
            s->growth_factor = f; break;
        }
        case 'n':
            if (!parse_int(optarg, 1, 1 << 20, &v)) { fprintf(err, "cachetd: -n needs a positive byte count, got '%s'\n", optarg); return EX_USAGE_CODE; }
            s->chunk_size = (uint32_t)v; break;
        case 'C': s->use_cas = false; break;
        case 'M': s->evict_disabled = true; break;
        case 'b':
            if (!parse_int(optarg, 1, 65535, &v)) { fprintf(err, "cachetd: -b needs a positive backlog, got '%s'\n", optarg); return EX_USAGE_CODE; }
            s->backlog = (int)v; break;
        case 'R':
            if (!parse_int(optarg, 1, 1 << 20, &v)) { fprintf(err, "cachetd: -R needs a positive count, got '%s'\n", optarg); return EX_USAGE_CODE; }
            s->reqs_per_event = (int)v; break;
        case 'U':
            if (!parse_int(optarg, 0, 0, &v)) { fprintf(err, "cachetd: UDP is not supported; -U accepts only 0\n"); return EX_USAGE_CODE; }
            break;
        case 'v': s->verbose++; break;
        case 'h': settings_usage(stdout); return 1;
        case 'o': {
            int rc = parse_extended(s, optarg, &cpus_given, err);
            if (rc) return rc;
            break;
        }
        case ':':
            fprintf(err, "cachetd: option '%s' needs a value (see -h)\n", merged[optind - 1]);
            return EX_USAGE_CODE;
        default:
            if (optopt) fprintf(err, "cachetd: unknown option '-%c' (see -h)\n", optopt);
            else fprintf(err, "cachetd: unknown option '%s' (see -h)\n", merged[optind - 1]);
            return EX_USAGE_CODE;
        }
    }
    if (optind < n) {
        fprintf(err, "cachetd: unexpected argument '%s' (see -h)\n", merged[optind]);
        return EX_USAGE_CODE;
    }
    if (s->item_size_max > s->maxbytes / 2) {
        fprintf(err, "cachetd: -I (%zu bytes) must be at most half of -m (%zu bytes)\n", s->item_size_max, s->maxbytes);
        return EX_USAGE_CODE;
    }
    if (s->slab_sizes_count && s->slab_sizes[s->slab_sizes_count - 1] > s->item_size_max) {
        fprintf(err, "cachetd: -o slab_sizes: the largest class exceeds -I\n");
        return EX_USAGE_CODE;
    }

    /* Workers and pinning: one worker per CPU in the list (default: the
     * CPUs this process may run on). -t overrides the count; workers are
     * then assigned to the listed CPUs round-robin. */
    int allowed[MAX_WORKERS];
    int nallowed = allowed_cpus(allowed, MAX_WORKERS);
    if (cpus_given && s->pin_workers) {
        for (int i = 0; i < s->num_cpus_listed; i++) {
            bool ok = false;
            for (int j = 0; j < nallowed; j++) if (allowed[j] == s->worker_cpus[i]) ok = true;
            if (!ok) {
                char buf[512];
                format_cpu_list(allowed, nallowed, buf, sizeof(buf));
                fprintf(err, "cachetd: -o cpus: CPU %d is not in this process's allowed set (%s)\n", s->worker_cpus[i], buf);
                return EX_USAGE_CODE;
            }
        }
    } else if (!cpus_given) {
        memcpy(s->worker_cpus, allowed, sizeof(int) * nallowed);
        s->num_cpus_listed = nallowed;
    }
    if (!threads_given)
        s->num_threads = s->pin_workers ? s->num_cpus_listed : nallowed;
    if (s->num_threads < 1) s->num_threads = 1;
    return 0;
}
