//! What the policy observes: the partitions, the processes with their class and queues, which
//! queues are busy, the time; and the full decision's summary of where each process's queues
//! are ([`RuleOf`]) — a process whose queues are all on one partition is summed up so that an
//! edge decision deciding 63 processes again reads none of their queue lists.

use crate::ids::{GpuId, Pid, QueueId};

/// A GPU partition as the policy sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionObs {
    /// Topology gpu_id.
    pub gpu_id: GpuId,
    /// Active queues the hardware keeps resident (`num_cp_queues`).
    pub resident_slots: u32,
    /// CUs of the partition.
    pub cus: u32,
}

/// One queue of a process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueObs {
    /// KFD queue id.
    pub queue_id: QueueId,
    /// Its partition.
    pub gpu_id: GpuId,
    /// Work is queued on it (write index ahead of read index).
    pub busy: bool,
}

/// One GPU process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessObs {
    /// Process id.
    pub pid: Pid,
    /// Its class name.
    pub class: String,
    /// Its queues.
    pub queues: Vec<QueueObs>,
}

/// Everything one decision looks at.
#[derive(Debug, Clone, Copy)]
pub struct Observation<'a> {
    /// Now, in nanoseconds of the caller's monotonic clock.
    pub now_ns: u64,
    /// The partitions.
    pub partitions: &'a [PartitionObs],
    /// The processes.
    pub processes: &'a [ProcessObs],
}

/// The last full decision's view of one process, in its observation's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct RuleOf {
    pub(super) pid: Pid,
    /// Index into the configuration's classes (`None`: the rule of an unknown class).
    pub(super) rule: Option<usize>,
    /// All its queues on one partition: that partition and how many (`None`: several
    /// partitions, or no queue).
    pub(super) one_partition: Option<(GpuId, u32)>,
}

/// [`RuleOf::one_partition`] of `p`.
pub(super) fn one_partition(p: &ProcessObs) -> Option<(GpuId, u32)> {
    let first = p.queues.first()?.gpu_id;
    p.queues
        .iter()
        .all(|q| q.gpu_id == first)
        .then_some((first, p.queues.len() as u32))
}

/// How many of `p`'s queues are on `gpu` (`one`: its [`RuleOf::one_partition`], read instead
/// of its queues when given).
pub(super) fn queues_on(p: &ProcessObs, one: Option<(GpuId, u32)>, gpu: GpuId) -> u32 {
    match one {
        Some((g, n)) if g == gpu => n,
        Some(_) => 0,
        None => p.queues.iter().filter(|q| q.gpu_id == gpu).count() as u32,
    }
}
