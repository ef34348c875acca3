//! What a partition's run collected: host-clock call times and GPU-clock stalls, by
//! measurement (the names and their meaning are in `report.rs`).

use std::collections::BTreeMap;

use super::stats::StallSample;

/// A measurement's name and the waves of its busy queue (0: none).
pub type Key = (&'static str, u32);

/// Samples by measurement and busy-queue size.
#[derive(Debug, Default)]
pub struct Samples {
    /// Host-clock call times (and the bystander's own duration), µs.
    pub calls: BTreeMap<Key, Vec<f64>>,
    /// Stalls a bystander saw, with the waves saved and restored.
    pub stalls: BTreeMap<Key, Vec<StallSample>>,
}

impl Samples {
    /// Records a call time (µs) with a busy queue of `waves` (0: none).
    pub fn call(&mut self, name: &'static str, waves: u32, us: f64) {
        self.calls.entry((name, waves)).or_default().push(us);
    }

    /// Records a stall of `stall_ns` (None: the sample was discarded) across a preempt that
    /// saved `saved` waves and restored `restored`, with a busy queue of `waves` (0: none).
    pub fn stall(
        &mut self,
        name: &'static str,
        waves: u32,
        (saved, restored): (u64, u64),
        stall_ns: Option<f64>,
    ) {
        if let Some(stall_ns) = stall_ns {
            self.stalls
                .entry((name, waves))
                .or_default()
                .push(StallSample {
                    saved,
                    restored,
                    stall_ns,
                });
        }
    }

    /// Every stall, for the fit.
    pub fn all_stalls(&self) -> Vec<StallSample> {
        self.stalls.values().flatten().copied().collect()
    }
}
