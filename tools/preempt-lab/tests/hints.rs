//! Request hints (`l1h`..`l3h`, issue 51) and the measured-shape scenarios (`field`, `decode`)
//! as the lab runs them. Virtual time: every assertion is about the model's timeline or its
//! counts, nothing about the machine's speed.

use kfdq::policy::Release;
use kfdq::proto::Level;
use preempt_lab::scenario::Scenario;
use preempt_lab::sim::{self, Control, RunResult};
use preempt_lab::timeline::Timeline;

mod common;
use common::{lab, ok};

/// One seed of `requests` of `sc` under `control`, with its timeline.
fn run(sc: &Scenario, control: Control, requests: usize) -> RunResult {
    let mut sc = sc.clone();
    sc.requests = requests;
    let mut setup = sc.setup(control, 1, true, true);
    setup.timeline = true;
    sim::run(&setup).expect("setup")
}

fn timeline(r: &RunResult) -> &Timeline {
    r.timeline.as_ref().expect("timeline recorded")
}

/// Whether the LP job was preempted (the command in effect on the GPU) at `t`.
fn preempted_at(tl: &Timeline, t: u64) -> bool {
    tl.preempted_spans().iter().any(|&(a, b)| a <= t && t < b)
}

/// Requests whose first kernel reached the ring with the batch job preempted.
fn launches_preempted(r: &RunResult) -> usize {
    let tl = timeline(r);
    tl.hp_launch_ns
        .iter()
        .filter(|&&t| preempted_at(tl, t))
        .count()
}

#[test]
fn a_hint_preempts_the_batch_job_before_the_requests_first_kernel() {
    // The measured field: ResNet-18 requests of 145 short kernels next to ResNet-50 training.
    let sc = Scenario::field();
    assert_eq!(sc.host.hint_lead_ns, 500_000);
    let hinted = run(&sc, Control::Hinted(Level::Deactivate), 20);
    let edge = run(&sc, Control::Edge(Level::Deactivate), 20);
    let tl = timeline(&hinted);
    assert_eq!(tl.hp_launch_ns.len(), 20);
    // The first request: the batch job was preempted (the runlist update done) before its first
    // kernel reached the ring, and that preempt came within the lead before it.
    let first = tl.hp_launch_ns[0];
    let mark = tl
        .marks
        .iter()
        .find(|m| m.preempted)
        .expect("a preempt before the first request");
    assert!(
        mark.at_ns < first && first - mark.at_ns < sc.host.hint_lead_ns,
        "preempt at {} ns, first launch at {first} ns",
        mark.at_ns
    );
    assert!(preempted_at(tl, first));
    // Every request found the batch job off (no hint expired, none came too late at 20/s);
    // without hints no request does: each launch raises the edge the preempt follows.
    assert_eq!(launches_preempted(&hinted), 20);
    assert_eq!(hinted.hints_expired, 0);
    assert_eq!(launches_preempted(&edge), 0);
    assert!(edge.reaction_us.len() > hinted.reaction_us.len());
    // Each hint's end is an idle edge the release rule acts on: the batch job runs again
    // between requests (released as many times as preempted, give or take the last).
    let releases = tl.marks.iter().filter(|m| !m.preempted).count();
    let preempts = tl.marks.len() - releases;
    assert!(preempts >= 1 && releases + 1 >= preempts, "{:?}", tl.marks);
    assert!(hinted.lp_kernels > 0);
}

#[test]
fn a_hint_never_followed_by_work_expires_and_the_batch_job_runs_again() {
    // Hints 2 ms ahead with a 1 ms bound: each expires 1 ms before its request launches. A
    // release at the idle edge (no hysteresis) shows the batch job back on the GPU by then.
    let mut sc = Scenario::field_synthetic(4000.0);
    sc.policy.release = Release::Hysteresis;
    sc.policy.hysteresis_ns = 0;
    sc.host.hint_lead_ns = 2_000_000;
    sc.host.hint_timeout_ns = 1_000_000;
    let r = run(&sc, Control::Hinted(Level::Deactivate), 10);
    assert_eq!(r.hints_expired, 10, "every hint expires before its work");
    let tl = timeline(&r);
    let first = tl.hp_launch_ns[0];
    // Preempted on the hint, released on its expiry, both before the first launch.
    let before: Vec<bool> = tl
        .marks
        .iter()
        .filter(|m| m.at_ns < first)
        .map(|m| m.preempted)
        .collect();
    assert_eq!(before, [true, false], "{:?} before {first}", tl.marks);
    assert!(!preempted_at(tl, first));
    // The same hints within the bound (the default, the product's 50 ms): none expires.
    sc.host.hint_timeout_ns = sim::HostParams::default().hint_timeout_ns;
    assert_eq!(sc.host.hint_timeout_ns, 50_000_000);
    let r = run(&sc, Control::Hinted(Level::Deactivate), 10);
    assert_eq!(r.hints_expired, 0);
    assert_eq!(launches_preempted(&r), 10);
}

#[test]
fn without_hints_the_edge_rows_do_not_change() {
    // The hint machinery leaves the unhinted configurations as they were: a hint lead or bound
    // changes nothing for them.
    let mut sc = Scenario::field_synthetic(4000.0);
    let a = run(&sc, Control::Edge(Level::Deactivate), 10);
    sc.host.hint_lead_ns = 1_234_000;
    sc.host.hint_timeout_ns = 1;
    let b = run(&sc, Control::Edge(Level::Deactivate), 10);
    assert_eq!(a, b);
    assert_eq!(b.hints_expired, 0);
}

#[test]
fn the_measured_scenarios_and_the_hint_lead_sweep_run_from_the_command_line() {
    let quick = ["--seeds", "1", "--requests", "5"];
    let mut args = vec!["sim", "--scenario", "decode", "--controls", "l2e,l2h"];
    args.extend(quick);
    args.push("--json");
    let v: serde_json::Value = serde_json::from_str(&ok(&lab(&args))).unwrap();
    assert_eq!(v["scenario"]["name"], "decode");
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows[1]["control"], "level 2 hinted");
    assert_eq!(rows[1]["hints_expired"], 0);
    let mut args = vec![
        "sim",
        "--controls",
        "l2h",
        "--sweep",
        "hint-lead=0,500",
        "--hint-lead-us",
        "100",
    ];
    args.extend(quick);
    args.push("--csv");
    let csv = ok(&lab(&args));
    for v in ["0", "500"] {
        let row = format!("field,hint-lead,{v},level 2 hinted,");
        assert_eq!(
            csv.lines().filter(|l| l.starts_with(&row)).count(),
            1,
            "{csv}"
        );
    }
    // The measured batch job has no work-group time to set; a hint bound must be above 0.
    for (extra, want) in [
        (["--lp-wg-us", "4000"], "--scenario field-synthetic"),
        (["--hint-timeout-ms", "0"], "must be above 0"),
    ] {
        let mut args = vec!["sim"];
        args.extend(quick);
        args.extend(extra);
        let o = lab(&args);
        assert_eq!(o.status.code(), Some(2));
        let e = String::from_utf8_lossy(&o.stderr);
        assert!(e.contains(want), "{e}");
    }
}
