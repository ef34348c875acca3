//! Stream-ordered work under level 1, commanded by a test-side agent: the held streams'
//! copies, fills, host functions, event records and launches wait for the release, while the
//! same calls on other streams and synchronisation and queries of the held streams return.

mod common;

use common::agent::*;
use common::*;
use kfdq::QueueId;
use kfdq::proto::{AgentMsg, Level, Target};

/// Calls of `ordered gate` on stream a and on the null stream (both held here).
const HELD_CALLS: &[&str] = &[
    "a-memcpy",
    "a-memset",
    "a-hostfunc",
    "a-record",
    "a-wait",
    "a-launch",
    "null-memset",
    "legacy-memcpy-spt",
];
/// Calls of `ordered gate` that must go through while a and the null stream are held: work
/// on stream b and on the threads' own per-thread streams (`_spt` with NULL is not the null
/// stream), and synchronisation, which is never held.
const FREE_CALLS: &[&str] = &[
    "b-memcpy",
    "b-memset",
    "b-hostfunc",
    "b-callback",
    "b-record",
    "b-wait",
    "spt-memcpy",
    "spt-record",
    "a-sync",
    "a-query",
    "null-sync",
    "device-sync",
];

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn level1_holds_stream_ordered_work_but_not_synchronisation() {
    let emu = mount();
    let sock_dir = tempfile::tempdir().unwrap();
    let (listener, path) = listen(sock_dir.path());
    let mut app = Launch::new(programs().get("ordered"))
        .arg("gate")
        .env("KFDQ_SOCKET", path.display().to_string())
        .start(&emu);
    let mut conn = accept(&listener);
    app.wait_line("READY");
    let q = app.queues();
    let pid = app.pid;
    let reg = conn.wait_registry("a, b and the null stream mapped", |r| mapped(r) >= 3);
    let a = stream_by_handle(&reg, q["a"].handle);
    assert_eq!(a.queue_id, Some(QueueId(q["a"].queue_id)));
    let a_sid = a.stream_id;
    assert_kind_maps(&reg, StreamKind::Null, q["null"].queue_id);
    conn.ok(|seq| AgentMsg::Preempt {
        seq,
        level: Level::Hold,
        target: Target::Streams(vec![a_sid, 0]),
        grace_period: 0,
    });
    conn.wait_registry("a and the null stream held", |r| {
        r.streams.iter().filter(|s| s.held).count() == 2
    });
    let done = |name: &str| emu.queue(pid, q[name].queue_id).packets_done;
    let (a_before, null_before) = (done("a"), done("null"));
    app.release("hold");
    for c in FREE_CALLS {
        app.wait_line(&format!("done {c} "));
    }
    // The free calls all returned; the window in which the held ones could (wrongly) return
    // too lasts until a witness process's queue has run 20 ms of packets.
    test_support::hold::cp_witness(&emu, 20, 1000);
    app.collect_pending();
    for c in HELD_CALLS {
        assert!(
            !app.has_line(&format!("done {c} ")),
            "{c} returned while its stream was held at level 1: {:#?}",
            app.seen
        );
    }
    // They wait in the shim: the registry counts them, and `kfdq ps` says so.
    app.wait_registry(pid, "the held calls counted", |r| {
        r.streams.iter().map(|s| s.held_calls).sum::<u32>() > 0
    });
    let ps = app.kfdq_ps(&emu);
    assert!(
        ps.contains(" call(s) waiting"),
        "kfdq ps shows the waiting calls: {ps}"
    );
    assert_eq!(
        done("a"),
        a_before,
        "nothing of a's held work reached its queue"
    );
    assert_eq!(
        done("null"),
        null_before,
        "nothing of the null stream's held work reached its queue"
    );
    for c in ["b-hostfunc", "b-callback"] {
        let l = app.wait_line(&format!("done {c} "));
        assert!(l.ends_with("ran=1"), "the host function ran: {l}");
    }
    conn.ok(|seq| AgentMsg::Release {
        seq,
        level: Level::Hold,
        target: Target::Streams(vec![a_sid, 0]),
    });
    for c in HELD_CALLS {
        app.wait_line(&format!("done {c} "));
    }
    let l = app.wait_line("done a-hostfunc ");
    assert!(
        l.ends_with("ran=1"),
        "the host function ran after release: {l}"
    );
    app.wait_line("all done");
    app.wait_line("CHECKPOINT end");
    // a: the copy, the fill and the launch; null: the fill and the copy.
    assert!(
        done("a") >= a_before + 3,
        "a's work ran after release ({a_before} -> {})",
        done("a")
    );
    assert!(
        done("null") >= null_before + 2,
        "the null stream's work ran after release ({null_before} -> {})",
        done("null")
    );
    drop(conn);
    app.go();
    app.finish();
}
