/*
 * test_helpers.h - shared setup for the storage unit tests: start a storage
 * instance with a given config, store/fetch strings in one call.
 */
#ifndef CACHET_TEST_HELPERS_H
#define CACHET_TEST_HELPERS_H

#include "harness.h"
#include "storage_internal.h"

void storage_test_shutdown(void);
void slabs_set_mover_ctx(storage_thread *t);
void bags_set_target_min(uint32_t n);

static storage_thread *T;

static inline void setup(size_t mem_mb, int hashpower, bool threads)
{
    struct storage_config cfg = {0};
    cfg.mem_limit = mem_mb << 20;
    cfg.item_size_max = 1024 * 1024;
    cfg.growth_factor = 1.25;
    cfg.chunk_size_min = 48;
    cfg.hashpower_init = hashpower;
    cfg.use_cas = true;
    if (storage_init(&cfg) != 0) { fprintf(stderr, "storage_init failed\n"); exit(2); }
    if (!T) T = storage_thread_register();
    slabs_set_mover_ctx(T);
    if (threads && storage_start_threads() != 0) { fprintf(stderr, "storage_start_threads failed\n"); exit(2); }
}

static inline void setup_cfg(const struct storage_config *cfg, bool threads)
{
    if (storage_init(cfg) != 0) { fprintf(stderr, "storage_init failed\n"); exit(2); }
    if (!T) T = storage_thread_register();
    slabs_set_mover_ctx(T);
    if (threads && storage_start_threads() != 0) { fprintf(stderr, "storage_start_threads failed\n"); exit(2); }
}

static inline void teardown(void) { storage_test_shutdown(); }

static inline enum store_result put_full(const char *key, const char *val, uint32_t flags, rel_time_t exp,
                                         enum store_mode mode, const struct store_opts *o, uint64_t *cas)
{
    enum store_result err = STORE_STORED;
    size_t n = strlen(val);
    item *it = item_alloc(T, key, strlen(key), flags, exp, (uint32_t)n, &err);
    if (!it) return err;
    for (size_t off = 0; off < n;) {   /* values past slab_chunk_max are in pieces */
        size_t len;
        char *dst = item_value_span(it, off, &len);
        memcpy(dst, val + off, len);
        off += len;
    }
    return storage_store(T, it, mode, o, cas);
}

static inline enum store_result put(const char *key, const char *val)
{
    return put_full(key, val, 0, 0, MODE_SET, NULL, NULL);
}

/* Returns the value as a NUL-terminated static string, or NULL on a miss. */
static inline const char *get_str(const char *key, struct item_view *vout)
{
    static char buf[1 << 16];
    struct item_view v;
    if (!storage_get(T, key, strlen(key), NULL, buf, sizeof buf - 1, &v)) { if (vout) *vout = v; return NULL; }
    if (v.ref) { memcpy(buf, v.value, v.nbytes); item_view_release(T, &v); v.value = buf; }
    buf[v.nbytes] = '\0';
    if (vout) *vout = v;
    return buf;
}

static inline bool streq(const char *a, const char *b) { return a && b && strcmp(a, b) == 0; }



#include <stdarg.h>

/* Reads one numeric stat through the same writer interface the server uses. */
struct stat_grab { const char *want; long long value; bool found; };
static void stat_grab_cb(void *ctx, const char *name, const char *fmt, ...)
{
    struct stat_grab *g = ctx;
    if (strcmp(name, g->want) != 0) return;
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    g->value = atoll(buf);
    g->found = true;
}
static inline long long stat_of(void (*fn)(stat_writer, void *), const char *name)
{
    struct stat_grab g = {name, -1, false};
    fn(stat_grab_cb, &g);
    return g.value;
}
static inline long long gstat(const char *name) { return stat_of(storage_stats_general, name); }
#endif
