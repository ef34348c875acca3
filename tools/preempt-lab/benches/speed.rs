//! How fast `preempt-lab sim` simulates: dispatch completions and the model's batch events per
//! second of this machine's time, per workload mix, at level 2 (the busiest control path: a
//! decision and two runlist updates per request), for the field's mix under every control, and
//! for the measured shapes of the default scenarios (`field`, `decode`: 200 requests, one seed).
//! `cargo bench -p preempt-lab` prints the table recorded in docs/performance.md ("preempt-lab:
//! simulation speed").

use std::time::Instant;

use kfdq::proto::Level;
use preempt_lab::scenario::Scenario;
use preempt_lab::sim::{self, Control, Setup};
use preempt_lab::workload::{Arrival, Kernel, Shape, Workload};

/// The field's scenario with these jobs, one seed under `control`.
fn setup_with(control: Control, hp: Workload, lp: Workload, requests: usize) -> Setup {
    let mut sc = Scenario::field_synthetic(1000.0);
    sc.hp = hp;
    sc.lp = lp;
    sc.requests = requests;
    sc.setup(control, 1, true, true)
}

/// The same at level 2.
fn setup(hp: Workload, lp: Workload, requests: usize) -> Setup {
    setup_with(Control::Level(Level::Deactivate), hp, lp, requests)
}

fn main() {
    let poisson = Arrival::Poisson { rate: 20.0 };
    let closed = Arrival::ClosedLoop { depth: 8 };
    let tiny = Workload {
        shape: Shape::Resnet50Batch,
        kernels: vec![Kernel {
            workgroups: 1,
            waves_per_wg: 1,
            wg_ns: 5_000,
            cu_util_permille: 0,
            dram_bytes: 0,
        }],
        arrival: closed,
        trace: None,
        request_ends: Vec::new(),
    };
    let field = |control, lp_wg_us| {
        setup_with(
            control,
            Workload::new(Shape::Resnet18, None, poisson),
            Workload::new(Shape::Resnet50Batch, Some(lp_wg_us), closed),
            2000,
        )
    };
    // The measured shapes (the default `sim` scenarios): traced kernels, contention terms on.
    let measured = |mut sc: Scenario, control| {
        sc.requests = 200;
        sc.setup(control, 1, true, true)
    };
    let mut cases = vec![
        (
            "field, measured (traces, 5.3 TB/s), level 2 edge",
            measured(Scenario::field(), Control::Edge(Level::Deactivate)),
        ),
        (
            "field, measured, level 2 hinted",
            measured(Scenario::field(), Control::Hinted(Level::Deactivate)),
        ),
        (
            "field, measured, native",
            measured(Scenario::field(), Control::Native),
        ),
        (
            "decode, measured, level 2 edge",
            measured(Scenario::decode(), Control::Edge(Level::Deactivate)),
        ),
        (
            "field (resnet18 + resnet50-batch 1 ms wg)",
            field(Control::Level(Level::Deactivate), 1000.0),
        ),
        (
            "field, 250 us batch wg",
            field(Control::Level(Level::Deactivate), 250.0),
        ),
        (
            "llm-decode + resnet50-batch 1 ms wg",
            setup(
                Workload::new(Shape::LlmDecode, None, Arrival::Poisson { rate: 5.0 }),
                Workload::new(Shape::Resnet50Batch, Some(1000.0), closed),
                50,
            ),
        ),
        (
            "bert + 1-wave 5 us batch kernels (launch bound)",
            setup(Workload::new(Shape::Bert, None, poisson), tiny, 200),
        ),
    ];
    for (name, control) in [
        ("field, native", Control::Native),
        ("field, priority only", Control::PriorityOnly),
        ("field, level 1", Control::Level(Level::Hold)),
        ("field, level 3", Control::Level(Level::Suspend)),
    ] {
        cases.push((name, field(control, 1000.0)));
    }
    println!(
        "{:<48} {:>12} {:>14} {:>14} {:>10} {:>16} {:>15}",
        "workloads (level 2, 1 seed)",
        "completions",
        "wg events",
        "batch events",
        "wall s",
        "completions/s",
        "batch events/s"
    );
    // Each case as `sim` runs most seeds, then recording the timeline as the plots' seed does;
    // the wall time is the best of 3 runs.
    for (name, mut s) in cases {
        for timeline in [false, true] {
            s.timeline = timeline;
            let name = if timeline {
                "  + timeline (plots)"
            } else {
                name
            };
            // Best of 3: the first run of a case also pays for warming the allocator.
            let mut best = f64::INFINITY;
            let mut result = None;
            for _ in 0..3 {
                let t = Instant::now();
                let r = sim::run(&s).expect("setup");
                best = best.min(t.elapsed().as_secs_f64());
                result = Some(r);
            }
            let (r, secs) = (result.expect("three runs"), best);
            println!(
                "{name:<48} {:>12} {:>14} {:>14} {:>10.2} {:>15.2}M {:>14.1}M",
                r.completions,
                r.wg_events,
                r.batch_events,
                secs,
                r.completions as f64 / secs / 1e6,
                r.batch_events as f64 / secs / 1e6
            );
        }
    }
}
