/*
 * reuse.c PROGRAM [ARGS...]: a discovered process whose pid another process takes before the
 * tracer seizes it (issue 50 item 10).
 *
 * Starts PROGRAM ARGS (the first process) and prints "first <pid>". At the checkpoint "reuse"
 * it kills the first process, reaps it, and starts a second process under that very pid
 * (clone3 with set_tid: root in the initial pid namespace), which prints "second <pid>" and
 * waits for the checkpoint "end", then exits 0. The parent reaps it and prints
 * "second exited <status>": 0 when it ran to its end untouched.
 */
#include "common.h"
#include "set_tid.h"

#include <signal.h>
#include <sys/wait.h>

int main(int argc, char **argv)
{
	int st = 0;
	pid_t first, second;
	pid_t v;

	if (argc < 2) {
		fprintf(stderr, "usage: reuse PROGRAM [ARGS...]\n");
		return 2;
	}
	first = fork();
	if (first < 0)
		return 2;
	if (first == 0) {
		execvp(argv[1], argv + 1);
		_exit(127);
	}
	printf("first %d\n", (int)first);
	fflush(stdout);
	checkpoint("reuse");
	kill(first, SIGKILL);
	waitpid(first, &st, 0);
	v = fork_as(first);
	if (v == 0) {
		printf("second %d\n", (int)getpid());
		fflush(stdout);
		checkpoint("end");
		_exit(0);
	}
	second = v;
	if (waitpid(second, &st, 0) != second)
		return 4;
	printf("second exited %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
	fflush(stdout);
	return 0;
}
