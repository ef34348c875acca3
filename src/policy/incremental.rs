//! The incremental decision: what one or a few queue edges (a queue going busy or idle) change,
//! without looking again at every process.
//!
//! The policy keeps, per (partition, class rank), how many queues were busy in the last
//! observation. An edge that leaves a count on the same side of zero changes no rule's input:
//! the decision is "nothing changes". One that crosses zero (the class became busy, or idle,
//! on that partition) can only change the processes of lower classes with a preemption level
//! and queues on that partition: only those are decided again, with the same rule
//! ([`Policy::blocker`], [`Policy::starved`]) the full decision uses. Whatever an edge cannot
//! settle alone — a partition with more queues than resident slots, a change the rate limit
//! holds back, a time the last decision said to look again at (a release hold or a starvation
//! guard running out) — is left to the full decision ([`Policy::decide`]): `decide_edges` returns `None` and the caller calls it.
//! The full decision is the reference: a property test (`tests/policy_incremental.rs`)
//! checks that both give every process the same state and reason over random edge
//! sequences.

use super::decide::{Decision, EdgeScratch, Policy, Reason, costs_preempt, later};
use super::level::Run;
use super::obs::{Observation, ProcessObs, queues_on};
use super::rules::ClassRule;
use crate::ids::GpuId;

/// One queue's edge, after the observation was updated with it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueEdge {
    /// Index of its process in the observation's `processes`.
    pub process: usize,
    /// The queue's partition.
    pub gpu_id: GpuId,
    /// Busy in the observation the last decision saw.
    pub was_busy: bool,
    /// Busy now (as the observation says).
    pub busy: bool,
}

impl Policy {
    /// Decides what `edges` change, given `obs` (the last decision's observation with the
    /// edges applied, same processes and partitions). `None`: the edges cannot be decided
    /// alone; call [`Policy::decide`]. The decision's targets are only the processes decided
    /// again (in pid order); the others keep their state and reason.
    pub fn decide_edges(&mut self, obs: &Observation<'_>, edges: &[QueueEdge]) -> Option<Decision> {
        let mut decision = Decision::default();
        self.decide_edges_into(obs, edges, &mut decision)
            .then_some(decision)
    }

    /// [`Policy::decide_edges`] into `decision` (its vectors keep their capacity: a caller
    /// that passes the same one every time allocates nothing for the targets). False: the
    /// edges cannot be decided alone (`decision` is then empty).
    pub fn decide_edges_into(
        &mut self,
        obs: &Observation<'_>,
        edges: &[QueueEdge],
        decision: &mut Decision,
    ) -> bool {
        // Its buffers, kept between edges.
        let mut scratch = std::mem::take(&mut self.edge_scratch);
        let decided = self.decide_edges_with(obs, edges, decision, &mut scratch);
        self.edge_scratch = scratch;
        decided
    }

    fn decide_edges_with(
        &mut self,
        obs: &Observation<'_>,
        edges: &[QueueEdge],
        decision: &mut Decision,
        scratch: &mut EdgeScratch,
    ) -> bool {
        decision.targets.clear();
        decision.changes.clear();
        decision.preempts.clear();
        decision.next_ns = None;
        let now = obs.now_ns;
        if !self.incremental_ok || self.next_ns.is_some_and(|n| now >= n) {
            return false;
        }
        // The counts, and the keys whose busy state crossed zero (with their old state).
        let EdgeScratch {
            touched,
            flipped,
            charged,
        } = scratch;
        touched.clear();
        flipped.clear();
        charged.clear();
        // The rules borrow the shared configuration, not `self`.
        let config = std::sync::Arc::clone(&self.config);
        let unknown = std::sync::Arc::clone(&self.unknown);
        let rule_of = std::sync::Arc::clone(&self.rule_of);
        // Its rule, and where its queues are when the last full decision saw them on one
        // partition (its queue list is then not read).
        let rule = |i: usize, p: &ProcessObs| -> (&ClassRule, Option<(GpuId, u32)>) {
            match rule_of.get(i) {
                Some(r) if r.pid == p.pid => (
                    r.rule.map_or(&*unknown, |k| &config.classes[k]),
                    r.one_partition,
                ),
                _ => (config.class(&p.class).unwrap_or(&unknown), None),
            }
        };
        for e in edges.iter().filter(|e| e.was_busy != e.busy) {
            let Some(p) = obs.processes.get(e.process) else {
                return false;
            };
            let rank = rule(e.process, p).0.rank;
            let key = (e.gpu_id, rank);
            let count = self.busy_count.entry(key).or_default();
            if !touched.iter().any(|(k, _)| *k == key) {
                touched.push((key, *count > 0));
            }
            if e.busy {
                *count += 1;
            } else {
                *count = count.saturating_sub(1);
            }
        }
        let history = self.history();
        for &(key, was) in touched.iter() {
            let busy = self.busy_count.get(&key).is_some_and(|c| *c > 0);
            if busy == was {
                continue;
            }
            if !busy {
                self.busy_count.remove(&key);
            }
            flipped.push(key);
            if busy {
                self.edges
                    .entry(key)
                    .or_insert_with(|| super::release::Edges::busy_at(now))
                    .observe(now, true, history);
            } else if let Some(e) = self.edges.get_mut(&key) {
                e.observe(now, false, history);
            }
        }
        decision.next_ns = self.next_ns;
        if flipped.is_empty() {
            return true;
        }
        // Decide again the processes below a flipped class with queues on its partition
        // (observation index, state, reason), in a buffer kept between edges.
        let mut next = self.next_ns;
        let mut decided = std::mem::take(&mut self.edge_decided);
        decided.clear();
        for (i, p) in obs.processes.iter().enumerate() {
            let (rule, one) = rule(i, p);
            let Some(level) = rule.level else { continue };
            let affected = flipped
                .iter()
                .any(|&(gpu, rank)| rank > rule.rank && queues_on(p, one, gpu) > 0);
            if !affected {
                continue;
            }
            let (run, reason) = match self.blocker(i, p, one, rule, level, now) {
                None => self.free(i, p.pid, rule, now, &mut next),
                Some((reason, until)) => {
                    if let Some(until) = until {
                        next = later(next, until);
                    }
                    if self.starved(i, p.pid, rule, now, &mut next) {
                        (Run::Running, Reason::StarvationGuard)
                    } else {
                        (Run::Preempted(level), reason)
                    }
                }
            };
            decided.push((i, run, reason));
        }
        // Changes that cost device-wide preempts: the rate limit's partitions must be free,
        // else the full decision holds them back.
        let interval = self.config.min_preempt_interval_ns;
        for (i, run, _) in &decided {
            let p = &obs.processes[*i];
            let cur = self.procs.run_of(p.pid, *i);
            if cur == *run || !(costs_preempt(cur) || costs_preempt(*run)) {
                continue;
            }
            for q in &p.queues {
                if charged.contains(&q.gpu_id) {
                    continue;
                }
                if self
                    .last_preempt
                    .get(&q.gpu_id)
                    .is_some_and(|t| now < t.saturating_add(interval))
                {
                    self.edge_decided = decided;
                    decision.next_ns = None;
                    return false;
                }
                charged.push(q.gpu_id);
            }
        }
        for &gpu in charged.iter() {
            self.last_preempt.insert(gpu, now);
        }
        decision.targets.reserve(decided.len());
        for (i, run, reason) in decided.drain(..) {
            let p = &obs.processes[i];
            self.settle(
                decision,
                &mut next,
                obs,
                (i, p),
                rule(i, p).0,
                (run, reason),
            );
        }
        self.edge_decided = decided;
        // Settled in the observation's (pid) order: sorted already, unless it was not.
        if !decision.targets.is_sorted_by_key(|t| t.pid) {
            decision.targets.sort_by_key(|t| t.pid);
            decision.changes.sort_by_key(|c| c.pid);
        }
        decision.next_ns = next;
        self.next_ns = next;
        true
    }
}
