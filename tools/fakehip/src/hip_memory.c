/*
 * hip_memory.c (layer 7): the HIP memory calls. Memory is plain host memory
 * in this fake; copies and fills happen on the CPU, with a barrier packet on
 * the stream.
 */
#include "fakehip_internal.h"

/* ---- memory: plain host memory in this fake ---- */

static hipError_t host_alloc(void **ptr, size_t size)
{
	void *p = NULL;

	if (!ptr)
		return hipErrorInvalidValue;
	*ptr = NULL;
	if (size == 0)
		return hipSuccess;
	if (posix_memalign(&p, 256, size))
		return hipErrorOutOfMemory;
	*ptr = p;
	return hipSuccess;
}

FH_API hipError_t hipMalloc(void **ptr, size_t size)
{
	hipError_t e = ensure_init();

	if (e != hipSuccess)
		return ret(e);
	return ret(host_alloc(ptr, size));
}

FH_API hipError_t hipHostMalloc(void **ptr, size_t size, unsigned int flags)
{
	hipError_t e = ensure_init();

	(void)flags;
	if (e != hipSuccess)
		return ret(e);
	return ret(host_alloc(ptr, size));
}

FH_API hipError_t hipFree(void *ptr)
{
	hipError_t e = ensure_init();

	if (e != hipSuccess)
		return ret(e);
	free(ptr);
	return hipSuccess;
}

FH_API hipError_t hipHostFree(void *ptr)
{
	hipError_t e = ensure_init();

	if (e != hipSuccess)
		return ret(e);
	free(ptr);
	return hipSuccess;
}

static hipError_t check_stream(hipStream_t h)
{
	struct fh_stream *st;
	hipError_t e = lock_init();

	if (e != hipSuccess)
		return e;
	e = resolve_stream(h, 0, 0, &st);
	pthread_mutex_unlock(&g_lock);
	return e;
}

FH_API hipError_t hipMallocAsync(void **dev_ptr, size_t size, hipStream_t stream)
{
	hipError_t e = check_stream(stream);

	if (e != hipSuccess)
		return ret(e);
	return ret(host_alloc(dev_ptr, size));
}

FH_API hipError_t hipFreeAsync(void *dev_ptr, hipStream_t stream)
{
	hipError_t e = check_stream(stream);

	if (e != hipSuccess)
		return ret(e);
	free(dev_ptr);
	return hipSuccess;
}

/*
 * Copies and fills happen on the CPU at call time; a zero-duration barrier
 * packet is enqueued so the operation is visible (and ordered) on the queue.
 * The synchronous forms also wait for that packet before touching memory.
 */
static hipError_t mem_op(void *dst, const void *src, int value, size_t n, int is_set, hipStream_t h, int spt,
			 int async)
{
	hipError_t e;

	if (n && (!dst || (!is_set && !src)))
		return hipErrorInvalidValue;
	e = submit(h, spt, NULL, 0, NULL, NULL);
	if (e != hipSuccess)
		return e;
	if (!async) {
		e = stream_wait(h, spt);
		if (e != hipSuccess)
			return e;
	}
	if (n) {
		if (is_set)
			memset(dst, value, n);
		else
			memmove(dst, src, n);
	}
	return hipSuccess;
}

static hipError_t check_kind(hipMemcpyKind kind)
{
	return ((int)kind < 0 || kind > hipMemcpyDefault) ? hipErrorInvalidMemcpyDirection : hipSuccess;
}

FH_API hipError_t hipMemcpy(void *dst, const void *src, size_t sizeBytes, hipMemcpyKind kind)
{
	hipError_t e = check_kind(kind);

	return ret(e != hipSuccess ? e : mem_op(dst, src, 0, sizeBytes, 0, NULL, 0, 0));
}

FH_API hipError_t hipMemcpy_spt(void *dst, const void *src, size_t sizeBytes, hipMemcpyKind kind)
{
	hipError_t e = check_kind(kind);

	return ret(e != hipSuccess ? e : mem_op(dst, src, 0, sizeBytes, 0, NULL, 1, 0));
}

FH_API hipError_t hipMemcpyAsync(void *dst, const void *src, size_t sizeBytes, hipMemcpyKind kind,
				 hipStream_t stream)
{
	hipError_t e = check_kind(kind);

	return ret(e != hipSuccess ? e : mem_op(dst, src, 0, sizeBytes, 0, stream, 0, 1));
}

FH_API hipError_t hipMemcpyAsync_spt(void *dst, const void *src, size_t sizeBytes, hipMemcpyKind kind,
				     hipStream_t stream)
{
	hipError_t e = check_kind(kind);

	return ret(e != hipSuccess ? e : mem_op(dst, src, 0, sizeBytes, 0, stream, 1, 1));
}

FH_API hipError_t hipMemset(void *dst, int value, size_t sizeBytes)
{
	return ret(mem_op(dst, NULL, value, sizeBytes, 1, NULL, 0, 0));
}

FH_API hipError_t hipMemset_spt(void *dst, int value, size_t sizeBytes)
{
	return ret(mem_op(dst, NULL, value, sizeBytes, 1, NULL, 1, 0));
}

FH_API hipError_t hipMemsetAsync(void *dst, int value, size_t sizeBytes, hipStream_t stream)
{
	return ret(mem_op(dst, NULL, value, sizeBytes, 1, stream, 0, 1));
}

FH_API hipError_t hipMemsetAsync_spt(void *dst, int value, size_t sizeBytes, hipStream_t stream)
{
	return ret(mem_op(dst, NULL, value, sizeBytes, 1, stream, 1, 1));
}
