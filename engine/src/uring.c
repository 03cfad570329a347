/*
 * uring.c - raw io_uring setup and submission; see uring.h for why.
 * Concurrency: a ring belongs to one thread (a worker, or an extstore IO
 * thread), which alone prepares, submits and reaps it.
 */
#include "uring.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/io_uring.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

struct uring {
    int fd;
    unsigned entries;
    /* submission ring */
    void *sq_ptr;
    size_t sq_size;
    unsigned *sq_head, *sq_tail, *sq_mask, *sq_array;
    struct io_uring_sqe *sqes;
    size_t sqes_size;
    unsigned queued;          /* prepared since the last submit */
    /* completion ring */
    void *cq_ptr;
    size_t cq_size;
    unsigned *cq_head, *cq_tail, *cq_mask;
    struct io_uring_cqe *cqes;
};

static bool selftest(struct uring *u)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) < 0) return false;
    char out = 'x', in = 0;
    uring_prep_send(u, sv[0], &out, 1, 1);
    bool ok = uring_submit_and_wait(u) == 1;
    uint64_t ud;
    int32_t res;
    while (uring_next_cqe(u, &ud, &res)) ok = ok && ud == 1 && res == 1;
    if (ok) {
        uring_prep_recv(u, sv[1], &in, 1, 2);
        ok = uring_submit_and_wait(u) == 1;
        while (uring_next_cqe(u, &ud, &res)) ok = ok && ud == 2 && res == 1;
        ok = ok && in == 'x';
    }
    if (ok) {
        /* An empty socket must answer EAGAIN inside the submit, never park
         * the recv: the event loop relies on it. Submit without waiting so a
         * kernel that parks it cannot hang us here. */
        uring_prep_recv(u, sv[1], &in, 1, 3);
        __atomic_store_n(u->sq_tail, *u->sq_tail + u->queued, __ATOMIC_RELEASE);
        u->queued = 0;
        ok = syscall(__NR_io_uring_enter, u->fd, 1, 0, 0, NULL, 0) == 1;
        bool seen = false;
        while (uring_next_cqe(u, &ud, &res)) { seen = true; ok = ok && ud == 3 && res == -EAGAIN; }
        ok = ok && seen;
    }
    close(sv[0]);
    close(sv[1]);
    return ok;
}

/* A reader ring must do IORING_OP_READ (Linux 5.6): a byte written to a
 * pipe is read back through the ring. An older kernel answers -EINVAL in
 * the completion, which sends the caller to its pread path. */
static bool selftest_read(struct uring *u)
{
    int pv[2];
    if (pipe2(pv, O_CLOEXEC | O_NONBLOCK) < 0) return false;
    char out = 'r', in = 0;
    bool ok = write(pv[1], &out, 1) == 1;
    if (ok) {
        uring_prep_read(u, pv[0], &in, 1, 0, 7);
        ok = uring_submit_and_wait(u) == 1;
        uint64_t ud;
        int32_t res;
        bool seen = false;
        while (uring_next_cqe(u, &ud, &res)) { seen = true; ok = ok && ud == 7 && res == 1; }
        ok = ok && seen && in == 'r';
    }
    close(pv[0]);
    close(pv[1]);
    return ok;
}

static struct uring *create(unsigned entries, bool (*test)(struct uring *))
{
    struct io_uring_params p;
    memset(&p, 0, sizeof(p));
    int fd = (int)syscall(__NR_io_uring_setup, entries, &p);
    if (fd < 0) return NULL;
    struct uring *u = calloc(1, sizeof(*u));
    if (!u) { close(fd); return NULL; }
    u->fd = fd;
    u->entries = p.sq_entries;
    u->sq_size = p.sq_off.array + p.sq_entries * sizeof(unsigned);
    u->cq_size = p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe);
    bool single = p.features & IORING_FEAT_SINGLE_MMAP;
    if (single && u->cq_size > u->sq_size) u->sq_size = u->cq_size;
    u->sq_ptr = mmap(NULL, u->sq_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, IORING_OFF_SQ_RING);
    if (u->sq_ptr == MAP_FAILED) goto fail;
    if (single) {
        u->cq_ptr = u->sq_ptr;
    } else {
        u->cq_ptr = mmap(NULL, u->cq_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, IORING_OFF_CQ_RING);
        if (u->cq_ptr == MAP_FAILED) goto fail;
    }
    u->sqes_size = p.sq_entries * sizeof(struct io_uring_sqe);
    u->sqes = mmap(NULL, u->sqes_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, IORING_OFF_SQES);
    if (u->sqes == MAP_FAILED) goto fail;
    char *sq = u->sq_ptr, *cq = u->cq_ptr;
    u->sq_head = (unsigned *)(sq + p.sq_off.head);
    u->sq_tail = (unsigned *)(sq + p.sq_off.tail);
    u->sq_mask = (unsigned *)(sq + p.sq_off.ring_mask);
    u->sq_array = (unsigned *)(sq + p.sq_off.array);
    u->cq_head = (unsigned *)(cq + p.cq_off.head);
    u->cq_tail = (unsigned *)(cq + p.cq_off.tail);
    u->cq_mask = (unsigned *)(cq + p.cq_off.ring_mask);
    u->cqes = (struct io_uring_cqe *)(cq + p.cq_off.cqes);
    if (!test(u)) {
        errno = EOPNOTSUPP;
        goto fail;
    }
    return u;
fail:
    uring_free(u);
    return NULL;
}

struct uring *uring_create(unsigned entries) { return create(entries, selftest); }
struct uring *uring_create_reader(unsigned entries) { return create(entries, selftest_read); }

void uring_free(struct uring *u)
{
    if (!u) return;
    if (u->sqes && u->sqes != MAP_FAILED) munmap(u->sqes, u->sqes_size);
    if (u->cq_ptr && u->cq_ptr != MAP_FAILED && u->cq_ptr != u->sq_ptr) munmap(u->cq_ptr, u->cq_size);
    if (u->sq_ptr && u->sq_ptr != MAP_FAILED) munmap(u->sq_ptr, u->sq_size);
    close(u->fd);
    free(u);
}

unsigned uring_capacity(const struct uring *u)
{
    return u->entries;
}

static struct io_uring_sqe *next_sqe(struct uring *u)
{
    unsigned tail = *u->sq_tail + u->queued;   /* only this thread writes the tail */
    unsigned idx = tail & *u->sq_mask;
    struct io_uring_sqe *sqe = &u->sqes[idx];
    memset(sqe, 0, sizeof(*sqe));
    u->sq_array[idx] = idx;
    u->queued++;
    return sqe;
}

void uring_prep_recv(struct uring *u, int fd, void *buf, size_t len, uint64_t user_data)
{
    struct io_uring_sqe *sqe = next_sqe(u);
    sqe->opcode = IORING_OP_RECV;
    sqe->fd = fd;
    sqe->addr = (uint64_t)(uintptr_t)buf;
    sqe->len = (uint32_t)len;
    sqe->msg_flags = MSG_DONTWAIT;
    sqe->user_data = user_data;
}

void uring_prep_send(struct uring *u, int fd, const void *buf, size_t len, uint64_t user_data)
{
    struct io_uring_sqe *sqe = next_sqe(u);
    sqe->opcode = IORING_OP_SEND;
    sqe->fd = fd;
    sqe->addr = (uint64_t)(uintptr_t)buf;
    sqe->len = (uint32_t)len;
    sqe->msg_flags = MSG_DONTWAIT | MSG_NOSIGNAL;
    sqe->user_data = user_data;
}

void uring_prep_sendmsg(struct uring *u, int fd, const struct msghdr *msg, uint64_t user_data)
{
    struct io_uring_sqe *sqe = next_sqe(u);
    sqe->opcode = IORING_OP_SENDMSG;
    sqe->fd = fd;
    sqe->addr = (uint64_t)(uintptr_t)msg;
    sqe->len = 1;
    sqe->msg_flags = MSG_DONTWAIT | MSG_NOSIGNAL;
    sqe->user_data = user_data;
}

void uring_prep_read(struct uring *u, int fd, void *buf, size_t len, uint64_t off, uint64_t user_data)
{
    struct io_uring_sqe *sqe = next_sqe(u);
    sqe->opcode = IORING_OP_READ;
    sqe->fd = fd;
    sqe->off = off;
    sqe->addr = (uint64_t)(uintptr_t)buf;
    sqe->len = (uint32_t)len;
    sqe->user_data = user_data;
}

int uring_wait(struct uring *u, unsigned n)
{
    for (;;) {
        unsigned ready = __atomic_load_n(u->cq_tail, __ATOMIC_ACQUIRE) - *u->cq_head;
        if (ready >= n) return 0;
        int rc = (int)syscall(__NR_io_uring_enter, u->fd, 0, n - ready, IORING_ENTER_GETEVENTS, NULL, 0);
        if (rc < 0 && errno != EINTR) return -errno;
    }
}

/* Submits what is queued; with wait, also waits until as many completions
 * exist (every operation but a disk read completes inside the submit). */
static int submit(struct uring *u, bool wait)
{
    unsigned n = u->queued;
    if (!n) return 0;
    __atomic_store_n(u->sq_tail, *u->sq_tail + n, __ATOMIC_RELEASE);
    u->queued = 0;
    unsigned submitted = 0;
    while (submitted < n) {
        int rc = (int)syscall(__NR_io_uring_enter, u->fd, n - submitted, wait ? n - submitted : 0,
                              wait ? IORING_ENTER_GETEVENTS : 0, NULL, 0);
        if (rc < 0) {
            if (errno == EINTR) continue;
            return -errno;
        }
        if (rc == 0) return -EBUSY;   /* took none of them: never spin on it */
        submitted += (unsigned)rc;
    }
    return (int)n;
}

int uring_submit_and_wait(struct uring *u) { return submit(u, true); }
int uring_submit(struct uring *u) { return submit(u, false); }

int uring_fd(const struct uring *u)
{
    return u->fd;
}

bool uring_next_cqe(struct uring *u, uint64_t *user_data, int32_t *res)
{
    unsigned head = *u->cq_head;
    if (head == __atomic_load_n(u->cq_tail, __ATOMIC_ACQUIRE)) return false;
    struct io_uring_cqe *cqe = &u->cqes[head & *u->cq_mask];
    *user_data = cqe->user_data;
    *res = cqe->res;
    __atomic_store_n(u->cq_head, head + 1, __ATOMIC_RELEASE);
    return true;
}
