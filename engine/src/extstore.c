/*
 * extstore.c - the page store under extstore (format and concurrency rules:
 * extstore.h). Pages are handed to buckets from a free list; when none is
 * free the oldest closed page is evicted by giving it a new version, which
 * makes every locator into it stale at once.
 */
#include "extstore.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define RECORD_MAGIC   0xCEu       /* top byte of a directory entry's first word */
#define PIECE_MAGIC    0xCAC7E5D1u /* a piece's footer */
#define PAGE_MAGIC     "CACHETXS"
#define FORMAT_VERSION 2u          /* 2: values apart from their directory (extstore.h) */
/* A directory entry: magic and key length, value length, CRC, page version,
 * the value's page offset, then the key; 8-byte aligned. */
#define DIR_ENTRY_HEADER EXT_DIR_ENTRY_HEADER
/* A value that would straddle one more 4 KiB block than its length needs
 * starts at the next block instead, when the gap that leaves is small
 * against what it saves: for a value that fits in one block, a gap of at
 * most a quarter of the value (a 4000-byte value behind anything is one
 * 4 KiB read; a 2100-byte value behind a 2100-byte one is not padded, as
 * that would waste half the disk, which is hit ratio); for a longer value,
 * at most VALUE_PAD_MAX (an eighth of a block, against one block more per
 * read). So padding never takes more than a fifth of the disk. It is
 * counted in extstore_bytes_fragmented (it is disk the values do not use)
 * but not in a page's written bytes: compaction would only write it again. */
#define VALUE_PAD_MAX  (EXT_ALIGN / 8)
/* no page version (those are masked to EXT_VERSION_BITS) */
#define NO_VERSION UINT32_MAX

/* The last bytes of every piece (what one write buffer put on the page). */
struct piece_footer {
    uint32_t magic;
    uint32_t version;           /* the page's, as the records' */
    uint32_t len;               /* the piece's bytes, footer included, EXT_ALIGN aligned */
    uint32_t dir_off;           /* where its directory starts, from the piece's start */
    uint32_t nrec;
    uint32_t crc;               /* CRC32C of the fields above */
};
#define PIECE_FOOTER ((uint64_t)sizeof(struct piece_footer))
_Static_assert(sizeof(struct piece_footer) == EXT_PIECE_FOOTER, "ext_buffer_need counts the footer");

struct page {
    _Atomic uint32_t version;   /* written under the lock, read by ext_read without it */
    /* A page freed (page_free: its last record deleted, or compacted) keeps
     * its bytes until it is opened again: until then a read at the version
     * it had is still good (its CRC checked as ever). A GET that looked up
     * a record just before a SET replaced it and the page was freed gets the
     * value the key held when it asked, not a miss for a key that never
     * went missing. NO_VERSION when the page holds nothing of an old
     * version (never written, evicted, or opened again). Written under the
     * lock, read without it; sequentially consistent, as version is
     * checked after the read it guards. */
    _Atomic uint32_t freed_from;
    int      fd;
    /* Values being streamed from the page (ext_stream_pin) and the second
     * one of them last took a piece (stream_at, CLOCK_MONOTONIC): while a
     * stream advanced within STREAM_PIN_IDLE_S, the page is the last a new
     * page is taken from. Pinned under the lock (against page_open's pick),
     * touched and unpinned without it. */
    _Atomic uint32_t streams;
    uint64_t file_off;          /* where the page starts in its file */
    uint64_t used;              /* bytes of the page handed out, header block included */
    uint64_t written_bytes;     /* record bytes appended (no buffer padding) */
    uint64_t pad_bytes;         /* gaps left before values to keep them off a block boundary */
    uint64_t live_bytes;        /* record bytes not deleted */
    uint64_t live_objs;
    uint64_t seq;               /* when it was opened: the oldest is evicted first */
    int64_t  opened_at;         /* unix seconds it was opened (compaction's "read since written") */
    int      bucket;            /* open in this bucket, or -1 */
    bool     is_free;
    bool     unwalkable;        /* a walk could not reach its first records: compaction leaves it */
    _Atomic uint16_t stream_at; /* seconds, mod 2^16: only "within STREAM_PIN_IDLE_S" is asked of it */
};
_Static_assert(sizeof(struct page) <= EXT_PAGE_STRUCT_BYTES, "a struct page outgrew the memory formula's EXT_PAGE_STRUCT_BYTES");

struct bucket {
    int      page;              /* the page being filled, or -1 */
    char    *wbuf;              /* EXT_ALIGN aligned, wbuf_size bytes: values from the start,
                                 * the directory down from the end */
    uint64_t wbuf_used;         /* end of the values */
    uint64_t dir_used;          /* directory bytes at the buffer's end */
    uint32_t nrec;
    uint64_t wbuf_page_off;     /* page offset the buffer will be written at (aligned) */
    bool     writing;           /* the buffer is being written out, without the lock */
};

/* The header block at the start of every page. A warm restart will add the
 * page's index after it; readers of format 1 ignore the rest of the block. */
struct page_header {
    char     magic[8];
    uint32_t format;
    uint32_t page_id;
    uint32_t version;
    uint32_t bucket;
    uint64_t page_size;
    uint64_t opened_at;         /* unix seconds */
    uint32_t crc;               /* CRC32C of the fields above */
};

struct extstore {
    pthread_mutex_t lock;
    pthread_cond_t  wbuf_written;   /* a bucket's `writing` cleared */
    struct ext_conf conf;
    int fds[EXT_MAX_FILES];
    unsigned nfiles;
    struct page *pages;
    uint32_t npages;
    uint32_t *free_list;        /* stack of free page ids */
    uint32_t nfree;
    uint64_t next_seq;
    struct bucket buckets[EXT_BUCKETS];
    char *header_block;         /* EXT_ALIGN bytes for writing page headers */
    pthread_mutex_t walk_lock;  /* the one walker of walk_buf */
    char *walk_buf;             /* ext_page_walk's piece, wbuf_size bytes, allocated at its first walk */
    struct ext_stats stats;
    _Atomic uint64_t records_orphaned;  /* live records of pages reset (evicted, dropped, failed write) */
};

/* ---- CRC32C ------------------------------------------------------------ */
static uint32_t crc_table[8][256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1)));
        crc_table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc_table[t][i] = (crc_table[t - 1][i] >> 8) ^ crc_table[0][crc_table[t - 1][i] & 0xff];
}

uint32_t ext_crc32c_portable(uint32_t crc, const void *data, size_t len)
{
    pthread_once(&crc_once, crc_init);
    const unsigned char *p = data;
    crc = ~crc;
    /* slicing-by-8: eight table lookups per 8 bytes */
    while (len >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        w ^= crc;
        crc = crc_table[7][w & 0xff] ^ crc_table[6][(w >> 8) & 0xff] ^
              crc_table[5][(w >> 16) & 0xff] ^ crc_table[4][(w >> 24) & 0xff] ^
              crc_table[3][(w >> 32) & 0xff] ^ crc_table[2][(w >> 40) & 0xff] ^
              crc_table[1][(w >> 48) & 0xff] ^ crc_table[0][w >> 56];
        p += 8;
        len -= 8;
    }
    while (len--) crc = (crc >> 8) ^ crc_table[0][(crc ^ *p++) & 0xff];
    return ~crc;
}

/* Every value read from disk and written to it is checksummed: with the
 * table above that was an eighth of a disk-hit GET's CPU. SSE4.2's crc32
 * instruction computes the same CRC32C (Castagnoli, reflected) about five
 * times faster; the CPU is asked once. One stream of it waits for each
 * instruction's result (3 cycles) before the next: it was still 4% of a
 * disk hit's server CPU in a profile. So long inputs run as three streams
 * of STREAM bytes at once, each from a zero register, joined by moving the
 * first two over the bytes that follow them (zeros_op: CRC is linear, so
 * a register advanced over n zero bytes is a fixed table lookup per byte
 * of it), as Mark Adler's crc32c.c does. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define STREAM 256u
static uint32_t zeros_op[4][256];   /* a raw register advanced over STREAM zero bytes */

static void zeros_init(void)
{
    pthread_once(&crc_once, crc_init);
    for (int k = 0; k < 4; k++)
        for (uint32_t v = 0; v < 256; v++) {
            uint32_t reg = v << (8 * k);
            for (unsigned i = 0; i < STREAM; i++) reg = (reg >> 8) ^ crc_table[0][reg & 0xff];
            zeros_op[k][v] = reg;
        }
}

static inline uint32_t over_zeros(uint32_t reg)
{
    return zeros_op[0][reg & 0xff] ^ zeros_op[1][(reg >> 8) & 0xff] ^ zeros_op[2][(reg >> 16) & 0xff] ^
           zeros_op[3][reg >> 24];
}

__attribute__((target("sse4.2")))
static uint32_t crc32c_sse42(uint32_t crc, const void *data, size_t len)
{
    const unsigned char *p = data;
    uint64_t c = ~crc;
    while (len >= 3 * STREAM) {
        uint64_t c1 = 0, c2 = 0;
        for (const unsigned char *end = p + STREAM; p < end; p += 8) {
            uint64_t w0, w1, w2;
            memcpy(&w0, p, 8);
            memcpy(&w1, p + STREAM, 8);
            memcpy(&w2, p + 2 * STREAM, 8);
            c = __builtin_ia32_crc32di(c, w0);
            c1 = __builtin_ia32_crc32di(c1, w1);
            c2 = __builtin_ia32_crc32di(c2, w2);
        }
        c = over_zeros((uint32_t)c) ^ (uint32_t)c1;
        c = over_zeros((uint32_t)c) ^ (uint32_t)c2;
        p += 2 * STREAM;
        len -= 3 * STREAM;
    }
    while (len >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c = __builtin_ia32_crc32di(c, w);
        p += 8;
        len -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (len--) c32 = __builtin_ia32_crc32qi(c32, *p++);
    return ~c32;
}

static uint32_t (*crc_impl)(uint32_t, const void *, size_t);
static pthread_once_t impl_once = PTHREAD_ONCE_INIT;
static void impl_init(void)
{
    __builtin_cpu_init();
    zeros_init();
    crc_impl = __builtin_cpu_supports("sse4.2") ? crc32c_sse42 : ext_crc32c_portable;
}

uint32_t ext_crc32c(uint32_t crc, const void *data, size_t len)
{
    pthread_once(&impl_once, impl_init);
    return crc_impl(crc, data, len);
}
#else
uint32_t ext_crc32c(uint32_t crc, const void *data, size_t len)
{
    return ext_crc32c_portable(crc, data, len);
}
#endif

static uint32_t record_crc(const void *key, uint32_t nkey, const void *val, uint32_t nval)
{
    return ext_crc32c(ext_crc32c(0, key, nkey), val, nval);
}

/* ---- helpers ----------------------------------------------------------- */
static inline uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) & ~(a - 1); }

static void add(_Atomic uint64_t *c, int64_t d)
{
    atomic_fetch_add_explicit(c, (uint64_t)d, memory_order_relaxed);
}

#ifdef CACHET_TEST_HOOKS
/* Test builds only: faults injected where the disk would fail, so the tests
 * can show that a failing disk gives counted misses, never a wrong value or
 * a crash. CACHET_TEST_EXT_FAULTS="read=N,write=M,write_errno=E" fails every
 * Nth read and every Mth buffer write of the page store (EIO, or errno E for
 * writes, e.g. 28 for ENOSPC). Read once, at the first IO. */
static pthread_once_t fault_once = PTHREAD_ONCE_INIT;
static uint64_t fault_read_every, fault_write_every;
static int fault_write_errno = EIO;
static _Atomic uint64_t fault_reads, fault_writes;
static void fault_init(void)
{
    const char *s = getenv("CACHET_TEST_EXT_FAULTS");
    if (!s) return;
    const char *p;
    if ((p = strstr(s, "read="))) fault_read_every = strtoull(p + 5, NULL, 10);
    if ((p = strstr(s, "write="))) fault_write_every = strtoull(p + 6, NULL, 10);
    if ((p = strstr(s, "write_errno="))) fault_write_errno = atoi(p + 12);
}
static bool fault_now(bool write)
{
    pthread_once(&fault_once, fault_init);
    uint64_t every = write ? fault_write_every : fault_read_every;
    if (!every) return false;
    uint64_t n = atomic_fetch_add_explicit(write ? &fault_writes : &fault_reads, 1, memory_order_relaxed) + 1;
    return n % every == 0;
}
#else
static inline bool fault_now(bool write) { (void)write; return false; }
#endif

static ssize_t disk_pread(int fd, void *buf, size_t len, off_t off)
{
    if (fault_now(false)) { errno = EIO; return -1; }
    return pread(fd, buf, len, off);
}

static int write_full(int fd, const void *buf, size_t len, uint64_t off)
{
#ifdef CACHET_TEST_HOOKS
    if (fault_now(true)) return -fault_write_errno;
#endif
    size_t done = 0;
    while (done < len) {
        ssize_t n = pwrite(fd, (const char *)buf + done, len - done, (off_t)(off + done));
        if (n < 0) {
            if (errno == EINTR) continue;
            return -errno;
        }
        if (n == 0) return -ENOSPC;
        done += (size_t)n;
    }
    return 0;
}

/* Whether a locator of `version` still finds its record's bytes on page
 * p: the page has that version, or was freed from it and not opened
 * since. Without the lock after a read (the bytes read are good if this
 * holds after them), or under it. */
static bool version_holds(struct page *p, uint32_t version)
{
    return atomic_load(&p->version) == version || atomic_load(&p->freed_from) == version;
}

/* Gives page p a new version and forgets what it held. Lock held. */
static void page_reset(struct extstore *e, struct page *p, bool evicted)
{
    uint64_t orphaned = p->live_objs;
    if (evicted) {
        add(&e->stats.pages_evicted, 1);
        add(&e->stats.objects_evicted, (int64_t)p->live_objs);
        add(&e->stats.bytes_evicted, (int64_t)p->live_bytes);
    }
    add(&e->stats.objects_used, -(int64_t)p->live_objs);
    add(&e->stats.bytes_used, -(int64_t)p->live_bytes);
    /* what ext_delete added for this page: written minus live, never the
     * padding behind each buffer that `used` also counts */
    add(&e->stats.bytes_fragmented, -(int64_t)(p->written_bytes - p->live_bytes + p->pad_bytes));
    atomic_store_explicit(&p->version, (atomic_load_explicit(&p->version, memory_order_relaxed) + 1) & EXT_VERSION_MASK,
                          memory_order_release);
    /* after the new version: whoever sees the count sees the page stale */
    if (orphaned) atomic_fetch_add_explicit(&e->records_orphaned, orphaned, memory_order_release);
    p->used = 0;
    p->written_bytes = p->live_bytes = p->live_objs = p->pad_bytes = 0;
    p->bucket = -1;
    p->unwalkable = false;
}

/* A closed page back to the free list, counted as memcached counts
 * page_reclaims (every page its _free_page frees). Lock held. */
static void page_free(struct extstore *e, uint32_t id)
{
    struct page *p = &e->pages[id];
    /* before the new version: a reader sees one or the other hold */
    atomic_store(&p->freed_from, atomic_load_explicit(&p->version, memory_order_relaxed));
    page_reset(e, p, false);
    p->is_free = true;
    e->free_list[e->nfree++] = id;
    add(&e->stats.pages_free, 1);
    add(&e->stats.pages_reclaimed, 1);
}

/* How long a stream that takes no piece keeps its page from being reused
 * (page_open): an ordinary client takes a 64 KiB piece within
 * milliseconds (a 600-900 KB value streamed in 8 ms median, 73 ms at most
 * under a churning disk), while the disk may turn a page over every 30 ms.
 * Two seconds is the slow-kick rule's "took no byte for 2 s"
 * (ext_io.c): a client that idle is slow, and only its own value is cut
 * when its page goes. The clock is in whole seconds, so a stream keeps its
 * page for at least 2 s and less than 3 s after its last piece; a client
 * that keeps taking pieces holds its value's page for as long as the value
 * takes to send (a 1 MiB value, 16 pieces, up to ~48 s at that pace), and
 * then only for its next value. */
#define STREAM_PIN_IDLE_S 2u

static uint16_t clock_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint16_t)ts.tv_sec;
}

static bool stream_holds(struct page *p, uint16_t now)
{
    return atomic_load_explicit(&p->streams, memory_order_relaxed) &&
           (uint16_t)(now - atomic_load_explicit(&p->stream_at, memory_order_relaxed)) <= STREAM_PIN_IDLE_S;
}

bool ext_stream_pin(struct extstore *e, const struct ext_locator *loc)
{
    uint32_t id = ext_loc_page(loc);
    if (id >= e->npages) return false;
    struct page *p = &e->pages[id];
    pthread_mutex_lock(&e->lock);
    bool ok = version_holds(p, ext_loc_version(loc));
    if (ok) {
        atomic_store_explicit(&p->stream_at, clock_s(), memory_order_relaxed);
        atomic_fetch_add_explicit(&p->streams, 1, memory_order_relaxed);
    }
    pthread_mutex_unlock(&e->lock);
    return ok;
}

void ext_stream_touch(struct extstore *e, uint32_t page)
{
    if (page < e->npages) atomic_store_explicit(&e->pages[page].stream_at, clock_s(), memory_order_relaxed);
}

void ext_stream_unpin(struct extstore *e, uint32_t page)
{
    if (page < e->npages) atomic_fetch_sub_explicit(&e->pages[page].streams, 1, memory_order_relaxed);
}

/* A page for bucket b: a free one, else the oldest closed one, evicted.
 * Writes its header block. Lock held. */
static int page_open(struct extstore *e, int b)
{
    uint32_t id;
    uint16_t now = clock_s();
    /* A free page no stream reads; else the oldest closed page none reads,
     * evicted (cold values lost to an eviction, as any cache loses them,
     * rather than a value cut in the middle of its reply); only when streams
     * read every candidate, a free page of theirs, else the oldest closed
     * page: their values are cut, since a write never waits for a reader. A
     * free page's bytes stay readable until it is opened again, which is why
     * a stream can still be reading one. */
    int64_t free_at = -1;
    for (int64_t at = (int64_t)e->nfree - 1; at >= 0 && free_at < 0; at--)
        if (!stream_holds(&e->pages[e->free_list[at]], now)) free_at = at;
    int64_t oldest = -1, oldest_unheld = -1;
    if (free_at < 0) {
        for (uint32_t i = 0; i < e->npages; i++) {
            struct page *p = &e->pages[i];
            if (p->bucket >= 0 || p->is_free) continue;
            if (oldest < 0 || p->seq < e->pages[oldest].seq) oldest = i;
            if (!stream_holds(p, now) && (oldest_unheld < 0 || p->seq < e->pages[oldest_unheld].seq)) oldest_unheld = i;
        }
        if (oldest_unheld < 0 && e->nfree > 0) free_at = e->nfree - 1;
    }
    if (free_at >= 0) {
        id = e->free_list[free_at];
        e->free_list[free_at] = e->free_list[--e->nfree];
        add(&e->stats.pages_free, -1);
    } else {
        if (oldest < 0) return -ENOSPC;    /* every page is open in a bucket */
        id = (uint32_t)(oldest_unheld >= 0 ? oldest_unheld : oldest);
        page_reset(e, &e->pages[id], true);
        /* memcached's eviction frees the page too, and counts it there */
        add(&e->stats.pages_reclaimed, 1);
    }
    struct page *p = &e->pages[id];
    /* before anything is written to it: from here its old bytes go */
    atomic_store(&p->freed_from, NO_VERSION);
    p->is_free = false;
    p->bucket = b;
    p->seq = e->next_seq++;
    p->opened_at = (int64_t)time(NULL);
    p->used = EXT_PAGE_HEADER;
    add(&e->stats.pages_open, 1);
    add(&e->stats.page_allocs, 1);

    struct page_header h = { .format = FORMAT_VERSION, .page_id = id,
                             .version = atomic_load_explicit(&p->version, memory_order_relaxed),
                             .bucket = (uint32_t)b, .page_size = e->conf.page_size,
                             .opened_at = (uint64_t)p->opened_at };
    memcpy(h.magic, PAGE_MAGIC, sizeof(h.magic));
    h.crc = ext_crc32c(0, &h, offsetof(struct page_header, crc));
    memset(e->header_block, 0, EXT_ALIGN);
    memcpy(e->header_block, &h, sizeof(h));
    int rc = write_full(p->fd, e->header_block, EXT_ALIGN, p->file_off);
    if (rc < 0) add(&e->stats.writes_failed, 1);
    /* A failed header write costs nothing but the header: records are
     * checked against their locators, never against it (format 1). */
    struct bucket *bk = &e->buckets[b];
    bk->page = (int)id;
    bk->wbuf_used = bk->dir_used = 0;
    bk->nrec = 0;
    bk->wbuf_page_off = EXT_PAGE_HEADER;
    return 0;
}

/* The bucket's page is full: it becomes a closed page, eligible for
 * eviction and compaction. Lock held. */
static void page_close(struct extstore *e, struct bucket *bk)
{
    if (bk->page < 0) return;
    e->pages[bk->page].bucket = -1;
    add(&e->stats.pages_open, -1);
    bk->page = -1;
}

/* Writes the bucket's buffer to its page. On failure every record of the
 * page is dropped (a new version): a locator into it must not find whatever
 * the disk holds there. Lock held; released during the write itself. */
static void wbuf_wait(struct extstore *e, struct bucket *bk)
{
    while (bk->writing) pthread_cond_wait(&e->wbuf_written, &e->lock);
}

/* The bytes a piece of values ending at vend and dir bytes of directory
 * takes on the page. */
static uint64_t piece_len(uint64_t vend, uint64_t dir)
{
    return align_up(align_up(vend, 8) + dir + PIECE_FOOTER, EXT_ALIGN);
}

/* Where in a buffer whose values end at used a value of nval bytes goes. */
static uint64_t value_slot(uint64_t used, uint32_t nval)
{
    uint64_t v = align_up(used, 8), in = v % EXT_ALIGN;
    uint64_t blocks = align_up(in + nval, EXT_ALIGN) / EXT_ALIGN, least = align_up(nval, EXT_ALIGN) / EXT_ALIGN;
    uint64_t gap = EXT_ALIGN - in;
    if (in && blocks > least && gap <= (nval <= EXT_ALIGN ? nval / 4 : VALUE_PAD_MAX)) v = align_up(v, EXT_ALIGN);
    return v;
}

/* The buffer as it goes to disk: its directory moved down behind the
 * values, and the footer at the end of the last block. Readers of values
 * still in the buffer are not disturbed: the values stay where they are. */
static uint64_t wbuf_seal(struct extstore *e, struct bucket *bk)
{
    uint64_t dir_at = align_up(bk->wbuf_used, 8), len = piece_len(bk->wbuf_used, bk->dir_used);
    memset(bk->wbuf + bk->wbuf_used, 0, dir_at - bk->wbuf_used);
    memmove(bk->wbuf + dir_at, bk->wbuf + e->conf.wbuf_size - bk->dir_used, bk->dir_used);
    memset(bk->wbuf + dir_at + bk->dir_used, 0, len - PIECE_FOOTER - dir_at - bk->dir_used);
    struct piece_footer f = { .magic = PIECE_MAGIC,
                              .version = atomic_load_explicit(&e->pages[bk->page].version, memory_order_relaxed),
                              .len = (uint32_t)len, .dir_off = (uint32_t)dir_at, .nrec = bk->nrec };
    f.crc = ext_crc32c(0, &f, offsetof(struct piece_footer, crc));
    memcpy(bk->wbuf + len - PIECE_FOOTER, &f, sizeof f);
    return len;
}

static void wbuf_empty(struct bucket *bk)
{
    bk->wbuf_used = bk->dir_used = 0;
    bk->nrec = 0;
}

static int wbuf_flush(struct extstore *e, struct bucket *bk)
{
    wbuf_wait(e, bk);
    if (bk->page < 0 || bk->nrec == 0) return 0;
    struct page *p = &e->pages[bk->page];
    uint64_t len = wbuf_seal(e, bk);
    /* without the lock (extstore.h): the bucket's buffer, page and offsets
     * stay as they are until `writing` clears */
    int fd = p->fd;
    uint64_t at = p->file_off + bk->wbuf_page_off;
    bk->writing = true;
    pthread_mutex_unlock(&e->lock);
    int rc = write_full(fd, bk->wbuf, len, at);
    pthread_mutex_lock(&e->lock);
    bk->writing = false;
    pthread_cond_broadcast(&e->wbuf_written);
    if (rc < 0) {
        add(&e->stats.writes_failed, 1);
        int b = p->bucket;
        page_reset(e, p, false);
        /* the page stays this bucket's, empty, under its new version */
        p->bucket = b;
        p->seq = e->next_seq++;
        p->used = EXT_PAGE_HEADER;
        wbuf_empty(bk);
        bk->wbuf_page_off = EXT_PAGE_HEADER;
        return rc;
    }
    add(&e->stats.bytes_written, (int64_t)len);
    bk->wbuf_page_off += len;
    wbuf_empty(bk);
    p->used = bk->wbuf_page_off;
    return 0;
}

/* ---- open / close ------------------------------------------------------ */
static int fail(char *err, size_t errlen, const char *fmt, const char *path, int e)
{
    snprintf(err, errlen, fmt, path, strerror(e));
    return -1;
}

struct extstore *ext_open(const struct ext_file_spec *files, unsigned nfiles,
                          const struct ext_conf *conf, char *err, size_t errlen)
{
    if (nfiles == 0 || nfiles > EXT_MAX_FILES) {
        snprintf(err, errlen, "extstore: %u paths given (1 to %u)", nfiles, EXT_MAX_FILES);
        return NULL;
    }
    if (conf->page_size < 2 * EXT_ALIGN || conf->page_size % EXT_ALIGN || conf->page_size > EXT_MAX_PAGE_SIZE) {
        snprintf(err, errlen, "extstore: page size %llu is not a multiple of 4096 between 8 KiB and 2 GiB",
                 (unsigned long long)conf->page_size);
        return NULL;
    }
    if (conf->wbuf_size < EXT_ALIGN || conf->wbuf_size % EXT_ALIGN || conf->wbuf_size > conf->page_size - EXT_PAGE_HEADER) {
        snprintf(err, errlen, "extstore: write buffer size %llu is not a multiple of 4096 of at most a page less its header",
                 (unsigned long long)conf->wbuf_size);
        return NULL;
    }
    struct extstore *e = calloc(1, sizeof(*e));
    if (!e) { snprintf(err, errlen, "extstore: out of memory"); return NULL; }
    pthread_mutex_init(&e->lock, NULL);
    pthread_cond_init(&e->wbuf_written, NULL);
    pthread_mutex_init(&e->walk_lock, NULL);
    e->conf = *conf;
    for (unsigned i = 0; i < EXT_MAX_FILES; i++) e->fds[i] = -1;
    for (int b = 0; b < EXT_BUCKETS; b++) e->buckets[b].page = -1;

    uint64_t total = 0;
    for (unsigned i = 0; i < nfiles; i++) total += files[i].size / conf->page_size;
    if (total < 2) {
        snprintf(err, errlen, "extstore: %s holds fewer than 2 pages of %llu bytes", files[0].path,
                 (unsigned long long)conf->page_size);
        goto out;
    }
    if (total > EXT_MAX_PAGES) {
        snprintf(err, errlen, "extstore: %llu pages is more than %u (use a larger ext_page_size)",
                 (unsigned long long)total, EXT_MAX_PAGES);
        goto out;
    }
    e->pages = calloc(total, sizeof(*e->pages));
    e->free_list = calloc(total, sizeof(*e->free_list));
    if (!e->pages || !e->free_list || posix_memalign((void **)&e->header_block, EXT_ALIGN, EXT_ALIGN)) {
        snprintf(err, errlen, "extstore: out of memory");
        goto out;
    }
    for (int b = 0; b < EXT_BUCKETS; b++)
        if (posix_memalign((void **)&e->buckets[b].wbuf, EXT_ALIGN, conf->wbuf_size)) {
            snprintf(err, errlen, "extstore: no memory for the write buffers");
            goto out;
        }

    for (unsigned i = 0; i < nfiles; i++) {
        const char *path = files[i].path;
        int flags = O_RDWR | O_CREAT | O_CLOEXEC | (conf->direct_io ? O_DIRECT : 0);
        int fd = open(path, flags, 0600);
        if (fd < 0 && errno == EINVAL && conf->direct_io) {
            fail(err, errlen, "extstore: %s: the filesystem refuses O_DIRECT (%s)", path, EINVAL);
            goto out;
        }
        if (fd < 0) { fail(err, errlen, "extstore: cannot open %s: %s", path, errno); goto out; }
        e->fds[e->nfiles++] = fd;
        struct stat st;
        if (fstat(fd, &st) < 0) { fail(err, errlen, "extstore: cannot stat %s: %s", path, errno); goto out; }
        if (!S_ISREG(st.st_mode) && !S_ISBLK(st.st_mode)) {
            snprintf(err, errlen, "extstore: %s is neither a file nor a block device", path);
            goto out;
        }
        uint64_t pages = files[i].size / conf->page_size;
        uint64_t bytes = pages * conf->page_size;
        if (S_ISREG(st.st_mode)) {
            /* Reserve the space now: a disk too small says so at start,
             * not as failed writes later. Then cut off what a previous run
             * with a larger size left. */
            int rc = posix_fallocate(fd, 0, (off_t)bytes);
            if (rc == EOPNOTSUPP || rc == EINVAL) rc = ftruncate(fd, (off_t)bytes) < 0 ? errno : 0;
            if (rc) { fail(err, errlen, "extstore: cannot size %s: %s", path, rc); goto out; }
            if ((uint64_t)st.st_size > bytes && ftruncate(fd, (off_t)bytes) < 0) {
                fail(err, errlen, "extstore: cannot size %s: %s", path, errno);
                goto out;
            }
        }
        for (uint64_t k = 0; k < pages; k++) {
            struct page *p = &e->pages[e->npages];
            p->fd = fd;
            p->file_off = k * conf->page_size;
            p->bucket = -1;
            p->is_free = true;
            atomic_init(&p->freed_from, NO_VERSION);
            e->npages++;
        }
    }
    /* free list popped from the end: hand out page 0 first */
    for (uint32_t i = 0; i < e->npages; i++) e->free_list[i] = e->npages - 1 - i;
    e->nfree = e->npages;
    e->stats.pages_total = e->npages;
    e->stats.page_size = conf->page_size;
    e->stats.limit_bytes = (uint64_t)e->npages * conf->page_size;
    atomic_store(&e->stats.pages_free, e->npages);
    return e;
out:
    ext_close(e);
    return NULL;
}

void ext_close(struct extstore *e)
{
    if (!e) return;
    for (unsigned i = 0; i < EXT_MAX_FILES; i++)
        if (e->fds[i] >= 0) close(e->fds[i]);
    for (int b = 0; b < EXT_BUCKETS; b++) free(e->buckets[b].wbuf);
    free(e->header_block);
    free(e->walk_buf);
    pthread_mutex_destroy(&e->walk_lock);
    free(e->pages);
    free(e->free_list);
    pthread_cond_destroy(&e->wbuf_written);
    pthread_mutex_destroy(&e->lock);
    free(e);
}

/* ---- write ------------------------------------------------------------- */
int ext_write(struct extstore *e, enum ext_bucket b, const void *key, uint32_t nkey,
              const void *val, uint32_t nval, struct ext_locator *loc)
{
    uint64_t rs = ext_record_size(nkey, nval), ent = align_up(DIR_ENTRY_HEADER + nkey, 8);
    if (nkey > 255 || ext_buffer_need(nkey, nval) > e->conf.wbuf_size) return -E2BIG;
    pthread_mutex_lock(&e->lock);
    struct bucket *bk = &e->buckets[b];
    wbuf_wait(e, bk);   /* another thread is writing this buffer out */
    int rc = 0;
    bool room = false;
    uint64_t voff = 0;
    /* at most twice round: a fresh page always has room (ext_buffer_need <= wbuf_size) */
    for (int tries = 0; tries < 2 && !room; tries++) {
        if (bk->page < 0 && (rc = page_open(e, (int)b)) < 0) goto out;
        voff = value_slot(bk->wbuf_used, nval);
        if (piece_len(voff + nval, bk->dir_used + ent) > e->conf.wbuf_size) {
            if ((rc = wbuf_flush(e, bk)) < 0) goto out;
            voff = 0;
        }
        room = bk->wbuf_page_off + piece_len(voff + nval, bk->dir_used + ent) <= e->conf.page_size;
        if (!room) {
            /* no room left on the page: write what is buffered, take another */
            if ((rc = wbuf_flush(e, bk)) < 0) goto out;
            page_close(e, bk);
        }
    }
    if (!room) { rc = -ENOSPC; goto out; }
    struct page *p = &e->pages[bk->page];
    uint32_t version = atomic_load_explicit(&p->version, memory_order_relaxed);
    uint32_t crc = record_crc(key, nkey, val, nval);
    uint64_t at_page = bk->wbuf_page_off + voff;
    uint32_t hdr[DIR_ENTRY_HEADER / 4] = { (RECORD_MAGIC << 24) | nkey, nval, crc, version, (uint32_t)at_page, 0 };
    memset(bk->wbuf + bk->wbuf_used, 0, voff - bk->wbuf_used);
    memcpy(bk->wbuf + voff, val, nval);
    bk->dir_used += ent;
    char *d = bk->wbuf + e->conf.wbuf_size - bk->dir_used;
    memcpy(d, hdr, sizeof hdr);
    memcpy(d + DIR_ENTRY_HEADER, key, nkey);
    memset(d + DIR_ENTRY_HEADER + nkey, 0, ent - DIR_ENTRY_HEADER - nkey);
    loc->packed = ext_loc_pack((uint32_t)bk->page, version, at_page);
    loc->crc = crc;
    /* the gap value_slot left to keep the value off a block boundary (the
     * 8-byte alignment before it is no choice, and was never counted) */
    uint64_t pad = voff - align_up(bk->wbuf_used, 8);
    p->pad_bytes += pad;
    if (pad) add(&e->stats.bytes_fragmented, (int64_t)pad);
    bk->wbuf_used = voff + nval;
    bk->nrec++;
    p->written_bytes += rs;
    p->live_bytes += rs;
    p->live_objs++;
    add(&e->stats.objects_written, 1);
    add(&e->stats.objects_used, 1);
    add(&e->stats.bytes_used, (int64_t)rs);
out:
    pthread_mutex_unlock(&e->lock);
    return rc;
}

int ext_flush(struct extstore *e, enum ext_bucket b)
{
    pthread_mutex_lock(&e->lock);
    int rc = wbuf_flush(e, &e->buckets[b]);
    pthread_mutex_unlock(&e->lock);
    return rc;
}

/* ---- read -------------------------------------------------------------- */
/* Checks one value as read back (from a buffer or the disk): the CRC the
 * locator keeps is of the item's key and the value written, so bytes of
 * another record, another key or a torn write fail it. (Format 1 also
 * compared an on-disk header and key; in format 2 those are in the
 * directory, which a read does not fetch: the page version and this CRC
 * are what stand between a stale locator and a wrong value.) */
static enum ext_read_result value_check(const char *val, const struct ext_locator *loc,
                                        const void *key, uint32_t nkey, uint32_t nval)
{
    return record_crc(key, nkey, val, nval) == loc->crc ? EXT_HIT : EXT_MISS_BADCRC;
}

/* Each reading thread keeps one aligned buffer for O_DIRECT reads, freed
 * when the thread exits (the key's destructor). */
static _Thread_local char *read_buf;
static _Thread_local size_t read_cap;
static pthread_key_t read_buf_key;
static pthread_once_t read_buf_once = PTHREAD_ONCE_INIT;
static void read_buf_key_init(void) { pthread_key_create(&read_buf_key, free); }

void ext_read_buf_free(void)
{
    if (!read_buf) return;
    pthread_setspecific(read_buf_key, NULL);
    free(read_buf);
    read_buf = NULL;
    read_cap = 0;
}

/* bytes_read counts the whole record read (header, key, value), as
 * memcached 1.6.45 counts the whole item it read back */
static enum ext_read_result count(struct extstore *e, enum ext_read_result r, uint64_t record_bytes)
{
    switch (r) {
    case EXT_HIT:         add(&e->stats.objects_read, 1); add(&e->stats.bytes_read, (int64_t)record_bytes); break;
    case EXT_MISS_STALE:  add(&e->stats.miss_stale, 1); break;
    case EXT_MISS_BADCRC: add(&e->stats.miss_badcrc, 1); break;
    case EXT_MISS_SHORT:  add(&e->stats.miss_short, 1); break;
    case EXT_MISS_IOERR:  add(&e->stats.miss_ioerr, 1); break;
    }
    return r;
}

/* Where the value of nval bytes behind loc is (format 2: the locator
 * points at the value itself), as the page table says
 * under the lock: its page re-versioned since (AT_STALE), still in its
 * bucket's write buffer (AT_WBUF, *rec pointing at it; AT_WBUF_TORN when
 * the buffer does not hold all of it), both with the lock still held for
 * the caller's copy, or on disk (AT_DISK: *fd and *base, the page's file
 * and offset in it). Unlocked but for AT_WBUF and AT_WBUF_TORN. */
enum record_at { AT_STALE, AT_WBUF, AT_WBUF_TORN, AT_DISK };
static enum record_at record_locate(struct extstore *e, const struct ext_locator *loc, uint64_t nval,
                                    const char **rec, int *fd, uint64_t *base)
{
    struct page *p = &e->pages[ext_loc_page(loc)];
    uint64_t off = ext_loc_offset(loc);
    pthread_mutex_lock(&e->lock);
    if (!version_holds(p, ext_loc_version(loc))) {
        pthread_mutex_unlock(&e->lock);
        return AT_STALE;
    }
    if (p->bucket >= 0) {
        struct bucket *bk = &e->buckets[p->bucket];
        if (off >= bk->wbuf_page_off) {     /* still in the write buffer */
            if (off + nval > bk->wbuf_page_off + bk->wbuf_used) return AT_WBUF_TORN;
            *rec = bk->wbuf + (off - bk->wbuf_page_off);
            return AT_WBUF;
        }
    }
    *fd = p->fd;
    *base = p->file_off;
    pthread_mutex_unlock(&e->lock);
    return AT_DISK;
}

bool ext_read_prepare(struct extstore *e, const struct ext_locator *loc, const void *key, uint32_t nkey,
                      void *val, uint32_t nval, struct ext_read_op *op, enum ext_read_result *r)
{
    uint32_t id = ext_loc_page(loc);
    uint64_t off = ext_loc_offset(loc), rs = ext_record_size(nkey, nval);
    if (id >= e->npages || off + nval > e->conf.page_size) { *r = count(e, EXT_MISS_BADCRC, 0); return false; }
    const char *v = NULL;
    int fd = -1;
    uint64_t base = 0;
    switch (record_locate(e, loc, nval, &v, &fd, &base)) {
    case AT_STALE:
        *r = count(e, EXT_MISS_STALE, 0);
        return false;
    case AT_WBUF_TORN:
    case AT_WBUF: {
        enum ext_read_result res = v ? value_check(v, loc, key, nkey, nval) : EXT_MISS_BADCRC;
        if (res == EXT_HIT) memcpy(val, v, nval);
        pthread_mutex_unlock(&e->lock);
        *r = count(e, res, rs);
        return false;
    }
    case AT_DISK:
        break;
    }
    uint64_t start = off & ~(uint64_t)(EXT_ALIGN - 1);
    *op = (struct ext_read_op){ .fd = fd, .pos = base + start,
                                .len = (uint32_t)(align_up(off + nval, EXT_ALIGN) - start),
                                .skip = (uint32_t)(off - start), .page = id };
    return true;
}

int64_t ext_read_pread(const struct ext_read_op *op, char *buf, uint64_t got)
{
    while (got < op->len) {
        ssize_t n = disk_pread(op->fd, buf + got, op->len - got, (off_t)(op->pos + got));
        if (n < 0) {
            if (errno == EINTR) continue;
            return -errno;
        }
        if (n == 0) break;
        got += (uint64_t)n;
    }
    return (int64_t)got;
}

int32_t ext_read_fault(int32_t res)
{
    return fault_now(false) ? -EIO : res;
}

enum ext_read_result ext_read_finish(struct extstore *e, const struct ext_read_op *op, const char *buf, int64_t got,
                                     const struct ext_locator *loc, const void *key, uint32_t nkey, uint32_t nval,
                                     const char **val)
{
    if (got < 0) return count(e, EXT_MISS_IOERR, 0);
    if ((uint64_t)got < (uint64_t)op->skip + nval) return count(e, EXT_MISS_SHORT, 0);
    /* evicted or compacted while the read was in flight: what was read may
     * already be another record */
    if (!version_holds(&e->pages[op->page], ext_loc_version(loc))) return count(e, EXT_MISS_STALE, 0);
    const char *v = buf + op->skip;
    enum ext_read_result r = value_check(v, loc, key, nkey, nval);
    if (r == EXT_HIT) *val = v;
    return count(e, r, ext_record_size(nkey, nval));
}

enum ext_read_result ext_read_range(struct extstore *e, const struct ext_locator *loc, uint32_t nkey,
                                    uint32_t nval, uint32_t voff, uint32_t len, char *abuf,
                                    uint64_t abuf_cap, const char **piece)
{
    uint32_t id = ext_loc_page(loc);
    uint64_t off = ext_loc_offset(loc);
    (void)nkey;
    if (id >= e->npages || off + nval > e->conf.page_size || voff > nval || len > nval - voff)
        return EXT_MISS_BADCRC;
    uint64_t from = off + voff;   /* within the page: format 2's locator points at the value */
    const char *rec = NULL;
    int fd = -1;
    uint64_t base = 0;
    switch (record_locate(e, loc, nval, &rec, &fd, &base)) {
    case AT_STALE:
        return count(e, EXT_MISS_STALE, 0);
    case AT_WBUF_TORN:
    case AT_WBUF: {
        bool fits = rec && len <= abuf_cap;
        if (fits) memcpy(abuf, rec + (from - off), len);
        pthread_mutex_unlock(&e->lock);
        if (!fits) return count(e, EXT_MISS_STALE, 0);
        *piece = abuf;
        return EXT_HIT;
    }
    case AT_DISK:
        break;
    }
    uint64_t start = from & ~(uint64_t)(EXT_ALIGN - 1);
    uint64_t span = align_up(from + len, EXT_ALIGN) - start;
    if (span > abuf_cap || span > UINT32_MAX) return count(e, EXT_MISS_IOERR, 0);
    struct ext_read_op op = { .fd = fd, .pos = base + start, .len = (uint32_t)span,
                              .skip = (uint32_t)(from - start), .page = id };
    int64_t got = ext_read_pread(&op, abuf, 0);
    /* a failed piece counts as the failed read it is (extstore_read_errors) */
    if (got < 0) return count(e, EXT_MISS_IOERR, 0);
    if ((uint64_t)got < op.skip + (uint64_t)len) return count(e, EXT_MISS_SHORT, 0);
    if (!version_holds(&e->pages[id], ext_loc_version(loc))) return count(e, EXT_MISS_STALE, 0);
    *piece = abuf + op.skip;
    return EXT_HIT;
}

enum ext_read_result ext_read(struct extstore *e, const struct ext_locator *loc,
                              const void *key, uint32_t nkey, void *val, uint32_t nval)
{
    struct ext_read_op op;
    enum ext_read_result r;
    if (!ext_read_prepare(e, loc, key, nkey, val, nval, &op, &r)) return r;
    if (op.len > read_cap) {
        free(read_buf);
        read_buf = NULL;
        read_cap = 0;
        pthread_once(&read_buf_once, read_buf_key_init);
        pthread_setspecific(read_buf_key, NULL);
        if (posix_memalign((void **)&read_buf, EXT_ALIGN, op.len)) return count(e, EXT_MISS_IOERR, 0);
        read_cap = op.len;
        pthread_setspecific(read_buf_key, read_buf);
    }
    const char *v = NULL;
    r = ext_read_finish(e, &op, read_buf, ext_read_pread(&op, read_buf, 0), loc, key, nkey, nval, &v);
    if (r == EXT_HIT) memcpy(val, v, nval);
    return r;
}

bool ext_check(struct extstore *e, const struct ext_locator *loc)
{
    uint32_t id = ext_loc_page(loc);
    return id < e->npages &&
           atomic_load_explicit(&e->pages[id].version, memory_order_acquire) == ext_loc_version(loc);
}

uint64_t ext_records_orphaned(const struct extstore *e)
{
    return atomic_load_explicit(&e->records_orphaned, memory_order_acquire);
}

void ext_delete(struct extstore *e, const struct ext_locator *loc, uint32_t nkey, uint32_t nval)
{
    uint32_t id = ext_loc_page(loc);
    uint64_t rs = ext_record_size(nkey, nval);
    if (id >= e->npages) return;
    pthread_mutex_lock(&e->lock);
    struct page *p = &e->pages[id];
    if (atomic_load_explicit(&p->version, memory_order_relaxed) == ext_loc_version(loc) &&
        p->live_objs > 0 && p->live_bytes >= rs) {
        p->live_objs--;
        p->live_bytes -= rs;
        add(&e->stats.objects_used, -1);
        add(&e->stats.bytes_used, -(int64_t)rs);
        add(&e->stats.bytes_fragmented, (int64_t)rs);
        /* a closed page whose last record died is free again, as in
         * memcached 1.6.45 (extstore_delete): no compaction needed for a
         * page nothing points into any more. A read of one of its dead
         * records still in flight (a GET that looked up the value a SET
         * then replaced) still finds it until the page is opened again
         * (freed_from): the value the key held when it was asked for. */
        if (!p->live_objs && !p->is_free && p->bucket < 0) page_free(e, id);
    }
    pthread_mutex_unlock(&e->lock);
}

/* ---- compaction -------------------------------------------------------- */
int ext_compact_pick(struct extstore *e, double under, uint32_t *version)
{
    int best = -1;
    double best_share = under;
    pthread_mutex_lock(&e->lock);
    for (uint32_t i = 0; i < e->npages; i++) {
        const struct page *p = &e->pages[i];
        if (p->is_free || p->bucket >= 0 || p->used <= EXT_PAGE_HEADER || p->unwalkable) continue;
        double share = p->written_bytes ? (double)p->live_bytes / (double)p->written_bytes : 0.0;
        if (share < best_share) {
            best_share = share;
            best = (int)i;
            if (version) *version = atomic_load_explicit(&p->version, memory_order_relaxed);
        }
    }
    pthread_mutex_unlock(&e->lock);
    return best;
}

int ext_compact_oldest(struct extstore *e, uint32_t *version)
{
    int best = -1;
    uint64_t best_seq = UINT64_MAX;
    pthread_mutex_lock(&e->lock);
    for (uint32_t i = 0; i < e->npages; i++) {
        const struct page *p = &e->pages[i];
        if (p->is_free || p->bucket >= 0 || p->used <= EXT_PAGE_HEADER || p->unwalkable || p->seq >= best_seq)
            continue;
        best_seq = p->seq;
        best = (int)i;
        *version = atomic_load_explicit(&p->version, memory_order_relaxed);
    }
    pthread_mutex_unlock(&e->lock);
    return best;
}

/* Reads len bytes at page offset off of page p into buf: the bytes read,
 * or -errno. */
static int64_t walk_read(int fd, uint64_t base, char *buf, uint64_t off, uint64_t len)
{
    struct ext_read_op op = { .fd = fd, .pos = base + off, .len = (uint32_t)len };
    return ext_read_pread(&op, buf, 0);
}

/* A page is a header block, then pieces back to back, each what one write
 * buffer put there: values, its directory, and a footer in its last bytes
 * saying how long the piece is. So the walk goes backwards from the page's
 * end, a piece at a time: the footer's block first, then the piece (at
 * most wbuf_size bytes) into one buffer kept for the store's life
 * (walk_buf); compaction runs on one thread, and walk_lock keeps a second
 * walker (tests) off it. A footer that does not check out (damage, a short
 * read) costs only its own piece: the walk steps back a block at a time to
 * the previous footer that does (its CRC, the page version, a length that
 * fits) and goes on from there, as format 1 skipped to the next block. The
 * damaged piece's records are not met; still live, they are counted lost
 * when the page is dropped. If the steps reach the header block without a
 * footer, the records below the damage were never met: the walk returns
 * -EBADMSG and marks the page unwalkable, so compaction neither drops it
 * (that would lose records that read fine, since a read needs only its
 * locator) nor picks it again; it stays until its records are deleted or
 * expire, or the disk fills and evicts it as the oldest (objects_evicted).
 * A footer forged inside a damaged piece's values would need the page's
 * version and a valid CRC; at worst it hides the pieces it spans. */
int ext_page_walk(struct extstore *e, uint32_t page, uint32_t version,
                  int (*fn)(void *arg, const struct ext_record *r), void *arg)
{
    if (page >= e->npages) return -EINVAL;
    version &= EXT_VERSION_MASK;
    pthread_mutex_lock(&e->lock);
    struct page *p = &e->pages[page];
    bool same = atomic_load_explicit(&p->version, memory_order_relaxed) == version;
    uint64_t used = p->used;
    bool closed = !p->is_free && p->bucket < 0;
    int fd = p->fd;
    uint64_t base = p->file_off;
    pthread_mutex_unlock(&e->lock);
    if (!same) return -ESTALE;
    if (!closed || used <= EXT_PAGE_HEADER) return 0;

    const uint64_t piece = e->conf.wbuf_size;
    pthread_mutex_lock(&e->walk_lock);
    if (!e->walk_buf && posix_memalign((void **)&e->walk_buf, EXT_ALIGN, piece)) {
        e->walk_buf = NULL;
        pthread_mutex_unlock(&e->walk_lock);
        return -ENOMEM;
    }
    char *buf = e->walk_buf;
    int rc = 0;
    uint64_t end = used;
    bool damaged = false;   /* the blocks just below `end` are not a piece that checked out */
    while (rc == 0 && end >= EXT_PAGE_HEADER + EXT_ALIGN) {
        int64_t got = walk_read(fd, base, buf, end - EXT_ALIGN, EXT_ALIGN);
        if (got < 0) { rc = (int)got; break; }
        struct piece_footer f;
        memcpy(&f, buf + EXT_ALIGN - PIECE_FOOTER, sizeof f);
        if (got < EXT_ALIGN || f.magic != PIECE_MAGIC || f.version != version ||
            f.crc != ext_crc32c(0, &f, offsetof(struct piece_footer, crc)) || f.len % EXT_ALIGN || f.len < EXT_ALIGN ||
            f.len > piece || f.len > end - EXT_PAGE_HEADER || f.dir_off > f.len - PIECE_FOOTER) {
            damaged = true;
            end -= EXT_ALIGN;
            continue;
        }
        uint64_t start = end - f.len;
        if (f.len > EXT_ALIGN) {   /* else the block just read is the piece */
            got = walk_read(fd, base, buf, start, f.len);
            if (got < 0) { rc = (int)got; break; }
            if ((uint64_t)got < f.len) {
                damaged = true;
                end -= EXT_ALIGN;
                continue;
            }
        }
        damaged = false;
        /* evicted while we read: the rest is another page's now */
        if (atomic_load_explicit(&p->version, memory_order_acquire) != version) {
            rc = -ESTALE;
            break;
        }
        uint64_t at = f.dir_off, dir_end = f.len - PIECE_FOOTER;
        for (uint32_t i = 0; i < f.nrec && at + DIR_ENTRY_HEADER <= dir_end; i++) {
            uint32_t hdr[DIR_ENTRY_HEADER / 4];
            memcpy(hdr, buf + at, sizeof hdr);
            uint32_t nkey = hdr[0] & 0xffffu, nval = hdr[1];
            uint64_t ent = align_up(DIR_ENTRY_HEADER + nkey, 8), voff = hdr[4];
            if ((hdr[0] >> 24) != RECORD_MAGIC || nkey > 255 || hdr[3] != version || at + ent > dir_end ||
                voff < start || voff % 8 || voff - start + nval > f.dir_off)
                break;   /* damage: the rest of this directory is not trusted */
            const char *k = buf + at + DIR_ENTRY_HEADER, *v = buf + (voff - start);
            at += ent;
            struct ext_record r = { .loc = { ext_loc_pack(page, version, voff), hdr[2] },
                                    .key = k, .nkey = nkey, .val = v, .nval = nval };
            if (record_crc(k, nkey, v, nval) == hdr[2] && (rc = fn(arg, &r)) != 0) break;
        }
        end = start;
    }
    pthread_mutex_unlock(&e->walk_lock);
    if (rc == 0 && damaged) {
        pthread_mutex_lock(&e->lock);
        if (atomic_load_explicit(&p->version, memory_order_relaxed) == version) {
            p->unwalkable = true;
            rc = -EBADMSG;
        } else {
            rc = -ESTALE;
        }
        pthread_mutex_unlock(&e->lock);
    }
    /* if the page was evicted meanwhile, the records handed out are stale:
     * the caller's relinking compares locators, and these no longer match */
    return rc;
}

/* Refused (false) unless the page still has the version the caller walked:
 * a page evicted and reused since holds records nobody relocated. */
bool ext_page_drop(struct extstore *e, uint32_t page, uint32_t version, uint64_t *orphaned)
{
    if (orphaned) *orphaned = 0;
    if (page >= e->npages) return false;
    pthread_mutex_lock(&e->lock);
    struct page *p = &e->pages[page];
    bool ok = !p->is_free && p->bucket < 0 &&
              atomic_load_explicit(&p->version, memory_order_relaxed) == (version & EXT_VERSION_MASK);
    if (ok) {
        if (orphaned) *orphaned = p->live_objs;
        page_free(e, page);
    }
    pthread_mutex_unlock(&e->lock);
    return ok;
}

const struct ext_stats *ext_get_stats(const struct extstore *e) { return &e->stats; }

void ext_test_set_version(struct extstore *e, uint32_t page, uint32_t version)
{
    pthread_mutex_lock(&e->lock);
    if (page < e->npages) atomic_store(&e->pages[page].version, version & EXT_VERSION_MASK);
    pthread_mutex_unlock(&e->lock);
}

bool ext_page_info(struct extstore *e, uint32_t page, struct ext_page_info *out)
{
    pthread_mutex_lock(&e->lock);
    bool ok = page < e->npages;
    if (ok) {
        const struct page *p = &e->pages[page];
        *out = (struct ext_page_info){ atomic_load_explicit(&p->version, memory_order_relaxed), p->live_bytes,
                                       p->bucket, p->is_free, p->opened_at };
    }
    pthread_mutex_unlock(&e->lock);
    return ok;
}
