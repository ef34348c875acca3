/*
 * flood.c WG_US WGS IN_FLIGHT [STREAMS]: a best-effort batch job shaped like a training loop of
 * long GEMMs. On each of STREAMS (default 1, at most 8) created streams it keeps IN_FLIGHT
 * dispatches of WGS work-groups (256 threads = 4 waves each, WG_US µs per work-group) queued
 * until the file named by $KFDQ_TEST_STOP exists. Prints its queues (`queue flood ...` for the
 * first stream, `queue flood<k> ...` for the others), `flooding` once the first dispatch is
 * queued, with $KFDQ_FLOOD_PROGRESS set `done <t_us>` (CLOCK_MONOTONIC) as each dispatch is
 * seen complete, and at the end `flood dispatches <completed> seconds <elapsed>`. A SIGUSR1 prints
 * `signal USR1` from its handler (the tracer tests check that a traced process gets its signals).
 * With $KFDQ_FLOOD_NODUMP set it makes itself non-dumpable first (prctl PR_SET_DUMPABLE 0).
 */
#include "common.h"

#include <signal.h>
#include <sys/prctl.h>

static void on_usr1(int sig)
{
	static const char line[] = "signal USR1\n";

	(void)sig;
	if (write(1, line, sizeof(line) - 1) < 0) {
		/* nothing to do in a handler */
	}
}

struct kernel {
	uint32_t magic;
	uint32_t reserved;
	uint64_t duration_ns;
};

#define MAX_STREAMS 8
#define MAX_IN_FLIGHT 64

int main(int argc, char **argv)
{
	if (argc != 4 && argc != 5) {
		fprintf(stderr, "usage: %s WG_US WGS IN_FLIGHT [STREAMS]\n", argv[0]);
		return 2;
	}
	struct kernel k = {0x4B484B46u, 0, (uint64_t)(atof(argv[1]) * 1000)};
	int wgs = atoi(argv[2]), in_flight = atoi(argv[3]), streams = argc == 5 ? atoi(argv[4]) : 1;
	const char *stop = getenv("KFDQ_TEST_STOP");
	int progress = getenv("KFDQ_FLOOD_PROGRESS") != NULL;
	hipStream_t s[MAX_STREAMS];
	hipEvent_t done[MAX_STREAMS][MAX_IN_FLIGHT];
	long completed = 0, issued = 0;
	struct timespec t0, t1;

	if (in_flight < 1 || in_flight > MAX_IN_FLIGHT || streams < 1 || streams > MAX_STREAMS)
		return 2;
	signal(SIGUSR1, on_usr1);
	if (getenv("KFDQ_FLOOD_NODUMP") && prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0)
		return 2;
	for (int j = 0; j < streams; j++) {
		char name[32];

		CHECK(hipStreamCreate(&s[j]));
		for (int i = 0; i < in_flight; i++)
			CHECK(hipEventCreate(&done[j][i]));
		if (j == 0)
			snprintf(name, sizeof(name), "flood");
		else
			snprintf(name, sizeof(name), "flood%d", j);
		print_queue(name, s[j]);
	}
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		/* Round robin over the streams; each keeps its own window of IN_FLIGHT. */
		int j = (int)(issued % streams);
		long round = issued / streams;
		int slot = (int)(round % in_flight);

		if (round >= in_flight) {
			/* Bound the window: wait for the dispatch issued IN_FLIGHT rounds ago. */
			CHECK(hipEventSynchronize(done[j][slot]));
			completed++;
			if (progress) {
				struct timespec t;

				clock_gettime(CLOCK_MONOTONIC, &t);
				printf("done %.0f\n", t.tv_sec * 1e6 + t.tv_nsec / 1e3);
				fflush(stdout);
			}
		}
		if (stop && access(stop, F_OK) == 0)
			break;
		CHECK(hipLaunchKernel((const void *)&k, (dim3){(unsigned)wgs, 1, 1}, (dim3){256, 1, 1}, NULL,
				      0, s[j]));
		CHECK(hipEventRecord(done[j][slot], s[j]));
		if (issued++ == 0) {
			printf("flooding\n");
			fflush(stdout);
		}
	}
	for (int j = 0; j < streams; j++)
		CHECK(hipStreamSynchronize(s[j]));
	clock_gettime(CLOCK_MONOTONIC, &t1);
	printf("flood dispatches %ld seconds %.3f\n", completed,
	       (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9);
	fflush(stdout);
	return 0;
}
