/*
 * Minimal HIP runtime API for fakehip, kfdq's stand-in libamdhip64.so.6.
 *
 * Written for kfdq. Names, types, enum values and function signatures follow
 * the public HIP API so that programs written against this header call the
 * same symbols (with the same ABI) as programs built against ROCm's header.
 * Only the subset fakehip implements is declared, plus a few fakehip
 * extensions at the end (prefixed "fakehip").
 */
#ifndef FAKEHIP_HIP_RUNTIME_API_H
#define FAKEHIP_HIP_RUNTIME_API_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- errors ---- */
typedef enum hipError_t {
	hipSuccess = 0,
	hipErrorInvalidValue = 1,
	hipErrorOutOfMemory = 2,
	hipErrorMemoryAllocation = 2,
	hipErrorNotInitialized = 3,
	hipErrorInitializationError = 3,
	hipErrorInvalidConfiguration = 9,
	hipErrorInvalidMemcpyDirection = 21,
	hipErrorInvalidDeviceFunction = 98,
	hipErrorNoDevice = 100,
	hipErrorInvalidDevice = 101,
	hipErrorInvalidContext = 201,
	hipErrorOperatingSystem = 304,
	hipErrorInvalidHandle = 400,
	hipErrorInvalidResourceHandle = 400,
	hipErrorIllegalState = 401,
	hipErrorNotFound = 500,
	hipErrorNotReady = 600,
	hipErrorLaunchTimeOut = 702,
	hipErrorContextIsDestroyed = 709,
	hipErrorLaunchFailure = 719,
	hipErrorNotSupported = 801,
	hipErrorStreamCaptureUnsupported = 900,
	hipErrorStreamCaptureInvalidated = 901,
	hipErrorStreamCaptureUnmatched = 903,
	hipErrorStreamCaptureWrongThread = 908,
	hipErrorUnknown = 999
} hipError_t;

/* ---- handles ---- */
typedef int hipDevice_t;
typedef struct ihipStream_t *hipStream_t;
typedef struct ihipEvent_t *hipEvent_t;
typedef struct ihipModuleSymbol_t *hipFunction_t;
typedef struct ihipGraph *hipGraph_t;
typedef struct hipGraphNode *hipGraphNode_t;
typedef struct hipGraphExec *hipGraphExec_t;

/* Special stream handles (same values as HIP). */
#define hipStreamLegacy ((hipStream_t)1)
#define hipStreamPerThread ((hipStream_t)2)

#define hipStreamDefault 0x0
#define hipStreamNonBlocking 0x1

#define hipEventDefault 0x0
#define hipEventBlockingSync 0x1
#define hipEventDisableTiming 0x2
#define hipEventInterprocess 0x4

typedef struct dim3 {
	uint32_t x;
	uint32_t y;
	uint32_t z;
} dim3;

typedef enum hipMemcpyKind {
	hipMemcpyHostToHost = 0,
	hipMemcpyHostToDevice = 1,
	hipMemcpyDeviceToHost = 2,
	hipMemcpyDeviceToDevice = 3,
	hipMemcpyDefault = 4
} hipMemcpyKind;

typedef enum hipStreamCaptureMode {
	hipStreamCaptureModeGlobal = 0,
	hipStreamCaptureModeThreadLocal = 1,
	hipStreamCaptureModeRelaxed = 2
} hipStreamCaptureMode;

typedef enum hipStreamCaptureStatus {
	hipStreamCaptureStatusNone = 0,
	hipStreamCaptureStatusActive = 1,
	hipStreamCaptureStatusInvalidated = 2
} hipStreamCaptureStatus;

typedef enum hipDriverProcAddressQueryResult {
	HIP_GET_PROC_ADDRESS_SUCCESS = 0,
	HIP_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND = 1,
	HIP_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT = 2
} hipDriverProcAddressQueryResult;

#define HIP_GET_PROC_ADDRESS_DEFAULT 0x0
#define HIP_GET_PROC_ADDRESS_LEGACY_STREAM 0x1
#define HIP_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM 0x2

typedef void (*hipHostFn_t)(void *userData);
typedef void (*hipStreamCallback_t)(hipStream_t stream, hipError_t status, void *userData);

typedef struct hipKernelNodeParams {
	dim3 blockDim;
	void **extra;
	void *func;
	dim3 gridDim;
	void **kernelParams;
	unsigned int sharedMemBytes;
} hipKernelNodeParams;

/* ---- init / device ---- */
hipError_t hipInit(unsigned int flags);
hipError_t hipGetDeviceCount(int *count);
hipError_t hipSetDevice(int deviceId);
hipError_t hipGetDevice(int *deviceId);
hipError_t hipDeviceSynchronize(void);
hipError_t hipDeviceReset(void);
hipError_t hipCtxSynchronize(void);
hipError_t hipRuntimeGetVersion(int *runtimeVersion);
hipError_t hipDriverGetVersion(int *driverVersion);
hipError_t hipDeviceGetStreamPriorityRange(int *leastPriority, int *greatestPriority);

/* ---- errors ---- */
const char *hipGetErrorString(hipError_t error);
const char *hipGetErrorName(hipError_t error);
hipError_t hipGetLastError(void);
hipError_t hipPeekAtLastError(void);
hipError_t hipExtGetLastError(void);

/* ---- streams ---- */
hipError_t hipStreamCreate(hipStream_t *stream);
hipError_t hipStreamCreateWithFlags(hipStream_t *stream, unsigned int flags);
hipError_t hipStreamCreateWithPriority(hipStream_t *stream, unsigned int flags, int priority);
hipError_t hipExtStreamCreateWithCUMask(hipStream_t *stream, uint32_t cuMaskSize, const uint32_t *cuMask);
hipError_t hipStreamDestroy(hipStream_t stream);
hipError_t hipStreamSynchronize(hipStream_t stream);
hipError_t hipStreamQuery(hipStream_t stream);
hipError_t hipStreamWaitEvent(hipStream_t stream, hipEvent_t event, unsigned int flags);
hipError_t hipStreamGetPriority(hipStream_t stream, int *priority);
hipError_t hipStreamGetFlags(hipStream_t stream, unsigned int *flags);
hipError_t hipStreamGetDevice(hipStream_t stream, hipDevice_t *device);
hipError_t hipStreamAddCallback(hipStream_t stream, hipStreamCallback_t callback, void *userData,
				unsigned int flags);
hipError_t hipLaunchHostFunc(hipStream_t stream, hipHostFn_t fn, void *userData);
hipError_t hipStreamBeginCapture(hipStream_t stream, hipStreamCaptureMode mode);
hipError_t hipStreamEndCapture(hipStream_t stream, hipGraph_t *pGraph);
hipError_t hipStreamIsCapturing(hipStream_t stream, hipStreamCaptureStatus *pCaptureStatus);
hipError_t hipThreadExchangeStreamCaptureMode(hipStreamCaptureMode *mode);

/* ---- events ---- */
hipError_t hipEventCreate(hipEvent_t *event);
hipError_t hipEventCreateWithFlags(hipEvent_t *event, unsigned flags);
hipError_t hipEventDestroy(hipEvent_t event);
hipError_t hipEventRecord(hipEvent_t event, hipStream_t stream);
hipError_t hipEventRecordWithFlags(hipEvent_t event, hipStream_t stream, unsigned int flags);
hipError_t hipEventSynchronize(hipEvent_t event);
hipError_t hipEventQuery(hipEvent_t event);
hipError_t hipEventElapsedTime(float *ms, hipEvent_t start, hipEvent_t stop);

/* ---- memory (host memory in this fake) ---- */
hipError_t hipMalloc(void **ptr, size_t size);
hipError_t hipFree(void *ptr);
hipError_t hipHostMalloc(void **ptr, size_t size, unsigned int flags);
hipError_t hipHostFree(void *ptr);
hipError_t hipMallocAsync(void **dev_ptr, size_t size, hipStream_t stream);
hipError_t hipFreeAsync(void *dev_ptr, hipStream_t stream);
hipError_t hipMemcpy(void *dst, const void *src, size_t sizeBytes, hipMemcpyKind kind);
hipError_t hipMemcpyAsync(void *dst, const void *src, size_t sizeBytes, hipMemcpyKind kind,
			  hipStream_t stream);
hipError_t hipMemset(void *dst, int value, size_t sizeBytes);
hipError_t hipMemsetAsync(void *dst, int value, size_t sizeBytes, hipStream_t stream);

/* ---- launches ---- */
hipError_t hipLaunchKernel(const void *function_address, dim3 numBlocks, dim3 dimBlocks, void **args,
			   size_t sharedMemBytes, hipStream_t stream);
hipError_t hipExtLaunchKernel(const void *function_address, dim3 numBlocks, dim3 dimBlocks, void **args,
			      size_t sharedMemBytes, hipStream_t stream, hipEvent_t startEvent,
			      hipEvent_t stopEvent, int flags);
hipError_t hipLaunchCooperativeKernel(const void *f, dim3 gridDim, dim3 blockDimX, void **kernelParams,
				      unsigned int sharedMemBytes, hipStream_t stream);
hipError_t hipModuleLaunchKernel(hipFunction_t f, unsigned int gridDimX, unsigned int gridDimY,
				 unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
				 unsigned int blockDimZ, unsigned int sharedMemBytes, hipStream_t stream,
				 void **kernelParams, void **extra);
hipError_t hipModuleLaunchCooperativeKernel(hipFunction_t f, unsigned int gridDimX, unsigned int gridDimY,
					    unsigned int gridDimZ, unsigned int blockDimX,
					    unsigned int blockDimY, unsigned int blockDimZ,
					    unsigned int sharedMemBytes, hipStream_t stream,
					    void **kernelParams);
hipError_t __hipPushCallConfiguration(dim3 gridDim, dim3 blockDim, size_t sharedMem, hipStream_t stream);
hipError_t __hipPopCallConfiguration(dim3 *gridDim, dim3 *blockDim, size_t *sharedMem, hipStream_t *stream);

/* Registration entry points that hipcc-generated constructors call (no-ops here). */
void **__hipRegisterFatBinary(const void *data);
void __hipUnregisterFatBinary(void **modules);
void __hipRegisterFunction(void **modules, const void *hostFunction, char *deviceFunction,
			   const char *deviceName, unsigned int threadLimit, void *tid, void *bid,
			   dim3 *blockDim, dim3 *gridDim, int *wSize);

/* ---- graphs ---- */
hipError_t hipGraphCreate(hipGraph_t *pGraph, unsigned int flags);
hipError_t hipGraphDestroy(hipGraph_t graph);
hipError_t hipGraphAddKernelNode(hipGraphNode_t *pGraphNode, hipGraph_t graph,
				 const hipGraphNode_t *pDependencies, size_t numDependencies,
				 const hipKernelNodeParams *pNodeParams);
hipError_t hipGraphInstantiate(hipGraphExec_t *pGraphExec, hipGraph_t graph, hipGraphNode_t *pErrorNode,
			       char *pLogBuffer, size_t bufferSize);
hipError_t hipGraphInstantiateWithFlags(hipGraphExec_t *pGraphExec, hipGraph_t graph, unsigned long long flags);
hipError_t hipGraphAddEmptyNode(hipGraphNode_t *pGraphNode, hipGraph_t graph, const hipGraphNode_t *pDependencies,
				size_t numDependencies);
hipError_t hipGraphExecGetFlags(hipGraphExec_t graphExec, unsigned long long *flags);
hipError_t hipGraphExecDestroy(hipGraphExec_t graphExec);
hipError_t hipGraphLaunch(hipGraphExec_t graphExec, hipStream_t stream);

/* ---- entry-point lookup (ROCm 6.1+) ---- */
hipError_t hipGetProcAddress(const char *symbol, void **pfn, int hipVersion, uint64_t flags,
			     hipDriverProcAddressQueryResult *symbolStatus);

/* ---- per-thread default stream variants (NULL stream = per-thread stream) ---- */
hipError_t hipLaunchKernel_spt(const void *function_address, dim3 numBlocks, dim3 dimBlocks, void **args,
			       size_t sharedMemBytes, hipStream_t stream);
hipError_t hipLaunchCooperativeKernel_spt(const void *f, dim3 gridDim, dim3 blockDim, void **kernelParams,
					  uint32_t sharedMemBytes, hipStream_t hStream);
hipError_t hipMemcpy_spt(void *dst, const void *src, size_t sizeBytes, hipMemcpyKind kind);
hipError_t hipMemcpyAsync_spt(void *dst, const void *src, size_t sizeBytes, hipMemcpyKind kind,
			      hipStream_t stream);
hipError_t hipMemset_spt(void *dst, int value, size_t sizeBytes);
hipError_t hipMemsetAsync_spt(void *dst, int value, size_t sizeBytes, hipStream_t stream);
hipError_t hipStreamSynchronize_spt(hipStream_t stream);
hipError_t hipStreamQuery_spt(hipStream_t stream);
hipError_t hipStreamWaitEvent_spt(hipStream_t stream, hipEvent_t event, unsigned int flags);
hipError_t hipStreamGetPriority_spt(hipStream_t stream, int *priority);
hipError_t hipStreamGetFlags_spt(hipStream_t stream, unsigned int *flags);
hipError_t hipStreamAddCallback_spt(hipStream_t stream, hipStreamCallback_t callback, void *userData,
				    unsigned int flags);
hipError_t hipStreamBeginCapture_spt(hipStream_t stream, hipStreamCaptureMode mode);
hipError_t hipStreamEndCapture_spt(hipStream_t stream, hipGraph_t *pGraph);
hipError_t hipStreamIsCapturing_spt(hipStream_t stream, hipStreamCaptureStatus *pCaptureStatus);
hipError_t hipEventRecord_spt(hipEvent_t event, hipStream_t stream);
hipError_t hipLaunchHostFunc_spt(hipStream_t stream, hipHostFn_t fn, void *userData);
hipError_t hipGraphLaunch_spt(hipGraphExec_t graphExec, hipStream_t stream);

/* ---- fakehip extensions (not in HIP; exported under version node FAKEHIP_1) ---- */

/*
 * A "kernel" for fakehip: pass a pointer to one of these as the function
 * (hipLaunchKernel's function_address, or cast to hipFunction_t) and the AQL
 * dispatch packet carries duration_ns in its reserved2 field, which the kfdq
 * emulator uses as the kernel's run time. Any other function pointer gets
 * $FAKEHIP_KERNEL_NS (default 20000 ns).
 */
#define FAKEHIP_KERNEL_MAGIC 0x4B484B46u /* "FKHK" little-endian */
struct fakehip_kernel {
	uint32_t magic; /* FAKEHIP_KERNEL_MAGIC */
	uint32_t reserved;
	uint64_t duration_ns;
};
#define FAKEHIP_KERNEL(ns) {FAKEHIP_KERNEL_MAGIC, 0, (uint64_t)(ns)}

/*
 * Which KFD queue backs a stream (NULL / hipStreamLegacy = the null stream,
 * hipStreamPerThread = the calling thread's default stream). Never creates a
 * queue: returns hipErrorNotReady when the stream has no queue yet.
 */
int fakehipStreamQueueId(hipStream_t stream, uint32_t *queue_id, uint32_t *gpu_id);

typedef struct fakehipQueueInfo {
	uint32_t queue_id;      /* KFD queue id */
	uint32_t gpu_id;        /* topology gpu_id */
	uint32_t kfd_priority;  /* CREATE_QUEUE queue_priority (0 / 7 / 11) */
	uint32_t stream_users;  /* streams currently sharing the queue */
	int32_t hip_priority;   /* the stream's effective (clamped) HIP priority */
	uint32_t ring_size;     /* bytes */
	uint64_t ring_base;     /* ring_base_address */
	uint64_t write_pointer; /* write_pointer_address */
	uint64_t read_pointer;  /* read_pointer_address */
	uint64_t doorbell_offset;
	uint64_t write_index;   /* packets submitted so far */
	uint64_t read_index;    /* current read_dispatch_id */
	uint32_t ctx_save_restore_size; /* CREATE_QUEUE ctx_save_restore_size (per-XCC cwsr_size) */
	uint32_t ctl_stack_size;        /* CREATE_QUEUE ctl_stack_size */
	uint64_t cwsr_bytes;            /* size of the CWSR allocation at ctx_save_restore_address */
} fakehipQueueInfo;

/* Same lookup with details; hipErrorNotReady if the stream has no queue yet. */
int fakehipStreamQueueInfo(hipStream_t stream, fakehipQueueInfo *info);

#ifdef __cplusplus
} /* extern "C" */
#endif

/*
 * hipExtModuleLaunchKernel is a C++ function in HIP (hip_ext.h), so the real
 * library exports it only under its Itanium-mangled name. C++ callers get the
 * mangling from the declaration; C callers are bound to the same symbol with
 * an asm label.
 */
#ifdef __cplusplus
hipError_t hipExtModuleLaunchKernel(hipFunction_t f, uint32_t globalWorkSizeX, uint32_t globalWorkSizeY,
				    uint32_t globalWorkSizeZ, uint32_t localWorkSizeX, uint32_t localWorkSizeY,
				    uint32_t localWorkSizeZ, size_t sharedMemBytes, hipStream_t hStream,
				    void **kernelParams, void **extra, hipEvent_t startEvent = NULL,
				    hipEvent_t stopEvent = NULL, uint32_t flags = 0);
#else
#define FAKEHIP_EXT_MODULE_LAUNCH_KERNEL_SYM \
	"_Z24hipExtModuleLaunchKernelP18ihipModuleSymbol_tjjjjjjmP12ihipStream_tPPvS4_P11ihipEvent_tS6_j"
hipError_t hipExtModuleLaunchKernel(hipFunction_t f, uint32_t globalWorkSizeX, uint32_t globalWorkSizeY,
				    uint32_t globalWorkSizeZ, uint32_t localWorkSizeX, uint32_t localWorkSizeY,
				    uint32_t localWorkSizeZ, size_t sharedMemBytes, hipStream_t hStream,
				    void **kernelParams, void **extra, hipEvent_t startEvent,
				    hipEvent_t stopEvent, uint32_t flags)
	__asm__(FAKEHIP_EXT_MODULE_LAUNCH_KERNEL_SYM);
#endif

#endif /* FAKEHIP_HIP_RUNTIME_API_H */
