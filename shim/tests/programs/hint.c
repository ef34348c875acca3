/*
 * hint.c KERNELS WG_US WGS: a latency client that hints its request (shim/include/kfdq.h). It
 * does not link the shim: the hint's functions are looked up at run time, so it runs with and
 * without the shim preloaded. Steps, each after its checkpoint (common.h):
 *   warm-up: one launch on the null stream and a synchronisation (its queue exists), then
 *     "symbols <begin found 0/1> <end found 0/1>"
 *   "ready":   kfdq_hint_begin()                         -> "begin <rc>"
 *              (with HINT_WAIT_AGENT set: again every ms while it says no agent or not allowed
 *              yet, up to 60 s: the agent's allowance may be on its way)
 *   "work":    KERNELS dispatches of WGS work-groups x WG_US µs on the null stream, synchronised
 *                                                        -> "worked"
 *   "end":     kfdq_hint_end() twice                     -> "end <rc>", "end2 <rc>"
 *   "threads": 8 threads, each 1000 x (begin, end)       -> "threads <begins ok> <ends ok>",
 *              then one more end                         -> "after <rc>"
 *   "done":    exit.
 */
#include "common.h"

#include <pthread.h>

#include "kfdq.h"

struct kernel {
	uint32_t magic;
	uint32_t reserved;
	uint64_t duration_ns;
};

#define THREADS 8
#define ROUNDS 1000

static int counts[THREADS][2];

static void *hinter(void *arg)
{
	int *c = arg;

	for (int i = 0; i < ROUNDS; i++) {
		c[0] += kfdq_hint_begin() == KFDQ_OK;
		c[1] += kfdq_hint_end() == KFDQ_OK;
	}
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: %s KERNELS WG_US WGS\n", argv[0]);
		return 2;
	}
	int kernels = atoi(argv[1]), wgs = atoi(argv[3]);
	struct kernel k = {0x4B484B46u, 0, (uint64_t)(atof(argv[2]) * 1000)};

	CHECK(hipLaunchKernel((const void *)&k, (dim3){1, 1, 1}, (dim3){64, 1, 1}, NULL, 0, 0));
	CHECK(hipStreamSynchronize(0));
	printf("symbols %d %d\n", kfdq_lookup_("kfdq_request_begin") != NULL,
	       kfdq_lookup_("kfdq_request_end") != NULL);
	fflush(stdout);

	checkpoint("ready");
	int rc = kfdq_hint_begin();
	/* HINT_WAIT_AGENT: the agent's allowance may still be on its way (60 s at most). */
	for (int i = 0; getenv("HINT_WAIT_AGENT") && i < 60000 &&
			(rc == KFDQ_NO_AGENT || rc == KFDQ_NOT_ALLOWED);
	     i++) {
		sleep_ms(1);
		rc = kfdq_hint_begin();
	}
	printf("begin %d\n", rc);
	fflush(stdout);

	checkpoint("work");
	for (int j = 0; j < kernels; j++)
		CHECK(hipLaunchKernel((const void *)&k, (dim3){(unsigned)wgs, 1, 1}, (dim3){256, 1, 1},
				      NULL, 0, 0));
	CHECK(hipStreamSynchronize(0));
	printf("worked\n");
	fflush(stdout);

	checkpoint("end");
	printf("end %d\n", kfdq_hint_end());
	printf("end2 %d\n", kfdq_hint_end());
	fflush(stdout);

	checkpoint("threads");
	pthread_t t[THREADS];
	for (int i = 0; i < THREADS; i++)
		pthread_create(&t[i], NULL, hinter, counts[i]);
	int begins = 0, ends = 0;
	for (int i = 0; i < THREADS; i++) {
		pthread_join(t[i], NULL);
		begins += counts[i][0];
		ends += counts[i][1];
	}
	printf("threads %d %d\n", begins, ends);
	printf("after %d\n", kfdq_hint_end());
	fflush(stdout);

	checkpoint("done");
	return 0;
}
