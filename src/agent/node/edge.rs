//! The edge decision: when only queues' busy edges arrived since the last decision, the last
//! observation is patched with them and the policy decides what they change
//! ([`crate::policy::Policy::decide_edges`]); only the processes it decides again are
//! reconciled. Anything else (a process came or went, a registry, a control request, a failed
//! command, a timer the last decision set, a process whose reports went stale) makes the
//! next decision the full one ([`NodeState::decide`]).

use std::time::{Duration, Instant};

use super::super::conn::ConnId;
use super::decide::tracer_level;
use super::reconcile::{RunCmds, reconcile_run};
use super::why::Why;
use super::{NodeState, Out};
use crate::ids::{GpuId, Pid};
use crate::policy::{Observation, QueueEdge};

/// One process's commands of an edge decision, with what sending them needs.
#[derive(Debug, Clone, Copy)]
pub(super) struct EdgeStep {
    /// Its first partition (commands go out in partition order).
    gpu: GpuId,
    pid: Pid,
    conn: ConnId,
    cmds: RunCmds,
}

impl NodeState {
    /// Decides the pending edges alone. False: nothing was done, the full decision must run.
    pub(super) fn decide_edges(&mut self, now: Instant, out: &mut Vec<Out>) -> bool {
        if self.next_decide.is_some_and(|d| now >= d) {
            return false;
        }
        let (stale_at, went_stale) = self.mark_stale_reporters(now);
        if went_stale {
            return false;
        }
        // Patch the observation (in pid order, like the process table) with the edges.
        let mut edges = std::mem::take(&mut self.edge_buf);
        edges.clear();
        for &(pid, qid, busy) in &self.edges_pending {
            let Ok(i) = self.observed.binary_search_by_key(&pid, |o| o.pid) else {
                continue;
            };
            let Some(q) = self.observed[i]
                .queues
                .iter_mut()
                .find(|q| q.queue_id == qid)
            else {
                continue;
            };
            edges.push(QueueEdge {
                process: i,
                gpu_id: q.gpu_id,
                was_busy: q.busy,
                busy,
            });
            q.busy = busy;
        }
        let now_ns = self.now_ns(now);
        let mut decision = std::mem::take(&mut self.edge_decision);
        let decided = self.policy.decide_edges_into(
            &Observation {
                now_ns,
                partitions: &self.partitions,
                processes: &self.observed,
            },
            &edges,
            &mut decision,
        );
        self.edge_buf = edges;
        if !decided {
            self.edge_decision = decision;
            return false;
        }
        self.edges_pending.clear();
        self.counters.edge_decisions += 1;
        self.waiters.expire(now, out);
        // The policy's next time (its own earliest), the retries and the staleness: the same
        // parts as the full decision's.
        let policy_next = decision
            .next_ns
            .map(|t| self.started + Duration::from_nanos(t));
        self.direct_cover();
        // The steps' commands: inline, in a buffer kept between decisions, with what sending
        // them needs (each process is read once).
        let mut steps = std::mem::take(&mut self.edge_steps);
        steps.clear();
        // The targets are in pid order (the policy settles them so), as the process table:
        // one walk finds them all, with no search per target, reading the entries in the
        // order they lie in.
        if !decision.targets.is_sorted_by_key(|t| t.pid) {
            decision.targets.sort_by_key(|t| t.pid);
        }
        let mut table = self.procs.iter_mut().peekable();
        for t in decision.targets.drain(..) {
            while table.next_if(|(pid, _)| **pid < t.pid).is_some() {}
            let Some((_, p)) = table.next_if(|(pid, _)| **pid == t.pid) else {
                continue;
            };
            let (mut run, mut why) = (t.run, Why::Policy(t.reason));
            tracer_level(p, &mut run, &mut why);
            let (cmds, retry_at) = reconcile_run(p, run, why, now);
            if let Some(at) = retry_at {
                self.retry_next = Some(self.retry_next.map_or(at, |n| n.min(at)));
            }
            if !cmds.is_empty() {
                steps.push(EdgeStep {
                    gpu: p.first_gpu(),
                    pid: t.pid,
                    conn: p.conn,
                    cmds,
                });
            }
        }
        self.edge_decision = decision;
        self.next_decide = [policy_next, self.retry_next, stale_at]
            .into_iter()
            .flatten()
            .min();
        // In partition order, as the full decision sends them (given in pid order: sorted
        // already when the processes' first partitions are).
        if !steps.is_sorted_by_key(|s| (s.gpu, s.pid)) {
            steps.sort_unstable_by_key(|s| (s.gpu, s.pid));
        }
        for s in &steps {
            for cmd in s.cmds.iter() {
                self.send_to(s.pid, s.conn, cmd, now, out);
            }
        }
        self.edge_steps = steps;
        true
    }
}
