//! Levels 1/2/3 commanded by a test-side agent (a `UnixListener` speaking `kfdq::proto`):
//! exactly the targeted streams' queues stop making progress in the emulator while the others
//! keep going, and come back on release; closing the socket or killing the agent releases
//! everything; passthrough libraries are never held.

mod common;

use std::io::{BufReader, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixListener;
use std::process::{Command, Stdio};

use common::agent::*;
use common::*;
use kfdq::proto::{self, AgentMsg, Level, LineReader, ShimMsg, Target};
use kfdq::{Pid, QueueId};

/// A worker under the shim, connected to the test's agent, with its streams mapped.
struct Setup {
    emu: Emu,
    app: App,
    conn: Conn,
    listener: UnixListener,
    _sock_dir: tempfile::TempDir,
    /// name -> (stream id, queue id)
    streams: std::collections::HashMap<String, (u64, u32)>,
}

fn setup(lib: bool, extra_env: &[(&'static str, &str)]) -> Setup {
    let emu = mount();
    let sock_dir = tempfile::tempdir().unwrap();
    let (listener, path) = listen(sock_dir.path());
    let mut l = Launch::new(programs().get("worker"))
        .arg("2000")
        .env("KFDQ_SOCKET", path.display().to_string());
    if lib {
        l = l.arg(programs().lib().display().to_string());
    }
    for (k, v) in extra_env {
        l = l.env(k, *v);
    }
    let mut app = l.start(&emu);
    let mut conn = accept(&listener);
    assert_eq!(conn.pid, Pid(app.pid));
    app.wait_line("READY");
    let q = app.queues();
    let want = if lib { 5 } else { 3 };
    let reg = conn.wait_registry("all streams mapped", |r| mapped(r) >= want);
    let mut streams = std::collections::HashMap::new();
    for name in ["hi", "lo"] {
        let s = stream_by_handle(&reg, q[name].handle);
        assert_eq!(s.queue_id, Some(QueueId(q[name].queue_id)));
        streams.insert(name.to_string(), (s.stream_id, q[name].queue_id));
    }
    let null = stream_of_kind(&reg, StreamKind::Null);
    assert_eq!(null.queue_id, Some(QueueId(q["null"].queue_id)));
    streams.insert("null".into(), (null.stream_id, q["null"].queue_id));
    if lib {
        let s = stream_by_handle(&reg, q["lib-low"].handle);
        streams.insert("lib".into(), (s.stream_id, q["lib-low"].queue_id));
    }
    Setup {
        emu,
        app,
        conn,
        listener,
        _sock_dir: sock_dir,
        streams,
    }
}

impl Setup {
    fn qid(&self, name: &str) -> u32 {
        self.streams[name].1
    }

    fn sid(&self, name: &str) -> u64 {
        self.streams[name].0
    }

    fn done(&self, name: &str) -> u64 {
        self.emu.queue(self.app.pid, self.qid(name)).packets_done
    }

    /// Asserts that the `frozen` streams' queues complete nothing while the `running` ones
    /// progress. No fixed window: a window lasts until every running stream has completed 3
    /// more packets, or, with none running, until a witness process's queue has run 20 ms of
    /// packets on the same partition. First the frozen streams must settle: work launched
    /// before the command (already past the shim, or written but not yet signalled by the
    /// runtime) completes, so windows repeat until the frozen counts stay put over one; then one
    /// more window is the assertion.
    fn assert_progress(&self, frozen: &[&str], running: &[&str]) {
        let counts = || -> Vec<u64> { frozen.iter().map(|n| self.done(n)).collect() };
        let window = || {
            if running.is_empty() {
                test_support::hold::cp_witness(&self.emu, 20, 1000);
            } else {
                let start: Vec<u64> = running.iter().map(|n| self.done(n)).collect();
                wait_for("every running stream to complete 3 more packets", || {
                    running
                        .iter()
                        .zip(&start)
                        .all(|(n, s)| self.done(n) >= s + 3)
                });
            }
        };
        let mut before = counts();
        let mut settled = false;
        for _ in 0..20 {
            window();
            let now = counts();
            settled = now == before;
            before = now;
            if settled {
                break;
            }
        }
        assert!(
            settled,
            "the frozen streams {frozen:?} never settled: {before:?}"
        );
        window();
        for (i, n) in frozen.iter().enumerate() {
            assert_eq!(
                self.done(n),
                before[i],
                "stream {n} (queue {}) must make no progress",
                self.qid(n)
            );
        }
    }

    fn finish(self) {
        self.app.stop();
        let (lines, _) = self.app.finish();
        assert!(
            lines.iter().any(|l| l.starts_with("count hi ")),
            "worker reported its counts"
        );
    }
}

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
fn closing_the_socket_releases_every_level() {
    let mut s = setup(false, &[]);
    let pid = s.app.pid;
    let (lo_sid, hi, null) = (s.sid("lo"), s.qid("hi"), s.qid("null"));
    s.conn.ok(|seq| AgentMsg::Preempt {
        seq,
        level: Level::Hold,
        target: Target::Streams(vec![lo_sid]),
        grace_period: 0,
    });
    s.conn.ok(|seq| AgentMsg::Preempt {
        seq,
        level: Level::Deactivate,
        target: Target::Queues(vec![QueueId(null)]),
        grace_period: 0,
    });
    s.conn.ok(|seq| AgentMsg::Preempt {
        seq,
        level: Level::Suspend,
        target: Target::Queues(vec![QueueId(hi)]),
        grace_period: 0,
    });
    s.assert_progress(&["lo", "null", "hi"], &[]);
    let Setup {
        emu,
        app,
        conn,
        listener,
        _sock_dir,
        streams,
    } = s;
    drop(conn);
    wait_for("every queue active again", || {
        emu.queues_of(pid).iter().all(|q| q.active && !q.suspended)
    });
    let s = Setup {
        emu,
        app,
        conn: accept(&listener),
        listener,
        _sock_dir,
        streams,
    };
    s.assert_progress(&[], &["lo", "null", "hi"]);
    let reg = s.app.registry_of(pid).expect("registry file");
    assert!(
        reg.streams.iter().all(|x| !x.held)
            && reg.queues.iter().all(|q| !q.deactivated && !q.suspended),
        "released in the registry: {reg:#?}"
    );
    s.finish();
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn a_killed_agent_never_leaves_the_app_held() {
    let mut s = setup(false, &[]);
    let pid = s.app.pid;
    s.conn.ok(|seq| AgentMsg::Preempt {
        seq,
        level: Level::Hold,
        target: Target::All,
        grace_period: 0,
    });
    let lo = s.qid("lo");
    s.conn.ok(|seq| AgentMsg::Preempt {
        seq,
        level: Level::Suspend,
        target: Target::Queues(vec![QueueId(lo)]),
        grace_period: 0,
    });
    s.assert_progress(&["lo", "hi", "null"], &[]);
    // Hand the only remaining reference to the agent's end of the connection to another
    // process, then SIGKILL that process.
    let Setup {
        emu,
        app,
        conn,
        listener,
        _sock_dir,
        streams,
    } = s;
    let fd: OwnedFd = conn.w.try_clone().unwrap().into();
    let mut peer = Command::new("sleep")
        .arg("600")
        .stdin(Stdio::from(fd))
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn peer");
    drop(conn);
    // The window: the app's own threads and a witness process run meanwhile.
    test_support::hold::cp_witness(&emu, 20, 1000);
    assert!(
        emu.queue(pid, lo).suspended,
        "still suspended while the peer holds the socket"
    );
    peer.kill().expect("SIGKILL the peer");
    peer.wait().unwrap();
    wait_for("every queue running again", || {
        emu.queues_of(pid).iter().all(|q| q.active && !q.suspended)
    });
    let s = Setup {
        emu,
        app,
        conn: accept(&listener),
        listener,
        _sock_dir,
        streams,
    };
    s.assert_progress(&[], &["lo", "hi", "null"]);
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

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn a_refusing_agent_stops_control_but_not_the_app() {
    let emu = mount();
    let sock_dir = tempfile::tempdir().unwrap();
    let (listener, path) = listen(sock_dir.path());
    let mut app = Launch::new(programs().get("streams"))
        .arg("priorities")
        .env("KFDQ_SOCKET", path.display().to_string())
        .env("KFDQ_CLASS", "latency")
        .start(&emu);
    let s = accept_raw(&listener);
    let mut w = s.try_clone().unwrap();
    let mut r = LineReader::new(BufReader::new(s));
    assert!(matches!(r.next::<ShimMsg>(), Ok(ShimMsg::Hello { .. })));
    w.write_all(&proto::encode(&AgentMsg::Refused {
        reason: "test says no".into(),
    }))
    .unwrap();
    // The shim hangs up and does not come back.
    assert!(matches!(
        r.next::<ShimMsg>(),
        Err(proto::DecodeError::Closed)
    ));
    app.wait_line("CHECKPOINT");
    // A shim that reconnects would try again after 20 ms (its first backoff); the window lasts
    // until a witness process's queue has run 100 ms of packets.
    test_support::hold::cp_witness(&emu, 50, 2000);
    assert!(
        listener.accept().is_err(),
        "a refused shim must not reconnect"
    );
    let q = app.queues();
    let pid = app.pid;
    let reg = app.wait_registry(pid, "streams mapped", |r| mapped(r) >= 6);
    assert_eq!(
        effective(&reg, q["high"].queue_id),
        15,
        "static priorities still apply"
    );
    app.go();
    let (_, stderr) = app.finish();
    assert!(
        stderr.contains("test says no"),
        "the refusal is reported: {stderr}"
    );
}

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
