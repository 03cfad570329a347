/*
 * proc.h - process-level start-up flags (-r -k -d -u -P); see proc.c for
 * why each acts where main calls it.
 */
#ifndef CACHET_PROC_H
#define CACHET_PROC_H

#include "settings.h"

/* -r, -d, -k: before any thread or socket exists. 0, or the exit code
 * (message already on stderr). */
int  proc_early(const struct settings *s);
/* -u: after the fd limit is raised, before binding. 0 or the exit code. */
int  proc_drop_user(const struct settings *s);
/* -P */
void proc_write_pidfile(const struct settings *s);
void proc_remove_pidfile(const struct settings *s);

#endif
