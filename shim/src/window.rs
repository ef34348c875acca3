//! The in-flight window: at most `WINDOW` (`window_setting.rs`) AQL packets outstanding per
//! compute queue, so that a level-1 hold holds the batch job's work instead of only its future
//! launches.
//!
//! A launch (or other stream-ordered call) on a windowed process compares its queue's write
//! and read indices — the 64-bit words whose addresses the runtime gave CREATE_QUEUE — and,
//! while `write - read >= window`, waits in its wrapper, before the real call, holding no lock.
//! The indices' addresses are cached per thread (a few entries, invalidated by `WINDOW_GEN`)
//! so that a launch under the window costs two loads and a compare on top of the fast path.
//!
//! The wait is bounded: each time the read index advances the wait goes on, but when it has not
//! moved for [`STALL`] while the queue is not preempted by kfdq (level 2/3) or held, the launch
//! goes ahead and the stall is counted — so work that only completes after the host does
//! something (a host function, a stream wait on a value the same thread writes later) can never
//! deadlock on the window.

use std::cell::Cell;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::state::STATE;
use crate::window_setting::{WINDOW, WINDOW_GEN};

/// How long a queue's read index may stand still before a waiting launch goes ahead anyway.
/// Named guess: longer than any single dispatch of a well-behaved training loop (GEMMs and
/// convolutions run in micro- to milliseconds), short enough that a host-dependent wait
/// costs a second, not a hang. docs/shim.md shows what it trades.
pub const STALL: Duration = Duration::from_secs(1);

/// First and longest nap between index reads while waiting. The first nap sets the bubble
/// between one dispatch completing and the next being written (window 1 pays it per
/// dispatch); the longest bounds the polling cost of a long wait.
const NAP_MIN: Duration = Duration::from_micros(20);
const NAP_MAX: Duration = Duration::from_micros(250);

/// Where a stream's queue keeps its indices: (queue id, write index address, read index
/// address). Addresses 0: the stream has no known compute queue (never windowed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    /// KFD queue id.
    pub queue: u32,
    /// Address of the 64-bit write index.
    pub wptr: usize,
    /// Address of the 64-bit read index.
    pub rptr: usize,
}

impl Target {
    /// No window for this stream.
    pub const NONE: Target = Target {
        queue: 0,
        wptr: 0,
        rptr: 0,
    };
}

const SLOTS: usize = 4;

thread_local! {
    /// (generation, stream key, target) for the last streams this thread launched on, most
    /// recent first.
    static CACHE: [Cell<(u64, usize, Target)>; SLOTS] =
        const { [const { Cell::new((0, usize::MAX, Target::NONE)) }; SLOTS] };
}

/// Reads a queue index the runtime keeps.
///
/// # Safety
///
/// `addr` must be the 8-byte aligned address of a queue index the runtime handed to
/// CREATE_QUEUE for a queue that is still alive.
#[inline(always)]
unsafe fn index(addr: usize) -> u64 {
    // SAFETY: per this function's contract; volatile because the CP writes the read index
    // and other threads the write index.
    unsafe { std::ptr::read_volatile(addr as *const u64) }
}

/// Waits, if the stream `key` sits at its window, until its queue has room. `lookup` finds the
/// stream's queue on a cache miss (it takes the registry lock; never called with it held).
#[inline(always)]
pub fn gate(key: usize, lookup: impl FnOnce() -> Target) {
    let limit = WINDOW.load(Ordering::Relaxed);
    if limit == 0 {
        return;
    }
    let generation = WINDOW_GEN.load(Ordering::Acquire);
    let t = CACHE.with(|c| {
        c.iter().find_map(|e| {
            let (g, k, t) = e.get();
            (g == generation && k == key).then_some(t)
        })
    });
    let t = match t {
        Some(t) => t,
        None => miss(key, generation, lookup),
    };
    if t.wptr == 0 {
        return;
    }
    // SAFETY: the addresses came from the registry for the queue of the stream this thread is
    // launching on, at a generation no DESTROY_QUEUE has bumped since; the runtime destroys a
    // stream's queue only after the stream itself, so the queue outlives any launch on it.
    let (w, r) = unsafe { (index(t.wptr), index(t.rptr)) };
    if w.wrapping_sub(r) >= u64::from(limit) {
        wait(t);
    }
}

#[cold]
#[inline(never)]
fn miss(key: usize, generation: u64, lookup: impl FnOnce() -> Target) -> Target {
    let t = lookup();
    CACHE.with(|c| {
        for i in (1..SLOTS).rev() {
            c[i].set(c[i - 1].get());
        }
        c[0].set((generation, key, t));
    });
    t
}

/// How a wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitEnd {
    /// The queue has room (or the window was lifted).
    Room,
    /// The read index stood still for [`STALL`] while nothing of kfdq's held the queue.
    Stalled,
}

#[cold]
#[inline(never)]
fn wait(t: Target) {
    crate::log::debug(|| format!("launch waits at the window of queue {}", t.queue));
    // SAFETY: as in `gate`: the stream's queue outlives the launch that waits here.
    let end = unsafe {
        wait_for_room(
            t,
            || WINDOW.load(Ordering::Relaxed),
            STALL,
            || queue_preempted(t.queue),
        )
    };
    let mut st = STATE.lock();
    if let Some(q) = st.queue_mut(t.queue) {
        q.window_waits += 1;
        if end == WaitEnd::Stalled {
            q.window_stalls += 1;
        }
    }
    // Counters only: the agent and `kfdq ps` see them, the index cache stays valid.
    st.generation += 1;
    STATE.notify_all();
    if end == WaitEnd::Stalled {
        let w = format!(
            "queue {}: a launch waited {} s at the in-flight window without the queue making progress; \
             it went ahead (work that completes only after the host acts cannot deadlock on the window)",
            t.queue,
            STALL.as_secs()
        );
        st.report(w);
    }
}

/// True while kfdq itself keeps the queue from progressing (level 2 or 3, or a hold of one of
/// its streams): a still read index is then expected and no reason to give up.
fn queue_preempted(queue: u32) -> bool {
    let st = STATE.lock();
    st.queue(queue).is_some_and(|q| {
        q.deactivated
            || q.suspended
            || q.streams
                .iter()
                .any(|s| st.stream(*s).is_some_and(|x| x.held))
    })
}

/// The wait itself: polls the indices with growing naps (reset whenever the read index moves)
/// until there is room under `limit()` (re-read each time: the agent may lift the window), or
/// the read index stood still for `stall` while `preempted()` was false.
///
/// # Safety
///
/// `t.wptr` and `t.rptr` must be 8-byte aligned addresses of 64-bit indices that stay valid
/// for the whole wait.
pub unsafe fn wait_for_room(
    t: Target,
    limit: impl Fn() -> u32,
    stall: Duration,
    preempted: impl Fn() -> bool,
) -> WaitEnd {
    let mut nap = NAP_MIN;
    // SAFETY: per this function's contract.
    let mut last_read = unsafe { index(t.rptr) };
    let mut still_since = Instant::now();
    loop {
        let lim = limit();
        // SAFETY: per this function's contract.
        let (w, r) = unsafe { (index(t.wptr), index(t.rptr)) };
        if lim == 0 || w.wrapping_sub(r) < u64::from(lim) {
            return WaitEnd::Room;
        }
        if r != last_read {
            last_read = r;
            still_since = Instant::now();
            nap = NAP_MIN;
        } else if still_since.elapsed() >= stall {
            if !preempted() {
                return WaitEnd::Stalled;
            }
            still_since = Instant::now();
        }
        std::thread::sleep(nap);
        nap = (nap * 2).min(NAP_MAX);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64};

    use super::*;

    /// Two indices in real memory and a thread playing the CP.
    fn indices(w: u64, r: u64) -> Arc<[AtomicU64; 2]> {
        Arc::new([AtomicU64::new(w), AtomicU64::new(r)])
    }

    fn target(ix: &Arc<[AtomicU64; 2]>) -> Target {
        Target {
            queue: 1,
            wptr: ix[0].as_ptr() as usize,
            rptr: ix[1].as_ptr() as usize,
        }
    }

    #[test]
    fn waits_until_the_read_index_makes_room() {
        let ix = indices(10, 6);
        let cp = {
            let ix = ix.clone();
            std::thread::spawn(move || {
                // Complete one packet at a time until the queue is drained.
                while ix[1].load(Ordering::SeqCst) < 10 {
                    std::thread::sleep(Duration::from_millis(2));
                    ix[1].fetch_add(1, Ordering::SeqCst);
                }
            })
        };
        // SAFETY: `ix` (aligned AtomicU64s) lives until the end of the test.
        let end = unsafe { wait_for_room(target(&ix), || 2, Duration::from_secs(30), || false) };
        assert_eq!(end, WaitEnd::Room);
        let r = ix[1].load(Ordering::SeqCst);
        assert!(10 - r < 2, "room under the window: {}", 10 - r);
        cp.join().unwrap();
    }

    #[test]
    fn a_stalled_queue_lets_the_launch_go_unless_kfdq_preempted_it() {
        let ix = indices(5, 0);
        // SAFETY: `ix` (aligned AtomicU64s) lives until the end of the test.
        let end = unsafe { wait_for_room(target(&ix), || 1, Duration::from_millis(30), || false) };
        assert_eq!(end, WaitEnd::Stalled);
        // Preempted by kfdq: the wait goes on until released and drained.
        let preempted = Arc::new(AtomicBool::new(true));
        let cp = {
            let (ix, p) = (ix.clone(), preempted.clone());
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(100));
                p.store(false, Ordering::SeqCst);
                ix[1].store(5, Ordering::SeqCst);
            })
        };
        let p = preempted.clone();
        // SAFETY: `ix` (aligned AtomicU64s) lives until the end of the test.
        let end = unsafe {
            wait_for_room(
                target(&ix),
                || 1,
                Duration::from_millis(30),
                move || p.load(Ordering::SeqCst),
            )
        };
        assert_eq!(end, WaitEnd::Room);
        cp.join().unwrap();
    }

    #[test]
    fn lifting_the_window_ends_the_wait() {
        let ix = indices(5, 0);
        let lim = Arc::new(AtomicU32::new(1));
        let l2 = lim.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            l2.store(0, Ordering::SeqCst);
        });
        // SAFETY: `ix` (aligned AtomicU64s) lives until the end of the test.
        let end = unsafe {
            wait_for_room(
                target(&ix),
                || lim.load(Ordering::SeqCst),
                Duration::from_secs(30),
                || true,
            )
        };
        assert_eq!(end, WaitEnd::Room);
        t.join().unwrap();
    }
}
