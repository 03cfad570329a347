/*
 * logger.h - memcached's `watch` log stream: what the request path and the
 * storage core report, and the watchers it goes to. See logger.c for why it
 * is built this way and its concurrency rules.
 */
#ifndef CACHET_LOGGER_H
#define CACHET_LOGGER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What a watcher asked for (memcached's watch arguments). Those cachetd has
 * no events for (connevents, proxy*, rawcmds) are accepted as memcached
 * accepts them and never produce a line. */
enum log_what {
    LOG_FETCHERS   = 1u << 0,
    LOG_MUTATIONS  = 1u << 1,
    LOG_EVICTIONS  = 1u << 2,
    LOG_SYSEVENTS  = 1u << 3,
    LOG_DELETIONS  = 1u << 4,
    LOG_CONNEVENTS = 1u << 5,
    LOG_RAWCMDS    = 1u << 6,
    LOG_PROXYREQS  = 1u << 7,
    LOG_PROXYEVENTS = 1u << 8,
    LOG_PROXYUSER  = 1u << 9,
};

/* Watchers at once, and each one's ring of lines not yet sent: a watcher
 * slower than the events loses lines (counted, and told with "skipped=N"),
 * never makes a worker wait, never grows. memory_budget.c counts both. */
#define LOG_WATCHERS_MAX   8
#define LOG_RING_BYTES     (32u * 1024u)

/* The union of every active watcher's enum log_what: the request path's one
 * relaxed load when nobody watches. */
extern _Atomic unsigned g_log_watching;
static inline bool log_wants(unsigned what)
{
    return (atomic_load_explicit(&g_log_watching, memory_order_relaxed) & what) != 0;
}

/* memcached's argument words, prefix-matched in memcached's order: 0 and
 * *what set, or -1 for a word it refuses with "ERROR". */
int log_parse_what(const char *args, size_t len, unsigned *what);

enum log_add_result { LOG_ADD_OK, LOG_ADD_TOO_MANY, LOG_ADD_FAILED };
/* Takes fd (a socket of its own, e.g. a dup of a client's) whatever the
 * result; on LOG_ADD_OK "OK\r\n" is the first thing it is sent. */
enum log_add_result log_add_watcher(int fd, unsigned what);

/* Events. Keys are raw bytes (URI-encoded in the line). */
enum log_get_status { LOG_GET_NOT_FOUND, LOG_GET_FOUND, LOG_GET_FLUSHED, LOG_GET_EXPIRED };
void log_item_get(const char *key, size_t nkey, enum log_get_status status, unsigned clsid, int cfd,
                  uint32_t nbytes);
/* status and cmd are memcached's words (stored/not_stored/exists/not_found/
 * too_large/no_memory; set/add/replace/append/prepend/cas) */
void log_item_store(const char *key, size_t nkey, const char *status, const char *cmd, uint32_t ttl,
                    unsigned clsid, int cfd, uint32_t nbytes);
void log_item_deleted(const char *key, size_t nkey, const char *cmd, unsigned clsid, uint32_t nbytes);
/* ttl: seconds left, -1 for none; last_access: seconds since */
void log_eviction(const char *key, size_t nkey, bool fetched, long long ttl, unsigned last_access,
                  unsigned clsid, uint32_t nbytes);
/* sysevents: "type=... k=v ..." without ts/gid */
void log_sysevent(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* stats: log_watchers, log_worker_written, log_watcher_sent, log_watcher_skipped */
struct log_stats { uint64_t watchers, written, sent, skipped; };
void log_stats(struct log_stats *out);

/* Stops the watchers' thread and closes them (process exit). */
void log_stop(void);

#endif
