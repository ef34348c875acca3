//! Panics never unwind into C: every piece of the shim's own work that runs inside a C call (an
//! exported wrapper, the ioctl hook, the `dlsym` stubs, the control thread) runs under
//! [`guarded`], and a panic stops control for the process: everything is released (fail open)
//! and every call is forwarded untouched from then on.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::Ordering;

use crate::state::{F_DISABLED, FLAGS, STATE};

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
pub fn disable(why: &str) {
    let was = FLAGS.fetch_or(F_DISABLED, Ordering::AcqRel);
    if was & F_DISABLED != 0 {
        return;
    }
    crate::log::warn_always(&format!(
        "{why}; kfdq control stopped for this process, calls are forwarded unchanged"
    ));
    let _ = catch_unwind(|| {
        let mut st = STATE.lock();
        crate::levels::fail_open(&mut st);
        st.warn(format!("control stopped: {why}"));
    });
    STATE.notify_all();
}
