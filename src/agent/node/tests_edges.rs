//! The edge path's commands against the full decision's: two nodes get the same messages at
//! the same times; one decides busy edges alone (the agent's way, `edge.rs`), the other decides
//! everything every time. They must send the same commands, with the same sequence numbers,
//! and what a shim is told must always be a release of the level it holds or a preempt it does
//! not hold yet: a dropped or a duplicated command fails this test.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::fixture::{agent_file, connect, identity, node_on};
use super::*;
use crate::agent::identity::Identity;
use crate::ids::{GpuId, Pid, QueueId};
use crate::policy::Run;
use crate::proto::{Level, QueueInfo, ShimMsg};

const CLASSES: [&str; 3] = ["serving", "batch", "training"];
const GPUS: [GpuId; 2] = [GpuId(0x1000), GpuId(0x2000)];

/// One process: its class, and on which partitions it has a queue (queue 1 on the first, 2 on
/// the second).
#[derive(Debug, Clone)]
struct ProcSpec {
    class: usize,
    on: [bool; 2],
}

/// What happens next, after `dt_ms`.
#[derive(Debug, Clone)]
enum Op {
    /// Process `proc`'s queue on partition `gpu` (on the first, queue 1 or, `second`, queue 3)
    /// goes busy or idle.
    Activity {
        proc: usize,
        gpu: usize,
        second: bool,
        busy: bool,
    },
    /// Process `proc`'s doorbell rings: every queue of it busy at once (several edges, one
    /// decision).
    Doorbell { proc: usize },
    /// Every shim acknowledges what it was sent (ok, or the kernel refused a preempt).
    Acks { ok: bool },
    /// `kfdq status` (or `kfdq classify`, which reads as well) asks the edge node: the next
    /// decision runs (as the server runs one after any message) and must still be what the
    /// full decision sends.
    Read { classify: bool },
}

fn pid(i: usize) -> Pid {
    Pid(100 + i as u32)
}

fn node(specs: &[ProcSpec], hysteresis_ms: u32, t0: Instant, out: &mut Vec<Out>) -> NodeState {
    node_with(specs, (hysteresis_ms, true, 0), t0, out)
}

fn node_with(
    specs: &[ProcSpec],
    (hysteresis_ms, direct, interval_ms): (u32, bool, u32),
    t0: Instant,
    out: &mut Vec<Out>,
) -> NodeState {
    let agent = format!(
        "hysteresis_ms = {hysteresis_ms}\ndirect_edges = {direct}\nmin_preempt_interval_ms = {interval_ms}\n"
    );
    let classes = [
        (CLASSES[0], 2, 13, None),
        (CLASSES[1], 1, 7, Some("hold")),
        (CLASSES[2], 0, 3, Some("deactivate")),
    ];
    let mut n = node_on(&agent_file(&agent, &classes), &GPUS, 64, t0);
    for (i, s) in specs.iter().enumerate() {
        let class = CLASSES[s.class];
        // Queues 1 (and 3) on the first partition, 2 on the second.
        let queues = [(0, 1), (1, 2), (0, 3)]
            .into_iter()
            .filter(|(g, _)| s.on[*g])
            .map(|(g, q)| QueueInfo::new(QueueId(q), GPUS[g], 7, [13, 7, 3][s.class]))
            .collect();
        connect(
            &mut n,
            i as u64 + 1,
            identity(pid(i)),
            class,
            queues,
            t0,
            out,
        );
    }
    n
}

/// `kfdq` run by root.
fn admin() -> Identity {
    Identity {
        exe: "/usr/bin/kfdq".into(),
        ..identity(Pid(1))
    }
}

/// What each shim holds, from the commands it received: a release must name the level held,
/// a preempt one not held (the registries here never change, so a level-2 preempt is never
/// sent again for new queues).
fn apply(held: &mut BTreeMap<u64, Level>, out: &[Out]) -> Result<(), TestCaseError> {
    for o in out {
        match o {
            Out::Shim(conn, AgentMsg::Preempt { level, .. }) => {
                let before = held.insert(*conn, *level);
                prop_assert!(
                    before.is_none(),
                    "conn {conn}: preempt {level:?} while holding {before:?} (a duplicate or a missing release)"
                );
            }
            Out::Shim(conn, AgentMsg::Release { level, .. }) => {
                let before = held.remove(conn);
                prop_assert_eq!(
                    before,
                    Some(*level),
                    "conn {}: release {:?} of a level not held",
                    conn,
                    level
                );
            }
            _ => {}
        }
    }
    Ok(())
}

/// The acks a shim sends for `out` (`ok`: all succeed; else preempts fail, as a kernel that
/// refuses them would).
fn acks(out: &[Out], ok: bool) -> Vec<(Pid, ShimMsg)> {
    out.iter()
        .filter_map(|o| match o {
            Out::Shim(conn, m) => {
                let (seq, preempt) = match m {
                    AgentMsg::Preempt { seq, .. } => (*seq, true),
                    AgentMsg::Release { seq, .. }
                    | AgentMsg::SetPriority { seq, .. }
                    | AgentMsg::SetWindow { seq, .. }
                    | AgentMsg::SetCuMask { seq, .. } => (*seq, false),
                    _ => return None,
                };
                let ok = ok || !preempt;
                let detail = if ok { String::new() } else { "refused".into() };
                Some((pid(*conn as usize - 1), ShimMsg::Ack { seq, ok, detail }))
            }
            _ => None,
        })
        .collect()
}

/// `setup`: the release hold (ms), whether direct edges are on, and the rate limit
/// (`min_preempt_interval_ms`).
fn run(
    specs: &[ProcSpec],
    setup: (u32, bool, u32),
    ops: &[(u64, Op)],
) -> Result<u64, TestCaseError> {
    let t0 = Instant::now();
    let (mut out_e, mut out_f) = (Vec::new(), Vec::new());
    let mut edge = node_with(specs, setup, t0, &mut out_e);
    let mut full = node_with(specs, setup, t0, &mut out_f);
    let mut held = BTreeMap::new();
    let mut unacked: Vec<Out> = Vec::new();
    let mut now = t0;
    let mut due = true;
    for (dt, op) in ops {
        if due
            || [edge.deadline(), full.deadline()]
                .into_iter()
                .flatten()
                .any(|d| d <= now)
        {
            edge.decide(now, &mut out_e);
            full.full_due = true;
            full.decide(now, &mut out_f);
            prop_assert_eq!(&out_e, &out_f, "the edge path and the full decision differ");
            apply(&mut held, &out_e)?;
            unacked.append(&mut out_e);
            out_f.clear();
        }
        // What each shim holds is what the agent thinks it applied.
        for (i, _) in specs.iter().enumerate() {
            let p = &edge.procs[&pid(i)];
            let told = held
                .get(&(i as u64 + 1))
                .map_or(Run::Running, |l| Run::Preempted(*l));
            prop_assert_eq!(p.applied, told, "process {}", i);
        }
        now += Duration::from_millis(*dt);
        due = false;
        let msgs: Vec<(Pid, ShimMsg)> = match op {
            Op::Activity {
                proc,
                gpu,
                second,
                busy,
            } => {
                if !specs[*proc].on[*gpu] {
                    continue;
                }
                let queue_id = QueueId(if *gpu == 0 && *second {
                    3
                } else {
                    1 + *gpu as u32
                });
                vec![(
                    pid(*proc),
                    ShimMsg::Activity {
                        queue_id,
                        busy: *busy,
                    },
                )]
            }
            Op::Doorbell { proc } => {
                due |= edge.doorbell_rang(pid(*proc), now, &mut out_e);
                due |= full.doorbell_rang(pid(*proc), now, &mut out_f);
                Vec::new()
            }
            Op::Read { classify } => {
                let req = if *classify {
                    crate::proto::Request::Classify {
                        class: None,
                        exe: None,
                    }
                } else {
                    crate::proto::Request::Status
                };
                let mut replies = Vec::new();
                edge.control(999, &admin(), req, now, &mut replies);
                prop_assert!(
                    matches!(replies.as_slice(), [Out::Control(999, _)]),
                    "{replies:?}"
                );
                due = true;
                continue;
            }
            Op::Acks { ok } => {
                let a = acks(&unacked, *ok);
                // A refused preempt: the shim holds nothing at that level.
                for o in unacked.drain(..) {
                    if let (false, Out::Shim(conn, AgentMsg::Preempt { level, .. })) = (ok, &o)
                        && held.get(conn) == Some(level)
                    {
                        held.remove(conn);
                    }
                }
                a
            }
        };
        for (p, m) in msgs {
            due |= edge.shim_message(p, m.clone(), now, &mut out_e);
            due |= full.shim_message(p, m, now, &mut out_f);
        }
        prop_assert_eq!(&out_e, &out_f);
        out_e.clear();
        out_f.clear();
    }
    Ok(edge.counters.edge_decisions)
}

fn spec() -> impl Strategy<Value = ProcSpec> {
    (
        0..3usize,
        prop_oneof![Just([true, false]), Just([false, true]), Just([true, true])],
    )
        .prop_map(|(class, on)| ProcSpec { class, on })
}

fn op() -> impl Strategy<Value = (u64, Op)> {
    let op = prop_oneof![
        8 => (0..8usize, 0..2usize, any::<bool>(), any::<bool>())
            .prop_map(|(proc, gpu, second, busy)| Op::Activity {
                proc,
                gpu,
                second,
                busy
            }),
        2 => (0..8usize).prop_map(|proc| Op::Doorbell { proc }),
        3 => Just(Op::Acks { ok: true }),
        1 => Just(Op::Acks { ok: false }),
        1 => any::<bool>().prop_map(|classify| Op::Read { classify }),
    ];
    (0..40u64, op)
}

#[test]
fn the_edge_path_sends_what_the_full_decision_sends() {
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 200,
        ..ProptestConfig::default()
    });
    let edge_decisions = std::cell::Cell::new(0u64);
    let strategy = (
        proptest::collection::vec(spec(), 8),
        (
            prop_oneof![Just(0u32), Just(30u32)],
            any::<bool>(),
            prop_oneof![Just(0u32), Just(5u32)],
        ),
        proptest::collection::vec(op(), 1..60),
    );
    let result = runner.run(&strategy, |(specs, setup, ops)| {
        edge_decisions.set(edge_decisions.get() + run(&specs, setup, &ops)?);
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    // The comparison means something only if the edge path ran.
    let n = edge_decisions.get();
    assert!(n > 100, "{n} edge decisions in all");
}

/// A status or classify request reads only: the decision after it is still an edge decision
/// (a status poll must not turn the reaction it watches into a full decision).
#[test]
fn a_status_request_leaves_the_next_decision_an_edge_decision() {
    let t0 = Instant::now();
    let mut out = Vec::new();
    let specs = [
        ProcSpec {
            class: 0,
            on: [true, false],
        },
        // The batch class (hold): the agent's own command, whatever direct edges do.
        ProcSpec {
            class: 1,
            on: [true, false],
        },
    ];
    let mut n = node(&specs, 0, t0, &mut out);
    n.decide(t0, &mut out);
    let mut busy = false;
    for (i, req) in [
        crate::proto::Request::Status,
        crate::proto::Request::Classify {
            class: None,
            exe: None,
        },
        crate::proto::Request::Resume { pid: pid(1) },
    ]
    .into_iter()
    .enumerate()
    {
        let writes = matches!(req, crate::proto::Request::Resume { .. });
        let before = n.counters.edge_decisions;
        busy = !busy;
        let now = t0 + Duration::from_millis(10 * (i as u64 + 1));
        n.shim_message(
            pid(0),
            ShimMsg::Activity {
                queue_id: QueueId(1),
                busy,
            },
            now,
            &mut out,
        );
        n.control(999, &admin(), req, now, &mut out);
        out.clear();
        n.decide(now, &mut out);
        let edge = n.counters.edge_decisions - before;
        assert_eq!(
            edge,
            u64::from(!writes),
            "request {i}: edge decisions {edge}"
        );
        // Either way the edge was decided: the batch process follows the serving one.
        let want = if busy {
            Run::Preempted(Level::Hold)
        } else {
            Run::Running
        };
        assert_eq!(n.procs[&pid(1)].applied, want, "request {i}");
    }
}
