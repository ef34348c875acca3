//! What kfd-emu is started with and what it shows, without the emulator: its configuration
//! ([`EmuConfig`], [`Preset`], [`Arbitration`]), the statistics of `kfd-emu/stats.json`
//! ([`Stats`]) and the failures `kfd-emu/faults` takes and shows ([`FaultSpec`],
//! [`FaultsFile`]).
//!
//! A test that runs the `kfd-emu` binary as a process names these types and links neither the
//! emulator (FUSE) nor the partition model (gfx-model) nor a TOML parser: the shim's dependency
//! tree stays free of them (`tools/test-support/tests/module_graph.rs`). kfd-emu parses the
//! topology file and applies the configuration; gfx-model re-exports [`Arbitration`].
//!
//! * `config.rs` — [`EmuConfig`], [`ArgTime`], [`PartitionCosts`].
//! * `preset.rs` — [`Preset`] by name.
//! * `arbitration.rs` — [`Arbitration`].
//! * `stats.rs` — [`Stats`] and its parts.
//! * `fault_spec.rs` — [`FaultSpec`], the text form of an injected failure.
//! * `faults.rs` — [`Fault`], [`FaultStats`], [`FaultsFile`].
#![deny(missing_docs)]
#![deny(missing_debug_implementations)]
#![forbid(unsafe_code)]

mod arbitration;
mod config;
mod fault_spec;
mod faults;
mod preset;
mod stats;

pub use arbitration::Arbitration;
pub use config::{ArgTime, EmuConfig, MODEL_WAVE_NS, PartitionCosts};
pub use fault_spec::{Failure, FaultSpec, SpecError, When, parse_fault};
pub use faults::{Fault, FaultStats, FaultsFile};
pub use preset::{Preset, UnknownPreset};
pub use stats::{PartitionStats, ProcessStats, QueueStats, Stats};
