/*
 * memory.c: memory. The buffers behind a KFD queue are USERPTR allocations
 * (anonymous host memory registered with ALLOC_MEMORY_OF_GPU and mapped with
 * MAP_MEMORY_TO_GPU, CPU VA == GPU VA). The HIP memory API hands out plain
 * host memory and copies/fills on the CPU, with a barrier packet on the
 * stream.
 */
#include "fakehip_internal.h"

/* ------------------------------------------------------------------ */
/* GPU memory: USERPTR allocations with CPU VA == GPU VA              */
/* ------------------------------------------------------------------ */

void buf_free(struct fh_dev *d, struct fh_buf *b, int talk_to_kfd)
{
	if (talk_to_kfd && b->mapped) {
		struct kfd_ioctl_unmap_memory_from_gpu_args um = {0};
		uint32_t id = d->gpu_id;
		int r;

		um.handle = b->handle;
		um.device_ids_array_ptr = (uint64_t)(uintptr_t)&id;
		um.n_devices = 1;
		r = kfd_ioctl(AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU, &um);
		if (r)
			DBG(1, "UNMAP_MEMORY_FROM_GPU failed: %s", strerror(-r));
	}
	if (talk_to_kfd && b->allocated) {
		struct kfd_ioctl_free_memory_of_gpu_args fr = {.handle = b->handle};
		int r = kfd_ioctl(AMDKFD_IOC_FREE_MEMORY_OF_GPU, &fr);

		if (r)
			DBG(1, "FREE_MEMORY_OF_GPU failed: %s", strerror(-r));
	}
	if (talk_to_kfd && b->ptr)
		munmap(b->ptr, b->size);
	memset(b, 0, sizeof(*b));
}

hipError_t buf_alloc(struct fh_dev *d, struct fh_buf *b, size_t size, const char *what)
{
	struct kfd_ioctl_alloc_memory_of_gpu_args al = {0};
	struct kfd_ioctl_map_memory_to_gpu_args mp = {0};
	uint32_t id = d->gpu_id;
	void *p;
	int r;

	memset(b, 0, sizeof(*b));
	size = (size_t)align_up(size, FH_PAGE);
	p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED) {
		DBG(1, "mmap of %zu bytes for %s failed: %s", size, what, strerror(errno));
		return hipErrorOutOfMemory;
	}
	/* like libhsakmt's CWSR area: a forked child must not inherit queue memory */
	madvise(p, size, MADV_DONTFORK);
	b->ptr = p;
	b->size = size;

	al.va_addr = (uint64_t)(uintptr_t)p;
	al.size = size;
	al.gpu_id = d->gpu_id;
	al.flags = KFD_IOC_ALLOC_MEM_FLAGS_USERPTR | KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE |
		   KFD_IOC_ALLOC_MEM_FLAGS_EXECUTABLE;
	al.mmap_offset = (uint64_t)(uintptr_t)p;
	r = kfd_ioctl(AMDKFD_IOC_ALLOC_MEMORY_OF_GPU, &al);
	if (r) {
		DBG(1, "ALLOC_MEMORY_OF_GPU (%s, %zu bytes) failed: %s", what, size, strerror(-r));
		buf_free(d, b, 1);
		return errno_to_hip(r);
	}
	b->handle = al.handle;
	b->allocated = 1;

	mp.handle = al.handle;
	mp.device_ids_array_ptr = (uint64_t)(uintptr_t)&id;
	mp.n_devices = 1;
	r = kfd_ioctl(AMDKFD_IOC_MAP_MEMORY_TO_GPU, &mp);
	if (r) {
		DBG(1, "MAP_MEMORY_TO_GPU (%s) failed: %s", what, strerror(-r));
		buf_free(d, b, 1);
		return errno_to_hip(r);
	}
	b->mapped = 1;
	return hipSuccess;
}

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
