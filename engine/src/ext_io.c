/*
 * ext_io.c - extstore's IO threads: the reads GETs of on-disk items wait for
 * (why a pool: ext_io.h).
 *
 * Concurrency: workers push jobs on one queue under `lock` and wake one IO
 * thread (round robin); each IO thread is a bgthread whose pass takes up to
 * io_depth jobs under the lock, then reads and completes them outside it.
 * A job owns its reply handle until reply_complete(), which may run on this
 * thread (reply.h); the connection may be gone by then, the handle is then
 * freed by its worker. Each IO thread has its own storage context (a stub
 * whose read failed is unlinked, a recache relinks the value) and its own
 * buffer of -I bytes, so a read allocates nothing.
 */
#include "ext_io.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bgthread.h"
#include "bufmem.h"
#include "conn.h"
#include "reply.h"
#include "server.h"

#define IO_THREADS_MAX 64

struct job {
    struct job          *next;
    struct reply_handle *h;
    struct item_view     v;
    uint32_t             nkey;
    char                 key[KEY_MAX_LENGTH];
};

struct io_thread {
    struct bgthread  bg;
    storage_thread  *st;
    char            *buf;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct job *head, *tail;   /* FIFO: oldest first */
static struct io_thread threads[IO_THREADS_MAX];
static unsigned nthreads, depth;
static _Atomic unsigned next_thread;

static bool io_pass(void *arg)
{
    struct io_thread *t = arg;
    struct job *batch = NULL, **bt = &batch;
    unsigned n = 0;
    pthread_mutex_lock(&lock);
    while (head && n < depth) {
        struct job *j = head;
        head = j->next;
        if (!head) tail = NULL;
        j->next = NULL;
        *bt = j;
        bt = &j->next;
        n++;
    }
    bool more = head != NULL;
    pthread_mutex_unlock(&lock);
    while (batch) {
        struct job *j = batch;
        batch = j->next;
        storage_ext_count_queue(-1);
        bool hit = storage_ext_fetch(t->st, j->key, j->nkey, &j->v, t->buf);
        reply_complete(j->h, hit ? REPLY_HIT : REPLY_MISS, NULL, hit ? t->buf : NULL, hit ? j->v.nbytes : 0);
        free(j);
        bufmem_release(sizeof *j);
    }
    return more;
}

int ext_io_start(unsigned n, unsigned d)
{
    if (n > IO_THREADS_MAX) n = IO_THREADS_MAX;
    depth = d ? d : 1;
    for (unsigned i = 0; i < n; i++) {
        struct io_thread *t = &threads[i];
        t->st = storage_thread_register();
        t->buf = malloc(settings.item_size_max);
        if (!t->st || !t->buf) return -1;
        t->bg = (struct bgthread){ .name = "cachet-extio", .pass = io_pass, .arg = t, .period_ms = 0 };
        if (bgthread_start(&t->bg) != 0) return -1;
        nthreads = i + 1;
    }
    return 0;
}

void ext_io_stop(void)
{
    for (unsigned i = 0; i < nthreads; i++) bgthread_stop(&threads[i].bg);
    /* what is still queued was never read: its slots get the miss */
    pthread_mutex_lock(&lock);
    struct job *j = head;
    head = tail = NULL;
    pthread_mutex_unlock(&lock);
    while (j) {
        struct job *nx = j->next;
        reply_complete(j->h, REPLY_MISS, NULL, NULL, 0);
        free(j);
        bufmem_release(sizeof *j);
        j = nx;
    }
}

bool ext_io_value(struct conn *c, const char *hd, size_t nhead, const char *miss, size_t nmiss,
                  const char *key, uint32_t nkey, const struct item_view *v)
{
    struct reply_spec spec = { .head = hd, .nhead = nhead, .tail = "\r\n", .ntail = 2,
                               .miss = miss, .nmiss = nmiss, .max_bytes = v->nbytes, .ext = true };
    /* the job is connection memory like the slot: reserved from the budget */
    bool reserved = nthreads && bufmem_reserve(sizeof(struct job));
    struct job *j = reserved ? malloc(sizeof *j) : NULL;
    struct reply_handle *h = j ? reply_defer(c, &spec) : NULL;
    if (!h) {
        free(j);
        if (reserved) bufmem_release(sizeof(struct job));
        /* "no slot now" is never a miss: with output queued the request
         * waits for it to drain and asks again; with nothing to wait for
         * the reply fails (SERVER_ERROR), as a RAM value without room does */
        if (nthreads && out_can_wait(c)) return false;
        storage_ext_count_oom();
        c->out.failed = true;
        return true;
    }
    storage_ext_count_get();
    j->next = NULL;
    j->h = h;
    j->v = *v;
    j->nkey = nkey;
    memcpy(j->key, key, nkey);
    storage_ext_count_queue(1);
    pthread_mutex_lock(&lock);
    if (tail) tail->next = j; else head = j;
    tail = j;
    pthread_mutex_unlock(&lock);
    bgthread_wake(&threads[atomic_fetch_add_explicit(&next_thread, 1, memory_order_relaxed) % nthreads].bg);
    return true;
}
