//! The node as (messages, time) -> commands: no socket, no process; identities are given.

use std::time::{Duration, Instant};

use super::command::Command;
use super::reconcile::{RETRY_AFTER, Want, reconcile};
use super::*;
use crate::agent::identity::Identity;
use crate::ids::{GpuId, Pid, QueueId};
use crate::policy::Run;
use crate::proto::{Level, QueueInfo, Registry, Request, ShimMsg, Target};

// The agent's own commands (direct edges, on by default, are tested in `tests_direct.rs`).
pub(super) const CONFIG: &str = r#"
[agent]
direct_edges = false
hysteresis_ms = 0
min_preempt_interval_ms = 0

[[class]]
name = "serving"
rank = 2
priority = 13
match = { env = true }

[[class]]
name = "training"
rank = 0
priority = 3
level = "deactivate"
match = { env = true }
"#;

const GPU: GpuId = GpuId(0x1000);
pub(super) const SERVING: Pid = Pid(100);
pub(super) const TRAINING: Pid = Pid(200);

fn identity(pid: Pid) -> Identity {
    Identity {
        pid,
        start: 0,
        uid: 0,
        gid: 0,
        groups: vec![],
        exe: format!("/bin/p{pid}"),
        cgroup: String::new(),
        claim: crate::agent::identity::Claim::None,
        admin_channel: false,
    }
}

/// A queue on the test partition with this effective priority.
pub(super) fn queue(queue_id: u32, priority: u32) -> QueueInfo {
    QueueInfo {
        queue_id: QueueId(queue_id),
        gpu_id: GPU,
        requested_priority: 7,
        effective_priority: priority,
        ring_base: 0,
        ring_size: 4096,
        streams: vec![],
        deactivated: false,
        suspended: false,
        busy: false,
        window_waits: 0,
        window_stalls: 0,
    }
}

pub(super) fn registry(pid: Pid, class: &str, queues: Vec<QueueInfo>) -> ShimMsg {
    ShimMsg::Registry(Registry {
        pid,
        class: Some(class.into()),
        queues,
        ..Registry::default()
    })
}

/// A node with a serving process (conn 1, one queue) and a training process (conn 2, two
/// queues), both registered at `t0`, and the first decision taken.
pub(super) fn node(t0: Instant) -> NodeState {
    node_with(CONFIG, t0)
}

/// [`node`] with another agent file.
pub(super) fn node_with(config: &str, t0: Instant) -> NodeState {
    node_with_edges(config, t0, Some(50))
}

/// [`node_with`], the serving class's hint bound `hint_timeout_ms`.
pub(super) fn node_with_edges(
    config: &str,
    t0: Instant,
    hint_timeout_ms: Option<u32>,
) -> NodeState {
    let cfg = AgentConfig::parse(config, None).unwrap();
    let parts = vec![PartitionObs {
        gpu_id: GPU,
        resident_slots: 32,
        cus: 80,
    }];
    let mut n = NodeState::new(cfg, parts, String::new(), t0).unwrap();
    let mut out = Vec::new();
    for (conn, pid, class, queues) in [
        (1, SERVING, "serving", vec![queue(1, 13)]),
        (2, TRAINING, "training", vec![queue(1, 3), queue(2, 3)]),
    ] {
        n.hello(
            conn,
            identity(pid),
            crate::proto::VERSION,
            Some(class.into()),
            pid,
            &mut out,
        )
        .unwrap();
        n.shim_message(pid, registry(pid, class, queues), t0, &mut out);
    }
    n.decide(t0, &mut out);
    // The serving class preempts the training class: its shim is asked for busy edges.
    assert_eq!(
        out,
        [Out::Shim(
            1,
            crate::proto::AgentMsg::Edges {
                on: true,
                hint_timeout_ms
            }
        )],
        "nothing else to do while everything is idle"
    );
    n
}

/// Sends `msg` from `pid` at `now`, decides if it asks for it, and returns the commands.
pub(super) fn step(n: &mut NodeState, pid: Pid, msg: ShimMsg, now: Instant) -> Vec<Out> {
    let mut out = Vec::new();
    if n.shim_message(pid, msg, now, &mut out) {
        n.decide(now, &mut out);
    }
    out
}

pub(super) fn busy(b: bool) -> ShimMsg {
    ShimMsg::Activity {
        queue_id: QueueId(1),
        busy: b,
    }
}

pub(super) fn ack(seq: u64, ok: bool) -> ShimMsg {
    ShimMsg::Ack {
        seq,
        ok,
        detail: if ok { "done" } else { "EBUSY" }.into(),
    }
}

pub(super) fn preempt(seq: u64) -> Out {
    Out::Shim(
        2,
        AgentMsg::Preempt {
            seq,
            level: Level::Deactivate,
            target: Target::All,
            grace_period: 0,
        },
    )
}

pub(super) fn release(seq: u64) -> Out {
    Out::Shim(
        2,
        AgentMsg::Release {
            seq,
            level: Level::Deactivate,
            target: Target::All,
        },
    )
}

#[test]
fn a_busy_higher_class_preempts_and_its_idle_releases() {
    let t0 = Instant::now();
    let mut n = node(t0);
    assert_eq!(step(&mut n, SERVING, busy(true), t0), [preempt(1)]);
    // The same activity again changes nothing.
    assert_eq!(step(&mut n, SERVING, busy(true), t0), []);
    assert_eq!(step(&mut n, TRAINING, ack(1, true), t0), []);
    let t1 = t0 + Duration::from_millis(3);
    assert_eq!(step(&mut n, SERVING, busy(false), t1), [release(2)]);
    assert_eq!(n.unacknowledged(), 1);
    let st = n.status(t1);
    let training = st.processes.iter().find(|p| p.pid == TRAINING).unwrap();
    assert_eq!(training.state, "running");
    assert_eq!((st.counters.commands, st.counters.decisions), (2, 3));
    // Both edges were decided alone (the first decision looked at everything).
    assert_eq!(st.counters.edge_decisions, 2);
    // A registry makes the next decision a full one.
    let reg = registry(TRAINING, "training", vec![queue(1, 3), queue(2, 3)]);
    assert_eq!(step(&mut n, TRAINING, reg, t1), []);
    assert_eq!(n.status(t1).counters.edge_decisions, 2);
}

#[test]
fn a_lease_that_ran_out_is_not_preempted_again_by_a_hold_alone() {
    // The agent was hung: the training shim's lease ran out and it released itself. Back, the
    // agent reads that registry after the serving class went idle: the release hold would keep a
    // preempted process preempted, but it does not preempt again one that already runs (the
    // failsafe test's flake: a preempt and a release 20 ms apart for nothing). A busy serving
    // class still preempts it.
    let t0 = Instant::now();
    let mut n = node_with(
        &CONFIG.replace("hysteresis_ms = 0", "hysteresis_ms = 20"),
        t0,
    );
    assert_eq!(step(&mut n, SERVING, busy(true), t0), [preempt(1)]);
    assert_eq!(step(&mut n, TRAINING, ack(1, true), t0), []);
    let ms = |m| t0 + Duration::from_millis(m);
    assert_eq!(step(&mut n, SERVING, busy(false), ms(1)), [], "held");
    let expired = |n: u64| {
        ShimMsg::Registry(Registry {
            pid: TRAINING,
            class: Some("training".into()),
            queues: vec![queue(1, 3), queue(2, 3)],
            lease_expiries: n,
            ..Registry::default()
        })
    };
    assert_eq!(step(&mut n, TRAINING, expired(1), ms(2)), []);
    let st = n.status(ms(2));
    let training = st.processes.iter().find(|p| p.pid == TRAINING).unwrap();
    assert_eq!(training.state, "running");
    assert_eq!(st.counters.lease_expiries, 1);
    // The hold's end has nothing left to do.
    let mut out = Vec::new();
    n.decide(ms(30), &mut out);
    assert_eq!(out, []);
    // A busy serving class preempts it again; a lease running out while it is busy is
    // followed by a preempt at once.
    assert_eq!(step(&mut n, SERVING, busy(true), ms(31)), [preempt(2)]);
    assert_eq!(step(&mut n, TRAINING, ack(2, true), ms(31)), []);
    assert_eq!(step(&mut n, TRAINING, expired(2), ms(32)), [preempt(3)]);
}

#[test]
fn preempts_are_counted_once_per_queue_changed() {
    let t0 = Instant::now();
    let mut n = node(t0);
    step(&mut n, SERVING, busy(true), t0);
    // Level 2: one UPDATE_QUEUE (a device-wide preempt) per queue.
    assert_eq!(n.status(t0).counters.preempts, 2);
    step(&mut n, TRAINING, ack(1, true), t0);
    // The shim reports one queue deactivated and one created since: the new one is preempted
    // again (the shim skips the one already at the level), once per registry.
    let mut q1 = queue(1, 3);
    q1.deactivated = true;
    let reg = registry(TRAINING, "training", vec![q1.clone(), queue(2, 3)]);
    assert_eq!(step(&mut n, TRAINING, reg, t0), [preempt(2)]);
    assert_eq!(step(&mut n, SERVING, busy(true), t0), []);
    let st = n.status(t0);
    assert_eq!(st.counters.preempts, 3);
    assert_eq!(st.partitions[0].preempts, 3);
    assert_eq!(st.counters.preempts_per_s, 3.0);
    step(&mut n, TRAINING, ack(2, true), t0);
    // Releasing counts the queues at the level.
    let t1 = t0 + Duration::from_secs(2);
    let mut q2 = queue(2, 3);
    q2.deactivated = true;
    let reg = registry(TRAINING, "training", vec![q1, q2]);
    // The serving shim says "still busy" now and then (else its reports go stale); the
    // preemption's lease is renewed.
    assert_eq!(step(&mut n, SERVING, busy(true), t1), []);
    assert_eq!(
        step(&mut n, TRAINING, reg, t1),
        [Out::Shim(2, crate::proto::AgentMsg::Renew {})]
    );
    // (The policy saw the serving queue busy at t1: idle is news after it.)
    let t2 = t1 + Duration::from_millis(1);
    assert_eq!(step(&mut n, SERVING, busy(false), t2), [release(3)]);
    assert_eq!(n.status(t2).counters.preempts, 5);
}

#[test]
fn a_failed_level_is_not_retried_until_its_time() {
    let t0 = Instant::now();
    let mut n = node(t0);
    step(&mut n, SERVING, busy(true), t0);
    // The preempt failed: the process runs and nothing is sent until RETRY_AFTER.
    assert_eq!(step(&mut n, TRAINING, ack(1, false), t0), []);
    assert!(n.next_decide.is_some_and(|d| d <= t0 + RETRY_AFTER));
    let st = n.status(t0);
    let training = st.processes.iter().find(|p| p.pid == TRAINING).unwrap();
    assert_eq!(
        (training.state.as_str(), st.counters.command_failures),
        ("running", 1)
    );
    assert_eq!(training.warnings, ["command failed: EBUSY"]);
    // The serving shim keeps saying "busy" (else its reports go stale); just before
    // RETRY_AFTER the level is not retried, at RETRY_AFTER it is.
    let almost = t0 + RETRY_AFTER - Duration::from_millis(1);
    assert_eq!(step(&mut n, SERVING, busy(true), almost), []);
    let mut out = Vec::new();
    n.decide(almost, &mut out);
    assert_eq!(out, []);
    let t = t0 + RETRY_AFTER;
    assert_eq!(step(&mut n, SERVING, busy(true), t), []);
    n.decide(t, &mut out);
    assert_eq!(out, [preempt(2)]);
}

#[test]
fn a_manual_suspend_answers_once_acknowledged_or_at_its_deadline() {
    let t0 = Instant::now();
    let mut n = node(t0);
    let root = identity(Pid(1));
    let mut out = Vec::new();
    let req = Request::Suspend {
        pid: TRAINING,
        level: Level::Deactivate,
    };
    n.control(9, &root, req.clone(), t0, &mut out);
    assert_eq!(out, [preempt(1)], "the reply waits for the ack");
    assert_eq!(n.waiters.deadline(), Some(t0 + ACK_TIMEOUT));
    // The preemption's lease is renewed a quarter lease later.
    assert_eq!(n.deadline(), Some(t0 + n.cfg.lease / 4));
    let out = step(&mut n, TRAINING, ack(1, true), t0);
    assert!(
        matches!(&out[..], [Out::Control(9, Reply::Done { detail })] if detail.contains("done")),
        "{out:?}"
    );
    // Resume, never acknowledged: the reply says so at the deadline.
    let mut out = Vec::new();
    n.control(9, &root, Request::Resume { pid: TRAINING }, t0, &mut out);
    assert_eq!(out, [release(2)]);
    let mut out = Vec::new();
    n.decide(t0 + ACK_TIMEOUT, &mut out);
    assert!(
        matches!(&out[..], [Out::Control(9, Reply::Error { error })] if error.contains("did not acknowledge")),
        "{out:?}"
    );
}

#[test]
fn a_priority_is_sent_once_per_registry_that_lacks_it() {
    let t0 = Instant::now();
    let mut n = node(t0);
    let mut out = Vec::new();
    let req = Request::SetPriority {
        pid: SERVING,
        priority: 15,
    };
    n.control(9, &identity(Pid(1)), req, t0, &mut out);
    let set = Out::Shim(
        1,
        AgentMsg::SetPriority {
            seq: 1,
            target: Target::All,
            priority: 15,
        },
    );
    assert_eq!(out, [set]);
    step(&mut n, SERVING, ack(1, true), t0);
    let mut out = Vec::new();
    n.decide(t0, &mut out);
    assert_eq!(out, [], "sent for this registry already");
    let out = step(
        &mut n,
        SERVING,
        registry(SERVING, "serving", vec![queue(1, 13)]),
        t0,
    );
    assert!(
        matches!(
            &out[..],
            [Out::Shim(
                1,
                AgentMsg::SetPriority {
                    seq: 2,
                    priority: 15,
                    ..
                }
            )]
        ),
        "{out:?}"
    );
}

#[test]
fn one_step_releases_the_old_level_before_preempting_at_the_new() {
    let t0 = Instant::now();
    let mut n = node(t0);
    let p = n.procs.get_mut(&TRAINING).unwrap();
    p.applied = Run::Preempted(Level::Hold);
    let want = Want {
        run: Some((Run::Preempted(Level::Deactivate), "why".into())),
        ..Want::default()
    };
    let s = reconcile(p, want.clone(), t0);
    assert_eq!(
        s.run.iter().collect::<Vec<_>>(),
        [
            Command::Release(Level::Hold),
            Command::Preempt(Level::Deactivate)
        ]
    );
    assert_eq!(
        (p.applied, p.reason().as_str()),
        (Run::Preempted(Level::Deactivate), "why")
    );
    for (seq, c) in (10..).zip(s.commands()) {
        p.sent(seq, &c, t0);
    }
    // Sent: the same want again sends nothing (the preempt is in flight, and the registry is
    // not newer than it).
    assert_eq!(reconcile(p, want, t0).commands().count(), 0);
}

/// Timing probe (not a test of behaviour): `cargo test --release -p kfdq --lib timing_probe --
/// --ignored --nocapture`. Knobs (below): `PROBE_N` decisions, `PROBE_COLD` caches,
/// `PROBE_SLEEP` and `PROBE_GAP_US` a pause before each decision, `PROBE_FLOOR` only the
/// commands' sending in place of the decision, `PROBE_PROCS` the number of processes.
#[test]
#[ignore = "a timing probe, run by hand"]
fn timing_probe() {
    let t0 = Instant::now();
    let cfg = AgentConfig::parse(
        &CONFIG.replace("level = \"deactivate\"", "level = \"hold\""),
        None,
    )
    .unwrap();
    let parts = vec![PartitionObs {
        gpu_id: GPU,
        resident_slots: 1024,
        cus: 80,
    }];
    let mut n = NodeState::new(cfg, parts, String::new(), t0).unwrap();
    let mut out = Vec::new();
    // PROBE_PROCS: how many processes (default 64: one serving, the rest training).
    let procs: u32 = std::env::var("PROBE_PROCS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64);
    for i in 0..procs.max(2) {
        let pid = Pid(1000 + i);
        let class = if i == 0 { "serving" } else { "training" };
        n.hello(
            u64::from(i) + 1,
            identity(pid),
            crate::proto::VERSION,
            Some(class.into()),
            pid,
            &mut out,
        )
        .unwrap();
        let qs = (1..=8).map(|q| queue(q, 3)).collect();
        n.shim_message(pid, registry(pid, class, qs), t0, &mut out);
    }
    n.decide(t0, &mut out);
    let (mut times, mut after) = (Vec::new(), Vec::new());
    // PROBE_COLD=1: 64 MiB are written between toggles, so each decision starts with cold
    // caches (as in the agent, after the 63 clients it woke ran on the same CPUs).
    let mut evict = match std::env::var_os("PROBE_COLD") {
        Some(_) => vec![0u8; 64 << 20],
        None => Vec::new(),
    };
    // PROBE_SLEEP=1: asleep before each decision, as the agent between toggles (its CPU
    // idle, or another's), without touching any memory; PROBE_SLEEP=spin: spinning on the
    // clock instead (the CPU never idles). For PROBE_GAP_US µs (default 20000, the bench's
    // pause).
    let sleep = std::env::var("PROBE_SLEEP").ok();
    let gap = Duration::from_micros(
        std::env::var("PROBE_GAP_US")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(20_000),
    );
    let floor: Vec<(Pid, crate::agent::conn::ConnId)> = match std::env::var_os("PROBE_FLOOR") {
        Some(_) => n
            .procs
            .iter()
            .filter(|(pid, _)| **pid != Pid(1000))
            .map(|(pid, p)| (*pid, p.conn))
            .collect(),
        None => Vec::new(),
    };
    // The commands of the last toggle, acknowledged after it: both buffers keep their
    // capacity, as the server's outbox does.
    let mut sent = Vec::new();
    let toggles: u32 = std::env::var("PROBE_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(400);
    for t in 0..toggles {
        out.clear();
        let now = t0 + Duration::from_millis(u64::from(t) * 20 + 20);
        n.shim_message(
            Pid(1000),
            ShimMsg::Activity {
                queue_id: QueueId(1),
                busy: t % 2 == 0,
            },
            now,
            &mut out,
        );
        for (i, b) in evict.iter_mut().enumerate().step_by(64) {
            *b = b.wrapping_add(i as u8);
        }
        std::hint::black_box(&evict);
        match sleep.as_deref() {
            Some("spin") => {
                let until = Instant::now() + gap;
                while Instant::now() < until {
                    std::hint::spin_loop();
                }
            }
            Some(_) => std::thread::sleep(gap),
            None => {}
        }
        // As the server: the commands timed, the times accounted after.
        let s = Instant::now();
        if floor.is_empty() {
            n.decide_commands(now, &mut out);
        } else {
            // PROBE_FLOOR: only the commands' part of today's decision, the 63 commands
            // numbered, built and logged by the real `send_to` (no policy, no reconcile).
            let cmd = if t % 2 == 0 {
                Command::Preempt(Level::Hold)
            } else {
                Command::Release(Level::Hold)
            };
            for &(pid, conn) in &floor {
                n.send_to(pid, conn, cmd.clone(), now, &mut out);
            }
        }
        times.push(s.elapsed().as_secs_f64() * 1e6);
        let s = Instant::now();
        n.after_write(now, &mut out);
        after.push(s.elapsed().as_secs_f64() * 1e6);
        // acks
        std::mem::swap(&mut out, &mut sent);
        for o in sent.drain(..) {
            if let Out::Shim(conn, m) = o {
                let seq = match m {
                    crate::proto::AgentMsg::Preempt { seq, .. }
                    | crate::proto::AgentMsg::Release { seq, .. } => seq,
                    _ => continue,
                };
                let pid = Pid(1000 + conn as u32 - 1);
                n.shim_message(
                    pid,
                    ShimMsg::Ack {
                        seq,
                        ok: true,
                        detail: String::new(),
                    },
                    now,
                    &mut out,
                );
            }
        }
    }
    times.sort_by(f64::total_cmp);
    after.sort_by(f64::total_cmp);
    let n = times.len();
    eprintln!(
        "decide p50 {:.1} p99 {:.1} us; after the write p50 {:.1} p99 {:.1} us",
        times[n / 2],
        times[n * 99 / 100],
        after[n / 2],
        after[n * 99 / 100]
    );
}

#[test]
fn a_serving_process_that_says_nothing_while_busy_goes_stale_and_releases() {
    let t0 = Instant::now();
    let mut n = node(t0);
    // Busy as its registry says (no activity message): its busy state counts all the same.
    let mut q = queue(1, 13);
    q.busy = true;
    let reg = registry(SERVING, "serving", vec![q]);
    assert_eq!(step(&mut n, SERVING, reg, t0), [preempt(1)]);
    step(&mut n, TRAINING, ack(1, true), t0);
    let stale = t0 + crate::proto::BUSY_STALE;
    assert!(
        n.deadline().is_some_and(|d| d <= stale),
        "{:?}",
        n.deadline()
    );
    let mut out = Vec::new();
    n.decide(stale, &mut out);
    assert_eq!(n.status(stale).counters.stale_busy, 1);
    let later = stale + Duration::from_millis(50);
    n.decide(later, &mut out);
    assert!(out.contains(&release(2)), "{out:?}");
}
