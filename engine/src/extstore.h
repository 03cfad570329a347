/*
 * extstore.h - the page store under extstore: values of cold items written to
 * pages of files on a local disk, and found again by a 12-byte locator that
 * the item keeps in RAM instead of its value.
 *
 * Why (seed 001): a small part of a cache's memory serves most of its hits,
 * and large values fill most of the rest. Keeping keys and headers in RAM and
 * moving large cold values to NVMe keeps the hit ratio at a fraction of the
 * RAM. This file is only the disk side: pages, buckets, write buffers, reads
 * that can tell a stale or damaged record from a good one, and the
 * accounting compaction and page eviction need. Which items go to disk, and
 * relinking them, belongs to the item layer.
 *
 * On disk (format 2; engine/README.md, "Extstore"): every file is cut into
 * pages of page_size bytes. A page begins with a 4 KiB header block (magic,
 * format, page id, page version, bucket, time it was opened; a warm restart
 * will keep its index there), then pieces back to back, each what one write
 * buffer put there, a multiple of 4 KiB: the values, 8-byte aligned, then
 * the piece's directory (for each record a 24-byte entry: magic and key
 * length, value length, CRC32C of key and value, page version, the value's
 * page offset; then the key), then zeros and a 24-byte footer in the last
 * bytes (magic, page version, the piece's length, where its directory
 * starts, how many records, its own CRC). Why values apart from their keys
 * and headers: a read fetches only the value's blocks, so a 4 KiB value
 * costs one 4 KiB read, not the two its record took with its header in
 * front (format 1). A value that would touch one block more than its length
 * needs starts at the next block: always when it fits in one block, else
 * when that wastes at most 512 bytes (the gap counts as fragmentation). The
 * directory is only for compaction's walk. A restart starts every page
 * empty: nothing on disk is trusted without a locator from this process.
 *
 * A locator packs the page id (16 bits), the page's version when the record
 * was written (20 bits; wraps), and the offset in 8-byte units (28 bits: pages
 * up to 2 GiB) of its value, plus the record's CRC. A page that is evicted or compacted
 * gets a new version, so every locator into its old contents is stale at
 * once, without touching the items. A read is a hit only if the version is
 * still the page's and the CRC32C of the item's key and the value read back
 * is the locator's: a recycled page, another key's value, a torn or flipped
 * record or a short read is a miss, never a wrong value. (After 2^20 reuses
 * of one page a version repeats; the CRC, which covers the key, still
 * stands between a stale locator and a wrong value.)
 *
 * Writes go into the bucket's write buffer (wbuf_size, 4 KiB aligned:
 * values from its start, directory entries down from its end), and the
 * buffer reaches the page as one piece with one O_DIRECT pwrite when it is
 * full or flushed. A locator is valid from the moment of the write: a read of a
 * record still in a buffer is served from memory.
 *
 * Concurrency: one mutex guards the page table, the buckets and their
 * buffers; ext_write, ext_flush, ext_delete and the compaction calls take it
 * (they run on the flusher and compactor threads, not on the request path).
 * ext_read takes it only to check the version and to copy from a write
 * buffer; the pread itself runs without it, and the version is checked again
 * after it, so a page evicted and rewritten during the read gives a miss.
 * A full buffer is written to disk without the lock, too: workers take it
 * for every disk GET, and a multi-megabyte write under it stalled them
 * all. The bucket is marked `writing` meanwhile: its buffer and page stay
 * as they are (reads of its records copy from the buffer, which nothing
 * changes), and the next writer of that bucket waits for the mark to clear.
 * Counters are atomics, read by the stats registry without the lock.
 */
#ifndef CACHET_EXTSTORE_H
#define CACHET_EXTSTORE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define EXT_PAGE_HEADER   4096u            /* the header block of every page */
#define EXT_ALIGN         4096u            /* O_DIRECT offsets, lengths and buffers */
#define EXT_RECORD_HEADER 16u            /* format 1's; still the unit of ext_record_size */
#define EXT_DIR_ENTRY_HEADER 24u         /* a directory entry before its key (format 2) */
#define EXT_PIECE_FOOTER  24u            /* the end of every piece */
#define EXT_MAX_PAGES     65536u           /* the locator's 16-bit page id */
/* The memory formula's bound on extstore.c's struct page (per page of the
 * file, with its stream pins); internal/engine counts the same 88. */
#define EXT_PAGE_STRUCT_BYTES 88u
#define EXT_VERSION_BITS  20u
#define EXT_VERSION_MASK  ((1u << EXT_VERSION_BITS) - 1)
#define EXT_OFFSET_BITS   28u              /* in 8-byte units: pages up to 2 GiB */
#define EXT_MAX_PAGE_SIZE ((uint64_t)8 << EXT_OFFSET_BITS)
#define EXT_MAX_FILES     16u

/* memcached's buckets: where new items go, where compaction puts the live
 * records it rescues, and short-lived items (ext_low_ttl), kept apart so
 * that their pages empty out together. */
enum ext_bucket { EXT_BUCKET_DEFAULT, EXT_BUCKET_COMPACT, EXT_BUCKET_LOWTTL, EXT_BUCKETS };

struct ext_locator {
    uint64_t packed;   /* page id | version | offset/8, see ext_loc_pack */
    uint32_t crc;      /* CRC32C of key and value as written */
} __attribute__((packed));
_Static_assert(sizeof(struct ext_locator) == 12, "the locator an item keeps is 12 bytes");

static inline uint64_t ext_loc_pack(uint32_t page, uint32_t version, uint64_t offset)
{
    return ((uint64_t)page << (EXT_VERSION_BITS + EXT_OFFSET_BITS)) |
           ((uint64_t)(version & EXT_VERSION_MASK) << EXT_OFFSET_BITS) |
           ((offset >> 3) & ((1ull << EXT_OFFSET_BITS) - 1));
}
static inline uint32_t ext_loc_page(const struct ext_locator *l) { return (uint32_t)(l->packed >> (EXT_VERSION_BITS + EXT_OFFSET_BITS)); }
static inline uint32_t ext_loc_version(const struct ext_locator *l) { return (uint32_t)(l->packed >> EXT_OFFSET_BITS) & EXT_VERSION_MASK; }
static inline uint64_t ext_loc_offset(const struct ext_locator *l) { return (l->packed & ((1ull << EXT_OFFSET_BITS) - 1)) << 3; }

struct ext_file_spec {
    const char *path;
    uint64_t size;     /* bytes; rounded down to whole pages */
};

struct ext_conf {
    uint64_t page_size;   /* ext_page_size, bytes (memcached: 64 MB) */
    uint64_t wbuf_size;   /* ext_wbuf_size, bytes (memcached: 4 MB) */
    bool     direct_io;   /* O_DIRECT; false only where the filesystem refuses it (tmpfs) */
};

/* What ext_read found. Everything but EXT_HIT is a miss to the client. */
enum ext_read_result {
    EXT_HIT = 0,
    EXT_MISS_STALE,    /* the page was evicted or compacted since */
    EXT_MISS_BADCRC,   /* the record read back is not the one written */
    EXT_MISS_SHORT,    /* the file ended early (truncated) */
    EXT_MISS_IOERR,    /* the read failed (EIO) */
};

struct ext_stats {
    _Atomic uint64_t bytes_written, objects_written, writes_failed;   /* wbufs to disk */
    _Atomic uint64_t bytes_read, objects_read;
    _Atomic uint64_t miss_stale, miss_badcrc, miss_short, miss_ioerr;
    _Atomic uint64_t pages_evicted, objects_evicted, bytes_evicted;   /* page eviction */
    _Atomic uint64_t pages_reclaimed;            /* pages freed: emptied by deletes, compacted or evicted (memcached's page_reclaims) */
    _Atomic uint64_t page_allocs;                /* pages handed to a bucket, free or evicted */
    _Atomic uint64_t objects_used, bytes_used;   /* live records (written, not deleted or dropped) */
    _Atomic uint64_t bytes_fragmented;           /* page bytes no live value holds: deleted records, block padding */
    _Atomic uint64_t pages_free, pages_open;
    uint64_t pages_total, page_size, limit_bytes;
};

struct extstore;

/* Opens (creating if needed) and sizes every file. On failure returns NULL
 * with a message naming the path and the reason in err: the caller exits 64. */
struct extstore *ext_open(const struct ext_file_spec *files, unsigned nfiles,
                          const struct ext_conf *conf, char *err, size_t errlen);
void ext_close(struct extstore *e);

/* Appends a record to the bucket's write buffer and fills *loc. 0, or
 * -ENOSPC when no page can be had (every page is open in a bucket), or
 * -EIO when writing out a full buffer failed (the record is not stored;
 * the caller keeps the item in RAM or drops it). nkey <= 255. */
int ext_write(struct extstore *e, enum ext_bucket b, const void *key, uint32_t nkey,
              const void *val, uint32_t nval, struct ext_locator *loc);

/* Writes the bucket's buffer out now (the flusher's idle pass). */
int ext_flush(struct extstore *e, enum ext_bucket b);

/* Reads the value behind loc into val (nval bytes) and checks it as the
 * header above says. Thread-safe; blocks for the read. */
enum ext_read_result ext_read(struct extstore *e, const struct ext_locator *loc,
                              const void *key, uint32_t nkey, void *val, uint32_t nval);
/* The same read in two halves, so that a thread can have many in flight at
 * once (ext_batch.c) and the checks stay one code for pread and io_uring.
 * ext_read_prepare takes the lock to check the version and find the record:
 * false means the read is over, *r says how (counted; on a hit from a write
 * buffer the value is in val); true means op is a read of op->len bytes at
 * op->pos of op->fd into an EXT_ALIGN aligned buffer of at least
 * ext_read_buf_size(nval) bytes. The caller reads it (ext_read_pread, or a
 * ring whose result goes through ext_read_fault) and hands what it got
 * (bytes, or -errno) to ext_read_finish, which checks the version again, the
 * length, the header, key and CRC, and counts the result; on a hit *val
 * points at the value inside buf. No lock is held between the two. */
struct ext_read_op {
    int      fd;
    uint64_t pos;        /* file offset, EXT_ALIGN aligned */
    uint32_t len;        /* bytes to read, EXT_ALIGN aligned */
    uint32_t skip;       /* where the record starts in what is read */
    uint32_t page;
};
bool ext_read_prepare(struct extstore *e, const struct ext_locator *loc, const void *key, uint32_t nkey,
                      void *val, uint32_t nval, struct ext_read_op *op, enum ext_read_result *r);
/* preads op from byte `got` on (what a short ring read left) to op->len or
 * the end of the file: the bytes read in all, or -errno */
int64_t ext_read_pread(const struct ext_read_op *op, char *buf, uint64_t got);
/* Test builds: the read fault hook (CACHET_TEST_EXT_FAULTS read=N) applied
 * to a ring completion's result, as ext_read_pread applies it to a pread. */
int32_t ext_read_fault(int32_t res);
enum ext_read_result ext_read_finish(struct extstore *e, const struct ext_read_op *op, const char *buf, int64_t got,
                                     const struct ext_locator *loc, const void *key, uint32_t nkey, uint32_t nval,
                                     const char **val);
/* Bytes [voff, voff+len) of the value behind loc, whose whole record a
 * checked read (above) already found good: the piece a reply sends after
 * its first (ext_io.c sends values over EXT_SEND_PIECE in pieces, so a
 * reply holds one piece of the buffer budget, not the whole value). Blocks
 * for one pread of the piece's aligned range into abuf (EXT_ALIGN aligned,
 * abuf_cap bytes; a range that does not fit is EXT_MISS_IOERR); copied
 * from the write buffer while the record is still there. A page is never
 * rewritten at one version, so the same version before and after the read
 * means these are the bytes the CRC was checked over; anything else is
 * EXT_MISS_STALE. On EXT_HIT *piece points at the bytes (inside abuf).
 * A hit is not counted (the first read counted the record), a failure is. */
enum ext_read_result ext_read_range(struct extstore *e, const struct ext_locator *loc, uint32_t nkey,
                                    uint32_t nval, uint32_t voff, uint32_t len, char *abuf,
                                    uint64_t abuf_cap, const char **piece);
/* A value sent in pieces (ext_io.c) reads each piece from its record's
 * page as its client takes the one before; ext_stream_pin keeps that page
 * from being evicted or reopened meanwhile: a new page is a free one no
 * stream holds, else the oldest closed one no stream holds, and a page whose
 * streams all took no piece for STREAM_PIN_IDLE_S (2 s, up to 3 in whole
 * seconds) is held no more, so a slow client holds its own value's page
 * while it sends, never the disk. When streams hold every page, one of
 * theirs goes anyway: a write never waits for a reader. Pin after
 * the checked read and before the first byte is sent: false means the
 * page went in between (the value is then a clean miss). Touch on each
 * later piece; unpin (page id, ext_loc_page) when the stream ends. */
bool ext_stream_pin(struct extstore *e, const struct ext_locator *loc);
void ext_stream_touch(struct extstore *e, uint32_t page);
void ext_stream_unpin(struct extstore *e, uint32_t page);
/* The buffer a read of a record of up to max_nkey and max_nval bytes needs:
 * the record, rounded out to EXT_ALIGN at both ends (engine/README.md's
 * r(I) = align_up(I + 266, 4 KiB) + 4 KiB for 250-byte keys). */
static inline uint64_t ext_read_buf_size(uint32_t max_nkey, uint32_t max_nval)
{
    return ((EXT_RECORD_HEADER + (uint64_t)max_nkey + max_nval + EXT_ALIGN - 1) & ~(uint64_t)(EXT_ALIGN - 1)) + EXT_ALIGN;
}
/* Frees the calling thread's O_DIRECT read buffer (ext_read keeps one per
 * thread, sized to the largest record it read). Workers that read only to
 * bring a value back call it after each read, so they hold nothing. */
void ext_read_buf_free(void);

/* Whether loc still points into its page's current contents. */
bool ext_check(struct extstore *e, const struct ext_locator *loc);
/* The live records of every page reset so far (evicted, dropped after
 * compaction, or lost to a failed write): the locators into them are
 * orphaned, and ext_check refuses them. Lock-free; callers compare it with
 * what they saw last. */
uint64_t ext_records_orphaned(const struct extstore *e);

/* The item behind loc is gone (deleted, replaced, expired): its bytes count
 * as fragmentation of the page from now on. A stale loc is ignored. */
void ext_delete(struct extstore *e, const struct ext_locator *loc, uint32_t nkey, uint32_t nval);

/* Compaction. ext_compact_pick returns a closed page whose live share of its
 * record bytes is under `under` (the emptiest first), or -1, and its version
 * in *version. ext_page_walk calls fn for every record of that page, as of
 * that version, whose directory entry and CRC check out, with a locator to
 * it (fn compares it with the item's own to tell live records from replaced
 * ones); fn returning non-zero stops the walk and is returned. It reads the
 * page a piece at a time (what one write buffer wrote), from its end, into
 * one buffer of wbuf_size bytes kept for the store's life, and returns -ESTALE if the
 * page is no longer at that version (evicted and reused). A damaged piece
 * footer costs that piece only (the walk finds the footer before it); if no
 * footer below the damage checks out, it returns -EBADMSG: records were not
 * met, so the page must not be dropped, and neither pick returns it again
 * (it goes when its records die, or is evicted when the disk is full). ext_page_drop then
 * gives the page a new version and frees it, unless its version is no longer
 * `version` (false: a page reused since holds records nobody relocated); in
 * *orphaned (if not NULL) the records still live on it, which nobody moved
 * or deleted: their stubs read as misses from then on. */
struct ext_record {
    struct ext_locator loc;
    const void *key;
    uint32_t nkey;
    const void *val;
    uint32_t nval;
};
int ext_compact_pick(struct extstore *e, double under, uint32_t *version);
/* The closed page opened first, or -1; its version in *version. */
int ext_compact_oldest(struct extstore *e, uint32_t *version);
int ext_page_walk(struct extstore *e, uint32_t page, uint32_t version,
                  int (*fn)(void *arg, const struct ext_record *r), void *arg);
bool ext_page_drop(struct extstore *e, uint32_t page, uint32_t version, uint64_t *orphaned);

/* Bytes a record of this key and value counts for on a page (live and
 * fragmented bytes, compaction's share): format 1's header, key and value.
 * Format 2 puts 8 more bytes in the directory entry, and padding, which
 * only the disk space pays for. */
static inline uint64_t ext_record_size(uint32_t nkey, uint32_t nval)
{
    return (EXT_RECORD_HEADER + (uint64_t)nkey + nval + 7) & ~(uint64_t)7;
}
/* The write buffer a record of this key and value needs alone: its value,
 * its directory entry and the piece's footer, in whole 4 KiB blocks. */
static inline uint64_t ext_buffer_need(uint32_t nkey, uint32_t nval)
{
    uint64_t ent = (EXT_DIR_ENTRY_HEADER + (uint64_t)nkey + 7) & ~(uint64_t)7;
    return (((nval + (uint64_t)7) & ~(uint64_t)7) + ent + EXT_PIECE_FOOTER + EXT_ALIGN - 1) & ~(uint64_t)(EXT_ALIGN - 1);
}

const struct ext_stats *ext_get_stats(const struct extstore *e);

/* One page as `stats extstore` shows it; false past the last page. */
struct ext_page_info {
    uint32_t version;
    uint64_t live_bytes;
    int      bucket;        /* open in this bucket, or -1 */
    bool     free;
    int64_t  opened_at;     /* unix seconds it was last opened */
};
bool ext_page_info(struct extstore *e, uint32_t page, struct ext_page_info *out);

/* Unit tests only: the version rollover, without 2^20 page reuses. */
void ext_test_set_version(struct extstore *e, uint32_t page, uint32_t version);

/* CRC32C (Castagnoli); seed 0 for a fresh CRC. The CPU's crc32
 * instruction where it has one, else ext_crc32c_portable (the table; the
 * unit tests check the two agree). */
uint32_t ext_crc32c(uint32_t crc, const void *data, size_t len);
uint32_t ext_crc32c_portable(uint32_t crc, const void *data, size_t len);

#endif
