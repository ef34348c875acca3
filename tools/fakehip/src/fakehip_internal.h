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
 *                       2: also stream-to-queue sharing decisions (a GPU
 *                       node without the CWSR sizes in sysfs is reported
 *                       whatever the level)
 *   FAKEHIP_NOOP_LAUNCH 1: the hipLaunchKernel family only validates its
 *                       arguments and returns hipSuccess (benchmarks)
 *
 * Source files, in layers (each includes this header first). A file calls
 * functions and uses variables of the layers below its own only, never of
 * its own layer or above (tests/layers.rs checks the object files' symbols;
 * layers.rs lists them):
 *   fakehip_internal.h  what several files share: the structs of devices,
 *                       buffers, queues, streams, events, graphs and kernel
 *                       nodes, the global state G and its lock, and the
 *                       functions one file calls in another (everything
 *                       else is static in its file)
 *   0 runtime.c         the global state; logging, clock, poll interval,
 *                       KFD ioctl, errno mapping, the thread's device
 *   1 topology.c        device discovery from the sysfs topology (GPU
 *                       nodes, render minors, CWSR sizes)
 *   1 buffer.c          KFD USERPTR buffers (CPU VA == GPU VA)
 *   1 graph.c           graphs of kernel nodes (the objects)
 *   2 queue.c           KFD AQL queues: creation, priority pools, doorbells,
 *                       packet publication, completion
 *   3 event.c           events, and the bounded waits on a queue position
 *                       that stamp them
 *   4 stream.c          stream objects: resolving handles, the null and
 *                       per-thread streams, releasing and draining
 *   5 init.c            lazy initialisation, fork handlers, teardown of
 *                       every stream and queue
 *   6 submit.c          putting kernels or a barrier on a stream
 *   6 sync.c            waiting for a stream's work or an event
 *   7 hip_device.c      error strings, last error, versions, device calls,
 *                       synchronisation, reset, hipGetProcAddress
 *   7 hip_memory.c      the hipMalloc / hipMemcpy / hipMemset family
 *   7 hip_stream.c      the stream API and stream capture
 *   7 hip_event.c       the event API
 *   7 hip_launch.c      kernel launches, call configurations, fat-binary
 *                       registration, the graph API
 *   7 hip_ext.c         fakehip's own extensions (FAKEHIP_1)
 * Layer 7 holds every exported function (FH_API) and nothing else calls
 * them. Objects below init.c (queues, events, streams) are used with g_lock
 * held and never initialise the runtime; init.c sits above them because
 * its teardown (fork, hipDeviceReset) frees them.
 */
#ifndef FAKEHIP_INTERNAL_H
#define FAKEHIP_INTERNAL_H

/* every .c includes this header before any system header */
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

/*
 * Everything declared below is internal to the library. The pragma makes
 * the declarations hidden too (-fvisibility=hidden covers only definitions),
 * so they stay out of the dynamic symbol table and the compiler calls these
 * functions and addresses these variables directly, not through the PLT or
 * the GOT (thread-locals go through __tls_get_addr in a shared library
 * either way).
 */
#pragma GCC visibility push(hidden)

/* ------------------------------------------------------------------ */
/* constants                                                          */
/* ------------------------------------------------------------------ */

#define FH_MAX_DEV 64
#define FH_PAGE 4096u
#define FH_DOORBELL_SLICE 8192u

/* HIP priorities (ROCclr hip::Stream::Priority). */
#define FH_PRIO_HIGH (-1)
#define FH_PRIO_NORMAL 0
#define FH_PRIO_LOW 1

/* Pools, indexed by 1 - hip priority: 0 low, 1 normal, 2 high (queue.c). */
extern const uint32_t fh_pool_kfd_prio[3];

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

/* A graph of kernel nodes (graph.c). */
#define FH_GRAPH_MAGIC 0x46484752u
struct fh_graph {
	uint32_t magic;
	size_t n, cap;
	struct fh_knode **nodes;
};

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

struct fh_dbpage {
	uint64_t page;
	void *base;
};

struct fh_dev {
	uint32_t node;
	uint32_t gpu_id;
	uint32_t render_minor;
	uint32_t num_xcc;
	uint32_t cwsr_size;         /* per XCC, from sysfs */
	uint32_t ctl_stack_size;    /* per XCC, from sysfs */
	uint32_t debug_memory_size; /* per XCC, computed (not in sysfs) */
	int render_fd;
	int vm_ready;
	struct fh_dbpage db[4];
	int ndb;
	struct fh_stream *null_stream;
};

enum fh_sync_mode { FH_SYNC_RPTR = 0, FH_SYNC_SIGNAL = 1 };

/* The runtime's global state (defined in runtime.c). */
struct fh_global {
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
};

extern struct fh_global G;
extern pthread_mutex_t g_lock;

extern __thread int t_device;
extern __thread hipError_t t_last_error;
/* depth of the __hipPushCallConfiguration stack (hip_launch.c; emptied in a fork child) */
extern __thread int t_ncfg;

/* ------------------------------------------------------------------ */
/* runtime.c (layer 0): state, helpers                                */
/* ------------------------------------------------------------------ */

void fh_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#define DBG(level, ...)                          \
	do {                                     \
		if (G.debug >= (level))          \
			fh_log("fakehip: " __VA_ARGS__); \
	} while (0)

/* inline: on every API call's return path (ret) or trivial (align_up) */
static inline uint64_t align_up(uint64_t v, uint64_t a)
{
	return (v + a - 1) / a * a;
}

/* Record a failure as the thread's last error; returns e. */
static inline hipError_t ret(hipError_t e)
{
	if (e != hipSuccess)
		t_last_error = e;
	return e;
}

uint64_t now_ns(void);
/* sleep one poll interval (50 us) */
void nap(void);
/* ioctl on the KFD fd, retried on EINTR/EAGAIN; 0 or -errno */
int kfd_ioctl(unsigned long req, void *arg);
hipError_t errno_to_hip(int neg);
/* the calling thread's device */
int cur_dev(void);

/* ------------------------------------------------------------------ */
/* topology.c (layer 1)                                               */
/* ------------------------------------------------------------------ */

/*
 * Fill G.dev (G.ndev) from the sysfs topology. -1 (after a message on
 * stderr) when a GPU node lacks cwsr_size or ctl_stack_size; else 0.
 */
int read_topology(void);

/* ------------------------------------------------------------------ */
/* buffer.c (layer 1)                                                 */
/* ------------------------------------------------------------------ */

hipError_t buf_alloc(struct fh_dev *d, struct fh_buf *b, size_t size, const char *what);
void buf_free(struct fh_dev *d, struct fh_buf *b, int talk_to_kfd);

/* ------------------------------------------------------------------ */
/* graph.c (layer 1)                                                  */
/* ------------------------------------------------------------------ */

hipError_t graph_append(struct fh_graph *g, const struct fh_knode *k, struct fh_knode **out);
struct fh_graph *graph_new(void);
void graph_free(struct fh_graph *g);

/* ------------------------------------------------------------------ */
/* queue.c (layer 2)                                                  */
/* ------------------------------------------------------------------ */

volatile uint64_t *q_wptr(struct fh_queue *q);
volatile uint64_t *q_rptr(struct fh_queue *q);
uint64_t q_read_index(struct fh_queue *q);
int q_done(struct fh_queue *q, uint64_t pos);
void q_destroy_final(struct fh_queue *q, int talk_to_kfd);
void q_release(struct fh_queue *q);
void q_pin(struct fh_queue *q);
void q_unpin(struct fh_queue *q);
struct fh_queue *q_find_uid(uint64_t uid);
hipError_t q_create(int dev, int pool, uint32_t kfd_prio, struct fh_queue **out);
hipError_t pool_acquire(struct fh_stream *st);
/* a kernel dispatch of k, or a barrier when k is NULL (q pinned, g_lock not held) */
hipError_t q_publish(struct fh_queue *q, struct fh_stream *st, const struct fh_knode *k);

/* ------------------------------------------------------------------ */
/* event.c (layer 3)                                                  */
/* ------------------------------------------------------------------ */

void events_observe_locked(struct fh_queue *q, uint64_t t);
struct fh_event *event_find(hipEvent_t h);
void event_record_locked(struct fh_event *ev, struct fh_stream *st);
/* poll (bounded) until pos completes on pinned queue q, stamping events */
hipError_t wait_pos(struct fh_queue *q, uint64_t pos);

/* ------------------------------------------------------------------ */
/* stream.c (layer 4)                                                 */
/* ------------------------------------------------------------------ */

/* per-thread default streams, released by pts_destructor (the key is created in init.c) */
extern pthread_key_t g_pts_key;
extern int g_pts_key_ok;

struct fh_stream *stream_new(int kind, int dev, int prio, unsigned flags);
void stream_unlink_free(struct fh_stream *st);
struct fh_stream *stream_find(hipStream_t h);
hipError_t resolve_stream(hipStream_t h, int spt, int peek, struct fh_stream **out);
hipError_t stream_queue(struct fh_stream *st);
void stream_release_locked(struct fh_stream *st);
void stream_drain_release_locked(struct fh_stream *st);
void pts_destructor(void *v);

/* ------------------------------------------------------------------ */
/* init.c (layer 5)                                                   */
/* ------------------------------------------------------------------ */

/* initialise if needed; on success returns with g_lock held */
hipError_t lock_init(void);
/* initialise if needed; g_lock not held on return */
hipError_t ensure_init(void);
/* Free streams and queues (and tell KFD if asked). g_lock held or child. */
void free_all_objects(int talk_to_kfd);

/* ------------------------------------------------------------------ */
/* submit.c, sync.c (layer 6)                                         */
/* ------------------------------------------------------------------ */

hipError_t submit(hipStream_t h, int spt, const struct fh_knode *ks, size_t n, hipEvent_t start,
		  hipEvent_t stop);
hipError_t stream_wait(hipStream_t h, int spt);
hipError_t event_check(hipEvent_t h, int wait);

#pragma GCC visibility pop

#endif /* FAKEHIP_INTERNAL_H */
