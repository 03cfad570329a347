/*
 * test_extstore.c - the page store (extstore.c) on real files with O_DIRECT:
 * locator encoding and the page version's rollover, records read back from
 * the write buffer and from disk across many pages, page eviction making old
 * locators stale, deletes counted as fragmentation, compaction's pick, walk
 * (a write buffer at a time, records cut by a piece read whole) and drop
 * (refused for a page reused since the walk), and damage on disk (flipped
 * bits, a truncated file, a recycled page) read as a miss, never as a wrong
 * value, and a damaged piece footer costing the walk that piece only; the read split in two (prepare, then a read through io_uring, then
 * finish) as the IO threads do it; a page a value is streamed from is
 * reused last. Values encode their key and
 * version, so a value from the wrong record cannot pass for the right one.
 */
#include "harness.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "extstore.h"
#include "uring.h"

#define PAGE  (64u * 1024)
#define WBUF  (16u * 1024)

static char dir[256];
static char path[300];

static struct extstore *open_store(uint64_t pages, char *err)
{
    struct ext_file_spec f = { path, pages * PAGE };
    struct ext_conf c = { .page_size = PAGE, .wbuf_size = WBUF, .direct_io = true };
    return ext_open(&f, 1, &c, err, 256);
}

/* value i of key k: its bytes say which key and which write they are */
static uint32_t make_value(char *buf, uint32_t len, unsigned k, unsigned gen)
{
    for (uint32_t j = 0; j < len; j++) buf[j] = (char)('a' + (k * 7 + gen * 13 + j) % 26);
    if (len >= 16) snprintf(buf, 16, "k%05u-g%05u", k % 100000, gen % 100000);
    return len;
}

static void test_locator_packing(void)
{
    struct ext_locator l = { ext_loc_pack(65535, EXT_VERSION_MASK, EXT_MAX_PAGE_SIZE - 8), 7 };
    CHECK_EQ_U64(ext_loc_page(&l), 65535);
    CHECK_EQ_U64(ext_loc_version(&l), EXT_VERSION_MASK);
    CHECK_EQ_U64(ext_loc_offset(&l), EXT_MAX_PAGE_SIZE - 8);
    l.packed = ext_loc_pack(3, EXT_VERSION_MASK + 1, 4096 + 40);   /* the version wraps to 0 */
    CHECK_EQ_U64(ext_loc_page(&l), 3);
    CHECK_EQ_U64(ext_loc_version(&l), 0);
    CHECK_EQ_U64(ext_loc_offset(&l), 4096 + 40);
    CHECK_EQ_U64(ext_record_size(3, 5), 24);
    CHECK_EQ_U64(ext_crc32c(0, "123456789", 9), 0xE3069283u);   /* the CRC32C check value */
    CHECK_EQ_U64(ext_crc32c_portable(0, "123456789", 9), 0xE3069283u);
    /* the CPU's crc32 and the table agree at every length and alignment,
     * and when a CRC is continued over a second piece (key, then value) */
    unsigned char buf[4200];
    uint64_t x = 0x9E3779B97F4A7C15u;
    for (size_t i = 0; i < sizeof buf; i++) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; buf[i] = (unsigned char)x; }
    for (size_t off = 0; off < 9; off++)
        for (size_t len = 0; len + off <= sizeof buf; len += len < 70 ? 1 : 509) {
            CHECK_EQ_U64(ext_crc32c(0, buf + off, len), ext_crc32c_portable(0, buf + off, len));
            CHECK_EQ_U64(ext_crc32c(ext_crc32c(0, buf, off), buf + off, len),
                         ext_crc32c_portable(ext_crc32c_portable(0, buf, off), buf + off, len));
        }
    /* the lengths where the three interleaved streams start and end */
    static const size_t edges[] = { 767, 768, 769, 775, 776, 1535, 1536, 1537, 2304, 3840, 4096, 4104, 4191 };
    for (size_t i = 0; i < sizeof edges / sizeof *edges; i++)
        for (size_t off = 0; off < 9; off++) {
            CHECK_EQ_U64(ext_crc32c(0, buf + off, edges[i]), ext_crc32c_portable(0, buf + off, edges[i]));
            CHECK_EQ_U64(ext_crc32c(0x12345678u, buf + off, edges[i]), ext_crc32c_portable(0x12345678u, buf + off, edges[i]));
        }
}

static void test_open_refuses_bad_paths(void)
{
    char err[256] = "";
    struct ext_file_spec f = { "/nonexistent-dir/x/ext", 4 * PAGE };
    struct ext_conf c = { .page_size = PAGE, .wbuf_size = WBUF, .direct_io = true };
    CHECK(ext_open(&f, 1, &c, err, sizeof(err)) == NULL);
    CHECK(strstr(err, "/nonexistent-dir/x/ext") != NULL);
    f.path = path;
    f.size = PAGE + PAGE / 2;     /* fewer than 2 pages */
    CHECK(ext_open(&f, 1, &c, err, sizeof(err)) == NULL);
    CHECK(strstr(err, "fewer than 2 pages") != NULL);
    c.wbuf_size = 1000;
    f.size = 4 * PAGE;
    CHECK(ext_open(&f, 1, &c, err, sizeof(err)) == NULL);
    CHECK(strstr(err, "write buffer") != NULL);
}

static void test_round_trip_across_pages(void)
{
    char err[256] = "";
    struct extstore *e = open_store(16, err);
    CHECK(e != NULL);
    if (!e) { fprintf(stderr, "%s\n", err); return; }
    enum { N = 400 };
    static struct ext_locator loc[N];
    static uint32_t len[N];
    char key[32], val[3000], got[3000];
    for (unsigned i = 0; i < N; i++) {
        int nk = snprintf(key, sizeof(key), "key:%u", i);
        len[i] = make_value(val, 100 + (i * 37) % 2500, i, 1);
        CHECK(ext_write(e, EXT_BUCKET_DEFAULT, key, (uint32_t)nk, val, len[i], &loc[i]) == 0);
        /* readable at once, from the write buffer */
        if (i % 50 == 0) {
            CHECK(ext_read(e, &loc[i], key, (uint32_t)nk, got, len[i]) == EXT_HIT);
            CHECK(memcmp(got, val, len[i]) == 0);
        }
    }
    CHECK(ext_flush(e, EXT_BUCKET_DEFAULT) == 0);
    const struct ext_stats *s = ext_get_stats(e);
    CHECK(atomic_load(&s->bytes_written) > 6 * PAGE);   /* several pages written */
    CHECK_EQ_U64(atomic_load(&s->pages_evicted), 0);
    unsigned hits = 0, wrong = 0;
    for (unsigned i = 0; i < N; i++) {
        int nk = snprintf(key, sizeof(key), "key:%u", i);
        make_value(val, len[i], i, 1);
        if (ext_read(e, &loc[i], key, (uint32_t)nk, got, len[i]) == EXT_HIT) {
            hits++;
            wrong += memcmp(got, val, len[i]) != 0;
        }
    }
    CHECK_EQ_U64(hits, N);
    CHECK_EQ_U64(wrong, 0);
    CHECK_EQ_U64(atomic_load(&s->objects_used), N);
    /* the wrong key for a locator is a miss */
    CHECK(ext_read(e, &loc[5], "key:6", 5, got, len[5]) == EXT_MISS_BADCRC);
    ext_close(e);
}

/* Reads of many records in flight on one ring, as an IO thread does them
 * (ext_batch.c): each is prepared, all are submitted at once, each is
 * finished. A page evicted between prepare and finish is stale, a read cut
 * short is short, a failed one an IO error, never a wrong value. */
static void test_reads_through_io_uring(void)
{
    char err[256] = "";
    struct extstore *e = open_store(8, err);
    CHECK(e != NULL);
    if (!e) return;
    enum { N = 40, D = 8 };
    static struct ext_locator loc[N];
    char key[32], val[3000];
    for (unsigned i = 0; i < N; i++) {
        int nk = snprintf(key, sizeof(key), "ur:%u", i);
        make_value(val, 1000 + 50 * i, i, 3);
        CHECK(ext_write(e, EXT_BUCKET_DEFAULT, key, (uint32_t)nk, val, 1000 + 50 * i, &loc[i]) == 0);
    }
    ext_flush(e, EXT_BUCKET_DEFAULT);
    struct uring *u = uring_create_reader(D);
    if (!u) { printf("  io_uring refused by this kernel: the ring part is not run\n"); ext_close(e); return; }
    uint64_t bsz = ext_read_buf_size(250, 3000);
    char *bufs;
    CHECK(posix_memalign((void **)&bufs, EXT_ALIGN, D * bsz) == 0);
    struct ext_read_op op[D];
    unsigned hits = 0, wrong = 0;
    for (unsigned base = 0; base < N; base += D) {
        for (unsigned k = 0; k < D; k++) {
            unsigned i = base + k;
            int nk = snprintf(key, sizeof(key), "ur:%u", i);
            enum ext_read_result r;
            CHECK(ext_read_prepare(e, &loc[i], key, (uint32_t)nk, bufs + k * bsz, 1000 + 50 * i, &op[k], &r));
            CHECK(op[k].pos % EXT_ALIGN == 0 && op[k].len % EXT_ALIGN == 0 && op[k].len <= bsz);
            uring_prep_read(u, op[k].fd, bufs + k * bsz, op[k].len, op[k].pos, k);
        }
        CHECK(uring_submit_and_wait(u) == D);
        int32_t res[D];
        unsigned seen = 0;
        uint64_t ud;
        int32_t rr;
        while (seen < D) {
            while (uring_next_cqe(u, &ud, &rr)) { if (ud < D) res[ud] = rr; seen++; }
            if (seen < D) CHECK(uring_wait(u, D - seen) == 0);
        }
        for (unsigned k = 0; k < D; k++) {
            unsigned i = base + k;
            int nk = snprintf(key, sizeof(key), "ur:%u", i);
            make_value(val, 1000 + 50 * i, i, 3);
            const char *v = NULL;
            enum ext_read_result r = ext_read_finish(e, &op[k], bufs + k * bsz, res[k], &loc[i], key, (uint32_t)nk,
                                                     1000 + 50 * i, &v);
            CHECK(r == EXT_HIT);
            if (r == EXT_HIT) { hits++; wrong += memcmp(v, val, 1000 + 50 * i) != 0; }
        }
    }
    CHECK_EQ_U64(hits, N);
    CHECK_EQ_U64(wrong, 0);
    /* the same checks on what a failing, short or late read gives */
    int nk = snprintf(key, sizeof(key), "ur:%u", 5);
    enum ext_read_result r;
    const char *v = NULL;
    CHECK(ext_read_prepare(e, &loc[5], key, (uint32_t)nk, bufs, 1250, &op[0], &r));
    CHECK(ext_read_finish(e, &op[0], bufs, -EIO, &loc[5], key, (uint32_t)nk, 1250, &v) == EXT_MISS_IOERR);
    CHECK(ext_read_finish(e, &op[0], bufs, op[0].skip + 100, &loc[5], key, (uint32_t)nk, 1250, &v) == EXT_MISS_SHORT);
    CHECK(ext_read_pread(&op[0], bufs, 0) == op[0].len);
    ext_test_set_version(e, ext_loc_page(&loc[5]), ext_loc_version(&loc[5]) + 1);   /* evicted meanwhile */
    CHECK(ext_read_finish(e, &op[0], bufs, op[0].len, &loc[5], key, (uint32_t)nk, 1250, &v) == EXT_MISS_STALE);
    /* a record still in the write buffer needs no disk read */
    CHECK(ext_write(e, EXT_BUCKET_DEFAULT, "wb", 2, "hello", 5, &loc[0]) == 0);
    CHECK(!ext_read_prepare(e, &loc[0], "wb", 2, bufs, 5, &op[0], &r));
    CHECK(r == EXT_HIT && memcmp(bufs, "hello", 5) == 0);
    free(bufs);
    uring_free(u);
    ext_close(e);
}

static void test_eviction_makes_old_locators_stale(void)
{
    char err[256] = "";
    struct extstore *e = open_store(4, err);
    CHECK(e != NULL);
    if (!e) return;
    enum { N = 300 };   /* ~600 KB into 4 pages of 64 KB */
    static struct ext_locator loc[N];
    char key[32], val[2000], got[2000];
    for (unsigned i = 0; i < N; i++) {
        int nk = snprintf(key, sizeof(key), "ev:%u", i);
        make_value(val, sizeof(val), i, 2);
        CHECK(ext_write(e, EXT_BUCKET_DEFAULT, key, (uint32_t)nk, val, sizeof(val), &loc[i]) == 0);
    }
    ext_flush(e, EXT_BUCKET_DEFAULT);
    const struct ext_stats *s = ext_get_stats(e);
    CHECK(atomic_load(&s->pages_evicted) > 0);
    /* every record an eviction took is an orphaned locator */
    CHECK_EQ_U64(ext_records_orphaned(e), atomic_load(&s->objects_evicted));
    unsigned stale = 0, hit = 0, wrong = 0, other = 0;
    for (unsigned i = 0; i < N; i++) {
        int nk = snprintf(key, sizeof(key), "ev:%u", i);
        make_value(val, sizeof(val), i, 2);
        enum ext_read_result r = ext_read(e, &loc[i], key, (uint32_t)nk, got, sizeof(got));
        if (r == EXT_HIT) { hit++; wrong += memcmp(got, val, sizeof(val)) != 0; }
        else if (r == EXT_MISS_STALE) stale++;
        else other++;
        CHECK(ext_check(e, &loc[i]) == (r == EXT_HIT));
    }
    CHECK(stale > 0);
    CHECK(hit > 0);
    CHECK_EQ_U64(wrong, 0);
    CHECK_EQ_U64(other, 0);
    /* the newest records survive, the oldest went first */
    CHECK(ext_check(e, &loc[N - 1]));
    CHECK(!ext_check(e, &loc[0]));
    CHECK_EQ_U64(atomic_load(&s->objects_used) + atomic_load(&s->objects_evicted), N);
    /* nothing was deleted: evicting pages leaves only the padding that keeps
     * the live pages' values off block boundaries (96 bytes per two values
     * of 2000 here) fragmented; it used to wrap below zero */
    CHECK(atomic_load(&s->bytes_fragmented) <= atomic_load(&s->objects_used) * 48 + 96);
    ext_close(e);
}

static void test_version_rollover(void)
{
    char err[256] = "";
    struct extstore *e = open_store(4, err);
    CHECK(e != NULL);
    if (!e) return;
    char val[500], got[500];
    struct ext_locator a, b;
    /* page 0 at the last version: a record written there carries it */
    ext_test_set_version(e, 0, EXT_VERSION_MASK);
    make_value(val, sizeof(val), 1, 1);
    CHECK(ext_write(e, EXT_BUCKET_DEFAULT, "A", 1, val, sizeof(val), &a) == 0);
    CHECK_EQ_U64(ext_loc_version(&a), EXT_VERSION_MASK);
    ext_flush(e, EXT_BUCKET_DEFAULT);
    CHECK(ext_read(e, &a, "A", 1, got, sizeof(got)) == EXT_HIT);
    /* the page is recycled 2^20 times later: its version is A's again, and
     * another record sits where A was */
    ext_test_set_version(e, 0, EXT_VERSION_MASK + 1);
    CHECK_EQ_U64(ext_loc_version(&a) == 0, 0);
    CHECK(ext_read(e, &a, "A", 1, got, sizeof(got)) == EXT_MISS_STALE);
    ext_test_set_version(e, 0, EXT_VERSION_MASK);
    make_value(val, sizeof(val), 2, 9);
    /* another value where A's was: the store never does this, a recycled
     * page does */
    int fd = open(path, O_RDWR);
    CHECK(fd >= 0);
    CHECK(pwrite(fd, val, sizeof(val), (off_t)ext_loc_offset(&a)) == (ssize_t)sizeof(val));
    close(fd);
    CHECK(ext_read(e, &a, "A", 1, got, sizeof(got)) == EXT_MISS_BADCRC);
    (void)b;
    ext_close(e);
}

/* Closes the default bucket's page by filling it, so that what it holds is
 * read from disk, not from the write buffer. */
static void fill_past_page(struct extstore *e, const char *prefix)
{
    char key[32], val[1500];
    struct ext_locator l;
    memset(val, 'z', sizeof(val));
    for (unsigned i = 0; i < PAGE / sizeof(val) + 2; i++) {
        int nk = snprintf(key, sizeof(key), "%s%u", prefix, i);
        ext_write(e, EXT_BUCKET_DEFAULT, key, (uint32_t)nk, val, sizeof(val), &l);
    }
}

static void test_damage_on_disk_is_a_miss(void)
{
    char err[256] = "";
    struct extstore *e = open_store(8, err);
    CHECK(e != NULL);
    if (!e) return;
    char val[1000], got[1000];
    struct ext_locator a, b;
    make_value(val, sizeof(val), 1, 1);
    CHECK(ext_write(e, EXT_BUCKET_DEFAULT, "flip", 4, val, sizeof(val), &a) == 0);
    make_value(val, sizeof(val), 2, 1);
    CHECK(ext_write(e, EXT_BUCKET_DEFAULT, "tail", 4, val, sizeof(val), &b) == 0);
    fill_past_page(e, "fill");
    CHECK(ext_read(e, &a, "flip", 4, got, sizeof(got)) == EXT_HIT);
    /* one flipped bit in the value */
    int fd = open(path, O_RDWR);
    CHECK(fd >= 0);
    off_t at = (off_t)(ext_loc_offset(&a) + 500);
    char c;
    CHECK(pread(fd, &c, 1, at) == 1);
    c ^= 0x10;
    CHECK(pwrite(fd, &c, 1, at) == 1);
    const struct ext_stats *s = ext_get_stats(e);
    uint64_t bad = atomic_load(&s->miss_badcrc);
    CHECK(ext_read(e, &a, "flip", 4, got, sizeof(got)) == EXT_MISS_BADCRC);
    CHECK_EQ_U64(atomic_load(&s->miss_badcrc), bad + 1);
    /* the record beside it is untouched */
    make_value(val, sizeof(val), 2, 1);
    CHECK(ext_read(e, &b, "tail", 4, got, sizeof(got)) == EXT_HIT);
    CHECK(memcmp(got, val, sizeof(val)) == 0);
    /* the file cut short under the store: a short read, a miss */
    CHECK(ftruncate(fd, (off_t)ext_loc_offset(&b) + 100) == 0);
    close(fd);
    CHECK(ext_read(e, &b, "tail", 4, got, sizeof(got)) == EXT_MISS_SHORT);
    CHECK(atomic_load(&s->miss_short) >= 1);
    ext_close(e);
}

/* A 4 KiB value costs one 4 KiB device read: a read fetches the value's
 * blocks only (its directory entry and key are elsewhere in the piece), and
 * a value that fits one block is not laid across two when that saves a
 * block for little padding. In format 1 every such read was two blocks (a
 * 4096-byte value behind a 16-byte header and its key). */
static void test_a_4k_value_is_one_block_read(void)
{
    char err[256] = "";
    struct extstore *e = open_store(8, err);
    CHECK(e != NULL);
    if (!e) return;
    static const uint32_t sizes[] = { 4096, 4000, 1000, 4096 * 3 };
    static char val[4096 * 3], got[4096 * 3];
    char *buf = NULL;
    CHECK(posix_memalign((void **)&buf, EXT_ALIGN, ext_read_buf_size(32, sizeof val)) == 0);
    for (unsigned s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        enum { N = 12 };
        struct ext_locator locs[N];
        char key[32];
        for (unsigned i = 0; i < N; i++) {
            int nk = snprintf(key, sizeof key, "b:%u:%u", s, i);
            make_value(val, sizes[s], i, s);
            CHECK(ext_write(e, EXT_BUCKET_DEFAULT, key, (uint32_t)nk, val, sizes[s], &locs[i]) == 0);
        }
        CHECK(ext_flush(e, EXT_BUCKET_DEFAULT) == 0);
        for (unsigned i = 0; i < N; i++) {
            int nk = snprintf(key, sizeof key, "b:%u:%u", s, i);
            struct ext_read_op op;
            enum ext_read_result r;
            CHECK(ext_read_prepare(e, &locs[i], key, (uint32_t)nk, got, sizes[s], &op, &r));   /* from disk */
            CHECK_EQ_U64(op.len, (sizes[s] + EXT_ALIGN - 1) / EXT_ALIGN * EXT_ALIGN);
            const char *v = NULL;
            CHECK(ext_read_finish(e, &op, buf, ext_read_pread(&op, buf, 0), &locs[i], key, (uint32_t)nk, sizes[s], &v) == EXT_HIT);
            make_value(val, sizes[s], i, s);
            CHECK(v && memcmp(v, val, sizes[s]) == 0);
        }
    }
    free(buf);
    ext_close(e);
}

/* A value that fits in one block is read with one block when the gap
 * before the next block is at most a quarter of it: a 3500-byte value
 * behind a 3900-byte one starts at the next block (gap 192), and so does the
 * next one (gap 592); a 2100-byte value behind them would leave a gap of 592,
 * over its quarter (525), so it straddles two blocks rather than waste the
 * disk. The gaps are counted as fragmentation. */
static void test_a_value_of_one_block_never_straddles_two(void)
{
    char err[256] = "";
    struct extstore *e = open_store(8, err);
    CHECK(e != NULL);
    if (!e) return;
    static const uint32_t sizes[] = { 3900, 3500, 3500, 2100 };   /* one 16 KiB buffer */
    enum { N = sizeof sizes / sizeof *sizes };
    static char val[4096], got[4096];
    struct ext_locator locs[N];
    char key[32];
    for (unsigned i = 0; i < N; i++) {
        int nk = snprintf(key, sizeof key, "s:%u", i);
        make_value(val, sizes[i], i, 7);
        CHECK(ext_write(e, EXT_BUCKET_DEFAULT, key, (uint32_t)nk, val, sizes[i], &locs[i]) == 0);
    }
    /* 3900 at 0; 3500 at 4096 (pad 192 after the 8-byte alignment); 3500 at
     * 8192 (pad 592); 2100 at 11696, across 12288 */
    CHECK_EQ_U64(ext_get_stats(e)->bytes_fragmented, 192 + 592);
    CHECK(ext_flush(e, EXT_BUCKET_DEFAULT) == 0);
    char *buf = NULL;
    CHECK(posix_memalign((void **)&buf, EXT_ALIGN, ext_read_buf_size(32, sizeof val)) == 0);
    for (unsigned i = 0; i < N; i++) {
        int nk = snprintf(key, sizeof key, "s:%u", i);
        struct ext_read_op op;
        enum ext_read_result r;
        CHECK(ext_read_prepare(e, &locs[i], key, (uint32_t)nk, got, sizes[i], &op, &r));   /* from disk */
        CHECK_EQ_U64(op.len, i == 3 ? 2 * EXT_ALIGN : EXT_ALIGN);
        const char *v = NULL;
        CHECK(ext_read_finish(e, &op, buf, ext_read_pread(&op, buf, 0), &locs[i], key, (uint32_t)nk, sizes[i], &v) == EXT_HIT);
        make_value(val, sizes[i], i, 7);
        CHECK(v && memcmp(v, val, sizes[i]) == 0);
    }
    free(buf);
    ext_close(e);
}

struct walk_seen { unsigned records, live; const struct ext_locator *live_locs; unsigned nlive; };

static int walk_fn(void *arg, const struct ext_record *r)
{
    struct walk_seen *w = arg;
    if (r->nkey < 2 || memcmp(r->key, "c:", 2) != 0) return 0;   /* the filler after them */
    w->records++;
    for (unsigned i = 0; i < w->nlive; i++)
        if (w->live_locs[i].packed == r->loc.packed && w->live_locs[i].crc == r->loc.crc) {
            w->live++;
            break;
        }
    return 0;
}

static void test_delete_and_compaction(void)
{
    char err[256] = "";
    struct extstore *e = open_store(8, err);
    CHECK(e != NULL);
    if (!e) return;
    enum { N = 40 };
    struct ext_locator loc[N], keep[N];
    unsigned nkeep = 0;
    char key[32], val[1200];
    for (unsigned i = 0; i < N; i++) {
        int nk = snprintf(key, sizeof(key), "c:%u", i);
        make_value(val, sizeof(val), i, 3);
        CHECK(ext_write(e, EXT_BUCKET_DEFAULT, key, (uint32_t)nk, val, sizeof(val), &loc[i]) == 0);
    }
    uint32_t page = ext_loc_page(&loc[0]);
    CHECK(ext_loc_page(&loc[N - 1]) == page);        /* all on one page */
    const struct ext_stats *s = ext_get_stats(e);
    uint64_t used = atomic_load(&s->bytes_used);
    /* values of 1200 bytes: the fourth of each block starts at the next (496 bytes of padding) */
    uint64_t padding = atomic_load(&s->bytes_fragmented);
    CHECK(padding > 0 && padding <= N / 3 * 496);
    for (unsigned i = 0; i < N; i++) {
        int nk = snprintf(key, sizeof(key), "c:%u", i);
        if (i % 5 == 0) keep[nkeep++] = loc[i];
        else ext_delete(e, &loc[i], (uint32_t)nk, sizeof(val));
    }
    CHECK_EQ_U64(atomic_load(&s->objects_used), nkeep);
    uint64_t deleted = atomic_load(&s->bytes_fragmented) - padding;
    CHECK(deleted > 0);
    CHECK_EQ_U64(atomic_load(&s->bytes_used) + atomic_load(&s->bytes_fragmented), used + padding);
    /* a page still open is not compacted */
    uint32_t version = 0;
    CHECK(ext_compact_pick(e, 0.5, &version) == -1);
    fill_past_page(e, "f");
    CHECK(ext_compact_pick(e, 0.5, &version) == (int)page);
    CHECK_EQ_U64(version, ext_loc_version(&loc[0]));
    CHECK(ext_compact_pick(e, 0.1, NULL) == -1);     /* 20% live is not under 10% */
    struct walk_seen w = { 0, 0, keep, nkeep };
    CHECK(ext_page_walk(e, page, version, walk_fn, &w) == 0);
    CHECK_EQ_U64(w.records, N);                      /* every one of ours, deleted ones too */
    CHECK_EQ_U64(w.live, nkeep);
    /* nobody moved or deleted the live ones here (ours and the filler's
     * first records): the page goes, orphaning them, and the cleaner's
     * signal for orphaned stubs moves on */
    uint64_t before = ext_records_orphaned(e), orphaned = 0, objs = atomic_load(&s->objects_used);
    uint64_t frag = atomic_load(&s->bytes_fragmented);
    CHECK(ext_page_drop(e, page, version, &orphaned));
    CHECK(orphaned > nkeep);
    CHECK_EQ_U64(orphaned, objs - atomic_load(&s->objects_used));
    CHECK_EQ_U64(ext_records_orphaned(e) - before, orphaned);
    CHECK_EQ_U64(atomic_load(&s->pages_reclaimed), 1);
    /* the deleted records and the page's padding (ours at least) went with
     * it; what stays is the padding of the filler's next page */
    CHECK(atomic_load(&s->bytes_fragmented) <= frag - deleted - padding);
    CHECK(!ext_check(e, &keep[0]));
    /* freed but not opened again, the page still holds its bytes: a read
     * that took the locator before the drop (a GET racing the SET that
     * replaced the value, or the compactor) gets the value, CRC-checked,
     * not a miss for a key that never went missing */
    char got[1200];
    CHECK(ext_read(e, &keep[0], "c:0", 3, got, sizeof(got)) == EXT_HIT);
    make_value(val, sizeof(val), 0, 3);
    CHECK(memcmp(got, val, sizeof(val)) == 0);
    /* a dropped page is free again and is handed out before any eviction */
    uint64_t evicted = atomic_load(&s->pages_evicted);
    fill_past_page(e, "g");
    fill_past_page(e, "h");
    CHECK_EQ_U64(atomic_load(&s->pages_evicted), evicted);
    /* opened again, its old bytes are going: the old locator is stale */
    CHECK(ext_read(e, &keep[0], "c:0", 3, got, sizeof(got)) == EXT_MISS_STALE);
    ext_close(e);
}

static void test_buckets_fill_their_own_pages(void)
{
    char err[256] = "";
    struct extstore *e = open_store(4, err);
    CHECK(e != NULL);
    if (!e) return;
    struct ext_locator a, b, c;
    char val[100] = { 0 }, got[100];
    CHECK(ext_write(e, EXT_BUCKET_DEFAULT, "a", 1, val, sizeof(val), &a) == 0);
    CHECK(ext_write(e, EXT_BUCKET_LOWTTL, "b", 1, val, sizeof(val), &b) == 0);
    CHECK(ext_write(e, EXT_BUCKET_COMPACT, "c", 1, val, sizeof(val), &c) == 0);
    CHECK(ext_loc_page(&a) != ext_loc_page(&b));
    CHECK(ext_loc_page(&b) != ext_loc_page(&c));
    CHECK(ext_read(e, &b, "b", 1, got, sizeof(got)) == EXT_HIT);
    CHECK_EQ_U64(atomic_load(&ext_get_stats(e)->pages_open), 3);
    /* a value larger than a write buffer cannot be stored */
    static char big[WBUF];
    CHECK(ext_write(e, EXT_BUCKET_DEFAULT, "big", 3, big, sizeof(big), &a) == -E2BIG);
    ext_close(e);
}

/* Readers race a writer that keeps evicting pages under them: every read is
 * a hit with the right bytes or a miss, never another record's value. */
enum { CN = 3000, CLEN = 1800 };
static struct ext_locator c_loc[CN];
static _Atomic unsigned c_published;
static _Atomic int c_stop;
static _Atomic unsigned c_hits, c_misses, c_wrong, c_reads;
static struct extstore *c_store;

static void *reader(void *arg)
{
    unsigned seed = (unsigned)(uintptr_t)arg;
    char key[32], want[CLEN], got[CLEN];
    /* waiting for the first record does not count as a read: a reader that
     * started first used to spend its whole budget spinning (0 hits, flaky) */
    for (unsigned spins = 0; spins < 10000000 && !atomic_load(&c_stop);) {
        unsigned pub = atomic_load_explicit(&c_published, memory_order_acquire);
        if (pub == 0) { spins++; sched_yield(); continue; }
        atomic_fetch_add(&c_reads, 1);
        seed = seed * 1103515245u + 12345u;
        unsigned i = pub - 1 - (seed >> 8) % (pub < 200 ? pub : 200);   /* mostly recent ones */
        int nk = snprintf(key, sizeof(key), "r:%u", i);
        if (ext_read(c_store, &c_loc[i], key, (uint32_t)nk, got, CLEN) == EXT_HIT) {
            make_value(want, CLEN, i, 4);
            atomic_fetch_add(memcmp(got, want, CLEN) ? &c_wrong : &c_hits, 1);
        } else {
            atomic_fetch_add(&c_misses, 1);
        }
    }
    return NULL;
}

static void test_concurrent_reads_during_eviction(void)
{
    char err[256] = "";
    c_store = open_store(4, err);
    CHECK(c_store != NULL);
    if (!c_store) return;
    pthread_t r[2];
    for (int t = 0; t < 2; t++) pthread_create(&r[t], NULL, reader, (void *)(uintptr_t)(t + 1));
    char key[32], val[CLEN];
    for (unsigned i = 0; i < CN; i++) {
        int nk = snprintf(key, sizeof(key), "r:%u", i);
        make_value(val, CLEN, i, 4);
        CHECK(ext_write(c_store, EXT_BUCKET_DEFAULT, key, (uint32_t)nk, val, CLEN, &c_loc[i]) == 0);
        atomic_store_explicit(&c_published, i + 1, memory_order_release);
        if (i % 64 == 0) {
            ext_flush(c_store, EXT_BUCKET_DEFAULT);
            /* on a loaded machine the writer could finish before a reader
             * ran at all (0 hits, 0 misses): at each flush it waits for the
             * readers to make progress, so reads do overlap the evictions */
            unsigned seen = atomic_load(&c_reads);
            for (unsigned spins = 0; atomic_load(&c_reads) == seen && spins < 1000000; spins++) sched_yield();
        }
    }
    atomic_store(&c_stop, 1);
    for (int t = 0; t < 2; t++) pthread_join(r[t], NULL);
    CHECK(atomic_load(&ext_get_stats(c_store)->pages_evicted) > 10);
    CHECK(atomic_load(&c_hits) > 0);
    CHECK_EQ_U64(atomic_load(&c_wrong), 0);
    printf("    concurrent: %u hits, %u misses, %u wrong\n", atomic_load(&c_hits), atomic_load(&c_misses), atomic_load(&c_wrong));
    ext_close(c_store);
}

/* ---- compaction's building blocks, one concern each ------------------------ */

struct piece_seen {
    const struct ext_locator *locs;
    const uint32_t *lens;
    unsigned n, found, wrong, others;
};

static int piece_fn(void *arg, const struct ext_record *r)
{
    struct piece_seen *w = arg;
    unsigned k;
    if (sscanf((const char *)r->key, "w:%u", &k) != 1 || k >= w->n) { w->others++; return 0; }
    char want[3000];
    make_value(want, w->lens[k], k, 9);
    if (r->loc.packed != w->locs[k].packed || r->loc.crc != w->locs[k].crc || r->nval != w->lens[k] ||
        memcmp(r->val, want, r->nval) != 0)
        w->wrong++;
    else
        w->found++;
    return 0;
}

/* The walk reads the page a write buffer at a time: buffers flushed early
 * (the flusher's idle pass) start at odd offsets, so the pieces cut records
 * in the middle; every record must still come out whole, once. */
static void test_walk_in_pieces_finds_every_record(void)
{
    char err[256] = "";
    struct extstore *e = open_store(4, err);
    CHECK(e != NULL);
    if (!e) return;
    enum { N = 200 };
    static struct ext_locator locs[N];
    static uint32_t lens[N];
    char key[32], val[3000];
    unsigned on_first = 0, n = 0;
    uint32_t page0 = 0;
    /* page 0 and a few records into the next one (4 pages: none evicted) */
    for (unsigned i = 0; i < N && n < on_first + 3; i++, n++) {
        lens[i] = 100 + (i * 997) % 2800;
        int nk = snprintf(key, sizeof(key), "w:%u", i);
        make_value(val, lens[i], i, 9);
        CHECK(ext_write(e, EXT_BUCKET_DEFAULT, key, (uint32_t)nk, val, lens[i], &locs[i]) == 0);
        if (i == 0) page0 = ext_loc_page(&locs[0]);
        if (ext_loc_page(&locs[i]) == page0) on_first++;
        if (i % 7 == 3) ext_flush(e, EXT_BUCKET_DEFAULT);   /* a buffer written short */
    }
    CHECK(on_first > 3 * (PAGE / WBUF));                    /* the page took several buffers */
    CHECK(on_first < n);                                    /* and was closed */
    struct ext_page_info pi;
    CHECK(ext_page_info(e, page0, &pi));
    CHECK_EQ_U64(pi.version, ext_loc_version(&locs[0]));
    struct piece_seen w = { locs, lens, n, 0, 0, 0 };
    CHECK(ext_page_walk(e, page0, pi.version, piece_fn, &w) == 0);
    CHECK_EQ_U64(w.found, on_first);
    CHECK_EQ_U64(w.wrong, 0);
    CHECK_EQ_U64(w.others, 0);
    ext_close(e);
}

static int count_fn(void *arg, const struct ext_record *r) { (void)r; (*(unsigned *)arg)++; return 0; }

/* Between the walk and the drop the page may be evicted and handed out
 * again: its new records were never relocated, so the drop must refuse. */
static void test_drop_with_a_stale_version_is_refused(void)
{
    char err[256] = "";
    struct extstore *e = open_store(4, err);
    CHECK(e != NULL);
    if (!e) return;
    struct ext_locator l;
    char key[16], val[1000];
    for (unsigned i = 0; i < 40; i++) {   /* 40 KB of the 64 KB page, all garbage */
        int nk = snprintf(key, sizeof(key), "s:%u", i);
        make_value(val, sizeof(val), i, 1);
        CHECK(ext_write(e, EXT_BUCKET_DEFAULT, key, (uint32_t)nk, val, sizeof(val), &l) == 0);
        ext_delete(e, &l, (uint32_t)nk, sizeof(val));
    }
    fill_past_page(e, "s");
    uint32_t page = ext_loc_page(&l), version = 0;
    CHECK(ext_compact_pick(e, 0.8, &version) == (int)page);
    CHECK_EQ_U64(version, ext_loc_version(&l));
    const struct ext_stats *s = ext_get_stats(e);
    uint64_t free_before = atomic_load(&s->pages_free);
    ext_test_set_version(e, page, version + 1);    /* evicted and reused meanwhile */
    CHECK(!ext_page_drop(e, page, version, NULL));
    CHECK_EQ_U64(atomic_load(&s->pages_reclaimed), 0);
    CHECK_EQ_U64(atomic_load(&s->pages_free), free_before);
    unsigned seen = 0;
    CHECK(ext_page_walk(e, page, version, count_fn, &seen) == -ESTALE);
    CHECK_EQ_U64(seen, 0);
    /* with the version it has now, it goes */
    CHECK(ext_page_drop(e, page, version + 1, NULL));
    CHECK_EQ_U64(atomic_load(&s->pages_reclaimed), 1);
    CHECK_EQ_U64(atomic_load(&s->pages_free), free_before + 1);
    ext_close(e);
}

/* Pages whose live share is not under max_frag stay; among the others the
 * emptiest goes first. */
static void test_pick_honours_max_frag(void)
{
    char err[256] = "";
    struct extstore *e = open_store(8, err);
    CHECK(e != NULL);
    if (!e) return;
    /* three pages, 90%, 50% and 30% of their records left live */
    const unsigned keep_of_10[3] = { 9, 5, 3 };
    uint32_t pages[3];
    char key[32], val[1500];
    for (unsigned p = 0; p < 3; p++) {
        struct ext_locator l[64];
        unsigned n = 0;
        for (;; n++) {
            int nk = snprintf(key, sizeof(key), "m%u:%u", p, n);
            make_value(val, sizeof(val), n, p);
            CHECK(ext_write(e, EXT_BUCKET_DEFAULT, key, (uint32_t)nk, val, sizeof(val), &l[n]) == 0);
            if (n > 0 && ext_loc_page(&l[n]) != ext_loc_page(&l[0])) break;   /* the next page began */
        }
        pages[p] = ext_loc_page(&l[0]);
        for (unsigned i = 0; i < n; i++)
            if (i % 10 >= keep_of_10[p]) {
                int nk = snprintf(key, sizeof(key), "m%u:%u", p, i);
                ext_delete(e, &l[i], (uint32_t)nk, sizeof(val));
            }
        /* the record that began the next page: garbage there too */
        int nk = snprintf(key, sizeof(key), "m%u:%u", p, n);
        ext_delete(e, &l[n], (uint32_t)nk, sizeof(val));
    }
    uint32_t v;
    CHECK(ext_compact_pick(e, 0.8, &v) == (int)pages[2]);   /* 30% first */
    CHECK(ext_compact_pick(e, 0.2, &v) == -1);              /* none under 20% */
    CHECK(ext_compact_pick(e, 0.95, &v) == (int)pages[2]);
    CHECK(ext_page_drop(e, pages[2], v, NULL));
    CHECK(ext_compact_pick(e, 0.8, &v) == (int)pages[1]);   /* then 50% */
    CHECK(ext_page_drop(e, pages[1], v, NULL));
    CHECK(ext_compact_pick(e, 0.8, &v) == -1);              /* 90% live is not under 80% */
    CHECK(ext_compact_pick(e, 0.95, &v) == (int)pages[0]);
    ext_close(e);
}

/* Relocating a record deletes it from its old page, as ext_relocate does:
 * the live records the walk does not meet are what the drop counts lost. */
struct moved { struct extstore *e; unsigned found[15], others; };

static int move_fn(void *arg, const struct ext_record *r)
{
    struct moved *m = arg;
    unsigned k;
    if (sscanf((const char *)r->key, "d:%u", &k) == 1 && k < 15) m->found[k]++;
    else m->others++;
    ext_delete(m->e, &r->loc, r->nkey, r->nval);
    return 0;
}

/* Three pieces of five records on one page, then one footer damaged (one
 * bit of its CRC): the walk steps over that piece alone, and the drop after
 * it counts only its five records lost. A damaged footer of the page's first
 * piece leaves nothing to step back to: the walk says so (-EBADMSG) and the
 * page is kept, its unmet records still readable, picked by no compaction,
 * and freed once they are deleted. */
static void test_damaged_footer_costs_one_piece(void)
{
    for (unsigned damaged = 0; damaged < 2; damaged++) {   /* piece 1 (middle), then piece 0 (first) */
        unlink(path);
        char err[256] = "";
        struct extstore *e = open_store(8, err);
        CHECK(e != NULL);
        if (!e) return;
        struct ext_locator loc[15];
        char key[16], val[1000], got[1000];
        for (unsigned i = 0; i < 15; i++) {
            int nk = snprintf(key, sizeof key, "d:%u", i);
            make_value(val, sizeof val, i, 5);
            CHECK(ext_write(e, EXT_BUCKET_DEFAULT, key, (uint32_t)nk, val, sizeof val, &loc[i]) == 0);
            if (i % 5 == 4) CHECK(ext_flush(e, EXT_BUCKET_DEFAULT) == 0);   /* one piece per five */
        }
        fill_past_page(e, "fill");
        uint32_t page = ext_loc_page(&loc[0]);
        CHECK(ext_loc_page(&loc[14]) == page);
        /* the damaged piece ends where the next one's first value starts */
        uint64_t next = ext_loc_offset(&loc[5 * (damaged ? 1 : 2)]) & ~(uint64_t)(EXT_ALIGN - 1);
        int fd = open(path, O_RDWR);
        CHECK(fd >= 0);
        off_t at = (off_t)((uint64_t)page * PAGE + next - 1);   /* the footer's CRC, its last byte */
        char c;
        CHECK(pread(fd, &c, 1, at) == 1);
        c ^= 0x40;
        CHECK(pwrite(fd, &c, 1, at) == 1);
        close(fd);
        unsigned lo = damaged ? 0 : 5;   /* the damaged piece's records */
        struct moved m = { .e = e };
        struct ext_page_info pi;
        CHECK(ext_page_info(e, page, &pi));
        int rc = ext_page_walk(e, page, pi.version, move_fn, &m);
        for (unsigned i = 0; i < 15; i++) CHECK_EQ_U64(m.found[i], (i >= lo && i < lo + 5) ? 0 : 1);
        CHECK(m.others > 0);   /* the filler's pieces after ours */
        /* the damaged piece's records still read: only the footer is hurt */
        for (unsigned i = lo; i < lo + 5; i++) {
            int nk = snprintf(key, sizeof key, "d:%u", i);
            make_value(val, sizeof val, i, 5);
            CHECK(ext_read(e, &loc[i], key, (uint32_t)nk, got, sizeof got) == EXT_HIT);
            CHECK(memcmp(got, val, sizeof val) == 0);
        }
        const struct ext_stats *s = ext_get_stats(e);
        if (!damaged) {
            CHECK_EQ_U64(rc, 0);
            uint64_t lost = 0;
            CHECK(ext_page_drop(e, page, pi.version, &lost));
            CHECK_EQ_U64(lost, 5);
        } else {
            CHECK(rc == -EBADMSG);
            uint32_t v = 0;
            CHECK(ext_compact_pick(e, 1.01, &v) != (int)page);
            CHECK(ext_compact_oldest(e, &v) != (int)page);
            uint64_t reclaimed = atomic_load(&s->pages_reclaimed);
            for (unsigned i = lo; i < lo + 5; i++) {
                int nk = snprintf(key, sizeof key, "d:%u", i);
                ext_delete(e, &loc[i], (uint32_t)nk, sizeof val);
            }
            CHECK_EQ_U64(atomic_load(&s->pages_reclaimed), reclaimed + 1);   /* its last record died */
        }
        ext_close(e);
    }
}

/* A page a value is being streamed from (ext_stream_pin) is the last the
 * disk reuses: the pages around it are evicted, it stays, and its records
 * read as ever; unpinned, it goes as the oldest. When streams hold every
 * closed page a write still gets one (the oldest): a writer never waits
 * for a reader. */
static void test_a_streamed_page_is_reused_last(void)
{
    char err[256] = "";
    struct extstore *e = open_store(4, err);
    CHECK(e != NULL);
    if (!e) return;
    enum { N = 600 };   /* ~1.2 MB into 4 pages of 64 KB: each reused many times */
    static struct ext_locator loc[N];
    char key[32], val[2000];
    const struct ext_stats *s = ext_get_stats(e);
    unsigned i = 0;
    for (; i < 40; i++) {   /* the first page full and closed */
        int nk = snprintf(key, sizeof(key), "st:%u", i);
        make_value(val, sizeof(val), i, 3);
        CHECK(ext_write(e, EXT_BUCKET_DEFAULT, key, (uint32_t)nk, val, sizeof(val), &loc[i]) == 0);
    }
    ext_flush(e, EXT_BUCKET_DEFAULT);
    CHECK(ext_loc_page(&loc[0]) != ext_loc_page(&loc[39]));
    CHECK(ext_stream_pin(e, &loc[0]));
    uint32_t pinned = ext_loc_page(&loc[0]);
    for (; i < 300; i++) {
        int nk = snprintf(key, sizeof(key), "st:%u", i);
        make_value(val, sizeof(val), i, 3);
        CHECK(ext_write(e, EXT_BUCKET_DEFAULT, key, (uint32_t)nk, val, sizeof(val), &loc[i]) == 0);
    }
    uint64_t evicted = atomic_load(&s->pages_evicted);
    CHECK(evicted >= 4);
    /* the pinned page kept its records; one written after it did not */
    CHECK(ext_check(e, &loc[0]));
    char got[2000];
    snprintf(key, sizeof(key), "st:%u", 0);
    make_value(val, sizeof(val), 0, 3);
    CHECK(ext_read(e, &loc[0], key, 4, got, sizeof(got)) == EXT_HIT && !memcmp(got, val, sizeof(val)));
    CHECK(!ext_check(e, &loc[39]));
    /* a pin of a page that went is refused: the stream is a clean miss */
    CHECK(!ext_stream_pin(e, &loc[39]));

    /* unpinned, it is the oldest closed page: the next page needed is it */
    ext_stream_unpin(e, pinned);
    for (; i < 340 && ext_check(e, &loc[0]); i++) {
        int nk = snprintf(key, sizeof(key), "st:%u", i);
        make_value(val, sizeof(val), i, 3);
        CHECK(ext_write(e, EXT_BUCKET_DEFAULT, key, (uint32_t)nk, val, sizeof(val), &loc[i]) == 0);
    }
    CHECK(!ext_check(e, &loc[0]));
    CHECK_EQ_U64(atomic_load(&s->pages_evicted), evicted + 1);

    /* every closed page held by a stream: writes go on, evicting the oldest */
    unsigned held[4], nheld = 0;
    for (unsigned k = 0; k < i; k++) {
        uint32_t pg = ext_loc_page(&loc[k]);
        bool seen = false;
        for (unsigned h = 0; h < nheld; h++) seen |= held[h] == pg;
        if (!seen && ext_check(e, &loc[k]) && ext_stream_pin(e, &loc[k])) held[nheld++] = pg;
    }
    CHECK(nheld >= 3);
    evicted = atomic_load(&s->pages_evicted);
    for (unsigned k = i; i < k + 100; i++) {
        int nk = snprintf(key, sizeof(key), "st:%u", i);
        make_value(val, sizeof(val), i, 3);
        CHECK(ext_write(e, EXT_BUCKET_DEFAULT, key, (uint32_t)nk, val, sizeof(val), &loc[i]) == 0);
    }
    CHECK(atomic_load(&s->pages_evicted) > evicted);
    for (unsigned h = 0; h < nheld; h++) ext_stream_unpin(e, held[h]);
    ext_close(e);
}

/* A streamed record's page freed under it (its records deleted or replaced:
 * a hot large value rewritten while clients read it) stays readable until it
 * is opened again; while a closed page no stream holds can be evicted
 * instead, the next page needed is that one, not the streamed free page. */
static void test_a_streamed_free_page_is_taken_after_unheld_closed_pages(void)
{
    char err[256] = "";
    struct extstore *e = open_store(4, err);
    CHECK(e != NULL);
    if (!e) return;
    const struct ext_stats *s = ext_get_stats(e);
    enum { N = 400 };
    static struct ext_locator loc[N];
    char key[32], val[2000], got[2000];
    unsigned i = 0;
    for (; i < N && atomic_load(&s->pages_free) > 0; i++) {   /* until no page is free */
        int nk = snprintf(key, sizeof(key), "st:%u", i);
        make_value(val, sizeof(val), i, 3);
        CHECK(ext_write(e, EXT_BUCKET_DEFAULT, key, (uint32_t)nk, val, sizeof(val), &loc[i]) == 0);
    }
    ext_flush(e, EXT_BUCKET_DEFAULT);
    uint32_t streamed = ext_loc_page(&loc[0]);
    CHECK(ext_stream_pin(e, &loc[0]));
    for (unsigned k = 0; k < i; k++)
        if (ext_loc_page(&loc[k]) == streamed)
            ext_delete(e, &loc[k], (uint32_t)snprintf(key, sizeof(key), "st:%u", k), sizeof(val));
    CHECK(atomic_load(&s->pages_free) == 1);
    uint64_t evicted = atomic_load(&s->pages_evicted);
    for (unsigned k = i; i < k + 40 && i < N; i++) {
        int nk = snprintf(key, sizeof(key), "st:%u", i);
        make_value(val, sizeof(val), i, 3);
        CHECK(ext_write(e, EXT_BUCKET_DEFAULT, key, (uint32_t)nk, val, sizeof(val), &loc[i]) == 0);
    }
    ext_flush(e, EXT_BUCKET_DEFAULT);
    CHECK(atomic_load(&s->pages_evicted) > evicted);   /* a closed page went instead */
    make_value(val, sizeof(val), 0, 3);
    CHECK(ext_read(e, &loc[0], "st:0", 4, got, sizeof(got)) == EXT_HIT && !memcmp(got, val, sizeof(val)));
    ext_stream_unpin(e, streamed);
    ext_close(e);
}

int main(void)
{
    /* beside the binary: a real filesystem (O_DIRECT), not a tmpfs */
    char self[200];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0) { perror("readlink"); return 2; }
    self[n] = 0;
    snprintf(dir, sizeof(dir), "%s.d", self);
    mkdir(dir, 0700);
    snprintf(path, sizeof(path), "%s/extstore", dir);

    TEST(test_locator_packing);
    TEST(test_open_refuses_bad_paths);
    unlink(path); TEST(test_round_trip_across_pages);
    unlink(path); TEST(test_eviction_makes_old_locators_stale);
    unlink(path); TEST(test_version_rollover);
    unlink(path); TEST(test_damage_on_disk_is_a_miss);
    unlink(path); TEST(test_a_4k_value_is_one_block_read);
    unlink(path); TEST(test_a_value_of_one_block_never_straddles_two);
    unlink(path); TEST(test_delete_and_compaction);
    unlink(path); TEST(test_buckets_fill_their_own_pages);
    unlink(path); TEST(test_concurrent_reads_during_eviction);
    unlink(path); TEST(test_reads_through_io_uring);
    unlink(path); TEST(test_walk_in_pieces_finds_every_record);
    unlink(path); TEST(test_drop_with_a_stale_version_is_refused);
    unlink(path); TEST(test_pick_honours_max_frag);
    unlink(path); TEST(test_damaged_footer_costs_one_piece);
    unlink(path); TEST(test_a_streamed_page_is_reused_last);
    unlink(path); TEST(test_a_streamed_free_page_is_taken_after_unheld_closed_pages);
    unlink(path);
    rmdir(dir);
    return harness_finish();
}
