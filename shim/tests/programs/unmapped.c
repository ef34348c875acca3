/*
 * unmapped.c: a runtime that frees a queue's memory without DESTROY_QUEUE. Creates a
 * non-blocking high-priority stream "a" (its own queue pool, so the null stream gets another
 * queue, and the null stream does not wait for it), runs a
 * kernel on it, then unmaps the page holding its queue's write and read indices and leaves
 * the range unreadable ("unmapped <queue>"). Then launches on the null stream, whose queue is not known yet: around that launch
 * the shim compares the write indices of every queue it knows. Prints "launched", checkpoint
 * "end", and leaves with _exit (fakehip's teardown would touch the unmapped page itself).
 */
#include "common.h"

#include <sys/mman.h>

static struct fakehip_kernel kern = FAKEHIP_KERNEL(100000); /* 0.1 ms */

int main(void)
{
	hipStream_t a;
	fakehipQueueInfo info;
	dim3 grid = {1, 1, 1}, block = {64, 1, 1};
	uintptr_t page;

	CHECK(hipStreamCreateWithPriority(&a, hipStreamNonBlocking, -1));
	CHECK(hipLaunchKernel(&kern, grid, block, NULL, 0, a));
	CHECK(hipStreamSynchronize(a));
	print_queue("a", a);
	CHECK((hipError_t)fakehipStreamQueueInfo(a, &info));
	page = (uintptr_t)info.write_pointer & ~(uintptr_t)4095;
	if (((uintptr_t)info.read_pointer & ~(uintptr_t)4095) != page) {
		fprintf(stderr, "the indices are on two pages\n");
		return 1;
	}
	/* Freed, and the range kept unreadable (a PROT_NONE stand-in for whatever the process maps
	 * there next; the kernel still holds the BO, so a new one may not reuse the address). */
	if (munmap((void *)page, 4096) != 0 ||
	    mmap((void *)page, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) !=
		    (void *)page) {
		perror("munmap/mmap");
		return 1;
	}
	printf("unmapped %u\n", info.queue_id);
	fflush(stdout);
	CHECK(hipLaunchKernel(&kern, grid, block, NULL, 0, NULL));
	CHECK(hipStreamSynchronize(NULL));
	print_queue("null", NULL);
	printf("launched\n");
	fflush(stdout);
	checkpoint("end");
	_exit(0);
}
