//! The end of control, commanded by a test-side agent: closing the socket or killing the
//! agent releases every level; a refusing agent stops control but not the application.

mod common;

use std::io::{BufReader, Write};
use std::os::fd::OwnedFd;
use std::process::{Command, Stdio};

use common::agent::*;
use common::controlled::setup;
use common::*;
use kfdq::QueueId;
use kfdq::proto::{self, AgentMsg, Level, LineReader, ShimMsg, Target};

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
    let s = s.reconnect(|conn, emu| {
        drop(conn);
        wait_for("every queue active again", || {
            emu.queues_of(pid).iter().all(|q| q.active && !q.suspended)
        });
    });
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
    let s = s.reconnect(|conn, emu| {
        let fd: OwnedFd = conn.w.try_clone().unwrap().into();
        let mut peer = Command::new("sleep")
            .arg("600")
            .stdin(Stdio::from(fd))
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn peer");
        drop(conn);
        // The window: the app's own threads and a witness process run meanwhile.
        test_support::hold::cp_witness(emu, 20, 1000);
        assert!(
            emu.queue(pid, lo).suspended,
            "still suspended while the peer holds the socket"
        );
        peer.kill().expect("SIGKILL the peer");
        peer.wait().unwrap();
        wait_for("every queue running again", || {
            emu.queues_of(pid).iter().all(|q| q.active && !q.suspended)
        });
    });
    s.assert_progress(&[], &["lo", "hi", "null"]);
    s.finish();
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
