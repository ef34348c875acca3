/*
 * real_hip.c: built against Debian's real libamdhip64.so.5 (-l:libamdhip64.so.5), with
 * declarations from fakehip's header. Prints the return code of each call, one per line
 * ("<call> <code>"), so that runs with and without the shim can be compared. Without a GPU
 * the runtime answers hipErrorNoDevice (100).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <hip/hip_runtime_api.h>
#include <stdio.h>
#include <string.h>

static struct fakehip_kernel kern = FAKEHIP_KERNEL(1000);

int main(void)
{
	hipStream_t s = NULL;
	int n = -1, lo = 0, hi = 0;
	dim3 grid = {1, 1, 1}, block = {64, 1, 1};

	Dl_info info;

	/* Which object the program's hipLaunchKernel reference is bound to. */
	memset(&info, 0, sizeof(info));
	dladdr((void *)&hipLaunchKernel, &info);
	printf("bound hipLaunchKernel %s\n", info.dli_fname ? strrchr(info.dli_fname, '/') + 1 : "?");
	printf("hipGetDeviceCount %d\n", (int)hipGetDeviceCount(&n));
	printf("hipDeviceGetStreamPriorityRange %d\n", (int)hipDeviceGetStreamPriorityRange(&lo, &hi));
	printf("hipStreamCreate %d\n", (int)hipStreamCreate(&s));
	printf("hipStreamCreateWithPriority %d\n", (int)hipStreamCreateWithPriority(&s, hipStreamDefault, -1));
	printf("hipLaunchKernel %d\n", (int)hipLaunchKernel(&kern, grid, block, NULL, 0, NULL));
	printf("hipLaunchKernel_stream %d\n", (int)hipLaunchKernel(&kern, grid, block, NULL, 0, s));
	printf("hipModuleLaunchKernel %d\n",
	       (int)hipModuleLaunchKernel((hipFunction_t)&kern, 1, 1, 1, 64, 1, 1, 0, NULL, NULL, NULL));
	printf("hipLaunchKernel_spt %d\n", (int)hipLaunchKernel_spt(&kern, grid, block, NULL, 0, NULL));
	printf("hipDeviceSynchronize %d\n", (int)hipDeviceSynchronize());
	/* HIP 5.2 has no hipGetProcAddress (hip_6.1): without the shim there is no such symbol;
	 * with it, the shim's wrapper answers hipErrorNotSupported (801) and warns once. */
	{
		hipError_t (*gpa)(const char *, void **, int, uint64_t, hipDriverProcAddressQueryResult *) =
			(hipError_t(*)(const char *, void **, int, uint64_t, hipDriverProcAddressQueryResult *))dlsym(
				RTLD_DEFAULT, "hipGetProcAddress");
		void *p = NULL;

		if (gpa)
			printf("hipGetProcAddress %d\n", (int)gpa("hipLaunchKernel", &p, 601, 0, NULL));
		else
			printf("hipGetProcAddress absent\n");
	}
	printf("done\n");
	return 0;
}
