//! The node as (messages, time) -> commands: no socket, no process; identities are given.

use std::time::{Duration, Instant};

use super::command::Command;
use super::reconcile::{RETRY_AFTER, Want, reconcile};
use super::*;
use crate::ids::{GpuId, Pid, QueueId};
use crate::policy::Run;
use crate::proto::{Level, QueueInfo, Registry, Request, ShimMsg, Target};

use super::fixture::{agent_file, connect, decide, identity, node_on};
pub(super) use super::fixture::{registry, step};

/// The agent's own commands (direct edges, on by default, are tested in `tests_direct.rs`): a
/// serving class over a training class preempted at level 2.
pub(super) fn config() -> String {
    agent_file(
        "direct_edges = false\nhysteresis_ms = 0\nmin_preempt_interval_ms = 0\n",
        &[
            ("serving", 2, 13, None),
            ("training", 0, 3, Some("deactivate")),
        ],
    )
}

const GPU: GpuId = GpuId(0x1000);
pub(super) const SERVING: Pid = Pid(100);
pub(super) const TRAINING: Pid = Pid(200);

/// A queue on the test partition with this effective priority.
pub(super) fn queue(queue_id: u32, priority: u32) -> QueueInfo {
    QueueInfo::new(QueueId(queue_id), GPU, 7, priority)
}

/// A node with a serving process (conn 1, one queue) and a training process (conn 2, two
/// queues), both registered at `t0`, and the first decision taken.
pub(super) fn node(t0: Instant) -> NodeState {
    node_with(&config(), t0)
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
    let mut n = node_on(config, &[GPU], 32, t0);
    let mut out = Vec::new();
    for (conn, pid, class, queues) in [
        (1, SERVING, "serving", vec![queue(1, 13)]),
        (2, TRAINING, "training", vec![queue(1, 3), queue(2, 3)]),
    ] {
        connect(&mut n, conn, identity(pid), class, queues, t0, &mut out);
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
        &config().replace("hysteresis_ms = 0", "hysteresis_ms = 20"),
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

/// A shim whose lease ran out fails open, and the agent's window goes with it (its registry then
/// shows none): the agent sends the window again for that newer registry, not only once per
/// process, so the batch job does not run unbounded for the rest of its session.
#[test]
fn a_window_the_shim_dropped_when_its_lease_ran_out_is_sent_again() {
    let t0 = Instant::now();
    let cfg = config().replace(
        "level = \"deactivate\"\n",
        "level = \"deactivate\"\nwindow = 4\n",
    );
    let mut n = node_on(&cfg, &[GPU], 32, t0);
    let mut out = Vec::new();
    connect(
        &mut n,
        2,
        identity(TRAINING),
        "training",
        vec![queue(1, 3)],
        t0,
        &mut out,
    );
    n.decide(t0, &mut out);
    let windows = |out: &[Out]| {
        out.iter()
            .filter(|o| {
                matches!(
                    o,
                    Out::Shim(
                        2,
                        crate::proto::AgentMsg::SetWindow {
                            dispatches: Some(4),
                            ..
                        }
                    )
                )
            })
            .count()
    };
    assert_eq!(windows(&out), 1, "the class's window, once: {out:?}");
    let with_window = |window| {
        ShimMsg::Registry(Registry {
            pid: TRAINING,
            class: Some("training".into()),
            queues: vec![queue(1, 3)],
            window,
            ..Registry::default()
        })
    };
    let t1 = t0 + Duration::from_millis(10);
    let mut out = step(&mut n, TRAINING, with_window(Some(4)), t1);
    out.extend(decide(&mut n, t1));
    assert_eq!(windows(&out), 0, "applied: nothing to send: {out:?}");
    // The lease ran out: the shim released everything, its window included.
    let t2 = t1 + Duration::from_millis(10);
    let mut out = step(&mut n, TRAINING, with_window(None), t2);
    out.extend(decide(&mut n, t2));
    assert_eq!(windows(&out), 1, "the window again: {out:?}");
    // Sent for that registry: not again until a newer one shows it still missing.
    let t3 = t2 + Duration::from_millis(10);
    assert_eq!(windows(&decide(&mut n, t3)), 0);
}
