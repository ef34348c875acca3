//! The kernel's own list of a process's queues (`ROOT/sys/class/kfd/kfd/proc/<pid>/queues/`,
//! `crate::kfd::procfs`), against which a shim's registry is checked before the policy sees
//! it: a process cannot make the residency guard deactivate others with queues it does not
//! have (issue 50 item 8, docs/agent.md "The direct-edge board and the guards").
//!
//! amdkfd lists every user-mode queue of a process there (`kfd_procfs_add_queue`, one
//! directory per queue id with `gpuid`, `size` and `type`), created at CREATE_QUEUE and removed
//! at DESTROY_QUEUE; kfd-emu emulates the same files. A registry queue the kernel does not list
//! for that process, on that partition, is dropped. The list is read only when a registry
//! names a queue not verified before for the process (a registry repeats its queues at every
//! change of their state), so the cost is one directory read per new queue.

use std::collections::{BTreeMap, BTreeSet};

use crate::ids::{GpuId, Pid, QueueId};
use crate::kfd::{Root, procfs};
use crate::proto::Registry;

/// Queues verified per process.
#[derive(Debug, Default)]
pub struct KernelQueues {
    verified: BTreeMap<Pid, BTreeSet<(QueueId, GpuId)>>,
}

impl KernelQueues {
    /// Drops from `reg` (of `pid`) the queues the kernel does not list for `pid`; returns how
    /// many it dropped. `known`: the processes still connected (the others are forgotten).
    pub fn verify(
        &mut self,
        root: &Root,
        pid: Pid,
        reg: &mut Registry,
        known: impl Fn(Pid) -> bool,
    ) -> usize {
        let seen = self.verified.entry(pid).or_default();
        if reg
            .queues
            .iter()
            .all(|q| seen.contains(&(q.queue_id, q.gpu_id)))
        {
            return 0;
        }
        // An unreadable list (no KFD state: the process has no queue) verifies nothing.
        let listed: BTreeSet<(QueueId, GpuId)> = procfs::process(root, pid.0)
            .map(|p| p.queues.iter().map(|q| (q.queue_id, q.gpu_id)).collect())
            .unwrap_or_default();
        *seen = listed;
        let before = reg.queues.len();
        reg.queues
            .retain(|q| seen.contains(&(q.queue_id, q.gpu_id)));
        let dropped = before - reg.queues.len();
        self.verified.retain(|p, _| *p == pid || known(*p));
        dropped
    }
}
