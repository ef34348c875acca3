//! kfdq: real GPU queue priorities and preemption for AMD Instinct (gfx942) nodes, driven by
//! the upstream amdkfd ioctls.
//!
//! * [`ids`] — the process, GPU and queue ids every layer passes.
//! * [`kfd`] — the safe, typed layer over `/dev/kfd` and its sysfs topology.
//! * [`policy`] — pure decision logic (priority classes).
//! * [`proto`] — the shim <-> agent control protocol.
//! * [`agent`] — `kfdqd`, the node agent.
//! * [`doctor`] — what kfdq can do on a node, and why not.
//! * [`stats`] — the nearest-rank quantile every report uses.
//! * [`chain`] — reaction-chain timestamps (`KFDQ_CHAIN_TRACE`).
//! * [`replace`] — atomic file replacement, and directories of this user's own.
//!
//! The command lines (`kfdq`, `kfdqd`) live in `src/bin/` on top of this library.
#![deny(missing_docs)]
#![deny(missing_debug_implementations)]
#![deny(unsafe_code)]

pub mod agent;
pub mod chain;
pub mod doctor;
pub mod ids;
pub mod kfd;
pub mod policy;
pub mod proto;
pub mod reaction;
pub mod replace;
pub mod stats;

pub use ids::{GpuId, Pid, QueueId};
