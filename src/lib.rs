//! kfdq: real GPU queue priorities and preemption for AMD Instinct (gfx942) nodes, driven by
//! the upstream amdkfd ioctls.
//!
//! * [`ids`] — the process, GPU and queue ids every layer passes.
//! * [`kfd`] — the safe, typed layer over `/dev/kfd` and its sysfs topology.
//! * [`policy`] — pure decision logic (priority classes).
//! * [`proto`] — the shim <-> agent control protocol.
//! * [`allocation`] — the device plugin's allocations file, read by the agent.
//! * [`capability`] — what the node can do (features `agent` or `doctor`).
//! * [`agent`] — `kfdqd`, the node agent (feature `agent`).
//! * [`doctor`] — `kfdq doctor`'s report (feature `doctor`).
//! * [`stats`] — the nearest-rank quantile every report uses.
//! * [`chain`] — reaction-chain timestamps (`KFDQ_CHAIN_TRACE`).
//! * [`replace`] — atomic file replacement, and directories of this user's own.
//! * [`procfs`] — `/proc/<pid>/stat`'s fields.
//!
//! The command lines (`kfdq`, `kfdqd`) live in `src/bin/` on top of this library.
//!
//! Layering (docs/architecture.md): the core (`ids`, `kfd`, `policy`, `proto`, `allocation`,
//! `chain`, `stats`, `reaction`, `procfs`) is what the shim and the device plugin link, with
//! `default-features = false`; it never names `agent`, `doctor` or `capability`
//! (tools/test-support/tests/module_graph.rs checks it, and that the shim's dependency tree has
//! none of the agent's crates).
#![deny(missing_docs)]
#![deny(missing_debug_implementations)]
#![deny(unsafe_code)]

#[cfg(feature = "agent")]
pub mod agent;
pub mod allocation;
#[cfg(any(feature = "agent", feature = "doctor"))]
pub mod capability;
pub mod chain;
#[cfg(feature = "doctor")]
pub mod doctor;
pub mod ids;
pub mod kfd;
pub mod policy;
pub mod procfs;
pub mod proto;
pub mod reaction;
pub mod replace;
pub mod stats;

pub use ids::{GpuId, Pid, QueueId};
