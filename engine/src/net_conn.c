/*
 * net_conn.c - each connection's state machine: read, parse, answer, send,
 * wait and resume, close. The listeners (net_listen.c) hand it accepted
 * sockets; the workers' loops (net_worker.c) call it on events.
 *
 * Syscalls per request: see conn.h. One read() per batch (a short read means
 * the socket is drained; level-triggered epoll tells us if more arrives),
 * every complete request answered, one send()/sendmsg() per batch.
 *
 * Flow control: before each request (and each key of a multi-key GET) the
 * connection checks that its output queue can take one more reply
 * (outbuf.h). If not and it has output queued, it stops there and resumes
 * when the queue drains: the client reading (EPOLLOUT), the next loop turn,
 * or a deferred reply completing. A GET stopped between keys keeps its line
 * in rbuf and picks up at c->resume_off. A get line longer than rbuf is
 * answered key by key as it arrives (c->get_stream): rbuf never grows, and
 * while such a line waits for its output to drain, nothing more is read
 * from the client (back-pressure), however long the line. A store that
 * waits for extstore's flusher (storage.h, item_alloc_parking) keeps its
 * line in rbuf the same way, data block unread, and runs again on later
 * turns (waits_store) while the worker serves everyone else. A reply that
 * cannot get memory with nothing queued to wait for is taken back and
 * answered with one SERVER_ERROR line, and the connection is closed
 * (response_obj_oom), as memcached does when its response objects run out.
 * Nothing in the request path aborts on a failed allocation.
 *
 * Deferred replies (reply.h) complete on any thread: the completion queue is
 * drained when the worker's eventfd (or its disk ring) fires, and each
 * completed slot's connection answers what waited behind it and is sent
 * with the turn's io_uring batch (uring_turn; without io_uring, or for TLS
 * or a half-closed client, it is flushed at once).
 *
 * Concurrency: everything here runs on the connection's worker thread;
 * conn_use_uring runs on the main thread before any worker starts. The
 * worker's connection list changes under the registry lock, which `stats
 * conns` takes to read it from another thread.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ae.h"
#include "auth.h"
#include "bufmem.h"
#include "conn.h"
#include "ext_io.h"
#include "latency.h"
#include "net_internal.h"
#include "nocancel.h"
#include "outbuf.h"
#include "prefetch.h"
#include "proto.h"
#include "proto_parser.h"
#include "reply.h"
#include "server.h"
#include "tls.h"
#include "trace.h"
#include "uring.h"

#define RBUF_INITIAL    (16 * 1024)
#define DIRECT_READ_MIN 4096          /* values this large are read straight into the item */
/* Free output room a connection with queued output needs before it takes
 * another request: more than the largest reply header plus a copied small
 * value, so a single-key reply never fails for lack of room once started. */
#define OUT_REQUEST_ROOM (OUT_COPY_MIN + 3072)

static void conn_readable(struct ae_loop *l, int fd, void *data, int mask);
static void conn_writable(struct ae_loop *l, int fd, void *data, int mask);
static void conn_mark_ready(struct ae_loop *l, int fd, void *data, int mask);
/* conn_readable (epoll: read at once) or conn_mark_ready (io_uring: batch) */
static ae_file_proc *read_proc = conn_readable;

/* -o sock_sndbuf/sock_rcvbuf: fixed kernel buffers instead of autotuning
 * (up to tcp_wmem's 4 MiB per slow reader), so the pod's memory bound holds
 * where the cgroup charges socket memory (memory_budget.c socket_buffers). */
void net_fix_socket_buffers(int fd)
{
    if (settings.sock_sndbuf) {
        int v = (int)settings.sock_sndbuf;
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &v, sizeof(v));
    }
    if (settings.sock_rcvbuf) {
        int v = (int)settings.sock_rcvbuf;
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &v, sizeof(v));
    }
}

/* -------------------------------------------------------------- connections */

void conn_close(struct conn *c)
{
    struct worker *w = c->w;
    ae_del(w->loop, c->fd, AE_READABLE | AE_WRITABLE);
    registry_lock();
    if (c->prev) c->prev->next = c->next; else w->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    registry_unlock();
    if (c->yielded) {
        struct conn **pp = &w->pending;
        while (*pp && *pp != c) pp = &(*pp)->next_pending;
        if (*pp) *pp = c->next_pending;
    }
    if (c->batch_idx >= 0) w->batch[c->batch_idx] = NULL;
    /* Closing a socket with unread input makes the kernel send RST, and the
     * client may then lose replies it has not read yet (a pipeline cut short
     * by quit, a line-too-long error or shutdown). Drain what is there first. */
    for (int i = 0; i < 256; i++) {
        char scratch[16384];
        if (recv(c->fd, scratch, sizeof(scratch), MSG_DONTWAIT) <= 0) break;
    }
    if (c->ssl) tls_close(c->ssl);
    close(c->fd);
    if (c->it) item_discard(w->st, c->it);
    /* references released; deferred slots still waiting are orphaned and
     * freed when their completion arrives (reply.h) */
    outbuf_free(&c->out);
    free(c->rbuf);
    free(c->pending_line);
    if (verbosity() > 1) fprintf(stderr, "<%d connection closed.\n", c->fd);
    free(c);
    __atomic_sub_fetch(&curr_conns_global, 1, __ATOMIC_RELAXED);
}

/* fairness: the -R limit was reached (counted as conn_yields, as memcached);
 * otherwise the connection waits for its output queue to drain */
static void conn_set_yielded(struct conn *c, bool fairness)
{
    c->waits_output = !fairness;
    if (fairness) STAT_INC(c->w, conn_yields);
    if (c->yielded) return;
    c->yielded = true;
    TRACE_STAMP(c->trace_yielded, TRACE_NOW());
    c->next_pending = c->w->pending;
    c->w->pending = c;
}

/* Can a connection with queued output take one more request now? A
 * connection with nothing queued always can, so every connection makes
 * progress whatever the others hold. */
static bool conn_can_take_request(struct conn *c)
{
    if (!out_can_wait(c)) return true;
    /* every deferred slot taken: a pipelined mg of a disk value would find
     * none, and a disk value waits for a slot rather than become a miss */
    if (outbuf_defer_full(&c->out) || outbuf_full(&c->out)) return false;
    size_t pending = outbuf_pending(&c->out);
    /* the budget is nearly used up: whoever still has output to send waits
     * for it, so the memory goes to connections that have none */
    if (pending > 0 && bufmem_under_pressure()) return false;
    return outbuf_try_room(&c->out, OUT_REQUEST_ROOM);
}

/* A reply could not get memory: take it back, say so, close. */
static void conn_reply_failed(struct conn *c, const struct out_mark *m, const struct request *r)
{
    outbuf_rollback(&c->out, m);
    STAT_INC(c->w, response_obj_oom);
    c->resume_off = 0;
    const char *msg = r ? proto_oom_reply(r) : "SERVER_ERROR out of memory writing response";
    outbuf_error_line(&c->out, msg);
    if (verbosity() > 0) fprintf(stderr, "cachetd: %s: %s, closing\n", c->addr, msg);
    c->state = CONN_CLOSING;
}

/* Data block bytes arrived; the store's reply may fail for memory. */
static void nread_advance(struct conn *c, size_t n)
{
    struct out_mark m;
    outbuf_mark(&c->out, &m);
    proto_nread_advance(c, n);
    if (outbuf_failed(&c->out)) conn_reply_failed(c, &m, NULL);
}

/* Parses and answers every complete request in rbuf. */
void process_input(struct conn *c)
{
    struct worker *w = c->w;
    int handled = 0;
    if (c->state == CONN_CMD && c->rend > c->rstart) prefetch_batch(w, c->rbuf + c->rstart, c->rend - c->rstart);
    while (c->state != CONN_CLOSING) {
        size_t avail = c->rend - c->rstart;
        if (c->state == CONN_NREAD) {
            if (!avail) break;
            size_t n;
            char *dst = proto_nread_dst(c, &n);
            if (n > avail) n = avail;
            memcpy(dst, c->rbuf + c->rstart, n);
            c->rstart += n;
            nread_advance(c, n);
            continue;
        }
        if (c->state == CONN_SWALLOW) {
            if (!avail) break;
            size_t n = avail < c->swallow_left ? avail : c->swallow_left;
            c->rstart += n;
            c->swallow_left -= n;
            if (c->swallow_left == 0) c->state = CONN_CMD;
            continue;
        }
        if (!avail) break;
        /* shutting down: no new request is started; a GET half answered
         * (resume_off) is finished, so its reply is whole, and a store
         * parked for the flusher is stored and answered (its wait is
         * bounded) */
        if (!c->resume_off && !c->waits_store && server_shutting_down()) {
            c->state = CONN_CLOSING;
            break;
        }
        if (!c->started) {
            c->started = true;
            /* a binary-protocol client would wait forever for a newline */
            if ((unsigned char)c->rbuf[c->rstart] == 0x80) {
                out_str(c, "SERVER_ERROR binary protocol is not supported; use the ASCII or meta protocol");
                c->state = CONN_CLOSING;
                break;
            }
        }
        /* fairness between connections (-R), then back-pressure: a client
         * that does not read its replies, or a budget nearly used up */
        if (handled >= settings.reqs_per_event) {
            conn_set_yielded(c, true);
            break;
        }
        if (!conn_can_take_request(c)) {
            conn_set_yielded(c, false);
            break;
        }
        if (!c->authenticated) {
            /* -Y: nothing reaches the parser before auth.c lets it in */
            struct out_mark mark;
            outbuf_mark(&c->out, &mark);
            enum auth_step as = auth_step(c);
            if (as != AUTH_ANSWERED) break;
            handled++;
            __atomic_store_n(&c->last_cmd_time, (uint32_t)storage_now(), __ATOMIC_RELAXED);
            if (outbuf_failed(&c->out)) {
                conn_reply_failed(c, &mark, NULL);
                break;
            }
            continue;
        }
        if (c->get_stream.active) {
            struct out_mark mark;
            outbuf_mark(&c->out, &mark);
            bool go_on = proto_get_stream(c);
            if (outbuf_failed(&c->out)) {
                struct request gr = { .cmd = CMD_GET };
                conn_reply_failed(c, &mark, &gr);
                break;
            }
            if (!go_on) {
                conn_set_yielded(c, false);
                break;
            }
            if (c->get_stream.active) break;   /* the rest of the line is still to come */
            handled++;
            continue;
        }
        size_t consumed;
        const char *line = c->rbuf + c->rstart;
        long ll = find_line(line, avail, &consumed);
        if (ll < 0) {
            if (line_streams(line, avail)) {
                /* a get line that fills rbuf without its end: answer its
                 * keys as they come instead of holding the line (a shorter
                 * one is parsed whole, exactly as memcached does) */
                if (avail < c->rsize) break;
                struct request head;
                size_t keys_off = 0;
                enum parse_status st = parse_retrieval_head(line, avail, &head, &keys_off);
                c->get_stream.active = true;
                c->get_stream.skipping = st != PARSE_OK;
                c->get_stream.answered_any = false;
                c->get_stream.cmd = (uint8_t)head.cmd;
                c->get_stream.exptime = (int32_t)head.exptime;
                if (st != PARSE_OK) out_str(c, head.error);
                else c->rstart += keys_off;
                __atomic_store_n(&c->last_cmd_time, (uint32_t)storage_now(), __ATOMIC_RELAXED);
                continue;
            }
            /* memcached closes silently */
            if (avail > LINE_MAX_PLAIN) c->state = CONN_CLOSING;
            break;
        }
        c->rstart += consumed;
        handled++;
        __atomic_store_n(&c->last_cmd_time, (uint32_t)storage_now(), __ATOMIC_RELAXED);
        struct out_mark mark;
        outbuf_mark(&c->out, &mark);
        struct request r;
        uint64_t t_parse = TRACE_NOW();
        enum parse_status st = parse_request(line, (size_t)ll, consumed, &r);
        uint64_t t_parsed = TRACE_NOW();
        TRACE_REC(w->id, TRACE_PARSE, t_parsed - t_parse);
        bool go_on = true;
        if (st == PARSE_CLOSE) {
            c->state = CONN_CLOSING;
            break;
        } else if (st == PARSE_ERROR) {
            if (!r.noreply) out_str(c, "ERROR");
        } else if (st == PARSE_CLIENT_ERROR) {
            if (!r.noreply) out_str(c, r.error);
            if (r.swallow) {
                c->swallow_left = (size_t)r.vlen + 2;
                c->state = CONN_SWALLOW;
            }
        } else {
            go_on = proto_dispatch(c, &r, line, (size_t)ll);
#ifdef CACHET_TRACE
            uint64_t dispatched = TRACE_NOW() - t_parsed;
            if (!c->store_parked) TRACE_REC(w->id, TRACE_DISPATCH, dispatched);
            if (!c->store_parked && ((r.cmd >= CMD_SET && r.cmd <= CMD_CAS) || r.cmd == CMD_MS))
                TRACE_REC(w->id, TRACE_DISPATCH_STORE, dispatched);
#endif
            if (go_on) {
                /* done without waiting for the buffer budget (its key may
                 * have left the disk since it waited): a later disk read
                 * starts its own bounded wait, and the worker does not
                 * poll every millisecond for this one */
                c->waits_budget = false;
                c->budget_wait_since = 0;
            }
        }
        if (c->store_parked) {
            /* a store waits for extstore's flusher: not answered, not
             * counted; its line runs again (worker_before_sleep polls) */
            c->store_parked = false;
            c->rstart -= consumed;
            c->waits_store = true;
            conn_set_yielded(c, false);
            break;
        }
        c->waits_store = false;
        latency_note(c->w->id, r.cmd);
        if (outbuf_failed(&c->out)) {
            conn_reply_failed(c, &mark, st == PARSE_OK ? &r : NULL);
            break;
        }
        if (!go_on) {
            if (c->resume_off) {
                /* a GET waits for its output to drain: keep its line */
                c->rstart -= consumed;
                conn_set_yielded(c, false);
                break;
            }
            if (c->state == CONN_CMD) break;   /* e.g. quit */
        }
    }
    latency_batch_end(c->w->id);   /* every reply of the batch is queued */
    if (handled) TRACE_STAMP(c->trace_queued, TRACE_NOW());
    /* this batch's disk reads go to the disk now, not when the turn ends:
     * the rest of a busy turn is a long wait for a read that could already
     * be on its way */
    if (w->ext) ext_io_worker_submit(w->ext);
    /* the hashes point into rbuf, which the next read may move */
    prefetch_forget(w);
    if (c->rstart == c->rend) c->rstart = c->rend = 0;
    if (c->rend - c->rstart == 0 || c->state == CONN_CLOSING) {
        /* nothing left to parse: no need to be called back for this */
        if (c->yielded) {
            struct conn **pp = &w->pending;
            while (*pp && *pp != c) pp = &(*pp)->next_pending;
            if (*pp) *pp = c->next_pending;
            c->yielded = false;
        }
    }
}

/* A full rbuf holds complete requests waiting their turn, or a get line
 * waiting for its output to drain: either way reading more is pointless
 * (the kernel keeps the rest, and the client is held back). rbuf never
 * grows: a line with no end that fills it is answered as it streams in or
 * refused. */
static bool rbuf_wants_read(const struct conn *c)
{
    return c->rend < c->rsize || c->rstart > 0;
}

/* Nothing left that could still become a request: no bytes, or a line the
 * EOF cut short. */
static bool input_exhausted(const struct conn *c)
{
    size_t avail = c->rend - c->rstart;
    return avail == 0 || (c->state == CONN_CMD && !memchr(c->rbuf + c->rstart, '\n', avail));
}

#ifdef CACHET_TRACE
/* The batch's replies have left (or wait for the client): its stages end. */
static void trace_sent(struct conn *c, bool all_sent)
{
    if (!c->trace_queued || !all_sent) return;
    uint64_t now = TRACE_NOW();
    TRACE_REC(c->w->id, TRACE_QUEUED_SENT, now - c->trace_queued);
    TRACE_SINCE(c->w->id, TRACE_WAKE_SENT, c->trace_woke, now);
    c->trace_queued = 0;
}
#else
#define trace_sent(c, all_sent) ((void)0)
#endif

/* -Z: the queued replies sealed into records (tls_encrypt), each record
 * up to 16 KiB of them, and the sealed bytes sent, until the queue is empty
 * or the socket full. *written counts plaintext, as bytes_written does.
 * Done only when nothing sealed is left unsent either. */
static enum out_flush_result tls_flush(struct conn *c, uint64_t *written)
{
    *written = 0;
    for (;;) {
        uint64_t sealed;
        enum out_flush_result rc = outbuf_flush_with(&c->out, tls_encrypt, c->ssl, &sealed);
        *written += sealed;
        if (rc == OUT_FLUSH_ERROR) return rc;
        const void *p;
        size_t before = tls_unsent(c->ssl, &p);
        ssize_t left = tls_send_unsent(c->ssl);
        if (left < 0) return OUT_FLUSH_ERROR;
        /* the client took bytes: not stuck (kick_slow), however few */
        if ((size_t)left < before && c->write_blocked) c->blocked_since = conn_clock_s();
        if (left > 0) return OUT_FLUSH_BLOCKED;
        /* blocked on a full seal buffer, now sent: seal the rest; on
         * anything else (OpenSSL waits to read) stop here */
        if (rc != OUT_FLUSH_BLOCKED || before == 0 || tls_wants_read(c->ssl)) return rc;
    }
}

static enum out_flush_result conn_flush(struct conn *c, uint64_t *written)
{
    if (c->ssl) return tls_flush(c, written);
    return outbuf_flush(&c->out, c->fd, written);
}

static ssize_t conn_read(struct conn *c, void *buf, size_t len)
{
    return c->ssl ? tls_read(c->ssl, buf, len) : read_nocancel(c->fd, buf, len);
}

/* Flushes output, then decides what the connection waits for next. Returns
 * false if the connection was closed. */
bool conn_after_work(struct conn *c)
{
    struct worker *w = c->w;
    uint64_t written;
    enum out_flush_result rc = conn_flush(c, &written);
    if (written) STAT_ADD(w, bytes_written, written);
    if (written && c->write_blocked) c->blocked_since = conn_clock_s();
    if (rc == OUT_FLUSH_ERROR) { conn_close(c); return false; }
    trace_sent(c, rc == OUT_FLUSH_DONE);
    __atomic_store_n(&c->stat_state, (int)c->state, __ATOMIC_RELAXED);
    struct ae_loop *l = w->loop;
    /* -Z: OpenSSL may need the other direction than the call that stopped:
     * a read driving the handshake waits to write, a send waits to read */
    c->tls_write_wants_read = c->ssl && rc == OUT_FLUSH_BLOCKED && tls_send_wants_read(c->ssl);
    bool want_write = (rc == OUT_FLUSH_BLOCKED && !c->tls_write_wants_read) || c->tls_read_wants_write;
    if (want_write) {
        if (!c->write_blocked) {
            c->write_blocked = true;
            c->blocked_since = conn_clock_s();
            ae_add(l, c->fd, AE_WRITABLE, conn_writable, c);
        }
    } else if (c->write_blocked) {
        c->write_blocked = false;
        c->blocked_since = 0;
        ae_del(l, c->fd, AE_WRITABLE);
    }
    /* The client half-closed: once every request it sent is answered and
     * sent (nothing queued or deferred, no pipelined request waiting its
     * turn), close. A request cut short by the EOF can never complete. */
    if (c->peer_eof && rc == OUT_FLUSH_DONE && outbuf_empty(&c->out) && !c->yielded) {
        if (input_exhausted(c)) {
            conn_close(c);
            return false;
        }
        /* requests read before the EOF wait for their turn (the worker
         * cleared yielded while this waited to write): answer them first */
        conn_set_yielded(c, false);
    }
    bool stopping = server_shutting_down();
    if (rc == OUT_FLUSH_DONE &&
        (c->state == CONN_CLOSING || (stopping && c->state == CONN_CMD && !c->resume_off && !c->waits_store))) {
        conn_close(c);
        return false;
    }
    /* a client that does not read its replies must not make us buffer
     * without bound: stop reading it until it catches up. Shutting down,
     * only a value already being received is read to its end. */
    bool want_read = c->state != CONN_CLOSING && !c->peer_eof &&
                     ((rbuf_wants_read(c) && !(c->write_blocked && outbuf_pending(&c->out) > OUT_HIGH_WATER) &&
                       (!stopping || c->state == CONN_NREAD || c->state == CONN_SWALLOW)) ||
                      c->tls_write_wants_read);
    bool reading = (ae_mask(l, c->fd) & AE_READABLE) != 0;
    if (want_read && !reading) ae_add(l, c->fd, AE_READABLE, read_proc, c);
    else if (!want_read && reading) ae_del(l, c->fd, AE_READABLE);
    if (want_read && c->ssl && !c->yielded && tls_pending(c->ssl)) {
        /* read them next turn (conn_continue) */
        c->tls_unread = true;
        conn_set_yielded(c, false);
    }
    return true;
}

/* Room at rend for the next read: false when rbuf is full (see
 * rbuf_wants_read). */
static bool rbuf_make_room(struct conn *c)
{
    if (c->rstart > 0 && c->rend == c->rsize) {
        memmove(c->rbuf, c->rbuf + c->rstart, c->rend - c->rstart);
        c->rend -= c->rstart;
        c->rstart = 0;
    }
    return c->rend < c->rsize;
}

/* Reads and answers what the socket (or OpenSSL) holds, without sending;
 * false if the connection was closed. */
static bool conn_read_and_answer(struct ae_loop *l, struct conn *c)
{
    (void)l;
    c->tls_read_wants_write = false;   /* set again below if it still does */
#ifdef CACHET_TRACE
    if (c->batch_idx < 0 && l->woke_ns) {   /* io_uring's fallbacks stamped it already */
        c->trace_woke = l->woke_ns;
        TRACE_REC(c->w->id, TRACE_READY_WAIT, TRACE_NOW() - c->trace_woke);
    }
#endif
    for (int round = 0; round < 8 && c->state != CONN_CLOSING; round++) {
        ssize_t n;
        size_t want;
        if (c->state == CONN_NREAD && c->rstart == c->rend && c->nread_left >= DIRECT_READ_MIN) {
            /* a large value: read it straight into item memory, piece by
             * piece (the terminator goes to the connection's two bytes) */
            char *dst = proto_nread_dst(c, &want);
            n = conn_read(c, dst, want);
            if (n > 0) {
                STAT_ADD(c->w, bytes_read, (uint64_t)n);
                nread_advance(c, (size_t)n);
                if (c->state != CONN_NREAD) process_input(c);
                if ((size_t)n < want) break;
                continue;
            }
        } else {
            if (!rbuf_make_room(c)) break;
            want = c->rsize - c->rend;
            uint64_t t_read = TRACE_NOW();
            n = conn_read(c, c->rbuf + c->rend, want);
            TRACE_REC(c->w->id, TRACE_READ, TRACE_NOW() - t_read);
            if (n > 0) {
                c->rend += (size_t)n;
                STAT_ADD(c->w, bytes_read, (uint64_t)n);
                process_input(c);
                if ((size_t)n < want || c->yielded) break;
                continue;
            }
        }
        if (n == 0) {
            /* a half-close is not an abort: memcached answers every request
             * it read before it closes, and so do we (conn_after_work) */
            c->peer_eof = true;
            break;
        }
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            c->tls_read_wants_write = c->ssl && tls_wants_write(c->ssl);
            break;
        }
        conn_close(c);
        return false;
    }
    return true;
}

static void conn_readable(struct ae_loop *l, int fd, void *data, int mask)
{
    (void)fd;
    (void)mask;
    struct conn *c = data;
    if (conn_read_and_answer(l, c)) conn_after_work(c);
}

/* A connection on the pending list continues: a read of what OpenSSL holds
 * (tls_unread), else the requests already in rbuf. */
void conn_continue(struct conn *c)
{
    if (c->tls_unread) {
        c->tls_unread = false;
        conn_readable(c->w->loop, c->fd, c, AE_READABLE);
        return;
    }
    process_input(c);
    conn_after_work(c);
}

/* The queue moved (sent, or a deferred slot completed): resume a connection
 * that waited for it. */
void conn_resume(struct conn *c)
{
    if (c->rend > c->rstart && c->state != CONN_CLOSING) process_input(c);
    conn_after_work(c);
}

static void conn_writable(struct ae_loop *l, int fd, void *data, int mask)
{
    struct conn *c = data;
    if (c->tls_read_wants_write) {
        /* the socket took what the handshake (or a record) had to write:
         * the read goes on, and its conn_after_work flushes and re-arms */
        c->tls_read_wants_write = false;
        conn_readable(l, fd, c, AE_READABLE);
        return;
    }
    uint64_t written;
    enum out_flush_result rc = conn_flush(c, &written);
    if (written) STAT_ADD(c->w, bytes_written, written);
    if (rc == OUT_FLUSH_ERROR) { conn_close(c); return; }
    if (rc == OUT_FLUSH_BLOCKED) {
        if (written) c->blocked_since = conn_clock_s();   /* it took something: not stuck */
        return;
    }
    conn_resume(c);
}

/* io_uring mode: a connection whose disk replies completed answers what
 * waited behind them now, and is sent with the turn's batch (uring_turn,
 * before the loop sleeps): the replies of every connection whose reads
 * completed this turn leave in one io_uring_enter, not a sendmsg each. */
static void batch_for_send(struct worker *w, struct conn *c)
{
    if (c->rend > c->rstart && c->state != CONN_CLOSING) process_input(c);
    if (c->batch_idx >= 0) return;   /* already in it: sent with it */
    if (w->nbatch >= WORKER_BATCH_MAX) uring_turn(w);
    c->batch_idx = w->nbatch;
    c->batch_send_only = true;
    w->batch[w->nbatch++] = c;
}

/* Deferred replies completed by any thread (reply.h). */
void drain_completions(struct worker *w)
{
    struct reply_handle *h = reply_queue_take(&w->replies);
    while (h) {
        struct reply_handle *next = reply_handle_next(h);
        struct conn *c = reply_handle_arrived(h);
        if (!c) {
            reply_handle_free(h);    /* its connection closed meanwhile */
        } else if (reply_handle_aborted(h)) {
            /* a value cut short after its first pieces were sent: memcached
             * closes a connection it cannot finish a value on, and so does
             * this one (the client sees the value incomplete, never whole) */
            outbuf_deferred_ready(&c->out, h);
            conn_close(c);
        } else {
            outbuf_deferred_ready(&c->out, h);
            /* a client that closed its side is sent each reply at once, as
             * before: a client gone altogether is found out by the first
             * failed send, and the disk reads behind it are not waited for */
            if (w->ring && !c->ssl && !c->peer_eof) batch_for_send(w, c);
            else conn_resume(c);
        }
        h = next;
    }
}

/* ---------------------------------------------------------------- io_uring
 * io_uring mode: epoll marks connections readable; once URING_CHUNK of them
 * are marked (or the turn's events are done), one io_uring_enter reads them
 * all, every complete request is answered into the output queues, and one
 * more io_uring_enter sends all replies. A turn with few ready connections
 * takes the plain path (conn_readable). See uring.h for why every
 * operation completes inside its submit. A TLS connection (-Z) shares the
 * read submit: its ciphertext is received where its plaintext will go and
 * handed to OpenSSL (tls.h, tls_stage), whose read takes it all before it
 * writes any plaintext; the plain path's read then answers, and the send
 * submit carries the records its replies were sealed into (tls_encrypt,
 * tls_unsent), one buffer per connection as for plaintext. */

/* A turn with fewer ready connections than this serves each at once with
 * read() and send(), as memcached does: a batch of one or two saves no
 * syscall, and io_uring's own cost per operation is higher (W2 at 256
 * connections, where most turns find one to three ready: docs/benchmarks.md). */
#define URING_MIN_BATCH 4
/* A batch is read, answered and sent as soon as it has this many
 * connections, while the turn's later events wait: a burst of 100 ready
 * connections no longer holds every reply until the last of them has been
 * read and answered (the p99 of W2), and 16 to a submit keeps nearly all
 * of the syscalls batching saves. */
#define URING_CHUNK 16

static void conn_mark_ready(struct ae_loop *l, int fd, void *data, int mask)
{
    struct conn *c = data;
    struct worker *w = c->w;
    if (c->batch_idx >= 0) {
        c->batch_send_only = false;   /* there for its disk replies: read it too */
        return;
    }
    if (l->fired_now < URING_MIN_BATCH) {
        conn_readable(l, fd, data, mask);
        return;
    }
    c->batch_idx = w->nbatch;
    w->batch[w->nbatch++] = c;
    TRACE_STAMP(c->trace_woke, l->woke_ns);
    if (w->nbatch >= URING_CHUNK) uring_turn(w);
}

/* -Z: a connection whose ciphertext the batch may receive (tls.h,
 * tls_stage): the handshake is over, OpenSSL holds no bytes, and it waits
 * for nothing but its socket to be readable. */
static bool tls_stageable(struct conn *c)
{
    return !c->tls_read_wants_write && !c->tls_write_wants_read && !c->tls_unread && tls_can_stage(c->ssl);
}

/* Ciphertext goes where the read's plaintext will: the free end of rbuf,
 * at most what OpenSSL's first read takes at once. */
static size_t tls_stage_room(struct conn *c)
{
    size_t room = c->rsize - c->rend;
    return c->ssl && room > TLS_STAGE_MAX ? TLS_STAGE_MAX : room;
}

/* A batch's queues in pieces (disk replies among others) go as sendmsg
 * operations of its submit, their iovecs on the stack for the submit's
 * length: up to BATCH_GATHER_CONNS of them, BATCH_GATHER_IOV pieces each
 * (a pipeline of 8 disk replies is about 24; what is left of a longer
 * queue goes on the plain path, after): 18 KiB of the worker's stack,
 * within memory_budget.c's THREAD_BYTES (a worker's touched stack). */
#define BATCH_GATHER_CONNS 32
#define BATCH_GATHER_IOV   32

/* Has something the batch's submit may send. */
static bool batch_sendable(struct conn *c)
{
    return c && !c->write_blocked && (!outbuf_contiguous(&c->out) || outbuf_contig_len(&c->out) > 0);
}

void uring_turn(struct worker *w)
{
    int n = w->nbatch;
    if (!n) return;
    /* phase 1: read every ready connection in one submit */
    int queued = 0;
    for (int i = 0; i < n; i++) {
        struct conn *c = w->batch[i];
        if (!c || c->batch_send_only) continue;
        bool direct = c->state == CONN_NREAD && c->rstart == c->rend && c->nread_left >= DIRECT_READ_MIN;
        if (direct || c->state == CONN_CLOSING || !rbuf_make_room(c) || (c->ssl && !tls_stageable(c))) {
            /* large values go straight into item memory; odd cases use the plain path */
            w->batch[i] = NULL;
            c->batch_idx = -1;
            conn_readable(w->loop, c->fd, c, AE_READABLE);
            continue;
        }
        uring_prep_recv(w->ring, c->fd, c->rbuf + c->rend, tls_stage_room(c), (uint64_t)i);
        queued++;
    }
#ifdef CACHET_TRACE
    uint64_t t_read = TRACE_NOW();
    for (int i = 0; i < n; i++)
        if (w->batch[i]) TRACE_SINCE(w->id, TRACE_READY_WAIT, w->batch[i]->trace_woke, t_read);
#endif
    int read_rc = queued ? uring_submit_and_wait(w->ring) : 0;
#ifdef CACHET_TRACE
    uint64_t t_reads_done = TRACE_NOW();
    for (int i = 0; i < n; i++)
        if (w->batch[i]) TRACE_REC(w->id, TRACE_READ, t_reads_done - t_read);
#endif
    if (read_rc < 0) {
        /* the ring failed: finish this turn with plain syscalls */
        for (int i = 0; i < n; i++) {
            struct conn *c = w->batch[i];
            if (!c) continue;
            w->batch[i] = NULL;
            c->batch_idx = -1;
            if (c->batch_send_only) {
                c->batch_send_only = false;
                conn_after_work(c);
            } else {
                conn_readable(w->loop, c->fd, c, AE_READABLE);
            }
        }
        w->nbatch = 0;
        return;
    }
    uint64_t ud;
    int32_t res;
    /* the connections that read requests are answered once every read is
     * in, their lone GETs' misses overlapped first (prefetch_conns); kept by
     * batch slot, which a close clears, not by pointer */
    uint64_t got_ud[URING_CHUNK];
    int ngot = 0;
    while (uring_next_cqe(w->ring, &ud, &res)) {
        struct conn *c = w->batch[ud];
        if (!c) continue;
        if (c->ssl) {
            /* ciphertext: decrypted by the plain path's read, which takes it
             * before the socket (and finds EOF or EAGAIN there itself when
             * nothing came); its replies go out with the batch's sends */
            if (res > 0) {
                tls_stage(c->ssl, c->rbuf + c->rend, (size_t)res);
                STAT_INC(w, tls_staged_reads);
            }
            conn_read_and_answer(w->loop, c);   /* a close clears w->batch[ud] */
            continue;
        }
        if (res > 0) {
            c->rend += (size_t)res;
            STAT_ADD(w, bytes_read, (uint64_t)res);
            if (ngot < URING_CHUNK) got_ud[ngot++] = ud;
            else process_input(c);
        } else if (res == 0) {
            c->peer_eof = true;   /* answered, then closed: conn_after_work */
        } else if (res != -EAGAIN && res != -EINTR) {
            conn_close(c);   /* clears w->batch[ud] */
        }
    }
    struct conn *got[URING_CHUNK];
    int nlive = 0;
    for (int i = 0; i < ngot; i++)
        if (w->batch[got_ud[i]]) got[nlive++] = w->batch[got_ud[i]];
    prefetch_conns(w, got, nlive);
    for (int i = 0; i < ngot; i++) {
        struct conn *c = w->batch[got_ud[i]];
        if (c) process_input(c);
    }
    /* phase 2: send every connection's replies in one submit (send for a
     * queue in one piece, sendmsg for one in pieces). A batch that is one
     * connection's disk replies alone takes the plain path: a sendmsg()
     * costs one syscall as well, and less than a ring operation. */
    int sendable = 0;
    for (int i = 0; i < n; i++) sendable += batch_sendable(w->batch[i]);
    bool send_in_batch = queued > 0 || sendable >= 2;
    queued = 0;
    struct iovec iov[BATCH_GATHER_CONNS][BATCH_GATHER_IOV];
    struct msghdr mh[BATCH_GATHER_CONNS];
    int gathered = 0;
    for (int i = 0; i < n && send_in_batch; i++) {
        struct conn *c = w->batch[i];
        if (!c || c->write_blocked) continue;
        if (c->ssl) {
            /* -Z: the replies sealed into records first (tls_flush's first
             * half), then the records sent with everyone else's */
            if (c->tls_read_wants_write) continue;
            uint64_t sealed;
            if (outbuf_flush_with(&c->out, tls_encrypt, c->ssl, &sealed) == OUT_FLUSH_ERROR) {
                conn_close(c);
                continue;
            }
            STAT_ADD(w, bytes_written, sealed);
            const void *p;
            size_t len = tls_unsent(c->ssl, &p);
            if (!len) continue;
            uring_prep_send(w->ring, c->fd, p, len, (uint64_t)i);
            queued++;
            continue;
        }
        if (!batch_sendable(c)) continue;
        if (outbuf_contiguous(&c->out)) {
            uring_prep_send(w->ring, c->fd, outbuf_contig_ptr(&c->out), outbuf_contig_len(&c->out), (uint64_t)i);
            queued++;
            continue;
        }
        if (gathered == BATCH_GATHER_CONNS) continue;
        int niov = outbuf_send_iov(&c->out, iov[gathered], BATCH_GATHER_IOV);
        if (!niov) continue;   /* waits for its first deferred reply */
        mh[gathered] = (struct msghdr){ .msg_iov = iov[gathered], .msg_iovlen = (size_t)niov };
        uring_prep_sendmsg(w->ring, c->fd, &mh[gathered++], (uint64_t)i);
        queued++;
    }
    if (queued && uring_submit_and_wait(w->ring) >= 0) {
        while (uring_next_cqe(w->ring, &ud, &res)) {
            struct conn *c = w->batch[ud];
            if (!c || res <= 0) continue;    /* errors and EAGAIN: conn_after_work retries and decides */
            if (c->ssl) {
                tls_sent(c->ssl, (size_t)res);
                STAT_INC(w, tls_staged_sends);
                continue;
            }
            STAT_ADD(w, bytes_written, (uint64_t)res);
            outbuf_consumed(&c->out, (size_t)res);
        }
    }
    /* whatever is left (partial sends, in-place values, closing) takes the plain path */
    for (int i = 0; i < n; i++) {
        struct conn *c = w->batch[i];
        if (!c) continue;
        w->batch[i] = NULL;
        c->batch_idx = -1;
        c->batch_send_only = false;
        conn_after_work(c);
    }
    w->nbatch = 0;
}


static void describe_peer(struct conn *c, const struct sockaddr_storage *ss)
{
    char host[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)ss;
        inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
        port = ntohs(a->sin_port);
    } else if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ss;
        inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
        port = ntohs(a->sin6_port);
    } else if (ss->ss_family == AF_UNIX) {
        /* a unix client rarely binds a name: show the socket it came in on */
        snprintf(c->addr, sizeof(c->addr), "unix:%s", settings.socketpath);
        return;
    }
    snprintf(c->addr, sizeof(c->addr), ss->ss_family == AF_INET6 ? "tcp:[%s]:%d" : "tcp:%s:%d", host, port);
}

/* A connection worker w accepted (net_listen.c): its buffers, its place in
 * the loop and in the registry. False: no memory or no room in the loop;
 * the caller refuses it as one over -c. */
bool conn_open(struct worker *w, int fd, const struct sockaddr_storage *ss)
{
    struct ae_loop *l = w->loop;
    bool tcp = ss->ss_family == AF_INET || ss->ss_family == AF_INET6;
    if (tcp) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    }
    net_fix_socket_buffers(fd);   /* unix sockets take them too */
    struct conn *c = calloc(1, sizeof(*c));
    char *rb = malloc(RBUF_INITIAL);
    if (!c || !rb) {
        free(c); free(rb);
        return false;
    }
    c->fd = fd;
    c->w = w;
    c->rbuf = rb;
    c->rsize = RBUF_INITIAL;
    c->state = CONN_CMD;
    c->tcp = tcp;
    outbuf_init(&c->out, w->st, &w->replies, c);
    describe_peer(c, ss);
    c->last_cmd_time = (uint32_t)storage_now();
    c->batch_idx = -1;
    c->authenticated = !auth_enabled();
    if (tcp && tls_enabled() && !(c->ssl = tls_accept(fd))) {
        free(rb); free(c);
        return false;
    }
    if (ae_add(l, fd, AE_READABLE, read_proc, c) < 0) {
        if (c->ssl) tls_close(c->ssl);
        free(rb); free(c);
        return false;
    }
    registry_lock();
    c->next = w->conns;
    if (w->conns) w->conns->prev = c;
    w->conns = c;
    registry_unlock();
    __atomic_add_fetch(&total_conns_global, 1, __ATOMIC_RELAXED);
    if (verbosity() > 1) fprintf(stderr, "<%d new client connection from %s on worker %d\n", fd, c->addr, w->id);
    return true;
}

void conn_use_uring(bool on) { read_proc = on ? conn_mark_ready : conn_readable; }
