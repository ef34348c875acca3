/*
 * parked.c SOCKET VERSION PROGRAM [ARGS...]: a hello parked across pid reuse (issue 50 item 10).
 *
 * The parent forks A; A connects to SOCKET, forks B (which inherits the connection), prints
 * "connected <pid>" and exits at the checkpoint "exit" (once the agent accepted).
 * The parent reaps A, so A's pid is free, and starts PROGRAM ARGS under that very pid
 * (clone3 with set_tid: root in the initial pid namespace), the victim; it prints
 * "victim <pid>". B waits for the checkpoint "hello", then says hello on A's connection as
 * pid A, class latency, and prints the agent's reply as "reply <line>". The parent waits for B.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "set_tid.h"

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

static int connect_to(const char *path)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	strncpy(a.sun_path, path, sizeof(a.sun_path) - 1);
	if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof(a)) < 0) {
		perror("connect");
		exit(2);
	}
	return s;
}

/* B: the hello on the parked connection, as pid `a`. */
static void speak(int s, pid_t a, const char *version)
{
	char line[512];
	char reply[4096];
	size_t got = 0;

	signal(SIGPIPE, SIG_IGN);
	wait_go("hello");
	snprintf(line, sizeof(line),
		 "{\"type\":\"hello\",\"version\":%s,\"pid\":%d,\"exe\":\"parked\",\"class\":\"latency\",\"priority\":null}\n",
		 version, (int)a);
	if (write(s, line, strlen(line)) != (ssize_t)strlen(line)) {
		printf("reply (write: %s)\n", strerror(errno));
		fflush(stdout);
		exit(2);
	}
	while (got < sizeof(reply) - 1) {
		ssize_t n = read(s, reply + got, 1);

		if (n <= 0 || reply[got] == '\n')
			break;
		got += (size_t)n;
	}
	reply[got] = 0;
	printf("reply %s\n", reply);
	fflush(stdout);
}

int main(int argc, char **argv)
{
	int st = 0;
	pid_t a, b_pid;
	int report[2];

	if (argc < 4) {
		fprintf(stderr, "usage: parked SOCKET VERSION PROGRAM [ARGS...]\n");
		return 2;
	}
	if (pipe(report) < 0)
		return 2;
	a = fork();
	if (a < 0)
		return 2;
	if (a == 0) {
		int s = connect_to(argv[1]);
		pid_t me = getpid();
		pid_t b = fork();

		if (b < 0)
			_exit(2);
		if (b == 0) {
			speak(s, me, argv[2]);
			_exit(0);
		}
		if (write(report[1], &b, sizeof(b)) != sizeof(b))
			_exit(2);
		/* Alive until the agent has accepted the connection (it reads our /proc then). */
		printf("connected %d\n", (int)me);
		fflush(stdout);
		wait_go("exit");
		_exit(0);
	}
	if (read(report[0], &b_pid, sizeof(b_pid)) != sizeof(b_pid))
		return 2;
	waitpid(a, &st, 0);
	printf("parked %d\n", (int)a);
	fflush(stdout);
	/* The victim, under A's pid. */
	{
		pid_t v = fork_as(a);

		if (v == 0) {
			execvp(argv[3], argv + 3);
			_exit(127);
		}
		printf("victim %d\n", (int)v);
		fflush(stdout);
	}
	/* B is A's child, reparented: not ours to wait for; the test reads its reply line. */
	(void)b_pid;
	wait_go("end");
	return 0;
}
