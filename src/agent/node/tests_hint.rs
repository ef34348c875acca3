//! Request hints (`ShimMsg::Hint`, `hint.rs`) as (messages, time) -> commands: a hint is a busy
//! edge of its process, its end the idle edge; it holds only for a class that preempts others,
//! and for at most the bound without work, whatever the shim says.

use std::time::{Duration, Instant};

use super::fixture::decide as at;
use super::tests::{SERVING, TRAINING, ack, busy, node, preempt, registry, release, step};
use super::*;
use crate::ids::Pid;
use crate::proto::ShimMsg;

fn hint(on: bool) -> ShimMsg {
    ShimMsg::Hint { on, expired: false }
}

fn ms(t0: Instant, m: u64) -> Instant {
    t0 + Duration::from_millis(m)
}

fn state(n: &NodeState, pid: Pid, now: Instant) -> String {
    let st = n.status(now);
    st.processes
        .iter()
        .find(|p| p.pid == pid)
        .unwrap()
        .state
        .clone()
}

#[test]
fn a_hint_preempts_before_any_launch_and_its_end_releases() {
    let t0 = Instant::now();
    let mut n = node(t0);
    assert_eq!(step(&mut n, SERVING, hint(true), t0), [preempt(1)]);
    assert_eq!(step(&mut n, TRAINING, ack(1, true), t0), []);
    // Its shim's samples after the ring say the queue is idle: the hint keeps it busy.
    assert_eq!(step(&mut n, SERVING, busy(false), ms(t0, 1)), []);
    // The request's work comes and drains: no edge while the hint holds.
    assert_eq!(step(&mut n, SERVING, busy(true), ms(t0, 2)), []);
    assert_eq!(step(&mut n, SERVING, busy(false), ms(t0, 3)), []);
    assert_ne!(state(&n, TRAINING, ms(t0, 3)), "running");
    // The end is the idle edge.
    assert_eq!(step(&mut n, SERVING, hint(false), ms(t0, 4)), [release(2)]);
    let c = n.status(ms(t0, 4)).counters;
    assert_eq!((c.hints, c.hints_ignored, c.hint_expiries), (1, 0, 0));
}

#[test]
fn after_the_end_the_queue_draining_is_the_idle_edge() {
    let t0 = Instant::now();
    let mut n = node(t0);
    assert_eq!(step(&mut n, SERVING, hint(true), t0), [preempt(1)]);
    step(&mut n, TRAINING, ack(1, true), t0);
    assert_eq!(step(&mut n, SERVING, busy(true), ms(t0, 1)), []);
    // Ended while its work runs: still busy.
    assert_eq!(step(&mut n, SERVING, hint(false), ms(t0, 2)), []);
    assert_eq!(step(&mut n, SERVING, busy(false), ms(t0, 3)), [release(2)]);
}

#[test]
fn a_hint_of_a_class_that_preempts_nobody_is_ignored_and_counted() {
    let t0 = Instant::now();
    let mut n = node(t0);
    // The training class preempts nobody: its edges are off, it was told no hint bound.
    assert_eq!(step(&mut n, TRAINING, hint(true), t0), []);
    let st = n.status(t0);
    assert_eq!((st.counters.hints, st.counters.hints_ignored), (0, 1));
    let t = st.processes.iter().find(|p| p.pid == TRAINING).unwrap();
    assert!(
        t.warnings.iter().any(|w| w.contains("preempts nobody")),
        "{t:?}"
    );
    // The serving process is not preempted by it (nothing is sent to anyone), and its own
    // busy edge still preempts the training process as before.
    assert_eq!(step(&mut n, SERVING, busy(true), ms(t0, 1)), [preempt(1)]);
}

#[test]
fn a_hint_not_followed_by_work_expires_after_its_bound_whatever_the_shim_says() {
    let t0 = Instant::now();
    let mut n = node(t0);
    assert_eq!(step(&mut n, SERVING, hint(true), t0), [preempt(1)]);
    step(&mut n, TRAINING, ack(1, true), t0);
    // The shim keeps saying the hint is on (renewals) and its queue idle: neither extends it.
    for m in [10, 20, 30, 40] {
        assert_eq!(step(&mut n, SERVING, hint(true), ms(t0, m)), []);
        assert_eq!(step(&mut n, SERVING, busy(false), ms(t0, m)), []);
    }
    assert_eq!(at(&mut n, ms(t0, 49)), []);
    // 50 ms (the default bound) after the hint: expired, the training job released.
    assert_eq!(at(&mut n, ms(t0, 50)), [release(2)]);
    let st = n.status(ms(t0, 50));
    assert_eq!(st.counters.hint_expiries, 1);
    let s = st.processes.iter().find(|p| p.pid == SERVING).unwrap();
    assert!(
        s.warnings.iter().any(|w| w.contains("hint expired")),
        "{s:?}"
    );
    // Renewals of the expired hint change nothing; its end and a new hint start over.
    assert_eq!(step(&mut n, SERVING, hint(true), ms(t0, 60)), []);
    step(&mut n, TRAINING, ack(2, true), ms(t0, 60));
    assert_eq!(step(&mut n, SERVING, hint(false), ms(t0, 61)), []);
    assert_eq!(step(&mut n, SERVING, hint(true), ms(t0, 62)), [preempt(3)]);
    assert_eq!(n.status(ms(t0, 62)).counters.hints, 2);
}

#[test]
fn a_hint_never_ended_expires_its_bound_after_the_work_drained() {
    let t0 = Instant::now();
    let mut n = node(t0);
    assert_eq!(step(&mut n, SERVING, hint(true), t0), [preempt(1)]);
    step(&mut n, TRAINING, ack(1, true), t0);
    // Work for 80 ms (renewed every 20 ms): the hint holds through it.
    for m in [5, 25, 45, 65, 85] {
        assert_eq!(step(&mut n, SERVING, busy(true), ms(t0, m)), []);
    }
    assert_eq!(step(&mut n, SERVING, busy(false), ms(t0, 90)), []);
    assert_eq!(at(&mut n, ms(t0, 139)), []);
    assert_eq!(at(&mut n, ms(t0, 140)), [release(2)]);
    assert_eq!(n.status(ms(t0, 140)).counters.hint_expiries, 1);
}

#[test]
fn a_shim_that_expired_its_hint_is_counted_once() {
    let t0 = Instant::now();
    let mut n = node(t0);
    step(&mut n, SERVING, hint(true), t0);
    step(&mut n, TRAINING, ack(1, true), t0);
    let off = ShimMsg::Hint {
        on: false,
        expired: true,
    };
    assert_eq!(step(&mut n, SERVING, off, ms(t0, 49)), [release(2)]);
    assert_eq!(n.status(ms(t0, 49)).counters.hint_expiries, 1);
}

#[test]
fn a_hinting_process_that_goes_away_releases_everyone() {
    let t0 = Instant::now();
    let mut n = node(t0);
    assert_eq!(step(&mut n, SERVING, hint(true), t0), [preempt(1)]);
    step(&mut n, TRAINING, ack(1, true), t0);
    let mut out = Vec::new();
    n.gone(1, &mut out);
    n.decide(ms(t0, 1), &mut out);
    assert!(out.contains(&release(2)), "{out:?}");
}

#[test]
fn a_queue_created_under_a_hint_is_busy_with_it() {
    let t0 = Instant::now();
    let mut n = node(t0);
    assert_eq!(step(&mut n, SERVING, hint(true), t0), [preempt(1)]);
    step(&mut n, TRAINING, ack(1, true), t0);
    let two = registry(
        SERVING,
        "serving",
        vec![super::tests::queue(1, 13), super::tests::queue(2, 13)],
    );
    assert_eq!(step(&mut n, SERVING, two, ms(t0, 1)), []);
    let st = n.status(ms(t0, 1));
    let s = st.processes.iter().find(|p| p.pid == SERVING).unwrap();
    assert_eq!(s.queues.len(), 2);
    assert!(s.queues.iter().all(|q| q.busy), "{s:?}");
}

#[test]
fn the_class_sets_the_bound_and_a_bad_one_is_refused_naming_the_rule() {
    let t0 = Instant::now();
    let config =
        super::tests::config().replace("priority = 13\n", "priority = 13\nhint_timeout_ms = 5\n");
    let mut n = super::tests::node_with_edges(&config, t0, Some(5));
    assert_eq!(step(&mut n, SERVING, hint(true), t0), [preempt(1)]);
    step(&mut n, TRAINING, ack(1, true), t0);
    assert_eq!(at(&mut n, ms(t0, 4)), []);
    assert_eq!(at(&mut n, ms(t0, 5)), [release(2)]);
    for bad in ["0", "60001"] {
        let c = super::tests::config().replace(
            "priority = 13\n",
            &format!("priority = 13\nhint_timeout_ms = {bad}\n"),
        );
        let e = AgentConfig::parse(&c, None).unwrap_err().to_string();
        assert!(
            e.contains("hint_timeout_ms") && e.contains("1..=60000"),
            "{e}"
        );
    }
}
