//! The preemption levels: the policy's vocabulary for how a process is preempted, and its run
//! state (running, or preempted at a level). Layers above the policy (the control protocol,
//! the configuration) carry the levels as they are, in their serde form (`hold`, `deactivate`,
//! `suspend`).

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

/// What a process should be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Run {
    /// All its queues run.
    Running,
    /// All its queues are preempted at this level.
    Preempted(Level),
}

#[cfg(test)]
mod tests {
    use super::Level;

    #[test]
    fn the_serde_form_is_the_wire_s() {
        for (l, s) in [
            (Level::Hold, "\"hold\""),
            (Level::Deactivate, "\"deactivate\""),
            (Level::Suspend, "\"suspend\""),
        ] {
            assert_eq!(serde_json::to_string(&l).unwrap(), s);
            assert_eq!(serde_json::from_str::<Level>(s).unwrap(), l);
        }
    }
}
