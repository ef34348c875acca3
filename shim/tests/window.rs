//! The in-flight window (a class setting the shim enforces): what a level-1 hold is worth with
//! windows 1, 4 and unbounded next to no control and level 2, on kfd-emu's partition model, and
//! the stream-ordered patterns that must keep working while a stream sits at its window.
//! `cargo test -p kfdq-shim --test window -- --nocapture` prints the table recorded in
//! docs/performance.md; the test asserts orderings with wide margins only.

mod common;

/// Dispatches per latency request.
const HP_KERNELS: &str = "4";

use std::time::Instant;

use common::kfdqd::Agent;
use common::*;
use kfd_emu::{EmuConfig, Preset};

/// Runs `window MODE N` with `KFDQ_WINDOW=1`; returns its `done` count and the registry's
/// (window, waits on the first stream's queue) once the registry shows at least `min_waits`
/// (the control thread publishes periodically, so an earlier copy may hold a partial count; the
/// wait fails the test with the last registry if the count never gets there).
fn run_mode(emu: &Emu, mode: &str, n: u32, min_waits: u64) -> (u32, Option<u32>, u64) {
    let mut app = Launch::new(programs().get("window"))
        .arg(mode)
        .arg(n.to_string())
        .env("KFDQ_WINDOW", "1")
        .env("KFDQ_CLASS", "batch")
        .start(emu);
    let done = app.wait_line(&format!("window {mode} done"));
    app.wait_line("CHECKPOINT end");
    let qa = app.queues()["a"].queue_id;
    let pid = app.pid;
    // Published by the control thread shortly after the last wait.
    let reg = app.wait_registry(pid, &format!("{min_waits}+ window waits published"), |r| {
        r.queues
            .iter()
            .any(|q| q.queue_id == qa && q.window_waits >= min_waits)
    });
    let waits = reg
        .queues
        .iter()
        .find(|q| q.queue_id == qa)
        .map_or(0, |q| q.window_waits);
    // `kfdq ps` shows the window and the waits on that queue's row.
    let table = app.kfdq_ps(emu);
    let row = table
        .lines()
        .find(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.first() == Some(&app.pid.to_string().as_str())
                && f.get(3) == Some(&qa.to_string().as_str())
        })
        .unwrap_or_else(|| panic!("no row for queue {qa} of {}: {table}", app.pid));
    let shown: u64 = row
        .split("1 (")
        .nth(1)
        .and_then(|r| r.split(" waited").next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("WINDOW column shows `1 (<n> waited)`: {row}"));
    assert!(shown >= waits.min(1), "WINDOW column: {row}");
    app.go();
    let (_, stderr) = app.finish();
    assert!(
        !stderr.contains("went ahead"),
        "{mode}: no wait should have needed the stall bound: {stderr}"
    );
    let count = done
        .rsplit(' ')
        .next()
        .and_then(|c| c.parse().ok())
        .expect("count");
    (count, reg.window, waits)
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn host_functions_launching_from_inside_keep_working_at_the_window() {
    let emu = mount();
    let (count, window, waits) = run_mode(&emu, "hostfunc", 20, 10);
    assert_eq!(count, 20, "every host function ran");
    assert_eq!(window, Some(1));
    assert!(waits >= 10, "launches did wait at the window: {waits}");
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn a_stream_waiting_on_the_windowed_stream_keeps_working() {
    let emu = mount();
    let (count, _, waits) = run_mode(&emu, "events", 20, 10);
    assert_eq!(count, 20);
    assert!(waits >= 10, "{waits}");
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn synchronisation_from_another_thread_keeps_working_at_the_window() {
    let emu = mount();
    let (count, _, waits) = run_mode(&emu, "sync", 30, 10);
    assert_eq!(count, 30, "the other thread synchronised meanwhile");
    assert!(waits >= 10, "{waits}");
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn fork_at_the_window_leaves_parent_and_child_working() {
    let emu = mount();
    let (count, _, waits) = run_mode(&emu, "fork", 15, 10);
    assert_eq!(count, 30);
    assert!(waits >= 10, "{waits}");
}

/// The latency client: 30 requests, 100 ms apart, of 4 dispatches x 80 work-groups x 2 ms
/// (8 ms alone). Returns (mean, P99) in µs.
fn latency(emu: &Emu, agent: Option<&Agent>) -> (f64, f64) {
    let mut l = Launch::new(programs().get("latency"))
        .args(["30", "100", HP_KERNELS, "2000", "80"])
        .env("KFDQ_CLASS", "latency");
    if let Some(a) = agent {
        l = l.env("KFDQ_SOCKET", a.sock.display().to_string());
    }
    let app = l.start(emu);
    app.go();
    let (lines, _) = app.finish();
    let l = Latency::parse(&lines, 30);
    (l.mean, l.p99)
}

/// The batch job, shaped like a PyTorch training loop that runs far ahead of the GPU: 64
/// dispatches in flight of 640 work-groups x 8 ms (one round of the partition: 8 ms each, about
/// a request's length, as the field's 1.7 ms GEMMs were next to its 2.65 ms requests).
fn batch(emu: &Emu, agent: Option<&Agent>) -> App {
    let mut l = Launch::new(programs().get("flood"))
        .args(["8000", "640", "64"])
        .env("KFDQ_CLASS", "batch");
    if let Some(a) = agent {
        l = l.env("KFDQ_SOCKET", a.sock.display().to_string());
    }
    let mut app = l.start(emu);
    app.wait_line("flooding");
    app
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

fn config(level: &str, window: Option<u32>) -> String {
    let w = window.map_or(String::new(), |w| format!("window = {w}\n"));
    format!(
        "[agent]\nhysteresis_ms = 20\nmin_preempt_interval_ms = 1\n\n[[class]]\nname = \"latency\"\nrank = 2\npriority = 13\nmatch = {{ env = true }}\n\n[[class]]\nname = \"batch\"\nrank = 0\npriority = 3\nlevel = \"{level}\"\n{w}match = {{ env = true }}\n"
    )
}

struct Row {
    name: String,
    mean: f64,
    p99: f64,
    lp: f64,
    waits: u64,
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn a_bounded_window_is_what_makes_level_1_hold_real_work() {
    // `equal` arbitration: priority buys nothing, so what the hold is worth shows alone.
    let emu = mount_with(EmuConfig {
        preset: Preset::Mi308x,
        arbitration: Some(gfx_model::Arbitration::Equal),
        ..EmuConfig::default()
    });
    let (alone_mean, alone) = latency(&emu, None);
    let mut rows = Vec::new();
    let lp_alone = {
        let mut b = batch(&emu, None);
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
        let agent = Agent::start(&emu, &config(level, window));
        let mut b = batch(&emu, Some(&agent));
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
    // Orderings on the mean (30 requests: the P99 is their maximum, too noisy for margins).
    let m = |name: &str| rows.iter().find(|r| r.name == name).unwrap().mean;
    let none = m("no control");
    let unbounded = m("level 1, window unbounded");
    let w1 = m("level 1, window 1");
    let l2 = m("level 2, window unbounded");
    assert!(
        none > 1.5 * alone_mean,
        "the batch job slows the client: {none} vs {alone_mean}"
    );
    assert!(
        unbounded > 0.7 * none,
        "a hold with 64 dispatches in flight buys little: {unbounded} vs {none}"
    );
    assert!(
        w1 < 0.85 * unbounded,
        "window 1 makes the hold real: {w1} vs {unbounded}"
    );
    assert!(
        l2 < 0.85 * w1,
        "level 2 saves even the last dispatch: {l2} vs {w1}"
    );
    let w1_row = rows.iter().find(|r| r.name == "level 1, window 1").unwrap();
    assert!(w1_row.waits > 0, "window 1 made launches wait");
    assert!(w1_row.lp < 1.0, "and costs the batch job some throughput");
}
