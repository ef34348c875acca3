/*
 * kfdstub: an in-process amdkfd test double for fakehip's own tests (NOT the
 * kfdq emulator; that is tools/kfd-emu). Loaded with LD_PRELOAD, it answers
 * ioctl()/mmap() on "<KFDQ_ROOT>/dev/kfd" (a plain file the test creates),
 * enforces the amdkfd rules fakehip must follow, logs every call, and runs
 * one "CP" thread per queue that consumes AQL packets: it sleeps the
 * packet's reserved2 nanoseconds, decrements the completion signal, resets
 * the header to INVALID and advances read_dispatch_id.
 *
 * Rules enforced (errno as amdkfd): GET_VERSION 1.17; RUNTIME_ENABLE only
 * before any queue (EEXIST) and once (EBUSY); ACQUIRE_VM before CREATE_QUEUE
 * (ESRCH); USERPTR allocations with va == mmap_offset; the 6.12 buffer rules
 * (ring = one mapped BO of exactly ring_size, rptr/wptr each in a mapped
 * one-page BO, no EOP or exactly 4096, ctl_stack_size == node value,
 * ctx_save_restore_size >= node cwsr_size, CWSR BO of exactly
 * ALIGN((cwsr + debug) * num_xcc, 4096)); the CWSR per-XCC headers; BOs in
 * use by a queue cannot be unmapped/freed (EBUSY); the kfd fd works only in
 * the opener process (EBADF); doorbell mmap of exactly 8192 bytes at the
 * kfd-emu offset encoding.
 *
 * Env: KFDQ_ROOT (topology is read from its sys/ tree), KFDSTUB_LOG (log
 * file, appended), KFDSTUB_STALL=1 (CP threads never consume packets).
 * Log lines: "<pid> <OP> key=value ...".
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "kfdq/kfd_abi.h"

#define MAX_BO 4096
#define MAX_Q 1024
#define MAX_GPU 16

struct bo {
	int used;
	uint64_t handle, va, size;
	uint32_t gpu_id;
	int mapped;
	int qrefs;
};

struct squeue {
	int used;
	uint32_t qid, gpu_id, prio, ring_size;
	uint64_t ring, wptr, rptr, cwsr;
	struct bo *bos[4];
	int nbos;
	pthread_t thread;
	volatile int stop;
	uint64_t consumed;
};

struct gpu {
	uint32_t gpu_id;
	uint64_t cwsr, ctl, dbg, xcc;
	int have_sizes;
	int vm;
	volatile uint64_t *doorbells;
};

static struct {
	pid_t pid;
	int fd;
	int runtime_enabled;
	int nqueues_ever;
	int ngpu;
	struct gpu gpu[MAX_GPU];
	struct bo bo[MAX_BO];
	uint64_t next_handle;
	struct squeue q[MAX_Q];
} S = {.fd = -1};

static pthread_mutex_t S_lock = PTHREAD_MUTEX_INITIALIZER;

static int (*real_ioctl)(int, unsigned long, ...);
static void *(*real_mmap)(void *, size_t, int, int, int, off_t);
static int (*real_open)(const char *, int, ...);

static void resolve(void)
{
	if (!real_ioctl)
		real_ioctl = (int (*)(int, unsigned long, ...))dlsym(RTLD_NEXT, "ioctl");
	if (!real_mmap)
		real_mmap = (void *(*)(void *, size_t, int, int, int, off_t))dlsym(RTLD_NEXT, "mmap");
	if (!real_open)
		real_open = (int (*)(const char *, int, ...))dlsym(RTLD_NEXT, "open");
}

static void slog(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void slog(const char *fmt, ...)
{
	const char *path = getenv("KFDSTUB_LOG");
	char buf[768];
	va_list ap;
	int n, fd;

	if (!path)
		return;
	n = snprintf(buf, sizeof(buf), "%d ", (int)getpid());
	va_start(ap, fmt);
	n += vsnprintf(buf + n, sizeof(buf) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	if (n > (int)sizeof(buf) - 2)
		n = (int)sizeof(buf) - 2;
	buf[n++] = '\n';
	fd = real_open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
	if (fd >= 0) {
		if (write(fd, buf, (size_t)n) < 0) {
		}
		close(fd);
	}
}

static uint64_t align_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) / a * a;
}

static void load_topology(void)
{
	const char *root = getenv("KFDQ_ROOT");
	char path[PATH_MAX];

	S.ngpu = 0;
	for (int node = 0; node < 64 && S.ngpu < MAX_GPU; node++) {
		unsigned long long gpu_id = 0, v;
		uint64_t simd = 0, spc = 0, arr = 0, sape = 0, cwsr = 0, ctl = 0, xcc = 1;
		int have_cwsr = 0, have_ctl = 0;
		char key[128];
		FILE *f;

		snprintf(path, sizeof(path), "%s/sys/class/kfd/kfd/topology/nodes/%d/gpu_id", root ? root : "", node);
		f = fopen(path, "re");
		if (!f)
			break;
		if (fscanf(f, "%llu", &gpu_id) != 1)
			gpu_id = 0;
		fclose(f);
		if (!gpu_id)
			continue;
		snprintf(path, sizeof(path), "%s/sys/class/kfd/kfd/topology/nodes/%d/properties", root ? root : "",
			 node);
		f = fopen(path, "re");
		if (!f)
			continue;
		while (fscanf(f, "%127s %llu", key, &v) == 2) {
			if (!strcmp(key, "simd_count"))
				simd = v;
			else if (!strcmp(key, "simd_per_cu"))
				spc = v;
			else if (!strcmp(key, "array_count"))
				arr = v;
			else if (!strcmp(key, "simd_arrays_per_engine"))
				sape = v;
			else if (!strcmp(key, "num_xcc"))
				xcc = v ? v : 1;
			else if (!strcmp(key, "cwsr_size")) {
				cwsr = v;
				have_cwsr = 1;
			} else if (!strcmp(key, "ctl_stack_size")) {
				ctl = v;
				have_ctl = 1;
			}
		}
		fclose(f);
		{
			struct gpu *g = &S.gpu[S.ngpu++];
			uint64_t cu = (spc && xcc) ? simd / spc / xcc : 0;
			uint64_t waves = cu * 40, cap = sape ? arr / sape * 512 : 0;

			memset(g, 0, sizeof(*g));
			if (cap < waves)
				waves = cap;
			g->gpu_id = (uint32_t)gpu_id;
			g->cwsr = cwsr;
			g->ctl = ctl;
			g->xcc = xcc;
			g->dbg = align_up(waves * 32, 64);
			g->have_sizes = have_cwsr && have_ctl;
		}
	}
}

static struct gpu *find_gpu(uint32_t id)
{
	for (int i = 0; i < S.ngpu; i++)
		if (S.gpu[i].gpu_id == id)
			return &S.gpu[i];
	return NULL;
}

static struct bo *find_bo_handle(uint64_t h)
{
	for (int i = 0; i < MAX_BO; i++)
		if (S.bo[i].used && S.bo[i].handle == h)
			return &S.bo[i];
	return NULL;
}

/* mapped BO on gpu that starts exactly at va */
static struct bo *bo_at(uint32_t gpu, uint64_t va)
{
	for (int i = 0; i < MAX_BO; i++)
		if (S.bo[i].used && S.bo[i].mapped && S.bo[i].gpu_id == gpu && S.bo[i].va == va)
			return &S.bo[i];
	return NULL;
}

static void nsleep(uint64_t ns)
{
	struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};

	while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
	}
}

static void *cp_thread(void *arg)
{
	struct squeue *q = arg;
	uint32_t n = q->ring_size / 64;
	volatile uint64_t *wptr = (volatile uint64_t *)(uintptr_t)q->wptr;
	volatile uint64_t *rptr = (volatile uint64_t *)(uintptr_t)q->rptr;
	int stall = getenv("KFDSTUB_STALL") && !strcmp(getenv("KFDSTUB_STALL"), "1");

	while (!q->stop) {
		uint64_t r = __atomic_load_n(rptr, __ATOMIC_ACQUIRE);
		uint64_t w = __atomic_load_n(wptr, __ATOMIC_ACQUIRE);
		volatile uint8_t *pkt;
		uint16_t header;
		uint64_t dur, sig;

		if (stall || r >= w) {
			nsleep(20000);
			continue;
		}
		pkt = (volatile uint8_t *)(uintptr_t)(q->ring + (r % n) * 64);
		header = __atomic_load_n((volatile uint16_t *)pkt, __ATOMIC_ACQUIRE);
		if ((header & 0xff) == 1 || (header & 0xff) == 0) {
			nsleep(1000); /* published index but header not yet valid */
			continue;
		}
		memcpy(&dur, (const void *)(pkt + 48), 8);
		memcpy(&sig, (const void *)(pkt + 56), 8);
		if ((header & 0xff) == 2 && dur)
			nsleep(dur);
		if (sig)
			__atomic_fetch_sub((int64_t *)(uintptr_t)(sig + 8), 1, __ATOMIC_SEQ_CST);
		__atomic_store_n((volatile uint16_t *)pkt, (uint16_t)1, __ATOMIC_RELEASE);
		q->consumed++;
		__atomic_store_n(rptr, r + 1, __ATOMIC_RELEASE);
	}
	return NULL;
}

static int create_queue(struct kfd_ioctl_create_queue_args *a)
{
	struct gpu *g = find_gpu(a->gpu_id);
	struct bo *ring, *wp, *rp, *cw;
	struct squeue *q = NULL;
	uint64_t total;

	if (!g)
		return -EINVAL;
	if (!g->vm)
		return -ESRCH;
	if ((a->queue_percentage & 0xff) > 100 || a->queue_priority > 15)
		return -EINVAL;
	if (a->ring_size & (a->ring_size - 1))
		return -EINVAL;
	if (a->queue_type != KFD_IOC_QUEUE_TYPE_COMPUTE_AQL) {
		slog("REJECT create_queue type=%u", a->queue_type);
		return -EINVAL;
	}
	ring = bo_at(a->gpu_id, a->ring_base_address);
	if (!ring || ring->size != a->ring_size) {
		slog("REJECT ring bo (size %llu vs %u)", ring ? (unsigned long long)ring->size : 0ull, a->ring_size);
		return -EINVAL;
	}
	wp = bo_at(a->gpu_id, a->write_pointer_address & ~4095ull);
	rp = bo_at(a->gpu_id, a->read_pointer_address & ~4095ull);
	if (!wp || wp->size != 4096 || !rp || rp->size != 4096) {
		slog("REJECT rptr/wptr bo");
		return -EINVAL;
	}
	if (a->eop_buffer_address && a->eop_buffer_size != 4096) {
		slog("REJECT eop");
		return -EINVAL;
	}
	if (g->have_sizes && (a->ctl_stack_size != g->ctl || a->ctx_save_restore_size < g->cwsr)) {
		slog("REJECT cwsr sizes ctl=%u (node %llu) cwsr=%u (node %llu)", a->ctl_stack_size,
		     (unsigned long long)g->ctl, a->ctx_save_restore_size, (unsigned long long)g->cwsr);
		return -EINVAL;
	}
	total = align_up(((uint64_t)a->ctx_save_restore_size + g->dbg) * g->xcc, 4096);
	cw = bo_at(a->gpu_id, a->ctx_save_restore_address);
	if (!cw || cw->size != total) {
		slog("REJECT cwsr bo size %llu, want %llu", cw ? (unsigned long long)cw->size : 0ull,
		     (unsigned long long)total);
		return -EINVAL;
	}
	for (uint64_t i = 0; i < g->xcc; i++) {
		const struct kfd_context_save_area_header *h =
			(const void *)(uintptr_t)(a->ctx_save_restore_address + i * a->ctx_save_restore_size);

		if (h->debug_offset != (g->xcc - i) * a->ctx_save_restore_size ||
		    h->debug_size != g->dbg * g->xcc) {
			slog("REJECT cwsr header xcc=%llu debug_offset=%u debug_size=%u", (unsigned long long)i,
			     h->debug_offset, h->debug_size);
			return -EINVAL;
		}
	}
	for (int i = 0; i < MAX_Q; i++) {
		if (!S.q[i].used) {
			q = &S.q[i];
			memset(q, 0, sizeof(*q));
			q->used = 1;
			q->qid = (uint32_t)i;
			break;
		}
	}
	if (!q)
		return -ENOMEM;
	q->gpu_id = a->gpu_id;
	q->prio = a->queue_priority;
	q->ring_size = a->ring_size;
	q->ring = a->ring_base_address;
	q->wptr = a->write_pointer_address;
	q->rptr = a->read_pointer_address;
	q->cwsr = a->ctx_save_restore_address;
	q->bos[q->nbos++] = ring;
	q->bos[q->nbos++] = wp;
	if (rp != wp)
		q->bos[q->nbos++] = rp;
	q->bos[q->nbos++] = cw;
	for (int i = 0; i < q->nbos; i++)
		q->bos[i]->qrefs++;
	a->queue_id = q->qid;
	a->doorbell_offset = (1ull << 62) | ((uint64_t)a->gpu_id << 46) | ((uint64_t)q->qid * 8);
	S.nqueues_ever++;
	pthread_create(&q->thread, NULL, cp_thread, q);
	slog("CREATE_QUEUE qid=%u gpu=%u prio=%u ring_size=%u pct=%u ctx_size=%u ctl=%u cwsr_bo=%llu eop=%llu",
	     q->qid, q->gpu_id, q->prio, q->ring_size, a->queue_percentage, a->ctx_save_restore_size,
	     a->ctl_stack_size, (unsigned long long)cw->size, (unsigned long long)a->eop_buffer_address);
	return 0;
}

static int destroy_queue(uint32_t qid)
{
	struct squeue *q;
	struct gpu *g;
	uint64_t db = 0, w;

	if (qid >= MAX_Q || !S.q[qid].used)
		return -EINVAL;
	q = &S.q[qid];
	q->stop = 1;
	pthread_mutex_unlock(&S_lock);
	pthread_join(q->thread, NULL);
	pthread_mutex_lock(&S_lock);
	g = find_gpu(q->gpu_id);
	if (g && g->doorbells)
		db = g->doorbells[qid];
	w = *(volatile uint64_t *)(uintptr_t)q->wptr;
	slog("DESTROY_QUEUE qid=%u gpu=%u consumed=%llu wptr=%llu doorbell=%llu", qid, q->gpu_id,
	     (unsigned long long)q->consumed, (unsigned long long)w, (unsigned long long)db);
	for (int i = 0; i < q->nbos; i++)
		q->bos[i]->qrefs--;
	q->used = 0;
	return 0;
}

static int handle(unsigned long req, void *arg)
{
	switch (req) {
	case AMDKFD_IOC_GET_VERSION: {
		struct kfd_ioctl_get_version_args *a = arg;

		a->major_version = 1;
		a->minor_version = 17;
		slog("GET_VERSION");
		return 0;
	}
	case AMDKFD_IOC_RUNTIME_ENABLE: {
		struct kfd_ioctl_runtime_enable_args *a = arg;

		if (!(a->mode_mask & 1)) {
			slog("RUNTIME_DISABLE");
			S.runtime_enabled = 0;
			return 0;
		}
		if (S.nqueues_ever) {
			slog("RUNTIME_ENABLE rejected: queues exist");
			return -EEXIST;
		}
		if (S.runtime_enabled)
			return -EBUSY;
		S.runtime_enabled = 1;
		a->capabilities_mask = 0;
		slog("RUNTIME_ENABLE mode=%u", a->mode_mask);
		return 0;
	}
	case AMDKFD_IOC_ACQUIRE_VM: {
		struct kfd_ioctl_acquire_vm_args *a = arg;
		struct gpu *g = find_gpu(a->gpu_id);

		if (!g || fcntl((int)a->drm_fd, F_GETFD) < 0)
			return -EINVAL;
		if (g->vm)
			return -EBUSY;
		g->vm = 1;
		slog("ACQUIRE_VM gpu=%u", a->gpu_id);
		return 0;
	}
	case AMDKFD_IOC_ALLOC_MEMORY_OF_GPU: {
		struct kfd_ioctl_alloc_memory_of_gpu_args *a = arg;
		struct gpu *g = find_gpu(a->gpu_id);

		if (!g || !g->vm)
			return -EINVAL;
		if (!(a->flags & KFD_IOC_ALLOC_MEM_FLAGS_USERPTR) || a->mmap_offset != a->va_addr ||
		    (a->size & 4095) || (a->va_addr & 4095) || !a->size) {
			slog("REJECT alloc flags=0x%x va=0x%llx off=0x%llx size=%llu", a->flags,
			     (unsigned long long)a->va_addr, (unsigned long long)a->mmap_offset,
			     (unsigned long long)a->size);
			return -EINVAL;
		}
		for (int i = 0; i < MAX_BO; i++) {
			if (!S.bo[i].used) {
				S.bo[i] = (struct bo){.used = 1,
						      .handle = ((uint64_t)a->gpu_id << 32) | ++S.next_handle,
						      .va = a->va_addr,
						      .size = a->size,
						      .gpu_id = a->gpu_id};
				a->handle = S.bo[i].handle;
				slog("ALLOC va=0x%llx size=%llu", (unsigned long long)a->va_addr,
				     (unsigned long long)a->size);
				return 0;
			}
		}
		return -ENOMEM;
	}
	case AMDKFD_IOC_MAP_MEMORY_TO_GPU: {
		struct kfd_ioctl_map_memory_to_gpu_args *a = arg;
		struct bo *b = find_bo_handle(a->handle);
		uint32_t *ids = (uint32_t *)(uintptr_t)a->device_ids_array_ptr;

		if (!b || a->n_devices != 1 || !ids || ids[0] != b->gpu_id)
			return -EINVAL;
		b->mapped = 1;
		a->n_success = 1;
		return 0;
	}
	case AMDKFD_IOC_UNMAP_MEMORY_FROM_GPU: {
		struct kfd_ioctl_unmap_memory_from_gpu_args *a = arg;
		struct bo *b = find_bo_handle(a->handle);

		if (!b)
			return -EINVAL;
		if (b->qrefs)
			return -EBUSY;
		b->mapped = 0;
		a->n_success = 1;
		return 0;
	}
	case AMDKFD_IOC_FREE_MEMORY_OF_GPU: {
		struct kfd_ioctl_free_memory_of_gpu_args *a = arg;
		struct bo *b = find_bo_handle(a->handle);

		if (!b)
			return -EINVAL;
		if (b->qrefs)
			return -EBUSY;
		slog("FREE va=0x%llx size=%llu", (unsigned long long)b->va, (unsigned long long)b->size);
		b->used = 0;
		return 0;
	}
	case AMDKFD_IOC_CREATE_QUEUE:
		return create_queue(arg);
	case AMDKFD_IOC_DESTROY_QUEUE:
		return destroy_queue(((struct kfd_ioctl_destroy_queue_args *)arg)->queue_id);
	case AMDKFD_IOC_SET_CU_MASK: {
		struct kfd_ioctl_set_cu_mask_args *a = arg;
		const uint32_t *m = (const uint32_t *)(uintptr_t)a->cu_mask_ptr;

		if (a->queue_id >= MAX_Q || !S.q[a->queue_id].used)
			return -EINVAL;
		if (!a->num_cu_mask || a->num_cu_mask % 32 || !m)
			return -EINVAL;
		slog("SET_CU_MASK qid=%u bits=%u mask0=0x%x", a->queue_id, a->num_cu_mask, m[0]);
		return 0;
	}
	case AMDKFD_IOC_UPDATE_QUEUE: {
		struct kfd_ioctl_update_queue_args *a = arg;

		slog("UPDATE_QUEUE qid=%u pct=%u prio=%u", a->queue_id, a->queue_percentage, a->queue_priority);
		return 0;
	}
	default:
		slog("UNKNOWN ioctl 0x%lx", req);
		return -ENOTTY;
	}
}

int ioctl(int fd, unsigned long req, ...)
{
	va_list ap;
	void *arg;
	int r;

	va_start(ap, req);
	arg = va_arg(ap, void *);
	va_end(ap);
	resolve();
	if (fd < 0 || fd != S.fd)
		return real_ioctl(fd, req, arg);
	pthread_mutex_lock(&S_lock);
	if (S.pid != getpid()) {
		pthread_mutex_unlock(&S_lock);
		slog("EBADF ioctl from non-opener (opener %d)", (int)S.pid);
		errno = EBADF;
		return -1;
	}
	r = handle(req, arg);
	pthread_mutex_unlock(&S_lock);
	if (r < 0) {
		errno = -r;
		return -1;
	}
	return r;
}

static int track_open(const char *path, int fd)
{
	size_t n = strlen(path);

	if (fd >= 0 && n >= 8 && !strcmp(path + n - 8, "/dev/kfd")) {
		pthread_mutex_lock(&S_lock);
		if (S.pid != getpid()) {
			/* a new process context (first open, or a forked child) */
			memset(S.bo, 0, sizeof(S.bo));
			memset(S.q, 0, sizeof(S.q));
			S.runtime_enabled = 0;
			S.nqueues_ever = 0;
			S.pid = getpid();
			load_topology();
		}
		S.fd = fd;
		pthread_mutex_unlock(&S_lock);
		slog("OPEN_KFD fd=%d gpus=%d", fd, S.ngpu);
	}
	return fd;
}

int open(const char *path, int flags, ...)
{
	mode_t mode = 0;
	va_list ap;

	resolve();
	if (flags & (O_CREAT | O_TMPFILE)) {
		va_start(ap, flags);
		mode = va_arg(ap, mode_t);
		va_end(ap);
	}
	return track_open(path, real_open(path, flags, mode));
}

int open64(const char *path, int flags, ...) __attribute__((alias("open")));

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	uint64_t o = (uint64_t)off;
	struct gpu *g;
	void *p;

	resolve();
	if (fd < 0 || fd != S.fd)
		return real_mmap(addr, len, prot, flags, fd, off);
	pthread_mutex_lock(&S_lock);
	g = find_gpu((uint32_t)((o >> 46) & 0xffff));
	if (S.pid != getpid() || len != 8192 || (o >> 62) != 1 || (o & 0x1fff) || !g || !(flags & MAP_SHARED)) {
		pthread_mutex_unlock(&S_lock);
		slog("REJECT mmap len=%zu off=0x%llx", len, (unsigned long long)o);
		errno = EINVAL;
		return MAP_FAILED;
	}
	p = real_mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (p != MAP_FAILED)
		g->doorbells = p;
	pthread_mutex_unlock(&S_lock);
	slog("DOORBELL_MMAP gpu=%u", g->gpu_id);
	return p;
}

void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off) __attribute__((alias("mmap")));
