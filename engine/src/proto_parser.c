/*
 * proto_parser.c - tokenizes and validates request lines; see proto_parser.h
 * for why it is pure.
 *
 * The rules follow memcached 1.6: tokens are separated by spaces; a command
 * with the wrong number of tokens is "ERROR" (memcached dispatches on the
 * token count); a token of the right count but the wrong form is
 * "CLIENT_ERROR bad command line format". Keys are 1-250 bytes without
 * control characters, spaces or DEL. Meta flags follow protocol.txt: a flag
 * is one letter, its token (if any) follows without a space, each flag at
 * most once.
 */
#include "proto_parser.h"

#include <string.h>

#define BAD_FORMAT "CLIENT_ERROR bad command line format"

long find_line(const char *buf, size_t len, size_t *consumed)
{
    const char *nl = memchr(buf, '\n', len);
    if (!nl) return -1;
    size_t l = (size_t)(nl - buf);
    *consumed = l + 1;
    if (l > 0 && buf[l - 1] == '\r') l--;
    return (long)l;
}

size_t line_limit_for(const char *buf, size_t len)
{
    if ((len >= 4 && (!memcmp(buf, "get ", 4) || !memcmp(buf, "gat ", 4))) ||
        (len >= 5 && (!memcmp(buf, "gets ", 5) || !memcmp(buf, "gats ", 5))))
        return LINE_MAX_RETRIEVAL;
    return LINE_MAX_PLAIN;
}

bool parse_u64(const char *s, size_t n, uint64_t *out)
{
    if (n == 0 || n > 20) return false;
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned d = (unsigned char)s[i] - '0';
        if (d > 9) return false;
        if (v > (UINT64_MAX - d) / 10) return false;
        v = v * 10 + d;
    }
    *out = v;
    return true;
}

bool parse_u32(const char *s, size_t n, uint32_t *out)
{
    uint64_t v;
    if (!parse_u64(s, n, &v) || v > UINT32_MAX) return false;
    *out = (uint32_t)v;
    return true;
}

bool parse_i64(const char *s, size_t n, int64_t *out)
{
    bool neg = n > 0 && s[0] == '-';
    uint64_t v;
    if (!parse_u64(s + neg, n - neg, &v)) return false;
    if (neg ? v > (uint64_t)INT64_MAX + 1 : v > (uint64_t)INT64_MAX) return false;
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return true;
}

static bool valid_key(const char *k, size_t n)
{
    if (n == 0 || n > KEY_MAX) return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)k[i];
        if (c <= ' ' || c == 0x7f) return false;
    }
    return true;
}

struct tok { const char *p; uint32_t n; };

/* Splits on spaces; returns the token count, or max+1 if there are more. */
static int tokenize(const char *line, size_t len, struct tok *t, int max)
{
    int n = 0;
    size_t i = 0;
    while (i < len) {
        while (i < len && line[i] == ' ') i++;
        if (i >= len) break;
        size_t start = i;
        while (i < len && line[i] != ' ') i++;
        if (n == max) return max + 1;
        t[n].p = line + start;
        t[n].n = (uint32_t)(i - start);
        n++;
    }
    return n;
}

static bool tok_is(const struct tok *t, const char *word)
{
    size_t l = strlen(word);
    return t->n == l && !memcmp(t->p, word, l);
}

bool next_key(const char **cursor, const char *end, const char **key, uint32_t *nkey)
{
    const char *p = *cursor;
    while (p < end && *p == ' ') p++;
    if (p >= end) { *cursor = p; return false; }
    const char *s = p;
    while (p < end && *p != ' ') p++;
    *key = s;
    *nkey = (uint32_t)(p - s);
    *cursor = p;
    return true;
}

static const signed char b64val[256] = {
    ['A'] = 1, ['B'] = 2, ['C'] = 3, ['D'] = 4, ['E'] = 5, ['F'] = 6, ['G'] = 7, ['H'] = 8,
    ['I'] = 9, ['J'] = 10, ['K'] = 11, ['L'] = 12, ['M'] = 13, ['N'] = 14, ['O'] = 15,
    ['P'] = 16, ['Q'] = 17, ['R'] = 18, ['S'] = 19, ['T'] = 20, ['U'] = 21, ['V'] = 22,
    ['W'] = 23, ['X'] = 24, ['Y'] = 25, ['Z'] = 26, ['a'] = 27, ['b'] = 28, ['c'] = 29,
    ['d'] = 30, ['e'] = 31, ['f'] = 32, ['g'] = 33, ['h'] = 34, ['i'] = 35, ['j'] = 36,
    ['k'] = 37, ['l'] = 38, ['m'] = 39, ['n'] = 40, ['o'] = 41, ['p'] = 42, ['q'] = 43,
    ['r'] = 44, ['s'] = 45, ['t'] = 46, ['u'] = 47, ['v'] = 48, ['w'] = 49, ['x'] = 50,
    ['y'] = 51, ['z'] = 52, ['0'] = 53, ['1'] = 54, ['2'] = 55, ['3'] = 56, ['4'] = 57,
    ['5'] = 58, ['6'] = 59, ['7'] = 60, ['8'] = 61, ['9'] = 62, ['+'] = 63, ['/'] = 64,
};

int base64_decode(const char *in, size_t n, char *out, size_t cap)
{
    if (n == 0 || n % 4) return -1;
    size_t o = 0;
    for (size_t i = 0; i < n; i += 4) {
        int v[4];
        int pad = 0;
        for (int j = 0; j < 4; j++) {
            unsigned char c = (unsigned char)in[i + j];
            if (c == '=' && i + 4 == n && j >= 2) { v[j] = 0; pad++; continue; }
            if (pad || !b64val[c]) return -1;
            v[j] = b64val[c] - 1;
        }
        if (pad == 1 && in[i + 3] != '=') return -1;
        uint32_t w = (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
        int bytes = 3 - pad;
        if (o + (size_t)bytes > cap) return -1;
        out[o++] = (char)(w >> 16);
        if (bytes > 1) out[o++] = (char)(w >> 8);
        if (bytes > 2) out[o++] = (char)w;
    }
    return (int)o;
}

size_t base64_encode(const char *in, size_t n, char *out, size_t cap)
{
    static const char tbl[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t w = (uint32_t)(unsigned char)in[i] << 16;
        if (i + 1 < n) w |= (uint32_t)(unsigned char)in[i + 1] << 8;
        if (i + 2 < n) w |= (uint32_t)(unsigned char)in[i + 2];
        if (o + 4 > cap) return o;
        out[o++] = tbl[(w >> 18) & 63];
        out[o++] = tbl[(w >> 12) & 63];
        out[o++] = i + 1 < n ? tbl[(w >> 6) & 63] : '=';
        out[o++] = i + 2 < n ? tbl[w & 63] : '=';
    }
    return o;
}

static enum parse_status client_error(struct request *r, const char *msg)
{
    r->error = msg;
    return PARSE_CLIENT_ERROR;
}

/* Which flags each meta command accepts, and which of those carry a token. */
struct meta_spec { const char *plain; const char *with_token; };
static const struct meta_spec meta_specs[] = {
    [CMD_MG] = { "bcfhklqstuv", "CENORT" },
    [CMD_MS] = { "bcIkqs", "CEFMNOST" },
    /* E on md/ma is newer than memcached 1.6.18 and storage.h has no field
     * for it: refused like 1.6.18 does, rather than accepted and ignored */
    [CMD_MD] = { "bIkq", "COT" },
    [CMD_MA] = { "bcktqv", "CDJMNOT" },
    [CMD_ME] = { "b", "" },
};

static enum parse_status parse_meta_flags(const struct tok *t, int nt, struct request *r)
{
    struct meta_req *m = &r->meta;
    const struct meta_spec *spec = &meta_specs[r->cmd];
    memset(m, 0, offsetof(struct meta_req, flags));
    m->delta = 1;
    for (int i = 0; i < nt; i++) {
        char f = t[i].p[0];
        uint64_t bit = meta_bit(f);
        if (f == 'P' || f == 'L') {
            /* proxy hints (protocol.txt): every meta command takes them and ignores them */
            if (m->seen & bit) return client_error(r, "CLIENT_ERROR duplicate flag");
            m->seen |= bit;
            continue;
        }
        bool plain = bit && strchr(spec->plain, f);
        bool tokened = bit && strchr(spec->with_token, f);
        if (!plain && !tokened) return client_error(r, "CLIENT_ERROR invalid flag");
        if (m->seen & bit) return client_error(r, "CLIENT_ERROR duplicate flag");
        if (m->nflags >= META_MAX_FLAGS) return client_error(r, "CLIENT_ERROR options flags are too long");
        const char *tok = t[i].p + 1;
        uint32_t n = t[i].n - 1;
        if (plain && n) return client_error(r, "CLIENT_ERROR invalid flag");
        if (n > 255) return client_error(r, "CLIENT_ERROR opaque or token too long");
        m->seen |= bit;
        m->flags[m->nflags].flag = f;
        m->flags[m->nflags].tok = tok;
        m->flags[m->nflags].len = (uint8_t)n;
        m->nflags++;
        bool ok = true;
        switch (f) {
        case 'q': m->quiet = true; break;
        case 'b': m->base64 = true; break;
        case 'T': ok = parse_i64(tok, n, &m->ttl_T); break;
        case 'N': ok = parse_i64(tok, n, &m->ttl_N); break;
        case 'R': ok = parse_i64(tok, n, &m->ttl_R); break;
        case 'C': ok = parse_u64(tok, n, &m->cas_C); break;
        case 'E': ok = parse_u64(tok, n, &m->cas_E); break;
        case 'F': ok = parse_u32(tok, n, &m->client_flags); break;
        case 'D': ok = parse_u64(tok, n, &m->delta); break;
        case 'J': ok = parse_u64(tok, n, &m->initial); break;
        case 'S': { uint32_t ignored; ok = parse_u32(tok, n, &ignored); break; }
        case 'O':
            if (n > 32) return client_error(r, "CLIENT_ERROR opaque token too long");
            m->opaque = tok; m->nopaque = (uint8_t)n; break;
        case 'M':
            ok = n == 1;
            if (ok) {
                char c = tok[0];
                if (c >= 'a' && c <= 'z') c = (char)(c - 'a' + 'A');
                if (r->cmd == CMD_MS) ok = strchr("EAPRS", c) != NULL;
                else ok = c == 'I' || c == 'D' || c == '+' || c == '-';
                if (c == '+') c = 'I';
                if (c == '-') c = 'D';
                m->mode = c;
            }
            if (!ok) return client_error(r, r->cmd == CMD_MS ? "CLIENT_ERROR invalid mode for ms M token"
                                                             : "CLIENT_ERROR invalid mode for ma M token");
            break;
        default: break;
        }
        if (!ok) return client_error(r, "CLIENT_ERROR bad token in command line format");
    }
    return PARSE_OK;
}

static enum parse_status parse_meta(struct tok *t, int nt, struct request *r)
{
    /* memcached: a meta command without its key is an unknown command */
    if (nt < 2) return r->cmd == CMD_ME ? client_error(r, BAD_FORMAT) : PARSE_ERROR;
    const struct tok *key = &t[1];
    if (key->n > (r->cmd == CMD_ME ? KEY_MAX : 255 * 4 / 3 + 4)) return client_error(r, BAD_FORMAT);
    int first_flag = 2;
    if (r->cmd == CMD_MS) {
        if (nt < 3) return client_error(r, BAD_FORMAT);
        if (!parse_u32(t[2].p, t[2].n, &r->vlen) || r->vlen > INT32_MAX - 2)
            return client_error(r, BAD_FORMAT);
        first_flag = 3;
        /* from here on an error still leaves a data block to skip */
        r->swallow = true;
    }
    enum parse_status st = parse_meta_flags(t + first_flag, nt - first_flag, r);
    if (st != PARSE_OK) {
        /* memcached 1.6 answers every flag problem of md and ma alike */
        if ((r->cmd == CMD_MD || r->cmd == CMD_MA) && strncmp(r->error, "CLIENT_ERROR invalid mode", 25) != 0)
            r->error = "CLIENT_ERROR invalid or duplicate flag";
        return st;
    }
    r->meta.key_token = key->p;
    r->meta.nkey_token = (uint8_t)(key->n > 255 ? 255 : key->n);
    if (r->meta.base64) {
        int n = base64_decode(key->p, key->n, r->keybuf, KEY_MAX);
        if (n <= 0) return client_error(r, "CLIENT_ERROR error decoding key");
        r->key = r->keybuf;
        r->nkey = (uint32_t)n;
        /* binary keys are allowed with b; only the length is limited */
    } else {
        if (!valid_key(key->p, key->n)) return client_error(r, BAD_FORMAT);
        r->key = key->p;
        r->nkey = key->n;
    }
    if (r->meta.nkey_token != key->n) return client_error(r, BAD_FORMAT);
    r->noreply = r->meta.quiet;
    return PARSE_OK;
}

static bool parse_noreply(const struct tok *t, int nt, int at)
{
    return nt > at && tok_is(&t[at], "noreply");
}

enum parse_status parse_request(const char *line, size_t len, struct request *r)
{
    struct tok t[META_MAX_FLAGS + 4];
    /* the classic fields only: meta is set up by parse_meta, keybuf only
     * written when a base64 key is decoded */
    memset(r, 0, offsetof(struct request, meta));

    /* Retrieval commands take any number of keys: tokenize only the head. */
    int nt = tokenize(line, len, t, 2);
    if (nt == 0) return PARSE_ERROR;
    const struct tok *c = &t[0];

    if (tok_is(c, "get") || tok_is(c, "gets") || tok_is(c, "gat") || tok_is(c, "gats")) {
        bool touch = c->p[1] == 'a';
        r->cmd = touch ? (c->n == 4 ? CMD_GATS : CMD_GAT) : (c->n == 4 ? CMD_GETS : CMD_GET);
        const char *p = c->p + c->n;
        const char *end = line + len;
        if (touch) {
            const char *tk; uint32_t tn;
            if (!next_key(&p, end, &tk, &tn)) return PARSE_ERROR;
            if (!parse_i64(tk, tn, &r->exptime)) return client_error(r, "CLIENT_ERROR invalid exptime argument");
        }
        r->keys = p;
        r->nkeys_text = (uint32_t)(end - p);
        const char *k; uint32_t nk;
        int count = 0;
        while (next_key(&p, end, &k, &nk)) {
            if (!valid_key(k, nk)) return client_error(r, BAD_FORMAT);
            if (count++ == 0) { r->key = k; r->nkey = nk; }
        }
        /* "get" alone is an ERROR; memcached answers "gat 10" with END */
        if (count == 0 && !touch) return PARSE_ERROR;
        return PARSE_OK;
    }

    nt = tokenize(line, len, t, META_MAX_FLAGS + 3);
    if (nt > META_MAX_FLAGS + 3) {
        if (c->n == 2 && c->p[0] == 'm') return client_error(r, "CLIENT_ERROR options flags are too long");
        return PARSE_ERROR;
    }

    if (c->n == 2 && c->p[0] == 'm') {
        switch (c->p[1]) {
        case 'g': r->cmd = CMD_MG; break;
        case 's': r->cmd = CMD_MS; break;
        case 'd': r->cmd = CMD_MD; break;
        case 'a': r->cmd = CMD_MA; break;
        case 'e': r->cmd = CMD_ME; break;
        case 'n': r->cmd = CMD_MN; return PARSE_OK;
        default: return PARSE_ERROR;
        }
        return parse_meta(t, nt, r);
    }

    static const struct { const char *name; enum req_cmd cmd; } storage_cmds[] = {
        {"set", CMD_SET}, {"add", CMD_ADD}, {"replace", CMD_REPLACE},
        {"append", CMD_APPEND}, {"prepend", CMD_PREPEND}, {"cas", CMD_CAS},
    };
    for (size_t i = 0; i < sizeof(storage_cmds) / sizeof(storage_cmds[0]); i++) {
        if (!tok_is(c, storage_cmds[i].name)) continue;
        r->cmd = storage_cmds[i].cmd;
        int base = r->cmd == CMD_CAS ? 6 : 5;
        if (nt != base && nt != base + 1) return PARSE_ERROR;
        if (!valid_key(t[1].p, t[1].n)) return client_error(r, BAD_FORMAT);
        int64_t vlen;
        if (!parse_u32(t[2].p, t[2].n, &r->client_flags) ||
            !parse_i64(t[3].p, t[3].n, &r->exptime) ||
            !parse_i64(t[4].p, t[4].n, &vlen) || vlen < 0 || vlen > INT32_MAX - 2)
            return client_error(r, BAD_FORMAT);
        if (r->cmd == CMD_CAS && !parse_u64(t[5].p, t[5].n, &r->cas))
            return client_error(r, BAD_FORMAT);
        r->vlen = (uint32_t)vlen;
        r->key = t[1].p; r->nkey = t[1].n;
        r->noreply = parse_noreply(t, nt, base);
        return PARSE_OK;
    }

    if (tok_is(c, "incr") || tok_is(c, "decr")) {
        r->cmd = c->p[0] == 'i' ? CMD_INCR : CMD_DECR;
        if (nt != 3 && nt != 4) return PARSE_ERROR;
        if (!valid_key(t[1].p, t[1].n)) return client_error(r, BAD_FORMAT);
        if (!parse_u64(t[2].p, t[2].n, &r->delta)) return client_error(r, "CLIENT_ERROR invalid numeric delta argument");
        r->key = t[1].p; r->nkey = t[1].n;
        r->noreply = parse_noreply(t, nt, 3);
        return PARSE_OK;
    }
    if (tok_is(c, "touch")) {
        r->cmd = CMD_TOUCH;
        if (nt != 3 && nt != 4) return PARSE_ERROR;
        if (!valid_key(t[1].p, t[1].n)) return client_error(r, BAD_FORMAT);
        if (!parse_i64(t[2].p, t[2].n, &r->exptime)) return client_error(r, "CLIENT_ERROR invalid exptime argument");
        r->key = t[1].p; r->nkey = t[1].n;
        r->noreply = parse_noreply(t, nt, 3);
        return PARSE_OK;
    }
    if (tok_is(c, "delete")) {
        r->cmd = CMD_DELETE;
        if (nt < 2 || nt > 4) return PARSE_ERROR;
        if (!valid_key(t[1].p, t[1].n)) return client_error(r, BAD_FORMAT);
        r->key = t[1].p; r->nkey = t[1].n;
        r->noreply = tok_is(&t[nt - 1], "noreply");
        /* memcached still accepts a legacy "0" hold time and nothing else */
        int extra = nt - 2 - (r->noreply ? 1 : 0);
        if (extra > 1 || (extra == 1 && !tok_is(&t[2], "0")))
            return client_error(r, "CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]");
        return PARSE_OK;
    }
    if (tok_is(c, "flush_all")) {
        r->cmd = CMD_FLUSH_ALL;
        if (nt > 3) return PARSE_ERROR;
        r->noreply = tok_is(&t[nt - 1], "noreply");
        int nargs = nt - 1 - (r->noreply ? 1 : 0);
        if (nargs == 1) {
            if (!parse_i64(t[1].p, t[1].n, &r->number)) return client_error(r, "CLIENT_ERROR invalid exptime argument");
            r->has_number = true;
        } else if (nargs > 1) {
            return client_error(r, BAD_FORMAT);
        }
        return PARSE_OK;
    }
    /* memcached ignores anything after these two */
    if (tok_is(c, "version")) { r->cmd = CMD_VERSION; return PARSE_OK; }
    if (tok_is(c, "quit")) { r->cmd = CMD_QUIT; return PARSE_OK; }
    if (tok_is(c, "verbosity")) {
        r->cmd = CMD_VERBOSITY;
        if (nt != 2 && nt != 3) return PARSE_ERROR;
        /* memcached: a level that is not a number is ignored but still
         * answered OK ("verbosity noreply" is a silent no-op) */
        r->noreply = tok_is(&t[nt - 1], "noreply");
        r->has_number = parse_i64(t[1].p, t[1].n, &r->number);
        return PARSE_OK;
    }
    if (tok_is(c, "stats")) {
        r->cmd = CMD_STATS;
        const char *p = c->p + c->n;
        while (p < line + len && *p == ' ') p++;
        r->args = p;
        r->nargs = (uint32_t)(line + len - p);
        return PARSE_OK;
    }
    return PARSE_ERROR;
}
