/*
 * hip_event.c (layer 7): the HIP event calls: creation, destruction,
 * recording a stream's position (no marker packet is enqueued),
 * synchronisation, queries and elapsed time.
 */
#include "fakehip_internal.h"

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
