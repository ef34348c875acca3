//! The executor's commands carried out through DBG_TRAP: level 3 is SUSPEND_QUEUES (retried once
//! for queues the kernel calls invalid, after a snapshot clears their EC_QUEUE_NEW) and
//! RESUME_QUEUES (a refused resume is owed and retried with backoff until it holds); commands
//! only the process itself can carry out are refused.

use std::collections::BTreeSet;
use std::time::Instant;

use super::channel::Event;
use super::error::TracerError;
use super::thread::Thread;
use crate::kfd::QueueId;
use crate::kfd::debug::{QueueSnapshot, QueueStatus};
use crate::policy::retry::{Owed, RETRY_MAX};
use crate::proto::{AgentMsg, ShimMsg, Target};

impl Thread {
    pub(super) fn execute(&mut self, pid: u32, msg: AgentMsg) {
        let Some(conn) = self.tracees.get(&pid).map(|t| t.conn) else {
            return;
        };
        let (seq, result) = match msg {
            AgentMsg::Preempt {
                seq,
                target,
                grace_period,
                ..
            } => {
                let r = self.suspend(pid, &target, grace_period);
                self.lease(pid, Instant::now());
                (seq, r)
            }
            // Not acknowledged: its class preempts others (or no longer does).
            AgentMsg::Edges { on, .. } => {
                if let Some(t) = self.tracees.get_mut(&pid) {
                    t.edges = on;
                }
                return;
            }
            AgentMsg::Release { seq, target, .. } => {
                let r = self.resume(pid, &target);
                self.lease(pid, Instant::now());
                (seq, r)
            }
            // The event loop turns: the suspension holds another lease (lease.rs).
            AgentMsg::Renew {} => {
                self.lease(pid, Instant::now());
                return;
            }
            // The registry every answer is preceded by is the reply.
            AgentMsg::Query { seq } => (seq, Ok("registry sent".into())),
            AgentMsg::SetPriority { seq, .. }
            | AgentMsg::SetCuMask { seq, .. }
            | AgentMsg::SetWindow { seq, .. } => (seq, Err(TracerError::NeedsShim)),
            // The tracer samples, it sees no launches.
            AgentMsg::Welcome { .. }
            | AgentMsg::Refused { .. }
            | AgentMsg::Error { .. }
            | AgentMsg::DoorbellTaken {}
            | AgentMsg::Rang {}
            | AgentMsg::BoardWriter { .. }
            | AgentMsg::Watch { .. }
            | AgentMsg::Unwatch { .. }
            | AgentMsg::BoardChanged {} => {
                return;
            }
        };
        // Every answer comes after the registry it leaves (suspended flags, queue set).
        if let Some(t) = self.tracees.get(&pid) {
            let reg = t.registry(pid);
            self.emit(Event::Msg {
                conn,
                msg: ShimMsg::Registry(reg),
            });
        }
        let (ok, detail) = match result {
            Ok(d) => (true, d),
            Err(e) => (false, e.to_string()),
        };
        self.emit(Event::Msg {
            conn,
            msg: ShimMsg::Ack { seq, ok, detail },
        });
    }

    fn suspend(&mut self, pid: u32, target: &Target, grace: u32) -> Result<String, TracerError> {
        let mut todo: Vec<QueueId> = {
            let t = self.tracees.get(&pid).ok_or(TracerError::NotTraced)?;
            targets(&t.queues, target)
                .into_iter()
                .filter(|q| !t.suspended.contains(&q.0))
                .collect()
        };
        if todo.is_empty() {
            return Ok("suspended (nothing left to suspend)".into());
        }
        // Suspended on purpose now: no resume is owed for them.
        if let Some(t) = self.tracees.get_mut(&pid) {
            for q in &todo {
                t.owed.settled(q.0, true);
            }
        }
        let mut suspended = Vec::new();
        for attempt in 0..2 {
            let kfd = self.kfd.as_ref().ok_or(TracerError::NoKfd)?;
            let (_, statuses) = kfd
                .suspend_queues(pid, &todo, grace)
                .map_err(TracerError::call("DBG_TRAP SUSPEND_QUEUES"))?;
            let (done, again) = sort_statuses(&todo, statuses, attempt == 0);
            suspended.extend(done);
            if again.is_empty() {
                break;
            }
            // New queues (EC_QUEUE_NEW) or ones created since the last snapshot.
            self.refresh(pid);
            todo = again;
        }
        let t = self.tracees.get_mut(&pid).ok_or(TracerError::NotTraced)?;
        t.suspended.extend(suspended.iter().copied());
        let missing: Vec<u32> = targets(&t.queues, target)
            .into_iter()
            .map(|q| q.0)
            .filter(|q| !t.suspended.contains(q))
            .collect();
        if missing.is_empty() {
            Ok(format!(
                "suspended {} queue(s) through DBG_TRAP",
                suspended.len()
            ))
        } else {
            Err(TracerError::LeftRunning { missing })
        }
    }

    pub(super) fn resume(&mut self, pid: u32, target: &Target) -> Result<String, TracerError> {
        let todo: Vec<QueueId> = {
            let t = self.tracees.get(&pid).ok_or(TracerError::NotTraced)?;
            targets(&t.queues, target)
                .into_iter()
                .filter(|q| t.suspended.contains(&q.0))
                .collect()
        };
        if todo.is_empty() {
            return Ok("running (nothing was suspended)".into());
        }
        let kfd = self.kfd.as_ref().ok_or(TracerError::NoKfd)?;
        let result = kfd
            .resume_queues(pid, &todo)
            .map_err(TracerError::call("DBG_TRAP RESUME_QUEUES"));
        let t = self.tracees.get_mut(&pid).ok_or(TracerError::NotTraced)?;
        match result {
            Ok((n, _)) => {
                for q in &todo {
                    t.suspended.remove(&q.0);
                    if let Some(retries) = t.owed.settled(q.0, true) {
                        tracing::warn!(pid, retries, "tracer: the refused resumes hold now");
                    }
                }
                Ok(format!("resumed {n} queue(s) through DBG_TRAP"))
            }
            Err(e) => {
                // Not forgotten: retried with backoff until the kernel takes it.
                let now = Instant::now();
                let mut first = false;
                for q in &todo {
                    first |= t.owed.failed(q.0, true, now);
                }
                if first {
                    tracing::warn!(
                        pid,
                        "tracer: {e}; its queues stay suspended until a retry (up to every {} ms) holds",
                        RETRY_MAX.as_millis()
                    );
                }
                Err(e)
            }
        }
    }

    /// Retries the resumes the kernel refused, when due, and tells the agent what changed.
    pub(super) fn retry_resumes(&mut self) {
        let now = Instant::now();
        let due: Vec<u32> = self
            .tracees
            .iter()
            .filter(|(_, t)| t.owed.due(now))
            .map(|(pid, _)| *pid)
            .collect();
        for pid in due {
            let Some(t) = self.tracees.get_mut(&pid) else {
                continue;
            };
            let ids = owed_resumes(&mut t.owed, &t.queues, &t.suspended);
            if !ids.is_empty() {
                let _ = self.resume(pid, &Target::Queues(ids));
            }
            if let Some(t) = self.tracees.get_mut(&pid) {
                t.owed.retried(Instant::now());
                let msg = ShimMsg::Registry(t.registry(pid));
                let conn = t.conn;
                self.emit(Event::Msg { conn, msg });
            }
        }
    }
}

/// The queues of `queues` a command's `target` names (a tracee has no streams: a stream target
/// is all of them).
pub(super) fn targets(queues: &[QueueSnapshot], target: &Target) -> Vec<QueueId> {
    queues
        .iter()
        .map(|q| q.queue_id)
        .filter(|q| match target {
            Target::All | Target::Streams(_) => true,
            Target::Queues(ids) => ids.contains(q),
        })
        .collect()
}

/// One SUSPEND_QUEUES call's answer, per queue of `todo`: the queues it suspended, and those to
/// try again after a snapshot — a queue the kernel calls invalid may be new (its EC_QUEUE_NEW
/// not cleared yet), which only the `first` attempt retries. A hardware error is not retried.
pub(super) fn sort_statuses(
    todo: &[QueueId],
    statuses: impl IntoIterator<Item = QueueStatus>,
    first: bool,
) -> (Vec<u32>, Vec<QueueId>) {
    let mut done = Vec::new();
    let mut again = Vec::new();
    for (q, s) in todo.iter().zip(statuses) {
        match s {
            QueueStatus::Ok => done.push(q.0),
            QueueStatus::Invalid if first => again.push(*q),
            QueueStatus::Invalid | QueueStatus::Error => {}
        }
    }
    (done, again)
}

/// The owed resumes still worth a retry: those of queues the tracee still has and the tracer
/// still holds suspended (the others are forgotten from `owed`).
pub(super) fn owed_resumes(
    owed: &mut Owed,
    queues: &[QueueSnapshot],
    suspended: &BTreeSet<u32>,
) -> Vec<QueueId> {
    owed.retain(|q| queues.iter().any(|s| s.queue_id.0 == q) && suspended.contains(&q));
    owed.resume.iter().copied().map(QueueId).collect()
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;
    use crate::agent::tracer::registry::snapshot;

    #[test]
    fn targets_are_the_named_queues_or_all() {
        let queues = [snapshot(1), snapshot(2), snapshot(3)];
        assert_eq!(
            targets(&queues, &Target::All),
            [QueueId(1), QueueId(2), QueueId(3)]
        );
        assert_eq!(
            targets(&queues, &Target::Streams(vec![9])),
            [QueueId(1), QueueId(2), QueueId(3)],
            "a tracee has no streams: all its queues"
        );
        assert_eq!(
            targets(&queues, &Target::Queues(vec![QueueId(3), QueueId(8)])),
            [QueueId(3)],
            "a queue it does not have is not a target"
        );
    }

    #[test]
    fn an_invalid_queue_is_tried_again_once_and_an_error_never() {
        let todo = [QueueId(1), QueueId(2), QueueId(3)];
        let statuses = [QueueStatus::Ok, QueueStatus::Invalid, QueueStatus::Error];
        assert_eq!(
            sort_statuses(&todo, statuses, true),
            (vec![1], vec![QueueId(2)]),
            "first attempt: the invalid queue again, after a snapshot"
        );
        assert_eq!(
            sort_statuses(&todo, statuses, false),
            (vec![1], vec![]),
            "second attempt: no more"
        );
        assert_eq!(
            sort_statuses(&todo, [QueueStatus::Ok], true),
            (vec![1], vec![]),
            "a short answer leaves the rest unsuspended"
        );
    }

    #[test]
    fn owed_resumes_are_retried_only_for_queues_still_there_and_suspended() {
        let now = Instant::now();
        let mut owed = Owed::new();
        for q in [1, 2, 3] {
            owed.failed(q, true, now);
        }
        let queues = [snapshot(1), snapshot(2)];
        let suspended = BTreeSet::from([1, 3]);
        assert_eq!(
            owed_resumes(&mut owed, &queues, &suspended),
            [QueueId(1)],
            "2 is no longer suspended, 3 is gone"
        );
        assert_eq!(owed.resume.iter().copied().collect::<Vec<_>>(), [1]);
        assert_eq!(owed_resumes(&mut owed, &[], &suspended), []);
        assert!(owed.is_empty(), "nothing left to owe");
    }
}
