//! What lease renewals cost (docs/performance.md, "Lease renewals"): a batch job of 8 streams
//! (4 busy queues) kept deactivated by a latency flood, under agents whose `[agent] lease_ms`
//! differs; the agent renews every quarter lease. Measured over a fixed window per row, in the
//! same window: the batch job's control thread (`kfdq-shim-ctl`) and kfdqd's event loop (its main
//! thread), each as time on CPU and wakeups (`/proc/<pid>/task/<tid>/schedstat`, `status`). The
//! 60 s lease is the baseline (no renewal falls in a window); the cost of renewals is a row's
//! excess over it, per renewal. Nothing is asserted: a loaded machine moves every row.
//!
//! `cargo build --release -p kfdq --bins && cargo bench -p kfdq-shim --bench lease_renewal`
//! (as root: it mounts kfd-emu and runs kfdqd). `cargo test --benches` runs nothing here.

#[path = "../tests/common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::kfdqd::{Agent, two_classes};
use common::*;

/// The measurement window per row.
const WINDOW: Duration = Duration::from_secs(3);

/// (CPU ns, context switches) of two threads, sampled together.
fn usage(a: &Path, b: &Path) -> [(u64, u64); 2] {
    [thread_usage(a), thread_usage(b)]
}

struct Row {
    label: String,
    renewals_per_s: f64,
    /// (wakeups/s, CPU µs/s) of the shim's control thread, then of the agent's loop.
    shim: (f64, f64),
    agent: (f64, f64),
}

fn measure(emu: &Emu, lease_ms: u32) -> Row {
    let config = two_classes("deactivate").replacen(
        "[agent]\n",
        &format!("[agent]\nlease_ms = {lease_ms}\n"),
        1,
    );
    let agent = Agent::start(emu, &config);
    let mut batch = Launch::new(programs().get("flood"))
        .args(["2000", "64", "2", "8"])
        .env("KFDQ_CLASS", "batch")
        .env("KFDQ_SOCKET", agent.sock.display().to_string())
        .start(emu);
    batch.wait_line("flooding");
    let queues: std::collections::BTreeSet<u32> =
        batch.queues().values().map(|q| q.queue_id).collect();
    agent.wait_connected(batch.pid, queues.len());
    let mut latency = Launch::new(programs().get("flood"))
        .args(["20000", "2560", "2"])
        .env("KFDQ_CLASS", "latency")
        .env("KFDQ_SOCKET", agent.sock.display().to_string())
        .start(emu);
    latency.wait_line("flooding");
    wait_for("the batch job deactivated", || {
        emu.queues_of(batch.pid).iter().all(|q| !q.active)
    });
    let shim = thread_named(batch.pid, "kfdq-shim-ctl").expect("the shim's control thread");
    let agent_pid = agent.child.id();
    let agent_loop = PathBuf::from(format!("/proc/{agent_pid}/task/{agent_pid}"));
    let before = usage(&shim, &agent_loop);
    let t0 = Instant::now();
    std::thread::sleep(WINDOW);
    let after = usage(&shim, &agent_loop);
    let s = t0.elapsed().as_secs_f64();
    assert!(
        emu.queues_of(batch.pid).iter().all(|q| !q.active),
        "the batch job was released during the window"
    );
    let rate = |i: usize| {
        (
            (after[i].1 - before[i].1) as f64 / s,
            (after[i].0 - before[i].0) as f64 / 1e3 / s,
        )
    };
    let row = Row {
        label: format!(
            "{lease_ms} ms{}",
            if lease_ms == 1000 { " (default)" } else { "" }
        ),
        renewals_per_s: 4000.0 / f64::from(lease_ms),
        shim: rate(0),
        agent: rate(1),
    };
    latency.stop();
    drop(latency);
    batch.stop();
    drop(batch);
    row
}

fn main() {
    if !bench_requested("lease_renewal") {
        return;
    }
    let emu = mount();
    let rows: Vec<Row> = [60_000u32, 1000, 250, 100]
        .into_iter()
        .map(|l| measure(&emu, l))
        .collect();
    println!(
        "a deactivated batch job (8 streams, 4 queues) and kfdqd's event loop, {} s per row",
        WINDOW.as_secs()
    );
    println!(
        "{:<16} {:>10} {:>14} {:>14} {:>14} {:>14} {:>14}",
        "lease",
        "renew/s",
        "shim wake/s",
        "shim CPU us/s",
        "agent wake/s",
        "agent CPU us/s",
        "us per renewal"
    );
    let base = &rows[0];
    for r in &rows {
        // The excess over the baseline, shared by the shim's thread and the agent's loop.
        let extra = (r.shim.1 - base.shim.1) + (r.agent.1 - base.agent.1);
        let per = if r.renewals_per_s > 1.0 {
            format!("{:.1}", extra / (r.renewals_per_s - base.renewals_per_s))
        } else {
            "-".into()
        };
        println!(
            "{:<16} {:>10.1} {:>14.0} {:>14.0} {:>14.0} {:>14.0} {:>14}",
            r.label, r.renewals_per_s, r.shim.0, r.shim.1, r.agent.0, r.agent.1, per
        );
    }
}
