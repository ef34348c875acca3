//! The dispatch pass: the arbitration's pick, placement, and the batches the pass starts with
//! their times (scaled by what they share, with contention).

use std::collections::BTreeMap;

use super::Partition;
use crate::QueueKey;
use crate::batches::Running;
use crate::contention::{self, Contention, Footprint};
use crate::queue::COMPLETED;
use crate::slots::Placement;
use crate::stats::Completion;

impl Partition {
    /// Launches work-groups while slots and eligible queues allow.
    pub(super) fn dispatch(&mut self) {
        if self.unmapping || self.now < self.stall_until {
            return;
        }
        let n = self.runlist.len();
        self.blocked.clear();
        self.blocked.resize(n, false);
        self.batches.begin_pass(n);
        while let Some((i, alone)) =
            self.runlist
                .pick(self.params.arbitration, self.now, &self.blocked)
        {
            let limit = if self.batching && alone { u64::MAX } else { 1 };
            let (launched, blocked) = self.launch(i, limit);
            if launched {
                self.runlist.launched(i);
            }
            if blocked || !launched {
                self.blocked[i] = true;
            }
        }
        self.set_ends();
        self.batches.commit();
    }

    /// Sets the ends of the batches this pass started: their time, scaled by what they share
    /// now that the pass is over. The work-groups of one packet with one time share one factor
    /// (the mean CU load over all of them), so that batches and single work-groups agree.
    fn set_ends(&mut self) {
        let now = self.now;
        let Some(c) = self.contention else {
            for r in self.batches.pending_mut() {
                r.end = now + r.ns.max(1);
            }
            return;
        };
        let total: u64 = self.runlist.iter().map(|q| q.demand).sum();
        let slots = &self.slots;
        let mut groups: BTreeMap<(QueueKey, u64, u32, u64), (u128, u64)> = BTreeMap::new();
        for r in self.batches.pending_mut() {
            let load: u128 = r
                .cus
                .iter()
                .map(|&(cu, n)| u128::from(n) * u128::from(slots.load(cu)))
                .sum();
            let g = groups.entry((r.queue, r.pseq, r.waves, r.ns)).or_default();
            g.0 += load;
            g.1 += r.count;
        }
        let runlist = &self.runlist;
        for r in self.batches.pending_mut() {
            let (load, count) = groups[&(r.queue, r.pseq, r.waves, r.ns)];
            let mean = u64::try_from(load / u128::from(count.max(1))).unwrap_or(u64::MAX);
            let own = runlist.get(r.queue).map_or(0, |q| q.demand);
            let memory = c.memory_factor(total, own, r.share);
            r.factor = (contention::cu_factor(mean).saturating_mul(memory) / 1000).max(1);
            r.end = now.saturating_add(contention::scaled(r.ns, r.factor));
        }
    }

    /// Starts `count` work-groups of `next` for queue `i`, placed on `cus`: a new batch, or more
    /// of the one the queue started in this pass for the same packet with the same time.
    fn start_batch(&mut self, i: usize, next: &Next, count: u64, cus: Placement) {
        self.note_occupancy();
        let used = self.slots.used();
        self.stats.peak_occupied_slots = self
            .stats
            .peak_occupied_slots
            .max(u32::try_from(used).unwrap_or(u32::MAX));
        self.stats.wg_events += count;
        let now = self.now;
        let q = self.runlist.at_mut(i);
        if q.running == 0 {
            q.busy_since = now;
        }
        q.running += count;
        q.demand += count * next.demand;
        let r = Running {
            queue: q.key,
            pseq: next.pseq,
            waves: next.waves,
            ns: next.ns,
            end: 0,
            factor: 1000,
            count,
            cus,
            fp: next.fp,
            demand: next.demand,
            share: next.share,
        };
        if self.batches.start(i, self.batching, r) {
            self.stats.batch_events += 1;
        }
    }

    /// Launches up to `limit` work-groups of queue `i`: its saved ones first, then its packets
    /// in order, the work-groups of each placed together. Returns whether it launched any, and
    /// whether it stopped because the next one did not fit.
    fn launch(&mut self, i: usize, limit: u64) -> (bool, bool) {
        let mut left = limit;
        let mut launched = false;
        while left > 0 {
            let now = self.now;
            // The next work-groups: a saved record's, or the next packet's.
            let q = self.runlist.at(i);
            let (next, todo, saved) = match q.saved.front() {
                Some(s) => (
                    Next {
                        pseq: s.pseq,
                        waves: s.waves,
                        ns: s.remaining,
                        fp: s.fp,
                        demand: s.demand,
                        share: s.share,
                    },
                    s.count,
                    true,
                ),
                None => {
                    let Some(pi) = q.launchable(now) else {
                        return (launched, false);
                    };
                    let p = &q.packets[pi];
                    if p.d.workgroups == 0 {
                        self.complete_empty(i, pi);
                        launched = true;
                        left -= 1;
                        continue;
                    }
                    let ns = if p.d.wg_ns == 0 {
                        self.params.default_wg_ns
                    } else {
                        p.d.wg_ns
                    };
                    let waves = p.d.waves_per_wg.max(1);
                    let (demand, share) = match self.contention {
                        Some(c) if p.fp.dram_bytes > 0 => {
                            let demand = Contention::demand(p.fp, ns);
                            let fit = u64::from(self.slots.per_cu() / waves);
                            let live = p.d.workgroups.min(self.slots.cus() as u64 * fit);
                            (demand, c.own_share(demand, live))
                        }
                        _ => (0, 0),
                    };
                    let next = Next {
                        pseq: p.pseq,
                        waves,
                        ns,
                        fp: p.fp,
                        demand,
                        share,
                    };
                    (next, p.d.workgroups - p.launched, false)
                }
            };
            let (pseq, waves) = (next.pseq, next.waves);
            let want = todo.min(left);
            // Occupancy is integrated up to now before the slots change (splitting it is exact).
            self.account_occupancy();
            let (n, cus) = self.slots.place(
                self.runlist.at(i).mask.as_deref(),
                waves,
                want,
                u32::from(next.fp.cu_util_permille),
            );
            if n == 0 {
                return (launched, true);
            }
            let q = self.runlist.at_mut(i);
            if saved {
                match q.saved.front_mut() {
                    Some(f) if f.count > n => f.count -= n,
                    _ => {
                        q.saved.pop_front();
                    }
                }
                q.stats.wgs_restored += n;
                self.stats.waves_restored += n * u64::from(waves);
            } else if let Some(p) = q.packet_mut(pseq) {
                p.launched += n;
                p.start.get_or_insert(now);
                if p.launched == p.d.workgroups {
                    q.launch_pseq = pseq + 1;
                }
                q.stats.wgs_launched += n;
            }
            self.start_batch(i, &next, n, cus);
            launched = true;
            left -= n;
            if n < want {
                return (true, true);
            }
        }
        (launched, false)
    }

    /// Completes packet `pi` of queue `i`, which has no work-groups, as soon as it may start.
    fn complete_empty(&mut self, i: usize, pi: usize) {
        let now = self.now;
        let q = self.runlist.at_mut(i);
        let p = &mut q.packets[pi];
        let pseq = p.pseq;
        q.launch_pseq = pseq + 1;
        p.start = Some(now);
        p.done = COMPLETED;
        let c = Completion {
            queue: q.key,
            tag: p.d.tag,
            submit_ns: p.submit,
            start_ns: now,
            end_ns: now,
        };
        q.stats.packets_completed += 1;
        self.completions.push(c);
        self.retire(i, pseq);
    }
}

/// The next work-groups a queue launches: of which packet, their size and time, and what one
/// of them uses of the shared CUs and DRAM.
struct Next {
    pseq: u64,
    waves: u32,
    ns: u64,
    fp: Footprint,
    demand: u64,
    share: u32,
}
