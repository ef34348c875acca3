//! The tracer's suspensions hold under leases, as a shim's preemptions do: a level-3
//! suspension holds for `[agent] lease_ms` unless the event loop renews it
//! ([`crate::proto::AgentMsg::Renew`], every quarter lease while the process is preempted).
//! When it runs out, this thread resumes the process's queues on its own and tells the node
//! (its registry), so an event loop that stalls never leaves a traced process suspended (issue
//! 50 item 9). If the whole agent dies instead, the kernel resumes them: releasing the agent's
//! KFD context disables debugging of every process it debugged (docs/kernel-interface.md §4).

use std::time::Instant;

use super::channel::Event;
use super::thread::Thread;
use crate::proto::{ShimMsg, Target};

impl Thread {
    /// After a command: a process with suspended queues holds them for a lease from `now` (a
    /// new suspension, or a renewal); one without holds no lease.
    pub(super) fn lease(&mut self, pid: u32, now: Instant) {
        let lease = self.lease;
        if let Some(t) = self.tracees.get_mut(&pid) {
            t.lease_end = (!t.suspended.is_empty()).then_some(now + lease);
        }
    }

    /// When the next lease runs out.
    pub(super) fn next_lapse(&self) -> Option<Instant> {
        self.tracees.values().filter_map(|t| t.lease_end).min()
    }

    /// Resumes the processes whose lease ran out by `now`.
    pub(super) fn lapse(&mut self, now: Instant) {
        let due: Vec<u32> = self
            .tracees
            .iter()
            .filter(|(_, t)| t.lease_end.is_some_and(|e| e <= now))
            .map(|(pid, _)| *pid)
            .collect();
        for pid in due {
            tracing::warn!(
                pid,
                "tracer: the suspension's lease ({:?}) ran out without a renewal from the event loop; resuming its queues",
                self.lease
            );
            // A refused resume is owed and retried (executor.rs) until it holds.
            let result = self.resume(pid, &Target::All);
            let Some(t) = self.tracees.get_mut(&pid) else {
                continue;
            };
            t.lease_end = None;
            if let Err(e) = result {
                tracing::warn!(pid, "tracer: resuming at the lease's end: {e}");
            }
            let msg = ShimMsg::Registry(t.registry(pid));
            let conn = t.conn;
            self.emit(Event::Msg { conn, msg });
        }
    }
}
