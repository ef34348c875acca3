/*
 * queue.c (layer 2): KFD AQL queues (docs/kernel-interface.md §2): the
 * per-device render node and VM, queue creation with its four buffers and
 * CWSR headers, ROCclr's three priority pools, doorbell mappings, publishing
 * AQL packets, and completion (read index, optionally the completion
 * signal). Waiting on a position is in event.c (a wait stamps events);
 * putting a stream's work on its queue is in submit.c.
 */
#include "fakehip_internal.h"

/* KFD queue priority of each pool (see fakehip_internal.h). */
const uint32_t fh_pool_kfd_prio[3] = {0, 7, 11};

/* HSA AQL packet header bits. */
#define AQL_TYPE_INVALID 1u
#define AQL_TYPE_KERNEL_DISPATCH 2u
#define AQL_TYPE_BARRIER_AND 3u
#define AQL_BARRIER_BIT (1u << 8)
#define AQL_SCOPE_SYSTEM 2u
#define AQL_ACQUIRE_SHIFT 9
#define AQL_RELEASE_SHIFT 11

struct aql_dispatch {
	uint16_t header;
	uint16_t setup;
	uint16_t workgroup_size_x;
	uint16_t workgroup_size_y;
	uint16_t workgroup_size_z;
	uint16_t reserved0;
	uint32_t grid_size_x;
	uint32_t grid_size_y;
	uint32_t grid_size_z;
	uint32_t private_segment_size;
	uint32_t group_segment_size;
	uint64_t kernel_object;
	uint64_t kernarg_address;
	uint64_t reserved2; /* kfd-emu: modelled duration in ns */
	uint64_t completion_signal;
};
_Static_assert(sizeof(struct aql_dispatch) == 64, "AQL packet is 64 bytes");

struct aql_barrier_and {
	uint16_t header;
	uint16_t reserved0;
	uint32_t reserved1;
	uint64_t dep_signal[5];
	uint64_t reserved2;
	uint64_t completion_signal;
};
_Static_assert(sizeof(struct aql_barrier_and) == 64, "AQL packet is 64 bytes");

/*
 * The rptr/wptr page is laid out like ROCr's amd_queue_t (hsa_queue_t
 * followed by AMD fields) so the pointers sit where ROCr puts them.
 */
#define AMDQ_OFF_TYPE 0
#define AMDQ_OFF_FEATURES 4
#define AMDQ_OFF_BASE_ADDRESS 8
#define AMDQ_OFF_SIZE 24
#define AMDQ_OFF_ID 32
#define AMDQ_OFF_WRITE_DISPATCH_ID 56
#define AMDQ_OFF_READ_DISPATCH_ID 128

/* amd_signal_t-like completion signal: kind at 0, value at 8. */
#define AMDSIG_OFF_KIND 0
#define AMDSIG_OFF_VALUE 8
#define AMD_SIGNAL_KIND_USER 1

/* ------------------------------------------------------------------ */
/* queues                                                             */
/* ------------------------------------------------------------------ */

volatile uint64_t *q_wptr(struct fh_queue *q)
{
	return (volatile uint64_t *)((char *)q->ptrs.ptr + AMDQ_OFF_WRITE_DISPATCH_ID);
}

volatile uint64_t *q_rptr(struct fh_queue *q)
{
	return (volatile uint64_t *)((char *)q->ptrs.ptr + AMDQ_OFF_READ_DISPATCH_ID);
}

static volatile int64_t *q_sigval(struct fh_queue *q)
{
	return (volatile int64_t *)((char *)q->sig.ptr + AMDSIG_OFF_VALUE);
}

uint64_t q_read_index(struct fh_queue *q)
{
	return __atomic_load_n(q_rptr(q), __ATOMIC_ACQUIRE);
}

/* Has everything up to write index `pos` completed? */
int q_done(struct fh_queue *q, uint64_t pos)
{
	if (pos == 0)
		return 1;
	if (q_read_index(q) < pos)
		return 0;
	if (G.sync_mode == FH_SYNC_SIGNAL) {
		/*
		 * Every packet increments the signal before it is published and
		 * the GPU decrements it when the packet completes, in order
		 * (barrier bit): completed = published - outstanding. Reading
		 * the write index first can only underestimate.
		 */
		uint64_t w = __atomic_load_n(q_wptr(q), __ATOMIC_ACQUIRE);
		int64_t out = __atomic_load_n(q_sigval(q), __ATOMIC_ACQUIRE);

		if (out < 0)
			out = 0;
		if (w < (uint64_t)out || w - (uint64_t)out < pos)
			return 0;
	}
	return 1;
}

static void q_free_struct(struct fh_queue *q)
{
	pthread_mutex_destroy(&q->lock);
	free(q);
}

/* Tear a queue down in KFD (if asked) and free it. g_lock held. */
void q_destroy_final(struct fh_queue *q, int talk_to_kfd)
{
	struct fh_dev *d = &G.dev[q->dev];

	if (talk_to_kfd && q->kfd_live) {
		struct kfd_ioctl_destroy_queue_args da = {.queue_id = q->queue_id};
		int r = kfd_ioctl(AMDKFD_IOC_DESTROY_QUEUE, &da);

		if (r)
			DBG(1, "DESTROY_QUEUE %u failed: %s", q->queue_id, strerror(-r));
		else
			DBG(2, "queue %u gpu %u destroyed", q->queue_id, q->gpu_id);
	}
	q->kfd_live = 0;
	buf_free(d, &q->ring, talk_to_kfd);
	buf_free(d, &q->ptrs, talk_to_kfd);
	buf_free(d, &q->sig, talk_to_kfd);
	buf_free(d, &q->cwsr, talk_to_kfd);
	q_free_struct(q);
}

static void q_unlink(struct fh_queue *q)
{
	for (struct fh_queue **pp = &G.queues; *pp; pp = &(*pp)->next) {
		if (*pp == q) {
			*pp = q->next;
			return;
		}
	}
}

/* Drop one stream reference. g_lock held. */
void q_release(struct fh_queue *q)
{
	if (--q->users > 0)
		return;
	q->dead = 1;
	q_unlink(q);
	if (q->pins == 0)
		q_destroy_final(q, 1);
}

void q_pin(struct fh_queue *q)
{
	q->pins++;
}

void q_unpin(struct fh_queue *q)
{
	pthread_mutex_lock(&g_lock);
	if (--q->pins == 0 && q->dead)
		q_destroy_final(q, 1);
	pthread_mutex_unlock(&g_lock);
}

struct fh_queue *q_find_uid(uint64_t uid)
{
	for (struct fh_queue *q = G.queues; q; q = q->next)
		if (q->uid == uid)
			return q;
	return NULL;
}

/* Open the render node and ACQUIRE_VM on first use of a device. g_lock held. */
static hipError_t dev_ready(struct fh_dev *d)
{
	struct kfd_ioctl_acquire_vm_args av = {0};
	char path[PATH_MAX + 64];
	int r;

	if (d->vm_ready)
		return hipSuccess;
	if (d->render_fd < 0) {
		snprintf(path, sizeof(path), "%s/dev/dri/renderD%u", G.root, d->render_minor);
		d->render_fd = open(path, O_RDWR | O_CLOEXEC);
		if (d->render_fd < 0) {
			DBG(1, "cannot open %s: %s", path, strerror(errno));
			return hipErrorInvalidDevice;
		}
	}
	av.drm_fd = (uint32_t)d->render_fd;
	av.gpu_id = d->gpu_id;
	r = kfd_ioctl(AMDKFD_IOC_ACQUIRE_VM, &av);
	if (r) {
		DBG(1, "ACQUIRE_VM gpu %u failed: %s", d->gpu_id, strerror(-r));
		return errno_to_hip(r);
	}
	d->vm_ready = 1;
	return hipSuccess;
}

static volatile uint64_t *map_doorbell(struct fh_dev *d, uint64_t off)
{
	uint64_t page = off & ~(uint64_t)(FH_DOORBELL_SLICE - 1);
	void *base = NULL;

	for (int i = 0; i < d->ndb; i++)
		if (d->db[i].page == page)
			base = d->db[i].base;
	if (!base) {
		if (d->ndb == (int)(sizeof(d->db) / sizeof(d->db[0]))) {
			DBG(1, "too many doorbell slices on gpu %u", d->gpu_id);
			return NULL;
		}
		base = mmap(NULL, FH_DOORBELL_SLICE, PROT_READ | PROT_WRITE, MAP_SHARED, G.kfd_fd, (off_t)page);
		if (base == MAP_FAILED) {
			DBG(1, "doorbell mmap (offset 0x%llx) failed: %s", (unsigned long long)page,
			    strerror(errno));
			return NULL;
		}
		d->db[d->ndb].page = page;
		d->db[d->ndb].base = base;
		d->ndb++;
	}
	return (volatile uint64_t *)((char *)base + (off & (FH_DOORBELL_SLICE - 1)));
}

/* Create one KFD AQL queue (docs/kernel-interface.md §2). g_lock held. */
hipError_t q_create(int dev, int pool, uint32_t kfd_prio, struct fh_queue **out)
{
	struct fh_dev *d = &G.dev[dev];
	struct kfd_ioctl_create_queue_args ca = {0};
	struct fh_queue *q;
	uint64_t cwsr_total;
	hipError_t e;
	char *amdq;
	int r;

	e = dev_ready(d);
	if (e != hipSuccess)
		return e;
	q = calloc(1, sizeof(*q));
	if (!q)
		return hipErrorOutOfMemory;
	pthread_mutex_init(&q->lock, NULL);
	q->uid = G.next_uid++;
	q->dev = dev;
	q->pool = pool;
	q->gpu_id = d->gpu_id;
	q->kfd_prio = kfd_prio;
	q->npackets = G.ring_size / 64;

	/* each buffer is its own allocation: the 6.12 checks want exact sizes */
	e = buf_alloc(d, &q->ring, G.ring_size, "ring");
	if (e == hipSuccess)
		e = buf_alloc(d, &q->ptrs, FH_PAGE, "rptr/wptr page");
	if (e == hipSuccess)
		e = buf_alloc(d, &q->sig, FH_PAGE, "signal page");
	cwsr_total = align_up(((uint64_t)d->cwsr_size + d->debug_memory_size) * d->num_xcc, FH_PAGE);
	if (e == hipSuccess)
		e = buf_alloc(d, &q->cwsr, (size_t)cwsr_total, "CWSR area");
	if (e != hipSuccess)
		goto fail;

	/* every slot starts as an INVALID packet, as ROCr initialises its rings */
	for (uint32_t i = 0; i < q->npackets; i++)
		((struct aql_dispatch *)q->ring.ptr)[i].header = AQL_TYPE_INVALID;

	amdq = q->ptrs.ptr;
	*(uint32_t *)(amdq + AMDQ_OFF_TYPE) = 0;     /* HSA_QUEUE_TYPE_MULTI */
	*(uint32_t *)(amdq + AMDQ_OFF_FEATURES) = 1; /* KERNEL_DISPATCH */
	*(uint64_t *)(amdq + AMDQ_OFF_BASE_ADDRESS) = (uint64_t)(uintptr_t)q->ring.ptr;
	*(uint32_t *)(amdq + AMDQ_OFF_SIZE) = q->npackets;
	*(uint64_t *)(amdq + AMDQ_OFF_ID) = q->uid;

	*(int64_t *)((char *)q->sig.ptr + AMDSIG_OFF_KIND) = AMD_SIGNAL_KIND_USER;

	for (uint32_t i = 0; i < d->num_xcc; i++) {
		struct kfd_context_save_area_header *h =
			(void *)((char *)q->cwsr.ptr + (size_t)i * d->cwsr_size);

		memset(h, 0, sizeof(*h));
		h->debug_offset = (d->num_xcc - i) * d->cwsr_size;
		h->debug_size = d->debug_memory_size * d->num_xcc;
	}

	ca.ring_base_address = (uint64_t)(uintptr_t)q->ring.ptr;
	ca.write_pointer_address = (uint64_t)(uintptr_t)q_wptr(q);
	ca.read_pointer_address = (uint64_t)(uintptr_t)q_rptr(q);
	ca.ring_size = G.ring_size;
	ca.gpu_id = d->gpu_id;
	ca.queue_type = KFD_IOC_QUEUE_TYPE_COMPUTE_AQL;
	ca.queue_percentage = KFD_MAX_QUEUE_PERCENTAGE;
	ca.queue_priority = kfd_prio;
	ca.eop_buffer_address = 0; /* AQL on gfx94x: no EOP buffer */
	ca.eop_buffer_size = 0;
	ca.ctx_save_restore_address = (uint64_t)(uintptr_t)q->cwsr.ptr;
	ca.ctx_save_restore_size = d->cwsr_size;
	ca.ctl_stack_size = d->ctl_stack_size;
	r = kfd_ioctl(AMDKFD_IOC_CREATE_QUEUE, &ca);
	if (r) {
		DBG(1, "CREATE_QUEUE gpu %u prio %u failed: %s", d->gpu_id, kfd_prio, strerror(-r));
		e = errno_to_hip(r);
		goto fail;
	}
	q->kfd_live = 1;
	q->queue_id = ca.queue_id;
	q->doorbell_offset = ca.doorbell_offset;
	q->doorbell = map_doorbell(d, ca.doorbell_offset);
	if (!q->doorbell) {
		e = hipErrorOutOfMemory;
		goto fail;
	}
	q->next = G.queues;
	G.queues = q;
	*out = q;
	return hipSuccess;
fail:
	q_destroy_final(q, 1);
	return e;
}

/*
 * ROCclr: three pools per device, each up to GPU_MAX_HW_QUEUES queues; past
 * the cap a new stream shares the least-used queue of its pool. g_lock held.
 */
hipError_t pool_acquire(struct fh_stream *st)
{
	int pool = 1 - st->prio;
	unsigned count = 0;
	struct fh_queue *best = NULL, *q;
	hipError_t e;

	for (q = G.queues; q; q = q->next) {
		if (q->dev != st->dev || q->pool != pool)
			continue;
		count++;
		if (!best || q->users < best->users)
			best = q;
	}
	if (count < G.max_hw_queues) {
		e = q_create(st->dev, pool, fh_pool_kfd_prio[pool], &q);
		if (e == hipSuccess) {
			q->users = 1;
			st->q = q;
			st->last_pos = 0;
			DBG(1, "stream %p -> queue %u gpu %u prio %u", (void *)st, q->queue_id, q->gpu_id,
			    q->kfd_prio);
			return hipSuccess;
		}
		if (!best)
			return e;
		DBG(1, "queue creation failed, stream %p shares an existing queue", (void *)st);
	}
	best->users++;
	st->q = best;
	st->last_pos = 0;
	DBG(2, "stream %p -> queue %u gpu %u prio %u (shared by %d streams)", (void *)st, best->queue_id,
	    best->gpu_id, best->kfd_prio, best->users);
	return hipSuccess;
}

/* ------------------------------------------------------------------ */
/* packets                                                            */
/* ------------------------------------------------------------------ */

/*
 * Publish one 64-byte packet on q for stream st (q pinned, g_lock not held):
 * body, then header with a release store, then write_dispatch_id, then the
 * doorbell (64-bit store of the new write index).
 */
static hipError_t q_submit(struct fh_queue *q, struct fh_stream *st, const void *pkt)
{
	uint16_t header, setup;
	uint64_t idx, deadline = 0;
	char *slot;

	pthread_mutex_lock(&q->lock);
	idx = q->wshadow;
	while (idx - q_read_index(q) >= q->npackets) {
		uint64_t t = now_ns();

		if (!deadline)
			deadline = t + G.timeout_ns;
		if (t > deadline) {
			pthread_mutex_unlock(&q->lock);
			DBG(1, "queue %u ring full for %llu ms", q->queue_id,
			    (unsigned long long)(G.timeout_ns / 1000000ull));
			return hipErrorLaunchFailure;
		}
		nap();
	}
	slot = (char *)q->ring.ptr + (size_t)(idx % q->npackets) * 64;
	memcpy(&header, pkt, 2);
	memcpy(&setup, (const char *)pkt + 2, 2);
	memcpy(slot + 4, (const char *)pkt + 4, 60);
	__atomic_fetch_add(q_sigval(q), 1, __ATOMIC_SEQ_CST);
	__atomic_store_n((uint32_t *)slot, (uint32_t)header | ((uint32_t)setup << 16), __ATOMIC_RELEASE);
	__atomic_store_n(&q->wshadow, idx + 1, __ATOMIC_RELEASE);
	__atomic_store_n(q_wptr(q), idx + 1, __ATOMIC_RELEASE);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	*q->doorbell = idx + 1;
	__atomic_store_n(&st->last_pos, idx + 1, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&q->lock);
	return hipSuccess;
}

static uint16_t aql_header(uint32_t type)
{
	return (uint16_t)(type | AQL_BARRIER_BIT | (AQL_SCOPE_SYSTEM << AQL_ACQUIRE_SHIFT) |
			  (AQL_SCOPE_SYSTEM << AQL_RELEASE_SHIFT));
}

/* Read a struct fakehip_kernel at p without faulting on bad pointers. */
static uint64_t kernel_duration(const void *func)
{
	struct fakehip_kernel k;
	struct iovec local = {&k, sizeof(k)};
	struct iovec remote = {(void *)func, sizeof(k)};

	static int warned;
	ssize_t n = process_vm_readv(getpid(), &local, 1, &remote, 1, 0);

	if (n == (ssize_t)sizeof(k) && k.magic == FAKEHIP_KERNEL_MAGIC)
		return k.duration_ns;
	if (n < 0 && errno != EFAULT && !__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
		DBG(1, "process_vm_readv on self failed (%s): kernel durations fall back to %llu ns",
		    strerror(errno), (unsigned long long)G.kernel_ns);
	return G.kernel_ns;
}

static void fill_dispatch(struct aql_dispatch *p, const struct fh_knode *k, struct fh_queue *q)
{
	uint16_t dims = 1;

	memset(p, 0, sizeof(*p));
	if (k->grid[2] > 1 || k->wg[2] > 1)
		dims = 3;
	else if (k->grid[1] > 1 || k->wg[1] > 1)
		dims = 2;
	p->header = aql_header(AQL_TYPE_KERNEL_DISPATCH);
	p->setup = dims;
	p->workgroup_size_x = (uint16_t)k->wg[0];
	p->workgroup_size_y = (uint16_t)k->wg[1];
	p->workgroup_size_z = (uint16_t)k->wg[2];
	p->grid_size_x = k->grid[0];
	p->grid_size_y = k->grid[1];
	p->grid_size_z = k->grid[2];
	p->kernel_object = (uint64_t)(uintptr_t)k->func;
	p->kernarg_address = 0;
	p->reserved2 = kernel_duration(k->func);
	p->completion_signal = (uint64_t)(uintptr_t)q->sig.ptr;
}

static void fill_barrier(struct aql_barrier_and *p, struct fh_queue *q)
{
	memset(p, 0, sizeof(*p));
	p->header = aql_header(AQL_TYPE_BARRIER_AND);
	p->reserved2 = 0;
	p->completion_signal = (uint64_t)(uintptr_t)q->sig.ptr;
}

/*
 * Publish on q for stream st a kernel dispatch of k, or a zero-duration
 * barrier when k is NULL (q pinned, g_lock not held).
 */
hipError_t q_publish(struct fh_queue *q, struct fh_stream *st, const struct fh_knode *k)
{
	if (!k) {
		struct aql_barrier_and b;

		fill_barrier(&b, q);
		return q_submit(q, st, &b);
	} else {
		struct aql_dispatch p;

		fill_dispatch(&p, k, q);
		return q_submit(q, st, &p);
	}
}
