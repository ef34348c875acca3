/*
 * workload.c SECONDS: a small HIP program for the README demo. It launches short kernels on
 * three streams — one created with the greatest HIP priority (-1), one with the least (1), and
 * the null stream, as PyTorch uses it — until SECONDS have passed, synchronising every few
 * launches. Run it under `kfdq run --class ...` to see the shim map each stream to a KFD queue
 * with the class's priority (`kfdq ps`).
 */
#include <hip/hip_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

struct kernel {
	uint32_t magic;     /* 'FKHK': fakehip reads the modelled duration below */
	uint32_t reserved;
	uint64_t duration_ns;
};

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

#define CHECK(call)                                                               \
	do {                                                                      \
		hipError_t e_ = (call);                                           \
		if (e_ != hipSuccess) {                                           \
			fprintf(stderr, "%s: %s\n", #call, hipGetErrorString(e_)); \
			return 1;                                                 \
		}                                                                 \
	} while (0)

int main(int argc, char **argv)
{
	static struct kernel k = {0x4B484B46u, 0, 200000};
	double secs = argc > 1 ? atof(argv[1]) : 2.0;
	dim3 grid = {4, 1, 1}, block = {64, 1, 1};
	hipStream_t s[3] = {NULL, NULL, NULL}; /* high, low, null */
	long n = 0;

	CHECK(hipStreamCreateWithPriority(&s[0], hipStreamDefault, -1));
	CHECK(hipStreamCreateWithPriority(&s[1], hipStreamDefault, 1));
	for (double end = now() + secs; now() < end; n++) {
		for (int i = 0; i < 3; i++)
			CHECK(hipLaunchKernel(&k, grid, block, NULL, 0, s[i]));
		if (n % 8 == 7)
			CHECK(hipDeviceSynchronize());
	}
	CHECK(hipDeviceSynchronize());
	CHECK(hipStreamDestroy(s[0]));
	CHECK(hipStreamDestroy(s[1]));
	printf("workload: %ld launches per stream\n", n);
	return 0;
}
