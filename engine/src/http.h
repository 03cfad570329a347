/*
 * http.h - a strict parser for the head of an HTTP/1.x request.
 *
 * Why hand-written and this small: the metrics port serves two GET
 * endpoints to Prometheus and the kubelet, and the engine links nothing but
 * libc. The port is unauthenticated, so the parser is the first line of
 * defence: it is a pure function of the bytes (no I/O, no allocation, fields
 * point into the caller's buffer), it takes only what those clients send,
 * and it says why it refuses the rest (400, 431, 505), so the server can
 * answer and close instead of guessing. Request bodies are never read:
 * a request announcing one is refused, which keeps keep-alive framing exact.
 *
 * Concurrency: none; callers own the buffer.
 */
#ifndef CACHET_HTTP_H
#define CACHET_HTTP_H

#include <stdbool.h>
#include <stddef.h>

#define HTTP_HEAD_MAX    8192   /* request line + headers */
#define HTTP_HEADERS_MAX 64

enum http_parse_result {
    HTTP_INCOMPLETE,      /* no end of head yet, and within HTTP_HEAD_MAX */
    HTTP_PARSED,          /* req is filled in */
    HTTP_BAD_REQUEST,     /* 400: malformed, or a body we will not read */
    HTTP_HEAD_TOO_LARGE,  /* 431: head over HTTP_HEAD_MAX or too many headers */
    HTTP_BAD_VERSION,     /* 505: not HTTP/1.x */
};

enum http_method { HTTP_GET, HTTP_HEAD, HTTP_OTHER };

struct http_request {
    enum http_method method;
    const char *path;        /* origin-form path without query or fragment */
    size_t      path_len;
    bool        keep_alive;  /* 1.1 unless "Connection: close"; 1.0 only with "keep-alive" */
    size_t      head_len;    /* bytes of the buffer this request used */
    const char *reason;      /* for a refusal: one line saying why */
};

/* Parses the request at the start of buf (len bytes). */
enum http_parse_result http_parse_request(const char *buf, size_t len, struct http_request *req);

#endif
