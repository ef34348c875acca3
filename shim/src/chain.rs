//! Reaction-chain timestamps of the control thread (`kfdq::chain`), when `KFDQ_CHAIN_TRACE`
//! names a file: the busy edges it sends, and for a preempt command its arrival, its ioctls
//! and its acknowledgement. Kept in the control thread's own buffer and appended to the file
//! once the thread recorded nothing for a while ([`flush`]); other threads (the launch path
//! included) record nothing, and without the variable every call here is a thread-local read.

use std::cell::{Cell, RefCell};

use kfdq::chain::{Recorder, Stage};

thread_local! {
    /// The control thread's recorder (`None` on every other thread, and without the variable).
    static REC: RefCell<Option<Recorder>> = const { RefCell::new(None) };
    /// Set while a preempt command runs: its ioctls are marked.
    static IN_PREEMPT: Cell<bool> = const { Cell::new(false) };
}

/// On the control thread, once (and on each watch thread, `watch.rs`, which records its own
/// preempts): opens the file the configuration names.
pub fn start() {
    let Some(path) = crate::config::config().chain_trace.as_deref() else {
        return;
    };
    match Recorder::open(path) {
        Ok(r) => {
            REC.with(|c| *c.borrow_mut() = Some(r));
            crate::edges::CHAIN.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        Err(e) => crate::log::warn_always(&e.to_string()),
    }
}

/// Whether this thread records.
pub fn on() -> bool {
    REC.with(|c| c.borrow().is_some())
}

/// `stage` at `t_us` (CLOCK_MONOTONIC µs).
pub fn mark_at(stage: Stage, t_us: u64) {
    REC.with(|c| {
        if let Some(r) = c.borrow_mut().as_mut() {
            r.mark_at(stage, t_us);
        }
    });
}

/// `stage` now.
pub fn mark(stage: Stage) {
    if on() {
        mark_at(stage, kfdq::chain::now_us());
    }
}

/// Marks the ioctls of a preempt command from now until [`preempt_done`].
pub fn preempt_started() {
    IN_PREEMPT.with(|p| p.set(true));
}

/// The preempt command ended.
pub fn preempt_done() {
    IN_PREEMPT.with(|p| p.set(false));
}

/// Runs the ioctl `f`, marked when it belongs to a preempt command.
pub fn ioctl<R>(f: impl FnOnce() -> R) -> R {
    if !IN_PREEMPT.with(Cell::get) {
        return f();
    }
    mark(Stage::IoctlIn);
    let r = f();
    mark(Stage::IoctlOut);
    r
}

/// Appends what was recorded to the file once nothing was for `kfdq::chain::QUIET`.
pub fn flush() {
    let failed = REC.with(|c| {
        let mut c = c.borrow_mut();
        let e = c.as_mut().and_then(|r| r.flush_when_quiet().err());
        if e.is_some() {
            *c = None;
        }
        e
    });
    if let Some(e) = failed {
        crate::log::warn_always(&e.to_string());
    }
}
