/*
 * storage.h - the boundary between cachetd's network/protocol layer and its
 * storage (hash table, slab allocator, bag-LRU, cleaner).
 *
 * Why the boundary sits here: the protocol layer (proto_text.c, proto_meta.c)
 * must never know how items are laid out or locked. Every read or write of an
 * item goes through these calls, so the storage side is free to keep GETs
 * lock-free (copy-out inside a short epoch read section, a refcount only
 * for values sent zero-copy), stripe its write locks, and reclaim memory
 * safely.
 *
 * Threading contract:
 *  - every worker thread calls storage_thread_register() once and passes the
 *    returned context to every call; storage keeps per-thread stats there and
 *    the thread's read-section slot (epoch.c): each storage call that reads
 *    items runs in a short read section of its own, and memory changes shape
 *    (chunk reused, slab page moved to another class, old hash table freed)
 *    only after every section that could see the old shape has ended.
 *  - values handed out by reference (item_view.ref) are protected by their
 *    refcount until item_view_release(), not by a section, so a slow client
 *    never holds back reclamation.
 */
#ifndef CACHET_STORAGE_H
#define CACHET_STORAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>
#include <time.h>

#include "ext_knob.h"

#define KEY_MAX_LENGTH 250
/* Threads that may register a storage context: workers, the cleaner, the
 * page mover, and with extstore its flusher and IO threads (settings.c
 * refuses a start that would need more). */
#define STORAGE_MAX_THREADS 256
#define STORAGE_BG_THREADS  2      /* cleaner, page mover */

typedef struct storage_thread storage_thread;
typedef struct item item;

/* Seconds since process start; advanced by the clock thread once a second. */
typedef uint32_t rel_time_t;

struct storage_config {
    size_t   mem_limit;          /* -m, bytes of item memory */
    size_t   item_size_max;      /* -I */
    double   growth_factor;      /* -f */
    uint32_t chunk_size_min;     /* -n, bytes of key+value in the smallest class */
    const uint32_t *slab_sizes;  /* -o slab_sizes: explicit chunk sizes, ascending; NULL if none */
    int      slab_sizes_count;
    int      hashpower_init;     /* -o hashpower */
    bool     use_cas;            /* false with -C */
    bool     evict_disabled;     /* -M: refuse a store instead of evicting */
    bool     no_slab_reassign;   /* -o no_slab_reassign: pages never change class (`slabs reassign` refused) */
    bool     no_hashexpand;      /* -o no_hashexpand: the hash table keeps its initial power */
    bool     temp_lru;           /* -o temporary_ttl given: items whose TTL is at most */
    uint32_t temporary_ttl;      /*   temporary_ttl are never evicted, only expire (memcached's TEMP_LRU) */
    bool     slab_mover_gain;    /* -o slab_mover=gain: pages move by marginal gain (slabs_gain.c), else by age */
    size_t   slab_chunk_max;     /* -o slab_chunk_max: larger items are chained from chunks of this size; 0 = default */
    uint32_t young_window;       /* -o young_window: an eviction of an item read within this many seconds is "young" (0 = 60) */
    bool     stub_classes;       /* extstore on: 8-byte classes from the smallest stub up to -n's class */
    int      verbose;
};

/* Outcome codes map one-to-one onto memcached's reply strings. */
enum store_result {
    STORE_STORED,         /* STORED / HD */
    STORE_NOT_STORED,     /* NOT_STORED / NS */
    STORE_EXISTS,         /* EXISTS / EX */
    STORE_NOT_FOUND,      /* NOT_FOUND / NF */
    STORE_TOO_LARGE,      /* SERVER_ERROR object too large for cache */
    STORE_NO_MEMORY,      /* SERVER_ERROR out of memory storing object */
    STORE_PARKED,         /* no answer yet: item_alloc_parking, retry the request */
};

enum store_mode {
    MODE_SET, MODE_ADD, MODE_REPLACE, MODE_APPEND, MODE_PREPEND, MODE_CAS,
};

/* ---- lifecycle ---- */
/* The rules storage_init applies to cfg that need nothing allocated (the
 * class ladder, the longest chain a head can list): 0, or -1 with the
 * message storage_init would print. main.c runs it in every mode, so
 * --check-args refuses what a start would. */
int  storage_check_config(const struct storage_config *cfg);
int  storage_init(const struct storage_config *cfg);  /* 0 or -1 with errno-style message on stderr */
int  storage_start_threads(void);                     /* clock, cleaner, hash expander, slab mover; 0 or -1 */
void storage_stop_threads(void);
storage_thread *storage_thread_register(void);

/* ---- time ---- */
rel_time_t storage_now(void);
/* memcached's TTL rules: 0 never, <=30 days relative, larger absolute unix
 * time, negative already expired. Returns the rel_time_t expiry (0 = never). */
rel_time_t storage_exptime(int64_t wire_exptime);
int64_t    storage_ttl_remaining(rel_time_t exptime);  /* -1 = never expires */
/* Tests move time forward instead of sleeping: the unit tests, and the
 * `debugtime` command of test-hooks builds. */
void       storage_test_advance_clock(uint32_t seconds);
extern time_t storage_process_started;                 /* unix time of rel_time 0 */

/* ---- reads ---- */

/* What a lookup found. On a hit the value is either copied into the caller's
 * buffer (value == that buffer, ref == NULL) or referenced in place
 * (ref != NULL: call item_view_release() after the bytes have been sent). A
 * referenced value may be in several pieces (values longer than the largest
 * slab class are chained): send it with item_view_pieces(). */
struct item_view {
    const char *value;
    uint32_t    nbytes;        /* value length, without "\r\n" */
    uint32_t    client_flags;
    uint64_t    cas;
    rel_time_t  exptime;       /* 0 = never */
    rel_time_t  last_access;   /* before this access */
    bool        fetched_before;/* meta h */
    bool        stale;         /* meta X (marked by md I / ms I) */
    bool        win;           /* meta W: this client should recache */
    bool        win_sent_before; /* meta Z */
    bool        key_binary;    /* stored with a base64 key (meta b): echo it in base64 */
    bool        created;       /* mg N made this item now */
    rel_time_t  exptime_before;/* the expiry before this request's T or N (0 for a created item):
                                  meta t before T/N reports it, as memcached's request order does */
    uint8_t     slab_class;    /* meta me: cls= */
    uint32_t    item_size;     /* meta me: size=, the whole item as memcached counts it */
    bool        on_disk;       /* extstore: value == NULL, nbytes is the value's length and
                                  ext_loc says where it is: the IO layer reads it
                                  (ext_io.c, ext_batch.c; storage_ext_fetch() in tests) */
    uint8_t     ext_loc[12];
    item       *ref;
};

struct get_opts {
    bool     touch;            /* gat / mg T: set a new expiry */
    rel_time_t new_exptime;
    bool     vivify;           /* mg N: create an empty stale item on miss, hand this client the win */
    rel_time_t vivify_exptime;
    bool     recache;          /* mg R: win if ttl below recache_below */
    rel_time_t recache_below;
    bool     no_lru_bump;      /* mg u */
    bool     win_tokens;       /* mg: hand out W/Z on stale items (text get/gets leave it false) */
    uint64_t vivify_cas;       /* mg N with E: CAS of the item vivify creates (0 = generate) */
    bool     vivify_last;      /* mg N after T: an item N creates keeps N's expiry (memcached
                                  applies the flags in request order) */
    bool     recache_before_touch; /* mg R before T: R compares the TTL from before T */
    bool     value_only;       /* text get/gets: the view needs only the value, its length,
                                  flags and CAS; the meta fields stay 0 (a value on disk
                                  still gets them all: its read uses them) */
};

/* Lock-free unless opts asks for a change (touch/vivify/recache take the
 * key's stripe lock). Values that fit copy_cap are copied into copy_buf;
 * larger ones come back referenced (ref != NULL, release after sending).
 * copy_buf == NULL with copy_cap == 0 asks for the metadata only
 * (value == NULL, nbytes set, nothing to release).
 * Returns true on hit. */
bool storage_get(storage_thread *t, const char *key, size_t nkey,
                 const struct get_opts *opts,
                 char *copy_buf, size_t copy_cap, struct item_view *out);
void item_view_release(storage_thread *t, struct item_view *v);
/* The value's pieces, in order, from byte `skip` on: fills at most max iovecs
 * and returns how many (0 once skip reaches the end). */
size_t item_view_pieces(const struct item_view *v, size_t skip, struct iovec *iov, size_t max);

/* Batched GETs (a pipeline of many keys, or one key from each connection
 * of a read batch): the two cache misses of a lookup (bucket word, then
 * item header) can overlap across keys. storage_prefetch_keys() hashes each
 * key into its hv and, for two keys or more, prefetches every bucket, then
 * every item, in one read section; storage_get_hashed() then looks each up
 * without hashing again. Prefetches are hints: no stores, no locks. */
struct storage_key {
    const char *key;
    uint32_t    nkey;
    uint32_t    hv;       /* set by storage_prefetch_keys */
};
void     storage_prefetch_keys(storage_thread *t, struct storage_key *keys, int n);
bool     storage_get_hashed(storage_thread *t, const char *key, size_t nkey, uint32_t hv,
                            const struct get_opts *opts, char *copy_buf, size_t copy_cap,
                            struct item_view *out);

/* ---- writes ---- */

/* A store that would wait for extstore's flusher before it evicts (so the
 * values it would evict reach the disk first) must not sleep its worker:
 * every other client of that worker would wait with it (measured: a reader
 * of RAM values at 5,000 GETs/s saw p50 5.6 ms and p99 77 ms beside a
 * client setting 4 KB values faster than the disk took them). The
 * request's connection waits instead, and asks again: the wait's state is
 * the connection's, here. All zero: not waiting. */
struct store_park {
    int64_t  since_us;   /* monotonic microseconds the wait began; 0: none */
    uint64_t from;       /* values the flusher had moved out of clsid then */
    uint64_t passes;     /* flusher passes completed then */
    uint64_t asked;      /* the pass that sees this store's pressure */
    int32_t  clsid;
};
/* item_alloc, for a store whose connection can wait: where the store would
 * sleep for the flusher it returns NULL with *err STORE_PARKED instead (the
 * caller answers nothing and retries the request later, with the same
 * park), until the flusher has moved values out of the class or the wait's
 * bound has passed; then it evicts as item_alloc does. */
item *item_alloc_parking(storage_thread *t, const char *key, size_t nkey, uint32_t client_flags,
                         rel_time_t exptime, uint32_t nbytes, struct store_park *park,
                         enum store_result *err);
/* Whether a parked store may be over (the flusher moved values out of its
 * class or has nothing more to write now, or its bound passed, now_us
 * being CLOCK_MONOTONIC in microseconds): the request is worth running
 * again. A few relaxed loads, no lock; item_alloc_parking decides. */
bool  storage_park_due(const struct store_park *park, int64_t now_us);
/* Two-step store so the value can be read off the socket straight into item
 * memory: allocate (unlinked), fill the value through item_value_span(), then
 * storage_store() or item_discard(). The value's "\r\n" is not stored. *err
 * is STORE_TOO_LARGE or STORE_NO_MEMORY on NULL. */
item *item_alloc(storage_thread *t, const char *key, size_t nkey,
                 uint32_t client_flags, rel_time_t exptime, uint32_t nbytes,
                 enum store_result *err);
/* Where value byte `off` goes, and how many bytes follow it contiguously
 * (a chained value is in several pieces); NULL at the end. */
char *item_value_span(item *it, size_t off, size_t *len);
/* The whole value when it is in one piece: values up to slab_chunk_max. */
char *item_value(item *it);
/* The slab class of the item's head (watch mutations: clsid=). */
unsigned item_slab_class(const item *it);
/* Remember that the key was given in base64 (meta b); before storage_store. */
void  item_set_key_binary(item *it);
void  item_discard(storage_thread *t, item *it);

struct store_opts {
    uint64_t cas_in;           /* MODE_CAS / ms C: compare against this */
    uint64_t cas_set;          /* ms E: use this as the new CAS (0 = generate) */
    bool     invalidate;       /* ms I: if CAS is older, store but mark stale */
    bool     vivify_on_miss;   /* ms mode A/P with N: create if missing */
    rel_time_t vivify_exptime;
    uint64_t *nbytes_out;      /* ms s: if set, gets the stored value's length (the combined one after append/prepend) */
};
/* Links the item (or, for append/prepend, a new combined copy) and consumes
 * the caller's reference in every case. *cas_out gets the stored CAS. */
enum store_result storage_store(storage_thread *t, item *it, enum store_mode mode,
                                const struct store_opts *opts, uint64_t *cas_out);

struct delete_opts {
    uint64_t cas_in;           /* md C: compared when check_cas (C0 too, as memcached) */
    bool     check_cas;        /* md C was given: cas_in 0 compares like any other */
    uint64_t cas_set;          /* md E: the CAS the item gets if it is modified (I, x); 0 = generate */
    bool     remove_value;     /* md x: replace the item with an empty one (flags F, TTL T or none,
                                  CAS E or the old one's), as memcached 1.6.45 */
    uint32_t client_flags;     /* md F: the empty item's client flags */
    bool     invalidate;       /* md I: mark stale instead of removing */
    bool     update_ttl;       /* md T with I */
    rel_time_t new_exptime;
};
enum store_result storage_delete(storage_thread *t, const char *key, size_t nkey,
                                 const struct delete_opts *opts);     /* STORED means deleted */

enum store_result storage_touch(storage_thread *t, const char *key, size_t nkey,
                                rel_time_t exptime);                  /* STORED means touched */

enum arith_result { ARITH_OK, ARITH_NOT_FOUND, ARITH_NON_NUMERIC, ARITH_NO_MEMORY, ARITH_EXISTS };
struct arith_opts {
    uint64_t cas_in;           /* ma C */
    uint64_t cas_set;          /* ma E: the new CAS (0 = generate) */
    bool     vivify;           /* ma N: create with initial on miss */
    rel_time_t vivify_exptime;
    uint64_t initial;          /* ma J */
    bool     update_ttl;       /* ma T */
    rel_time_t new_exptime;
    bool     vivify_last;      /* ma N after T: a counter N creates keeps N's expiry */
    bool    *created_out;      /* if set: whether N created the counter */
    rel_time_t *exptime_before_out; /* if set: the expiry before T/N (0 for a created counter) */
};
/* memcached semantics: 64-bit unsigned, incr wraps at 2^64, decr stops at 0.
 * The value is replaced as a whole (readers never see a half-written number). */
enum arith_result storage_arith(storage_thread *t, const char *key, size_t nkey,
                                bool incr, uint64_t delta, const struct arith_opts *opts,
                                uint64_t *value_out, uint64_t *cas_out, rel_time_t *exptime_out);

/* `slabs automove <0|1|2>`: 0 stops the page mover's background balancing
 * by age; 1 and 2 run it (the default is 1, as memcached's). Shown as
 * slab_automove in `stats settings`. A store whose class has nothing to
 * evict still takes a page from another class at any level. */
void storage_set_slab_automove(int level);

/* `slabs reassign <src> <dst>`, memcached 1.6.45's checks in its order: SAME
 * before the class ids are looked at, src -1 picks any class with a spare
 * page, BADCLASS outside 0..the largest class, NOSPARE when src has fewer
 * than two pages, DISABLED with -o no_slab_reassign. The move itself runs
 * within the call (memcached's mover runs it a moment later); dst 0,
 * memcached's global page pool, empties the page and leaves its chunks free
 * for whichever class needs memory first. */
enum slabs_reassign_result {
    SLABS_REASSIGN_OK, SLABS_REASSIGN_BUSY, SLABS_REASSIGN_BADCLASS, SLABS_REASSIGN_NOSPARE,
    SLABS_REASSIGN_SAME, SLABS_REASSIGN_DISABLED,
};
enum slabs_reassign_result storage_slabs_reassign(storage_thread *t, int src, int dst);

/* flush_all: items stored before now+delay become invalid at now+delay. */
void storage_flush(rel_time_t when);

/* ---- stats ---- */
/* Appends "STAT name value\r\n" lines to buf through the given writer, so the
 * protocol layer owns buffering and storage owns the names. */
typedef void (*stat_writer)(void *ctx, const char *name, const char *fmt, ...);
void storage_stats_general(stat_writer w, void *ctx);  /* curr_items, bytes, evictions, get_hits, ... hash_*, bag/cleaner */
void storage_stats_settings(stat_writer w, void *ctx); /* maxbytes, growth_factor, chunk_size, item_size_max, hashpower_init, slab_sizes... */
void storage_stats_items(stat_writer w, void *ctx);    /* items:<class>:<name> */
void storage_stats_slabs(stat_writer w, void *ctx);    /* <class>:<name>, active_slabs, total_malloced */
void storage_stats_sizes(stat_writer w, void *ctx);    /* <size> <count>, always on */
/* `stats mrc`: the live miss-ratio curve (mrc.c): sample state, then
 * <bytes>:miss_ratio at fractions and multiples of -m */
void storage_stats_mrc(stat_writer w, void *ctx);
/* For /metrics: both size histograms in coarse cumulative buckets,
 * stored:le_<bytes> and missed:le_<bytes> (and le_inf) */
void storage_stats_sizes_coarse(stat_writer w, void *ctx);
/* Keys the miss-ratio curve samples at most, and the memory it holds
 * (the memory formula's miss_ratio_curve term). */
#define MRC_SAMPLE_KEYS 8192
size_t mrc_memory_bytes(void);
/* -o slab_mover=gain's shadow table (slabs_gain.c), fixed */
size_t slabs_gain_memory_bytes(void);
void storage_stats_reset(void);

/* ---- extstore (ext_items.c, ext_io.c) ---- */
struct ext_settings;
/* Opens the files and starts the flusher and IO threads; 0, or 64 (bad
 * path or size: message on stderr) or 70 (a thread could not start). */
int  storage_ext_start(const struct ext_settings *x);
/* `extstore SETTING VALUE` (memcached 1.6.45): the flusher, the compactor
 * and the workers use the new value from their next decision on; `stats
 * settings` shows it. value for the integer settings, fraction for max_frag. */
void storage_ext_tune(enum ext_knob knob, uint32_t value, double fraction);
void storage_ext_stop(void);
bool storage_ext_enabled(void);
#ifdef CACHET_TEST_HOOKS
/* Test builds: reads the value of an on-disk view (nbytes into buf) and
 * checks it; false is a miss, counted, and the key's stub is unlinked if
 * still the same. The server reads through ext_batch.c. */
bool storage_ext_fetch(storage_thread *t, const char *key, size_t nkey, const struct item_view *v, char *buf);
#endif
void storage_ext_stats_general(stat_writer w, void *ctx);
void storage_ext_stats_extstore(stat_writer w, void *ctx);
void storage_ext_stats_settings(stat_writer w, void *ctx);
void storage_ext_stats_reset(void);
/* Counters the IO side keeps with storage's */
void storage_ext_count_get(void);       /* get_extstore */
void storage_ext_count_aborted(void);   /* get_aborted_extstore */
void storage_ext_count_stream_cut(void);   /* extstore_streams_cut */
void storage_ext_count_oom(void);       /* get_oom_extstore */
void storage_ext_count_queue(int delta); /* extstore_io_queue: reads waiting for an IO thread */

#endif
