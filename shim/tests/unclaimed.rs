//! Work that reaches a KFD queue around the shim's wrappers is detected at run time and
//! reported once: a library opened with `RTLD_DEEPBIND` binds to the HIP runtime before the
//! preloaded shim, creates streams and launches through the runtime's own functions; no stream
//! claims the queues that work runs on.

mod common;

use common::*;

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn work_no_stream_claims_is_reported_once_and_the_program_is_unchanged() {
    let emu = mount();
    let mut app = Launch::new(programs().get("deepbind"))
        .arg(programs().lib().display().to_string())
        .start(&emu);
    app.wait_line("deepbind done");
    app.wait_line("CHECKPOINT end");
    let linked = app.queues()["linked"].queue_id;
    let pid = app.pid;
    let reg = app.wait_registry(pid, "the unclaimed queue reported", |r| {
        r.warnings
            .iter()
            .any(|w| w.starts_with("a KFD queue runs work that no HIP call through the shim"))
    });
    let warning = reg
        .warnings
        .iter()
        .find(|w| w.starts_with("a KFD queue runs work"))
        .unwrap();
    let unclaimed: Vec<u32> = reg
        .queues
        .iter()
        .filter(|q| q.streams.is_empty())
        .map(|q| q.queue_id.0)
        .collect();
    assert!(
        unclaimed
            .iter()
            .any(|q| warning.contains(&format!("queue {q}"))),
        "the warning names a queue without streams ({unclaimed:?}): {warning}"
    );
    assert!(
        !warning.contains(&format!("queue {linked})")),
        "the linked runtime's queue is claimed: {warning}"
    );
    app.go();
    let (lines, stderr) = app.finish();
    assert!(lines.iter().any(|l| l == "deepbind done"), "{lines:?}");
    assert_eq!(
        stderr.matches("a KFD queue runs work").count(),
        1,
        "once on stderr: {stderr}"
    );
}
