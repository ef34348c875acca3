/*
 * window.c MODE N: stream-ordered work around a stream that sits at its in-flight window (run it
 * with KFDQ_WINDOW=1: every launch on a busy stream waits in the shim). Each dispatch is 64
 * work-groups of 1 ms. Modes:
 *   hostfunc  N times: a launch on stream a, then hipLaunchHostFunc(a) whose function counts and
 *             launches once more on a (a HIP call from inside stream-ordered host work)
 *   events    N times: a launch on a, record ea; stream b waits for ea and launches
 *             (another stream depends on the windowed one)
 *   sync      a second thread synchronises a in a loop while the main thread launches N times
 *   fork      N launches on a; fork: the child launches N times on its own null stream and
 *             exits 0; the parent launches N more times and reaps the child
 * Prints `window <mode> done <count>` (count = completed host functions, event waits, syncs or
 * launches), then passes checkpoint "end" (the test reads the registry there) and exits 0.
 */
#include "common.h"

#include <pthread.h>
#include <string.h>
#include <sys/wait.h>

static struct fakehip_kernel kern = FAKEHIP_KERNEL(1000000);
static const dim3 grid = {64, 1, 1}, block = {256, 1, 1};
static hipStream_t a, b;
static volatile int host_calls, stop_sync;
static int syncs;

static void host_fn(void *arg)
{
	(void)arg;
	host_calls++;
	CHECK(hipLaunchKernel(&kern, grid, block, NULL, 0, a));
}

static void *syncer(void *arg)
{
	(void)arg;
	while (!stop_sync) {
		CHECK(hipStreamSynchronize(a));
		syncs++;
	}
	return NULL;
}

static void launches(hipStream_t s, int n)
{
	for (int i = 0; i < n; i++)
		CHECK(hipLaunchKernel(&kern, grid, block, NULL, 0, s));
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: %s hostfunc|events|sync|fork N\n", argv[0]);
		return 2;
	}
	const char *mode = argv[1];
	int n = atoi(argv[2]), count = 0;

	CHECK(hipStreamCreate(&a));
	CHECK(hipStreamCreate(&b));
	print_queue("a", a);
	print_queue("b", b);
	if (!strcmp(mode, "hostfunc")) {
		for (int i = 0; i < n; i++) {
			CHECK(hipLaunchKernel(&kern, grid, block, NULL, 0, a));
			CHECK(hipLaunchHostFunc(a, host_fn, NULL));
		}
		CHECK(hipStreamSynchronize(a));
		count = host_calls;
	} else if (!strcmp(mode, "events")) {
		hipEvent_t ea;

		CHECK(hipEventCreate(&ea));
		for (int i = 0; i < n; i++) {
			CHECK(hipLaunchKernel(&kern, grid, block, NULL, 0, a));
			CHECK(hipEventRecord(ea, a));
			CHECK(hipStreamWaitEvent(b, ea, 0));
			CHECK(hipLaunchKernel(&kern, grid, block, NULL, 0, b));
			count++;
		}
		CHECK(hipDeviceSynchronize());
	} else if (!strcmp(mode, "sync")) {
		pthread_t t;

		if (pthread_create(&t, NULL, syncer, NULL))
			return 1;
		launches(a, n);
		stop_sync = 1;
		pthread_join(t, NULL);
		CHECK(hipStreamSynchronize(a));
		count = syncs > 0 ? n : 0;
	} else if (!strcmp(mode, "fork")) {
		int status = 0;
		pid_t pid;

		launches(a, n);
		pid = fork();
		if (pid < 0)
			return 1;
		if (pid == 0) {
			launches(NULL, n);
			CHECK(hipDeviceSynchronize());
			_exit(0);
		}
		launches(a, n);
		CHECK(hipStreamSynchronize(a));
		if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
			fprintf(stderr, "child failed (status %d)\n", status);
			return 1;
		}
		count = 2 * n;
	} else {
		fprintf(stderr, "unknown mode %s\n", mode);
		return 2;
	}
	printf("window %s done %d\n", mode, count);
	fflush(stdout);
	checkpoint("end");
	return 0;
}
