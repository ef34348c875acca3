//! What a level-1 hold is worth with in-flight windows 1, 4 and unbounded, next to no control
//! and level 2, on kfd-emu's partition model (`equal` arbitration, so that priority buys nothing
//! and the hold shows alone): a latency client's mean and P99 next to a batch job 64 dispatches
//! ahead, the batch job's throughput, and its window waits. Prints the table recorded in
//! docs/performance.md ("Level 1 and the in-flight window"); nothing here asserts a number (what
//! the table compares is latency in wall time, which a loaded machine moves). What is structural
//! (the window bounds the batch job's queued dispatches) is tested in shim/tests/window.rs.
//!
//! `cargo build --release -p kfdq --bins && cargo bench -p kfdq-shim --bench hold_window` (as
//! root: it mounts kfd-emu and runs kfdqd). `cargo test --benches` runs nothing here.

#[path = "../tests/common/mod.rs"]
mod common;

/// Dispatches per latency request.
const HP_KERNELS: &str = "4";

use std::time::Instant;

use common::kfdqd::{Agent, batch_far_ahead, two_classes_with_window};
use common::*;
use test_support::emu::{Arbitration, EmuConfig, Preset};

/// The latency client: 30 requests, 100 ms apart, of 4 dispatches x 80 work-groups x 2 ms
/// (8 ms alone). Returns (mean, P99) in µs.
fn latency(emu: &Emu, agent: Option<&Agent>) -> (f64, f64) {
    let l = latency_client(
        emu,
        ["30", "100", HP_KERNELS, "2000", "80"],
        agent.map(|a| a.sock.as_path()),
    );
    (l.mean, l.p99)
}

/// The batch job's dispatches per second: the time its queue takes to complete 100 more.
fn throughput(emu: &Emu, app: &mut App) -> f64 {
    let q = app.queues()["flood"].queue_id;
    let pid = app.pid;
    let d0 = emu.queue(pid, q).packets_done;
    let t0 = Instant::now();
    wait_for("100 batch dispatches", || {
        emu.queue(pid, q).packets_done >= d0 + 100
    });
    let d1 = emu.queue(pid, q).packets_done;
    (d1 - d0) as f64 / t0.elapsed().as_secs_f64()
}

struct Row {
    name: String,
    mean: f64,
    p99: f64,
    lp: f64,
    waits: u64,
}

fn main() {
    if !bench_requested("hold_window") {
        return;
    }
    // `equal` arbitration: priority buys nothing, so what the hold is worth shows alone.
    let emu = mount_with(EmuConfig {
        preset: Preset::Mi308x,
        arbitration: Some(Arbitration::Equal),
        ..EmuConfig::default()
    });
    let (alone_mean, alone) = latency(&emu, None);
    let mut rows = Vec::new();
    let lp_alone = {
        let mut b = batch_far_ahead(&emu, None);
        let lp = throughput(&emu, &mut b);
        let (mean, p99) = latency(&emu, None);
        b.stop();
        b.finish();
        rows.push(Row {
            name: "no control".into(),
            mean,
            p99,
            lp: 1.0,
            waits: 0,
        });
        lp
    };
    for (name, level, window) in [
        ("level 1, window unbounded", "hold", None),
        ("level 1, window 4", "hold", Some(4)),
        ("level 1, window 1", "hold", Some(1)),
        ("level 2, window unbounded", "deactivate", None),
    ] {
        let agent = Agent::start(&emu, &two_classes_with_window(level, window));
        let mut b = batch_far_ahead(&emu, Some(&agent));
        agent.wait_connected(b.pid, 1);
        let pid = b.pid;
        b.wait_registry(pid, "the class window applied", |r| r.window == window);
        let lp = throughput(&emu, &mut b);
        let (mean, p99) = latency(&emu, Some(&agent));
        let waits = b
            .registry_of(pid)
            .map_or(0, |r| r.queues.iter().map(|q| q.window_waits).sum());
        b.stop();
        b.finish();
        rows.push(Row {
            name: name.into(),
            mean,
            p99,
            lp: lp / lp_alone,
            waits,
        });
    }
    println!(
        "latency client (4 x 80 wg x 2 ms, 30 requests) next to a batch job 64 dispatches ahead (640 wg x 8 ms each), equal arbitration; alone: mean {alone_mean:.0} us, P99 {alone:.0} us"
    );
    println!(
        "{:<28} {:>9} {:>10} {:>9} {:>10} {:>14} {:>13}",
        "control", "mean us", "mean/alone", "P99 us", "P99/alone", "batch alone=1", "window waits"
    );
    for r in &rows {
        println!(
            "{:<28} {:>9.0} {:>10.2} {:>9.0} {:>10.2} {:>14.2} {:>13}",
            r.name,
            r.mean,
            r.mean / alone_mean,
            r.p99,
            r.p99 / alone,
            r.lp,
            r.waits
        );
    }
}
