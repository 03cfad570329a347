/*
 * ae.h - a small epoll event loop in the spirit of Redis's ae.c.
 *
 * Why our own and not libevent: cachetd's workers each run one loop on one
 * pinned CPU; all they need is "call this function when this fd is readable
 * or writable", a hook before sleeping (where batched I/O runs and
 * connections that yielded continue) and a wake-up. Fifty lines of epoll
 * give exactly that with no allocation per event, and the loop can be read
 * in one sitting.
 *
 * Concurrency: a loop belongs to the thread that runs it; only ae_stop() may
 * be called from another thread.
 */
#ifndef CACHET_AE_H
#define CACHET_AE_H

#include <stdatomic.h>

#define AE_NONE     0
#define AE_READABLE 1
#define AE_WRITABLE 2
/* With AE_READABLE, when the fd is added: one fd in several loops (a shared
 * listening socket) wakes one of them per event, not all (EPOLLEXCLUSIVE). */
#define AE_EXCLUSIVE 4

struct ae_loop;
/* What ae_create allocates per fd slot (struct ae_file_event): the memory
 * budget counts setsize of them per loop. */
#define AE_SLOT_BYTES 32u
typedef void ae_file_proc(struct ae_loop *loop, int fd, void *data, int mask);
typedef int  ae_hook_proc(struct ae_loop *loop, void *data);  /* returns the next wait timeout in ms */

struct ae_file_event {
    int           mask;
    ae_file_proc *rproc;
    ae_file_proc *wproc;
    void         *data;
};

struct ae_loop {
    int                   epfd;
    int                   setsize;       /* fds must be below this */
    struct ae_file_event *events;        /* indexed by fd */
    void                 *fired;         /* struct epoll_event[setsize] */
    int                   max_fired;
    atomic_int            stop;          /* ae_stop(); any thread */
    ae_hook_proc         *before_sleep;  /* may return a shorter timeout */
    void                 *hook_data;
    int                   fired_now;     /* events the current turn's epoll_wait reported */
    /* a `make TRACE=1` build only (trace.h): when the last epoll_wait
     * returned and how many fds it reported */
    unsigned long long    woke_ns;
    int                   last_fired;
};

struct ae_loop *ae_create(int setsize, int max_fired);
void ae_free(struct ae_loop *loop);
int  ae_add(struct ae_loop *loop, int fd, int mask, ae_file_proc *proc, void *data); /* 0 or -1 */
void ae_del(struct ae_loop *loop, int fd, int mask);
int  ae_mask(struct ae_loop *loop, int fd);
/* Waits at most timeout_ms (-1 forever) and dispatches; returns events handled. */
int  ae_process(struct ae_loop *loop, int timeout_ms);
void ae_run(struct ae_loop *loop, int default_timeout_ms);
/* Makes ae_run return after the current turn; safe from another thread
 * (which must then wake the loop, e.g. through an eventfd it watches). */
void ae_stop(struct ae_loop *loop);

#endif
