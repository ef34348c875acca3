//! What the shim's control thread costs a process: without an agent it does not wake
//! periodically; with one it wakes once per activity period (`KFDQ_ACTIVITY_US`) to sample its
//! queues and read the socket. Measured on the thread itself (`/proc/<pid>/task/<tid>/schedstat`:
//! time on CPU; `status`: context switches = wakeups) over a fixed window per row, and printed as
//! a table (docs/performance.md, "Activity sampling"). Nothing here asserts a number: a loaded
//! machine delays wakeups, so rates are for reading side by side within one run.
//!
//! `cargo build --release -p kfdq --bins && cargo bench -p kfdq-shim --bench control_thread`
//! (as root: it mounts kfd-emu and runs kfdqd). `cargo test --benches` runs nothing here.

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::Duration;

use common::kfdqd::{Agent, two_classes};
use common::*;

/// The measurement window per row.
const WINDOW: Duration = Duration::from_secs(2);

/// A batch job of 8 streams (4 busy queues, the batch class's default), connected to `agent`
/// with `period` (µs) if given; returns its control thread's wakeups and CPU over [`WINDOW`].
fn measure(emu: &Emu, agent: Option<&Agent>, period: Option<u64>) -> ThreadRates {
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
    let task = thread_named(app.pid, "kfdq-shim-ctl").expect("the shim's control thread");
    let rates = ThreadRates::over(&task, WINDOW);
    app.stop();
    let (_, stderr) = app.finish();
    assert!(
        !stderr.contains("KFDQ_ACTIVITY_US"),
        "the period was refused: {stderr}"
    );
    rates
}

fn main() {
    if !bench_requested("control_thread") {
        return;
    }
    let emu = mount();
    let mut rows = vec![("no agent".to_string(), measure(&emu, None, None))];
    let agent = Agent::start(&emu, &two_classes("deactivate"));
    for us in [500u64, 1000, 2000, 5000, 10000] {
        let label = format!(
            "{} ms{}",
            us as f64 / 1000.0,
            if us == 2000 { " (default)" } else { "" }
        );
        rows.push((label, measure(&emu, Some(&agent), Some(us))));
    }
    println!(
        "control thread of a batch job with 8 streams on 4 busy queues, over {} s per row",
        WINDOW.as_secs()
    );
    println!(
        "{:<18} {:>12} {:>16} {:>14} {:>16}",
        "activity period", "wakeups/s", "CPU us per s", "% of a core", "us per wakeup"
    );
    for (label, r) in &rows {
        println!(
            "{} {:>16.1}",
            r.row(label, 18),
            r.cpu_us_per_s / r.wakeups_per_s.max(1.0)
        );
    }
}
