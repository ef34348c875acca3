//! The in-flight window: at most `WINDOW` (`window_setting.rs`) AQL packets outstanding per
//! compute queue, so that a level-1 hold holds the batch job's work instead of only its future
//! launches.
//!
//! A launch (or other stream-ordered call) on a windowed process compares its queue's write
//! and read indices — the 64-bit words whose addresses the runtime gave CREATE_QUEUE — and,
//! while `write - read >= window`, waits in its wrapper, before the real call, holding no lock.
//! The indices' addresses are cached per thread (a few entries, each with the `WINDOW_GEN`
//! generation it was looked up at), and read without the lock inside a read section at that
//! generation (`index_reads.rs`, which states the rule): a launch under the window costs the
//! section's two stores and a load, one `process_vm_readv` of the two indices (a kernel copy, so
//! freed memory cannot fault the process) and a compare on top of the fast path.
//! When the generation has moved (the registry changed, a queue is being destroyed) the section
//! reads nothing and the stream's queue is looked up again.
//!
//! The wait is bounded: each time the read index advances the wait goes on, but when it has not
//! moved for [`STALL`] while the queue is not preempted by kfdq (level 2/3) or held, the launch
//! goes ahead and the stall is counted — so work that only completes after the host does
//! something (a host function, a stream wait on a value the same thread writes later) can never
//! deadlock on the window.

use std::cell::Cell;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::index_reads::{self, Read};
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
/// address), and the `WINDOW_GEN` generation read before they were looked up. Addresses 0: the
/// stream has no known compute queue (never windowed).
///
/// Made only by the registry's lookup (`launch/`) under the rule of `index_reads.rs`, or as
/// [`QueueIndices::none`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueIndices {
    /// KFD queue id.
    pub queue: u32,
    /// Address of the 64-bit write index.
    pub wptr: usize,
    /// Address of the 64-bit read index.
    pub rptr: usize,
    /// `WINDOW_GEN` before the lookup.
    pub generation: u64,
}

impl QueueIndices {
    /// No window for this stream (as of `generation`).
    pub const fn none(generation: u64) -> QueueIndices {
        QueueIndices {
            queue: 0,
            wptr: 0,
            rptr: 0,
            generation,
        }
    }
}

const SLOTS: usize = 4;

thread_local! {
    /// (stream key, target) for the last streams this thread launched on, most recent first.
    static CACHE: [Cell<(usize, QueueIndices)>; SLOTS] =
        const { [const { Cell::new((usize::MAX, QueueIndices::none(0))) }; SLOTS] };
}

/// The indices of `t`'s queue: read without the lock inside a section at `t.generation`, or
/// under the lock when this thread has no slot. `None`: the generation moved, look up again.
#[inline(always)]
fn indices(t: QueueIndices) -> Option<(u64, u64)> {
    // `t` was made by the registry's lookup under the rule (see `QueueIndices`).
    match index_reads::read(t.wptr, t.rptr, t.generation) {
        Read::Indices(w, r) => Some((w, r)),
        Read::Stale => None,
        Read::NoSlot => Some(locked_indices(t.queue)),
    }
}

/// The indices of `queue`, read under the registry lock ((0, 0) once it is gone or dying).
#[cold]
#[inline(never)]
fn locked_indices(queue: u32) -> (u64, u64) {
    STATE.lock().indices(queue)
}

/// Waits, if the stream `key` sits at its window, until its queue has room. `lookup` finds the
/// stream's queue on a cache miss or when the registry moved on (it takes the registry lock;
/// never called with it held).
#[inline(always)]
pub fn gate(key: usize, lookup: impl Fn() -> QueueIndices) {
    let limit = WINDOW.load(Ordering::Relaxed);
    if limit == 0 {
        return;
    }
    let cached = CACHE.with(|c| {
        c.iter().find_map(|e| {
            let (k, t) = e.get();
            (k == key).then_some(t)
        })
    });
    let mut t = match cached {
        Some(t) => t,
        None => miss(key, &lookup),
    };
    // Once more after a lookup, then under the lock: the registry may keep changing.
    for _ in 0..2 {
        if t.wptr == 0 {
            if t.generation == WINDOW_GEN.load(Ordering::Relaxed) {
                return;
            }
        } else if let Some((w, r)) = indices(t) {
            if w.wrapping_sub(r) >= u64::from(limit) {
                wait(t, &lookup);
            }
            return;
        }
        t = miss(key, &lookup);
    }
    if t.wptr != 0 {
        let (w, r) = locked_indices(t.queue);
        if w.wrapping_sub(r) >= u64::from(limit) {
            wait(t, &lookup);
        }
    }
}

#[cold]
#[inline(never)]
fn miss(key: usize, lookup: &impl Fn() -> QueueIndices) -> QueueIndices {
    let t = lookup();
    CACHE.with(|c| {
        if let Some(i) = c.iter().position(|e| e.get().0 == key) {
            c[i].set((key, t));
            return;
        }
        for i in (1..SLOTS).rev() {
            c[i].set(c[i - 1].get());
        }
        c[0].set((key, t));
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
fn wait(t: QueueIndices, lookup: &impl Fn() -> QueueIndices) {
    crate::log::debug(|| format!("launch waits at the window of queue {}", t.queue));
    let end = wait_for_room(
        t,
        || WINDOW.load(Ordering::Relaxed),
        STALL,
        || queue_preempted(t.queue),
        lookup,
    );
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
/// the read index stood still for `stall` while `preempted()` was false. Each poll is a read
/// section at the target's generation; when the generation has moved, `lookup()` finds the
/// stream's queue again, and a stream whose queue went away (or was never windowed) has room.
pub fn wait_for_room(
    mut t: QueueIndices,
    limit: impl Fn() -> u32,
    stall: Duration,
    preempted: impl Fn() -> bool,
    lookup: impl Fn() -> QueueIndices,
) -> WaitEnd {
    let mut nap = NAP_MIN;
    let mut last_read = None;
    let mut still_since = Instant::now();
    loop {
        let lim = limit();
        if t.wptr == 0 || lim == 0 {
            return WaitEnd::Room;
        }
        let Some((w, r)) = indices(t) else {
            t = lookup();
            std::thread::sleep(nap);
            continue;
        };
        if w.wrapping_sub(r) < u64::from(lim) {
            return WaitEnd::Room;
        }
        let last_read = last_read.get_or_insert(r);
        if r != *last_read {
            *last_read = r;
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

    /// The indices as the registry's lookup would give them (other tests move the generation;
    /// the wait then looks them up again through the same function).
    fn target(ix: &Arc<[AtomicU64; 2]>) -> QueueIndices {
        QueueIndices {
            queue: 1,
            wptr: ix[0].as_ptr() as usize,
            rptr: ix[1].as_ptr() as usize,
            generation: WINDOW_GEN.load(Ordering::SeqCst),
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
        let end = wait_for_room(
            target(&ix),
            || 2,
            Duration::from_secs(30),
            || false,
            || target(&ix),
        );
        assert_eq!(end, WaitEnd::Room);
        let r = ix[1].load(Ordering::SeqCst);
        assert!(10 - r < 2, "room under the window: {}", 10 - r);
        cp.join().unwrap();
    }

    #[test]
    fn a_stalled_queue_lets_the_launch_go_unless_kfdq_preempted_it() {
        let ix = indices(5, 0);
        let end = wait_for_room(
            target(&ix),
            || 1,
            Duration::from_millis(30),
            || false,
            || target(&ix),
        );
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
        let end = wait_for_room(
            target(&ix),
            || 1,
            Duration::from_millis(30),
            move || p.load(Ordering::SeqCst),
            || target(&ix),
        );
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
        let end = wait_for_room(
            target(&ix),
            || lim.load(Ordering::SeqCst),
            Duration::from_secs(30),
            || true,
            || target(&ix),
        );
        assert_eq!(end, WaitEnd::Room);
        t.join().unwrap();
    }
}
