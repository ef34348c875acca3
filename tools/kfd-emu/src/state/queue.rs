//! User queues (`struct queue`): their kind, the kernels pending and finished on them, the
//! BOs they hold.

use std::collections::BTreeMap;

use super::{BoKey, QueueKey};

/// Kind of a user queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum QueueKind {
    ComputePm4,
    ComputeAql,
    Sdma,
    SdmaXgmi,
    SdmaByEngId,
}

impl QueueKind {
    /// From `KFD_IOC_QUEUE_TYPE_*`.
    pub fn from_user(t: u32) -> Option<QueueKind> {
        Some(match t {
            kfd_sys::KFD_IOC_QUEUE_TYPE_COMPUTE => QueueKind::ComputePm4,
            kfd_sys::KFD_IOC_QUEUE_TYPE_SDMA => QueueKind::Sdma,
            kfd_sys::KFD_IOC_QUEUE_TYPE_COMPUTE_AQL => QueueKind::ComputeAql,
            kfd_sys::KFD_IOC_QUEUE_TYPE_SDMA_XGMI => QueueKind::SdmaXgmi,
            kfd_sys::KFD_IOC_QUEUE_TYPE_SDMA_BY_ENG_ID => QueueKind::SdmaByEngId,
            _ => return None,
        })
    }

    /// Back to `KFD_IOC_QUEUE_TYPE_*` (queue snapshots).
    pub fn user_type(self) -> u32 {
        match self {
            QueueKind::ComputePm4 => kfd_sys::KFD_IOC_QUEUE_TYPE_COMPUTE,
            QueueKind::ComputeAql => kfd_sys::KFD_IOC_QUEUE_TYPE_COMPUTE_AQL,
            QueueKind::Sdma => kfd_sys::KFD_IOC_QUEUE_TYPE_SDMA,
            QueueKind::SdmaXgmi => kfd_sys::KFD_IOC_QUEUE_TYPE_SDMA_XGMI,
            QueueKind::SdmaByEngId => kfd_sys::KFD_IOC_QUEUE_TYPE_SDMA_BY_ENG_ID,
        }
    }

    /// The kernel queue type printed in `proc/<pid>/queues/<qid>/type`.
    pub fn sysfs_type(self) -> u32 {
        match self {
            QueueKind::ComputePm4 | QueueKind::ComputeAql => 0,
            QueueKind::Sdma => 1,
            QueueKind::SdmaXgmi => 3,
            QueueKind::SdmaByEngId => 4,
        }
    }

    pub fn stats_name(self) -> &'static str {
        match self {
            QueueKind::ComputeAql => "compute_aql",
            QueueKind::ComputePm4 => "compute_pm4",
            QueueKind::Sdma | QueueKind::SdmaXgmi | QueueKind::SdmaByEngId => "sdma",
        }
    }

    pub fn is_compute(self) -> bool {
        matches!(self, QueueKind::ComputePm4 | QueueKind::ComputeAql)
    }
}

/// What the emulator does to memory when a recognised runtime kernel completes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum KernelEffect {
    /// Copy `len` bytes from GPU address `src` to `dst`.
    Copy { src: u64, dst: u64, len: u64 },
    /// Fill `len` bytes at `dst` with the 32-bit `value` repeated.
    Fill { dst: u64, len: u64, value: u32 },
}

/// A packet in flight.
#[derive(Debug, Clone)]
pub(crate) struct Pending {
    /// Completion signal address (0: none).
    pub signal: u64,
    /// Done to memory when the packet completes.
    pub effect: Option<KernelEffect>,
    /// GPU counter when the CP took the packet, on a queue with profiling enabled (then the
    /// completion writes the model's start and end as `start_ts` and `end_ts`).
    pub start_ts: Option<u64>,
}

/// A completed packet's memory work (see `cp::finish_completed`).
#[derive(Debug)]
pub(crate) struct Finished {
    pub key: QueueKey,
    pub gpu: usize,
    pub effect: Option<KernelEffect>,
    /// Completion signal address (0: none).
    pub signal: u64,
    /// `start_ts` and `end_ts` of a packet of a profiling queue: the model's start of its first
    /// work-group and end of its last, in GPU counter ticks (see `Pending`).
    pub timestamps: Option<(u64, u64)>,
    /// Read index to publish: (address, value).
    pub rptr: Option<(u64, u64)>,
    /// Address of the packet's header in the ring, set to INVALID once it is consumed.
    pub header: Option<u64>,
}

/// Queue buffers referenced under Linux 6.12 rules.
#[derive(Debug, Default, Clone)]
pub(crate) struct QueueRefs {
    pub ring: Option<BoKey>,
    pub others: Vec<BoKey>,
}

impl QueueRefs {
    pub fn all(&self) -> impl Iterator<Item = BoKey> + '_ {
        self.ring.iter().copied().chain(self.others.iter().copied())
    }
}

/// A user queue and its HWS/CP model state.
pub(crate) struct Queue {
    pub qid: u32,
    /// Topology GPU node (partition) index.
    pub gpu: usize,
    pub kind: QueueKind,
    /// Creation order (runlist order).
    pub seq: u64,
    pub ring_base: u64,
    pub ring_size: u32,
    pub wptr_addr: u64,
    pub rptr_addr: u64,
    pub ctx_addr: u64,
    pub ctx_size: u32,
    /// Low byte: percentage; bits 8-15: pm4_target_xcc.
    pub percentage: u32,
    pub priority: u32,
    pub doorbell_index: u32,
    pub suspended: bool,
    pub exception_status: u64,
    pub cu_mask: Option<Vec<u32>>,
    pub refs: QueueRefs,
    // --- CP ---
    /// Read index published to the client: every packet before it completed.
    pub read_index: u64,
    /// Last write index the CP read.
    pub write_index: u64,
    /// Next ring index the CP reads and hands to the model.
    pub fetch_index: u64,
    /// Packets handed to the model and not completed, by ring index.
    pub pending: BTreeMap<u64, Pending>,
    pub packets_done: u64,
    /// Client memory could not be read; the CP stopped this queue.
    pub cp_failed: bool,
    /// When it stopped being runnable and became runnable again (set by [`crate::hws`]).
    pub runnable_log: crate::runnable::RunnableLog,
}

impl Queue {
    /// The kernel's `QUEUE_IS_ACTIVE`.
    pub fn is_active(&self) -> bool {
        self.ring_size > 0 && self.ring_base != 0 && (self.percentage & 0xff) > 0 && !self.suspended
    }

    /// Whether the CP reads this queue's ring.
    pub fn fetchable(&self) -> bool {
        self.is_active() && !self.cp_failed && self.kind == QueueKind::ComputeAql
    }
}
