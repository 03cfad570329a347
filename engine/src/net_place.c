/*
 * net_place.c - which worker serves a new TCP connection (-o conn_placement).
 *
 * Why: SO_REUSEPORT spreads connections by a hash of their addresses, so a
 * connection's packets are processed (softirq, on the CPU its NIC queue
 * interrupts) on one core and its requests on another: every request then
 * crosses cores twice. The node tuner (issue 22) puts each receive queue's
 * interrupt on a worker's core or on its hyperthread sibling; this file
 * finishes the job from the engine's side by choosing, for each accepted
 * connection,
 *   1. (conn_placement=napi) the CPU the tuner's map gives for the
 *      connection's receive queue (SO_INCOMING_NAPI_ID), then
 *   2. the CPU that received it (SO_INCOMING_CPU),
 * and handing it to a worker pinned to that CPU, else to one pinned to a
 * hyperthread sibling of it (sysfs thread_siblings_list), else leaving it
 * with the worker that accepted it (the kernel's SO_REUSEPORT spread).
 * memcached's -N goes half the way: it gives each NAPI id seen the next
 * free thread, first come, whatever CPU that thread runs on.
 *
 * The map file (napi_map=PATH), written by the tuner with write-then-rename:
 *     # comment lines and blank lines are skipped
 *     <napi_id> <cpu>        one receive queue per line, decimal
 * It is re-read when its mtime, size or inode changes (looked at most once
 * a second, by whichever worker accepts then). A file that does not parse
 * keeps the map in force (and says why on stderr); a missing file is an
 * empty map (the tuner has not run yet).
 *
 * Concurrency: net_place_init runs on the main thread before the workers
 * start. net_place_pick runs on any worker's thread: the topology is
 * read-only by then; the map is read under a read lock and replaced under
 * the write lock by the one worker that wins the reload trylock.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "net_internal.h"
#include "server.h"

#ifndef SO_INCOMING_CPU
#define SO_INCOMING_CPU 49
#endif
#ifndef SO_INCOMING_NAPI_ID
#define SO_INCOMING_NAPI_ID 56
#endif

/* CPUs beyond this are placed by the fallback only. */
#define PLACE_MAX_CPUS 1024
/* A NIC has at most a few hundred queues; more lines is a broken file. */
#define NAPI_MAP_MAX 4096

/* the lowest CPU of each CPU's hyperthread sibling group (itself if unknown) */
static int16_t core_of[PLACE_MAX_CPUS];

struct napi_entry { uint32_t napi_id; int32_t cpu; };
static struct {
    pthread_rwlock_t  lock;
    pthread_mutex_t   reload;        /* trylock: one worker re-reads at a time */
    struct napi_entry entries[NAPI_MAP_MAX];
    int               count;
    struct stat       seen;          /* the file as last read (st_ino 0: absent) */
    time_t            checked;       /* monotonic seconds of the last stat */
} map = { .lock = PTHREAD_RWLOCK_INITIALIZER, .reload = PTHREAD_MUTEX_INITIALIZER };

static uint32_t rotor;   /* relaxed atomic: spreads over workers sharing a CPU */

static void read_topology(void)
{
    const char *root = "/sys/devices/system/cpu";
#ifdef CACHET_TEST_HOOKS
    /* a fake sysfs tree: the sibling case on a machine without hyperthreads */
    if (getenv("CACHET_TEST_SYSFS_CPU")) root = getenv("CACHET_TEST_SYSFS_CPU");
#endif
    long ncpu = sysconf(_SC_NPROCESSORS_CONF);
    if (ncpu < 1 || ncpu > PLACE_MAX_CPUS) ncpu = PLACE_MAX_CPUS;
    for (int c = 0; c < PLACE_MAX_CPUS; c++) {
        core_of[c] = (int16_t)c;
        if (c >= ncpu) continue;
        char path[512], text[1024];
        snprintf(path, sizeof path, "%s/cpu%d/topology/thread_siblings_list", root, c);
        FILE *f = fopen(path, "r");
        if (!f) continue;
        bool ok = fgets(text, sizeof text, f) != NULL;
        fclose(f);
        text[strcspn(text, "\n")] = '\0';
        int sib[PLACE_MAX_CPUS], n = 0;
        if (ok && parse_cpu_list(text, sib, PLACE_MAX_CPUS, &n) && n > 0 && sib[0] < PLACE_MAX_CPUS)
            core_of[c] = (int16_t)sib[0];   /* parse_cpu_list sorts */
    }
}

/* Parses the whole file into `out`; false (with the reason) if any line is bad. */
static bool parse_map(FILE *f, struct napi_entry *out, int *count, char *why, size_t cap)
{
    char line[256];
    int n = 0, lineno = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        char *p = line;
        while (*p == ' ' || *p == '\t') p++;
        if (*p == '#' || *p == '\n' || *p == '\r' || !*p) continue;
        char *end;
        errno = 0;
        unsigned long id = strtoul(p, &end, 10);
        long cpu = end != p ? strtol(end, &end, 10) : -1;
        while (*end == ' ' || *end == '\t' || *end == '\r' || *end == '\n') end++;
        if (errno || *end || id == 0 || id > UINT32_MAX || cpu < 0 || cpu >= PLACE_MAX_CPUS) {
            snprintf(why, cap, "line %d is not '<napi_id> <cpu>'", lineno);
            return false;
        }
        if (n == NAPI_MAP_MAX) {
            snprintf(why, cap, "more than %d queues", NAPI_MAP_MAX);
            return false;
        }
        out[n++] = (struct napi_entry){ (uint32_t)id, (int32_t)cpu };
    }
    *count = n;
    return true;
}

static struct napi_entry scratch[NAPI_MAP_MAX];   /* under map.reload */

/* Re-reads the map if the file changed; under map.reload. false: at start, a
 * file that exists but does not parse (message printed). */
static bool reload_map(bool at_start)
{
    struct stat st;
    if (stat(settings.napi_map, &st) != 0) memset(&st, 0, sizeof st);
    if (!at_start && st.st_ino == map.seen.st_ino && st.st_size == map.seen.st_size &&
        st.st_mtim.tv_sec == map.seen.st_mtim.tv_sec && st.st_mtim.tv_nsec == map.seen.st_mtim.tv_nsec)
        return true;
    int count = 0;
    char why[128] = "";
    FILE *f = st.st_ino ? fopen(settings.napi_map, "r") : NULL;
    bool ok = true;
    if (f) {
        ok = parse_map(f, scratch, &count, why, sizeof why);
        fclose(f);
    } else if (st.st_ino) {
        ok = false;
        snprintf(why, sizeof why, "%s", strerror(errno));
    }
    map.seen = st;
    if (!ok) {
        fprintf(stderr, "cachetd: napi_map %s: %s; %s\n", settings.napi_map, why,
                at_start ? "not starting" : "keeping the map read before");
        return !at_start;
    }
    pthread_rwlock_wrlock(&map.lock);
    memcpy(map.entries, scratch, sizeof(scratch[0]) * (size_t)count);
    map.count = count;
    pthread_rwlock_unlock(&map.lock);
    if (verbosity() > 0)
        fprintf(stderr, "cachetd: napi_map %s: %d queues\n", settings.napi_map, count);
    return true;
}

static time_t monotonic_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec;
}

static int napi_cpu(uint32_t napi_id)
{
    time_t now = monotonic_s();
    if (__atomic_load_n(&map.checked, __ATOMIC_RELAXED) != now && pthread_mutex_trylock(&map.reload) == 0) {
        __atomic_store_n(&map.checked, now, __ATOMIC_RELAXED);
        reload_map(false);
        pthread_mutex_unlock(&map.reload);
    }
    int cpu = -1;
    pthread_rwlock_rdlock(&map.lock);
    for (int i = 0; i < map.count; i++)
        if (map.entries[i].napi_id == napi_id) { cpu = map.entries[i].cpu; break; }
    pthread_rwlock_unlock(&map.lock);
    return cpu;
}

/* A worker pinned to `cpu` (same_core: to any CPU of its sibling group),
 * rotating among several; NULL if none. */
static struct worker *worker_near(int cpu, bool same_core)
{
    if (cpu < 0 || cpu >= PLACE_MAX_CPUS) return NULL;
    int matches = 0;
    for (int i = 0; i < num_workers; i++) {
        int wc = workers[i].cpu;
        if (wc >= 0 && (same_core ? wc < PLACE_MAX_CPUS && core_of[wc] == core_of[cpu] : wc == cpu)) matches++;
    }
    if (!matches) return NULL;
    int pick = (int)(__atomic_fetch_add(&rotor, 1, __ATOMIC_RELAXED) % (uint32_t)matches);
    for (int i = 0; i < num_workers; i++) {
        int wc = workers[i].cpu;
        if (wc >= 0 && (same_core ? wc < PLACE_MAX_CPUS && core_of[wc] == core_of[cpu] : wc == cpu) && pick-- == 0)
            return &workers[i];
    }
    return NULL;
}

int net_place_init(void)
{
    for (int i = 0; i < num_workers; i++) pthread_mutex_init(&workers[i].handoff.lock, NULL);
    if (settings.conn_placement == PLACE_OFF) return 0;
    read_topology();
    if (settings.conn_placement == PLACE_NAPI && settings.napi_map[0]) {
        map.checked = monotonic_s();
        if (!reload_map(true)) return -1;
    }
    return 0;
}

struct worker *net_place_pick(struct worker *acceptor, int fd, int *kind)
{
    struct worker *to;
    if (settings.conn_placement == PLACE_NAPI && settings.napi_map[0]) {
        uint32_t id = 0;
        socklen_t len = sizeof id;
        if (getsockopt(fd, SOL_SOCKET, SO_INCOMING_NAPI_ID, &id, &len) == 0 && id) {
            int cpu = napi_cpu(id);
            if ((to = worker_near(cpu, false)) || (to = worker_near(cpu, true))) {
                *kind = PLACED_NAPI;
                return to;
            }
        }
    }
    int cpu = -1;
    socklen_t len = sizeof cpu;
    if (getsockopt(fd, SOL_SOCKET, SO_INCOMING_CPU, &cpu, &len) != 0) cpu = -1;
    if ((to = worker_near(cpu, false))) {
        *kind = PLACED_CPU;
        return to;
    }
    if ((to = worker_near(cpu, true))) {
        *kind = PLACED_SIBLING;
        return to;
    }
    *kind = PLACED_FALLBACK;
    return acceptor;
}
