//! The fast-path flags derived from the registry, the count of queues created, and the fork
//! generation: atomics a launch reads without the registry lock.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::{NULL_STREAM_ID, State};
use kfdq::proto::StreamKind;

/// `FLAGS` bit: initialisation finished.
pub const F_READY: u32 = 1;
/// `FLAGS` bit: some stream is held (level 1), or new streams are to be held.
pub const F_HOLDS: u32 = 2;
/// `FLAGS` bit: the null stream's queue is not known yet.
pub const F_NULL_PENDING: u32 = 4;
/// `FLAGS` bit: some created stream's queue is not known yet.
pub const F_CREATED_PENDING: u32 = 8;
/// `FLAGS` bit: control stopped after an internal error; everything is forwarded untouched.
pub const F_DISABLED: u32 = 16;
/// `FLAGS` bit: an in-flight window is in effect (`window.rs`).
pub const F_WINDOW: u32 = 32;
/// `FLAGS` bit: the agent asked for busy edges (`edges.rs`): stream-ordered calls report the
/// launch that makes the process busy.
pub const F_EDGES: u32 = 64;
/// `FLAGS` bit: HIP's dynamic queues may move a stream to another queue (`dynamic.rs`), so
/// every launch compares write indices, which attributes it to the queue its packet lands on.
pub const F_REPROBE: u32 = 128;

/// Fast-path flags: one relaxed load decides whether a launch needs the slow path.
pub static FLAGS: AtomicU32 = AtomicU32::new(0);

/// Bumped on every CREATE_QUEUE the hook records: a synchronising call that saw it unchanged
/// created no queue and has nothing to register.
pub static QUEUES_CREATED: AtomicU64 = AtomicU64::new(0);

/// Bumped by the fork child handler; thread-local caches compare against it.
pub static FORK_GEN: AtomicU64 = AtomicU64::new(0);

impl State {
    /// Recomputes the fast-path flags from the registry (caller holds the lock).
    pub fn refresh_flags(&self) {
        let mut set = 0;
        if self.held_count() > 0 || self.hold_new {
            set |= F_HOLDS;
        }
        let null_known = self
            .stream(NULL_STREAM_ID)
            .is_some_and(|s| s.queue.is_some() || s.gave_up);
        if !null_known {
            set |= F_NULL_PENDING;
        }
        if self
            .streams
            .iter()
            .any(|s| s.kind == StreamKind::Created && s.queue.is_none() && !s.gave_up)
        {
            set |= F_CREATED_PENDING;
        }
        if crate::window_setting::get().is_some() {
            set |= F_WINDOW;
        }
        if self.edges {
            set |= F_EDGES;
        }
        if super::dynamic::reprobe(self) {
            set |= F_REPROBE;
        }
        let mask = F_HOLDS | F_NULL_PENDING | F_CREATED_PENDING | F_WINDOW | F_EDGES | F_REPROBE;
        let cur = FLAGS.load(Ordering::Relaxed);
        if cur & F_DISABLED != 0 {
            return;
        }
        FLAGS.store((cur & !mask) | set, Ordering::Release);
    }
}
