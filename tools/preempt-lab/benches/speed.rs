//! How fast `preempt-lab sim` simulates: dispatch completions and work-group events per second
//! of this machine's time, per workload mix, at level 2 (the busiest control path: a decision
//! and two runlist updates per request). `cargo bench -p preempt-lab` prints the table recorded
//! in docs/performance.md ("preempt-lab: simulation speed").

use std::time::Instant;

use kfdq::proto::Level;
use preempt_lab::scenario::Scenario;
use preempt_lab::sim::{self, Control, Setup};
use preempt_lab::workload::{Arrival, Kernel, Shape, Workload};

/// The field's scenario with these jobs, one seed at level 2.
fn setup(hp: Workload, lp: Workload, requests: usize) -> Setup {
    let mut sc = Scenario::field(1000.0);
    sc.hp = hp;
    sc.lp = lp;
    sc.requests = requests;
    sc.setup(Control::Level(Level::Deactivate), 1, true, true)
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
        }],
        arrival: closed,
        trace: None,
        request_ends: Vec::new(),
    };
    let cases = [
        (
            "field (resnet18 + resnet50-batch 1 ms wg)",
            setup(
                Workload::new(Shape::Resnet18, None, poisson),
                Workload::new(Shape::Resnet50Batch, Some(1000.0), closed),
                200,
            ),
        ),
        (
            "field, 250 us batch wg",
            setup(
                Workload::new(Shape::Resnet18, None, poisson),
                Workload::new(Shape::Resnet50Batch, Some(250.0), closed),
                200,
            ),
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
    println!(
        "{:<48} {:>12} {:>14} {:>10} {:>16} {:>14}",
        "workloads (level 2, 1 seed)",
        "completions",
        "wg events",
        "wall s",
        "completions/s",
        "wg events/s"
    );
    // Each case as `sim` runs most seeds, then recording the timeline as the plots' seed does.
    for (name, mut s) in cases {
        for timeline in [false, true] {
            s.timeline = timeline;
            let name = if timeline {
                "  + timeline (plots)"
            } else {
                name
            };
            let t = Instant::now();
            let r = sim::run(&s).expect("setup");
            let secs = t.elapsed().as_secs_f64();
            println!(
                "{name:<48} {:>12} {:>14} {:>10.2} {:>15.2}M {:>13.1}M",
                r.completions,
                r.wg_events,
                secs,
                r.completions as f64 / secs / 1e6,
                r.wg_events as f64 / secs / 1e6
            );
        }
    }
}
