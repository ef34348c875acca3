//! Tenants who do not cooperate (issue 50), the agent's resources: connections that never say
//! what they are cannot park descriptors and buffers on the agent, and it answers meanwhile.

mod common;

use std::io::Read;
use std::os::unix::net::UnixStream;

use common::kfdqd::Agent;
use common::*;

/// kfdqd's open descriptors.
fn fds(agent: &Agent) -> usize {
    std::fs::read_dir(format!("/proc/{}/fd", agent.child.id()))
        .map(|d| d.count())
        .unwrap_or(0)
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn tenant_two_thousand_silent_connections_are_closed_and_the_agent_answers_meanwhile() {
    let emu = mount();
    let agent = Agent::start(&emu, &common::kfdqd::two_classes("deactivate"));
    let before = fds(&agent);
    // 2,000 connections that never say hello (the test's own limit must allow them).
    let (soft, hard) = nix_limits();
    assert!(
        soft >= 2_100 || hard >= 2_100,
        "the test needs 2,100 descriptors (ulimit -n {soft}, hard {hard})"
    );
    raise_limit(hard);
    let mut silent: Vec<UnixStream> = (0..2_000)
        .map(|i| UnixStream::connect(&agent.sock).unwrap_or_else(|e| panic!("connection {i}: {e}")))
        .collect();
    // The agent still answers.
    let s = agent.status();
    assert!(s.processes.is_empty());
    // And closes every one of them at the hello deadline: each sees end of file.
    for (i, c) in silent.iter_mut().enumerate() {
        c.set_read_timeout(Some(WAIT_LIMIT)).unwrap();
        let mut b = [0u8; 1];
        match c.read(&mut b) {
            Ok(0) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
            other => panic!("connection {i} was not closed by the agent: {other:?}"),
        }
    }
    test_support::wait::wait_state(
        "kfdqd's descriptors back to what they were",
        WAIT_LIMIT,
        || fds(&agent),
        |n| *n <= before + 2,
    );
    assert!(agent.try_request(&kfdq::proto::Request::Status).is_some());
}

/// This process's descriptor limits (soft, hard) from /proc.
fn nix_limits() -> (u64, u64) {
    let t = std::fs::read_to_string("/proc/self/limits").unwrap();
    let l = t
        .lines()
        .find_map(|l| l.strip_prefix("Max open files"))
        .unwrap();
    let mut f = l
        .split_whitespace()
        .map(|x| x.parse::<u64>().unwrap_or(u64::MAX));
    (f.next().unwrap(), f.next().unwrap())
}

/// Raises this process's soft descriptor limit to `to` (`prlimit`, util-linux).
fn raise_limit(to: u64) {
    let o = std::process::Command::new("prlimit")
        .arg(format!("--pid={}", std::process::id()))
        .arg(format!("--nofile={to}:{to}"))
        .output()
        .expect("prlimit (util-linux)");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}
