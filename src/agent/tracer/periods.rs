//! The sampling decisions: when a tracee is sampled at the fine period, when the next fine
//! sample is due, and which samples are changes.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// While a tracee whose class preempts others has a busy queue, it is sampled this often, so
/// its idle edge (which releases the processes it preempted) is seen within it rather than up to
/// a whole activity period late; its busy edge still waits for the next regular sample (a traced
/// process reports no launches). Longer than a shim's [`crate::proto::BUSY_SAMPLE_PERIOD`]
/// (100 µs): a tracer sample reads each queue's indexes through `/proc/<pid>/mem` from another
/// process, and at 100 µs the tracer thread took 12 % of a core while a latency tracee was busy
/// (docs/performance.md, "Tracer path"); 250 µs is the shortest activity period the
/// configuration accepts (`ACTIVITY_RANGE_US`).
pub const BUSY_SAMPLE: Duration = Duration::from_micros(250);

/// Records a sample of queue `queue` in `busy`; true when its busy state changed (a queue's
/// first sample counts as a change).
pub(super) fn record(busy: &mut BTreeMap<u32, bool>, queue: u32, now_busy: bool) -> bool {
    busy.insert(queue, now_busy) != Some(now_busy)
}

/// Whether a tracee is sampled at [`BUSY_SAMPLE`]: its class preempts others (`edges`), it is
/// not being left, and one of its queues is busy.
pub(super) fn fine(edges: bool, leaving: bool, busy: &BTreeMap<u32, bool>) -> bool {
    edges && !leaving && busy.values().any(|b| *b)
}

/// The fine period matters only where it is shorter than the activity period.
pub(super) fn fine_period_applies(activity: Duration) -> bool {
    activity > BUSY_SAMPLE
}

/// The next fine sample: none while no tracee is sampled finely (`fine`); the one already due
/// later than `now`; else one [`BUSY_SAMPLE`] from `now`.
pub(super) fn next_fine(fine: bool, due: Option<Instant>, now: Instant) -> Option<Instant> {
    fine.then(|| due.filter(|t| *t > now).unwrap_or(now + BUSY_SAMPLE))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_is_reported_once_and_the_first_sample_counts() {
        let mut busy = BTreeMap::new();
        assert!(record(&mut busy, 4, false), "the first sample");
        assert!(!record(&mut busy, 4, false), "no change");
        assert!(record(&mut busy, 4, true));
        assert!(!record(&mut busy, 4, true));
        assert!(record(&mut busy, 4, false));
        assert_eq!(busy, BTreeMap::from([(4, false)]));
    }

    #[test]
    fn fine_sampling_needs_edges_a_busy_queue_and_no_leaving() {
        let busy = BTreeMap::from([(1, false), (2, true)]);
        let idle = BTreeMap::from([(1, false)]);
        assert!(fine(true, false, &busy));
        assert!(!fine(false, false, &busy), "its class preempts nobody");
        assert!(!fine(true, true, &busy), "being left");
        assert!(!fine(true, false, &idle), "all idle");
        assert!(fine_period_applies(Duration::from_millis(1)));
        assert!(
            !fine_period_applies(BUSY_SAMPLE),
            "an activity period as short samples finely already"
        );
    }

    #[test]
    fn the_next_fine_sample_keeps_its_time_or_starts_a_period() {
        let now = Instant::now();
        let later = now + Duration::from_micros(100);
        assert_eq!(next_fine(false, Some(later), now), None);
        assert_eq!(next_fine(true, Some(later), now), Some(later), "kept");
        assert_eq!(
            next_fine(true, Some(now), now),
            Some(now + BUSY_SAMPLE),
            "due now: the next one a period on"
        );
        assert_eq!(next_fine(true, None, now), Some(now + BUSY_SAMPLE));
    }
}
