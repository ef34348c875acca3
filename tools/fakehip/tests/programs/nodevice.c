/*
 * nodevice.c: run with KFDQ_ROOT pointing at a directory without dev/kfd, or
 * at a tree whose dev/kfd works but whose topology has no GPU node.
 * Prints "<call> <code>" for calls that must fail with hipErrorNoDevice, and
 * checks the calls that work without a device (error strings, versions,
 * hipGetProcAddress). Exits 0 when everything behaved, 1 otherwise.
 * Checkpoint (checkpoint.h): "done" after every call.
 */
#include <hip/hip_runtime_api.h>
#include <stdio.h>
#include <string.h>

#include "checkpoint.h"

static struct fakehip_kernel kern = FAKEHIP_KERNEL(1000);
static int failures;

static void expect(const char *what, hipError_t got, hipError_t want)
{
	printf("%s %d\n", what, (int)got);
	if (got != want) {
		fprintf(stderr, "nodevice: %s returned %d, expected %d\n", what, (int)got, (int)want);
		failures++;
	}
}

int main(void)
{
	hipStream_t s = NULL;
	hipEvent_t ev = NULL;
	void *p = NULL;
	int n = -1, v = 0;
	dim3 g = {1, 1, 1}, b = {1, 1, 1};
	void *fn = NULL;
	hipDriverProcAddressQueryResult status = HIP_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;

	expect("hipGetDeviceCount", hipGetDeviceCount(&n), hipErrorNoDevice);
	if (n != 0) {
		fprintf(stderr, "nodevice: count %d, expected 0\n", n);
		failures++;
	}
	expect("hipStreamCreate", hipStreamCreate(&s), hipErrorNoDevice);
	expect("hipStreamCreateWithPriority", hipStreamCreateWithPriority(&s, 0, -1), hipErrorNoDevice);
	expect("hipLaunchKernel", hipLaunchKernel(&kern, g, b, NULL, 0, NULL), hipErrorNoDevice);
	expect("hipLaunchKernel_spt", hipLaunchKernel_spt(&kern, g, b, NULL, 0, NULL), hipErrorNoDevice);
	expect("hipModuleLaunchKernel",
	       hipModuleLaunchKernel((hipFunction_t)&kern, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL), hipErrorNoDevice);
	expect("hipExtModuleLaunchKernel",
	       hipExtModuleLaunchKernel((hipFunction_t)&kern, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL, NULL, NULL, 0),
	       hipErrorNoDevice);
	expect("hipDeviceSynchronize", hipDeviceSynchronize(), hipErrorNoDevice);
	expect("hipStreamSynchronize", hipStreamSynchronize(NULL), hipErrorNoDevice);
	expect("hipEventCreate", hipEventCreate(&ev), hipErrorNoDevice);
	expect("hipMalloc", hipMalloc(&p, 16), hipErrorNoDevice);
	expect("hipSetDevice", hipSetDevice(0), hipErrorNoDevice);
	expect("hipGetLastError", hipGetLastError(), hipErrorNoDevice);
	expect("hipGetLastError(again)", hipGetLastError(), hipSuccess);
	expect("hipRuntimeGetVersion", hipRuntimeGetVersion(&v), hipSuccess);
	if (strcmp(hipGetErrorName(hipErrorNoDevice), "hipErrorNoDevice") != 0) {
		fprintf(stderr, "nodevice: bad error name\n");
		failures++;
	}

	/* hipGetProcAddress hands out the library's own functions */
	expect("hipGetProcAddress(hipStreamCreate)",
	       hipGetProcAddress("hipStreamCreate", &fn, 60300000, 0, &status), hipSuccess);
	if (fn != (void *)&hipStreamCreate || status != HIP_GET_PROC_ADDRESS_SUCCESS) {
		fprintf(stderr, "nodevice: hipGetProcAddress(hipStreamCreate) = %p, want %p\n", fn,
			(void *)&hipStreamCreate);
		failures++;
	}
	expect("hipGetProcAddress(hipLaunchKernel,spt)",
	       hipGetProcAddress("hipLaunchKernel", &fn, 60300000, HIP_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
				 &status),
	       hipSuccess);
	if (fn != (void *)&hipLaunchKernel_spt) {
		fprintf(stderr, "nodevice: per-thread lookup did not return hipLaunchKernel_spt\n");
		failures++;
	}
	expect("hipGetProcAddress(hipExtModuleLaunchKernel)",
	       hipGetProcAddress("hipExtModuleLaunchKernel", &fn, 60300000, 0, &status), hipSuccess);
	if (fn != (void *)&hipExtModuleLaunchKernel) {
		fprintf(stderr, "nodevice: hipExtModuleLaunchKernel lookup mismatch\n");
		failures++;
	}
	expect("hipGetProcAddress(malloc)", hipGetProcAddress("malloc", &fn, 60300000, 0, &status), hipErrorNotFound);
	if (fn != NULL || status != HIP_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND) {
		fprintf(stderr, "nodevice: malloc must not be found\n");
		failures++;
	}
	fflush(stdout);
	checkpoint("done");
	return failures ? 1 : 0;
}
