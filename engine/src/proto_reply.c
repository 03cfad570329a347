/*
 * proto_reply.c - reply helpers shared by proto_text.c and proto_meta.c; see
 * proto_reply.h. Worker thread only.
 */
#include "proto_reply.h"

#include <string.h>

char *u64_to_str(char *p, uint64_t v)
{
    char tmp[20];
    int n = 0;
    do { tmp[n++] = (char)('0' + v % 10); v /= 10; } while (v);
    while (n) *p++ = tmp[--n];
    return p;
}

char *i64_to_str(char *p, int64_t v)
{
    if (v < 0) { *p++ = '-'; return u64_to_str(p, (uint64_t)0 - (uint64_t)v); }
    return u64_to_str(p, (uint64_t)v);
}

void out_value(struct conn *c, char *p, const struct item_view *v)
{
    char *base = c->out.buf + c->out.len;
    if (!v->ref) {
        memmove(p, v->value, v->nbytes);
        p += v->nbytes;
        *p++ = '\r'; *p++ = '\n';
        c->out.len += (size_t)(p - base);
    } else {
        c->out.len += (size_t)(p - base);
        out_ref(c, v);
        out_add(c, "\r\n", 2);
    }
}
