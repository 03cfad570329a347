/*
 * proto_text.c - memcached's classic ASCII commands.
 *
 * Why replies are built by hand instead of with printf: on a pipelined GET
 * load, formatting "VALUE key flags bytes" is the single largest cost after
 * the syscalls, so numbers are written with a small integer writer straight
 * into the connection's output buffer. A small value is copied by storage
 * directly behind its reserved header space (copy-out: no reference count,
 * the item may be replaced the moment we return), then slid up against the
 * header, so a whole batch of replies is one contiguous send().
 *
 * Reply strings and noreply handling follow memcached 1.6: noreply suppresses
 * every reply of a classic command, errors included; a storage command whose
 * value cannot be stored still has its data block swallowed, so the stream
 * stays in sync; a failed set also drops the old value, as memcached does, so
 * a reader never sees a value the client believes it replaced.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conn.h"
#include "ext_io.h"
#include "logger.h"
#include "proto.h"
#include "proto_parser.h"
#include "proto_reply.h"
#include "server.h"
#include "stats.h"
#include "testhook.h"
#include "tls.h"

static void reply(struct conn *c, const struct request *r, const char *s)
{
    if (!r->noreply) out_str(c, s);
}

/* ---- retrieval ---- */

#define VALUE_HDR_MAX(nkey) ((size_t)(nkey) + 64)

/* The room (header and copy_cap) came from out_value_room(). False: a disk
 * value found no reply slot; nothing was queued, the GET waits (ext_io.h). */
static inline __attribute__((always_inline)) bool emit_value(struct conn *c, const char *key, uint32_t nkey,
                       const struct get_opts *opts, bool with_cas, size_t copy_cap)
{
    size_t hdr_max = VALUE_HDR_MAX(nkey);
    char *base = out_tail(c);
    char *copy_at = base + hdr_max;
    struct item_view v;
    if (!conn_storage_get(c, key, nkey, opts, copy_at, copy_cap, &v)) {
        if (log_wants(LOG_FETCHERS)) log_item_get(key, nkey, LOG_GET_NOT_FOUND, 0, c->fd, 0);
        return true;
    }
    if (log_wants(LOG_FETCHERS)) log_item_get(key, nkey, LOG_GET_FOUND, v.slab_class, c->fd, v.nbytes);
    char *p = base;
    memcpy(p, "VALUE ", 6); p += 6;
    memcpy(p, key, nkey); p += nkey;
    *p++ = ' ';
    p = u64_to_str(p, v.client_flags);
    *p++ = ' ';
    p = u64_to_str(p, v.nbytes);
    if (with_cas) { *p++ = ' '; p = u64_to_str(p, v.cas); }
    *p++ = '\r'; *p++ = '\n';
    if (v.on_disk) {
        /* a failed read drops the VALUE, as memcached does */
        return ext_io_value(c, base, (size_t)(p - base), "", 0, key, nkey, &v);
    }
    out_value(c, p, &v);
    return true;
}

/* What a get, gets, gat or gats asks of storage for each of its keys. */
static inline struct get_opts get_opts_for(enum req_cmd cmd, int64_t exptime)
{
    /* a text GET's reply needs only the value, its length, flags and CAS;
     * a fetchers watcher also wants the class (logger.c) */
    struct get_opts opts = { .value_only = !log_wants(LOG_FETCHERS) };
    if (cmd == CMD_GAT || cmd == CMD_GATS) {
        opts.touch = true;
        opts.new_exptime = storage_exptime(exptime);
    }
    return opts;
}

enum keys_result {
    KEYS_DONE,     /* every key of the range answered */
    KEYS_WAIT,     /* the output queue must drain before the key at *p */
    KEYS_BAD,      /* the key at *p is longer than KEY_MAX */
    KEYS_FAILED,   /* a reply could not be built (outbuf_failed) */
};

/* Answers the keys of [*p, end) in order; *p ends at the first key not
 * answered (or at end), *answered counts those answered. check_len: the
 * keys were not validated by the parser (a streamed line). Inlined, with
 * emit_value, into its two callers: as calls they cost every single-key
 * GET 45 instructions (3%, bench/callgrind-get.py). */
static inline __attribute__((always_inline)) enum keys_result
get_keys(struct conn *c, const struct get_opts *opts, bool with_cas, const char **p, const char *end,
         bool check_len, uint32_t *answered)
{
    const char *cur = *p, *key;
    uint32_t nkey;
    enum keys_result res;
    while (next_key(&cur, end, &key, &nkey)) {
        if (check_len && nkey > KEY_MAX) { res = KEYS_BAD; goto stop; }
        size_t copy_cap;
#ifdef CACHET_TEST_HOOKS
        int hooked = testhook_get(c, key, nkey, opts, with_cas);
        if (hooked < 0) { res = KEYS_WAIT; goto stop; }
        if (hooked > 0) { STAT_INC(c->w, cmd_get); (*answered)++; continue; }
#endif
        /* every deferred slot taken: the next key may be on disk, and a
         * disk value must wait for a slot, never become a miss (ext_io.h) */
        if (out_defer_full(c)) { res = KEYS_WAIT; goto stop; }
        if (!out_value_room(c, VALUE_HDR_MAX(nkey), &copy_cap)) {
            if (out_can_wait(c)) { res = KEYS_WAIT; goto stop; }
            out_fail(c);   /* nothing to wait for: this reply cannot be built */
            res = KEYS_FAILED;
            goto stop;
        }
        if (!emit_value(c, key, nkey, opts, with_cas, copy_cap)) { res = KEYS_WAIT; goto stop; }
        STAT_INC(c->w, cmd_get);
        if (opts->touch) STAT_INC(c->w, cmd_touch);
        (*answered)++;
    }
    *p = cur;
    return KEYS_DONE;
stop:
    *p = key;
    return res;
}

/* Returns false when the GET has to wait for its output to drain before
 * the next key: c->resume_off then says where to pick up (see conn.h). */
static bool process_get(struct conn *c, struct request *r, const char *line)
{
    struct get_opts opts = get_opts_for(r->cmd, r->exptime);
    bool with_cas = r->cmd == CMD_GETS || r->cmd == CMD_GATS;
    const char *p = c->resume_off ? line + c->resume_off : r->keys;
    c->resume_off = 0;
    uint32_t answered = 0;
    switch (get_keys(c, &opts, with_cas, &p, r->keys + r->nkeys_text, false, &answered)) {
    case KEYS_WAIT:
        /* bounded memory for any number of keys: the rest of the line is
         * answered once the client has read what is queued */
        c->resume_off = (uint32_t)(p - line);
        return false;
    case KEYS_FAILED:
        return true;
    default:   /* the parser refused a line with a bad key: no KEYS_BAD here */
        out_add(c, "END\r\n", 5);
        return true;
    }
}

bool proto_get_stream(struct conn *c)
{
    for (;;) {
        const char *buf = c->rbuf + c->rstart;
        size_t avail = c->rend - c->rstart;
        const char *nl = memchr(buf, '\n', avail);
        if (c->get_stream.skipping) {
            c->rstart = nl ? (size_t)(nl + 1 - c->rbuf) : c->rend;
            if (nl) c->get_stream.active = c->get_stream.skipping = false;
            return true;
        }
        /* the keys known to be whole: all of them once the line's end is
         * here, else those a space already follows */
        const char *end;
        if (nl) {
            end = nl > buf && nl[-1] == '\r' ? nl - 1 : nl;
        } else {
            end = buf + avail;
            while (end > buf && end[-1] != ' ') end--;
        }
        enum req_cmd cmd = (enum req_cmd)c->get_stream.cmd;
        struct get_opts opts = get_opts_for(cmd, c->get_stream.exptime);
        const char *p = buf;
        uint32_t answered = 0;
        enum keys_result res = get_keys(c, &opts, cmd == CMD_GETS || cmd == CMD_GATS, &p, end, true, &answered);
        if (answered) c->get_stream.answered_any = true;
        c->rstart = (size_t)(p - c->rbuf);
        if (res == KEYS_WAIT) return false;
        if (res == KEYS_FAILED) return true;
        /* a key that is already longer than a key may be, ended or not */
        if (res == KEYS_BAD || (!nl && c->rend - c->rstart > KEY_MAX)) {
            /* memcached refuses the whole line with this (and an empty line);
             * the values of the keys before it may be sent already */
            out_str(c, "CLIENT_ERROR bad command line format\r\n");
            c->get_stream.skipping = true;
            continue;
        }
        if (!nl) return true;   /* the rest of the line has not arrived */
        c->rstart = (size_t)(nl + 1 - c->rbuf);
        c->get_stream.active = false;
        if (c->get_stream.answered_any) out_add(c, "END\r\n", 5);
        else out_str(c, "CLIENT_ERROR bad command line format");   /* a get line without a key */
        return true;
    }
}

/* ---- storage ---- */

static enum store_mode mode_of(enum req_cmd cmd)
{
    switch (cmd) {
    case CMD_ADD: return MODE_ADD;
    case CMD_REPLACE: return MODE_REPLACE;
    case CMD_APPEND: return MODE_APPEND;
    case CMD_PREPEND: return MODE_PREPEND;
    case CMD_CAS: return MODE_CAS;
    default: return MODE_SET;
    }
}

static const char *store_reply(enum store_result res)
{
    switch (res) {
    case STORE_STORED: return "STORED";
    case STORE_NOT_STORED: return "NOT_STORED";
    case STORE_EXISTS: return "EXISTS";
    case STORE_NOT_FOUND: return "NOT_FOUND";
    case STORE_TOO_LARGE: return "SERVER_ERROR object too large for cache";
    default: return "SERVER_ERROR out of memory storing object";
    }
}

/* The data block is in it and its two terminator bytes in crlf; store it
 * and answer. */
static void finish_store(struct conn *c, struct request *r, item *it, const char crlf[2])
{
    struct worker *w = c->w;
    if (crlf[0] != '\r' || crlf[1] != '\n') {
        item_discard(w->st, it);
        if (r->cmd == CMD_MS) proto_meta_complete_set(c, r, NULL, true);
        else reply(c, r, "CLIENT_ERROR bad data chunk");
        return;
    }
    if (r->cmd == CMD_MS) { proto_meta_complete_set(c, r, it, false); return; }
    struct store_opts so = { .cas_in = r->cas };
    uint64_t cas_out = 0;
    unsigned clsid = log_wants(LOG_MUTATIONS) ? item_slab_class(it) : 0;   /* before the store frees it */
    enum store_result res = storage_store(w->st, it, mode_of(r->cmd), &so, &cas_out);
    if (log_wants(LOG_MUTATIONS))
        log_item_store(r->key, r->nkey, proto_store_status_word(res), proto_store_mode_word(mode_of(r->cmd)),
                       proto_store_ttl(r->exptime), clsid, c->fd, (uint32_t)r->vlen);
    reply(c, r, store_reply(res));
}

char *proto_nread_dst(struct conn *c, size_t *len)
{
    size_t vlen = c->nread_off + c->nread_left - 2;
    if (c->nread_off < vlen) {
        char *p = item_value_span(c->it, c->nread_off, len);
        if (*len > vlen - c->nread_off) *len = vlen - c->nread_off;
        return p;
    }
    *len = c->nread_left;
    return c->nread_crlf + (c->nread_off - vlen);
}

static void complete_nread(struct conn *c)
{
    struct request r;
    item *it = c->it;
    c->it = NULL;
    c->state = CONN_CMD;
    /* cannot fail: this line parsed before */
    parse_request(c->pending_line, c->pending_len, c->pending_len + 2, &r);
    finish_store(c, &r, it, c->nread_crlf);
}

void proto_nread_advance(struct conn *c, size_t n)
{
    c->nread_off += n;
    c->nread_left -= n;
    if (c->nread_left == 0) complete_nread(c);
}

/* Shared by set/add/.../cas and ms: allocate, then take the data block from
 * the input buffer if it is all there, else continue in CONN_NREAD. */
static bool start_store(struct conn *c, struct request *r, const char *line, size_t len,
                        uint32_t client_flags, int64_t exptime)
{
    struct worker *w = c->w;
    enum store_result err = STORE_NO_MEMORY;
    item *it = item_alloc_parking(w->st, r->key, r->nkey, client_flags, storage_exptime(exptime), r->vlen,
                                  &c->store_park, &err);
    if (!it && err == STORE_PARKED) {
        /* nothing answered, nothing read of the data block: the line runs
         * again on a later turn (net_conn.c) */
        c->store_parked = true;
        return false;
    }
    c->store_park = (struct store_park){0};
    if (r->cmd == CMD_MS) STAT_INC(w, cmd_meta);   /* once, not once per retry */
    STAT_INC(w, cmd_set);
    if (!it) {
        /* memcached counts a store whose item it cannot allocate, by why */
        if (err == STORE_TOO_LARGE) STAT_INC(w, store_too_large);
        else if (err == STORE_NO_MEMORY) STAT_INC(w, store_no_memory);
        if (r->cmd != CMD_MS && log_wants(LOG_MUTATIONS))
            log_item_store(r->key, r->nkey, proto_store_status_word(err), proto_store_mode_word(mode_of(r->cmd)),
                           proto_store_ttl(exptime), 0, c->fd, 0);
        if (r->cmd == CMD_MS) {
            out_str(c, err == STORE_TOO_LARGE ? "SERVER_ERROR object too large for cache"
                                              : "SERVER_ERROR out of memory storing object");
        } else {
            reply(c, r, store_reply(err));
        }
        if (r->cmd == CMD_SET || (r->cmd == CMD_MS && (!r->meta.mode || r->meta.mode == 'S'))) {
            struct delete_opts d = {0};
            storage_delete(w->st, r->key, r->nkey, &d);
        }
        c->swallow_left = (size_t)r->vlen + 2;
        c->state = CONN_SWALLOW;
        return true;
    }
    if (r->cmd == CMD_MS && r->meta.base64) item_set_key_binary(it);
    size_t need = (size_t)r->vlen + 2;
    size_t avail = c->rend - c->rstart;
    c->it = it;
    c->nread_off = 0;
    c->nread_left = need;
    if (avail >= need) {
        /* the whole block is here: copy it and store without a state change */
        while (c->nread_left > 2) {
            size_t n;
            char *dst = proto_nread_dst(c, &n);
            memcpy(dst, c->rbuf + c->rstart, n);
            c->rstart += n;
            c->nread_off += n;
            c->nread_left -= n;
        }
        memcpy(c->nread_crlf, c->rbuf + c->rstart, 2);
        c->rstart += 2;
        c->it = NULL;
        finish_store(c, r, it, c->nread_crlf);
        return true;
    }
    /* the line lives in rbuf, which will be reused: keep a copy to re-parse */
    char *pl = realloc(c->pending_line, len ? len : 1);
    if (!pl) {
        item_discard(w->st, it);
        c->it = NULL;
        out_str(c, "SERVER_ERROR out of memory storing object");
        c->state = CONN_CLOSING;
        return false;
    }
    memcpy(pl, line, len);
    c->pending_line = pl;
    c->pending_len = len;
    c->state = CONN_NREAD;
    while (c->state == CONN_NREAD && c->rstart < c->rend) {
        size_t n;
        char *dst = proto_nread_dst(c, &n);
        if (n > c->rend - c->rstart) n = c->rend - c->rstart;
        memcpy(dst, c->rbuf + c->rstart, n);
        c->rstart += n;
        proto_nread_advance(c, n);
    }
    return false;
}

/* ---- the rest ---- */

/* Room a stats line needs before it is written (the longest, a `stats
 * conns` address, is under 200 bytes). */
#define STAT_LINE_ROOM 1024

/* A long stats reply (`stats conns` at thousands of connections, `stats
 * extstore` at thousands of pages) is written in pieces: when the output
 * queue has no room for the next line, the reply stops there and waits for
 * the client to read, then is generated again, skipping the lines already
 * queued. So it needs no memory beyond the connection buffer budget. */
struct stats_writer {
    struct conn *c;
    uint32_t     line, skip;
    bool         stopped;
};

static void stat_line(void *ctx, const char *name, const char *fmt, ...)
{
    struct stats_writer *sw = ctx;
    struct conn *c = sw->c;
    if (sw->stopped) return;
    if (sw->line < sw->skip) {   /* queued by an earlier piece */
        sw->line++;
        return;
    }
    if (out_can_wait(c) && !outbuf_try_room(&c->out, STAT_LINE_ROOM)) {
        sw->stopped = true;
        return;
    }
    sw->line++;
    va_list ap;
    out_add(c, "STAT ", 5);
    out_add(c, name, strlen(name));
    out_add(c, " ", 1);
    va_start(ap, fmt);
    outbuf_vprintf(&c->out, fmt, ap);
    va_end(ap);
    out_add(c, "\r\n", 2);
}

static bool arg_is(const struct request *r, const char *word)
{
    size_t l = strlen(word);
    return r->nargs == l && !memcmp(r->args, word, l);
}

/* memcached compares these subcommands with strncmp over the argument's
 * length, so any prefix names them ("stats s" is settings), in this order */
static const char *stats_prefixed(const struct request *r)
{
    static const char *const words[] = { "reset", "detail", "settings", "cachedump", "conns" };
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
        if (r->nargs <= strlen(words[i]) && !memcmp(r->args, words[i], r->nargs)) return words[i];
    return NULL;
}

/* False: the reply waits for its output to drain (see stats_writer). */
static bool process_stats(struct conn *c, struct request *r)
{
    struct stats_writer sw = { .c = c, .skip = c->resume_off ? c->stats_done : 0 };
    c->resume_off = 0;
    c->stats_done = 0;
    enum stats_group group;
    const char *word = r->nargs ? stats_prefixed(r) : NULL;
    if (word) r->args = word, r->nargs = (uint32_t)strlen(word);
    if (word && !strcmp(word, "reset")) {
        stats_reset();
        out_str(c, "RESET");
    } else if (stats_group_by_name(r->args, r->nargs, &group)) {
        stats_emit(group, stat_line, &sw);
        if (sw.stopped) {
            c->resume_off = 1;   /* keep the line: it is dispatched again */
            c->stats_done = sw.line;
            return false;
        }
        out_add(c, "END\r\n", 5);
    } else {
        out_str(c, "ERROR");
    }
    return true;
}

/* The connection becomes a watcher: its socket (a dup) goes to logger.c,
 * which sends "OK" and then the log lines; the connection itself closes
 * without a reply, and what the client sends after is ignored, as in
 * memcached. */
static bool process_watch(struct conn *c, struct request *r)
{
    unsigned what;
    if (!settings.watch_enabled) {   /* -W */
        out_str(c, "CLIENT_ERROR watch commands not allowed");
        return true;
    }
    if (c->ssl) {
        /* logger.c sends raw bytes on a dup of the socket, which would be
         * plaintext inside the TLS stream; the SSL object belongs to this
         * worker, so the logger thread cannot write records through it.
         * memcached 1.6.45 --tls does serve watchers; cachetd refuses. */
        out_str(c, "CLIENT_ERROR watch commands not supported over TLS");
        return true;
    }
    if (out_can_wait(c)) {
        out_str(c, "ERROR cannot pipeline other commands before watch");
        return true;
    }
    if (log_parse_what(r->args, r->nargs, &what) < 0) {
        out_str(c, "ERROR");
        return true;
    }
    int fd = dup(c->fd);
    enum log_add_result res = fd < 0 ? LOG_ADD_FAILED : log_add_watcher(fd, what);
    if (res == LOG_ADD_TOO_MANY) {
        out_str(c, "WATCHER_TOO_MANY log watcher limit reached");
        return true;
    }
    if (res != LOG_ADD_OK) {
        out_str(c, "WATCHER_FAILED failed to add log watcher");
        return true;
    }
    c->state = CONN_CLOSING;
    return false;
}

bool proto_dispatch(struct conn *c, struct request *r, const char *line, size_t len)
{
    struct worker *w = c->w;
    switch (r->cmd) {
    case CMD_GET: case CMD_GETS: case CMD_GAT: case CMD_GATS:
        return process_get(c, r, line);
    case CMD_SET: case CMD_ADD: case CMD_REPLACE: case CMD_APPEND: case CMD_PREPEND: case CMD_CAS:
        return start_store(c, r, line, len, r->client_flags, r->exptime);
    case CMD_INCR: case CMD_DECR: {
        struct arith_opts ao = {0};
        uint64_t value = 0, cas = 0;
        rel_time_t exp = 0;
        enum arith_result res = storage_arith(w->st, r->key, r->nkey, r->cmd == CMD_INCR,
                                              r->delta, &ao, &value, &cas, &exp);
        char buf[24];
        switch (res) {
        case ARITH_OK: *u64_to_str(buf, value) = '\0'; reply(c, r, buf); break;
        case ARITH_NOT_FOUND: reply(c, r, "NOT_FOUND"); break;
        case ARITH_NON_NUMERIC: reply(c, r, "CLIENT_ERROR cannot increment or decrement non-numeric value"); break;
        case ARITH_EXISTS: reply(c, r, "EXISTS"); break;
        default: reply(c, r, "SERVER_ERROR out of memory"); break;
        }
        return true;
    }
    case CMD_TOUCH:
        STAT_INC(w, cmd_touch);
        reply(c, r, storage_touch(w->st, r->key, r->nkey, storage_exptime(r->exptime)) == STORE_STORED
                        ? "TOUCHED" : "NOT_FOUND");
        return true;
    case CMD_DELETE: {
        struct delete_opts d = {0};
        bool deleted = storage_delete(w->st, r->key, r->nkey, &d) == STORE_STORED;
        if (log_wants(LOG_FETCHERS | LOG_DELETIONS)) {
            /* memcached fetches the item, then deletes it */
            if (log_wants(LOG_FETCHERS)) log_item_get(r->key, r->nkey, deleted ? LOG_GET_FOUND : LOG_GET_NOT_FOUND,
                                                      0, c->fd, 0);
            if (deleted && log_wants(LOG_DELETIONS)) log_item_deleted(r->key, r->nkey, "delete", 0, 0);
        }
        reply(c, r, deleted ? "DELETED" : "NOT_FOUND");
        return true;
    }
    case CMD_FLUSH_ALL:
        STAT_INC(w, cmd_flush);   /* memcached counts a refused flush too */
        if (!settings.flush_enabled) {   /* -F */
            reply(c, r, "CLIENT_ERROR flush_all not allowed");
            return true;
        }
        /* memcached: a delay that is an absolute time before the server
         * started flushes nothing (flush_all 2592001; over 30 days a delay
         * is a unix time, as an exptime) */
        if (!(r->has_number && r->number > 30 * 24 * 3600 && r->number <= (int64_t)storage_process_started))
            storage_flush(r->has_number && r->number > 0 ? storage_exptime(r->number) : storage_now());
        reply(c, r, "OK");
        return true;
    case CMD_VERSION:
        out_str(c, "VERSION " CACHET_PROTO_VERSION);
        return true;
    case CMD_VERBOSITY:
        __atomic_store_n(&settings.verbose, (int)(r->number > 2 ? 2 : r->number), __ATOMIC_RELAXED);
        reply(c, r, "OK");
        return true;
    case CMD_QUIT:
        c->state = CONN_CLOSING;
        return false;
    case CMD_STATS:
        return process_stats(c, r);
    case CMD_WATCH:
        return process_watch(c, r);
    case CMD_REFRESH_CERTS: {
        /* memcached's reply: OK, or the reason as one line */
        char err[512];
        if (tls_refresh(err, sizeof err) == 0) {
            out_str(c, "OK");
        } else {
            for (char *p = err; *p; p++) if (*p == '\r' || *p == '\n') *p = ' ';
            out_str(c, err);
        }
        return true;
    }
    case CMD_SHUTDOWN:
        /* memcached 1.6.45's replies; both modes stop the server the way
         * SIGTERM does (finish queued replies, close, exit 0) */
        if (!settings.shutdown_command) {
            reply(c, r, "SERVER_ERROR: shutdown not enabled");
            return true;
        }
        if (r->number == 0 || (r->number == 1 && arg_is(r, "graceful"))) {
            server_request_shutdown();
            c->state = CONN_CLOSING;
            return false;
        }
        reply(c, r, "CLIENT_ERROR invalid shutdown mode");
        return true;
    case CMD_SLABS_AUTOMOVE:
        /* 0 stops the page mover's background balancing; 1 and 2 run it
         * (cachetd has one balancing policy). A store still takes a page from
         * another class when its own has nothing to evict (slabs_mover.c). */
        if (r->number >= 0) storage_set_slab_automove((int)r->number);
        reply(c, r, "OK");
        return true;
    case CMD_SLABS_REASSIGN: {
        static const char *const words[] = {
            [SLABS_REASSIGN_OK] = "OK",
            [SLABS_REASSIGN_BUSY] = "BUSY currently processing reassign request",
            [SLABS_REASSIGN_BADCLASS] = "BADCLASS invalid src or dst class id",
            [SLABS_REASSIGN_NOSPARE] = "NOSPARE source class has no spare pages",
            [SLABS_REASSIGN_SAME] = "SAME src and dst class are identical",
            [SLABS_REASSIGN_DISABLED] = "CLIENT_ERROR slab reassignment disabled",
        };
        reply(c, r, words[storage_slabs_reassign(w->st, (int)r->number, (int)(int64_t)r->delta)]);
        return true;
    }
    case CMD_EXTSTORE:
        storage_ext_tune((enum ext_knob)r->number, (uint32_t)r->delta, r->fraction);
        reply(c, r, "OK");
        return true;
#ifdef CACHET_TEST_HOOKS
    case CMD_DEBUGTIME:
        storage_test_advance_clock((uint32_t)r->number);
        atomic_fetch_add_explicit(&conn_clock_test_offset_s, (uint32_t)r->number, memory_order_relaxed);
        reply(c, r, "OK");
        return true;
#endif
    case CMD_MS:
        return start_store(c, r, line, len, r->meta.client_flags,
                           (r->meta.seen & meta_bit('T')) ? r->meta.ttl_T : 0);
    default:
        return proto_meta_dispatch(c, r);
    }
}

const char *proto_oom_reply(const struct request *r)
{
    switch (r->cmd) {
    case CMD_GET: case CMD_GETS: case CMD_GAT: case CMD_GATS: case CMD_MG:
        return "SERVER_ERROR out of memory writing get response";   /* memcached's words */
    default:
        return "SERVER_ERROR out of memory writing response";
    }
}
