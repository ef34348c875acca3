/*
 * launch_overhead.c: cost per call of an un-held hipLaunchKernel on a created stream and of a
 * non-KFD ioctl (TCGETS on /dev/null, which fails with ENOTTY in the kernel).
 *
 * Run with FAKEHIP_NOOP_LAUNCH=1 so that fakehip's launch only validates its arguments: the
 * difference between a run with and without LD_PRELOAD=libkfdq_shim.so is the shim's cost.
 * Prints "launch_ns <min over reps>" and "ioctl_ns <min over reps>".
 *
 * With BENCH_HELPER_THREAD=1 the program first starts an idle helper thread (as the real HIP
 * runtime always has): on this kind of machine merely being multi-threaded adds ~20 ns to every
 * system call, and the shim's control thread makes the process multi-threaded, so the fair
 * comparison for ioctl is with a helper thread in both runs.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <hip/hip_runtime_api.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

static void *idle(void *arg)
{
	(void)arg;
	for (;;)
		usleep(10000);
	return NULL;
}

static double now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

int main(int argc, char **argv)
{
	static struct fakehip_kernel kern = FAKEHIP_KERNEL(1000);
	long n = argc > 1 ? atol(argv[1]) : 2000000;
	int reps = 7;
	dim3 grid = {1, 1, 1}, block = {64, 1, 1};
	hipStream_t s;
	struct termios t;
	double best_launch = 1e30, best_ioctl = 1e30;
	int fd = open("/dev/null", O_RDONLY);

	if (getenv("BENCH_HELPER_THREAD") && getenv("BENCH_HELPER_THREAD")[0] == '1') {
		pthread_t t;

		pthread_create(&t, NULL, idle, NULL);
	}
	if (fd < 0 || hipStreamCreate(&s) != hipSuccess) {
		fprintf(stderr, "setup failed (is KFDQ_ROOT an emulator mount?)\n");
		return 1;
	}
	for (long i = 0; i < 10000; i++)
		if (hipLaunchKernel(&kern, grid, block, NULL, 0, s) != hipSuccess) {
			fprintf(stderr, "launch failed (FAKEHIP_NOOP_LAUNCH=1 expected)\n");
			return 1;
		}
	for (int r = 0; r < reps; r++) {
		double t0 = now_ns();

		for (long i = 0; i < n; i++)
			hipLaunchKernel(&kern, grid, block, NULL, 0, s);
		double t1 = now_ns();

		for (long i = 0; i < n / 4; i++)
			ioctl(fd, TCGETS, &t);
		double t2 = now_ns();

		if ((t1 - t0) / n < best_launch)
			best_launch = (t1 - t0) / n;
		if ((t2 - t1) / (n / 4) < best_ioctl)
			best_ioctl = (t2 - t1) / (n / 4);
	}
	printf("launch_ns %.2f\n", best_launch);
	printf("ioctl_ns %.2f\n", best_ioctl);
	return 0;
}
