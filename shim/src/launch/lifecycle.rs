//! Stream creation and destruction: the new stream's id reserved before the real call (the
//! attribution context of the queue the runtime may create), registered with its HIP priority
//! and creating library after it; a destroyed stream forgotten.

use std::sync::atomic::Ordering;

use kfdq::policy::class::clamp_hip_priority;
use kfdq::proto::StreamKind;

use crate::context::{CTX, NO_STREAM};
use crate::escapes::Call;
use crate::guard::guarded;
use crate::state::{F_DISABLED, FLAGS, STATE};

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
