/*
 * latency.c N GAP_MS KERNELS WG_US WGS: a latency-critical client shaped like batch-1
 * inference. Every GAP_MS (open loop, periodic) it issues one request: KERNELS dispatches of
 * WGS work-groups (256 threads = 4 waves each, WG_US µs per work-group) on the null stream, as
 * PyTorch does, then waits for them.
 * latency.c N GAP_MS --kernels LIST: each request is the kernels of LIST instead, in order:
 * comma-separated `WGS:WAVES:WG_US` (work-groups, waves per work-group, µs per work-group), as
 * `kfdq demo --request-shape resnet18` passes an H100 trace scaled to the emulator.
 * With KFDQ_DEMO_HINT=1 every request is hinted (docs/shim.md, "Request hints"):
 * kfdq_request_begin() at the request's due time, KFDQ_DEMO_HINT_LEAD_US µs (default 1000) of
 * host work before its first launch (what an inference server does between knowing of a request
 * and launching it: parsing, decoding, the copy), kfdq_request_end() after its synchronize.
 * The functions are looked up at run time (dlsym, as shim/include/kfdq.h does), so the program
 * runs without the shim; a hint the shim refuses is counted, and the summary says how many were
 * taken. The request's latency and start are still measured from its first launch.
 * After a warm-up it passes checkpoint "ready" (see common.h), then prints one line per request
 * (its latency and its start, the moment before its first launch, on CLOCK_MONOTONIC), the timed
 * window on CLOCK_MONOTONIC and a summary, and passes checkpoint "done" before it exits (its
 * queues stay until then):
 *   request <i> <latency_us> <start_us>
 *   window <start_us> <end_us>
 *   latency n <N> p50 <us> p99 <us> max <us>
 *   hints <taken> of <N>            (with KFDQ_DEMO_HINT=1)
 * (nearest-rank quantiles, the definition of kfdq::stats).
 */
#include "common.h"

#include <string.h>

struct kernel {
	uint32_t magic;
	uint32_t reserved;
	uint64_t duration_ns;
};

/* One dispatch of a request: its "kernel" (the duration of a work-group), work-groups, waves. */
struct dispatch {
	struct kernel k;
	unsigned wgs, waves;
};

#define MAX_DISPATCHES 4096

/* Parses LIST (`WGS:WAVES:WG_US,...`) into d; the count, or -1 with the reason on stderr. */
static int parse_kernels(const char *list, struct dispatch *d)
{
	int n = 0;
	const char *p = list;

	while (*p) {
		unsigned wgs, waves;
		double us;
		int used = 0;

		if (n == MAX_DISPATCHES || sscanf(p, "%u:%u:%lf%n", &wgs, &waves, &us, &used) != 3 ||
		    wgs == 0 || waves == 0 || waves > 16 || !(us > 0)) {
			fprintf(stderr, "--kernels: bad entry %d at \"%.20s\" (WGS:WAVES:WG_US, "
					"work-groups >= 1, waves 1-16, µs > 0; at most %d)\n",
				n, p, MAX_DISPATCHES);
			return -1;
		}
		d[n].k = (struct kernel){0x4B484B46u, 0, (uint64_t)(us * 1000)};
		d[n].wgs = wgs;
		d[n].waves = waves;
		n++;
		p += used;
		if (*p == ',')
			p++;
	}
	return n;
}

typedef int (*hint_fn)(void);

/* The shim's hint entry point `name` (NULL without the shim), as kfdq.h looks it up. */
static hint_fn lookup_hint(const char *name)
{
	hint_fn f;
	void *p = dlsym(RTLD_DEFAULT, name);

	memcpy(&f, &p, sizeof f);
	return f;
}

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

/* The host work between a hint and the first launch: sleeps `us` (the CPU stays free for the
 * emulator; only the time matters here). */
static void host_work(double us)
{
	struct timespec ts = {(time_t)(us / 1e6), (long)((us - (time_t)(us / 1e6) * 1e6) * 1000)};

	nanosleep(&ts, NULL);
}

int main(int argc, char **argv)
{
	static struct dispatch d[MAX_DISPATCHES];
	int kernels;

	if (argc == 5 && strcmp(argv[3], "--kernels") == 0) {
		kernels = parse_kernels(argv[4], d);
		if (kernels <= 0)
			return 2;
	} else if (argc == 6) {
		kernels = atoi(argv[3]);
		if (kernels < 1 || kernels > MAX_DISPATCHES) {
			fprintf(stderr, "KERNELS %s: 1 to %d\n", argv[3], MAX_DISPATCHES);
			return 2;
		}
		for (int j = 0; j < kernels; j++)
			d[j] = (struct dispatch){{0x4B484B46u, 0, (uint64_t)(atof(argv[4]) * 1000)},
						 (unsigned)atoi(argv[5]), 4};
	} else {
		fprintf(stderr, "usage: %s N GAP_MS KERNELS WG_US WGS\n"
				"       %s N GAP_MS --kernels WGS:WAVES:WG_US,...\n",
			argv[0], argv[0]);
		return 2;
	}
	int n = atoi(argv[1]);
	double gap_us = atof(argv[2]) * 1000;
	double *lat = calloc((size_t)n, sizeof(*lat));
	const char *hint_env = getenv("KFDQ_DEMO_HINT");
	const char *lead_env = getenv("KFDQ_DEMO_HINT_LEAD_US");
	int hint = hint_env && strcmp(hint_env, "1") == 0;
	double lead_us = lead_env ? atof(lead_env) : 1000;
	hint_fn begin = hint ? lookup_hint("kfdq_request_begin") : NULL;
	hint_fn end = hint ? lookup_hint("kfdq_request_end") : NULL;
	int taken = 0, refused = 0;

	if (hint && (!begin || !end))
		fprintf(stderr, "KFDQ_DEMO_HINT=1 but kfdq_request_begin/end are not in the process "
				"(the shim is not preloaded): requests go unhinted\n");
	if (!(lead_us >= 0 && lead_us <= 1e6)) {
		fprintf(stderr, "KFDQ_DEMO_HINT_LEAD_US=%s: 0 to 1000000 µs\n", lead_env);
		return 2;
	}

	/* Warm-up: the null stream's queue exists before the first timed request. */
	CHECK(hipLaunchKernel((const void *)&d[0].k, (dim3){1, 1, 1}, (dim3){64, 1, 1}, NULL, 0, 0));
	CHECK(hipStreamSynchronize(0));
	checkpoint("ready");
	double start = now_us();
	for (int i = 0; i < n; i++) {
		double due = start + i * gap_us;
		double t = now_us();
		if (t < due)
			sleep_ms((long)((due - t) / 1000));
		int hinted = 0;
		if (begin) {
			int r = begin();
			hinted = r == 0;
			taken += hinted;
			if (!hinted && refused++ == 0)
				fprintf(stderr, "kfdq_request_begin: %d (docs/shim.md, \"Request hints\")\n", r);
			host_work(lead_us);
		}
		double t0 = now_us();
		for (int j = 0; j < kernels; j++)
			CHECK(hipLaunchKernel((const void *)&d[j].k, (dim3){d[j].wgs, 1, 1},
					      (dim3){64 * d[j].waves, 1, 1}, NULL, 0, 0));
		CHECK(hipStreamSynchronize(0));
		lat[i] = now_us() - t0;
		if (hinted)
			end();
		printf("request %d %.0f %.0f\n", i, lat[i], t0);
	}
	printf("window %.0f %.0f\n", start, now_us());
	qsort(lat, (size_t)n, sizeof(*lat), cmp);
	printf("latency n %d p50 %.0f p99 %.0f max %.0f\n", n, lat[nearest_rank(n, 0.5) - 1],
	       lat[nearest_rank(n, 0.99) - 1], lat[n - 1]);
	if (hint)
		printf("hints %d of %d\n", taken, n);
	fflush(stdout);
	checkpoint("done");
	free(lat);
	return 0;
}
