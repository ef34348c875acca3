/*
 * submit.c (layer 6): putting work on a stream. Kernels or a barrier go on
 * the stream's queue (which the null and per-thread streams get here, at
 * their first submission), with events recorded around them; a capturing
 * stream records the kernels into its graph instead. Takes g_lock itself.
 */
#include "fakehip_internal.h"

/*
 * Submit kernels (n > 0) or one barrier (ks == NULL) on a stream, optionally
 * recording events around them. A capturing stream records kernels into its
 * graph instead.
 */
hipError_t submit(hipStream_t h, int spt, const struct fh_knode *ks, size_t n, hipEvent_t start,
		  hipEvent_t stop)
{
	struct fh_stream *st;
	struct fh_queue *q;
	struct fh_event *ev_start = NULL, *ev_stop = NULL;
	hipError_t e = lock_init();

	if (e != hipSuccess)
		return e;
	e = resolve_stream(h, spt, 0, &st);
	if (e != hipSuccess)
		goto out_unlock;
	if ((start && !(ev_start = event_find(start))) || (stop && !(ev_stop = event_find(stop)))) {
		e = hipErrorInvalidHandle;
		goto out_unlock;
	}
	if (st->capture) {
		for (size_t i = 0; ks && i < n && e == hipSuccess; i++)
			e = graph_append(st->capture, &ks[i], NULL);
		goto out_unlock;
	}
	e = stream_queue(st);
	if (e != hipSuccess)
		goto out_unlock;
	q = st->q;
	if (ev_start)
		event_record_locked(ev_start, st);
	q_pin(q);
	pthread_mutex_unlock(&g_lock);

	if (!ks)
		e = q_publish(q, st, NULL);
	for (size_t i = 0; ks && i < n && e == hipSuccess; i++)
		e = q_publish(q, st, &ks[i]);

	pthread_mutex_lock(&g_lock);
	if (ev_stop && e == hipSuccess && event_find(stop) == ev_stop)
		event_record_locked(ev_stop, st);
	if (--q->pins == 0 && q->dead)
		q_destroy_final(q, 1);
out_unlock:
	pthread_mutex_unlock(&g_lock);
	return e;
}
