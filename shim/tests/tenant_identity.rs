//! Tenants who do not cooperate, at identity (issue 50 item 10; docs/agent.md "Threat model:
//! identity, the socket and the agent's resources"): a process's session is bound to the
//! process — the peer's pidfd (`SO_PEERPIDFD`) taken at accept, and its pid and start time
//! (`/proc/<pid>/stat` field 22) — not to whatever holds the connection. A second hello from the same process ends the first
//! session (its board slot freed, its connection closed) instead of leaving it behind; a hello
//! parked on a connection whose process exited, its pid reused by another process, is refused
//! and takes nothing from the process that has the pid now. Real processes: the forger
//! (`common::forger`), the shim's flood, and `programs/parked.c`, which puts the victim under
//! the freed pid with clone3's `set_tid`.

mod common;

use std::io::{BufRead, Read, Write};
use std::time::Instant;

use common::forger::Forger;
use common::kfdqd::{Agent, two_classes};
use common::*;
use kfdq::Pid;
use kfdq::proto::ShimMsg;

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn tenant_a_second_hello_from_the_same_process_ends_the_first_session() {
    let emu = mount();
    let agent = Agent::start(&emu, &two_classes("deactivate"));
    let gpu = agent.status().partitions[0].gpu_id;
    let first = Forger::connect(&agent.sock, "latency", emu.root(), gpu);
    agent.wait("the first session", |s| {
        s.processes.iter().any(|p| p.pid == Pid::this())
    });
    // The same process says hello again on a second connection (a reconnect that left the
    // first open, or a tenant cycling connections to leak board slots).
    let mut second = std::os::unix::net::UnixStream::connect(&agent.sock).unwrap();
    second
        .write_all(&kfdq::proto::encode(&ShimMsg::Hello {
            version: kfdq::proto::VERSION,
            pid: Pid::this(),
            exe: "forger".into(),
            class: Some("latency".into()),
            priority: None,
        }))
        .unwrap();
    let mut reply = String::new();
    std::io::BufReader::new(&second)
        .read_line(&mut reply)
        .unwrap();
    assert!(reply.contains("welcome"), "{reply}");
    // The first connection is closed by the agent: end of file after what it was sent.
    let mut s = first.s.try_clone().unwrap();
    s.set_read_timeout(Some(WAIT_LIMIT)).unwrap();
    let deadline = Instant::now() + WAIT_LIMIT;
    let mut got = Vec::new();
    loop {
        let mut b = [0u8; 4096];
        match s.read(&mut b) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&b[..n]),
            Err(e) => panic!(
                "the first session's connection was not closed ({e}); it was sent: {}",
                String::from_utf8_lossy(&got)
            ),
        }
        assert!(Instant::now() < deadline, "never closed");
    }
    let text = String::from_utf8_lossy(&got);
    assert!(
        text.contains("another connection of this process said hello"),
        "{text}"
    );
    let st = agent.wait("the replacement counted", |s| {
        s.counters.replaced_sessions == 1
    });
    assert_eq!(
        st.processes.iter().filter(|p| p.pid == Pid::this()).count(),
        1,
        "{:?}",
        st.processes
    );
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn tenant_a_pid_reused_after_a_parked_hello_gets_nothing() {
    parked_hello(Gap::AfterAccept);
}

/// The race of stop 57's CI, made certain: the agent is stopped (SIGSTOP) while the parked
/// connection's process connects, exits and has its pid taken, so the agent's first look at
/// `/proc/<pid>` is at the victim. Only the peer's pidfd (`SO_PEERPIDFD`) tells them apart;
/// the start time read at accept is the victim's.
#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn tenant_a_pid_reused_before_the_agent_reads_the_connecting_process_gets_nothing() {
    parked_hello(Gap::BeforeAccept);
}

/// When the connecting process exits and its pid is reused.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Gap {
    /// After the agent accepted the connection (and read the process's identity).
    AfterAccept,
    /// Before the agent accepted it: the agent is stopped meanwhile.
    BeforeAccept,
}

fn parked_hello(gap: Gap) {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid as NixPid;

    let emu = mount();
    let agent = Agent::start(&emu, &two_classes("deactivate"));
    let agent_pid = NixPid::from_raw(agent.child.id() as i32);
    let mut l = Launch::new(programs().get("parked"))
        .arg(agent.sock.display().to_string())
        .arg(kfdq::proto::VERSION.to_string())
        .arg("/usr/bin/env")
        .arg(format!("LD_PRELOAD={}", shim_path().display()))
        .arg("KFDQ_CLASS=batch")
        .arg(programs().get("flood").display().to_string())
        .args(["20000", "2560", "2", "1"])
        .env("KFDQ_SOCKET", agent.sock.display().to_string());
    // The parked connection's process runs without the shim; the victim gets it.
    l.preload = false;
    let agent_fds = || {
        std::fs::read_dir(format!("/proc/{}/fd", agent.child.id()))
            .map(|d| d.count())
            .unwrap_or(0)
    };
    let fds = agent_fds();
    if gap == Gap::BeforeAccept {
        kill(agent_pid, Signal::SIGSTOP).expect("stop the agent");
    }
    let mut app = l.start(&emu);
    app.wait_line("connected ");
    if gap == Gap::AfterAccept {
        // The agent accepted it (and read the connecting process's identity then): one more
        // descriptor. Then the connecting process exits, its connection kept by its child.
        test_support::wait::wait_state(
            "the agent to accept the parked connection",
            WAIT_LIMIT,
            agent_fds,
            |n| *n > fds,
        );
    }
    app.release("exit");
    let num = |l: String| -> u32 { l.split_whitespace().nth(1).unwrap().parse().unwrap() };
    let parked = num(app.wait_line("parked "));
    let t0 = Instant::now();
    let victim = num(app.wait_line("victim "));
    assert_eq!(
        victim, parked,
        "clone3 set_tid gave the victim the parked pid"
    );
    if gap == Gap::BeforeAccept {
        // The victim runs under the pid before the agent has looked at the connection.
        kill(agent_pid, Signal::SIGCONT).expect("resume the agent");
    }
    // The victim under the pid that connected first: its own shim's session.
    let before = agent.wait_connected(victim, 1);
    assert_eq!(before.class, "batch");
    // Now the connection parked by the process that exited says hello as that pid.
    app.release("hello");
    eprintln!(
        "the victim connected {:?} after the parked connection",
        t0.elapsed()
    );
    let reply = app.wait_line("reply ");
    assert!(
        reply.contains("refused") && reply.contains("exited before this hello"),
        "{reply}"
    );
    // The victim's session is untouched: its executable, its class, its queues.
    let after = agent.process(victim).expect("the victim is still known");
    assert_eq!(
        (&after.exe, &after.class, after.queues.len()),
        (&before.exe, &before.class, 1),
        "{after:?}"
    );
    assert!(after.exe.ends_with("/flood"), "{after:?}");
    let _ = kill(NixPid::from_raw(victim as i32), Signal::SIGKILL);
    app.release("end");
    app.finish();
}
