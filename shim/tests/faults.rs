//! Faults from the kernel: kfd-emu refuses chosen ioctls at run time (its `kfd-emu/faults`
//! control file, written as another process would) while a real kfdqd controls real shim'd
//! programs. Each test shows what the shim and the agent did and ends with the node consistent:
//! the agent's view agreeing with the emulator's, and no queue left preempted once no higher
//! class is busy.

mod common;

use std::io::Write as _;

use common::kfdqd::{Agent, agents_path, two_classes};
use common::*;
use kfdq::proto::Level;

/// A flood of 20 ms work-groups in `class`.
fn flood(emu: &Emu, agent: &Agent, class: &str) -> App {
    let mut app = Launch::new(programs().get("flood"))
        .args(["20000", "2560", "2"])
        .env("KFDQ_CLASS", class)
        .env("KFDQ_SOCKET", agent.sock.display().to_string())
        .start(emu);
    app.wait_line("flooding");
    app
}

/// Writes `spec` (a line, or `clear`) to the emulator's fault control file.
fn inject(emu: &Emu, spec: &str) {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(emu.path("kfd-emu/faults"))
        .expect("open kfd-emu/faults");
    f.write_all(spec.as_bytes())
        .unwrap_or_else(|e| panic!("inject {spec:?}: {e}"));
}

/// Failed calls of the faults in effect.
fn failed_calls(emu: &Emu) -> u64 {
    let f: test_support::emu::FaultsFile =
        serde_json::from_str(&emu.read("kfd-emu/faults")).unwrap();
    f.faults.iter().map(|f| f.failed).sum()
}

/// The agent's view of `pid`'s queue `q`: the level it is preempted at (`None`: running).
fn agent_view(agent: &Agent, pid: u32, q: u32) -> Option<Level> {
    agent
        .process(pid)
        .and_then(|p| p.queues.into_iter().find(|x| x.queue_id.0 == q))
        .and_then(|x| x.preempted)
}

/// The node is consistent: every queue of every process the agent lists is in the state the
/// agent shows (deactivated = inactive, suspended = suspended in the emulator), and, with no
/// latency process busy, none is preempted.
fn wait_consistent(emu: &Emu, agent: &Agent) {
    wait_for(
        "the agent's view agreeing with the emulator's, nobody preempted",
        || {
            let status = agent.status();
            let stats = emu.stats();
            status.processes.iter().all(|p| {
                p.queues.iter().all(|q| {
                    let Some(k) = stats
                        .queues
                        .iter()
                        .find(|k| k.pid == p.pid.0 && k.queue_id == q.queue_id.0)
                    else {
                        return false;
                    };
                    q.preempted.is_none() && k.active && !k.suspended
                })
            })
        },
    );
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn a_refused_deactivate_is_reported_and_tried_again() {
    let emu = mount();
    let agent = Agent::start(&emu, &two_classes("deactivate"));
    let lp = flood(&emu, &agent, "batch");
    agent.wait_connected(lp.pid, 1);
    let q = lp.queues().values().next().unwrap().queue_id;

    inject(&emu, "update_queue=EBUSY");
    let hp = flood(&emu, &agent, "latency");
    agent.wait_connected(hp.pid, 1);
    let s = agent.wait("the refused deactivate reported", |s| {
        s.counters.command_failures >= 1
            && s.processes
                .iter()
                .any(|p| p.pid.0 == lp.pid && p.warnings.iter().any(|w| w.contains("failed")))
    });
    assert!(failed_calls(&emu) >= 1);
    // Not forgotten, and not pretended: the queue runs, and the agent says so.
    assert!(emu.queue(lp.pid, q).active);
    assert_eq!(agent_view(&agent, lp.pid, q), None, "{s:#?}");

    // The kernel takes calls again: the agent tries again and the deactivate holds.
    inject(&emu, "clear");
    wait_for("the batch queue deactivated on a later try", || {
        !emu.queue(lp.pid, q).active && agent_view(&agent, lp.pid, q) == Some(Level::Deactivate)
    });
    hp.stop();
    hp.finish();
    wait_consistent(&emu, &agent);
    lp.stop();
    lp.finish();
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn a_refused_reactivation_is_retried_until_it_holds() {
    let emu = mount();
    let agent = Agent::start(&emu, &two_classes("deactivate"));
    let mut lp = flood(&emu, &agent, "batch");
    agent.wait_connected(lp.pid, 1);
    let q = lp.queues().values().next().unwrap().queue_id;
    let hp = flood(&emu, &agent, "latency");
    agent.wait_connected(hp.pid, 1);
    wait_for("the batch queue deactivated", || {
        !emu.queue(lp.pid, q).active
    });

    // Every UPDATE_QUEUE fails from now on; the latency job exits and the release is refused.
    inject(&emu, "update_queue=EIO");
    hp.stop();
    hp.finish();
    let reg = lp.wait_registry(lp.pid, "three refused releases", |r| {
        r.release_failures >= 3
    });
    assert!(
        reg.warnings
            .iter()
            .any(|w| w.starts_with("release failed, retrying")),
        "{:?}",
        reg.warnings
    );
    // The alarm reaches the agent (status and metrics), and its view is the kernel's.
    agent.wait("the refused releases counted", |s| {
        s.counters.release_failures >= 1
    });
    assert!(!emu.queue(lp.pid, q).active);
    assert_eq!(agent_view(&agent, lp.pid, q), Some(Level::Deactivate));
    let status = common::kfdqd::text(&agent.kfdq(&["status"], None));
    assert!(status.contains("releases the kernel refused"), "{status}");

    // The kernel takes calls again: the shim's retry (at most RETRY_MAX apart) releases it.
    let before = failed_calls(&emu);
    inject(&emu, "clear");
    wait_for("the batch queue active again", || {
        emu.queue(lp.pid, q).active
    });
    assert!(before >= 3, "{before} failed calls");
    wait_consistent(&emu, &agent);
    let done = emu.queue(lp.pid, q).packets_done;
    wait_for("the batch job working again", || {
        emu.queue(lp.pid, q).packets_done > done
    });
    lp.stop();
    lp.finish();
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn refused_suspends_and_resumes_are_reported_and_retried() {
    let emu = mount();
    let agent = Agent::start(&emu, &two_classes("suspend"));
    let mut lp = flood(&emu, &agent, "batch");
    agent.wait_connected(lp.pid, 1);
    let q = lp.queues().values().next().unwrap().queue_id;

    // SUSPEND_QUEUES refused (DBG_TRAP's other operations pass): reported, the queue runs.
    inject(&emu, "dbg_trap/suspend_queues=EIO");
    let hp = flood(&emu, &agent, "latency");
    agent.wait_connected(hp.pid, 1);
    agent.wait("the refused suspend reported", |s| {
        s.counters.command_failures >= 1
    });
    assert!(!emu.queue(lp.pid, q).suspended);
    assert_eq!(agent_view(&agent, lp.pid, q), None);
    inject(&emu, "clear");
    wait_for("the batch queue suspended on a later try", || {
        emu.queue(lp.pid, q).suspended && agent_view(&agent, lp.pid, q) == Some(Level::Suspend)
    });

    // RESUME_QUEUES refused twice: the shim retries until the resume holds.
    inject(&emu, "dbg_trap/resume_queues=EIO,times=2");
    hp.stop();
    hp.finish();
    wait_for("the batch queue resumed", || {
        !emu.queue(lp.pid, q).suspended
    });
    let reg = lp.wait_registry(lp.pid, "the refused resumes", |r| r.release_failures >= 1);
    assert!(reg.release_failures <= 2, "{reg:#?}");
    assert_eq!(failed_calls(&emu), 2);
    wait_consistent(&emu, &agent);
    lp.stop();
    lp.finish();
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn a_preempt_timeout_is_reported_and_leaves_nobody_preempted() {
    let emu = mount();
    // The agent's command times out (`direct.rs` has the batch job's own deactivate timing out).
    let agent = Agent::start(&emu, &agents_path("deactivate"));
    let lp = flood(&emu, &agent, "batch");
    agent.wait_connected(lp.pid, 1);
    let q = lp.queues().values().next().unwrap().queue_id;

    // The deactivate's preempt times out: ETIME, and the partition's reset loses every queue
    // on it (both jobs' work stops, as on hardware).
    inject(&emu, "update_queue=preempt-timeout,times=1");
    let hp = flood(&emu, &agent, "latency");
    agent.wait_connected(hp.pid, 1);
    let s = agent.wait("the timed-out deactivate reported", |s| {
        s.counters.command_failures >= 1
    });
    let p = s.processes.iter().find(|p| p.pid.0 == lp.pid).unwrap();
    assert!(
        p.warnings
            .iter()
            .any(|w| w.contains("imer expired") || w.contains("ETIME")),
        "{:?}",
        p.warnings
    );
    let stats = emu.stats();
    assert_eq!(stats.partitions[0].resets, 1);
    assert!(stats.queues.iter().all(|k| k.stopped), "{stats:#?}");
    // The jobs are lost with the reset (a real runtime aborts on the reset's event); the node
    // keeps nobody preempted once the latency job is gone.
    drop(hp);
    wait_consistent(&emu, &agent);
    assert!(emu.queue(lp.pid, q).active);
    drop(lp);
}

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn refused_queue_creation_and_destruction_leave_the_registry_consistent() {
    let emu = mount();
    let agent = Agent::start(&emu, &two_classes("deactivate"));

    // CREATE_QUEUE refused: the program sees the error (its hipStreamCreate fails) and no
    // queue appears anywhere.
    inject(&emu, "create_queue=ENOMEM,times=1");
    let app = Launch::new(programs().get("flood"))
        .args(["20000", "2560", "2"])
        .env("KFDQ_CLASS", "batch")
        .env("KFDQ_SOCKET", agent.sock.display().to_string())
        .start(&emu);
    let pid = app.pid;
    let mut child = app;
    let status = child.child.wait().unwrap();
    assert!(!status.success(), "hipStreamCreate should have failed");
    assert!(emu.queues_of(pid).is_empty());
    wait_for("the agent forgetting the failed process", || {
        agent.process(pid).is_none()
    });

    // DESTROY_QUEUE refused once at exit: the process still goes, and with it its queues.
    inject(&emu, "clear\ndestroy_queue=EBUSY,times=1");
    let lp = flood(&emu, &agent, "batch");
    agent.wait_connected(lp.pid, 1);
    let pid = lp.pid;
    lp.stop();
    drop(lp);
    wait_for(
        "the process and its queues gone from the emulator and the agent",
        || emu.queues_of(pid).is_empty() && agent.process(pid).is_none(),
    );
    wait_consistent(&emu, &agent);
}

/// `batch` (rank 0, level 3) taken through the agent's tracer, without the shim.
const TRACER: &str = "[agent]\nhysteresis_ms = 20\nmin_preempt_interval_ms = 1\n\n[tracer]\nscan_ms = 100\n\n[[class]]\nname = \"latency\"\nrank = 2\npriority = 13\nmatch = { env = true }\n\n[[class]]\nname = \"batch\"\nrank = 0\npriority = 3\nlevel = \"suspend\"\ncontrol = \"tracer\"\nmatch = { env = true }\n";

#[test]
#[cfg_attr(kfdq_skip_privileged, ignore = "needs root (KFDQ_SKIP_PRIVILEGED=1)")]
fn the_tracer_retries_a_refused_resume_until_it_holds() {
    let emu = mount();
    let agent = Agent::start(&emu, TRACER);
    let mut l = Launch::new(programs().get("flood"))
        .args(["2000", "64", "2"])
        .env("KFDQ_CLASS", "batch");
    l.preload = false;
    let mut lp = l.start(&emu);
    lp.wait_line("flooding");
    agent.wait("the batch job traced", |s| {
        s.processes
            .iter()
            .any(|p| p.pid.0 == lp.pid && !p.queues.is_empty())
    });
    let pid = lp.pid.to_string();
    let o = agent.kfdq(&["suspend", &pid, "--level", "suspend"], None);
    assert!(o.status.success(), "{}", common::kfdqd::text(&o));
    let suspended = |want: bool| {
        let qs = emu.queues_of(lp.pid);
        !qs.is_empty() && qs.iter().all(|q| q.suspended == want)
    };
    wait_for("its queues suspended", || suspended(true));

    // RESUME_QUEUES refused three times: the tracer retries until the resume holds.
    inject(&emu, "dbg_trap/resume_queues=EIO,times=3");
    let _ = agent.kfdq(&["resume", &pid], None);
    wait_for("its queues resumed", || suspended(false));
    assert_eq!(failed_calls(&emu), 3);
    agent.wait("the refused resumes counted", |s| {
        s.counters.release_failures >= 1
    });
    wait_consistent(&emu, &agent);
    lp.stop();
    drop(lp);
}
