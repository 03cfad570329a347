/* test_slabs.c - size classes from -n/-f and from slab_sizes, invalid
 * configurations, the -m limit under pressure, and page reassignment to a
 * starving class. */
#include "test_helpers.h"

static struct storage_config base_cfg(size_t mem_mb)
{
    struct storage_config c = {0};
    c.mem_limit = mem_mb << 20;
    c.item_size_max = 1024 * 1024;
    c.growth_factor = 1.25;
    c.chunk_size_min = 48;
    c.hashpower_init = 12;
    c.use_cas = true;
    return c;
}

static void test_default_ladder(void)
{
    struct storage_config c = base_cfg(64);
    setup_cfg(&c, false);
    CHECK_EQ_U64(slabs_chunk_size(1), 88);    /* 24 + 8 + 4 + 2 + 48, rounded to 8 */
    CHECK_EQ_U64(slabs_chunk_size(2), 112);
    CHECK_EQ_U64(slabs_chunk_size(3), 144);
    CHECK_EQ_U64(slabs_chunk_size(4), 184);
    unsigned n = slabs_class_count();
    CHECK_EQ_U64(slabs_chunk_size((int)n), 1024 * 1024);
    for (unsigned i = 2; i <= n; i++) CHECK(slabs_chunk_size((int)i) > slabs_chunk_size((int)i - 1));
    /* 9-byte key + 100-byte value with CAS: 24 + 8 + 9 + 100 + 2 = 143 -> the 144 class */
    CHECK_EQ_U64(slabs_clsid(143), 3);
    CHECK_EQ_U64(slabs_clsid(145), 4);
    CHECK_EQ_U64(slabs_clsid(1024 * 1024 + 1), 0);
    CHECK_EQ_U64(stat_of(storage_stats_settings, "item_header_bytes"), 24);
    teardown();
}

static void test_factor_and_min(void)
{
    struct storage_config c = base_cfg(64);
    c.growth_factor = 2.0;
    c.chunk_size_min = 100;
    setup_cfg(&c, false);
    CHECK_EQ_U64(slabs_chunk_size(1), 144);   /* 38 + 100 = 138 -> 144 */
    CHECK_EQ_U64(slabs_chunk_size(2), 288);
    CHECK_EQ_U64(slabs_chunk_size(3), 576);
    teardown();
}

static void test_explicit_sizes(void)
{
    static const uint32_t sizes[] = {100, 200, 4000};
    struct storage_config c = base_cfg(64);
    c.slab_sizes = sizes;
    c.slab_sizes_count = 3;
    setup_cfg(&c, false);
    CHECK_EQ_U64(slabs_class_count(), 4);
    CHECK_EQ_U64(slabs_chunk_size(1), 104);
    CHECK_EQ_U64(slabs_chunk_size(2), 200);
    CHECK_EQ_U64(slabs_chunk_size(3), 4000);
    CHECK_EQ_U64(slabs_chunk_size(4), 1024 * 1024);
    teardown();
}

static void test_invalid_configs(void)
{
    static const uint32_t desc[] = {300, 200};
    static const uint32_t tiny[] = {16};
    struct storage_config c = base_cfg(64);
    c.slab_sizes = desc;
    c.slab_sizes_count = 2;
    CHECK(storage_init(&c) != 0);
    c.slab_sizes = tiny;
    c.slab_sizes_count = 1;
    CHECK(storage_init(&c) != 0);
    c = base_cfg(1);
    c.item_size_max = 4 << 20;
    CHECK(storage_init(&c) != 0);
    c = base_cfg(64);
    c.hashpower_init = 40;
    CHECK(storage_init(&c) != 0);
}

static int fill(const char *prefix, int count, size_t vlen, int *stored)
{
    char k[64];
    char *v = malloc(vlen + 1);
    memset(v, 'x', vlen);
    v[vlen] = 0;
    int fails = 0;
    for (int i = 0; i < count; i++) {
        sprintf(k, "%s%d", prefix, i);
        if (put(k, v) == STORE_STORED) (*stored)++; else fails++;
    }
    free(v);
    return fails;
}

static void test_memory_limit_holds(void)
{
    struct storage_config c = base_cfg(4);
    setup_cfg(&c, false);
    int stored = 0;
    /* 40000 x ~150 bytes = 6 MB into a 4 MB cache: must evict, never exceed */
    CHECK_EQ_U64(fill("lim", 40000, 100, &stored), 0);
    CHECK_EQ_U64(stored, 40000);
    CHECK(slabs_pages_used() <= slabs_pages_max());
    CHECK(stat_of(storage_stats_slabs, "total_malloced") <= 4 << 20);
    CHECK(gstat("evictions") > 0);
    long long items = gstat("curr_items");
    CHECK(items > 20000 && items < 40000);   /* 4 pages x 7281 chunks of 144 */
    /* the newest keys survive, the oldest went first */
    CHECK(get_str("lim39999", NULL) != NULL);
    CHECK(get_str("lim0", NULL) == NULL);
    teardown();
}

static void test_page_moves_to_starving_class(void)
{
    struct storage_config c = base_cfg(4);
    setup_cfg(&c, false);
    int stored = 0;
    fill("small", 40000, 100, &stored);           /* all 4 pages go to the 144-byte class */
    int small_cls = slabs_clsid(143);
    CHECK_EQ_U64(slabs_class_pages(small_cls), 4);
    int big_cls = slabs_clsid(24 + 8 + 4 + 10 + 3000 + 2);
    CHECK_EQ_U64(slabs_class_pages(big_cls), 0);
    int big_stored = 0;
    /* Nothing of its own to evict, every page in another class: the store
     * takes a page from the small class within the request, it does not
     * wait for the background mover (which is not even running here). */
    int fails = fill("big", 10, 3000, &big_stored);
    CHECK_EQ_U64(fails, 0);
    CHECK_EQ_U64(big_stored, 10);
    CHECK_EQ_U64(slabs_class_pages(small_cls), 3);
    CHECK_EQ_U64(slabs_class_pages(big_cls), 1);
    big_stored = 0;
    CHECK_EQ_U64(fill("big2_", 300, 3000, &big_stored), 0);   /* evicts within its own page */
    CHECK(slabs_pages_used() <= slabs_pages_max());
    CHECK(gstat("slabs_moved") == 1);
    CHECK(get_str("big2_299", NULL) != NULL);
    /* items that lived in the moved page are gone, the rest still verify */
    int ok = 0, missing = 0;
    char k[32];
    for (int i = 0; i < 40000; i++) {
        sprintf(k, "small%d", i);
        const char *g = get_str(k, NULL);
        if (g) { if (strlen(g) == 100) ok++; } else missing++;
    }
    CHECK(ok > 10000);
    char nm[32];
    sprintf(nm, "items:%d:number", small_cls);
    CHECK_EQ_U64(ok, stat_of(storage_stats_items, nm));
    CHECK(missing > 0);
    fprintf(stderr, "first big fill stored %d, curr_items %lld\n", big_stored, gstat("curr_items"));
    teardown();
}

/* A class that only ever evicts within its one page while another class
 * sits on old items: the mover rebalances by age, not only on starvation. */
static void test_page_moves_by_age(void)
{
    struct storage_config c = base_cfg(4);
    setup_cfg(&c, false);
    int stored = 0;
    fill("old", 40000, 100, &stored);
    int small_cls = slabs_clsid(143);
    storage_test_advance_clock(100);
    int big_cls = slabs_clsid(24 + 8 + 4 + 10 + 3000 + 2);
    int big_stored = 0;
    fill("b", 5, 3000, &big_stored);                    /* first page: taken on demand */
    CHECK_EQ_U64(slabs_class_pages(big_cls), 1);
    fill("young", 2000, 3000, &big_stored);             /* evicts within its own page */
    char nm[32];
    sprintf(nm, "items:%d:evicted", big_cls);
    CHECK(stat_of(storage_stats_items, nm) > 1000);
    storage_test_advance_clock(1);
    CHECK(slabs_rebalance_once());                      /* by age: old items give way */
    CHECK_EQ_U64(slabs_class_pages(big_cls), 2);
    CHECK_EQ_U64(slabs_class_pages(small_cls), 2);
    /* nothing more to gain once the ages are close: no churn */
    storage_test_advance_clock(1);
    CHECK(!slabs_rebalance_once());                     /* no evictions since the last look */
    CHECK(slabs_pages_used() <= slabs_pages_max());
    teardown();
}

int main(void)
{
    TEST(test_default_ladder);
    TEST(test_factor_and_min);
    TEST(test_explicit_sizes);
    TEST(test_invalid_configs);
    TEST(test_memory_limit_holds);
    TEST(test_page_moves_to_starving_class);
    TEST(test_page_moves_by_age);
    return harness_finish();
}
