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

/// A batch job of 8 streams (4 busy queues, the batch class's default), connected to `agent`
/// with `period` (µs) if given; returns its control thread's wakeups and CPU over [`WINDOW`].
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
    let task = thread_named(app.pid, "kfdq-shim-ctl").expect("the shim's control thread");
    let (ns0, sw0) = thread_usage(&task);
    let t0 = Instant::now();
    std::thread::sleep(WINDOW);
    let (ns1, sw1) = thread_usage(&task);
    let s = t0.elapsed().as_secs_f64();
    app.stop();
    let (_, stderr) = app.finish();
    assert!(
        !stderr.contains("KFDQ_ACTIVITY_US"),
        "the period was refused: {stderr}"
    );
    Row {
        period: label,
        wakeups_per_s: (sw1 - sw0) as f64 / s,
        cpu_us_per_s: (ns1 - ns0) as f64 / 1e3 / s,
    }
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` runs it in test mode: do nothing.
    if !std::env::args().any(|a| a == "--bench") {
        return;
    }
    if !nix::unistd::geteuid().is_root() {
        eprintln!("control_thread needs root (it mounts kfd-emu and runs kfdqd); not run");
        std::process::exit(1);
    }
    let emu = mount();
    let mut rows = vec![measure(&emu, "no agent".into(), None, None)];
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
        "{:<18} {:>12} {:>16} {:>14} {:>16}",
        "activity period", "wakeups/s", "CPU us per s", "% of a core", "us per wakeup"
    );
    for r in &rows {
        println!(
            "{:<18} {:>12.0} {:>16.0} {:>14.2} {:>16.1}",
            r.period,
            r.wakeups_per_s,
            r.cpu_us_per_s,
            r.cpu_us_per_s / 1e4,
            r.cpu_us_per_s / r.wakeups_per_s.max(1.0)
        );
    }
}
