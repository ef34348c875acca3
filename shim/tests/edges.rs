//! Busy edges and leases at the shim, against the test's own agent end or a real kfdqd: the
//! launch that makes a process of a preempting class busy rings its doorbell without waiting for
//! the activity sample, and a preemption whose lease is not renewed is released by the shim on
//! its own.

mod common;

use std::time::{Duration, Instant};

use common::agent::{Conn, accept_with_lease, listen};
use common::*;
use kfdq::proto::{AgentMsg, Level, Target};
use kfdq::{GpuId, Pid};

/// The activity period of these tests: the longest the shim accepts, so that a sampled report
/// would come up to 100 ms after the sample that follows a command.
const SLOW_SAMPLING_US: &str = "100000";

/// `latency N GAP_MS KERNELS WG_US WGS` under the shim, talking to the test's agent end.
fn latency_app(emu: &Emu, sock: &std::path::Path, args: [&str; 5]) -> App {
    Launch::new(programs().get("latency"))
        .args(args)
        .env("KFDQ_CLASS", "latency")
        .env("KFDQ_SOCKET", sock.display().to_string())
        .env("KFDQ_ACTIVITY_US", SLOW_SAMPLING_US)
        .start(emu)
}

/// Waits for the registry to show `n` queues; returns the first one's id.
fn first_queue(c: &mut Conn, n: usize) -> u32 {
    let reg = c.wait_registry(&format!("{n} queue(s)"), |r| r.queues.len() >= n);
    reg.queues[0].queue_id.0
}

/// `flood WG_US WGS IN_FLIGHT STREAMS` in the batch class under the test's agent end.
fn flood_app(emu: &Emu, sock: &std::path::Path) -> App {
    let mut app = Launch::new(programs().get("flood"))
        .args(["20000", "2560", "2", "1"])
        .env("KFDQ_CLASS", "batch")
        .env("KFDQ_SOCKET", sock.display().to_string())
        .start(emu);
    app.wait_line("flooding");
    app
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn a_lease_that_is_not_renewed_releases_the_process_on_its_own() {
    let emu = mount();
    let dir = tempfile::tempdir().unwrap();
    let (l, sock) = listen(dir.path());
    let app = flood_app(&emu, &sock);
    let mut c = accept_with_lease(&l, Some(300));
    let q = first_queue(&mut c, 1);
    c.ok(|seq| AgentMsg::Preempt {
        seq,
        level: Level::Deactivate,
        target: Target::All,
        grace_period: 0,
    });
    assert!(!emu.queue(app.pid, q).active, "deactivated by the command");
    // The agent says nothing more (hung): the shim releases on its own after the lease.
    let reg = c.wait_registry("a lease expiry", |r| r.lease_expiries == 1);
    assert!(
        reg.queues.iter().all(|x| !x.deactivated),
        "released: {reg:#?}"
    );
    assert!(
        reg.warnings.iter().any(|w| w.contains("lease expired")),
        "says so: {:?}",
        reg.warnings
    );
    wait_for("the batch queue active again", || {
        emu.queue(app.pid, q).active
    });
    let done = emu.queue(app.pid, q).packets_done;
    wait_for("the batch job completing work", || {
        emu.queue(app.pid, q).packets_done > done
    });
    // The agent may preempt it again: the lease starts anew, and an expiry is said once.
    c.ok(|seq| AgentMsg::Preempt {
        seq,
        level: Level::Hold,
        target: Target::All,
        grace_period: 0,
    });
    let reg = c.wait_registry("a second lease expiry", |r| r.lease_expiries == 2);
    assert!(reg.streams.iter().all(|s| !s.held), "{reg:#?}");
    assert_eq!(
        reg.warnings
            .iter()
            .filter(|w| w.contains("lease expired"))
            .count(),
        1,
        "the warning is said once: {:?}",
        reg.warnings
    );
    app.stop();
    app.finish();
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn renewals_keep_a_preemption_past_its_lease() {
    let emu = mount();
    let dir = tempfile::tempdir().unwrap();
    let (l, sock) = listen(dir.path());
    let app = flood_app(&emu, &sock);
    // A lease of 1 s renewed every 100 ms, watched for 3 s (three leases).
    let mut c = accept_with_lease(&l, Some(1000));
    let q = first_queue(&mut c, 1);
    c.ok(|seq| AgentMsg::Preempt {
        seq,
        level: Level::Deactivate,
        target: Target::All,
        grace_period: 0,
    });
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        c.send(&AgentMsg::Renew {});
        assert!(!emu.queue(app.pid, q).active, "a renewed preemption holds");
        std::thread::sleep(Duration::from_millis(100));
    }
    c.ok(|seq| AgentMsg::Query { seq });
    let reg = c.registry.clone().unwrap();
    assert_eq!(reg.lease_expiries, 0, "{reg:#?}");
    c.ok(|seq| AgentMsg::Release {
        seq,
        level: Level::Deactivate,
        target: Target::All,
    });
    assert!(emu.queue(app.pid, q).active);
    app.stop();
    app.finish();
}

// With the real agent.

use common::kfdqd::{Agent, batch_flood, two_classes};
use nix::sys::signal::Signal;
use test_support::fake_shim::{FakeShim, Hello};

fn total_preempts(emu: &Emu) -> u64 {
    emu.stats().partitions.iter().map(|p| p.preempts).sum()
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn short_requests_preempt_the_batch_job_although_the_sampling_period_is_longer() {
    let emu = mount();
    let agent = Agent::start(&emu, &two_classes("deactivate"));
    let (lp, _) = batch_flood(&emu, &agent, "batch");
    // Three requests of one 40 ms dispatch, 300 ms apart, sampled every 100 ms: a sample
    // would see fewer than half of them; the launches' edges report each.
    let mut hp = latency_app(&emu, &agent.sock, ["3", "300", "1", "40000", "80"]);
    hp.wait_line("CHECKPOINT ready");
    agent.wait_connected(hp.pid, 1);
    agent.wait("the batch job running", |s| {
        s.processes
            .iter()
            .any(|p| p.pid == Pid(lp.pid) && p.state == "running")
    });
    // The latency shim passed its doorbell: its launches report the edges themselves.
    agent.wait("the latency shim's doorbell taken", |s| {
        s.counters.doorbells >= 1
    });
    let before = total_preempts(&emu);
    let edges_before = agent.status().counters.busy_edges;
    let rings_before = agent.status().counters.doorbell_edges;
    hp.release("ready");
    hp.wait_line("latency ");
    let st = agent.wait("three busy edges", |s| {
        s.counters.busy_edges >= edges_before + 3
    });
    // Each request preempted (one UPDATE_QUEUE) and released (another) the batch queue.
    wait_for("three preempt/release pairs", || {
        total_preempts(&emu) >= before + 6
    });
    let hp_class = st.classes.iter().find(|c| c.name == "latency").unwrap();
    assert!(hp_class.busy_periods >= 3, "{hp_class:?}");
    // Through the doorbell: each request's first launch rang it (the control thread, asleep
    // for 100 ms, did not report them).
    assert!(
        st.counters.doorbell_edges >= rings_before + 3,
        "{:?}",
        st.counters
    );
    let lp_class = st.classes.iter().find(|c| c.name == "batch").unwrap();
    assert!(lp_class.preempted_s > 0.0, "{lp_class:?}");
    hp.release("done");
    hp.finish();
    lp.stop();
    lp.finish();
}

/// A batch job that speaks the shim's protocol itself (no shim): one queue on `gpu`.
fn forged_shim(sock: &std::path::Path, class: &str, emu: &Emu, gpu: GpuId) -> FakeShim {
    let hello = Hello {
        effective_priority: 3,
        ..Hello::forger(class)
    };
    FakeShim::connect_as(sock, &hello, emu.root(), gpu)
}

/// latency > normal (level 1) > batch (level 2).
const LATENCY_NORMAL_BATCH: &str = "[agent]\nmin_preempt_interval_ms = 1\n\n[[class]]\nname = \"latency\"\nrank = 2\npriority = 13\nmatch = { env = true }\n\n[[class]]\nname = \"normal\"\nrank = 1\npriority = 8\nlevel = \"hold\"\nmatch = { env = true }\n\n[[class]]\nname = \"batch\"\nrank = 0\npriority = 3\nlevel = \"deactivate\"\nmatch = { env = true }\n";

/// The normal-class job was not preempted: running in the agent's status, its queue active.
fn assert_still_runs(emu: &Emu, st: &kfdq::proto::control::NodeStatus, normal: &App, q: u32) {
    let p = st
        .processes
        .iter()
        .find(|p| p.pid == Pid(normal.pid))
        .unwrap();
    assert_eq!(p.state, "running", "preempted by a batch process: {p:?}");
    assert!(emu.queue(normal.pid, q).active);
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn a_batch_process_that_forges_busy_edges_preempts_nobody() {
    let emu = mount();
    let agent = Agent::start(&emu, LATENCY_NORMAL_BATCH);
    let (normal, q) = batch_flood(&emu, &agent, "normal");
    let gpu = agent.process(normal.pid).unwrap().queues[0].gpu_id;
    let mut forger = forged_shim(&agent.sock, "batch", &emu, gpu);
    forger.busy();
    // The agent decides on the forged edge before it answers a later status request.
    let st = agent.wait("the forged busy queue seen", |s| {
        s.processes
            .iter()
            .any(|p| p.pid == Pid::this() && p.queues.iter().any(|q| q.busy))
    });
    assert_still_runs(&emu, &st, &normal, q);
    let reg = normal.registry_of(normal.pid).unwrap();
    assert!(reg.streams.iter().all(|s| !s.held), "{reg:#?}");
    drop(forger);
    normal.stop();
    normal.finish();
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn a_batch_process_that_rings_a_doorbell_preempts_nobody() {
    let emu = mount();
    let agent = Agent::start(&emu, LATENCY_NORMAL_BATCH);
    let (normal, q) = batch_flood(&emu, &agent, "normal");
    let gpu = agent.process(normal.pid).unwrap().queues[0].gpu_id;
    let mut forger = forged_shim(&agent.sock, "batch", &emu, gpu);
    let bell = forger.doorbell();
    let ignored = agent.status().counters.doorbell_ignored;
    nix::sys::socket::send(
        std::os::fd::AsRawFd::as_raw_fd(&bell),
        &[1],
        nix::sys::socket::MsgFlags::empty(),
    )
    .unwrap();
    let st = agent.wait("the batch process's ring ignored", |s| {
        s.counters.doorbell_ignored > ignored
    });
    let forged = st.processes.iter().find(|p| p.pid == Pid::this()).unwrap();
    assert!(forged.queues.iter().all(|q| !q.busy), "{forged:?}");
    assert_still_runs(&emu, &st, &normal, q);
    drop(forger);
    normal.stop();
    normal.finish();
}

/// The batch job deactivated by a busy latency flood; returns (latency, batch, batch queue).
fn latency_over_batch(emu: &Emu, agent: &Agent) -> (App, App, u32) {
    let (lp, q) = batch_flood(emu, agent, "batch");
    let (hp, _) = batch_flood(emu, agent, "latency");
    wait_for("the batch queue deactivated", || {
        !emu.queue(lp.pid, q).active
    });
    (hp, lp, q)
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn a_latency_process_killed_while_busy_releases_the_batch_job() {
    let emu = mount();
    let agent = Agent::start(&emu, &two_classes("deactivate"));
    let (mut hp, lp, q) = latency_over_batch(&emu, &agent);
    hp.child.kill().unwrap();
    let _ = hp.child.wait();
    wait_for("the batch queue active again", || {
        emu.queue(lp.pid, q).active
    });
    agent.wait("the batch job running in the agent's view", |s| {
        s.processes
            .iter()
            .any(|p| p.pid == Pid(lp.pid) && p.state == "running")
    });
    lp.stop();
    lp.finish();
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn a_latency_process_stopped_while_busy_releases_the_batch_job_after_its_reports_go_stale() {
    let emu = mount();
    let agent = Agent::start(&emu, &two_classes("deactivate"));
    let (hp, lp, q) = latency_over_batch(&emu, &agent);
    let hp_pid = nix::unistd::Pid::from_raw(hp.pid as i32);
    nix::sys::signal::kill(hp_pid, Signal::SIGSTOP).unwrap();
    wait_for("the batch queue active again", || {
        emu.queue(lp.pid, q).active
    });
    let st = agent.wait("the stale reports counted", |s| s.counters.stale_busy >= 1);
    let p = st.processes.iter().find(|p| p.pid == Pid(hp.pid)).unwrap();
    assert!(
        p.warnings.iter().any(|w| w.contains("said nothing")),
        "{p:?}"
    );
    // Continued, it is busy again and preempts again.
    nix::sys::signal::kill(hp_pid, Signal::SIGCONT).unwrap();
    wait_for("the batch queue deactivated again", || {
        !emu.queue(lp.pid, q).active
    });
    hp.stop();
    hp.finish();
    lp.stop();
    lp.finish();
}
