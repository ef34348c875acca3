//! A deterministic model of how a gfx942 partition shares its compute: work-groups competing
//! for wave slots, the dispatcher's arbitration among resident queues, CU masks, runlist
//! updates that preempt every queue (CWSR save and restore), deactivated and suspended queues
//! that keep their saved work, and time-slicing of an oversubscribed runlist.
//!
//! Pure: no I/O, no threads, no clock. Time is virtual nanoseconds, advanced by the caller —
//! kfd-emu's CP in real time, the experiment lab in virtual time. The rules, their sources and
//! the guessed parameters are in `docs/gfx-model.md`.
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![deny(missing_debug_implementations)]

mod batches;
mod calibrated;
pub mod contention;
mod dispatch;
mod params;
mod partition;
mod queue;
mod runlist;
mod slots;
mod stats;

pub use calibrated::measured_arbitration;
pub use contention::{Contention, Footprint};
pub use dispatch::{AQL_BARRIER_BIT, Dispatch};
pub use params::{Arbitration, Params, Shape, WAVE_SIZE, pipe_band};
pub use partition::{Edit, Partition, UpdateCost};
pub use stats::{Completion, PartitionStats, QueueStats};

/// The caller's name for a queue (kfd-emu: process and queue id packed together).
pub type QueueKey = u64;
