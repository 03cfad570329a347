/*
 * testhook.c - the fake slow value source of test builds; see testhook.h for
 * why it exists and the key format. Compiled to nothing unless
 * CACHET_TEST_HOOKS is defined.
 *
 * Concurrency: workers add waiting slots and open gates under `lock`; the
 * hook thread takes due slots out under it and completes them outside it,
 * so reply_complete really runs on a thread that is not the worker's.
 */
#ifdef CACHET_TEST_HOOKS
#include "testhook.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "proto_reply.h"

#define DEFER_PREFIX "__cachet_defer:"
#define OPEN_PREFIX  "__cachet_open:"
#define GATE_MAX     64
#define OPENED_MAX   256

struct waiting {
    struct waiting      *next;
    struct reply_handle *h;
    enum reply_status    status;
    struct item_view     view;      /* a referenced value (view.ref) */
    char                *bytes;     /* or a copied one */
    size_t               nbytes;
    char                 gate[GATE_MAX];
    uint64_t             due_ms;    /* UINT64_MAX: until the gate opens */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
static pthread_once_t started = PTHREAD_ONCE_INIT;
static struct waiting *waiting;
static char opened[OPENED_MAX][GATE_MAX];
static int nopened;

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static bool gate_is_open(const char *gate)
{
    for (int i = 0; i < nopened && i < OPENED_MAX; i++)
        if (!strcmp(opened[i], gate)) return true;
    return false;
}

static void *source_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&lock);
    for (;;) {
        uint64_t now = now_ms(), next_due = UINT64_MAX;
        struct waiting **pp = &waiting, *due = NULL;
        while (*pp) {
            struct waiting *x = *pp;
            if (x->due_ms <= now) {
                *pp = x->next;
                x->next = due;
                due = x;
            } else {
                if (x->due_ms < next_due) next_due = x->due_ms;
                pp = &x->next;
            }
        }
        if (due) {
            pthread_mutex_unlock(&lock);
            /* oldest first: `due` was built newest first */
            struct waiting *ordered = NULL;
            while (due) { struct waiting *n = due->next; due->next = ordered; ordered = due; due = n; }
            while (ordered) {
                struct waiting *x = ordered;
                ordered = x->next;
                reply_complete(x->h, x->status, x->view.ref ? &x->view : NULL, x->bytes, x->nbytes);
                free(x->bytes);
                free(x);
            }
            pthread_mutex_lock(&lock);
            continue;
        }
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        uint64_t wait_ms = next_due == UINT64_MAX ? 200 : next_due - now;
        if (wait_ms > 200) wait_ms = 200;
        until.tv_sec += (time_t)(wait_ms / 1000);
        until.tv_nsec += (long)(wait_ms % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) { until.tv_sec++; until.tv_nsec -= 1000000000L; }
        pthread_cond_timedwait(&wake, &lock, &until);
    }
    return NULL;
}

static void start_source(void)
{
    pthread_t t;
    if (pthread_create(&t, NULL, source_main, NULL) != 0) {
        fprintf(stderr, "cachetd: test hook: cannot start the fake value source\n");
        abort();   /* test builds only */
    }
    pthread_detach(t);
}

static bool has_prefix(const char *key, uint32_t nkey, const char *prefix)
{
    size_t n = strlen(prefix);
    return nkey > n && !memcmp(key, prefix, n);
}

static void open_gate(const char *name, size_t n)
{
    char gate[GATE_MAX];
    if (n >= GATE_MAX) n = GATE_MAX - 1;
    memcpy(gate, name, n);
    gate[n] = '\0';
    pthread_mutex_lock(&lock);
    snprintf(opened[nopened++ % OPENED_MAX], GATE_MAX, "%s", gate);
    for (struct waiting *x = waiting; x; x = x->next)
        if (!strcmp(x->gate, gate)) x->due_ms = 0;
    pthread_cond_signal(&wake);
    pthread_mutex_unlock(&lock);
}

int testhook_get(struct conn *c, const char *key, uint32_t nkey, const struct get_opts *opts, bool with_cas)
{
    if (has_prefix(key, nkey, OPEN_PREFIX)) {
        open_gate(key + strlen(OPEN_PREFIX), nkey - strlen(OPEN_PREFIX));
        return 0;
    }
    if (!has_prefix(key, nkey, DEFER_PREFIX)) return 0;
    const char *gate = key + strlen(DEFER_PREFIX);
    const char *colon = memchr(gate, ':', nkey - strlen(DEFER_PREFIX));
    if (!colon || colon == gate || colon - gate >= GATE_MAX) return 0;
    if (out_defer_full(c)) return -1;
    pthread_once(&started, start_source);

    struct waiting *x = calloc(1, sizeof(*x));
    char *copy = malloc(OUT_COPY_MAX);
    if (!x || !copy) { free(x); free(copy); out_fail(c); return 1; }
    memcpy(x->gate, gate, (size_t)(colon - gate));
    struct item_view v;
    bool hit = storage_get(c->w->st, key, nkey, opts, copy, OUT_COPY_MAX, &v);
    char head[KEY_MAX_LENGTH + 80], *p = head;
    if (hit) {
        memcpy(p, "VALUE ", 6); p += 6;
        memcpy(p, key, nkey); p += nkey;
        *p++ = ' '; p = u64_to_str(p, v.client_flags);
        *p++ = ' '; p = u64_to_str(p, v.nbytes);
        if (with_cas) { *p++ = ' '; p = u64_to_str(p, v.cas); }
        *p++ = '\r'; *p++ = '\n';
    }
    struct reply_spec spec = { .head = head, .nhead = (size_t)(p - head), .tail = "\r\n", .ntail = 2,
                               .miss = "", .nmiss = 0, .max_bytes = hit && !v.ref ? v.nbytes : 0 };
    struct reply_handle *h = reply_defer(c, &spec);
    if (!h) {
        if (hit && v.ref) item_view_release(c->w->st, &v);
        free(copy);
        free(x);
        if (out_can_wait(c)) return -1;
        out_fail(c);
        return 1;
    }
    x->h = h;
    x->status = hit ? REPLY_HIT : REPLY_MISS;
    if (hit && v.ref) {
        x->view = v;
        free(copy);
    } else if (hit) {
        x->bytes = copy;
        x->nbytes = v.nbytes;
    } else {
        free(copy);
    }
    char *end;
    unsigned long ms = strtoul(x->gate, &end, 10);
    pthread_mutex_lock(&lock);
    if (*end == '\0') x->due_ms = now_ms() + ms;
    else x->due_ms = gate_is_open(x->gate) ? 0 : UINT64_MAX;
    x->next = waiting;
    waiting = x;
    pthread_cond_signal(&wake);
    pthread_mutex_unlock(&lock);
    return 1;
}
#endif
