/*
 * event.c (layer 3): events and the waits that stamp them. An event records
 * a (queue, write index) position; it is complete once the queue's read
 * index passed it, and stamped with the time fakehip first saw that, which
 * every wait on a queue position does as the read index moves. The HIP event
 * calls are in hip_event.c.
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

static void events_observe(struct fh_queue *q)
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


/* ------------------------------------------------------------------ */
/* waiting                                                            */
/* ------------------------------------------------------------------ */

/*
 * Poll until `pos` completes on pinned queue q; bounded by the timeout.
 * Whenever the read index moves, events on the queue are stamped, which is
 * what makes hipEventElapsedTime approximately right.
 */
hipError_t wait_pos(struct fh_queue *q, uint64_t pos)
{
	uint64_t deadline = now_ns() + G.timeout_ns;
	uint64_t seen = q_read_index(q);

	while (!q_done(q, pos)) {
		uint64_t r;

		if (now_ns() > deadline) {
			DBG(1, "timeout waiting for queue %u to reach %llu (read index %llu)", q->queue_id,
			    (unsigned long long)pos, (unsigned long long)q_read_index(q));
			return hipErrorLaunchTimeOut;
		}
		nap();
		r = q_read_index(q);
		if (r != seen) {
			seen = r;
			events_observe(q);
		}
	}
	events_observe(q);
	return hipSuccess;
}
