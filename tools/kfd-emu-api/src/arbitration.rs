//! How the dispatcher of the partition model (gfx-model, which re-exports it) chooses among
//! resident queues; the emulator's configuration names it.

use serde::{Deserialize, Serialize};

/// How the dispatcher chooses among resident queues that have work-groups to launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Arbitration {
    /// Round-robin, one work-group per turn: every queue gets an equal share of free slots.
    Equal,
    /// Pipe priority only (kernels since upstream commit 73463e26f7e2, Linux 7.0): CS_HIGH
    /// (priority 11-15) before CS_MEDIUM (7-10) before CS_LOW (0-6), round-robin inside.
    PipePriority,
    /// Strict queue priority 0..15 (kernels before that commit programmed
    /// `cp_hqd_queue_priority`, and AMD described the CP as strictly preferring the higher
    /// queue); round-robin among equal priorities.
    StrictPriority,
}
