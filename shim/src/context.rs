//! A thread's stream context: the stream whose call it is forwarding right now (the ioctl hook
//! gives a CREATE_QUEUE it sees meanwhile to that stream) and its per-thread default stream.
//! Written by the wrappers' slow paths (`launch/`), reset in a fork child.

use std::cell::Cell;

/// "No stream" in the thread-local context.
pub const NO_STREAM: u64 = u64::MAX;

thread_local! {
    /// Stream whose call this thread is forwarding right now: a CREATE_QUEUE seen meanwhile on
    /// this thread belongs to it.
    pub static CTX: Cell<u64> = const { Cell::new(NO_STREAM) };
    /// This thread's per-thread default stream: (fork generation, stream id, queue known).
    pub static SPT: Cell<(u64, u64, bool)> = const { Cell::new((u64::MAX, NO_STREAM, false)) };
}

/// Fork child: this thread's per-thread stream and context belong to the parent's registry.
pub fn reset_thread_after_fork() {
    CTX.with(|c| c.set(NO_STREAM));
    SPT.with(|c| c.set((u64::MAX, NO_STREAM, false)));
}
