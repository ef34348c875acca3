//! What the model reports: per packet, per queue, per partition.

use serde::{Deserialize, Serialize};

use crate::QueueKey;

/// A packet that completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Completion {
    /// Its queue.
    pub queue: QueueKey,
    /// Its tag ([`crate::Dispatch::tag`]).
    pub tag: u64,
    /// When it was submitted.
    pub submit_ns: u64,
    /// When its first work-group started (its submit time for a packet without work-groups).
    pub start_ns: u64,
    /// When its last work-group ended.
    pub end_ns: u64,
}

/// Per-queue counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueStats {
    /// Time during which at least one of its work-groups ran.
    pub busy_ns: u64,
    /// Work-groups launched (restores not counted).
    pub wgs_launched: u64,
    /// Work-groups that ran to their end.
    pub wgs_completed: u64,
    /// Work-groups context-saved by a preempt (CWSR).
    pub wgs_saved: u64,
    /// Saved work-groups restored.
    pub wgs_restored: u64,
    /// Packets completed.
    pub packets_completed: u64,
}

/// Per-partition counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionStats {
    /// Runlist updates (every change of the set of mapped queues or their properties).
    pub runlist_updates: u64,
    /// Runlist updates made while a queue was mapped: each unmapped every queue.
    pub device_preempts: u64,
    /// Residency rotations of an oversubscribed runlist.
    pub rotations: u64,
    /// Waves context-saved.
    pub waves_saved: u64,
    /// Waves restored.
    pub waves_restored: u64,
    /// Work-group starts and ends: each work-group counts, also where the model moved it in a
    /// batch.
    pub wg_events: u64,
    /// Batch starts and ends: the simulation's unit of work (a batch is the work-groups of one
    /// packet that start on one dispatch turn and end together; see `Partition`).
    pub batch_events: u64,
    /// Integral of occupied wave slots over time (slot-ns): divided by
    /// `elapsed x total slots`, the mean occupancy.
    pub occupied_slot_ns: u128,
    /// Most wave slots occupied at once.
    pub peak_occupied_slots: u32,
}
