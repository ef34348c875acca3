//! Kubernetes: what the device plugin (`kfdq-device-plugin`) granted, enforced and shown.
//!
//! * [`settings`]: the `[kubernetes]` section of the configuration.
//! * [`cap`]: a process's claim of an allocation (its `KFDQ_ALLOCATION`) and the class cap
//!   the allocations file makes of it.
//! * [`container`]: which container a token is bound to; a pod's process without a grant.
//! * [`watch`]: the allocations file, read again when it changes.
//! * [`features`]: node-feature-discovery's local feature file (the node's labels).
//!
//! docs/agent.md (`[kubernetes]`) is the operator's reference.

pub mod cap;
pub mod container;
pub mod features;
pub mod settings;
pub mod watch;
