//! The preemption policy, rule by rule, on an injected clock (pure logic: no emulator needed).

mod common;

use common::policy::{GPU, MS, builtin, decide, part, proc};
use kfdq::Pid;
use kfdq::policy::{
    ClassRule, Policy, PolicyConfig, PolicyError, ProcessObs, Reason, Release, Run, Starvation,
};
use kfdq::proto::Level;

#[test]
fn a_busy_higher_class_preempts_lower_classes_at_their_levels() {
    let mut p = builtin();
    let parts = part(24);
    let procs = [
        proc(10, "latency", &[true]),
        proc(20, "normal", &[true]),
        proc(30, "batch", &[true, false]),
    ];
    let d = decide(&mut p, 0, &parts, &procs);
    let run = |pid| d.targets.iter().find(|t| t.pid == Pid(pid)).unwrap().run;
    assert_eq!(run(10), Run::Running);
    assert_eq!(run(20), Run::Preempted(Level::Hold));
    assert_eq!(run(30), Run::Preempted(Level::Deactivate));
    assert!(matches!(
        d.targets.iter().find(|t| t.pid == Pid(30)).unwrap().reason,
        Reason::HigherClassBusy(ref c) if &**c == "latency"
    ));
    // Priorities come from the classes.
    assert_eq!(
        d.targets.iter().map(|t| t.priority).collect::<Vec<_>>(),
        [13, 8, 3]
    );
    // Deactivating the batch process's two queues costs two device-wide preempts (one
    // UPDATE_QUEUE each); the hold none.
    assert_eq!(d.total_preempts(), 2);
}

/// The built-in classes with the fixed hysteresis (`hysteresis_ms` in the agent's file).
fn with_hysteresis() -> Policy {
    let mut config = PolicyConfig::builtin();
    config.release = Release::Hysteresis;
    Policy::new(config).unwrap()
}

#[test]
fn lower_classes_resume_only_after_the_hysteresis() {
    let mut p = with_hysteresis();
    let parts = part(24);
    let busy = [proc(10, "latency", &[true]), proc(30, "batch", &[true])];
    let idle = [proc(10, "latency", &[false]), proc(30, "batch", &[true])];
    decide(&mut p, 0, &parts, &busy);
    // The latency class is seen idle at 5 ms: the hysteresis runs from that idle edge.
    let h = p.config().hysteresis_ns;
    decide(&mut p, 5 * MS, &parts, &idle);
    let d = decide(&mut p, 5 * MS + h - 1, &parts, &idle);
    assert_eq!(p.state_of(Pid(30)), Some(Run::Preempted(Level::Deactivate)));
    assert!(matches!(d.targets[1].reason, Reason::Hysteresis(_)));
    assert_eq!(
        d.next_ns,
        Some(5 * MS + h),
        "decide again when the hysteresis runs out"
    );
    let d = decide(&mut p, 5 * MS + h, &parts, &idle);
    assert_eq!(p.state_of(Pid(30)), Some(Run::Running));
    assert_eq!(d.changes.len(), 1);
    assert_eq!(d.total_preempts(), 1);
}

#[test]
fn the_hysteresis_runs_from_the_idle_edge_not_the_busy_one() {
    // An agent decides on news only: a latency request longer than the hysteresis is seen busy
    // once, at its start, and idle once, at its end. The batch job stays preempted for the
    // hysteresis after the end (an earlier version counted from the busy edge and released at
    // once).
    let mut p = with_hysteresis();
    let parts = part(24);
    let h = p.config().hysteresis_ns;
    decide(
        &mut p,
        0,
        &parts,
        &[proc(10, "latency", &[true]), proc(30, "batch", &[true])],
    );
    let idle = [proc(10, "latency", &[false]), proc(30, "batch", &[true])];
    let d = decide(&mut p, 3 * h, &parts, &idle);
    assert_eq!(p.state_of(Pid(30)), Some(Run::Preempted(Level::Deactivate)));
    assert_eq!(d.next_ns, Some(4 * h));
}

#[test]
fn a_release_hold_keeps_the_preempted_preempted_but_preempts_no_one_that_runs() {
    // The batch process was preempted; while the agent was hung its shim's lease ran out and it
    // released itself. The latency class then goes idle: its hold would keep a preempted batch
    // process preempted, but it must not preempt again one that already runs (that costs a
    // preempt and a restore to protect an idle class). A newcomer during the hold runs too.
    let mut p = with_hysteresis();
    let parts = part(24);
    let h = p.config().hysteresis_ns;
    let busy = [proc(10, "latency", &[true]), proc(30, "batch", &[true])];
    decide(&mut p, 0, &parts, &busy);
    assert_eq!(p.state_of(Pid(30)), Some(Run::Preempted(Level::Deactivate)));
    p.released_outside(Pid(30), 2 * MS);
    assert_eq!(p.state_of(Pid(30)), Some(Run::Running));
    let idle = [
        proc(10, "latency", &[false]),
        proc(30, "batch", &[true]),
        proc(40, "batch", &[true]),
    ];
    let d = decide(&mut p, 3 * MS, &parts, &idle);
    assert_eq!(p.state_of(Pid(30)), Some(Run::Running));
    assert_eq!(p.state_of(Pid(40)), Some(Run::Running));
    assert!(d.changes.is_empty(), "{:?}", d.changes);
    assert_eq!(d.total_preempts(), 0);
    // A busy latency class still preempts it, and its hold then keeps it preempted.
    decide(&mut p, 4 * MS, &parts, &[busy[0].clone(), busy[1].clone()]);
    assert_eq!(p.state_of(Pid(30)), Some(Run::Preempted(Level::Deactivate)));
    let d = decide(&mut p, 5 * MS, &parts, &idle[..2]);
    assert_eq!(p.state_of(Pid(30)), Some(Run::Preempted(Level::Deactivate)));
    assert!(matches!(d.targets[1].reason, Reason::Hysteresis(_)));
    assert_eq!(d.next_ns, Some(5 * MS + h));
    // Released outside the policy during the hold: the hold's end has nothing left to do.
    p.released_outside(Pid(30), 6 * MS);
    let d = decide(&mut p, 7 * MS, &parts, &idle[..2]);
    assert_eq!(p.state_of(Pid(30)), Some(Run::Running));
    assert_eq!(d.targets[1].reason, Reason::Free);
    assert!(d.changes.is_empty());
    // A process the policy never decided is left alone.
    p.released_outside(Pid(99), 8 * MS);
    assert_eq!(p.state_of(Pid(99)), None);
}

#[test]
fn a_burst_is_taken_in_one_decision_off_and_one_on() {
    // Eight batch processes with two queues each (18 active queues fit 24 slots, so the
    // residency guard stays out of it), and a burst of latency work; per level, the decisions
    // that cost device-wide preempts and their total.
    for (level, per_process) in [
        (Level::Suspend, 1),
        (Level::Deactivate, 2),
        (Level::Hold, 0),
    ] {
        let mut config = PolicyConfig::builtin();
        config.classes[2].level = Some(level);
        let mut p = Policy::new(config).unwrap();
        let parts = part(24);
        let (mut total, mut costly) = (0, 0);
        for t in 0..100u64 {
            let hp_busy = (10..40).contains(&t);
            let mut procs = vec![proc(1, "latency", &[hp_busy, false])];
            procs.extend((0..8).map(|i| proc(100 + i, "batch", &[true, i % 2 == 0])));
            let d = decide(&mut p, t * MS, &parts, &procs);
            total += d.total_preempts();
            costly += u32::from(d.total_preempts() > 0);
        }
        assert_eq!(
            total,
            2 * 8 * per_process,
            "{level:?}: off and on for each of the 8 processes"
        );
        assert_eq!(
            costly,
            if per_process > 0 { 2 } else { 0 },
            "{level:?}: all processes in one decision off, one on"
        );
    }
}

#[test]
fn processes_are_preempted_whole() {
    let mut p = builtin();
    let parts = part(24);
    // One idle and one busy queue: the process is one unit.
    let procs = [
        proc(10, "latency", &[true]),
        proc(30, "batch", &[false, true]),
    ];
    let d = decide(&mut p, 0, &parts, &procs);
    assert_eq!(d.targets.len(), 2);
    assert_eq!(d.changes.len(), 1);
    assert_eq!(d.changes[0].to, Run::Preempted(Level::Deactivate));
}

#[test]
fn an_unpreemptible_class_always_runs() {
    let mut p = builtin();
    let parts = part(24);
    let mut config = PolicyConfig::builtin();
    config.classes.push(ClassRule {
        name: "critical".into(),
        rank: 9,
        priority: 15,
        level: None,
        starvation: None,
        cu_share_permille: None,
        window: None,
        hw_queues: None,
        hint_timeout_ms: None,
    });
    let mut q = Policy::new(config).unwrap();
    let procs = [proc(1, "critical", &[true]), proc(10, "latency", &[true])];
    let d = decide(&mut q, 0, &parts, &procs);
    assert!(d.targets.iter().all(|t| t.run == Run::Running), "{d:?}");
    let _ = decide(&mut p, 0, &parts, &procs);
}

#[test]
fn the_residency_guard_deactivates_lower_classes_until_the_rest_fit() {
    let mut p = builtin();
    let parts = part(4);
    // Nothing busy, but 3 + 2 + 2 active queues on 4 slots.
    let procs = [
        proc(10, "latency", &[false, false, false]),
        proc(20, "normal", &[false, false]),
        proc(30, "batch", &[false, false]),
    ];
    let d = decide(&mut p, 0, &parts, &procs);
    let t = |pid| {
        d.targets
            .iter()
            .find(|t| t.pid == Pid(pid))
            .unwrap()
            .clone()
    };
    // The batch process goes first; 5 > 4 still, so the normal one too.
    assert_eq!(t(30).run, Run::Preempted(Level::Deactivate));
    assert_eq!(t(30).reason, Reason::ResidencyGuard(GPU));
    assert_eq!(
        t(20).run,
        Run::Preempted(Level::Deactivate),
        "a hold frees no slot"
    );
    assert_eq!(t(10).run, Run::Running);
    assert_eq!(
        d.total_preempts(),
        4,
        "one UPDATE_QUEUE per deactivated queue, in one decision"
    );
}

#[test]
fn the_starvation_guard_lets_a_preempted_class_run_its_share() {
    let mut p = builtin();
    let parts = part(24);
    let s = PolicyConfig::builtin().classes[2].starvation.unwrap();
    let procs = [proc(10, "latency", &[true]), proc(30, "batch", &[true])];
    decide(&mut p, 0, &parts, &procs);
    let d = decide(&mut p, s.after_ns - MS, &parts, &procs);
    assert_eq!(p.state_of(Pid(30)), Some(Run::Preempted(Level::Deactivate)));
    assert_eq!(d.next_ns, Some(s.after_ns));
    let d = decide(&mut p, s.after_ns, &parts, &procs);
    assert_eq!(p.state_of(Pid(30)), Some(Run::Running));
    assert_eq!(d.targets[1].reason, Reason::StarvationGuard);
    assert_eq!(d.next_ns, Some(s.after_ns + s.run_ns));
    decide(&mut p, s.after_ns + s.run_ns - 1, &parts, &procs);
    assert_eq!(p.state_of(Pid(30)), Some(Run::Running));
    decide(&mut p, s.after_ns + s.run_ns, &parts, &procs);
    assert_eq!(p.state_of(Pid(30)), Some(Run::Preempted(Level::Deactivate)));
}

#[test]
fn changes_wait_for_the_minimum_interval_between_preempts() {
    let mut config = PolicyConfig::builtin();
    config.release = Release::Hysteresis;
    config.hysteresis_ns = 0;
    config.min_preempt_interval_ns = 5 * MS;
    let mut p = Policy::new(config).unwrap();
    let parts = part(24);
    let busy = [proc(10, "latency", &[true]), proc(30, "batch", &[true])];
    let idle = [proc(10, "latency", &[false]), proc(30, "batch", &[true])];
    assert_eq!(decide(&mut p, 0, &parts, &busy).total_preempts(), 1);
    // The latency job went idle at once, but the resume waits 5 ms.
    let d = decide(&mut p, MS, &parts, &idle);
    assert_eq!(d.total_preempts(), 0);
    assert_eq!(d.targets[1].reason, Reason::RateLimited);
    assert_eq!(d.next_ns, Some(5 * MS));
    let d = decide(&mut p, 5 * MS, &parts, &idle);
    assert_eq!(d.total_preempts(), 1);
    assert_eq!(p.state_of(Pid(30)), Some(Run::Running));
}

#[test]
fn cu_shares_split_the_partition_by_rank() {
    let mut config = PolicyConfig::builtin();
    config.classes[0].cu_share_permille = Some(250);
    config.classes[2].cu_share_permille = Some(750);
    let mut p = Policy::new(config).unwrap();
    let parts = part(24);
    let d = decide(
        &mut p,
        0,
        &parts,
        &[proc(10, "latency", &[false]), proc(30, "batch", &[false])],
    );
    let mask = |pid| {
        d.targets
            .iter()
            .find(|t| t.pid == Pid(pid))
            .unwrap()
            .cu_masks[&GPU]
            .clone()
    };
    // 80 CUs: latency 0..20, batch 20..80; no overlap, all covered.
    assert_eq!(mask(10), vec![0x000f_ffff, 0, 0]);
    assert_eq!(mask(30), vec![0xfff0_0000, 0xffff_ffff, 0xffff]);
}

#[test]
fn exited_processes_are_forgotten() {
    let mut p = builtin();
    let parts = part(24);
    decide(
        &mut p,
        0,
        &parts,
        &[proc(10, "latency", &[true]), proc(30, "batch", &[true])],
    );
    assert!(p.state_of(Pid(30)).is_some());
    decide(&mut p, MS, &parts, &[proc(10, "latency", &[true])]);
    assert_eq!(p.state_of(Pid(30)), None);
}

#[test]
fn the_same_observations_give_the_same_decisions() {
    let run = || {
        let mut p = builtin();
        let parts = part(6);
        (0..200u64)
            .map(|t| {
                let procs: Vec<ProcessObs> = (0..6u32)
                    .map(|i| {
                        let class = ["latency", "normal", "batch"][(i % 3) as usize];
                        proc(i, class, &[(t + u64::from(i)) % 7 < 3, t % 11 == 0])
                    })
                    .collect();
                decide(&mut p, t * MS, &parts, &procs)
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(run(), run());
}

#[test]
fn bad_configurations_are_refused_with_the_rule() {
    let mut c = PolicyConfig::builtin();
    c.classes[1].priority = 16;
    assert_eq!(
        Policy::new(c).unwrap_err(),
        PolicyError::Priority("normal".into(), 16)
    );
    let mut c = PolicyConfig::builtin();
    c.classes[1].rank = 0;
    let e = Policy::new(c).unwrap_err();
    assert!(e.to_string().contains("both have rank 0"), "{e}");
    let mut c = PolicyConfig::builtin();
    c.classes[2].name = "latency".into();
    assert!(matches!(
        Policy::new(c).unwrap_err(),
        PolicyError::DuplicateName(_)
    ));
    let mut c = PolicyConfig::builtin();
    c.classes[2].starvation = Some(Starvation {
        run_ns: 0,
        after_ns: 1,
    });
    assert!(matches!(
        Policy::new(c).unwrap_err(),
        PolicyError::Starvation(_)
    ));
    assert_eq!(
        Policy::new(PolicyConfig {
            classes: vec![],
            release: Release::Hysteresis,
            hysteresis_ns: 0,
            min_preempt_interval_ns: 0
        })
        .unwrap_err(),
        PolicyError::NoClasses
    );
}
