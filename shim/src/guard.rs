//! Panics never unwind into C: every piece of the shim's own work that runs inside a C call (an
//! exported wrapper, the ioctl hook, the `dlsym` stubs, the control thread) runs under
//! [`guarded`], and a panic stops control for the process: everything is released (fail open)
//! and every call is forwarded untouched from then on.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::Ordering;

use crate::state::{F_DISABLED, FLAGS, STATE};
use crate::window_setting::WINDOW_GEN;

/// Runs `f`, turning a panic into "stop controlling" (never unwinds into C).
pub fn guarded<R>(f: impl FnOnce() -> R) -> Option<R> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => Some(r),
        Err(_) => {
            disable("internal error (panic) in the shim");
            None
        }
    }
}

/// Stops controlling: releases everything (fail open) and forwards every call untouched from
/// now on.
///
/// The flag is set under the registry lock, after every lock-free read of queue indices at an
/// older generation has ended (`index_reads.rs`): once it is set, the ioctl hook forwards
/// DESTROY_QUEUE without marking the queue dying, so no read may be in progress or start after
/// it (reads under the lock check the flag; lookups for lock-free reads refuse once it is set).
/// Must not be called while this thread holds the registry lock (nothing holds it across a
/// `guarded` call).
pub fn disable(why: &str) {
    if FLAGS.load(Ordering::Acquire) & F_DISABLED != 0 {
        return;
    }
    let stopped = catch_unwind(|| {
        let mut st = STATE.lock();
        if FLAGS.load(Ordering::Acquire) & F_DISABLED != 0 {
            return false;
        }
        let before = WINDOW_GEN.fetch_add(1, Ordering::SeqCst);
        crate::index_reads::retire(before);
        FLAGS.fetch_or(F_DISABLED, Ordering::AcqRel);
        crate::levels::fail_open(&mut st);
        st.warn(format!("control stopped: {why}"));
        true
    });
    if stopped.is_err() {
        // Failing open itself panicked; the lock is released (its guard unwound): stop anyway.
        FLAGS.fetch_or(F_DISABLED, Ordering::AcqRel);
    }
    if !matches!(stopped, Ok(false)) {
        crate::log::warn_always(&format!(
            "{why}; kfdq control stopped for this process, calls are forwarded unchanged"
        ));
    }
    STATE.notify_all();
}
