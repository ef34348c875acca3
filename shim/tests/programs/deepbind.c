/*
 * deepbind.c LIB: launches on a stream of its own through the shim's wrappers, then dlopens LIB
 * (libkfdqtest_streams.so) with RTLD_DEEPBIND, as some plugin loaders do: the library binds to
 * its own dependency, the HIP runtime, before the preloaded shim, so its stream creation and
 * launches (lib_setup) escape the wrappers. Prints its queues, `deepbind done`, then passes
 * checkpoint "end" (the test reads the registry there) and exits 0.
 */
#include "common.h"

static struct fakehip_kernel kern = FAKEHIP_KERNEL(100000);

int main(int argc, char **argv)
{
	hipStream_t s;
	dim3 grid = {1, 1, 1}, block = {64, 1, 1};

	if (argc != 2) {
		fprintf(stderr, "usage: %s LIB\n", argv[0]);
		return 2;
	}
	CHECK(hipStreamCreate(&s));
	CHECK(hipLaunchKernel(&kern, grid, block, NULL, 0, s));
	CHECK(hipStreamSynchronize(s));
	print_queue("linked", s);
	if (open_lib_and_setup(argv[1], RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND))
		return 1;
	printf("deepbind done\n");
	fflush(stdout);
	checkpoint("end");
	return 0;
}
