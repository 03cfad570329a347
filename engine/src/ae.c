/*
 * ae.c - the epoll event loop described in ae.h.
 *
 * Level-triggered on purpose: a connection handler may stop reading before
 * the socket is drained (to bound one client's batch, or because its output
 * is backed up) and simply be called again on the next wait, without having
 * to remember that data is left in the kernel.
 */
#include "ae.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

_Static_assert(sizeof(struct ae_file_event) <= AE_SLOT_BYTES, "memory_budget.c counts AE_SLOT_BYTES per fd slot");

struct ae_loop *ae_create(int setsize, int max_fired)
{
    struct ae_loop *l = calloc(1, sizeof(*l));
    if (!l) return NULL;
    l->epfd = epoll_create1(EPOLL_CLOEXEC);
    l->setsize = setsize;
    l->max_fired = max_fired;
    l->events = calloc((size_t)setsize, sizeof(*l->events));
    l->fired = calloc((size_t)max_fired, sizeof(struct epoll_event));
    if (l->epfd < 0 || !l->events || !l->fired) {
        ae_free(l);
        return NULL;
    }
    return l;
}

void ae_free(struct ae_loop *l)
{
    if (!l) return;
    if (l->epfd >= 0) close(l->epfd);
    free(l->events);
    free(l->fired);
    free(l);
}

static int to_epoll(int mask)
{
    return (mask & AE_READABLE ? EPOLLIN : 0) | (mask & AE_WRITABLE ? EPOLLOUT : 0);
}

int ae_add(struct ae_loop *l, int fd, int mask, ae_file_proc *proc, void *data)
{
    if (fd < 0 || fd >= l->setsize) { errno = ERANGE; return -1; }
    struct ae_file_event *fe = &l->events[fd];
    struct epoll_event ee = { .events = (uint32_t)to_epoll(fe->mask | mask), .data.fd = fd };
    int op = fe->mask == AE_NONE ? EPOLL_CTL_ADD : EPOLL_CTL_MOD;
    if ((mask & AE_EXCLUSIVE) && op == EPOLL_CTL_ADD) ee.events |= EPOLLEXCLUSIVE;
    mask &= ~AE_EXCLUSIVE;
    if (epoll_ctl(l->epfd, op, fd, &ee) < 0) return -1;
    fe->mask |= mask;
    if (mask & AE_READABLE) fe->rproc = proc;
    if (mask & AE_WRITABLE) fe->wproc = proc;
    fe->data = data;
    return 0;
}

void ae_del(struct ae_loop *l, int fd, int mask)
{
    if (fd < 0 || fd >= l->setsize) return;
    struct ae_file_event *fe = &l->events[fd];
    if (fe->mask == AE_NONE) return;
    int newmask = fe->mask & ~mask;
    struct epoll_event ee = { .events = (uint32_t)to_epoll(newmask), .data.fd = fd };
    epoll_ctl(l->epfd, newmask == AE_NONE ? EPOLL_CTL_DEL : EPOLL_CTL_MOD, fd, &ee);
    fe->mask = newmask;
}

int ae_mask(struct ae_loop *l, int fd)
{
    return (fd >= 0 && fd < l->setsize) ? l->events[fd].mask : AE_NONE;
}

int ae_process(struct ae_loop *l, int timeout_ms)
{
    struct epoll_event *ev = l->fired;
    int n = epoll_wait(l->epfd, ev, l->max_fired, timeout_ms);
    l->fired_now = n;
#ifdef CACHET_TRACE
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    l->woke_ns = (unsigned long long)ts.tv_sec * 1000000000u + (unsigned long long)ts.tv_nsec;
    l->last_fired = n;
#endif
    for (int i = 0; i < n; i++) {
        int fd = ev[i].data.fd;
        struct ae_file_event *fe = &l->events[fd];
        uint32_t e = ev[i].events;
        /* errors and hang-ups are reported as readable so read() sees them */
        int mask = (e & (EPOLLIN | EPOLLERR | EPOLLHUP) ? AE_READABLE : 0) |
                   (e & EPOLLOUT ? AE_WRITABLE : 0);
        if ((fe->mask & mask & AE_READABLE) && fe->rproc)
            fe->rproc(l, fd, fe->data, AE_READABLE);
        /* the read handler may have closed the fd or dropped write interest */
        if ((fe->mask & mask & AE_WRITABLE) && fe->wproc)
            fe->wproc(l, fd, fe->data, AE_WRITABLE);
    }
    return n < 0 ? 0 : n;
}

void ae_stop(struct ae_loop *l)
{
    atomic_store_explicit(&l->stop, 1, memory_order_relaxed);
}

void ae_run(struct ae_loop *l, int default_timeout_ms)
{
    while (!atomic_load_explicit(&l->stop, memory_order_relaxed)) {
        int timeout = default_timeout_ms;
        if (l->before_sleep) {
            int t = l->before_sleep(l, l->hook_data);
            if (t >= 0 && (timeout < 0 || t < timeout)) timeout = t;
        }
        if (atomic_load_explicit(&l->stop, memory_order_relaxed)) break;
        ae_process(l, timeout);
    }
}
