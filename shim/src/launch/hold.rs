//! The level-1 gate of a stream-ordered call: waiting while the stream is held, and the queue
//! whose indices bound the stream's window.

use std::cell::Cell;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::{StreamRef, Which};
use crate::context::{NO_STREAM, SPT};
use crate::guard::guarded;
use crate::state::{F_DISABLED, FLAGS, FORK_GEN, NULL_STREAM_ID, STATE};

/// The queue whose indices bound stream `s`'s window: its attributed compute queue, if known,
/// alive and control runs, with the generation read before the lookup (the rule of
/// `index_reads.rs`: the addresses may be read without the lock only at that generation).
/// Registers nothing.
pub(super) fn window_target(s: StreamRef) -> crate::window::QueueIndices {
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
pub(super) fn wait_released(sid: u64) {
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::AtomicU32;

    use kfdq::proto::StreamKind;

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
