//! The registry a tracee shows the node, built from its snapshot and the tracer's own records.

use std::collections::{BTreeMap, BTreeSet};

use crate::ids::Pid;
use crate::kfd::debug::QueueSnapshot;
use crate::proto::{QueueInfo, Registry};

/// The registry a tracee shows: its queues as the snapshot gives them; no streams, no
/// priorities (neither can be read from outside the process).
pub(super) fn registry(
    pid: u32,
    queues: &[QueueSnapshot],
    suspended: &BTreeSet<u32>,
    busy: &BTreeMap<u32, bool>,
    release_failures: u64,
) -> Registry {
    Registry {
        lease_expiries: 0,
        release_failures,
        pid: Pid(pid),
        class: None,
        streams: Vec::new(),
        queues: queues
            .iter()
            .map(|q| QueueInfo {
                ring_base: q.ring_base_address,
                ring_size: q.ring_size,
                suspended: suspended.contains(&q.queue_id.0),
                busy: busy.get(&q.queue_id.0).copied().unwrap_or(false),
                // no priorities: neither can be read from outside the process
                ..QueueInfo::new(q.queue_id, q.gpu_id, 0, 0)
            })
            .collect(),
        warnings: Vec::new(),
        window: None,
    }
}

/// A queue of a snapshot, for the tracer's unit tests.
#[cfg(test)]
pub(super) fn snapshot(id: u32) -> QueueSnapshot {
    use crate::ids::{GpuId, QueueId};
    QueueSnapshot {
        queue_id: QueueId(id),
        gpu_id: GpuId(7),
        exception_status: 0,
        ring_base_address: 0x1000 * u64::from(id),
        write_pointer_address: 0x10,
        read_pointer_address: 0x18,
        ctx_save_restore_address: 0,
        ring_size: 4096,
        queue_type: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::GpuId;

    #[test]
    fn the_registry_shows_the_snapshot_with_the_tracers_records() {
        let queues = [snapshot(1), snapshot(2), snapshot(3)];
        let suspended = BTreeSet::from([2]);
        let busy = BTreeMap::from([(1, true), (2, false)]);
        let r = registry(42, &queues, &suspended, &busy, 5);
        assert_eq!(r.pid, Pid(42));
        assert_eq!(r.release_failures, 5);
        assert!(r.streams.is_empty() && r.class.is_none() && r.window.is_none());
        let got: Vec<(u32, bool, bool, u64)> = r
            .queues
            .iter()
            .map(|q| (q.queue_id.0, q.suspended, q.busy, q.ring_base))
            .collect();
        assert_eq!(
            got,
            [
                (1, false, true, 0x1000),
                (2, true, false, 0x2000),
                (3, false, false, 0x3000)
            ],
            "a queue never sampled is idle"
        );
        assert!(r.queues.iter().all(|q| q.gpu_id == GpuId(7)
            && q.ring_size == 4096
            && !q.deactivated
            && q.requested_priority == 0));
    }
}
