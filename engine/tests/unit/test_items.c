/* test_items.c - memcached item semantics: store modes, CAS, append/prepend,
 * incr/decr, touch, TTL rules, flush_all, the meta win/stale rules. */
#include "test_helpers.h"

static void test_set_get_delete(void)
{
    CHECK(put("alpha", "one") == STORE_STORED);
    CHECK(streq(get_str("alpha", NULL), "one"));
    CHECK(put("alpha", "two") == STORE_STORED);
    CHECK(streq(get_str("alpha", NULL), "two"));
    CHECK(storage_delete(T, "alpha", 5, NULL) == STORE_STORED);
    CHECK(get_str("alpha", NULL) == NULL);
    CHECK(storage_delete(T, "alpha", 5, NULL) == STORE_NOT_FOUND);
    CHECK(put("", "x") != STORE_STORED);
}

static void test_add_replace(void)
{
    CHECK(put_full("ar", "a", 0, 0, MODE_REPLACE, NULL, NULL) == STORE_NOT_STORED);
    CHECK(put_full("ar", "a", 0, 0, MODE_ADD, NULL, NULL) == STORE_STORED);
    CHECK(put_full("ar", "b", 0, 0, MODE_ADD, NULL, NULL) == STORE_NOT_STORED);
    CHECK(streq(get_str("ar", NULL), "a"));
    CHECK(put_full("ar", "c", 0, 0, MODE_REPLACE, NULL, NULL) == STORE_STORED);
    CHECK(streq(get_str("ar", NULL), "c"));
}

static void test_cas(void)
{
    uint64_t c1 = 0, c2 = 0;
    struct store_opts o = {0};
    o.cas_in = 12345;
    CHECK(put_full("cas1", "v", 0, 0, MODE_CAS, &o, NULL) == STORE_NOT_FOUND);
    CHECK(put_full("cas1", "v1", 0, 0, MODE_SET, NULL, &c1) == STORE_STORED);
    CHECK(c1 != 0);
    struct item_view v;
    CHECK(streq(get_str("cas1", &v), "v1"));
    CHECK_EQ_U64(v.cas, c1);
    o.cas_in = c1 + 1000;
    CHECK(put_full("cas1", "bad", 0, 0, MODE_CAS, &o, NULL) == STORE_EXISTS);
    o.cas_in = c1;
    CHECK(put_full("cas1", "v2", 0, 0, MODE_CAS, &o, &c2) == STORE_STORED);
    CHECK(c2 != c1);
    CHECK(put_full("cas1", "v3", 0, 0, MODE_CAS, &o, NULL) == STORE_EXISTS);
    CHECK(streq(get_str("cas1", NULL), "v2"));
}

static void test_append_prepend_keep_flags(void)
{
    CHECK(put_full("ap", "mid", 0, 0, MODE_APPEND, NULL, NULL) == STORE_NOT_STORED);
    rel_time_t exp = storage_exptime(1000);
    CHECK(put_full("ap", "mid", 77, exp, MODE_SET, NULL, NULL) == STORE_STORED);
    CHECK(put_full("ap", "-end", 5, 0, MODE_APPEND, NULL, NULL) == STORE_STORED);
    CHECK(put_full("ap", "start-", 9, 0, MODE_PREPEND, NULL, NULL) == STORE_STORED);
    struct item_view v;
    CHECK(streq(get_str("ap", &v), "start-mid-end"));
    CHECK_EQ_U64(v.client_flags, 77);
    CHECK_EQ_U64(v.exptime, exp);
}

static void test_arith(void)
{
    uint64_t val = 0;
    CHECK(storage_arith(T, "n", 1, true, 1, NULL, &val, NULL, NULL) == ARITH_NOT_FOUND);
    CHECK(put("n", "10") == STORE_STORED);
    CHECK(storage_arith(T, "n", 1, true, 5, NULL, &val, NULL, NULL) == ARITH_OK);
    CHECK_EQ_U64(val, 15);
    CHECK(streq(get_str("n", NULL), "15"));
    CHECK(storage_arith(T, "n", 1, false, 100, NULL, &val, NULL, NULL) == ARITH_OK);
    CHECK_EQ_U64(val, 0);
    CHECK(streq(get_str("n", NULL), "0 "));   /* memcached's in-place rewrite pads with spaces */
    CHECK(storage_arith(T, "n", 1, true, 1234, NULL, &val, NULL, NULL) == ARITH_OK);
    CHECK(streq(get_str("n", NULL), "1234"));  /* longer: a new item, exact digits */
    CHECK(put("n", "18446744073709551615") == STORE_STORED);
    CHECK(storage_arith(T, "n", 1, true, 2, NULL, &val, NULL, NULL) == ARITH_OK);
    CHECK_EQ_U64(val, 1);   /* wraps at 2^64 */
    CHECK(put("n", "18446744073709551616") == STORE_STORED);
    CHECK(storage_arith(T, "n", 1, true, 1, NULL, &val, NULL, NULL) == ARITH_NON_NUMERIC);
    CHECK(put("n", "12 abc") == STORE_STORED);   /* memcached's strtoull rule: digits then a space */
    CHECK(storage_arith(T, "n", 1, true, 1, NULL, &val, NULL, NULL) == ARITH_OK);
    CHECK_EQ_U64(val, 13);
    CHECK(put("n", "0000000000000000000000000000000000000000000000000000000000000000000000000007") == STORE_STORED);
    CHECK(storage_arith(T, "n", 1, true, 1, NULL, &val, NULL, NULL) == ARITH_OK);
    CHECK_EQ_U64(val, 8);
    CHECK(put("n", "abc") == STORE_STORED);
    CHECK(storage_arith(T, "n", 1, true, 1, NULL, &val, NULL, NULL) == ARITH_NON_NUMERIC);
    CHECK(put("n", "12abc") == STORE_STORED);
    CHECK(storage_arith(T, "n", 1, true, 1, NULL, &val, NULL, NULL) == ARITH_NON_NUMERIC);
    CHECK(put("n", "-5") == STORE_STORED);
    CHECK(storage_arith(T, "n", 1, false, 1, NULL, &val, NULL, NULL) == ARITH_NON_NUMERIC);
    CHECK(put("n", "") == STORE_STORED);
    CHECK(storage_arith(T, "n", 1, true, 1, NULL, &val, NULL, NULL) == ARITH_NON_NUMERIC);
    CHECK(put_full("n", "99", 42, 0, MODE_SET, NULL, NULL) == STORE_STORED);
    CHECK(storage_arith(T, "n", 1, true, 1, NULL, &val, NULL, NULL) == ARITH_OK);
    struct item_view v;
    CHECK(streq(get_str("n", &v), "100"));
    CHECK_EQ_U64(v.client_flags, 42);
    struct arith_opts ao = {0};
    ao.vivify = true;
    ao.initial = 7;
    CHECK(storage_arith(T, "viv", 3, true, 1, &ao, &val, NULL, NULL) == ARITH_OK);
    CHECK_EQ_U64(val, 7);
    CHECK(streq(get_str("viv", NULL), "7"));
}

static void test_ttl_rules(void)
{
    rel_time_t now = storage_now();
    CHECK_EQ_U64(storage_exptime(0), 0);
    CHECK_EQ_U64(storage_exptime(100), now + 100);
    CHECK(storage_exptime(-1) <= now);
    CHECK(storage_exptime((int64_t)storage_process_started - 10) <= now);
    CHECK_EQ_U64(storage_exptime((int64_t)storage_process_started + 5000), 5000);
    CHECK(storage_ttl_remaining(0) == -1);

    CHECK(put_full("ttl", "x", 0, storage_exptime(10), MODE_SET, NULL, NULL) == STORE_STORED);
    CHECK(put_full("neg", "x", 0, storage_exptime(-1), MODE_SET, NULL, NULL) == STORE_STORED);
    CHECK(get_str("neg", NULL) == NULL);
    CHECK(streq(get_str("ttl", NULL), "x"));
    storage_test_advance_clock(11);
    CHECK(get_str("ttl", NULL) == NULL);
    /* expired items do not block add */
    CHECK(put_full("ttl", "y", 0, 0, MODE_ADD, NULL, NULL) == STORE_STORED);
}

/* A clock tick computes its time, then stores it. A test that advanced the
 * clock in between had the tick write the older time back. */
static void test_a_late_tick_does_not_undo_an_advance(void)
{
    rel_time_t before = storage_now();
    CHECK(put_full("late-tick", "v", 0, storage_exptime(5), MODE_SET, NULL, NULL) == STORE_STORED);
    storage_test_advance_clock(10);
    clock_publish(before);   /* the tick that read the clock before the advance */
    CHECK(storage_now() >= before + 10);
    CHECK(get_str("late-tick", NULL) == NULL);
}

static void test_touch_and_gat(void)
{
    CHECK(put_full("tch", "v", 0, storage_exptime(5), MODE_SET, NULL, NULL) == STORE_STORED);
    CHECK(storage_touch(T, "tch", 3, storage_exptime(100)) == STORE_STORED);
    storage_test_advance_clock(10);
    CHECK(streq(get_str("tch", NULL), "v"));
    CHECK(storage_touch(T, "nope", 4, 0) == STORE_NOT_FOUND);
    struct get_opts go = {0};
    go.touch = true;
    go.new_exptime = storage_exptime(3);
    char buf[16];
    struct item_view v;
    CHECK(storage_get(T, "tch", 3, &go, buf, sizeof buf, &v));
    storage_test_advance_clock(5);
    CHECK(get_str("tch", NULL) == NULL);
}

static void test_flush(void)
{
    CHECK(put("f1", "a") == STORE_STORED);
    CHECK(put("f2", "b") == STORE_STORED);
    storage_flush(0);
    CHECK(get_str("f1", NULL) == NULL);
    CHECK(get_str("f2", NULL) == NULL);
    CHECK(put("f3", "c") == STORE_STORED);
    CHECK(streq(get_str("f3", NULL), "c"));
    /* delayed */
    storage_test_advance_clock(2);
    storage_flush(storage_exptime(5));
    CHECK(streq(get_str("f3", NULL), "c"));
    storage_test_advance_clock(6);
    CHECK(get_str("f3", NULL) == NULL);
    CHECK(put("f4", "d") == STORE_STORED);
    CHECK(streq(get_str("f4", NULL), "d"));
}

static void test_meta_stale_win(void)
{
    uint64_t cas = 0;
    CHECK(put_full("st", "old", 0, 0, MODE_SET, NULL, &cas) == STORE_STORED);
    struct delete_opts d = {0};
    d.invalidate = true;
    CHECK(storage_delete(T, "st", 2, &d) == STORE_STORED);
    struct get_opts go = {0};
    go.win_tokens = true;
    char buf[64];
    struct item_view v;
    CHECK(storage_get(T, "st", 2, &go, buf, sizeof buf, &v));
    CHECK(v.stale && v.win && !v.win_sent_before);
    CHECK(v.cas != cas);
    CHECK(storage_get(T, "st", 2, &go, buf, sizeof buf, &v));
    CHECK(v.stale && !v.win && v.win_sent_before);
    CHECK(put("st", "new") == STORE_STORED);
    CHECK(storage_get(T, "st", 2, &go, buf, sizeof buf, &v));
    CHECK(!v.stale && !v.win && !v.win_sent_before);

    /* vivify on miss: first client wins, the next sees Z */
    struct get_opts gv = {0};
    gv.vivify = true;
    gv.vivify_exptime = storage_exptime(30);
    gv.win_tokens = true;
    memset(&v, 0, sizeof v);
    storage_get(T, "viv2", 4, &gv, buf, sizeof buf, &v);
    CHECK(v.win);
    CHECK(storage_get(T, "viv2", 4, &gv, buf, sizeof buf, &v));
    CHECK(!v.win && v.win_sent_before);
    gv.vivify_cas = 777;
    CHECK(storage_get(T, "viv3", 4, &gv, buf, sizeof buf, &v));
    CHECK(v.win && v.cas == 777);

    /* recache: win when TTL below the threshold */
    CHECK(put_full("rc", "v", 0, storage_exptime(10), MODE_SET, NULL, NULL) == STORE_STORED);
    struct get_opts gr = {0};
    gr.recache = true;
    gr.recache_below = 30;
    CHECK(storage_get(T, "rc", 2, &gr, buf, sizeof buf, &v));
    CHECK(v.win);
    CHECK(storage_get(T, "rc", 2, &gr, buf, sizeof buf, &v));
    CHECK(!v.win && v.win_sent_before);

    /* ms I: an older CAS stores, but stale */
    uint64_t c1 = 0;
    rel_time_t keep = storage_exptime(500);
    CHECK(put_full("inv", "a", 0, keep, MODE_SET, NULL, &c1) == STORE_STORED);
    struct store_opts so = {0};
    so.cas_in = c1 - 1;
    so.invalidate = true;
    CHECK(put_full("inv", "b", 0, 0, MODE_SET, &so, NULL) == STORE_STORED);
    CHECK(streq(get_str("inv", &v), "b"));
    CHECK(v.stale);
    CHECK_EQ_U64(v.exptime, keep);   /* the stale value keeps the old TTL */
}

static void test_fetched_and_last_access(void)
{
    /* a failed add refreshes the item but is not a fetch */
    CHECK(put("fadd", "a") == STORE_STORED);
    CHECK(put_full("fadd", "b", 0, 0, MODE_ADD, NULL, NULL) == STORE_NOT_STORED);
    struct item_view va;
    get_str("fadd", &va);
    CHECK(!va.fetched_before);
    /* incr keeps an invalidated item stale, win token still unsent */
    CHECK(put("stn", "1") == STORE_STORED);
    struct delete_opts d = {0};
    d.invalidate = true;
    CHECK(storage_delete(T, "stn", 3, &d) == STORE_STORED);
    uint64_t val;
    CHECK(storage_arith(T, "stn", 3, true, 1, NULL, &val, NULL, NULL) == ARITH_OK);
    struct get_opts go = {0};
    go.win_tokens = true;
    char buf[32];
    CHECK(storage_get(T, "stn", 3, &go, buf, sizeof buf, &va));
    CHECK(va.stale && va.win && va.nbytes == 1 && buf[0] == '2');
    CHECK(put("fa", "v") == STORE_STORED);
    struct item_view v;
    get_str("fa", &v);
    CHECK(!v.fetched_before);
    get_str("fa", &v);
    CHECK(v.fetched_before);
}

static void test_large_value_ref(void)
{
    size_t n = 200000;
    char *big = malloc(n + 1);
    for (size_t i = 0; i < n; i++) big[i] = (char)('a' + i % 26);
    big[n] = 0;
    CHECK(put("big", big) == STORE_STORED);
    struct item_view v;
    char small[16];
    CHECK(storage_get(T, "big", 3, NULL, small, sizeof small, &v));
    CHECK(v.ref != NULL);
    CHECK(v.nbytes == n && memcmp(v.value, big, n) == 0);
    /* delete while referenced: the bytes stay valid until release */
    CHECK(storage_delete(T, "big", 3, NULL) == STORE_STORED);
    bags_clean_once(T);
    CHECK(memcmp(v.value, big, n) == 0);
    /* churn the class well past its memory (64 MB / 200 KB chunks): the
     * referenced chunk must not be handed out again while the view lives */
    char *other = malloc(n + 1);
    memset(other, 'Z', n);
    other[n] = 0;
    char k[32];
    for (int i = 0; i < 400; i++) { sprintf(k, "churn%d", i); CHECK(put(k, other) == STORE_STORED); bags_clean_once(T); }
    CHECK(gstat("evictions") > 0);
    CHECK(memcmp(v.value, big, n) == 0);
    item_view_release(T, &v);
    free(other);
    /* metadata only: no copy, no reference */
    CHECK(put("meta", "0123456789") == STORE_STORED);
    CHECK(storage_get(T, "meta", 4, NULL, NULL, 0, &v));
    CHECK(v.nbytes == 10 && v.value == NULL && v.ref == NULL);
    /* small value, tiny buffer: a private copy */
    CHECK(put("sm", "hello world") == STORE_STORED);
    CHECK(storage_get(T, "sm", 2, NULL, small, 4, &v));
    CHECK(v.nbytes == 11 && memcmp(v.value, "hello world", 11) == 0);
    item_view_release(T, &v);
    free(big);
    enum store_result err;
    CHECK(item_alloc(T, "huge", 4, 0, 0, 2 << 20, &err) == NULL && err == STORE_TOO_LARGE);
}

static void count_stat(void *ctx, const char *name, const char *fmt, ...)
{
    (void)fmt;
    if (strcmp(name, "curr_items") == 0) ++*(int *)ctx;
}

static void test_stats_smoke(void)
{
    int n = 0;
    storage_stats_general(count_stat, &n);
    CHECK(n == 1);
    /* memcached's per-class counters in `stats slabs`, and `stats reset` */
    CHECK(put("sl", "0123456789") == STORE_STORED);
    CHECK(get_str("sl", NULL) != NULL);
    CHECK(get_str("sl", NULL) != NULL);
    char nm[64];
    int c = slabs_clsid(24 + 8 + 2 + 10 + 2);
    sprintf(nm, "%d:get_hits", c);
    long long before = stat_of(storage_stats_slabs, nm);
    CHECK(before >= 2);
    CHECK(get_str("sl", NULL) != NULL);
    CHECK_EQ_U64(stat_of(storage_stats_slabs, nm), before + 1);
    sprintf(nm, "%d:cmd_set", c);
    CHECK(stat_of(storage_stats_slabs, nm) >= 1);
    CHECK(gstat("get_hits") > 0);
    storage_stats_reset();
    CHECK_EQ_U64(gstat("get_hits"), 0);
    sprintf(nm, "%d:get_hits", c);
    CHECK_EQ_U64(stat_of(storage_stats_slabs, nm), 0);
    CHECK(get_str("sl", NULL) != NULL);
    CHECK_EQ_U64(stat_of(storage_stats_slabs, nm), 1);
    CHECK_EQ_U64(gstat("get_hits"), 1);
}

/* stats sizes: items per 32-byte bucket of their total size, kept on
 * link/unlink (memcached's "STAT <size> <count>"). */
static void test_stats_sizes(void)
{
    /* 24 + 8 + 3 + 100 + 2 = 137 -> the 160 bucket */
    char v[101];
    memset(v, 'x', 100);
    v[100] = 0;
    long long before = stat_of(storage_stats_sizes, "160");
    if (before < 0) before = 0;
    CHECK(put("sz1", v) == STORE_STORED);
    CHECK(put("sz2", v) == STORE_STORED);
    CHECK_EQ_U64(stat_of(storage_stats_sizes, "160"), before + 2);
    CHECK(put("sz2", "short") == STORE_STORED);          /* replaced: moves bucket */
    CHECK_EQ_U64(stat_of(storage_stats_sizes, "160"), before + 1);
    CHECK(storage_delete(T, "sz1", 3, NULL) == STORE_STORED);
    CHECK(stat_of(storage_stats_sizes, "160") == before || (before == 0 && stat_of(storage_stats_sizes, "160") == -1));
}

/* -C: no CAS stored (8 bytes less per item); cas commands cannot match. */
static void test_without_cas(void)
{
    teardown();
    struct storage_config c = {0};
    c.mem_limit = 64 << 20;
    c.item_size_max = 1024 * 1024;
    c.growth_factor = 1.25;
    c.chunk_size_min = 48;
    c.hashpower_init = 10;
    c.use_cas = false;
    setup_cfg(&c, false);
    uint64_t cas = 99;
    CHECK(put_full("nc", "v", 0, 0, MODE_SET, NULL, &cas) == STORE_STORED);
    CHECK_EQ_U64(cas, 0);
    struct item_view v;
    CHECK(streq(get_str("nc", &v), "v"));
    CHECK_EQ_U64(v.cas, 0);
    struct store_opts o = {0};
    o.cas_in = 1;
    CHECK(put_full("nc", "w", 0, 0, MODE_CAS, &o, NULL) == STORE_EXISTS);
    enum store_result err;
    item *it = item_alloc(T, "k", 1, 0, 0, 100, &err);
    CHECK(it && item_ntotal(it) == ITEM_HDR + 1 + 100);   /* no CAS, no stored "\r\n" */
    item_discard(T, it);
    teardown();
    setup(64, 10, false);
}

/* An item that fills its chunk to the byte has no room for an expiry: a
 * touch (or gat, or md I with T) gives it one by replacing it with a copy,
 * which keeps its value, CAS and client flags and then expires on time. */
static void test_touch_gives_an_expiry_to_an_item_without_one(void)
{
    char key[16] = "k12345678", val[101];   /* 9 + 100: the W3 item, 136 bytes exactly */
    memset(val, 'q', 100);
    val[100] = 0;
    uint64_t cas = 0;
    CHECK(put_full(key, val, 7, 0, MODE_SET, NULL, &cas) == STORE_STORED);
    struct item_view v;
    CHECK(streq(get_str(key, &v), val));
    long long items = gstat("curr_items");
    CHECK(storage_touch(T, key, strlen(key), storage_exptime(5)) == STORE_STORED);
    CHECK(streq(get_str(key, &v), val));
    CHECK_EQ_U64(v.cas, cas);
    CHECK_EQ_U64(v.client_flags, 7);
    CHECK(v.exptime != 0);
    CHECK_EQ_U64(gstat("curr_items"), items);            /* replaced, not added */
    storage_test_advance_clock(6);
    CHECK(get_str(key, NULL) == NULL);
    /* gat on another such item */
    CHECK(put_full("k87654321", val, 0, 0, MODE_SET, NULL, NULL) == STORE_STORED);
    struct get_opts go = { .touch = true, .new_exptime = storage_exptime(3) };
    char buf[128];
    CHECK(storage_get(T, "k87654321", 9, &go, buf, sizeof buf, &v));
    CHECK(v.exptime != 0);
    storage_test_advance_clock(4);
    CHECK(get_str("k87654321", NULL) == NULL);
    /* md I T */
    CHECK(put_full("k11111111", val, 0, 0, MODE_SET, NULL, NULL) == STORE_STORED);
    struct delete_opts d = { .invalidate = true, .update_ttl = true, .new_exptime = storage_exptime(2) };
    CHECK(storage_delete(T, "k11111111", 9, &d) == STORE_STORED);
    CHECK(get_str("k11111111", &v) && v.stale);
    storage_test_advance_clock(3);
    CHECK(get_str("k11111111", NULL) == NULL);
}

static unsigned classes_holding_chained(void)
{
    unsigned n = 0;
    for (unsigned c = 1; c <= slabs_class_count(); c++) n += class_holds_chained(c);
    return n;
}

/* A value just over slab_chunk_max keeps its last bytes in the head, in a
 * small class: that class counts as holding a chained value (the flusher and
 * the chained-value eviction look there) only while the head exists. It
 * used to stay marked for good once one such value had passed through. */
static void test_chained_head_class_is_forgotten_when_freed(void)
{
    size_t n = slabs_chunk_max() + 100;
    char *big = malloc(n + 1);
    memset(big, 'c', n);
    big[n] = 0;
    CHECK(classes_holding_chained() == 0);
    CHECK(put("chained", big) == STORE_STORED);
    CHECK(classes_holding_chained() == 1);
    CHECK(put("chained", big) == STORE_STORED);   /* replaced: the old head goes after its grace period */
    CHECK(storage_delete(T, "chained", 7, NULL) == STORE_STORED);
    bags_test_reclaim_all();
    CHECK(classes_holding_chained() == 0);
    free(big);
}

/* A read that finds an expired or flushed item takes it out at once
 * (memcached's do_item_get): curr_items falls then, not at the cleaner's
 * sweep. One held zero-copy, and a chained one, keep their bytes for the
 * reader holding them until it lets go; a newer item under the key stays. */
static void test_a_read_takes_a_dead_item_out(void)
{
    size_t n = 200000, cn = slabs_chunk_max() + 1000;   /* refcounted; chained (past slab_chunk_max) */
    char *big = malloc(cn + 1);
    for (size_t i = 0; i < cn; i++) big[i] = (char)('a' + i % 23);
    big[cn] = 0;
    long long items = gstat("curr_items"), expired = gstat("get_expired"), flushed = gstat("get_flushed");
    CHECK(put_full("dead-ref", big + (cn - n), 0, storage_exptime(5), MODE_SET, NULL, NULL) == STORE_STORED);
    CHECK(put_full("dead-chain", big, 0, storage_exptime(5), MODE_SET, NULL, NULL) == STORE_STORED);
    CHECK_EQ_U64(gstat("curr_items"), items + 2);
    struct item_view v, vc;
    char small[16];
    CHECK(storage_get(T, "dead-ref", 8, NULL, small, sizeof small, &v) && v.ref != NULL);
    CHECK(storage_get(T, "dead-chain", 10, NULL, small, sizeof small, &vc) && vc.ref != NULL);
    storage_test_advance_clock(6);
    CHECK(get_str("dead-ref", NULL) == NULL);
    CHECK_EQ_U64(gstat("curr_items"), items + 1);
    CHECK(get_str("dead-chain", NULL) == NULL);
    CHECK_EQ_U64(gstat("curr_items"), items);
    CHECK_EQ_U64(gstat("get_expired"), expired + 2);
    bags_test_reclaim_all();
    CHECK(v.nbytes == n && memcmp(v.value, big + (cn - n), n) == 0);
    struct iovec iov[64];
    size_t pieces = item_view_pieces(&vc, 0, iov, 64), at = 0;
    CHECK(pieces > 1 && vc.nbytes == cn);   /* chained: more than one piece */
    for (size_t i = 0; i < pieces; i++) {
        CHECK(at + iov[i].iov_len <= cn && memcmp(iov[i].iov_base, big + at, iov[i].iov_len) == 0);
        at += iov[i].iov_len;
    }
    CHECK_EQ_U64(at, cn);
    item_view_release(T, &v);
    item_view_release(T, &vc);
    /* flushed; then a newer item under the key, which a read keeps (the
     * sweep above took out what earlier tests left expired) */
    items = gstat("curr_items");
    CHECK(put("dead-flushed", "old") == STORE_STORED);
    storage_flush(0);
    CHECK(get_str("dead-flushed", NULL) == NULL);
    CHECK_EQ_U64(gstat("get_flushed"), flushed + 1);
    CHECK_EQ_U64(gstat("curr_items"), items);
    CHECK(put("dead-flushed", "new") == STORE_STORED);
    CHECK(streq(get_str("dead-flushed", NULL), "new"));
    CHECK_EQ_U64(gstat("curr_items"), items + 1);
    free(big);
}

int main(void)
{
    setup(64, 10, false);
    TEST(test_set_get_delete);
    TEST(test_add_replace);
    TEST(test_cas);
    TEST(test_a_late_tick_does_not_undo_an_advance);
    TEST(test_append_prepend_keep_flags);
    TEST(test_arith);
    TEST(test_ttl_rules);
    TEST(test_touch_and_gat);
    TEST(test_touch_gives_an_expiry_to_an_item_without_one);
    TEST(test_flush);
    TEST(test_a_read_takes_a_dead_item_out);
    TEST(test_meta_stale_win);
    TEST(test_fetched_and_last_access);
    TEST(test_stats_sizes);
    TEST(test_large_value_ref);
    TEST(test_chained_head_class_is_forgotten_when_freed);
    TEST(test_stats_smoke);
    TEST(test_without_cas);
    teardown();
    return harness_finish();
}
