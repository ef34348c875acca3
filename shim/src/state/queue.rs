//! The registry's queues and the reads of their indices: the one place that reads the addresses
//! the runtime handed to CREATE_QUEUE, with the invariant that makes those reads mean something.
//!
//! No read here dereferences those addresses: the kernel copies the words (`self_mem.rs`:
//! `process_vm_readv`, or a pipe where that is refused) and answers `EFAULT` for memory the
//! runtime freed, so a read can never fault the host process, whatever the runtime did, and
//! is no Rust access to memory the GPU and other threads write (no data race). The rules below
//! make a read name this queue's live indices, not memory since reused for something else.
//!
//! Reading the queues' indices (the runtime's memory, valid until its DESTROY_QUEUE of the queue
//! returns) follows one of two rules:
//!
//! * Under the registry lock ([`State::indices`](super::State::indices) and the other `State` methods): the queue is
//!   registered, not dying, and control runs. The ioctl hook marks a queue dying under the lock
//!   before its DESTROY_QUEUE goes to the kernel and removes it after; control stops (after which
//!   the hook forwards DESTROY_QUEUE untouched) under the lock too (`guard.rs`). The types make
//!   these reads happen under the lock: the only [`State`](super::State) outside the registry's module is the
//!   one behind [`STATE`](super::STATE) (`State::new` is private, `State` is neither `Clone` nor `Default`), so
//!   a `&State` exists only while the lock is held; [`Queues`] is made only by `State::new`, a
//!   queue enters it only by [`Queues::add`] (`unsafe`: the caller vouches that the addresses are
//!   the queue's indices),
//!   [`Queue`] is made only here and is not `Clone`, its address fields are private to this
//!   file, and [`Queue::read_indices`] is private to the registry. These reads also survive
//!   memory the runtime freed without a DESTROY_QUEUE the hook saw (`self_mem.rs`): such a queue
//!   leaves the registry ([`State::forget_unmapped`](super::State::forget_unmapped)).
//! * Without the lock, by the in-flight window: [`Queue::index_addresses`] hands the addresses
//!   out, under the lock, to the window's lookup only, which pairs them with the generation read
//!   before it; they are read only inside a read section at that generation, and whatever lets a
//!   queue's memory go waits for those sections (`index_reads.rs` states the rule).
//!
//! The unit tests (`tests.rs`) assert the missing traits.

use std::sync::atomic::Ordering;

use crate::self_mem::Words;

/// A KFD queue observed through CREATE_QUEUE. Made only by [`State::add_queue`](super::State::add_queue), never copied:
/// its index addresses are valid only while it is registered.
#[derive(Debug)]
pub struct Queue {
    /// KFD queue id.
    pub id: u32,
    /// GPU node.
    pub gpu_id: u32,
    /// Priority the runtime asked for (CREATE_QUEUE or its last UPDATE_QUEUE).
    pub requested: u32,
    /// Priority in effect.
    pub effective: u32,
    /// Priority set by the agent (level 0), overriding the class mapping.
    pub override_priority: Option<u32>,
    /// Ring address.
    pub ring_base: u64,
    /// Ring bytes.
    pub ring_size: u32,
    /// Address of the 64-bit write index (private: see the module).
    wptr: u64,
    /// Address of the 64-bit read index (private: see the module).
    rptr: u64,
    /// Percentage word the runtime wants (restored on release of level 2).
    pub runtime_percentage: u32,
    /// Deactivated by the shim (level 2).
    pub deactivated: bool,
    /// Suspended by the shim (level 3).
    pub suspended: bool,
    /// Its EC_QUEUE_NEW was cleared by a GET_QUEUE_SNAPSHOT of this shim (amdkfd raises it
    /// only at CREATE_QUEUE, and SUSPEND_QUEUES refuses a queue that carries it): a level 3
    /// needs no snapshot for it.
    pub new_cleared: bool,
    /// Busy at the last sample.
    pub busy: bool,
    /// DESTROY_QUEUE in flight: its memory may go away, do not read it.
    pub dying: bool,
    /// A compute queue (`KFD_IOC_QUEUE_TYPE_COMPUTE` / `_COMPUTE_AQL`). Copy-engine (SDMA)
    /// queues are registered but never attributed to a stream.
    pub compute: bool,
    /// Streams mapped onto it.
    pub streams: Vec<u64>,
    /// Launches that waited at the in-flight window.
    pub window_waits: u64,
    /// Of those, waits that gave up on a stalled read index.
    pub window_stalls: u64,
    /// Some stream was ever attributed to it.
    pub claimed: bool,
    /// When work (a write index above 0) was first seen on it while unclaimed.
    pub unclaimed_work: Option<std::time::Instant>,
    /// A read found its index memory unmapped: the runtime freed it without a DESTROY_QUEUE the
    /// hook saw. Removed by [`State::forget_unmapped`](super::State::forget_unmapped).
    unmapped: std::cell::Cell<bool>,
}

impl Queue {
    /// The addresses (not the values) of the 64-bit write and read indices, as the runtime gave
    /// them to CREATE_QUEUE (0: none). Reading the memory they name is [`State::indices`](super::State::indices)'s
    /// business, or the in-flight window's, which reads them under the rule of `index_reads.rs`
    /// (its lookup, in `launch/`, is the only caller).
    pub fn index_addresses(&self) -> (u64, u64) {
        (self.wptr, self.rptr)
    }

    /// Current (write index, read index), copied from the runtime's memory by the kernel
    /// (`self_mem.rs`: a read of memory the runtime freed is refused, never a fault); (0, 0) when
    /// the queue is dying, has no (aligned) index addresses, control stopped, the read failed, or
    /// the memory is no longer mapped (then the queue is marked for [`State::forget_unmapped`](super::State::forget_unmapped)).
    ///
    /// Private to the registry (`state/`): callers reach it through [`State::indices`](super::State::indices) (a
    /// `&State` proves the registry lock is held) or from a `State` method on one of its
    /// [`Queues`].
    pub(super) fn read_indices(&self) -> (u64, u64) {
        if self.dying
            || self.unmapped.get()
            || self.wptr == 0
            || self.rptr == 0
            || self.wptr % 8 != 0
            || self.rptr % 8 != 0
            // Control stopped (set under the lock): the ioctl hook forwards DESTROY_QUEUE without
            // removing the queue.
            || super::FLAGS.load(Ordering::Relaxed) & super::F_DISABLED != 0
        {
            return (0, 0);
        }
        match crate::self_mem::read_pair(self.wptr, self.rptr) {
            Words::Read(w, r) => (w, r),
            Words::Unmapped => {
                self.unmapped.set(true);
                (0, 0)
            }
            // No pipe to read through: not known now; the next read tries again.
            Words::Failed => (0, 0),
        }
    }

    /// A read found its index memory unmapped (see [`State::forget_unmapped`](super::State::forget_unmapped)).
    pub(super) fn is_unmapped(&self) -> bool {
        self.unmapped.get()
    }
}
/// What a successful CREATE_QUEUE tells about the new queue.
#[derive(Debug)]
pub struct CreatedQueue {
    /// KFD queue id.
    pub id: u32,
    /// GPU node.
    pub gpu_id: u32,
    /// Priority the runtime asked for.
    pub requested: u32,
    /// Priority in effect.
    pub effective: u32,
    /// Ring address.
    pub ring_base: u64,
    /// Ring bytes.
    pub ring_size: u32,
    /// Address of the 64-bit write index.
    pub wptr: u64,
    /// Address of the 64-bit read index.
    pub rptr: u64,
    /// Percentage word the runtime asked for.
    pub runtime_percentage: u32,
    /// A compute queue (see [`Queue::compute`]).
    pub compute: bool,
}

/// The registry's queues. Made only by `State::new`; a queue enters only by [`Queues::add`].
#[derive(Debug)]
pub struct Queues(Vec<Queue>);

impl Queues {
    /// None (for `State::new`).
    pub(super) const fn new() -> Queues {
        Queues(Vec::new())
    }

    /// The queues.
    pub fn as_slice(&self) -> &[Queue] {
        &self.0
    }

    /// The queues, in registration order.
    pub fn iter(&self) -> std::slice::Iter<'_, Queue> {
        self.0.iter()
    }

    /// The queues, mutably (their address fields stay private).
    pub(super) fn iter_mut(&mut self) -> std::slice::IterMut<'_, Queue> {
        self.0.iter_mut()
    }

    /// Keeps the queues `keep` accepts.
    pub(super) fn retain(&mut self, keep: impl FnMut(&Queue) -> bool) {
        self.0.retain(keep);
    }

    /// Registers a queue the runtime just created, in place of any stale entry with its id.
    ///
    /// # Safety
    /// `q.wptr` and `q.rptr` are 0, or the addresses of the queue's 64-bit write and read
    /// indices as the runtime handed them to a CREATE_QUEUE on its `/dev/kfd` fd that succeeded
    /// (memory the runtime keeps until its DESTROY_QUEUE of the queue returns) and `self` is the
    /// registry's behind [`STATE`](super::STATE), whose ioctl hook sees that DESTROY_QUEUE and removes the queue
    /// before it returns.
    pub(super) unsafe fn add(&mut self, q: CreatedQueue) {
        self.0.retain(|x| x.id != q.id);
        self.0.push(Queue {
            id: q.id,
            gpu_id: q.gpu_id,
            requested: q.requested,
            effective: q.effective,
            override_priority: None,
            ring_base: q.ring_base,
            ring_size: q.ring_size,
            wptr: q.wptr,
            rptr: q.rptr,
            runtime_percentage: q.runtime_percentage,
            deactivated: false,
            suspended: false,
            new_cleared: false,
            busy: false,
            dying: false,
            compute: q.compute,
            streams: Vec::new(),
            claimed: false,
            unclaimed_work: None,
            window_waits: 0,
            window_stalls: 0,
            unmapped: Default::default(),
        });
    }

    /// A queue as a unit test makes it (index addresses 0 unless set with
    /// [`Queue::set_indices_for_tests`]).
    #[cfg(test)]
    pub(super) fn push_for_tests(&mut self, q: Queue) {
        self.0.push(q);
    }
}

#[cfg(test)]
impl Queue {
    /// A compute queue with no index addresses.
    pub(super) fn for_tests(id: u32) -> Queue {
        Queue {
            id,
            gpu_id: 1,
            requested: 7,
            effective: 7,
            override_priority: None,
            ring_base: 0,
            ring_size: 4096,
            wptr: 0,
            rptr: 0,
            runtime_percentage: 100,
            deactivated: false,
            suspended: false,
            new_cleared: false,
            busy: false,
            dying: false,
            compute: true,
            streams: vec![],
            claimed: false,
            unclaimed_work: None,
            window_waits: 0,
            window_stalls: 0,
            unmapped: Default::default(),
        }
    }

    /// Sets the index addresses.
    ///
    /// # Safety
    /// `wptr` and `rptr` are 8-byte aligned addresses of two `u64`s that stay allocated while
    /// the queue is in a registry.
    pub(super) unsafe fn set_indices_for_tests(&mut self, wptr: u64, rptr: u64) {
        self.wptr = wptr;
        self.rptr = rptr;
    }
}
