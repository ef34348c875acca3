//! What the control thread costs a process: without an agent it does not wake periodically;
//! with one it wakes once per activity period (`KFDQ_ACTIVITY_US`) to sample its queues and read
//! the socket. Measured on the thread itself (`/proc/<pid>/task/<tid>/schedstat`: time on CPU;
//! `status`: context switches = wakeups) over a fixed window.
//! `cargo test -p kfdq-shim --test sampling -- --nocapture` prints the table recorded in
//! docs/performance.md ("Activity sampling"); the test asserts counts and orderings with wide
//! margins only.

mod common;

use std::time::{Duration, Instant};

use common::kfdqd::{Agent, two_classes};
use common::*;

/// The measurement window per row.
const WINDOW: Duration = Duration::from_secs(2);

struct Row {
    period: String,
    wakeups_per_s: f64,
    cpu_us_per_s: f64,
}

/// A batch job of 8 streams (4 busy queues, the batch class's default), connected to `agent` with `period` (µs) if given; returns its
/// control thread's wakeups and CPU over [`WINDOW`].
fn measure(emu: &Emu, label: String, agent: Option<&Agent>, period: Option<u64>) -> Row {
    let mut l = Launch::new(programs().get("flood"))
        .args(["2000", "64", "2", "8"])
        .env("KFDQ_CLASS", "batch");
    if let Some(a) = agent {
        l = l.env("KFDQ_SOCKET", a.sock.display().to_string());
    }
    if let Some(p) = period {
        l = l.env("KFDQ_ACTIVITY_US", p.to_string());
    }
    let mut app = l.start(emu);
    app.wait_line("flooding");
    if let Some(a) = agent {
        let queues: std::collections::BTreeSet<u32> =
            app.queues().values().map(|q| q.queue_id).collect();
        a.wait_connected(app.pid, queues.len());
    }
    let row = match thread_named(app.pid, "kfdq-shim-ctl") {
        Some(task) => {
            let (ns0, sw0) = thread_usage(&task);
            let t0 = Instant::now();
            std::thread::sleep(WINDOW);
            let (ns1, sw1) = thread_usage(&task);
            let s = t0.elapsed().as_secs_f64();
            Row {
                period: label,
                wakeups_per_s: (sw1 - sw0) as f64 / s,
                cpu_us_per_s: (ns1 - ns0) as f64 / 1e3 / s,
            }
        }
        None => Row {
            period: label,
            wakeups_per_s: 0.0,
            cpu_us_per_s: 0.0,
        },
    };
    app.stop();
    let (_, stderr) = app.finish();
    assert!(
        !stderr.contains("KFDQ_ACTIVITY_US"),
        "the period was accepted: {stderr}"
    );
    row
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn the_control_thread_wakes_once_per_activity_period_and_never_without_an_agent() {
    let emu = mount();
    let mut rows = Vec::new();
    rows.push(measure(&emu, "no agent".into(), None, None));
    let agent = Agent::start(&emu, &two_classes("deactivate"));
    for us in [500u64, 1000, 2000, 5000, 10000] {
        let label = format!(
            "{} ms{}",
            us as f64 / 1000.0,
            if us == 2000 { " (default)" } else { "" }
        );
        rows.push(measure(&emu, label, Some(&agent), Some(us)));
    }
    println!(
        "control thread of a batch job with 8 streams on 4 busy queues, over {} s per row",
        WINDOW.as_secs()
    );
    println!(
        "{:<18} {:>12} {:>16} {:>14}",
        "activity period", "wakeups/s", "CPU us per s", "% of a core"
    );
    for r in &rows {
        println!(
            "{:<18} {:>12.0} {:>16.0} {:>14.2}",
            r.period,
            r.wakeups_per_s,
            r.cpu_us_per_s,
            r.cpu_us_per_s / 1e4
        );
    }
    let row = |p: &str| rows.iter().find(|r| r.period.starts_with(p)).unwrap();
    // Without an agent: the unclaimed-work watch (every 500 ms for 10 s after a queue's
    // creation, a wait then a 50 ms publish pause: two switches) and registry changes only.
    assert!(
        row("no agent").wakeups_per_s < 10.0,
        "without an agent the thread sleeps: {} wakeups/s",
        row("no agent").wakeups_per_s
    );
    // At most one wakeup per period plus the agent's messages; at least a third of the
    // periods (a loaded 2-core machine delays wakeups, never adds them).
    for (p, per_s) in [("0.5 ms", 2000.0), ("2 ms", 500.0), ("10 ms", 100.0)] {
        let w = row(p).wakeups_per_s;
        assert!(
            w > per_s / 3.0 && w < per_s * 1.5 + 50.0,
            "{p}: {w} wakeups/s"
        );
    }
    assert!(
        row("0.5 ms").cpu_us_per_s > 2.0 * row("10 ms").cpu_us_per_s,
        "a shorter period costs more CPU"
    );
}
