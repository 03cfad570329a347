/*
 * nocancel.h - read, send, sendmsg and epoll_wait without glibc's
 * cancellation-point wrapping, for the per-request syscalls.
 *
 * Why: in a multi-threaded process glibc brackets every cancellation point
 * with __pthread_enable_asynccancel/__pthread_disable_asynccancel. An
 * unpipelined GET makes three such calls (epoll_wait, read, send), and the
 * brackets cost it ~87 of ~1940 user-space instructions
 * (bench/callgrind-get.py with one GET per batch). cachetd never cancels a
 * thread (workers stop through ae_stop and their eventfd), so the brackets
 * buy nothing. syscall(2) is not a cancellation point; it returns -1 and sets
 * errno exactly as the wrappers do.
 *
 * Concurrency: none of its own; each call acts on the caller's fd.
 */
#ifndef CACHET_NOCANCEL_H
#define CACHET_NOCANCEL_H

#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

static inline ssize_t read_nocancel(int fd, void *buf, size_t n)
{
    return (ssize_t)syscall(SYS_read, fd, buf, n);
}

static inline ssize_t send_nocancel(int fd, const void *buf, size_t n, int flags)
{
    return (ssize_t)syscall(SYS_sendto, fd, buf, n, flags, NULL, 0);
}

static inline ssize_t sendmsg_nocancel(int fd, const struct msghdr *mh, int flags)
{
    return (ssize_t)syscall(SYS_sendmsg, fd, mh, flags);
}

/* epoll_pwait with no signal mask is epoll_wait, and unlike SYS_epoll_wait
 * it exists on every architecture (arm64 has no epoll_wait syscall); the
 * last argument is the kernel's sigset size, ignored without a mask. */
static inline int epoll_wait_nocancel(int epfd, struct epoll_event *ev, int max, int timeout_ms)
{
    return (int)syscall(SYS_epoll_pwait, epfd, ev, max, timeout_ms, NULL, (size_t)8);
}

#endif
