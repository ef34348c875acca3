//! Level 3's suspend without a thread hand-off: the proxy's reader hands its reading of
//! `/dev/fuse` to a second reader thread and runs DBG_TRAP SUSPEND_QUEUES or RESUME_QUEUES
//! itself (`ioctl::fast_safe`), instead of handing the request to a fuser worker
//! (`kfd-emu-fuse-in` -> socket -> a worker, its answer -> socket -> `kfd-emu-fuse-out`) or to a
//! thread that waits for it (the former `kfd-emu-fuse-fast`, whose wake-up took 37-67 µs p50 of
//! the level-3 reaction on a loaded 2-core machine: docs/performance.md, "Level 3's remaining
//! gap").
//!
//! Their handlers read and write the queue array in client memory under the state lock: the
//! thread reading `/dev/fuse` may not run them, since a fault on a mapping of the mount needs a
//! reader to serve its READ (`crate::reader_ioctl`). So the proxy has two reader threads, of
//! which one reads at a time (docs/kfd-emulator.md, "The reader thread's ioctls"):
//! * the reading one, on such a request, offers the role to the other through a rendezvous
//!   channel (capacity 0, `try_send`): it succeeds only while the other waits for it. Then the
//!   other reads `/dev/fuse` from now on, and this one, no longer a reader, resolves the handle
//!   (waiting for the handle table, whose holders are leaves) and runs the request's dispatch
//!   as a worker would (`ioctl::dispatch_to_bytes` with `ProxyThread::FormerReader`: waiting
//!   for the state lock, faulting on client memory while the new reader serves the READs),
//!   writes the answer to `/dev/fuse` itself (`fuse_proxy::write_answer`), and waits for the
//!   role to come back. The request starts running at once: the other thread's wake-up is off
//!   its path;
//! * when the other thread does not wait (it is running such a request itself), the request goes
//!   to the workers unchanged (`fuse_fast_ioctls_passed_on`): nothing queues behind a running
//!   one, and the reading thread never waits for anything. The channel's own lock is held by
//!   either side only to pair a sender with a receiver, never across a wait, a fault or another
//!   lock;
//! * FUSE_INTERRUPT for such a request is handled as for one a worker runs: these handlers never
//!   hold their request, so the interrupt is remembered (`ioctl::interrupt`) and the answer
//!   comes when the handler returns.
//!
//! When the connection ends, the thread reading then returns and drops its end; the other's
//! wait ends with it.

use std::sync::mpsc::{Receiver, SyncSender, sync_channel};

/// One reader thread's ends of the hand-over: the role goes out through `give` (to the other
/// thread) and comes in through `take`.
pub(crate) struct Baton {
    give: SyncSender<()>,
    take: Receiver<()>,
}

/// The two reader threads' ends.
pub(crate) fn pair() -> (Baton, Baton) {
    let (a_give, b_take) = sync_channel(0);
    let (b_give, a_take) = sync_channel(0);
    (
        Baton {
            give: a_give,
            take: a_take,
        },
        Baton {
            give: b_give,
            take: b_take,
        },
    )
}

impl Baton {
    /// Hands the reading role to the other thread if it waits for it now (true); false,
    /// without waiting, when it runs a request (or is gone).
    pub fn pass(&self) -> bool {
        self.give.try_send(()).is_ok()
    }

    /// Waits until the other thread hands the role back; false when it is gone (the
    /// connection ended).
    pub fn wait(&self) -> bool {
        self.take.recv().is_ok()
    }

    /// Ends whose other thread is gone: every pass fails.
    #[cfg(test)]
    pub fn alone() -> Baton {
        pair().0
    }
}
