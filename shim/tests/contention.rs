//! Contention through kfd-emu's partition model, with real processes: a latency-critical
//! client's request time alone, next to a program that floods long many-work-group dispatches,
//! and with the flooding program's queues deactivated (level 2) and suspended (level 3) by the
//! test-side agent through the shim. Orderings are asserted with wide margins; the numbers are
//! printed (`cargo test -p kfdq-shim --test contention -- --nocapture`) and recorded in
//! docs/gfx-model.md.

mod common;

use common::agent::*;
use common::*;
use kfdq::proto::{AgentMsg, Level, Target};

/// Requests per phase, 10 per second; each request is 4 dispatches of 80 work-groups of 2 ms
/// (8 ms alone on an MI308X partition: 80 x 4 waves fit its 2560 wave slots at once).
const REQUESTS: &str = "12";
const GAP_MS: &str = "100";
const HP_KERNELS: &str = "4";
const HP_WG_US: &str = "2000";
const HP_WGS: &str = "80";
/// The flood: 2560 work-groups of 4 waves and 20 ms each (four rounds of the whole partition,
/// 80 ms a dispatch), 4 in flight.
const LP_WG_US: &str = "20000";
const LP_WGS: &str = "2560";
const LP_IN_FLIGHT: &str = "4";

fn latency_phase(emu: &Emu) -> Latency {
    let app = Launch::new(programs().get("latency"))
        .arg(REQUESTS)
        .arg(GAP_MS)
        .arg(HP_KERNELS)
        .arg(HP_WG_US)
        .arg(HP_WGS)
        .env("KFDQ_CLASS", "latency")
        .start(emu);
    app.go();
    let (lines, _) = app.finish();
    Latency::parse(&lines, REQUESTS.parse().expect("REQUESTS is a number"))
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn preempting_a_flooding_program_brings_the_latency_client_back_near_alone() {
    let emu = mount();
    let alone = latency_phase(&emu);

    let sock_dir = tempfile::tempdir().unwrap();
    let (listener, sock) = listen(sock_dir.path());
    let mut flood = Launch::new(programs().get("flood"))
        .arg(LP_WG_US)
        .arg(LP_WGS)
        .arg(LP_IN_FLIGHT)
        .env("KFDQ_CLASS", "batch")
        .env("KFDQ_SOCKET", sock.display().to_string())
        .start(&emu);
    let mut conn = accept(&listener);
    flood.wait_line("flooding");
    let lp = flood.queues()["flood"].queue_id;
    conn.wait_registry("the flood stream on its queue", |r| {
        r.queues.iter().any(|q| q.queue_id == lp)
    });
    let pid = flood.pid;
    wait_for("the flood running", || emu.queue(pid, lp).busy_ns > 0);
    let colocated = latency_phase(&emu);

    let mut controlled = Vec::new();
    for level in [Level::Deactivate, Level::Suspend] {
        conn.ok(|seq| AgentMsg::Preempt {
            seq,
            level,
            target: Target::All,
            grace_period: 0,
        });
        assert!(
            !emu.queue(pid, lp).active,
            "{level:?}: the flood's queue is off"
        );
        let saved = emu.queue(pid, lp).workgroups_saved;
        controlled.push((level, latency_phase(&emu), saved));
        conn.ok(|seq| AgentMsg::Release {
            seq,
            level,
            target: Target::All,
        });
        wait_for("the flood's queue back", || emu.queue(pid, lp).active);
    }
    flood.stop();
    let (lines, _) = flood.finish();
    let stats = emu.stats();

    println!("latency client (4 x 80 work-groups of 2 ms), {REQUESTS} requests at 10/s, us:");
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

    // Co-located is clearly slower than alone...
    assert!(
        colocated.p50 > 1.3 * alone.p50,
        "co-located {colocated:?} vs alone {alone:?}"
    );
    for (level, l, saved) in &controlled {
        // ...and preempting the flood brings the client back near alone: its in-flight
        // work-groups were saved, not waited for.
        assert!(
            *saved > 0,
            "{level:?}: the flood's running work-groups were saved"
        );
        assert!(
            l.p50 < 0.8 * colocated.p50,
            "{level:?}: {l:?} vs co-located {colocated:?}"
        );
        assert!(
            l.p50 < 1.5 * alone.p50,
            "{level:?}: {l:?} vs alone {alone:?}"
        );
    }
}
