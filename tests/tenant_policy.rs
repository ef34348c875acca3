//! Tenants who do not cooperate, at the policy (issue 50 items 4 and 8; docs/agent.md "Threat
//! model: the direct-edge board and the guards"): a process that reports more queues than a
//! partition's resident slots keeps no lower class preempted past its starvation guard (the
//! agent also drops reported queues the kernel does not list: `shim/tests/tenant_guards.rs`);
//! a process kept preempting itself from the edge board — by a busy slot the agent believes
//! idle — is let run its share as one the policy preempted is.

mod common;

use common::policy::{GPU, builtin, decide, part, proc};
use kfdq::Pid;
use kfdq::policy::{PolicyConfig, Reason, Run};
use kfdq::proto::Level;

#[test]
fn tenant_more_queues_than_resident_slots_keep_no_lower_class_preempted_past_its_starvation_guard()
{
    let mut p = builtin();
    let s = PolicyConfig::builtin().classes[2].starvation.unwrap();
    let parts = part(4);
    // A `normal` process with eight idle queues on a partition of four slots, a busy batch job.
    let procs = [proc(20, "normal", &[false; 8]), proc(30, "batch", &[true])];
    let mut decide = |now_ns| decide(&mut p, now_ns, &parts, &procs);
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

#[test]
fn tenant_a_process_that_preempts_itself_is_held_to_its_starvation_guard() {
    let mut p = builtin();
    let s = PolicyConfig::builtin().classes[2].starvation.unwrap();
    let parts = part(8);
    // The latency writer looks idle to the policy (its reports say so; its slot says busy),
    // the batch job is busy: the policy lets it run.
    let procs = [proc(10, "latency", &[false]), proc(30, "batch", &[true])];
    let target = |d: &kfdq::policy::Decision| {
        let t = d.targets.iter().find(|t| t.pid == Pid(30)).unwrap();
        (t.run, t.reason.clone())
    };
    let d = decide(&mut p, 0, &parts, &procs);
    assert_eq!(target(&d), (Run::Running, Reason::Free));
    // It preempts itself from the board (its watch), and stays so.
    p.preempted_outside(Pid(30), 1);
    let d = decide(&mut p, 2, &parts, &procs);
    assert_eq!(target(&d), (Run::Running, Reason::Free));
    assert_eq!(d.next_ns, Some(1 + s.after_ns), "the guard's time is kept");
    // Preempted by itself `after` long: the guard lets it run its share (the agent takes its
    // watches away: reason StarvationGuard), even while it tries again meanwhile.
    let d = decide(&mut p, 1 + s.after_ns, &parts, &procs);
    assert_eq!(target(&d), (Run::Running, Reason::StarvationGuard));
    assert_eq!(d.next_ns, Some(1 + s.after_ns + s.run_ns));
    p.preempted_outside(Pid(30), 2 + s.after_ns);
    let d = decide(&mut p, 1 + s.after_ns + s.run_ns / 2, &parts, &procs);
    assert_eq!(target(&d), (Run::Running, Reason::StarvationGuard));
    // The share ran out: free again, and a new self-preemption counts from its own start.
    let end = 1 + s.after_ns + s.run_ns;
    let d = decide(&mut p, end, &parts, &procs);
    assert_eq!(target(&d), (Run::Running, Reason::Free));
    p.preempted_outside(Pid(30), end + 1);
    let d = decide(&mut p, end + 1 + s.after_ns, &parts, &procs);
    assert_eq!(target(&d), (Run::Running, Reason::StarvationGuard));
    // One that undid its own level owes nothing to the guard.
    let mut q = builtin();
    decide(&mut q, 0, &parts, &procs);
    q.preempted_outside(Pid(30), 1);
    q.released_itself(Pid(30));
    let d = decide(&mut q, 1 + s.after_ns, &parts, &procs);
    assert_eq!(target(&d), (Run::Running, Reason::Free));
}
