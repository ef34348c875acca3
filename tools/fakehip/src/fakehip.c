/*
 * fakehip: a stand-in libamdhip64.so.6 for kfdq's tests.
 *
 * It exports a subset of the HIP runtime API with the real library's symbol
 * versions and drives amdkfd (a real kernel or kfdq's kfd-emu) the way
 * ROCr/ROCclr do: one KFD AQL queue per stream taken from three per-device
 * priority pools, USERPTR queue buffers with CPU VA == GPU VA, the 6.12
 * exact-size buffer rules, CWSR areas with per-XCC headers, doorbells mapped
 * from the kfd fd, and 64-byte AQL dispatch packets whose reserved2 field
 * carries the emulated kernel duration. Nothing executes on a GPU: memory
 * is host memory and copies happen on the CPU.
 *
 * Rules kept throughout: nothing happens in constructors (all state is set
 * up lazily on the first HIP call); no function ever aborts or exits the
 * process, every failure becomes a hipError_t; every wait is bounded by
 * FAKEHIP_TIMEOUT_MS; exported functions never call other exported
 * functions (so an LD_PRELOAD shim sees exactly the application's calls).
 *
 * Environment:
 *   KFDQ_ROOT           prefix for /dev/kfd, /dev/dri, /sys (default "/")
 *   GPU_MAX_HW_QUEUES   queues per priority pool per device (default 4)
 *   FAKEHIP_KERNEL_NS   duration of a launch whose function is not a
 *                       struct fakehip_kernel (default 20000)
 *   FAKEHIP_TIMEOUT_MS  bound of every wait (default 10000)
 *   FAKEHIP_RING_SIZE   AQL ring bytes, power of two >= 4096 (default 65536)
 *   FAKEHIP_SYNC        "rptr" (default): work up to index N is complete once
 *                       read_dispatch_id >= N; "signal": additionally require
 *                       the per-queue completion signal to account for it
 *   FAKEHIP_DEBUG       1: one stderr line per queue creation, plus errors;
 *                       2: also stream-to-queue sharing decisions
 *   FAKEHIP_NOOP_LAUNCH 1: the hipLaunchKernel family only validates its
 *                       arguments and returns hipSuccess (benchmarks)
 */
#define _GNU_SOURCE
#include <dirent.h>
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
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "hip/hip_runtime_api.h"
#include "kfdq/kfd_abi.h"

#define FH_API __attribute__((visibility("default")))

/* ------------------------------------------------------------------ */
/* constants                                                          */
/* ------------------------------------------------------------------ */

#define FH_MAX_DEV 64
#define FH_PAGE 4096u
#define FH_DEFAULT_RING 65536u
#define FH_DEFAULT_KERNEL_NS 20000ull
#define FH_DEFAULT_TIMEOUT_MS 10000ull
#define FH_POLL_NS 50000l
#define FH_DOORBELL_SLICE 8192u

/* HIP priorities (ROCclr hip::Stream::Priority). */
#define FH_PRIO_HIGH (-1)
#define FH_PRIO_NORMAL 0
#define FH_PRIO_LOW 1

/* Pools, indexed by 1 - hip priority: 0 low, 1 normal, 2 high. */
static const uint32_t fh_pool_kfd_prio[3] = {0, 7, 11};

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
/* state                                                              */
/* ------------------------------------------------------------------ */

struct fh_buf {
	void *ptr;
	size_t size;
	uint64_t handle;
	int allocated; /* ALLOC_MEMORY_OF_GPU succeeded */
	int mapped;    /* MAP_MEMORY_TO_GPU succeeded */
};

struct fh_queue {
	uint64_t uid; /* never reused; events refer to queues by uid */
	int dev;
	int pool; /* 0..2, or -1 for a dedicated (CU-masked) queue */
	uint32_t queue_id;
	uint32_t gpu_id;
	uint32_t kfd_prio;
	int users; /* streams attached */
	int pins;  /* waiters polling this queue's memory right now */
	int dead;  /* no users left; destroyed once pins drop to 0 */
	int kfd_live;
	struct fh_buf ring, ptrs, sig, cwsr;
	uint32_t npackets;
	uint64_t doorbell_offset;
	volatile uint64_t *doorbell;
	pthread_mutex_t lock; /* submission */
	uint64_t wshadow;     /* next write index (under lock) */
	struct fh_queue *next;
};

enum fh_stream_kind { FH_STREAM_USER = 0, FH_STREAM_NULL = 1, FH_STREAM_PER_THREAD = 2 };

struct fh_graph;

#define FH_STREAM_MAGIC 0x46485354u
struct fh_stream {
	uint32_t magic;
	int kind;
	int dev;
	int prio; /* effective HIP priority */
	unsigned flags;
	int cu_masked;
	struct fh_queue *q;
	uint64_t last_pos; /* queue write index after this stream's last packet */
	struct fh_graph *capture;
	uint64_t gen;
	struct fh_stream *next;
};

#define FH_EVENT_MAGIC 0x46484556u
struct fh_event {
	uint32_t magic;
	unsigned flags;
	int recorded;
	int done;
	uint64_t q_uid; /* 0: no queue (complete when recorded) */
	uint64_t pos;
	uint64_t t_record_ns;
	uint64_t t_done_ns;
	struct fh_event *next;
};

struct fh_knode {
	const void *func;
	uint32_t grid[3]; /* work items */
	uint32_t wg[3];
};

#define FH_GRAPH_MAGIC 0x46484752u
#define FH_GEXEC_MAGIC 0x46484758u
struct fh_graph {
	uint32_t magic;
	size_t n, cap;
	struct fh_knode **nodes;
};

struct fh_gexec {
	uint32_t magic;
	size_t n;
	struct fh_knode *k;
};

struct fh_dbpage {
	uint64_t page;
	void *base;
};

struct fh_dev {
	uint32_t node;
	uint32_t gpu_id;
	uint32_t render_minor;
	uint32_t num_xcc;
	uint32_t cwsr_size;      /* per XCC */
	uint32_t ctl_stack_size; /* per XCC */
	uint32_t debug_memory_size;
	int render_fd;
	int vm_ready;
	struct fh_dbpage db[4];
	int ndb;
	struct fh_stream *null_stream;
};

enum fh_sync_mode { FH_SYNC_RPTR = 0, FH_SYNC_SIGNAL = 1 };

static struct {
	int state; /* 0: not initialised, 1: ready, -1: failed */
	hipError_t init_err;
	int kfd_fd;
	uint32_t kfd_major, kfd_minor;
	int ndev;
	struct fh_dev dev[FH_MAX_DEV];
	struct fh_queue *queues;
	struct fh_stream *streams;
	struct fh_event *events;
	uint64_t gen; /* bumped by hipDeviceReset and fork */
	uint64_t next_uid;
	/* configuration, read at init */
	int debug;
	unsigned max_hw_queues;
	uint64_t kernel_ns;
	uint64_t timeout_ns;
	uint32_t ring_size;
	int sync_mode;
	char root[PATH_MAX];
} G = {.kfd_fd = -1, .gen = 1, .next_uid = 1};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static pthread_key_t g_pts_key;
static int g_pts_key_ok;

struct fh_pts {
	uint64_t gen;
	struct fh_stream *s[FH_MAX_DEV];
};

#define FH_CFG_STACK 16
struct fh_call_config {
	dim3 grid, block;
	size_t shmem;
	hipStream_t stream;
};

static __thread int t_device;
static __thread hipError_t t_last_error;
static __thread struct fh_pts *t_pts;
static __thread struct fh_call_config t_cfg[FH_CFG_STACK];
static __thread int t_ncfg;

/* ------------------------------------------------------------------ */
/* small helpers                                                      */
/* ------------------------------------------------------------------ */

static void fh_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fh_log(const char *fmt, ...)
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

#define DBG(level, ...)                          \
	do {                                     \
		if (G.debug >= (level))          \
			fh_log("fakehip: " __VA_ARGS__); \
	} while (0)

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void nap(void)
{
	struct timespec ts = {0, FH_POLL_NS};

	nanosleep(&ts, NULL);
}

static uint64_t align_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) / a * a;
}

static hipError_t ret(hipError_t e)
{
	if (e != hipSuccess)
		t_last_error = e;
	return e;
}

static uint64_t env_u64(const char *name, uint64_t def)
{
	const char *v = getenv(name);
	char *end;
	unsigned long long x;

	if (!v || !*v)
		return def;
	errno = 0;
	x = strtoull(v, &end, 0);
	if (errno || *end)
		return def;
	return x;
}

static int kfd_ioctl(unsigned long req, void *arg)
{
	int r;

	do {
		r = ioctl(G.kfd_fd, req, arg);
	} while (r == -1 && (errno == EINTR || errno == EAGAIN));
	return r == -1 ? -errno : 0;
}

static hipError_t errno_to_hip(int neg)
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

/* ------------------------------------------------------------------ */
/* topology                                                           */
/* ------------------------------------------------------------------ */

struct fh_props {
	int have_cwsr, have_ctl;
	uint64_t cwsr_size, ctl_stack_size;
	uint64_t simd_count, simd_per_cu, array_count, simd_arrays_per_engine;
	uint64_t num_xcc, gfx_target_version, lds_size_in_kb, drm_render_minor;
};

static int read_u64_file(const char *path, uint64_t *out)
{
	FILE *f = fopen(path, "re");
	unsigned long long v;
	int ok;

	if (!f)
		return -1;
	ok = fscanf(f, "%llu", &v) == 1;
	fclose(f);
	if (!ok)
		return -1;
	*out = v;
	return 0;
}

static int read_props(const char *path, struct fh_props *p)
{
	FILE *f = fopen(path, "re");
	char key[128];
	unsigned long long v;

	if (!f)
		return -1;
	memset(p, 0, sizeof(*p));
	p->num_xcc = 1;
	while (fscanf(f, "%127s %llu", key, &v) == 2) {
		if (!strcmp(key, "cwsr_size")) {
			p->cwsr_size = v;
			p->have_cwsr = 1;
		} else if (!strcmp(key, "ctl_stack_size")) {
			p->ctl_stack_size = v;
			p->have_ctl = 1;
		} else if (!strcmp(key, "simd_count"))
			p->simd_count = v;
		else if (!strcmp(key, "simd_per_cu"))
			p->simd_per_cu = v;
		else if (!strcmp(key, "array_count"))
			p->array_count = v;
		else if (!strcmp(key, "simd_arrays_per_engine"))
			p->simd_arrays_per_engine = v;
		else if (!strcmp(key, "num_xcc"))
			p->num_xcc = v ? v : 1;
		else if (!strcmp(key, "gfx_target_version"))
			p->gfx_target_version = v;
		else if (!strcmp(key, "lds_size_in_kb"))
			p->lds_size_in_kb = v;
		else if (!strcmp(key, "drm_render_minor"))
			p->drm_render_minor = v;
	}
	fclose(f);
	return 0;
}

/*
 * CWSR sizes (docs/kernel-interface.md §3; same formula as the kernel and
 * libhsakmt). debug_memory_size is never exported by sysfs, so it is always
 * computed; cwsr_size / ctl_stack_size come from sysfs when present.
 */
static void cwsr_sizes(const struct fh_props *p, struct fh_dev *d)
{
	uint64_t xcc = p->num_xcc ? p->num_xcc : 1;
	uint64_t major = p->gfx_target_version / 10000;
	uint64_t cu_num = 0, wave_num, ctl, wg, vgpr = 0x40000, lds = 0x10000, per_wave = 8;

	if (p->simd_per_cu)
		cu_num = p->simd_count / p->simd_per_cu / xcc;
	if (major >= 10) {
		wave_num = cu_num * 32;
		per_wave = 12;
	} else {
		uint64_t se = p->simd_arrays_per_engine ? p->array_count / p->simd_arrays_per_engine : 0;

		wave_num = cu_num * 40;
		if (se * 512 < wave_num)
			wave_num = se * 512;
	}
	switch (p->gfx_target_version) {
	case 90008: /* gfx908 */
	case 90010: /* gfx90a */
	case 90400: /* gfx940 */
	case 90401: /* gfx941 */
	case 90402: /* gfx942 */
		vgpr = 0x80000;
		break;
	case 90500: /* gfx950 */
		vgpr = 0x80000;
		if (p->lds_size_in_kb)
			lds = p->lds_size_in_kb * 1024;
		break;
	default:
		break;
	}
	ctl = align_up(40 + wave_num * per_wave + 8, FH_PAGE);
	wg = align_up(cu_num * (vgpr + 0x4000 + lds + 0x1000), FH_PAGE);
	d->num_xcc = (uint32_t)xcc;
	d->ctl_stack_size = (uint32_t)(p->have_ctl ? p->ctl_stack_size : ctl);
	d->cwsr_size = (uint32_t)(p->have_cwsr ? p->cwsr_size : ctl + wg);
	d->debug_memory_size = (uint32_t)align_up(wave_num * 32, 64);
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

static void read_topology(void)
{
	char path[PATH_MAX + 128];
	uint32_t ids[256];
	int n = 0;
	DIR *dir;
	struct dirent *de;

	snprintf(path, sizeof(path), "%s/sys/class/kfd/kfd/topology/nodes", G.root);
	dir = opendir(path);
	if (!dir)
		return;
	while ((de = readdir(dir)) && n < 256) {
		char *end;
		unsigned long v = strtoul(de->d_name, &end, 10);

		if (de->d_name[0] >= '0' && de->d_name[0] <= '9' && !*end)
			ids[n++] = (uint32_t)v;
	}
	closedir(dir);
	qsort(ids, (size_t)n, sizeof(ids[0]), cmp_u32);
	for (int i = 0; i < n && G.ndev < FH_MAX_DEV; i++) {
		uint64_t gpu_id = 0;
		struct fh_props p;
		struct fh_dev *d = &G.dev[G.ndev];

		snprintf(path, sizeof(path), "%s/sys/class/kfd/kfd/topology/nodes/%u/gpu_id", G.root, ids[i]);
		if (read_u64_file(path, &gpu_id) || gpu_id == 0)
			continue;
		snprintf(path, sizeof(path), "%s/sys/class/kfd/kfd/topology/nodes/%u/properties", G.root,
			 ids[i]);
		if (read_props(path, &p))
			continue;
		memset(d, 0, sizeof(*d));
		d->node = ids[i];
		d->gpu_id = (uint32_t)gpu_id;
		d->render_minor = (uint32_t)p.drm_render_minor;
		d->render_fd = -1;
		cwsr_sizes(&p, d);
		G.ndev++;
	}
}

/* ------------------------------------------------------------------ */
/* init, fork, reset                                                  */
/* ------------------------------------------------------------------ */

static void free_all_objects(int talk_to_kfd);

static void atfork_prepare(void)
{
	pthread_mutex_lock(&g_lock);
}

static void atfork_parent(void)
{
	pthread_mutex_unlock(&g_lock);
}

/*
 * The child inherits no usable KFD state (amdkfd answers EBADF to any
 * process but the opener): drop everything without talking to KFD and let
 * the next HIP call initialise afresh. Queue buffers are MADV_DONTFORK, so
 * they are not in the child's address space in the first place.
 */
static void atfork_child(void)
{
	pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;

	free_all_objects(0);
	for (int i = 0; i < G.ndev; i++) {
		for (int j = 0; j < G.dev[i].ndb; j++)
			munmap(G.dev[i].db[j].base, FH_DOORBELL_SLICE);
		if (G.dev[i].render_fd >= 0)
			close(G.dev[i].render_fd);
	}
	if (G.kfd_fd >= 0)
		close(G.kfd_fd);
	G.kfd_fd = -1;
	G.ndev = 0;
	G.state = 0;
	G.gen++;
	t_ncfg = 0;
	memcpy(&g_lock, &fresh, sizeof(fresh));
}

static void pts_destructor(void *v);

static void once_init(void)
{
	pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
	g_pts_key_ok = pthread_key_create(&g_pts_key, pts_destructor) == 0;
}

/* Called with g_lock held. */
static hipError_t init_locked(void)
{
	struct kfd_ioctl_get_version_args ver = {0};
	struct kfd_ioctl_runtime_enable_args re = {0};
	const char *root, *sync;
	char path[PATH_MAX + 32];
	uint64_t v;
	int r;

	if (G.state == 1)
		return hipSuccess;
	if (G.state == -1)
		return G.init_err;

	G.debug = (int)env_u64("FAKEHIP_DEBUG", 0);
	v = env_u64("GPU_MAX_HW_QUEUES", 4);
	G.max_hw_queues = v ? (unsigned)(v > 1024 ? 1024 : v) : 4;
	G.kernel_ns = env_u64("FAKEHIP_KERNEL_NS", FH_DEFAULT_KERNEL_NS);
	G.timeout_ns = env_u64("FAKEHIP_TIMEOUT_MS", FH_DEFAULT_TIMEOUT_MS) * 1000000ull;
	v = env_u64("FAKEHIP_RING_SIZE", FH_DEFAULT_RING);
	if (v < FH_PAGE || v > (1u << 30) || (v & (v - 1)))
		v = FH_DEFAULT_RING;
	G.ring_size = (uint32_t)v;
	sync = getenv("FAKEHIP_SYNC");
	G.sync_mode = (sync && !strcmp(sync, "signal")) ? FH_SYNC_SIGNAL : FH_SYNC_RPTR;
	root = getenv("KFDQ_ROOT");
	if (!root || !*root)
		root = "/";
	snprintf(G.root, sizeof(G.root), "%s", root);
	/* strip trailing slashes so "<root>/dev/kfd" never has "//" */
	for (size_t n = strlen(G.root); n > 0 && G.root[n - 1] == '/'; n--)
		G.root[n - 1] = 0;

	G.state = -1;
	G.init_err = hipErrorNoDevice;
	snprintf(path, sizeof(path), "%s/dev/kfd", G.root);
	G.kfd_fd = open(path, O_RDWR | O_CLOEXEC);
	if (G.kfd_fd < 0) {
		DBG(1, "cannot open %s: %s", path, strerror(errno));
		return G.init_err;
	}
	r = kfd_ioctl(AMDKFD_IOC_GET_VERSION, &ver);
	if (r || ver.major_version != 1) {
		DBG(1, "GET_VERSION failed (%s, major %u)", r ? strerror(-r) : "ok", ver.major_version);
		goto fail;
	}
	G.kfd_major = ver.major_version;
	G.kfd_minor = ver.minor_version;
	read_topology();
	if (G.ndev == 0) {
		DBG(1, "no GPU nodes under %s/sys/class/kfd/kfd/topology/nodes", G.root);
		goto fail;
	}
	/* ROCr enables the debug runtime once at init, before any queue exists. */
	re.r_debug = 0;
	re.mode_mask = KFD_RUNTIME_ENABLE_MODE_ENABLE_MASK;
	r = kfd_ioctl(AMDKFD_IOC_RUNTIME_ENABLE, &re);
	if (r && r != -ENOTTY)
		DBG(1, "RUNTIME_ENABLE failed: %s (ignored)", strerror(-r));
	G.state = 1;
	G.init_err = hipSuccess;
	DBG(2, "KFD %u.%u, %d GPU(s), root %s", G.kfd_major, G.kfd_minor, G.ndev, G.root);
	return hipSuccess;
fail:
	close(G.kfd_fd);
	G.kfd_fd = -1;
	G.ndev = 0;
	return G.init_err;
}

static hipError_t lock_init(void)
{
	hipError_t e;

	pthread_once(&g_once, once_init);
	pthread_mutex_lock(&g_lock);
	e = init_locked();
	if (e != hipSuccess)
		pthread_mutex_unlock(&g_lock);
	return e;
}

static hipError_t ensure_init(void)
{
	hipError_t e = lock_init();

	if (e == hipSuccess)
		pthread_mutex_unlock(&g_lock);
	return e;
}

static int cur_dev(void)
{
	return (t_device >= 0 && t_device < G.ndev) ? t_device : 0;
}

/* ------------------------------------------------------------------ */
/* GPU memory: USERPTR allocations with CPU VA == GPU VA              */
/* ------------------------------------------------------------------ */

static void buf_free(struct fh_dev *d, struct fh_buf *b, int talk_to_kfd)
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

static hipError_t buf_alloc(struct fh_dev *d, struct fh_buf *b, size_t size, const char *what)
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

/* ------------------------------------------------------------------ */
/* queues                                                             */
/* ------------------------------------------------------------------ */

static volatile uint64_t *q_wptr(struct fh_queue *q)
{
	return (volatile uint64_t *)((char *)q->ptrs.ptr + AMDQ_OFF_WRITE_DISPATCH_ID);
}

static volatile uint64_t *q_rptr(struct fh_queue *q)
{
	return (volatile uint64_t *)((char *)q->ptrs.ptr + AMDQ_OFF_READ_DISPATCH_ID);
}

static volatile int64_t *q_sigval(struct fh_queue *q)
{
	return (volatile int64_t *)((char *)q->sig.ptr + AMDSIG_OFF_VALUE);
}

static uint64_t q_read_index(struct fh_queue *q)
{
	return __atomic_load_n(q_rptr(q), __ATOMIC_ACQUIRE);
}

/* Has everything up to write index `pos` completed? */
static int q_done(struct fh_queue *q, uint64_t pos)
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
static void q_destroy_final(struct fh_queue *q, int talk_to_kfd)
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
static void q_release(struct fh_queue *q)
{
	if (--q->users > 0)
		return;
	q->dead = 1;
	q_unlink(q);
	if (q->pins == 0)
		q_destroy_final(q, 1);
}

static void q_pin(struct fh_queue *q)
{
	q->pins++;
}

static void q_unpin(struct fh_queue *q)
{
	pthread_mutex_lock(&g_lock);
	if (--q->pins == 0 && q->dead)
		q_destroy_final(q, 1);
	pthread_mutex_unlock(&g_lock);
}

static struct fh_queue *q_find_uid(uint64_t uid)
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
static hipError_t q_create(int dev, int pool, uint32_t kfd_prio, struct fh_queue **out)
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
static hipError_t pool_acquire(struct fh_stream *st)
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
/* streams                                                            */
/* ------------------------------------------------------------------ */

static struct fh_stream *stream_new(int kind, int dev, int prio, unsigned flags)
{
	struct fh_stream *st = calloc(1, sizeof(*st));

	if (!st)
		return NULL;
	st->magic = FH_STREAM_MAGIC;
	st->kind = kind;
	st->dev = dev;
	st->prio = prio;
	st->flags = flags;
	st->gen = G.gen;
	st->next = G.streams;
	G.streams = st;
	return st;
}

static void stream_unlink_free(struct fh_stream *st)
{
	for (struct fh_stream **pp = &G.streams; *pp; pp = &(*pp)->next) {
		if (*pp == st) {
			*pp = st->next;
			break;
		}
	}
	st->magic = 0;
	free(st);
}

static struct fh_stream *stream_find(hipStream_t h)
{
	for (struct fh_stream *st = G.streams; st; st = st->next)
		if ((void *)st == (void *)h)
			return st;
	return NULL;
}

static struct fh_pts *pts_get(int create)
{
	struct fh_pts *p = t_pts;

	if (!p && create) {
		p = calloc(1, sizeof(*p));
		if (!p)
			return NULL;
		p->gen = G.gen;
		t_pts = p;
		if (g_pts_key_ok)
			pthread_setspecific(g_pts_key, p);
	}
	if (p && p->gen != G.gen) {
		memset(p->s, 0, sizeof(p->s));
		p->gen = G.gen;
	}
	return p;
}

/*
 * Resolve a HIP stream handle to a stream object. NULL means the legacy null
 * stream, or (spt) the per-thread stream. Special streams are created on
 * demand (without a queue) unless `peek`. g_lock held.
 */
static hipError_t resolve_stream(hipStream_t h, int spt, int peek, struct fh_stream **out)
{
	int dev = cur_dev();

	*out = NULL;
	if (h == hipStreamPerThread || (h == NULL && spt)) {
		struct fh_pts *p = pts_get(!peek);

		if (!p)
			return peek ? hipErrorNotReady : hipErrorOutOfMemory;
		if (!p->s[dev]) {
			if (peek)
				return hipErrorNotReady;
			p->s[dev] = stream_new(FH_STREAM_PER_THREAD, dev, FH_PRIO_NORMAL, 0);
			if (!p->s[dev])
				return hipErrorOutOfMemory;
		}
		*out = p->s[dev];
		return hipSuccess;
	}
	if (h == NULL || h == hipStreamLegacy) {
		struct fh_dev *d = &G.dev[dev];

		if (!d->null_stream) {
			if (peek)
				return hipErrorNotReady;
			d->null_stream = stream_new(FH_STREAM_NULL, dev, FH_PRIO_NORMAL, 0);
			if (!d->null_stream)
				return hipErrorOutOfMemory;
		}
		*out = d->null_stream;
		return hipSuccess;
	}
	*out = stream_find(h);
	return *out ? hipSuccess : hipErrorInvalidHandle;
}

/* Make sure a stream has its queue (lazy for the null / per-thread streams). */
static hipError_t stream_queue(struct fh_stream *st)
{
	if (st->q)
		return hipSuccess;
	return pool_acquire(st);
}

/* Detach and free a stream; the caller waited for its work. g_lock held. */
static void stream_release_locked(struct fh_stream *st)
{
	struct fh_queue *q = st->q;

	if (st->kind == FH_STREAM_NULL && G.dev[st->dev].null_stream == st)
		G.dev[st->dev].null_stream = NULL;
	st->q = NULL;
	stream_unlink_free(st);
	if (q)
		q_release(q);
}

/* ------------------------------------------------------------------ */
/* waiting                                                            */
/* ------------------------------------------------------------------ */

/* Mark recorded events on queue `uid` whose position completed. g_lock held. */
static void events_observe_locked(struct fh_queue *q, uint64_t t)
{
	for (struct fh_event *ev = G.events; ev; ev = ev->next) {
		if (ev->recorded && !ev->done && ev->q_uid == q->uid && q_done(q, ev->pos)) {
			ev->done = 1;
			ev->t_done_ns = t;
		}
	}
}

static void events_observe(struct fh_queue *q)
{
	uint64_t t = now_ns();

	pthread_mutex_lock(&g_lock);
	events_observe_locked(q, t);
	pthread_mutex_unlock(&g_lock);
}

/*
 * Poll until `pos` completes on pinned queue q; bounded by the timeout.
 * Whenever the read index moves, events on the queue are stamped, which is
 * what makes hipEventElapsedTime approximately right.
 */
static hipError_t wait_pos(struct fh_queue *q, uint64_t pos)
{
	uint64_t deadline = now_ns() + G.timeout_ns;
	uint64_t seen = q_read_index(q);

	while (!q_done(q, pos)) {
		uint64_t r;

		if (now_ns() > deadline) {
			DBG(1, "timeout waiting for queue %u to reach %llu (read index %llu)", q->queue_id,
			    (unsigned long long)pos, (unsigned long long)q_read_index(q));
			return hipErrorLaunchTimeOut;
		}
		nap();
		r = q_read_index(q);
		if (r != seen) {
			seen = r;
			events_observe(q);
		}
	}
	events_observe(q);
	return hipSuccess;
}

/* Wait for a stream's submitted work. Takes/drops g_lock itself. */
static hipError_t stream_wait(hipStream_t h, int spt)
{
	struct fh_stream *st;
	struct fh_queue *q;
	uint64_t pos;
	hipError_t e = lock_init();

	if (e != hipSuccess)
		return e;
	e = resolve_stream(h, spt, 0, &st);
	if (e != hipSuccess || !st->q) {
		pthread_mutex_unlock(&g_lock);
		return e;
	}
	if (st->capture) {
		pthread_mutex_unlock(&g_lock);
		return hipErrorStreamCaptureUnsupported;
	}
	q = st->q;
	pos = __atomic_load_n(&st->last_pos, __ATOMIC_ACQUIRE);
	q_pin(q);
	pthread_mutex_unlock(&g_lock);
	e = wait_pos(q, pos);
	q_unpin(q);
	return e;
}

static hipError_t device_wait(int dev)
{
	struct fh_queue **qs = NULL;
	uint64_t *pos = NULL;
	size_t n = 0, cap = 0;
	hipError_t e = lock_init(), first = hipSuccess;

	if (e != hipSuccess)
		return e;
	for (struct fh_queue *q = G.queues; q; q = q->next) {
		if (dev >= 0 && q->dev != dev)
			continue;
		if (n == cap) {
			size_t nc = cap ? cap * 2 : 16;
			struct fh_queue **nq = realloc(qs, nc * sizeof(*qs));
			uint64_t *np;

			if (!nq)
				break;
			qs = nq;
			np = realloc(pos, nc * sizeof(*pos));
			if (!np)
				break;
			pos = np;
			cap = nc;
		}
		pos[n] = __atomic_load_n(&q->wshadow, __ATOMIC_ACQUIRE);
		q_pin(q);
		qs[n++] = q;
	}
	pthread_mutex_unlock(&g_lock);
	for (size_t i = 0; i < n; i++) {
		e = wait_pos(qs[i], pos[i]);
		if (e != hipSuccess && first == hipSuccess)
			first = e;
		q_unpin(qs[i]);
	}
	free(qs);
	free(pos);
	return first;
}

/* ------------------------------------------------------------------ */
/* submission                                                         */
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

static hipError_t graph_append(struct fh_graph *g, const struct fh_knode *k, struct fh_knode **out);
static void event_record_locked(struct fh_event *ev, struct fh_stream *st);
static struct fh_event *event_find(hipEvent_t h);

/*
 * Submit kernels (n > 0) or one barrier (ks == NULL) on a stream, optionally
 * recording events around them. A capturing stream records kernels into its
 * graph instead.
 */
static hipError_t submit(hipStream_t h, int spt, const struct fh_knode *ks, size_t n, hipEvent_t start,
			 hipEvent_t stop)
{
	struct fh_stream *st;
	struct fh_queue *q;
	struct fh_event *ev_start = NULL, *ev_stop = NULL;
	hipError_t e = lock_init();

	if (e != hipSuccess)
		return e;
	e = resolve_stream(h, spt, 0, &st);
	if (e != hipSuccess)
		goto out_unlock;
	if ((start && !(ev_start = event_find(start))) || (stop && !(ev_stop = event_find(stop)))) {
		e = hipErrorInvalidHandle;
		goto out_unlock;
	}
	if (st->capture) {
		for (size_t i = 0; ks && i < n && e == hipSuccess; i++)
			e = graph_append(st->capture, &ks[i], NULL);
		goto out_unlock;
	}
	e = stream_queue(st);
	if (e != hipSuccess)
		goto out_unlock;
	q = st->q;
	if (ev_start)
		event_record_locked(ev_start, st);
	q_pin(q);
	pthread_mutex_unlock(&g_lock);

	if (!ks) {
		struct aql_barrier_and b;

		fill_barrier(&b, q);
		e = q_submit(q, st, &b);
	}
	for (size_t i = 0; ks && i < n && e == hipSuccess; i++) {
		struct aql_dispatch p;

		fill_dispatch(&p, &ks[i], q);
		e = q_submit(q, st, &p);
	}

	pthread_mutex_lock(&g_lock);
	if (ev_stop && e == hipSuccess && event_find(stop) == ev_stop)
		event_record_locked(ev_stop, st);
	if (--q->pins == 0 && q->dead)
		q_destroy_final(q, 1);
out_unlock:
	pthread_mutex_unlock(&g_lock);
	return e;
}

/* Build a kernel node from grid (in work items) and block sizes. */
static hipError_t make_knode(struct fh_knode *k, const void *func, const uint64_t grid[3], const uint32_t wg[3])
{
	uint64_t threads = (uint64_t)wg[0] * wg[1] * wg[2];

	if (!func)
		return hipErrorInvalidDeviceFunction;
	if (threads == 0 || threads > 1024 || wg[0] > 1024 || wg[1] > 1024 || wg[2] > 1024)
		return hipErrorInvalidConfiguration;
	for (int i = 0; i < 3; i++) {
		if (grid[i] == 0 || grid[i] > UINT32_MAX)
			return hipErrorInvalidConfiguration;
		k->grid[i] = (uint32_t)grid[i];
		k->wg[i] = wg[i];
	}
	k->func = func;
	return hipSuccess;
}

/*
 * FAKEHIP_NOOP_LAUNCH=1 (benchmarks of the launch path in front of fakehip):
 * the hipLaunchKernel family validates its arguments and returns hipSuccess
 * without touching KFD (no stream lookup, no packet). Read once.
 */
static int noop_launch(void)
{
	static int cached = -1;
	int v = __atomic_load_n(&cached, __ATOMIC_RELAXED);

	if (v < 0) {
		const char *e = getenv("FAKEHIP_NOOP_LAUNCH");

		v = (e && e[0] == '1' && e[1] == 0) ? 1 : 0;
		__atomic_store_n(&cached, v, __ATOMIC_RELAXED);
	}
	return v;
}

/* Launch with CUDA-style dims: grid in blocks. */
static hipError_t launch_blocks(const void *func, dim3 grid, dim3 block, hipStream_t s, int spt, hipEvent_t start,
				hipEvent_t stop)
{
	struct fh_knode k;
	uint64_t g[3] = {(uint64_t)grid.x * block.x, (uint64_t)grid.y * block.y, (uint64_t)grid.z * block.z};
	uint32_t wg[3] = {block.x, block.y, block.z};
	hipError_t e = make_knode(&k, func, g, wg);

	if (e != hipSuccess) {
		/* HIP reports a missing device first */
		hipError_t ie = ensure_init();

		return ie != hipSuccess ? ie : e;
	}
	if (noop_launch())
		return hipSuccess;
	return submit(s, spt, &k, 1, start, stop);
}

/* ------------------------------------------------------------------ */
/* events                                                             */
/* ------------------------------------------------------------------ */

static struct fh_event *event_find(hipEvent_t h)
{
	for (struct fh_event *ev = G.events; ev; ev = ev->next)
		if ((void *)ev == (void *)h)
			return ev;
	return NULL;
}

static void event_record_locked(struct fh_event *ev, struct fh_stream *st)
{
	struct fh_queue *q = st->q;

	ev->recorded = 1;
	ev->t_record_ns = now_ns();
	ev->q_uid = q ? q->uid : 0;
	ev->pos = q ? __atomic_load_n(&st->last_pos, __ATOMIC_ACQUIRE) : 0;
	ev->done = !q || q_done(q, ev->pos);
	ev->t_done_ns = ev->done ? ev->t_record_ns : 0;
}

/* Is the event complete? Optionally wait. Takes/drops g_lock. */
static hipError_t event_check(hipEvent_t h, int wait)
{
	struct fh_event *ev;
	struct fh_queue *q;
	uint64_t pos;
	hipError_t e = lock_init();

	if (e != hipSuccess)
		return e;
	ev = event_find(h);
	if (!ev) {
		e = hipErrorInvalidHandle;
		goto out;
	}
	if (!ev->recorded || ev->done)
		goto out;
	q = q_find_uid(ev->q_uid);
	if (!q) {
		/* queue destroyed (drained first), reset, or fork: complete */
		ev->done = 1;
		ev->t_done_ns = now_ns();
		goto out;
	}
	pos = ev->pos;
	if (q_done(q, pos)) {
		events_observe_locked(q, now_ns());
		goto out;
	}
	if (!wait) {
		e = hipErrorNotReady;
		goto out;
	}
	q_pin(q);
	pthread_mutex_unlock(&g_lock);
	e = wait_pos(q, pos);
	q_unpin(q);
	return e;
out:
	pthread_mutex_unlock(&g_lock);
	return e;
}

/* ------------------------------------------------------------------ */
/* graphs                                                             */
/* ------------------------------------------------------------------ */

static hipError_t graph_append(struct fh_graph *g, const struct fh_knode *k, struct fh_knode **out)
{
	struct fh_knode *node;

	if (g->n == g->cap) {
		size_t nc = g->cap ? g->cap * 2 : 8;
		struct fh_knode **nn = realloc(g->nodes, nc * sizeof(*nn));

		if (!nn)
			return hipErrorOutOfMemory;
		g->nodes = nn;
		g->cap = nc;
	}
	node = malloc(sizeof(*node));
	if (!node)
		return hipErrorOutOfMemory;
	*node = *k;
	g->nodes[g->n++] = node;
	if (out)
		*out = node;
	return hipSuccess;
}

static struct fh_graph *graph_new(void)
{
	struct fh_graph *g = calloc(1, sizeof(*g));

	if (g)
		g->magic = FH_GRAPH_MAGIC;
	return g;
}

static void graph_free(struct fh_graph *g)
{
	for (size_t i = 0; i < g->n; i++)
		free(g->nodes[i]);
	free(g->nodes);
	g->magic = 0;
	free(g);
}

static hipError_t graph_launch(hipGraphExec_t h, hipStream_t s, int spt)
{
	struct fh_gexec *x = (struct fh_gexec *)h;
	hipError_t e = ensure_init();

	if (e != hipSuccess)
		return e;
	if (!x || x->magic != FH_GEXEC_MAGIC)
		return hipErrorInvalidHandle;
	if (x->n == 0)
		return hipSuccess;
	return submit(s, spt, x->k, x->n, NULL, NULL);
}

/* ------------------------------------------------------------------ */
/* teardown                                                           */
/* ------------------------------------------------------------------ */

/* Free streams and queues (and tell KFD if asked). g_lock held or child. */
static void free_all_objects(int talk_to_kfd)
{
	while (G.streams) {
		struct fh_stream *st = G.streams;

		G.streams = st->next;
		if (st->capture)
			graph_free(st->capture);
		st->magic = 0;
		free(st);
	}
	for (int i = 0; i < G.ndev; i++)
		G.dev[i].null_stream = NULL;
	while (G.queues) {
		struct fh_queue *q = G.queues;

		G.queues = q->next;
		q->dead = 1;
		if (q->pins == 0 || !talk_to_kfd)
			q_destroy_final(q, talk_to_kfd);
		/* else: the last waiter destroys it */
	}
	G.gen++;
}

static void stream_drain_release_locked(struct fh_stream *st);

static void pts_destructor(void *v)
{
	struct fh_pts *p = v;

	pthread_mutex_lock(&g_lock);
	for (int i = 0; i < FH_MAX_DEV; i++) {
		struct fh_stream *st = p->s[i];

		if (p->gen != G.gen)
			break;
		p->s[i] = NULL;
		if (st && stream_find((hipStream_t)st))
			stream_drain_release_locked(st);
	}
	pthread_mutex_unlock(&g_lock);
	if (t_pts == p)
		t_pts = NULL;
	free(p);
}

/* ------------------------------------------------------------------ */
/* error strings                                                      */
/* ------------------------------------------------------------------ */

static const struct {
	hipError_t code;
	const char *name;
	const char *text;
} fh_errors[] = {
	{hipSuccess, "hipSuccess", "no error"},
	{hipErrorInvalidValue, "hipErrorInvalidValue", "invalid argument"},
	{hipErrorOutOfMemory, "hipErrorOutOfMemory", "out of memory"},
	{hipErrorNotInitialized, "hipErrorNotInitialized", "initialization error"},
	{hipErrorInvalidConfiguration, "hipErrorInvalidConfiguration", "invalid configuration argument"},
	{hipErrorInvalidMemcpyDirection, "hipErrorInvalidMemcpyDirection", "invalid copy direction for memcpy"},
	{hipErrorInvalidDeviceFunction, "hipErrorInvalidDeviceFunction", "invalid device function"},
	{hipErrorNoDevice, "hipErrorNoDevice", "no ROCm-capable device is detected"},
	{hipErrorInvalidDevice, "hipErrorInvalidDevice", "invalid device ordinal"},
	{hipErrorInvalidContext, "hipErrorInvalidContext", "invalid device context"},
	{hipErrorOperatingSystem, "hipErrorOperatingSystem", "OS call failed or operation not supported on this OS"},
	{hipErrorInvalidHandle, "hipErrorInvalidHandle", "invalid resource handle"},
	{hipErrorIllegalState, "hipErrorIllegalState", "the operation cannot be performed in the present state"},
	{hipErrorNotFound, "hipErrorNotFound", "named symbol not found"},
	{hipErrorNotReady, "hipErrorNotReady", "device not ready"},
	{hipErrorLaunchTimeOut, "hipErrorLaunchTimeOut", "the launch timed out and was terminated"},
	{hipErrorContextIsDestroyed, "hipErrorContextIsDestroyed", "context is destroyed"},
	{hipErrorLaunchFailure, "hipErrorLaunchFailure", "unspecified launch failure"},
	{hipErrorNotSupported, "hipErrorNotSupported", "operation not supported"},
	{hipErrorStreamCaptureUnsupported, "hipErrorStreamCaptureUnsupported",
	 "operation not permitted when stream is capturing"},
	{hipErrorStreamCaptureInvalidated, "hipErrorStreamCaptureInvalidated",
	 "operation failed due to a previous error during capture"},
	{hipErrorStreamCaptureUnmatched, "hipErrorStreamCaptureUnmatched",
	 "the capture was not initiated in this stream"},
	{hipErrorStreamCaptureWrongThread, "hipErrorStreamCaptureWrongThread",
	 "attempt to terminate a thread-local capture sequence from another thread"},
	{hipErrorUnknown, "hipErrorUnknown", "unknown error"},
};

/* ------------------------------------------------------------------ */
/* exported API                                                       */
/* ------------------------------------------------------------------ */

FH_API const char *hipGetErrorName(hipError_t error)
{
	for (size_t i = 0; i < sizeof(fh_errors) / sizeof(fh_errors[0]); i++)
		if (fh_errors[i].code == error)
			return fh_errors[i].name;
	return "hipErrorUnknown";
}

FH_API const char *hipGetErrorString(hipError_t error)
{
	for (size_t i = 0; i < sizeof(fh_errors) / sizeof(fh_errors[0]); i++)
		if (fh_errors[i].code == error)
			return fh_errors[i].text;
	return "unknown error";
}

FH_API hipError_t hipGetLastError(void)
{
	hipError_t e = t_last_error;

	t_last_error = hipSuccess;
	return e;
}

FH_API hipError_t hipPeekAtLastError(void)
{
	return t_last_error;
}

FH_API hipError_t hipExtGetLastError(void)
{
	hipError_t e = t_last_error;

	t_last_error = hipSuccess;
	return e;
}

FH_API hipError_t hipRuntimeGetVersion(int *runtimeVersion)
{
	if (!runtimeVersion)
		return ret(hipErrorInvalidValue);
	*runtimeVersion = 60300000;
	return hipSuccess;
}

FH_API hipError_t hipDriverGetVersion(int *driverVersion)
{
	if (!driverVersion)
		return ret(hipErrorInvalidValue);
	*driverVersion = 60300000;
	return hipSuccess;
}

FH_API hipError_t hipInit(unsigned int flags)
{
	if (flags != 0)
		return ret(hipErrorInvalidValue);
	return ret(ensure_init());
}

FH_API hipError_t hipGetDeviceCount(int *count)
{
	hipError_t e;

	if (!count)
		return ret(hipErrorInvalidValue);
	e = ensure_init();
	*count = e == hipSuccess ? G.ndev : 0;
	return ret(e);
}

FH_API hipError_t hipSetDevice(int deviceId)
{
	hipError_t e = ensure_init();

	if (e != hipSuccess)
		return ret(e);
	if (deviceId < 0 || deviceId >= G.ndev)
		return ret(hipErrorInvalidDevice);
	t_device = deviceId;
	return hipSuccess;
}

FH_API hipError_t hipGetDevice(int *deviceId)
{
	hipError_t e;

	if (!deviceId)
		return ret(hipErrorInvalidValue);
	e = ensure_init();
	if (e != hipSuccess)
		return ret(e);
	*deviceId = cur_dev();
	return hipSuccess;
}

FH_API hipError_t hipDeviceSynchronize(void)
{
	hipError_t e = ensure_init();

	if (e != hipSuccess)
		return ret(e);
	return ret(device_wait(cur_dev()));
}

FH_API hipError_t hipCtxSynchronize(void)
{
	hipError_t e = ensure_init();

	if (e != hipSuccess)
		return ret(e);
	return ret(device_wait(cur_dev()));
}

/*
 * Destroys every stream and queue (all devices) after a bounded drain; the
 * KFD fd, VMs and doorbell mappings stay, as ROCr keeps its runtime.
 */
FH_API hipError_t hipDeviceReset(void)
{
	hipError_t e = ensure_init();

	if (e != hipSuccess)
		return ret(e);
	device_wait(-1);
	pthread_mutex_lock(&g_lock);
	free_all_objects(1);
	pthread_mutex_unlock(&g_lock);
	return hipSuccess;
}

FH_API hipError_t hipDeviceGetStreamPriorityRange(int *leastPriority, int *greatestPriority)
{
	hipError_t e = ensure_init();

	if (e != hipSuccess)
		return ret(e);
	if (leastPriority)
		*leastPriority = FH_PRIO_LOW;
	if (greatestPriority)
		*greatestPriority = FH_PRIO_HIGH;
	return hipSuccess;
}

/* ---- streams ---- */

static hipError_t stream_create(hipStream_t *out, unsigned flags, int prio, const uint32_t *cu_mask,
				uint32_t cu_words)
{
	struct fh_stream *st;
	hipError_t e;

	if (!out)
		return hipErrorInvalidValue;
	if (flags & ~(unsigned)hipStreamNonBlocking)
		return hipErrorInvalidValue;
	if (prio < FH_PRIO_HIGH)
		prio = FH_PRIO_HIGH;
	if (prio > FH_PRIO_LOW)
		prio = FH_PRIO_LOW;
	e = lock_init();
	if (e != hipSuccess)
		return e;
	st = stream_new(FH_STREAM_USER, cur_dev(), prio, flags);
	if (!st) {
		e = hipErrorOutOfMemory;
		goto out;
	}
	if (cu_mask) {
		struct kfd_ioctl_set_cu_mask_args cm = {0};
		struct fh_queue *q;
		int r;

		/* ROCclr gives CU-masked streams a queue of their own */
		e = q_create(st->dev, -1, fh_pool_kfd_prio[1 - prio], &q);
		if (e != hipSuccess) {
			stream_unlink_free(st);
			goto out;
		}
		q->users = 1;
		st->q = q;
		st->cu_masked = 1;
		DBG(1, "stream %p -> queue %u gpu %u prio %u", (void *)st, q->queue_id, q->gpu_id, q->kfd_prio);
		cm.queue_id = q->queue_id;
		cm.num_cu_mask = cu_words * 32;
		cm.cu_mask_ptr = (uint64_t)(uintptr_t)cu_mask;
		r = kfd_ioctl(AMDKFD_IOC_SET_CU_MASK, &cm);
		if (r) {
			DBG(1, "SET_CU_MASK queue %u failed: %s", q->queue_id, strerror(-r));
			stream_release_locked(st);
			e = errno_to_hip(r);
			goto out;
		}
	} else {
		e = pool_acquire(st);
		if (e != hipSuccess) {
			stream_unlink_free(st);
			goto out;
		}
	}
	*out = (hipStream_t)st;
out:
	pthread_mutex_unlock(&g_lock);
	return e;
}

FH_API hipError_t hipStreamCreate(hipStream_t *stream)
{
	return ret(stream_create(stream, hipStreamDefault, FH_PRIO_NORMAL, NULL, 0));
}

FH_API hipError_t hipStreamCreateWithFlags(hipStream_t *stream, unsigned int flags)
{
	return ret(stream_create(stream, flags, FH_PRIO_NORMAL, NULL, 0));
}

FH_API hipError_t hipStreamCreateWithPriority(hipStream_t *stream, unsigned int flags, int priority)
{
	return ret(stream_create(stream, flags, priority, NULL, 0));
}

FH_API hipError_t hipExtStreamCreateWithCUMask(hipStream_t *stream, uint32_t cuMaskSize, const uint32_t *cuMask)
{
	hipError_t e;

	if (!cuMask || cuMaskSize == 0) {
		e = ensure_init();
		return ret(e != hipSuccess ? e : hipErrorInvalidValue);
	}
	return ret(stream_create(stream, hipStreamDefault, FH_PRIO_NORMAL, cuMask, cuMaskSize));
}

/*
 * Wait (bounded) for a stream's work, then detach it from its queue and free
 * it; the queue is destroyed when its last stream goes. Called and returns
 * with g_lock held; drops it while waiting. The stream is looked up again
 * after the wait because another thread may have freed it meanwhile.
 */
static void stream_drain_release_locked(struct fh_stream *st)
{
	struct fh_queue *q = st->q;
	uint64_t pos = __atomic_load_n(&st->last_pos, __ATOMIC_ACQUIRE);

	if (q) {
		q_pin(q);
		pthread_mutex_unlock(&g_lock);
		wait_pos(q, pos);
		pthread_mutex_lock(&g_lock);
		st = stream_find((hipStream_t)st);
	}
	if (st) {
		if (st->capture) {
			graph_free(st->capture);
			st->capture = NULL;
		}
		/* cannot free q here: we still hold a pin */
		stream_release_locked(st);
	}
	if (q && --q->pins == 0 && q->dead)
		q_destroy_final(q, 1);
}

FH_API hipError_t hipStreamDestroy(hipStream_t stream)
{
	struct fh_stream *st;
	hipError_t e = lock_init();

	if (e != hipSuccess)
		return ret(e);
	st = (stream == NULL || stream == hipStreamLegacy || stream == hipStreamPerThread) ? NULL
											     : stream_find(stream);
	if (!st || st->kind != FH_STREAM_USER) {
		pthread_mutex_unlock(&g_lock);
		return ret(hipErrorInvalidHandle);
	}
	stream_drain_release_locked(st);
	pthread_mutex_unlock(&g_lock);
	return hipSuccess;
}

FH_API hipError_t hipStreamSynchronize(hipStream_t stream)
{
	return ret(stream_wait(stream, 0));
}

FH_API hipError_t hipStreamSynchronize_spt(hipStream_t stream)
{
	return ret(stream_wait(stream, 1));
}

static hipError_t stream_query(hipStream_t h, int spt)
{
	struct fh_stream *st;
	hipError_t e = lock_init();

	if (e != hipSuccess)
		return e;
	e = resolve_stream(h, spt, 0, &st);
	if (e == hipSuccess && st->capture)
		e = hipErrorStreamCaptureUnsupported;
	if (e == hipSuccess && st->q) {
		if (!q_done(st->q, __atomic_load_n(&st->last_pos, __ATOMIC_ACQUIRE)))
			e = hipErrorNotReady;
		else
			events_observe_locked(st->q, now_ns());
	}
	pthread_mutex_unlock(&g_lock);
	return e;
}

FH_API hipError_t hipStreamQuery(hipStream_t stream)
{
	hipError_t e = stream_query(stream, 0);

	return e == hipErrorNotReady ? e : ret(e);
}

FH_API hipError_t hipStreamQuery_spt(hipStream_t stream)
{
	hipError_t e = stream_query(stream, 1);

	return e == hipErrorNotReady ? e : ret(e);
}

/*
 * Simplification: the wait happens on the host (the call returns once the
 * event completed) instead of enqueueing a barrier packet with a dependency.
 */
static hipError_t stream_wait_event(hipStream_t h, hipEvent_t event, unsigned flags, int spt)
{
	struct fh_stream *st;
	hipError_t e = lock_init();

	if (e != hipSuccess)
		return e;
	e = resolve_stream(h, spt, 0, &st);
	(void)flags;
	if (e == hipSuccess && !event_find(event))
		e = hipErrorInvalidHandle;
	pthread_mutex_unlock(&g_lock);
	if (e != hipSuccess)
		return e;
	return event_check(event, 1);
}

FH_API hipError_t hipStreamWaitEvent(hipStream_t stream, hipEvent_t event, unsigned int flags)
{
	return ret(stream_wait_event(stream, event, flags, 0));
}

FH_API hipError_t hipStreamWaitEvent_spt(hipStream_t stream, hipEvent_t event, unsigned int flags)
{
	return ret(stream_wait_event(stream, event, flags, 1));
}

static hipError_t stream_get(hipStream_t h, int spt, int *prio, unsigned *flags, int *dev)
{
	struct fh_stream *st;
	hipError_t e = lock_init();

	if (e != hipSuccess)
		return e;
	e = resolve_stream(h, spt, 0, &st);
	if (e == hipSuccess) {
		if (prio)
			*prio = st->prio;
		if (flags)
			*flags = st->flags;
		if (dev)
			*dev = st->dev;
	}
	pthread_mutex_unlock(&g_lock);
	return e;
}

FH_API hipError_t hipStreamGetPriority(hipStream_t stream, int *priority)
{
	if (!priority)
		return ret(hipErrorInvalidValue);
	return ret(stream_get(stream, 0, priority, NULL, NULL));
}

FH_API hipError_t hipStreamGetPriority_spt(hipStream_t stream, int *priority)
{
	if (!priority)
		return ret(hipErrorInvalidValue);
	return ret(stream_get(stream, 1, priority, NULL, NULL));
}

FH_API hipError_t hipStreamGetFlags(hipStream_t stream, unsigned int *flags)
{
	if (!flags)
		return ret(hipErrorInvalidValue);
	return ret(stream_get(stream, 0, NULL, flags, NULL));
}

FH_API hipError_t hipStreamGetFlags_spt(hipStream_t stream, unsigned int *flags)
{
	if (!flags)
		return ret(hipErrorInvalidValue);
	return ret(stream_get(stream, 1, NULL, flags, NULL));
}

FH_API hipError_t hipStreamGetDevice(hipStream_t stream, hipDevice_t *device)
{
	if (!device)
		return ret(hipErrorInvalidValue);
	return ret(stream_get(stream, 0, NULL, NULL, device));
}

/* Host functions run on the calling thread once the stream drained. */
static hipError_t host_func(hipStream_t h, int spt, hipHostFn_t fn, void *data, hipStreamCallback_t cb,
			    unsigned flags)
{
	struct fh_stream *st;
	hipError_t e = lock_init();

	if (e != hipSuccess)
		return e;
	e = resolve_stream(h, spt, 0, &st);
	if (e == hipSuccess && ((!fn && !cb) || flags != 0))
		e = hipErrorInvalidValue;
	if (e == hipSuccess && st->capture)
		e = hipErrorNotSupported;
	pthread_mutex_unlock(&g_lock);
	if (e != hipSuccess)
		return e;
	e = stream_wait(h, spt);
	if (e != hipSuccess)
		return e;
	if (fn)
		fn(data);
	else
		cb(h, hipSuccess, data);
	return hipSuccess;
}

FH_API hipError_t hipLaunchHostFunc(hipStream_t stream, hipHostFn_t fn, void *userData)
{
	return ret(host_func(stream, 0, fn, userData, NULL, 0));
}

FH_API hipError_t hipLaunchHostFunc_spt(hipStream_t stream, hipHostFn_t fn, void *userData)
{
	return ret(host_func(stream, 1, fn, userData, NULL, 0));
}

FH_API hipError_t hipStreamAddCallback(hipStream_t stream, hipStreamCallback_t callback, void *userData,
				       unsigned int flags)
{
	return ret(host_func(stream, 0, NULL, userData, callback, flags));
}

FH_API hipError_t hipStreamAddCallback_spt(hipStream_t stream, hipStreamCallback_t callback, void *userData,
					   unsigned int flags)
{
	return ret(host_func(stream, 1, NULL, userData, callback, flags));
}

/* ---- capture ---- */

static __thread hipStreamCaptureMode t_capture_mode = hipStreamCaptureModeGlobal;

/* Bookkeeping only: fakehip does not enforce capture-mode rules. */
FH_API hipError_t hipThreadExchangeStreamCaptureMode(hipStreamCaptureMode *mode)
{
	hipStreamCaptureMode old;

	if (!mode || *mode < hipStreamCaptureModeGlobal || *mode > hipStreamCaptureModeRelaxed)
		return ret(hipErrorInvalidValue);
	old = t_capture_mode;
	t_capture_mode = *mode;
	*mode = old;
	return hipSuccess;
}

static hipError_t begin_capture(hipStream_t h, int spt, hipStreamCaptureMode mode)
{
	struct fh_stream *st;
	hipError_t e = lock_init();

	if (e != hipSuccess)
		return e;
	e = resolve_stream(h, spt, 0, &st);
	if (e == hipSuccess && st->kind == FH_STREAM_NULL)
		e = hipErrorStreamCaptureUnsupported;
	if (e == hipSuccess && (mode < hipStreamCaptureModeGlobal || mode > hipStreamCaptureModeRelaxed))
		e = hipErrorInvalidValue;
	if (e == hipSuccess && st->capture)
		e = hipErrorIllegalState;
	if (e == hipSuccess) {
		st->capture = graph_new();
		if (!st->capture)
			e = hipErrorOutOfMemory;
	}
	pthread_mutex_unlock(&g_lock);
	return e;
}

static hipError_t end_capture(hipStream_t h, int spt, hipGraph_t *out)
{
	struct fh_stream *st;
	hipError_t e;

	if (!out)
		return hipErrorInvalidValue;
	e = lock_init();
	if (e != hipSuccess)
		return e;
	e = resolve_stream(h, spt, 0, &st);
	if (e == hipSuccess && !st->capture)
		e = hipErrorIllegalState;
	if (e == hipSuccess) {
		*out = (hipGraph_t)st->capture;
		st->capture = NULL;
	}
	pthread_mutex_unlock(&g_lock);
	return e;
}

static hipError_t is_capturing(hipStream_t h, int spt, hipStreamCaptureStatus *status)
{
	struct fh_stream *st;
	hipError_t e;

	if (!status)
		return hipErrorInvalidValue;
	e = lock_init();
	if (e != hipSuccess)
		return e;
	e = resolve_stream(h, spt, 0, &st);
	if (e == hipSuccess)
		*status = st->capture ? hipStreamCaptureStatusActive : hipStreamCaptureStatusNone;
	pthread_mutex_unlock(&g_lock);
	return e;
}

FH_API hipError_t hipStreamBeginCapture(hipStream_t stream, hipStreamCaptureMode mode)
{
	return ret(begin_capture(stream, 0, mode));
}

FH_API hipError_t hipStreamBeginCapture_spt(hipStream_t stream, hipStreamCaptureMode mode)
{
	return ret(begin_capture(stream, 1, mode));
}

FH_API hipError_t hipStreamEndCapture(hipStream_t stream, hipGraph_t *pGraph)
{
	return ret(end_capture(stream, 0, pGraph));
}

FH_API hipError_t hipStreamEndCapture_spt(hipStream_t stream, hipGraph_t *pGraph)
{
	return ret(end_capture(stream, 1, pGraph));
}

FH_API hipError_t hipStreamIsCapturing(hipStream_t stream, hipStreamCaptureStatus *pCaptureStatus)
{
	return ret(is_capturing(stream, 0, pCaptureStatus));
}

FH_API hipError_t hipStreamIsCapturing_spt(hipStream_t stream, hipStreamCaptureStatus *pCaptureStatus)
{
	return ret(is_capturing(stream, 1, pCaptureStatus));
}


/* ---- events ---- */

static hipError_t event_create(hipEvent_t *event, unsigned flags)
{
	struct fh_event *ev;
	hipError_t e;

	if (!event)
		return hipErrorInvalidValue;
	if (flags & ~(unsigned)(hipEventBlockingSync | hipEventDisableTiming | hipEventInterprocess))
		return hipErrorInvalidValue;
	e = lock_init();
	if (e != hipSuccess)
		return e;
	ev = calloc(1, sizeof(*ev));
	if (!ev) {
		pthread_mutex_unlock(&g_lock);
		return hipErrorOutOfMemory;
	}
	ev->magic = FH_EVENT_MAGIC;
	ev->flags = flags;
	ev->next = G.events;
	G.events = ev;
	*event = (hipEvent_t)ev;
	pthread_mutex_unlock(&g_lock);
	return hipSuccess;
}

FH_API hipError_t hipEventCreate(hipEvent_t *event)
{
	return ret(event_create(event, hipEventDefault));
}

FH_API hipError_t hipEventCreateWithFlags(hipEvent_t *event, unsigned flags)
{
	return ret(event_create(event, flags));
}

FH_API hipError_t hipEventDestroy(hipEvent_t event)
{
	hipError_t e = lock_init();

	if (e != hipSuccess)
		return ret(e);
	e = hipErrorInvalidHandle;
	for (struct fh_event **pp = &G.events; *pp; pp = &(*pp)->next) {
		if ((void *)*pp == (void *)event) {
			struct fh_event *ev = *pp;

			*pp = ev->next;
			ev->magic = 0;
			free(ev);
			e = hipSuccess;
			break;
		}
	}
	pthread_mutex_unlock(&g_lock);
	return ret(e);
}

/* Records the stream's current position (no marker packet is enqueued). */
static hipError_t event_record(hipEvent_t event, hipStream_t h, int spt)
{
	struct fh_stream *st;
	struct fh_event *ev;
	hipError_t e = lock_init();

	if (e != hipSuccess)
		return e;
	ev = event_find(event);
	if (!ev)
		e = hipErrorInvalidHandle;
	if (e == hipSuccess)
		e = resolve_stream(h, spt, 0, &st);
	if (e == hipSuccess && !st->capture)
		event_record_locked(ev, st);
	pthread_mutex_unlock(&g_lock);
	return e;
}

FH_API hipError_t hipEventRecord(hipEvent_t event, hipStream_t stream)
{
	return ret(event_record(event, stream, 0));
}

FH_API hipError_t hipEventRecord_spt(hipEvent_t event, hipStream_t stream)
{
	return ret(event_record(event, stream, 1));
}

/* ROCm 6.4: the flags select timing behaviour (hipEventRecordDefault 0, hipEventRecordExternal
 * 1); fakehip records the same way for both and refuses others. */
FH_API hipError_t hipEventRecordWithFlags(hipEvent_t event, hipStream_t stream, unsigned int flags)
{
	if (flags > 1)
		return ret(hipErrorInvalidValue);
	return ret(event_record(event, stream, 0));
}

FH_API hipError_t hipEventSynchronize(hipEvent_t event)
{
	return ret(event_check(event, 1));
}

FH_API hipError_t hipEventQuery(hipEvent_t event)
{
	hipError_t e = event_check(event, 0);

	return e == hipErrorNotReady ? e : ret(e);
}

/*
 * Approximate: an event's completion time is when fakehip first saw its
 * position complete (at record time if already complete, or while some
 * thread polled the queue), so results are good to about the 50 us poll
 * interval when the caller synchronises on the stop event.
 */
FH_API hipError_t hipEventElapsedTime(float *ms, hipEvent_t start, hipEvent_t stop)
{
	struct fh_event *a, *b;
	hipError_t e;

	if (!ms)
		return ret(hipErrorInvalidValue);
	e = event_check(start, 0);
	if (e == hipSuccess)
		e = event_check(stop, 0);
	if (e != hipSuccess)
		return e == hipErrorNotReady ? e : ret(e);
	pthread_mutex_lock(&g_lock);
	a = event_find(start);
	b = event_find(stop);
	if (!a || !b || !a->recorded || !b->recorded || (a->flags & hipEventDisableTiming) ||
	    (b->flags & hipEventDisableTiming)) {
		e = hipErrorInvalidHandle;
	} else {
		double d = (double)b->t_done_ns - (double)a->t_done_ns;

		*ms = (float)(d / 1e6);
	}
	pthread_mutex_unlock(&g_lock);
	return ret(e);
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

/* ---- launches ---- */

FH_API hipError_t hipLaunchKernel(const void *function_address, dim3 numBlocks, dim3 dimBlocks, void **args,
				  size_t sharedMemBytes, hipStream_t stream)
{
	(void)args;
	(void)sharedMemBytes;
	return ret(launch_blocks(function_address, numBlocks, dimBlocks, stream, 0, NULL, NULL));
}

FH_API hipError_t hipLaunchKernel_spt(const void *function_address, dim3 numBlocks, dim3 dimBlocks, void **args,
				      size_t sharedMemBytes, hipStream_t stream)
{
	(void)args;
	(void)sharedMemBytes;
	return ret(launch_blocks(function_address, numBlocks, dimBlocks, stream, 1, NULL, NULL));
}

FH_API hipError_t hipExtLaunchKernel(const void *function_address, dim3 numBlocks, dim3 dimBlocks, void **args,
				     size_t sharedMemBytes, hipStream_t stream, hipEvent_t startEvent,
				     hipEvent_t stopEvent, int flags)
{
	(void)args;
	(void)sharedMemBytes;
	(void)flags;
	return ret(launch_blocks(function_address, numBlocks, dimBlocks, stream, 0, startEvent, stopEvent));
}

FH_API hipError_t hipLaunchCooperativeKernel(const void *f, dim3 gridDim, dim3 blockDimX, void **kernelParams,
					     unsigned int sharedMemBytes, hipStream_t stream)
{
	(void)kernelParams;
	(void)sharedMemBytes;
	return ret(launch_blocks(f, gridDim, blockDimX, stream, 0, NULL, NULL));
}

FH_API hipError_t hipLaunchCooperativeKernel_spt(const void *f, dim3 gridDim, dim3 blockDim, void **kernelParams,
						 uint32_t sharedMemBytes, hipStream_t hStream)
{
	(void)kernelParams;
	(void)sharedMemBytes;
	return ret(launch_blocks(f, gridDim, blockDim, hStream, 1, NULL, NULL));
}

static hipError_t module_launch(hipFunction_t f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
				unsigned bz, hipStream_t stream)
{
	dim3 grid = {gx, gy, gz}, block = {bx, by, bz};

	if (!f) {
		hipError_t e = ensure_init();

		return e != hipSuccess ? e : hipErrorInvalidHandle;
	}
	return launch_blocks((const void *)f, grid, block, stream, 0, NULL, NULL);
}

FH_API hipError_t hipModuleLaunchKernel(hipFunction_t f, unsigned int gridDimX, unsigned int gridDimY,
					unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
					unsigned int blockDimZ, unsigned int sharedMemBytes, hipStream_t stream,
					void **kernelParams, void **extra)
{
	(void)sharedMemBytes;
	(void)kernelParams;
	(void)extra;
	return ret(module_launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, stream));
}

FH_API hipError_t hipModuleLaunchCooperativeKernel(hipFunction_t f, unsigned int gridDimX, unsigned int gridDimY,
						   unsigned int gridDimZ, unsigned int blockDimX,
						   unsigned int blockDimY, unsigned int blockDimZ,
						   unsigned int sharedMemBytes, hipStream_t stream,
						   void **kernelParams)
{
	(void)sharedMemBytes;
	(void)kernelParams;
	return ret(module_launch(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, stream));
}

/* Exported only as _Z24hipExtModuleLaunchKernel... (asm label in the header). */
FH_API hipError_t hipExtModuleLaunchKernel(hipFunction_t f, uint32_t globalWorkSizeX, uint32_t globalWorkSizeY,
					   uint32_t globalWorkSizeZ, uint32_t localWorkSizeX,
					   uint32_t localWorkSizeY, uint32_t localWorkSizeZ, size_t sharedMemBytes,
					   hipStream_t hStream, void **kernelParams, void **extra,
					   hipEvent_t startEvent, hipEvent_t stopEvent, uint32_t flags)
{
	struct fh_knode k;
	uint64_t g[3] = {globalWorkSizeX, globalWorkSizeY, globalWorkSizeZ};
	uint32_t wg[3] = {localWorkSizeX, localWorkSizeY, localWorkSizeZ};
	hipError_t e;

	(void)sharedMemBytes;
	(void)kernelParams;
	(void)extra;
	(void)flags;
	if (!f) {
		e = ensure_init();
		return ret(e != hipSuccess ? e : hipErrorInvalidHandle);
	}
	e = make_knode(&k, (const void *)f, g, wg);
	if (e != hipSuccess) {
		hipError_t ie = ensure_init();

		return ret(ie != hipSuccess ? ie : e);
	}
	return ret(submit(hStream, 0, &k, 1, startEvent, stopEvent));
}

FH_API hipError_t __hipPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem, hipStream_t stream)
{
	hipError_t e = ensure_init();

	if (e != hipSuccess)
		return ret(e);
	if (t_ncfg >= FH_CFG_STACK)
		return ret(hipErrorInvalidConfiguration);
	t_cfg[t_ncfg].grid = gridDim;
	t_cfg[t_ncfg].block = blockDim;
	t_cfg[t_ncfg].shmem = sharedMem;
	t_cfg[t_ncfg].stream = stream;
	t_ncfg++;
	return hipSuccess;
}

FH_API hipError_t __hipPopCallConfiguration(dim3 *gridDim, dim3 *blockDim, size_t *sharedMem, hipStream_t *stream)
{
	struct fh_call_config *c;

	if (t_ncfg <= 0)
		return ret(hipErrorInvalidConfiguration);
	c = &t_cfg[--t_ncfg];
	if (gridDim)
		*gridDim = c->grid;
	if (blockDim)
		*blockDim = c->block;
	if (sharedMem)
		*sharedMem = c->shmem;
	if (stream)
		*stream = c->stream;
	return hipSuccess;
}

/* hipcc-generated constructors call these; they must stay trivial. */
static void *fh_fatbin_handle;

FH_API void **__hipRegisterFatBinary(const void *data)
{
	(void)data;
	return &fh_fatbin_handle;
}

FH_API void __hipUnregisterFatBinary(void **modules)
{
	(void)modules;
}

FH_API void __hipRegisterFunction(void **modules, const void *hostFunction, char *deviceFunction,
				  const char *deviceName, unsigned int threadLimit, void *tid, void *bid,
				  dim3 *blockDim, dim3 *gridDim, int *wSize)
{
	(void)modules;
	(void)hostFunction;
	(void)deviceFunction;
	(void)deviceName;
	(void)threadLimit;
	(void)tid;
	(void)bid;
	(void)blockDim;
	(void)gridDim;
	(void)wSize;
}

/* ---- graphs: kernel nodes only ---- */

FH_API hipError_t hipGraphCreate(hipGraph_t *pGraph, unsigned int flags)
{
	struct fh_graph *g;
	hipError_t e = ensure_init();

	if (e != hipSuccess)
		return ret(e);
	if (!pGraph || flags != 0)
		return ret(hipErrorInvalidValue);
	g = graph_new();
	if (!g)
		return ret(hipErrorOutOfMemory);
	*pGraph = (hipGraph_t)g;
	return hipSuccess;
}

FH_API hipError_t hipGraphDestroy(hipGraph_t graph)
{
	struct fh_graph *g = (struct fh_graph *)graph;

	if (!g || g->magic != FH_GRAPH_MAGIC)
		return ret(hipErrorInvalidValue);
	graph_free(g);
	return hipSuccess;
}

FH_API hipError_t hipGraphAddKernelNode(hipGraphNode_t *pGraphNode, hipGraph_t graph,
					const hipGraphNode_t *pDependencies, size_t numDependencies,
					const hipKernelNodeParams *pNodeParams)
{
	struct fh_graph *g = (struct fh_graph *)graph;
	struct fh_knode k, *node;
	uint64_t grid[3];
	uint32_t wg[3];
	hipError_t e;

	if (!pGraphNode || !g || g->magic != FH_GRAPH_MAGIC || !pNodeParams || (numDependencies && !pDependencies))
		return ret(hipErrorInvalidValue);
	grid[0] = (uint64_t)pNodeParams->gridDim.x * pNodeParams->blockDim.x;
	grid[1] = (uint64_t)pNodeParams->gridDim.y * pNodeParams->blockDim.y;
	grid[2] = (uint64_t)pNodeParams->gridDim.z * pNodeParams->blockDim.z;
	wg[0] = pNodeParams->blockDim.x;
	wg[1] = pNodeParams->blockDim.y;
	wg[2] = pNodeParams->blockDim.z;
	e = make_knode(&k, pNodeParams->func, grid, wg);
	if (e != hipSuccess)
		return ret(e);
	e = graph_append(g, &k, &node);
	if (e != hipSuccess)
		return ret(e);
	*pGraphNode = (hipGraphNode_t)node;
	return hipSuccess;
}

static hipError_t graph_instantiate(hipGraphExec_t *pGraphExec, hipGraph_t graph)
{
	struct fh_graph *g = (struct fh_graph *)graph;
	struct fh_gexec *x;

	if (!pGraphExec || !g || g->magic != FH_GRAPH_MAGIC)
		return ret(hipErrorInvalidValue);
	x = calloc(1, sizeof(*x));
	if (!x)
		return ret(hipErrorOutOfMemory);
	if (g->n) {
		x->k = calloc(g->n, sizeof(*x->k));
		if (!x->k) {
			free(x);
			return ret(hipErrorOutOfMemory);
		}
		/* empty nodes (func NULL) launch nothing */
		for (size_t i = 0; i < g->n; i++)
			if (g->nodes[i]->func)
				x->k[x->n++] = *g->nodes[i];
	}
	x->magic = FH_GEXEC_MAGIC;
	*pGraphExec = (hipGraphExec_t)x;
	return hipSuccess;
}

FH_API hipError_t hipGraphInstantiate(hipGraphExec_t *pGraphExec, hipGraph_t graph, hipGraphNode_t *pErrorNode,
				      char *pLogBuffer, size_t bufferSize)
{
	(void)pErrorNode;
	if (pLogBuffer && bufferSize)
		pLogBuffer[0] = 0;
	return graph_instantiate(pGraphExec, graph);
}

FH_API hipError_t hipGraphInstantiateWithFlags(hipGraphExec_t *pGraphExec, hipGraph_t graph,
					       unsigned long long flags)
{
	(void)flags;
	return graph_instantiate(pGraphExec, graph);
}

FH_API hipError_t hipGraphAddEmptyNode(hipGraphNode_t *pGraphNode, hipGraph_t graph,
				       const hipGraphNode_t *pDependencies, size_t numDependencies)
{
	struct fh_graph *g = (struct fh_graph *)graph;
	struct fh_knode k, *node;
	hipError_t e;

	if (!pGraphNode || !g || g->magic != FH_GRAPH_MAGIC || (numDependencies && !pDependencies))
		return ret(hipErrorInvalidValue);
	memset(&k, 0, sizeof(k));
	e = graph_append(g, &k, &node);
	if (e != hipSuccess)
		return ret(e);
	*pGraphNode = (hipGraphNode_t)node;
	return hipSuccess;
}

FH_API hipError_t hipGraphExecGetFlags(hipGraphExec_t graphExec, unsigned long long *flags)
{
	struct fh_gexec *x = (struct fh_gexec *)graphExec;

	if (!x || x->magic != FH_GEXEC_MAGIC || !flags)
		return ret(hipErrorInvalidValue);
	*flags = 0;
	return hipSuccess;
}

FH_API hipError_t hipGraphExecDestroy(hipGraphExec_t graphExec)
{
	struct fh_gexec *x = (struct fh_gexec *)graphExec;

	if (!x || x->magic != FH_GEXEC_MAGIC)
		return ret(hipErrorInvalidValue);
	x->magic = 0;
	free(x->k);
	free(x);
	return hipSuccess;
}

FH_API hipError_t hipGraphLaunch(hipGraphExec_t graphExec, hipStream_t stream)
{
	return ret(graph_launch(graphExec, stream, 0));
}

FH_API hipError_t hipGraphLaunch_spt(hipGraphExec_t graphExec, hipStream_t stream)
{
	return ret(graph_launch(graphExec, stream, 1));
}

/* ---- hipGetProcAddress: looks up THIS library's own functions ---- */

static void fh_anchor(void)
{
}

static const struct {
	const char *name;
	const char *exported;
} fh_cxx_names[] = {
	{"hipExtModuleLaunchKernel", FAKEHIP_EXT_MODULE_LAUNCH_KERNEL_SYM},
};

static pthread_mutex_t g_self_lock = PTHREAD_MUTEX_INITIALIZER;
static void *g_self_handle;
static void *g_self_base;

static void *self_lookup(const char *name)
{
	Dl_info info;
	void *p;

	pthread_mutex_lock(&g_self_lock);
	if (!g_self_handle) {
		if (dladdr((void *)(uintptr_t)&fh_anchor, &info) && info.dli_fname) {
			g_self_handle = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
			g_self_base = info.dli_fbase;
		}
	}
	pthread_mutex_unlock(&g_self_lock);
	if (!g_self_handle)
		return NULL;
	p = dlsym(g_self_handle, name);
	/* dlsym on a handle also searches its dependencies (libc...): refuse those */
	if (!p || !dladdr(p, &info) || info.dli_fbase != g_self_base)
		return NULL;
	return p;
}

FH_API hipError_t hipGetProcAddress(const char *symbol, void **pfn, int hipVersion, uint64_t flags,
				    hipDriverProcAddressQueryResult *symbolStatus)
{
	char name[256];
	void *p = NULL;

	if (symbolStatus)
		*symbolStatus = HIP_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
	if (!symbol || !pfn || hipVersion < 0 ||
	    (flags & ~(uint64_t)(HIP_GET_PROC_ADDRESS_LEGACY_STREAM | HIP_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)))
		return ret(hipErrorInvalidValue);
	*pfn = NULL;
	if (strlen(symbol) + 5 > sizeof(name))
		return ret(hipErrorNotFound);
	if (flags & HIP_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) {
		size_t l = strlen(symbol);

		if (l < 4 || strcmp(symbol + l - 4, "_spt")) {
			snprintf(name, sizeof(name), "%s_spt", symbol);
			p = self_lookup(name);
		}
	}
	if (!p)
		p = self_lookup(symbol);
	for (size_t i = 0; !p && i < sizeof(fh_cxx_names) / sizeof(fh_cxx_names[0]); i++)
		if (!strcmp(symbol, fh_cxx_names[i].name))
			p = self_lookup(fh_cxx_names[i].exported);
	if (!p)
		return ret(hipErrorNotFound);
	*pfn = p;
	if (symbolStatus)
		*symbolStatus = HIP_GET_PROC_ADDRESS_SUCCESS;
	return hipSuccess;
}

/* ---- fakehip extensions ---- */

static hipError_t queue_info(hipStream_t h, fakehipQueueInfo *info)
{
	struct fh_stream *st;
	struct fh_queue *q;
	hipError_t e = lock_init();

	if (e != hipSuccess)
		return e;
	e = resolve_stream(h, 0, 1, &st);
	if (e == hipSuccess && !st->q)
		e = hipErrorNotReady;
	if (e == hipSuccess) {
		q = st->q;
		memset(info, 0, sizeof(*info));
		info->queue_id = q->queue_id;
		info->gpu_id = q->gpu_id;
		info->kfd_priority = q->kfd_prio;
		info->stream_users = (uint32_t)q->users;
		info->hip_priority = st->prio;
		info->ring_size = (uint32_t)q->ring.size;
		info->ring_base = (uint64_t)(uintptr_t)q->ring.ptr;
		info->write_pointer = (uint64_t)(uintptr_t)q_wptr(q);
		info->read_pointer = (uint64_t)(uintptr_t)q_rptr(q);
		info->doorbell_offset = q->doorbell_offset;
		info->write_index = __atomic_load_n(&q->wshadow, __ATOMIC_ACQUIRE);
		info->read_index = q_read_index(q);
		info->ctx_save_restore_size = G.dev[q->dev].cwsr_size;
		info->ctl_stack_size = G.dev[q->dev].ctl_stack_size;
		info->cwsr_bytes = q->cwsr.size;
	}
	pthread_mutex_unlock(&g_lock);
	return e;
}

FH_API int fakehipStreamQueueInfo(hipStream_t stream, fakehipQueueInfo *info)
{
	if (!info)
		return ret(hipErrorInvalidValue);
	return ret(queue_info(stream, info));
}

FH_API int fakehipStreamQueueId(hipStream_t stream, uint32_t *queue_id, uint32_t *gpu_id)
{
	fakehipQueueInfo info;
	hipError_t e = queue_info(stream, &info);

	if (e == hipSuccess) {
		if (queue_id)
			*queue_id = info.queue_id;
		if (gpu_id)
			*gpu_id = info.gpu_id;
	}
	return e == hipErrorNotReady ? e : ret(e);
}
