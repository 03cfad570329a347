/*
 * auth.h - memcached's ASCII authentication (-Y authfile); see auth.c.
 *
 * Concurrency: auth_start before the workers run; auth_step on the
 * connection's worker; auth_reload from any thread.
 */
#ifndef CACHET_AUTH_H
#define CACHET_AUTH_H

#include <stdbool.h>
#include <stddef.h>

/* The largest authfile accepted (bytes); memory_budget.c counts two copies. */
#define AUTH_FILE_MAX (64 * 1024)
#define AUTH_PATH_MAX 256

struct conn;

/* Loads the authfile and turns authentication on. -1 with err filled: the
 * file cannot be read, is larger than AUTH_FILE_MAX or malformed. */
int auth_start(const char *file, char *err, size_t errlen);
bool auth_enabled(void);
/* Reads the authfile again (SIGHUP); a bad file keeps the entries loaded. */
void auth_reload(void);

enum auth_step {
    AUTH_WAIT,      /* the request is not whole yet: read more */
    AUTH_ANSWERED,  /* one request consumed and answered */
    AUTH_CLOSE,     /* junk: the connection is closing (c->state) */
};
/* One request of a connection not yet authenticated, from its rbuf. */
enum auth_step auth_step(struct conn *c);

#endif
