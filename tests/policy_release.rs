//! The cost release rule (docs/policy.md, "Release"): given a higher class's idle gaps and what
//! a preempt costs, when lower classes resume. Pure logic on an injected clock, through
//! `Policy::decide` as the agent and the lab call it.

mod common;

use common::policy::{MS, part, proc};
use kfdq::Pid;
use kfdq::policy::{
    CostRelease, Decision, Observation, Policy, PolicyConfig, PolicyError, Reason, Release, Run,
};

const US: u64 = 1_000;
const BATCH: Pid = Pid(30);

/// The built-in classes (latency; normal at level 1; batch at level 2) with cost rule `c`, and
/// two processes: a latency one and one of class `class` with `batch_queues` busy queues.
struct Lab {
    policy: Policy,
    class: &'static str,
    batch_queues: usize,
}

impl Lab {
    fn new(c: CostRelease) -> Lab {
        Lab::with(c, "batch", 1)
    }

    fn with(c: CostRelease, class: &'static str, batch_queues: usize) -> Lab {
        let mut config = PolicyConfig::builtin();
        config.release = Release::Cost(c);
        config.min_preempt_interval_ns = 0;
        Lab {
            policy: Policy::new(config).unwrap(),
            class,
            batch_queues,
        }
    }

    fn decide(&mut self, now_ns: u64, latency_busy: bool) -> Decision {
        let parts = part(24);
        let procs = [
            proc(10, "latency", &[latency_busy]),
            proc(BATCH.0, self.class, &vec![true; self.batch_queues]),
        ];
        self.policy.decide(&Observation {
            now_ns,
            partitions: &parts,
            processes: &procs,
        })
    }

    /// Busy 1 ms, then idle for each gap in turn; ends at the busy edge after the last gap, then
    /// goes idle once more 1 ms later. Returns the time of that last idle edge and its decision.
    fn replay(&mut self, gaps: &[u64]) -> (u64, Decision) {
        let mut t = 0;
        self.decide(t, true);
        for &g in gaps {
            t += MS;
            self.decide(t, false);
            t += g;
            self.decide(t, true);
        }
        t += MS;
        let d = self.decide(t, false);
        (t, d)
    }

    fn batch(&self) -> Option<Run> {
        self.policy.state_of(BATCH)
    }
}

fn preempted(r: Option<Run>) -> bool {
    matches!(r, Some(Run::Preempted(_)))
}

#[test]
fn long_gaps_release_at_the_idle_edge() {
    // Poisson-like: every gap is far longer than k x C = 0.8 ms.
    let gaps: Vec<u64> = (0..16).map(|i| (20 + 7 * i) * MS).collect();
    let mut lab = Lab::new(CostRelease::default());
    let (_, d) = lab.replay(&gaps);
    assert_eq!(lab.batch(), Some(Run::Running), "{d:?}");
    assert_eq!(d.changes.len(), 1);
    assert_eq!(d.next_ns, None);
}

#[test]
fn short_host_gaps_are_waited_out_and_long_ones_are_not() {
    // A service whose requests are bursts of kernels with 300 µs host gaps between them (three
    // per request), and 40 ms between requests: after an idle edge the higher class is most
    // likely back within 300 µs, so the batch job stays preempted until 300 µs have passed
    // without it, then resumes.
    let mut gaps = Vec::new();
    for _ in 0..6 {
        gaps.extend([300 * US, 300 * US, 300 * US, 40 * MS]);
    }
    let mut lab = Lab::new(CostRelease::default());
    let (t, d) = lab.replay(&gaps);
    assert!(preempted(lab.batch()));
    assert_eq!(
        d.targets.iter().find(|x| x.pid == BATCH).unwrap().reason,
        Reason::Hysteresis("latency".into())
    );
    assert_eq!(
        d.next_ns,
        Some(t + 300 * US),
        "decide again when it runs out"
    );
    lab.decide(t + 300 * US - 1, false);
    assert!(preempted(lab.batch()));
    lab.decide(t + 300 * US, false);
    assert_eq!(lab.batch(), Some(Run::Running));
}

#[test]
fn the_release_is_the_first_elapsed_time_with_a_small_enough_return_chance() {
    // Gaps of 1, 2, ..., 10 ms, one each; C = 250 µs.
    let gaps: Vec<u64> = (1..=10).map(|i| i * MS).collect();
    let base = CostRelease {
        round_trip_ns: 250 * US,
        ..CostRelease::default()
    };
    // k = 4: a window of 1 ms. No gap is shorter than 1 ms: released at the idle edge.
    let (_, d) = Lab::new(base).replay(&gaps);
    assert_eq!(d.next_ns, None, "released at the idle edge");
    // k = 10: a window of 2.5 ms. At the idle edge two of ten gaps (1 and 2 ms) end within it:
    // 0.2. After 1 ms, 2 and 3 ms of nine; after 2 ms, 3 and 4 ms of eight; ... after 9 ms, the
    // 10 ms gap alone: the chance only grows until no remembered gap is left, after 10 ms.
    let (t, d) = Lab::new(CostRelease { k: 10.0, ..base }).replay(&gaps);
    assert_eq!(d.next_ns, Some(t + 10 * MS), "epsilon 0.1 < 0.2");
    let (_, d) = Lab::new(CostRelease {
        k: 10.0,
        epsilon: 0.25,
        ..base
    })
    .replay(&gaps);
    assert_eq!(d.next_ns, None, "epsilon 0.25 accepts 0.2 at the idle edge");
}

#[test]
fn the_cold_start_holds_k_round_trips_until_the_history_is_long_enough() {
    let c = CostRelease::default();
    let mut lab = Lab::new(c);
    let (t, d) = lab.replay(&[50 * MS; 3]);
    assert_eq!(
        d.next_ns,
        Some(t + 4 * 200 * US),
        "3 gaps < 8: hold k x C = 0.8 ms"
    );
    let (_, d) = Lab::new(c).replay(&[50 * MS; 8]);
    assert_eq!(d.next_ns, None, "8 long gaps: released at once");
}

#[test]
fn the_hold_is_capped() {
    // A window of 20 ms (k = 100) over gaps of 2, 4, ..., 40 ms: the chance stays high for far
    // longer than the cap.
    let gaps: Vec<u64> = (1..=20).map(|i| i * 2 * MS).collect();
    let c = CostRelease {
        k: 100.0,
        max_hold_ns: 5 * MS,
        ..CostRelease::default()
    };
    let (t, d) = Lab::new(c).replay(&gaps);
    assert_eq!(d.next_ns, Some(t + 5 * MS));
}

#[test]
fn what_a_preempt_costs_is_counted_as_the_policy_counts_device_wide_preempts() {
    // The same history (gaps of 1 ms mostly, some of 30 ms): with one queue at level 2 the
    // window is 0.8 ms and the 1 ms gaps are outside it (released at once); with three queues
    // at level 2 a round trip is three UPDATE_QUEUE pairs, the window 2.4 ms, and the 1 ms gaps
    // are waited out; at level 3 three queues are one SUSPEND_QUEUES call: released at once; at
    // level 1 (a hold costs no preempt) released at once even in the cold start.
    let mut gaps = Vec::new();
    for _ in 0..5 {
        gaps.extend([MS, MS, MS, 30 * MS]);
    }
    let c = CostRelease::default();
    let (_, d) = Lab::new(c).replay(&gaps);
    assert_eq!(d.next_ns, None, "level 2, one queue");
    let (t, d) = Lab::with(c, "batch", 3).replay(&gaps);
    assert_eq!(d.next_ns, Some(t + MS), "level 2, three queues");
    let (_, d) = Lab::with(c, "normal", 3).replay(&[]);
    assert_eq!(d.next_ns, None, "level 1, cold start");
}

#[test]
fn a_busy_edge_preempts_at_once_whatever_the_history() {
    let mut lab = Lab::new(CostRelease::default());
    let (t, _) = lab.replay(&[50 * MS; 10]);
    assert_eq!(lab.batch(), Some(Run::Running));
    let d = lab.decide(t + 10 * MS, true);
    assert!(preempted(lab.batch()), "{d:?}");
    assert_eq!(
        d.targets.iter().find(|x| x.pid == BATCH).unwrap().reason,
        Reason::HigherClassBusy("latency".into())
    );
}

#[test]
fn a_higher_class_that_exits_while_busy_releases_by_the_rule() {
    // Its processes gone, the class is idle from that observation on.
    let mut lab = Lab::new(CostRelease::default());
    lab.decide(0, true);
    let parts = part(24);
    let d = lab.policy.decide(&Observation {
        now_ns: 5 * MS,
        partitions: &parts,
        processes: &[proc(BATCH.0, "batch", &[true])],
    });
    assert_eq!(d.next_ns, Some(5 * MS + 800 * US), "cold start hold");
    lab.policy.decide(&Observation {
        now_ns: 5 * MS + 800 * US,
        partitions: &parts,
        processes: &[proc(BATCH.0, "batch", &[true])],
    });
    assert_eq!(lab.batch(), Some(Run::Running));
}

#[test]
fn bad_parameters_are_refused_with_the_rule() {
    for (c, want) in [
        (
            CostRelease {
                k: 0.0,
                ..CostRelease::default()
            },
            "release_k",
        ),
        (
            CostRelease {
                epsilon: f64::NAN,
                ..CostRelease::default()
            },
            "release_epsilon",
        ),
        (
            CostRelease {
                history: 4,
                min_history: 5,
                ..CostRelease::default()
            },
            "release_min_history",
        ),
    ] {
        let mut config = PolicyConfig::builtin();
        config.release = Release::Cost(c);
        let e = Policy::new(config).unwrap_err();
        assert!(matches!(e, PolicyError::Release(_)), "{e:?}");
        assert!(e.to_string().contains(want), "{e}");
    }
}
