//! The preemption policy: from what is observed (partitions, processes with their class and
//! queues, which queues are busy, the time) to what each process should be — running, or
//! preempted at its class's level — and what the decision costs in device-wide preempts.
//!
//! Rules (docs/policy.md):
//! * Highest class first: while a class of higher rank is busy on a partition (or went idle
//!   there less than its release rule's hold ago, [`super::release`]), processes of lower
//!   classes with a level that have queues there are preempted at their class's level.
//! * Whole processes: a process is running or preempted as a whole, never stream by stream
//!   (holding one stream while another of the same process waits on it deadlocks).
//! * Starvation guard: a class with one runs for `run_ns` after `after_ns` preempted.
//! * Residency guard: with more active queues on a partition than its resident slots, lower
//!   classes are deactivated (level 2: a hold does not free slots) until the rest fit — under
//!   the starvation guard like every other preemption.
//! * Cost, as amdkfd charges it: every UPDATE_QUEUE is its own runlist update (one device-wide
//!   preempt per queue deactivated or reactivated, level 2); SUSPEND/RESUME_QUEUES batch a
//!   process's queues into one runlist update per partition (level 3); holds cost none
//!   (level 1). Changes that cost preempts on a partition are taken together, at most once per
//!   minimum interval since the last device-wide preempt there.
//!
//! Pure and deterministic: the clock is the observation's `now_ns`.

use std::collections::BTreeMap;

use super::Level;
use super::level::Run;
use super::obs::{Observation, ProcessObs, RuleOf, one_partition};
use super::procs::{ProcState, ProcStates};
use super::release::{Edges, Release};
use super::rules::{ClassRule, PolicyConfig, PolicyError};
use crate::ids::{GpuId, Pid};

/// Why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason {
    /// No higher class is busy.
    Free,
    /// Its class is never preempted.
    Unpreemptible,
    /// This higher class is busy on a partition it shares.
    HigherClassBusy(std::sync::Arc<str>),
    /// The higher class is idle, but not yet for its release rule's hold (the fixed hysteresis,
    /// or the cost rule's).
    Hysteresis(std::sync::Arc<str>),
    /// The starvation guard lets it run.
    StarvationGuard,
    /// Too many active queues on this partition: deactivated so higher classes stay resident.
    ResidencyGuard(GpuId),
    /// A change waits for the minimum interval between device-wide preempts.
    RateLimited,
}

/// The decision for one process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessDecision {
    /// Process id.
    pub pid: Pid,
    /// What it should be.
    pub run: Run,
    /// Why.
    pub reason: Reason,
    /// KFD priority of its queues (its class's).
    pub priority: u8,
    /// CU mask per partition (gpu_id -> 32-bit words), when its class has a CU share.
    pub cu_masks: BTreeMap<GpuId, Vec<u32>>,
}

/// A process whose state changes with this decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Change {
    /// Process id.
    pub pid: Pid,
    /// Before.
    pub from: Run,
    /// After.
    pub to: Run,
}

/// The edge decision's buffers, kept between edges (see [`Policy`]'s `edge_scratch`).
#[derive(Debug, Clone, Default)]
pub(super) struct EdgeScratch {
    pub(super) touched: Vec<((GpuId, u8), bool)>,
    pub(super) flipped: Vec<(GpuId, u8)>,
    pub(super) charged: Vec<GpuId>,
}

/// One decision.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Decision {
    /// Every process, in pid order.
    pub targets: Vec<ProcessDecision>,
    /// The processes whose state changes, in pid order (the executor's work).
    pub changes: Vec<Change>,
    /// Device-wide preempts this decision costs, per partition (gpu_id -> count; see
    /// [`preempt_cost`]).
    pub preempts: BTreeMap<GpuId, u32>,
    /// When to decide again even if nothing is observed to change (a hysteresis, a starvation
    /// guard or a rate limit runs out then).
    pub next_ns: Option<u64>,
}

impl Decision {
    /// Device-wide preempts of the whole decision.
    pub fn total_preempts(&self) -> u32 {
        self.preempts.values().sum()
    }
}

/// The policy with its memory (each class's busy/idle edges and idle gaps per partition, each
/// process's state, the last device-wide preempt per partition).
#[derive(Debug, Clone)]
pub struct Policy {
    pub(super) config: std::sync::Arc<PolicyConfig>,
    /// The rule of a class the configuration does not name.
    pub(super) unknown: std::sync::Arc<ClassRule>,
    /// Each rank's class name, shared by the reasons that name it.
    pub(super) names: Vec<(u8, std::sync::Arc<str>)>,
    pub(super) edges: BTreeMap<(GpuId, u8), Edges>,
    /// Each process's state, dense in the observation's (pid) order.
    pub(super) procs: ProcStates,
    pub(super) last_preempt: BTreeMap<GpuId, u64>,
    /// Busy queues per (partition, class rank) in the last observation: what an edge changes
    /// ([`Policy::decide_edges`]).
    pub(super) busy_count: BTreeMap<(GpuId, u8), u32>,
    /// The last decision leaves nothing an edge alone could not update: no partition with more
    /// queues than resident slots, no change rate-limited.
    pub(super) incremental_ok: bool,
    /// The last decision's `next_ns` (an edge decision keeps the earlier of it and its own).
    pub(super) next_ns: Option<u64>,
    /// The last full decision's rule of each process, in its observation's order, with where
    /// its queues are ([`RuleOf`]). An edge decision sees the same processes and looks no
    /// class up by name again.
    pub(super) rule_of: std::sync::Arc<Vec<RuleOf>>,
    /// The edge decision's processes decided again (observation index, state, reason): a
    /// buffer kept between edges.
    pub(super) edge_decided: Vec<(usize, Run, Reason)>,
    /// The edge decision's other buffers (kept, as `edge_decided`, so that an edge allocates
    /// nothing): the (partition, rank) keys its edges touched, with their busy state before;
    /// those whose busy state flipped; the partitions its changes charge a device-wide preempt.
    pub(super) edge_scratch: EdgeScratch,
}

pub(super) fn costs_preempt(r: Run) -> bool {
    matches!(r, Run::Preempted(Level::Deactivate | Level::Suspend))
}

/// Device-wide preempts that entering or leaving `run` costs a process with `queues` queues on
/// one partition: one per queue at level 2 (each UPDATE_QUEUE runs amdkfd's
/// `execute_queues_cpsch` on its own), one at level 3 (SUSPEND_QUEUES / RESUME_QUEUES run it
/// once per partition for all the queues named), none at level 1 or while running.
pub fn preempt_cost(run: Run, queues: u32) -> u32 {
    match run {
        Run::Preempted(Level::Deactivate) => queues,
        Run::Preempted(Level::Suspend) => u32::from(queues > 0),
        Run::Preempted(Level::Hold) | Run::Running => 0,
    }
}

pub(super) fn later(a: Option<u64>, b: u64) -> Option<u64> {
    Some(a.map_or(b, |a| a.min(b)))
}

impl Policy {
    /// A policy with `config` (validated: the error names the broken rule).
    pub fn new(config: PolicyConfig) -> Result<Policy, PolicyError> {
        config.validate()?;
        let names = config
            .classes
            .iter()
            .map(|c| (c.rank, std::sync::Arc::from(c.name.as_str())))
            .collect();
        Ok(Policy {
            names,
            config: std::sync::Arc::new(config),
            unknown: std::sync::Arc::new(ClassRule {
                name: String::new(),
                rank: 0,
                priority: 7,
                level: None,
                starvation: None,
                cu_share_permille: None,
                window: None,
                hw_queues: None,
                hint_timeout_ms: None,
            }),
            edges: BTreeMap::new(),
            procs: ProcStates::default(),
            last_preempt: BTreeMap::new(),
            busy_count: BTreeMap::new(),
            incremental_ok: false,
            next_ns: None,
            rule_of: std::sync::Arc::default(),
            edge_decided: Vec::new(),
            edge_scratch: EdgeScratch::default(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &PolicyConfig {
        &self.config
    }

    /// The state the policy last decided for `pid`.
    pub fn state_of(&self, pid: Pid) -> Option<Run> {
        self.procs.get(pid, 0).map(|p| p.run)
    }

    /// Forgets a process that exited.
    pub fn forget(&mut self, pid: Pid) {
        self.procs.remove(pid);
    }

    /// `pid` runs since `now_ns` although the policy had it preempted: it was released
    /// without the policy (its shim's lease ran out while the agent was hung). The policy
    /// takes that as its state, so a release hold does not preempt it again (a hold only keeps
    /// a preempted process preempted); a busy higher class still does, at the next decision,
    /// which must be a full one ([`Policy::decide_edges`] declines until then). A process the
    /// policy has not decided yet is left alone.
    pub fn released_outside(&mut self, pid: Pid, now_ns: u64) {
        if let Some(st) = self.procs.get_mut(pid, 0)
            && st.run != Run::Running
        {
            st.run = Run::Running;
            st.since_ns = now_ns;
            st.granted_until = None;
            self.incremental_ok = false;
        }
    }

    /// `pid` preempted itself at `now_ns` (a watch of the edge board, docs/agent.md "Direct
    /// edges"), whatever the policy decided for it: the time counts toward its class's
    /// starvation guard from then, as a preemption the policy decided does. So a process kept
    /// preempting itself — by a writer's busy slot the agent cannot see through, or over and
    /// over — is let run its share (target `Running`, reason
    /// [`Reason::StarvationGuard`]: the agent takes its watches away meanwhile). A process
    /// the policy has not decided yet is left alone.
    pub fn preempted_outside(&mut self, pid: Pid, now_ns: u64) {
        if let Some(st) = self.procs.get_mut(pid, 0)
            && st.self_since.is_none()
        {
            st.self_since = Some(now_ns);
            self.incremental_ok = false;
        }
    }

    /// `pid` undid the level it applied itself ([`Policy::preempted_outside`]).
    pub fn released_itself(&mut self, pid: Pid) {
        if let Some(st) = self.procs.get_mut(pid, 0) {
            st.self_since = None;
        }
    }

    /// Decides what every process should be now.
    pub fn decide(&mut self, obs: &Observation<'_>) -> Decision {
        let now = obs.now_ns;
        // The rules by reference (a decision clones no class): the configuration is shared.
        // A class the configuration does not name: rank 0, never preempted.
        let config = std::sync::Arc::clone(&self.config);
        let unknown = std::sync::Arc::clone(&self.unknown);
        // Kept for the edge decisions (reused unless an edge decision still holds it).
        let rule_of = std::sync::Arc::make_mut(&mut self.rule_of);
        rule_of.clear();
        rule_of.extend(obs.processes.iter().map(|p| RuleOf {
            pid: p.pid,
            rule: config.class_index(&p.class),
            one_partition: one_partition(p),
        }));
        let rule_of = std::sync::Arc::clone(&self.rule_of);
        let rules: Vec<&ClassRule> = rule_of
            .iter()
            .map(|r| r.rule.map_or(&*unknown, |k| &config.classes[k]))
            .collect();
        self.observe_edges(obs, &rules);
        // Forget processes that are gone.
        let mut alive: Vec<Pid> = obs.processes.iter().map(|p| p.pid).collect();
        alive.sort_unstable();
        self.procs.retain_sorted(&alive);

        let mut next: Option<u64> = None;
        let mut wanted: Vec<(Run, Reason)> = Vec::with_capacity(obs.processes.len());
        for (i, (p, rule)) in obs.processes.iter().zip(&rules).enumerate() {
            let Some(level) = rule.level else {
                wanted.push((Run::Running, Reason::Unpreemptible));
                continue;
            };
            let Some((reason, until)) = self.blocker(i, p, None, rule, level, now) else {
                wanted.push(self.free(i, p.pid, rule, now, &mut next));
                continue;
            };
            if let Some(until) = until {
                next = later(next, until);
            }
            if self.starved(i, p.pid, rule, now, &mut next) {
                wanted.push((Run::Running, Reason::StarvationGuard));
                continue;
            }
            wanted.push((Run::Preempted(level), reason));
        }

        // Residency guard, per partition: lowest classes first, whole processes.
        let mut pressure = false;
        for part in obs.partitions {
            let queues_on = |i: usize| {
                obs.processes[i]
                    .queues
                    .iter()
                    .filter(|q| q.gpu_id == part.gpu_id)
                    .count() as u32
            };
            let mut active: u32 = (0..obs.processes.len())
                .filter(|&i| !costs_preempt(wanted[i].0))
                .map(queues_on)
                .sum();
            let all: u32 = (0..obs.processes.len()).map(queues_on).sum();
            pressure |= all > part.resident_slots;
            if active <= part.resident_slots {
                continue;
            }
            let top = (0..obs.processes.len())
                .filter(|&i| queues_on(i) > 0)
                .map(|i| rules[i].rank)
                .max()
                .unwrap_or(0);
            // Not one the starvation guard lets run: residency preemptions are under it too
            // (a process reporting more queues than the slots keeps nobody preempted longer).
            let mut order: Vec<usize> = (0..obs.processes.len())
                .filter(|&i| {
                    queues_on(i) > 0
                        && rules[i].rank < top
                        && rules[i].level.is_some()
                        && !costs_preempt(wanted[i].0)
                        && wanted[i].1 != Reason::StarvationGuard
                })
                .collect();
            order.sort_by_key(|&i| (rules[i].rank, obs.processes[i].pid));
            for i in order {
                if active <= part.resident_slots {
                    break;
                }
                if self.starved(i, obs.processes[i].pid, rules[i], now, &mut next) {
                    wanted[i] = (Run::Running, Reason::StarvationGuard);
                    continue;
                }
                active -= queues_on(i);
                wanted[i] = (
                    Run::Preempted(Level::Deactivate),
                    Reason::ResidencyGuard(part.gpu_id),
                );
            }
        }

        // Rate limit and cost, per partition.
        let mut decision = Decision::default();
        let mut blocked_parts: Vec<GpuId> = Vec::new();
        for part in obs.partitions {
            let wants_preempt =
                obs.processes
                    .iter()
                    .zip(&wanted)
                    .enumerate()
                    .any(|(i, (p, (run, _)))| {
                        let cur = self.procs.run_of(p.pid, i);
                        cur != *run
                            && (costs_preempt(cur) || costs_preempt(*run))
                            && p.queues.iter().any(|q| q.gpu_id == part.gpu_id)
                    });
            if !wants_preempt {
                continue;
            }
            let last = self.last_preempt.get(&part.gpu_id).copied();
            match last {
                Some(t) if now < t.saturating_add(self.config.min_preempt_interval_ns) => {
                    blocked_parts.push(part.gpu_id);
                    next = later(next, t + self.config.min_preempt_interval_ns);
                }
                _ => {
                    self.last_preempt.insert(part.gpu_id, now);
                }
            }
        }

        for (i, ((p, rule), (mut run, mut reason))) in
            obs.processes.iter().zip(&rules).zip(wanted).enumerate()
        {
            let cur = self.procs.run_of(p.pid, i);
            let touches_blocked = p.queues.iter().any(|q| blocked_parts.contains(&q.gpu_id));
            if cur != run && (costs_preempt(cur) || costs_preempt(run)) && touches_blocked {
                run = cur;
                reason = Reason::RateLimited;
            }
            self.settle(&mut decision, &mut next, obs, (i, p), rule, (run, reason));
        }
        decision.targets.sort_by_key(|t| t.pid);
        decision.changes.sort_by_key(|c| c.pid);
        decision.next_ns = next;
        self.next_ns = next;
        self.incremental_ok = !pressure && blocked_parts.is_empty();
        decision
    }

    /// Records what was decided for one process: its change and what the change costs in
    /// device-wide preempts, its state and since when, its starvation guard's next time, and
    /// its target. The full and the edge decision both end each process here (`i`: its index
    /// in the observation).
    pub(super) fn settle(
        &mut self,
        decision: &mut Decision,
        next: &mut Option<u64>,
        obs: &Observation<'_>,
        (i, p): (usize, &ProcessObs),
        rule: &ClassRule,
        (run, reason): (Run, Reason),
    ) {
        let now = obs.now_ns;
        let cur = self.procs.run_of(p.pid, i);
        // Only levels 2 and 3 cost device-wide preempts (`preempt_cost`): a change of another
        // level does not look at the process's queues.
        if cur != run {
            for part in obs
                .partitions
                .iter()
                .filter(|_| costs_preempt(cur) || costs_preempt(run))
            {
                let n = p.queues.iter().filter(|q| q.gpu_id == part.gpu_id).count() as u32;
                let cost = preempt_cost(cur, n) + preempt_cost(run, n);
                if cost > 0 {
                    *decision.preempts.entry(part.gpu_id).or_default() += cost;
                }
            }
            decision.changes.push(Change {
                pid: p.pid,
                from: cur,
                to: run,
            });
        }
        let entry = self.procs.or_insert(
            p.pid,
            i,
            ProcState {
                run,
                since_ns: now,
                granted_until: None,
                self_since: None,
            },
        );
        if entry.run != run {
            entry.run = run;
            entry.since_ns = now;
        }
        // Preempted from now: its starvation guard's time starts now.
        if let (Some(s), Run::Preempted(_)) = (rule.starvation, run)
            && cur != run
        {
            *next = later(*next, now.saturating_add(s.after_ns));
        }
        decision.targets.push(ProcessDecision {
            pid: p.pid,
            run,
            reason,
            priority: rule.priority,
            cu_masks: self.cu_masks(rule, obs.partitions, p),
        });
    }

    /// What a process no higher class blocks is: running — under its starvation guard's
    /// grant when it preempted itself long enough ([`Policy::preempted_outside`]) or a grant
    /// holds, so its watches are taken away meanwhile. Shared by the full and the edge
    /// decision.
    pub(super) fn free(
        &mut self,
        i: usize,
        pid: Pid,
        rule: &ClassRule,
        now: u64,
        next: &mut Option<u64>,
    ) -> (Run, Reason) {
        let guarded = self
            .procs
            .get(pid, i)
            .is_some_and(|st| st.self_since.is_some() || st.granted_until.is_some());
        if guarded && self.starved(i, pid, rule, now, next) {
            (Run::Running, Reason::StarvationGuard)
        } else {
            (Run::Running, Reason::Free)
        }
    }

    /// The starvation guard of a process its class's rule would preempt: true while it lets it
    /// run (granted when it has been preempted `after_ns`, for `run_ns`). Keeps `next` at the
    /// guard's next time.
    pub(super) fn starved(
        &mut self,
        i: usize,
        pid: Pid,
        rule: &ClassRule,
        now: u64,
        next: &mut Option<u64>,
    ) -> bool {
        let (Some(s), Some(st)) = (rule.starvation, self.procs.get_mut(pid, i)) else {
            return false;
        };
        // Preempted since: by the policy's decision, or by itself, whichever came first.
        let decided = matches!(st.run, Run::Preempted(_)).then_some(st.since_ns);
        let since = match (decided, st.self_since) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if let Some(until) = st.granted_until {
            if now < until {
                *next = later(*next, until);
                return true;
            }
            st.granted_until = None;
        } else if let Some(since) = since {
            if now >= since.saturating_add(s.after_ns) {
                st.granted_until = Some(now + s.run_ns);
                // It runs its share: what it applied itself is undone (its watches go).
                st.self_since = None;
                *next = later(*next, now + s.run_ns);
                return true;
            }
            *next = later(*next, since + s.after_ns);
        }
        false
    }

    /// Takes the busy/idle edge of every class on every partition from `obs` (a class without a
    /// busy queue there, or whose processes are gone, is idle).
    pub(super) fn history(&self) -> usize {
        match self.config.release {
            Release::Cost(c) => c.history as usize,
            Release::Hysteresis => 1,
        }
    }

    fn observe_edges(&mut self, obs: &Observation<'_>, rules: &[&ClassRule]) {
        let history = self.history();
        self.busy_count.clear();
        for (p, rule) in obs.processes.iter().zip(rules) {
            for q in p.queues.iter().filter(|q| q.busy) {
                *self.busy_count.entry((q.gpu_id, rule.rank)).or_default() += 1;
            }
        }
        for key in self.busy_count.keys() {
            self.edges
                .entry(*key)
                .or_insert_with(|| Edges::busy_at(obs.now_ns))
                .observe(obs.now_ns, true, history);
        }
        for (key, e) in &mut self.edges {
            if !self.busy_count.contains_key(key) {
                e.observe(obs.now_ns, false, history);
            }
        }
    }
}
