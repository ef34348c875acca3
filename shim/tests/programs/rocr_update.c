/*
 * rocr_update.c: a runtime that changes its own queue with UPDATE_QUEUE, as ROCr does for
 * hsa_amd_queue_set_priority (percentage 100 + new priority) and AqlQueue::Resume
 * (percentage 100). Creates a low-priority stream, then at checkpoint "deactivated" (the test
 * has deactivated the queue through the shim) opens its own /dev/kfd fd and sends
 * UPDATE_QUEUE(percentage 100, priority 11) on the stream's queue; prints "update <rc>".
 */
#include "common.h"

#include <fcntl.h>
#include <sys/ioctl.h>

#include "kfdq/kfd_abi.h"

static struct fakehip_kernel kern = FAKEHIP_KERNEL(100000);

int main(void)
{
	hipStream_t s;
	fakehipQueueInfo info;
	struct kfd_ioctl_update_queue_args a = {0};
	char path[4096];
	const char *root = getenv("KFDQ_ROOT");
	dim3 grid = {1, 1, 1}, block = {64, 1, 1};
	int fd, r;

	CHECK(hipStreamCreateWithPriority(&s, hipStreamDefault, 1));
	CHECK(hipLaunchKernel(&kern, grid, block, NULL, 0, s));
	CHECK(hipStreamSynchronize(s));
	print_queue("lo", s);
	CHECK((hipError_t)fakehipStreamQueueInfo(s, &info));
	checkpoint("deactivated");
	snprintf(path, sizeof(path), "%s/dev/kfd", root ? root : "");
	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		perror("open kfd");
		return 1;
	}
	a.ring_base_address = info.ring_base;
	a.queue_id = info.queue_id;
	a.ring_size = info.ring_size;
	a.queue_percentage = 100;
	a.queue_priority = 11;
	r = ioctl(fd, AMDKFD_IOC_UPDATE_QUEUE, &a);
	printf("update %d\n", r);
	fflush(stdout);
	checkpoint("updated");
	close(fd);
	CHECK(hipLaunchKernel(&kern, grid, block, NULL, 0, s));
	CHECK(hipStreamSynchronize(s));
	CHECK(hipStreamDestroy(s));
	return 0;
}
