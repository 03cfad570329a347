/*
 * server.c - process-wide server state and the server's own statistics
 * (`stats`, `stats settings`, `stats conns`); see server.h for why it sits
 * below both the network and the protocol layer and for its locking.
 */
#include "server.h"

#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "bufmem.h"
#include "reply.h"

struct settings  settings;
struct worker   *workers;
int              num_workers;
uint32_t         curr_conns_global;
uint64_t         total_conns_global, rejected_conns_global;
uint64_t         placed_conns_global[PLACED_KINDS];
time_t           server_started;
#ifdef CACHET_TEST_HOOKS
_Atomic uint32_t conn_clock_test_offset_s;
#endif

static pthread_mutex_t registry_mutex = PTHREAD_MUTEX_INITIALIZER;
atomic_bool server_stopping;

void server_set_shutting_down(void) { atomic_store_explicit(&server_stopping, true, memory_order_release); }
/* kill(), not raise(): raise() targets the calling worker, which blocks
 * SIGTERM like every thread but main's sigwait */
void server_request_shutdown(void) { kill(getpid(), SIGTERM); }
void registry_lock(void) { pthread_mutex_lock(&registry_mutex); }
void registry_unlock(void) { pthread_mutex_unlock(&registry_mutex); }

/* ------------------------------------------------------------------- stats */

void server_stats_reset(void)
{
    for (int i = 0; i < num_workers; i++)
        memset(&workers[i].stats, 0, sizeof(workers[i].stats));
    __atomic_store_n(&total_conns_global, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&rejected_conns_global, 0, __ATOMIC_RELAXED);
    for (int k = 0; k < PLACED_KINDS; k++) __atomic_store_n(&placed_conns_global[k], 0, __ATOMIC_RELAXED);
}

static uint64_t sum_stat(size_t offset)
{
    uint64_t s = 0;
    for (int i = 0; i < num_workers; i++)
        s += __atomic_load_n((uint64_t *)((char *)&workers[i].stats + offset), __ATOMIC_RELAXED);
    return s;
}
#define SUM(field) sum_stat(offsetof(struct server_stats, field))

void server_stats_general(stat_writer w, void *ctx)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    time_t now = time(NULL);
    w(ctx, "pid", "%d", (int)getpid());
    w(ctx, "uptime", "%ld", (long)(now - server_started));
    w(ctx, "time", "%ld", (long)now);
    w(ctx, "version", "%s", CACHET_PROTO_VERSION);
    w(ctx, "libevent", "%s", "none");
    w(ctx, "pointer_size", "%d", (int)(8 * sizeof(void *)));
    w(ctx, "rusage_user", "%ld.%06ld", (long)ru.ru_utime.tv_sec, (long)ru.ru_utime.tv_usec);
    w(ctx, "rusage_system", "%ld.%06ld", (long)ru.ru_stime.tv_sec, (long)ru.ru_stime.tv_usec);
    w(ctx, "max_connections", "%d", settings.maxconns);
    w(ctx, "curr_connections", "%u", __atomic_load_n(&curr_conns_global, __ATOMIC_RELAXED));
    w(ctx, "total_connections", "%llu", (unsigned long long)__atomic_load_n(&total_conns_global, __ATOMIC_RELAXED));
    w(ctx, "rejected_connections", "%llu", (unsigned long long)__atomic_load_n(&rejected_conns_global, __ATOMIC_RELAXED));
    w(ctx, "connection_structures", "%u", __atomic_load_n(&curr_conns_global, __ATOMIC_RELAXED));
    if (settings.conn_placement != PLACE_OFF) {
        static const char *const placed_name[PLACED_KINDS] = {
            [PLACED_CPU] = "conn_placed_cpu", [PLACED_SIBLING] = "conn_placed_sibling",
            [PLACED_NAPI] = "conn_placed_napi", [PLACED_FALLBACK] = "conn_placed_fallback" };
        for (int k = 0; k < PLACED_KINDS; k++)
            w(ctx, placed_name[k], "%llu", (unsigned long long)__atomic_load_n(&placed_conns_global[k], __ATOMIC_RELAXED));
    }
    w(ctx, "cmd_get", "%llu", (unsigned long long)SUM(cmd_get));
    w(ctx, "cmd_set", "%llu", (unsigned long long)SUM(cmd_set));
    w(ctx, "cmd_flush", "%llu", (unsigned long long)SUM(cmd_flush));
    w(ctx, "cmd_touch", "%llu", (unsigned long long)SUM(cmd_touch));
    w(ctx, "cmd_meta", "%llu", (unsigned long long)SUM(cmd_meta));
    w(ctx, "store_too_large", "%llu", (unsigned long long)SUM(store_too_large));
    w(ctx, "store_no_memory", "%llu", (unsigned long long)SUM(store_no_memory));
    w(ctx, "auth_cmds", "%llu", (unsigned long long)SUM(auth_cmds));
    w(ctx, "auth_errors", "%llu", (unsigned long long)SUM(auth_errors));
    w(ctx, "bytes_read", "%llu", (unsigned long long)SUM(bytes_read));
    w(ctx, "bytes_written", "%llu", (unsigned long long)SUM(bytes_written));
    w(ctx, "accepting_conns", "%d", server_shutting_down() ? 0 : 1);
    w(ctx, "threads", "%d", num_workers);
    w(ctx, "conn_yields", "%llu", (unsigned long long)SUM(conn_yields));
    w(ctx, "conn_buffer_bytes", "%zu", bufmem_used());
    w(ctx, "response_obj_oom", "%llu", (unsigned long long)SUM(response_obj_oom));
    w(ctx, "read_buf_oom", "%llu", (unsigned long long)SUM(read_buf_oom));
    if (storage_ext_enabled())
        w(ctx, "slow_kicks", "%llu", (unsigned long long)SUM(slow_kicks));
    if (settings.tls.enabled) {
        w(ctx, "tls_staged_reads", "%llu", (unsigned long long)SUM(tls_staged_reads));
        w(ctx, "tls_staged_sends", "%llu", (unsigned long long)SUM(tls_staged_sends));
    }
    if (settings.idle_timeout)
        w(ctx, "idle_kicks", "%llu", (unsigned long long)SUM(idle_kicks));
    w(ctx, "deferred_replies", "%llu", (unsigned long long)reply_deferred_total());
    w(ctx, "deferred_replies_active", "%llu", (unsigned long long)reply_handles_alive());
}

void server_stats_settings(stat_writer w, void *ctx)
{
    char cpus[1024];
    int list[MAX_WORKERS];
    int n = 0;
    for (int i = 0; i < num_workers; i++) {
        if (workers[i].cpu < 0) continue;
        bool seen = false;
        for (int j = 0; j < n; j++) if (list[j] == workers[i].cpu) seen = true;
        if (!seen) list[n++] = workers[i].cpu;
    }
    for (int i = 1; i < n; i++)        /* tiny insertion sort */
        for (int j = i; j > 0 && list[j - 1] > list[j]; j--) { int t = list[j]; list[j] = list[j - 1]; list[j - 1] = t; }
    format_cpu_list(list, n, cpus, sizeof(cpus));
    w(ctx, "maxconns", "%d", settings.maxconns);
    w(ctx, "maxconns_fast", "%s", settings.no_maxconns_fast ? "no" : "yes");
    w(ctx, "tcpport", "%d", settings.port);
    w(ctx, "udpport", "%d", 0);
    w(ctx, "inter", "%s", settings.listen[0] ? settings.listen : "NULL");
    w(ctx, "verbosity", "%d", __atomic_load_n(&settings.verbose, __ATOMIC_RELAXED));
    w(ctx, "evictions", "%s", settings.evict_disabled ? "off" : "on");
    w(ctx, "domain_socket", "%s", settings.socketpath[0] ? settings.socketpath : "NULL");
    w(ctx, "umask", "%o", settings.access_mask);
    w(ctx, "shutdown_command", "%s", settings.shutdown_command ? "yes" : "no");
    w(ctx, "auth_enabled_sasl", "%s", "no");
    w(ctx, "auth_enabled_ascii", "%s", settings.auth_file[0] ? settings.auth_file : "no");
    w(ctx, "flush_enabled", "%s", settings.flush_enabled ? "yes" : "no");
    w(ctx, "cas_enabled", "%s", settings.use_cas ? "yes" : "no");
    w(ctx, "tcp_backlog", "%d", settings.backlog);
    w(ctx, "binding_protocol", "%s", "ascii");
    w(ctx, "num_threads", "%d", num_workers);
    w(ctx, "reqs_per_event", "%d", settings.reqs_per_event);
    w(ctx, "worker_cpus", "%s", n ? cpus : "none");
    static const char *const placement_name[] = { [PLACE_OFF] = "off", [PLACE_CPU] = "cpu", [PLACE_NAPI] = "napi" };
    w(ctx, "conn_placement", "%s", placement_name[settings.conn_placement]);
    w(ctx, "napi_map", "%s", settings.napi_map[0] ? settings.napi_map : "NULL");
    w(ctx, "io_uring", "%s", settings.io_uring != IO_URING_OFF ? "yes" : "no");
    w(ctx, "conn_buffer_limit", "%zu", settings.conn_buffer_limit);
    w(ctx, "read_buf_mem_limit", "%zu", settings.conn_buffer_limit);
    w(ctx, "idle_timeout", "%d", settings.idle_timeout);
}

static const char *state_name(const struct conn *c)
{
    switch (__atomic_load_n(&c->stat_state, __ATOMIC_RELAXED)) {
    case CONN_CMD: return "conn_parse_cmd";
    case CONN_NREAD: return "conn_nread";
    case CONN_SWALLOW: return "conn_swallow";
    default: return "conn_closing";
    }
}

void server_stats_conns(stat_writer w, void *ctx)
{
    uint32_t now = (uint32_t)storage_now();
    char name[48];
    registry_lock();
    for (int i = 0; i < num_workers; i++) {
        for (struct conn *c = workers[i].conns; c; c = c->next) {
            snprintf(name, sizeof name, "%d:addr", c->fd);
            w(ctx, name, "%s", c->addr);
            snprintf(name, sizeof name, "%d:state", c->fd);
            w(ctx, name, "%s", state_name(c));
            uint32_t last = __atomic_load_n(&c->last_cmd_time, __ATOMIC_RELAXED);
            snprintf(name, sizeof name, "%d:secs_since_last_cmd", c->fd);
            w(ctx, name, "%u", now >= last ? now - last : 0);
            /* which worker placement chose (cachetd only, as the placement) */
            if (settings.conn_placement != PLACE_OFF) {
                snprintf(name, sizeof name, "%d:worker_cpu", c->fd);
                w(ctx, name, "%d", workers[i].cpu);
            }
        }
    }
    registry_unlock();
}
