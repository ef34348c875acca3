/*
 * hintops.c: the GPU side of shim/tests/programs/hint.py, a library Python loads with ctypes
 * (RTLD_LOCAL) that links fakehip: a warm-up (one launch on the null stream, synchronised: its
 * queue exists) and a request (KERNELS dispatches of WGS work-groups x WG_US µs, synchronised).
 * Each returns the first non-zero HIP code, or 0.
 */
#include "common.h"

static int launch(unsigned wgs, unsigned threads, double wg_us)
{
	struct fakehip_kernel k = FAKEHIP_KERNEL((uint64_t)(wg_us * 1000));

	return (int)hipLaunchKernel(&k, (dim3){wgs, 1, 1}, (dim3){threads, 1, 1}, NULL, 0, 0);
}

int hint_warmup(void)
{
	int e = launch(1, 64, 1000);

	return e ? e : (int)hipStreamSynchronize(0);
}

int hint_request(int kernels, double wg_us, int wgs)
{
	for (int j = 0; j < kernels; j++) {
		int e = launch((unsigned)wgs, 256, wg_us);
		if (e)
			return e;
	}
	return (int)hipStreamSynchronize(0);
}
