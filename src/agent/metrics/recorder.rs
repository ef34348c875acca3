//! What the node records between scrapes: busy and preempted time per class, busy periods,
//! preemptions per class and level, and the preemption and decision latency histograms.

use std::collections::BTreeMap;
use std::time::Instant;

use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

use super::labels::{ClassLabel, LevelLabel, level_label, level_number};
use crate::proto::Level;

/// Histogram buckets of latencies, seconds: 50 µs doubling to 1.6 s (16 buckets). A level-2
/// preempt on kfd-emu acknowledges in about a millisecond, a level-3 one after its grace
/// period; an ack slower than the last bucket means a stuck shim (the agent gives up at 5 s).
fn latency_buckets() -> impl Iterator<Item = f64> {
    exponential_buckets(50e-6, 2.0, 16)
}

/// Time each class spent in a state (busy, preempted): accrued at every account.
#[derive(Debug, Default)]
struct TimeIn {
    since: BTreeMap<String, Instant>,
    total_s: BTreeMap<String, f64>,
}

impl TimeIn {
    /// Accrues up to `now`; `classes` are in the state from now on. Returns the classes that
    /// left it, with when they had entered it.
    fn account(&mut self, now: Instant, classes: &[&str]) -> Vec<(String, Instant)> {
        let mut left = Vec::new();
        for (class, since) in &self.since {
            let dt = now.saturating_duration_since(*since).as_secs_f64();
            // No allocation once the class is known.
            match self.total_s.get_mut(class) {
                Some(t) => *t += dt,
                None => {
                    self.total_s.insert(class.clone(), dt);
                }
            }
            if !classes.contains(&class.as_str()) {
                left.push((class.clone(), *since));
            }
        }
        for (c, _) in &left {
            self.since.remove(c);
        }
        for (c, since) in &mut self.since {
            let _ = c;
            *since = now;
        }
        for c in classes {
            self.since.entry((*c).to_owned()).or_insert(now);
        }
        left
    }

    fn total(&self, class: &str) -> f64 {
        self.total_s.get(class).copied().unwrap_or(0.0)
    }
}

/// What the node records between scrapes.
#[derive(Debug)]
pub struct Recorder {
    busy: TimeIn,
    /// When each busy class's current busy period began (`busy` restarts its own clock at
    /// every account).
    period_start: BTreeMap<String, Instant>,
    pub(super) busy_periods: Family<ClassLabel, Histogram>,
    preempted: TimeIn,
    /// Preemptions per class, per level (hold, deactivate, suspend): the agent's commands
    /// and the levels the processes' own watches applied.
    pub(super) preemptions: BTreeMap<String, [u64; 3]>,
    pub(super) preempt_latency: Family<LevelLabel, Histogram>,
    pub(super) decision_latency: Histogram,
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder {
            busy: TimeIn::default(),
            period_start: BTreeMap::new(),
            busy_periods: Family::new_with_constructor(|| Histogram::new(latency_buckets())),
            preempted: TimeIn::default(),
            preemptions: BTreeMap::new(),
            preempt_latency: Family::new_with_constructor(|| Histogram::new(latency_buckets())),
            decision_latency: Histogram::new(latency_buckets()),
        }
    }
}

impl Recorder {
    /// Accounts busy and preempted time up to `now`; `busy` are the classes busy from now on
    /// (a class is busy while any queue of any of its processes is), `preempted` those with a
    /// process preempted from now on. Returns the busy periods that ended (class, seconds):
    /// a class's busy period runs from the account that found it busy to the one that found
    /// it idle, and each is observed in the busy-period histogram.
    pub fn account<'a>(
        &mut self,
        now: Instant,
        busy: impl IntoIterator<Item = &'a str>,
        preempted: impl IntoIterator<Item = &'a str>,
    ) -> Vec<(String, f64)> {
        let busy: Vec<&str> = busy.into_iter().collect();
        let preempted: Vec<&str> = preempted.into_iter().collect();
        self.busy.account(now, &busy);
        self.preempted.account(now, &preempted);
        let mut ended = Vec::new();
        self.period_start.retain(|c, start| {
            if busy.contains(&c.as_str()) {
                return true;
            }
            ended.push((
                c.clone(),
                now.saturating_duration_since(*start).as_secs_f64(),
            ));
            false
        });
        for c in busy {
            self.period_start.entry(c.to_owned()).or_insert(now);
        }
        for (class, s) in &ended {
            self.busy_periods
                .get_or_create(&ClassLabel {
                    class: class.clone(),
                })
                .observe(*s);
        }
        ended
    }

    /// Seconds `class` was busy.
    pub fn busy_s(&self, class: &str) -> f64 {
        self.busy.total(class)
    }

    /// Seconds `class` had a process preempted.
    pub fn preempted_s(&self, class: &str) -> f64 {
        self.preempted.total(class)
    }

    /// A process of `class` preempted at `level` (by the agent's command or its own watch).
    pub fn preempted(&mut self, class: &str, level: Level) {
        let i = level_number(Some(level)) as usize - 1;
        // No allocation on the decision's path once the class is known.
        match self.preemptions.get_mut(class) {
            Some(n) => n[i] += 1,
            None => {
                let mut n = [0; 3];
                n[i] = 1;
                self.preemptions.insert(class.to_owned(), n);
            }
        }
    }

    /// A preempt command at `level` acknowledged after `seconds`.
    pub fn preempt_acked(&self, level: Level, seconds: f64) {
        self.preempt_latency
            .get_or_create(&LevelLabel {
                level: level_label(level).into(),
            })
            .observe(seconds);
    }

    /// A decision that sent commands took `seconds` from wake-up to the commands written.
    pub fn decision(&self, seconds: f64) {
        self.decision_latency.observe(seconds);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn busy_time_accrues_only_while_busy() {
        let mut r = Recorder::default();
        let t0 = Instant::now();
        r.account(t0, ["latency"], []);
        let ended = r.account(
            t0 + Duration::from_millis(300),
            ["latency", "batch"],
            ["normal"],
        );
        assert!(ended.is_empty());
        let ended = r.account(t0 + Duration::from_millis(500), ["batch"], ["normal"]);
        assert_eq!(ended, vec![("latency".to_string(), 0.5)], "one busy period");
        r.account(t0 + Duration::from_millis(900), [], []);
        r.account(t0 + Duration::from_millis(5000), [], []);
        assert!((r.preempted_s("normal") - 0.6).abs() < 1e-9);
        let s = |c: &str| r.busy_s(c);
        assert!((s("latency") - 0.5).abs() < 1e-9, "{}", s("latency"));
        assert!((s("batch") - 0.6).abs() < 1e-9, "{}", s("batch"));
    }
}
