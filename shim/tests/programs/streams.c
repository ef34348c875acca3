/*
 * streams.c MODE: stream scenarios run under the shim.
 *
 *   null        PyTorch-style null-stream work: hipLaunchKernel(..., 0), the <<<>>> path
 *               (__hipPushCallConfiguration + hipLaunchKernel) and hipStreamLegacy
 *   priorities  hipStreamCreateWithPriority -1 / 0 / 1 and out-of-range 3 / -12, plus
 *               hipStreamCreate; one launch on each
 *   spt         three threads launch on their per-thread default stream (hipLaunchKernel_spt
 *               with NULL, and hipLaunchKernel with hipStreamPerThread)
 *   procaddr    entry points obtained with hipGetProcAddress (plain and per-thread flag);
 *               prints the object each pointer lives in
 *   shared      three normal-priority streams (run with GPU_MAX_HW_QUEUES=1: they share)
 */
#include "common.h"

#include <dlfcn.h>
#include <pthread.h>
#include <string.h>

static struct fakehip_kernel kern = FAKEHIP_KERNEL(200000); /* 0.2 ms */
static const dim3 grid = {2, 1, 1}, block = {64, 1, 1};

static void mode_null(void)
{
	dim3 g, b;
	size_t shm;
	hipStream_t s;

	for (int i = 0; i < 10; i++)
		CHECK(hipLaunchKernel(&kern, grid, block, NULL, 0, NULL));
	/* what hipcc emits for kernel<<<grid, block>>>(...) */
	CHECK(__hipPushCallConfiguration(grid, block, 0, NULL));
	CHECK(__hipPopCallConfiguration(&g, &b, &shm, &s));
	CHECK(hipLaunchKernel(&kern, g, b, NULL, shm, s));
	CHECK(hipLaunchKernel(&kern, grid, block, NULL, 0, hipStreamLegacy));
	CHECK(hipModuleLaunchKernel((hipFunction_t)&kern, 1, 1, 1, 64, 1, 1, 0, NULL, NULL, NULL));
	CHECK(hipDeviceSynchronize());
	print_queue("null", NULL);
	checkpoint("null");
}

static void mode_priorities(void)
{
	static const struct {
		const char *name;
		int prio;
	} want[] = {{"high", -1}, {"normal", 0}, {"low", 1}, {"three", 3}, {"minus12", -12}};
	hipStream_t s[6];

	for (int i = 0; i < 5; i++)
		CHECK(hipStreamCreateWithPriority(&s[i], hipStreamDefault, want[i].prio));
	CHECK(hipStreamCreate(&s[5]));
	for (int i = 0; i < 6; i++)
		CHECK(hipLaunchKernel(&kern, grid, block, NULL, 0, s[i]));
	CHECK(hipDeviceSynchronize());
	for (int i = 0; i < 5; i++)
		print_queue(want[i].name, s[i]);
	print_queue("plain", s[5]);
	checkpoint("priorities");
	for (int i = 0; i < 6; i++)
		CHECK(hipStreamDestroy(s[i]));
}

static pthread_barrier_t spt_done, spt_go;

static void *spt_thread(void *arg)
{
	char name[16];

	snprintf(name, sizeof(name), "spt%d", (int)(intptr_t)arg);
	CHECK(hipLaunchKernel_spt(&kern, grid, block, NULL, 0, NULL));
	CHECK(hipLaunchKernel(&kern, grid, block, NULL, 0, hipStreamPerThread));
	CHECK(hipStreamSynchronize(hipStreamPerThread));
	print_queue(name, hipStreamPerThread);
	pthread_barrier_wait(&spt_done);
	pthread_barrier_wait(&spt_go); /* keep the per-thread stream alive until checked */
	return NULL;
}

static void mode_spt(void)
{
	pthread_t t[3];

	pthread_barrier_init(&spt_done, NULL, 4);
	pthread_barrier_init(&spt_go, NULL, 4);
	for (int i = 0; i < 3; i++)
		pthread_create(&t[i], NULL, spt_thread, (void *)(intptr_t)i);
	pthread_barrier_wait(&spt_done);
	checkpoint("spt");
	pthread_barrier_wait(&spt_go);
	for (int i = 0; i < 3; i++)
		pthread_join(t[i], NULL);
}

typedef hipError_t (*launch_fn)(const void *, dim3, dim3, void **, size_t, hipStream_t);
typedef hipError_t (*create_fn)(hipStream_t *, unsigned int, int);

static void *proc(const char *sym, uint64_t flags, const char *label)
{
	hipDriverProcAddressQueryResult status = HIP_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
	void *p = NULL;
	Dl_info info;

	CHECK(hipGetProcAddress(sym, &p, 601, flags, &status));
	if (!p || status != HIP_GET_PROC_ADDRESS_SUCCESS) {
		fprintf(stderr, "hipGetProcAddress(%s) gave %p status %d\n", sym, p, (int)status);
		exit(1);
	}
	memset(&info, 0, sizeof(info));
	dladdr(p, &info);
	printf("procaddr %s %s\n", label, info.dli_fname ? strrchr(info.dli_fname, '/') + 1 : "?");
	return p;
}

static void mode_procaddr(void)
{
	launch_fn launch = (launch_fn)proc("hipLaunchKernel", 0, "hipLaunchKernel");
	launch_fn launch_spt = (launch_fn)proc("hipLaunchKernel", HIP_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
					       "hipLaunchKernel+spt");
	create_fn create = (create_fn)proc("hipStreamCreateWithPriority", 0, "hipStreamCreateWithPriority");
	hipStream_t s;

	proc("hipMalloc", 0, "hipMalloc");
	CHECK(create(&s, hipStreamDefault, -1));
	CHECK(launch(&kern, grid, block, NULL, 0, s));
	CHECK(launch(&kern, grid, block, NULL, 0, NULL));
	CHECK(launch_spt(&kern, grid, block, NULL, 0, NULL));
	CHECK(hipDeviceSynchronize());
	print_queue("procaddr-high", s);
	print_queue("null", NULL);
	print_queue("spt", hipStreamPerThread);
	checkpoint("procaddr");
	CHECK(hipStreamDestroy(s));
}

static void mode_shared(void)
{
	hipStream_t s[3];
	char name[16];

	for (int i = 0; i < 3; i++)
		CHECK(hipStreamCreate(&s[i]));
	for (int round = 0; round < 2; round++)
		for (int i = 0; i < 3; i++) {
			CHECK(hipLaunchKernel(&kern, grid, block, NULL, 0, s[i]));
			CHECK(hipStreamSynchronize(s[i]));
		}
	for (int i = 0; i < 3; i++) {
		snprintf(name, sizeof(name), "shared%d", i);
		print_queue(name, s[i]);
	}
	checkpoint("shared");
	for (int i = 0; i < 3; i++)
		CHECK(hipStreamDestroy(s[i]));
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "";

	if (!strcmp(mode, "null"))
		mode_null();
	else if (!strcmp(mode, "priorities"))
		mode_priorities();
	else if (!strcmp(mode, "spt"))
		mode_spt();
	else if (!strcmp(mode, "procaddr"))
		mode_procaddr();
	else if (!strcmp(mode, "shared"))
		mode_shared();
	else {
		fprintf(stderr, "usage: %s null|priorities|spt|procaddr|shared\n", argv[0]);
		return 2;
	}
	return 0;
}
