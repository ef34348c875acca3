//! The in-flight window's setting: the size in effect (`KFDQ_WINDOW`, or the agent's class
//! setting while connected), and the generation that invalidates the launch paths' cached queue
//! indices. The wait itself is `window.rs`.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// The window in packets; 0 = unbounded (no window).
pub static WINDOW: AtomicU32 = AtomicU32::new(0);

/// Bumped whenever a cached stream -> queue index mapping may have changed (the registry
/// changed, a queue is being destroyed, the process forked, the window changed).
pub static WINDOW_GEN: AtomicU64 = AtomicU64::new(1);

/// Sets the window (`None`: unbounded) and returns the previous one.
pub fn set(window: Option<u32>) -> Option<u32> {
    let prev = WINDOW.swap(window.unwrap_or(0), Ordering::AcqRel);
    WINDOW_GEN.fetch_add(1, Ordering::AcqRel);
    (prev != 0).then_some(prev)
}

/// The window in effect (`None`: unbounded).
pub fn get() -> Option<u32> {
    match WINDOW.load(Ordering::Relaxed) {
        0 => None,
        w => Some(w),
    }
}
