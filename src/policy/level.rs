//! The preemption levels: the policy's vocabulary for how a process is preempted. Layers above
//! the policy (the control protocol, the configuration) carry them as they are, in their serde
//! form (`hold`, `deactivate`, `suspend`).

use serde::{Deserialize, Serialize};

/// Preemption level of a control action (the product's vocabulary).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Level {
    /// Level 1: the shim holds the stream's launches on the host; submitted work drains.
    Hold,
    /// Level 2: UPDATE_QUEUE percentage 0/100 on the process's own queues.
    Deactivate,
    /// Level 3: DBG_TRAP SUSPEND/RESUME_QUEUES on the process itself, with a grace period.
    Suspend,
}
