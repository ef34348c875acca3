/*
 * hip_ext.c (layer 7): fakehip's own extensions (version node FAKEHIP_1):
 * which KFD queue backs a stream, and its details.
 */
#include "fakehip_internal.h"

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
