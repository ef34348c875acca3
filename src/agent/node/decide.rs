//! A decision: the policy on what the processes report, what the node wants of each process,
//! one reconcile step per process, and the commands sent (numbered, counted, in partition
//! order).

use std::time::{Duration, Instant};

use super::command::Command;
use super::process::Proc;
use super::reconcile::{Step, Want, reconcile};
use super::why::Why;
use super::{NodeState, Out};
use crate::ids::{GpuId, Pid};
use crate::policy::{Decision, Observation, Run};
use crate::proto::Level;
use crate::proto::control::Control;

impl NodeState {
    /// Decides what every process should be and returns the commands that get it there (in
    /// partition order, so a partition's commands go out back to back), then brings the
    /// busy and preempted times up to date ([`NodeState::account`]).
    pub fn decide(&mut self, now: Instant, out: &mut Vec<Out>) {
        self.decide_commands(now, out);
        self.after_write(now, out);
    }

    /// What follows a decision's commands, off their path: the busy and preempted times
    /// ([`NodeState::account`]) and the lease renewals when due (their messages go to `out`).
    /// The server calls it once the commands are written, and writes what it adds.
    pub fn after_write(&mut self, now: Instant, out: &mut Vec<Out>) {
        self.account(now);
        self.renew(now, out);
    }

    /// [`NodeState::decide`] without what follows the commands: the server writes the
    /// commands first and calls [`NodeState::after_write`] after, since no command depends on
    /// the times or the renewals.
    pub fn decide_commands(&mut self, now: Instant, out: &mut Vec<Out>) {
        self.counters.decisions += 1;
        // The last decision's commands, should it not have been accounted.
        self.record_pending();
        self.direct_revisit(now);
        if !self.full_due && self.decide_edges(now, out) {
            return;
        }
        self.decide_full(now, out);
    }

    /// The full decision: every process observed, decided and reconciled.
    pub(super) fn decide_full(&mut self, now: Instant, out: &mut Vec<Out>) {
        self.full_due = false;
        self.edges_pending.clear();
        let (stale_at, _) = self.mark_stale(now);
        self.waiters.expire(now, out);
        self.end_tracer_sessions(out);
        self.edges(out);
        self.list_stale_candidates();
        self.direct_writers(out);
        // The observation is rebuilt in place: the last one's allocations are reused.
        let mut observed = std::mem::take(&mut self.observed);
        let mut n = 0;
        for (pid, p) in self
            .procs
            .iter()
            .filter(|(_, p)| p.manual.is_none() && !p.leaving)
        {
            match observed.get_mut(n) {
                Some(o) => p.observe_into(*pid, o),
                None => observed.push(p.observe(*pid)),
            }
            n += 1;
        }
        observed.truncate(n);
        let now_ns = self.now_ns(now);
        let decision = self.policy.decide(&Observation {
            now_ns,
            partitions: &self.partitions,
            processes: &observed,
        });
        self.observed = observed;
        self.next_decide = decision
            .next_ns
            .map(|t| self.started + Duration::from_nanos(t));
        let wants = self.wants(decision);
        self.direct_cover();
        let mut steps: Vec<(GpuId, Pid, Step)> = Vec::with_capacity(wants.len());
        let mut retry_next = None;
        for ((pid, p), want) in self.procs.iter_mut().zip(wants) {
            let step = reconcile(p, want, now);
            if let Some(at) = step.retry_at {
                self.next_decide = Some(self.next_decide.map_or(at, |n| n.min(at)));
                retry_next = Some(retry_next.map_or(at, |n: Instant| n.min(at)));
            }
            if !step.is_empty() {
                steps.push((p.first_gpu(), *pid, step));
            }
        }
        if let Some(at) = stale_at {
            self.next_decide = Some(self.next_decide.map_or(at, |n| n.min(at)));
        }
        self.retry_next = retry_next;
        self.direct_watches(out);
        self.send_steps(steps, now, out);
    }

    /// Processes whose busy reports went stale (stopped or hung while busy) count as idle
    /// from now; returns when the next one would go stale.
    /// Also whether a process went stale now.
    pub(super) fn mark_stale(&mut self, now: Instant) -> (Option<Instant>, bool) {
        let mut st = (None, false);
        for (pid, p) in &mut self.procs {
            mark_stale_one(&mut self.counters, *pid, p, now, &mut st);
        }
        st
    }

    /// [`NodeState::mark_stale`] for an edge decision: only the processes that can be or go
    /// stale between full decisions — those whose busy edges are on, and those stale already
    /// (listed by the last full decision; for every other process the walk would change
    /// nothing and add no time).
    pub(super) fn mark_stale_reporters(&mut self, now: Instant) -> (Option<Instant>, bool) {
        let mut st = (None, false);
        for pid in &self.stale_candidates {
            if let Some(p) = self.procs.get_mut(pid) {
                mark_stale_one(&mut self.counters, *pid, p, now, &mut st);
            }
        }
        st
    }

    /// The processes [`NodeState::mark_stale_reporters`] looks at, after a full decision set
    /// the busy edges.
    fn list_stale_candidates(&mut self) {
        self.stale_candidates.clear();
        self.stale_candidates.extend(
            self.procs
                .iter()
                .filter(|(_, p)| p.edges_sent == Some(true) || p.stale)
                .map(|(pid, _)| *pid),
        );
    }

    /// Busy edges on for the shims of processes whose class preempts another, off for the
    /// rest. A traced process's session (the
    /// tracer) takes the same message: it samples such a process finely while it is busy.
    fn edges(&mut self, out: &mut Vec<Out>) {
        for p in self.procs.values_mut() {
            let on = preempts_others(&self.cfg.policy, p.class());
            // Said again when its class's hint bound changed (a reload).
            let hint = super::hint::timeout_for(&self.cfg.policy, p.class(), on);
            if (p.edges_sent != Some(on) && (on || p.edges_sent.is_some()))
                || (on && p.hint.timeout != hint)
            {
                p.edges_sent = Some(on);
                p.hint.timeout = hint;
                let hint_timeout_ms = super::hint::as_ms(p.hint.timeout);
                out.push(Out::Shim(
                    p.conn,
                    crate::proto::AgentMsg::Edges {
                        on,
                        hint_timeout_ms,
                    },
                ));
            }
        }
    }

    /// Renews the leases of preempted processes every quarter lease: a shim's, and a traced
    /// process's (the tracer thread resumes a suspension whose lease runs out, so an event loop
    /// that stalls never leaves a traced process suspended).
    pub(super) fn renew(&mut self, now: Instant, out: &mut Vec<Out>) {
        let leased = |p: &&Proc| {
            matches!(p.via, Control::Shim | Control::Tracer)
                && (p.applied != Run::Running
                    || p.pending.values().any(|c| c.preempt)
                    || !p.watches.is_empty())
        };
        // Whether any is preempted (stops at the first), then the renewals only when due.
        if !self.procs.values().any(|p| leased(&p)) {
            self.next_renew = None;
            return;
        }
        let Some(due) = self.next_renew else {
            // The first preempt started its lease: the renewals start a quarter lease later.
            self.next_renew = Some(now + self.cfg.lease / 4);
            return;
        };
        if now < due {
            return;
        }
        for p in self.procs.values().filter(leased) {
            out.push(Out::Shim(p.conn, crate::proto::AgentMsg::Renew {}));
        }
        self.next_renew = Some(now + self.cfg.lease / 4);
    }

    /// Tracer sessions whose class no longer takes processes without the shim are ended.
    fn end_tracer_sessions(&mut self, out: &mut Vec<Out>) {
        for p in self.procs.values_mut() {
            if p.via == Control::Tracer
                && !p.leaving
                && self.cfg.control(p.class()) != Control::Tracer
            {
                p.leaving = true;
                out.push(Out::Untrace(
                    p.conn,
                    format!("its class {} no longer has control = \"tracer\"", p.class()),
                ));
            }
        }
    }

    /// What the node wants of each process: the policy's decision, a manual preemption in its
    /// place, level 3 for a traced process preempted at any level (the tracer's only level),
    /// and its class's settings. One per process, in pid order.
    fn wants(&self, decision: Decision) -> Vec<Want> {
        // The decision's targets are in pid order, a subset of the processes.
        let mut targets = decision.targets.into_iter().peekable();
        let mut wants = Vec::with_capacity(self.procs.len());
        for (pid, p) in &self.procs {
            let mut w = Want::default();
            if let Some(t) = targets.next_if(|t| t.pid == *pid) {
                w.run = Some((t.run, Why::Policy(t.reason)));
                w.cu_masks = t.cu_masks;
            }
            if let Some(l) = p.manual
                && !p.leaving
            {
                w.run = Some((Run::Preempted(l), "kfdq suspend".into()));
            }
            if let Some((run, why)) = &mut w.run {
                tracer_level(p, run, why);
            }
            w.priority = self.wanted_priority(p);
            w.window = self.cfg.policy.class(p.class()).and_then(|c| c.window);
            wants.push(w);
        }
        wants
    }

    /// Level 0: the priority a process's queues should have — the priority set by hand, else
    /// its class's configured priority — or `None` when what its shim reports already gives
    /// it: the class is one of the shim's built-in bands, its configured priority is the
    /// band's middle (what the band gives a normal stream), and every queue the shim reports
    /// is at the band's pick for the priority the runtime asked for (the application's own
    /// stream priorities keep their order inside the class). Compared with what the shim
    /// reports, never with what it is assumed to have applied: a process moved to another
    /// class and back, or one an earlier agent set, gets its class's priority again.
    fn wanted_priority(&self, p: &Proc) -> Option<u32> {
        use crate::policy::class::{Class, Position, position_of_kfd};
        if let Some(v) = p.priority_override {
            return Some(v);
        }
        let want = u32::from(self.cfg.rule(p.class())?.priority);
        if let Ok(band) = Class::parse(p.class()).map(Class::band)
            && band.pick(Position::Mid) == want
            && p.registry
                .queues
                .iter()
                .all(|q| q.effective_priority == band.pick(position_of_kfd(q.requested_priority)))
        {
            return None;
        }
        Some(want)
    }

    /// Sends the steps' commands phase by phase: preempts and releases in partition order
    /// (`(first gpu, pid, step)`, given in pid order), then priorities, windows and CU masks in
    /// pid order.
    pub(super) fn send_steps(
        &mut self,
        mut steps: Vec<(GpuId, Pid, Step)>,
        now: Instant,
        out: &mut Vec<Out>,
    ) {
        let mut by_partition: Vec<usize> = (0..steps.len()).collect();
        by_partition.sort_by_key(|&i| (steps[i].0, steps[i].1));
        for i in by_partition {
            let (_, pid, step) = &steps[i];
            for cmd in step.run.iter() {
                self.send(*pid, cmd, now, out);
            }
        }
        let phases: [fn(&mut Step) -> Option<Command>; 3] = [
            |s| s.priority.take(),
            |s| s.window.take(),
            |s| s.cu_mask.take(),
        ];
        for phase in phases {
            for (_, pid, step) in &mut steps {
                if let Some(cmd) = phase(step) {
                    self.send(*pid, cmd, now, out);
                }
            }
        }
    }

    /// Sends `cmd` to `pid`'s shim (or tracer session) as the next command
    /// ([`NodeState::send_to`]).
    pub(super) fn send(
        &mut self,
        pid: Pid,
        cmd: Command,
        now: Instant,
        out: &mut Vec<Out>,
    ) -> Option<u64> {
        let conn = self.procs.get(&pid)?.conn;
        Some(self.send_to(pid, conn, cmd, now, out))
    }

    /// Releases every preempted process (shutdown). Returns how many commands were sent.
    pub fn release_all(&mut self, now: Instant, out: &mut Vec<Out>) -> usize {
        self.full_due = true;
        self.record_pending();
        let held: Vec<(Pid, Level)> = self
            .procs
            .iter_mut()
            .filter_map(|(pid, p)| match p.applied {
                Run::Preempted(l) => {
                    p.applied = Run::Running;
                    p.manual = None;
                    Some((*pid, l))
                }
                Run::Running => None,
            })
            .collect();
        for (pid, l) in &held {
            self.send(*pid, Command::Release(*l), now, out);
        }
        self.account(now);
        held.len()
    }
}

/// Whether `class` ranks above a class that has a preemption level.
pub(super) fn preempts_others(policy: &crate::policy::PolicyConfig, class: &str) -> bool {
    let Some(rank) = policy.class(class).map(|c| c.rank) else {
        return false;
    };
    policy
        .classes
        .iter()
        .any(|c| c.rank < rank && c.level.is_some())
}

/// A traced process preempted at any level is preempted at level 3 (the tracer's only level).
pub(super) fn tracer_level(p: &Proc, run: &mut Run, why: &mut Why) {
    if matches!(run, Run::Preempted(l) if *l != Level::Suspend) && p.via == Control::Tracer {
        *run = Run::Preempted(Level::Suspend);
        *why = Why::Text(format!("{} (level 3: the tracer's only level)", why.text()));
    }
}

/// One process's staleness at `now` ([`NodeState::mark_stale`]): `st` is (when the next one
/// goes stale, whether one went stale now).
fn mark_stale_one(
    counters: &mut crate::proto::control::Counters,
    pid: Pid,
    p: &mut Proc,
    now: Instant,
    st: &mut (Option<Instant>, bool),
) {
    let working = p.stale || p.reported_any_busy();
    if let Some(w) = super::hint::expire(counters, pid, &mut p.hint, working, now, st) {
        p.refresh_busy();
        p.warn(w);
    }
    let (stale, at) = p.staleness(now);
    if stale && !p.stale {
        st.1 = true;
        counters.stale_busy += 1;
        p.warn(format!(
            "said nothing for {} ms while busy (stopped or hung): its queues count as idle until it reports again",
            crate::proto::BUSY_STALE.as_millis()
        ));
        tracing::info!(pid = %pid, "busy reports stale");
    }
    if p.stale != stale {
        p.stale = stale;
    }
    if let Some(at) = at {
        st.0 = Some(st.0.map_or(at, |n: Instant| n.min(at)));
    }
}
