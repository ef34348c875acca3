/*
 * uselib.c LIB: dlopens LIB with RTLD_GLOBAL (as PyTorch does with its ROCm libraries), lets it
 * create and use its own streams, and launches on one stream of its own.
 */
#include "common.h"

static struct fakehip_kernel kern = FAKEHIP_KERNEL(200000);

int main(int argc, char **argv)
{
	hipStream_t app;
	dim3 grid = {2, 1, 1}, block = {64, 1, 1};

	if (argc < 2) {
		fprintf(stderr, "usage: %s LIB\n", argv[0]);
		return 2;
	}
	if (open_lib_and_setup(argv[1], RTLD_NOW | RTLD_GLOBAL))
		return 1;
	CHECK(hipStreamCreateWithPriority(&app, hipStreamDefault, 0));
	CHECK(hipLaunchKernel(&kern, grid, block, NULL, 0, app));
	CHECK(hipDeviceSynchronize());
	print_queue("app", app);
	print_queue("null", NULL);
	checkpoint("uselib");
	return 0;
}
