//! Fail-safe under hangs: a stopped (hung) kfdqd leaves nobody preempted past its lease, and
//! its systemd watchdog pings stop while its event loop does not turn.

mod common;

use kfdq::Pid;
use std::os::unix::net::UnixDatagram;
use std::time::{Duration, Instant};

use common::kfdqd::{Agent, agents_path, two_classes};
use common::*;
use nix::sys::signal::Signal;

/// A flood of 20 ms work-groups in `class`, `streams` streams.
fn flood(emu: &Emu, agent: &Agent, class: &str, streams: u32) -> App {
    let mut app = Launch::new(programs().get("flood"))
        .args(["20000", "2560", "2"])
        .arg(streams.to_string())
        .env("KFDQ_CLASS", class)
        .env("KFDQ_SOCKET", agent.sock.display().to_string())
        .start(emu);
    app.wait_line("flooding");
    app
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn a_hung_agent_leaves_the_batch_job_preempted_no_longer_than_its_lease() {
    let emu = mount();
    // The agent's commands and their lease; with direct edges the batch job would release
    // itself on the latency job's idle edge (`direct.rs` has the hung agent with direct edges).
    let agent = Agent::start(&emu, &agents_path("deactivate"));
    let mut lp = flood(&emu, &agent, "batch", 1);
    agent.wait_connected(lp.pid, 1);
    let q = lp.queues().values().next().unwrap().queue_id;
    let hp = flood(&emu, &agent, "latency", 1);
    agent.wait_connected(hp.pid, 1);
    wait_for(
        "the batch queue deactivated while the latency flood is busy",
        || !emu.queue(lp.pid, q).active,
    );

    // The agent hangs (a deadlock, a stalled write, a debugger), then the latency job exits.
    agent.signal(Signal::SIGSTOP);
    hp.stop();
    hp.finish();
    let stopped = Instant::now();
    wait_for(
        "the batch queue active again (the shim's lease ran out)",
        || emu.queue(lp.pid, q).active,
    );
    let took = stopped.elapsed();
    let reg = lp
        .wait_registry(lp.pid, "a lease expiry", |r| r.lease_expiries >= 1)
        .clone();
    assert!(
        reg.warnings.iter().any(|w| w.contains("lease expired")),
        "{:?}",
        reg.warnings
    );
    let done = emu.queue(lp.pid, q).packets_done;
    wait_for(
        "the batch job completing work while the agent is stopped",
        || emu.queue(lp.pid, q).packets_done > done,
    );
    eprintln!("released {took:?} after the agent stopped");

    // The agent comes back: it learns the shim released on its own, and the node agrees.
    agent.signal(Signal::SIGCONT);
    agent.wait("the batch job running in the agent's view", |s| {
        s.processes
            .iter()
            .any(|p| p.pid == Pid(lp.pid) && p.state == "running")
    });
    assert!(emu.queue(lp.pid, q).active);
    lp.stop();
    lp.finish();
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn a_stopped_shim_does_not_delay_the_other_shims_commands() {
    let emu = mount();
    let agent = Agent::start(&emu, &two_classes("deactivate"));
    let stopped = flood(&emu, &agent, "batch", 1);
    agent.wait_connected(stopped.pid, 1);
    let mut other = flood(&emu, &agent, "batch", 1);
    agent.wait_connected(other.pid, 1);
    let q_stopped = stopped.queues().values().next().unwrap().queue_id;
    let q_other = other.queues().values().next().unwrap().queue_id;

    // One batch process stops reading (a debugger, SIGSTOP): its shim takes no command.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(stopped.pid as i32),
        Signal::SIGSTOP,
    )
    .unwrap();
    let hp = flood(&emu, &agent, "latency", 1);
    agent.wait_connected(hp.pid, 1);
    // The other batch process gets its preempt and carries it out while the first is stopped.
    wait_for(
        "the running batch process's queue deactivated while the other batch process is stopped",
        || !emu.queue(other.pid, q_other).active,
    );
    let pid = other.pid;
    other.wait_registry(pid, "its queue deactivated in its registry", |r| {
        r.queues.iter().all(|q| q.deactivated)
    });
    assert!(
        emu.queue(stopped.pid, q_stopped).active,
        "the stopped process cannot have acted on its command"
    );
    // Its command was queued, not dropped: it acts on it once it runs again.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(stopped.pid as i32),
        Signal::SIGCONT,
    )
    .unwrap();
    wait_for(
        "the stopped batch process's queue deactivated once it runs again",
        || !emu.queue(stopped.pid, q_stopped).active,
    );
    hp.stop();
    hp.finish();
    wait_for("both batch queues active after the latency job", || {
        emu.queue(stopped.pid, q_stopped).active && emu.queue(other.pid, q_other).active
    });
    for app in [stopped, other] {
        app.stop();
        app.finish();
    }
}

/// A stand-in for systemd's notification socket.
struct NotifySocket {
    sock: UnixDatagram,
    path: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl NotifySocket {
    fn new() -> NotifySocket {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify.sock");
        let sock = UnixDatagram::bind(&path).unwrap();
        NotifySocket {
            sock,
            path,
            _dir: dir,
        }
    }

    /// The next datagram within `within`, if any.
    fn next(&self, within: Duration) -> Option<String> {
        self.sock.set_read_timeout(Some(within)).unwrap();
        let mut buf = [0u8; 4096];
        let n = self.sock.recv(&mut buf).ok()?;
        Some(String::from_utf8_lossy(&buf[..n]).into_owned())
    }

    /// Waits (20 s) for a datagram containing `what`.
    fn wait_for(&self, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if self
                .next(Duration::from_secs(1))
                .is_some_and(|m| m.lines().any(|l| l == what))
            {
                return;
            }
        }
        panic!("no {what} on the notify socket");
    }
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn the_watchdog_is_pinged_only_while_the_event_loop_turns() {
    let emu = mount();
    let notify = NotifySocket::new();
    // systemd's 200 ms watchdog: kfdqd pings every 100 ms.
    let agent = Agent::start_with_env(
        &emu,
        &two_classes("deactivate"),
        &[
            ("NOTIFY_SOCKET", notify.path.display().to_string()),
            ("WATCHDOG_USEC", "200000".into()),
        ],
    );
    notify.wait_for("READY=1");
    notify.wait_for("WATCHDOG=1");
    notify.wait_for("WATCHDOG=1");

    // Stopped, the loop does not turn: no ping for five watchdog periods (after the pings sent
    // before the stop took effect are read).
    agent.signal(Signal::SIGSTOP);
    let mut drained = 0;
    while notify.next(Duration::from_millis(300)).is_some() {
        drained += 1;
        assert!(drained < 20, "pings go on after SIGSTOP");
    }
    assert_eq!(
        notify.next(Duration::from_secs(1)),
        None,
        "a stopped agent pinged the watchdog"
    );
    agent.signal(Signal::SIGCONT);
    notify.wait_for("WATCHDOG=1");

    // WATCHDOG_PID naming another process: the watchdog is not this process's.
    drop(agent);
    let agent = Agent::start_with_env(
        &emu,
        &two_classes("deactivate"),
        &[
            ("NOTIFY_SOCKET", notify.path.display().to_string()),
            ("WATCHDOG_USEC", "200000".into()),
            ("WATCHDOG_PID", "1".into()),
        ],
    );
    notify.wait_for("READY=1");
    assert_eq!(
        notify.next(Duration::from_secs(1)),
        None,
        "pinged another process's watchdog"
    );
    drop(agent);
}
