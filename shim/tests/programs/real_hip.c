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

/* Real HIP entry points fakehip does not implement (prototypes as in ROCm's header; the
 * struct-pointer arguments are declared as void pointers). */
typedef struct {
	void *ptr;
	size_t pitch, xsize, ysize;
} pitched_ptr;
typedef struct {
	size_t width, height, depth;
} extent;
hipError_t hipMemcpyWithStream(void *dst, const void *src, size_t n, hipMemcpyKind kind, hipStream_t s);
hipError_t hipMemcpyHtoDAsync(void *dst, void *src, size_t n, hipStream_t s);
hipError_t hipMemcpyDtoHAsync(void *dst, void *src, size_t n, hipStream_t s);
hipError_t hipMemcpyDtoDAsync(void *dst, void *src, size_t n, hipStream_t s);
hipError_t hipMemcpyPeerAsync(void *dst, int dst_dev, const void *src, int src_dev, size_t n, hipStream_t s);
hipError_t hipMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch, size_t w, size_t h,
			    hipMemcpyKind kind, hipStream_t s);
hipError_t hipMemcpy2DToArrayAsync(void *dst, size_t w_off, size_t h_off, const void *src, size_t spitch, size_t w,
				   size_t h, hipMemcpyKind kind, hipStream_t s);
hipError_t hipMemcpy2DFromArrayAsync(void *dst, size_t dpitch, const void *src, size_t w_off, size_t h_off, size_t w,
				     size_t h, hipMemcpyKind kind, hipStream_t s);
hipError_t hipMemcpyParam2DAsync(const void *copy, hipStream_t s);
hipError_t hipMemcpy3DAsync(const void *params, hipStream_t s);
hipError_t hipDrvMemcpy3DAsync(const void *copy, hipStream_t s);
hipError_t hipMemcpyToSymbolAsync(const void *sym, const void *src, size_t n, size_t off, hipMemcpyKind kind,
				  hipStream_t s);
hipError_t hipMemcpyFromSymbolAsync(void *dst, const void *sym, size_t n, size_t off, hipMemcpyKind kind,
				    hipStream_t s);
hipError_t hipMemsetD8Async(void *dst, unsigned char v, size_t n, hipStream_t s);
hipError_t hipMemsetD16Async(void *dst, unsigned short v, size_t n, hipStream_t s);
hipError_t hipMemsetD32Async(void *dst, int v, size_t n, hipStream_t s);
hipError_t hipMemset2DAsync(void *dst, size_t pitch, int v, size_t w, size_t h, hipStream_t s);
hipError_t hipMemset3DAsync(pitched_ptr p, int v, extent e, hipStream_t s);

static void callback(hipStream_t s, hipError_t status, void *data)
{
	(void)s;
	(void)status;
	(void)data;
}

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
	/* Stream-ordered work and synchronisation: forwarded, the runtime's own codes. */
	{
		static char a[4096], b[4096], params[512];
		static int symbol;
		hipEvent_t ev = NULL;
		pitched_ptr pp = {a, 64, 64, 64};
		extent ex = {64, 1, 1};

		printf("hipEventCreate %d\n", (int)hipEventCreate(&ev));
		printf("hipMemcpyAsync %d\n", (int)hipMemcpyAsync(a, b, 64, hipMemcpyHostToHost, NULL));
		printf("hipMemcpyAsync_spt %d\n", (int)hipMemcpyAsync_spt(a, b, 64, hipMemcpyHostToHost, NULL));
		printf("hipMemsetAsync %d\n", (int)hipMemsetAsync(a, 1, 64, NULL));
		printf("hipMemcpy %d\n", (int)hipMemcpy(a, b, 64, hipMemcpyHostToHost));
		printf("hipMemcpy_spt %d\n", (int)hipMemcpy_spt(a, b, 64, hipMemcpyHostToHost));
		printf("hipMemset %d\n", (int)hipMemset(a, 1, 64));
		printf("hipMemset_spt %d\n", (int)hipMemset_spt(a, 1, 64));
		printf("hipMemcpyWithStream %d\n", (int)hipMemcpyWithStream(a, b, 64, hipMemcpyHostToHost, NULL));
		printf("hipMemcpyHtoDAsync %d\n", (int)hipMemcpyHtoDAsync(a, b, 64, NULL));
		printf("hipMemcpyDtoHAsync %d\n", (int)hipMemcpyDtoHAsync(a, b, 64, NULL));
		printf("hipMemcpyDtoDAsync %d\n", (int)hipMemcpyDtoDAsync(a, b, 64, NULL));
		printf("hipMemcpyPeerAsync %d\n", (int)hipMemcpyPeerAsync(a, 0, b, 0, 64, NULL));
		printf("hipMemcpy2DAsync %d\n", (int)hipMemcpy2DAsync(a, 64, b, 64, 64, 1, hipMemcpyHostToHost, NULL));
		printf("hipMemcpy2DToArrayAsync %d\n",
		       (int)hipMemcpy2DToArrayAsync(NULL, 0, 0, b, 64, 64, 1, hipMemcpyHostToDevice, NULL));
		printf("hipMemcpy2DFromArrayAsync %d\n",
		       (int)hipMemcpy2DFromArrayAsync(a, 64, NULL, 0, 0, 64, 1, hipMemcpyDeviceToHost, NULL));
		printf("hipMemcpyParam2DAsync %d\n", (int)hipMemcpyParam2DAsync(params, NULL));
		printf("hipMemcpy3DAsync %d\n", (int)hipMemcpy3DAsync(params, NULL));
		printf("hipDrvMemcpy3DAsync %d\n", (int)hipDrvMemcpy3DAsync(params, NULL));
		printf("hipMemcpyToSymbolAsync %d\n",
		       (int)hipMemcpyToSymbolAsync(&symbol, b, sizeof(symbol), 0, hipMemcpyHostToDevice, NULL));
		printf("hipMemcpyFromSymbolAsync %d\n",
		       (int)hipMemcpyFromSymbolAsync(a, &symbol, sizeof(symbol), 0, hipMemcpyDeviceToHost, NULL));
		printf("hipMemsetD8Async %d\n", (int)hipMemsetD8Async(a, 1, 64, NULL));
		printf("hipMemsetD16Async %d\n", (int)hipMemsetD16Async(a, 1, 32, NULL));
		printf("hipMemsetD32Async %d\n", (int)hipMemsetD32Async(a, 1, 16, NULL));
		printf("hipMemset2DAsync %d\n", (int)hipMemset2DAsync(a, 64, 1, 64, 1, NULL));
		printf("hipMemset3DAsync %d\n", (int)hipMemset3DAsync(pp, 1, ex, NULL));
		printf("hipStreamAddCallback %d\n", (int)hipStreamAddCallback(NULL, callback, NULL, 0));
		printf("hipEventRecord %d\n", (int)hipEventRecord(ev, NULL));
		printf("hipStreamWaitEvent %d\n", (int)hipStreamWaitEvent(NULL, ev, 0));
		printf("hipStreamWaitEvent_spt %d\n", (int)hipStreamWaitEvent_spt(NULL, ev, 0));
		printf("hipStreamSynchronize %d\n", (int)hipStreamSynchronize(NULL));
		printf("hipStreamSynchronize_spt %d\n", (int)hipStreamSynchronize_spt(NULL));
		printf("hipStreamQuery %d\n", (int)hipStreamQuery(NULL));
		printf("hipStreamQuery_spt %d\n", (int)hipStreamQuery_spt(NULL));
		printf("hipEventSynchronize %d\n", (int)hipEventSynchronize(ev));
		printf("hipCtxSynchronize %d\n", (int)hipCtxSynchronize());
	}
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
