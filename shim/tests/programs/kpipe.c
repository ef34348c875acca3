/*
 * kpipe.c: a process that never opens /dev/kfd but issues an ioctl with amdkfd's 'K' type and
 * CREATE_QUEUE's number on a pipe (any driver may use the same type byte). Prints
 * "ioctl <ret> <errno>" and exits; no HIP call.
 */
#include <errno.h>
#include <stdio.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <kfdq/kfd_abi.h>

int main(void)
{
	int p[2];
	struct kfd_ioctl_create_queue_args a = {0};

	if (pipe(p))
		return 1;
	int r = ioctl(p[0], AMDKFD_IOC_CREATE_QUEUE, &a);
	printf("ioctl %d %d\n", r, r < 0 ? errno : 0);
	return 0;
}
