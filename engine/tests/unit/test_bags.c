/* test_bags.c - the bag LRU: eviction follows insertion order, touched items
 * get a second chance, the cleaner drops expired and deleted items, flush_all
 * cuts the bags, small bags merge. */
#include "test_helpers.h"

#include <stdint.h>

static char val100[101];

/* bags of the class 100-byte values with short keys land in */
static long long class_bags(void)
{
    char nm[32];
    sprintf(nm, "items:%d:bags", slabs_clsid(ITEM_HDR + 8 + 5 + 100));   /* 19-byte header, CAS, key, value */
    return stat_of(storage_stats_items, nm);
}

static void put100(const char *k) { CHECK(put(k, val100) == STORE_STORED); }

static void test_eviction_order_and_touch(void)
{
    setup(2, 10, false);                 /* 2 MB of 136-byte chunks: about 15400 items */
    bags_set_target_min(512);
    char k[32];
    int n = 12000;
    for (int i = 0; i < n; i++) {
        sprintf(k, "o%d", i);
        put100(k);
        if (i % 1000 == 999) bags_clean_once(T);   /* the cleaner rotates bags as they fill */
    }
    bags_clean_once(T);
    CHECK(class_bags() > 3);
    /* touch a few old items: they must survive the eviction of their neighbours */
    const char *touched[] = {"o10", "o500", "o1500"};
    for (int i = 0; i < 3; i++) CHECK(get_str(touched[i], NULL) != NULL);
    for (int i = n; i < n + 9000; i++) { sprintf(k, "o%d", i); put100(k); }
    CHECK(gstat("evictions") > 3000);
    for (int i = 0; i < 3; i++) CHECK(get_str(touched[i], NULL) != NULL);
    CHECK(get_str("o11", NULL) == NULL);
    CHECK(get_str("o501", NULL) == NULL);
    /* evicted from the old end: a contiguous run of the first keys is gone, the newest stay */
    int first_present = -1;
    for (int i = 0; i < n + 9000; i++) {
        sprintf(k, "o%d", i);
        if (i != 10 && i != 500 && i != 1500 && get_str(k, NULL)) { first_present = i; break; }
    }
    CHECK(first_present >= 3000);
    int missing_after = 0;
    for (int i = first_present; i < n + 9000; i++) { sprintf(k, "o%d", i); if (!get_str(k, NULL)) missing_after++; }
    CHECK(missing_after < 600);   /* only the batch granularity of bags/eviction */
    CHECK(gstat("lru_items_moved") >= 3);
    teardown();
}

/* Everything in memory was touched: second chances run out and stores still
 * succeed (CLOCK must make progress). */
static void test_all_touched_still_evicts(void)
{
    setup(1, 10, false);
    bags_set_target_min(64);              /* ~70 bags: more than one eviction call searches */
    char k[32];
    for (int i = 0; i < 7000; i++) {
        sprintf(k, "h%d", i);
        put100(k);
        if (i % 100 == 99) bags_clean_once(T);
    }
    bags_clean_once(T);
    for (int i = 0; i < 7000; i++) { sprintf(k, "h%d", i); get_str(k, NULL); }
    int fails = 0;
    for (int i = 0; i < 5000; i++) {
        sprintf(k, "new%d", i);
        if (put(k, val100) != STORE_STORED) fails++;
        if (i % 500 == 499) { for (int j = 0; j < 7000; j += 3) { sprintf(k, "h%d", j); get_str(k, NULL); } }
    }
    CHECK_EQ_U64(fails, 0);
    CHECK(gstat("evictions") >= 4000);
    teardown();
}

static void test_cleaner_expires_and_reclaims(void)
{
    setup(8, 10, false);
    bags_set_target_min(64);
    char k[32];
    for (int i = 0; i < 1000; i++) {
        sprintf(k, "e%d", i);
        CHECK(put_full(k, "v", 0, i % 2 ? storage_exptime(5) : 0, MODE_SET, NULL, NULL) == STORE_STORED);
        if (i % 100 == 99) bags_clean_once(T);
    }
    for (int i = 0; i < 1000; i += 4) { sprintf(k, "e%d", i); storage_delete(T, k, strlen(k), NULL); }
    CHECK_EQ_U64(gstat("curr_items"), 750);
    storage_test_advance_clock(10);
    /* a read that finds one takes it out, as memcached's do_item_get does;
     * the cleaner takes the others out, and every one out of memory */
    CHECK(get_str("e1", NULL) == NULL);
    CHECK_EQ_U64(gstat("curr_items"), 749);
    long long used_before = stat_of(storage_stats_slabs, "1:used_chunks");
    /* the bags workers append to are cleaned once they age out (bags.c) */
    bags_clean_once(T);
    storage_test_advance_clock(10);
    bags_clean_once(T);
    bags_clean_once(T);
    CHECK_EQ_U64(gstat("curr_items"), 250);
    /* memcached counts the expired ones the LRU reclaims: not the 250
     * deleted, nor e1 (unlinked when deleted, or read) */
    CHECK_EQ_U64(gstat("expired_unfetched"), 499);
    CHECK_EQ_U64(gstat("lru_items_expired"), 499);
    CHECK_EQ_U64(gstat("reclaimed"), 499);
    long long used_after = stat_of(storage_stats_slabs, "1:used_chunks");
    CHECK_EQ_U64(used_before - used_after, 750);
    CHECK(streq(get_str("e2", NULL), "v"));
    teardown();
}

/* No deletes at all: expired items are still found by the periodic sweep. */
static void test_periodic_sweep_finds_expired(void)
{
    setup(8, 10, false);
    bags_set_target_min(64);
    char k[32];
    for (int i = 0; i < 600; i++) {
        sprintf(k, "p%d", i);
        CHECK(put_full(k, "v", 0, i < 300 ? storage_exptime(30) : 0, MODE_SET, NULL, NULL) == STORE_STORED);
        if (i % 100 == 99) bags_clean_once(T);
    }
    storage_test_advance_clock(40);
    bags_clean_once(T);
    CHECK_EQ_U64(gstat("curr_items"), 600);   /* not yet time for a sweep: nothing walked */
    storage_test_advance_clock(30);
    for (int i = 0; i < 4; i++) bags_clean_once(T);
    CHECK_EQ_U64(gstat("curr_items"), 300);
    CHECK_EQ_U64(gstat("lru_items_expired"), 300);
    teardown();
}

static void test_flush_cuts_bags(void)
{
    setup(8, 10, false);
    bags_set_target_min(64);
    char k[32];
    for (int i = 0; i < 500; i++) { sprintf(k, "f%d", i); put100(k); }
    long long opened = gstat("lru_bags_opened");
    storage_flush(0);
    for (int i = 0; i < 10; i++) { sprintf(k, "after%d", i); put100(k); }
    CHECK(get_str("f1", NULL) == NULL);
    bags_clean_once(T);
    CHECK(gstat("lru_bags_opened") > opened);
    CHECK_EQ_U64(gstat("curr_items"), 10);
    CHECK(get_str("after3", NULL) != NULL);
    teardown();
}

static void test_small_bags_merge(void)
{
    setup(8, 10, false);
    bags_set_target_min(32);
    char k[32];
    for (int i = 0; i < 640; i++) {
        sprintf(k, "m%d", i);
        put100(k);
        if (i % 32 == 31) bags_clean_once(T);
    }
    long long bags_before = class_bags();
    CHECK(bags_before >= 15);
    for (int i = 0; i < 640; i++) if (i % 8) { sprintf(k, "m%d", i); storage_delete(T, k, strlen(k), NULL); }
    bags_clean_once(T);
    bags_clean_once(T);
    CHECK(gstat("lru_bags_merged") > 0);
    CHECK(class_bags() < bags_before / 2);
    if (class_bags() >= bags_before / 2)
        fprintf(stderr, "bags before %lld after %lld merged %lld\n", bags_before, class_bags(), gstat("lru_bags_merged"));
    for (int i = 0; i < 640; i += 8) { sprintf(k, "m%d", i); CHECK(get_str(k, NULL) != NULL); }
    CHECK_EQ_U64(gstat("curr_items"), 80);
    teardown();
}

/* The server batches pipelined GETs in one read section and may store in
 * the middle; an eviction's grace period must not wait for its own thread. */
static void test_read_batch_with_evictions(void)
{
    setup(2, 10, false);
    char k[32], buf[128];
    epoch_enter(T);
    for (int i = 0; i < 30000; i++) {
        sprintf(k, "b%d", i);
        put100(k);
        struct storage_key sk[2] = { { .key = k, .nkey = (uint32_t)strlen(k) }, { .key = k, .nkey = (uint32_t)strlen(k) } };
        storage_prefetch_keys(T, sk, 2);
        struct item_view v;
        CHECK(storage_get_hashed(T, k, strlen(k), sk[0].hv, NULL, buf, sizeof buf, &v));
        CHECK(v.nbytes == 100);
    }
    epoch_exit(T);
    CHECK(gstat("evictions") > 10000);
    CHECK_EQ_U64(T->section_depth, 0);
    teardown();
}

#include <pthread.h>
#include <unistd.h>

static void *batch_writer(void *arg)
{
    int id = (int)(intptr_t)arg;
    storage_thread *t = storage_thread_register();
    char k[32], buf[128];
    epoch_enter(t);
    for (int i = 0; i < 20000; i++) {
        sprintf(k, "w%d-%d", id, i);
        enum store_result err;
        item *it = item_alloc(t, k, strlen(k), 0, 0, 100, &err);
        if (!it) continue;
        memcpy(item_value(it), val100, 100);
        storage_store(t, it, MODE_SET, NULL, NULL);
        struct item_view v;
        storage_get(t, k, strlen(k), NULL, buf, sizeof buf, &v);
        if ((i & 1023) == 0) { epoch_exit(t); epoch_enter(t); }
    }
    epoch_exit(t);
    return NULL;
}

/* Two threads storing inside read batches while memory is full: each
 * eviction waits for a grace period, which must not wait on the other
 * thread's open batch (or on a class lock it is queued for). A hang here is
 * ended by alarm() and reported as a failure by unit.mk. */
static void test_batches_evicting_concurrently(void)
{
    setup(2, 10, true);
    alarm(120);
    pthread_t th[2];
    for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, batch_writer, (void *)(intptr_t)i);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    alarm(0);
    CHECK(gstat("evictions") > 10000);
    teardown();
}

/* keep_every: among the items deleted, every keep_every-th stays, with a
 * value too short to be a candidate (0: none stay); and keep_at, keep_at+1
 * stay as they are (-1: none) */
static void fill_behind_dead(int n, int deleted, int keep_every, int keep_at)
{
    char k[32];
    for (int i = 0; i < n; i++) {
        sprintf(k, "c%d", i);
        if (i < deleted && keep_every && i % keep_every == 0) CHECK(put(k, val100 + 5) == STORE_STORED);
        else put100(k);
        if (i % 1000 == 999) bags_clean_once(T);
    }
    for (int i = 0; i < deleted; i++) {
        if ((keep_every && i % keep_every == 0) || (keep_at >= 0 && (i == keep_at || i == keep_at + 1))) continue;
        sprintf(k, "c%d", i);
        storage_delete(T, k, strlen(k), NULL);
    }
}

static void check_candidates_from(const struct ext_candidate *out, unsigned got, int first)
{
    char k[32];
    for (unsigned i = 0; i < got; i++) {
        sprintf(k, "c%u", first + i);
        CHECK(out[i].nkey == strlen(k) && memcmp(out[i].key, k, out[i].nkey) == 0);
    }
}

/* extstore's flusher looks for the coldest live values to write. The values
 * it has just written leave dead items at the front of the oldest bags until
 * the cleaner takes them out; a look that counted those as looked-at found
 * nothing behind 4,096 of them, and stores evicted the unwritten values
 * behind (bags_ext_candidates). Deleted items are dead the same way.
 * The look lets go of the class lock every WALK_HOLD_MAX items, so that no
 * hold looks at the 20,000 dead items in one go (lru_flusher_hold_max),
 * and finds what one long hold found. */
static void test_flusher_candidates_behind_dead_items(void)
{
    setup(8, 10, false);
    int n = 25000, deleted = 20000;   /* more dead than one cleaner pass visits (CLEAN_BUDGET) */
    int cls = slabs_clsid(ITEM_HDR + 8 + 5 + 100);
    fill_behind_dead(n, deleted, 0, -1);
    CHECK_EQ_U64(gstat("curr_items"), n - deleted);
    struct ext_candidate out[32];
    unsigned got = bags_ext_candidates(cls, out, 32, 100, 0, true);
    CHECK_EQ_U64(got, 32);
    check_candidates_from(out, got, deleted);   /* the coldest live ones, in order */
    CHECK(bags_flusher_hold_max() > 0);
    CHECK(bags_flusher_hold_max() <= 256);   /* bags.c's WALK_HOLD_MAX */
    CHECK(gstat("lru_flusher_hold_max") == (long long)bags_flusher_hold_max());
    teardown();
}

/* A sweep visits each closed item once, in slices of the class lock (the
 * cleaner's CLEAN_SLICE, 256 items: what a worker sharing the core may wait
 * behind), and ends. Six closed bags of 4,000 and a pass budget of 10,000:
 * the old sweep stopped in the last closed bag, found the bag after it open
 * to appends, and started over at the oldest, pass after pass (25 ms of CPU
 * a second on an idle server after an overload), while the rest of each bag
 * it stopped in was never swept. */
static void test_sweep_visits_each_item_once_in_slices(void)
{
    setup(8, 10, false);
    bags_set_target_min(4000);
    char k[32], nm[48];
    int n = 24000;
    for (int i = 0; i < n; i++) {
        sprintf(k, "s%d", i);
        put100(k);
        if (i % 4000 == 3999) bags_clean_once(T);   /* a bag closed every 4,000 stores */
    }
    /* replaced: dead items in every closed bag, enough to start a sweep
     * (more than live/8 + 64), too few to merge any two bags */
    for (int i = 0; i < n; i += 6) { sprintf(k, "s%d", i); put100(k); }
    sprintf(nm, "items:%d:dead_waiting", slabs_clsid(ITEM_HDR + 8 + 6 + 100));
    CHECK_EQ_U64(stat_of(storage_stats_items, nm), n / 6);
    long long visited0 = gstat("lru_cleaner_items_visited"), sweeps0 = gstat("lru_cleaner_sweeps");
    for (int i = 0; i < 10; i++) bags_clean_once(T);
    CHECK_EQ_U64(gstat("lru_cleaner_sweeps") - sweeps0, 1);
    CHECK_EQ_U64(stat_of(storage_stats_items, nm), 0);
    long long visited = gstat("lru_cleaner_items_visited") - visited0;
    CHECK(visited >= n && visited <= n + 256);
    if (visited > n + 256) fprintf(stderr, "a sweep over %d items visited %lld\n", n, visited);
    CHECK(gstat("lru_cleaner_slice_max") <= 256);
    CHECK_EQ_U64(gstat("curr_items"), n);
    for (int i = 0; i < n; i += 997) { sprintf(k, "s%d", i); CHECK(streq(get_str(k, NULL), val100)); }
    teardown();
}

/* A merge retags the smaller bag's items, so a big old bag and a small newer
 * one merge within a slice: the newer bag's items join the old one behind
 * its last item and stay readable. */
static void test_small_newer_bag_merges_into_a_big_one(void)
{
    setup(8, 10, false);
    bags_set_target_min(2000);
    char k[32];
    long long merged0 = gstat("lru_bags_merged");
    for (int i = 0; i < 1000; i++) { sprintf(k, "big%d", i); put100(k); }
    storage_test_advance_clock(6);
    bags_clean_once(T);                   /* idle past BAG_MAX_AGE: closed */
    for (int i = 0; i < 50; i++) { sprintf(k, "small%d", i); put100(k); }
    storage_test_advance_clock(6);
    bags_clean_once(T);
    put100("last");
    storage_test_advance_clock(6);
    bags_clean_once(T);                   /* the small bag is no longer an append target: merged */
    CHECK_EQ_U64(gstat("lru_bags_merged") - merged0, 1);
    CHECK(gstat("lru_cleaner_slice_max") <= 256);
    for (int i = 0; i < 1000; i += 37) { sprintf(k, "big%d", i); CHECK(streq(get_str(k, NULL), val100)); }
    for (int i = 0; i < 50; i++) { sprintf(k, "small%d", i); CHECK(streq(get_str(k, NULL), val100)); }
    CHECK_EQ_U64(gstat("curr_items"), 1051);
    teardown();
}

/* Two neighbouring bags of more than a slice (CLEAN_SLICE, 256) that fit
 * one target still merge, in a slice of their own: refusing them left a
 * class written slowly a new bag every BAG_MAX_AGE for good, and every hold
 * of its lock walks the chain. Thirty idle-closed bags of 300 items with a
 * target of 2,000 stayed 30 bags; they fit in about five. */
static void test_bags_bigger_than_a_slice_still_merge(void)
{
    setup(8, 10, false);
    bags_set_target_min(2000);
    char k[32];
    long long merged0 = gstat("lru_bags_merged");
    for (int b = 0; b < 30; b++) {
        for (int i = 0; i < 300; i++) { sprintf(k, "g%d_%d", b, i); put100(k); }
        storage_test_advance_clock(6);
        bags_clean_once(T);               /* idle past BAG_MAX_AGE: closed */
    }
    for (int i = 0; i < 5; i++) bags_clean_once(T);
    CHECK(gstat("lru_bags_merged") - merged0 >= 20);
    CHECK(class_bags() <= 10);
    if (class_bags() > 10) fprintf(stderr, "30 bags of 300 left %lld bags\n", class_bags());
    /* one merge at a time past the slice: its smaller side, at most half the target */
    CHECK(gstat("lru_cleaner_slice_max") <= 256 + 1000);
    CHECK_EQ_U64(gstat("curr_items"), 9000);
    for (int b = 0; b < 30; b += 7)
        for (int i = 0; i < 300; i += 29) { sprintf(k, "g%d_%d", b, i); CHECK(streq(get_str(k, NULL), val100)); }
    teardown();
}

#ifdef CACHET_TEST_HOOKS
/* Between two holds (the walk paused a few items past c1001, in the bag of
 * c1000-c1999) the cleaner takes out the dead items the walk stands among
 * (its item too) and merges the bags they thinned (short values, not
 * candidates, keep each bag alive) into the walk's bag and that one into
 * the next, and values ahead of the walk are deleted: the walk goes on from where it was, skipping nothing it has not
 * looked at and looking at nothing twice. */
static int between_holds_calls;
static void clean_between_holds(int clsid)
{
    (void)clsid;
    if (between_holds_calls++ != 3) return;
    char k[32];
    for (int i = 20000; i < 20010; i++) { sprintf(k, "c%d", i); storage_delete(T, k, strlen(k), NULL); }
    for (int i = 0; i < 4; i++) bags_clean_once(T);
}

static void test_flusher_walk_resumes_across_cleaning(void)
{
    setup(8, 10, false);
    int n = 25000, deleted = 20000;
    int cls = slabs_clsid(ITEM_HDR + 8 + 5 + 100);
    CHECK(slabs_clsid(ITEM_HDR + 8 + 5 + 95) == cls);
    fill_behind_dead(n, deleted, 50, 1001);
    long long bags_before = class_bags();
    between_holds_calls = 0;
    g_test_flusher_between_holds = clean_between_holds;
    struct ext_candidate out[32];
    unsigned got = bags_ext_candidates(cls, out, 32, 100, 0, true);
    g_test_flusher_between_holds = NULL;
    CHECK(between_holds_calls > 3);
    CHECK(class_bags() < bags_before);   /* bags were dropped or merged under the paused walk */
    CHECK_EQ_U64(got, 32);
    /* two it took before the pause (a walk that went back over its bag
     * would take them twice), then those behind the deleted ones */
    check_candidates_from(out, 2, 1001);
    check_candidates_from(out + 2, got - 2, 20010);
    teardown();
}
#endif

int main(void)
{
    memset(val100, 'v', 100);
    TEST(test_eviction_order_and_touch);
    TEST(test_all_touched_still_evicts);
    TEST(test_cleaner_expires_and_reclaims);
    TEST(test_periodic_sweep_finds_expired);
    TEST(test_flush_cuts_bags);
    TEST(test_small_bags_merge);
    TEST(test_read_batch_with_evictions);
    TEST(test_batches_evicting_concurrently);
    TEST(test_flusher_candidates_behind_dead_items);
    TEST(test_sweep_visits_each_item_once_in_slices);
    TEST(test_small_newer_bag_merges_into_a_big_one);
    TEST(test_bags_bigger_than_a_slice_still_merge);
#ifdef CACHET_TEST_HOOKS
    TEST(test_flusher_walk_resumes_across_cleaning);
#endif
    return harness_finish();
}
