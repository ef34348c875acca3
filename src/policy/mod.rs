//! Pure decision logic, no I/O: priority classes, and the preemption policy (which process runs,
//! which is preempted at which level, at what cost in device-wide preempts). Shared by the shim,
//! the agent and the experiment simulator.
#![forbid(unsafe_code)]

mod blocker;
pub mod class;
mod decide;
mod incremental;
mod level;
mod procs;
pub mod release;
pub mod retry;
mod rules;

pub use decide::{
    Change, Decision, Observation, PartitionObs, Policy, ProcessDecision, ProcessObs, QueueObs,
    Reason, Run, preempt_cost,
};
pub use incremental::QueueEdge;
pub use level::Level;
pub use release::{CostRelease, Release, ReleaseError};
pub use rules::{ClassRule, PolicyConfig, PolicyError, Starvation};
