//! Sampling: each tracee's queues' read and write indexes read through `/proc/<pid>/mem`, at
//! the activity period or, while a tracee whose class preempts others is busy, at
//! [`BUSY_SAMPLE`]; and the queue set refreshed by GET_QUEUE_SNAPSHOT.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

use super::handle::Event;
use super::thread::Thread;
use super::tracee::Tracee;
use crate::kfd::debug::QueueSnapshot;
use crate::kfd::{EXCEPTION_QUEUE_NEW, QueueId};
use crate::proto::ShimMsg;

/// While a tracee whose class preempts others has a busy queue, it is sampled this often, so
/// its idle edge (which releases the processes it preempted) is seen within it rather than up to
/// a whole activity period late; its busy edge still waits for the next regular sample (a traced
/// process reports no launches). Longer than a shim's [`crate::proto::BUSY_SAMPLE_PERIOD`]
/// (100 µs): a tracer sample reads each queue's indexes through `/proc/<pid>/mem` from another
/// process, and at 100 µs the tracer thread took 12 % of a core while a latency tracee was busy
/// (docs/performance.md, "Tracer path"); 250 µs is the shortest activity period the
/// configuration accepts (`ACTIVITY_RANGE_US`).
pub const BUSY_SAMPLE: Duration = Duration::from_micros(250);

impl Thread {
    /// Whether a tracee is sampled at the fine period now: its class preempts others and one
    /// of its queues is busy.
    pub(super) fn fine_sampling(&self) -> bool {
        fine_period_applies(self.settings.activity) && self.tracees.values().any(Tracee::fine)
    }

    /// Reads each tracee's queues' indexes (with `fine`, only the tracees
    /// [`Tracee::fine`] names) and reports the queues whose busy state changed.
    pub(super) fn sample(&mut self, fine: bool) {
        let mut changes = Vec::new();
        for t in self.tracees.values_mut() {
            if t.leaving.is_some() || (fine && !t.fine()) {
                continue;
            }
            for q in &t.queues {
                let (Some(r), Some(w)) = (
                    read_u64(&t.mem, q.read_pointer_address),
                    read_u64(&t.mem, q.write_pointer_address),
                ) else {
                    continue;
                };
                let busy = crate::kfd::aql::busy(w, r);
                if record(&mut t.busy, q.queue_id.0, busy) {
                    changes.push((t.conn, q.queue_id.0, busy));
                }
            }
        }
        for (conn, queue_id, busy) in changes {
            self.emit(Event::Msg {
                conn,
                msg: ShimMsg::Activity {
                    queue_id: QueueId(queue_id),
                    busy,
                },
            });
        }
    }

    /// GET_QUEUE_SNAPSHOT of `pid` (clearing EC_QUEUE_NEW, so new queues can be suspended);
    /// reports a changed queue set as a registry.
    pub(super) fn refresh(&mut self, pid: u32) {
        let Some(kfd) = &self.kfd else { return };
        let snap = match kfd.queue_snapshot(pid, EXCEPTION_QUEUE_NEW) {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!(pid, "tracer: snapshot: {e}");
                return;
            }
        };
        let Some(t) = self.tracees.get_mut(&pid) else {
            return;
        };
        let ids = |v: &[QueueSnapshot]| v.iter().map(|q| q.queue_id).collect::<Vec<_>>();
        let changed = ids(&snap) != ids(&t.queues);
        t.idle_scans = if snap.is_empty() { t.idle_scans + 1 } else { 0 };
        if changed {
            t.suspended
                .retain(|q| snap.iter().any(|s| s.queue_id.0 == *q));
            t.busy
                .retain(|q, _| snap.iter().any(|s| s.queue_id.0 == *q));
            t.queues = snap;
            let (conn, reg) = (t.conn, t.registry(pid));
            self.emit(Event::Msg {
                conn,
                msg: ShimMsg::Registry(reg),
            });
        }
        if self.tracees.get(&pid).is_some_and(|t| t.idle_scans >= 2) {
            self.leave(pid, "it has no KFD queue any more".into());
        }
    }

    pub(super) fn refresh_all(&mut self) {
        let pids: Vec<u32> = self
            .tracees
            .iter()
            .filter(|(_, t)| t.leaving.is_none())
            .map(|(p, _)| *p)
            .collect();
        for pid in pids {
            self.refresh(pid);
        }
    }
}

fn read_u64(mem: &File, addr: u64) -> Option<u64> {
    let mut b = [0u8; 8];
    mem.read_exact_at(&mut b, addr).ok()?;
    Some(u64::from_le_bytes(b))
}

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
