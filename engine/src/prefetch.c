/*
 * prefetch.c - batched lookups; see prefetch.h for why. Which lines are
 * retrievals and where their keys are is the parser's call
 * (classify_line); this file only hashes and prefetches.
 */
#include "prefetch.h"

#include <string.h>

#include "proto_parser.h"

/* The first key of a retrieval line p[0, lend), or false. */
static bool first_retrieval_key(const char *p, const char *lend, const char **key, uint32_t *nkey)
{
    const char *cursor;
    bool first_only;
    if (classify_line(p, (size_t)(lend - p), &cursor, &first_only) != LINE_RETRIEVAL) return false;
    return next_key(&cursor, lend, key, nkey) && *nkey <= KEY_MAX;
}

/* The scan stops at the first storage command (its data block could look
 * like a command line); prefetches are only hints, a key not found here is
 * looked up the ordinary way. A lone key is hashed, not prefetched: its
 * lookup reuses the hash. */
void prefetch_batch(struct worker *w, const char *p, size_t len)
{
    w->npf = w->pf_pos = 0;
    const char *end = p + len;
    for (int lines = 0; p < end && w->npf < PREFETCH_MAX && lines < PREFETCH_MAX; lines++) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl) break;
        const char *lend = nl > p && nl[-1] == '\r' ? nl - 1 : nl;
        const char *keys;
        bool first_only;
        enum line_kind kind = classify_line(p, (size_t)(lend - p), &keys, &first_only);
        if (kind == LINE_STORAGE) break;
        if (kind == LINE_RETRIEVAL) {
            const char *k;
            uint32_t nk;
            while (w->npf < PREFETCH_MAX && next_key(&keys, lend, &k, &nk)) {
                if (nk > KEY_MAX) break;
                w->pf[w->npf++] = (struct storage_key){ .key = k, .nkey = nk };
                if (first_only) break;
            }
        }
        p = nl + 1;
    }
    storage_prefetch_keys(w->st, w->pf, w->npf);
}

void prefetch_forget(struct worker *w)
{
    w->npf = w->pf_pos = 0;
}

/* A connection whose input is more than one line prefetches its own keys
 * when it is answered (prefetch_batch); here only the lone ones, which
 * would otherwise each take their misses one after the other. */
void prefetch_conns(struct worker *w, struct conn *const *conns, int n)
{
    struct storage_key keys[PREFETCH_MAX];
    int nk = 0;
    for (int i = 0; i < n && nk < PREFETCH_MAX; i++) {
        const struct conn *c = conns[i];
        if (c->state != CONN_CMD || c->get_stream.active || c->rend <= c->rstart) continue;
        const char *p = c->rbuf + c->rstart, *end = c->rbuf + c->rend;
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl || nl + 1 != end) continue;
        const char *lend = nl > p && nl[-1] == '\r' ? nl - 1 : nl;
        if (first_retrieval_key(p, lend, &keys[nk].key, &keys[nk].nkey)) nk++;
    }
    /* one key alone overlaps nothing, and its connection hashes it again
     * when it is answered (prefetch_batch): not hashed here for nothing */
    if (nk >= 2) storage_prefetch_keys(w->st, keys, nk);
}

bool conn_storage_get(struct conn *c, const char *key, uint32_t nkey, const struct get_opts *opts,
                      char *copy_buf, size_t copy_cap, struct item_view *out)
{
    struct worker *w = c->w;
    for (int i = w->pf_pos; i < w->npf; i++) {
        if (w->pf[i].key == key && w->pf[i].nkey == nkey) {
            w->pf_pos = i + 1;
            return storage_get_hashed(w->st, key, nkey, w->pf[i].hv, opts, copy_buf, copy_cap, out);
        }
    }
    return storage_get(w->st, key, nkey, opts, copy_buf, copy_cap, out);
}
