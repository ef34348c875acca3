/*
 * event.c: events. An event records a (queue, write index) position; it is
 * complete once the queue's read index passed it, and stamped with the time
 * fakehip first saw that.
 */
#include "fakehip_internal.h"

/* ------------------------------------------------------------------ */
/* events                                                             */
/* ------------------------------------------------------------------ */

/* Mark recorded events on queue `uid` whose position completed. g_lock held. */
void events_observe_locked(struct fh_queue *q, uint64_t t)
{
	for (struct fh_event *ev = G.events; ev; ev = ev->next) {
		if (ev->recorded && !ev->done && ev->q_uid == q->uid && q_done(q, ev->pos)) {
			ev->done = 1;
			ev->t_done_ns = t;
		}
	}
}

void events_observe(struct fh_queue *q)
{
	uint64_t t = now_ns();

	pthread_mutex_lock(&g_lock);
	events_observe_locked(q, t);
	pthread_mutex_unlock(&g_lock);
}

struct fh_event *event_find(hipEvent_t h)
{
	for (struct fh_event *ev = G.events; ev; ev = ev->next)
		if ((void *)ev == (void *)h)
			return ev;
	return NULL;
}

void event_record_locked(struct fh_event *ev, struct fh_stream *st)
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
hipError_t event_check(hipEvent_t h, int wait)
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
