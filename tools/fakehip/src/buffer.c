/*
 * buffer.c (layer 1): the buffers behind a KFD queue: USERPTR allocations
 * (anonymous host memory registered with ALLOC_MEMORY_OF_GPU and mapped with
 * MAP_MEMORY_TO_GPU, CPU VA == GPU VA).
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
