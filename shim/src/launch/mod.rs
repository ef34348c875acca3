//! What the exported wrappers do around the real call: the fast path (one relaxed load, then
//! the call), and the slow path: stream registration, stream -> queue attribution, the level-1
//! gate, and the library passthrough.
//!
//! Three kinds of stream calls:
//!
//! * [`launch`]: kernel and graph launches. Gate, attribution context, and the write-index
//!   comparison: while the stream's queue is unknown (counted towards
//!   [`MAX_ATTEMPTS`](crate::state::MAX_ATTEMPTS)), and on every launch while HIP's dynamic
//!   queues may move streams ([`F_REPROBE`]).
//! * [`work`]: other stream-ordered work (async copies and fills, host functions, event
//!   records, stream waits). The same gate and attribution context, no write-index comparison
//!   (such a call may enqueue nothing, or enqueue on a copy engine, or run host code that
//!   launches elsewhere, so "exactly one queue moved" would not name the stream's queue).
//! * [`sync`]: synchronisation and queries. Never held (holding them could deadlock the
//!   application); attribution context while the stream's queue is unknown, and a stream the
//!   runtime created a queue for during the call is registered afterwards.
//!
//! Files:
//!
//! * `mod.rs`: the stream argument ([`StreamRef`]) and the wrappers' fast and slow paths.
//! * `attribution.rs`: stream registration and stream -> queue attribution (the write-index
//!   comparison before and after a call, the re-probe sampling under dynamic queues, adopting a
//!   queue created during a synchronising call).
//! * `hold.rs`: the level-1 gate (waiting while a stream is held) and the queue whose indices
//!   bound a stream's window.
//! * `lifecycle.rs`: stream creation and destruction ([`create`], [`destroy`]).
//! * `caller.rs`: which library an exported call comes from (the passthrough cache).

mod attribution;
mod caller;
mod hold;
mod lifecycle;

use std::sync::atomic::Ordering;

use crate::context::{CTX, NO_STREAM, SPT};
use crate::escapes::Call;
use crate::guard::guarded;
use crate::state::{
    F_CREATED_PENDING, F_DISABLED, F_EDGES, F_HOLDS, F_NULL_PENDING, F_READY, F_REPROBE, F_WINDOW,
    FLAGS, FORK_GEN, QUEUES_CREATED,
};

use attribution::{adopt, finish, prepare, sync_stream_id};
use hold::window_target;
#[cfg(not(test))] // (the exports, their only users, are not built for unit tests)
pub use lifecycle::{create, destroy};

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
