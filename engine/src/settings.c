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
 *
 * Why memcached's whole command line is known here: operators bring flags
 * from memcached 1.6.45 configurations, and a server that refuses to start
 * on a flag it could honour is as wrong as one that silently ignores a flag
 * it cannot honour. So every flag and -o option of memcached 1.6.45 falls in
 * one of three groups (engine/README.md has the table):
 *  - it has memcached's meaning and behaviour here;
 *  - it tunes machinery cachetd does not have (segmented LRU, LRU crawler,
 *    logger buffers, the hash function...): accepted, its value checked with
 *    memcached's limits and words, and without effect; noop_opts says why
 *    for each;
 *  - it asks for something cachetd does not do (binary protocol, UDP, SASL,
 *    TLS, the proxy...): refused with one line saying so and 64,
 *    because starting without it would break what the operator relies on.
 */
#include "settings.h"
#include "extstore.h"
#include "storage.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ARGS 1024

size_t settings_slab_page_size(size_t maxbytes)
{
    size_t page = SLAB_PAGE_SIZE_MAX;
    while (page > 64 * 1024 && maxbytes / page < 64) page >>= 1;
    return page;
}

size_t settings_slab_chunk_max(const struct settings *s)
{
    size_t page = settings_slab_page_size(s->maxbytes);
    size_t chunk_max = s->slab_chunk_max ? s->slab_chunk_max : page / 2;
    return (chunk_max > page ? page : chunk_max) & ~(size_t)7;
}

int settings_fd_table_size(const struct settings *s)
{
    return s->maxconns + (FD_TABLE_PER_WORKER + LISTEN_FDS_PER_WORKER) * s->num_threads + FD_TABLE_MARGIN;
}

size_t conn_buffer_limit_default(size_t maxbytes, int maxconns)
{
    const size_t floor = (size_t)4 << 20;
    size_t cap = (size_t)maxconns * (64u << 10);
    size_t ceiling = maxbytes / 8 > floor ? maxbytes / 8 : floor;
    if (cap < floor) cap = floor;
    if (cap > ceiling) cap = ceiling;
    return cap;
}

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
        "  -s, --unix-socket=PATH  listen on this unix socket (disables TCP)\n"
        "  -a, --unix-mask=MASK    the unix socket's access mask, octal (default 700)\n"
        "  -I, --max-item-size=SZ  max item size, k/m suffix (default 1m)\n"
        "  -f, --factor=NUM        slab chunk growth factor (default 1.25)\n"
        "  -n, --slab-min-size=NUM minimum space for key+value+flags (default 48)\n"
        "  -C, --disable-cas       do not keep CAS values\n"
        "  -F, --disable-flush-all flush_all answers CLIENT_ERROR instead of flushing\n"
        "  -W, --disable-watch     watch (live log stream) answers CLIENT_ERROR\n"
        "  -Z, --enable-ssl        TLS on the TCP port (needs -o ssl_chain_cert, ssl_key; see ssl_* below)\n"
        "  -Y, --auth-file=FILE    require memcached's ASCII authentication, users from FILE (user:password lines)\n"
        "  -A, --enable-shutdown   enable the ASCII \"shutdown\" command (stops the server as SIGTERM)\n"
        "  -B, --protocol=ascii    the only protocol spoken (binary and auto are refused)\n"
        "  -u, --user=USER         run as USER when started as root\n"
        "  -d, --daemon            run in the background\n"
        "  -P, --pidfile=FILE      write the process id to FILE\n"
        "  -r, --enable-coredumps  raise the core file size limit\n"
        "  -k, --lock-memory       lock all memory (mlockall)\n"
        "  -V, --version           print the version and exit\n"
        "  -M, --disable-evictions return an error when memory is full instead of evicting\n"
        "  -b, --listen-backlog=N  accept backlog (default 1024)\n"
        "  -R, --max-reqs-per-event=N  requests handled per read batch before yielding (default 200)\n"
        "  -U, --udp-port=0        UDP is not supported; only 0 is accepted\n"
        "  -v, --verbose           verbose (-vv more verbose)\n"
        "  -h, --help              this help\n"
        "  -o, --extended=OPTS     comma separated: slab_sizes=A-B-C, hashpower=N,\n"
        "                          cpus=LIST (e.g. 0-3,6; 'none' = no pinning),\n"
        "                          conn_placement=off|cpu|napi (a new TCP connection goes to the worker\n"
        "                          pinned to the CPU that received it, else to one on a sibling of that\n"
        "                          CPU; napi: first through napi_map's queue -> CPU map; default off),\n"
        "                          slab_mover=age|gain (the background page mover gives pages to the\n"
        "                          class evicting the youngest items, or to the one whose miss-ratio\n"
        "                          curve gains the most hits per page; default age),\n"
        "                          napi_map=PATH (the node tuner's NAPI id -> CPU file, re-read when it\n"
        "                          changes; see engine/README.md),\n"
        "                          io_uring (require io_uring batching; default: use it if the\n"
        "                          kernel allows), no_io_uring (plain epoll read/send),\n"
        "                          conn_buffer_limit=SIZE or read_buf_mem_limit=MB (cap on\n"
        "                          connection buffer memory above 32 KiB per connection, all\n"
        "                          connections together; 0 = none; default sized from -m, -c),\n"
        "                          sock_sndbuf=SIZE, sock_rcvbuf=SIZE (SO_SNDBUF/SO_RCVBUF of every\n"
        "                          accepted socket, k/m suffix; the kernel doubles them; 0 = kernel\n"
        "                          autotuning, the default, which --memory-budget cannot bound)\n"
        "                          idle_timeout=N (close TCP connections idle N seconds; 0 = never)\n"
        "                          ssl_chain_cert=FILE, ssl_key=FILE, ssl_ca_cert=FILE, ssl_verify_mode=0-3,\n"
        "                          ssl_min_version=0-3 (TLS 1.0-1.3, default 2), ssl_ciphers=LIST,\n"
        "                          ssl_session_cache (with -Z, as memcached)\n"
        "                          slab_chunk_max=KB (largest slab chunk; longer values are chained;\n"
        "                          default half a slab page)\n"
        "                          metrics_port=N (Prometheus GET /metrics and /healthz on port N,\n"
        "                          same addresses as -l; default off), young_window=SECS (an eviction\n"
        "                          of an item read this recently is young; default 60)\n"
        "                          metrics_tls (with -Z: the metrics port serves HTTPS with the ssl_*\n"
        "                          certificate and its reloads; asks no client certificate)\n"
        "                          ext_path=FILE:SIZE (extstore: large cold values on disk, k/m/g/t;\n"
        "                          repeatable), ext_page_size=MB, ext_wbuf_size=MB, ext_threads=N,\n"
        "                          ext_io_depth=N, ext_item_size=BYTES, ext_item_age=SECS, ext_low_ttl=SECS,\n"
        "                          ext_recache_rate=N, and memcached's other ext_* (see engine/README.md)\n"
        "                          as memcached: slab_automove=0-2 (0: pages move only on `slabs\n"
        "                          reassign`), no_slab_reassign (never), no_hashexpand,\n"
        "                          no_maxconns_fast (clients beyond -c wait to be accepted),\n"
        "                          temporary_ttl=N (items with a TTL up to N s are never evicted)\n"
        "      --args-file=PATH    read more arguments from PATH first (whitespace separated,\n"
        "                          '#' starts a comment line); the command line wins\n"
        "      --check-args        check the other arguments as a start would, then exit: 0, or 64\n"
        "                          with the reason\n"
        "      --memory-budget     check them likewise, then print as JSON the most memory a\n"
        "                          server started with them can use, term by term\n"
        "memcached 1.6.45's -L -X and its other LRU, crawler, slab mover, hash and logger -o\n"
        "options are accepted and have no effect (cachetd has no such machinery; see engine/README.md).\n");
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

bool parse_ext_size(const char *text, uint64_t *out)
{
    if (!text || !*text || *text == '-') return false;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(text, &end, 10);
    if (errno || end == text) return false;
    unsigned shift = 0;
    switch (*end) {
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    case 't': case 'T': shift = 40; end++; break;
    case '\0': break;
    default: return false;
    }
    if (*end || (shift && v > (UINT64_MAX >> shift))) return false;
    *out = (uint64_t)v << shift;
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

static bool parse_decimal(const char *text, double *out)
{
    if (!text || !*text) return false;
    errno = 0;
    char *end;
    double v = strtod(text, &end);
    if (errno || end == text || *end) return false;
    *out = v;
    return true;
}

/* memcached 1.6.45 -o options for machinery cachetd does not have. The value
 * is checked within memcached's limits, with memcached's words, so a
 * configuration memcached refuses is refused here too; then it is dropped.
 * `why` is the reason it has no effect (engine/README.md repeats it). */
enum noop_kind {
    NOOP_FLAG,      /* no value needed; a value is ignored, as memcached's getsubopt does */
    NOOP_INT,       /* an integer within [min, max] */
    NOOP_OPT_INT,   /* like NOOP_INT, or no value at all */
    NOOP_U32,       /* an unsigned 32-bit number */
    NOOP_DECIMAL,   /* a number above min (exclusive) and at most max */
    NOOP_HASH,      /* jenkins, murmur3 or xxh3 */
};
struct noop_opt {
    const char    *name;
    enum noop_kind kind;
    double         min, max;
    const char    *bad;      /* memcached's message for a value out of range */
    const char    *why;
};
#define LRU_WHY   "cachetd's LRU is the bag LRU (bags.c), not memcached's segmented hot/warm/cold LRU"
#define CRAWL_WHY "expired items are reclaimed by the bag LRU's cleaner thread, which always runs"
#define MOVE_WHY  "pages move between classes as part of the allocator (slabs_mover.c): a class with " \
                  "nothing to evict takes a page from another within the store"
#define LOG_WHY   "each watcher has a fixed 32 KiB ring (logger.c) and workers write into it directly"
static const struct noop_opt noop_opts[] = {
    {"slab_automove_ratio", NOOP_DECIMAL, 0, 1, "slab_automove_ratio must be > 0 and < 1", MOVE_WHY},
    {"slab_automove_window", NOOP_INT, 3, 1800, "slab_automove_window must be > 2 and < 1800", MOVE_WHY},
    {"slab_automove_freeratio", NOOP_DECIMAL, 0, 1, "slab_automove_freeratio must be > 0 and <= 1", MOVE_WHY},
    {"tail_repair_time", NOOP_INT, 10, INT_MAX, "Cannot set tail_repair_time to less than 10 seconds",
     "an item reference lives only until its bytes are sent, so there is no leaked reference to repair"},
    {"hash_algorithm", NOOP_HASH, 0, 0, "Unknown hash_algorithm option (jenkins, murmur3, xxh3)",
     "the hash function is internal; clients see the same keys and values with any"},
    {"lru_crawler", NOOP_FLAG, 0, 0, NULL, CRAWL_WHY},
    {"no_lru_crawler", NOOP_FLAG, 0, 0, NULL, CRAWL_WHY},
    {"lru_crawler_sleep", NOOP_INT, 0, 1000000, "LRU crawler sleep must be between 0 and 1 second", CRAWL_WHY},
    {"lru_crawler_tocrawl", NOOP_U32, 0, 0, "lru_crawler_tocrawl takes a numeric 32bit value", CRAWL_WHY},
    {"lru_maintainer", NOOP_FLAG, 0, 0, NULL, LRU_WHY},
    {"no_lru_maintainer", NOOP_FLAG, 0, 0, NULL, LRU_WHY},
    {"hot_lru_pct", NOOP_INT, 1, 79, "hot_lru_pct must be > 1 and < 80", LRU_WHY},
    {"warm_lru_pct", NOOP_INT, 1, 79, "warm_lru_pct must be > 1 and < 80", LRU_WHY},
    {"hot_max_factor", NOOP_DECIMAL, 0, 1e300, "hot_max_factor must be > 0", LRU_WHY},
    {"warm_max_factor", NOOP_DECIMAL, 0, 1e300, "warm_max_factor must be > 0", LRU_WHY},
    {"watcher_logbuf_size", NOOP_U32, 0, 0, "could not parse argument to watcher_logbuf_size", LOG_WHY},
    {"worker_logbuf_size", NOOP_U32, 0, 0, "could not parse argument to worker_logbuf_size", LOG_WHY},
    {"track_sizes", NOOP_FLAG, 0, 0, NULL, "`stats sizes` is always on"},
    {"inline_ascii_resp", NOOP_FLAG, 0, 0, NULL, "memcached 1.6 ignores it too"},
    {"no_inline_ascii_resp", NOOP_FLAG, 0, 0, NULL, "memcached 1.6 ignores it too"},
    {"no_drop_privileges", NOOP_FLAG, 0, 0, NULL, "cachetd installs no seccomp filter, which is what it asks for"},
    {"modern", NOOP_FLAG, 0, 0, NULL, "cachetd's defaults are the modern ones"},
    {"no_modern", NOOP_FLAG, 0, 0, NULL, "the 1.4-era internals it selects do not exist here"},
};

/* memcached 1.6.45 -o options (by prefix) for what cachetd does not do:
 * starting without it would break what the operator relies on. */
static const struct { const char *prefix; const char *what; } refused_opts[] = {
    {"proxy_", "proxy mode (proxy_* options) is not supported"},
    {"drop_privileges", "the seccomp privilege drop is not supported"},
    {"sock_cookie_id", "socket cookies for firewalls are not supported"},
};

/* memcached 1.6.45's -o ssl_* options and its words for their errors */
static int parse_ssl_option(struct settings *s, const char *opt, const char *val, FILE *err)
{
    struct { const char *name; char *dst; size_t cap; } paths[] = {
        {"ssl_chain_cert", s->tls.chain_cert, sizeof s->tls.chain_cert},
        {"ssl_key", s->tls.key, sizeof s->tls.key},
        {"ssl_ca_cert", s->tls.ca_cert, sizeof s->tls.ca_cert},
        {"ssl_ciphers", s->tls.ciphers, sizeof s->tls.ciphers},
    };
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        if (strcmp(opt, paths[i].name)) continue;
        if (!val || !*val || strlen(val) >= paths[i].cap) {
            fprintf(err, "cachetd: -o %s needs a value of at most %zu bytes\n", opt, paths[i].cap - 1);
            return EX_USAGE_CODE;
        }
        strcpy(paths[i].dst, val);
        return 0;
    }
    long v;
    if (!strcmp(opt, "ssl_verify_mode") || !strcmp(opt, "ssl_min_version")) {
        if (!val || !parse_int(val, 0, 3, &v)) {
            fprintf(err, "cachetd: -o %s must be 0, 1, 2 or 3\n", opt);
            return EX_USAGE_CODE;
        }
        if (opt[4] == 'v') s->tls.verify_mode = (int)v; else s->tls.min_version = (int)v;
        return 0;
    }
    if (!strcmp(opt, "ssl_session_cache") && !val) {
        s->tls.session_cache = true;
        return 0;
    }
    fprintf(err, "cachetd: -o %s is not supported (ssl_keyformat, ssl_wbuf_size and ssl_kernel_tls are memcached's)\n", opt);
    return EX_USAGE_CODE;
}

/* What -o options say across all -o flags, checked once they are all read
 * (memcached checks these pairs after its whole command line). */
struct ext_state {
    bool cpus_given;
    long hot_pct, warm_pct;
    bool temporary_ttl, no_lru_maintainer;
};

static int check_noop(const struct noop_opt *o, const char *val, struct ext_state *st, FILE *err)
{
    long v = 0;
    double d;
    bool ok = true;
    if (o->kind != NOOP_FLAG && !(o->kind == NOOP_OPT_INT && !val) && (!val || !*val)) {
        fprintf(err, "cachetd: -o %s needs a value\n", o->name);
        return EX_USAGE_CODE;
    }
    switch (o->kind) {
    case NOOP_FLAG: break;
    case NOOP_OPT_INT: if (!val) break; /* fall through */
    case NOOP_INT: ok = parse_int(val, (long)o->min, (long)o->max, &v); break;
    case NOOP_U32: ok = parse_int(val, 0, UINT32_MAX, &v); break;
    case NOOP_DECIMAL: ok = parse_decimal(val, &d) && d > o->min && d <= o->max; break;
    case NOOP_HASH: ok = !strcmp(val, "jenkins") || !strcmp(val, "murmur3") || !strcmp(val, "xxh3"); break;
    }
    if (!ok) {
        fprintf(err, "cachetd: -o %s=%s: %s\n", o->name, val, o->bad);
        return EX_USAGE_CODE;
    }
    if (!strcmp(o->name, "hot_lru_pct")) st->hot_pct = v;
    if (!strcmp(o->name, "warm_lru_pct")) st->warm_pct = v;
    if (!strcmp(o->name, "temporary_ttl")) st->temporary_ttl = true;
    if (!strcmp(o->name, "no_lru_maintainer")) st->no_lru_maintainer = true;
    if (!strcmp(o->name, "lru_maintainer")) st->no_lru_maintainer = false;
    return 0;
}

/* One -o ext_* option, memcached 1.6.45's names, units and defaults. */
static int parse_ext_option(struct ext_settings *x, const char *opt, const char *val, FILE *err)
{
    long v;
    double d;
    if (!strcmp(opt, "ext_drop_unread")) {   /* a flag in memcached; =0/=1 also taken */
        if (val && !parse_int(val, 0, 1, &v)) goto bad;
        x->drop_unread = !val || v == 1;
        return 0;
    }
    if (!val || !*val) {
        fprintf(err, "cachetd: -o %s needs a value\n", opt);
        return EX_USAGE_CODE;
    }
    if (!strcmp(opt, "ext_path")) {
        const char *colon = strrchr(val, ':');
        uint64_t size;
        if (!colon || colon == val || !parse_ext_size(colon + 1, &size) || size == 0) {
            fprintf(err, "cachetd: -o ext_path=%s: must supply size to ext_path, ie: ext_path=/f/e:64m (k|m|g|t supported)\n", val);
            return EX_USAGE_CODE;
        }
        if (x->npaths >= EXT_PATHS_MAX) {
            fprintf(err, "cachetd: -o ext_path: at most %d paths\n", EXT_PATHS_MAX);
            return EX_USAGE_CODE;
        }
        size_t n = (size_t)(colon - val);
        if (n >= sizeof x->paths[0]) {
            fprintf(err, "cachetd: -o ext_path: path longer than %zu bytes\n", sizeof x->paths[0] - 1);
            return EX_USAGE_CODE;
        }
        memcpy(x->paths[x->npaths], val, n);
        x->paths[x->npaths][n] = '\0';
        x->sizes[x->npaths++] = size;
        return 0;
    }
    if (!strcmp(opt, "ext_page_size")) {          /* MB; a locator's offset reaches 2 GiB */
        if (!parse_int(val, 1, 2048, &v)) goto bad;
        x->page_size = (uint64_t)v << 20;
        x->page_size_set = true;
    } else if (!strcmp(opt, "ext_wbuf_size")) {   /* MB */
        if (!parse_int(val, 1, 2047, &v)) goto bad;
        x->wbuf_size = (uint64_t)v << 20;
        x->wbuf_size_set = true;
    } else if (!strcmp(opt, "ext_threads")) {
        if (!parse_int(val, 1, 64, &v)) goto bad;
        x->threads = (unsigned)v;
    } else if (!strcmp(opt, "ext_io_depth")) {
        if (!parse_int(val, 1, 1024, &v)) goto bad;
        x->io_depth = (unsigned)v;
    } else if (!strcmp(opt, "ext_item_size")) {
        if (!parse_int(val, 1, UINT32_MAX, &v)) goto bad;
        x->item_size = (uint32_t)v;
    } else if (!strcmp(opt, "ext_item_age")) {
        if (!parse_int(val, 0, UINT32_MAX, &v)) goto bad;
        x->item_age = (uint32_t)v;
    } else if (!strcmp(opt, "ext_low_ttl")) {
        if (!parse_int(val, 0, UINT32_MAX, &v)) goto bad;
        x->low_ttl = (uint32_t)v;
    } else if (!strcmp(opt, "ext_recache_rate")) {
        if (!parse_int(val, 0, UINT32_MAX, &v)) goto bad;
        x->recache_rate = (uint32_t)v;
    } else if (!strcmp(opt, "ext_compact_under")) {
        if (!parse_int(val, 0, UINT32_MAX, &v)) goto bad;
        x->compact_under = (uint32_t)v;
        x->compact_under_set = true;
    } else if (!strcmp(opt, "ext_drop_under")) {
        if (!parse_int(val, 0, UINT32_MAX, &v)) goto bad;
        x->drop_under = (uint32_t)v;
        x->drop_under_set = true;
    } else if (!strcmp(opt, "ext_max_frag")) {
        if (!parse_decimal(val, &d) || d < 0 || d > 1) goto bad;
        x->max_frag = d;
    } else if (!strcmp(opt, "ext_max_sleep")) {
        if (!parse_int(val, 1, UINT32_MAX, &v)) goto bad;
        x->max_sleep = (uint32_t)v;
    } else {
        fprintf(err, "cachetd: unknown -o option '%s'\n", opt);
        return EX_USAGE_CODE;
    }
    return 0;
bad:
    fprintf(err, "cachetd: -o %s=%s: bad value\n", opt, val ? val : "");
    return EX_USAGE_CODE;
}

/* -o takes a comma separated list, but cpus=0-3,5 itself contains commas:
 * a piece without '=' that looks like part of a CPU list continues cpus. */
static int parse_extended(struct settings *s, const char *arg, struct ext_state *st, FILE *err)
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
            st->cpus_given = true;
        } else if (!strcmp(opt, "conn_placement") && val) {
            if (!strcmp(val, "off")) s->conn_placement = PLACE_OFF;
            else if (!strcmp(val, "cpu")) s->conn_placement = PLACE_CPU;
            else if (!strcmp(val, "napi")) s->conn_placement = PLACE_NAPI;
            else {
                fprintf(err, "cachetd: -o conn_placement must be off, cpu or napi, got '%s'\n", val);
                return EX_USAGE_CODE;
            }
        } else if (!strcmp(opt, "slab_mover") && val) {
            if (!strcmp(val, "age")) s->slab_mover_gain = false;
            else if (!strcmp(val, "gain")) s->slab_mover_gain = true;
            else {
                fprintf(err, "cachetd: -o slab_mover must be age or gain, got '%s'\n", val);
                return EX_USAGE_CODE;
            }
        } else if (!strcmp(opt, "napi_map") && val) {
            if (!*val || strlen(val) >= sizeof(s->napi_map)) {
                fprintf(err, "cachetd: -o napi_map needs a file path (at most %zu bytes)\n", sizeof(s->napi_map) - 1);
                return EX_USAGE_CODE;
            }
            snprintf(s->napi_map, sizeof(s->napi_map), "%s", val);
        } else if (!strncmp(opt, "ssl_", 4)) {
            int rc = parse_ssl_option(s, opt, val, err);
            if (rc) return rc;
        } else if (!strcmp(opt, "io_uring") && !val) {
            s->io_uring = IO_URING_REQUIRED;
        } else if (!strcmp(opt, "no_io_uring") && !val) {
            s->io_uring = IO_URING_OFF;
        } else if (!strcmp(opt, "conn_buffer_limit") && val) {
            if (!parse_size(val, &s->conn_buffer_limit)) {
                fprintf(err, "cachetd: -o conn_buffer_limit needs a size in bytes (k/m/g suffix allowed)\n");
                return EX_USAGE_CODE;
            }
            s->conn_buffer_limit_set = true;
        } else if ((!strcmp(opt, "sock_sndbuf") || !strcmp(opt, "sock_rcvbuf")) && val) {
            size_t *dst = opt[5] == 's' ? &s->sock_sndbuf : &s->sock_rcvbuf;
            if (!parse_size(val, dst) || *dst > SOCK_BUF_MAX) {
                fprintf(err, "cachetd: -o %s needs a size in bytes up to 1g (k/m/g suffix allowed; "
                        "0 = kernel autotuning)\n", opt);
                return EX_USAGE_CODE;
            }
        } else if (!strcmp(opt, "read_buf_mem_limit") && val) {
            /* memcached's name and unit: megabytes, 0 = no limit */
            if (!parse_int(val, 0, 1L << 30, &v)) {
                fprintf(err, "cachetd: -o read_buf_mem_limit needs a number of megabytes\n");
                return EX_USAGE_CODE;
            }
            s->conn_buffer_limit = (size_t)v << 20;
            s->conn_buffer_limit_set = true;
        } else if (!strcmp(opt, "idle_timeout") && val) {
            if (!parse_int(val, 0, INT32_MAX, &v)) {
                fprintf(err, "cachetd: -o idle_timeout needs a number of seconds (0 = never)\n");
                return EX_USAGE_CODE;
            }
            s->idle_timeout = (int)v;
        } else if (!strcmp(opt, "metrics_port") && val) {
            if (!parse_int(val, 0, 65535, &v)) {
                fprintf(err, "cachetd: -o metrics_port needs a port 0-65535 (0 = off), got '%s'\n", val);
                return EX_USAGE_CODE;
            }
            s->metrics_port = (int)v;
        } else if (!strcmp(opt, "metrics_tls") && !val) {
            s->tls.metrics = true;
        } else if (!strcmp(opt, "young_window") && val) {
            if (!parse_int(val, 1, 30 * 24 * 3600, &v)) {
                fprintf(err, "cachetd: -o young_window needs seconds between 1 and 2592000, got '%s'\n", val);
                return EX_USAGE_CODE;
            }
            s->young_window = (uint32_t)v;
        } else if (!strcmp(opt, "slab_chunk_max")) {
            /* memcached's unit (kilobytes) and limits; the checks against
             * -I and the page size follow once -I is known */
            if (!val || !*val) { fprintf(err, "cachetd: -o slab_chunk_max: Missing slab_chunk_max argument\n"); return EX_USAGE_CODE; }
            if (!parse_int(val, LONG_MIN, LONG_MAX, &v)) {
                fprintf(err, "cachetd: -o slab_chunk_max=%s: could not parse argument to slab_chunk_max\n", val);
                return EX_USAGE_CODE;
            }
            if (v <= 0) { fprintf(err, "cachetd: -o slab_chunk_max=%s: slab_chunk_max must be >= 0\n", val); return EX_USAGE_CODE; }
            if (v > 1024) {
                fprintf(err, "cachetd: -o slab_chunk_max=%s: slab_chunk_max must be specified in kilobytes.\n", val);
                return EX_USAGE_CODE;
            }
            s->slab_chunk_max = (size_t)v << 10;
        } else if (!strcmp(opt, "maxconns_fast") || !strcmp(opt, "no_maxconns_fast")) {
            s->no_maxconns_fast = opt[0] == 'n';
        } else if (!strcmp(opt, "temporary_ttl")) {
            if (!val || !parse_int(val, INT_MIN, INT_MAX, &v)) {
                fprintf(err, "cachetd: -o temporary_ttl needs a number of seconds\n");
                return EX_USAGE_CODE;
            }
            s->temp_lru = true;
            s->temporary_ttl = (uint32_t)v;   /* memcached's unsigned: a negative one covers every TTL */
            st->temporary_ttl = true;
        } else if (!strcmp(opt, "no_hashexpand")) {
            s->no_hashexpand = true;
        } else if (!strcmp(opt, "slab_reassign") || !strcmp(opt, "no_slab_reassign")) {
            s->no_slab_reassign = opt[0] == 'n';
        } else if (!strcmp(opt, "no_slab_automove")) {
            s->slab_automove = 0;
        } else if (!strcmp(opt, "slab_automove")) {
            /* memcached: no value means 1 */
            if (val && !parse_int(val, 0, 2, &v)) {
                fprintf(err, "cachetd: -o slab_automove=%s: slab_automove must be between 0 and 2\n", val);
                return EX_USAGE_CODE;
            }
            s->slab_automove = val ? (int)v : 1;
        } else if (!strcmp(opt, "no_chunked_items")) {
            /* memcached: the largest class is a whole page */
            s->slab_chunk_max = SLAB_PAGE_SIZE_MAX;
        } else if (!strncmp(opt, "ext_", 4)) {
            int rc = parse_ext_option(&s->ext, opt, val, err);
            if (rc) return rc;
        } else if (!strcmp(opt, "resp_obj_mem_limit")) {
            /* memcached's own words: it warns and starts */
            fprintf(err, "DEPRECATED: resp_obj_mem_limit no longer used. See read_buf_mem_limit,\n");
        } else {
            const struct noop_opt *o = NULL;
            for (size_t i = 0; i < sizeof(noop_opts) / sizeof(noop_opts[0]); i++)
                if (!strcmp(opt, noop_opts[i].name)) o = &noop_opts[i];
            if (o) {
                int rc = check_noop(o, val, st, err);
                if (rc) return rc;
                continue;
            }
            for (size_t i = 0; i < sizeof(refused_opts) / sizeof(refused_opts[0]); i++) {
                if (!strncmp(opt, refused_opts[i].prefix, strlen(refused_opts[i].prefix))) {
                    fprintf(err, "cachetd: -o %s: %s\n", opt, refused_opts[i].what);
                    return EX_USAGE_CODE;
                }
            }
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

static void settings_defaults(struct settings *s)
{
    memset(s, 0, sizeof(*s));
    s->port = 11211;
    s->maxbytes = 64u << 20;
    s->maxconns = 1024;
    s->item_size_max = 1u << 20;
    s->ext = (struct ext_settings){ .page_size = 64u << 20, .wbuf_size = 4u << 20, .threads = 1, .io_depth = 8,
                                    .item_size = 512, .item_age = UINT32_MAX, .recache_rate = 2000,
                                    .max_frag = 0.80, .max_sleep = 1000000 };
    s->growth_factor = 1.25;
    s->chunk_size = 48;
    s->use_cas = true;
    s->backlog = 1024;
    s->reqs_per_event = 200;
    s->pin_workers = true;
    s->io_uring = IO_URING_AUTO;
    s->tls.min_version = 2;   /* memcached's default: TLS 1.2 */
    s->access_mask = 0700;
    s->flush_enabled = true;
    s->slab_automove = 1;   /* memcached's default */
    s->temporary_ttl = 61;  /* memcached's default, shown even while off */
    s->watch_enabled = true;
}

/* argv[0], the args file's arguments, then the command line minus
 * --args-file, into merged (n entries, NULL-terminated). */
static int merge_arguments(int argc, char **argv, char **merged, int *count, FILE *err)
{
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
    *count = n;
    return 0;
}

/* The flags one by one, each checked on its own; returns 0, 1 (help or
 * version printed) or EX_USAGE_CODE. */
static int parse_options(struct settings *s, int n, char **merged, struct ext_state *ext,
                         bool *threads_given, FILE *err)
{
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
        {"unix-socket", required_argument, 0, 's'},
        {"unix-mask", required_argument, 0, 'a'},
        /* memcached 1.6.45's other long names */
        {"slab-growth-factor", required_argument, 0, 'f'},
        {"enable-shutdown", no_argument, 0, 'A'},
        {"disable-flush-all", no_argument, 0, 'F'},
        {"protocol", required_argument, 0, 'B'},
        {"user", required_argument, 0, 'u'},
        {"daemon", no_argument, 0, 'd'},
        {"pidfile", required_argument, 0, 'P'},
        {"enable-coredumps", no_argument, 0, 'r'},
        {"lock-memory", no_argument, 0, 'k'},
        {"version", no_argument, 0, 'V'},
        {"license", no_argument, 0, 'i'},
        {"enable-largepages", no_argument, 0, 'L'},
        {"disable-dumping", no_argument, 0, 'X'},
        {"disable-watch", no_argument, 0, 'W'},
        {"enable-sasl", no_argument, 0, 'S'},
        {"enable-ssl", no_argument, 0, 'Z'},
        {"auth-file", required_argument, 0, 'Y'},
        {"memory-file", required_argument, 0, 'e'},
        {"napi-ids", required_argument, 0, 'N'},
        {0, 0, 0, 0},
    };
    long v;
    size_t sz;
    opterr = 0;
    optind = 0;   /* full re-initialisation: settings_parse may run more than once in tests */
    int c;
    while ((c = getopt_long(n, merged, ":p:l:t:m:c:I:f:n:CMb:R:U:vho:s:a:AFB:u:dP:rkViLXWSZY:e:N:D:", longopts, NULL)) != -1) {
        switch (c) {
        case 'p':
            if (!parse_int(optarg, 0, 65535, &v)) { fprintf(err, "cachetd: -p needs a port 0-65535, got '%s'\n", optarg); return EX_USAGE_CODE; }
            s->port = (int)v; break;
        case 'l':
            if (strlen(optarg) >= sizeof(s->listen)) { fprintf(err, "cachetd: -l value too long\n"); return EX_USAGE_CODE; }
            if (strstr(optarg, "proto[") || strstr(optarg, "tag[")) {
                /* memcached 1.6's per-listener protocol and proxy tags */
                fprintf(err, "cachetd: -l %s: the proto[...]:tag[...]: listener syntax is not supported; "
                        "give plain addresses and one -p\n", optarg);
                return EX_USAGE_CODE;
            }
            strcpy(s->listen, optarg); break;
        case 't':
            /* each worker and each background thread has a storage context */
            if (!parse_int(optarg, 1, STORAGE_MAX_THREADS - STORAGE_BG_THREADS, &v)) {
                fprintf(err, "cachetd: -t needs 1-%d threads, got '%s'\n", STORAGE_MAX_THREADS - STORAGE_BG_THREADS, optarg);
                return EX_USAGE_CODE;
            }
            s->num_threads = (int)v; *threads_given = true; break;
        case 'm':
            /* memcached: a bare number is megabytes; a suffix gives bytes. */
            if (parse_int(optarg, 1, 1L << 40, &v)) sz = (size_t)v << 20;
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
        case 'A': s->shutdown_command = true; break;
        case 'F': s->flush_enabled = false; break;
        case 'B':
            if (!strcmp(optarg, "ascii")) break;   /* the ASCII and meta protocols: all we speak */
            if (!strcmp(optarg, "binary") || !strcmp(optarg, "auto")) {
                fprintf(err, "cachetd: -B %s: the binary protocol is not supported; cachetd speaks the ASCII and "
                        "meta protocols (-B ascii)\n", optarg);
            } else {
                fprintf(err, "cachetd: Invalid value for binding protocol: %s -- should be one of auto, binary, "
                        "or ascii\n", optarg);
            }
            return EX_USAGE_CODE;
        case 'u':
            if (!*optarg || strlen(optarg) >= sizeof(s->username)) { fprintf(err, "cachetd: -u needs a user name\n"); return EX_USAGE_CODE; }
            strcpy(s->username, optarg);
            break;
        case 'd': s->daemonize = true; break;
        case 'P':
            if (!*optarg || strlen(optarg) >= sizeof(s->pidfile)) {
                fprintf(err, "cachetd: -P needs a file name of at most %zu bytes\n", sizeof(s->pidfile) - 1);
                return EX_USAGE_CODE;
            }
            strcpy(s->pidfile, optarg);
            break;
        case 'r': s->maxcore = true; break;
        case 'k': s->lock_memory = true; break;
        case 'V': printf("cachetd " CACHET_VERSION " (memcached protocol " CACHET_PROTO_VERSION ")\n"); return 1;
        /* accepted without effect: what they ask for is already so */
        case 'L': break;   /* the item region always asks for transparent huge pages (slabs.c) */
        case 'X': break;   /* stats cachedump, stats detail and lru_crawler metadump do not exist */
        case 'W': s->watch_enabled = false; break;
        /* refused: what they ask for is not there, and starting without it would mislead */
        case 'S': fprintf(err, "cachetd: -S: SASL authentication is not supported (it needs the binary protocol)\n"); return EX_USAGE_CODE;
        case 'Z': s->tls.enabled = true; break;
        case 'Y':
            /* read at start (main.c), not here: --check-args opens no file */
            if (!*optarg || strlen(optarg) >= sizeof(s->auth_file)) {
                fprintf(err, "cachetd: -Y needs an authfile path of at most %zu bytes\n", sizeof(s->auth_file) - 1);
                return EX_USAGE_CODE;
            }
            strcpy(s->auth_file, optarg);
            break;
        case 'e': fprintf(err, "cachetd: -e: a memory file (restartable cache) is not supported\n"); return EX_USAGE_CODE;
        case 'N': fprintf(err, "cachetd: -N: memcached's first-come NAPI ID to thread mapping is not supported; "
                          "use -o conn_placement=napi,napi_map=PATH (or conn_placement=cpu)\n"); return EX_USAGE_CODE;
        case 'D': fprintf(err, "cachetd: -D: per-prefix statistics (stats detail) are not supported\n"); return EX_USAGE_CODE;
        case 'i': fprintf(err, "cachetd: -i: no license text is bundled with cachetd\n"); return EX_USAGE_CODE;
        case 's':
            if (!*optarg || strlen(optarg) >= sizeof(s->socketpath)) {
                fprintf(err, "cachetd: -s needs a unix socket path of at most %zu bytes\n", sizeof(s->socketpath) - 1);
                return EX_USAGE_CODE;
            }
            strcpy(s->socketpath, optarg);
            break;
        case 'a': {
            /* memcached: an octal mask, like chmod */
            char *end;
            errno = 0;
            long mask = strtol(optarg, &end, 8);
            if (errno || end == optarg || *end || mask < 0 || mask > 0777) {
                fprintf(err, "cachetd: -a needs an octal access mask like 700, got '%s'\n", optarg);
                return EX_USAGE_CODE;
            }
            s->access_mask = (int)mask;
            break;
        }
        case 'v': s->verbose++; break;
        case 'h': settings_usage(stdout); return 1;
        case 'o': {
            int rc = parse_extended(s, optarg, ext, err);
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
    return 0;
}

/* The rules between flags, once all are read (memcached checks these after
 * its whole command line), and the defaults that depend on other flags. */
static uint64_t ext_pages_of(const struct ext_settings *x, uint64_t page_size)
{
    uint64_t pages = 0;
    for (unsigned i = 0; i < x->npaths; i++) pages += x->sizes[i] / page_size;
    return pages;
}

/* memcached runs -o ext_path=FILE:64m with one 64 MB page; cachetd needs
 * free pages to write into while others are compacted or evicted, so a
 * file that holds fewer than EXT_FIT_PAGES pages of the default 64 MB,
 * with ext_page_size not given, gets pages halved until it holds that many
 * (64m: 8 pages of 8 MB), but never so small that half a page (the write
 * buffer then, if ext_wbuf_size was not given either) cannot hold a record
 * of the largest item (-I 1m: 4 MB pages at least). A given ext_wbuf_size
 * is kept, and the page stays at least twice it. */
static void fit_ext_pages(struct ext_settings *x, size_t item_size_max)
{
    if (x->page_size_set) return;
    uint64_t record = ext_buffer_need(KEY_MAX_LENGTH, (uint32_t)item_size_max);
    while (ext_pages_of(x, x->page_size) < EXT_FIT_PAGES) {
        uint64_t half = x->page_size / 2;
        uint64_t wbuf = x->wbuf_size;
        if (x->wbuf_size_set) {
            if (half < 2 * wbuf || half % wbuf) return;
        } else {
            if (wbuf > half / 2) wbuf = half / 2;
            if (wbuf < record || wbuf % EXT_ALIGN) return;
        }
        x->page_size = half;
        x->wbuf_size = wbuf;
    }
}

static int settings_validate(struct settings *s, const struct ext_state *ext, FILE *err)
{
    /* Chunks are addressed by 32-bit handles in 8-byte units (storage.c),
     * so item memory stops at 32767 MB. memcached starts with any -m, and
     * a configuration written for it must start here too: the cap is said
     * on stderr and applies everywhere -m does (stats maxbytes, the memory
     * budget, the connection buffer default). */
    if (s->maxbytes > ((size_t)MAXBYTES_CAP_MB << 20)) {
        size_t cap = (size_t)MAXBYTES_CAP_MB << 20;
        fprintf(err, "cachetd: -m %zu MB: item memory is capped at %zu MB (items are addressed with "
                "32-bit chunk handles); starting with -m %zu\n", s->maxbytes >> 20, (size_t)MAXBYTES_CAP_MB,
                (size_t)MAXBYTES_CAP_MB);
        s->maxbytes = cap;
    }
    if (!s->conn_buffer_limit_set)
        s->conn_buffer_limit = conn_buffer_limit_default(s->maxbytes, s->maxconns);
    if (s->item_size_max > s->maxbytes / 2) {
        fprintf(err, "cachetd: -I (%zu bytes) must be at most half of -m (%zu bytes)\n", s->item_size_max, s->maxbytes);
        return EX_USAGE_CODE;
    }
    /* storage (slabs.c) would refuse these at start; a usage error here, so
     * that --check-args and the operator's contract test see them */
    if (s->slab_sizes_count) {
        /* each class rounds up to 8 bytes and must hold a header, a CAS and 16 bytes */
        uint32_t min_chunk = (SLAB_ITEM_HEADER + (s->use_cas ? 8 : 0) + 16 + 7) & ~7u;
        uint32_t first = (s->slab_sizes[0] + 7) & ~7u;
        uint32_t last = (s->slab_sizes[s->slab_sizes_count - 1] + 7) & ~7u;
        if (first < min_chunk || last > settings_slab_chunk_max(s)) {
            fprintf(err, "cachetd: -o slab_sizes: sizes must be from %u to %zu bytes (half a %zu-byte slab page at this -m)\n",
                    min_chunk, settings_slab_chunk_max(s), settings_slab_page_size(s->maxbytes));
            return EX_USAGE_CODE;
        }
        /* slabs.c rounds each up to 8 bytes: 41-42 would be two 48-byte classes */
        for (int i = 1; i < s->slab_sizes_count; i++) {
            uint32_t prev = (s->slab_sizes[i - 1] + 7) & ~7u, sz = (s->slab_sizes[i] + 7) & ~7u;
            if (sz <= prev) {
                fprintf(err, "cachetd: -o slab_sizes: %u and %u are the same %u-byte class once rounded up "
                        "to 8 bytes: sizes must ascend\n", s->slab_sizes[i - 1], s->slab_sizes[i], sz);
                return EX_USAGE_CODE;
            }
        }
    }
    if (s->slab_sizes_count && s->slab_sizes[s->slab_sizes_count - 1] > s->item_size_max) {
        fprintf(err, "cachetd: -o slab_sizes: the largest class exceeds -I\n");
        return EX_USAGE_CODE;
    }
    /* memcached's checks and words: values longer than slab_chunk_max are
     * made of slab_chunk_max pieces, which must tile -I and a page */
    if (s->slab_chunk_max) {
        if (s->slab_chunk_max > s->item_size_max) {
            fprintf(err, "cachetd: slab_chunk_max (bytes: %zu) cannot be larger than -I (item_size_max %zu)\n",
                    s->slab_chunk_max, s->item_size_max);
            return EX_USAGE_CODE;
        }
        if (s->item_size_max % s->slab_chunk_max) {
            fprintf(err, "cachetd: -I (item_size_max: %zu) must be evenly divisible by slab_chunk_max (bytes: %zu)\n",
                    s->item_size_max, s->slab_chunk_max);
            return EX_USAGE_CODE;
        }
        if (SLAB_PAGE_SIZE_MAX % s->slab_chunk_max) {
            fprintf(err, "cachetd: slab_chunk_max (bytes: %zu) must divide evenly into %d (slab_page_size)\n",
                    s->slab_chunk_max, SLAB_PAGE_SIZE_MAX);
            return EX_USAGE_CODE;
        }
        if (s->slab_sizes_count && s->slab_sizes[s->slab_sizes_count - 1] > s->slab_chunk_max) {
            fprintf(err, "cachetd: -o slab_sizes: the largest class exceeds slab_chunk_max (%zu bytes)\n", s->slab_chunk_max);
            return EX_USAGE_CODE;
        }
    }
    if (ext->hot_pct + ext->warm_pct > 80) {
        fprintf(err, "cachetd: hot_lru_pct + warm_lru_pct cannot be more than 80%% combined\n");
        return EX_USAGE_CODE;
    }
    if (s->ext.npaths) {
        struct ext_settings *x = &s->ext;
        fit_ext_pages(x, s->item_size_max);
        if (x->page_size % x->wbuf_size) {   /* memcached's rule and words */
            fprintf(err, "cachetd: -o ext_page_size=%llu,ext_wbuf_size=%llu: page_size must be divisible by wbuf_size\n",
                    (unsigned long long)(x->page_size >> 20), (unsigned long long)(x->wbuf_size >> 20));
            return EX_USAGE_CODE;
        }
        /* the flusher writes a record whole into one write buffer: an item
         * whose record cannot fit would stay a candidate forever, so refuse
         * (memcached refuses -I larger than ext_wbuf_size) */
        uint64_t wbuf = x->wbuf_size < x->page_size - EXT_PAGE_HEADER ? x->wbuf_size : x->page_size - EXT_PAGE_HEADER;
        if (ext_buffer_need(KEY_MAX_LENGTH, (uint32_t)s->item_size_max) > wbuf) {
            fprintf(err, "cachetd: -I (%zu bytes) is too large for ext_wbuf_size (%llu bytes): a record of the "
                         "largest item (%llu bytes in whole 4 KiB blocks, with its directory entry, a %d-byte key and the footer) must fit in one write buffer\n",
                    s->item_size_max, (unsigned long long)wbuf,
                    (unsigned long long)ext_buffer_need(KEY_MAX_LENGTH, (uint32_t)s->item_size_max), KEY_MAX_LENGTH);
            return EX_USAGE_CODE;
        }
        uint64_t pages = ext_pages_of(x, x->page_size);
        /* extstore.c's rule (ext_open): at least 2 pages, at most the
         * locator's 16-bit page id */
        if (pages < 2) {
            fprintf(err, "cachetd: -o ext_path: fewer than 2 pages of %llu bytes (lower ext_page_size or "
                         "raise the ext_path size)\n", (unsigned long long)x->page_size);
            return EX_USAGE_CODE;
        }
        if (pages > EXT_MAX_PAGES) {
            fprintf(err, "cachetd: -o ext_path: %llu pages is more than %u (raise ext_page_size or lower "
                         "the ext_path size)\n", (unsigned long long)pages, EXT_MAX_PAGES);
            return EX_USAGE_CODE;
        }
        /* memcached 1.6.45 (measured; its -h says 1/4 for drop_under, but
         * `stats settings` shows otherwise): both 1% of the pages (at least
         * 1) when neither is given, ext_drop_under 0 (never by free pages)
         * when only ext_compact_under is given. (It also overrides a given
         * ext_drop_under with the default compact_under; cachetd keeps it.) */
        if (!x->compact_under_set) x->compact_under = (uint32_t)(pages / 100 ? pages / 100 : 1);
        if (!x->drop_under_set) x->drop_under = x->compact_under_set ? 0 : x->compact_under;
    }
    if (ext->temporary_ttl && ext->no_lru_maintainer) {
        fprintf(err, "cachetd: temporary_ttl requires lru_maintainer to be enabled\n");
        return EX_USAGE_CODE;
    }
    return 0;
}

static int resolve_workers(struct settings *s, const struct ext_state *ext, bool threads_given, FILE *err)
{
    /* Workers and pinning: one worker per CPU in the list (default: the
     * CPUs this process may run on). -t overrides the count; workers are
     * then assigned to the listed CPUs round-robin. */
    int allowed[MAX_WORKERS];
    int nallowed = allowed_cpus(allowed, MAX_WORKERS);
    if (ext->cpus_given && s->pin_workers) {
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
    } else if (!ext->cpus_given) {
        memcpy(s->worker_cpus, allowed, sizeof(int) * nallowed);
        s->num_cpus_listed = nallowed;
    }
    if (!threads_given)
        s->num_threads = s->pin_workers ? s->num_cpus_listed : nallowed;
    if (s->num_threads < 1) s->num_threads = 1;
    /* placement picks a worker by the CPU it is pinned to */
    if (s->conn_placement != PLACE_OFF && !s->pin_workers) {
        fprintf(err, "cachetd: -o conn_placement needs pinned workers (not with -o cpus=none)\n");
        return EX_USAGE_CODE;
    }
    if (s->napi_map[0] && s->conn_placement != PLACE_NAPI) {
        fprintf(err, "cachetd: -o napi_map is read only with -o conn_placement=napi\n");
        return EX_USAGE_CODE;
    }
    /* every worker, background thread and extstore thread registers a
     * storage context, and there are STORAGE_MAX_THREADS of them */
    unsigned need = (unsigned)s->num_threads + STORAGE_BG_THREADS + (s->ext.npaths ? 2 + s->ext.threads : 0);   /* flusher, compactor */
    if (need > STORAGE_MAX_THREADS) {
        fprintf(err, "cachetd: -t %d%s needs %u storage threads, more than %d: use fewer threads\n",
                s->num_threads, s->ext.npaths ? " with ext_threads" : "", need, STORAGE_MAX_THREADS);
        return EX_USAGE_CODE;
    }
    return 0;
}

int settings_parse(struct settings *s, int argc, char **argv, FILE *err)
{
    settings_defaults(s);
    static char *merged[MAX_ARGS + 1];
    int n = 0;
    int rc = merge_arguments(argc, argv, merged, &n, err);
    if (rc) return rc;
    bool threads_given = false;
    struct ext_state ext = { .hot_pct = 20, .warm_pct = 40 };   /* memcached's defaults */
    if ((rc = parse_options(s, n, merged, &ext, &threads_given, err)) != 0) return rc;
    if ((rc = settings_validate(s, &ext, err)) != 0) return rc;
    if (s->tls.enabled && (!s->tls.chain_cert[0] || !s->tls.key[0])) {
        fprintf(err, "cachetd: -Z needs -o ssl_chain_cert=FILE,ssl_key=FILE\n");
        return EX_USAGE_CODE;
    }
    if (s->tls.metrics && (!s->tls.enabled || !s->metrics_port)) {
        fprintf(err, "cachetd: -o metrics_tls serves the metrics port with -Z's certificate: it needs -Z and "
                "-o metrics_port\n");
        return EX_USAGE_CODE;
    }
    if (s->tls.enabled && s->socketpath[0]) {
        fprintf(err, "cachetd: -Z serves TCP; -s (a unix socket) would be plaintext\n");
        return EX_USAGE_CODE;
    }
    return resolve_workers(s, &ext, threads_given, err);
}
