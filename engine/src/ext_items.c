/*
 * ext_items.c - extstore on the item side: which items go to disk (the
 * flusher), the small item that stays in RAM in their place (the stub), and
 * bringing a value back (a failed read, recache, a command that needs the
 * value). The page store itself is extstore.c; the reads a GET waits for are
 * ext_io.c's, done by ext_batch.c's readers (on the worker's own io_uring
 * ring, or on an IO thread), which check each record with extstore.c's
 * ext_read_prepare/ext_read_finish and end here in fetch_done through the
 * hook table (ext_hooks.h), as the item code's upcalls do (a miss unlinks
 * the stub; a hit may recache the value). The synchronous
 * storage_ext_fetch() has no caller in the server: the unit tests and the
 * stress checker use it.
 *
 * Why stubs: a large cold value costs RAM it does not earn. The flusher
 * writes key and value to disk and replaces the item by a stub of the same
 * key with ITEM_ON_DISK, its flags, expiry (a field only if it expires), CAS,
 * state bits, last access and fetched bit, holding only a 12-byte locator
 * and, in its header, the value's length (storage_internal.h). Every
 * command that needs no value (touch, delete, flush_all, mg without v, me,
 * cas compare) works on the stub unchanged; a GET reads the value on an IO
 * thread; append/prepend/incr/decr first bring the value back to RAM here.
 *
 * Which items: the flusher wakes every 100 ms, and at once when a store had
 * to evict (ext_note_pressure). Memory is short once a class that holds
 * large values has less than a page's worth of free chunks and no unused
 * page is left (memory_low): the next stores there may have to evict, and a
 * large value is worth more on disk than evicted. It then
 * takes the coldest items (the oldest bags, items not read since they were
 * bagged) of the classes that can hold a value of ext_item_size or more, in
 * rounds until no candidate is left; with memory to spare it moves only
 * items idle ext_item_age seconds (the default, UINT32_MAX, means pressure
 * only, as memcached). Items whose TTL
 * left is under ext_low_ttl go to the low-TTL bucket, so their pages empty
 * out together. When the disk is full extstore.c evicts its oldest page; the
 * stubs into it read as misses from then on, and the cleaner (bags.c) sweeps
 * them out of RAM, as memcached's LRU crawler does (ext_stub_orphaned).
 *
 * Concurrency: an item is replaced only if it is unchanged. The flusher
 * copies the value under the key's stripe lock inside a read section, writes
 * it, then retakes the stripe lock and swaps in the stub only if the same
 * chunk is still the key's item with the same CAS (inside the section the
 * chunk cannot be freed and reused, and values never change in place). A
 * set, delete or append in between wins: the stub is discarded and its disk
 * record counted as garbage. Bringing a value back is the same in reverse:
 * read without locks, swap in only if the key still has the same stub (same
 * locator). The compactor (ext_compact.c) moves a stub's record the same
 * way (ext_relocate); a read that finds its page re-versioned looks once
 * whether the key's stub now points at the same record elsewhere (same
 * length, CRC and CAS) and reads it there. Lock order: stripe lock, then
 * extstore's lock (ext_item_gone); extstore never takes a stripe lock.
 * The recache pace is judged under pace_lock, taken with trylock by one
 * worker at a time and never with another lock held.
 */
#include "ext_items.h"
#include "bgthread.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define FLUSH_BATCH 32          /* candidates per class per pass */
#define FLUSH_PERIOD_MS 100

static struct extstore *g_ext;
/* the settings extstore started with; the ones the `extstore` command
 * changes (enum ext_knob) are written and read with relaxed atomics, as
 * the flusher, the compactor and the workers read them while a worker
 * changes them */
static struct ext_settings g_x;
#define KNOB(field) __atomic_load_n(&g_x.field, __ATOMIC_RELAXED)
static char *flush_buf;         /* the flusher's copy of one value (-I bytes) */
static storage_thread *flusher_ctx;
static _Atomic bool pressure;

static _Atomic uint64_t recache_n, miss_n, badcrc_n, hits_n;
/* flusher passes completed (never reset: tests wait on it, as on lru_cleaner_passes) */
static _Atomic uint64_t flusher_passes_n;
/* values the flusher moved out of each class, and whether a pass is
 * running: what a store waiting for room watches (ext_await_flusher) */
static _Atomic uint64_t flushed_from[MAX_SLAB_CLASSES + 1];
static _Atomic bool flusher_busy;
/* passes the flusher started (a store waiting knows which pass came after
 * it asked), and how many of its passes in a row found no candidate in a
 * class: two or more, and a store there has nothing to wait for (values
 * under ext_item_size, read since bagged). One is not enough: in a fast
 * fill the class's newest values are all still in bags open to appends
 * for a moment, and a store that skipped its wait then evicted them
 * (40-56 values in test_a_paced_fill_loses_no_value's fill) */
static _Atomic uint64_t flusher_started_n;
/* a waiting store has asked bgthread_wake for a pass that has not started
 * yet: the stores after it need not take the flusher's mutex again
 * (ext_await_flusher says why no store then waits for nothing) */
static _Atomic bool flusher_wake_asked;
static _Atomic uint32_t flusher_found_none[MAX_SLAB_CLASSES + 1];
#define FOUND_NONE_PASSES 2
/* the circuit breaker: flusher_passes_n + 1 when a store's wait ran out
 * with neither a value moved nor a pass completed (a stuck or very slow
 * disk); no store waits again until a pass completes. 0: closed. */
static _Atomic uint64_t await_broken_at;
/* stores that waited for the flusher, those waits that ran out with no
 * progress (opening the breaker), those that ran out of the store's budget
 * at all, stores that would have waited but their worker had used its share
 * of the second, and stores the open breaker turned away
 * (extstore_store_waits, _fruitless, _timed_out, _capped, _broken) */
static _Atomic uint64_t awaits_n, awaits_fruitless_n, awaits_capped_n, awaits_timed_out_n, awaits_broken_n;

static bool flusher_pass(void *arg);
static struct bgthread flusher = { .name = "cachet-extflush", .pass = flusher_pass, .period_ms = FLUSH_PERIOD_MS };

static void ext_note_pressure(void)
{
    if (g_ext && !atomic_exchange_explicit(&pressure, true, memory_order_relaxed)) bgthread_wake(&flusher);
}

static void ext_item_gone(item *it)
{
    struct ext_stub st = item_ext_stub(it);
    struct ext_locator loc;
    memcpy(&loc, st.loc, sizeof loc);
    /* versions only move forward: a stale locator stays stale, and the
     * cleaner reclaiming the orphans of an evicted page must not queue on
     * extstore's lock for each */
    if (g_ext && ext_check(g_ext, &loc)) ext_delete(g_ext, &loc, item_nkey(it), st.nbytes);
}

/* The cleaner's sweep (bags.c, reclaim_if_dead) reclaims a linked stub when
 * this says its page has moved on. Why it never takes the stub of a record
 * that is still live (issue 21 part 2 asked; its one report, 74 of 74
 * records written then "reclaimed" with `evictions` 0, did not include the
 * counters below and was not reproduced):
 * - A stub's locator never changes in place (moving a record links a new
 *   stub), and a page's version only moves forward, so "stale" is for good:
 *   this may be asked without the stripe lock, and the unlink that follows
 *   needs no second look.
 * - A version moves only in extstore.c's page_reset, reached from four
 *   places: page_open evicting the oldest closed page (counted in
 *   extstore_page_evictions and extstore_objects_evicted), wbuf_flush
 *   failing (the bucket's page loses its records: extstore_write_errors),
 *   ext_page_drop after a compaction walk (the records nobody moved:
 *   extstore_compact_lost), and ext_delete freeing a closed page whose live
 *   count reached 0.
 * - The last frees no live record as long as a record's count is taken
 *   back at most once and only when no linked stub points at it. It is
 *   taken back by ext_item_gone when a stub leaves the table (unlinked or
 *   replaced; ITEM_LINKED is cleared once, under the stripe lock), except
 *   where item_rescue hands the locator to its copy (record_goes false),
 *   and by a writer for the record it wrote and could not link (flush_one,
 *   ext_relocate), which no stub ever pointed at. The stress checker
 *   (make stress-ext) fails when fewer records are counted live than
 *   stubs are linked, under sets, deletes, appends, touches, page moves,
 *   page evictions and compaction.
 * So a stub swept with none of those three counters moving would be a bug
 * here; with them, its value was lost on disk and the counters say how. */
static bool ext_stub_orphaned(item *it)
{
    if (!g_ext || !(item_layout(it) & ITEM_ON_DISK)) return false;
    struct ext_stub st = item_ext_stub(it);
    struct ext_locator loc;
    memcpy(&loc, st.loc, sizeof loc);
    return !ext_check(g_ext, &loc);
}

static uint64_t ext_records_orphaned_total(void) { return g_ext ? ext_records_orphaned(g_ext) : 0; }

static int ext_stub_class_max(void)
{
    if (!g_ext) return 0;
    return slabs_stub_clsid(item_ntotal_for(ITEM_HAS_FLAGS | ITEM_HAS_EXPTIME | ITEM_ON_DISK, KEY_MAX_LENGTH,
                                            EXT_STUB_NSTORED_MAX));
}

/* Metadata an item hands to its replacement (stub or value): CAS, expiry,
 * state, fetched bit, last access. Stripe lock held; `to` has an expiry
 * field if `from` has an expiry (item_exptime_fits): a stub of an item
 * that never expires has none. */
static void carry_over(item *to, item *from)
{
    if (g_use_cas) atomic_store_explicit(item_cas_ptr(to), item_get_cas(from), memory_order_relaxed);
    if (item_layout(to) & ITEM_HAS_EXPTIME)
        atomic_store_explicit(item_exptime_ptr(to), item_exptime(from), memory_order_relaxed);
    atomic_fetch_or_explicit(&to->iflags, item_fl(from) & (ITEM_STALE | ITEM_WIN_SENT), memory_order_relaxed);
    atomic_store_explicit(&to->bag, atomic_load_explicit(&from->bag, memory_order_relaxed) & ITEM_FETCHED_BIT,
                          memory_order_relaxed);
    atomic_store_explicit(&to->time, atomic_load_explicit(&from->time, memory_order_relaxed), memory_order_relaxed);
}

/* ---- flusher ---------------------------------------------------------- */

static bool flush_one(storage_thread *t, const struct ext_candidate *c)
{
    uint32_t hv = hash_key(c->key, c->nkey);
    /* the stub first, outside any lock or section: allocating may evict */
    stripe_lock(hv);
    item *it = assoc_find_locked(c->key, c->nkey, hv);
    bool ok = it == c->it && !(item_fl(it) & (ITEM_ON_DISK | ITEM_STALE | ITEM_WIN_SENT));
    uint32_t cflags = ok ? item_cflags(it) : 0;
    uint8_t keybin = ok ? (item_layout(it) & ITEM_KEY_BINARY) : 0;
    /* the stub is sized by the value's length (it keeps it) and has an
     * expiry field only if the item expires: the second look below checks
     * both still hold */
    uint64_t stub_nbytes = ok ? item_nbytes(it) : 0;
    uint8_t expiring = ok && item_exptime(it) ? ITEM_HAS_EXPTIME : 0;
    stripe_unlock(hv);
    if (!ok) return false;
    item *stub = alloc_item(t, c->key, c->nkey, cflags, 0, stub_nbytes,
                            (uint8_t)(expiring | ITEM_ON_DISK | keybin), NULL, true);
    if (!stub) return false;

    epoch_enter(t);
    stripe_lock(hv);
    struct time_view tv = time_view_now();
    it = assoc_find_locked(c->key, c->nkey, hv);
    uint64_t nbytes = 0, cas = 0;
    rel_time_t exp = 0;
    ok = it && item_is_live_in(it, tv) && !(item_fl(it) & (ITEM_ON_DISK | ITEM_STALE | ITEM_WIN_SENT)) &&
         item_cflags(it) == cflags && (item_layout(it) & ITEM_KEY_BINARY) == keybin &&
         (nbytes = item_nbytes(it)) == stub_nbytes && item_exptime_fits(stub, item_exptime(it)) &&
         nbytes >= KNOB(item_size) && nbytes <= g_cfg.item_size_max;
    if (ok) {
        cas = item_get_cas(it);
        exp = item_exptime(it);
        copy_value_out(it, 0, flush_buf, (size_t)nbytes);
    }
    stripe_unlock(hv);
    if (!ok) { epoch_exit(t); item_discard(t, stub); return false; }

    enum ext_bucket b = EXT_BUCKET_DEFAULT;
    uint32_t low_ttl = KNOB(low_ttl);
    if (exp && low_ttl && exp > tv.now && exp - tv.now < low_ttl) b = EXT_BUCKET_LOWTTL;
    struct ext_locator loc;
    if (ext_write(g_ext, b, c->key, c->nkey, flush_buf, (uint32_t)nbytes, &loc) != 0) {
        epoch_exit(t);
        item_discard(t, stub);
        return false;
    }
    item_set_ext_locator(stub, &loc);

    stripe_lock(hv);
    item *now_it = assoc_find_locked(c->key, c->nkey, hv);
    /* a touch since the copy may have given the item an expiry in place */
    ok = now_it == it && item_get_cas(it) == cas && !(item_fl(it) & (ITEM_ON_DISK | ITEM_STALE | ITEM_WIN_SENT)) &&
         item_exptime_fits(stub, item_exptime(it));
    if (ok) {
        carry_over(stub, it);
        replace_locked(t, it, stub, hv, false);
    }
    stripe_unlock(hv);
    epoch_exit(t);
    if (!ok) {
        ext_delete(g_ext, &loc, c->nkey, (uint32_t)nbytes);
        item_discard(t, stub);
        return false;
    }
    enter_bag(t, stub);
    return true;
}

static bool ext_flush_item(storage_thread *t, item *it, const char *key, size_t nkey)
{
    struct ext_candidate c = { .it = it, .nkey = (uint8_t)nkey };
    memcpy(c.key, key, nkey);
    return flush_one(t, &c);
}

/* Whether class c can hold an item with ext_item_size bytes of value: its
 * chunks are that large, it is the largest class (it chains longer values),
 * or it held the head of a chained value (a value just over slab_chunk_max
 * keeps only its last bytes in a head of a small class: skipping those
 * classes left such values in RAM until they were evicted, never written). */
static bool class_may_hold_large(unsigned c)
{
    return g_class_size[c] >= ITEM_HDR + KNOB(item_size) || c == slabs_class_count() ||
           class_holds_chained(c);
}

/* Memory is short for large values: the classes that hold them have less
 * than a page's worth of free chunks left and no page was never handed out.
 * Slab pages never return to the free pool, so "pages used" stays at the
 * maximum once the cache has filled and says nothing; free chunks in these
 * classes come back as the flusher moves values out, so pressure clears
 * once the reserve is back (memcached: ext_free_memchunks). An eviction
 * (ext_note_pressure) also counts, for the pass that follows it. */
static bool memory_low(void)
{
    if (slabs_pages_unused() >= 2) return false;
    uint64_t page = slabs_page_size();
    unsigned n = slabs_class_count();
    /* the stub classes hold no value to move out */
    for (unsigned c = slabs_first_item_class(); c <= n; c++) {
        if (!class_may_hold_large(c)) continue;
        uint64_t pages = slabs_class_pages((int)c);
        if (!pages) continue;
        /* a class of a few pages keeps an eighth of them free, not a page */
        uint64_t reserve = pages * page / 8 < page ? pages * page / 8 : page;
        if (slabs_class_free_bytes((int)c) < reserve) return true;
    }
    return false;
}

/* A stub class's next page, taken while it still has a quarter of a page
 * free: the values on the page it takes are written to disk, their stubs
 * going to those free chunks (slabs_acquire_page_for_stubs). Taken when the
 * class had run out, the page came from the class of the values being
 * flushed, which the fill keeps at no free chunk, so nothing could be
 * rescued and every value on it was evicted before it reached the disk: a
 * paced fill of 131,072 values of 4 KB at -m 64 lost 750-980 keys this way
 * (0 rescued) with the disk far from full, where memcached 1.6.45 lost 0-2. */
static void stub_classes_top_up(void)
{
    if (slabs_pages_unused() > 0) return;
    uint64_t page = slabs_page_size();
    for (unsigned c = 1; c < slabs_first_item_class(); c++) {
        if (!slabs_class_pages((int)c)) continue;
        uint64_t size = slabs_chunk_size((int)c);
        if (slabs_class_free_bytes((int)c) / size >= page / size / 4) continue;
        slabs_acquire_page_for_stubs(flusher_ctx, (int)c);
    }
}

#ifdef CACHET_TEST_HOOKS
/* Test builds: CACHET_TEST_EXT_FAULTS containing "flusher_stall" makes the
 * flusher block in its first pass that finds candidates, busy and
 * completing no pass, as it would in a write to a stuck disk, until it is
 * stopped (test_extstore_faults.py: stores must then evict, not wait). */
static _Atomic bool test_stall_released;
static void test_flusher_stall(void)
{
    const char *f = getenv("CACHET_TEST_EXT_FAULTS");
    if (!f || !strstr(f, "flusher_stall")) return;
    struct timespec step = { 0, 1000 * 1000L };
    while (!atomic_load_explicit(&test_stall_released, memory_order_acquire)) nanosleep(&step, NULL);
}
static void test_flusher_stall_release(void) { atomic_store_explicit(&test_stall_released, true, memory_order_release); }
/* "park_ms=N": a parked store's bound is N ms instead of 100, so a test can
 * watch a store wait without racing its bound. */
static int64_t park_max_us(void)
{
    static _Atomic int64_t bound = -1;   /* read once: asked of every parked store each millisecond */
    int64_t b = atomic_load_explicit(&bound, memory_order_relaxed);
    if (b >= 0) return b;
    const char *f = getenv("CACHET_TEST_EXT_FAULTS"), *p = f ? strstr(f, "park_ms=") : NULL;
    b = p ? strtoll(p + 8, NULL, 10) * 1000 : STORE_WAIT_MAX_US;
    atomic_store_explicit(&bound, b, memory_order_relaxed);
    return b;
}
#else
static inline int64_t park_max_us(void) { return STORE_WAIT_MAX_US; }
static inline void test_flusher_stall(void) {}
static inline void test_flusher_stall_release(void) {}
#endif

static bool flusher_pass(void *arg)
{
    (void)arg;
    static struct ext_candidate cands[FLUSH_BATCH];
    atomic_store_explicit(&flusher_busy, true, memory_order_relaxed);
    /* in this order, seq_cst: see ext_await_flusher */
    atomic_store(&flusher_wake_asked, false);
    atomic_fetch_add(&flusher_started_n, 1);
    bool pressed = atomic_exchange(&pressure, false) || memory_low();
    uint32_t item_age = KNOB(item_age), item_size = KNOB(item_size);
    bool aged = item_age != UINT32_MAX;
    unsigned flushed = 0;
    if (pressed || aged) {
        unsigned n = slabs_class_count();
        for (unsigned c = slabs_first_item_class(); c <= n; c++) {
            if (!class_may_hold_large(c)) continue;
            unsigned k = bags_ext_candidates((int)c, cands, FLUSH_BATCH, item_size,
                                             aged ? item_age : 0, pressed);
            uint32_t none = atomic_load_explicit(&flusher_found_none[c], memory_order_relaxed);
            atomic_store_explicit(&flusher_found_none[c], k ? 0 : none + (none < FOUND_NONE_PASSES),
                                  memory_order_relaxed);
            if (k) test_flusher_stall();
            unsigned moved = 0;
            for (unsigned i = 0; i < k; i++) {
                if (!flush_one(flusher_ctx, &cands[i])) continue;
                moved++;
                /* each value as it goes: a store waiting for room sees it at once */
                atomic_fetch_add_explicit(&flushed_from[c], 1, memory_order_release);
            }
            flushed += moved;
        }
    }
    if (flushed) stub_classes_top_up();
    if (!flushed) {
        /* idle: what is buffered reaches the disk (reads of it are served
         * from the buffer meanwhile) */
        for (int b = 0; b < EXT_BUCKETS; b++) ext_flush(g_ext, (enum ext_bucket)b);
    }
    /* pages written may have used up the free ones: the compactor checks */
    if (flushed && ext_compact_due(atomic_load_explicit(&ext_get_stats(g_ext)->pages_free, memory_order_relaxed),
                                   KNOB(compact_under)))
        ext_compact_wake();
    atomic_fetch_add_explicit(&flusher_passes_n, 1, memory_order_relaxed);
    atomic_store_explicit(&flusher_busy, false, memory_order_relaxed);
    /* another round at once while memory stays short */
    return flushed > 0 && pressed;
}

/* A store found no free chunk in class clsid and is about to evict its
 * oldest items. With extstore those are the values the flusher is about to
 * write (it takes the coldest first), and evicting one loses a value that
 * would have been on disk a moment later: a paced fill of 131,072 values of
 * 4 KB at -m 64 lost 136-4,450 of them that way (more the busier the
 * machine), where memcached 1.6.45 lost 0. The flusher falls behind when it
 * waits for a write buffer's pwrite or for a CPU (the fill's own worker
 * and client take both cores); the store then waits instead (its
 * connection parked, or its thread asleep, below), which also gives the
 * flusher the CPU, until the flusher has moved AWAIT_VALUES
 * values out of this class (the eviction that follows then reclaims their
 * dead copies first, uncounted), or a pass that started after the store
 * asked ended with the flusher idle, or two passes ended, that one among
 * them (it had too little to write here, or was busy with another
 * class), or the store's sleeping budget ran out
 * (store_wait_allowance_us: 100 ms a store with the cleaner wait, a tenth
 * of the worker's time).
 * It does not wait at all when the flusher's last two looks at this class
 * found nothing to write (values under ext_item_size, values read since bagged,
 * the largest class's chained values), nor while the circuit breaker is
 * open: a wait that ran out with no value moved and no pass completed means
 * the disk is stuck or very slow (the flusher blocked in a write), and
 * every store would otherwise sleep its whole budget; from then until the
 * flusher completes a pass, stores evict at once, as memcached's do.
 * A store from a client connection (item_alloc_parking) does not sleep:
 * its worker serves everyone else meanwhile. Its connection waits, parked,
 * and the request asks again on the worker's next turns (park_again) until
 * the same conditions end the wait or the store's 100 ms (park_max_us)
 * have passed; parked time is charged to no thread's share (nor to the
 * store's budget: the cleaner's wait after it may still sleep its 20 ms).
 * Each parked connection is its own wait: with a stuck disk and K writers
 * parked at once, K waits run out (_timed_out, _fruitless) as the breaker
 * opens, where sleeping workers made one per worker. Sleeping stays for
 * the callers that cannot be retried from the top (a vivify, a touch's
 * copy: rare), as before; an append's combined value does not wait at all
 * (items.c). */
#define AWAIT_STEP_US 100
#define AWAIT_VALUES 8      /* bags.c's EVICT_BATCH: what one eviction call frees */

/* Whether a store that began waiting when the flusher had moved `from`
 * values out of clsid and completed `passes` passes, counting on pass
 * `asked`, can stop: WAIT_MOVED, the flusher moved enough values out (or
 * chunks came free: the flusher's and the cleaner's grace periods end, a
 * store freed one); WAIT_IDLE, the flusher has nothing more for it now (two
 * passes ended, that one among them, or it ended and none runs); else
 * WAIT_ON. */
enum wait_state { WAIT_ON, WAIT_MOVED, WAIT_IDLE };
static enum wait_state flusher_wait_state(int clsid, uint64_t from, uint64_t passes, uint64_t asked, bool waited)
{
    if (atomic_load_explicit(&flushed_from[clsid], memory_order_acquire) - from >= AWAIT_VALUES ||
        (waited && slabs_class_free_bytes(clsid) > 0))
        return WAIT_MOVED;
    uint64_t done = atomic_load_explicit(&flusher_passes_n, memory_order_relaxed);
    if (done - passes >= 2 && done >= asked) return WAIT_IDLE;
    /* between two passes of a round busy is false for a moment: only once a
     * pass that saw this store's pressure ended and no other runs does the
     * flusher have nothing more for this class now */
    if (done >= asked && !atomic_load_explicit(&flusher_busy, memory_order_relaxed) &&
        !atomic_load_explicit(&pressure, memory_order_relaxed))
        return WAIT_IDLE;
    return WAIT_ON;
}

/* A wait that ran out with neither a value moved nor a pass completed
 * opens the circuit breaker (the disk is stuck or very slow). */
static void wait_ran_out(int clsid, uint64_t from, uint64_t passes)
{
    atomic_fetch_add_explicit(&awaits_timed_out_n, 1, memory_order_relaxed);
    if (atomic_load_explicit(&flushed_from[clsid], memory_order_acquire) == from &&
        atomic_load_explicit(&flusher_passes_n, memory_order_relaxed) == passes) {
        atomic_store_explicit(&await_broken_at, passes + 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&awaits_fruitless_n, 1, memory_order_relaxed);
    }
}

bool storage_park_due(const struct store_park *park, int64_t now_us)
{
    if (!park->since_us || now_us - park->since_us >= park_max_us()) return true;
    return flusher_wait_state(park->clsid, park->from, park->passes, park->asked, false) != WAIT_ON;
}

/* A parked store asks again (its connection's retry): still waiting
 * (AWAIT_PARKED), or done (AWAIT_WAITED: look for a chunk once more, then
 * evict). Parked time costs the worker nothing, so it is charged to no
 * thread's share; its bound is the store's (park_max_us). */
static enum await_result park_again(struct store_park *park, int clsid)
{
    int64_t waited = store_wait_clock_us() - park->since_us;
    enum wait_state ws = flusher_wait_state(clsid, park->from, park->passes, park->asked, true);
    if (ws == WAIT_ON && waited < park_max_us()) return AWAIT_PARKED;
    if (ws == WAIT_ON) wait_ran_out(clsid, park->from, park->passes);
    *park = (struct store_park){0};
    return AWAIT_WAITED;
}

static enum await_result ext_await_flusher(storage_thread *t, int clsid)
{
    if (!g_ext || t == flusher_ctx || clsid <= 0 || clsid > MAX_SLAB_CLASSES || !class_may_hold_large((unsigned)clsid))
        return AWAIT_NONE;
    struct store_park *park = t ? t->park : NULL;
    if (park && park->since_us) {
        if (park->clsid == clsid) return park_again(park, clsid);
        *park = (struct store_park){0};   /* another class's wait: not this store's */
    }
    /* the first pass that starts after this completes as pass number
     * `asked`; read before the pressure is raised. A pass may still start
     * between the read and the raise and clear the flag before it is set:
     * the flag then stays up for the next pass, and `asked` (that pass or
     * an earlier one) is not passed until a pass that ran after this read
     * ends. The other order lost a wake-up: the pass that took the pressure started
     * between the two, the store counted on the pass after it, which did
     * not come for the flusher's 100 ms period (nothing more to write), and
     * the wait ran out, used up the worker's share of fruitless waiting, and
     * the stores after it in that second evicted without waiting (94-1,084
     * `capped` stores a fill, 8-336 values lost). The wake is not left to
     * ext_note_pressure, which wakes only when it raises the flag: raised
     * already, a pass that had started but not yet taken it takes it for
     * this store too, and no pass follows.
     * Only the first store to ask since a pass started wakes it (one mutex
     * a pass, not one a store: under a fill every evicting store came
     * here). A store that finds flusher_wake_asked already set still gets
     * a pass numbered `asked` or later that starts at once and reads
     * `pressure` after this store raised it. Proof, all five accesses
     * seq_cst (one total order S, agreeing with each variable's
     * modification order): the exchange below read `true` from the latest
     * setter, which calls bgthread_wake after setting it; bgthread_wake
     * makes the thread start a pass after it (woken: at once, asleep or
     * not; not yet running: its first pass), and each pass clears the flag
     * first thing, so some pass P
     * clears it after the setter's write, hence (no clear between the
     * write and an RMW that read it) after this exchange in S. P then
     * increments flusher_started_n after its clear, so after this store's
     * load of it in S: P's number is at least `asked`. P's exchange of
     * `pressure` comes after this store's raise in S. (A pass before P,
     * even pass asked-1, may take the raise first, as when every store
     * woke the flusher; the waits below count passes from `asked` on, and
     * P is one of them, started without the 100 ms period.) */
    uint64_t asked = atomic_load(&flusher_started_n) + 1;
    atomic_store(&pressure, true);
    if (!atomic_exchange(&flusher_wake_asked, true)) bgthread_wake(&flusher);
    if (atomic_load_explicit(&flusher_found_none[clsid], memory_order_relaxed) >= FOUND_NONE_PASSES) return AWAIT_NONE;
    uint64_t passes = atomic_load_explicit(&flusher_passes_n, memory_order_relaxed);
    if (atomic_load_explicit(&await_broken_at, memory_order_relaxed) == passes + 1) {
        atomic_fetch_add_explicit(&awaits_broken_n, 1, memory_order_relaxed);
        return AWAIT_NONE;
    }
    int64_t allowance = store_wait_allowance_us(t);
    if (allowance <= 0) {
        /* a store that may wait, turned away by its worker's cap */
        if (t && t->wait_left_us > 0) atomic_fetch_add_explicit(&awaits_capped_n, 1, memory_order_relaxed);
        return AWAIT_NONE;
    }
    uint64_t from = atomic_load_explicit(&flushed_from[clsid], memory_order_acquire);
    atomic_fetch_add_explicit(&awaits_n, 1, memory_order_relaxed);
    if (park) {
        /* as the sleeping wait below, each condition first */
        if (flusher_wait_state(clsid, from, passes, asked, false) != WAIT_ON) return AWAIT_WAITED;
        *park = (struct store_park){ .since_us = store_wait_clock_us(), .from = from, .passes = passes,
                                     .asked = asked, .clsid = clsid };
        return AWAIT_PARKED;
    }
    unsigned depth = epoch_step_out(t);
    struct timespec step = { 0, AWAIT_STEP_US * 1000L };
    int64_t start = store_wait_clock_us(), slept = 0;
    enum wait_state ws;
    /* each condition is looked at before the first sleep too */
    while ((ws = flusher_wait_state(clsid, from, passes, asked, slept > 0)) == WAIT_ON && slept < allowance) {
        nanosleep(&step, NULL);
        slept = store_wait_clock_us() - start;
    }
    store_wait_spent(t, slept, ws == WAIT_MOVED);
    epoch_step_in(t, depth);
    if (ws == WAIT_ON) wait_ran_out(clsid, from, passes);
    return AWAIT_WAITED;
}

/* ---- bringing values back ---------------------------------------------- */

/* The key's item, if it is still the stub with this locator. Stripe lock held. */
static item *same_stub_locked(const char *key, size_t nkey, uint32_t hv, const uint8_t loc[12])
{
    item *it = assoc_find_locked(key, nkey, hv);
    if (!it || !(item_layout(it) & ITEM_ON_DISK)) return NULL;
    struct ext_stub st = item_ext_stub(it);
    return memcmp(st.loc, loc, sizeof st.loc) ? NULL : it;
}

static void drop_stub(const char *key, size_t nkey, const uint8_t loc[12])
{
    uint32_t hv = hash_key(key, nkey);
    stripe_lock(hv);
    item *it = same_stub_locked(key, nkey, hv, loc);
    if (it) item_unlink_locked(it, hv);
    stripe_unlock(hv);
}

static void count_failure(enum ext_read_result r)
{
    atomic_fetch_add_explicit(&miss_n, 1, memory_order_relaxed);
    if (r == EXT_MISS_BADCRC) atomic_fetch_add_explicit(&badcrc_n, 1, memory_order_relaxed);
}

enum relink_result { RELINK_OK, RELINK_CHANGED, RELINK_NOMEM };

/* Replaces the key's stub (if unchanged) by an item holding val. */
static enum relink_result relink(storage_thread *t, const char *key, size_t nkey, const uint8_t loc[12],
                   const char *val, uint32_t nbytes)
{
    uint32_t hv = hash_key(key, nkey);
    stripe_lock(hv);
    item *stub = same_stub_locked(key, nkey, hv, loc);
    uint32_t cflags = stub ? item_cflags(stub) : 0;
    uint8_t keybin = stub ? (item_layout(stub) & ITEM_KEY_BINARY) : 0;
    stripe_unlock(hv);
    if (!stub) return RELINK_CHANGED;
    item *fresh = alloc_item(t, key, nkey, cflags, 0, nbytes, (uint8_t)(ITEM_HAS_EXPTIME | keybin), NULL, false);
    if (!fresh) return RELINK_NOMEM;
    for (size_t off = 0; off < nbytes;) {
        size_t len;
        char *dst = item_value_span(fresh, off, &len);
        if (!dst || !len) break;
        if (len > nbytes - off) len = nbytes - off;
        memcpy(dst, val + off, len);
        off += len;
    }
    stripe_lock(hv);
    stub = same_stub_locked(key, nkey, hv, loc);
    /* the copy carries flags and the key-binary bit from the first look:
     * both must still be the stub's */
    if (stub && item_cflags(stub) == cflags && (item_layout(stub) & ITEM_KEY_BINARY) == keybin) {
        carry_over(fresh, stub);
        replace_locked(t, stub, fresh, hv, false);
        stripe_unlock(hv);
        enter_bag(t, fresh);
        return RELINK_OK;
    }
    stripe_unlock(hv);
    item_discard(t, fresh);
    return RELINK_CHANGED;
}

/* ---- compaction: moving a stub's record ---------------------------------- */

enum ext_relocate_result ext_relocate(storage_thread *t, const struct ext_record *r, enum ext_bucket to,
                                      rel_time_t written, bool drop_unread, bool *cold)
{
    const char *key = r->key;
    size_t nkey = r->nkey;
    uint8_t loc[12];
    memcpy(loc, &r->loc, sizeof loc);
    uint32_t hv = hash_key(key, nkey);
    stripe_lock(hv);
    item *old = same_stub_locked(key, nkey, hv, loc);
    rel_time_t now = now_time();
    if (old && item_ext_stub(old).nbytes == r->nval && !item_is_live(old, now)) {
        /* expired or flushed: it goes now, with its record, which the drop
         * would otherwise count as lost; counted as the cleaner counts it */
        if (!item_is_flushed(old, now)) {
            int cls = slabs_clsid_of(old);
            atomic_fetch_add_explicit(&g_class_stats[cls].expired, 1, memory_order_relaxed);
            if (!(atomic_load_explicit(&old->bag, memory_order_relaxed) & ITEM_FETCHED_BIT))
                atomic_fetch_add_explicit(&g_class_stats[cls].expired_unfetched, 1, memory_order_relaxed);
        }
        item_unlink_locked(old, hv);
        old = NULL;
    }
    if (!old || item_ext_stub(old).nbytes != r->nval) {
        stripe_unlock(hv);
        return EXT_RELOC_GONE;
    }
    /* a read stamps the item's last access (bags_stamp), so a stub last
     * touched before its page was opened was not read since its value
     * went to disk: memcached's "still in COLD" */
    *cold = atomic_load_explicit(&old->time, memory_order_relaxed) < written;
    if (drop_unread && *cold) {
        item_unlink_locked(old, hv);
        stripe_unlock(hv);
        return EXT_RELOC_DROPPED;
    }
    uint32_t cflags = item_cflags(old);
    uint8_t keybin = item_layout(old) & ITEM_KEY_BINARY;
    /* an expiry field only if the stub expires; a touch may give the old
     * stub one meanwhile (its copy keeps the locator): then once more with
     * the field, which always fits */
    uint8_t expiring = item_exptime(old) ? ITEM_HAS_EXPTIME : 0;
    stripe_unlock(hv);

    item *stub;
    for (;;) {
        /* as flush_one: the stub first, outside any lock (allocating may evict) */
        stub = alloc_item(t, key, nkey, cflags, 0, r->nval, (uint8_t)(expiring | ITEM_ON_DISK | keybin), NULL, false);
        if (!stub) return EXT_RELOC_LOST;
        struct ext_locator nloc;
        if (ext_write(g_ext, to, key, (uint32_t)nkey, r->val, r->nval, &nloc) != 0) {
            item_discard(t, stub);
            return EXT_RELOC_LOST;
        }
        item_set_ext_locator(stub, &nloc);

        stripe_lock(hv);
        old = same_stub_locked(key, nkey, hv, loc);
        /* the new stub carries flags and the key-binary bit from the first
         * look: both must still be the old stub's */
        bool ok = old && item_cflags(old) == cflags && (item_layout(old) & ITEM_KEY_BINARY) == keybin;
        bool fits = ok && item_exptime_fits(stub, item_exptime(old));
        if (fits) {
            carry_over(stub, old);
            replace_locked(t, old, stub, hv, false);
        }
        stripe_unlock(hv);
        if (fits) break;
        ext_delete(g_ext, &nloc, (uint32_t)nkey, r->nval);
        item_discard(t, stub);
        if (!ok || expiring) return EXT_RELOC_GONE;
        expiring = ITEM_HAS_EXPTIME;
    }
    enter_bag(t, stub);
    return EXT_RELOC_MOVED;
}

/* Whether the key's item is now a stub of the same record moved elsewhere
 * (compaction): same length, same CRC of key and value, same CAS; if so its
 * locator goes to at. A set in between has another CAS (and almost surely
 * another CRC), so its value is never served under the old one's header. */
static bool storage_ext_moved(const char *key, size_t nkey, const struct item_view *v, uint8_t at[12])
{
    struct ext_locator was, now;
    memcpy(&was, v->ext_loc, sizeof was);
    uint32_t hv = hash_key(key, nkey);
    stripe_lock(hv);
    item *it = assoc_find_locked(key, nkey, hv);
    bool moved = false;
    if (it && (item_layout(it) & ITEM_ON_DISK)) {
        struct ext_stub st = item_ext_stub(it);
        memcpy(&now, st.loc, sizeof now);
        moved = st.nbytes == v->nbytes && now.crc == was.crc && now.packed != was.packed &&
                item_get_cas(it) == v->cas;
        if (moved) memcpy(at, st.loc, 12);
    }
    stripe_unlock(hv);
    return moved;
}

struct extstore *storage_ext_store(void) { return g_ext; }

/* A value read from disk again sooner than RAM keeps a value of its size:
 * its previous access is more recent than the oldest value of the class it
 * would take in RAM (bags_oldest_age_cached, kept by the cleaner). Bringing
 * it back then displaces a colder value, which the flusher writes out in
 * its place, so RAM converges on the hot set instead of leaving hot keys on
 * disk for good. Why not memcached's rule (any second hit within 60 s, 1 in
 * ext_recache_rate let through): without the gate, "twice in 60 s" is most
 * of a skewed key space and RAM churned (measured: fewer GETs/s, more
 * bytes written); with it, the hot keys stay on disk. A class whose oldest
 * value is younger than a second (a fill outrunning the flusher) takes no
 * value back. (A read that had to look its key up twice, waiting for a
 * reply slot, counts as read before: it may come back on its first disk
 * read.) */
/* What hotter_than_ram lets back is paced: one token per hot_every disk
 * hits, at most RECACHE_HOT_BURST saved up. One gap between two reads
 * cannot tell a hot key from a lucky one: with uniform reads of a data set
 * 8x RAM (no key hotter than another) a fifth of all disk hits passed, RAM's
 * oldest age fell to 1-2 s as they displaced each other, and the flusher
 * wrote 30-40 MB/s of them back (bench-extstore's depth-32 run: 215 MB in
 * 5 s where memcached 1.6.45 wrote 0.3 MB; reads queued behind those writes,
 * compaction fell behind and pages with live values were evicted: hit ratio
 * 0.999 -> 0.90). A few hot keys still come back at once (the burst), and
 * the hot set of a skewed workload, read far more often than the rest,
 * takes most of the tokens. Approximate under races (relaxed atomics): a
 * token more or less.
 * How often a token comes is judged every RECACHE_JUDGED_HITS disk hits
 * (recache_pace_update)
 * of whether a recache can pay at all: a value brought back pays only if it
 * is read more often than the one it displaces, RAM's coldest. Per item,
 * GET hits of the large values in RAM against those of the values on disk:
 * - disk's more than RECACHE_DISK_HOTTER x RAM's: disk values are read more
 *   often than even an average one in RAM (a hot set left on disk, RAM
 *   holding values nobody reads): recaches pay;
 * - RAM's more than RECACHE_RAM_HOTTER x disk's: RAM holds a hot set (a
 *   skewed workload that has converged); its coldest values may still be
 *   colder than the hottest of disk, and the hot rule finds those;
 * - in between, read about as often (uniform reads, or RAM holding a random
 *   sample of a skewed key space): no recache raises the share of GETs
 *   served from RAM, and each costs a value written again. Tokens then
 *   come once per RECACHE_EVEN_EVERY disk hits, enough to find a skewed
 *   workload's hottest keys, whose return makes RAM's values read more
 *   often than disk's within a judgement or two.
 * Paced at 1/16 whatever the reads, the bench's uniform depth-32 run
 * recached 12,531 values in 227,506 disk hits and wrote 44 MB in 5 s, where
 * memcached 1.6.45 wrote 0.3 MB; its RAM values were read 1.08x as often as
 * its disk values. */
#define RECACHE_HOT_EVERY 16
#define RECACHE_EVEN_EVERY 256
#define RECACHE_DISK_HOTTER 1.25
#define RECACHE_RAM_HOTTER 2.0
#define RECACHE_JUDGED_HITS 256   /* disk hits between looks */
#define RECACHE_JUDGED_MIN 400.0  /* hits each side needs, at an even pace */
#define RECACHE_HOT_BURST 64
static _Atomic uint32_t hot_tokens = RECACHE_HOT_BURST;
/* until the first judgement, as when the reads are uneven (the pace of
 * before judgements) */
static _Atomic uint32_t hot_every = RECACHE_HOT_EVERY;

/* Every RECACHE_JUDGED_HITS disk hits, by the worker whose hit it was: GET
 * hits per item of the classes that hold large values in RAM against those
 * of the stub classes (a hit on a stub is a disk read; items linked, not
 * chunks used: a value just replaced by its stub holds its chunk until the
 * cleaner frees it), over the GETs since the last judgement, once there are
 * enough of them (RECACHE_JUDGED_MIN); until then the pace stays. A worker that
 * finds another judging skips it (the next one comes 256 hits later). Not
 * the flusher's 100 ms passes: a judgement must come within a few hundred
 * disk hits whatever their rate, or the pace of before holds for a whole
 * pass (a fast client read 1,800 values in one). */
static pthread_mutex_t pace_lock = PTHREAD_MUTEX_INITIALIZER;
static void recache_pace_update(void)
{
    if (pthread_mutex_trylock(&pace_lock) != 0) return;
    static uint64_t ram_hits_was, disk_hits_was;   /* pace_lock */
    uint64_t ram_hits = 0, disk_hits = 0, ram_items = 0, disk_items = 0;
    unsigned n = slabs_class_count(), first = slabs_first_item_class();
    for (unsigned c = 1; c <= n; c++) {
        if (!slabs_class_pages((int)c)) continue;
        bool stubs = c < first;
        if (!stubs && !class_may_hold_large(c)) continue;
        uint64_t hits = storage_class_get_hits_total((int)c),
                 items = atomic_load_explicit(&g_class_stats[c].curr_items, memory_order_relaxed);
        if (stubs) { disk_hits += hits; disk_items += items; }
        else { ram_hits += hits; ram_items += items; }
    }
    /* a class that held large values and holds none now (its pages moved
     * away) leaves the sums smaller than at the last judgement: start the
     * window again rather than read a wrapped difference as a hot side */
    if (ram_hits < ram_hits_was || disk_hits < disk_hits_was) {
        ram_hits_was = ram_hits;
        disk_hits_was = disk_hits;
        pthread_mutex_unlock(&pace_lock);
        return;
    }
    /* no large value in RAM at all: every hit is a disk read, and only
     * recaches can bring a hot one back, so the pace of uneven reads */
    if (!ram_items && disk_items)
        atomic_store_explicit(&hot_every, RECACHE_HOT_EVERY, memory_order_relaxed);
    uint64_t dram = ram_hits - ram_hits_was, ddisk = disk_hits - disk_hits_was;
    /* enough GETs that each side would have RECACHE_JUDGED_MIN hits if both
     * were read evenly: at 30 RAM hits a window (256 disk hits of the
     * bench's uniform run, RAM an eighth of the items) chance alone made
     * RAM look 1.25x colder in 18% of windows */
    double gets = (double)(dram + ddisk), items = (double)(ram_items + disk_items);
    if (!ram_items || !disk_items || gets * (double)ram_items < RECACHE_JUDGED_MIN * items ||
        gets * (double)disk_items < RECACHE_JUDGED_MIN * items) {
        pthread_mutex_unlock(&pace_lock);
        return;
    }
    ram_hits_was = ram_hits;
    disk_hits_was = disk_hits;
    /* per item: hits / items, compared crosswise */
    double ram = (double)dram * (double)disk_items, disk = (double)ddisk * (double)ram_items;
    bool uneven = ram > RECACHE_RAM_HOTTER * disk || disk > RECACHE_DISK_HOTTER * ram;
    atomic_store_explicit(&hot_every, uneven ? RECACHE_HOT_EVERY : RECACHE_EVEN_EVERY, memory_order_relaxed);
    pthread_mutex_unlock(&pace_lock);
}

static bool take_hot_token(void)
{
    uint32_t t = atomic_load_explicit(&hot_tokens, memory_order_relaxed);
    while (t && !atomic_compare_exchange_weak_explicit(&hot_tokens, &t, t - 1, memory_order_relaxed,
                                                       memory_order_relaxed)) {}
    return t != 0;
}

static bool hotter_than_ram(size_t nkey, const struct item_view *v)
{
    if (!v->fetched_before) return false;
    rel_time_t now = now_time();
    if (now < v->last_access) return false;
    /* the class relink() would allocate in: flags only when not 0 */
    uint8_t layout = (uint8_t)(ITEM_HAS_EXPTIME | (v->client_flags ? ITEM_HAS_FLAGS : 0));
    int cls = slabs_clsid(item_ntotal_for(layout, nkey, v->nbytes));
    if (!cls) cls = (int)slabs_class_count();   /* chained: the largest class */
    rel_time_t ram_age = bags_oldest_age_cached(cls);
    /* with ext_item_age, a value idle that long goes back to disk: one read
     * less often than that would be written again after each recache */
    uint32_t item_age = KNOB(item_age);
    if (ram_age > item_age) ram_age = item_age;
    return now - v->last_access < ram_age;
}

static bool storage_ext_fetch_done(storage_thread *t, const char *key, size_t nkey, const struct item_view *v,
                            enum ext_read_result r, const char *val, const uint8_t at[12])
{
    if (r != EXT_HIT) {
        count_failure(r);
        drop_stub(key, nkey, at);
        return false;
    }
    uint64_t n = atomic_fetch_add_explicit(&hits_n, 1, memory_order_relaxed) + 1;
    uint32_t rate = KNOB(recache_rate);
    if (n % RECACHE_JUDGED_HITS == 0) recache_pace_update();
    if (n % atomic_load_explicit(&hot_every, memory_order_relaxed) == 0 &&
        atomic_load_explicit(&hot_tokens, memory_order_relaxed) < RECACHE_HOT_BURST)
        atomic_fetch_add_explicit(&hot_tokens, 1, memory_order_relaxed);
    if (rate && (n % rate == 0 || (hotter_than_ram(nkey, v) && take_hot_token())) &&
        relink(t, key, nkey, at, val, v->nbytes) == RELINK_OK)
        atomic_fetch_add_explicit(&recache_n, 1, memory_order_relaxed);
    return true;
}

#ifdef CACHET_TEST_HOOKS
/* The unit tests and the concurrent checker read a value from disk in one
 * synchronous call; the server goes through ext_batch.c instead. */
bool storage_ext_fetch(storage_thread *t, const char *key, size_t nkey, const struct item_view *v, char *buf)
{
    if (!g_ext || !v->on_disk) return false;
    struct ext_locator loc;
    uint8_t at[12];
    memcpy(at, v->ext_loc, sizeof at);
    memcpy(&loc, at, sizeof loc);
    enum ext_read_result r = ext_read(g_ext, &loc, key, (uint32_t)nkey, buf, v->nbytes);
    if (r == EXT_MISS_STALE && storage_ext_moved(key, nkey, v, at)) {
        /* the compactor moved this very record since the lookup: read it
         * where it is now, rather than answer a miss for a live value */
        memcpy(&loc, at, sizeof loc);
        r = ext_read(g_ext, &loc, key, (uint32_t)nkey, buf, v->nbytes);
    }
    return storage_ext_fetch_done(t, key, nkey, v, r, buf, at);
}
#endif

static bool ext_materialize(storage_thread *t, const char *key, size_t nkey, uint32_t hv)
{
    stripe_lock(hv);
    item *it = assoc_find_locked(key, nkey, hv);
    struct ext_stub st;
    bool disk = it && (item_layout(it) & ITEM_ON_DISK);
    if (disk) st = item_ext_stub(it);
    stripe_unlock(hv);
    if (!disk || !g_ext) return true;
    char *buf = malloc(st.nbytes ? st.nbytes : 1);
    if (!buf) return false;
    struct ext_locator loc;
    memcpy(&loc, st.loc, sizeof loc);
    enum ext_read_result r = ext_read(g_ext, &loc, key, (uint32_t)nkey, buf, st.nbytes);
    bool ok = true;
    if (r != EXT_HIT) {
        /* the value is gone: the item is a miss from now on */
        count_failure(r);
        drop_stub(key, nkey, st.loc);
    } else if (relink(t, key, nkey, st.loc, buf, st.nbytes) == RELINK_NOMEM) {
        /* the data is intact on disk: keep the stub and say "no memory",
         * as the same command on a RAM item does */
        ok = false;
    }
    /* RELINK_CHANGED: the key changed meanwhile, the caller looks again */
    free(buf);
    /* a worker keeps no read buffer: up to -I per worker otherwise */
    ext_read_buf_free();
    return ok;
}

/* What the item code and the IO layer call through ext_hooks.h. */
static struct ext_hooks item_side = {
    .item_gone = ext_item_gone,
    .materialize = ext_materialize,
    .flush_item = ext_flush_item,
    .note_pressure = ext_note_pressure,
    .await_flusher = ext_await_flusher,
    .stub_orphaned = ext_stub_orphaned,
    .records_orphaned_total = ext_records_orphaned_total,
    .stub_class_max = ext_stub_class_max,
    .fetch_done = storage_ext_fetch_done,
    .moved = storage_ext_moved,
};

/* ---- `extstore SETTING VALUE` -------------------------------------------- */

void storage_ext_tune(enum ext_knob knob, uint32_t value, double fraction)
{
    /* Without ext_path the values are kept, as memcached keeps them, and
     * unused; storage_ext_start overwrites them with the command line's. */
    switch (knob) {
    case EXT_KNOB_FREE_MEMCHUNKS: return;
    case EXT_KNOB_ITEM_SIZE:     __atomic_store_n(&g_x.item_size, value, __ATOMIC_RELAXED); break;
    case EXT_KNOB_ITEM_AGE:      __atomic_store_n(&g_x.item_age, value, __ATOMIC_RELAXED); break;
    case EXT_KNOB_LOW_TTL:       __atomic_store_n(&g_x.low_ttl, value, __ATOMIC_RELAXED); break;
    case EXT_KNOB_RECACHE_RATE:  __atomic_store_n(&g_x.recache_rate, value, __ATOMIC_RELAXED); break;
    case EXT_KNOB_COMPACT_UNDER: __atomic_store_n(&g_x.compact_under, value, __ATOMIC_RELAXED); break;
    case EXT_KNOB_DROP_UNDER:    __atomic_store_n(&g_x.drop_under, value, __ATOMIC_RELAXED); break;
    case EXT_KNOB_MAX_SLEEP:
        __atomic_store_n(&g_x.max_sleep, value, __ATOMIC_RELAXED);
        if (g_ext) ext_compact_set_sleep(value);
        break;
    case EXT_KNOB_MAX_FRAG:      __atomic_store(&g_x.max_frag, &fraction, __ATOMIC_RELAXED); break;
    case EXT_KNOB_DROP_UNREAD:   __atomic_store_n(&g_x.drop_unread, value != 0, __ATOMIC_RELAXED); break;
    }
    if (!g_ext) return;
    /* a lower age or size may have made items due, fewer free pages allowed
     * may call for compaction: the next passes run now, not after a period */
    bgthread_wake(&flusher);
    ext_compact_wake();
}

/* ---- lifecycle ---------------------------------------------------------- */

int storage_ext_start(const struct ext_settings *x)
{
    if (!x->npaths) return 0;
    g_x = *x;
    struct ext_file_spec files[EXT_PATHS_MAX];
    for (unsigned i = 0; i < x->npaths; i++) files[i] = (struct ext_file_spec){ x->paths[i], x->sizes[i] };
    /* a page starts with its header block: a buffer as large as the page
     * (memcached allows it) is cut to what fits behind it */
    uint64_t wbuf = x->wbuf_size < x->page_size - EXT_PAGE_HEADER ? x->wbuf_size : x->page_size - EXT_PAGE_HEADER;
    struct ext_conf conf = { .page_size = x->page_size, .wbuf_size = wbuf, .direct_io = true };
    char err[512];
    g_ext = ext_open(files, x->npaths, &conf, err, sizeof err);
    if (!g_ext && strstr(err, "O_DIRECT")) {
        /* tmpfs and some overlay filesystems: buffered IO still works */
        conf.direct_io = false;
        g_ext = ext_open(files, x->npaths, &conf, err, sizeof err);
        if (g_ext && g_cfg.verbose) fprintf(stderr, "cachetd: extstore: O_DIRECT refused, using buffered IO\n");
    }
    if (!g_ext) {
        fprintf(stderr, "cachetd: -o ext_path: %s\n", err);
        return 64;
    }
    flush_buf = malloc(g_cfg.item_size_max);
    if (!flush_buf) { fprintf(stderr, "cachetd: extstore: out of memory\n"); return 70; }
    flusher_ctx = storage_thread_register();
    if (!flusher_ctx) return 70;   /* storage_thread_register said why */
    /* the compactor first: the flusher wakes it (see storage_ext_stop) */
    storage_thread *cctx = storage_thread_register();
    if (!cctx) return 70;
    item_side.store = g_ext;
    ext_hooks_install(&item_side);
    if (ext_compact_start(cctx, g_ext, &g_x, ext_relocate)) { fprintf(stderr, "cachetd: cannot start the extstore compactor\n"); return 70; }
    int rc = bgthread_start(&flusher);
    if (rc) { fprintf(stderr, "cachetd: cannot start the extstore flusher\n"); return 70; }
    return 0;
}

void storage_ext_stop(void)
{
    if (!g_ext) return;
    /* the flusher wakes the compactor: it stops first (bgthread_wake must
     * not race bgthread_stop of the thread it wakes) */
    test_flusher_stall_release();
    bgthread_stop(&flusher);
    ext_compact_stop();
}

/* ---- stats (memcached 1.6.45's names) ----------------------------------- */

#define LD(x) (unsigned long long)atomic_load_explicit(&(x), memory_order_relaxed)

void storage_ext_stats_general(stat_writer w, void *ctx)
{
    if (!g_ext) return;
    const struct ext_stats *s = ext_get_stats(g_ext);
    w(ctx, "get_extstore", "%llu", LD(g_ext_io_counts.get));
    w(ctx, "get_aborted_extstore", "%llu", LD(g_ext_io_counts.aborted));
    w(ctx, "get_oom_extstore", "%llu", LD(g_ext_io_counts.oom));
    w(ctx, "recache_from_extstore", "%llu", LD(recache_n));
    w(ctx, "miss_from_extstore", "%llu", LD(miss_n));
    w(ctx, "badcrc_from_extstore", "%llu", LD(badcrc_n));
    /* cachet's own: failed disk IO (memcached counts none). A failed read is
     * also a miss_from_extstore; a failed buffer write drops the page's
     * records (their locators go stale: misses, never wrong values). */
    w(ctx, "extstore_read_errors", "%llu", LD(s->miss_ioerr));
    /* cachet's own: large values whose connection was closed mid-value
     * because a later piece could not be read (page evicted, or compacted
     * more often than the piece could follow, short file, EIO) */
    w(ctx, "extstore_streams_cut", "%llu", LD(g_ext_io_counts.streams_cut));
    w(ctx, "extstore_write_errors", "%llu", LD(s->writes_failed));
    /* cachet's own: passes of the flusher (one per period, more under
     * pressure), so a client can tell that it ran, not only what it wrote */
    w(ctx, "extstore_flusher_passes", "%llu", LD(flusher_passes_n));
    /* cachet's own: disk hits per recache token now (recache_pace_update):
     * 16 while RAM and disk values are read unevenly, 256 while evenly */
    w(ctx, "extstore_recache_every", "%u", (unsigned)atomic_load_explicit(&hot_every, memory_order_relaxed));
    w(ctx, "extstore_store_waits", "%llu", LD(awaits_n));
    w(ctx, "extstore_store_waits_fruitless", "%llu", LD(awaits_fruitless_n));
    w(ctx, "extstore_store_waits_capped", "%llu", LD(awaits_capped_n));
    w(ctx, "extstore_store_waits_timed_out", "%llu", LD(awaits_timed_out_n));
    w(ctx, "extstore_store_waits_broken", "%llu", LD(awaits_broken_n));
    uint64_t free_pages = LD(s->pages_free);
    double pressure_ratio = s->pages_total ? 1.0 - (double)free_pages / (double)s->pages_total : 0;
    w(ctx, "extstore_memory_pressure", "%.2f", pressure_ratio);
    struct ext_compact_counts cc;
    ext_compact_counts(&cc);
    w(ctx, "extstore_compact_lost", "%llu", (unsigned long long)cc.lost);
    w(ctx, "extstore_compact_rescues", "%llu", (unsigned long long)cc.rescues);
    w(ctx, "extstore_compact_resc_cold", "%llu", (unsigned long long)cc.resc_cold);
    w(ctx, "extstore_compact_resc_old", "%llu", (unsigned long long)cc.resc_old);
    w(ctx, "extstore_compact_skipped", "%llu", (unsigned long long)cc.skipped);
    w(ctx, "extstore_page_allocs", "%llu", LD(s->page_allocs));
    w(ctx, "extstore_page_evictions", "%llu", LD(s->pages_evicted));
    w(ctx, "extstore_page_reclaims", "%llu", LD(s->pages_reclaimed));
    w(ctx, "extstore_pages_free", "%llu", (unsigned long long)free_pages);
    w(ctx, "extstore_pages_used", "%llu", (unsigned long long)(s->pages_total - free_pages));
    w(ctx, "extstore_objects_evicted", "%llu", LD(s->objects_evicted));
    w(ctx, "extstore_objects_read", "%llu", LD(s->objects_read));
    w(ctx, "extstore_objects_written", "%llu", LD(s->objects_written));
    w(ctx, "extstore_objects_used", "%llu", LD(s->objects_used));
    w(ctx, "extstore_bytes_evicted", "%llu", LD(s->bytes_evicted));
    w(ctx, "extstore_bytes_written", "%llu", LD(s->bytes_written));
    w(ctx, "extstore_bytes_read", "%llu", LD(s->bytes_read));
    w(ctx, "extstore_bytes_used", "%llu", LD(s->bytes_used));
    w(ctx, "extstore_bytes_fragmented", "%llu", LD(s->bytes_fragmented));
    w(ctx, "extstore_limit_maxbytes", "%llu", (unsigned long long)s->limit_bytes);
    w(ctx, "extstore_io_queue", "%llu", (unsigned long long)atomic_load_explicit(&g_ext_io_counts.queue, memory_order_relaxed));
}

void storage_ext_stats_extstore(stat_writer w, void *ctx)
{
    if (!g_ext) return;
    struct ext_page_info pi;
    char name[64];
    for (uint32_t p = 0; ext_page_info(g_ext, p, &pi); p++) {
        snprintf(name, sizeof name, "%u:version", p); w(ctx, name, "%u", pi.version);
        snprintf(name, sizeof name, "%u:bytes", p); w(ctx, name, "%llu", (unsigned long long)pi.live_bytes);
        snprintf(name, sizeof name, "%u:bucket", p); w(ctx, name, "%d", pi.bucket < 0 ? 0 : pi.bucket);
        snprintf(name, sizeof name, "%u:free_bucket", p); w(ctx, name, "%d", pi.free ? 1 : 0);
    }
}

void storage_ext_stats_settings(stat_writer w, void *ctx)
{
    if (!g_ext) return;
    w(ctx, "ext_item_size", "%u", KNOB(item_size));
    w(ctx, "ext_item_age", "%u", KNOB(item_age));
    w(ctx, "ext_low_ttl", "%u", KNOB(low_ttl));
    w(ctx, "ext_recache_rate", "%u", KNOB(recache_rate));
    w(ctx, "ext_wbuf_size", "%llu", (unsigned long long)g_x.wbuf_size);
    w(ctx, "ext_compact_under", "%u", KNOB(compact_under));
    w(ctx, "ext_drop_under", "%u", KNOB(drop_under));
    w(ctx, "ext_max_sleep", "%u", KNOB(max_sleep));
    w(ctx, "ext_max_frag", "%.2f", ext_max_frag_now(&g_x));
    w(ctx, "ext_drop_unread", "%s", KNOB(drop_unread) ? "yes" : "no");
}

void storage_ext_stats_reset(void)
{
    atomic_store(&g_ext_io_counts.get, 0);
    atomic_store(&g_ext_io_counts.aborted, 0);
    atomic_store(&g_ext_io_counts.oom, 0);
    atomic_store(&g_ext_io_counts.streams_cut, 0);
    atomic_store(&recache_n, 0);
    atomic_store(&miss_n, 0);
    atomic_store(&badcrc_n, 0);
    ext_compact_counts_reset();
}
