//! A runtime that frees a queue's memory without a DESTROY_QUEUE the shim sees: the registry
//! reads that queue's indices (here to find which queue a new stream runs on) without faulting,
//! drops the queue with a report, and the program goes on unchanged.

mod common;

use common::*;
use kfdq::QueueId;

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn a_queue_whose_memory_is_gone_leaves_the_registry_and_the_program_runs_on() {
    let emu = mount();
    let mut app = Launch::new(programs().get("unmapped")).start(&emu);
    let gone: u32 = app
        .wait_line("unmapped ")
        .rsplit(' ')
        .next()
        .and_then(|q| q.parse().ok())
        .expect("unmapped <queue>");
    app.wait_line("launched");
    app.wait_line("CHECKPOINT end");
    let null = app.queues()["null"].queue_id;
    assert_ne!(null, gone, "the null stream runs on a queue of its own");
    let pid = app.pid;
    let warning = format!("queue {gone}: its index memory is no longer readable");
    // The shim reports the unmapped queue while the null stream's launch reads the indices,
    // before that launch's CREATE_QUEUE: a registry written in between (the shim publishes
    // each change) has the warning and no queue at all. Wait for the one with both.
    let reg = app.wait_registry(
        pid,
        "the unmapped queue reported and the null stream's queue known",
        |r| {
            r.warnings.iter().any(|w| w.starts_with(&warning))
                && r.queues.iter().any(|q| q.queue_id == QueueId(null))
        },
    );
    assert!(
        reg.queues.iter().all(|q| q.queue_id != QueueId(gone)),
        "the queue left the registry: {:?}",
        reg.queues
    );
    app.go();
    let (lines, stderr) = app.finish();
    assert!(lines.iter().any(|l| l == "launched"), "{lines:?}");
    assert_eq!(
        stderr.matches(&warning).count(),
        1,
        "once on stderr: {stderr}"
    );
}
