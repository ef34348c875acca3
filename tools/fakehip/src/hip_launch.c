/*
 * hip_launch.c (layer 7): kernel launches (the hipLaunchKernel and
 * hipModuleLaunchKernel families), the call-configuration stack and
 * fat-binary registration of hipcc-generated code, and the HIP graph calls.
 */
#include "fakehip_internal.h"

/* __hipPushCallConfiguration's stack (hipcc's <<<...>>> launches), per thread; its depth,
 * t_ncfg, is in runtime.c (the fork child empties the stack) */
#define FH_CFG_STACK 16
struct fh_call_config {
	dim3 grid, block;
	size_t shmem;
	hipStream_t stream;
};

static __thread struct fh_call_config t_cfg[FH_CFG_STACK];

#define FH_GEXEC_MAGIC 0x46484758u
struct fh_gexec {
	uint32_t magic;
	size_t n;
	struct fh_knode *k;
};

/* ------------------------------------------------------------------ */
/* launches                                                           */
/* ------------------------------------------------------------------ */

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
