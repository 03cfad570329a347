/*
 * pause: the process that holds a pod's namespaces open.
 *
 * Why our own: the local cluster has no registry to pull registry.k8s.io/pause
 * from, and containerd needs a sandbox image before it can start any pod. This
 * is the same job in a few lines, linked statically so the image is one file
 * FROM scratch. It sleeps until signalled and reaps zombies, because as PID 1 of
 * a pod that shares its PID namespace it inherits every orphan.
 */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_terminate(int signo)
{
	(void)signo;
	_exit(0);
}

static void on_child(int signo)
{
	(void)signo;
	while (waitpid(-1, NULL, WNOHANG) > 0)
		;
}

int main(int argc, char **argv)
{
	if (argc > 1 && strcmp(argv[1], "-v") == 0) {
		puts("cachet-pause 3.10");
		return 0;
	}
	if (getpid() != 1)
		fprintf(stderr, "pause: warning: not running as PID 1\n");

	struct sigaction terminate = { .sa_handler = on_terminate };
	struct sigaction child = { .sa_handler = on_child, .sa_flags = SA_NOCLDSTOP };
	if (sigaction(SIGINT, &terminate, NULL) < 0 ||
	    sigaction(SIGTERM, &terminate, NULL) < 0 ||
	    sigaction(SIGCHLD, &child, NULL) < 0) {
		perror("pause: sigaction");
		return 1;
	}
	for (;;)
		pause();
}
