/*
 * sync.c (layer 6): waiting, from a HIP call, for a stream's submitted work
 * or for an event. Both take g_lock to find their object, then wait on its
 * queue position without it.
 */
#include "fakehip_internal.h"

/* Wait for a stream's submitted work. Takes/drops g_lock itself. */
hipError_t stream_wait(hipStream_t h, int spt)
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
