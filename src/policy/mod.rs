//! Pure decision logic, no I/O: priority classes, and the preemption policy (which process runs,
//! which is preempted at which level, at what cost in device-wide preempts). Shared by the shim,
//! the agent and the experiment simulator.
#![forbid(unsafe_code)]

mod blocker;
pub mod class;
mod decide;
mod incremental;
mod level;
mod obs;
mod procs;
pub mod release;
pub mod retry;
mod rules;

pub use decide::{Change, Decision, Policy, ProcessDecision, Reason, preempt_cost};
pub use incremental::QueueEdge;
pub use level::{Level, Run};
pub use obs::{Observation, PartitionObs, ProcessObs, QueueObs};
pub use release::{CostRelease, Release, ReleaseError};
pub use rules::{ClassRule, PolicyConfig, PolicyError, Starvation};
