/*
 * test_outbuf.c - the output queue (outbuf.c) and deferred replies (reply.c)
 * over a real socketpair: bytes leave in request order whatever order the
 * deferred slots complete in, a slot completed on another thread reaches
 * the owner through the completion queue and its eventfd, sending stops in
 * front of a slot still waiting, a cancelled slot is freed when its
 * completion arrives, references are released once sent, a reply can be
 * taken back whole, and no growth ever passes the buffer budget.
 *
 * The "slow source" is a thread that completes slots after a delay, the
 * way an extstore read would.
 */
#include "test_helpers.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bufmem.h"
#include "outbuf.h"
#include "reply.h"

static int sv[2];
static int efd;
static struct reply_queue rq;
static int owner_token;

static void pair_open(int sndbuf)
{
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) < 0) { perror("socketpair"); exit(2); }
    if (sndbuf) setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
    efd = eventfd(0, EFD_NONBLOCK);
    reply_queue_init(&rq, efd);
}

static void pair_close(void)
{
    close(sv[0]);
    close(sv[1]);
    close(efd);
}

/* Reads what the peer has (non-blocking) and appends it to got. */
static size_t drain_peer(char *got, size_t have, size_t cap)
{
    for (;;) {
        ssize_t n = recv(sv[1], got + have, cap - have, MSG_DONTWAIT);
        if (n <= 0) return have;
        have += (size_t)n;
    }
}

/* Waits (bounded) for the completion queue's eventfd, then hands every
 * completed slot to the queue that owns it, as net_conn.c does. Returns how many. */
static int wait_completions(struct outbuf *o, int timeout_ms)
{
    struct pollfd p = { .fd = efd, .events = POLLIN };
    if (poll(&p, 1, timeout_ms) <= 0) return 0;
    uint64_t v;
    ssize_t ignored = read(efd, &v, sizeof(v));
    (void)ignored;
    int n = 0;
    struct reply_handle *h = reply_queue_take(&rq);
    while (h) {
        struct reply_handle *next = reply_handle_next(h);
        if (reply_handle_arrived(h) == NULL) reply_handle_free(h);
        else outbuf_deferred_ready(o, h);
        n++;
        h = next;
    }
    return n;
}

struct completion {
    struct reply_handle *h;
    int delay_ms;
    enum reply_status status;
    const char *bytes;
    struct item_view view;
};

static void *slow_source(void *arg)
{
    struct completion *c = arg;
    usleep((useconds_t)c->delay_ms * 1000);
    reply_complete(c->h, c->status, c->view.ref ? &c->view : NULL, c->bytes, c->bytes ? strlen(c->bytes) : 0);
    return NULL;
}

static struct reply_handle *defer_text(struct outbuf *o, const char *head, const char *tail,
                                       const char *miss, size_t max_bytes)
{
    struct reply_spec s = { .head = head, .nhead = strlen(head), .tail = tail, .ntail = strlen(tail),
                            .miss = miss, .nmiss = strlen(miss), .max_bytes = max_bytes };
    return outbuf_defer(o, &s);
}

static void test_copy_min_is_storage_ref_min(void)
{
    /* outbuf.h relies on storage copying, never referencing, values up to this size */
    CHECK_EQ_U64(OUT_COPY_MIN, ITEM_REF_MIN_BYTES);
}

static void test_deferred_slots_keep_request_order(void)
{
    pair_open(0);
    struct outbuf o;
    outbuf_init(&o, T, &rq, &owner_token);
    outbuf_add(&o, "A;", 2);
    struct reply_handle *h1 = defer_text(&o, "H1[", "]", "M1;", 16);
    outbuf_add(&o, "B;", 2);
    struct reply_handle *h2 = defer_text(&o, "H2[", "];", "M2;", 16);
    outbuf_add(&o, "C;", 2);
    CHECK(h1 && h2);
    CHECK_EQ_U64(o.ndeferred, 2);

    uint64_t written;
    char got[256];
    size_t have = 0;
    CHECK(outbuf_flush(&o, sv[0], &written) == OUT_FLUSH_WAITING);
    have = drain_peer(got, have, sizeof(got));
    CHECK(have == 2 && !memcmp(got, "A;", 2));
    CHECK(outbuf_blocked_on_deferred(&o));

    /* the second slot completes first, on another thread: nothing may pass the first */
    struct completion c2 = { .h = h2, .delay_ms = 1, .status = REPLY_HIT, .bytes = "two" };
    pthread_t t2;
    pthread_create(&t2, NULL, slow_source, &c2);
    CHECK(wait_completions(&o, 5000) == 1);
    pthread_join(t2, NULL);
    CHECK(outbuf_flush(&o, sv[0], &written) == OUT_FLUSH_WAITING);
    have = drain_peer(got, have, sizeof(got));
    CHECK_EQ_U64(have, 2);

    /* the first completes as a miss: everything goes, in request order */
    struct completion c1 = { .h = h1, .delay_ms = 20, .status = REPLY_MISS };
    pthread_t t1;
    pthread_create(&t1, NULL, slow_source, &c1);
    CHECK(wait_completions(&o, 5000) == 1);
    pthread_join(t1, NULL);
    CHECK(outbuf_flush(&o, sv[0], &written) == OUT_FLUSH_DONE);
    have = drain_peer(got, have, sizeof(got));
    const char *want = "A;M1;B;H2[two];C;";
    CHECK_EQ_U64(have, strlen(want));
    CHECK(have == strlen(want) && !memcmp(got, want, have));
    CHECK(outbuf_empty(&o));
    CHECK_EQ_U64(o.ndeferred, 0);
    CHECK_EQ_U64(reply_handles_alive(), 0);
    outbuf_free(&o);
    CHECK_EQ_U64(bufmem_used(), 0);
    pair_close();
}

static void test_bytes_longer_than_promised_are_a_miss(void)
{
    pair_open(0);
    struct outbuf o;
    outbuf_init(&o, T, &rq, &owner_token);
    struct reply_handle *h = defer_text(&o, "VALUE k 0 3\r\n", "\r\n", "", 3);
    reply_complete(h, REPLY_HIT, NULL, "four", 4);   /* more than max_bytes */
    CHECK(wait_completions(&o, 1000) == 1);
    uint64_t written;
    CHECK(outbuf_flush(&o, sv[0], &written) == OUT_FLUSH_DONE);
    CHECK_EQ_U64(written, 0);
    outbuf_free(&o);
    pair_close();
}

static void test_closed_connection_orphans_waiting_slots(void)
{
    pair_open(0);
    struct outbuf o;
    outbuf_init(&o, T, &rq, &owner_token);
    outbuf_add(&o, "x", 1);
    struct reply_handle *h = defer_text(&o, "H", "T", "M", 8);
    CHECK(h != NULL);
    CHECK_EQ_U64(reply_handles_alive(), 1);
    CHECK(bufmem_used() > 0);
    outbuf_free(&o);                   /* the connection closes while the read is in flight */
    CHECK_EQ_U64(reply_handles_alive(), 1);
    struct completion c = { .h = h, .delay_ms = 10, .status = REPLY_HIT, .bytes = "late" };
    pthread_t t;
    pthread_create(&t, NULL, slow_source, &c);
    CHECK(wait_completions(&o, 5000) == 1);   /* arrives with no owner: freed */
    pthread_join(t, NULL);
    CHECK_EQ_U64(reply_handles_alive(), 0);
    CHECK_EQ_U64(bufmem_used(), 0);
    pair_close();
}

/* A value of `size` bytes by reference: storage hands one out when it does
 * not fit the copy room. */
static void get_ref(const char *key, struct item_view *v)
{
    char small[OUT_COPY_MIN];
    bool hit = storage_get(T, key, strlen(key), NULL, small, sizeof(small), v);
    CHECK(hit && v->ref != NULL);
}

static void test_refs_are_sent_in_place_and_released(void)
{
    pair_open(0);
    char big[5001];
    for (int i = 0; i < 5000; i++) big[i] = (char)('a' + i % 26);
    big[5000] = 0;
    CHECK(put("outbuf-big", big) == STORE_STORED);
    struct outbuf o;
    outbuf_init(&o, T, &rq, &owner_token);
    /* a referenced value in a deferred slot, another queued in place */
    struct item_view v1, v2;
    get_ref("outbuf-big", &v1);
    get_ref("outbuf-big", &v2);
    outbuf_add(&o, "<", 1);
    size_t copy_cap;
    CHECK(outbuf_value_room(&o, 16, &copy_cap) && copy_cap >= OUT_COPY_MIN);
    outbuf_push_ref(&o, &v1);
    struct reply_handle *h = defer_text(&o, "[", "]", "", 0);
    outbuf_add(&o, ">", 1);
    struct completion c = { .h = h, .delay_ms = 5, .status = REPLY_HIT, .view = v2 };
    pthread_t t;
    pthread_create(&t, NULL, slow_source, &c);
    CHECK(wait_completions(&o, 5000) == 1);
    pthread_join(t, NULL);
    uint64_t written;
    CHECK(outbuf_flush(&o, sv[0], &written) == OUT_FLUSH_DONE);
    static char got[16384];
    size_t have = drain_peer(got, 0, sizeof(got));
    CHECK_EQ_U64(have, 1 + 5000 + 1 + 5000 + 1 + 1);
    CHECK(got[0] == '<' && !memcmp(got + 1, big, 5000) && got[5001] == '[' &&
          !memcmp(got + 5002, big, 5000) && got[10002] == ']' && got[10003] == '>');
    /* both references were released once sent: only the table's is left */
    CHECK_EQ_U64(atomic_load(item_ref_ptr(v1.ref)), 1);
    struct delete_opts d = {0};
    CHECK(storage_delete(T, "outbuf-big", 10, &d) == STORE_STORED);
    outbuf_free(&o);
    pair_close();
}

static void test_slow_reader_gets_every_byte_in_order(void)
{
    pair_open(4096);
    char big[20001];
    memset(big, 'z', 20000);
    big[20000] = 0;
    CHECK(put("outbuf-slow", big) == STORE_STORED);
    struct outbuf o;
    outbuf_init(&o, T, &rq, &owner_token);
    static char want[1 << 20];
    size_t nwant = 0;
    for (int i = 0; i < 30; i++) {
        char line[64];
        int n = snprintf(line, sizeof(line), "line %d\r\n", i);
        outbuf_add(&o, line, (size_t)n);
        memcpy(want + nwant, line, (size_t)n);
        nwant += (size_t)n;
        size_t copy_cap;
        CHECK(outbuf_value_room(&o, 16, &copy_cap));
        struct item_view v;
        get_ref("outbuf-slow", &v);
        outbuf_push_ref(&o, &v);
        memcpy(want + nwant, big, 20000);
        nwant += 20000;
    }
    static char got[1 << 20];
    size_t have = 0;
    uint64_t written;
    int rounds = 0;
    enum out_flush_result rc;
    while ((rc = outbuf_flush(&o, sv[0], &written)) == OUT_FLUSH_BLOCKED && rounds++ < 100000)
        have = drain_peer(got, have, sizeof(got));
    CHECK(rc == OUT_FLUSH_DONE);
    have = drain_peer(got, have, sizeof(got));
    CHECK_EQ_U64(have, nwant);
    CHECK(have == nwant && !memcmp(got, want, nwant));
    struct delete_opts d = {0};
    CHECK(storage_delete(T, "outbuf-slow", 11, &d) == STORE_STORED);
    outbuf_free(&o);
    pair_close();
}

static void test_rollback_takes_a_reply_back_whole(void)
{
    pair_open(0);
    char big[3001];
    memset(big, 'r', 3000);
    big[3000] = 0;
    CHECK(put("outbuf-rb", big) == STORE_STORED);
    struct outbuf o;
    outbuf_init(&o, T, &rq, &owner_token);
    outbuf_add(&o, "kept\r\n", 6);
    struct out_mark m;
    outbuf_mark(&o, &m);
    size_t before = outbuf_pending(&o);
    outbuf_add(&o, "VALUE ...\r\n", 11);
    struct item_view v;
    get_ref("outbuf-rb", &v);
    size_t copy_cap;
    CHECK(outbuf_value_room(&o, 16, &copy_cap));
    outbuf_push_ref(&o, &v);
    struct reply_handle *h = defer_text(&o, "h", "t", "m", 4);
    CHECK(h != NULL);
    o.failed = true;
    outbuf_rollback(&o, &m);
    CHECK(!o.failed);
    CHECK_EQ_U64(outbuf_pending(&o), before);
    CHECK_EQ_U64(o.ndeferred, 0);
    CHECK_EQ_U64(atomic_load(item_ref_ptr(v.ref)), 1);   /* the rolled-back reference is released */
    /* the cancelled slot's completion still arrives, and frees it */
    reply_complete(h, REPLY_MISS, NULL, NULL, 0);
    CHECK(wait_completions(&o, 1000) == 1);
    CHECK_EQ_U64(reply_handles_alive(), 0);
    uint64_t written;
    CHECK(outbuf_flush(&o, sv[0], &written) == OUT_FLUSH_DONE);
    char got[64];
    size_t have = drain_peer(got, 0, sizeof(got));
    CHECK(have == 6 && !memcmp(got, "kept\r\n", 6));
    struct delete_opts d = {0};
    CHECK(storage_delete(T, "outbuf-rb", 9, &d) == STORE_STORED);
    outbuf_free(&o);
    pair_close();
}

static void test_budget_is_never_exceeded(void)
{
    const size_t limit = 64 * 1024;
    bufmem_set_limit(limit);
    struct outbuf a, b;
    outbuf_init(&a, T, &rq, &owner_token);
    outbuf_init(&b, T, &rq, &owner_token);
    /* resting buffers are not counted; growth is */
    CHECK(outbuf_reserve(&a, 1000));
    CHECK_EQ_U64(bufmem_used(), 0);
    CHECK(outbuf_reserve(&a, 60 * 1024));            /* 16 KiB -> 64 KiB: 48 KiB reserved */
    CHECK_EQ_U64(bufmem_used(), 48 * 1024);
    CHECK(!outbuf_reserve(&b, 40 * 1024));           /* would need 48 KiB more: refused */
    CHECK(b.failed);
    CHECK(bufmem_used() <= limit);
    /* a refused value room is "not now", not a failure */
    CHECK(!outbuf_try_room(&b, 40 * 1024));
    size_t copy_cap;
    struct outbuf c;
    outbuf_init(&c, T, &rq, &owner_token);
    CHECK(outbuf_value_room(&c, 300, &copy_cap) && copy_cap >= OUT_COPY_MIN && copy_cap <= OUT_COPY_MAX);
    CHECK(!c.failed);
    /* deferred slots count too */
    struct reply_handle *hs[8];
    int made = 0;
    for (int i = 0; i < 8; i++) {
        hs[i] = defer_text(&c, "", "", "", 4096);
        if (hs[i]) made++;
    }
    CHECK(made > 0 && made < 8);
    CHECK(bufmem_used() <= limit);
    outbuf_free(&a);
    outbuf_free(&b);
    for (int i = 0; i < made; i++) reply_complete(hs[i], REPLY_MISS, NULL, NULL, 0);
    outbuf_free(&c);
    while (reply_handles_alive() && wait_completions(&c, 1000)) { }
    CHECK_EQ_U64(reply_handles_alive(), 0);
    CHECK_EQ_U64(bufmem_used(), 0);
    bufmem_set_limit(0);
}

static void test_queue_bounds(void)
{
    pair_open(0);
    struct outbuf o;
    outbuf_init(&o, T, &rq, &owner_token);
    /* at most OUT_DEFER_MAX slots per connection */
    struct reply_handle *hs[OUT_DEFER_MAX + 1];
    int made = 0;
    for (int i = 0; i <= OUT_DEFER_MAX; i++) {
        hs[i] = defer_text(&o, "", "", "", 0);
        if (hs[i]) made++;
    }
    CHECK_EQ_U64(made, OUT_DEFER_MAX);
    CHECK(hs[OUT_DEFER_MAX] == NULL);
    for (int i = 0; i < made; i++) reply_complete(hs[i], REPLY_MISS, NULL, NULL, 0);
    while (o.nwaiting && wait_completions(&o, 1000)) { }
    uint64_t written;
    CHECK(outbuf_flush(&o, sv[0], &written) == OUT_FLUSH_DONE);
    CHECK_EQ_U64(reply_handles_alive(), 0);
    /* the buffer never grows past OUT_BUF_MAX */
    CHECK(!outbuf_try_room(&o, OUT_BUF_MAX));
    CHECK(o.cap <= OUT_BUF_MAX);
    outbuf_free(&o);
    pair_close();
}

int main(void)
{
    setup(16, 10, false);
    TEST(test_copy_min_is_storage_ref_min);
    TEST(test_deferred_slots_keep_request_order);
    TEST(test_bytes_longer_than_promised_are_a_miss);
    TEST(test_closed_connection_orphans_waiting_slots);
    TEST(test_refs_are_sent_in_place_and_released);
    TEST(test_slow_reader_gets_every_byte_in_order);
    TEST(test_rollback_takes_a_reply_back_whole);
    TEST(test_budget_is_never_exceeded);
    TEST(test_queue_bounds);
    teardown();
    return harness_finish();
}
