//! Runlist updates: edits applied as one update, the device-wide preempt they cost (CWSR saves of
//! the running work-groups), and the rotation of an oversubscribed runlist.

use super::Partition;
use super::{Edit, UpdateCost};
use crate::QueueKey;
use crate::contention;
use crate::queue::Saved;

impl Partition {
    pub(super) fn rotate(&mut self) {
        let leaving = self.runlist.rotate(self.now);
        self.stats.rotations += 1;
        // Queues that left the resident window are preempted: their work-groups are saved.
        let waves = self.save_running(|k| leaving.contains(&k), self.now);
        let resume = self.now + self.params.preempt_fixed_ns + self.params.save_wave_ns * waves;
        self.stall_until = self.stall_until.max(resume);
    }

    /// Saves (CWSR) the running work-groups of queues `which` selects, at time `at` (their
    /// progress counts up to `at`); work-groups of queues no longer in the runlist are dropped.
    fn save_running(&mut self, which: impl Fn(QueueKey) -> bool, at: u64) -> u64 {
        let mut waves = 0u64;
        for mut r in self.batches.take(which, true) {
            self.free(&mut r);
            let now = self.now;
            if let Some(i) = self.runlist.index(r.queue) {
                let q = self.runlist.at_mut(i);
                q.running -= r.count;
                if q.running == 0 {
                    q.stats.busy_ns += now - q.busy_since;
                }
                q.saved.push_back(Saved {
                    pseq: r.pseq,
                    remaining: contention::unscaled(r.end.saturating_sub(at), r.factor),
                    waves: r.waves,
                    count: r.count,
                    fp: r.fp,
                    demand: r.demand,
                    share: r.share,
                });
                q.stats.wgs_saved += r.count;
                waves += r.count * u64::from(r.waves);
            }
        }
        self.stats.waves_saved += waves;
        waves
    }

    /// Applies `edits` as one runlist update at the current time. If any queue was mapped
    /// before it, it is a device-wide preempt: dispatch stops, waves that end within the grace
    /// period (`grace_ns`, or the default) finish, every other running work-group is saved, and
    /// dispatch resumes after the fixed cost plus the per-wave save and restore costs.
    pub fn update_runlist(&mut self, edits: &[Edit], grace_ns: Option<u64>) -> UpdateCost {
        let had_active = self.runlist.iter().any(|q| q.active);
        let mut cost = UpdateCost {
            preempt: had_active,
            waves_saved: 0,
            resume_ns: self.now,
        };
        if had_active {
            let grace = grace_ns.unwrap_or(self.params.default_grace_ns);
            let save_at = self.now + grace;
            // No new work-groups from now on; let the grace period run.
            self.unmapping = true;
            self.advance_to(save_at);
            self.unmapping = false;
            cost.waves_saved = self.save_running(|_| true, save_at);
        }
        for e in edits {
            self.apply(e);
        }
        self.stats.runlist_updates += 1;
        if had_active {
            self.stats.device_preempts += 1;
        }
        if self.runlist.oversubscribed() && !had_active {
            self.runlist.last_rotation = self.now;
        }
        self.runlist.recompute_residency();
        if had_active {
            let restore: u64 = self
                .runlist
                .iter()
                .filter(|q| q.mapped())
                .flat_map(|q| q.saved.iter())
                .map(|s| s.count * u64::from(s.waves))
                .sum();
            cost.resume_ns = self.now
                + self.params.preempt_fixed_ns
                + self.params.save_wave_ns * cost.waves_saved
                + self.params.restore_wave_ns * restore;
            self.stall_until = self.stall_until.max(cost.resume_ns);
        }
        self.dispatch();
        cost
    }

    fn apply(&mut self, e: &Edit) {
        match e {
            Edit::Add {
                queue,
                priority,
                active,
            } => self.runlist.add(*queue, *priority, *active),
            Edit::Remove(queue) => {
                if let Some(i) = self.runlist.index(*queue) {
                    let key = *queue;
                    // Work-groups still running (a removal without a preempt) are dropped.
                    for mut r in self.batches.take(|q| q == key, false) {
                        self.free(&mut r);
                    }
                    self.runlist.remove(i);
                }
            }
            Edit::SetActive(queue, active) => {
                if let Some(i) = self.runlist.index(*queue) {
                    self.runlist.at_mut(i).active = *active;
                }
            }
            Edit::SetPriority(queue, p) => {
                if let Some(i) = self.runlist.index(*queue) {
                    self.runlist.at_mut(i).priority = *p;
                }
            }
            Edit::SetCuMask(queue, mask) => {
                let cus = self.slots.cus();
                if let Some(i) = self.runlist.index(*queue) {
                    self.runlist.at_mut(i).mask = mask.as_ref().map(|words| {
                        (0..cus)
                            .map(|c| words.get(c / 32).is_some_and(|w| w & (1 << (c % 32)) != 0))
                            .collect()
                    });
                }
            }
        }
    }
}
