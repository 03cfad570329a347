/*
 * http.c - the HTTP/1.x request-head parser; see http.h for why it is
 * strict and pure.
 *
 * Concurrency: none (a pure function of its arguments).
 */
#include "http.h"

#include <string.h>
#include <strings.h>

#define TARGET_MAX 2048

/* RFC 9110 5.6.2 token characters */
static bool is_tchar(unsigned char ch)
{
    if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9')) return true;
    return ch && strchr("!#$%&'*+-.^_`|~", ch) != NULL;
}

static bool is_field_char(unsigned char ch)
{
    return ch == '\t' || (ch >= 0x20 && ch != 0x7f);
}

static enum http_parse_result refuse(struct http_request *req, enum http_parse_result why, const char *reason)
{
    req->reason = reason;
    return why;
}

/* Is the comma-separated token list in v (n bytes) holding token t? */
static bool list_has(const char *v, size_t n, const char *t)
{
    size_t tl = strlen(t), i = 0;
    while (i < n) {
        while (i < n && (v[i] == ' ' || v[i] == '\t' || v[i] == ',')) i++;
        size_t start = i;
        while (i < n && v[i] != ',') i++;
        size_t end = i;
        while (end > start && (v[end - 1] == ' ' || v[end - 1] == '\t')) end--;
        if (end - start == tl && !strncasecmp(v + start, t, tl)) return true;
    }
    return false;
}

static bool name_is(const char *name, size_t n, const char *want)
{
    return strlen(want) == n && !strncasecmp(name, want, n);
}

/* Where the head ends (just past its empty line), or 0 if not yet. */
static size_t head_end(const char *buf, size_t len, size_t from)
{
    size_t pos = from;
    for (;;) {
        const char *nl = memchr(buf + pos, '\n', len - pos);
        if (!nl) return 0;
        size_t line_start = pos;
        pos = (size_t)(nl - buf) + 1;
        size_t line_len = (size_t)(nl - (buf + line_start));
        if (line_start > from && (line_len == 0 || (line_len == 1 && buf[line_start] == '\r'))) return pos;
        if (pos >= len) return 0;
    }
}

static enum http_parse_result parse_request_line(const char *p, size_t n, struct http_request *req, int *minor)
{
    size_t i = 0;
    while (i < n && is_tchar((unsigned char)p[i])) i++;
    if (i == 0 || i > 16 || i >= n || p[i] != ' ')
        return refuse(req, HTTP_BAD_REQUEST, "malformed request line");
    req->method = (i == 3 && !memcmp(p, "GET", 3)) ? HTTP_GET
                : (i == 4 && !memcmp(p, "HEAD", 4)) ? HTTP_HEAD : HTTP_OTHER;
    const char *target = p + ++i;
    while (i < n && p[i] > 0x20 && p[i] < 0x7f) i++;
    size_t target_len = (size_t)(p + i - target);
    if (target_len == 0 || i >= n || p[i] != ' ')
        return refuse(req, HTTP_BAD_REQUEST, "malformed request line");
    if (target_len > TARGET_MAX)
        return refuse(req, HTTP_BAD_REQUEST, "request target too long");
    const char *ver = p + i + 1;
    size_t vlen = n - i - 1;
    if (vlen != 8 || memcmp(ver, "HTTP/", 5) || ver[6] != '.' ||
        ver[5] < '0' || ver[5] > '9' || ver[7] < '0' || ver[7] > '9')
        return refuse(req, HTTP_BAD_REQUEST, "malformed request line");
    if (ver[5] != '1') return refuse(req, HTTP_BAD_VERSION, "only HTTP/1.0 and HTTP/1.1 are served");
    *minor = ver[7] - '0';

    /* origin-form "/path?query", absolute-form "http://host/path", or "*" */
    if (target_len > 7 && !strncasecmp(target, "http://", 7)) {
        const char *slash = memchr(target + 7, '/', target_len - 7);
        if (!slash) { target = "/"; target_len = 1; }
        else { target_len -= (size_t)(slash - target); target = slash; }
    } else if (target[0] != '/' && !(target_len == 1 && target[0] == '*')) {
        return refuse(req, HTTP_BAD_REQUEST, "malformed request target");
    }
    size_t path_len = 0;
    while (path_len < target_len && target[path_len] != '?' && target[path_len] != '#') path_len++;
    req->path = target;
    req->path_len = path_len;
    return HTTP_PARSED;
}

enum http_parse_result http_parse_request(const char *buf, size_t len, struct http_request *req)
{
    *req = (struct http_request){ .method = HTTP_OTHER };
    /* RFC 9112 2.2: a server ignores at least one empty line before a request */
    size_t start = 0;
    while (start < len && start < 4 && (buf[start] == '\r' || buf[start] == '\n')) start++;
    size_t end = head_end(buf, len, start);
    if (!end) {
        if (len >= HTTP_HEAD_MAX) return refuse(req, HTTP_HEAD_TOO_LARGE, "request head too large");
        return HTTP_INCOMPLETE;
    }
    if (end > HTTP_HEAD_MAX) return refuse(req, HTTP_HEAD_TOO_LARGE, "request head too large");
    req->head_len = end;

    int minor = 0, hosts = 0, headers = 0;
    bool conn_close = false, conn_keep = false, seen_length = false;
    size_t pos = start;
    bool first = true;
    while (pos < end) {
        const char *line = buf + pos;
        const char *nl = memchr(line, '\n', end - pos);   /* present: end is past a newline */
        size_t n = (size_t)(nl - line);
        pos += n + 1;
        if (n && line[n - 1] == '\r') n--;
        for (size_t k = 0; k < n; k++)
            if (!is_field_char((unsigned char)line[k]))
                return refuse(req, HTTP_BAD_REQUEST, "control character in request head");
        if (first) {
            enum http_parse_result r = parse_request_line(line, n, req, &minor);
            if (r != HTTP_PARSED) return r;
            first = false;
            continue;
        }
        if (n == 0) break;                         /* the empty line ending the head */
        if (line[0] == ' ' || line[0] == '\t')
            return refuse(req, HTTP_BAD_REQUEST, "folded header line");
        if (++headers > HTTP_HEADERS_MAX)
            return refuse(req, HTTP_HEAD_TOO_LARGE, "too many header fields");
        size_t nl_name = 0;
        while (nl_name < n && is_tchar((unsigned char)line[nl_name])) nl_name++;
        if (nl_name == 0 || nl_name >= n || line[nl_name] != ':')
            return refuse(req, HTTP_BAD_REQUEST, "malformed header field");
        const char *v = line + nl_name + 1;
        size_t vn = n - nl_name - 1;
        while (vn && (*v == ' ' || *v == '\t')) { v++; vn--; }
        while (vn && (v[vn - 1] == ' ' || v[vn - 1] == '\t')) vn--;
        if (name_is(line, nl_name, "host")) {
            hosts++;
        } else if (name_is(line, nl_name, "connection")) {
            if (list_has(v, vn, "close")) conn_close = true;
            if (list_has(v, vn, "keep-alive")) conn_keep = true;
        } else if (name_is(line, nl_name, "content-length")) {
            bool digits = vn > 0, zero = true;
            for (size_t k = 0; k < vn; k++) {
                if (v[k] < '0' || v[k] > '9') digits = false;
                if (v[k] != '0') zero = false;
            }
            if (seen_length || !digits)
                return refuse(req, HTTP_BAD_REQUEST, "invalid Content-Length");
            seen_length = true;
            if (!zero) return refuse(req, HTTP_BAD_REQUEST, "request bodies are not accepted");
        } else if (name_is(line, nl_name, "transfer-encoding")) {
            return refuse(req, HTTP_BAD_REQUEST, "request bodies are not accepted");
        }
    }
    if (minor >= 1 && hosts != 1)
        return refuse(req, HTTP_BAD_REQUEST, "an HTTP/1.1 request needs exactly one Host header");
    req->keep_alive = minor >= 1 ? !conn_close : (conn_keep && !conn_close);
    return HTTP_PARSED;
}
