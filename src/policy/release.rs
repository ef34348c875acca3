//! When lower classes resume after a higher class goes idle (docs/policy.md, "Release").
//!
//! The policy follows each higher class's busy and idle edges per partition ([`Edges`]) and keeps
//! a bounded history of its idle gaps (idle edge -> next busy edge). Two rules use them:
//!
//! * **Hysteresis** (the old fixed rule, an explicit override): lower classes stay preempted for
//!   `hysteresis_ns` after the idle edge.
//! * **Cost** ([`CostRelease`]): lower classes stay preempted while the gap history says the
//!   higher class is likely back before a release could pay for itself. A preempted process
//!   whose preempt and restore cost `c` (its device-wide preempts times the round trip of one)
//!   is released at the first elapsed idle time `e` at which, over the recent gaps,
//!   `P(gap < e + k·c | gap > e) <= epsilon` — capped at `max_hold_ns`; with fewer than
//!   `min_history` gaps it holds `k·c` (the cold start).
//!
//! Pure: times come from the caller's observations.

use std::collections::VecDeque;

/// How lower classes resume once a higher class is idle.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Release {
    /// After `PolicyConfig::hysteresis_ns` of idle (the old rule; `hysteresis_ms` in the agent's
    /// file selects it).
    Hysteresis,
    /// When the idle gap is likely long enough to pay for a preempt's round trip.
    Cost(CostRelease),
}

impl Release {
    /// One line for people (`kfdqd --check`): the rule and its parameters; `hysteresis_ns` is the
    /// fixed rule's hold.
    pub fn describe(&self, hysteresis_ns: u64) -> String {
        match self {
            Release::Hysteresis => format!(
                "fixed hysteresis: lower classes resume {} ms after the higher class goes idle",
                hysteresis_ns as f64 / 1e6
            ),
            Release::Cost(c) => format!(
                "cost rule: C {} µs per device-wide preempt round trip, k {}, epsilon {}, at most {} ms, {} gaps remembered ({} before they are trusted)",
                c.round_trip_ns as f64 / 1e3,
                c.k,
                c.epsilon,
                c.max_hold_ns as f64 / 1e6,
                c.history,
                c.min_history
            ),
        }
    }
}

/// Round trip of one device-wide preempt and its restore, defaulted from the partition model's
/// parameters (docs/gfx-model.md, named guesses): two runlist updates of `preempt_fixed_ns`
/// (50 µs) each, plus the CWSR save and restore of a full MI308X partition's 2560 wave slots at
/// 20 ns per wave each way (51.2 µs each): 202.4 µs, rounded to 200 µs.
pub const DEFAULT_ROUND_TRIP_NS: u64 = 200_000;

/// The cost rule's parameters (docs/policy.md, "Release", with their sensitivity).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CostRelease {
    /// `C`: what one device-wide preempt and its restore cost, ns. A process's round trip is
    /// this times the device-wide preempts its level costs it on the partition (level 1: none,
    /// so it is released at the idle edge; level 2: one per queue; level 3: one).
    pub round_trip_ns: u64,
    /// `k`: a release must be likely to buy at least `k` round trips of running time.
    pub k: f64,
    /// `epsilon`: the largest accepted chance that the higher class is back within `k` round
    /// trips, given it has been idle so far.
    pub epsilon: f64,
    /// Never hold longer than this after the idle edge.
    pub max_hold_ns: u64,
    /// Idle gaps remembered per partition and class (the most recent ones).
    pub history: u32,
    /// With fewer gaps than this, hold `k` round trips (the cold start).
    pub min_history: u32,
}

impl Default for CostRelease {
    /// C 200 µs ([`DEFAULT_ROUND_TRIP_NS`]), k 4, epsilon 0.1, at most 20 ms (the old fixed
    /// hysteresis, so the rule never holds longer than it did), 32 gaps, 8 before the history
    /// is trusted.
    fn default() -> Self {
        CostRelease {
            round_trip_ns: DEFAULT_ROUND_TRIP_NS,
            k: 4.0,
            epsilon: 0.1,
            max_hold_ns: 20_000_000,
            history: 32,
            min_history: 8,
        }
    }
}

/// A parameter of the cost release rule out of range; the text names the agent's key, its range
/// and what it means.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ReleaseError {
    /// `preempt_round_trip_us`.
    #[error(
        "preempt_round_trip_us = {us} is out of range 0..=1000000 µs (one device-wide preempt and its restore)"
    )]
    RoundTrip {
        /// The value, µs.
        us: u64,
    },
    /// `release_k`.
    #[error(
        "release_k = {0} is out of range: above 0, at most 1000 (round trips a release must be likely to buy)"
    )]
    K(f64),
    /// `release_epsilon`.
    #[error(
        "release_epsilon = {0} is out of range 0 <= epsilon < 1 (the accepted chance that the higher class is back within k round trips)"
    )]
    Epsilon(f64),
    /// `release_max_hold_ms`.
    #[error("release_max_hold_ms = {ms} is out of range 0..=3600000 ms")]
    MaxHold {
        /// The value, ms.
        ms: u64,
    },
    /// `release_history`.
    #[error("release_history = {0} is out of range 1..={MAX_HISTORY} idle gaps")]
    History(u32),
    /// `release_min_history`.
    #[error("release_min_history = {min} is out of range 1..=release_history ({history})")]
    MinHistory {
        /// The value.
        min: u32,
        /// `release_history`.
        history: u32,
    },
}

/// The largest history kept (gaps per partition and class).
pub const MAX_HISTORY: u32 = 1024;

impl CostRelease {
    /// Checks each parameter; the error names the agent's key, its range and what it means.
    pub fn validate(&self) -> Result<(), ReleaseError> {
        if self.round_trip_ns > 1_000_000_000 {
            return Err(ReleaseError::RoundTrip {
                us: self.round_trip_ns / 1000,
            });
        }
        if !(self.k.is_finite() && self.k > 0.0 && self.k <= 1000.0) {
            return Err(ReleaseError::K(self.k));
        }
        if !(self.epsilon.is_finite() && (0.0..1.0).contains(&self.epsilon)) {
            return Err(ReleaseError::Epsilon(self.epsilon));
        }
        if self.max_hold_ns > 3_600_000_000_000 {
            return Err(ReleaseError::MaxHold {
                ms: self.max_hold_ns / 1_000_000,
            });
        }
        if !(1..=MAX_HISTORY).contains(&self.history) {
            return Err(ReleaseError::History(self.history));
        }
        if !(1..=self.history).contains(&self.min_history) {
            return Err(ReleaseError::MinHistory {
                min: self.min_history,
                history: self.history,
            });
        }
        Ok(())
    }

    /// How long after its idle edge a process whose preempt and restore cost `round_trip_ns`
    /// stays preempted, given the higher class's idle gaps `edges`.
    pub fn hold_ns(&self, edges: &Edges, round_trip_ns: u64) -> u64 {
        let window = (self.k * round_trip_ns as f64).min(u64::MAX as f64) as u64;
        let hold = if edges.sorted.len() < self.min_history as usize {
            window
        } else {
            first_safe_idle(&edges.sorted, window, self.epsilon)
        };
        hold.min(self.max_hold_ns)
    }
}

/// The first elapsed idle time `e` at which, among the gaps longer than `e` (`sorted`
/// ascending), at most the fraction `epsilon` end before `e + window`; 0 when that holds at
/// once, or the longest gap when no gap is that long.
///
/// Between two gaps the ratio can only grow (gaps enter the window, none leave the survivors),
/// so the candidates are 0 and the gaps themselves; both counts move one way, so one pass.
pub fn first_safe_idle(sorted: &[u64], window: u64, epsilon: f64) -> u64 {
    let n = sorted.len();
    let (mut gone, mut soon_end, mut e) = (0usize, 0usize, 0u64);
    loop {
        // Gaps that ended by `e` are no longer possible.
        while gone < n && sorted[gone] <= e {
            gone += 1;
        }
        let survivors = n - gone;
        if survivors == 0 {
            return e;
        }
        let edge = e.saturating_add(window);
        while soon_end < n && sorted[soon_end] < edge {
            soon_end += 1;
        }
        let soon = soon_end.max(gone) - gone;
        if soon as f64 <= epsilon * survivors as f64 {
            return e;
        }
        e = sorted[gone];
    }
}

/// One higher class's edges on one partition: whether it is busy, since when, and its recent
/// idle gaps.
#[derive(Debug, Clone, Default)]
pub struct Edges {
    busy: bool,
    /// The last edge seen (busy or idle).
    since_ns: u64,
    /// The gaps in the order they ended, at most the history's length.
    recent: VecDeque<u64>,
    /// The same gaps, ascending.
    sorted: Vec<u64>,
}

impl Edges {
    /// A class first seen busy at `now_ns` (no gap yet).
    pub fn busy_at(now_ns: u64) -> Edges {
        Edges {
            busy: true,
            since_ns: now_ns,
            ..Edges::default()
        }
    }

    /// Takes one observation: busy or not at `now_ns`. A busy edge after an idle one ends a gap,
    /// which is remembered (the oldest forgotten beyond `history`).
    pub fn observe(&mut self, now_ns: u64, busy: bool, history: usize) {
        if busy == self.busy {
            return;
        }
        if busy {
            let gap = now_ns.saturating_sub(self.since_ns);
            self.recent.push_back(gap);
            let at = self.sorted.partition_point(|&g| g < gap);
            self.sorted.insert(at, gap);
            while self.recent.len() > history.max(1) {
                if let Some(old) = self.recent.pop_front() {
                    let at = self.sorted.partition_point(|&g| g < old);
                    self.sorted.remove(at);
                }
            }
        }
        self.busy = busy;
        self.since_ns = now_ns;
    }

    /// Busy now.
    pub fn busy(&self) -> bool {
        self.busy
    }

    /// When it went idle (`None` while busy).
    pub fn idle_since(&self) -> Option<u64> {
        (!self.busy).then_some(self.since_ns)
    }

    /// The remembered gaps, ns, ascending.
    pub fn gaps(&self) -> &[u64] {
        &self.sorted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scan_matches_the_definition() {
        // Brute force over a grid of elapsed times against the one-pass scan.
        let gaps = [50u64, 60, 70, 400, 420, 5000, 9000, 12000];
        for window in [0u64, 10, 100, 1000, 20000] {
            for eps in [0.0, 0.1, 0.3, 0.5] {
                let want = (0..=13000u64)
                    .find(|&e| {
                        let surv = gaps.iter().filter(|&&g| g > e).count();
                        let soon = gaps.iter().filter(|&&g| g > e && g < e + window).count();
                        surv == 0 || soon as f64 <= eps * surv as f64
                    })
                    .unwrap();
                assert_eq!(
                    first_safe_idle(&gaps, window, eps),
                    want,
                    "window {window} eps {eps}"
                );
            }
        }
    }

    #[test]
    fn the_history_is_bounded_and_sorted() {
        let mut e = Edges::busy_at(0);
        let mut t = 0;
        for gap in [30u64, 10, 20, 40] {
            t += 5;
            e.observe(t, false, 3);
            t += gap;
            e.observe(t, true, 3);
        }
        assert_eq!(e.gaps(), [10, 20, 40], "the oldest (30) is forgotten");
        e.observe(t + 1, true, 3);
        assert_eq!(e.gaps().len(), 3, "no edge, no gap");
        assert_eq!(e.idle_since(), None);
        e.observe(t + 7, false, 3);
        assert_eq!(e.idle_since(), Some(t + 7));
    }

    #[test]
    fn rules_describe_themselves() {
        assert_eq!(
            Release::Hysteresis.describe(20_000_000),
            "fixed hysteresis: lower classes resume 20 ms after the higher class goes idle"
        );
        let d = Release::Cost(CostRelease::default()).describe(0);
        assert!(
            d.starts_with("cost rule: C 200 µs") && d.contains("k 4, epsilon 0.1, at most 20 ms"),
            "{d}"
        );
    }
}
