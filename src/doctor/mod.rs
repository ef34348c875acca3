//! `kfdq doctor`: what kfdq can do on this node, and why not.
//!
//! Each check reads one fact of the node (the KFD interface, amdgpu's module parameters, the
//! kernel, Yama, the HIP runtime and the shim's symbol versions, permissions) and turns it into
//! [`Finding`]s with a fix; the kernel's checks and the per-partition verdict (which preemption
//! levels work there) are [`crate::capability`]'s, shared with kfdqd. Everything is read under a
//! [`Root`], so the same checks run on a kfd-emu mount.
#![forbid(unsafe_code)]

mod access;
mod hip;
pub mod symbols;

use std::path::PathBuf;

use serde::Serialize;

use crate::kfd::Root;

pub use crate::capability::{Finding, LevelVerdict, PartitionVerdict, Status};
use crate::capability::{kernel, levels};
pub use hip::find_runtime as find_hip_runtime;

/// Where the doctor looks, beyond the [`Root`].
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The agent's socket (default [`crate::proto::DEFAULT_SOCKET`]).
    pub socket: Option<PathBuf>,
    /// The HIP runtime to check (default: searched, see [`hip::find_runtime`]).
    pub hip_runtime: Option<PathBuf>,
    /// The shim library (default: as `kfdq run` finds it).
    pub shim: Option<PathBuf>,
}

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
