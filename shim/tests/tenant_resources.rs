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

/// kfdqd's peak resident memory (`VmHWM` in /proc/PID/status), in bytes.
fn peak_rss(agent: &Agent) -> u64 {
    let t = std::fs::read_to_string(format!("/proc/{}/status", agent.child.id())).unwrap();
    let kb: u64 = t
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .expect("VmHWM");
    kb << 10
}

/// The memory bound this test holds kfdqd to, above its peak before the attack: the buffers
/// of all connections together (`kfdq::agent::conn::TOTAL_BUFFERED`, 64 MiB) plus each
/// connection's uncharged allowance (`FREE_PER_CONN`, 4 KiB in and 4 KiB out) and some 8 KiB
/// of bookkeeping (its identity, poll entry, peer record) for the 2,000 connections.
const BOUND: u64 = (64 << 20) + 2_000 * (16 << 10);

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn tenant_two_thousand_connections_and_a_queue_id_flood_stay_within_the_memory_bound() {
    use std::io::Write;

    use common::forger::Forger;
    use kfdq::QueueId;
    use kfdq::proto::ShimMsg;

    let emu = mount();
    let agent = Agent::start(&emu, &common::kfdqd::two_classes("deactivate"));
    let gpu = agent.status().partitions[0].gpu_id;
    let before = peak_rss(&agent);
    // A shim-speaking process (root: the test).
    let mut f = Forger::connect(&agent.sock, "batch", emu.root(), gpu);
    // A tenant of another uid opens 2,000 connections, each with 128 KiB of a line that never
    // ends (the old agent kept up to 1 MiB of such a line per connection, for 4,096
    // connections, whoever held them).
    let mut hold = Launch::new(programs().get("hold"))
        .arg(agent.sock.display().to_string())
        .args(["2000", "131072"])
        .uid(65534);
    hold.preload = false;
    let mut hold = hold.start(&emu);
    let held = hold.wait_line("held ");
    eprintln!("{held}");
    // The shim-speaking process floods Activity for 200,000 queue ids it does not have.
    let mut flood = Vec::new();
    for q in 0..200_000u32 {
        flood.extend(kfdq::proto::encode(&ShimMsg::Activity {
            queue_id: QueueId(1_000_000 + q),
            busy: q % 2 == 0,
        }));
    }
    f.s.write_all(&flood).unwrap();
    // The agent answers meanwhile, and has read the flood (its counter), so the peak is in.
    let st = agent.wait("the Activity flood read", |s| {
        // All but 17 ids: the agent keeps as many entries as the registry's queues (one)
        // and 16 more (`UNREGISTERED_ACTIVITY`, src/agent/node/shim.rs).
        s.counters.activity_dropped == 200_000 - 17
    });
    // More than one uid's share of connections (`max_connections_per_uid`, 1,024): the rest
    // were refused.
    assert!(st.counters.uid_connections_refused > 0, "{:?}", st.counters);
    let grew = peak_rss(&agent).saturating_sub(before);
    eprintln!(
        "kfdqd peak RSS grew by {} KiB (bound {} KiB) over 2,000 connections and 200,000 queue ids",
        grew >> 10,
        BOUND >> 10
    );
    assert!(
        grew <= BOUND,
        "kfdqd's peak RSS grew by {} MiB, above the bound {} MiB",
        grew >> 20,
        BOUND >> 20
    );
    hold.release("end");
    hold.finish();
    drop(f);
    assert!(agent.try_request(&kfdq::proto::Request::Status).is_some());
}
