//! Pure decision logic, no I/O: priority classes and (later) the preemption policy. Shared by
//! the shim, the agent and the experiment simulator.
#![forbid(unsafe_code)]

pub mod class;
