/*
 * deps.c ITERATIONS WG_US: two streams that depend on each other, as a pipelined training step
 * does (compute on one stream, communication on another). Every iteration launches on A,
 * records eA, makes B wait for eA, launches on B, records eB and makes A wait for eB — so
 * holding one stream while the other waits on it would deadlock the process. Prints its
 * queues, `deps started`, and `deps done <iterations>` at the end.
 */
#include "common.h"

struct kernel {
	uint32_t magic;
	uint32_t reserved;
	uint64_t duration_ns;
};

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: %s ITERATIONS WG_US\n", argv[0]);
		return 2;
	}
	int n = atoi(argv[1]);
	struct kernel k = {0x4B484B46u, 0, (uint64_t)(atof(argv[2]) * 1000)};
	hipStream_t a, b;
	hipEvent_t ea, eb;

	CHECK(hipStreamCreate(&a));
	CHECK(hipStreamCreate(&b));
	CHECK(hipEventCreate(&ea));
	CHECK(hipEventCreate(&eb));
	print_queue("a", a);
	print_queue("b", b);
	printf("deps started\n");
	fflush(stdout);
	for (int i = 0; i < n; i++) {
		CHECK(hipLaunchKernel((const void *)&k, (dim3){64, 1, 1}, (dim3){256, 1, 1}, NULL, 0, a));
		CHECK(hipEventRecord(ea, a));
		CHECK(hipStreamWaitEvent(b, ea, 0));
		CHECK(hipLaunchKernel((const void *)&k, (dim3){64, 1, 1}, (dim3){256, 1, 1}, NULL, 0, b));
		CHECK(hipEventRecord(eb, b));
		CHECK(hipStreamWaitEvent(a, eb, 0));
	}
	CHECK(hipStreamSynchronize(a));
	CHECK(hipStreamSynchronize(b));
	printf("deps done %d\n", n);
	fflush(stdout);
	return 0;
}
