/*
 * proto_parser.h - a pure parser for memcached's ASCII and meta request lines.
 *
 * Why pure: the parser takes bytes and returns a description of the request;
 * it performs no I/O, allocates nothing and never touches storage. That makes
 * it cheap (tokens point into the connection's read buffer, nothing is
 * copied or NUL-terminated), and lets libFuzzer drive it directly
 * (fuzz/fuzz_parser.c) with every malformed input imaginable. Everything a
 * client can get wrong on a command line is decided here, so proto_text.c and
 * proto_meta.c only ever see well-formed requests.
 */
#ifndef CACHET_PROTO_PARSER_H
#define CACHET_PROTO_PARSER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define KEY_MAX 250
/* memcached closes a connection whose command line has no end after 2048
 * bytes, without a reply. A get/gets/gat/gats line carries any number of
 * keys: one longer than the read buffer is answered key by key as it
 * arrives (net_conn.c, proto_text.c proto_get_stream), so it has no length
 * limit and costs no memory beyond the connection's resting buffers. A line
 * whose end is already in the buffer is parsed whatever its length. */
#define LINE_MAX_PLAIN     2048
#define META_MAX_FLAGS     32

enum req_cmd {
    CMD_NONE = 0,
    CMD_GET, CMD_GETS, CMD_GAT, CMD_GATS,
    CMD_SET, CMD_ADD, CMD_REPLACE, CMD_APPEND, CMD_PREPEND, CMD_CAS,
    CMD_INCR, CMD_DECR, CMD_TOUCH, CMD_DELETE,
    CMD_FLUSH_ALL, CMD_VERSION, CMD_VERBOSITY, CMD_QUIT, CMD_STATS,
    CMD_MG, CMD_MS, CMD_MD, CMD_MA, CMD_MN, CMD_ME,
    CMD_SHUTDOWN,  /* args: the first argument; number: how many arguments */
    CMD_SLABS_AUTOMOVE, /* `slabs automove`: number is the level 0-2, or -1 for a tuning value
                           (ratio, freeratio, window) accepted without effect */
    CMD_SLABS_REASSIGN, /* `slabs reassign <src> <dst>`: number is src, delta holds dst */
    CMD_WATCH,     /* args: everything after "watch" (the words, unparsed) */
    CMD_EXTSTORE,  /* `extstore SETTING VALUE`: number is an enum ext_knob, delta the value
                      (fraction: max_frag's) */
    CMD_REFRESH_CERTS, /* -Z: reload the TLS certificate, key and CA (tls.c) */
#ifdef CACHET_TEST_HOOKS
    CMD_DEBUGTIME, /* number: seconds to move the clock forward */
#endif
};

enum parse_status {
    PARSE_OK,            /* r describes a well-formed request */
    PARSE_ERROR,         /* unknown command or wrong arity: "ERROR" */
    PARSE_CLIENT_ERROR,  /* r->error holds the full reply line, without \r\n */
    PARSE_CLOSE,         /* a cross-protocol request (HTTP): close without a reply */
};

struct meta_flag {
    char        flag;
    uint8_t     len;     /* token length after the flag letter */
    const char *tok;
};

/* Only meta commands initialise this (scalars first, the flag array last,
 * so a parse zeroes a few dozen bytes, not the whole array). */
struct meta_req {
    uint8_t          nflags;
    uint64_t         seen;                    /* bit per flag letter, see meta_bit() */
    bool             quiet;                   /* q */
    bool             base64;                  /* b */
    char             mode;                    /* ms / ma M token, 0 if absent */
    int64_t          ttl_T, ttl_N, ttl_R;     /* T, N, R tokens */
    uint64_t         cas_C, cas_E;            /* C, E tokens */
    uint32_t         client_flags;            /* F */
    uint64_t         delta;                   /* ma D, default 1 */
    uint64_t         initial;                 /* ma J, default 0 */
    const char      *opaque;                  /* O token */
    uint8_t          nopaque;
    const char      *key_token;               /* the key as sent (base64 text with b) */
    uint8_t          nkey_token;
    struct meta_flag flags[META_MAX_FLAGS];  /* in request order: replies echo in this order */
};

struct request {
    enum req_cmd cmd;
    const char  *key;          /* first (or only) key; decoded key for meta b */
    uint32_t     nkey;
    const char  *keys;         /* retrieval: text holding all keys, space separated */
    uint32_t     nkeys_text;
    uint32_t     client_flags;
    int64_t      exptime;
    uint32_t     vlen;         /* storage commands: data bytes that follow the line */
    uint64_t     cas;
    uint64_t     delta;
    int64_t      number;       /* flush_all delay, verbosity level, extstore setting */
    double       fraction;     /* extstore max_frag */
    bool         has_number;
    bool         noreply;
    bool         swallow;      /* PARSE_CLIENT_ERROR after a storage line's length: skip vlen+2 data bytes */
    const char  *args;         /* stats: the arguments after "stats" */
    uint32_t     nargs;
    const char  *error;        /* PARSE_CLIENT_ERROR: full reply line */
    struct meta_req meta;      /* meta commands only; see struct meta_req */
    char         keybuf[KEY_MAX + 1]; /* base64-decoded meta key */
};

static inline uint64_t meta_bit(char flag)
{
    if (flag >= 'A' && flag <= 'Z') return 1ULL << (flag - 'A');
    if (flag >= 'a' && flag <= 'z') return 1ULL << (26 + flag - 'a');
    return 0;
}

/* Finds the end of the first line in buf. Returns the line length without
 * its terminator ("\r\n" or a bare "\n") and sets *consumed to the length
 * including it, or returns -1 if no complete line is there yet. */
long find_line(const char *buf, size_t len, size_t *consumed);

/* Does a line starting with these bytes carry keys that may be answered
 * before its end arrives (get, gets, gat, gats)? Other lines may not pass
 * LINE_MAX_PLAIN without their end. */
bool line_streams(const char *buf, size_t len);

/* The head of such a line (line_streams): its command, gat's exptime and
 * where its keys start (*keys_off). PARSE_CLIENT_ERROR (r->error) for a
 * bad exptime, as parse_request would say for the whole line. */
enum parse_status parse_retrieval_head(const char *buf, size_t len, struct request *r, size_t *keys_off);

/* For batched lookups (prefetch.c), which look at a whole read batch before
 * any of it is parsed: is this line a retrieval (get, gets, mg), and where do
 * its keys start (*first_only: only the first token is a key, as in mg)? A
 * storage command is reported apart because a data block follows it, which
 * a scan must not read as lines. A quick look at the verb, not a parse: a
 * malformed line is classified as whatever its verb says. Inline, as pure as
 * the rest of the parser: a call per line cost 1% of the instructions of
 * pipelined GETs (callgrind). */
enum line_kind { LINE_OTHER, LINE_RETRIEVAL, LINE_STORAGE };
static inline enum line_kind classify_line(const char *p, size_t len, const char **keys, bool *first_only)
{
    *first_only = false;
    if (len > 4 && !memcmp(p, "get ", 4)) { *keys = p + 4; return LINE_RETRIEVAL; }
    if (len > 5 && !memcmp(p, "gets ", 5)) { *keys = p + 5; return LINE_RETRIEVAL; }
    if (len > 3 && !memcmp(p, "mg ", 3)) { *keys = p + 3; *first_only = true; return LINE_RETRIEVAL; }
    if (len > 3 && (!memcmp(p, "set", 3) || !memcmp(p, "add", 3) || !memcmp(p, "cas", 3) ||
                    !memcmp(p, "ms ", 3) || !memcmp(p, "rep", 3) || !memcmp(p, "app", 3) ||
                    !memcmp(p, "pre", 3)))
        return LINE_STORAGE;
    return LINE_OTHER;
}

/* Parses one command line: len bytes without its terminator, wire_len with
 * it ("\r\n" or a bare "\n"; memcached refuses a line under 4 bytes on the
 * wire, so "mn\n" is refused where "mn\r\n" is not). With PARSE_ERROR or
 * PARSE_CLIENT_ERROR, r->noreply says whether the reply is suppressed. */
enum parse_status parse_request(const char *line, size_t len, size_t wire_len, struct request *r);

/* Iterates the keys of a retrieval request: returns false at the end.
 * Inline: every GET key passes here up to three times (prefetch, parser,
 * reply), and as a call it cost each single-key GET ~30 instructions
 * (bench/callgrind-get.py). A byte loop, not memchr: memchr costs ~20
 * instructions however short the key, and a loop over the first 16 bytes
 * before it cost more than either (1255 against 1227 per GET for 4-byte
 * keys, against 1248 for memchr alone). */
static inline bool next_key(const char **cursor, const char *end, const char **key, uint32_t *nkey)
{
    const char *p = *cursor;
    while (p < end && *p == ' ') p++;
    if (p >= end) { *cursor = p; return false; }
    const char *e = p;
    while (e < end && *e != ' ') e++;
    *key = p;
    *nkey = (uint32_t)(e - p);
    *cursor = e;
    return true;
}

/* Strict decimal parsers on (ptr,len), memcached's mcmc_tokto* rules. */
bool parse_u64(const char *s, size_t n, uint64_t *out);
bool parse_u32(const char *s, size_t n, uint32_t *out);
bool parse_i32(const char *s, size_t n, int32_t *out);

/* base64 (RFC 4648, with padding), for meta keys with the b flag. */
int  base64_decode(const char *in, size_t n, char *out, size_t cap); /* -1 on error */
size_t base64_encode(const char *in, size_t n, char *out, size_t cap);

#endif
