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
//! groups go), [`Batches`] (what runs and when it ends), [`Contention`] (what co-running work
//! costs, when set); this file runs the dispatcher and the runlist updates over them and keeps
//! the counters.

mod launch;
mod update;

use crate::QueueKey;
use crate::batches::{Batches, Running};
use crate::contention::{Contention, Footprint};
use crate::dispatch::Dispatch;
use crate::params::{Params, Shape};
use crate::queue::{COMPLETED, Packet};
use crate::runlist::Runlist;
use crate::slots::Slots;
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
    /// Shared CUs and DRAM slow work-groups (None: a work-group's time is its packet's).
    contention: Option<Contention>,
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
            contention: None,
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

    /// Lets shared CUs and DRAM slow work-groups ([`crate::contention`]); None (the default):
    /// a work-group runs its packet's time. Set it before the first submit: work already
    /// running keeps its time.
    pub fn set_contention(&mut self, contention: Option<Contention>) {
        self.contention = contention;
    }

    /// The contention terms, if set.
    pub fn contention(&self) -> Option<Contention> {
        self.contention
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
        self.submit_with(queue, d, Footprint::default());
    }

    /// [`Self::submit`] with what one of its work-groups uses of the shared CUs and DRAM (used
    /// with [`Self::set_contention`]).
    pub fn submit_with(&mut self, queue: QueueKey, d: Dispatch, fp: Footprint) {
        let now = self.now;
        if let Some(i) = self.runlist.index(queue) {
            let q = self.runlist.at_mut(i);
            let pseq = q.next_pseq;
            q.next_pseq += 1;
            q.packets.push_back(Packet {
                pseq,
                d,
                fp,
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

    /// Gives a batch's slots back, and takes its DRAM demand off its queue.
    fn free(&mut self, r: &mut Running) {
        self.account_occupancy();
        self.slots.release(
            std::mem::take(&mut r.cus),
            r.waves,
            r.count,
            u32::from(r.fp.cu_util_permille),
        );
        if r.demand > 0
            && let Some(i) = self.runlist.index(r.queue)
        {
            let q = self.runlist.at_mut(i);
            q.demand = q.demand.saturating_sub(r.count * r.demand);
        }
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
}
