//! The registry in the protocol's form (`kfdq::proto::Registry`), for the agent and `kfdq ps`.

use kfdq::proto;
use kfdq::{GpuId, Pid, QueueId};

use super::State;

impl State {
    /// The registry in protocol form.
    pub fn to_proto(&self, pid: Pid) -> proto::Registry {
        proto::Registry {
            pid,
            class: self.class.clone(),
            streams: self
                .streams
                .iter()
                .map(|s| proto::StreamInfo {
                    stream_id: s.id,
                    kind: s.kind,
                    handle: s.handle as u64,
                    hip_priority: s.hip_priority,
                    queue_id: s.queue.map(QueueId),
                    creator: s.creator.clone(),
                    held: s.held,
                    held_calls: s.held_calls,
                })
                .collect(),
            queues: self
                .queues
                .iter()
                .map(|q| proto::QueueInfo {
                    queue_id: QueueId(q.id),
                    gpu_id: GpuId(q.gpu_id),
                    requested_priority: q.requested,
                    effective_priority: q.effective,
                    ring_base: q.ring_base,
                    ring_size: q.ring_size,
                    streams: q.streams.clone(),
                    deactivated: q.deactivated,
                    suspended: q.suspended,
                    busy: q.busy,
                    window_waits: q.window_waits,
                    window_stalls: q.window_stalls,
                })
                .collect(),
            warnings: self.warnings.clone(),
            window: crate::window_setting::get(),
            lease_expiries: self.lease_expiries,
            release_failures: self.owed.failures,
        }
    }
}
