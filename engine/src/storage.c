/*
 * storage.c - the storage layer's lifecycle: the configuration's defaults
 * and limits, then every part started, and stopped, in one order.
 *
 * Why a file of its own: it is the one storage file that calls all the
 * others (the top of the storage layer); nothing below calls back into it.
 * The words every part reads (configuration, clock, flush_all, CAS ids) are
 * in clock.c, the thread registry in epoch.c, the statistics in
 * storage_stats.c.
 *
 * Concurrency: storage_init and the start/stop calls run on the main thread
 * (or a unit test's), before the workers start and after they stopped.
 */
#include "storage_internal.h"
#include "bgthread.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static bool threads_started;
static storage_thread *bg_ctx;

int items_init(void);
int items_check_config(void);
void items_destroy(void);

/* ---- lifecycle ---- */

/* g_cfg from cfg with defaults, and the checks that need nothing allocated */
static int take_config(const struct storage_config *cfg)
{
    g_cfg = *cfg;
    if (!g_cfg.mem_limit) g_cfg.mem_limit = (size_t)64 << 20;
    if (!g_cfg.item_size_max) g_cfg.item_size_max = 1024 * 1024;
    if (g_cfg.growth_factor <= 1.0) g_cfg.growth_factor = 1.25;
    if (!g_cfg.chunk_size_min) g_cfg.chunk_size_min = 48;
    if (!g_cfg.hashpower_init) g_cfg.hashpower_init = 16;
    if (!g_cfg.young_window) g_cfg.young_window = 60;
    g_use_cas = g_cfg.use_cas;   /* item sizes depend on it (clock_init sets it again) */
    if (g_cfg.item_size_max > g_cfg.mem_limit) {
        fprintf(stderr, "cachetd: item size max (-I %zu) cannot exceed the memory limit (-m %zu)\n",
                g_cfg.item_size_max, g_cfg.mem_limit);
        return -1;
    }
    if (g_cfg.hashpower_init < 8 || g_cfg.hashpower_init > 30) {
        fprintf(stderr, "cachetd: hashpower must be between 8 and 30\n");
        return -1;
    }
    return 0;
}

int storage_check_config(const struct storage_config *cfg)
{
    if (take_config(cfg) != 0 || slabs_plan() != 0) return -1;
    return items_check_config();
}

int storage_init(const struct storage_config *cfg)
{
    if (take_config(cfg) != 0) return -1;
    clock_init();
    storage_stats_init();
    if (slabs_init() != 0) return -1;
    slabs_mover_reset();
    slabs_gain_reset();
    slabs_gain_enable(g_cfg.slab_mover_gain);
    if (assoc_init(g_cfg.hashpower_init) != 0) return -1;
    if (bags_init() != 0) return -1;
    if (items_init() != 0) return -1;
    return 0;
}

int storage_start_threads(void)
{
    if (threads_started) return 0;
    threads_started = true;
    /* Without any one of these the cache silently degrades (a frozen clock
     * never expires items, no expander means ever-longer chains, no cleaner
     * means no eviction), so a failure to start one is fatal to the caller. */
    int rc = clock_start();
    if (rc == 0) rc = assoc_start_thread();
    if (rc == 0) rc = bags_start_thread();
    if (rc == 0) rc = slabs_start_thread();
    if (rc == 0) rc = slabs_prefault_start(slabs_prefault_region());
    if (rc == 0) rc = mrc_start_thread();
    if (rc != 0) {
        fprintf(stderr, "cachetd: cannot start storage threads: %s\n", strerror(rc));
        storage_stop_threads();
        return -1;
    }
    return 0;
}

void storage_stop_threads(void)
{
    if (!threads_started) return;
    mrc_stop_thread();
    /* after the mover: its rescues take fresh pages and wake the prefaulter */
    slabs_stop_thread();
    slabs_prefault_stop();
    bags_stop_thread();
    assoc_stop_thread();
    clock_stop();
    threads_started = false;
}

/* Tests: tear everything down so the next storage_init starts clean. */
void storage_test_shutdown(void)
{
    storage_stop_threads();
    items_destroy();
    bags_destroy();
    assoc_destroy();
    slabs_destroy();
    (void)bg_ctx;
}

