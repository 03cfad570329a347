/*
 * test_metrics.c - the metrics port's pure parts: the HTTP request-head
 * parser, the latency histogram's buckets and recording, the Prometheus
 * rendering (from the real registry and from a table of stats, for stats no
 * layer emits yet such as extstore's), and the engine probe's failure paths
 * against real sockets. The HTTP server itself is tested against a live
 * cachetd in tests/protocol/test_metrics.py.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "engine_probe.h"
#include "harness.h"
#include "http.h"
#include "latency.h"
#include "metrics.h"
#include "proto_parser.h"
#include "storage.h"

/* ---------------------------------------------------------------- http */

static enum http_parse_result parse(const char *s, struct http_request *r)
{
    return http_parse_request(s, strlen(s), r);
}

static bool path_is(const struct http_request *r, const char *p)
{
    return r->path_len == strlen(p) && !memcmp(r->path, p, r->path_len);
}

static void test_http_valid_requests(void)
{
    struct http_request r;
    CHECK(parse("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", &r) == HTTP_PARSED);
    CHECK(r.method == HTTP_GET && path_is(&r, "/metrics") && r.keep_alive);
    CHECK_EQ_U64(r.head_len, strlen("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"));
    CHECK(parse("HEAD /healthz?verbose=1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", &r) == HTTP_PARSED);
    CHECK(r.method == HTTP_HEAD && path_is(&r, "/healthz") && !r.keep_alive);
    /* 1.0 closes unless asked; bare LF line ends; leading empty line */
    CHECK(parse("GET / HTTP/1.0\n\n", &r) == HTTP_PARSED && !r.keep_alive && path_is(&r, "/"));
    CHECK(parse("\r\nGET /metrics HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n", &r) == HTTP_PARSED && r.keep_alive);
    CHECK(parse("GET http://pod:9150/metrics#x HTTP/1.1\r\nHost: pod\r\n\r\n", &r) == HTTP_PARSED && path_is(&r, "/metrics"));
    CHECK(parse("POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n", &r) == HTTP_PARSED && r.method == HTTP_OTHER);
    CHECK(parse("GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: upgrade, close\r\n\r\n", &r) == HTTP_PARSED && !r.keep_alive);
    /* a pipelined second request is left for the next call */
    const char *two = "GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\n";
    CHECK(parse(two, &r) == HTTP_PARSED && path_is(&r, "/a"));
    CHECK(http_parse_request(two + r.head_len, strlen(two) - r.head_len, &r) == HTTP_PARSED && path_is(&r, "/b"));
}

static void test_http_incomplete_and_refused(void)
{
    struct http_request r;
    CHECK(parse("GET /metrics HTTP/1.1\r\nHost: x\r\n", &r) == HTTP_INCOMPLETE);
    CHECK(parse("GET /met", &r) == HTTP_INCOMPLETE);
    CHECK(parse("", &r) == HTTP_INCOMPLETE);
    CHECK(parse("HELLO\r\n\r\n", &r) == HTTP_BAD_REQUEST && r.reason);
    CHECK(parse("GET  /metrics HTTP/1.1\r\nHost: x\r\n\r\n", &r) == HTTP_BAD_REQUEST);
    CHECK(parse("GET metrics HTTP/1.1\r\nHost: x\r\n\r\n", &r) == HTTP_BAD_REQUEST);
    CHECK(parse("GET /metrics HTTP/1.1\r\n\r\n", &r) == HTTP_BAD_REQUEST);              /* no Host */
    CHECK(parse("GET /metrics HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", &r) == HTTP_BAD_REQUEST);
    CHECK(parse("GET /metrics HTTP/2.0\r\nHost: x\r\n\r\n", &r) == HTTP_BAD_VERSION);
    CHECK(parse("GET /metrics HTTP/1.1x\r\nHost: x\r\n\r\n", &r) == HTTP_BAD_REQUEST);
    CHECK(parse("GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello", &r) == HTTP_BAD_REQUEST);
    CHECK(parse("GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 1x\r\n\r\n", &r) == HTTP_BAD_REQUEST);
    CHECK(parse("GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nContent-Length: 0\r\n\r\n", &r) == HTTP_BAD_REQUEST);
    CHECK(parse("GET /metrics HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n", &r) == HTTP_BAD_REQUEST);
    CHECK(parse("GET /metrics HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n", &r) == HTTP_BAD_REQUEST);
    CHECK(parse("GET /metrics HTTP/1.1\r\nHost : x\r\n\r\n", &r) == HTTP_BAD_REQUEST);
    CHECK(parse("GET /me\x01trics HTTP/1.1\r\nHost: x\r\n\r\n", &r) == HTTP_BAD_REQUEST);
    CHECK(parse("GET /metrics HTTP/1.1\r\nHost: x\ry\r\n\r\n", &r) == HTTP_BAD_REQUEST);
    static const char nul[] = "GET / HTTP/1.1\r\nHost: x\r\n\0\r\n\r\n";
    CHECK(http_parse_request(nul, sizeof nul - 1, &r) == HTTP_BAD_REQUEST);
}

static void test_http_size_limits(void)
{
    struct http_request r;
    static char big[HTTP_HEAD_MAX + 64];
    /* no end of head within the limit: refused, not waited for */
    size_t n = (size_t)snprintf(big, sizeof big, "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Pad: ");
    memset(big + n, 'a', sizeof big - n - 1);
    big[sizeof big - 1] = '\0';
    CHECK(http_parse_request(big, HTTP_HEAD_MAX, &r) == HTTP_HEAD_TOO_LARGE);
    CHECK(http_parse_request(big, HTTP_HEAD_MAX - 1, &r) == HTTP_INCOMPLETE);
    /* a complete head that is one byte too long */
    memcpy(big + HTTP_HEAD_MAX - 3, "\r\n\r\n", 4);
    CHECK(http_parse_request(big, HTTP_HEAD_MAX + 1, &r) == HTTP_HEAD_TOO_LARGE);
    memcpy(big + HTTP_HEAD_MAX - 4, "\r\n\r\n", 4);
    CHECK(http_parse_request(big, HTTP_HEAD_MAX, &r) == HTTP_PARSED);
    /* too many header fields */
    n = (size_t)snprintf(big, sizeof big, "GET / HTTP/1.1\r\nHost: x\r\n");
    for (int i = 0; i < HTTP_HEADERS_MAX; i++) n += (size_t)snprintf(big + n, sizeof big - n, "A: b\r\n");
    n += (size_t)snprintf(big + n, sizeof big - n, "\r\n");
    CHECK(http_parse_request(big, n, &r) == HTTP_HEAD_TOO_LARGE);
    /* a long target */
    n = (size_t)snprintf(big, sizeof big, "GET /");
    memset(big + n, 'a', 3000);
    n += 3000;
    n += (size_t)snprintf(big + n, sizeof big - n, " HTTP/1.1\r\nHost: x\r\n\r\n");
    CHECK(http_parse_request(big, n, &r) == HTTP_BAD_REQUEST);
}

/* ------------------------------------------------------------- latency */

static void test_latency_buckets(void)
{
    CHECK_EQ_U64(latency_bucket_of(0), 0);
    CHECK_EQ_U64(latency_bucket_of(250), 0);                 /* le is inclusive */
    CHECK_EQ_U64(latency_bucket_of(251), 1);
    CHECK_EQ_U64(latency_bucket_of(1000), 2);
    CHECK_EQ_U64(latency_bucket_of(1001), 3);
    CHECK_EQ_U64(latency_bucket_of(2500000000u), LATENCY_BUCKETS - 2);
    CHECK_EQ_U64(latency_bucket_of(2500000001u), LATENCY_BUCKETS - 1);
    CHECK_EQ_U64(latency_bucket_of(UINT64_MAX), LATENCY_BUCKETS - 1);
    for (int i = 0; i + 1 < LATENCY_BUCKETS - 1; i++) {
        CHECK(latency_bucket_bound_ns(i) < latency_bucket_bound_ns(i + 1));
        CHECK_EQ_U64(latency_bucket_of(latency_bucket_bound_ns(i)), i);
        CHECK_EQ_U64(latency_bucket_of(latency_bucket_bound_ns(i) + 1), i + 1);
    }
    CHECK(latency_command_name(CMD_GET) && !strcmp(latency_command_name(CMD_GET), "get"));
    CHECK(latency_command_name(CMD_MN) && !strcmp(latency_command_name(CMD_MN), "mn"));
    CHECK(latency_command_name(CMD_NONE) == NULL);
    CHECK(latency_command_name(LATENCY_COMMANDS) == NULL);
}

struct captured { char names[256][48]; unsigned long long values[256]; int n; };

static void capture(void *ctx, const char *name, const char *fmt, ...)
{
    struct captured *c = ctx;
    if (c->n >= 256) return;
    va_list ap;
    va_start(ap, fmt);
    char v[64];
    vsnprintf(v, sizeof v, fmt, ap);
    va_end(ap);
    snprintf(c->names[c->n], sizeof c->names[0], "%s", name);
    c->values[c->n++] = strtoull(v, NULL, 10);
}

static unsigned long long captured_value(const struct captured *c, const char *name)
{
    for (int i = 0; i < c->n; i++) if (!strcmp(c->names[i], name)) return c->values[i];
    return ~0ULL;
}

static void test_latency_recording(void)
{
    latency_note(0, CMD_GET);           /* recording off: no recorder, nothing happens */
    latency_batch_end(0);
    CHECK(latency_init(2) == 0);
    /* worker 0: a batch of 3 gets and a set; worker 1: 2 gets */
    latency_note(0, CMD_GET); latency_note(0, CMD_GET); latency_note(0, CMD_SET); latency_note(0, CMD_GET);
    latency_batch_end(0);
    latency_note(1, CMD_GET); latency_note(1, CMD_GET);
    latency_batch_end(1);
    latency_batch_end(1);               /* an empty batch counts nothing */
    struct captured c = { .n = 0 };
    latency_stats(capture, &c);
    CHECK_EQ_U64(captured_value(&c, "get:count"), 5);
    CHECK_EQ_U64(captured_value(&c, "set:count"), 1);
    CHECK_EQ_U64(captured_value(&c, "mg:count"), ~0ULL);           /* never seen: not emitted */
    CHECK_EQ_U64(captured_value(&c, "get:le_2500000000"), 5);       /* cumulative: all below 2.5 s */
    unsigned long long prev = 0;
    for (int i = 0; i < LATENCY_BUCKETS - 1; i++) {
        char name[48];
        snprintf(name, sizeof name, "get:le_%llu", (unsigned long long)latency_bucket_bound_ns(i));
        unsigned long long v = captured_value(&c, name);
        CHECK(v != ~0ULL && v >= prev);
        prev = v;
    }
    CHECK(captured_value(&c, "get:sum_ns") > 0);
}

/* ------------------------------------------------------------- metrics */

/* A stats source made of a table, for stats no layer emits yet. */
static const char *const *fake_stats[STATS_GROUP_COUNT];
static void fake_source(enum stats_group g, stat_writer w, void *ctx)
{
    for (const char *const *p = fake_stats[g]; p && *p; p += 2) w(ctx, p[0], "%s", p[1]);
}

static const char *line_of(const char *text, const char *prefix)
{
    size_t n = strlen(prefix);
    for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
        if (!strncmp(p, prefix, n)) return p;
    return NULL;
}

static void test_metrics_table_mapping(void)
{
    static const char *const general[] = {
        "version", "1.6.45-cachet \"x\\y\nz",
        "get_hits", "7", "get_misses", "3",
        "cmd_set", "2", "cas_hits", "1", "cas_misses", "1", "cas_badval", "1",   /* set = max(0, 2 - 3) */
        "extstore_objects_read", "11", "extstore_limit_maxbytes", "4096",
        "not_a_number", "abc", NULL };
    static const char *const settings[] = { "num_threads", "3", "worker_cpus", "2,5", "io_uring", "no", NULL };
    static const char *const items[] = { "items:3:number", "4", "items:12:number", "9", NULL };
    static const char *const slabs[] = { "3:cmd_set", "5", "3:cas_hits", "1", "3:cas_badval", "1", "active_slabs", "1", NULL };
    fake_stats[STATS_GENERAL] = general;
    fake_stats[STATS_SETTINGS] = settings;
    fake_stats[STATS_ITEMS] = items;
    fake_stats[STATS_SLABS] = slabs;
    struct metrics_text t = { 0 };
    CHECK(metrics_render_from(&t, false, fake_source));
    const char *s = t.buf ? t.buf : "";
    static const char *const present[] = {
        "memcached_up 0\n",
        "memcached_version{version=\"1.6.45-cachet \\\"x\\\\y\\nz\"} 1\n",   /* escaped */
        "memcached_commands_total{command=\"get\",status=\"hit\"} 7\n",
        "memcached_commands_total{command=\"set\",status=\"hit\"} 0\n",              /* never below 0 */
        "# TYPE memcached_extstore_objects_read_total counter\n",
        "memcached_extstore_objects_read_total 11\n",
        "memcached_extstore_bytes_limit 4096\n",
        "memcached_slab_current_items{slab=\"3\"} 4\n",
        "memcached_slab_current_items{slab=\"12\"} 9\n",
        "memcached_slab_commands_total{slab=\"3\",command=\"set\",status=\"hit\"} 3\n",
        "cachet_worker_cpu_info{worker=\"0\",cpu=\"2\"} 1\n",
        "cachet_worker_cpu_info{worker=\"1\",cpu=\"5\"} 1\n",
        "cachet_worker_cpu_info{worker=\"2\",cpu=\"2\"} 1\n",
        "cachet_io_uring_enabled 0\n",
    };
    /* absent stats leave no family at all, not even HELP */
    static const char *const absent[] = { "# HELP memcached_extstore_pages_free", "# HELP memcached_current_items" };
    for (size_t i = 0; i < sizeof present / sizeof present[0]; i++) {
        CHECK(line_of(s, present[i]));
        if (!line_of(s, present[i])) fprintf(stderr, "  missing line: %s", present[i]);
    }
    for (size_t i = 0; i < sizeof absent / sizeof absent[0]; i++) {
        CHECK(!line_of(s, absent[i]));
        if (line_of(s, absent[i])) fprintf(stderr, "  unexpected line: %s\n", absent[i]);
    }
    CHECK(!strstr(s, "abc"));
    metrics_text_free(&t);
    for (int g = 0; g < STATS_GROUP_COUNT; g++) fake_stats[g] = NULL;
}

static void test_metrics_from_registry(void)
{
    struct storage_config cfg = { .mem_limit = 8u << 20, .young_window = 7 };
    CHECK(storage_init(&cfg) == 0);
    storage_thread *st = storage_thread_register();
    enum store_result err;
    item *it = item_alloc(st, "k", 1, 0, 0, 3, &err);
    CHECK(it != NULL);
    if (it) {
        memcpy(item_value(it), "abc", 3);
        uint64_t cas;
        CHECK(storage_store(st, it, MODE_SET, &(struct store_opts){ 0 }, &cas) == STORE_STORED);
    }
    struct metrics_text t = { 0 };
    CHECK(metrics_render(&t, true));
    const char *s = t.buf ? t.buf : "";
    CHECK(line_of(s, "memcached_up 1\n"));
    CHECK(line_of(s, "memcached_limit_bytes 8388608\n"));
    CHECK(line_of(s, "memcached_current_items 1\n"));
    CHECK(line_of(s, "cachet_young_window_seconds 7\n"));
    CHECK(line_of(s, "memcached_slab_current_items{slab=\"1\"} 1\n"));
    /* every family has HELP then TYPE, every counter ends in _total */
    int families = 0;
    for (const char *p = s; *p; p = strchr(p, '\n') + 1) {
        if (!strncmp(p, "# HELP ", 7)) {
            families++;
            const char *name = p + 7, *sp = strchr(name, ' ');
            const char *type = strchr(p, '\n') + 1;
            CHECK(!strncmp(type, "# TYPE ", 7) && !strncmp(type + 7, name, (size_t)(sp - name)));
            const char *kind = type + 7 + (sp - name) + 1;
            if (!strncmp(kind, "counter", 7)) CHECK(!strncmp(sp - 6, "_total", 6));
        }
        if (!strchr(p, '\n')) break;
    }
    CHECK(families > 50);
    metrics_text_free(&t);
}

/* ------------------------------------------------------------ the probe */

static int listener(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t len = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) || listen(fd, 4) ||
        getsockname(fd, (struct sockaddr *)&a, &len)) return -1;
    *port = ntohs(a.sin_port);
    return fd;
}

static void test_engine_probe_failures(void)
{
    struct engine_probe_target t;
    char why[200];
    CHECK(engine_probe_target_from("", 11211, &t) && !strcmp(t.host, "127.0.0.1") && t.port == 11211);
    CHECK(engine_probe_target_from("0.0.0.0", 1, &t) && !strcmp(t.host, "127.0.0.1"));
    CHECK(engine_probe_target_from("127.0.0.5,10.1.2.3", 1, &t) && !strcmp(t.host, "127.0.0.5"));
    CHECK(engine_probe_target_from("[::1]", 1, &t) && !strcmp(t.host, "::1"));
    CHECK(engine_probe_target_from("::", 1, &t) && !strcmp(t.host, "::1"));

    /* nothing listens: refused */
    int port;
    int fd = listener(&port);
    CHECK(fd >= 0);
    close(fd);
    CHECK(engine_probe_target_from("127.0.0.1", port, &t));
    CHECK(!engine_probe(&t, 500, why, sizeof why));
    CHECK(strstr(why, "refused") != NULL);

    /* the kernel completes the connection but nobody answers: timed out */
    fd = listener(&port);
    t.port = port;
    CHECK(!engine_probe(&t, 200, why, sizeof why));
    CHECK(strstr(why, "no reply to mn within 200 ms") != NULL);
    close(fd);
}

int main(void)
{
    TEST(test_http_valid_requests);
    TEST(test_http_incomplete_and_refused);
    TEST(test_http_size_limits);
    TEST(test_latency_buckets);
    TEST(test_latency_recording);
    TEST(test_metrics_table_mapping);
    TEST(test_metrics_from_registry);
    TEST(test_engine_probe_failures);
    return harness_finish();
}
