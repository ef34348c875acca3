/*
 * stream.c (layer 4): stream objects. A user stream gets a queue from its
 * priority pool at creation (hip_stream.c; a CU-masked one a queue of its
 * own); the legacy null stream (one per device) and the per-thread default
 * streams (one per thread and device) get theirs at their first submission.
 * Resolving a HIP handle to a stream, releasing a stream from its queue,
 * and draining one before it goes (also when its thread exits) are here;
 * the HIP stream calls are in hip_stream.c.
 */
#include "fakehip_internal.h"

/* A thread's per-thread default streams, one per device (reset when G.gen moved on). */
struct fh_pts {
	uint64_t gen;
	struct fh_stream *s[FH_MAX_DEV];
};

static __thread struct fh_pts *t_pts;

/* the key whose destructor releases an exiting thread's per-thread streams (created in init.c) */
pthread_key_t g_pts_key;
int g_pts_key_ok;

/* ------------------------------------------------------------------ */
/* streams                                                            */
/* ------------------------------------------------------------------ */

struct fh_stream *stream_new(int kind, int dev, int prio, unsigned flags)
{
	struct fh_stream *st = calloc(1, sizeof(*st));

	if (!st)
		return NULL;
	st->magic = FH_STREAM_MAGIC;
	st->kind = kind;
	st->dev = dev;
	st->prio = prio;
	st->flags = flags;
	st->gen = G.gen;
	st->next = G.streams;
	G.streams = st;
	return st;
}

void stream_unlink_free(struct fh_stream *st)
{
	for (struct fh_stream **pp = &G.streams; *pp; pp = &(*pp)->next) {
		if (*pp == st) {
			*pp = st->next;
			break;
		}
	}
	st->magic = 0;
	free(st);
}

struct fh_stream *stream_find(hipStream_t h)
{
	for (struct fh_stream *st = G.streams; st; st = st->next)
		if ((void *)st == (void *)h)
			return st;
	return NULL;
}

static struct fh_pts *pts_get(int create)
{
	struct fh_pts *p = t_pts;

	if (!p && create) {
		p = calloc(1, sizeof(*p));
		if (!p)
			return NULL;
		p->gen = G.gen;
		t_pts = p;
		if (g_pts_key_ok)
			pthread_setspecific(g_pts_key, p);
	}
	if (p && p->gen != G.gen) {
		memset(p->s, 0, sizeof(p->s));
		p->gen = G.gen;
	}
	return p;
}

/*
 * Resolve a HIP stream handle to a stream object. NULL means the legacy null
 * stream, or (spt) the per-thread stream. Special streams are created on
 * demand (without a queue) unless `peek`. g_lock held.
 */
hipError_t resolve_stream(hipStream_t h, int spt, int peek, struct fh_stream **out)
{
	int dev = cur_dev();

	*out = NULL;
	if (h == hipStreamPerThread || (h == NULL && spt)) {
		struct fh_pts *p = pts_get(!peek);

		if (!p)
			return peek ? hipErrorNotReady : hipErrorOutOfMemory;
		if (!p->s[dev]) {
			if (peek)
				return hipErrorNotReady;
			p->s[dev] = stream_new(FH_STREAM_PER_THREAD, dev, FH_PRIO_NORMAL, 0);
			if (!p->s[dev])
				return hipErrorOutOfMemory;
		}
		*out = p->s[dev];
		return hipSuccess;
	}
	if (h == NULL || h == hipStreamLegacy) {
		struct fh_dev *d = &G.dev[dev];

		if (!d->null_stream) {
			if (peek)
				return hipErrorNotReady;
			d->null_stream = stream_new(FH_STREAM_NULL, dev, FH_PRIO_NORMAL, 0);
			if (!d->null_stream)
				return hipErrorOutOfMemory;
		}
		*out = d->null_stream;
		return hipSuccess;
	}
	*out = stream_find(h);
	return *out ? hipSuccess : hipErrorInvalidHandle;
}

/* Make sure a stream has its queue (lazy for the null / per-thread streams). */
hipError_t stream_queue(struct fh_stream *st)
{
	if (st->q)
		return hipSuccess;
	return pool_acquire(st);
}

/* Detach and free a stream; the caller waited for its work. g_lock held. */
void stream_release_locked(struct fh_stream *st)
{
	struct fh_queue *q = st->q;

	if (st->kind == FH_STREAM_NULL && G.dev[st->dev].null_stream == st)
		G.dev[st->dev].null_stream = NULL;
	st->q = NULL;
	stream_unlink_free(st);
	if (q)
		q_release(q);
}

/*
 * Wait (bounded) for a stream's work, then detach it from its queue and free
 * it; the queue is destroyed when its last stream goes. Called and returns
 * with g_lock held; drops it while waiting. The stream is looked up again
 * after the wait because another thread may have freed it meanwhile.
 */
void stream_drain_release_locked(struct fh_stream *st)
{
	struct fh_queue *q = st->q;
	uint64_t pos = __atomic_load_n(&st->last_pos, __ATOMIC_ACQUIRE);

	if (q) {
		q_pin(q);
		pthread_mutex_unlock(&g_lock);
		wait_pos(q, pos);
		pthread_mutex_lock(&g_lock);
		st = stream_find((hipStream_t)st);
	}
	if (st) {
		if (st->capture) {
			graph_free(st->capture);
			st->capture = NULL;
		}
		/* cannot free q here: we still hold a pin */
		stream_release_locked(st);
	}
	if (q && --q->pins == 0 && q->dead)
		q_destroy_final(q, 1);
}

/* g_pts_key's destructor: drains and releases an exiting thread's per-thread streams. */
void pts_destructor(void *v)
{
	struct fh_pts *p = v;

	pthread_mutex_lock(&g_lock);
	for (int i = 0; i < FH_MAX_DEV; i++) {
		struct fh_stream *st = p->s[i];

		if (p->gen != G.gen)
			break;
		p->s[i] = NULL;
		if (st && stream_find((hipStream_t)st))
			stream_drain_release_locked(st);
	}
	pthread_mutex_unlock(&g_lock);
	if (t_pts == p)
		t_pts = NULL;
	free(p);
}
