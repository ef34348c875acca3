/*
 * basic.c: three streams with HIP priorities -1 / 0 / 1, plus the null stream
 * and hipStreamPerThread; one launch on each, synchronise, then print which
 * KFD queue backs each stream:
 *
 *   stream <name> queue <id> prio <kfd priority>
 *
 * Expected KFD priorities (ROCr mapping): high 11, normal 7, low 0, null 7,
 * per-thread 7. Exits 0 on success, 1 on any HIP error (printed to stderr).
 *
 * Checkpoints (checkpoint.h): "queues" after the table (five queues, every
 * launch complete), "destroyed" after the three user streams are destroyed
 * (the null and per-thread queues remain).
 */
#include <hip/hip_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>

#include "checkpoint.h"

static struct fakehip_kernel kern = FAKEHIP_KERNEL(1000000); /* 1 ms */

#define CHECK(call)                                                                       \
	do {                                                                              \
		hipError_t e_ = (call);                                                   \
		if (e_ != hipSuccess) {                                                   \
			fprintf(stderr, "basic: %s failed: %s (%d)\n", #call, hipGetErrorName(e_), \
				(int)e_);                                                 \
			exit(1);                                                          \
		}                                                                         \
	} while (0)

int main(void)
{
	struct {
		const char *name;
		hipStream_t s;
	} st[5] = {{"high", NULL}, {"normal", NULL}, {"low", NULL}, {"null", NULL}, {"per-thread", hipStreamPerThread}};
	dim3 grid = {4, 1, 1}, block = {64, 1, 1};
	int n = 0;

	CHECK(hipGetDeviceCount(&n));
	CHECK(hipStreamCreateWithPriority(&st[0].s, hipStreamDefault, -1));
	CHECK(hipStreamCreateWithPriority(&st[1].s, hipStreamDefault, 0));
	CHECK(hipStreamCreateWithPriority(&st[2].s, hipStreamDefault, 1));

	for (int i = 0; i < 5; i++)
		CHECK(hipLaunchKernel(&kern, grid, block, NULL, 0, st[i].s));
	for (int i = 0; i < 5; i++)
		CHECK(hipStreamSynchronize(st[i].s));
	CHECK(hipDeviceSynchronize());

	for (int i = 0; i < 5; i++) {
		fakehipQueueInfo info;
		uint32_t qid = 0, gpu = 0;

		CHECK((hipError_t)fakehipStreamQueueId(st[i].s, &qid, &gpu));
		CHECK((hipError_t)fakehipStreamQueueInfo(st[i].s, &info));
		printf("stream %s queue %u prio %u\n", st[i].name, qid, info.kfd_priority);
	}
	fflush(stdout);
	checkpoint("queues");

	for (int i = 0; i < 3; i++)
		CHECK(hipStreamDestroy(st[i].s));
	checkpoint("destroyed");
	return 0;
}
