//! Prepared edges: the commands of the next busy or idle edge, decided before it comes.
//!
//! After each decision ([`NodeState::prepare`], once the commands are written), the node asks,
//! for each preempting class on each partition, what its next flip would send: the class going
//! busy there (any of its idle queues going busy), or going idle (its one busy queue going
//! idle). It asks with the code the edge decision runs: the policy's edge decision on a copy of
//! the policy, and one reconcile step on each process it decides again, whose fields are put
//! back after it ([`super::reconcile::preview_run`]). When that
//! edge comes and nothing else happened since (no other decision, no command, nothing that
//! makes the next decision a full one, before the time the last decision set; several edges
//! that are all the same flip, as a doorbell's, count as one), the decision on the edge's path
//! is a lookup ([`NodeState::fire_prepared`]): the prepared commands, numbered and built when
//! they were prepared, are handed to the server at once, with no policy walk, no reconcile step
//! and no message built on the path.
//!
//! A decision that just preempted or released leaves the policy's rate limit
//! (`min_preempt_interval_ms`) closed for a while, and an edge inside it is declined to the
//! full decision. The flips are then decided as at the time the limit opens, and the plan
//! answers only edges from then on (without this, no flip after a release could be prepared:
//! the release is the decision before the next busy edge).
//!
//! After they are written ([`NodeState::confirm_prepared`]), the processes are recorded as
//! told, and the edge decision runs as it always does. It finds each process in the state the
//! prepared commands put it in, so it sends nothing more; if the prepared commands were not
//! what it decides, it sends what brings the processes there, and counts those commands in
//! `prepared_misses` (the equivalence test in `tests_edges.rs` requires none). Everything the
//! edge decision records (the class's busy edge for the release rule, the processes' reasons,
//! the next decision's time) is recorded by that run, at the edge's time.
//!
//! Not prepared: a flip that changes a process with direct edges' watches (it may preempt
//! itself on the board's edge, and has no command on the path then), one with a step that would
//! retry a failed level, and more than [`MAX_PLANS`] flips.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::super::conn::ConnId;
use super::decide::{preempts_others, tracer_level};
use super::reconcile::{RunCmds, preview_run};
use super::sent::Sent;
use super::why::Why;
use super::{NodeState, Out};
use crate::ids::{GpuId, Pid, QueueId};
use crate::policy::{Decision, Observation, QueueEdge, Run};

/// Flips prepared after one decision at most (each costs a copy of the policy and a preview
/// of each process it changes, off the commands' path).
pub(super) const MAX_PLANS: usize = 8;

/// One process's prepared commands.
#[derive(Debug, Clone, Copy)]
struct Prepared {
    gpu: GpuId,
    pid: Pid,
    conn: ConnId,
    cmds: RunCmds,
    /// What it is told to be.
    after: Run,
}

/// The commands of one class's flip on one partition.
#[derive(Debug)]
pub(super) struct Plan {
    /// Prepared after this decision (`Counters::decisions`) ...
    decision: u64,
    /// ... when this was the last command's sequence number.
    seq: u64,
    /// Valid from this time (when the rate limit lets the flip's preempts through; `None`:
    /// at once) ...
    from: Option<Instant>,
    /// ... and before this one (the decision's next time then).
    until: Option<Instant>,
    /// The queues whose edge it answers, and to which state (busy or idle).
    queues: Vec<(Pid, QueueId)>,
    busy: bool,
    /// The commands, per process, in the order they go out.
    steps: Vec<Prepared>,
    /// Their messages, numbered from `seq + 1`, as the server takes them ...
    out: Vec<Out>,
    /// ... and their bookkeeping, as `send_to` logs it (moved to the log after the write,
    /// or by whatever reads the log first: [`NodeState::log_prepared`]).
    sent: Vec<Sent>,
    /// When its commands went out.
    fired: Option<Instant>,
}

#[cfg(test)]
impl Plan {
    /// Whether it was decided for when the rate limit opens (it answers edges from then on).
    pub(super) fn deferred(&self) -> bool {
        self.from.is_some()
    }
}

impl NodeState {
    /// Prepares the next flip of each preempting class on each partition (see the module).
    /// Called once a decision's commands are written.
    pub(super) fn prepare(&mut self, now: Instant) {
        self.plans.clear();
        // The flips are decided as at the first time the rate limit lets a preempt through:
        // an edge before it is declined to the full decision anyway, one after it decides
        // alike. Nothing is prepared if the last decision's next time comes first.
        let at = self.when_preempts_free(now);
        if !self.cfg.prepared_edges
            || self.full_due
            || !self.edges_pending.is_empty()
            || self.next_decide.is_some_and(|d| at >= d)
        {
            return;
        }
        // Per (partition, rank) of a preempting class: its busy and its idle queues.
        type Queues = (Vec<(usize, Pid, QueueId)>, Vec<(usize, Pid, QueueId)>);
        let mut keys: BTreeMap<(GpuId, u8), Queues> = BTreeMap::new();
        let policy = &self.cfg.policy;
        for (i, o) in self.observed.iter().enumerate() {
            if !preempts_others(policy, &o.class) {
                continue;
            }
            let Some(rank) = policy.class(&o.class).map(|c| c.rank) else {
                continue;
            };
            for q in &o.queues {
                let (busy, idle) = keys.entry((q.gpu_id, rank)).or_default();
                if q.busy { busy } else { idle }.push((i, o.pid, q.queue_id));
            }
        }
        for (busy, idle) in keys.into_values() {
            if self.plans.len() >= MAX_PLANS {
                break;
            }
            // The flip: the first idle queue going busy (any other gives the same commands),
            // or the one busy queue going idle.
            let (queues, to_busy) = match (busy.as_slice(), idle.is_empty()) {
                ([], false) => (idle, true),
                ([_], _) => (busy, false),
                _ => continue,
            };
            let (i, _, qid) = queues[0];
            let Some(steps) = self.speculate(i, qid, to_busy, at) else {
                continue;
            };
            // Numbered and built as `send_to` numbers and builds them.
            let (mut out, mut sent, mut seq) = (Vec::new(), Vec::new(), self.seq);
            for s in &steps {
                for cmd in s.cmds.iter() {
                    seq += 1;
                    out.push(Out::Shim(s.conn, cmd.message(seq, self.cfg.grace_period)));
                    sent.push(Sent {
                        pid: s.pid,
                        seq,
                        cmd,
                    });
                }
            }
            self.plans.push(Plan {
                decision: self.counters.decisions,
                seq: self.seq,
                from: (at > now).then_some(at),
                until: self.next_decide,
                queues: queues.iter().map(|&(_, pid, q)| (pid, q)).collect(),
                busy: to_busy,
                steps,
                out,
                sent,
                fired: None,
            });
        }
    }

    /// `now`, or the later time when the policy's rate limit lets a preempt through again.
    fn when_preempts_free(&self, now: Instant) -> Instant {
        let free = self.started + Duration::from_nanos(self.policy.preempts_free_at_ns());
        now.max(free)
    }

    /// What the edge decision would send if queue `qid` of observed process `index` went
    /// `busy` at `now`: the policy on a copy, a reconcile step previewed on each process.
    /// `None`: the edge decision could not take it alone, or a step would retry a failed level.
    fn speculate(
        &mut self,
        index: usize,
        qid: QueueId,
        busy: bool,
        now: Instant,
    ) -> Option<Vec<Prepared>> {
        let now_ns = self.now_ns(now);
        let k = self.observed[index]
            .queues
            .iter()
            .position(|q| q.queue_id == qid)?;
        let q = &mut self.observed[index].queues[k];
        let edge = QueueEdge {
            process: index,
            gpu_id: q.gpu_id,
            was_busy: q.busy,
            busy,
        };
        q.busy = busy;
        let mut policy = self.policy.clone();
        let mut decision = Decision::default();
        let decided = policy.decide_edges_into(
            &Observation {
                now_ns,
                partitions: &self.partitions,
                processes: &self.observed,
            },
            &[edge],
            &mut decision,
        );
        // The observation is the last decision's again.
        self.observed[index].queues[k].busy = edge.was_busy;
        if !decided {
            return None;
        }
        let mut steps = Vec::with_capacity(decision.targets.len());
        for t in decision.targets {
            let Some(p) = self.procs.get_mut(&t.pid) else {
                continue;
            };
            // Its watch may apply the level itself, depending on who is busy after the edge
            // (`direct::direct_cover`): left to the edge decision.
            if !p.watches.is_empty() {
                return None;
            }
            let (mut run, mut why) = (t.run, Why::Policy(t.reason));
            tracer_level(p, &mut run, &mut why);
            let (cmds, retry_at, after) = preview_run(p, run, why, now);
            if retry_at.is_some() {
                return None;
            }
            if !cmds.is_empty() {
                steps.push(Prepared {
                    gpu: p.first_gpu(),
                    pid: t.pid,
                    conn: p.conn,
                    cmds,
                    after,
                });
            }
        }
        // In partition order, as the edge decision sends them.
        steps.sort_unstable_by_key(|s| (s.gpu, s.pid));
        Some(steps)
    }

    /// The decision on the path of an edge that was prepared for: its commands, numbered and
    /// built already, handed to the server (and their bookkeeping to the log), as `send_to`
    /// would have. False: nothing prepared answers what arrived (or something else happened
    /// since); decide as always.
    pub(super) fn fire_prepared(&mut self, now: Instant, out: &mut Vec<Out>) -> bool {
        let Some(&(pid, qid, busy)) = self.edges_pending.first() else {
            return false;
        };
        let Some(k) = self.plans.iter().position(|pl| {
            pl.busy == busy
                && pl.decision + 1 == self.counters.decisions
                && pl.seq == self.seq
                && pl.from.is_none_or(|f| now >= f)
                && pl.until.is_none_or(|u| now < u)
                && pl.queues.contains(&(pid, qid))
        }) else {
            return false;
        };
        // Several edges (a doorbell marks all of a process's queues busy) are the same flip
        // when each is one the plan answers, the same way.
        let answers =
            |&(p, q, b): &(Pid, QueueId, bool)| b == busy && self.plans[k].queues.contains(&(p, q));
        if !self.edges_pending[1..].iter().all(answers) {
            return false;
        }
        let mut plan = self.plans.swap_remove(k);
        let n = plan.sent.len() as u64;
        self.seq += n;
        self.counters.commands += n;
        if out.is_empty() {
            // The usual case: the plan's buffer becomes the outbox (nothing copied; the
            // outbox's empty buffer goes with the plan).
            std::mem::swap(out, &mut plan.out);
        } else {
            out.append(&mut plan.out);
        }
        plan.fired = Some(now);
        self.counters.prepared_edges += 1;
        self.confirming = Some(plan);
        true
    }

    /// The fired plan's bookkeeping records join the log `send_to` keeps (called first by
    /// [`NodeState::record_pending`], so whatever reads what awaits an ack sees them).
    pub(super) fn log_prepared(&mut self) {
        let Some(plan) = self.confirming.as_mut() else {
            return;
        };
        if plan.sent.is_empty() {
            return;
        }
        // The log holds no unrecorded command here: the decision recorded it before it fired,
        // and everything that adds to the log comes through here first.
        self.sent_log.at = plan.fired;
        self.sent_log.sent.append(&mut plan.sent);
    }

    /// After a prepared edge's commands were written: the processes are recorded as told, and
    /// the edge decision runs as always (see the module). Its commands, if any, go to `out`.
    pub(super) fn confirm_prepared(&mut self, now: Instant, out: &mut Vec<Out>) {
        if self.confirming.is_none() {
            return;
        }
        let t = Instant::now();
        // Its processes await its commands' acks (the records join the log first).
        self.record_pending();
        let Some(plan) = self.confirming.take() else {
            return;
        };
        if tracing::enabled!(tracing::Level::DEBUG) {
            for s in &plan.steps {
                for cmd in s.cmds.iter() {
                    tracing::debug!(pid = %s.pid, "command {cmd:?} (prepared)");
                }
            }
        }
        for s in &plan.steps {
            if let Some(p) = self.procs.get_mut(&s.pid) {
                p.applied = s.after;
            }
        }
        let seq = self.seq;
        if self.full_due || !self.decide_edges(now, out) {
            self.decide_full(now, out);
        }
        let missed = self.seq - seq;
        if missed > 0 {
            self.counters.prepared_misses += missed;
            tracing::warn!(
                "{missed} command(s) the prepared edge did not have were sent after it (a bug: the prepared commands are the edge decision's)"
            );
        }
        self.confirm_us.push(t.elapsed().as_secs_f64() * 1e6);
    }
}
