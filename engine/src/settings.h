/*
 * settings.h - cachetd's command line, in the words a memcached operator
 * already knows (-p -l -t -m -c -I -f -n -C -v -o ...), plus --args-file.
 *
 * Why one plain struct filled once before any thread starts: every layer reads
 * its configuration without locks, and the values never change afterwards.
 * Parsing is a pure function of argv (and the args file) so that it is
 * testable and so that a bad flag is reported before anything binds a port.
 */
#ifndef CACHET_SETTINGS_H
#define CACHET_SETTINGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define CACHET_VERSION     "0.1.0"
/* What `version` answers: clients gate features (meta commands) on the
 * memcached version they see, so we announce the protocol level we speak. */
#define CACHET_PROTO_VERSION "1.6.45-cachet-" CACHET_VERSION

#define MAX_WORKERS        256
#define MAX_SLAB_SIZES     63
#define EX_USAGE_CODE      64
#define MAXBYTES_CAP_MB    32767u       /* -m: 32-bit chunk handles in 8-byte units, less a page */
#define SOCK_BUF_MAX       (1u << 30)   /* -o sock_sndbuf/sock_rcvbuf: setsockopt takes an int the kernel doubles */
/* memcached's slab page, the unit -o slab_chunk_max must divide (slabs.c
 * uses smaller pages when -m is small, and clamps the largest chunk to one) */
#define SLAB_PAGE_SIZE_MAX (1024 * 1024)
/* an item's fixed header before its key (storage_internal.h ITEM_HDR): the
 * smallest slab class holds it, a CAS and 16 bytes */
#define SLAB_ITEM_HEADER   19u

/* io_uring batching: on by default when the kernel allows it (containers
 * with a seccomp profile that blocks io_uring fall back to plain epoll). */
#define IO_URING_OFF       0
#define IO_URING_AUTO      1
#define IO_URING_REQUIRED  2

/* memcached 1.6.45's -o ext_* options (engine/README.md, "Extstore"). Sizes
 * in bytes here whatever unit the option takes. Extstore is on when at least
 * one ext_path is given; the other ext_* options are accepted without one, as
 * memcached accepts them. */
#define EXT_PATHS_MAX 16
struct ext_settings {
    unsigned npaths;
    char     paths[EXT_PATHS_MAX][256];
    uint64_t sizes[EXT_PATHS_MAX];
    uint64_t page_size;            /* ext_page_size, MB (64) */
    uint64_t wbuf_size;            /* ext_wbuf_size, MB (4) */
    unsigned threads;              /* ext_threads: IO threads (1) */
    unsigned io_depth;             /* ext_io_depth: reads one IO thread has in flight at once (8; memcached 1) */
    uint32_t item_size;            /* ext_item_size: values at least this long go to disk (512) */
    uint32_t item_age;             /* ext_item_age: ... once idle this long (UINT32_MAX: only under memory pressure) */
    uint32_t low_ttl;              /* ext_low_ttl: items with less TTL left go to the low-TTL bucket (0) */
    uint32_t recache_rate;         /* ext_recache_rate: every Nth disk hit brings the value back to RAM (2000) */
    uint32_t compact_under;        /* ext_compact_under: free pages (default: 1% of the pages) */
    uint32_t drop_under;           /* ext_drop_under: free pages (default: compact_under; 0 if only that is given) */
    bool     compact_under_set, drop_under_set;
    bool     page_size_set, wbuf_size_set;  /* given: never fitted to a small file */
    bool     drop_unread;          /* ext_drop_unread */
    double   max_frag;             /* ext_max_frag (0.80) */
    uint32_t max_sleep;            /* ext_max_sleep, microseconds (1000000) */
};

/* -o conn_placement: which worker serves a new TCP connection (net_place.c) */
enum { PLACE_OFF, PLACE_CPU, PLACE_NAPI };
/* Without ext_page_size, a file too small for EXT_FIT_PAGES pages of the
 * default size gets smaller pages (see fit_ext_pages in settings.c). */
#define EXT_FIT_PAGES 8

struct settings {
    int      port;                 /* -p */
    char     listen[256];          /* -l, comma separated list; "" = all (0.0.0.0) */
    int      num_threads;          /* -t, or the number of CPUs in cpus */
    size_t   maxbytes;             /* -m */
    int      maxconns;             /* -c */
    size_t   item_size_max;        /* -I */
    double   growth_factor;        /* -f */
    uint32_t chunk_size;           /* -n */
    bool     use_cas;              /* !-C */
    bool     evict_disabled;       /* -M: refuse stores instead of evicting */
    bool     no_slab_reassign;     /* -o no_slab_reassign: pages never change class */
    bool     no_hashexpand;        /* -o no_hashexpand: the hash table never grows */
    bool     temp_lru;             /* -o temporary_ttl=N given */
    uint32_t temporary_ttl;        /* its N: items with a TTL up to N seconds are not evicted (default 61) */
    bool     no_maxconns_fast;     /* -o no_maxconns_fast: a client beyond -c waits to be accepted
                                      instead of getting "ERROR Too many open connections" */
    int      slab_automove;        /* -o slab_automove=0..2 (no_slab_automove: 0); 0 moves pages only on `slabs reassign` */
    bool     slab_mover_gain;      /* -o slab_mover=gain (slabs_gain.c); false = by age */
    int      verbose;              /* -v count */
    uint32_t slab_sizes[MAX_SLAB_SIZES];
    int      slab_sizes_count;
    int      hashpower;            /* -o hashpower, 0 = storage default */
    int      worker_cpus[MAX_WORKERS]; /* CPU each worker is pinned to */
    int      num_cpus_listed;      /* entries given by -o cpus (or the allowed set) */
    bool     pin_workers;          /* false only with -o cpus=none */
    int      conn_placement;       /* -o conn_placement: PLACE_OFF / PLACE_CPU / PLACE_NAPI (net_place.c) */
    char     napi_map[256];        /* -o napi_map=PATH: the node tuner's NAPI id -> CPU file; "" = none */
    int      backlog;              /* -b */
    int      reqs_per_event;       /* -R: requests per read batch before yielding */
    int      io_uring;             /* IO_URING_OFF / _AUTO (default) / _REQUIRED; see uring.h */
    int      metrics_port;         /* -o metrics_port: Prometheus /metrics and /healthz over HTTP; 0 = off */
    uint32_t young_window;         /* -o young_window: seconds; an eviction of an item read within
                                      it counts as young (evictions_young); 0 = storage default (60) */
    size_t   conn_buffer_limit;    /* -o conn_buffer_limit=SIZE / read_buf_mem_limit=MB: bytes of
                                      connection buffers above their resting size, summed over
                                      all connections (bufmem.h); 0 = none. Default: see
                                      conn_buffer_limit_default() */
    bool     conn_buffer_limit_set;
    size_t   sock_sndbuf;          /* -o sock_sndbuf=SIZE: SO_SNDBUF of every accepted socket
                                      (the kernel doubles it); 0 = kernel autotuning */
    size_t   sock_rcvbuf;          /* -o sock_rcvbuf=SIZE: SO_RCVBUF likewise; 0 = autotuning */
    char     socketpath[108];      /* -s: unix socket to listen on instead of TCP; "" = none */
    int      access_mask;          /* -a: the unix socket's permissions (octal), default 0700 */
    int      idle_timeout;         /* -o idle_timeout: close TCP connections idle this many
                                      seconds (memcached's idle_kicks); 0 = never */
    size_t   slab_chunk_max;       /* -o slab_chunk_max=KB (memcached's unit); bytes, 0 = default */
    bool     flush_enabled;        /* !-F: flush_all answers "CLIENT_ERROR flush_all not allowed" */
    bool     watch_enabled;        /* !-W: watch answers "CLIENT_ERROR watch commands not allowed" */
    bool     shutdown_command;     /* -A: the `shutdown` command stops the server (as SIGTERM) */
    bool     daemonize;            /* -d */
    bool     maxcore;              /* -r: raise the core file limit */
    bool     lock_memory;          /* -k: mlockall */
    char     username[64];         /* -u: run as this user when started as root; "" = stay */
    /* -Z and memcached's -o ssl_* options (tls.c) */
    struct {
        bool     enabled;          /* -Z */
        char     chain_cert[256];  /* ssl_chain_cert: the server's certificate chain (PEM) */
        char     key[256];         /* ssl_key: its private key (PEM) */
        char     ca_cert[256];     /* ssl_ca_cert: CAs that sign client certificates; "" = none */
        int      verify_mode;      /* ssl_verify_mode 0-3, memcached's meaning */
        int      min_version;      /* ssl_min_version 0-3: TLS 1.0-1.3 (default 2) */
        char     ciphers[256];     /* ssl_ciphers: OpenSSL's cipher list (TLS 1.2); "" = OpenSSL's */
        bool     session_cache;    /* ssl_session_cache: server-side session resumption */
        bool     metrics;          /* -o metrics_tls: the metrics port serves HTTPS with the same
                                      files, without asking for client certificates */
    } tls;
    char     auth_file[256];       /* -Y: memcached's ASCII authentication file; "" = none */
    char     pidfile[256];         /* -P: write the pid here; "" = none */
    struct ext_settings ext;       /* -o ext_* */
};

/* The connection buffer cap when none is given: 64 KiB per allowed
 * connection, at least 4 MiB, and at most an eighth of -m (unless that is
 * below 4 MiB). engine/README.md "Memory" explains the choice. */
size_t conn_buffer_limit_default(size_t maxbytes, int maxconns);

/* The slab page and largest slab chunk storage will use for these settings
 * (slabs.c's rule: 1 MiB pages, halved down to 64 KiB until -m holds 64 of
 * them; chunks up to half a page unless -o slab_chunk_max says otherwise).
 * Settings check -o slab_sizes against them, and the memory budget sizes
 * storage's tables from them. */
size_t settings_slab_page_size(size_t maxbytes);
size_t settings_slab_chunk_max(const struct settings *s);

/* Slots in each worker's event table (ae.h: indexed by fd number), so
 * bounded by the fds the process can have open, not by RLIMIT_NOFILE
 * (up to 1M under containerd, 32 MiB per worker): -c connections, 8 per
 * worker (its epoll, eventfd, io_uring and extstore eventfds), the most
 * listening sockets every worker can hold (LISTEN_FDS_PER_WORKER each), and
 * 1024 for the rest (stdio, the metrics thread's listeners,
 * eventfd and 16 connections, extstore files and IO threads, a connection
 * being refused). A connection whose fd is past the table is refused as
 * one over -c (net_listen.c). The memory budget counts it per worker. */
#define FD_TABLE_PER_WORKER 8
#define FD_TABLE_MARGIN     1024
/* and each worker's listeners: one per -l address (SO_REUSEPORT), all open
 * before any client, at most this many per worker (struct worker's
 * listen_fds; more addresses are a startup error) */
#define LISTEN_FDS_PER_WORKER 16
int settings_fd_table_size(const struct settings *s);

/* Fills s from defaults, then the args file (if --args-file is given), then
 * argv. Returns 0 to run, 1 when help was printed (exit 0), EX_USAGE_CODE on
 * a usage error (message already written to err). */
int settings_parse(struct settings *s, int argc, char **argv, FILE *err);

/* ext_path's size: like parse_size, with a 't' suffix too. */
bool parse_ext_size(const char *text, uint64_t *out);
/* Parses "1m", "512k", "1048576", "2g" into bytes. Returns false if invalid. */
bool parse_size(const char *text, size_t *out);
/* Parses "0-3,5" into a sorted CPU list; false on syntax error or overflow. */
bool parse_cpu_list(const char *text, int *cpus, int max, int *count);
/* "0,1,2" from a list. */
void format_cpu_list(const int *cpus, int n, char *buf, size_t cap);

void settings_usage(FILE *out);

#endif
