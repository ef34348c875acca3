/*
 * ordered.c MODE [ARG]: stream-ordered work (copies, fills, host functions, event records,
 * stream waits) and synchronisation under the shim.
 *
 *   first OP    synchronises and queries the null stream, the device and the context (which
 *               creates nothing in fakehip), checkpoint "synced"; then makes OP the very first
 *               operation of its stream and checks its effect, checkpoint "first". OP:
 *               memcpy / memset (hipMemcpyAsync / hipMemsetAsync on NULL: the null stream),
 *               memcpy-legacy (hipMemcpyAsync_spt on hipStreamLegacy: the null stream),
 *               memset-spt (hipMemsetAsync_spt on NULL: the per-thread stream),
 *               memcpy-sync (hipMemcpy: the null stream).
 *   gate        streams "a" and "b", one launch on each and on the null stream, "READY",
 *               checkpoint "hold" (the test holds a and the null stream at level 1); then one
 *               thread per call, each printing "done <label>" once its call returned: work on
 *               a / the null stream (held), work on b / the per-thread stream and
 *               synchronisation of a (not held). "all done" and checkpoint "end" at the end.
 *   procaddr    the new entry points through hipGetProcAddress (prints the object each pointer
 *               lives in); the null stream's first operation is a hipMemsetAsync and the
 *               per-thread stream's a hipMemcpyAsync obtained with the per-thread flag.
 */
#include "common.h"

#include <dlfcn.h>
#include <pthread.h>
#include <string.h>

#define N 4096

static struct fakehip_kernel kern = FAKEHIP_KERNEL(100000); /* 0.1 ms */
static const dim3 grid = {1, 1, 1}, block = {64, 1, 1};
static unsigned char host[N];

static void *dev_alloc(void)
{
	void *p = NULL;

	CHECK(hipMalloc(&p, N));
	return p;
}

static void check_bytes(const unsigned char *p, unsigned char want, const char *what)
{
	for (int i = 0; i < N; i++)
		if (p[i] != want) {
			fprintf(stderr, "%s: byte %d is %u, want %u\n", what, i, p[i], want);
			exit(1);
		}
}

static void mode_first(const char *op)
{
	unsigned char *dev = dev_alloc();
	hipStream_t which = NULL;
	const char *name = "null";

	memset(host, 0xa5, N);
	/* None of these creates a queue in fakehip (nothing was submitted yet). */
	CHECK(hipStreamSynchronize(NULL));
	CHECK(hipStreamQuery(NULL));
	CHECK(hipStreamSynchronize_spt(NULL));
	CHECK(hipDeviceSynchronize());
	CHECK(hipCtxSynchronize());
	checkpoint("synced");
	if (!strcmp(op, "memcpy")) {
		CHECK(hipMemcpyAsync(dev, host, N, hipMemcpyHostToDevice, NULL));
		CHECK(hipStreamSynchronize(NULL));
		check_bytes(dev, 0xa5, op);
	} else if (!strcmp(op, "memset")) {
		CHECK(hipMemsetAsync(dev, 0x5a, N, NULL));
		CHECK(hipStreamSynchronize(NULL));
		check_bytes(dev, 0x5a, op);
	} else if (!strcmp(op, "memcpy-legacy")) {
		CHECK(hipMemcpyAsync_spt(dev, host, N, hipMemcpyHostToDevice, hipStreamLegacy));
		CHECK(hipStreamSynchronize(hipStreamLegacy));
		check_bytes(dev, 0xa5, op);
	} else if (!strcmp(op, "memset-spt")) {
		CHECK(hipMemsetAsync_spt(dev, 0x3c, N, NULL));
		CHECK(hipStreamSynchronize_spt(NULL));
		check_bytes(dev, 0x3c, op);
		which = hipStreamPerThread;
		name = "spt";
	} else if (!strcmp(op, "memcpy-sync")) {
		CHECK(hipMemcpy(dev, host, N, hipMemcpyHostToDevice));
		check_bytes(dev, 0xa5, op);
	} else {
		fprintf(stderr, "unknown first op %s\n", op);
		exit(2);
	}
	printf("first %s ok\n", op);
	print_queue(name, which);
	checkpoint("first");
	CHECK(hipFree(dev));
}

/* ---- gate ---- */

enum kind {
	K_MEMCPY,
	K_MEMCPY_SPT,
	K_MEMSET,
	K_HOSTFUNC,
	K_CALLBACK,
	K_RECORD,
	K_RECORD_SPT,
	K_WAIT,
	K_LAUNCH,
	K_SYNC,
	K_QUERY,
	K_DEVSYNC,
};

struct job {
	const char *label;
	enum kind kind;
	hipStream_t *stream;
	int ran;
	pthread_t t;
};

static hipStream_t sa, sb, snull = NULL, slegacy = hipStreamLegacy;
static hipEvent_t done_event; /* recorded (and complete) before the hold */

static void host_fn(void *arg)
{
	((struct job *)arg)->ran = 1;
}

static void callback(hipStream_t s, hipError_t status, void *arg)
{
	(void)s;
	if (status == hipSuccess)
		((struct job *)arg)->ran = 1;
}

static void *gate_thread(void *arg)
{
	struct job *j = arg;
	hipStream_t s = *j->stream;
	unsigned char *dev = dev_alloc();
	hipEvent_t ev;
	hipError_t e;

	CHECK(hipEventCreate(&ev));
	switch (j->kind) {
	case K_MEMCPY:
		CHECK(hipMemcpyAsync(dev, host, N, hipMemcpyHostToDevice, s));
		break;
	case K_MEMCPY_SPT:
		CHECK(hipMemcpyAsync_spt(dev, host, N, hipMemcpyHostToDevice, s));
		break;
	case K_MEMSET:
		CHECK(hipMemsetAsync(dev, 1, N, s));
		break;
	case K_HOSTFUNC:
		CHECK(hipLaunchHostFunc(s, host_fn, j));
		break;
	case K_CALLBACK:
		CHECK(hipStreamAddCallback(s, callback, j, 0));
		break;
	case K_RECORD:
		CHECK(hipEventRecord(ev, s));
		break;
	case K_RECORD_SPT:
		CHECK(hipEventRecord_spt(ev, s));
		break;
	case K_WAIT:
		CHECK(hipStreamWaitEvent(s, done_event, 0));
		break;
	case K_LAUNCH:
		CHECK(hipLaunchKernel(&kern, grid, block, NULL, 0, s));
		break;
	case K_SYNC:
		CHECK(hipStreamSynchronize(s));
		break;
	case K_QUERY:
		e = hipStreamQuery(s);
		if (e != hipSuccess && e != hipErrorNotReady) {
			fprintf(stderr, "hipStreamQuery: %d\n", (int)e);
			exit(1);
		}
		break;
	case K_DEVSYNC:
		CHECK(hipDeviceSynchronize());
		break;
	}
	printf("done %s ran=%d\n", j->label, j->ran);
	fflush(stdout);
	return NULL;
}

static void mode_gate(void)
{
	static struct job jobs[] = {
		/* held: stream a and the null stream */
		{"a-memcpy", K_MEMCPY, &sa, 0, 0},
		{"a-memset", K_MEMSET, &sa, 0, 0},
		{"a-hostfunc", K_HOSTFUNC, &sa, 0, 0},
		{"a-record", K_RECORD, &sa, 0, 0},
		{"a-wait", K_WAIT, &sa, 0, 0},
		{"a-launch", K_LAUNCH, &sa, 0, 0},
		{"null-memset", K_MEMSET, &snull, 0, 0},
		{"legacy-memcpy-spt", K_MEMCPY_SPT, &slegacy, 0, 0},
		/* not held: stream b, the threads' per-thread streams, synchronisation */
		{"b-memcpy", K_MEMCPY, &sb, 0, 0},
		{"b-memset", K_MEMSET, &sb, 0, 0},
		{"b-hostfunc", K_HOSTFUNC, &sb, 0, 0},
		{"b-callback", K_CALLBACK, &sb, 0, 0},
		{"b-record", K_RECORD, &sb, 0, 0},
		{"b-wait", K_WAIT, &sb, 0, 0},
		{"spt-memcpy", K_MEMCPY_SPT, &snull, 0, 0},
		{"spt-record", K_RECORD_SPT, &snull, 0, 0},
		{"a-sync", K_SYNC, &sa, 0, 0},
		{"a-query", K_QUERY, &sa, 0, 0},
		{"null-sync", K_SYNC, &snull, 0, 0},
		{"device-sync", K_DEVSYNC, &snull, 0, 0},
	};
	const int n = sizeof(jobs) / sizeof(jobs[0]);

	memset(host, 7, N);
	CHECK(hipStreamCreateWithPriority(&sa, hipStreamDefault, 0));
	CHECK(hipStreamCreateWithPriority(&sb, hipStreamDefault, 0));
	CHECK(hipEventCreate(&done_event));
	CHECK(hipLaunchKernel(&kern, grid, block, NULL, 0, sa));
	CHECK(hipLaunchKernel(&kern, grid, block, NULL, 0, sb));
	CHECK(hipLaunchKernel(&kern, grid, block, NULL, 0, NULL));
	CHECK(hipEventRecord(done_event, sb));
	CHECK(hipDeviceSynchronize());
	print_queue("a", sa);
	print_queue("b", sb);
	print_queue("null", NULL);
	printf("READY %d\n", (int)getpid());
	fflush(stdout);
	checkpoint("hold");
	for (int i = 0; i < n; i++)
		pthread_create(&jobs[i].t, NULL, gate_thread, &jobs[i]);
	for (int i = 0; i < n; i++)
		pthread_join(jobs[i].t, NULL);
	CHECK(hipDeviceSynchronize());
	printf("all done\n");
	fflush(stdout);
	checkpoint("end"); /* the test reads the emulator's queues before they go away */
	CHECK(hipStreamDestroy(sa));
	CHECK(hipStreamDestroy(sb));
}

/* ---- procaddr ---- */

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
	fflush(stdout);
	return p;
}

typedef hipError_t (*memcpy_async_fn)(void *, const void *, size_t, hipMemcpyKind, hipStream_t);
typedef hipError_t (*memset_async_fn)(void *, int, size_t, hipStream_t);
typedef hipError_t (*stream_fn)(hipStream_t);

static void mode_procaddr(void)
{
	static const char *plain[] = {
		"hipMemcpyAsync",      "hipMemsetAsync",    "hipMemcpy",           "hipMemset",
		"hipLaunchHostFunc",   "hipStreamAddCallback", "hipEventRecord",    "hipStreamWaitEvent",
		"hipStreamSynchronize", "hipStreamQuery",    "hipEventSynchronize", "hipDeviceSynchronize",
		"hipCtxSynchronize",
	};
	static const char *spt[] = {"hipMemcpyAsync", "hipMemsetAsync", "hipLaunchHostFunc", "hipEventRecord",
				    "hipStreamSynchronize"};
	char label[64];
	unsigned char *dev = dev_alloc();
	memset_async_fn memset_async;
	memcpy_async_fn memcpy_async_spt;
	stream_fn sync_fn, sync_spt;

	for (size_t i = 0; i < sizeof(plain) / sizeof(plain[0]); i++)
		proc(plain[i], 0, plain[i]);
	for (size_t i = 0; i < sizeof(spt) / sizeof(spt[0]); i++) {
		snprintf(label, sizeof(label), "%s+spt", spt[i]);
		proc(spt[i], HIP_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, label);
	}
	memset_async = (memset_async_fn)proc("hipMemsetAsync", 0, "use-memset");
	memcpy_async_spt = (memcpy_async_fn)proc("hipMemcpyAsync", HIP_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
						 "use-memcpy+spt");
	sync_fn = (stream_fn)proc("hipStreamSynchronize", 0, "use-sync");
	sync_spt = (stream_fn)proc("hipStreamSynchronize", HIP_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM,
				   "use-sync+spt");
	memset(host, 9, N);
	/* first operations of the null stream and of this thread's per-thread stream */
	CHECK(memset_async(dev, 0x11, N, NULL));
	CHECK(sync_fn(NULL));
	check_bytes(dev, 0x11, "memset through hipGetProcAddress");
	CHECK(memcpy_async_spt(dev, host, N, hipMemcpyHostToDevice, NULL));
	CHECK(sync_spt(NULL));
	check_bytes(dev, 9, "memcpy+spt through hipGetProcAddress");
	print_queue("null", NULL);
	print_queue("spt", hipStreamPerThread);
	checkpoint("procaddr");
	CHECK(hipFree(dev));
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "";

	if (!strcmp(mode, "first") && argc > 2)
		mode_first(argv[2]);
	else if (!strcmp(mode, "gate"))
		mode_gate();
	else if (!strcmp(mode, "procaddr"))
		mode_procaddr();
	else {
		fprintf(stderr, "usage: %s first OP | gate | procaddr\n", argv[0]);
		return 2;
	}
	return 0;
}
