//! Direct edges at the node (`direct.rs`): who gets which board, what the agent leaves to a
//! watch, its fallback, and a writer's slot cleared when it goes.

use std::time::{Duration, Instant};

use super::*;
use crate::agent::identity::Identity;
use crate::ids::{GpuId, Pid, QueueId};
use crate::proto::{Level, QueueInfo, Registry, ShimMsg};

const CONFIG: &str = r#"
[agent]
direct_edges = true
hysteresis_ms = 20
min_preempt_interval_ms = 0

[[class]]
name = "latency"
rank = 2
priority = 13
match = { env = true }

[[class]]
name = "batch"
rank = 0
priority = 3
level = "deactivate"
match = { env = true }
"#;

const A: GpuId = GpuId(0x1000);
const B: GpuId = GpuId(0x2000);
const HP: Pid = Pid(100);
const LP: Pid = Pid(101);
const LP_OTHER: Pid = Pid(102);

fn connect(n: &mut NodeState, conn: u64, pid: Pid, class: &str, gpu: GpuId, t: Instant) {
    let mut out = Vec::new();
    let id = Identity {
        pid,
        start: 0,
        uid: 0,
        gid: 0,
        groups: vec![],
        exe: format!("/bin/{class}"),
        cgroup: String::new(),
        claim: crate::agent::identity::Claim::None,
        admin_channel: false,
    };
    n.hello(
        conn,
        id,
        crate::proto::VERSION,
        Some(class.into()),
        pid,
        &mut out,
    )
    .unwrap();
    let q = QueueInfo {
        queue_id: QueueId(1),
        gpu_id: gpu,
        requested_priority: 7,
        effective_priority: if class == "latency" { 13 } else { 3 },
        ring_base: 0,
        ring_size: 4096,
        streams: vec![],
        deactivated: false,
        suspended: false,
        busy: false,
        window_waits: 0,
        window_stalls: 0,
    };
    let reg = Registry {
        pid,
        class: Some(class.into()),
        queues: vec![q],
        ..Registry::default()
    };
    n.shim_message(pid, ShimMsg::Registry(reg), t, &mut out);
}

fn node(t0: Instant) -> NodeState {
    let cfg = AgentConfig::parse(CONFIG, None).unwrap();
    let parts = [A, B]
        .iter()
        .map(|&gpu_id| PartitionObs {
            gpu_id,
            resident_slots: 64,
            cus: 80,
        })
        .collect();
    let mut n = NodeState::new(cfg, parts, String::new(), t0).unwrap();
    connect(&mut n, 1, HP, "latency", A, t0);
    connect(&mut n, 2, LP, "batch", A, t0);
    connect(&mut n, 3, LP_OTHER, "batch", B, t0);
    n
}

fn decide(n: &mut NodeState, t: Instant) -> Vec<Out> {
    let mut out = Vec::new();
    n.decide(t, &mut out);
    out
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
        &CONFIG.replace("direct_edges = true", "direct_edges = false"),
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
    let unset = CONFIG.replace("direct_edges = true\n", "");
    assert_ne!(unset, CONFIG, "the test's configuration sets direct_edges");
    assert!(AgentConfig::parse(&unset, None).unwrap().direct_edges);
}

#[test]
fn edges_false_is_refused_with_the_fix_and_edges_true_is_ignored() {
    // The activity-samples-only mode is gone: asking for it is an error naming the fix.
    let e = AgentConfig::parse(
        &CONFIG.replace("[agent]\n", "[agent]\nedges = false\n"),
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
        &CONFIG.replace("[agent]\n", "[agent]\nedges = true\n"),
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
    connect(&mut n, 4, Pid(103), "latency", A, t1);
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
            &CONFIG.replace("\"deactivate\"", &format!("\"{level}\"")),
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
        let cfg = CONFIG
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
