//! The in-flight window (a class setting the shim enforces): it bounds the dispatches a batch job
//! keeps queued, and the stream-ordered patterns keep working while a stream sits at its window.
//! What a level-1 hold is worth with windows 1, 4 and unbounded is measured by
//! `cargo bench -p kfdq-shim --bench hold_window` (docs/performance.md).

mod common;

use common::kfdqd::{Agent, batch_far_ahead, two_classes_with_window};
use common::*;
use kfdq::QueueId;

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
            .any(|q| q.queue_id == QueueId(qa) && q.window_waits >= min_waits)
    });
    let waits = reg
        .queues
        .iter()
        .find(|q| q.queue_id == QueueId(qa))
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

/// A class window bounds how far a batch job runs ahead of the GPU: without one, the job keeps
/// its 64 dispatches queued; with window 1 or 4, once what it queued before the class reached it
/// has drained, its queue never holds more than the window (plus one per launch the shim let go
/// after a stalled read index, which it counts), and its launches waited. What that is worth to a latency client is a measurement, not a test:
/// `cargo bench -p kfdq-shim --bench hold_window` (docs/performance.md).
#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn a_class_window_bounds_the_batch_jobs_queued_dispatches() {
    let emu = mount();
    for window in [None, Some(1u32), Some(4)] {
        let agent = Agent::start(&emu, &two_classes_with_window("hold", window));
        let mut b = batch_far_ahead(&emu, Some(&agent));
        agent.wait_connected(b.pid, 1);
        let pid = b.pid;
        b.wait_registry(pid, "the class window applied", |r| r.window == window);
        let q = b.queues()["flood"].queue_id;
        let outstanding = || {
            let s = emu.queue(pid, q);
            s.write_index - s.read_index
        };
        match window {
            None => wait_for("the batch job 32+ dispatches ahead", || outstanding() >= 32),
            Some(w) => {
                // What the job queued before its class reached it drains first; then it is
                // watched over 20 completed dispatches (about 160 ms of the model). kfd-emu's
                // write index is what its command processor last polled from the ring (it
                // cannot see doorbells, tools/kfd-emu/src/cp.rs), so on a loaded host it can lag
                // the ring and show a backlog not yet fetched as drained, then the whole backlog
                // at once (seen: "up to 62 dispatches queued" while the shim's own reads of the
                // ring never passed the window once drained). So: first a launch waited at the
                // window (every earlier launch is in the ring), then the emulator's write index
                // moved after that (a poll that saw the whole backlog), then the drain.
                b.wait_registry(pid, "a launch waiting at the window", |r| {
                    r.queues
                        .iter()
                        .any(|x| x.queue_id == QueueId(q) && x.window_waits > 0)
                });
                let seen = emu.queue(pid, q).write_index;
                wait_for("the backlog fetched and drained to the window", || {
                    emu.queue(pid, q).write_index > seen && outstanding() <= u64::from(w)
                });
                let done0 = emu.queue(pid, q).packets_done;
                let mut most = 0;
                wait_for("20 more batch dispatches", || {
                    most = most.max(outstanding());
                    emu.queue(pid, q).packets_done >= done0 + 20
                });
                let reg = b.wait_registry(pid, "window waits published", |r| {
                    r.queues
                        .iter()
                        .any(|x| x.queue_id == QueueId(q) && x.window_waits > 0)
                });
                let stalls = reg
                    .queues
                    .iter()
                    .find(|x| x.queue_id == QueueId(q))
                    .map_or(0, |x| x.window_stalls);
                assert!(
                    most <= u64::from(w) + stalls,
                    "window {w}: up to {most} dispatches queued ({stalls} stalls)"
                );
            }
        }
        b.stop();
        b.finish();
    }
}
