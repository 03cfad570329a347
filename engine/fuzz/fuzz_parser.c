/*
 * fuzz_parser.c - libFuzzer target for the request parser (src/proto_parser.c).
 *
 * Why the parser alone: it is the only code that sees raw client bytes
 * before they are validated, so it is where a crash or an out-of-bounds read
 * would be reachable from the network. The harness frames the input exactly
 * as a connection does (find_line, the head of an unended get line,
 * skipping data blocks) and
 * checks the invariants the rest of the server relies on: every key handed
 * on is 1-250 bytes without a space (or a decoded base64 key of at most 250
 * bytes), tokens lie inside the line, and base64 round
 * trips. Built with ASan+UBSan, so any memory error aborts the run.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto_parser.h"

#define CHECK(cond) do { if (!(cond)) abort(); } while (0)

static void check_key(const char *k, uint32_t n, bool binary_ok)
{
    CHECK(n >= 1 && n <= KEY_MAX);
    if (binary_ok) return;
    for (uint32_t i = 0; i < n; i++) CHECK(k[i] != ' ');
}

static void inside(const char *line, size_t len, const char *p, size_t n)
{
    CHECK(p >= line && p + n <= line + len);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *buf = (const char *)data;
    size_t off = 0;
    while (off < size) {
        size_t consumed;
        long ll = find_line(buf + off, size - off, &consumed);
        if (ll < 0) {
            /* an unended rest: a get line is answered from its head on as
             * its keys arrive (net_conn.c), so its head is parsed alone */
            size_t rest = size - off;
            if (line_streams(buf + off, rest)) {
                char *copy = malloc(rest);
                memcpy(copy, buf + off, rest);
                struct request r;
                size_t keys_off = rest + 1;
                enum parse_status st = parse_retrieval_head(copy, rest, &r, &keys_off);
                if (st == PARSE_OK) CHECK(keys_off <= rest);
                else CHECK(st == PARSE_CLIENT_ERROR && r.error && !strncmp(r.error, "CLIENT_ERROR", 12));
                free(copy);
            }
            break;
        }
        CHECK(consumed <= size - off && (size_t)ll < consumed);
        const char *line = buf + off;
        off += consumed;
        /* the parser must not depend on anything past the line */
        char *copy = malloc((size_t)ll + 1);
        memcpy(copy, line, (size_t)ll);
        struct request r;
        enum parse_status st = parse_request(copy, (size_t)ll, consumed, &r);
        if (st == PARSE_CLIENT_ERROR) CHECK(r.error && !strncmp(r.error, "CLIENT_ERROR", 12));
        if (st == PARSE_OK) {
            switch (r.cmd) {
            case CMD_GET: case CMD_GETS: case CMD_GAT: case CMD_GATS: {
                inside(copy, (size_t)ll, r.keys, r.nkeys_text);
                const char *p = r.keys, *end = r.keys + r.nkeys_text, *k;
                uint32_t nk;
                int count = 0;
                while (next_key(&p, end, &k, &nk)) { check_key(k, nk, false); count++; }
                CHECK(count >= 1);
                break;
            }
            case CMD_SET: case CMD_ADD: case CMD_REPLACE: case CMD_APPEND: case CMD_PREPEND:
            case CMD_CAS: case CMD_MS:
                if (r.cmd == CMD_MS && r.meta.base64) check_key(r.key, r.nkey, true);
                else { inside(copy, (size_t)ll, r.key, r.nkey); check_key(r.key, r.nkey, false); }
                CHECK(r.vlen <= INT32_MAX - 2);
                /* skip the data block, as the connection would */
                off = (size - off > (size_t)r.vlen + 2) ? off + r.vlen + 2 : size;
                break;
            case CMD_INCR: case CMD_DECR: case CMD_TOUCH: case CMD_DELETE:
                inside(copy, (size_t)ll, r.key, r.nkey);
                check_key(r.key, r.nkey, false);
                break;
            case CMD_MG: case CMD_MD: case CMD_MA: case CMD_ME:
                check_key(r.key, r.nkey, r.meta.base64);
                CHECK(r.meta.nflags <= META_MAX_FLAGS);
                for (int i = 0; i < r.meta.nflags; i++)
                    inside(copy, (size_t)ll, r.meta.flags[i].tok, r.meta.flags[i].len);
                if (r.meta.opaque) CHECK(r.meta.nopaque <= 32);
                break;
            default:
                break;
            }
        }
        free(copy);
    }
    /* base64 must round-trip whatever it accepts */
    char dec[256], enc[400], dec2[256];
    int n = base64_decode(buf, size < 340 ? size : 340, dec, sizeof(dec));
    if (n > 0) {
        size_t e = base64_encode(dec, (size_t)n, enc, sizeof(enc));
        int n2 = base64_decode(enc, e, dec2, sizeof(dec2));
        CHECK(n2 == n && !memcmp(dec, dec2, (size_t)n));
    }
    return 0;
}
