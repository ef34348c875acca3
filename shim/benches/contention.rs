//! Contention through kfd-emu's partition model, with real processes: a latency-critical
//! client's request time alone, next to a program that floods long many-work-group dispatches,
//! and with the flooding program's queues deactivated (level 2) and suspended (level 3) by a
//! test-side agent through the shim. Prints the table recorded in docs/gfx-model.md; nothing
//! here asserts a number (latency in wall time, which a loaded machine moves). What is structural
//! (the flood's running work-groups are saved and it completes nothing while preempted) is
//! tested in shim/tests/contention.rs.
//!
//! `cargo bench -p kfdq-shim --bench contention` (as root: it mounts kfd-emu).
//! `cargo test --benches` runs nothing here.

#[path = "../tests/common/mod.rs"]
mod common;

use common::agent::*;
use common::*;
use kfdq::proto::Level;

fn latency_phase(emu: &Emu) -> Latency {
    latency_client(emu, CONTENTION_CLIENT, None)
}

fn main() {
    if !bench_requested("contention") {
        return;
    }
    let emu = mount();
    let alone = latency_phase(&emu);

    let mut flood = Flood::start(&emu, CONTENTION_FLOOD);
    let (pid, lp) = (flood.app.pid, flood.queue);
    let colocated = latency_phase(&emu);

    let mut controlled = Vec::new();
    for level in [Level::Deactivate, Level::Suspend] {
        flood.preempt(level);
        assert!(
            !emu.queue(pid, lp).active,
            "{level:?}: the flood's queue is off"
        );
        let saved = emu.queue(pid, lp).workgroups_saved;
        controlled.push((level, latency_phase(&emu), saved));
        flood.release(level);
        wait_for("the flood's queue back", || emu.queue(pid, lp).active);
    }
    flood.app.stop();
    let (lines, _) = flood.app.finish();
    let stats = emu.stats();

    println!(
        "latency client (4 x 80 work-groups of 2 ms), {} requests at 10/s, us:",
        CONTENTION_CLIENT[0]
    );
    println!(
        "{:<36} {:>8} {:>8} {:>8} {:>9}",
        "phase", "p50", "p99", "max", "p99/alone"
    );
    let row = |name: &str, l: Latency| {
        println!(
            "{:<36} {:>8.0} {:>8.0} {:>8.0} {:>9.2}",
            name,
            l.p50,
            l.p99,
            l.max,
            l.p99 / alone.p99
        );
    };
    row("alone", alone);
    row("next to the flood", colocated);
    for (level, l, saved) in &controlled {
        row(&format!("flood at {level:?} ({saved} wg saved)"), *l);
    }
    println!(
        "flood: {}",
        lines
            .iter()
            .find(|l| l.starts_with("flood dispatches"))
            .unwrap()
    );
    println!(
        "device-wide preempts: {}",
        stats.partitions.iter().map(|p| p.preempts).sum::<u64>()
    );
}
