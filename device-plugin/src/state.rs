//! What the class servers, the health loop and the PodResources loop share.

use std::collections::HashMap;
use std::sync::Mutex;

use kfdq::GpuId;
use tokio::sync::{Notify, watch};

use crate::config::Config;
use crate::grants::Grants;
use crate::health::Health;

/// The plugin's shared state.
#[derive(Debug)]
pub struct Plugin {
    /// The validated configuration.
    pub config: Config,
    /// The partitions kfdq shares, fixed at start.
    pub partitions: Vec<GpuId>,
    /// The node's state; ListAndWatch streams send again when it changes.
    pub health: watch::Sender<Health>,
    /// The grants (the allocations file).
    pub grants: Mutex<Grants>,
    /// Asks the PodResources loop to look now (after an Allocate).
    pub look_now: Notify,
    /// Open ListAndWatch streams per class.
    pub streams: Mutex<HashMap<String, usize>>,
    /// Wakes the supervisor (a ListAndWatch stream ended).
    pub stream_ended: Notify,
}

/// Locks `m`; a panic elsewhere while it was held leaves plain data, still usable.
pub fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Plugin {
    /// The share ids of `class` with their health now.
    pub fn devices(&self, class: &str, shares: u32) -> Vec<(String, bool)> {
        let h = self.health.borrow();
        self.partitions
            .iter()
            .flat_map(|g| {
                let ok = h.healthy(*g);
                (0..shares).map(move |n| (format!("{}-{class}-{n}", g.0), ok))
            })
            .collect()
    }

    /// Open ListAndWatch streams of `class`.
    pub fn open_streams(&self, class: &str) -> usize {
        lock(&self.streams).get(class).copied().unwrap_or(0)
    }
}
