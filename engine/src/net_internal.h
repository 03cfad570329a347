/*
 * net_internal.h - what the three files of the network layer share:
 * net_listen.c (listening sockets and accept), net_worker.c (the worker
 * threads and their loops) and net_conn.c (each connection's read, parse
 * and send loop). main.c sees only net.h; nothing outside the network
 * layer includes this.
 *
 * Concurrency: every function here runs on the worker thread that owns the
 * loop or the connection, except where it says otherwise.
 */
#ifndef CACHET_NET_INTERNAL_H
#define CACHET_NET_INTERNAL_H

#include <stdbool.h>
#include <sys/socket.h>

#include "conn.h"
#include "server.h"

static inline int verbosity(void) { return __atomic_load_n(&settings.verbose, __ATOMIC_RELAXED); }

/* ---- net_conn.c: the connection state machine ---- */
/* A connection worker w accepted: false when it cannot be served (no
 * memory, no room in the loop); the caller refuses it. */
bool conn_open(struct worker *w, int fd, const struct sockaddr_storage *ss);
void conn_close(struct conn *c);
/* Flush and, if it was waiting, continue the connection's requests. */
void conn_resume(struct conn *c);
/* Answers what the connection has read (a connection that yielded). */
void process_input(struct conn *c);
/* After a batch: send, and arm or disarm the loop's events; false if the
 * connection was closed. */
bool conn_after_work(struct conn *c);
/* Deferred replies that completed: each slot's connection is flushed and
 * resumed. */
void drain_completions(struct worker *w);
/* One loop turn in io_uring mode (before the loop sleeps). */
void uring_turn(struct worker *w);
/* Main thread, before the workers start: io_uring batching or plain epoll
 * read/send for every connection accepted from then on. */
void conn_use_uring(bool on);

/* ---- net_listen.c: listening sockets ---- */
/* The worker's thread, as it starts: its listening sockets (and the -s
 * socket, shared) join its loop. */
/* SO_SNDBUF/SO_RCVBUF from -o sock_sndbuf/sock_rcvbuf, if set (net_conn.c) */
void net_fix_socket_buffers(int fd);
/* After accept ran out of fds, a worker stops accepting this long (ms). */
#define ACCEPT_PAUSE_MS 100
/* Watches the listeners again once the pause is over: -1 when accepting,
 * else the ms still to wait (worker_before_sleep sleeps no longer). */
int net_listen_resume_due(struct worker *w);
int net_listen_attach(struct worker *w);   /* -1: message printed */
/* Shutdown seen by the worker: its sockets close, the shared -s socket
 * leaves its loop. */
void net_listen_detach(struct worker *w);
/* Main thread, after every worker was joined: the -s socket closes. */
void net_listen_close_shared(void);
/* Connections other workers handed to w (-o conn_placement) join its loop. */
void net_listen_take_handoffs(struct worker *w);

/* ---- net_place.c: which worker serves a new TCP connection ---- */
/* Main thread, before the workers start: topology and the NAPI map;
 * -1 (message printed) if the map file does not parse. */
int net_place_init(void);
/* The worker for the accepted socket fd; *kind: PLACED_* (server.h). */
struct worker *net_place_pick(struct worker *acceptor, int fd, int *kind);

#endif
