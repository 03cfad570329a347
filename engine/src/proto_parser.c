/*
 * proto_parser.c - tokenizes and validates request lines; see proto_parser.h
 * for why it is pure.
 *
 * The rules are memcached 1.6.45's (its replies were measured, see
 * tests/protocol/test_bad_input.py): the command is the bytes before the
 * first space, arguments are separated by runs of spaces. A line shorter
 * than 4 bytes with its terminator, a known command with too few tokens or
 * a token of the wrong form is "CLIENT_ERROR bad command line format"; an
 * unknown command is "ERROR", and one whose last token starts with "HTTP/"
 * closes the connection (a cross-protocol request). Extra tokens after a
 * known command's arguments are ignored; "noreply" is the last token. A key
 * is 1-250 bytes of anything but a space (memcached stores control bytes in
 * keys). Meta flags follow protocol.txt: a flag is one letter, its token (if
 * any) follows without a space, each flag at most once.
 */
#include "proto_parser.h"
#include "ext_knob.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
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

bool line_streams(const char *buf, size_t len)
{
    /* memcached lets a get or gets line (after up to 100 spaces) grow past
     * 2048 bytes before its end arrives; gat and gats carry keys the same
     * way, so cachetd streams them too */
    size_t i = 0;
    while (i < len && i <= 100 && buf[i] == ' ') i++;
    if (i > 100) return false;
    const char *p = buf + i;
    size_t n = len - i;
    return (n >= 4 && (!memcmp(p, "get ", 4) || !memcmp(p, "gat ", 4))) ||
           (n >= 5 && (!memcmp(p, "gets ", 5) || !memcmp(p, "gats ", 5)));
}

bool parse_u64(const char *s, size_t n, uint64_t *out)
{
    if (n == 0 || n > 22) return false;
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
    if (n > 11 || !parse_u64(s, n, &v) || v > UINT32_MAX) return false;
    *out = (uint32_t)v;
    return true;
}

bool parse_i32(const char *s, size_t n, int32_t *out)
{
    if (n > 11) return false;
    bool neg = n > 0 && s[0] == '-';
    uint64_t v;
    if (!parse_u64(s + neg, n - neg, &v)) return false;
    if (neg ? v > (uint64_t)INT32_MAX + 1 : v > (uint64_t)INT32_MAX) return false;
    *out = neg ? (int32_t)(0 - (int64_t)v) : (int32_t)v;
    return true;
}

/* strtoul's view of a token: an optional sign, then digits (any number of
 * leading zeros) whose magnitude fits 64 bits. */
static bool parse_c_number(const char *s, size_t n, uint64_t *magnitude, bool *neg)
{
    *neg = n > 0 && s[0] == '-';
    size_t i = n > 0 && (s[0] == '-' || s[0] == '+');
    if (i == n) return false;
    while (i < n - 1 && s[i] == '0') i++;
    return n - i <= 20 && parse_u64(s + i, n - i, magnitude);
}

/* Storage commands' flags, as memcached's safe_strtoul: a minus sign wraps
 * the value as C does and a result that is then negative is refused; the
 * number is cut to the 32 bits an item keeps (4294967296 is stored as 0). */
static bool parse_client_flags(const char *s, size_t n, uint32_t *out)
{
    uint64_t m;
    bool neg;
    if (!parse_c_number(s, n, &m, &neg)) return false;
    uint64_t v = neg ? 0 - m : m;
    if (neg && (int64_t)v < 0) return false;
    *out = (uint32_t)v;
    return true;
}

/* Storage commands' exptime, as memcached's safe_strtol: a signed 64-bit
 * number, then cut to 32 bits (2147483648 becomes -2147483648, already
 * expired; -9223372036854775808 becomes 0, never). */
static bool parse_store_exptime(const char *s, size_t n, int64_t *out)
{
    uint64_t m;
    bool neg;
    if (!parse_c_number(s, n, &m, &neg)) return false;
    if (m > (uint64_t)INT64_MAX + (neg ? 1 : 0)) return false;
    *out = (int32_t)(uint32_t)(neg ? 0 - m : m);
    return true;
}

/* memcached 1.6.45 checks a key's length only: a control byte (even \0 or
 * \r) is part of the key, a space ends it. */
static bool valid_key(const char *k, size_t n)
{
    (void)k;
    return n > 0 && n <= KEY_MAX;
}

struct tok { const char *p; uint32_t n; };

/* Splits on runs of spaces; returns the token count, at most max (the
 * positional arguments are all any command reads; see last_token). */
static int tokenize(const char *line, size_t len, struct tok *t, int max)
{
    int n = 0;
    size_t i = 0;
    while (i < len && n < max) {
        while (i < len && line[i] == ' ') i++;
        if (i >= len) break;
        size_t start = i;
        while (i < len && line[i] != ' ') i++;
        t[n].p = line + start;
        t[n].n = (uint32_t)(i - start);
        n++;
    }
    return n;
}

/* The line's last token, however many there are: memcached reads noreply
 * (and a cross-protocol "HTTP/...") there. */
static struct tok last_token(const char *line, size_t len)
{
    size_t e = len;
    while (e > 0 && line[e - 1] == ' ') e--;
    size_t b = e;
    while (b > 0 && line[b - 1] != ' ') b--;
    return (struct tok){ line + b, (uint32_t)(e - b) };
}

static bool tok_is(const struct tok *t, const char *word)
{
    size_t l = strlen(word);
    return t->n == l && !memcmp(t->p, word, l);
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

/* The flags memcached 1.6.45 knows, for every meta command alike: a flag a
 * command has no use for is accepted and ignored, as there. */
#define META_KNOWN_FLAGS "bNTRlOPLkstcfvhuqxFCEMJDI"
/* memcached refuses a meta line of more tokens (command and key included) */
#define META_MAX_TOKENS 20
/* an opaque token, its O included */
#define META_MAX_OPAQUE 32

/* The key of a b request, decoded into r->keybuf. */
static bool decode_meta_key(const struct tok *key, struct request *r)
{
    int n = base64_decode(key->p, key->n, r->keybuf, KEY_MAX);
    if (n <= 0) return false;
    r->key = r->keybuf;
    r->nkey = (uint32_t)n;
    return true;
}

/* As memcached: an unknown flag or a duplicate stops at once; a bad token
 * is remembered and the scan goes on, so the last one is reported. The key
 * is decoded where b stands, so its error takes its place in that order. A
 * bad F fails the line without naming itself: the line reports an earlier
 * or later bad token's error, else "bad command line format". */
static enum parse_status parse_meta_flags(const struct tok *key, const struct tok *t, int nt, struct request *r)
{
    struct meta_req *m = &r->meta;
    memset(m, 0, offsetof(struct meta_req, flags));
    m->delta = 1;
    const char *err = NULL;
    bool bad_flags_token = false;
    for (int i = 0; i < nt; i++) {
        char f = t[i].p[0];
        uint64_t bit = meta_bit(f);
        if ((unsigned char)f >= 127 || (m->seen & bit)) return client_error(r, "CLIENT_ERROR duplicate flag");
        if (!bit || !strchr(META_KNOWN_FLAGS, f)) return client_error(r, "CLIENT_ERROR invalid flag");
        const char *tok = t[i].p + 1;
        uint32_t n = t[i].n - 1;
        m->seen |= bit;
        m->flags[m->nflags].flag = f;
        m->flags[m->nflags].tok = tok;
        m->flags[m->nflags].len = (uint8_t)(n > 255 ? 255 : n);
        m->nflags++;
        const char *bad_token = "CLIENT_ERROR bad token in command line format";
        switch (f) {
        case 'q': m->quiet = true; break;
        case 'b':
            m->base64 = true;
            if (!decode_meta_key(key, r)) err = "CLIENT_ERROR error decoding key";
            break;
        case 'T': { int32_t v; if (parse_i32(tok, n, &v)) m->ttl_T = v; else err = bad_token; break; }
        case 'N': { int32_t v; if (parse_i32(tok, n, &v)) m->ttl_N = v; else err = bad_token; break; }
        case 'R': { int32_t v; if (parse_i32(tok, n, &v)) m->ttl_R = v; else err = bad_token; break; }
        case 'C': if (!parse_u64(tok, n, &m->cas_C)) err = bad_token; break;
        case 'E': if (!parse_u64(tok, n, &m->cas_E)) err = bad_token; break;
        case 'F': if (!parse_u32(tok, n, &m->client_flags)) bad_flags_token = true; break;
        case 'D': if (!parse_u64(tok, n, &m->delta)) err = "CLIENT_ERROR invalid numeric delta value"; break;
        case 'J': if (!parse_u64(tok, n, &m->initial)) err = "CLIENT_ERROR invalid numeric initial value"; break;
        /* the mode is the first byte after M, as memcached reads it */
        /* a bare M names no mode: refused like an unknown one (memcached) */
        case 'M': m->mode = n ? tok[0] : '?'; break;
        case 'O':
            m->opaque = tok;
            m->nopaque = (uint8_t)(n > 255 ? 255 : n);
            break;
        default: break;
        }
    }
    if (err || bad_flags_token) return client_error(r, err ? err : BAD_FORMAT);
    return PARSE_OK;
}

/* A meta command's key token (1 or 2 in t) and flags. */
static enum parse_status parse_meta(struct tok *t, int nt, struct request *r)
{
    if (nt < 2) return client_error(r, BAD_FORMAT);
    const struct tok *key = &t[1];
    int first_flag = 2;
    if (r->cmd == CMD_MS) {
        int32_t vlen;
        if (nt < 3 || !parse_i32(t[2].p, t[2].n, &vlen) || vlen < 0 || vlen > INT32_MAX - 2)
            return client_error(r, BAD_FORMAT);
        r->vlen = (uint32_t)vlen;
        first_flag = 3;
        /* from here on an error still leaves a data block to skip */
        r->swallow = true;
    }
    if (key->n > KEY_MAX)
        return client_error(r, r->cmd == CMD_MA ? "CLIENT_ERROR invalid or duplicate flag" : BAD_FORMAT);
    if (r->cmd == CMD_ME) {
        /* me reads one flag, b, and only as its first (memcached 1.6.45,
         * which also wants a 4th token there: see engine/README.md) */
        memset(&r->meta, 0, offsetof(struct meta_req, flags));
        r->meta.base64 = nt >= 3 && t[2].n == 1 && t[2].p[0] == 'b';
    } else {
        enum parse_status st = nt > META_MAX_TOKENS
            ? client_error(r, "CLIENT_ERROR options flags are too long")
            : parse_meta_flags(key, t + first_flag, nt - first_flag, r);
        if (st != PARSE_OK) {
            /* memcached answers every flag problem of ma alike */
            if (r->cmd == CMD_MA) r->error = "CLIENT_ERROR invalid or duplicate flag";
            return st;
        }
        char mode = r->meta.mode;
        if (r->cmd == CMD_MS && mode && !strchr("EAPRS", mode))
            return client_error(r, "CLIENT_ERROR invalid mode for ms M token");
        if (r->cmd == CMD_MA && mode && !strchr("I+D-", mode))
            return client_error(r, "CLIENT_ERROR invalid mode for ma M token");
        if (r->cmd == CMD_MA) r->meta.mode = mode == '+' ? 'I' : mode == '-' ? 'D' : mode;
        if (r->meta.opaque && r->meta.nopaque + 1 > META_MAX_OPAQUE)
            return client_error(r, "CLIENT_ERROR opaque token too long");
    }
    r->meta.key_token = key->p;
    r->meta.nkey_token = (uint8_t)key->n;
    if (r->meta.base64) {
        /* the other meta commands decoded it among their flags */
        if (r->cmd == CMD_ME && !decode_meta_key(key, r)) return client_error(r, BAD_FORMAT);
    } else {
        r->key = key->p;
        r->nkey = key->n;
    }
    r->noreply = r->meta.quiet;
    return PARSE_OK;
}

static bool tok_noreply(const struct tok *t)
{
    return tok_is(t, "noreply");
}

/* memcached matches admin subcommands by prefix: "slabs auto 1" is automove */
static bool tok_prefix_of(const struct tok *t, const char *word)
{
    return t->n > 0 && t->n <= strlen(word) && !memcmp(t->p, word, t->n);
}

/* memcached's safe_strtod on a token of at most 31 bytes */
static bool tok_double(const struct tok *t, double *out)
{
    char buf[32];
    if (t->n == 0 || t->n >= sizeof buf) return false;
    memcpy(buf, t->p, t->n);
    buf[t->n] = '\0';
    char *end;
    errno = 0;
    double d = strtod(buf, &end);
    if (errno == ERANGE || end == buf || (*end && !isspace((unsigned char)*end))) return false;
    *out = d;
    return true;
}

/* `slabs automove ...`, as memcached 1.6.45 answers it: a level 0-2 (other
 * numbers ERROR, anything else CLIENT_ERROR bad command line format), or
 * ratio/freeratio (a number, else ERROR) and window (3-1800). `slabs
 * reassign` takes exactly two 32-bit numbers, else CLIENT_ERROR. Both
 * subcommands match by prefix, as memcached's strncmp does. */
static enum parse_status parse_slabs(const struct tok *t, int nt, struct request *r)
{
    if (nt == 4 && tok_prefix_of(&t[1], "reassign")) {
        int32_t src, dst;
        if (!parse_i32(t[2].p, t[2].n, &src) || !parse_i32(t[3].p, t[3].n, &dst)) return client_error(r, BAD_FORMAT);
        r->cmd = CMD_SLABS_REASSIGN;
        r->number = src;
        r->delta = (uint64_t)(int64_t)dst;
        return PARSE_OK;
    }
    if (nt < 3 || !tok_prefix_of(&t[1], "automove"))
        return PARSE_ERROR;
    r->cmd = CMD_SLABS_AUTOMOVE;
    r->number = -1;
    const struct tok *sub = &t[2];
    double ratio;
    uint32_t level;
    if (tok_prefix_of(sub, "ratio") || tok_prefix_of(sub, "freeratio")) {
        if (nt < 4 || !tok_double(&t[3], &ratio)) return PARSE_ERROR;
    } else if (tok_prefix_of(sub, "window")) {
        if (nt < 4 || !parse_u32(t[3].p, t[3].n, &level)) return client_error(r, BAD_FORMAT);
        if (level < 3 || level > 1800) return client_error(r, "CLIENT_ERROR automove window too low or too high");
    } else {
        if (!parse_u32(sub->p, sub->n, &level)) return client_error(r, BAD_FORMAT);
        if (level > 2) return PARSE_ERROR;
        r->number = level;
    }
    return PARSE_OK;
}

/* `extstore SETTING VALUE`, as memcached 1.6.45 answers it (proto_text.c
 * process_extstore_command): the setting by prefix, in memcached's order
 * ("extstore i 5" is item_size); a value that is no 32-bit unsigned number
 * (max_frag: no number), a missing value or an unknown setting: ERROR. */
static enum parse_status parse_extstore(const struct tok *t, int nt, struct request *r)
{
    static const struct { const char *name; enum ext_knob knob; } names[] = {
        {"item_size", EXT_KNOB_ITEM_SIZE}, {"item_age", EXT_KNOB_ITEM_AGE}, {"low_ttl", EXT_KNOB_LOW_TTL},
        {"recache_rate", EXT_KNOB_RECACHE_RATE}, {"compact_under", EXT_KNOB_COMPACT_UNDER},
        {"drop_under", EXT_KNOB_DROP_UNDER}, {"max_sleep", EXT_KNOB_MAX_SLEEP}, {"max_frag", EXT_KNOB_MAX_FRAG},
        {"drop_unread", EXT_KNOB_DROP_UNREAD},
    };
    if (nt < 3) return PARSE_ERROR;
    r->cmd = CMD_EXTSTORE;
    uint32_t u;
    if (nt > 3 && tok_prefix_of(&t[1], "free_memchunks")) {
        /* deprecated in memcached and ignored; a class id past its 64 classes is refused */
        if (!parse_u32(t[2].p, t[2].n, &u) || u >= 64 || !parse_u32(t[3].p, t[3].n, &u)) return PARSE_ERROR;
        r->number = EXT_KNOB_FREE_MEMCHUNKS;
        return PARSE_OK;
    }
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        if (!tok_prefix_of(&t[1], names[i].name)) continue;
        r->number = names[i].knob;
        if (names[i].knob == EXT_KNOB_MAX_FRAG) return tok_double(&t[2], &r->fraction) ? PARSE_OK : PARSE_ERROR;
        if (!parse_u32(t[2].p, t[2].n, &u)) return PARSE_ERROR;
        r->delta = u;
        return PARSE_OK;
    }
    return PARSE_ERROR;
}

/* get/gets/gat/gats: any number of keys, so only the head is tokenized. */
static enum parse_status parse_retrieval(const char *line, size_t len, const struct tok *c, struct request *r)
{
    bool touch = c->p[1] == 'a';
    r->cmd = touch ? (c->n == 4 ? CMD_GATS : CMD_GAT) : (c->n == 4 ? CMD_GETS : CMD_GET);
    const char *p = c->p + c->n;
    const char *end = line + len;
    if (touch) {
        const char *tk; uint32_t tn;
        const char *after = p;
        const char *k; uint32_t nk;
        if (!next_key(&after, end, &tk, &tn) || !next_key(&after, end, &k, &nk))
            return client_error(r, BAD_FORMAT);
        int32_t exptime;
        if (!parse_i32(tk, tn, &exptime)) return client_error(r, "CLIENT_ERROR invalid exptime argument");
        r->exptime = exptime;
        p = tk + tn;
    }
    r->keys = p;
    r->nkeys_text = (uint32_t)(end - p);
    const char *k; uint32_t nk;
    int count = 0;
    while (next_key(&p, end, &k, &nk)) {
        /* memcached 1.6.45 follows this one error with an empty line */
        if (!valid_key(k, nk)) return client_error(r, BAD_FORMAT "\r\n");
        if (count++ == 0) { r->key = k; r->nkey = nk; }
    }
    if (count == 0) return client_error(r, BAD_FORMAT);
    return PARSE_OK;
}

enum parse_status parse_retrieval_head(const char *buf, size_t len, struct request *r, size_t *keys_off)
{
    r->noreply = false;
    r->exptime = 0;
    if (!line_streams(buf, len)) return PARSE_ERROR;
    const char *p = buf, *end = buf + len;
    const char *verb = NULL;
    uint32_t nverb = 0;
    if (!next_key(&p, end, &verb, &nverb)) return PARSE_ERROR;   /* line_streams saw a verb */
    bool touch = verb[1] == 'a';
    r->cmd = touch ? (nverb == 4 ? CMD_GATS : CMD_GAT) : (nverb == 4 ? CMD_GETS : CMD_GET);
    if (touch) {
        const char *tk; uint32_t tn;
        /* the exptime token must have ended (a space after it) */
        if (!next_key(&p, end, &tk, &tn) || p == end) return client_error(r, BAD_FORMAT);
        int32_t exptime;
        if (!parse_i32(tk, tn, &exptime)) return client_error(r, "CLIENT_ERROR invalid exptime argument");
        r->exptime = exptime;
    }
    *keys_off = (size_t)(p - buf);
    return PARSE_OK;
}

/* set/add/replace/append/prepend/cas <key> <flags> <exptime> <bytes> [<cas>] */
static enum parse_status parse_storage(const struct tok *t, int nt, const struct tok *last, struct request *r)
{
    int32_t vlen;
    if (nt < 5 || !parse_i32(t[4].p, t[4].n, &vlen) || vlen < 0 || vlen > INT32_MAX - 2)
        return client_error(r, BAD_FORMAT);
    /* the length is known: from here on an error skips the data block, as
     * memcached 1.6.45 does, and noreply hides it */
    r->vlen = (uint32_t)vlen;
    r->swallow = true;
    r->noreply = tok_noreply(last);
    if (!valid_key(t[1].p, t[1].n) ||
        !parse_client_flags(t[2].p, t[2].n, &r->client_flags) ||
        !parse_store_exptime(t[3].p, t[3].n, &r->exptime))
        return client_error(r, BAD_FORMAT);
    if (r->cmd == CMD_CAS && (nt < 6 || !parse_u64(t[5].p, t[5].n, &r->cas)))
        return client_error(r, BAD_FORMAT);
    r->key = t[1].p; r->nkey = t[1].n;
    return PARSE_OK;
}

static enum parse_status parse_any_line(const char *line, size_t len, size_t wire_len, struct request *r);

enum parse_status parse_request(const char *line, size_t len, size_t wire_len, struct request *r)
{
    /* Most lines a cache reads are "get <key>..." or "gets <key>...": they
     * go straight to the key scan, without looking for the command among
     * all the others, reading the last token (noreply means nothing to a
     * get) or setting up the token array; 65 of the 180 instructions a
     * single-key GET line cost (bench/callgrind-get.py). The answer is the
     * general path's: the command is the bytes before the first space. */
    if (len > 4 && !memcmp(line, "get", 3) && (line[3] == ' ' || (line[3] == 's' && line[4] == ' '))) {
        memset(r, 0, offsetof(struct request, meta));
        const struct tok c = { line, line[3] == ' ' ? 3 : 4 };
        return parse_retrieval(line, len, &c, r);
    }
    return parse_any_line(line, len, wire_len, r);
}

static enum parse_status parse_any_line(const char *line, size_t len, size_t wire_len, struct request *r)
{
    struct tok t[META_MAX_TOKENS + 1];
    /* the classic fields only: meta is set up by parse_meta, keybuf only
     * written when a base64 key is decoded */
    memset(r, 0, offsetof(struct request, meta));

    /* memcached: no command is shorter than 2 bytes and its "\r\n" */
    if (wire_len < 4) return client_error(r, BAD_FORMAT);
    /* the command is what precedes the first space: " get k" is unknown */
    const char *sp = memchr(line, ' ', len);
    const struct tok c = { line, (uint32_t)(sp ? (size_t)(sp - line) : len) };
    const struct tok last = last_token(line, len);

    if (tok_is(&c, "get") || tok_is(&c, "gets") || tok_is(&c, "gat") || tok_is(&c, "gats"))
        return parse_retrieval(line, len, &c, r);

    int nt = tokenize(line, len, t, META_MAX_TOKENS + 1);

    if (c.n == 2 && c.p[0] == 'm') {
        switch (c.p[1]) {
        case 'g': r->cmd = CMD_MG; break;
        case 's': r->cmd = CMD_MS; break;
        case 'd': r->cmd = CMD_MD; break;
        case 'a': r->cmd = CMD_MA; break;
        case 'e': r->cmd = CMD_ME; break;
        case 'n': r->cmd = CMD_MN; return PARSE_OK;
        default: goto unknown;
        }
        return parse_meta(t, nt, r);
    }

    static const struct { const char *name; enum req_cmd cmd; } storage_cmds[] = {
        {"set", CMD_SET}, {"add", CMD_ADD}, {"replace", CMD_REPLACE},
        {"append", CMD_APPEND}, {"prepend", CMD_PREPEND}, {"cas", CMD_CAS},
    };
    for (size_t i = 0; i < sizeof(storage_cmds) / sizeof(storage_cmds[0]); i++) {
        if (!tok_is(&c, storage_cmds[i].name)) continue;
        r->cmd = storage_cmds[i].cmd;
        return parse_storage(t, nt, &last, r);
    }

    /* incr, decr, touch, delete: extra tokens are ignored, noreply is last */
    if (tok_is(&c, "incr") || tok_is(&c, "decr")) {
        r->cmd = c.p[0] == 'i' ? CMD_INCR : CMD_DECR;
        if (nt < 3) return client_error(r, BAD_FORMAT);
        r->noreply = tok_noreply(&last);
        if (!valid_key(t[1].p, t[1].n)) return client_error(r, BAD_FORMAT);
        if (!parse_u64(t[2].p, t[2].n, &r->delta)) return client_error(r, "CLIENT_ERROR invalid numeric delta argument");
        r->key = t[1].p; r->nkey = t[1].n;
        return PARSE_OK;
    }
    if (tok_is(&c, "touch")) {
        r->cmd = CMD_TOUCH;
        if (nt < 3) return client_error(r, BAD_FORMAT);
        r->noreply = tok_noreply(&last);
        if (!valid_key(t[1].p, t[1].n)) return client_error(r, BAD_FORMAT);
        int32_t exptime;
        if (!parse_i32(t[2].p, t[2].n, &exptime)) return client_error(r, "CLIENT_ERROR invalid exptime argument");
        r->exptime = exptime;
        r->key = t[1].p; r->nkey = t[1].n;
        return PARSE_OK;
    }
    if (tok_is(&c, "delete")) {
        /* memcached 1.6.45 ignores what follows the key (the hold time of
         * old clients included) */
        r->cmd = CMD_DELETE;
        if (nt < 2) return client_error(r, BAD_FORMAT);
        r->noreply = tok_noreply(&last);
        if (!valid_key(t[1].p, t[1].n)) return client_error(r, BAD_FORMAT);
        r->key = t[1].p; r->nkey = t[1].n;
        return PARSE_OK;
    }
    /* memcached ignores anything after these two */
    if (tok_is(&c, "version")) { r->cmd = CMD_VERSION; return PARSE_OK; }
    if (tok_is(&c, "quit")) { r->cmd = CMD_QUIT; return PARSE_OK; }
    if (tok_is(&c, "refresh_certs")) { r->cmd = CMD_REFRESH_CERTS; return PARSE_OK; }
    if (tok_is(&c, "shutdown")) {
        /* memcached: the mode is judged by the handler (-A decides first);
         * a trailing noreply silences the reply but still counts as an argument */
        r->cmd = CMD_SHUTDOWN;
        r->noreply = tok_is(&t[nt - 1], "noreply");
        r->number = nt - 1;
        if (nt > 1) { r->args = t[1].p; r->nargs = t[1].n; }
        return PARSE_OK;
    }
    if (tok_is(&c, "watch")) {
        r->cmd = CMD_WATCH;
        r->args = c.p + c.n;
        r->nargs = (uint32_t)(line + len - r->args);
        return PARSE_OK;
    }
    if (tok_is(&c, "stats")) {
        /* only the first argument counts, as in memcached */
        r->cmd = CMD_STATS;
        if (nt > 1) { r->args = t[1].p; r->nargs = t[1].n; }
        else { r->args = line + len; r->nargs = 0; }
        return PARSE_OK;
    }
    /* the rest reads noreply from the last token even when refused */
    r->noreply = tok_noreply(&last);
    if (tok_is(&c, "flush_all")) {
        r->cmd = CMD_FLUSH_ALL;
        /* a delay is read whenever there is a token besides noreply; what
         * follows it is ignored; 32-bit signed, as memcached */
        if (nt != (r->noreply ? 2 : 1)) {
            int32_t delay;
            if (!parse_i32(t[1].p, t[1].n, &delay)) return client_error(r, "CLIENT_ERROR invalid exptime argument");
            r->number = delay;
            r->has_number = true;
        }
        return PARSE_OK;
    }
    if (tok_is(&c, "slabs")) return parse_slabs(t, nt, r);
    if (tok_is(&c, "extstore")) return parse_extstore(t, nt, r);
    if (tok_is(&c, "verbosity")) {
        r->cmd = CMD_VERBOSITY;
        uint32_t level;
        if (nt < 2 || !parse_u32(t[1].p, t[1].n, &level)) return client_error(r, BAD_FORMAT);
        r->number = level;
        r->has_number = true;
        return PARSE_OK;
    }
#ifdef CACHET_TEST_HOOKS
    /* memcached's debug builds have it too: tests move the clock instead of
     * sleeping through TTLs and delayed flushes */
    if (tok_is(&c, "debugtime")) {
        r->cmd = CMD_DEBUGTIME;
        uint32_t seconds;
        if (nt < 2 || !parse_u32(t[1].p, t[1].n, &seconds)) return client_error(r, BAD_FORMAT);
        r->number = seconds;
        r->has_number = true;
        return PARSE_OK;
    }
#endif
unknown:
    /* memcached closes on a cross-protocol request ("GET / HTTP/1.1") */
    if (nt > 1 && last.n >= 5 && !memcmp(last.p, "HTTP/", 5)) return PARSE_CLOSE;
    r->noreply = tok_noreply(&last);
    return PARSE_ERROR;
}
