/*
 * proto_meta.c - memcached's meta commands: mg, ms, md, ma, me, mn.
 *
 * Why a separate file: the meta protocol is flag-driven rather than
 * positional, its replies echo the request's flags in request order, and its
 * error rules differ (protocol errors are always sent, even with q). Keeping
 * it apart from proto_text.c keeps both readable. The parser has already
 * validated every flag and token (proto_parser.c); this file only maps them
 * onto storage calls and formats the replies.
 *
 * Quiet mode (q) hides the "nothing interesting happened" replies, as
 * memcached 1.6 does: EN for mg; HD for ms, md and ma (NF, NS and EX are
 * still sent). mn is the client's barrier after a run of quiet requests.
 */
#include <stdio.h>
#include <string.h>

#include "conn.h"
#include "ext_io.h"
#include "logger.h"
#include "proto_parser.h"
#include "proto_reply.h"

static bool has(const struct request *r, char f)
{
    return (r->meta.seen & meta_bit(f)) != 0;
}

/* Room the echoed flags can take (each numeric flag at most ~22 bytes). */
static size_t flags_room(const struct request *r)
{
    /* a text key may be echoed in base64: 4/3 of its length */
    return 64 + (size_t)r->meta.nflags * 24 + r->meta.nkey_token * 2u + r->meta.nopaque;
}

/* How k echoes the key: as the request spelled it, or (mg on a hit) as
 * the item was stored: memcached 1.6.45 remembers per item whether its key
 * came in base64 and echoes it that way, whatever the request used. */
enum key_echo { KEY_AS_SENT, KEY_TEXT, KEY_BASE64 };

/* Appends " O<opaque>", " k<key>" and " b" when asked: the parts every meta
 * reply echoes, including misses. A key echoed in base64 is marked b. */
static char *echo_common(char *p, const struct request *r, char f, enum key_echo ke)
{
    switch (f) {
    case 'O':
        *p++ = ' '; *p++ = 'O';
        memcpy(p, r->meta.opaque, r->meta.nopaque);
        p += r->meta.nopaque;
        break;
    case 'k':
        *p++ = ' '; *p++ = 'k';
        if (ke == KEY_AS_SENT) ke = r->meta.base64 ? KEY_BASE64 : KEY_TEXT;
        if (ke == KEY_TEXT) {
            memcpy(p, r->key, r->nkey);
            p += r->nkey;
        } else {
            if (r->meta.base64) {
                memcpy(p, r->meta.key_token, r->meta.nkey_token);
                p += r->meta.nkey_token;
            } else {
                p += base64_encode(r->key, r->nkey, p, (r->nkey + 2) / 3 * 4);
            }
            *p++ = ' '; *p++ = 'b';
        }
        break;
    default: break;
    }
    return p;
}

/* Where flag f first is in the request, or -1. */
static int flag_index(const struct request *r, char f)
{
    for (int i = 0; i < r->meta.nflags; i++)
        if (r->meta.flags[i].flag == f) return i;
    return -1;
}

/* N after T: an item N creates keeps N's expiry (memcached applies the
 * flags in request order). */
static bool vivify_after_touch(const struct request *r)
{
    return has(r, 'T') && has(r, 'N') && flag_index(r, 'N') > flag_index(r, 'T');
}

/* The expiry that t at flag position `upto` reports: memcached applies T and
 * N in request order, so a t before them says the TTL from before the
 * request (-1 for an item N just made). */
static rel_time_t exptime_at(const struct request *r, int upto, rel_time_t before, bool created)
{
    rel_time_t e = before;
    for (int i = 0; i < upto; i++) {
        char f = r->meta.flags[i].flag;
        if (f == 'T') e = storage_exptime(r->meta.ttl_T);
        else if (f == 'N' && created) e = storage_exptime(r->meta.ttl_N);
    }
    return e;
}

/* A short reply: code, then the common echoed flags, then "\r\n". */
static void meta_simple(struct conn *c, const struct request *r, const char *code)
{
    if (!out_reserve(c, flags_room(r))) return;
    char *base = out_tail(c), *p = base;
    memcpy(p, code, 2); p += 2;
    for (int i = 0; i < r->meta.nflags; i++) p = echo_common(p, r, r->meta.flags[i].flag, KEY_AS_SENT);
    *p++ = '\r'; *p++ = '\n';
    out_commit(c, p);
}

/* False: a disk value found no reply slot and output is queued; nothing was
 * answered and the request is dispatched again once it drains (ext_io.h). */
static bool process_mg(struct conn *c, struct request *r)
{
    struct worker *w = c->w;
    struct get_opts opts = {0};
    if (has(r, 'T')) { opts.touch = true; opts.new_exptime = storage_exptime(r->meta.ttl_T); }
    if (has(r, 'N')) { opts.vivify = true; opts.vivify_exptime = storage_exptime(r->meta.ttl_N); }
    opts.vivify_last = vivify_after_touch(r);
    opts.recache_before_touch = has(r, 'R') && has(r, 'T') && flag_index(r, 'R') < flag_index(r, 'T');
    if (has(r, 'E')) opts.vivify_cas = r->meta.cas_E;
    if (has(r, 'R')) { opts.recache = true; opts.recache_below = (rel_time_t)(r->meta.ttl_R < 0 ? 0 : r->meta.ttl_R); }
    if (has(r, 'u')) opts.no_lru_bump = true;
    opts.win_tokens = true;   /* a stale item hands W to its first reader, Z afterwards */
    bool want_value = has(r, 'v');
    STAT_INC(w, cmd_get);
    if (opts.touch) STAT_INC(w, cmd_touch);

    size_t hdr_max = flags_room(r) + 32;
    size_t copy_cap;
    /* the read loop made room for one reply before dispatching (net_conn.c) */
    if (!out_value_room(c, hdr_max, &copy_cap)) {
        out_fail(c);
        return true;
    }
    char *base = out_tail(c);
    char *copy_at = base + hdr_max;
    struct item_view v;
    bool hit = conn_storage_get(c, r->key, r->nkey, &opts, want_value ? copy_at : NULL,
                                want_value ? copy_cap : 0, &v);
    if (log_wants(LOG_FETCHERS))
        log_item_get(r->key, r->nkey, hit ? LOG_GET_FOUND : LOG_GET_NOT_FOUND, hit ? v.slab_class : 0, c->fd,
                     hit ? v.nbytes : 0);
    if (!hit) {
        if (!r->meta.quiet) meta_simple(c, r, "EN");
        return true;
    }
    /* C: the client has this version already; answer HD without the value */
    if (want_value && has(r, 'C') && v.cas == r->meta.cas_C) want_value = false;
    char *p = base;
    if (want_value) {
        memcpy(p, "VA ", 3); p += 3;
        p = u64_to_str(p, v.nbytes);
    } else {
        memcpy(p, "HD", 2); p += 2;
    }
    uint32_t now = (uint32_t)storage_now();
    for (int i = 0; i < r->meta.nflags; i++) {
        char f = r->meta.flags[i].flag;
        switch (f) {
        case 'c': *p++ = ' '; *p++ = 'c'; p = u64_to_str(p, v.cas); break;
        case 'f': *p++ = ' '; *p++ = 'f'; p = u64_to_str(p, v.client_flags); break;
        case 'h': *p++ = ' '; *p++ = 'h'; *p++ = v.fetched_before ? '1' : '0'; break;
        case 'l': *p++ = ' '; *p++ = 'l'; p = u64_to_str(p, now >= v.last_access ? now - v.last_access : 0); break;
        case 's': *p++ = ' '; *p++ = 's'; p = u64_to_str(p, v.nbytes); break;
        case 't':
            *p++ = ' '; *p++ = 't';
            p = i64_to_str(p, storage_ttl_remaining(exptime_at(r, i, v.exptime_before, v.created)));
            break;
        default: p = echo_common(p, r, f, v.key_binary ? KEY_BASE64 : KEY_TEXT); break;
        }
    }
    /* memcached's order: Z (token already out), X (stale), W (you win) */
    if (v.win_sent_before) { memcpy(p, " Z", 2); p += 2; }
    if (v.stale) { memcpy(p, " X", 2); p += 2; }
    if (v.win) { memcpy(p, " W", 2); p += 2; }
    *p++ = '\r'; *p++ = '\n';
    if (!want_value) {
        if (v.ref) item_view_release(w->st, &v);
        out_commit(c, p);
        return true;
    }
    if (v.on_disk) {
        /* a failed read answers as a miss would (EN with the echoed flags) */
        char miss[2048];
        size_t nmiss = 0;
        if (!r->meta.quiet && flags_room(r) + 4 <= sizeof miss) {
            char *m = miss;
            memcpy(m, "EN", 2); m += 2;
            for (int i = 0; i < r->meta.nflags; i++) m = echo_common(m, r, r->meta.flags[i].flag, KEY_AS_SENT);
            *m++ = '\r'; *m++ = '\n';
            nmiss = (size_t)(m - miss);
        }
        return ext_io_value(c, base, (size_t)(p - base), miss, nmiss, r->key, r->nkey, &v);
    }
    out_value(c, p, &v);
    return true;
}

/* ms after its data block arrived (it == NULL: the block was malformed). */
void proto_meta_complete_set(struct conn *c, struct request *r, item *it, bool bad_chunk)
{
    struct worker *w = c->w;
    if (bad_chunk) {
        out_str(c, "CLIENT_ERROR bad data chunk");
        return;
    }
    enum store_mode mode = MODE_SET;
    switch (r->meta.mode) {
    case 'E': mode = MODE_ADD; break;
    case 'A': mode = MODE_APPEND; break;
    case 'P': mode = MODE_PREPEND; break;
    case 'R': mode = MODE_REPLACE; break;
    default: mode = MODE_SET; break;
    }
    struct store_opts so = {0};
    if (has(r, 'C')) {
        so.cas_in = r->meta.cas_C;
        /* memcached: set and replace with C are a compare-and-swap */
        if (mode == MODE_SET || mode == MODE_REPLACE) mode = MODE_CAS;
    }
    if (has(r, 'E')) so.cas_set = r->meta.cas_E;
    /* I (store an older CAS as stale) applies to compare-and-swap only */
    if (has(r, 'I') && mode == MODE_CAS) so.invalidate = true;
    if (has(r, 'N')) { so.vivify_on_miss = true; so.vivify_exptime = storage_exptime(r->meta.ttl_N); }
    uint64_t cas_out = 0;
    /* s: what is stored now (after append, the whole value); memcached
     * answers a refused store with the length it was sent */
    uint64_t stored_len = r->vlen;
    so.nbytes_out = &stored_len;
    unsigned clsid = log_wants(LOG_MUTATIONS) ? item_slab_class(it) : 0;   /* before the store frees it */
    enum store_result res = storage_store(w->st, it, mode, &so, &cas_out);
    if (log_wants(LOG_MUTATIONS))
        log_item_store(r->key, r->nkey, proto_store_status_word(res), proto_store_mode_word(mode),
                       proto_store_ttl(has(r, 'T') ? r->meta.ttl_T : 0), clsid, c->fd, (uint32_t)r->vlen);
    const char *code;
    switch (res) {
    case STORE_STORED: code = "HD"; break;
    case STORE_NOT_STORED: code = "NS"; break;
    /* memcached checks the mode first: add of an existing key is NS whatever the CAS */
    case STORE_EXISTS: code = mode == MODE_ADD ? "NS" : "EX"; break;
    /* memcached 1.6: set and replace with C are compare-and-swap (a missing
     * item is NF); append/prepend/add with C report a missing item as NS */
    case STORE_NOT_FOUND: code = mode == MODE_CAS ? "NF" : "NS"; break;
    case STORE_TOO_LARGE: out_str(c, "SERVER_ERROR object too large for cache"); return;
    default: out_str(c, "SERVER_ERROR out of memory storing object"); return;
    }
    if (res == STORE_STORED && r->meta.quiet) return;
    if (!out_reserve(c, flags_room(r))) return;
    char *base = out_tail(c), *p = base;
    memcpy(p, code, 2); p += 2;
    for (int i = 0; i < r->meta.nflags; i++) {
        char f = r->meta.flags[i].flag;
        if (f == 'c') { *p++ = ' '; *p++ = 'c'; p = u64_to_str(p, cas_out); }
        else if (f == 's') { *p++ = ' '; *p++ = 's'; p = u64_to_str(p, stored_len); }
        else p = echo_common(p, r, f, KEY_AS_SENT);
    }
    *p++ = '\r'; *p++ = '\n';
    out_commit(c, p);
}

static void process_md(struct conn *c, struct request *r)
{
    struct delete_opts d = {0};
    /* memcached compares md's C whatever its value: C0 is EX, not "no compare" */
    if (has(r, 'C')) { d.cas_in = r->meta.cas_C; d.check_cas = true; }
    if (has(r, 'E')) d.cas_set = r->meta.cas_E;
    if (has(r, 'I')) d.invalidate = true;
    if (has(r, 'x')) { d.remove_value = true; d.client_flags = r->meta.client_flags; }
    if (has(r, 'T')) { d.update_ttl = true; d.new_exptime = storage_exptime(r->meta.ttl_T); }
    enum store_result res = storage_delete(c->w->st, r->key, r->nkey, &d);
    if (log_wants(LOG_FETCHERS))
        log_item_get(r->key, r->nkey, res == STORE_NOT_FOUND ? LOG_GET_NOT_FOUND : LOG_GET_FOUND, 0, c->fd, 0);
    if (res == STORE_STORED && log_wants(LOG_DELETIONS)) log_item_deleted(r->key, r->nkey, "md", 0, 0);
    const char *code = res == STORE_STORED ? "HD" : res == STORE_EXISTS ? "EX" : "NF";
    if (r->meta.quiet && res == STORE_STORED) return;
    meta_simple(c, r, code);
}

static void process_ma(struct conn *c, struct request *r)
{
    struct arith_opts ao = {0};
    if (has(r, 'C')) ao.cas_in = r->meta.cas_C;
    if (has(r, 'N')) { ao.vivify = true; ao.vivify_exptime = storage_exptime(r->meta.ttl_N); }
    if (has(r, 'E')) ao.cas_set = r->meta.cas_E;
    ao.initial = r->meta.initial;
    if (has(r, 'T')) { ao.update_ttl = true; ao.new_exptime = storage_exptime(r->meta.ttl_T); }
    ao.vivify_last = vivify_after_touch(r);
    bool created = false;
    rel_time_t exp_before = 0;
    ao.created_out = &created;
    ao.exptime_before_out = &exp_before;
    bool incr = r->meta.mode != 'D';
    uint64_t value = 0, cas = 0;
    rel_time_t exp = 0;
    enum arith_result res = storage_arith(c->w->st, r->key, r->nkey, incr, r->meta.delta, &ao,
                                          &value, &cas, &exp);
    switch (res) {
    case ARITH_OK: break;
    case ARITH_NOT_FOUND:
        meta_simple(c, r, "NF");
        return;
    case ARITH_EXISTS: meta_simple(c, r, "EX"); return;
    case ARITH_NON_NUMERIC: out_str(c, "CLIENT_ERROR cannot increment or decrement non-numeric value"); return;
    default: out_str(c, "SERVER_ERROR out of memory"); return;
    }
    bool want_value = has(r, 'v');
    /* q hides a success even with v, also the one that created the counter
     * (memcached 1.6.45; 1.6.18 still answered that one) */
    if (r->meta.quiet) return;
    char num[24];
    size_t nnum = (size_t)(u64_to_str(num, value) - num);
    if (!out_reserve(c, flags_room(r) + 32 + nnum)) return;
    char *base = out_tail(c), *p = base;
    if (want_value) { memcpy(p, "VA ", 3); p += 3; p = u64_to_str(p, nnum); }
    else { memcpy(p, "HD", 2); p += 2; }
    for (int i = 0; i < r->meta.nflags; i++) {
        char f = r->meta.flags[i].flag;
        if (f == 'c') { *p++ = ' '; *p++ = 'c'; p = u64_to_str(p, cas); }
        else if (f == 't') {
            *p++ = ' '; *p++ = 't';
            p = i64_to_str(p, storage_ttl_remaining(exptime_at(r, i, exp_before, created)));
        }
        else p = echo_common(p, r, f, KEY_AS_SENT);
    }
    *p++ = '\r'; *p++ = '\n';
    if (want_value) { memcpy(p, num, nnum); p += nnum; *p++ = '\r'; *p++ = '\n'; }
    out_commit(c, p);
}

static void process_me(struct conn *c, struct request *r)
{
    struct get_opts opts = { .no_lru_bump = true };
    struct item_view v;
    /* metadata only: no copy of the value and no reference to release */
    if (!storage_get(c->w->st, r->key, r->nkey, &opts, NULL, 0, &v)) {
        out_str(c, "EN");
        return;
    }
    uint32_t now = (uint32_t)storage_now();
    /* the key as the item holds it (memcached): base64 for one stored with b */
    char key_b64[(KEY_MAX + 2) / 3 * 4 + 1];
    const char *key = (const char *)r->key;
    int nkey = (int)r->nkey;
    if (v.key_binary) {
        nkey = (int)base64_encode(r->key, r->nkey, key_b64, sizeof key_b64);
        key = key_b64;
    }
    out_printf(c, "ME %.*s exp=%lld la=%u cas=%llu fetch=%s cls=%u size=%u\r\n",
               nkey, key,
               (long long)storage_ttl_remaining(v.exptime),
               now >= v.last_access ? now - v.last_access : 0,
               (unsigned long long)v.cas, v.fetched_before ? "yes" : "no", (unsigned)v.slab_class, v.item_size);
}

bool proto_meta_dispatch(struct conn *c, struct request *r)
{
    STAT_INC(c->w, cmd_meta);
    switch (r->cmd) {
    case CMD_MG:
        c->resume_off = 0;   /* set if this mg waited before */
        if (!process_mg(c, r)) {
            /* any nonzero offset: the read loop keeps the line and yields */
            c->resume_off = 1;
            return false;
        }
        break;
    case CMD_MD: process_md(c, r); break;
    case CMD_MA: process_ma(c, r); break;
    case CMD_ME: process_me(c, r); break;
    case CMD_MN: out_add(c, "MN\r\n", 4); break;
    default: out_str(c, "ERROR"); break;
    }
    return true;
}
