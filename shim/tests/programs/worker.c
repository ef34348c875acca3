/*
 * worker.c KERNEL_US [LIB]: keeps streams busy for the control tests.
 *
 * Creates streams "hi" (HIP priority -1) and "lo" (priority 1) and uses the null stream; one
 * thread per stream launches KERNEL_US-microsecond kernels back to back (at most 4 in flight),
 * until the file $KFDQ_TEST_STOP exists. With LIB, a fourth thread runs launches from inside
 * that library (see libstreams.c), on the library's own stream. Prints the queues first
 * ("queue ..." lines and "READY"), and "count <name> <launches>" at the end.
 */
#include "common.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>

static struct fakehip_kernel kern;
static const dim3 grid = {2, 1, 1}, block = {64, 1, 1};
static const char *stop_file;
static int (*lib_launch)(uint64_t);
static uint64_t kernel_ns;

struct job {
	const char *name;
	hipStream_t s;
	int lib;
	atomic_long count;
};

static int stopped(void)
{
	return stop_file && access(stop_file, F_OK) == 0;
}

static void *run(void *arg)
{
	struct job *j = arg;

	while (!stopped()) {
		if (j->lib) {
			if (lib_launch(kernel_ns) != hipSuccess)
				exit(1);
		} else {
			CHECK(hipLaunchKernel(&kern, grid, block, NULL, 0, j->s));
			if (atomic_load(&j->count) % 4 == 3)
				CHECK(hipStreamSynchronize(j->s));
		}
		atomic_fetch_add(&j->count, 1);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	struct job jobs[4] = {{"hi", NULL, 0, 0}, {"lo", NULL, 0, 0}, {"null", NULL, 0, 0}, {"lib", NULL, 1, 0}};
	int njobs = 3;
	pthread_t t[4];

	if (argc < 2) {
		fprintf(stderr, "usage: %s KERNEL_US [LIB]\n", argv[0]);
		return 2;
	}
	kernel_ns = strtoull(argv[1], NULL, 10) * 1000ull;
	kern = (struct fakehip_kernel)FAKEHIP_KERNEL(kernel_ns);
	stop_file = getenv("KFDQ_TEST_STOP");
	CHECK(hipStreamCreateWithPriority(&jobs[0].s, hipStreamDefault, -1));
	CHECK(hipStreamCreateWithPriority(&jobs[1].s, hipStreamDefault, 1));
	if (argc > 2) {
		void *h = dlopen(argv[2], RTLD_NOW | RTLD_GLOBAL);
		int (*setup)(void);

		if (!h) {
			fprintf(stderr, "dlopen %s: %s\n", argv[2], dlerror());
			return 1;
		}
		setup = (int (*)(void))dlsym(h, "lib_setup");
		lib_launch = (int (*)(uint64_t))dlsym(h, "lib_launch");
		if (!setup || !lib_launch || setup() != 0)
			return 1;
		njobs = 4;
	}
	for (int i = 0; i < 3; i++)
		CHECK(hipLaunchKernel(&kern, grid, block, NULL, 0, jobs[i].s));
	CHECK(hipDeviceSynchronize());
	print_queue("hi", jobs[0].s);
	print_queue("lo", jobs[1].s);
	print_queue("null", NULL);
	printf("READY %d\n", (int)getpid());
	fflush(stdout);
	for (int i = 0; i < njobs; i++)
		pthread_create(&t[i], NULL, run, &jobs[i]);
	for (int i = 0; i < njobs; i++)
		pthread_join(t[i], NULL);
	CHECK(hipDeviceSynchronize());
	for (int i = 0; i < njobs; i++)
		printf("count %s %ld\n", jobs[i].name, atomic_load(&jobs[i].count));
	return 0;
}
