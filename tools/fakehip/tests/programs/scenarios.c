/*
 * scenarios.c: fakehip behaviours exercised by tests/library.rs against a
 * kfd-emu mount (KFDQ_ROOT).
 *
 *   scenarios <name>
 *
 * Each scenario prints "key value" lines on stdout and exits 0 when every
 * HIP call returned what the scenario expects, 1 otherwise. With
 * FAKEHIP_TEST_CHECKPOINTS=1 it parks at named checkpoints (checkpoint.h) so
 * the harness can read the emulator's stats there.
 */
#include <hip/hip_runtime_api.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "checkpoint.h"

static struct fakehip_kernel k_short = FAKEHIP_KERNEL(100000); /* 0.1 ms */
static struct fakehip_kernel k_20ms = FAKEHIP_KERNEL(20000000);
static struct fakehip_kernel k_hour = FAKEHIP_KERNEL(3600000000000ull); /* never completes in a test */
static const dim3 G1 = {1, 1, 1}, B64 = {64, 1, 1};
static int failures;

#define EXPECT(call, want)                                                                           \
	do {                                                                                         \
		hipError_t e_ = (hipError_t)(call);                                                  \
		if (e_ != (want)) {                                                                  \
			fprintf(stderr, "%s:%d: %s returned %s (%d), expected %d\n", __FILE__, __LINE__, \
				#call, hipGetErrorName(e_), (int)e_, (int)(want));                   \
			failures++;                                                                  \
		}                                                                                    \
	} while (0)
#define OK(call) EXPECT(call, hipSuccess)

static uint32_t qid_of(hipStream_t s)
{
	uint32_t q = 0xffffffffu;

	OK(fakehipStreamQueueId(s, &q, NULL));
	return q;
}

static fakehipQueueInfo info_of(hipStream_t s)
{
	fakehipQueueInfo i;

	memset(&i, 0, sizeof(i));
	OK(fakehipStreamQueueInfo(s, &i));
	return i;
}

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/*
 * GPU_MAX_HW_QUEUES=2: five normal streams share two queues.
 * Checkpoints: "launched" (one launch per stream submitted), then
 * "destroyed<i>" after hipStreamDestroy of stream i.
 */
static void pools(void)
{
	hipStream_t s[5];

	for (int i = 0; i < 5; i++)
		OK(hipStreamCreate(&s[i]));
	for (int i = 0; i < 5; i++) {
		OK(hipLaunchKernel(&k_short, G1, B64, NULL, 0, s[i]));
		printf("stream %d queue %u users %u\n", i, qid_of(s[i]), info_of(s[i]).stream_users);
	}
	checkpoint("launched");
	for (int i = 0; i < 5; i++) {
		char name[32];

		OK(hipStreamDestroy(s[i]));
		snprintf(name, sizeof(name), "destroyed%d", i);
		checkpoint(name);
	}
	EXPECT(hipStreamDestroy(s[0]), hipErrorInvalidHandle);
	EXPECT(hipStreamSynchronize(s[0]), hipErrorInvalidHandle);
}

/* Out-of-range priorities are clamped like HIP: 3 -> 1 (low), -5 -> -1 (high). */
static void clamp(void)
{
	hipStream_t lo, hi;
	int p = 99, least = 0, greatest = 0;

	OK(hipDeviceGetStreamPriorityRange(&least, &greatest));
	printf("range %d %d\n", least, greatest);
	OK(hipStreamCreateWithPriority(&lo, 0, 3));
	OK(hipStreamCreateWithPriority(&hi, hipStreamNonBlocking, -5));
	OK(hipStreamGetPriority(lo, &p));
	printf("low hip %d kfd %u\n", p, info_of(lo).kfd_priority);
	OK(hipStreamGetPriority(hi, &p));
	printf("high hip %d kfd %u\n", p, info_of(hi).kfd_priority);
	{
		unsigned f = 99;

		OK(hipStreamGetFlags(hi, &f));
		printf("high flags %u\n", f);
	}
	EXPECT(hipStreamCreateWithPriority(&lo, 0x10, 0), hipErrorInvalidValue);
	checkpoint("streams");
}

/*
 * Events around a 20 ms kernel. "wall" / "ext_wall" bracket the records and
 * the synchronisation on the host, so elapsed <= wall must hold.
 * Checkpoint "done" before the stream is destroyed.
 */
static void elapsed(void)
{
	hipStream_t s;
	hipEvent_t a, b;
	float ms = -1;
	double t0;

	OK(hipStreamCreate(&s));
	OK(hipEventCreate(&a));
	OK(hipEventCreate(&b));
	t0 = now_ms();
	OK(hipEventRecord(a, s));
	OK(hipLaunchKernel(&k_20ms, G1, B64, NULL, 0, s));
	OK(hipEventRecord(b, s));
	EXPECT(hipEventQuery(b), hipErrorNotReady);
	EXPECT(hipStreamQuery(s), hipErrorNotReady);
	EXPECT(hipEventElapsedTime(&ms, a, b), hipErrorNotReady);
	OK(hipEventSynchronize(b));
	printf("wall %.3f\n", now_ms() - t0);
	OK(hipEventQuery(b));
	OK(hipStreamQuery(s));
	OK(hipEventElapsedTime(&ms, a, b));
	printf("elapsed %.3f\n", ms);
	/* the extension launch records both events itself */
	t0 = now_ms();
	OK(hipExtLaunchKernel(&k_20ms, G1, B64, NULL, 0, s, a, b, 0));
	OK(hipStreamSynchronize(s));
	printf("ext_wall %.3f\n", now_ms() - t0);
	OK(hipEventElapsedTime(&ms, a, b));
	printf("ext_elapsed %.3f\n", ms);
	checkpoint("done");
	OK(hipEventDestroy(a));
	OK(hipEventDestroy(b));
	OK(hipStreamDestroy(s));
}

/*
 * With FAKEHIP_TIMEOUT_MS=300 and FAKEHIP_RING_SIZE=4096 (64 packets): the
 * first kernel runs for an hour, so nothing after it completes either.
 * Checkpoint "stalled" after the ring filled up.
 */
static void timeout(void)
{
	hipStream_t s;
	double t0;
	hipError_t e = hipSuccess;
	int n = 0;

	OK(hipStreamCreate(&s));
	OK(hipLaunchKernel(&k_hour, G1, B64, NULL, 0, s));
	EXPECT(hipStreamQuery(s), hipErrorNotReady);
	t0 = now_ms();
	EXPECT(hipStreamSynchronize(s), hipErrorLaunchTimeOut);
	printf("sync_ms %.0f\n", now_ms() - t0);
	EXPECT(hipGetLastError(), hipErrorLaunchTimeOut);
	t0 = now_ms();
	for (n = 1; n < 1000; n++) {
		e = hipLaunchKernel(&k_short, G1, B64, NULL, 0, s);
		if (e != hipSuccess)
			break;
	}
	printf("ring_full_after %d code %d ms %.0f\n", n + 1, (int)e, now_ms() - t0);
	EXPECT(e, hipErrorLaunchFailure);
	checkpoint("stalled");
}

/*
 * The child of fork() re-initialises: it opens /dev/kfd again.
 * Checkpoints: "child" in the child once its queue ran a kernel, "parent"
 * in the parent after the child exited and the parent launched again.
 */
static void forked(void)
{
	hipStream_t s, c;
	pid_t pid;
	int status = 0;

	OK(hipStreamCreate(&s));
	OK(hipLaunchKernel(&k_short, G1, B64, NULL, 0, s));
	OK(hipStreamSynchronize(s));
	printf("parent queue %u\n", qid_of(s));
	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		int bad = 0;

		if (hipStreamCreate(&c) != hipSuccess)
			bad = 1;
		else if (hipLaunchKernel(&k_short, G1, B64, NULL, 0, c) != hipSuccess)
			bad = 2;
		else if (hipStreamSynchronize(c) != hipSuccess)
			bad = 3;
		/* the parent's stream handle means nothing here */
		else if (hipStreamSynchronize(s) != hipErrorInvalidHandle)
			bad = 4;
		else {
			printf("child pid %d queue %u\n", (int)getpid(), qid_of(c));
			checkpoint("child");
		}
		fflush(stdout);
		_exit(bad);
	}
	waitpid(pid, &status, 0);
	printf("child exit %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
	if (!WIFEXITED(status) || WEXITSTATUS(status))
		failures++;
	OK(hipLaunchKernel(&k_short, G1, B64, NULL, 0, s));
	OK(hipStreamSynchronize(s));
	checkpoint("parent");
	OK(hipStreamDestroy(s));
}

/* Checkpoint "masked" before the streams are destroyed. */
static void cumask(void)
{
	hipStream_t s, plain;
	uint32_t mask[2] = {0x0000ffffu, 0x0u};

	OK(hipStreamCreate(&plain));
	OK(hipExtStreamCreateWithCUMask(&s, 2, mask));
	EXPECT(hipExtStreamCreateWithCUMask(&s, 0, mask), hipErrorInvalidValue);
	OK(hipLaunchKernel(&k_short, G1, B64, NULL, 0, s));
	OK(hipStreamSynchronize(s));
	printf("cumask queue %u plain queue %u\n", qid_of(s), qid_of(plain));
	checkpoint("masked");
	OK(hipStreamDestroy(s));
	OK(hipStreamDestroy(plain));
}

/* Two GPUs; checkpoint "synced" after both devices were synchronised. */
static void multigpu(void)
{
	hipStream_t s0, s1;
	int n = 0, d = -1, sd = -1;
	uint32_t g0 = 0, g1 = 0, q;

	OK(hipGetDeviceCount(&n));
	printf("devices %d\n", n);
	OK(hipStreamCreate(&s0));
	OK(hipSetDevice(1));
	OK(hipGetDevice(&d));
	OK(hipStreamCreate(&s1));
	OK(hipStreamGetDevice(s1, &sd));
	OK(fakehipStreamQueueId(s0, &q, &g0));
	OK(fakehipStreamQueueId(s1, &q, &g1));
	printf("device %d stream_device %d gpu0 %u gpu1 %u\n", d, sd, g0, g1);
	OK(hipLaunchKernel(&k_short, G1, B64, NULL, 0, s0));
	OK(hipLaunchKernel(&k_short, G1, B64, NULL, 0, s1));
	OK(hipDeviceSynchronize());
	EXPECT(hipSetDevice(n), hipErrorInvalidDevice);
	OK(hipSetDevice(0));
	OK(hipDeviceSynchronize());
	checkpoint("synced");
}

/* Checkpoint "done" before the stream is destroyed. */
static void graph(void)
{
	hipStream_t s;
	hipGraph_t g, cg;
	hipGraphExec_t x, cx;
	hipGraphNode_t node;
	hipKernelNodeParams p;
	hipStreamCaptureStatus st;

	memset(&p, 0, sizeof(p));
	p.func = &k_short;
	p.gridDim = G1;
	p.blockDim = B64;
	OK(hipStreamCreate(&s));
	OK(hipGraphCreate(&g, 0));
	for (int i = 0; i < 3; i++)
		OK(hipGraphAddKernelNode(&node, g, NULL, 0, &p));
	OK(hipGraphAddEmptyNode(&node, g, &node, 1));
	OK(hipGraphInstantiate(&x, g, NULL, NULL, 0));
	OK(hipGraphLaunch(x, s));
	OK(hipStreamSynchronize(s));
	printf("after_graph write_index %llu\n", (unsigned long long)info_of(s).write_index);

	OK(hipStreamBeginCapture(s, hipStreamCaptureModeGlobal));
	OK(hipStreamIsCapturing(s, &st));
	printf("capturing %d\n", (int)st);
	OK(hipLaunchKernel(&k_short, G1, B64, NULL, 0, s));
	OK(hipModuleLaunchKernel((hipFunction_t)&k_short, 1, 1, 1, 64, 1, 1, 0, s, NULL, NULL));
	EXPECT(hipStreamSynchronize(s), hipErrorStreamCaptureUnsupported);
	OK(hipStreamEndCapture(s, &cg));
	printf("after_capture write_index %llu\n", (unsigned long long)info_of(s).write_index);
	OK(hipGraphInstantiateWithFlags(&cx, cg, 0));
	OK(hipGraphLaunch(cx, s));
	OK(hipGraphLaunch_spt(cx, s));
	OK(hipStreamSynchronize(s));
	printf("after_replay write_index %llu read_index %llu\n", (unsigned long long)info_of(s).write_index,
	       (unsigned long long)info_of(s).read_index);
	checkpoint("done");
	OK(hipGraphExecDestroy(x));
	OK(hipGraphExecDestroy(cx));
	OK(hipGraphDestroy(g));
	OK(hipGraphDestroy(cg));
	OK(hipStreamDestroy(s));
}

/* Checkpoint "done" before the buffers and the stream are released. */
static void memops(void)
{
	hipStream_t s;
	char *a = NULL, *b = NULL;
	uint32_t q;

	EXPECT(fakehipStreamQueueId(NULL, &q, NULL), hipErrorNotReady);
	EXPECT(fakehipStreamQueueId(hipStreamPerThread, &q, NULL), hipErrorNotReady);
	OK(hipMalloc((void **)&a, 64));
	OK(hipMalloc((void **)&b, 64));
	EXPECT(fakehipStreamQueueId(NULL, &q, NULL), hipErrorNotReady);
	OK(hipMemset(a, 7, 64));
	printf("null queue after memset %u\n", qid_of(NULL));
	OK(hipStreamCreate(&s));
	OK(hipMemcpyAsync(b, a, 64, hipMemcpyDeviceToDevice, s));
	OK(hipMemsetAsync(a, 1, 32, s));
	OK(hipStreamSynchronize(s));
	printf("b0 %d a0 %d a40 %d\n", b[0], a[0], a[40]);
	printf("stream write_index %llu\n", (unsigned long long)info_of(s).write_index);
	EXPECT(hipMemcpy(b, a, 64, (hipMemcpyKind)9), hipErrorInvalidMemcpyDirection);
	OK(hipMemcpy_spt(b, a, 64, hipMemcpyDefault));
	printf("per-thread queue %u\n", qid_of(hipStreamPerThread));
	checkpoint("done");
	OK(hipFree(a));
	OK(hipFree(b));
	OK(hipStreamDestroy(s));
}

struct thread_out {
	uint32_t pts, spt_null, legacy;
};

/* threads + main: "work done" and "may exit" */
static pthread_barrier_t work_done, may_exit;

static void *spt_thread(void *arg)
{
	struct thread_out *o = arg;

	OK(hipLaunchKernel(&k_short, G1, B64, NULL, 0, hipStreamPerThread));
	OK(hipLaunchKernel_spt(&k_short, G1, B64, NULL, 0, NULL));
	OK(hipStreamSynchronize_spt(NULL));
	OK(hipLaunchKernel(&k_short, G1, B64, NULL, 0, NULL));
	OK(hipStreamSynchronize(hipStreamLegacy));
	o->pts = qid_of(hipStreamPerThread);
	o->legacy = qid_of(hipStreamLegacy);
	{
		uint32_t q = 0;

		/* NULL in the non-spt API is the legacy stream */
		OK(fakehipStreamQueueId(NULL, &q, NULL));
		o->spt_null = q;
	}
	pthread_barrier_wait(&work_done);
	pthread_barrier_wait(&may_exit);
	return NULL;
}

/*
 * GPU_MAX_HW_QUEUES=8: two threads get their own per-thread queues.
 * Checkpoints: "running" while both threads are alive with their work done,
 * "joined" after they exited.
 */
static void perthread(void)
{
	pthread_t t[2];
	struct thread_out o[2];

	pthread_barrier_init(&work_done, NULL, 3);
	pthread_barrier_init(&may_exit, NULL, 3);
	for (int i = 0; i < 2; i++)
		pthread_create(&t[i], NULL, spt_thread, &o[i]);
	pthread_barrier_wait(&work_done);
	checkpoint("running");
	pthread_barrier_wait(&may_exit);
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	checkpoint("joined");
	for (int i = 0; i < 2; i++)
		printf("thread %d pts %u legacy %u null %u\n", i, o[i].pts, o[i].legacy, o[i].spt_null);
	/* thread exit released the per-thread streams; the null stream stays */
	printf("main legacy %u\n", qid_of(NULL));
	EXPECT(fakehipStreamQueueId(hipStreamPerThread, NULL, NULL), hipErrorNotReady);
}

/* Checkpoints: "before_reset", "after_reset", "recreated". */
static void reset(void)
{
	hipStream_t s[3];

	for (int i = 0; i < 3; i++) {
		OK(hipStreamCreateWithPriority(&s[i], 0, i - 1));
		OK(hipLaunchKernel(&k_short, G1, B64, NULL, 0, s[i]));
	}
	OK(hipLaunchKernel(&k_short, G1, B64, NULL, 0, NULL));
	checkpoint("before_reset");
	OK(hipDeviceReset());
	checkpoint("after_reset");
	EXPECT(hipStreamSynchronize(s[0]), hipErrorInvalidHandle);
	EXPECT(fakehipStreamQueueId(NULL, NULL, NULL), hipErrorNotReady);
	OK(hipStreamCreate(&s[0]));
	OK(hipLaunchKernel(&k_short, G1, B64, NULL, 0, s[0]));
	OK(hipStreamSynchronize(s[0]));
	printf("after reset queue %u\n", qid_of(s[0]));
	checkpoint("recreated");
}

static void host_cb(void *p)
{
	*(int *)p += 1;
}

static void stream_cb(hipStream_t s, hipError_t e, void *p)
{
	(void)s;
	if (e == hipSuccess)
		*(int *)p += 10;
}

/* Checkpoint "done" before the stream is destroyed. */
static void misc(void)
{
	hipStream_t s;
	hipEvent_t ev;
	int counter = 0;
	dim3 g, b;
	size_t shm = 0;
	hipStream_t cs = NULL;
	dim3 big = {2048, 1, 1};

	OK(hipStreamCreate(&s));
	OK(hipLaunchKernel(&k_20ms, G1, B64, NULL, 0, s));
	OK(hipLaunchHostFunc(s, host_cb, &counter));
	OK(hipStreamAddCallback(s, stream_cb, &counter, 0));
	OK(hipStreamQuery(s));
	printf("counter %d\n", counter);
	OK(hipEventCreateWithFlags(&ev, hipEventDisableTiming));
	OK(hipLaunchKernel(&k_short, G1, B64, NULL, 0, s));
	OK(hipEventRecord(ev, s));
	OK(hipStreamWaitEvent(NULL, ev, 0));
	OK(hipEventQuery(ev));
	OK(hipEventDestroy(ev));
	EXPECT(hipEventQuery(ev), hipErrorInvalidHandle);
	OK(__hipPushCallConfiguration(G1, B64, 16, s));
	OK(__hipPopCallConfiguration(&g, &b, &shm, &cs));
	printf("popped %u %u %zu %d\n", g.x, b.x, shm, cs == s);
	EXPECT(__hipPopCallConfiguration(&g, &b, &shm, &cs), hipErrorInvalidConfiguration);
	EXPECT(hipLaunchKernel(&k_short, G1, big, NULL, 0, s), hipErrorInvalidConfiguration);
	EXPECT(hipLaunchKernel(NULL, G1, B64, NULL, 0, s), hipErrorInvalidDeviceFunction);
	EXPECT(hipModuleLaunchKernel(NULL, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL), hipErrorInvalidHandle);
	EXPECT(hipLaunchKernel(&k_short, G1, B64, NULL, 0, (hipStream_t)0x1234), hipErrorInvalidHandle);
	OK(hipExtModuleLaunchKernel((hipFunction_t)&k_short, 128, 1, 1, 64, 1, 1, 0, s, NULL, NULL, NULL, NULL, 0));
	OK(hipModuleLaunchCooperativeKernel((hipFunction_t)&k_short, 1, 1, 1, 64, 1, 1, 0, s, NULL));
	OK(hipLaunchCooperativeKernel(&k_short, G1, B64, NULL, 0, s));
	OK(hipLaunchCooperativeKernel_spt(&k_short, G1, B64, NULL, 0, s));
	OK(hipStreamSynchronize(s));
	/* a plain function pointer is a kernel too ($FAKEHIP_KERNEL_NS) */
	OK(hipLaunchKernel((const void *)&misc, G1, B64, NULL, 0, s));
	/* a wild pointer must not crash the library */
	OK(hipLaunchKernel((const void *)0x10, G1, B64, NULL, 0, s));
	OK(hipStreamSynchronize(s));
	checkpoint("done");
	OK(hipStreamDestroy(s));
}

static void many(void)
{
	hipStream_t s;

	/* more packets than ring slots: the submitter waits for the CP; checkpoint "done" */
	OK(hipStreamCreate(&s));
	for (int i = 0; i < 3000; i++)
		OK(hipLaunchKernel(&k_short, G1, B64, NULL, 0, s));
	OK(hipStreamSynchronize(s));
	printf("write_index %llu read_index %llu\n", (unsigned long long)info_of(s).write_index,
	       (unsigned long long)info_of(s).read_index);
	checkpoint("done");
	OK(hipStreamDestroy(s));
}

/* The CWSR sizes fakehip passed to CREATE_QUEUE; checkpoint "done". */
static void cwsr(void)
{
	hipStream_t s;
	fakehipQueueInfo i;

	OK(hipStreamCreate(&s));
	OK(hipLaunchKernel(&k_short, G1, B64, NULL, 0, s));
	OK(hipStreamSynchronize(s));
	i = info_of(s);
	printf("cwsr ctx_save_restore_size %u ctl_stack_size %u bytes %llu\n", i.ctx_save_restore_size,
	       i.ctl_stack_size, (unsigned long long)i.cwsr_bytes);
	checkpoint("done");
	OK(hipStreamDestroy(s));
}

int main(int argc, char **argv)
{
	static const struct {
		const char *name;
		void (*fn)(void);
	} all[] = {
		{"pools", pools},   {"clamp", clamp},   {"elapsed", elapsed}, {"timeout", timeout},
		{"fork", forked},   {"cumask", cumask}, {"multigpu", multigpu}, {"graph", graph},
		{"memops", memops}, {"perthread", perthread}, {"reset", reset}, {"misc", misc},
		{"many", many},     {"cwsr", cwsr},
	};

	if (argc != 2) {
		fprintf(stderr, "usage: scenarios <name>\n");
		return 2;
	}
	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
		if (!strcmp(argv[1], all[i].name)) {
			all[i].fn();
			fflush(stdout);
			return failures ? 1 : 0;
		}
	}
	fprintf(stderr, "unknown scenario %s\n", argv[1]);
	return 2;
}
