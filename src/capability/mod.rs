//! What the node can do, and why not: the kernel's facts (the KFD interface, amdgpu's scheduler
//! parameters, the kernel release, Yama's ptrace scope) as [`Finding`]s with a fix, and from them
//! the verdict per GPU partition: which preemption levels work there. Everything is read under a
//! [`Root`], so the same checks run on a kfd-emu mount.
//!
//! Shared by `kfdq doctor` (which adds its checks of the HIP runtime, the shim and the socket;
//! feature `doctor`) and kfdqd (node labels, the note on what a queue priority buys; feature
//! `agent`), so that neither takes it from the other. Not part of the core the shim links.
#![forbid(unsafe_code)]

pub(crate) mod kernel;
pub(crate) mod levels;

use serde::Serialize;

use crate::kfd::Root;

pub use levels::{LevelVerdict, PartitionVerdict};

/// What a queue priority buys on the kernel under `root` (its release decides), in one sentence.
pub fn priority_note(root: &Root) -> String {
    kernel::queue_priority(root).1
}

/// What the node can do, as node labels say it (kfdqd's node-feature-discovery file): the
/// per-partition verdicts and the kernel's queue priority mode, from the checks `kfdq doctor`
/// runs on the kernel (not those on the HIP runtime, the shim or the socket).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capabilities {
    /// Per GPU partition: which levels work.
    pub partitions: Vec<PartitionVerdict>,
    /// What a queue priority buys: `queue` (priority 0..15 programmed), `pipe` (the pipe's
    /// three bands only) or `unknown` (the kernel release could not be read).
    pub priority_mode: &'static str,
}

/// [`Capabilities`] of the node under `root`.
pub fn capabilities(root: &Root) -> Capabilities {
    let mut findings = Vec::new();
    let node = kernel::inspect(root, &mut findings);
    let partitions = levels::verdicts(&node, &mut findings);
    Capabilities {
        partitions,
        priority_mode: node.queue_priority.name(),
    }
}

/// How a finding affects kfdq.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Works as kfdq needs.
    Ok,
    /// Informational: a fact worth knowing, nothing to fix.
    Info,
    /// Works, with a limit the operator should know (and may fix).
    Warn,
    /// A kfdq feature cannot work here until the fix is applied.
    Fail,
}

impl Status {
    /// The word the table prints.
    pub fn label(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Info => "info",
            Status::Warn => "warn",
            Status::Fail => "FAIL",
        }
    }
}

/// One fact about the node and what it means for kfdq.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// Short name of the check (`kfd-version`, `sched-policy`, ...).
    pub check: &'static str,
    /// Outcome.
    pub status: Status,
    /// What was found, in one sentence.
    pub found: String,
    /// What to do about it, when there is something to do.
    pub fix: Option<String>,
}

impl Finding {
    pub(crate) fn new(check: &'static str, status: Status, found: impl Into<String>) -> Self {
        Finding {
            check,
            status,
            found: found.into(),
            fix: None,
        }
    }

    pub(crate) fn fix(mut self, fix: impl Into<String>) -> Self {
        self.fix = Some(fix.into());
        self
    }
}
