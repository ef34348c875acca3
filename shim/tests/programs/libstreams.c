/*
 * libstreams.c -> a shared library (built as libkfdqtest_streams.so) standing in for a
 * math library (hipBLAS, MIOpen...): it creates its own streams and launches on them and on
 * the null stream, from its own code.
 */
#include "common.h"

static struct fakehip_kernel kern = FAKEHIP_KERNEL(200000);
static const dim3 grid = {2, 1, 1}, block = {64, 1, 1};
static hipStream_t lib_hi, lib_lo;

__attribute__((visibility("default"))) int lib_setup(void)
{
	CHECK(hipStreamCreateWithPriority(&lib_hi, hipStreamDefault, -1));
	CHECK(hipStreamCreateWithPriority(&lib_lo, hipStreamDefault, 1));
	CHECK(hipLaunchKernel(&kern, grid, block, NULL, 0, lib_hi));
	CHECK(hipModuleLaunchKernel((hipFunction_t)&kern, 1, 1, 1, 64, 1, 1, 0, lib_lo, NULL, NULL));
	CHECK(hipExtModuleLaunchKernel((hipFunction_t)&kern, 64, 1, 1, 64, 1, 1, 0, lib_lo, NULL, NULL, NULL,
				       NULL, 0));
	CHECK(hipLaunchKernel(&kern, grid, block, NULL, 0, NULL));
	CHECK(hipDeviceSynchronize());
	print_queue("lib-high", lib_hi);
	print_queue("lib-low", lib_lo);
	return 0;
}

/* One launch of `ns` nanoseconds on the library's low-priority stream, then wait. */
__attribute__((visibility("default"))) int lib_launch(uint64_t ns)
{
	struct fakehip_kernel k = FAKEHIP_KERNEL(ns);

	CHECK(hipLaunchKernel(&k, grid, block, NULL, 0, lib_lo));
	return hipStreamSynchronize(lib_lo);
}
