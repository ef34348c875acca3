/*
 * latency.c N GAP_MS KERNELS WG_US WGS: a latency-critical client shaped like batch-1
 * inference. Every GAP_MS (open loop, periodic) it issues one request: KERNELS dispatches of
 * WGS work-groups (256 threads = 4 waves each, WG_US µs per work-group) on the null stream, as
 * PyTorch does, then waits for them. After a warm-up it passes checkpoint "ready" (see common.h),
 * then prints one line per request (its latency and its start, the moment before its first launch,
 * on CLOCK_MONOTONIC), the timed window on CLOCK_MONOTONIC and a summary, and passes checkpoint
 * "done" before it exits (its queues stay until then):
 *   request <i> <latency_us> <start_us>
 *   window <start_us> <end_us>
 *   latency n <N> p50 <us> p99 <us> max <us>
 * (nearest-rank quantiles, the definition of kfdq::stats).
 */
#include "common.h"

#include <string.h>

struct kernel {
	uint32_t magic;
	uint32_t reserved;
	uint64_t duration_ns;
};

static double now_us(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

/* Rank (1-based) of the nearest-rank q-quantile of n values: ceil(q n), at least 1. */
static int nearest_rank(int n, double q)
{
	int r = (int)(q * n);

	if (r < q * n)
		r++; /* ceil without libm */
	return r < 1 ? 1 : r > n ? n : r;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	if (argc != 6) {
		fprintf(stderr, "usage: %s N GAP_MS KERNELS WG_US WGS\n", argv[0]);
		return 2;
	}
	int n = atoi(argv[1]), kernels = atoi(argv[3]), wgs = atoi(argv[5]);
	double gap_us = atof(argv[2]) * 1000;
	struct kernel k = {0x4B484B46u, 0, (uint64_t)(atof(argv[4]) * 1000)};
	double *lat = calloc((size_t)n, sizeof(*lat));

	/* Warm-up: the null stream's queue exists before the first timed request. */
	CHECK(hipLaunchKernel((const void *)&k, (dim3){1, 1, 1}, (dim3){64, 1, 1}, NULL, 0, 0));
	CHECK(hipStreamSynchronize(0));
	checkpoint("ready");
	double start = now_us();
	for (int i = 0; i < n; i++) {
		double due = start + i * gap_us;
		double t = now_us();
		if (t < due)
			sleep_ms((long)((due - t) / 1000));
		double t0 = now_us();
		for (int j = 0; j < kernels; j++)
			CHECK(hipLaunchKernel((const void *)&k, (dim3){(unsigned)wgs, 1, 1},
					      (dim3){256, 1, 1}, NULL, 0, 0));
		CHECK(hipStreamSynchronize(0));
		lat[i] = now_us() - t0;
		printf("request %d %.0f %.0f\n", i, lat[i], t0);
	}
	printf("window %.0f %.0f\n", start, now_us());
	qsort(lat, (size_t)n, sizeof(*lat), cmp);
	printf("latency n %d p50 %.0f p99 %.0f max %.0f\n", n, lat[nearest_rank(n, 0.5) - 1],
	       lat[nearest_rank(n, 0.99) - 1], lat[n - 1]);
	fflush(stdout);
	checkpoint("done");
	free(lat);
	return 0;
}
