//! A stream's first operation under the shim, against fakehip + kfd-emu: a copy or fill
//! (no launch) creates the stream's queue, which the registry attributes to that stream with
//! its class priority; `hipGetProcAddress` hands out the wrappers of these entry points.

mod common;

use common::streams::{assert_emulator_agrees, program, stop_at};
use common::*;
use kfdq::QueueId;

/// Runs `ordered first <op>` (class latency): synchronisation and queries before any work
/// create and register nothing; then `op`, the stream's very first operation, gets the queue
/// the runtime creates during it attributed to its stream. Returns nothing: asserts.
fn first_operation_attributes(emu: &Emu, op: &str, name: &str, kind: StreamKind) {
    let mut app = Launch::new(programs().get("ordered"))
        .arg("first")
        .arg(op)
        .env("KFDQ_CLASS", "latency")
        .start(emu);
    app.wait_line("CHECKPOINT synced");
    let pid = app.pid;
    assert!(
        emu.queues_of(pid).is_empty(),
        "{op}: synchronising and querying before any work creates no queue"
    );
    app.release("synced");
    app.wait_line(&format!("first {op} ok"));
    app.wait_line("CHECKPOINT first");
    let want = app.queues()[name];
    let reg = app.wait_registry(pid, &format!("{op}: the {name} stream mapped"), |r| {
        r.streams
            .iter()
            .any(|s| s.kind == kind && s.queue_id.is_some())
    });
    assert_eq!(
        reg.streams.len(),
        1,
        "{op}: only the stream that did work is registered (the earlier synchronisation \
         calls on the null and per-thread streams register nothing): {reg:#?}"
    );
    let s = &reg.streams[0];
    assert_eq!(s.kind, kind, "{op}");
    if kind == StreamKind::Null {
        assert_eq!(s.stream_id, 0, "{op}: the null stream is stream 0");
    }
    assert_eq!(
        s.queue_id,
        Some(QueueId(want.queue_id)),
        "{op}: the queue created during the stream's first operation (a copy/fill, no launch \
         in this program) is attributed to it"
    );
    assert_eq!(reg.queues.len(), 1, "{op}: {reg:#?}");
    assert_eq!(
        effective(&reg, want.queue_id),
        13,
        "{op}: latency class, normal-priority stream (ROCr 7) -> 13"
    );
    assert_emulator_agrees(emu, pid, &reg);
    assert!(
        emu.queue(pid, want.queue_id).packets_done >= 1,
        "{op}: the operation's packet ran on that queue"
    );
    app.go();
    app.finish();
}

/// One test per row: `name: op, stream name, stream kind`; every row runs
/// [`first_operation_attributes`].
macro_rules! first_operation_cases {
    ($($name:ident: $op:literal, $stream:literal, $kind:expr;)*) => {$(
        #[test]
        #[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
        fn $name() {
            first_operation_attributes(&mount(), $op, $stream, $kind);
        }
    )*};
}

first_operation_cases! {
    first_operation_memcpy_attributes_the_null_stream: "memcpy", "null", StreamKind::Null;
    first_operation_memset_attributes_the_null_stream: "memset", "null", StreamKind::Null;
    first_operation_legacy_memcpy_attributes_the_null_stream: "memcpy-legacy", "null", StreamKind::Null;
    first_operation_sync_memcpy_attributes_the_null_stream: "memcpy-sync", "null", StreamKind::Null;
    first_operation_fill_attributes_the_per_thread_stream: "memset-spt", "spt", StreamKind::PerThread;
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn hip_get_proc_address_returns_the_stream_work_wrappers() {
    let emu = mount();
    let s = stop_at(
        &emu,
        program("ordered", &["procaddr"]),
        "CHECKPOINT procaddr",
        "null and per-thread streams mapped",
        |r| mapped(r) == 2,
    );
    let lines: Vec<String> = s
        .app
        .seen
        .iter()
        .filter(|l| l.starts_with("procaddr "))
        .cloned()
        .collect();
    assert_eq!(lines.len(), 13 + 5 + 4, "{lines:#?}");
    for l in &lines {
        assert!(
            l.ends_with(" libkfdq_shim.so"),
            "hipGetProcAddress must hand out the shim's wrapper: {l}"
        );
    }
    // The pointers behave as the wrappers of the right entry point: hipMemsetAsync on NULL is
    // the null stream, hipMemcpyAsync obtained with the per-thread flag (the runtime hands out
    // hipMemcpyAsync_spt, the shim its _spt wrapper) on NULL is the per-thread stream; each
    // was that stream's first operation.
    let (q, reg) = (&s.q, &s.reg);
    assert_kind_maps(reg, StreamKind::Null, q["null"].queue_id);
    assert_kind_maps(reg, StreamKind::PerThread, q["spt"].queue_id);
    assert_ne!(q["null"].queue_id, q["spt"].queue_id);
    s.finish(&emu);
}
