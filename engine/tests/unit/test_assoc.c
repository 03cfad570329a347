/* test_assoc.c - the hash table: insert/find/delete, online expansion (also
 * stopped half way, with reads, writes and deletes against the half-moved
 * table), the 1.5x growth rule and the stats it reports. */
#include "test_helpers.h"

#include <sched.h>

bool assoc_test_expansion_begin(void);
bool assoc_test_expansion_migrate(uint32_t n);
void assoc_test_expansion_finish(void);

static void key_of(char *buf, int i) { sprintf(buf, "key:%07d", i); }

static void val_of(char *buf, int i, int ver) { sprintf(buf, "v%d-%d", i, ver); }

static int check_all(int n, int ver, int deleted_mod)
{
    int bad = 0;
    char k[32], v[32];
    for (int i = 0; i < n; i++) {
        key_of(k, i);
        val_of(v, i, ver);
        const char *got = get_str(k, NULL);
        bool should = deleted_mod == 0 || i % deleted_mod != 0;
        if (should ? !streq(got, v) : got != NULL) bad++;
    }
    return bad;
}

static void test_insert_find_delete(void)
{
    char k[32], v[32];
    for (int i = 0; i < 300; i++) { key_of(k, i); val_of(v, i, 0); CHECK(put(k, v) == STORE_STORED); }
    CHECK_EQ_U64(check_all(300, 0, 0), 0);
    for (int i = 0; i < 300; i += 3) { key_of(k, i); CHECK(storage_delete(T, k, strlen(k), NULL) == STORE_STORED); }
    CHECK_EQ_U64(check_all(300, 0, 3), 0);
    CHECK(get_str("key:9999999", NULL) == NULL);
    CHECK_EQ_U64(assoc_item_count(), 200);
    CHECK_EQ_U64(gstat("curr_items"), 200);
}

static void test_grows_past_one_and_a_half(void)
{
    /* 256 buckets: 384 items are fine, the 385th asks for a bigger table */
    CHECK_EQ_U64(gstat("hash_power_level"), 8);
    char k[32], v[32];
    for (int i = 0; i < 5000; i++) { key_of(k, i); val_of(v, i, 1); put(k, v); }
    assoc_wait_expansion();
    CHECK(gstat("hash_power_level") >= 12);   /* 5000 items need >= 3334 buckets */
    CHECK_EQ_U64(gstat("hash_is_expanding"), 0);
    CHECK(gstat("hash_expansions") >= 4);
    CHECK_EQ_U64(gstat("hash_bytes"), (4ull << gstat("hash_power_level")));
    CHECK_EQ_U64(check_all(5000, 1, 0), 0);
}

static void test_half_moved_table(void)
{
    char k[32], v[32];
    int n = 20000;
    for (int i = 0; i < n; i++) { key_of(k, i); val_of(v, i, 2); put(k, v); }
    assoc_wait_expansion();
    unsigned p0 = assoc_hashpower();
    CHECK(assoc_test_expansion_begin());
    CHECK_EQ_U64(gstat("hash_is_expanding"), 1);
    CHECK_EQ_U64(gstat("hash_power_level"), p0 + 1);
    uint32_t old_n = 1u << p0;
    CHECK(!assoc_test_expansion_migrate(old_n / 3));
    /* reads see every item, whether its bucket moved or not */
    CHECK_EQ_U64(check_all(n, 2, 0), 0);
    /* writes and deletes land in the right table */
    for (int i = 0; i < n; i++) { key_of(k, i); val_of(v, i, 3); put(k, v); }
    for (int i = 0; i < n; i += 7) { key_of(k, i); storage_delete(T, k, strlen(k), NULL); }
    CHECK_EQ_U64(check_all(n, 3, 7), 0);
    CHECK(!assoc_test_expansion_migrate(old_n / 3));
    CHECK_EQ_U64(check_all(n, 3, 7), 0);
    CHECK(assoc_test_expansion_migrate(old_n));
    assoc_test_expansion_finish();
    CHECK_EQ_U64(gstat("hash_is_expanding"), 0);
    CHECK_EQ_U64(check_all(n, 3, 7), 0);
    CHECK_EQ_U64(assoc_item_count(), n - (n + 6) / 7);
}

static void test_hash_spread(void)
{
    /* the low bits pick the bucket: similar keys must not collide en masse */
    int buckets[256] = {0};
    char k[32];
    for (int i = 0; i < 25600; i++) { key_of(k, i); buckets[hash_key(k, strlen(k)) & 255]++; }
    int mx = 0;
    for (int i = 0; i < 256; i++) if (buckets[i] > mx) mx = buckets[i];
    CHECK(mx < 200);   /* mean 100 */
}

#include <pthread.h>

static _Atomic bool readers_stop;
static _Atomic long reader_misses, reader_lookups;
static int reader_n;

static void *reader_main(void *arg)
{
    (void)arg;
    storage_thread *t = storage_thread_register();
    char k[32], buf[64];
    while (!atomic_load(&readers_stop)) {
        for (int i = 0; i < reader_n; i++) {
            key_of(k, i);
            struct item_view v;
            if (!storage_get(t, k, strlen(k), NULL, buf, sizeof buf, &v)) atomic_fetch_add(&reader_misses, 1);
            atomic_fetch_add_explicit(&reader_lookups, 1, memory_order_relaxed);
        }
    }
    return NULL;
}

/* bench found GETs that missed present keys while the table grew: readers
 * hammer every key while the table doubles five times; no miss allowed. */
static void test_no_false_miss_while_expanding(void)
{
    teardown();
    setup(256, 8, false);
    reader_n = 12000;
    char k[32], v[32];
    for (int i = 0; i < reader_n; i++) { key_of(k, i); val_of(v, i, 0); put(k, v); }
    CHECK_EQ_U64(assoc_hashpower(), 8);   /* no expander thread: nothing moved yet */
    pthread_t th[2];
    atomic_store(&readers_stop, false);
    for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, reader_main, NULL);
    while (atomic_load(&reader_lookups) < reader_n) sched_yield();
    atomic_store(&g_test_migrate_stall, 1);   /* the mover pauses inside bucket moves */
    assoc_wait_expansion();
    atomic_store(&g_test_migrate_stall, 0);
    long at_end = atomic_load(&reader_lookups);
    while (atomic_load(&reader_lookups) < at_end + reader_n) sched_yield();
    atomic_store(&readers_stop, true);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    CHECK(assoc_hashpower() >= 13);
    CHECK_EQ_U64(atomic_load(&reader_misses), 0);
    printf("  %ld lookups during expansion, %ld misses\n", atomic_load(&reader_lookups), atomic_load(&reader_misses));
}

int main(void)
{
    setup(256, 8, false);
    TEST(test_insert_find_delete);
    TEST(test_grows_past_one_and_a_half);
    TEST(test_half_moved_table);
    TEST(test_hash_spread);
    TEST(test_no_false_miss_while_expanding);
    teardown();
    return harness_finish();
}
