/*
 * memory_budget.c - the memory bound of a cachetd process, term by term,
 * from the same settings and constants the allocators use.
 *
 * Why it exists: a pod's memory limit that is too low is an OOM-killed cache,
 * and a formula kept beside the code (in Go, in Python, in prose) drifted from
 * it four ways. `cachetd --memory-budget ARGS` prints this model; the
 * operator's engine.Budget is tested against it, and the protocol tests run
 * cachetd inside a memory cgroup of exactly this size under hostile clients
 * (tests/protocol/test_limits.py). When an allocator changes, change its term
 * here, and those tests say whether the bound still holds.
 *
 * Each term names the code whose allocations it bounds. Terms are upper
 * bounds, not typical use: slow readers, the largest multi-gets and a hash
 * table grown for the smallest items are what they are sized for.
 *
 * Concurrency: pure functions of a parsed struct settings.
 */
#include "memory_budget.h"

#include <stdlib.h>
#include <string.h>

#include "ae.h"
#include "auth.h"
#include "ext_io.h"
#include "extstore.h"
#include "logger.h"
#include "metrics_server.h"
#include "outbuf.h"
#include "storage.h"
#include "tls.h"

#define KIB ((uint64_t)1 << 10)
#define MIB ((uint64_t)1 << 20)

/* slabs.c: the item region is reserved 2 MiB aligned and asks for
 * transparent huge pages, so the last touched huge page may reach past -m. */
#define ITEM_REGION_ALIGN       (2 * MIB)
/* The smallest class is the item header, its CAS and -n, 8-byte aligned.
 * Extstore stubs get classes from a 2-byte key's stub that never expires up:
 * its 12-byte locator and the CAS, the value's length in the header
 * (slabs.c STUB_KEY_MIN, storage_internal.h EXT_LOC_BYTES). */
#define ITEM_CAS_BYTES          8u
#define EXT_STUB_MIN_BYTES      (SLAB_ITEM_HEADER + 2u + 12u)
/* assoc.c: 4-byte buckets; the table doubles when items pass 1.5 x buckets,
 * and the old table lives until the move ends. */
#define HASH_BUCKET_BYTES       4u
#define HASH_POWER_DEFAULT      16
#define HASH_POWER_MAX          30
/* slabs.c / bags.c: the page table and bags, and the two `stats sizes`
 * histograms, stored (items.c) and missed (mrc.c): 8 bytes per 32 bytes
 * of item size up to slab_chunk_max, each. */
#define STORAGE_TABLES_BYTES    (4 * MIB)
/* net_conn.c: a resting connection is its 16 KiB read buffer (RBUF_INITIAL,
 * which never grows: a longer get line is answered as it arrives),
 * its OUT_RESTING output buffer, the struct conn (~550 B), a storage
 * command's line being read (<= 2 KiB) and allocator headers. */
#define CONN_READ_RESTING       (16 * KIB)
#define CONN_RESTING_BYTES      (CONN_READ_RESTING + OUT_RESTING + 4 * KIB)
/* net_worker.c / uring.c: a worker's touched stack, its io_uring rings
 * (~100 KiB), epoll arrays (but the fd table, counted apart) and per-thread
 * storage state (with mrc.c's ring of sampled GETs, 16 KiB); the same for every other
 * thread counted here (flusher, compactor, IO threads). */
#define THREAD_BYTES            (1 * MIB)
/* the binary, libc, the main thread and storage's clock, cleaner, expander,
 * mover and prefault threads (the prefault thread's pages are the item
 * region's, inside -m) */
#define FIXED_BYTES             (8 * MIB)
/* metrics_server.c / metrics.c: its thread, 16 connections' request
 * buffers, the 1 MiB stats arena and one /metrics body (capped at 4 MiB,
 * ~20 KB in practice) */
#define METRICS_BYTES           (4 * MIB)
/* with -o metrics_tls each of the metrics port's connections is an SSL
 * object and its records, as a data connection's (TLS_CONN_BYTES); the
 * context is the data port's (TLS_FIXED_BYTES) */
/* net_conn.c: the kernel's side of a connection. SO_SNDBUF/SO_RCVBUF are
 * doubled by the kernel (sk_sndbuf = 2 x value, for its sk_buff overhead)
 * and never go below its minimums (SOCK_MIN_SNDBUF ~4.5 KiB, SOCK_MIN_RCVBUF
 * ~2.3 KiB). Measured (`ss -tm`, 10 clients sending `get big` x 40 for a
 * 1 MB value and reading nothing, -o sock_sndbuf=64k,sock_rcvbuf=16k): the
 * send queue stops 128 bytes past sk_sndbuf, the receive queue holds ~1 KiB,
 * and each socket keeps up to ~4 KiB of forward allocation. Each socket also
 * holds its struct sock, file, dentry and epoll entry. */
#define SOCK_MIN_BUF_BYTES      (8 * KIB)
#define SOCK_OVERSHOOT_BYTES    (4 * KIB)
#define SOCK_OBJECT_BYTES       (4 * KIB)
/* tls.c: per connection OpenSSL's SSL object and its record buffers (a
 * record each way, 16 KiB + overhead), which a data connection keeps until
 * it closes. Measured (OpenSSL 3, TLS 1.3, -t 1, 400 connections, RSS
 * before and after): 46.4 KB per connection with TLS against 8.8 KB
 * without, 37.6 KB for TLS; the same with a 200 KB reply left unread on
 * each. With the buffers kept (no SSL_MODE_RELEASE_BUFFERS), 50.6 KB per
 * connection that answered a GET, 74.0 KB with a 200 KB reply left unread
 * (its sealed records too, TLS_SEND_BUF_BYTES), against 47.4 and 57.2 KB
 * when they were freed between records. Its BIO is tls.c's (socket plus staged ciphertext):
 * the socket BIO's size and a 24-byte struct tls_io. Staged ciphertext
 * (io_uring batching) sits in the connection's own read buffer, no new
 * buffer. Fixed: OpenSSL's tables and two contexts while refresh_certs
 * swaps them. */
#define TLS_CONN_BYTES          (48 * KIB)
#define TLS_FIXED_BYTES         (4 * MIB)
/* tls.c: a data connection's sealed records not yet sent (batched sends,
 * tls_encrypt): TLS_SEND_MAX, a record, allocated at a connection's first
 * reply and kept until it closes; a slow reader holds its own and
 * no more (the rest of its replies wait in its output queue, unencrypted).
 * Not on the metrics port, whose sends are not batched. */
#define TLS_SEND_BUF_BYTES      ((uint64_t)TLS_SEND_MAX)
/* extstore.c: a struct page and a free-list slot per page */
#define EXT_PAGE_TABLE_BYTES    (EXT_PAGE_STRUCT_BYTES + 4u)
/* ext_io.c: a queued job and its ring slot per worker-owned read */
#define EXT_WORKER_JOB_BYTES    (1 * KIB)

static void add(struct memory_budget *b, const char *name, uint64_t bytes)
{
    /* a new term past the table would overwrite the count itself */
    if (b->nterms >= MEMORY_TERMS_MAX) abort();
    b->terms[b->nterms++] = (struct memory_term){ .name = name, .bytes = bytes };
    b->total += bytes;
}

static void unbounded(struct memory_budget *b, const char *why)
{
    b->bounded = false;
    if (b->nreasons < (int)(sizeof b->reasons / sizeof b->reasons[0])) b->reasons[b->nreasons++] = why;
}

static uint64_t round8(uint64_t n) { return (n + 7) & ~(uint64_t)7; }

/* The smallest chunk any item (or extstore stub) can take. */
static uint64_t smallest_chunk(const struct settings *s)
{
    if (s->slab_sizes_count) return round8(s->slab_sizes[0]);   /* slabs.c rounds each class up */
    uint32_t cas = s->use_cas ? ITEM_CAS_BYTES : 0;
    uint64_t chunk = round8(SLAB_ITEM_HEADER + cas + s->chunk_size);
    uint64_t stub = round8(EXT_STUB_MIN_BYTES + cas);
    return s->ext.npaths && stub < chunk ? stub : chunk;
}

/* The table at its largest power, for item memory full of the smallest
 * items, with the previous table still being moved from (with
 * -o no_hashexpand, the initial table only). */
static uint64_t hash_table_bytes(const struct settings *s)
{
    uint64_t items = s->maxbytes / smallest_chunk(s);
    int initial = s->hashpower ? s->hashpower : HASH_POWER_DEFAULT;
    int power = initial;
    while (!s->no_hashexpand && power < HASH_POWER_MAX && items > ((uint64_t)1 << power) + ((uint64_t)1 << power) / 2) power++;
    uint64_t table = ((uint64_t)HASH_BUCKET_BYTES) << power;
    return power > initial ? table + table / 2 : table;
}

/* ext_io.c / ext_batch.c: an O_DIRECT read of the largest record (header,
 * longest key, value), aligned out at both ends. */
static uint64_t ext_read_buffer_bytes(const struct settings *s)
{
    uint64_t record = ext_record_size(KEY_MAX_LENGTH, (uint32_t)s->item_size_max);
    return (record + EXT_ALIGN - 1) / EXT_ALIGN * EXT_ALIGN + EXT_ALIGN;
}

static void add_extstore(const struct settings *s, struct memory_budget *b)
{
    const struct ext_settings *x = &s->ext;
    uint64_t wbuf = x->wbuf_size < x->page_size - EXT_PAGE_HEADER ? x->wbuf_size : x->page_size - EXT_PAGE_HEADER;
    uint64_t pages = 0;
    for (unsigned i = 0; i < x->npaths; i++) pages += x->sizes[i] / x->page_size;
    uint64_t read = ext_read_buffer_bytes(s);
    /* extstore.c: one write buffer per bucket, allocated at start, plus the
     * compactor's piece of a page (one write buffer) and the header block */
    add(b, "ext_write_buffers", (EXT_BUCKETS + 1) * wbuf + EXT_PAGE_HEADER);
    add(b, "ext_page_table", pages * EXT_PAGE_TABLE_BYTES);
    /* ext_items.c: the flusher's copy of one value, and its thread */
    add(b, "ext_flusher", s->item_size_max + THREAD_BYTES);
    add(b, "ext_compactor", THREAD_BYTES);
    /* ext_io.c: ext_io_depth read buffers per IO thread, and the thread */
    add(b, "ext_io_threads", (uint64_t)x->threads * (x->io_depth * read + THREAD_BYTES));
    /* ext_io.h: each worker's own GET reads; ext_items.c: an append, prepend
     * or incr of a value on disk brings it back through a value copy and a
     * read buffer */
    add(b, "ext_worker_reads", (uint64_t)s->num_threads *
        (s->item_size_max + read + EXT_WORKER_READS * (EXT_WORKER_READ_BYTES + EXT_WORKER_JOB_BYTES)));
}

static uint64_t kernel_buffer(size_t value)
{
    uint64_t doubled = 2 * (uint64_t)value;
    return doubled > SOCK_MIN_BUF_BYTES ? doubled : SOCK_MIN_BUF_BYTES;
}

/* Unset, the kernel autotunes each socket's buffers up to net.ipv4.tcp_wmem
 * and tcp_rmem's maxima (4 MiB and 6-32 MiB on common nodes) per slow
 * reader. Those sysctls belong to the node the server will run on, not to
 * the one asking, so the budget does not guess them: it says it is not a
 * bound. */
static uint64_t socket_bytes_each(const struct settings *s)
{
    uint64_t per = SOCK_OBJECT_BYTES;
    if (s->sock_sndbuf && s->sock_rcvbuf)
        per += kernel_buffer(s->sock_sndbuf) + SOCK_OVERSHOOT_BYTES + kernel_buffer(s->sock_rcvbuf);
    return per;
}

static uint64_t socket_buffer_bytes(const struct settings *s, struct memory_budget *b)
{
    if (!s->sock_sndbuf || !s->sock_rcvbuf)
        unbounded(b, "socket buffers are autotuned by the kernel: set -o sock_sndbuf and sock_rcvbuf");
    return (uint64_t)s->maxconns * socket_bytes_each(s);
}

/* logger.c: LOG_WATCHERS_MAX watchers, each its fixed ring and the socket it
 * keeps after leaving its worker (no longer one of the -c connections), and
 * the thread that sends to them. -W: none. */
static uint64_t watcher_bytes(const struct settings *s)
{
    if (!s->watch_enabled) return 0;
    return (uint64_t)LOG_WATCHERS_MAX * (LOG_RING_BYTES + socket_bytes_each(s)) + THREAD_BYTES;
}

void memory_budget_of(const struct settings *s, struct memory_budget *b)
{
    memset(b, 0, sizeof *b);
    b->bounded = true;
    if (!s->conn_buffer_limit)
        unbounded(b, "connection buffers have no cap: -o conn_buffer_limit=0");
    /* proc.c: mlockall(MCL_FUTURE) makes every page of every mapping
     * resident, each thread's whole 8 MiB stack and glibc's per-thread
     * reservations included, where the terms count only what is touched */
    if (s->lock_memory)
        unbounded(b, "-k locks every mapping resident (whole thread stacks), which these terms do not count");
    add(b, "item_memory", s->maxbytes + ITEM_REGION_ALIGN);
    add(b, "hash_table", hash_table_bytes(s));
    add(b, "storage_tables", 2 * (settings_slab_chunk_max(s) / 4) + STORAGE_TABLES_BYTES);
    /* mrc.c: the SHARDS estimator and the miss tags, and slabs_gain.c's
     * per-class shadow table, fixed, and the cachet-mrc thread that folds
     * them; its per-thread rings are in each thread's storage context
     * (THREAD_BYTES) */
    add(b, "miss_ratio_curve", mrc_memory_bytes() + slabs_gain_memory_bytes() + THREAD_BYTES);
    add(b, "connections", (uint64_t)s->maxconns * CONN_RESTING_BYTES);
    /* bufmem.h: reserved before it is allocated, so never exceeded; each
     * grown buffer is a mapping of its own (main.c's mmap threshold),
     * rounded up to whole pages: 1/16 on top */
    add(b, "conn_buffers", s->conn_buffer_limit + s->conn_buffer_limit / 16);
    add(b, "socket_buffers", socket_buffer_bytes(s, b));
    /* ae.c: each worker's event table has a slot per possible fd */
    add(b, "workers", (uint64_t)s->num_threads *
        (THREAD_BYTES + (uint64_t)settings_fd_table_size(s) * AE_SLOT_BYTES));
    add(b, "fixed", FIXED_BYTES);
    add(b, "metrics", !s->metrics_port ? 0 :
        METRICS_BYTES + (s->tls.metrics ? (uint64_t)METRICS_HTTP_CONNS_MAX * TLS_CONN_BYTES : 0));
    add(b, "watchers", watcher_bytes(s));
    /* auth.c: the authfile, at most AUTH_FILE_MAX, held twice while a
     * reload reads the new copy before freeing the old */
    add(b, "auth", s->auth_file[0] ? 2 * ((uint64_t)AUTH_FILE_MAX + 1) : 0);
    add(b, "tls", s->tls.enabled ? (uint64_t)s->maxconns * (TLS_CONN_BYTES + TLS_SEND_BUF_BYTES) + TLS_FIXED_BYTES : 0);
    if (s->ext.npaths) add_extstore(s, b);
}

void memory_budget_print_json(const struct memory_budget *b, FILE *out)
{
    fprintf(out, "{\"terms\": {");
    for (int i = 0; i < b->nterms; i++)
        fprintf(out, "%s\"%s\": %llu", i ? ", " : "", b->terms[i].name, (unsigned long long)b->terms[i].bytes);
    fprintf(out, "}, \"total\": %llu, \"bounded\": %s, \"unbounded\": [", (unsigned long long)b->total,
            b->bounded ? "true" : "false");
    for (int i = 0; i < b->nreasons; i++) fprintf(out, "%s\"%s\"", i ? ", " : "", b->reasons[i]);
    fprintf(out, "]}\n");
}
