/*
 * hip_stream.c (layer 7): the HIP stream calls: creation (a user stream gets
 * its queue here), destruction, synchronisation, queries, waiting on an
 * event, host functions, and stream capture into a graph.
 */
#include "fakehip_internal.h"

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
