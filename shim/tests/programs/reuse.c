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
#define _GNU_SOURCE
#include <errno.h>
#include <linux/sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static void wait_go(const char *tag)
{
	const char *go = getenv("KFDQ_TEST_GO");
	char tagged[4096];

	if (!go)
		return;
	snprintf(tagged, sizeof(tagged), "%s-%s", go, tag);
	for (int i = 0; i < 60000 / 5 && access(tagged, F_OK) != 0; i++)
		usleep(5000);
}

int main(int argc, char **argv)
{
	int st = 0;
	pid_t first, second;
	pid_t tid[1];
	struct clone_args ca;
	long v;

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
	wait_go("reuse");
	kill(first, SIGKILL);
	waitpid(first, &st, 0);
	tid[0] = first;
	memset(&ca, 0, sizeof(ca));
	ca.exit_signal = SIGCHLD;
	ca.set_tid = (uint64_t)(uintptr_t)tid;
	ca.set_tid_size = 1;
	v = syscall(SYS_clone3, &ca, sizeof(ca));
	if (v < 0) {
		printf("clone3 %s\n", strerror(errno));
		fflush(stdout);
		return 3;
	}
	if (v == 0) {
		printf("second %d\n", (int)getpid());
		fflush(stdout);
		wait_go("end");
		_exit(0);
	}
	second = (pid_t)v;
	if (waitpid(second, &st, 0) != second)
		return 4;
	printf("second exited %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
	fflush(stdout);
	return 0;
}
