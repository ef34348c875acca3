//! preempt-lab: what each preemption level buys, before deploying it.
//!
//! `sim` runs the partition model (`gfx-model`) in virtual time, driven by kfdq's real policy
//! (`kfdq::policy`, not a copy) configured from the real class configuration format
//! (`kfdq.toml`), with a model of the host side: launch latency, the shim's activity sampling,
//! the agent's decision and the command's trip to the shim ([`HostParams`]). Workloads are
//! built-in shapes with arrival processes ([`workload`]). A [`scenario`] names configurations
//! (alone, native, priority only, levels 1-3, sampled, edge-driven or hinted) and seeds; [`experiment`] runs them and [`report`]s HP latency and LP
//! throughput normalised to alone, device-wide preempts and preemption latency.
//! [`trace`] reads user trace files, [`sweep`] runs a scenario per value of one parameter, and
//! [`plot`] draws the latency CDFs and throughput timelines ([`timeline`]) as SVG and PNG.
//! [`real_run`] (`preempt-lab run`) measures the same with real processes through `kfdq demo`
//! and reports it with the same code. [`validate`] (`preempt-lab validate`) holds the model
//! against co-location measured on an H100.
//! docs/experiments.md has the model, each parameter with its source, and the results.
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![deny(missing_debug_implementations)]

pub mod experiment;
mod hint;
pub mod plot;
pub mod real_run;
pub mod report;
pub mod rng;
pub mod scenario;
pub mod sim;
pub mod sweep;
pub mod timeline;
pub mod trace;
pub mod validate;
pub mod workload;

pub use sim::{Control, HostParams, RunResult, Setup};
