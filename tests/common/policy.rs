//! The policy's tests' observations (tests/policy.rs, tests/tenant_policy.rs): one partition,
//! processes with busy or idle queues on it, a decision at a time.

use kfdq::policy::{
    Decision, Observation, PartitionObs, Policy, PolicyConfig, ProcessObs, QueueObs,
};
use kfdq::{GpuId, Pid, QueueId};

/// A millisecond, in the policy's nanoseconds.
pub const MS: u64 = 1_000_000;
/// The partition of every observation.
pub const GPU: GpuId = GpuId(0xb1a0);

/// The partition with `slots` resident queue slots and 80 CUs.
pub fn part(slots: u32) -> Vec<PartitionObs> {
    vec![PartitionObs {
        gpu_id: GPU,
        resident_slots: slots,
        cus: 80,
    }]
}

/// Process `pid` of `class` with one queue on [`GPU`] per entry of `busy`.
pub fn proc(pid: u32, class: &str, busy: &[bool]) -> ProcessObs {
    ProcessObs {
        pid: Pid(pid),
        class: class.into(),
        queues: busy
            .iter()
            .enumerate()
            .map(|(i, &busy)| QueueObs {
                queue_id: QueueId(i as u32),
                gpu_id: GPU,
                busy,
            })
            .collect(),
    }
}

/// `p`'s decision at `now_ns`.
pub fn decide(
    p: &mut Policy,
    now_ns: u64,
    parts: &[PartitionObs],
    procs: &[ProcessObs],
) -> Decision {
    p.decide(&Observation {
        now_ns,
        partitions: parts,
        processes: procs,
    })
}

/// The built-in configuration's policy.
pub fn builtin() -> Policy {
    Policy::new(PolicyConfig::builtin()).unwrap()
}
