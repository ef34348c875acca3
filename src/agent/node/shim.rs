//! What a shim (or a tracer session) reports: its registry, its queues' activity, its acks.

use std::time::Instant;

use super::{Node, Out};
use crate::policy::Run;
use crate::proto::{AgentMsg, ShimMsg};

impl Node {
    /// A message from the shim of `pid`. Returns whether a decision is due.
    pub fn shim_message(
        &mut self,
        pid: u32,
        msg: ShimMsg,
        now: Instant,
        out: &mut Vec<Out>,
    ) -> bool {
        let Some(p) = self.procs.get_mut(&pid) else {
            return false;
        };
        match msg {
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
                p.registry = reg;
                p.registry_gen += 1;
                true
            }
            ShimMsg::Activity { queue_id, busy } => p.busy.insert(queue_id, busy) != Some(busy),
            ShimMsg::Ack { seq, ok, detail } => self.ack(pid, seq, ok, detail, now, out),
        }
    }

    /// `pid` acknowledged command `seq`. Returns whether a decision is due (a preempt failed:
    /// the process runs, and the level is not retried on it for a while).
    fn ack(
        &mut self,
        pid: u32,
        seq: u64,
        ok: bool,
        detail: String,
        now: Instant,
        out: &mut Vec<Out>,
    ) -> bool {
        tracing::debug!(pid, seq, ok, "ack: {detail}");
        let Some(p) = self.procs.get_mut(&pid) else {
            return false;
        };
        let Some(cmd) = p.pending.remove(&seq) else {
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
