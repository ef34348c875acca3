/*
 * hip_device.c (layer 7): the HIP calls that are not about streams, events,
 * memory, launches or graphs: error names and strings, the last error,
 * versions, device selection, synchronisation and reset, and
 * hipGetProcAddress.
 */
#include "fakehip_internal.h"

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
/* last error, versions, devices                                      */
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

/* Wait (bounded) for the work on every queue of device dev (-1: of all devices). */
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
