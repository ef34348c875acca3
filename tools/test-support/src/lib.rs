//! What kfdq's test suites share (the root crate's, the shim's, kfd-emu's and fakehip's), so
//! that each rule is written once:
//!
//! * [`privileged`] — a test that mounts kfd-emu runs as root, or fails saying why; with
//!   `KFDQ_SKIP_PRIVILEGED=1` it is compiled as an ignored test, so `cargo test` reports it as
//!   ignored (never as passed).
//! * [`emu`] — a private kfd-emu mount per test, and its statistics; [`emu_process`] — the
//!   `kfd-emu` process that serves it.
//! * [`hold`] — a separate process owning KFD queues, and a witness that the CP ran.
//! * [`fake_shim`] — a process that speaks the shim's protocol itself (a forger, a bench
//!   client), with real queues on the emulator.
//! * [`wait`] — waiting on a condition with a generous deadline (never a fixed sleep).
//! * [`output`] — reading a child's stdout lines and stderr while it runs.
//! * [`bins`] — the workspace's binaries and libraries cargo built for this test run.
//! * [`module_graph`] — a crate's modules import each other in one direction only, and one
//!   layer's modules name none of another's.
//! * [`crate_graph`] — the crates a package links (a layer links none of another's).
//! * [`skip_markers`] — every privileged test carries the marker that skips it visibly.
//!
//! The binary `kfdq-test-hold` is a process that owns KFD queues for tests to act on.

#![deny(missing_debug_implementations)]

pub mod bins;
pub mod crate_graph;
pub mod emu;
pub mod emu_process;
pub mod fake_shim;
pub mod hold;
pub mod module_graph;
pub mod output;
pub mod privileged;
pub mod skip_markers;
pub mod wait;

pub use emu::{Emu, mount, mount_preset, mount_with_env, mount_with_slots};
pub use privileged::require_root;
pub use wait::{wait_for, wait_until};
