//! What a shim (or a tracer session) reports: its registry, its queues' activity, its acks.

use std::time::Instant;

use super::{NodeState, Out};
use crate::ids::Pid;
use crate::policy::Run;
use crate::proto::{AgentMsg, ShimMsg};

/// Queue ids a process's Activity reports may name beyond its registry's (a queue reported
/// busy before the registry that lists it arrives); reports on more are dropped, so the agent
/// keeps at most this many entries more than the process has queues. The shim sends its
/// registry right after it creates a queue, so one or two is the most seen in practice.
pub const UNREGISTERED_ACTIVITY: usize = 16;

impl NodeState {
    /// A message from the shim of `pid`. Returns whether a decision is due.
    pub fn shim_message(
        &mut self,
        pid: Pid,
        msg: ShimMsg,
        now: Instant,
        out: &mut Vec<Out>,
    ) -> bool {
        // Acks and registries are read against what awaits an ack.
        self.record_pending();
        let Some(p) = self.procs.get_mut(&pid) else {
            return false;
        };
        p.last_heard = Some(now);
        // News from a process whose reports had gone stale: it is live again.
        let revived = std::mem::take(&mut p.stale);
        self.full_due |= revived;
        // Set when the shim released its process on its own (the policy is told after).
        let mut released = false;
        let due = revived
            | match msg {
                ShimMsg::Hello { .. } => {
                    out.push(Out::Shim(
                        p.conn,
                        AgentMsg::Error {
                            detail: "hello is only the first message of a session".into(),
                        },
                    ));
                    false
                }
                ShimMsg::Registry(reg) => {
                    p.busy
                        .retain(|q, _| reg.queues.iter().any(|r| r.queue_id == *q));
                    let expired = reg.lease_expiries.saturating_sub(p.registry.lease_expiries);
                    if expired > 0 {
                        // The shim released everything on its own: the agent's view and the
                        // policy's follow, and the next decision preempts it again if a higher
                        // class is still busy (a release hold alone does not preempt it again).
                        self.counters.lease_expiries += expired;
                        p.applied = Run::Running;
                        released = true;
                        p.warn(format!(
                        "its shim released it on its own: {expired} lease(s) ran out before the agent renewed them (the agent was hung, stopped or overloaded)"
                    ));
                    }
                    let refused = reg
                        .release_failures
                        .saturating_sub(p.registry.release_failures);
                    if refused > 0 {
                        // The shim owes these releases and retries them until they hold; the
                        // registry shows the queues preempted meanwhile.
                        self.counters.release_failures += refused;
                        p.warn(format!(
                            "the kernel refused {refused} release(s) of its queues; its shim retries until they hold"
                        ));
                    }
                    p.set_registry(reg);
                    p.refresh_busy();
                    self.full_due = true;
                    true
                }
                ShimMsg::Activity { queue_id, busy: _ }
                    if !p.busy.contains_key(&queue_id)
                        && !p.registry.queues.iter().any(|q| q.queue_id == queue_id)
                        && p.busy.len() >= p.registry.queues.len() + UNREGISTERED_ACTIVITY =>
                {
                    // A queue id its registry does not list, beyond the few kept until the
                    // registry catches up: a flood of made-up ids grows nothing.
                    self.counters.activity_dropped += 1;
                    if !std::mem::replace(&mut p.activity_dropped, true) {
                        p.warn(format!(
                            "its shim reported activity on more than {UNREGISTERED_ACTIVITY} queues its registry does not list: such reports are dropped"
                        ));
                    }
                    false
                }
                ShimMsg::Activity { queue_id, busy } => {
                    let prev = p.busy.insert(queue_id, busy);
                    let reported = prev != Some(busy);
                    // Work under a hint (reported, or drained now): its bound counts from here.
                    if busy || prev == Some(true) {
                        p.hint.work(now);
                    }
                    // While a request hint holds, the queue is busy whatever is reported.
                    let changed = reported && !p.hint.holds();
                    p.refresh_busy();
                    if changed {
                        self.edges_pending.push((pid, queue_id, busy));
                    }
                    if changed && busy && p.edges_sent == Some(true) {
                        self.counters.busy_edges += 1;
                    }
                    changed
                }
                ShimMsg::Ack { seq, ok, detail } => self.ack(pid, seq, ok, detail, now, out),
                ShimMsg::SelfLevel {
                    level, ok, detail, ..
                } => self.self_level(pid, level, ok, detail, now),
                // The server takes the doorbell's descriptor (server.rs); here it is news only.
                ShimMsg::Doorbell {} => false,
                // The server checked the seal (server/peers.rs).
                ShimMsg::BoardSealed { board } => self.board_sealed(pid, board),
                ShimMsg::Hint { on, expired } => self.hint_message(pid, on, expired, now),
            };
        if released {
            self.policy.released_outside(pid, self.now_ns(now));
        }
        due
    }

    /// The server dropped `n` queues from `pid`'s registry that the kernel does not list for
    /// it (`crate::agent::kernel_queues`): counted, and said in its warnings.
    pub fn unlisted_queues(&mut self, pid: Pid, n: usize) {
        if n == 0 {
            return;
        }
        self.counters.unlisted_queues += n as u64;
        if let Some(p) = self.procs.get_mut(&pid) {
            let w = format!(
                "its shim reported {n} queue(s) the kernel does not list for it (/sys/class/kfd/kfd/proc/{pid}/queues): ignored"
            );
            tracing::warn!(pid = %pid, "{w}");
            p.warn(w);
        }
    }

    /// `pid` acknowledged command `seq`. Returns whether a decision is due (a preempt failed:
    /// the process runs, and the level is not retried on it for a while).
    fn ack(
        &mut self,
        pid: Pid,
        seq: u64,
        ok: bool,
        detail: String,
        now: Instant,
        out: &mut Vec<Out>,
    ) -> bool {
        tracing::debug!(pid = %pid, seq, ok, "ack: {detail}");
        let Some(p) = self.procs.get_mut(&pid) else {
            return false;
        };
        let Some(cmd) = p.pending.remove(seq) else {
            out.push(Out::Shim(
                p.conn,
                AgentMsg::Error {
                    detail: format!("ack of unknown command {seq}"),
                },
            ));
            return false;
        };
        let took = now.duration_since(cmd.sent).as_secs_f64();
        self.ack_us.push(took * 1e6);
        if ok
            && cmd.preempt
            && let Some(l) = cmd.level
        {
            self.rec.preempt_acked(l, took);
        }
        let mut retry = false;
        if !ok {
            self.counters.command_failures += 1;
            p.warn(format!("command failed: {detail}"));
            if cmd.preempt
                && let Some(l) = cmd.level
            {
                // The shim did not reach the level: it is not preempted there, and the
                // level is not retried on it for a while.
                if p.applied == Run::Preempted(l) {
                    p.applied = Run::Running;
                }
                p.failed = Some((l, now));
                retry = true;
                self.full_due = true;
            }
        }
        if self.waiters.settle(pid, seq, ok, &detail, out)
            && let Some(p) = self.procs.get_mut(&pid)
        {
            p.manual = None;
        }
        retry
    }
}
