//! Levels 0/1/2/3 commanded by a test-side agent (a `UnixListener` speaking `kfdq::proto`):
//! exactly the targeted streams' queues stop making progress in the emulator while the others
//! keep going, and come back on release; passthrough libraries are never held; a runtime
//! UPDATE_QUEUE cannot undo the shim's state. The agent's end is in `control_ends.rs`,
//! stream-ordered work in `control_ordered.rs`; the worker fixture in `common/controlled.rs`.

mod common;

use std::io::Write;

use common::agent::*;
use common::controlled::setup;
use common::*;
use kfdq::QueueId;
use kfdq::proto::{AgentMsg, Level, ShimMsg, Target};

/// `se.slice` (ns) of each of `pid`'s threads named `name`, from /proc's scheduler debug file.
fn slices_of(pid: u32, name: &str) -> Vec<u64> {
    let mut out = Vec::new();
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let dir = t.unwrap().path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if comm.trim() != name {
            continue;
        }
        let sched = std::fs::read_to_string(dir.join("sched")).unwrap_or_default();
        let slice = sched
            .lines()
            .find(|l| l.starts_with("se.slice"))
            .and_then(|l| l.split(':').nth(1))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| {
                panic!(
                    "no se.slice in {}: the kernel (6.6+) shows it",
                    dir.display()
                )
            });
        out.push(slice);
    }
    out
}

/// The control thread asks for the watcher's 100 µs slice (`shim/src/slice.rs`), so that the
/// agent's commands and its sampled edges do not wait for a running thread's slice on a busy
/// CPU; the application's threads keep theirs. Needs Linux 6.12+ (custom slices).
#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn the_control_thread_takes_a_short_slice_and_the_application_keeps_its_own() {
    let s = setup(false, &[]);
    let pid = s.app.pid;
    let ctl = slices_of(pid, "kfdq-shim-ctl");
    assert_eq!(ctl, [100_000], "the control thread's slice (ns)");
    let main = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap();
    let app = slices_of(pid, main.trim());
    assert!(
        !app.is_empty() && app.iter().all(|s| *s != 100_000),
        "the application's threads keep the default slice: {app:?}"
    );
    s.finish();
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn level1_hold_and_release_one_stream() {
    let mut s = setup(false, &[]);
    let lo = s.sid("lo");
    let d = s.conn.ok(|seq| AgentMsg::Preempt {
        seq,
        level: Level::Hold,
        target: Target::Streams(vec![lo]),
        grace_period: 0,
    });
    assert!(d.contains("level 1"), "{d}");
    let reg = s.conn.wait_registry("lo held", |r| {
        r.streams.iter().any(|x| x.stream_id == lo && x.held)
    });
    assert_eq!(
        reg.streams.iter().filter(|x| x.held).count(),
        1,
        "only the targeted stream is held"
    );
    s.assert_progress(&["lo"], &["hi", "null"]);
    let q = s.emu.queue(s.app.pid, s.qid("lo"));
    assert!(
        q.active && !q.suspended,
        "level 1 leaves the queue itself alone: {q:?}"
    );
    // The drained queue is reported idle (write index == read index).
    let lo_q = s.qid("lo");
    s.conn.wait_activity(lo_q, false);
    s.conn.ok(|seq| AgentMsg::Release {
        seq,
        level: Level::Hold,
        target: Target::Streams(vec![lo]),
    });
    s.conn.wait_activity(lo_q, true);
    s.assert_progress(&[], &["lo", "hi", "null"]);
    s.finish();
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn level2_deactivate_and_reactivate_one_queue() {
    let mut s = setup(false, &[]);
    let (lo, pid) = (s.qid("lo"), s.app.pid);
    let preempts_before = s
        .emu
        .stats()
        .partitions
        .iter()
        .map(|p| p.preempts)
        .sum::<u64>();
    s.conn.ok(|seq| AgentMsg::Preempt {
        seq,
        level: Level::Deactivate,
        target: Target::Queues(vec![QueueId(lo)]),
        grace_period: 0,
    });
    let q = s.emu.queue(pid, lo);
    assert!(
        !q.active && q.percentage == 0,
        "the emulator shows the queue inactive: {q:?}"
    );
    for other in ["hi", "null"] {
        assert!(
            s.emu.queue(pid, s.qid(other)).active,
            "{other} stays active"
        );
    }
    s.conn.wait_registry("lo deactivated", |r| {
        r.queues
            .iter()
            .any(|x| x.queue_id == QueueId(lo) && x.deactivated)
    });
    s.assert_progress(&["lo"], &["hi", "null"]);
    s.conn.ok(|seq| AgentMsg::Release {
        seq,
        level: Level::Deactivate,
        target: Target::Queues(vec![QueueId(lo)]),
    });
    let q = s.emu.queue(pid, lo);
    assert!(
        q.active && q.percentage == 100,
        "reactivated with the runtime's percentage: {q:?}"
    );
    s.assert_progress(&[], &["lo", "hi", "null"]);
    let preempts_after = s
        .emu
        .stats()
        .partitions
        .iter()
        .map(|p| p.preempts)
        .sum::<u64>();
    assert!(
        preempts_after > preempts_before,
        "UPDATE_QUEUE is a device-wide preempt in the model"
    );
    s.finish();
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn level3_suspend_and_resume_by_stream() {
    let mut s = setup(false, &[]);
    let (lo_sid, lo, pid) = (s.sid("lo"), s.qid("lo"), s.app.pid);
    let d = s.conn.ok(|seq| AgentMsg::Preempt {
        seq,
        level: Level::Suspend,
        target: Target::Streams(vec![lo_sid]),
        grace_period: 0,
    });
    assert!(d.contains("suspended"), "{d}");
    let q = s.emu.queue(pid, lo);
    assert!(
        q.suspended && !q.active,
        "the emulator shows the queue debugger-suspended: {q:?}"
    );
    assert!(!s.emu.queue(pid, s.qid("hi")).suspended);
    let procs = s.emu.stats().processes;
    assert!(
        procs
            .iter()
            .any(|p| p.pid == pid && p.debug_enabled && p.debugger_pid.is_none()),
        "self-debugging, no other debugger: {procs:?}"
    );
    s.assert_progress(&["lo"], &["hi", "null"]);
    s.conn.ok(|seq| AgentMsg::Release {
        seq,
        level: Level::Suspend,
        target: Target::Streams(vec![lo_sid]),
    });
    let q = s.emu.queue(pid, lo);
    assert!(!q.suspended && q.active, "resumed: {q:?}");
    s.assert_progress(&[], &["lo", "hi", "null"]);
    // Again: the queue's EC_QUEUE_NEW was cleared by the first suspend, so the shim suspends
    // it without another snapshot (docs/kernel-interface.md); the kernel must still take it.
    let d = s.conn.ok(|seq| AgentMsg::Preempt {
        seq,
        level: Level::Suspend,
        target: Target::Streams(vec![lo_sid]),
        grace_period: 0,
    });
    assert!(d.contains("suspended"), "{d}");
    assert!(s.emu.queue(pid, lo).suspended);
    s.conn.ok(|seq| AgentMsg::Release {
        seq,
        level: Level::Suspend,
        target: Target::Streams(vec![lo_sid]),
    });
    assert!(!s.emu.queue(pid, lo).suspended);
    s.finish();
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn level0_priority_and_command_errors_name_the_rule() {
    let mut s = setup(false, &[]);
    let (hi, pid) = (s.qid("hi"), s.app.pid);
    s.conn.ok(|seq| AgentMsg::SetPriority {
        seq,
        target: Target::Queues(vec![QueueId(hi)]),
        priority: 14,
    });
    assert_eq!(s.emu.queue(pid, hi).priority, 14);
    s.conn.wait_registry("priority 14", |r| {
        r.queues
            .iter()
            .any(|q| q.queue_id == QueueId(hi) && q.effective_priority == 14)
    });
    let (ok, d) = s.conn.command(|seq| AgentMsg::SetPriority {
        seq,
        target: Target::Queues(vec![QueueId(hi)]),
        priority: 16,
    });
    assert!(!ok && d.contains("out of range 0..=15"), "{d}");
    let (ok, d) = s.conn.command(|seq| AgentMsg::Preempt {
        seq,
        level: Level::Deactivate,
        target: Target::Queues(vec![QueueId(999)]),
        grace_period: 0,
    });
    assert!(!ok && d.contains("no KFD queue [999]"), "{d}");
    let (ok, d) = s.conn.command(|seq| AgentMsg::Preempt {
        seq,
        level: Level::Hold,
        target: Target::Streams(vec![4242]),
        grace_period: 0,
    });
    assert!(!ok && d.contains("no stream [4242]"), "{d}");
    // A malformed line is skipped; the session goes on.
    s.conn.w.write_all(b"{not json}\n").unwrap();
    s.conn.send(&AgentMsg::Query { seq: 77 });
    let mut got_registry = false;
    loop {
        match s.conn.read() {
            ShimMsg::Registry(_) => got_registry = true,
            ShimMsg::Ack { seq: 77, ok, .. } => {
                assert!(ok);
                break;
            }
            _ => {}
        }
    }
    assert!(got_registry, "a query is answered with the registry");
    s.finish();
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn passthrough_library_launches_are_never_held() {
    let mut s = setup(true, &[("KFDQ_PASSTHROUGH", "+libkfdqtest")]);
    s.conn.ok(|seq| AgentMsg::Preempt {
        seq,
        level: Level::Hold,
        target: Target::All,
        grace_period: 0,
    });
    s.assert_progress(&["hi", "lo", "null"], &["lib"]);
    s.conn.ok(|seq| AgentMsg::Release {
        seq,
        level: Level::Hold,
        target: Target::All,
    });
    s.assert_progress(&[], &["hi", "lo", "null", "lib"]);
    s.finish();
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn without_passthrough_the_library_is_held_too() {
    let mut s = setup(true, &[]);
    s.conn.ok(|seq| AgentMsg::Preempt {
        seq,
        level: Level::Hold,
        target: Target::All,
        grace_period: 0,
    });
    s.assert_progress(&["hi", "lo", "null", "lib"], &[]);
    s.conn.ok(|seq| AgentMsg::Release {
        seq,
        level: Level::Hold,
        target: Target::All,
    });
    s.assert_progress(&[], &["hi", "lo", "null", "lib"]);
    s.finish();
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn runtime_update_queue_cannot_undo_the_shims_state() {
    let emu = mount();
    let sock_dir = tempfile::tempdir().unwrap();
    let (listener, path) = listen(sock_dir.path());
    let mut app = Launch::new(programs().get("rocr_update"))
        .env("KFDQ_SOCKET", path.display().to_string())
        .env("KFDQ_CLASS", "batch")
        .start(&emu);
    let mut conn = accept(&listener);
    app.wait_line("CHECKPOINT deactivated");
    let lo = app.queues()["lo"].queue_id;
    let pid = app.pid;
    conn.wait_registry("the queue", |r| {
        r.queues.iter().any(|q| q.queue_id == QueueId(lo))
    });
    assert_eq!(emu.queue(pid, lo).priority, 0, "batch class, low stream");
    conn.ok(|seq| AgentMsg::Preempt {
        seq,
        level: Level::Deactivate,
        target: Target::Queues(vec![QueueId(lo)]),
        grace_period: 0,
    });
    app.release("deactivated");
    assert_eq!(app.wait_line("update "), "update 0");
    app.wait_line("CHECKPOINT updated");
    // The runtime asked for percentage 100 and priority 11: the queue stays deactivated, and
    // the priority is the class mapping of 11 (batch band top, 6), not 11.
    let q = emu.queue(pid, lo);
    assert!(!q.active && q.percentage == 0, "still deactivated: {q:?}");
    assert_eq!(q.priority, 6);
    let reg = conn.wait_registry("new request recorded", |r| {
        r.queues
            .iter()
            .any(|q| q.queue_id == QueueId(lo) && q.requested_priority == 11)
    });
    assert_eq!(effective(&reg, lo), 6);
    conn.ok(|seq| AgentMsg::Release {
        seq,
        level: Level::Deactivate,
        target: Target::Queues(vec![QueueId(lo)]),
    });
    let q = emu.queue(pid, lo);
    assert!(
        q.active && q.percentage == 100 && q.priority == 6,
        "released to the runtime's percentage: {q:?}"
    );
    app.go();
    app.finish();
}
