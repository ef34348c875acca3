//! Diagnostics on stderr: warnings always (once each, by the callers, or rate-limited when they
//! can repeat), decisions when `KFDQ_LOG` is set.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

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

/// A warning that may repeat (a misbehaving agent, a socket that stays wrong): printed the
/// first time; afterwards at most once per [`REPEAT_EVERY`], with the count of those held back.
/// `slot` is the caller's own counter pair (one per kind of warning).
pub fn warn_repeating(slot: &Repeat, msg: &str) {
    let n = slot.count.fetch_add(1, Ordering::Relaxed);
    let now = elapsed_ms();
    let last = slot.last_ms.load(Ordering::Relaxed);
    if n == 0 || now.saturating_sub(last) >= REPEAT_EVERY.as_millis() as u64 {
        slot.last_ms.store(now.max(1), Ordering::Relaxed);
        // `shown`: the count of calls up to and including the last one printed.
        let held = n.saturating_sub(slot.shown.swap(n + 1, Ordering::Relaxed));
        if held == 0 {
            warn_always(msg);
        } else {
            warn_always(&format!("{msg} ({held} more like this since the last one)"));
        }
    }
}

/// How often a repeating warning is printed at most.
pub const REPEAT_EVERY: Duration = Duration::from_secs(60);

/// State of one kind of repeating warning.
pub struct Repeat {
    count: AtomicU64,
    shown: AtomicU64,
    last_ms: AtomicU64,
}

impl Repeat {
    /// Nothing printed yet.
    pub const fn new() -> Repeat {
        Repeat {
            count: AtomicU64::new(0),
            shown: AtomicU64::new(0),
            last_ms: AtomicU64::new(0),
        }
    }
}

fn elapsed_ms() -> u64 {
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_millis() as u64
}
