//! Work that reached a managed queue without passing a wrapper (issue 52, item 3): the shim
//! warns once per process, in its registry and on stderr.
//!
//! Every wrapped stream call (launch, stream-ordered work, synchronisation, stream destruction)
//! counts itself in and out. At the end of a synchronising call made while no other wrapped call
//! is in flight, the write indices of the compute queues that serve streams are noted with the
//! count; at the start of the next synchronising call, if no wrapped call has begun since, a
//! queue whose write index moved received packets that no wrapped call enqueued — a launch path
//! the shim does not wrap, or a HIP call that enqueues without being one (a synchronous copy such
//! as `hipMemcpyHtoD`). Such work is not held at level 1. The counters cost two sequentially
//! consistent atomic additions per wrapped call; the check runs only in synchronising calls
//! (docs/shim.md, "HIP 7.2").

use std::sync::atomic::{AtomicU64, Ordering};

use crate::pmutex::PMutex;
use crate::state::{F_DISABLED, F_READY, FLAGS, STATE};

/// The warning's first words (one per process).
pub const ESCAPE_WARNING: &str = "work reached a managed queue that the shim did not see launched";

static ENTERED: AtomicU64 = AtomicU64::new(0);
static EXITED: AtomicU64 = AtomicU64::new(0);

/// (queue, write index) of the queues that serve streams.
type Indices = Vec<(u32, u64)>;

/// The count and the indices noted at the end of the last quiet synchronising call.
static NOTED: PMutex<Option<(u64, Indices)>> = PMutex::new(None);

/// A wrapped call in progress (counted out when dropped).
pub struct Call(());

impl Call {
    /// Counts a wrapped call in.
    #[inline(always)]
    pub fn enter() -> Call {
        ENTERED.fetch_add(1, Ordering::SeqCst);
        Call(())
    }
}

impl Drop for Call {
    #[inline(always)]
    fn drop(&mut self) {
        EXITED.fetch_add(1, Ordering::SeqCst);
    }
}

fn controlling() -> bool {
    FLAGS.load(Ordering::Relaxed) & (F_READY | F_DISABLED) == F_READY
}

/// The write indices of the live compute queues that serve streams.
fn served_indices() -> Indices {
    let st = STATE.lock();
    st.queues()
        .iter()
        .filter(|q| q.compute && !q.dying && !q.streams.is_empty())
        .map(|q| (q.id, st.indices(q.id).0))
        .collect()
}

/// At the start of a synchronising call (before it is counted in): warns when a served queue
/// moved since the last quiet synchronising call and no wrapped call began in between.
pub fn check() {
    if !controlling() {
        return;
    }
    let entered = ENTERED.load(Ordering::SeqCst);
    let Some((count, before)) = NOTED.lock().take() else {
        return;
    };
    if count != entered {
        return;
    }
    let now = served_indices();
    let moved: Vec<(u32, u64, u64)> = before
        .iter()
        .filter_map(|(q, w0)| {
            now.iter()
                .find(|(id, _)| id == q)
                .filter(|(_, w)| w > w0)
                .map(|(_, w)| (*q, *w0, *w))
        })
        .collect();
    // Read after the indices: a wrapped call that began meanwhile explains the move.
    if moved.is_empty() || ENTERED.load(Ordering::SeqCst) != entered {
        return;
    }
    let mut st = STATE.lock();
    let (q, w0, w) = moved[0];
    let streams = st.queue(q).map(|x| x.streams.clone()).unwrap_or_default();
    st.report_once(ESCAPE_WARNING, || {
        format!(
            "{ESCAPE_WARNING}: KFD queue {q} (stream(s) {streams:?}) went from write index {w0} to \
             {w} while no wrapped HIP call ran; a launch path the shim does not wrap, or a HIP call \
             that enqueues without being wrapped (such as the synchronous hipMemcpyHtoD), put it \
             there, and such work is not held at level 1"
        )
    });
}

/// At the end of a synchronising call (after it is counted out): notes the served queues'
/// write indices when no wrapped call is in flight.
pub fn note() {
    if !controlling() {
        return;
    }
    let entered = ENTERED.load(Ordering::SeqCst);
    if EXITED.load(Ordering::SeqCst) != entered {
        *NOTED.lock() = None;
        return;
    }
    let indices = served_indices();
    *NOTED.lock() = Some((entered, indices));
}
