//! Direct edges at the node (`direct.rs`): who gets which board, what the agent leaves to a
//! watch, its fallback, and a writer's slot cleared when it goes.

use std::time::{Duration, Instant};

use super::fixture::{agent_file, connect, decide, identity, node_on};
use super::*;
use crate::ids::{GpuId, Pid, QueueId};
use crate::proto::{Level, QueueInfo, ShimMsg};

/// A latency class over a batch class that preempts itself at level 2 on the board.
fn config() -> String {
    agent_file(
        "direct_edges = true\nhysteresis_ms = 20\nmin_preempt_interval_ms = 0\n",
        &[
            ("latency", 2, 13, None),
            ("batch", 0, 3, Some("deactivate")),
        ],
    )
}

const A: GpuId = GpuId(0x1000);
const B: GpuId = GpuId(0x2000);
const HP: Pid = Pid(100);
const LP: Pid = Pid(101);
const LP_OTHER: Pid = Pid(102);

/// Connection `conn`: `pid` in `class` with queue 1 on `gpu`.
fn join(n: &mut NodeState, conn: u64, pid: Pid, class: &str, gpu: GpuId, t: Instant) {
    let effective = if class == "latency" { 13 } else { 3 };
    let queues = vec![QueueInfo::new(QueueId(1), gpu, 7, effective)];
    connect(n, conn, identity(pid), class, queues, t, &mut Vec::new());
}

fn node(t0: Instant) -> NodeState {
    let mut n = node_on(&config(), &[A, B], 64, t0);
    join(&mut n, 1, HP, "latency", A, t0);
    join(&mut n, 2, LP, "batch", A, t0);
    join(&mut n, 3, LP_OTHER, "batch", B, t0);
    n
}

fn msg(n: &mut NodeState, pid: Pid, m: ShimMsg, t: Instant) {
    let mut out = Vec::new();
    n.shim_message(pid, m, t, &mut out);
}

fn busy(n: &mut NodeState, on: bool, t: Instant) {
    msg(
        n,
        HP,
        ShimMsg::Activity {
            queue_id: QueueId(1),
            busy: on,
        },
        t,
    );
}

fn self_level(n: &mut NodeState, level: Option<Level>, t: Instant) {
    msg(
        n,
        LP,
        ShimMsg::SelfLevel {
            board: 0,
            level,
            ok: true,
            detail: String::new(),
        },
        t,
    );
}

fn run_cmds(out: &[Out], conn: u64) -> usize {
    out.iter()
        .filter(|o| {
            matches!(o, Out::Shim(c, AgentMsg::Preempt { .. } | AgentMsg::Release { .. }) if *c == conn)
        })
        .count()
}

/// The node's first decisions: the latency writer's slot, then the watch of the batch job on
/// its partition (none for the one on the other partition).
fn subscribed(t0: Instant) -> NodeState {
    let mut n = node(t0);
    let out = decide(&mut n, t0);
    assert!(
        out.iter().any(|o| matches!(
            o,
            Out::ShimBoard {
                conn: 1,
                msg: AgentMsg::BoardWriter { board: 0, slot: 0 },
                writable: true,
                ..
            }
        )),
        "{out:#?}"
    );
    // No watcher gets the board before its writer sealed it.
    assert!(
        !out.iter().any(|o| matches!(
            o,
            Out::ShimBoard {
                msg: AgentMsg::Watch { .. },
                ..
            }
        )),
        "{out:#?}"
    );
    msg(&mut n, HP, ShimMsg::BoardSealed { board: 0 }, t0);
    let out = decide(&mut n, t0);
    let watches: Vec<_> = out
        .iter()
        .filter_map(|o| match o {
            Out::ShimBoard {
                conn,
                msg: AgentMsg::Watch { slots, level, .. },
                writable,
                ..
            } => Some((*conn, slots.clone(), *level, *writable)),
            _ => None,
        })
        .collect();
    assert_eq!(watches, vec![(2, vec![0], Level::Deactivate, false)]);
    n
}

#[test]
fn a_watch_applies_and_undoes_the_level_and_the_agent_sends_neither() {
    let t0 = Instant::now();
    let mut n = subscribed(t0);
    let t1 = t0 + Duration::from_millis(5);
    busy(&mut n, true, t1);
    let out = decide(&mut n, t1);
    assert_eq!(run_cmds(&out, 2), 0, "left to the watch: {out:#?}");
    self_level(
        &mut n,
        Some(Level::Deactivate),
        t1 + Duration::from_micros(300),
    );
    let st = n.status(t1 + Duration::from_millis(1));
    let lp = st.processes.iter().find(|p| p.pid == LP).unwrap();
    assert_ne!(lp.state, "running", "{lp:?}");
    assert_eq!(st.counters.direct_preempts, 1);
    // Past the grace: the agent still sends nothing (the watch applied it).
    let t2 = t1 + Duration::from_millis(15);
    let out = decide(&mut n, t2);
    assert_eq!(run_cmds(&out, 2), 0, "{out:#?}");
    // Idle, past the hold: no release from the agent; the watch's own release is taken.
    busy(&mut n, false, t2);
    let out = decide(&mut n, t2);
    assert_eq!(run_cmds(&out, 2), 0, "{out:#?}");
    let t3 = t2 + Duration::from_millis(25);
    let out = decide(&mut n, t3);
    assert_eq!(run_cmds(&out, 2), 0, "{out:#?}");
    self_level(&mut n, None, t3);
    let st = n.status(t3);
    let lp = st.processes.iter().find(|p| p.pid == LP).unwrap();
    assert_eq!(lp.state, "running", "{lp:?}");
    assert_eq!(st.counters.direct_releases, 1);
}

#[test]
fn a_watch_that_does_not_report_in_time_gets_the_agents_preempt() {
    let t0 = Instant::now();
    let mut n = subscribed(t0);
    let t1 = t0 + Duration::from_millis(5);
    busy(&mut n, true, t1);
    assert_eq!(run_cmds(&decide(&mut n, t1), 2), 0);
    let due = n.deadline().unwrap();
    assert!(
        due <= t1 + super::direct::SELF_GRACE,
        "decides again by the grace"
    );
    let out = decide(&mut n, t1 + super::direct::SELF_GRACE);
    assert!(
        out.iter().any(|o| matches!(
            o,
            Out::Shim(
                2,
                AgentMsg::Preempt {
                    level: Level::Deactivate,
                    ..
                }
            )
        )),
        "{out:#?}"
    );
}

#[test]
fn a_writer_that_goes_has_its_slot_cleared_and_the_watchers_told() {
    let t0 = Instant::now();
    let mut n = subscribed(t0);
    busy(&mut n, true, t0);
    let mut out = Vec::new();
    n.gone(1, &mut out);
    assert!(
        out.iter()
            .any(|o| matches!(o, Out::ClearSlot { board: 0, slot: 0 })),
        "{out:#?}"
    );
    assert!(
        out.iter()
            .any(|o| matches!(o, Out::Shim(2, AgentMsg::BoardChanged {}))),
        "{out:#?}"
    );
    // With no writer left, the batch job stops watching.
    let out = decide(&mut n, t0 + Duration::from_millis(1));
    assert!(
        out.iter()
            .any(|o| matches!(o, Out::Shim(2, AgentMsg::Unwatch { board: 0 }))),
        "{out:#?}"
    );
}

#[test]
fn direct_edges_off_hands_out_no_board() {
    let t0 = Instant::now();
    let cfg = AgentConfig::parse(
        &config().replace("direct_edges = true", "direct_edges = false"),
        None,
    )
    .unwrap();
    let mut n = node(t0);
    let mut out = Vec::new();
    n.reload(cfg).unwrap();
    n.decide(t0, &mut out);
    assert!(
        !out.iter()
            .any(|o| matches!(o, Out::ShimBoard { .. } | Out::ClearSlot { .. })),
        "{out:#?}"
    );
}

#[test]
fn direct_edges_are_on_by_default() {
    let unset = config().replace("direct_edges = true\n", "");
    assert_ne!(
        unset,
        config(),
        "the test's configuration sets direct_edges"
    );
    assert!(AgentConfig::parse(&unset, None).unwrap().direct_edges);
}

#[test]
fn edges_false_is_refused_with_the_fix_and_edges_true_is_ignored() {
    // The activity-samples-only mode is gone: asking for it is an error naming the fix.
    let e = AgentConfig::parse(
        &config().replace("[agent]\n", "[agent]\nedges = false\n"),
        None,
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("edges = false is no longer supported") && e.contains("remove the line"),
        "{e}"
    );
    // What `edges = true` asked for is how the agent runs: an old configuration still loads,
    // with its other settings.
    let cfg = AgentConfig::parse(
        &config().replace("[agent]\n", "[agent]\nedges = true\n"),
        None,
    )
    .unwrap();
    assert!(cfg.direct_edges);
}

#[test]
fn an_edge_the_watch_cannot_see_gets_the_agents_preempt_at_once() {
    let t0 = Instant::now();
    let mut n = subscribed(t0);
    // A second latency process on the batch job's partition: not in its watch yet.
    let t1 = t0 + Duration::from_millis(5);
    join(&mut n, 4, Pid(103), "latency", A, t1);
    msg(
        &mut n,
        Pid(103),
        ShimMsg::Activity {
            queue_id: QueueId(1),
            busy: true,
        },
        t1,
    );
    let out = decide(&mut n, t1);
    assert!(
        out.iter().any(|o| matches!(
            o,
            Out::Shim(
                2,
                AgentMsg::Preempt {
                    level: Level::Deactivate,
                    ..
                }
            )
        )),
        "{out:#?}"
    );
    // Its own board is watched once it sealed it.
    msg(&mut n, Pid(103), ShimMsg::BoardSealed { board: 1 }, t1);
    let out = decide(&mut n, t1);
    assert!(
        out.iter().any(|o| matches!(
            o,
            Out::ShimBoard { conn: 2, msg: AgentMsg::Watch { board: 1, slots, .. }, .. } if slots == &[0]
        )),
        "{out:#?}"
    );
}

#[test]
fn a_level_3_class_watches_at_level_3_and_a_level_1_class_not_at_all() {
    let t0 = Instant::now();
    let watch_level = |level: &str| {
        let cfg = AgentConfig::parse(
            &config().replace("\"deactivate\"", &format!("\"{level}\"")),
            None,
        )
        .unwrap();
        let mut n = node(t0);
        n.reload(cfg).unwrap();
        decide(&mut n, t0);
        msg(&mut n, HP, ShimMsg::BoardSealed { board: 0 }, t0);
        decide(&mut n, t0).into_iter().find_map(|o| match o {
            Out::ShimBoard {
                conn: 2,
                msg: AgentMsg::Watch { level, .. },
                ..
            } => Some(level),
            _ => None,
        })
    };
    assert_eq!(watch_level("suspend"), Some(Level::Suspend));
    assert_eq!(watch_level("hold"), None);
}

/// Without watches (a level-1 class is not watched) the edge decision skips marking the
/// watchers (`direct_cover`): its commands and sequence numbers are those of a node without
/// direct edges, edge after edge. With a watch the marking runs (counted watchers).
#[test]
fn without_watches_the_edge_decision_sends_what_it_sends_without_direct_edges() {
    let t0 = Instant::now();
    let hold = |direct: bool| {
        let cfg = config()
            .replace("\"deactivate\"", "\"hold\"")
            .replace("hysteresis_ms = 20", "hysteresis_ms = 0")
            .replace("direct_edges = true", &format!("direct_edges = {direct}"));
        let mut n = node(t0);
        n.reload(AgentConfig::parse(&cfg, None).unwrap()).unwrap();
        n
    };
    let run_msgs = |out: Vec<Out>| -> Vec<Out> {
        out.into_iter()
            .filter(|o| {
                matches!(
                    o,
                    Out::Shim(_, AgentMsg::Preempt { .. } | AgentMsg::Release { .. })
                )
            })
            .collect()
    };
    let (mut on, mut off) = (hold(true), hold(false));
    let mut t = t0;
    for k in 0..6u64 {
        if k > 0 {
            busy(&mut on, k % 2 == 1, t);
            busy(&mut off, k % 2 == 1, t);
        }
        let (a, b) = (decide(&mut on, t), decide(&mut off, t));
        assert_eq!(on.direct.watchers, 0);
        assert_eq!(run_msgs(a), run_msgs(b), "toggle {k}");
        t += Duration::from_millis(100);
    }
    assert!(on.counters.edge_decisions >= 3, "{:?}", on.counters);
    assert_eq!(subscribed(t0).direct.watchers, 1);
}

/// The value of the metric line that starts with `series` in a scrape.
fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
}

#[test]
fn a_watchs_preempt_and_release_count_where_the_agents_commands_do() {
    let t0 = Instant::now();
    let mut n = subscribed(t0);
    let t1 = t0 + Duration::from_millis(5);
    busy(&mut n, true, t1);
    assert_eq!(run_cmds(&decide(&mut n, t1), 2), 0, "left to the watch");
    self_level(&mut n, Some(Level::Deactivate), t1);
    let st = n.status(t1);
    // One queue deactivated on partition A: one device-wide preempt there, none on B.
    assert_eq!(st.counters.direct_preempts, 1);
    assert_eq!(st.counters.preempts, 1, "{:?}", st.counters);
    assert!(st.counters.preempts_per_s > 0.0, "{:?}", st.counters);
    let on = |st: &crate::proto::control::NodeStatus, g: GpuId| {
        st.partitions
            .iter()
            .find(|p| p.gpu_id == g)
            .map(|p| p.preempts)
    };
    assert_eq!((on(&st, A), on(&st, B)), (Some(1), Some(0)));
    let lp = st.processes.iter().find(|p| p.pid == LP).unwrap();
    assert_eq!(lp.preemptions, 1);
    let text = n.metrics(t1).unwrap();
    assert_eq!(
        metric(
            &text,
            r#"kfdq_preemptions_total{class="batch",level="deactivate"}"#
        ),
        Some(1.0),
        "{text}"
    );
    // The same report again changes nothing (the level is already applied).
    self_level(&mut n, Some(Level::Deactivate), t1);
    assert_eq!(n.status(t1).counters.preempts, 1);
    // Its release costs a device-wide preempt too, as the agent's release does.
    let t2 = t1 + Duration::from_millis(30);
    busy(&mut n, false, t2);
    decide(&mut n, t2);
    self_level(&mut n, None, t2);
    let st = n.status(t2);
    assert_eq!(st.counters.direct_releases, 1);
    assert_eq!((st.counters.preempts, on(&st, A)), (2, Some(2)));
    let text = n.metrics(t2).unwrap();
    let gpu = format!(r#"kfdq_partition_device_preempts_total{{gpu="{}"}}"#, A.0);
    assert_eq!(metric(&text, &gpu), Some(2.0), "{text}");
}
