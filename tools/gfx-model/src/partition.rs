//! The partition: its runlist, its CUs' wave slots, and the work-groups running on them.
//!
//! Time is virtual nanoseconds and only moves when the caller says so ([`Partition::advance_to`]);
//! everything a call does happens at the model's current time. The same calls give the same
//! events, in the same order.
//!
//! Work-groups are simulated in batches: the work-groups of one packet that one dispatch turn
//! places together start at the same time, run for the same time and so end together, and the
//! model keeps them as one entry (one heap event, one placement pass over the CUs) instead of
//! one per work-group. A batch forms where the one-at-a-time dispatcher would have launched
//! those work-groups in a row: the queue is the only one of the highest arbitration rank with
//! work (otherwise the queues take turns, one work-group each, as before). The results are the
//! per-work-group model's, event for event ([`Partition::per_workgroup`] steps that way and the
//! tests compare the two).
//!
//! The parts: [`Runlist`] (queues and residency), [`Slots`] (the CUs' wave slots and where work-
//! groups go), [`Batches`] (what runs and when it ends); this file runs the dispatcher and the
//! runlist updates over them and keeps the counters.

use crate::QueueKey;
use crate::batches::{Batches, Running};
use crate::dispatch::Dispatch;
use crate::params::{Params, Shape};
use crate::queue::{COMPLETED, Packet, Saved};
use crate::runlist::Runlist;
use crate::slots::{Placement, Slots};
use crate::stats::{Completion, PartitionStats, QueueStats};

/// A change to the runlist; [`Partition::update_runlist`] applies a batch as one update.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Edit {
    /// A new queue (CREATE_QUEUE), active or not, with its priority 0..15.
    Add {
        /// Caller's key.
        queue: QueueKey,
        /// KFD priority.
        priority: u8,
        /// Whether it is active (the kernel's QUEUE_IS_ACTIVE).
        active: bool,
    },
    /// The queue is gone (DESTROY_QUEUE or process exit); its work is dropped.
    Remove(QueueKey),
    /// Active or not: deactivated (level 2), suspended (level 3), or back.
    SetActive(QueueKey, bool),
    /// New priority.
    SetPriority(QueueKey, u8),
    /// New CU mask (bit i = CU i of the partition; None = every CU).
    SetCuMask(QueueKey, Option<Vec<u32>>),
}

/// What a runlist update cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UpdateCost {
    /// Whether it was a device-wide preempt (a queue was mapped before it).
    pub preempt: bool,
    /// Waves context-saved.
    pub waves_saved: u64,
    /// When dispatch resumes.
    pub resume_ns: u64,
}

/// One GPU partition: queues, runlist, CUs and the work-groups running on them.
#[derive(Debug, Clone)]
pub struct Partition {
    shape: Shape,
    params: Params,
    now: u64,
    runlist: Runlist,
    slots: Slots,
    batches: Batches,
    /// Whether a dispatch turn may place several work-groups at once (false: one at a time).
    batching: bool,
    stall_until: u64,
    /// Per queue, whether the dispatch pass under way gave up on it.
    blocked: Vec<bool>,
    /// Set while a runlist update lets its grace period run: no new work-groups.
    unmapping: bool,
    completions: Vec<Completion>,
    occ_since: u64,
    /// Occupancy change points (time, occupied slots) while recording.
    occupancy: Option<Vec<(u64, u32)>>,
    stats: PartitionStats,
}

impl Partition {
    /// An idle partition at time 0.
    pub fn new(shape: Shape, params: Params) -> Self {
        let slots = params
            .waves_per_cu_limit
            .map_or(shape.waves_per_cu, |l| l.min(shape.waves_per_cu));
        Partition {
            shape,
            params,
            now: 0,
            runlist: Runlist::new(shape.resident_queues),
            slots: Slots::new(shape.cus() as usize, slots),
            batches: Batches::default(),
            batching: true,
            stall_until: 0,
            blocked: Vec::new(),
            unmapping: false,
            completions: Vec::new(),
            occ_since: 0,
            occupancy: None,
            stats: PartitionStats::default(),
        }
    }

    /// The same model, stepped one work-group at a time: every work-group is its own event.
    /// Slower, with the same results as [`Partition::new`]'s batches; the tests check that.
    pub fn per_workgroup(shape: Shape, params: Params) -> Self {
        Partition {
            batching: false,
            ..Self::new(shape, params)
        }
    }

    /// The model's current time.
    pub fn now(&self) -> u64 {
        self.now
    }

    /// The shape.
    pub fn shape(&self) -> Shape {
        self.shape
    }

    /// The parameters.
    pub fn params(&self) -> Params {
        self.params
    }

    /// Partition counters.
    pub fn stats(&self) -> PartitionStats {
        let mut s = self.stats;
        s.occupied_slot_ns += u128::from(self.slots.used()) * u128::from(self.now - self.occ_since);
        s
    }

    /// A queue's counters (busy time up to now included).
    pub fn queue_stats(&self, queue: QueueKey) -> Option<QueueStats> {
        let q = self.runlist.get(queue)?;
        let mut s = q.stats;
        if q.running > 0 {
            s.busy_ns += self.now - q.busy_since;
        }
        Some(s)
    }

    /// Whether the queue is in the runlist's resident window (active and mapped).
    pub fn is_resident(&self, queue: QueueKey) -> bool {
        self.runlist.get(queue).is_some_and(|q| q.mapped())
    }

    /// Work-groups of the queue now running, and saved (waiting to be restored).
    pub fn queue_load(&self, queue: QueueKey) -> Option<(u64, u64)> {
        let q = self.runlist.get(queue)?;
        Some((q.running, q.saved.iter().map(|s| s.count).sum()))
    }

    /// Packets submitted to the queue and not yet complete.
    pub fn pending_packets(&self, queue: QueueKey) -> usize {
        self.runlist.get(queue).map_or(0, |q| q.packets.len())
    }

    /// Completions since the last call, in completion order.
    pub fn take_completions(&mut self) -> Vec<Completion> {
        std::mem::take(&mut self.completions)
    }

    fn account_occupancy(&mut self) {
        self.stats.occupied_slot_ns +=
            u128::from(self.slots.used()) * u128::from(self.now - self.occ_since);
        self.occ_since = self.now;
    }

    /// Records the occupied wave slots after every change, for [`Self::take_occupancy`].
    pub fn record_occupancy(&mut self, on: bool) {
        self.occupancy = on.then(Vec::new);
    }

    /// Occupancy over time since the last call: `(time, occupied slots)` at every change
    /// (the last value at a given time wins).
    pub fn take_occupancy(&mut self) -> Vec<(u64, u32)> {
        self.occupancy
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    fn note_occupancy(&mut self) {
        let (now, used) = (
            self.now,
            u32::try_from(self.slots.used()).unwrap_or(u32::MAX),
        );
        if let Some(trace) = self.occupancy.as_mut() {
            match trace.last_mut() {
                Some(last) if last.0 == now => last.1 = used,
                _ => trace.push((now, used)),
            }
        }
    }

    /// Submits a packet to `queue` at the current time. Unknown queues are ignored (the caller
    /// removed them).
    pub fn submit(&mut self, queue: QueueKey, d: Dispatch) {
        let now = self.now;
        if let Some(i) = self.runlist.index(queue) {
            let q = self.runlist.at_mut(i);
            let pseq = q.next_pseq;
            q.next_pseq += 1;
            q.packets.push_back(Packet {
                pseq,
                d,
                launched: 0,
                done: 0,
                submit: now,
                start: None,
            });
            self.dispatch();
        }
    }

    /// When something next happens without new input: a work-group ends, a stall ends with
    /// work waiting, or an oversubscribed runlist rotates. None: nothing will happen.
    pub fn next_event(&self) -> Option<u64> {
        let mut next = self.batches.next_end();
        let waiting = self
            .runlist
            .iter()
            .any(|q| q.mapped() && q.has_work(self.now));
        if self.stall_until > self.now && waiting {
            next = Some(next.map_or(self.stall_until, |t| t.min(self.stall_until)));
        }
        if self.runlist.oversubscribed() {
            let r = self.runlist.last_rotation + self.params.quantum_ns.max(1);
            next = Some(next.map_or(r, |t| t.min(r)));
        }
        next.map(|t| t.max(self.now))
    }

    /// Runs the partition up to time `t` (a time before the current one changes nothing).
    pub fn advance_to(&mut self, t: u64) {
        while let Some(next) = self.next_event() {
            if next > t {
                break;
            }
            self.step_to(next);
        }
        if t > self.now {
            self.account_occupancy();
            self.now = t;
            self.dispatch();
        }
    }

    fn step_to(&mut self, t: u64) {
        if t > self.now {
            self.account_occupancy();
            self.now = t;
        }
        while let Some(r) = self.batches.pop_ended(self.now) {
            self.finish(r);
        }
        if self.runlist.oversubscribed()
            && self.now >= self.runlist.last_rotation + self.params.quantum_ns.max(1)
        {
            self.rotate();
        }
        self.dispatch();
    }

    /// Gives a batch's slots back.
    fn free(&mut self, r: &mut Running) {
        self.account_occupancy();
        self.slots
            .release(std::mem::take(&mut r.cus), r.waves, r.count);
        self.note_occupancy();
        self.stats.batch_events += 1;
    }

    fn finish(&mut self, mut r: Running) {
        self.free(&mut r);
        let now = self.now;
        let Some(i) = self.runlist.index(r.queue) else {
            return;
        };
        let q = self.runlist.at_mut(i);
        q.running -= r.count;
        if q.running == 0 {
            q.stats.busy_ns += now - q.busy_since;
        }
        q.stats.wgs_completed += r.count;
        if let Some(p) = q.packet_mut(r.pseq) {
            p.done += r.count;
        }
        self.stats.wg_events += r.count;
        self.retire(i, r.pseq);
    }

    /// Completes packet `pseq` of queue `i` if its last work-group ended, and drops completed
    /// packets from the front of the queue.
    fn retire(&mut self, i: usize, pseq: u64) {
        let now = self.now;
        let q = self.runlist.at_mut(i);
        let key = q.key;
        if let Some(p) = q.packet_mut(pseq)
            && p.d.workgroups > 0
            && p.done == p.d.workgroups
        {
            self.completions.push(Completion {
                queue: key,
                tag: p.d.tag,
                submit_ns: p.submit,
                start_ns: p.start.unwrap_or(p.submit),
                end_ns: now,
            });
            p.done = COMPLETED;
            q.stats.packets_completed += 1;
        }
        while q.packets.front().is_some_and(|p| p.done == COMPLETED) {
            q.packets.pop_front();
        }
    }

    fn rotate(&mut self) {
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
                    remaining: r.end.saturating_sub(at).max(1),
                    waves: r.waves,
                    count: r.count,
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

    /// Launches work-groups while slots and eligible queues allow.
    fn dispatch(&mut self) {
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
        self.batches.commit();
    }

    /// Starts `count` work-groups of packet `pseq` of queue `i`, placed on `cus`, each running
    /// `ns`: a new batch, or more of the one the queue started in this pass for the same packet
    /// with the same end.
    fn start_batch(
        &mut self,
        i: usize,
        pseq: u64,
        waves: u32,
        ns: u64,
        count: u64,
        cus: Placement,
    ) {
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
        let r = Running {
            queue: q.key,
            pseq,
            waves,
            end: now + ns.max(1),
            count,
            cus,
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
            // The next work-groups: (packet, waves, run time, how many) and whether saved.
            let q = self.runlist.at(i);
            let (pseq, waves, ns, todo, saved) = match q.saved.front() {
                Some(s) => (s.pseq, s.waves, s.remaining, s.count, true),
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
                    (
                        p.pseq,
                        p.d.waves_per_wg.max(1),
                        ns,
                        p.d.workgroups - p.launched,
                        false,
                    )
                }
            };
            let want = todo.min(left);
            // Occupancy is integrated up to now before the slots change (splitting it is exact).
            self.account_occupancy();
            let (n, cus) = self
                .slots
                .place(self.runlist.at(i).mask.as_deref(), waves, want);
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
            self.start_batch(i, pseq, waves, ns, n, cus);
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
