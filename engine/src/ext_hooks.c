/*
 * ext_hooks.c - the extstore hook table and the IO threads' counters (why
 * a table: ext_hooks.h).
 *
 * Why a file of its own: both the item code and the IO layer call it, so it
 * must call neither; it holds the table's default (no extstore: nothing to
 * do) and the counters, nothing else.
 *
 * Concurrency: see ext_hooks.h.
 */
#include "ext_hooks.h"

static void no_item_gone(item *it) { (void)it; }
static bool no_materialize(storage_thread *t, const char *key, size_t nkey, uint32_t hv)
{
    (void)t; (void)key; (void)nkey; (void)hv;
    return true;   /* no stub to bring back */
}
static void no_note_pressure(void) { }
static enum await_result no_await_flusher(storage_thread *t, int clsid) { (void)t; (void)clsid; return AWAIT_NONE; }
static bool no_stub_orphaned(item *it) { (void)it; return false; }
static uint64_t no_records_orphaned_total(void) { return 0; }
static int no_stub_class_max(void) { return 0; }
static bool no_fetch_done(storage_thread *t, const char *key, size_t nkey, const struct item_view *v,
                          enum ext_read_result r, const char *val, const uint8_t at[12])
{
    (void)t; (void)key; (void)nkey; (void)v; (void)r; (void)val; (void)at;
    return false;
}
static bool no_moved(const char *key, size_t nkey, const struct item_view *v, uint8_t at[12])
{
    (void)key; (void)nkey; (void)v; (void)at;
    return false;
}

static bool no_flush_item(storage_thread *t, item *it, const char *key, size_t nkey)
{
    (void)t; (void)it; (void)key; (void)nkey;
    return false;
}

static const struct ext_hooks no_extstore = {
    .store = NULL,
    .item_gone = no_item_gone,
    .materialize = no_materialize,
    .flush_item = no_flush_item,
    .note_pressure = no_note_pressure,
    .await_flusher = no_await_flusher,
    .stub_orphaned = no_stub_orphaned,
    .records_orphaned_total = no_records_orphaned_total,
    .stub_class_max = no_stub_class_max,
    .fetch_done = no_fetch_done,
    .moved = no_moved,
};

_Atomic(const struct ext_hooks *) g_ext_hooks = &no_extstore;
struct ext_io_counts g_ext_io_counts;

void ext_hooks_install(const struct ext_hooks *h)
{
    atomic_store_explicit(&g_ext_hooks, h ? h : &no_extstore, memory_order_release);
}

bool storage_ext_enabled(void) { return ext_hooks()->store != NULL; }
void storage_ext_count_get(void) { atomic_fetch_add_explicit(&g_ext_io_counts.get, 1, memory_order_relaxed); }
void storage_ext_count_aborted(void) { atomic_fetch_add_explicit(&g_ext_io_counts.aborted, 1, memory_order_relaxed); }
void storage_ext_count_stream_cut(void) { atomic_fetch_add_explicit(&g_ext_io_counts.streams_cut, 1, memory_order_relaxed); }
void storage_ext_count_oom(void) { atomic_fetch_add_explicit(&g_ext_io_counts.oom, 1, memory_order_relaxed); }
void storage_ext_count_queue(int delta)
{
    atomic_fetch_add_explicit(&g_ext_io_counts.queue, delta, memory_order_relaxed);
}
