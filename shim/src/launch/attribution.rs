//! Stream registration and stream -> queue attribution around a stream call: which stream id
//! a call runs under, the write indices compared before and after a launch (while the stream's
//! queue is unknown, and under HIP's dynamic queues when the stream's sampling says so), and
//! adopting a queue the runtime created during a synchronising call.

use std::cell::Cell;
use std::sync::atomic::Ordering;

use kfdq::proto::StreamKind;

use super::caller::caller_is_passthrough;
use super::hold::wait_released;
use super::{StreamRef, Which};
use crate::context::{NO_STREAM, SPT};
use crate::state::{F_REPROBE, FLAGS, FORK_GEN, MAX_ATTEMPTS, NULL_STREAM_ID, STATE, State};

/// The stream id a synchronising call runs under, without registering anything: the null
/// stream's fixed id, this thread's per-thread stream id (reserved now if it has none), or a
/// registered created stream whose queue is still unknown. `None`: no attribution context.
pub(super) fn sync_stream_id(s: StreamRef) -> Option<u64> {
    match s.which() {
        Which::Null => Some(NULL_STREAM_ID),
        Which::PerThread => {
            let gen_now = FORK_GEN.load(Ordering::Relaxed);
            let (g, sid, _) = SPT.with(Cell::get);
            if g == gen_now && sid != NO_STREAM {
                return Some(sid);
            }
            let sid = STATE.lock().reserve_stream_id();
            SPT.with(|c| c.set((gen_now, sid, false)));
            Some(sid)
        }
        Which::Created(h) => {
            let st = STATE.lock();
            st.stream_by_handle(h)
                .filter(|id| st.stream(*id).is_some_and(|x| x.queue.is_none()))
        }
    }
}

/// After a synchronising call under stream id `sid`: if the runtime created a queue for the
/// stream meanwhile (recorded as in flight while the stream was unregistered), register the
/// stream now, which takes that queue.
pub(super) fn adopt(s: StreamRef, sid: u64) {
    let mut st = STATE.lock();
    let kind = match s.which() {
        Which::Null => StreamKind::Null,
        Which::PerThread => StreamKind::PerThread,
        Which::Created(_) => StreamKind::Created,
    };
    if st.adopt_inflight(sid, kind) {
        crate::log::debug(|| {
            format!(
                "stream {sid} registered: the runtime gave it a queue during a synchronising call"
            )
        });
    }
    if kind == StreamKind::PerThread && st.stream(sid).is_some_and(|x| x.queue.is_some()) {
        SPT.with(|c| {
            let (g, id, _) = c.get();
            if id == sid {
                c.set((g, id, true));
            }
        });
    }
}

pub(super) struct Prep {
    pub(super) sid: u64,
    kind: Which,
    /// The stream was first seen by this call (a handle no wrapped creation call returned).
    new_handle: bool,
    /// Write indices of the known queues before the call, when the stream's queue is unknown
    /// (or, under re-probing, of its own queue or of all).
    before: Vec<(u32, u64)>,
    /// `before` holds the stream's own queue only.
    own_only: bool,
}

fn stream_id_for(st: &mut State, s: StreamRef) -> (u64, bool) {
    match s.which() {
        Which::Null => {
            st.register_stream(NULL_STREAM_ID, StreamKind::Null, 0, None, None);
            (NULL_STREAM_ID, false)
        }
        Which::PerThread => {
            let gen_now = FORK_GEN.load(Ordering::Relaxed);
            let (g, sid, _) = SPT.with(Cell::get);
            if g == gen_now && sid != NO_STREAM && st.stream(sid).is_some() {
                return (sid, false);
            }
            let sid = st.reserve_stream_id();
            st.register_stream(sid, StreamKind::PerThread, 0, None, None);
            SPT.with(|c| c.set((gen_now, sid, false)));
            (sid, false)
        }
        Which::Created(h) => match st.stream_by_handle(h) {
            Some(id) => (id, false),
            None => {
                // Created through a path the shim does not wrap (or an invalid handle: then
                // `finish` forgets it again when the call fails).
                let id = st.reserve_stream_id();
                st.register_stream(id, StreamKind::Created, h, None, None);
                (id, true)
            }
        },
    }
}

pub(super) fn prepare(s: StreamRef, probe: bool) -> Prep {
    let mut st = STATE.lock();
    let (sid, new_handle) = stream_id_for(&mut st, s);
    if st.stream(sid).is_some_and(|x| x.held) {
        drop(st);
        if !caller_is_passthrough() {
            wait_released(sid);
        }
        st = STATE.lock();
    }
    let unknown = st.stream(sid).is_some_and(|x| x.queue.is_none());
    // Under re-probing a stream whose queue is known compares when its sampling says so
    // (`state/dynamic.rs`, `Sampling`: a chance to move it, a follow-up, every Nth launch).
    let reprobe = probe
        && !unknown
        && FLAGS.load(Ordering::Relaxed) & F_REPROBE != 0
        && st.stream_mut(sid).is_some_and(|x| x.sampling.due());
    // A stream whose last comparison moved its own queue compares only that queue (one read
    // before, one after); one whose queue did not move (`strayed`), or whose queue is unknown,
    // compares all compute queues.
    let own = st
        .stream(sid)
        .filter(|x| !x.strayed)
        .and_then(|x| x.queue)
        .filter(|q| st.queue(*q).is_some_and(|q| q.compute && !q.dying));
    let own_only = reprobe && own.is_some();
    let before = match own {
        Some(q) if reprobe => vec![(q, st.indices(q).0)],
        _ if reprobe || (probe && unknown) => {
            let b = st
                .queues()
                .iter()
                .filter(|q| !q.dying && q.compute)
                .map(|q| (q.id, st.indices(q.id).0))
                .collect();
            st.forget_unmapped();
            b
        }
        _ => Vec::new(),
    };
    Prep {
        sid,
        kind: s.which(),
        new_handle,
        before,
        own_only,
    }
}

pub(super) fn finish(p: Prep, result: i32, probe: bool) {
    let mut st = STATE.lock();
    let Some(s) = st.stream(p.sid) else { return };
    if s.queue.is_none() && p.new_handle && result != 0 {
        st.remove_stream(p.sid);
        return;
    }
    if !p.before.is_empty() && result == 0 {
        // No CREATE_QUEUE during the call: the stream went onto an existing queue (the
        // runtime's pool cap, or under dynamic queues a pool queue it was handed again). The
        // queue whose write index moved is the one (a failed call enqueued nothing: another
        // thread's packet may have moved a queue meanwhile).
        let advanced: Vec<u32> = p
            .before
            .iter()
            .filter_map(|(qid, w0)| {
                st.queue(*qid)
                    .filter(|q| !q.dying && st.indices(q.id).0 > *w0)
                    .map(|q| q.id)
            })
            .collect();
        st.forget_unmapped();
        if let [qid] = advanced[..]
            && st.stream(p.sid).is_some_and(|s| s.queue != Some(qid))
        {
            crate::log::debug(|| format!("stream {} -> queue {qid} (write index moved)", p.sid));
            st.attribute(p.sid, qid);
        }
        if let Some(s) = st.stream_mut(p.sid)
            && let Some(q) = s.queue
        {
            s.strayed = !advanced.contains(&q);
            s.sampling.compared(p.own_only, s.strayed);
        }
    }
    if let Some(s) = st.streams.iter_mut().find(|s| s.id == p.sid)
        && probe
        && s.queue.is_none()
        && !s.gave_up
    {
        s.attempts += 1;
        if s.attempts >= MAX_ATTEMPTS {
            s.gave_up = true;
            st.warn(format!(
                "could not tell which KFD queue stream {} runs on after {MAX_ATTEMPTS} launches; it stays \
                 unmapped (levels 2/3 can still target its queue by id)",
                p.sid
            ));
            st.refresh_flags();
        }
    }
    if p.kind == Which::PerThread && st.stream(p.sid).is_some_and(|s| s.queue.is_some()) {
        SPT.with(|c| {
            let (g, sid, _) = c.get();
            c.set((g, sid, true));
        });
    }
}
