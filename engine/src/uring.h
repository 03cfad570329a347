/*
 * uring.h - the smallest io_uring wrapper cachetd needs: a ring used as a
 * "batch syscall", so one io_uring_enter() performs the reads (or the sends)
 * of every connection that became ready in one event-loop turn.
 *
 * Why this shape rather than a full io_uring event loop: epoll already tells
 * a worker which connections are readable, and every operation is submitted
 * with MSG_DONTWAIT, so each one completes (or fails with -EAGAIN) inside the
 * submitting io_uring_enter(). No ring operation is ever in flight across loop
 * turns, buffers never have to be pinned, and the connection code stays the
 * same as in plain epoll mode. (A reply that waits across turns, for example
 * for a value on disk, is a deferred reply slot in the output queue, reply.h:
 * that is the protocol waiting, not the ring.) What changes is the syscall count: with k connections
 * ready, one turn costs epoll_wait + 2 io_uring_enter instead of
 * epoll_wait + k read + k send. Raw syscalls (no liburing) keep the build
 * free of extra packages.
 *
 * Extstore's IO threads use a ring the other way round (ext_batch.c): reads
 * of a file, submitted together and waited for together, so the disk sees
 * as many reads at once as the thread has buffers. Those reads are in flight
 * only inside one call of the IO thread, into its own buffers. A worker's
 * own disk-read ring (ext_io.c) is the one ring whose reads stay in flight
 * across loop turns: submitted with uring_submit, reaped when its fd polls
 * readable, into buffers that belong to that ring alone.
 *
 * Concurrency: a ring belongs to one thread (a worker or an IO thread).
 */
#ifndef CACHET_URING_H
#define CACHET_URING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

struct uring;

/* NULL if the kernel refuses (old kernel, io_uring disabled by sysctl or
 * seccomp) or if a send and a recv over a socketpair do not work through the
 * ring: a kernel that accepts the ring but not these opcodes must not make
 * every client connection fail. */
struct uring *uring_create(unsigned entries);
/* A ring for file reads: NULL if the kernel refuses io_uring or does not do
 * IORING_OP_READ (before Linux 5.6); the caller then uses pread. */
struct uring *uring_create_reader(unsigned entries);
void uring_free(struct uring *u);
unsigned uring_capacity(const struct uring *u);

/* Queue operations; they run at the next uring_submit_and_wait(). */
void uring_prep_recv(struct uring *u, int fd, void *buf, size_t len, uint64_t user_data);
void uring_prep_send(struct uring *u, int fd, const void *buf, size_t len, uint64_t user_data);
/* A gathered send: msg and its iovecs stay untouched until the submit
 * returns (a socket send completes inside it, as above). */
struct msghdr;
void uring_prep_sendmsg(struct uring *u, int fd, const struct msghdr *msg, uint64_t user_data);

/* A read of len bytes at file offset off (unlike recv, it may wait for the
 * disk: pair it with uring_wait for its completion). */
void uring_prep_read(struct uring *u, int fd, void *buf, size_t len, uint64_t off, uint64_t user_data);

/* Waits until at least n completions are ready to reap. 0 or -errno. */
int uring_wait(struct uring *u, unsigned n);

/* Submits what is queued and waits until that many completions exist.
 * Returns the number submitted or -errno. */
int uring_submit_and_wait(struct uring *u);

/* Submits what is queued without waiting for any of it: for reads whose
 * completions are reaped later, when the ring's fd polls readable (a
 * worker's own disk reads, ext_io.c). Returns the number submitted or
 * -errno. */
int uring_submit(struct uring *u);
/* The ring's fd: readable (epoll) while completions wait to be reaped. */
int uring_fd(const struct uring *u);

/* Completions: returns false when none is left. */
bool uring_next_cqe(struct uring *u, uint64_t *user_data, int32_t *res);

#endif
