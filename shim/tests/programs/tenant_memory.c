/*
 * tenant_memory.c: a tenant that frees its queue's index memory before destroying the queue,
 * while the shim reads those indices. Usage: tenant_memory MODE [refuse]
 *
 *   registry  as unmapped.c: a queue on stream "a", its index page unmapped (a PROT_NONE range
 *             left there), then a launch on the null stream, around which the shim reads the
 *             indices of every queue it knows, under its registry lock;
 *   window    under an in-flight window (KFDQ_WINDOW): two launches on "a" (its queue's index
 *             addresses cached by the window), the page unmapped, a third launch on "a", whose
 *             window check reads the cached addresses without the lock.
 *   refuse    process_vm_readv is refused (a seccomp filter, as some container profiles do),
 *             so the shim cannot take the kernel-checked read it prefers.
 *
 * A fault on the freed page is handled: one at an instruction of libkfdq_shim.so prints
 * "shim faulted at <addr>" and exits 86 (the shim killed its host process); one anywhere else
 * (the runtime touching what it freed, as a real runtime would be wrong to) maps a fresh page
 * there and goes on. Prints "unmapped <queue>", "launched", and leaves with _exit(0).
 */
#include "common.h"

#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <stddef.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <ucontext.h>

static struct fakehip_kernel kern = FAKEHIP_KERNEL(100000); /* 0.1 ms */
static uintptr_t freed;

static void say(const char *s)
{
	ssize_t r = write(2, s, strlen(s));
	(void)r;
}

static void on_segv(int sig, siginfo_t *si, void *ctx)
{
	ucontext_t *uc = ctx;
	uintptr_t page = (uintptr_t)si->si_addr & ~(uintptr_t)4095;
	void *ip;
	Dl_info di;

	(void)sig;
#if defined(__x86_64__)
	ip = (void *)uc->uc_mcontext.gregs[REG_RIP];
#elif defined(__aarch64__)
	ip = (void *)uc->uc_mcontext.pc;
#else
	ip = NULL;
	(void)uc;
#endif
	if (page != freed) {
		signal(SIGSEGV, SIG_DFL);
		return;
	}
	if (ip && dladdr(ip, &di) && di.dli_fname && strstr(di.dli_fname, "libkfdq_shim")) {
		char line[128];
		snprintf(line, sizeof(line), "shim faulted at %p\n", ip);
		say(line);
		_exit(86);
	}
	if (mmap((void *)page, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
		 -1, 0) != (void *)page) {
		say("mmap in the handler failed\n");
		_exit(87);
	}
}

static void refuse_process_vm_readv(void)
{
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_process_vm_readv, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = {.len = sizeof(f) / sizeof(f[0]), .filter = f};

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
	    prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
		perror("seccomp");
		exit(1);
	}
}

int main(int argc, char **argv)
{
	hipStream_t a;
	fakehipQueueInfo info;
	dim3 grid = {1, 1, 1}, block = {64, 1, 1};
	struct sigaction sa;
	int window;

	if (argc < 2) {
		fprintf(stderr, "usage: tenant_memory registry|window [refuse]\n");
		return 2;
	}
	window = strcmp(argv[1], "window") == 0;
	if (argc > 2 && strcmp(argv[2], "refuse") == 0)
		refuse_process_vm_readv();
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_segv;
	sa.sa_flags = SA_SIGINFO;
	sigaction(SIGSEGV, &sa, NULL);
	sigaction(SIGBUS, &sa, NULL);

	CHECK(hipStreamCreateWithPriority(&a, hipStreamNonBlocking, -1));
	CHECK(hipLaunchKernel(&kern, grid, block, NULL, 0, a));
	CHECK(hipStreamSynchronize(a));
	CHECK(hipLaunchKernel(&kern, grid, block, NULL, 0, a));
	CHECK(hipStreamSynchronize(a));
	print_queue("a", a);
	CHECK((hipError_t)fakehipStreamQueueInfo(a, &info));
	freed = (uintptr_t)info.write_pointer & ~(uintptr_t)4095;
	if (((uintptr_t)info.read_pointer & ~(uintptr_t)4095) != freed) {
		fprintf(stderr, "the indices are on two pages\n");
		return 1;
	}
	/* Freed before any DESTROY_QUEUE, the range kept unreadable. */
	if (munmap((void *)freed, 4096) != 0 ||
	    mmap((void *)freed, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) !=
		    (void *)freed) {
		perror("munmap/mmap");
		return 1;
	}
	if (window) {
		CHECK(hipLaunchKernel(&kern, grid, block, NULL, 0, a));
	} else {
		CHECK(hipLaunchKernel(&kern, grid, block, NULL, 0, NULL));
		CHECK(hipStreamSynchronize(NULL));
	}
	printf("unmapped %u\n", info.queue_id);
	printf("launched\n");
	fflush(stdout);
	_exit(0);
}
