//! Tenants who do not cooperate, at the guards (issue 50 item 8; docs/agent.md "Threat model:
//! the direct-edge board and the guards"): a process that reports more queues than a
//! partition's resident slots does not make the residency guard deactivate the batch job — the
//! agent counts only the queues the kernel lists for it (`/sys/class/kfd/kfd/proc/<pid>/queues`,
//! emulated by kfd-emu). The starvation guard over residency preemptions:
//! `tests/tenant_policy.rs`.

mod common;

use std::time::Duration;

use common::forger::Forger;
use common::kfdqd::{Agent, two_classes};
use common::*;
use kfdq::{Pid, QueueId};
use test_support::wait::wait_until;

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn tenant_queues_the_kernel_does_not_list_make_no_residency_pressure() {
    let emu = mount();
    let agent = Agent::start(&emu, &two_classes("deactivate"));
    let mut lp = Launch::new(programs().get("flood"))
        .args(["20000", "2560", "2", "1"])
        .env("KFDQ_CLASS", "batch")
        .env("KFDQ_SOCKET", agent.sock.display().to_string())
        .start(&emu);
    lp.wait_line("flooding");
    let st = agent.wait_connected(lp.pid, 1);
    let gpu = st.queues[0].gpu_id;
    let q = lp.queues().values().next().unwrap().queue_id;
    let slots = agent
        .status()
        .partitions
        .iter()
        .find(|p| p.gpu_id == gpu)
        .unwrap()
        .resident_slots;
    // A latency forger: its one real queue, and as many made-up ones as the partition has
    // resident slots.
    let mut f = Forger::connect(&agent.sock, "latency", emu.root(), gpu);
    let mut queues = vec![f.queue.clone()];
    for i in 0..slots {
        let mut fake = f.queue.clone();
        fake.queue_id = QueueId(1000 + i);
        queues.push(fake);
    }
    f.registry("latency", queues);
    // The registry read (its queues dropped, or taken).
    let st = agent.wait("the forger's registry read", |s| {
        s.counters.unlisted_queues >= u64::from(slots)
            || s.processes
                .iter()
                .any(|p| p.pid == Pid::this() && p.queues.len() > 1)
    });
    // No residency pressure: the batch job runs (five decisions' worth of time at least).
    assert!(
        !wait_until(Duration::from_millis(500), || !emu.queue(lp.pid, q).active),
        "the batch job deactivated: {:?}",
        agent.process(lp.pid)
    );
    let me = st.processes.iter().find(|p| p.pid == Pid::this()).unwrap();
    assert_eq!(me.queues.len(), 1, "{me:?}");
    assert!(
        me.warnings.iter().any(|w| w.contains("does not list")),
        "{:?}",
        me.warnings
    );
    drop(f);
    lp.stop();
    lp.finish();
}
