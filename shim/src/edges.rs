//! Busy edges: the launch that makes a queue of a preempting class busy wakes the control
//! thread at once, instead of waiting for the next activity sample (docs/shim.md, "Busy
//! edges").
//!
//! The agent turns reporting on for processes whose class preempts others
//! (`AgentMsg::Edges`). Then every stream-ordered call, after the real call returned (its
//! packet is in the ring), looks at [`ARMED`]: if no busy report is outstanding it sets it and
//! writes the control thread's eventfd (one system call on the launch that makes the process
//! busy, none on the launches while it is busy). The control thread samples the queues, sends
//! the edges, samples every [`kfdq::proto::BUSY_SAMPLE_PERIOD`] while a queue is busy, and
//! clears [`ARMED`] once every queue is idle — then samples once more, so that a launch which
//! found [`ARMED`] still set just before it was cleared is not lost (both sides use
//! sequentially consistent operations: either the launch sees it cleared and wakes, or the
//! second sample sees its packet).

use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

/// A busy report is outstanding: set by the launch that wakes the control thread, cleared by
/// the control thread when every queue was seen idle.
static ARMED: AtomicBool = AtomicBool::new(false);

/// The control thread's eventfd (-1 until it made one).
static WAKE: AtomicI32 = AtomicI32::new(-1);

/// After a stream-ordered call of a process that reports edges: wakes the control thread if
/// no busy report is outstanding.
#[inline(always)]
pub fn launched() {
    if !ARMED.swap(true, Ordering::SeqCst) {
        wake();
    }
}

#[cold]
#[inline(never)]
fn wake() {
    let fd = WAKE.load(Ordering::Acquire);
    if fd < 0 {
        return;
    }
    let one: u64 = 1;
    // SAFETY: `fd` is the eventfd the control thread made and never closes (only a fork child
    // forgets it, before any of its threads run); the buffer is 8 readable bytes on the stack,
    // as eventfd writes take. An error (the counter full) leaves a wake-up pending anyway.
    let _ = unsafe { libc::write(fd, (&raw const one).cast(), 8) };
}

/// The eventfd the control thread polls, made on first use (non-blocking, close-on-exec).
/// `None` if the kernel refused one: edges then wait for the next sample.
pub fn wake_fd() -> Option<i32> {
    let fd = WAKE.load(Ordering::Acquire);
    if fd >= 0 {
        return Some(fd);
    }
    // SAFETY: eventfd takes no pointers; the flags are valid.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return None;
    }
    WAKE.store(fd, Ordering::Release);
    Some(fd)
}

/// Empties the eventfd after a wake-up.
pub fn drain(fd: i32) {
    let mut v: u64 = 0;
    // SAFETY: `fd` is the non-blocking eventfd of [`wake_fd`]; the buffer is 8 writable bytes
    // on the stack. With nothing pending it fails with EAGAIN, which is ignored.
    let _ = unsafe { libc::read(fd, (&raw mut v).cast(), 8) };
}

/// Whether a busy report is outstanding.
pub fn armed() -> bool {
    ARMED.load(Ordering::SeqCst)
}

/// Every queue was seen idle: the next launch wakes the control thread again.
pub fn disarm() {
    ARMED.store(false, Ordering::SeqCst);
}

/// A busy queue was seen (by a sample, not a launch): no wake-up needed until it is idle.
pub fn arm() {
    ARMED.store(true, Ordering::SeqCst);
}

/// In a fork child, before any of its threads run: the parent's eventfd is the parent's
/// control thread's; the child's control thread makes its own.
pub fn reset_after_fork() {
    let fd = WAKE.swap(-1, Ordering::Relaxed);
    if fd >= 0 {
        // SAFETY: the child's copy of the parent's eventfd, which nothing in the child uses
        // (the child's control thread has not started); closing it leaves the parent's alone.
        unsafe { libc::close(fd) };
    }
    ARMED.store(false, Ordering::Relaxed);
}
