//! Diagnostics on stderr: warnings always (once each, by the callers), decisions when
//! `KFDQ_LOG` is set.

use std::sync::atomic::{AtomicBool, Ordering};

/// `KFDQ_LOG` was set (copied from the configuration at init).
pub static VERBOSE: AtomicBool = AtomicBool::new(false);

/// A warning the user must see (invalid configuration, clamped priority, internal error).
pub fn warn_always(msg: &str) {
    eprintln!("kfdq-shim[{}]: warning: {msg}", std::process::id());
}

/// A decision, printed only with `KFDQ_LOG`.
pub fn debug(msg: impl FnOnce() -> String) {
    if VERBOSE.load(Ordering::Relaxed) {
        eprintln!("kfdq-shim[{}]: {}", std::process::id(), msg());
    }
}
