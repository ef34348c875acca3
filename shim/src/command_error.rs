//! Why an agent's command failed in this process: typed, so that callers can tell a bad target
//! from a kernel refusal, and worded, as the `Display` the agent receives in its acknowledgement
//! (naming the rule and what to do).

use std::fmt;

use kfdq::kfd::debug::QueueStatus;
use kfdq::policy::class::KFD_PRIORITY_MAX;
use kfdq::proto;

use crate::kfd_fd::KfdFdError;

/// A command the shim could not carry out (or carried out only in part).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CommandError {
    /// The target names KFD queues this process does not have.
    #[error("no KFD queue {0:?} in this process")]
    UnknownQueues(Vec<u32>),
    /// The target names streams this process does not have.
    #[error("no stream {0:?} in this process (see the registry for stream ids)")]
    UnknownStreams(Vec<u64>),
    /// A stream was named for a level that acts on queues before its queue is known.
    #[error(
        "stream {0} has no KFD queue yet (it has not launched any work); levels 2 and 3 act on queues"
    )]
    StreamWithoutQueue(u64),
    /// A level-0 priority outside KFD's range.
    #[error("queue priority {0} is out of range 0..={KFD_PRIORITY_MAX}")]
    PriorityOutOfRange(u32),
    /// An in-flight window outside the protocol's range.
    #[error(
        "window {0} is out of range 1..={max} (omit it for an unbounded window)",
        max = proto::MAX_WINDOW
    )]
    WindowOutOfRange(u32),
    /// The runtime has created no queue yet, so there is no `/dev/kfd` fd to act through.
    #[error(
        "no KFD queue observed yet (the runtime has not created one), so there is no /dev/kfd fd to act on"
    )]
    NoKfdFd,
    /// The runtime's `/dev/kfd` fd is no longer the one its queues were created on.
    #[error(transparent)]
    KfdFd(#[from] KfdFdError),
    /// Level 3 could not attach to this process.
    #[error(
        "level 3 needs DBG_TRAP ENABLE on this process (KFD >= 1.13, RUNTIME_ENABLE done by the runtime before its first queue, no other debugger attached): {0}"
    )]
    DebugEnable(kfdq::kfd::Error),
    /// A call for all queues at once failed (`what` names it).
    #[error("{what}: {source}")]
    Call {
        /// The step, e.g. `level 3: SUSPEND_QUEUES`.
        what: &'static str,
        /// The kernel's refusal.
        source: kfdq::kfd::Error,
    },
    /// The call failed on some queues; `done` lists those it changed anyway.
    #[error("{what}: {}{}", Joined(failures), Done(done))]
    Queues {
        /// The step, e.g. `UPDATE_QUEUE failed`.
        what: &'static str,
        /// What failed, queue by queue.
        failures: Vec<QueueFailure>,
        /// (verb, queues) changed despite the failures, when the step reports them.
        done: Option<(&'static str, Vec<u32>)>,
    },
}

/// Why one queue did not change.
#[derive(Debug)]
#[non_exhaustive]
pub enum QueueFailure {
    /// The ioctl on it failed.
    Call {
        /// The queue.
        queue: u32,
        /// The kernel's refusal.
        source: kfdq::kfd::Error,
    },
    /// DBG_TRAP SUSPEND/RESUME_QUEUES reported it in this state.
    Status {
        /// The queue.
        queue: u32,
        /// What KFD said of it.
        status: QueueStatus,
    },
}

impl fmt::Display for QueueFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QueueFailure::Call { queue, source } => write!(f, "queue {queue}: {source}"),
            QueueFailure::Status {
                queue,
                status: QueueStatus::Error,
            } => write!(
                f,
                "queue {queue}: the hardware failed to preempt or restore it"
            ),
            QueueFailure::Status { queue, .. } => write!(
                f,
                "queue {queue}: KFD refused it (missing, still carrying EC_QUEUE_NEW, or being destroyed)"
            ),
        }
    }
}

/// The failures, `; `-separated.
struct Joined<'a>(&'a [QueueFailure]);

impl fmt::Display for Joined<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

/// `; <verb> [queues]`, when the step reports what it changed anyway.
struct Done<'a>(&'a Option<(&'static str, Vec<u32>)>);

impl fmt::Display for Done<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some((verb, done)) => write!(f, "; {verb} {done:?}"),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_agent_reads_the_rule_and_what_changed() {
        let e = CommandError::Queues {
            what: "level 3: SUSPEND_QUEUES",
            failures: vec![
                QueueFailure::Status {
                    queue: 3,
                    status: QueueStatus::Invalid,
                },
                QueueFailure::Status {
                    queue: 4,
                    status: QueueStatus::Error,
                },
            ],
            done: Some(("suspended", vec![5])),
        };
        assert_eq!(
            e.to_string(),
            "level 3: SUSPEND_QUEUES: queue 3: KFD refused it (missing, still carrying \
             EC_QUEUE_NEW, or being destroyed); queue 4: the hardware failed to preempt or \
             restore it; suspended [5]"
        );
        assert_eq!(
            CommandError::PriorityOutOfRange(16).to_string(),
            "queue priority 16 is out of range 0..=15"
        );
        assert_eq!(
            CommandError::UnknownQueues(vec![999]).to_string(),
            "no KFD queue [999] in this process"
        );
    }
}
