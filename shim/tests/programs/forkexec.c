/*
 * forkexec.c fork|exec: process lifetime under the shim.
 *
 *   fork  the parent uses the null stream, forks; the child (fresh KFD state) creates a
 *         stream and uses the null stream; both print their queues and wait at a checkpoint;
 *         the parent then reaps the child and exits with its status
 *   exec  uses the null stream, then execs `PROGRAM null` (same pid, shim loaded again)
 */
#include "common.h"

#include <string.h>
#include <sys/wait.h>

static struct fakehip_kernel kern = FAKEHIP_KERNEL(200000);
static const dim3 grid = {2, 1, 1}, block = {64, 1, 1};

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "";

	CHECK(hipLaunchKernel(&kern, grid, block, NULL, 0, NULL));
	CHECK(hipDeviceSynchronize());
	print_queue("parent-null", NULL);
	if (!strcmp(mode, "fork")) {
		int status = 0;
		pid_t pid = fork();

		if (pid < 0)
			return 1;
		if (pid == 0) {
			hipStream_t s;

			CHECK(hipStreamCreateWithPriority(&s, hipStreamDefault, -1));
			CHECK(hipLaunchKernel(&kern, grid, block, NULL, 0, s));
			CHECK(hipLaunchKernel(&kern, grid, block, NULL, 0, NULL));
			CHECK(hipDeviceSynchronize());
			print_queue("child-high", s);
			print_queue("child-null", NULL);
			checkpoint("child");
			CHECK(hipStreamDestroy(s));
			_exit(0);
		}
		checkpoint("parent");
		if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
			fprintf(stderr, "child failed (status %d)\n", status);
			return 1;
		}
		return 0;
	}
	if (!strcmp(mode, "exec") && argc > 2) {
		checkpoint("pre-exec");
		fflush(stdout);
		execl(argv[2], argv[2], "null", (char *)NULL);
		perror("execl");
		return 1;
	}
	fprintf(stderr, "usage: %s fork | exec PROGRAM\n", argv[0]);
	return 2;
}
