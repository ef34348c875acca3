/*
 * Shared helpers of the shim's C test programs.
 *
 * Output protocol (parsed by the Rust tests in shim/tests), one fact per line on stdout:
 *   queue <name> <queue_id> <gpu_id> <handle>   which KFD queue fakehip put a stream on
 *   CHECKPOINT <tag> <pid>                         the program now waits for the test
 * A checkpoint waits until the file named by $KFDQ_TEST_GO, or that name followed by
 * "-<tag>", exists (the test creates it after inspecting the registry and the emulator),
 * at most 60 s.
 */
#ifndef KFDQ_SHIM_TEST_COMMON_H
#define KFDQ_SHIM_TEST_COMMON_H
#define _GNU_SOURCE
#include <dlfcn.h>
#include <hip/hip_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define CHECK(call)                                                                              \
	do {                                                                                     \
		hipError_t e_ = (call);                                                          \
		if (e_ != hipSuccess) {                                                          \
			fprintf(stderr, "%s:%d: %s failed: %s (%d)\n", __FILE__, __LINE__, #call, \
				hipGetErrorName(e_), (int)e_);                                   \
			exit(1);                                                                 \
		}                                                                                \
	} while (0)

static inline void sleep_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
	nanosleep(&ts, NULL);
}

static inline void checkpoint(const char *tag)
{
	const char *go = getenv("KFDQ_TEST_GO");
	char tagged[4096];

	printf("CHECKPOINT %s %d\n", tag, (int)getpid());
	fflush(stdout);
	if (!go)
		return;
	snprintf(tagged, sizeof(tagged), "%s-%s", go, tag);
	for (int i = 0; i < 60000 / 5 && access(go, F_OK) != 0 && access(tagged, F_OK) != 0; i++)
		sleep_ms(5);
}

/* Prints which queue backs `s` (fakehip's own view, for cross-checking the shim). */
static inline void print_queue(const char *name, hipStream_t s)
{
	uint32_t qid = 0, gpu = 0;

	CHECK((hipError_t)fakehipStreamQueueId(s, &qid, &gpu));
	printf("queue %s %u %u %llu\n", name, qid, gpu, (unsigned long long)(uintptr_t)s);
	fflush(stdout);
}

/* dlopens the stand-in math library LIB (libstreams.c) with `mode` and runs its lib_setup;
 * returns 0 when both worked (and says on stderr what did not). */
static inline int open_lib_and_setup(const char *lib, int mode)
{
	void *h = dlopen(lib, mode);
	int (*setup)(void);

	if (!h) {
		fprintf(stderr, "dlopen %s: %s\n", lib, dlerror());
		return 1;
	}
	setup = (int (*)(void))dlsym(h, "lib_setup");
	if (!setup) {
		fprintf(stderr, "dlsym lib_setup: %s\n", dlerror());
		return 1;
	}
	return setup() != 0;
}

#endif
