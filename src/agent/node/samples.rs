//! The latest latency samples of one kind, and their quantiles for `kfdq status`.

use std::collections::VecDeque;

/// Latency samples kept.
const SAMPLES: usize = 4096;

/// The last [`SAMPLES`] values.
#[derive(Debug, Default)]
pub(super) struct Samples(VecDeque<f64>);

impl Samples {
    /// Adds one, forgetting the oldest beyond [`SAMPLES`].
    pub(super) fn push(&mut self, v: f64) {
        if self.0.len() == SAMPLES {
            self.0.pop_front();
        }
        self.0.push_back(v);
    }

    /// How many are kept.
    pub(super) fn len(&self) -> usize {
        self.0.len()
    }

    /// The `q` quantile (0 with no samples).
    pub(super) fn quantile(&self, q: f64) -> f64 {
        crate::stats::nearest_rank(&self.0, q)
    }
}
