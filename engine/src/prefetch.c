/*
 * prefetch.c - batched lookups; see prefetch.h for why. Which lines are
 * retrievals and where their keys are is the parser's call
 * (classify_line); this file only hashes and prefetches.
 */
#include "prefetch.h"

#include <string.h>

#include "proto_parser.h"

/* The scan stops at the first storage command (its data block could look
 * like a command line); prefetches are only hints, a key not found here is
 * looked up the ordinary way. */
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
                w->pf[w->npf].key = k;
                w->pf[w->npf].nkey = nk;
                w->pf[w->npf].hv = storage_prefetch_bucket(w->st, k, nk);
                w->npf++;
                if (first_only) break;
            }
        }
        p = nl + 1;
    }
    if (w->npf < 2) {          /* a lone GET gains nothing from the extra pass */
        w->npf = 0;
        return;
    }
    for (int i = 0; i < w->npf; i++) storage_prefetch_item(w->st, w->pf[i].hv);
}

void prefetch_forget(struct worker *w)
{
    w->npf = w->pf_pos = 0;
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
