//! The registry: streams, the KFD queues the runtime created, and which stream runs on which
//! queue; plus the fast-path flags derived from it.
//!
//! Everything here is plain data behind one [`PMutex`]; the exported wrappers and the ioctl hook
//! take it only on slow paths. The files:
//!
//! * this one: [`State`], the one registry behind [`STATE`], and its queue lookups;
//! * `queue.rs`: the queues and the reads of their indices, with the invariant that makes those
//!   reads sound (checked against that file alone);
//! * `flags.rs`: the fast-path flags, the count of created queues and the fork generation;
//! * `streams.rs`: streams, registered and looked up; `attribution.rs`: which stream runs on
//!   which queue;
//! * `dynamic.rs`: when HIP's dynamic queues may move a stream, so launches re-attribute;
//! * `activity.rs`: busy samples, unclaimed work and unmapped queues, from the indices;
//! * `warnings.rs`: warnings, reported once; `wire.rs`: the registry in protocol form;
//! * `tests.rs`: the unit tests.

use std::sync::atomic::Ordering;

use kfdq::policy::class::PriorityPolicy;
use kfdq::proto::StreamKind;

use crate::kfd_fd::KfdFd;
use crate::pmutex::PMutex;

mod activity;
mod attribution;
mod dynamic;
mod flags;
mod queue;
mod streams;
#[cfg(test)]
mod tests;
mod warnings;
mod wire;

pub use dynamic::{Sampling, move_chance};
pub use flags::{
    F_CREATED_PENDING, F_DISABLED, F_EDGES, F_HOLDS, F_NULL_PENDING, F_READY, F_REPROBE, F_WINDOW,
    FLAGS, FORK_GEN, QUEUES_CREATED,
};
pub use queue::{CreatedQueue, Queue, Queues};
pub use streams::{MAX_ATTEMPTS, NULL_STREAM_ID, Stream};
pub use warnings::UNCLAIMED_GRACE;

/// The registry.
pub static STATE: PMutex<State> = PMutex::new(State::new());

/// The whole registry.
#[derive(Debug)]
pub struct State {
    /// Streams.
    pub streams: Vec<Stream>,
    /// Queues (private: see `queue.rs`; [`Self::queues`], [`Self::queue_mut`]).
    queues: Queues,
    /// Queues created during a stream-creation call whose stream is not registered yet.
    pub inflight: Vec<(u64, u32)>,
    /// Warnings.
    pub warnings: Vec<String>,
    /// Next stream id.
    pub next_stream_id: u64,
    /// Bumped on every change the agent or `kfdq ps` should see.
    pub generation: u64,
    /// The runtime's `/dev/kfd` fd (`None` until its first CREATE_QUEUE).
    pub kfd_fd: Option<KfdFd>,
    /// Level-3 attachment: DBG_TRAP ENABLE on this process (holds KFD's event pipe).
    pub debug: Option<kfdq::kfd::DebugAttachment>,
    /// Streams registered from now on start held (level 1 on `All`).
    pub hold_new: bool,
    /// Static priority policy.
    pub policy: PriorityPolicy,
    /// Class name in effect.
    pub class: Option<String>,
    /// The agent asked for busy edges (`AgentMsg::Edges`; sets [`F_EDGES`]).
    pub edges: bool,
    /// Leases that ran out (the control thread released everything on its own).
    pub lease_expiries: u64,
    /// Releases the kernel refused, retried until they hold (`kfdq::policy::retry`).
    pub owed: kfdq::policy::retry::Owed,
}

impl State {
    /// Empty registry: private, so that the one behind [`STATE`] is the only one (see the module).
    const fn new() -> State {
        State {
            streams: Vec::new(),
            queues: Queues::new(),
            inflight: Vec::new(),
            warnings: Vec::new(),
            next_stream_id: 1,
            generation: 1,
            kfd_fd: None,
            debug: None,
            hold_new: false,
            policy: PriorityPolicy {
                class: None,
                forced: None,
            },
            class: None,
            edges: false,
            lease_expiries: 0,
            owed: kfdq::policy::retry::Owed::new(),
        }
    }

    /// The queues.
    pub fn queues(&self) -> &[Queue] {
        self.queues.as_slice()
    }

    /// Registers a queue the runtime just created, in place of any stale entry with its id.
    ///
    /// # Safety
    /// As [`Queues::add`]: `q.wptr` and `q.rptr` are 0, or the addresses of the queue's 64-bit
    /// write and read indices as the runtime handed them to a CREATE_QUEUE on its `/dev/kfd` fd
    /// that succeeded, and `self` is the registry behind [`STATE`].
    pub unsafe fn add_queue(&mut self, q: CreatedQueue) {
        // SAFETY: the caller's contract is `Queues::add`'s.
        unsafe { self.queues.add(q) };
    }

    /// Current (write index, read index) of queue `qid`, read from the runtime's memory; (0, 0)
    /// when no such queue is registered, it is dying, has no (aligned) index addresses, or
    /// control stopped.
    ///
    /// The registry lock is part of the signature: a `&State` exists only behind [`STATE`]'s
    /// lock, and the queue is looked up in it, so the read happens under the lock on a queue
    /// that is registered (see the module).
    pub fn indices(&self, qid: u32) -> (u64, u64) {
        self.queue(qid).map_or((0, 0), Queue::read_indices)
    }

    /// Marks a change.
    pub fn changed(&mut self) {
        self.generation += 1;
        crate::window_setting::WINDOW_GEN.fetch_add(1, Ordering::AcqRel);
        // Wakes the control thread when it has no agent (it publishes the registry file);
        // callers hold the registry lock, under which broadcasting is allowed.
        STATE.notify_all();
    }

    /// The queue with `id`.
    pub fn queue(&self, id: u32) -> Option<&Queue> {
        self.queues.as_slice().iter().find(|q| q.id == id)
    }

    /// The queue with `id`, mutably.
    pub fn queue_mut(&mut self, id: u32) -> Option<&mut Queue> {
        self.queues.iter_mut().find(|q| q.id == id)
    }

    /// Removes a destroyed queue and forgets it on its streams.
    pub fn remove_queue(&mut self, qid: u32) {
        self.queues.retain(|q| q.id != qid);
        // A per-thread stream's queue goes away with its thread (or a device reset); a thread
        // that launches again registers a fresh per-thread stream.
        self.streams
            .retain(|s| !(s.kind == StreamKind::PerThread && s.queue == Some(qid)));
        for s in &mut self.streams {
            if s.queue == Some(qid) {
                s.queue = None;
            }
        }
        self.changed();
        self.refresh_flags();
    }

    /// Anything of this process preempted: a held stream, new streams held, or a queue
    /// deactivated or suspended.
    pub fn preempted_anything(&self) -> bool {
        self.held_count() > 0
            || self.hold_new
            || self.queues().iter().any(|q| q.deactivated || q.suspended)
    }
}

/// In a `fork` child: an empty registry, with a fresh lock (the parent's state is left behind,
/// see [`PMutex::reset_after_fork`]).
///
/// # Safety
/// Only in the child handler of `pthread_atfork`, where the calling thread is the only one.
pub unsafe fn reset_after_fork() {
    // SAFETY: per this function's contract.
    unsafe { STATE.reset_after_fork(State::new()) };
}

/// A registry of its own for other modules' unit tests (index addresses 0 only: nothing adds a
/// queue with real ones there).
#[cfg(test)]
pub fn registry_for_tests() -> State {
    State::new()
}
