//! The edge decision (`Policy::decide_edges`) against the full one (`Policy::decide`): over
//! random edge sequences on an injected clock, a policy that decides edges alone (and falls
//! back to the full decision when it says so) leaves every process in the same state, for the
//! same reason, with the same changes and preempts, as a policy that recomputes everything
//! each time. Pure logic, seeded: the same sequences every run.

use std::collections::BTreeMap;

use kfdq::policy::{
    CostRelease, Decision, Observation, PartitionObs, Policy, PolicyConfig, ProcessObs, QueueEdge,
    QueueObs, Reason, Release, Run,
};
use kfdq::{GpuId, Pid, QueueId};

const MS: u64 = 1_000_000;

/// splitmix64: a small seeded generator (no dependency).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

struct Scenario {
    name: &'static str,
    config: PolicyConfig,
    slots: u32,
}

fn scenarios() -> Vec<Scenario> {
    let mut no_guard = PolicyConfig::builtin();
    for c in &mut no_guard.classes {
        c.starvation = None;
    }
    let mut level3 = no_guard.clone();
    for c in &mut level3.classes {
        if c.level.is_some() && c.name == "normal" {
            c.level = Some(kfdq::proto::Level::Suspend);
        }
    }
    level3.hysteresis_ns = 0;
    let mut rate = no_guard.clone();
    rate.min_preempt_interval_ns = 3 * MS;
    let mut cost = PolicyConfig::builtin();
    cost.release = Release::Cost(CostRelease {
        min_history: 2,
        ..CostRelease::default()
    });
    vec![
        Scenario {
            name: "builtin (starvation guard, 20 ms hysteresis)",
            config: PolicyConfig::builtin(),
            slots: 64,
        },
        Scenario {
            name: "no starvation guard",
            config: no_guard.clone(),
            slots: 64,
        },
        Scenario {
            name: "levels 1 and 3, no hold",
            config: level3,
            slots: 64,
        },
        Scenario {
            name: "rate limit 3 ms",
            config: rate,
            slots: 64,
        },
        Scenario {
            name: "cost release",
            config: cost,
            slots: 64,
        },
        Scenario {
            name: "residency pressure",
            config: no_guard,
            slots: 6,
        },
    ]
}

fn obs<'a>(
    now_ns: u64,
    partitions: &'a [PartitionObs],
    processes: &'a [ProcessObs],
) -> Observation<'a> {
    Observation {
        now_ns,
        partitions,
        processes,
    }
}

fn processes(rng: &mut Rng, gpus: &[GpuId]) -> Vec<ProcessObs> {
    let classes = ["latency", "normal", "batch", "unlisted"];
    (0..8)
        .map(|i| ProcessObs {
            pid: Pid(100 + i * 7),
            class: classes[rng.below(4) as usize].into(),
            queues: (0..1 + rng.below(3))
                .map(|q| QueueObs {
                    queue_id: QueueId(q as u32),
                    gpu_id: gpus[rng.below(gpus.len() as u64) as usize],
                    busy: false,
                })
                .collect(),
        })
        .collect()
}

/// Every process's (state, reason) in a full decision.
fn view(d: &Decision) -> BTreeMap<Pid, (Run, Reason)> {
    d.targets
        .iter()
        .map(|t| (t.pid, (t.run, t.reason.clone())))
        .collect()
}

#[test]
fn edge_decisions_equal_the_full_recompute_over_random_edge_sequences() {
    let gpus = [GpuId(0xa1), GpuId(0xb2)];
    let parts: Vec<PartitionObs> = gpus
        .iter()
        .map(|&gpu_id| PartitionObs {
            gpu_id,
            resident_slots: 0,
            cus: 80,
        })
        .collect();
    for sc in scenarios() {
        let parts: Vec<PartitionObs> = parts
            .iter()
            .map(|p| PartitionObs {
                resident_slots: sc.slots,
                ..p.clone()
            })
            .collect();
        let mut by_edge = 0;
        let mut changes = 0;
        let mut released = 0;
        for seed in 0..40u64 {
            let mut rng = Rng(seed * 7919 + 17);
            let mut procs = processes(&mut rng, &gpus);
            let mut full = Policy::new(sc.config.clone()).unwrap();
            let mut inc = Policy::new(sc.config.clone()).unwrap();
            let mut now = 0;
            // Both start from a full decision.
            let first = full.decide(&obs(now, &parts, &procs));
            assert_eq!(inc.decide(&obs(now, &parts, &procs)), first);
            let mut seen = view(&first);
            for step in 0..300 {
                // Now and then a preempted process is released outside the policy (its shim's
                // lease ran out): both policies are told, and the next decision must agree.
                if rng.below(12) == 0 {
                    let p = &procs[rng.below(procs.len() as u64) as usize];
                    if matches!(full.state_of(p.pid), Some(Run::Preempted(_))) {
                        full.released_outside(p.pid, now);
                        inc.released_outside(p.pid, now);
                        released += 1;
                    }
                }
                now += rng.below(4 * MS);
                let mut edges = Vec::new();
                for _ in 0..1 + rng.below(2) {
                    let i = rng.below(procs.len() as u64) as usize;
                    let qi = rng.below(procs[i].queues.len() as u64) as usize;
                    let q = &mut procs[i].queues[qi];
                    edges.push(QueueEdge {
                        process: i,
                        gpu_id: q.gpu_id,
                        was_busy: q.busy,
                        busy: !q.busy,
                    });
                    q.busy = !q.busy;
                }
                let want = full.decide(&obs(now, &parts, &procs));
                let got = match inc.decide_edges(&obs(now, &parts, &procs), &edges) {
                    Some(d) => {
                        by_edge += 1;
                        d
                    }
                    None => inc.decide(&obs(now, &parts, &procs)),
                };
                let ctx = format!("{}: seed {seed}, step {step}, t {now} ns", sc.name);
                assert_eq!(got.changes, want.changes, "{ctx}");
                assert_eq!(got.preempts, want.preempts, "{ctx}");
                changes += want.changes.len();
                for t in &got.targets {
                    seen.insert(t.pid, (t.run, t.reason.clone()));
                }
                assert_eq!(seen, view(&want), "{ctx}");
                for p in &procs {
                    assert_eq!(inc.state_of(p.pid), full.state_of(p.pid), "{ctx}");
                }
                // The edge decision may look again earlier than needed, never later.
                if let Some(w) = want.next_ns {
                    assert!(got.next_ns.is_some_and(|g| g <= w), "{ctx}");
                }
            }
        }
        // The scenarios without residency pressure decide most edges alone, and the
        // sequences change states (the comparison is not of two idle policies).
        if sc.slots >= 64 {
            assert!(
                by_edge > 40 * 300 / 2,
                "{}: {by_edge} edge decisions",
                sc.name
            );
        }
        assert!(changes > 100, "{}: {changes} changes", sc.name);
        assert!(released > 20, "{}: {released} released outside", sc.name);
    }
}
