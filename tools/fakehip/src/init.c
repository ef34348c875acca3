/*
 * init.c (layer 5): the life of the runtime. Lazy initialisation on the first
 * HIP call (configuration from the environment, /dev/kfd, GET_VERSION, the
 * topology, RUNTIME_ENABLE), the fork handlers, and the teardown of every
 * stream and queue. It sits above the objects it tears down (streams,
 * queues, graphs) and below every file that takes g_lock through
 * lock_init/ensure_init.
 */
#include "fakehip_internal.h"

/* defaults of the environment variables read at init */
#define FH_DEFAULT_RING 65536u
#define FH_DEFAULT_KERNEL_NS 20000ull
#define FH_DEFAULT_TIMEOUT_MS 10000ull

static pthread_once_t g_once = PTHREAD_ONCE_INIT;

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

/* ------------------------------------------------------------------ */
/* init, fork, reset                                                  */
/* ------------------------------------------------------------------ */

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
	if (read_topology())
		goto fail;
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

hipError_t lock_init(void)
{
	hipError_t e;

	pthread_once(&g_once, once_init);
	pthread_mutex_lock(&g_lock);
	e = init_locked();
	if (e != hipSuccess)
		pthread_mutex_unlock(&g_lock);
	return e;
}

hipError_t ensure_init(void)
{
	hipError_t e = lock_init();

	if (e == hipSuccess)
		pthread_mutex_unlock(&g_lock);
	return e;
}

/* ------------------------------------------------------------------ */
/* teardown                                                           */
/* ------------------------------------------------------------------ */

/* Free streams and queues (and tell KFD if asked). g_lock held or child. */
void free_all_objects(int talk_to_kfd)
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
