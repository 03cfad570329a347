/*
 * proc.c - the process-level flags a memcached operator brings along: -r
 * (core file limit), -k (mlockall), -d (run in the background), -u (drop
 * root), -P (pid file).
 *
 * Why they act in main's order and not when parsed: -d forks, and only the
 * calling thread survives a fork, so it must run before any thread exists;
 * -u must come after the file descriptor limit is raised (which needs root)
 * and before the sockets are bound, so that a unix socket belongs to the
 * user, as with memcached; the pid file is written once the server listens.
 *
 * Where cachetd differs from memcached on purpose: memcached refuses to run
 * as root without -u ("must add '-u root'"). cachetd runs as root in many
 * containers whose images have no other user, and refusing would stop pods
 * that run today; so -u switches users when given and root is kept otherwise.
 *
 * Concurrency: main thread only, before the workers start (proc_remove_pidfile
 * after they stopped).
 */
#include "proc.h"

#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

int proc_early(const struct settings *s)
{
    if (s->maxcore) {
        /* memcached: as large as allowed, and a failure only if no core
         * file could be written at all */
        struct rlimit rl = { RLIM_INFINITY, RLIM_INFINITY };
        if (setrlimit(RLIMIT_CORE, &rl) != 0 && getrlimit(RLIMIT_CORE, &rl) == 0) {
            rl.rlim_cur = rl.rlim_max;
            setrlimit(RLIMIT_CORE, &rl);
        }
        if (getrlimit(RLIMIT_CORE, &rl) != 0 || rl.rlim_cur == 0) {
            fprintf(stderr, "cachetd: -r: failed to ensure corefile creation\n");
            return 71;
        }
    }
    if (s->daemonize) {
        /* as memcached: keep the working directory with -r (cores land
         * there), keep stderr with -v */
        if (daemon(s->maxcore, s->verbose) != 0) {
            fprintf(stderr, "cachetd: -d: failed to daemon() in order to daemonize: %s\n", strerror(errno));
            return 71;
        }
    }
    if (s->lock_memory && mlockall(MCL_CURRENT | MCL_FUTURE) != 0) {
        /* memcached's words; it starts anyway */
        fprintf(stderr, "warning: -k invalid, mlockall() failed: %s\n", strerror(errno));
    }
    return 0;
}

int proc_drop_user(const struct settings *s)
{
    if (!s->username[0] || (getuid() != 0 && geteuid() != 0)) return 0;   /* memcached ignores -u then */
    struct passwd *pw = getpwnam(s->username);
    if (!pw) {
        fprintf(stderr, "cachetd: -u: can't find the user %s to switch to\n", s->username);
        return EX_USAGE_CODE;
    }
    if (setgroups(0, NULL) < 0 && errno != EPERM) {
        fprintf(stderr, "cachetd: -u: failed to drop supplementary groups: %s\n", strerror(errno));
        return 71;
    }
    if (setgid(pw->pw_gid) < 0 || setuid(pw->pw_uid) < 0) {
        fprintf(stderr, "cachetd: -u: failed to assume identity of user %s: %s\n", s->username, strerror(errno));
        return 71;
    }
    return 0;
}

void proc_write_pidfile(const struct settings *s)
{
    if (!s->pidfile[0]) return;
    /* written under a temporary name and renamed, so a reader never finds
     * it empty (memcached does the same); a failure is reported, not fatal */
    char tmp[sizeof(s->pidfile) + 8];
    snprintf(tmp, sizeof tmp, "%s.tmp", s->pidfile);
    FILE *f = fopen(tmp, "w");
    if (!f) {
        fprintf(stderr, "cachetd: -P: could not open the pid file %s for writing: %s\n", tmp, strerror(errno));
        return;
    }
    fprintf(f, "%ld\n", (long)getpid());
    if (fclose(f) != 0 || rename(tmp, s->pidfile) != 0)
        fprintf(stderr, "cachetd: -P: could not write the pid file %s: %s\n", s->pidfile, strerror(errno));
}

void proc_remove_pidfile(const struct settings *s)
{
    /* memcached removes it only when it daemonized */
    if (s->pidfile[0] && s->daemonize && unlink(s->pidfile) != 0)
        fprintf(stderr, "cachetd: -P: could not remove the pid file %s: %s\n", s->pidfile, strerror(errno));
}
