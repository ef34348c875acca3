//! One traced process: its memory, its debugger attachment, its queues and what the tracer did
//! to them.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;

use crate::agent::conn::ConnId;
use crate::kfd::debug::{DebugAttachment, QueueSnapshot};
use crate::policy::retry::Owed;

/// One traced process.
#[derive(Debug)]
pub(super) struct Tracee {
    pub(super) conn: ConnId,
    pub(super) mem: File,
    pub(super) _attachment: DebugAttachment,
    pub(super) queues: Vec<QueueSnapshot>,
    pub(super) suspended: BTreeSet<u32>,
    pub(super) busy: BTreeMap<u32, bool>,
    /// Its class preempts others ([`crate::proto::AgentMsg::Edges`]): while one of its queues is busy it is
    /// sampled every [`super::periods::BUSY_SAMPLE`], so its idle edge is seen within that.
    pub(super) edges: bool,
    /// Scans in a row that found no queue.
    pub(super) idle_scans: u32,
    /// Leaving: detach at the next stop.
    pub(super) leaving: Option<String>,
    /// Resumes the kernel refused, retried until they hold.
    pub(super) owed: Owed,
    /// While queues are suspended: when the suspension's lease runs out (`lease.rs`).
    pub(super) lease_end: Option<std::time::Instant>,
}

impl Tracee {
    /// Sampled at [`super::periods::BUSY_SAMPLE`] now: its class preempts others and a queue is busy.
    pub(super) fn fine(&self) -> bool {
        super::periods::fine(self.edges, self.leaving.is_some(), &self.busy)
    }

    /// The registry it shows the node.
    pub(super) fn registry(&self, pid: u32) -> crate::proto::Registry {
        super::registry::registry(
            pid,
            &self.queues,
            &self.suspended,
            &self.busy,
            self.owed.failures,
        )
    }
}
