//! What happened over one run's time, for plots: when the LP job completed its kernels, when
//! its queue was preempted and released, and when each HP request launched. Recorded only on request ([`crate::Setup::timeline`]),
//! for one representative seed per configuration: a push per LP completion and per command, no
//! work in the simulation loop otherwise.

use serde::Serialize;

/// One change of the LP job's state, at the time the command took effect on the GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Mark {
    /// Simulated time, ns.
    pub at_ns: u64,
    /// The preemption level as a number (1 hold, 2 deactivate, 3 suspend).
    pub level: u8,
    /// Preempted from here on (`true`) or released (`false`).
    pub preempted: bool,
}

/// One run's timeline.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Timeline {
    /// Completion time of every LP kernel, ns, in order.
    pub lp_done_ns: Vec<u64>,
    /// Every preempt and release of the LP job, in order.
    pub marks: Vec<Mark>,
    /// When each HP request's kernels reached the ring (its first launch), ns, in order.
    pub hp_launch_ns: Vec<u64>,
    /// End of the run, ns.
    pub end_ns: u64,
}

impl Timeline {
    /// LP kernels per second in consecutive bins of `bin_ns` from 0 to the run's end: one
    /// `(bin start in s, kernels/s)` per bin (a partial last bin is scaled to its length).
    pub fn lp_rate(&self, bin_ns: u64) -> Vec<(f64, f64)> {
        let bin_ns = bin_ns.max(1);
        let bins = self.end_ns.div_ceil(bin_ns) as usize;
        let mut counts = vec![0u64; bins];
        for &t in &self.lp_done_ns {
            if let Some(c) = counts.get_mut((t / bin_ns) as usize) {
                *c += 1;
            }
        }
        counts
            .iter()
            .enumerate()
            .map(|(i, &n)| {
                let start = i as u64 * bin_ns;
                let len = (self.end_ns - start).min(bin_ns).max(1);
                (start as f64 / 1e9, n as f64 / (len as f64 / 1e9))
            })
            .collect()
    }

    /// The intervals (start, end) in ns during which the LP job was preempted, at any level; an
    /// interval still open at the end closes there.
    pub fn preempted_spans(&self) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        let mut since = None;
        for m in &self.marks {
            match (m.preempted, since) {
                (true, None) => since = Some(m.at_ns),
                (false, Some(s)) => {
                    out.push((s, m.at_ns));
                    since = None;
                }
                _ => {}
            }
        }
        if let Some(s) = since {
            out.push((s, self.end_ns.max(s)));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_per_bin_and_spans() {
        let t = Timeline {
            lp_done_ns: vec![100, 200, 1_500, 2_100],
            marks: vec![
                Mark {
                    at_ns: 300,
                    level: 2,
                    preempted: true,
                },
                Mark {
                    at_ns: 900,
                    level: 2,
                    preempted: false,
                },
                Mark {
                    at_ns: 2_000,
                    level: 2,
                    preempted: true,
                },
            ],
            hp_launch_ns: Vec::new(),
            end_ns: 2_500,
        };
        // Bins of 1 µs: 2 kernels, 1 kernel, 1 kernel in the last half-µs bin.
        let r = t.lp_rate(1_000);
        assert_eq!(r.len(), 3);
        assert_eq!(r[0], (0.0, 2e6));
        assert_eq!(r[1], (1e-6, 1e6));
        assert_eq!(r[2], (2e-6, 2e6));
        assert_eq!(t.preempted_spans(), vec![(300, 900), (2_000, 2_500)]);
    }
}
