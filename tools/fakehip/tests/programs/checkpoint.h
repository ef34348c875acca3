/*
 * checkpoint.h: fixed points at which a test harness inspects the emulator.
 *
 * With FAKEHIP_TEST_CHECKPOINTS=1 in the environment, checkpoint(name)
 * prints "checkpoint <name>" on stdout (flushed) and blocks until the
 * harness answers with one line on stdin; the harness reads kfd-emu's
 * stats while the program is parked there. Without the variable it does
 * nothing, so the programs also run on their own.
 */
#ifndef FAKEHIP_TEST_CHECKPOINT_H
#define FAKEHIP_TEST_CHECKPOINT_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static inline void checkpoint(const char *name)
{
	const char *on = getenv("FAKEHIP_TEST_CHECKPOINTS");
	char c;

	if (!on || strcmp(on, "1") != 0)
		return;
	printf("checkpoint %s\n", name);
	fflush(stdout);
	/* byte by byte from the fd: no stdio read-ahead a forked child could inherit */
	while (read(STDIN_FILENO, &c, 1) == 1 && c != '\n') {
	}
}

#endif
