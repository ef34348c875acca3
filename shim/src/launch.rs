//! What the exported wrappers do around the real call: the fast path (one relaxed load, then
//! the call), and the slow path: stream registration, stream -> queue attribution, the level-1
//! gate, and the library passthrough.
//!
//! Three kinds of stream calls:
//!
//! * [`launch`]: kernel and graph launches. Gate, attribution context, and the write-index
//!   comparison: while the stream's queue is unknown (counted towards [`MAX_ATTEMPTS`]), and on
//!   every launch while HIP's dynamic queues may move streams ([`F_REPROBE`]).
//! * [`work`]: other stream-ordered work (async copies and fills, host functions, event
//!   records, stream waits). The same gate and attribution context, no write-index comparison
//!   (such a call may enqueue nothing, or enqueue on a copy engine, or run host code that
//!   launches elsewhere, so "exactly one queue moved" would not name the stream's queue).
//! * [`sync`]: synchronisation and queries. Never held (holding them could deadlock the
//!   application); attribution context while the stream's queue is unknown, and a stream the
//!   runtime created a queue for during the call is registered afterwards.

use std::cell::Cell;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::time::Duration;

use kfdq::policy::class::clamp_hip_priority;
use kfdq::proto::StreamKind;

use crate::context::{CTX, NO_STREAM, SPT};
use crate::escapes::Call;
use crate::guard::guarded;
use crate::state::{
    F_CREATED_PENDING, F_DISABLED, F_EDGES, F_HOLDS, F_NULL_PENDING, F_READY, F_REPROBE, F_WINDOW,
    FLAGS, FORK_GEN, MAX_ATTEMPTS, NULL_STREAM_ID, QUEUES_CREATED, STATE, State,
};

/// `hipStreamLegacy`.
const HIP_STREAM_LEGACY: usize = 1;
/// `hipStreamPerThread`.
const HIP_STREAM_PER_THREAD: usize = 2;

/// The stream argument of a call, and whether the entry point is a `_spt` variant (where the
/// null handle means the per-thread stream).
#[derive(Debug, Clone, Copy)]
pub struct StreamRef {
    handle: usize,
    spt: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Which {
    Null,
    PerThread,
    Created(usize),
}

impl StreamRef {
    /// Wraps a `hipStream_t`.
    #[inline(always)]
    pub fn new(handle: usize, spt: bool) -> StreamRef {
        StreamRef { handle, spt }
    }

    /// This stream's key in per-thread caches (the per-thread stream is per thread anyway).
    #[inline(always)]
    fn key(self) -> usize {
        match self.which() {
            Which::Null => 0,
            Which::PerThread => HIP_STREAM_PER_THREAD,
            Which::Created(h) => h,
        }
    }

    #[inline(always)]
    fn which(self) -> Which {
        match self.handle {
            0 if self.spt => Which::PerThread,
            0 | HIP_STREAM_LEGACY => Which::Null,
            HIP_STREAM_PER_THREAD => Which::PerThread,
            h => Which::Created(h),
        }
    }
}

/// A kernel or graph launch on stream `s`.
#[inline(always)]
pub fn launch(s: StreamRef, call: impl FnOnce() -> i32) -> i32 {
    let _counted = Call::enter();
    ordered::<true>(s, call)
}

/// A launch on several streams at once (the multi-device launches): gated and attributed as
/// stream-ordered work on each stream in turn (no write-index comparison: several queues move),
/// the call made once, innermost.
pub fn launch_each(streams: &[StreamRef], call: &mut dyn FnMut() -> i32) -> i32 {
    match streams.split_first() {
        None => call(),
        Some((s, rest)) => work(*s, || launch_each(rest, call)),
    }
}

/// Other stream-ordered work on stream `s` (async copy/fill, host function, event record,
/// stream wait): held like a launch, attributed like a launch, no write-index comparison.
#[inline(always)]
pub fn work(s: StreamRef, call: impl FnOnce() -> i32) -> i32 {
    let _counted = Call::enter();
    ordered::<false>(s, call)
}

/// A stream-ordered call; `PROBE`: compare write indices while the stream's queue is unknown.
#[inline(always)]
fn ordered<const PROBE: bool>(s: StreamRef, call: impl FnOnce() -> i32) -> i32 {
    let f = FLAGS.load(Ordering::Relaxed);
    // The flags that send this stream's calls to the slow path.
    let (slow, spt_ok) = match s.which() {
        Which::Null => (F_HOLDS | F_NULL_PENDING, true),
        Which::Created(_) => (F_HOLDS | F_CREATED_PENDING, true),
        Which::PerThread => (F_HOLDS, spt_known()),
    };
    if f & F_DISABLED != 0 {
        return call();
    }
    // Where HIP's dynamic queues may move a stream to another queue, a launch takes the slow
    // path, which compares write indices (`F_REPROBE`; docs/shim.md, "HIP 7.2"). A constant
    // bit of the same mask: the fast path stays one load.
    let slow = if PROBE { slow | F_REPROBE } else { slow };
    if f & (F_READY | slow | F_WINDOW | F_EDGES) == F_READY && spt_ok {
        return call();
    }
    if f & (F_READY | slow) == F_READY && spt_ok {
        // Only the window or edges: no lock, no registration.
        if f & F_WINDOW != 0 {
            crate::window::gate(s.key(), || window_target(s));
        }
        let r = call();
        if f & F_EDGES != 0 {
            crate::edges::launched();
        }
        return r;
    }
    ordered_slow::<PROBE>(s, call)
}

/// A synchronising or query call on stream `s` (`hipStreamSynchronize`, `hipStreamQuery`,
/// and, with the null stream, `hipDeviceSynchronize` / `hipCtxSynchronize`). Never held; the
/// fast path ignores holds.
#[inline(always)]
pub fn sync(s: StreamRef, call: impl FnOnce() -> i32) -> i32 {
    crate::escapes::check();
    let r = {
        let _counted = Call::enter();
        sync_counted(s, call)
    };
    crate::state::move_chance();
    crate::escapes::note();
    r
}

#[inline(always)]
fn sync_counted(s: StreamRef, call: impl FnOnce() -> i32) -> i32 {
    let f = FLAGS.load(Ordering::Relaxed);
    let fast = match s.which() {
        Which::Null => f & (F_READY | F_NULL_PENDING) == F_READY,
        Which::Created(_) => f & (F_READY | F_CREATED_PENDING) == F_READY,
        Which::PerThread => f & F_READY != 0 && spt_known(),
    };
    if fast || f & F_DISABLED != 0 {
        return call();
    }
    sync_slow(s, call)
}

#[inline(always)]
fn spt_known() -> bool {
    SPT.with(|c| {
        let (g, _, known) = c.get();
        known && g == FORK_GEN.load(Ordering::Relaxed)
    })
}

#[cold]
#[inline(never)]
fn ordered_slow<const PROBE: bool>(s: StreamRef, call: impl FnOnce() -> i32) -> i32 {
    crate::init::ensure_init();
    if FLAGS.load(Ordering::Relaxed) & F_DISABLED != 0 {
        return call();
    }
    let prep = guarded(|| prepare(s, PROBE));
    if FLAGS.load(Ordering::Relaxed) & F_WINDOW != 0 {
        crate::window::gate(s.key(), || window_target(s));
    }
    let prev = CTX.with(|c| c.replace(prep.as_ref().map_or(NO_STREAM, |p| p.sid)));
    let r = call();
    CTX.with(|c| c.set(prev));
    if FLAGS.load(Ordering::Relaxed) & F_EDGES != 0 {
        crate::edges::launched();
    }
    if let Some(p) = prep {
        guarded(|| finish(p, r, PROBE));
    }
    r
}

#[cold]
#[inline(never)]
fn sync_slow(s: StreamRef, call: impl FnOnce() -> i32) -> i32 {
    crate::init::ensure_init();
    if FLAGS.load(Ordering::Relaxed) & F_DISABLED != 0 {
        return call();
    }
    let sid = guarded(|| sync_stream_id(s)).flatten();
    let created = QUEUES_CREATED.load(Ordering::Relaxed);
    let prev = CTX.with(|c| c.replace(sid.unwrap_or(NO_STREAM)));
    let r = call();
    CTX.with(|c| c.set(prev));
    // The hook runs on this thread during the call, so its increment is visible here.
    if let Some(sid) = sid
        && QUEUES_CREATED.load(Ordering::Relaxed) != created
    {
        guarded(|| adopt(s, sid));
    }
    r
}

/// The stream id a synchronising call runs under, without registering anything: the null
/// stream's fixed id, this thread's per-thread stream id (reserved now if it has none), or a
/// registered created stream whose queue is still unknown. `None`: no attribution context.
fn sync_stream_id(s: StreamRef) -> Option<u64> {
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
fn adopt(s: StreamRef, sid: u64) {
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

struct Prep {
    sid: u64,
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

fn prepare(s: StreamRef, probe: bool) -> Prep {
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

/// The queue whose indices bound stream `s`'s window: its attributed compute queue, if known,
/// alive and control runs, with the generation read before the lookup (the rule of
/// `index_reads.rs`: the addresses may be read without the lock only at that generation).
/// Registers nothing.
fn window_target(s: StreamRef) -> crate::window::QueueIndices {
    let generation = crate::window_setting::WINDOW_GEN.load(Ordering::SeqCst);
    let none = crate::window::QueueIndices::none(generation);
    guarded(|| {
        let st = STATE.lock();
        // Control stopped (set under this lock): DESTROY_QUEUE passes the hook untouched.
        if FLAGS.load(Ordering::Relaxed) & F_DISABLED != 0 {
            return none;
        }
        let sid = match s.which() {
            Which::Null => Some(NULL_STREAM_ID),
            Which::PerThread => {
                let (g, sid, _) = SPT.with(Cell::get);
                (g == FORK_GEN.load(Ordering::Relaxed) && sid != NO_STREAM).then_some(sid)
            }
            Which::Created(h) => st.stream_by_handle(h),
        };
        sid.and_then(|id| st.stream(id))
            .and_then(|x| x.queue)
            .and_then(|q| st.queue(q))
            .filter(|q| q.compute && !q.dying)
            .map(|q| (q.id, q.index_addresses()))
            .filter(|(_, (w, r))| *w != 0 && *r != 0 && w % 8 == 0 && r % 8 == 0)
            .map_or(none, |(queue, (w, r))| crate::window::QueueIndices {
                queue,
                wptr: w as usize,
                rptr: r as usize,
                generation,
            })
    })
    .unwrap_or(none)
}

/// Blocks while stream `sid` is held (level 1). Woken by release, fail-open and fork.
/// While it waits, the stream's `held_calls` counts it (published in the registry, so that
/// `kfdq ps` and tests see work blocked at level 1).
fn wait_released(sid: u64) {
    crate::log::debug(|| format!("call on held stream {sid} waits"));
    let mut st = STATE.lock();
    let count = |st: &mut crate::state::State, up: bool| {
        if let Some(s) = st.stream_mut(sid) {
            s.held_calls = if up {
                s.held_calls.saturating_add(1)
            } else {
                s.held_calls.saturating_sub(1)
            };
            st.changed();
        }
    };
    count(&mut st, true);
    while st.stream(sid).is_some_and(|s| s.held) && FLAGS.load(Ordering::Relaxed) & F_DISABLED == 0
    {
        st.wait_timeout(Duration::from_millis(50));
    }
    count(&mut st, false);
    crate::log::debug(|| format!("stream {sid} released"));
}

fn finish(p: Prep, result: i32, probe: bool) {
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

/// A stream-creation call writing the new handle to `out`; `hip_priority` when the call
/// carries one.
pub fn create(out: *mut usize, hip_priority: Option<i32>, call: impl FnOnce() -> i32) -> i32 {
    crate::init::ensure_init();
    if FLAGS.load(Ordering::Relaxed) & F_DISABLED != 0 {
        return call();
    }
    let prep = guarded(|| {
        let hp = hip_priority.map(clamp_hip_priority);
        let creator = creator();
        let mut st = STATE.lock();
        if let Some(w) = hp.and_then(|h| h.warning()) {
            st.report(w);
        }
        (st.reserve_stream_id(), hp.map(|h| h.effective), creator)
    });
    let prev = CTX.with(|c| c.replace(prep.as_ref().map_or(NO_STREAM, |p| p.0)));
    let r = call();
    CTX.with(|c| c.set(prev));
    crate::state::move_chance();
    if let Some((sid, prio, creator)) = prep {
        guarded(|| {
            let mut st = STATE.lock();
            if r == 0 && !out.is_null() {
                // SAFETY: the real call succeeded and wrote the new handle to `out`, a pointer
                // the application passed for exactly that.
                let handle = unsafe { out.read() };
                st.register_stream(sid, StreamKind::Created, handle, prio, creator);
                let q = st.stream(sid).and_then(|s| s.queue);
                crate::log::debug(|| {
                    format!(
                        "stream {sid} (handle {handle:#x}, hip priority {prio:?}) -> queue {q:?}"
                    )
                });
            } else {
                st.inflight.retain(|(s, _)| *s != sid);
            }
        });
    }
    r
}

/// `hipStreamDestroy(handle)`.
pub fn destroy(handle: usize, call: impl FnOnce() -> i32) -> i32 {
    // Destroying a stream waits for its work (the runtime may enqueue a marker): counted.
    let r = {
        let _counted = Call::enter();
        call()
    };
    crate::state::move_chance();
    if r == 0 && FLAGS.load(Ordering::Relaxed) & F_DISABLED == 0 {
        guarded(|| {
            let mut st = STATE.lock();
            if let Some(sid) = st.stream_by_handle(handle) {
                st.remove_stream(sid);
            }
        });
        STATE.notify_all();
    }
    r
}

/// File name of the library the current exported call comes from; `None` for the main
/// program (or when unknown).
fn creator() -> Option<String> {
    let ra = crate::sys::external_caller()?;
    let o = crate::sys::object_of(ra.saturating_sub(1))?;
    (!o.main_program).then_some(o.file)
}

/// Caller classification cache: return address -> passthrough or not. Fixed size, lock-free,
/// open addressing; a full neighbourhood just means "classify again".
const CACHE_SLOTS: usize = 256;
static CACHE_KEYS: [AtomicUsize; CACHE_SLOTS] = [const { AtomicUsize::new(0) }; CACHE_SLOTS];
static CACHE_VALS: [AtomicU8; CACHE_SLOTS] = [const { AtomicU8::new(0) }; CACHE_SLOTS];
const CLASS_APP: u8 = 1;
const CLASS_PASSTHROUGH: u8 = 2;

/// True when the exported call in progress comes from a passthrough library (never held).
fn caller_is_passthrough() -> bool {
    let Some(ra) = crate::sys::external_caller() else {
        return false;
    };
    let start = (ra >> 2).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56;
    for i in 0..8 {
        let slot = (start + i) % CACHE_SLOTS;
        let k = CACHE_KEYS[slot].load(Ordering::Acquire);
        if k == ra {
            match CACHE_VALS[slot].load(Ordering::Acquire) {
                CLASS_PASSTHROUGH => return true,
                CLASS_APP => return false,
                _ => break, // being filled in
            }
        }
        if k == 0 {
            break;
        }
    }
    let obj = crate::sys::object_of(ra.saturating_sub(1));
    let pass = obj.as_ref().is_some_and(|o| {
        !o.main_program
            && (crate::config::is_hip_runtime(&o.file)
                || crate::config::is_passthrough(&crate::config::config().passthrough, &o.file))
    });
    crate::log::debug(|| {
        format!(
            "caller {ra:#x} in {:?}: passthrough={pass}",
            obj.as_ref().map(|o| o.file.as_str())
        )
    });
    for i in 0..8 {
        let slot = (start + i) % CACHE_SLOTS;
        if CACHE_KEYS[slot]
            .compare_exchange(0, ra, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            CACHE_VALS[slot].store(
                if pass { CLASS_PASSTHROUGH } else { CLASS_APP },
                Ordering::Release,
            );
            break;
        }
    }
    pass
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::AtomicU32;

    use super::*;
    use crate::state::CreatedQueue;
    use crate::window::{WaitEnd, wait_for_room};

    /// Two threads: one waits at a queue's window, reading its indices without the lock; the
    /// other passes the runtime's DESTROY_QUEUE of the queue through the hook's steps and then
    /// frees the indices' memory, as the runtime does once the call returns. The waiting launch
    /// must see the queue go and read nothing more (before the generation rule it kept polling
    /// the freed page: SIGSEGV).
    #[test]
    fn a_queue_destroyed_while_a_launch_waits_at_its_window_is_never_read_again() {
        const QUEUE: u32 = 0x5eed_0001;
        const HANDLE: usize = 0x5eed_0000;
        // Ours alone; unmapped below once the hook let it go.
        let page = crate::self_mem::test_page();
        let (wptr, rptr) = (page as u64, page as u64 + 8);
        // SAFETY: both words are in the page; 5 packets written, none done: at window 1 the
        // launch waits.
        unsafe { (wptr as *mut u64).write(5) };
        {
            let mut st = STATE.lock();
            // SAFETY: the test plays the runtime: the addresses are this queue's indices until
            // its DESTROY_QUEUE passed the hook's steps below, and only then is the page freed.
            unsafe {
                st.add_queue(CreatedQueue {
                    id: QUEUE,
                    gpu_id: 1,
                    requested: 7,
                    effective: 7,
                    ring_base: 0,
                    ring_size: 4096,
                    wptr,
                    rptr,
                    runtime_percentage: 100,
                    compute: true,
                })
            };
            let sid = st.reserve_stream_id();
            st.register_stream(sid, StreamKind::Created, HANDLE, None, None);
            st.attribute(sid, QUEUE);
        }
        assert_eq!(FLAGS.load(Ordering::SeqCst) & F_DISABLED, 0, "control runs");
        let s = StreamRef::new(HANDLE, false);
        let t = window_target(s);
        assert_eq!(t.queue, QUEUE, "the stream's queue is windowed");
        let polls = Arc::new(AtomicU32::new(0));
        let launch = {
            let polls = polls.clone();
            std::thread::spawn(move || {
                let limit = || {
                    polls.fetch_add(1, Ordering::SeqCst);
                    1
                };
                // Preempted by kfdq all along: only the queue's going away ends the wait.
                wait_for_room(
                    t,
                    limit,
                    Duration::from_secs(3600),
                    || true,
                    || window_target(s),
                )
            })
        };
        test_support::wait::wait_for("the launch polls at the window", || {
            polls.load(Ordering::SeqCst) >= 3
        });
        crate::hook::destroy_begin(QUEUE);
        // (The kernel destroys the queue here.)
        crate::hook::destroy_end(QUEUE, 0);
        // SAFETY: the page mapped above; the hook's steps let it go.
        assert_eq!(unsafe { libc::munmap(page, 4096) }, 0);
        assert_eq!(launch.join().unwrap(), WaitEnd::Room);
        assert!(STATE.lock().queue(QUEUE).is_none());
    }
}
