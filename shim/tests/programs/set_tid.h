/*
 * fork_as(pid): a child under a chosen, free pid (clone3 with set_tid, Linux 5.5: root in the
 * initial pid namespace), as a tenant that takes over another process's pid does.
 */
#ifndef KFDQ_SHIM_TEST_SET_TID_H
#define KFDQ_SHIM_TEST_SET_TID_H
#define _GNU_SOURCE
#include <errno.h>
#include <linux/sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Returns as fork(2) does; on failure prints "clone3 <error>" and exits 3. */
static inline pid_t fork_as(pid_t want)
{
	pid_t tid[1] = {want};
	struct clone_args ca;
	long v;

	memset(&ca, 0, sizeof(ca));
	ca.exit_signal = SIGCHLD;
	ca.set_tid = (uint64_t)(uintptr_t)tid;
	ca.set_tid_size = 1;
	v = syscall(SYS_clone3, &ca, sizeof(ca));
	if (v < 0) {
		printf("clone3 %s\n", strerror(errno));
		fflush(stdout);
		exit(3);
	}
	return (pid_t)v;
}
#endif
