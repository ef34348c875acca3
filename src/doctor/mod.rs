//! `kfdq doctor`: what kfdq can do on this node, and why not.
//!
//! Each check reads one fact of the node (the KFD interface, amdgpu's module parameters, the
//! kernel, Yama, the HIP runtime and the shim's symbol versions, permissions) and turns it into
//! [`Finding`]s with a fix; [`levels`] turns the facts into a per-partition verdict: which
//! preemption levels work there. Everything is read under a [`Root`], so the same checks run on
//! a kfd-emu mount.
#![forbid(unsafe_code)]

mod access;
mod hip;
mod kernel;
mod levels;
pub mod symbols;

use std::path::PathBuf;

use serde::Serialize;

use crate::kfd::Root;

pub use hip::find_runtime as find_hip_runtime;
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
    fn new(check: &'static str, status: Status, found: impl Into<String>) -> Self {
        Finding {
            check,
            status,
            found: found.into(),
            fix: None,
        }
    }

    fn fix(mut self, fix: impl Into<String>) -> Self {
        self.fix = Some(fix.into());
        self
    }
}

/// Where the doctor looks, beyond the [`Root`].
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The agent's socket (default [`DEFAULT_SOCKET`]).
    pub socket: Option<PathBuf>,
    /// The HIP runtime to check (default: searched, see [`hip::find_runtime`]).
    pub hip_runtime: Option<PathBuf>,
    /// The shim library (default: as `kfdq run` finds it).
    pub shim: Option<PathBuf>,
}

/// The agent's default socket path.
pub const DEFAULT_SOCKET: &str = "/run/kfdq/kfdq.sock";

/// The fix for a socket directory others can write, as kfdqd (which refuses it) and the doctor
/// give it: another directory, never a chmod (the directory may be a shared one, /tmp, whose
/// mode others rely on).
pub const SOCKET_DIR_FIX: &str = "put the socket in a directory of its own that only root (or the agent's user) can write, e.g. [agent] socket = \"/run/kfdq/kfdq.sock\" (or --socket /run/kfdq/kfdq.sock; kfdqd creates the directory 0755); do not change the mode of a shared directory such as /tmp";

/// The doctor's whole answer.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Root the node was read under.
    pub root: PathBuf,
    /// Every finding, in check order.
    pub findings: Vec<Finding>,
    /// Per GPU partition: which levels work.
    pub partitions: Vec<PartitionVerdict>,
}

impl Report {
    /// The worst status of any finding.
    pub fn worst(&self) -> Status {
        self.findings
            .iter()
            .map(|f| f.status)
            .max()
            .unwrap_or(Status::Ok)
    }
}

/// Inspects the node under `root`.
///
/// Never fails: what cannot be read becomes a finding that says so.
pub fn inspect(root: &Root, options: &Options) -> Report {
    let mut findings = Vec::new();
    let node = kernel::inspect(root, &mut findings);
    access::inspect(root, options, &mut findings);
    hip::inspect(root, options, &mut findings);
    let partitions = levels::verdicts(&node, &mut findings);
    Report {
        root: root.path().to_path_buf(),
        findings,
        partitions,
    }
}
