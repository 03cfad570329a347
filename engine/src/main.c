/*
 * main.c - cachetd's entry point: parse the command line, start storage and
 * the workers, then wait for SIGTERM/SIGINT (SIGHUP: reload the -Y authfile
 * and the -Z certificates, as memcached).
 *
 * Why signals are handled with sigwait in the main thread: every thread
 * inherits a mask that blocks SIGTERM and SIGINT, so no worker is ever
 * interrupted mid-request; the main thread alone waits for them and runs an
 * orderly shutdown (stop accepting, finish queued replies, close, exit 0)
 * within a few seconds, which is what a Kubernetes preStop hook and the
 * pod's termination grace period expect. The `shutdown` command (-A) takes
 * the same path: it sends the process SIGTERM (server_request_shutdown).
 *
 * --check-args and --memory-budget stop after the parse: the operator and
 * the tests ask the binary itself whether arguments are valid and how much
 * memory they need, rather than keeping copies of its rules.
 */
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "auth.h"
#include "conn.h"
#include "tls.h"
#include "ext_io.h"
#include "latency.h"
#include "logger.h"
#include "metrics_server.h"
#include "bufmem.h"
#include "memory_budget.h"
#include "net.h"
#include "proc.h"
#include "server.h"
#include "storage.h"

/* The memory bound (memory_budget.c, engine/README.md "Memory") rests on two allocator
 * settings, made before anything is allocated: one malloc arena, so memory
 * one worker frees is reused by any other instead of staying behind in a
 * per-thread arena (no request path allocates, so there is no contention to
 * lose); and a fixed mmap threshold, so every grown connection buffer is a
 * mapping of its own, given back to the kernel when it is freed, instead of
 * glibc raising the threshold after each free and fragmenting the heap. */
static void malloc_for_bounded_memory(void)
{
#ifdef M_ARENA_MAX
    mallopt(M_ARENA_MAX, 1);
#endif
#ifdef M_MMAP_THRESHOLD
    mallopt(M_MMAP_THRESHOLD, 64 * 1024);
#endif
}

/* --check-args and --memory-budget answer about the other arguments without
 * starting: the operator and the tests ask the binary itself whether a
 * command line is valid and how much memory it needs. They are taken out of
 * argv before parsing, so the rest reads exactly as a start would read it. */
enum run_mode { RUN_SERVE, RUN_CHECK_ARGS, RUN_MEMORY_BUDGET };

static enum run_mode take_run_mode(int *argc, char **argv)
{
    enum run_mode mode = RUN_SERVE;
    int n = 1;
    for (int i = 1; i < *argc; i++) {
        if (!strcmp(argv[i], "--")) {
            while (i < *argc) argv[n++] = argv[i++];
            break;
        }
        if (!strcmp(argv[i], "--check-args")) mode = RUN_CHECK_ARGS;
        else if (!strcmp(argv[i], "--memory-budget")) mode = RUN_MEMORY_BUDGET;
        else argv[n++] = argv[i];
    }
    argv[n] = NULL;
    *argc = n;
    return mode;
}

static struct storage_config storage_config_of(const struct settings *s)
{
    return (struct storage_config){
        .mem_limit = s->maxbytes,
        .item_size_max = s->item_size_max,
        .growth_factor = s->growth_factor,
        .chunk_size_min = s->chunk_size,
        .slab_sizes = s->slab_sizes_count ? s->slab_sizes : NULL,
        .slab_sizes_count = s->slab_sizes_count,
        .slab_chunk_max = s->slab_chunk_max,
        .hashpower_init = s->hashpower,
        .use_cas = s->use_cas,
        .evict_disabled = s->evict_disabled,
        .no_slab_reassign = s->no_slab_reassign,
        .no_hashexpand = s->no_hashexpand,
        .temp_lru = s->temp_lru,
        .temporary_ttl = s->temporary_ttl,
        .slab_mover_gain = s->slab_mover_gain,
        .young_window = s->young_window,
        .stub_classes = s->ext.npaths > 0,
        .verbose = s->verbose,
    };
}

int main(int argc, char **argv)
{
    malloc_for_bounded_memory();
    enum run_mode mode = take_run_mode(&argc, argv);
    int rc = settings_parse(&settings, argc, argv, stderr);
    if (rc == 1) return 0;
    if (rc) return rc;
    struct storage_config sc = storage_config_of(&settings);
    /* storage's own arithmetic (class ladder, chain capacity): a usage
     * error in every mode, before anything starts */
    if (storage_check_config(&sc) != 0) return EX_USAGE_CODE;
    if (mode == RUN_CHECK_ARGS) return 0;
    if (mode == RUN_MEMORY_BUDGET) {
        struct memory_budget budget;
        memory_budget_of(&settings, &budget);
        memory_budget_print_json(&budget, stdout);
        return 0;
    }
    rc = proc_early(&settings);   /* -r -d -k: before any thread exists */
    if (rc) return rc;

    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGTERM);
    sigaddset(&stop_signals, SIGINT);
    sigaddset(&stop_signals, SIGHUP);   /* -Y: reload the authfile, as memcached */
    pthread_sigmask(SIG_BLOCK, &stop_signals, NULL);
    signal(SIGPIPE, SIG_IGN);
    server_started = time(NULL);
    bufmem_set_limit(settings.conn_buffer_limit);

    if (settings.auth_file[0]) {
        char err[160];
        if (auth_start(settings.auth_file, err, sizeof(err)) != 0) {
            fprintf(stderr, "cachetd: -Y %s: %s\n", settings.auth_file, err);
            return EX_USAGE_CODE;
        }
    }
    if (settings.tls.enabled) {
        char err[512];
        if (tls_start(err, sizeof(err)) != 0) {
            fprintf(stderr, "cachetd: -Z: %s\n", err);
            return EX_USAGE_CODE;
        }
    }
    if (storage_init(&sc) != 0) return 70;   /* EX_SOFTWARE: storage already said why */
    storage_set_slab_automove(settings.slab_automove);
    /* extstore: a path that cannot be opened or sized is a usage error (64) */
    if ((rc = storage_ext_start(&settings.ext)) != 0) return rc;
    if (storage_ext_enabled() && ext_io_start(settings.ext.threads, settings.ext.io_depth) != 0) {
        fprintf(stderr, "cachetd: cannot start the extstore IO threads\n");
        return 70;
    }
    if (server_create_workers() != 0) {
        fprintf(stderr, "cachetd: cannot create worker event loops\n");
        return 71;
    }
    /* -u: the fd limit is raised (root), the sockets are not bound yet */
    if ((rc = proc_drop_user(&settings)) != 0) return rc;
    if (server_listen_all() != 0) return 71;  /* EX_OSERR: message already printed */
    /* a cache without its clock, cleaner, expander or mover would serve
     * wrong TTLs and fill up: refuse to run (storage printed why) */
    if (storage_start_threads() != 0) return 70;
    if (settings.metrics_port) {
        /* the histograms exist only for the metrics port: without it the
         * workers' hook is one branch */
        if (latency_init(num_workers) != 0) {
            fprintf(stderr, "cachetd: no memory for the latency histograms\n");
            return 70;
        }
        struct metrics_server_config mc = { .port = settings.metrics_port, .listen = settings.listen,
                                             .engine_port = settings.port, .verbose = settings.verbose,
                                             .authfile = settings.auth_file[0] != '\0', .tls = settings.tls.metrics };
        if (metrics_server_start(&mc) != 0) return 71;
    }
    if (server_start_workers() != 0) return 71;
    proc_write_pidfile(&settings);

    /* workers run now, and `verbosity` may store to it from one of them */
    if (__atomic_load_n(&settings.verbose, __ATOMIC_RELAXED)) {
        char cpus[1024] = "none";
        int list[MAX_WORKERS], n = 0;
        for (int i = 0; i < num_workers; i++) if (workers[i].cpu >= 0) list[n++] = workers[i].cpu;
        if (n) format_cpu_list(list, n, cpus, sizeof(cpus));
        char where[160];
        if (settings.socketpath[0]) snprintf(where, sizeof(where), "unix socket %s", settings.socketpath);
        else snprintf(where, sizeof(where), "port %d", settings.port);
        fprintf(stderr, "cachetd %s listening on %s, %d worker(s), CPUs %s, %zu MB, "
                "connection buffers capped at %zu bytes\n",
                CACHET_VERSION, where, num_workers, cpus, settings.maxbytes >> 20, settings.conn_buffer_limit);
    }

    int sig = 0;
    for (;;) {
        if (sigwait(&stop_signals, &sig) != 0) continue;
        if (sig != SIGHUP) break;
        if (__atomic_load_n(&settings.verbose, __ATOMIC_RELAXED)) fprintf(stderr, "cachetd: SIGHUP, reloading the authfile and certificates\n");
        auth_reload();
        char err[512];
        if (tls_enabled() && tls_refresh(err, sizeof err) != 0)
            fprintf(stderr, "cachetd: certificates not reloaded: %s\n", err);
    }
    if (__atomic_load_n(&settings.verbose, __ATOMIC_RELAXED)) fprintf(stderr, "cachetd: signal %d, shutting down\n", sig);
    server_shutdown();
    ext_io_stop();
    storage_ext_stop();
    metrics_server_stop();   /* after the workers: /healthz says 503 while they drain */
    storage_stop_threads();
    log_stop();              /* last: the storage threads above may still log */
    proc_remove_pidfile(&settings);
    return 0;
}
