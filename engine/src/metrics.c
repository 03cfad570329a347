/*
 * metrics.c - the mapping from the stats registry to Prometheus metrics;
 * see metrics.h for why it is a table.
 *
 * How a scrape is rendered: every group the table uses is read once through
 * the registry into a per-call arena (name, slab class, value), then the
 * families are written in table order. A family whose stats are all absent
 * (extstore's without -o ext_path) is left out entirely. Values are
 * passed through as the registry printed them (exact for 64-bit counters);
 * only "yes"/"no" settings become 1/0 and the few derived samples
 * (memcached_exporter's "set" = cmd_set minus the CAS commands) are
 * computed.
 *
 * Where cachetd deviates from memcached_exporter's types: the exporter calls
 * memcached_uptime_seconds, memcached_slab_items_evicted_time_seconds and
 * memcached_extstore_bytes_used counters; they are not totals and a counter
 * must end in _total, so here they keep their names and are gauges.
 *
 * Concurrency: see metrics.h; all state is on the caller's stack or heap.
 */
#include "metrics.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_STATS   16384
#define ARENA_BYTES (1u << 20)
#define MAX_SAMPLES 16

enum metric_type { GAUGE, COUNTER, HISTOGRAM };

struct stat_entry {
    uint8_t  group;
    uint16_t cls;        /* slab class for items/slabs stats, else 0 */
    uint32_t name;       /* arena offset: the name, without "items:<c>:" / "<c>:" */
    uint32_t value;      /* arena offset */
};

struct collected {
    struct stat_entry *e;
    size_t n;
    char  *arena;
    size_t used;
    bool   overflow;
    enum stats_group group;    /* the group being read */
};

struct render;
struct family;
typedef void (*custom_emit)(struct render *r, const struct family *f);

struct sample {
    const char *stat;              /* for per-class families, the name after the class */
    const char *labels;            /* constant labels, or NULL */
    const char *minus[3];          /* derived: stat minus these stats */
};

struct family {
    const char *name;
    enum metric_type type;
    enum stats_group group;
    bool per_class;                /* one series per slab class, label slab */
    const char *help;
    custom_emit custom;
    struct sample s[MAX_SAMPLES];
};

struct render {
    struct collected *c;
    struct metrics_text *t;
    bool engine_up;
    size_t family_start;           /* where this family's HELP line begins */
    int samples;                   /* written for this family so far */
};

/* ------------------------------------------------------------------ output */

static void put(struct metrics_text *t, const char *s, size_t n)
{
    if (t->failed) return;
    if (t->len + n + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 64 * 1024;
        while (cap < t->len + n + 1) cap *= 2;
        if (cap > METRICS_TEXT_MAX) { t->failed = true; return; }
        char *b = realloc(t->buf, cap);
        if (!b) { t->failed = true; return; }
        t->buf = b;
        t->cap = cap;
    }
    memcpy(t->buf + t->len, s, n);
    t->len += n;
    t->buf[t->len] = '\0';
}

static void put_str(struct metrics_text *t, const char *s) { put(t, s, strlen(s)); }

static void put_fmt(struct metrics_text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put_fmt(struct metrics_text *t, const char *fmt, ...)
{
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof tmp) { t->failed = true; return; }
    put(t, tmp, (size_t)n);
}

/* Label values escape \ " and newline; HELP text escapes \ and newline. */
static void put_escaped(struct metrics_text *t, const char *s, bool quote)
{
    for (; *s; s++) {
        if (*s == '\\') put(t, "\\\\", 2);
        else if (*s == '\n') put(t, "\\n", 2);
        else if (*s == '"' && quote) put(t, "\\\"", 2);
        else put(t, s, 1);
    }
}

void metrics_text_free(struct metrics_text *t)
{
    free(t->buf);
    *t = (struct metrics_text){ 0 };
}

/* --------------------------------------------------------------- collecting */

/* "12:name" -> class 12 and "name"; anything else is class 0. */
static unsigned split_class(const char *name, const char **rest)
{
    unsigned cls = 0;
    const char *p = name;
    while (*p >= '0' && *p <= '9' && cls < 100000) cls = cls * 10 + (unsigned)(*p++ - '0');
    if (p == name || *p != ':' || cls == 0 || cls > UINT16_MAX) { *rest = name; return 0; }
    *rest = p + 1;
    return cls;
}

static bool arena_add(struct collected *c, const char *s, size_t n, uint32_t *off)
{
    if (c->used + n + 1 > ARENA_BYTES) return false;
    memcpy(c->arena + c->used, s, n);
    c->arena[c->used + n] = '\0';
    *off = (uint32_t)c->used;
    c->used += n + 1;
    return true;
}

static void collect(void *ctx, const char *name, const char *fmt, ...)
{
    struct collected *c = ctx;
    if (c->overflow) return;
    if (c->n >= MAX_STATS) { c->overflow = true; return; }
    const char *rest = name;
    unsigned cls = 0;
    if (c->group == STATS_ITEMS && !strncmp(name, "items:", 6)) cls = split_class(name + 6, &rest);
    else if (c->group == STATS_SLABS) cls = split_class(name, &rest);
    char value[512];
    va_list ap;
    va_start(ap, fmt);
    int vn = vsnprintf(value, sizeof value, fmt, ap);
    va_end(ap);
    if (vn < 0 || (size_t)vn >= sizeof value) return;    /* no metric has such a value */
    struct stat_entry *e = &c->e[c->n];
    if (!arena_add(c, rest, strlen(rest), &e->name) || !arena_add(c, value, (size_t)vn, &e->value)) {
        c->overflow = true;
        return;
    }
    e->group = (uint8_t)c->group;
    e->cls = (uint16_t)cls;
    c->n++;
}

static const char *entry_name(const struct collected *c, const struct stat_entry *e) { return c->arena + e->name; }
static const char *entry_value(const struct collected *c, const struct stat_entry *e) { return c->arena + e->value; }

static const char *lookup(const struct collected *c, enum stats_group g, unsigned cls, const char *name)
{
    for (size_t i = 0; i < c->n; i++) {
        const struct stat_entry *e = &c->e[i];
        if (e->group == g && e->cls == cls && !strcmp(entry_name(c, e), name)) return entry_value(c, e);
    }
    return NULL;
}

/* ------------------------------------------------------------------ samples */

/* A stat's value as a Prometheus number; false if it is not one. */
static bool as_number(const char *v, char *out, size_t cap)
{
    if (!strcmp(v, "yes") || !strcmp(v, "on")) v = "1";
    else if (!strcmp(v, "no") || !strcmp(v, "off")) v = "0";
    char *end;
    if (!*v || strlen(v) >= cap) return false;
    (void)strtod(v, &end);
    if (*end || !((*v >= '0' && *v <= '9') || *v == '-')) return false;
    strcpy(out, v);
    return true;
}

static void family_begin(struct render *r, const struct family *f)
{
    static const char *const types[] = { [GAUGE] = "gauge", [COUNTER] = "counter", [HISTOGRAM] = "histogram" };
    r->family_start = r->t->len;
    r->samples = 0;
    put_fmt(r->t, "# HELP %s ", f->name);
    put_escaped(r->t, f->help, false);
    put_fmt(r->t, "\n# TYPE %s %s\n", f->name, types[f->type]);
}

/* A family with no sample leaves no HELP/TYPE lines behind. */
static void family_end(struct render *r)
{
    if (r->samples == 0 && !r->t->failed) {
        r->t->len = r->family_start;
        if (r->t->buf) r->t->buf[r->t->len] = '\0';
    }
}

/* name{labels} value; labels is "" or a list without braces. */
static void sample_line(struct render *r, const char *name, const char *suffix, const char *labels, const char *value)
{
    put_str(r->t, name);
    put_str(r->t, suffix);
    if (labels && *labels) {
        put(r->t, "{", 1);
        put_str(r->t, labels);
        put(r->t, "}", 1);
    }
    put(r->t, " ", 1);
    put_str(r->t, value);
    put(r->t, "\n", 1);
    r->samples++;
}

/* The sample's value for one class (0 = not per class); false if absent. */
static bool sample_value(struct render *r, const struct family *f, const struct sample *s, unsigned cls,
                         char *out, size_t cap)
{
    const char *v = lookup(r->c, f->group, cls, s->stat);
    if (!v) return false;
    if (!s->minus[0]) return as_number(v, out, cap);
    /* memcached_exporter's derived "set": never below zero, even when the
     * counters were read a moment apart */
    unsigned long long total = strtoull(v, NULL, 10), sub = 0;
    for (int i = 0; i < 3 && s->minus[i]; i++) {
        const char *m = lookup(r->c, f->group, cls, s->minus[i]);
        if (!m) return false;
        sub += strtoull(m, NULL, 10);
    }
    snprintf(out, cap, "%llu", total > sub ? total - sub : 0ULL);
    return true;
}

static void emit_table_family(struct render *r, const struct family *f)
{
    char value[64], labels[160];
    for (const struct sample *s = f->s; s < f->s + MAX_SAMPLES && s->stat; s++) {
        if (!f->per_class) {
            if (sample_value(r, f, s, 0, value, sizeof value)) sample_line(r, f->name, "", s->labels, value);
            continue;
        }
        for (size_t i = 0; i < r->c->n; i++) {
            const struct stat_entry *e = &r->c->e[i];
            if (e->group != f->group || !e->cls || strcmp(entry_name(r->c, e), s->stat)) continue;
            if (!sample_value(r, f, s, e->cls, value, sizeof value)) continue;
            snprintf(labels, sizeof labels, "slab=\"%u\"%s%s", e->cls, s->labels ? "," : "", s->labels ? s->labels : "");
            sample_line(r, f->name, "", labels, value);
        }
    }
}

/* ---------------------------------------------------------- custom families */

static void emit_up(struct render *r, const struct family *f)
{
    sample_line(r, f->name, "", NULL, r->engine_up ? "1" : "0");
}

static void emit_version(struct render *r, const struct family *f)
{
    const char *v = lookup(r->c, STATS_GENERAL, 0, "version");
    if (!v) return;
    put_str(r->t, f->name);
    put_str(r->t, "{version=\"");
    put_escaped(r->t, v, true);
    put_str(r->t, "\"} 1\n");
    r->samples++;
}

/* One series per worker: stats settings lists the CPUs in use in ascending
 * order and workers take them round-robin (settings.h), so worker i runs on
 * the (i mod n)-th CPU of the list. */
static void emit_worker_cpus(struct render *r, const struct family *f)
{
    const char *nt = lookup(r->c, STATS_SETTINGS, 0, "num_threads");
    const char *list = lookup(r->c, STATS_SETTINGS, 0, "worker_cpus");
    if (!nt || !list) return;
    long threads = strtol(nt, NULL, 10);
    int cpus[1024], ncpus = 0;
    for (const char *p = list; *p && ncpus < 1024;) {
        if (*p < '0' || *p > '9') break;             /* "none": not pinned */
        cpus[ncpus++] = (int)strtol(p, (char **)&p, 10);
        if (*p == ',') p++;
    }
    char labels[64];
    for (long w = 0; w < threads && w < 4096; w++) {
        if (ncpus) snprintf(labels, sizeof labels, "worker=\"%ld\",cpu=\"%d\"", w, cpus[w % ncpus]);
        else snprintf(labels, sizeof labels, "worker=\"%ld\",cpu=\"none\"", w);
        sample_line(r, f->name, "", labels, "1");
    }
}

/* latency_stats() gives, per command: "<cmd>:le_<ns>" cumulative counts,
 * "<cmd>:count", "<cmd>:sum_ns". */
static void emit_latency(struct render *r, const struct family *f)
{
    char labels[96], value[64];
    const char *count = NULL;
    for (size_t i = 0; i < r->c->n; i++) {
        const struct stat_entry *e = &r->c->e[i];
        if (e->group != STATS_LATENCY) continue;
        const char *name = entry_name(r->c, e), *colon = strchr(name, ':');
        if (!colon || colon - name > 32) continue;
        const char *key = colon + 1, *v = entry_value(r->c, e);
        if (!as_number(v, value, sizeof value)) continue;
        if (!strncmp(key, "le_", 3)) {
            double le = strtod(key + 3, NULL) / 1e9;
            snprintf(labels, sizeof labels, "command=\"%.*s\",le=\"%.9g\"", (int)(colon - name), name, le);
            sample_line(r, f->name, "_bucket", labels, value);
        } else if (!strcmp(key, "count")) {
            snprintf(labels, sizeof labels, "command=\"%.*s\",le=\"+Inf\"", (int)(colon - name), name);
            sample_line(r, f->name, "_bucket", labels, value);
            count = v;
        } else if (!strcmp(key, "sum_ns") && count) {
            snprintf(labels, sizeof labels, "command=\"%.*s\"", (int)(colon - name), name);
            snprintf(value, sizeof value, "%.9f", strtod(v, NULL) / 1e9);
            sample_line(r, f->name, "_sum", labels, value);
            sample_line(r, f->name, "_count", labels, count);
            count = NULL;
        }
    }
}

/* The size histograms (STATS_SIZES_COARSE): <which>:le_<bytes> <cumulative
 * count>, one series per bucket with label max_bytes, cumulative like a
 * histogram's buckets (but counts of items held, so not a histogram type,
 * whose le label promtool keeps for histograms). */
static void emit_sizes(struct render *r, const struct family *f, const char *which)
{
    char labels[64], value[64];
    size_t n = strlen(which);
    for (size_t i = 0; i < r->c->n; i++) {
        const struct stat_entry *e = &r->c->e[i];
        if (e->group != STATS_SIZES_COARSE) continue;
        const char *name = entry_name(r->c, e);
        if (strncmp(name, which, n) || strncmp(name + n, ":le_", 4)) continue;
        const char *le = name + n + 4;
        if (!as_number(entry_value(r->c, e), value, sizeof value)) continue;
        snprintf(labels, sizeof labels, "max_bytes=\"%s\"", strcmp(le, "inf") ? le : "+Inf");
        sample_line(r, f->name, "", labels, value);
    }
}
static void emit_stored_sizes(struct render *r, const struct family *f) { emit_sizes(r, f, "stored"); }
static void emit_missed_sizes(struct render *r, const struct family *f) { emit_sizes(r, f, "missed"); }

/* `stats mrc`'s <bytes>:miss_ratio points, label cache_bytes. */
static void emit_miss_ratio(struct render *r, const struct family *f)
{
    char labels[64], value[64];
    for (size_t i = 0; i < r->c->n; i++) {
        const struct stat_entry *e = &r->c->e[i];
        if (e->group != STATS_MRC) continue;
        const char *name = entry_name(r->c, e), *colon = strchr(name, ':');
        if (!colon || strcmp(colon, ":miss_ratio") || colon - name > 24) continue;
        if (!as_number(entry_value(r->c, e), value, sizeof value)) continue;
        snprintf(labels, sizeof labels, "cache_bytes=\"%.*s\"", (int)(colon - name), name);
        sample_line(r, f->name, "", labels, value);
    }
}

/* -------------------------------------------------------------------- table */

#define CMD(c, s) "command=\"" c "\",status=\"" s "\""
#define ONE(name, type, group, stat, help) { name, type, group, false, help, NULL, { { stat, NULL, { NULL } } } }
#define SLAB(name, type, group, stat, help) { name, type, group, true, help, NULL, { { stat, NULL, { NULL } } } }
#define CUSTOM(name, type, group, fn, help) { name, type, group, false, help, fn, { { NULL, NULL, { NULL } } } }

static const struct family families[] = {
    /* ---- memcached_exporter's names, labels and types ---- */
    CUSTOM("memcached_up", GAUGE, STATS_GENERAL, emit_up,
           "Could the memcached server be reached: 1 if the latest mn round trip through the memcached port (at most 1 s old) got MN."),
    ONE("memcached_uptime_seconds", GAUGE, STATS_GENERAL, "uptime", "Number of seconds since the server started."),
    ONE("memcached_time_seconds", GAUGE, STATS_GENERAL, "time", "Current UNIX time according to the server."),
    CUSTOM("memcached_version", GAUGE, STATS_GENERAL, emit_version, "The version of this memcached server."),
    ONE("memcached_process_user_cpu_seconds_total", COUNTER, STATS_GENERAL, "rusage_user", "Accumulated user time for this process."),
    ONE("memcached_process_system_cpu_seconds_total", COUNTER, STATS_GENERAL, "rusage_system", "Accumulated system time for this process."),
    ONE("memcached_read_bytes_total", COUNTER, STATS_GENERAL, "bytes_read", "Total number of bytes read by this server from network."),
    ONE("memcached_written_bytes_total", COUNTER, STATS_GENERAL, "bytes_written", "Total number of bytes sent by this server to network."),
    ONE("memcached_current_connections", GAUGE, STATS_GENERAL, "curr_connections", "Current number of open connections."),
    ONE("memcached_max_connections", GAUGE, STATS_SETTINGS, "maxconns", "Maximum number of clients allowed."),
    ONE("memcached_connections_total", COUNTER, STATS_GENERAL, "total_connections", "Total number of connections opened since the server started running."),
    ONE("memcached_connections_rejected_total", COUNTER, STATS_GENERAL, "rejected_connections", "Total number of connections rejected due to hitting the -c limit."),
    ONE("memcached_auth_commands_total", COUNTER, STATS_GENERAL, "auth_cmds", "Authentication attempts (-Y), successful or not."),
    ONE("memcached_auth_errors_total", COUNTER, STATS_GENERAL, "auth_errors", "Failed authentication attempts (-Y): a wrong user or password."),
    ONE("memcached_connections_yielded_total", COUNTER, STATS_GENERAL, "conn_yields", "Total number of connections yielded running due to hitting the -R limit."),
    ONE("memcached_accepting_connections", GAUGE, STATS_GENERAL, "accepting_conns", "The server is currently accepting new connections."),
    ONE("memcached_current_bytes", GAUGE, STATS_GENERAL, "bytes", "Current number of bytes used to store items."),
    ONE("memcached_limit_bytes", GAUGE, STATS_GENERAL, "limit_maxbytes", "Number of bytes this server is allowed to use for storage."),
    ONE("memcached_malloced_bytes", GAUGE, STATS_GENERAL, "total_malloced", "Number of bytes of memory allocated to slab pages."),
    ONE("memcached_current_items", GAUGE, STATS_GENERAL, "curr_items", "Current number of items stored by this instance."),
    ONE("memcached_items_total", COUNTER, STATS_GENERAL, "total_items", "Total number of items stored during the life of this instance."),
    ONE("memcached_items_evicted_total", COUNTER, STATS_GENERAL, "evictions", "Total number of valid items removed from cache to free memory for new items."),
    ONE("memcached_items_reclaimed_total", COUNTER, STATS_GENERAL, "reclaimed", "Total number of times an entry was stored using memory from an expired entry."),
    { "memcached_commands_total", COUNTER, STATS_GENERAL, false,
      "Total number of all requests broken down by command (get, set, etc.) and status.", NULL, {
        { "get_hits", CMD("get", "hit"), { NULL } },       { "get_misses", CMD("get", "miss"), { NULL } },
        { "delete_hits", CMD("delete", "hit"), { NULL } }, { "delete_misses", CMD("delete", "miss"), { NULL } },
        { "incr_hits", CMD("incr", "hit"), { NULL } },     { "incr_misses", CMD("incr", "miss"), { NULL } },
        { "decr_hits", CMD("decr", "hit"), { NULL } },     { "decr_misses", CMD("decr", "miss"), { NULL } },
        { "cas_hits", CMD("cas", "hit"), { NULL } },       { "cas_misses", CMD("cas", "miss"), { NULL } },
        { "touch_hits", CMD("touch", "hit"), { NULL } },   { "touch_misses", CMD("touch", "miss"), { NULL } },
        { "cas_badval", CMD("cas", "badval"), { NULL } },
        { "cmd_flush", CMD("flush", "hit"), { NULL } },
        /* memcached counts CAS commands in cmd_set too */
        { "cmd_set", CMD("set", "hit"), { "cas_misses", "cas_hits", "cas_badval" } },
    } },
    SLAB("memcached_slab_current_items", GAUGE, STATS_ITEMS, "number", "Number of items currently stored in this slab class."),
    SLAB("memcached_slab_items_age_seconds", GAUGE, STATS_ITEMS, "age", "Number of seconds the oldest item has been in the slab class."),
    SLAB("memcached_slab_items_evicted_total", COUNTER, STATS_ITEMS, "evicted", "Total number of times an item had to be evicted from the LRU before it expired."),
    SLAB("memcached_slab_items_evicted_nonzero_total", COUNTER, STATS_ITEMS, "evicted_nonzero", "Total number of times an item which had an explicit expire time set had to be evicted from the LRU before it expired."),
    SLAB("memcached_slab_items_evicted_time_seconds", GAUGE, STATS_ITEMS, "evicted_time", "Seconds since the last access for the most recent item evicted from this class."),
    SLAB("memcached_slab_items_evicted_unfetched_total", COUNTER, STATS_ITEMS, "evicted_unfetched", "Total number of items evicted and never fetched."),
    SLAB("memcached_slab_items_expired_unfetched_total", COUNTER, STATS_ITEMS, "expired_unfetched", "Total number of valid items evicted from the LRU which were never touched after being set."),
    SLAB("memcached_slab_items_outofmemory_total", COUNTER, STATS_ITEMS, "outofmemory", "Total number of items for this slab class that have triggered an out of memory error."),
    SLAB("memcached_slab_items_reclaimed_total", COUNTER, STATS_ITEMS, "reclaimed", "Total number of items reclaimed."),
    SLAB("memcached_slab_chunk_size_bytes", GAUGE, STATS_SLABS, "chunk_size", "Number of bytes allocated to each chunk within this slab class."),
    SLAB("memcached_slab_chunks_per_page", GAUGE, STATS_SLABS, "chunks_per_page", "Number of chunks within a single page for this slab class."),
    SLAB("memcached_slab_current_pages", GAUGE, STATS_SLABS, "total_pages", "Number of pages allocated to this slab class."),
    SLAB("memcached_slab_current_chunks", GAUGE, STATS_SLABS, "total_chunks", "Number of chunks allocated to this slab class."),
    SLAB("memcached_slab_chunks_used", GAUGE, STATS_SLABS, "used_chunks", "Number of chunks allocated to an item."),
    SLAB("memcached_slab_chunks_free", GAUGE, STATS_SLABS, "free_chunks", "Number of chunks not yet allocated items."),
    SLAB("memcached_slab_chunks_free_end", GAUGE, STATS_SLABS, "free_chunks_end", "Number of free chunks at the end of the last allocated page."),
    SLAB("memcached_slab_mem_requested_bytes", GAUGE, STATS_SLABS, "mem_requested", "Number of bytes of memory actual items take up within a slab."),
    { "memcached_slab_commands_total", COUNTER, STATS_SLABS, true,
      "Total number of all requests broken down by command (get, set, etc.) and status per slab.", NULL, {
        { "get_hits", CMD("get", "hit"), { NULL } },     { "delete_hits", CMD("delete", "hit"), { NULL } },
        { "incr_hits", CMD("incr", "hit"), { NULL } },   { "decr_hits", CMD("decr", "hit"), { NULL } },
        { "cas_hits", CMD("cas", "hit"), { NULL } },     { "touch_hits", CMD("touch", "hit"), { NULL } },
        { "cas_badval", CMD("cas", "badval"), { NULL } },
        { "cmd_set", CMD("set", "hit"), { "cas_hits", "cas_badval" } },
    } },
    /* extstore: present only with -o ext_path (ext_items.c emits them then) */
    ONE("cachet_extstore_streams_cut_total", COUNTER, STATS_GENERAL, "extstore_streams_cut", "Large disk values whose connection was closed mid-value because a later piece could not be read."),
    ONE("memcached_extstore_compact_lost_total", COUNTER, STATS_GENERAL, "extstore_compact_lost", "Total number of items lost because they were locked during extstore compaction."),
    ONE("memcached_extstore_compact_rescued_total", COUNTER, STATS_GENERAL, "extstore_compact_rescues", "Total number of items moved to a new page during extstore compaction."),
    ONE("memcached_extstore_compact_skipped_total", COUNTER, STATS_GENERAL, "extstore_compact_skipped", "Total number of items dropped due to inactivity during extstore compaction."),
    ONE("memcached_extstore_pages_allocated_total", COUNTER, STATS_GENERAL, "extstore_page_allocs", "Total number of times a page was allocated in extstore."),
    ONE("memcached_extstore_pages_evicted_total", COUNTER, STATS_GENERAL, "extstore_page_evictions", "Total number of times a page was evicted from extstore."),
    ONE("memcached_extstore_pages_reclaimed_total", COUNTER, STATS_GENERAL, "extstore_page_reclaims", "Total number of times an empty extstore page was freed."),
    ONE("memcached_extstore_pages_free", GAUGE, STATS_GENERAL, "extstore_pages_free", "Number of extstore pages not yet containing any items."),
    ONE("memcached_extstore_pages_used", GAUGE, STATS_GENERAL, "extstore_pages_used", "Number of extstore pages containing at least one item."),
    ONE("memcached_extstore_objects_evicted_total", COUNTER, STATS_GENERAL, "extstore_objects_evicted", "Total number of items evicted from extstore to free up space."),
    ONE("memcached_extstore_objects_read_total", COUNTER, STATS_GENERAL, "extstore_objects_read", "Total number of items read from extstore."),
    ONE("memcached_extstore_objects_written_total", COUNTER, STATS_GENERAL, "extstore_objects_written", "Total number of items written to extstore."),
    ONE("memcached_extstore_objects_used", GAUGE, STATS_GENERAL, "extstore_objects_used", "Number of items stored in extstore."),
    ONE("memcached_extstore_bytes_evicted_total", COUNTER, STATS_GENERAL, "extstore_bytes_evicted", "Total number of bytes evicted from extstore to free up space."),
    ONE("memcached_extstore_bytes_written_total", COUNTER, STATS_GENERAL, "extstore_bytes_written", "Total number of bytes written to extstore."),
    ONE("memcached_extstore_bytes_read_total", COUNTER, STATS_GENERAL, "extstore_bytes_read", "Total number of bytes read from extstore."),
    ONE("memcached_extstore_bytes_used", GAUGE, STATS_GENERAL, "extstore_bytes_used", "Current number of bytes used to store items in extstore."),
    ONE("memcached_extstore_bytes_fragmented", GAUGE, STATS_GENERAL, "extstore_bytes_fragmented", "Current number of bytes in extstore pages allocated but not used to store an object."),
    ONE("memcached_extstore_bytes_limit", GAUGE, STATS_GENERAL, "extstore_limit_maxbytes", "Number of bytes of external storage allocated for this server."),
    ONE("memcached_extstore_io_queue_depth", GAUGE, STATS_GENERAL, "extstore_io_queue", "Number of items in the I/O queue waiting to be processed."),

    /* ---- cachetd's own ---- */
    CUSTOM("cachet_command_duration_seconds", HISTOGRAM, STATS_LATENCY, emit_latency,
           "Time from the first request of a worker's read batch until every reply of the batch is queued, counted once per request under its command."),
    ONE("cachet_evictions_young_total", COUNTER, STATS_GENERAL, "evictions_young", "Evictions of items that had been read within the young window (-o young_window): the cache is too small for its working set."),
    ONE("cachet_eviction_age_seconds", GAUGE, STATS_GENERAL, "eviction_age_last", "Seconds since the last access of the item evicted most recently (small means the cache is too small)."),
    ONE("cachet_young_window_seconds", GAUGE, STATS_SETTINGS, "young_window", "An eviction of an item read within this many seconds counts as young."),
    ONE("cachet_get_expired_total", COUNTER, STATS_GENERAL, "get_expired", "GETs that found an expired item."),
    ONE("cachet_get_flushed_total", COUNTER, STATS_GENERAL, "get_flushed", "GETs that found an item invalidated by flush_all."),
    ONE("cachet_get_copied_total", COUNTER, STATS_GENERAL, "get_copied", "GET hits whose value was copied into the output buffer."),
    ONE("cachet_get_referenced_total", COUNTER, STATS_GENERAL, "get_referenced", "GET hits whose value was sent in place (large values)."),
    ONE("cachet_meta_commands_total", COUNTER, STATS_GENERAL, "cmd_meta", "Meta protocol commands (mg, ms, md, ma, mn, me)."),
    ONE("cachet_hash_power_level", GAUGE, STATS_GENERAL, "hash_power_level", "The hash table has 2^level buckets."),
    ONE("cachet_hash_bytes", GAUGE, STATS_GENERAL, "hash_bytes", "Bytes of hash table buckets (both tables while expanding)."),
    ONE("cachet_hash_expanding", GAUGE, STATS_GENERAL, "hash_is_expanding", "1 while the hash table is being doubled."),
    ONE("cachet_hash_expansions_total", COUNTER, STATS_GENERAL, "hash_expansions", "Times the hash table was doubled."),
    ONE("cachet_hash_lock_stripes", GAUGE, STATS_GENERAL, "hash_lock_stripes", "Striped write locks of the hash table."),
    ONE("cachet_lru_bags", GAUGE, STATS_GENERAL, "lru_bags", "Bags in the bag LRU, all slab classes."),
    ONE("cachet_lru_bags_opened_total", COUNTER, STATS_GENERAL, "lru_bags_opened", "Bags opened by the bag LRU."),
    ONE("cachet_lru_bags_merged_total", COUNTER, STATS_GENERAL, "lru_bags_merged", "Bags merged into a newer bag by the cleaner."),
    ONE("cachet_lru_cleaner_passes_total", COUNTER, STATS_GENERAL, "lru_cleaner_passes", "Passes of the bag LRU cleaner thread."),
    ONE("cachet_lru_cleaner_sweeps_total", COUNTER, STATS_GENERAL, "lru_cleaner_sweeps", "Sweeps of a slab class's closed bags started by the cleaner."),
    ONE("cachet_lru_cleaner_items_visited_total", COUNTER, STATS_GENERAL, "lru_cleaner_items_visited", "Items the cleaner visited (swept or retagged by a merge)."),
    ONE("cachet_lru_cleaner_slice_max_items", GAUGE, STATS_GENERAL, "lru_cleaner_slice_max", "Most items the cleaner visited in one hold of a class lock, what a worker sharing its core may wait behind."),
    ONE("cachet_lru_items_moved_total", COUNTER, STATS_GENERAL, "lru_items_moved", "Items the cleaner moved to a newer bag because they were read."),
    ONE("cachet_lru_items_merged_total", COUNTER, STATS_GENERAL, "lru_items_merged", "Items moved by bag merges."),
    ONE("cachet_lru_items_expired_total", COUNTER, STATS_GENERAL, "lru_items_expired", "Expired items the cleaner reclaimed."),
    ONE("cachet_lru_flusher_hold_max", GAUGE, STATS_GENERAL, "lru_flusher_hold_max", "Most items extstore's flusher looked at in one hold of a slab class's eviction lock since start."),
    { "cachet_connections_placed_total", COUNTER, STATS_GENERAL, false,
      "New TCP connections by how -o conn_placement chose their worker: on the receiving CPU, on a sibling of it, through the NAPI map, or left with the accepting worker (only with conn_placement).", NULL, {
        { "conn_placed_cpu", "by=\"cpu\"", { NULL } }, { "conn_placed_sibling", "by=\"sibling\"", { NULL } },
        { "conn_placed_napi", "by=\"napi\"", { NULL } }, { "conn_placed_fallback", "by=\"fallback\"", { NULL } } } },
    CUSTOM("cachet_item_sizes", GAUGE, STATS_SIZES_COARSE, emit_stored_sizes,
           "Items stored now whose size (header, key and value) is at most max_bytes: `stats sizes` in coarser buckets, cumulative."),
    CUSTOM("cachet_missed_item_sizes_total", COUNTER, STATS_SIZES_COARSE, emit_missed_sizes,
           "Items stored right after a GET missed them, with size at most max_bytes, cumulative: the sizes the cache did not hold (`stats sizes` missed:)."),
    CUSTOM("cachet_miss_ratio", GAUGE, STATS_MRC, emit_miss_ratio,
           "Estimated miss ratio of the live GET stream for an LRU cache of cache_bytes of items (SHARDS, `stats mrc`)."),
    ONE("cachet_mrc_sample_rate", GAUGE, STATS_MRC, "sample_rate", "Share of keys the miss-ratio curve samples."),
    ONE("cachet_mrc_references_total", COUNTER, STATS_MRC, "references", "GETs the miss-ratio curve has seen since the start or stats reset."),
    ONE("cachet_extstore_flusher_passes_total", COUNTER, STATS_GENERAL, "extstore_flusher_passes", "Passes of the extstore flusher thread (only with -o ext_path)."),
    ONE("cachet_slow_kicks_total", COUNTER, STATS_GENERAL, "slow_kicks", "Clients closed for holding connection buffer budget a disk read waited for, taking nothing (only with -o ext_path)."),
    ONE("cachet_slab_global_page_pool_pages", GAUGE, STATS_GENERAL, "slab_global_page_pool", "Slab pages not yet given to any class."),
    ONE("cachet_slab_pages_moved_total", COUNTER, STATS_GENERAL, "slabs_moved", "Slab pages moved between classes."),
    ONE("cachet_slab_reassign_busy_items_total", COUNTER, STATS_SLABS, "slab_reassign_busy_items", "Page moves that found an item in use and had to wait or give up."),
    ONE("cachet_slab_reassign_rescues_total", COUNTER, STATS_GENERAL, "slab_reassign_rescues", "Items moved to another chunk of their class, instead of evicted, to move a page."),
    SLAB("cachet_slab_items_expired_total", COUNTER, STATS_ITEMS, "expired", "Expired items reclaimed in this slab class."),
    SLAB("cachet_slab_items_evicted_young_total", COUNTER, STATS_ITEMS, "evicted_young", "Young evictions (see cachet_evictions_young_total) in this slab class."),
    SLAB("cachet_slab_reassign_evictions_total", COUNTER, STATS_ITEMS, "slab_reassign_evictions", "Items evicted to move a page out of this slab class."),
    SLAB("cachet_slab_bags", GAUGE, STATS_ITEMS, "bags", "Bags of this slab class's LRU."),
    SLAB("cachet_slab_items_dead_waiting", GAUGE, STATS_ITEMS, "dead_waiting", "Dead items (expired, flushed, replaced) waiting for the cleaner in this slab class."),
    SLAB("cachet_slab_pages_moved_in_total", COUNTER, STATS_SLABS, "pages_moved_in", "Pages moved into this slab class."),
    SLAB("cachet_slab_pages_moved_out_total", COUNTER, STATS_SLABS, "pages_moved_out", "Pages moved out of this slab class."),
    ONE("cachet_connection_buffer_bytes", GAUGE, STATS_GENERAL, "conn_buffer_bytes", "Connection buffer memory above the resting 32 KiB per connection, all connections."),
    ONE("cachet_connection_buffer_limit_bytes", GAUGE, STATS_SETTINGS, "conn_buffer_limit", "-o conn_buffer_limit (0 = none)."),
    ONE("cachet_worker_threads", GAUGE, STATS_SETTINGS, "num_threads", "Worker threads."),
    CUSTOM("cachet_worker_cpu_info", GAUGE, STATS_SETTINGS, emit_worker_cpus, "The CPU each worker thread is pinned to (cpu=\"none\" if not pinned)."),
    ONE("cachet_io_uring_enabled", GAUGE, STATS_SETTINGS, "io_uring", "1 if workers batch reads and sends with io_uring."),
};

/* ------------------------------------------------------------------ render */

bool metrics_render_from(struct metrics_text *out, bool engine_up, metrics_source source)
{
    struct collected c = { 0 };
    c.e = malloc(sizeof(*c.e) * MAX_STATS);
    c.arena = malloc(ARENA_BYTES);
    bool ok = c.e && c.arena;
    static const enum stats_group groups[] = { STATS_GENERAL, STATS_SETTINGS, STATS_ITEMS, STATS_SLABS, STATS_LATENCY,
                                                STATS_MRC, STATS_SIZES_COARSE };
    for (size_t g = 0; ok && g < sizeof groups / sizeof groups[0]; g++) {
        c.group = groups[g];
        source(c.group, collect, &c);
    }
    ok = ok && !c.overflow;
    struct render r = { .c = &c, .t = out, .engine_up = engine_up };
    for (size_t i = 0; ok && i < sizeof families / sizeof families[0]; i++) {
        const struct family *f = &families[i];
        family_begin(&r, f);
        if (f->custom) f->custom(&r, f);
        else emit_table_family(&r, f);
        family_end(&r);
    }
    free(c.e);
    free(c.arena);
    if (!ok || out->failed) {
        metrics_text_free(out);
        return false;
    }
    return true;
}

bool metrics_render(struct metrics_text *out, bool engine_up)
{
    return metrics_render_from(out, engine_up, stats_emit);
}
