//! A shim's doorbell rang (`ShimMsg::Doorbell`, the server's `doorbell.rs`): the launch that
//! made a process of a preempting class busy said so itself, without waking its control
//! thread. The ring names no queue: it is a busy edge of each of the process's queues, and the
//! answer ([`AgentMsg::Rang`]) makes the shim report every queue's state after it, so a queue
//! the ring marked busy but the launch did not fill is idle again one round trip later.

use std::time::Instant;

use super::{NodeState, Out};
use crate::ids::Pid;
use crate::proto::{AgentMsg, ShimMsg};

impl NodeState {
    /// Counts a doorbell taken.
    pub fn doorbell_taken(&mut self) {
        self.counters.doorbells += 1;
    }

    /// The doorbell of `pid` rang. Returns whether a decision is due. A process whose busy
    /// edges are off (its class preempts nobody) is ignored: a ring is never more than the
    /// edge its class may report.
    pub fn doorbell_rang(&mut self, pid: Pid, now: Instant, out: &mut Vec<Out>) -> bool {
        let Some(p) = self.procs.get(&pid) else {
            return false;
        };
        if p.edges_sent != Some(true) {
            self.counters.doorbell_ignored += 1;
            return false;
        }
        self.counters.doorbell_edges += 1;
        let conn = p.conn;
        let queues: Vec<_> = p.registry.queues.iter().map(|q| q.queue_id).collect();
        let mut dirty = false;
        for queue_id in queues {
            dirty |= self.shim_message(
                pid,
                ShimMsg::Activity {
                    queue_id,
                    busy: true,
                },
                now,
                out,
            );
        }
        out.push(Out::Shim(conn, AgentMsg::Rang {}));
        dirty
    }
}
