/*
 * runtime.c (layer 0): fakehip's global state and the small helpers every
 * file uses: logging, clock, the poll interval, KFD ioctl, errno mapping and
 * the calling thread's device. It calls no other file of the library.
 */
#include "fakehip_internal.h"

/* poll interval of every wait (ns) */
#define FH_POLL_NS 50000l

/* ------------------------------------------------------------------ */
/* state                                                              */
/* ------------------------------------------------------------------ */

struct fh_global G = {.kfd_fd = -1, .gen = 1, .next_uid = 1};

pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

__thread int t_device;
__thread hipError_t t_last_error;
__thread int t_ncfg;

/* ------------------------------------------------------------------ */
/* small helpers                                                      */
/* ------------------------------------------------------------------ */

void fh_log(const char *fmt, ...)
{
	char buf[512];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(buf, sizeof(buf) - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n > sizeof(buf) - 2)
		n = (int)sizeof(buf) - 2;
	buf[n++] = '\n';
	/* one write() so lines from several threads/processes do not interleave */
	if (write(2, buf, (size_t)n) < 0) {
		/* nothing sensible to do */
	}
}

uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void nap(void)
{
	struct timespec ts = {0, FH_POLL_NS};

	nanosleep(&ts, NULL);
}

int kfd_ioctl(unsigned long req, void *arg)
{
	int r;

	do {
		r = ioctl(G.kfd_fd, req, arg);
	} while (r == -1 && (errno == EINTR || errno == EAGAIN));
	return r == -1 ? -errno : 0;
}

hipError_t errno_to_hip(int neg)
{
	switch (-neg) {
	case ENOMEM:
	case ENOSPC:
		return hipErrorOutOfMemory;
	case EINVAL:
	case EFAULT:
		return hipErrorInvalidValue;
	case EBADF:
	case ESRCH:
		return hipErrorInvalidContext;
	default:
		return hipErrorOperatingSystem;
	}
}

int cur_dev(void)
{
	return (t_device >= 0 && t_device < G.ndev) ? t_device : 0;
}
