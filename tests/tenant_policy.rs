//! Tenants who do not cooperate, at the policy (issue 50 item 8; docs/agent.md "Threat model:
//! the direct-edge board and the guards"): a process that reports more queues than a
//! partition's resident slots keeps no lower class preempted past its starvation guard. (The
//! agent also drops reported queues the kernel does not list: `shim/tests/tenant_guards.rs`.)

use kfdq::policy::{
    Observation, PartitionObs, Policy, PolicyConfig, ProcessObs, QueueObs, Reason, Run,
};
use kfdq::proto::Level;
use kfdq::{GpuId, Pid, QueueId};

const GPU: GpuId = GpuId(0xb1a0);

fn proc(pid: u32, class: &str, busy: &[bool]) -> ProcessObs {
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

#[test]
fn tenant_more_queues_than_resident_slots_keep_no_lower_class_preempted_past_its_starvation_guard()
{
    let mut p = Policy::new(PolicyConfig::builtin()).unwrap();
    let s = PolicyConfig::builtin().classes[2].starvation.unwrap();
    let parts = [PartitionObs {
        gpu_id: GPU,
        resident_slots: 4,
        cus: 80,
    }];
    // A `normal` process with eight idle queues on a partition of four slots, a busy batch job.
    let procs = [proc(20, "normal", &[false; 8]), proc(30, "batch", &[true])];
    let mut decide = |now_ns| {
        p.decide(&Observation {
            now_ns,
            partitions: &parts,
            processes: &procs,
        })
    };
    let target = |d: &kfdq::policy::Decision| {
        let t = d.targets.iter().find(|t| t.pid == Pid(30)).unwrap();
        (t.run, t.reason.clone())
    };
    let d = decide(0);
    assert_eq!(
        target(&d),
        (
            Run::Preempted(Level::Deactivate),
            Reason::ResidencyGuard(GPU)
        )
    );
    assert_eq!(d.next_ns, Some(s.after_ns), "the guard's time is kept");
    // Preempted `after` long: it runs its share, residency or not.
    let d = decide(s.after_ns);
    assert_eq!(target(&d), (Run::Running, Reason::StarvationGuard));
    assert_eq!(d.next_ns, Some(s.after_ns + s.run_ns));
    // Then the residency guard takes it again, and the guard counts anew.
    let d = decide(s.after_ns + s.run_ns);
    assert_eq!(
        target(&d),
        (
            Run::Preempted(Level::Deactivate),
            Reason::ResidencyGuard(GPU)
        )
    );
}
