//! The partition: its runlist, its CUs' wave slots, and the work-groups running on them.
//!
//! Time is virtual nanoseconds and only moves when the caller says so ([`Partition::advance_to`]);
//! everything a call does happens at the model's current time. The same calls give the same
//! events, in the same order.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};

use crate::QueueKey;
use crate::dispatch::Dispatch;
use crate::params::{Arbitration, Params, Shape, pipe_band};
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

/// `Packet::done` of a packet whose completion was reported.
const COMPLETED: u64 = u64::MAX;

#[derive(Debug, Clone)]
struct Packet {
    pseq: u64,
    d: Dispatch,
    launched: u64,
    done: u64,
    submit: u64,
    start: Option<u64>,
}

#[derive(Debug, Clone, Copy)]
struct Saved {
    pseq: u64,
    remaining: u64,
    waves: u32,
}

#[derive(Debug, Clone)]
struct Queue {
    key: QueueKey,
    priority: u8,
    active: bool,
    resident: bool,
    mask: Option<Vec<bool>>,
    packets: VecDeque<Packet>,
    next_pseq: u64,
    saved: VecDeque<Saved>,
    running: u32,
    busy_since: u64,
    stats: QueueStats,
}

impl Queue {
    fn packet_mut(&mut self, pseq: u64) -> Option<&mut Packet> {
        let front = self.packets.front()?.pseq;
        let i = usize::try_from(pseq.checked_sub(front)?).ok()?;
        self.packets.get_mut(i)
    }

    /// Index of the next packet that may launch a work-group now, if any.
    fn launchable(&self, now: u64) -> Option<usize> {
        let i = self.packets.iter().position(|p| {
            p.launched < p.d.workgroups || (p.d.workgroups == 0 && p.start.is_none())
        })?;
        let p = &self.packets[i];
        if p.submit > now {
            return None;
        }
        if p.d.barrier && self.packets.iter().take(i).any(|e| e.done != COMPLETED) {
            return None;
        }
        Some(i)
    }

    fn has_work(&self, now: u64) -> bool {
        !self.saved.is_empty() || self.launchable(now).is_some()
    }
}

#[derive(Debug, Clone, Copy)]
struct Running {
    queue: QueueKey,
    pseq: u64,
    cu: u32,
    waves: u32,
    end: u64,
}

/// One GPU partition: queues, runlist, CUs and the work-groups running on them.
#[derive(Debug, Clone)]
pub struct Partition {
    shape: Shape,
    params: Params,
    now: u64,
    queues: Vec<Queue>,
    cu_free: Vec<u32>,
    free_total: u64,
    slots_per_cu: u32,
    cu_cursor: usize,
    running: BTreeMap<u64, Running>,
    heap: BinaryHeap<Reverse<(u64, u64)>>,
    next_seq: u64,
    stall_until: u64,
    rr: usize,
    rotation: usize,
    last_rotation: u64,
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
            .map_or(shape.waves_per_cu, |l| l.min(shape.waves_per_cu))
            .max(1);
        let cus = shape.cus().max(1) as usize;
        Partition {
            shape,
            params,
            now: 0,
            queues: Vec::new(),
            cu_free: vec![slots; cus],
            free_total: u64::from(slots) * cus as u64,
            slots_per_cu: slots,
            cu_cursor: 0,
            running: BTreeMap::new(),
            heap: BinaryHeap::new(),
            next_seq: 0,
            stall_until: 0,
            rr: 0,
            rotation: 0,
            last_rotation: 0,
            blocked: Vec::new(),
            unmapping: false,
            completions: Vec::new(),
            occ_since: 0,
            occupancy: None,
            stats: PartitionStats::default(),
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
        s.occupied_slot_ns += u128::from(self.used_slots()) * u128::from(self.now - self.occ_since);
        s
    }

    /// A queue's counters (busy time up to now included).
    pub fn queue_stats(&self, queue: QueueKey) -> Option<QueueStats> {
        let q = self.queues.iter().find(|q| q.key == queue)?;
        let mut s = q.stats;
        if q.running > 0 {
            s.busy_ns += self.now - q.busy_since;
        }
        Some(s)
    }

    /// Whether the queue is in the runlist's resident window (active and mapped).
    pub fn is_resident(&self, queue: QueueKey) -> bool {
        self.queues
            .iter()
            .any(|q| q.key == queue && q.active && q.resident)
    }

    /// Work-groups of the queue now running, and saved (waiting to be restored).
    pub fn queue_load(&self, queue: QueueKey) -> Option<(u32, usize)> {
        let q = self.queues.iter().find(|q| q.key == queue)?;
        Some((q.running, q.saved.len()))
    }

    /// Packets submitted to the queue and not yet complete.
    pub fn pending_packets(&self, queue: QueueKey) -> usize {
        self.queues
            .iter()
            .find(|q| q.key == queue)
            .map_or(0, |q| q.packets.len())
    }

    /// Completions since the last call, in completion order.
    pub fn take_completions(&mut self) -> Vec<Completion> {
        std::mem::take(&mut self.completions)
    }

    fn used_slots(&self) -> u64 {
        u64::from(self.slots_per_cu) * self.cu_free.len() as u64 - self.free_total
    }

    fn account_occupancy(&mut self) {
        self.stats.occupied_slot_ns +=
            u128::from(self.used_slots()) * u128::from(self.now - self.occ_since);
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
            u32::try_from(self.used_slots()).unwrap_or(u32::MAX),
        );
        if let Some(trace) = self.occupancy.as_mut() {
            match trace.last_mut() {
                Some(last) if last.0 == now => last.1 = used,
                _ => trace.push((now, used)),
            }
        }
    }

    fn index(&self, queue: QueueKey) -> Option<usize> {
        self.queues.iter().position(|q| q.key == queue)
    }

    /// Submits a packet to `queue` at the current time. Unknown queues are ignored (the caller
    /// removed them).
    pub fn submit(&mut self, queue: QueueKey, d: Dispatch) {
        let now = self.now;
        if let Some(i) = self.index(queue) {
            let q = &mut self.queues[i];
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
        let mut next = self.heap.peek().map(|Reverse((t, _))| *t);
        let waiting = self
            .queues
            .iter()
            .any(|q| q.active && q.resident && q.has_work(self.now));
        if self.stall_until > self.now && waiting {
            next = Some(next.map_or(self.stall_until, |t| t.min(self.stall_until)));
        }
        if self.oversubscribed() {
            let r = self.last_rotation + self.params.quantum_ns.max(1);
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
        while let Some(Reverse((end, seq))) = self.heap.peek().copied() {
            if end > self.now {
                break;
            }
            self.heap.pop();
            if let Some(r) = self.running.remove(&seq) {
                self.finish(r);
            }
        }
        if self.oversubscribed() && self.now >= self.last_rotation + self.params.quantum_ns.max(1) {
            self.rotate();
        }
        self.dispatch();
    }

    fn free(&mut self, r: &Running) {
        self.account_occupancy();
        self.cu_free[r.cu as usize] += r.waves;
        self.free_total += u64::from(r.waves);
        self.note_occupancy();
    }

    fn finish(&mut self, r: Running) {
        self.free(&r);
        let now = self.now;
        let Some(i) = self.index(r.queue) else {
            return;
        };
        let q = &mut self.queues[i];
        q.running -= 1;
        if q.running == 0 {
            q.stats.busy_ns += now - q.busy_since;
        }
        q.stats.wgs_completed += 1;
        if let Some(p) = q.packet_mut(r.pseq) {
            p.done += 1;
        }
        self.stats.wg_events += 1;
        self.retire(i, r.pseq);
    }

    /// Completes packet `pseq` of queue `i` if its last work-group ended, and drops completed
    /// packets from the front of the queue.
    fn retire(&mut self, i: usize, pseq: u64) {
        let now = self.now;
        let q = &mut self.queues[i];
        let key = q.key;
        let mut completed = false;
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
            completed = true;
        }
        if completed {
            q.stats.packets_completed += 1;
        }
        while q.packets.front().is_some_and(|p| p.done == COMPLETED) {
            q.packets.pop_front();
        }
    }

    fn oversubscribed(&self) -> bool {
        self.queues.iter().filter(|q| q.active).count() > self.shape.resident_queues as usize
    }

    fn recompute_residency(&mut self) {
        let cap = self.shape.resident_queues as usize;
        let active: Vec<usize> = (0..self.queues.len())
            .filter(|&i| self.queues[i].active)
            .collect();
        let n = active.len();
        if n <= cap {
            self.rotation = 0;
        } else {
            self.rotation %= n;
        }
        for q in &mut self.queues {
            q.resident = false;
        }
        for (pos, &i) in active.iter().enumerate() {
            let rel = (pos + n - self.rotation) % n.max(1);
            self.queues[i].resident = rel < cap;
        }
    }

    fn rotate(&mut self) {
        let cap = self.shape.resident_queues as usize;
        let n = self.queues.iter().filter(|q| q.active).count();
        let before: Vec<bool> = self.queues.iter().map(|q| q.resident).collect();
        self.rotation = (self.rotation + cap) % n.max(1);
        self.last_rotation = self.now;
        self.recompute_residency();
        self.stats.rotations += 1;
        // Queues that left the resident window are preempted: their work-groups are saved.
        let leaving: Vec<QueueKey> = self
            .queues
            .iter()
            .zip(before)
            .filter(|(q, was)| *was && !q.resident)
            .map(|(q, _)| q.key)
            .collect();
        let waves = self.save_running(|k| leaving.contains(&k), self.now);
        let resume = self.now + self.params.preempt_fixed_ns + self.params.save_wave_ns * waves;
        self.stall_until = self.stall_until.max(resume);
    }

    /// Saves (CWSR) the running work-groups of queues `which` selects, at time `at` (their
    /// progress counts up to `at`); work-groups of queues no longer in the runlist are dropped.
    fn save_running(&mut self, which: impl Fn(QueueKey) -> bool, at: u64) -> u64 {
        let seqs: Vec<u64> = self
            .running
            .iter()
            .filter(|(_, r)| which(r.queue))
            .map(|(s, _)| *s)
            .collect();
        let mut waves = 0u64;
        for seq in seqs {
            let Some(r) = self.running.remove(&seq) else {
                continue;
            };
            self.free(&r);
            let now = self.now;
            if let Some(i) = self.index(r.queue) {
                let q = &mut self.queues[i];
                q.running -= 1;
                if q.running == 0 {
                    q.stats.busy_ns += now - q.busy_since;
                }
                q.saved.push_back(Saved {
                    pseq: r.pseq,
                    remaining: r.end.saturating_sub(at).max(1),
                    waves: r.waves,
                });
                q.stats.wgs_saved += 1;
                waves += u64::from(r.waves);
            }
        }
        // Lazily drop the heap entries of saved work-groups.
        let running = &self.running;
        self.heap.retain(|Reverse((_, s))| running.contains_key(s));
        self.stats.waves_saved += waves;
        waves
    }

    /// Applies `edits` as one runlist update at the current time. If any queue was mapped
    /// before it, it is a device-wide preempt: dispatch stops, waves that end within the grace
    /// period (`grace_ns`, or the default) finish, every other running work-group is saved, and
    /// dispatch resumes after the fixed cost plus the per-wave save and restore costs.
    pub fn update_runlist(&mut self, edits: &[Edit], grace_ns: Option<u64>) -> UpdateCost {
        let had_active = self.queues.iter().any(|q| q.active);
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
        if self.oversubscribed() && !had_active {
            self.last_rotation = self.now;
        }
        self.recompute_residency();
        if had_active {
            let restore: u64 = self
                .queues
                .iter()
                .filter(|q| q.active && q.resident)
                .flat_map(|q| q.saved.iter())
                .map(|s| u64::from(s.waves))
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
            } => {
                if self.index(*queue).is_none() {
                    self.queues.push(Queue {
                        key: *queue,
                        priority: *priority,
                        active: *active,
                        resident: false,
                        mask: None,
                        packets: VecDeque::new(),
                        next_pseq: 0,
                        saved: VecDeque::new(),
                        running: 0,
                        busy_since: 0,
                        stats: QueueStats::default(),
                    });
                }
            }
            Edit::Remove(queue) => {
                if let Some(i) = self.index(*queue) {
                    let key = *queue;
                    // Work-groups still running (a removal without a preempt) are dropped.
                    let seqs: Vec<u64> = self
                        .running
                        .iter()
                        .filter(|(_, r)| r.queue == key)
                        .map(|(s, _)| *s)
                        .collect();
                    for s in seqs {
                        if let Some(r) = self.running.remove(&s) {
                            self.free(&r);
                        }
                    }
                    self.queues.remove(i);
                    if self.rr > i {
                        self.rr -= 1;
                    }
                }
            }
            Edit::SetActive(queue, active) => {
                if let Some(i) = self.index(*queue) {
                    self.queues[i].active = *active;
                }
            }
            Edit::SetPriority(queue, p) => {
                if let Some(i) = self.index(*queue) {
                    self.queues[i].priority = *p;
                }
            }
            Edit::SetCuMask(queue, mask) => {
                let cus = self.cu_free.len();
                if let Some(i) = self.index(*queue) {
                    self.queues[i].mask = mask.as_ref().map(|words| {
                        (0..cus)
                            .map(|c| words.get(c / 32).is_some_and(|w| w & (1 << (c % 32)) != 0))
                            .collect()
                    });
                }
            }
        }
    }

    /// Picks the next queue to launch a work-group from, among resident, active, unblocked
    /// queues with work, by the arbitration rule.
    fn pick(&self) -> Option<usize> {
        let n = self.queues.len();
        let eligible = |i: usize| {
            let q = &self.queues[i];
            q.active && q.resident && !self.blocked[i] && q.has_work(self.now)
        };
        let rank = |i: usize| -> u8 {
            let p = self.queues[i].priority;
            match self.params.arbitration {
                Arbitration::Equal => 0,
                Arbitration::PipePriority => pipe_band(p),
                Arbitration::StrictPriority => p,
            }
        };
        let mut best: Option<(u8, usize)> = None;
        for k in 0..n {
            let i = (self.rr + k) % n;
            if !eligible(i) {
                continue;
            }
            let r = rank(i);
            if best.is_none_or(|(b, _)| r > b) {
                best = Some((r, i));
            }
        }
        best.map(|(_, i)| i)
    }

    fn find_cu(&mut self, i: usize, waves: u32) -> Option<usize> {
        if u64::from(waves) > self.free_total || waves > self.slots_per_cu {
            return None;
        }
        let n = self.cu_free.len();
        let mask = self.queues[i].mask.as_deref();
        for k in 0..n {
            let c = (self.cu_cursor + k) % n;
            if self.cu_free[c] >= waves && mask.is_none_or(|m| m[c]) {
                self.cu_cursor = (c + 1) % n;
                return Some(c);
            }
        }
        None
    }

    /// Launches work-groups while slots and eligible queues allow.
    fn dispatch(&mut self) {
        if self.unmapping || self.now < self.stall_until {
            return;
        }
        self.blocked.clear();
        self.blocked.resize(self.queues.len(), false);
        while let Some(i) = self.pick() {
            if self.launch_one(i) {
                self.rr = (i + 1) % self.queues.len().max(1);
            } else {
                self.blocked[i] = true;
            }
        }
    }

    fn start_wg(&mut self, i: usize, cu: usize, pseq: u64, waves: u32, ns: u64) {
        self.account_occupancy();
        self.cu_free[cu] -= waves;
        self.free_total -= u64::from(waves);
        self.note_occupancy();
        let used = self.used_slots();
        self.stats.peak_occupied_slots = self
            .stats
            .peak_occupied_slots
            .max(u32::try_from(used).unwrap_or(u32::MAX));
        self.stats.wg_events += 1;
        let now = self.now;
        let q = &mut self.queues[i];
        if q.running == 0 {
            q.busy_since = now;
        }
        q.running += 1;
        let seq = self.next_seq;
        self.next_seq += 1;
        let end = now + ns.max(1);
        self.running.insert(
            seq,
            Running {
                queue: q.key,
                pseq,
                cu: cu as u32,
                waves,
                end,
            },
        );
        self.heap.push(Reverse((end, seq)));
    }

    /// Launches one work-group of queue `i` (a saved one first). False: it has none that fits.
    fn launch_one(&mut self, i: usize) -> bool {
        if let Some(s) = self.queues[i].saved.front().copied() {
            let Some(cu) = self.find_cu(i, s.waves) else {
                return false;
            };
            self.queues[i].saved.pop_front();
            self.queues[i].stats.wgs_restored += 1;
            self.stats.waves_restored += u64::from(s.waves);
            self.start_wg(i, cu, s.pseq, s.waves, s.remaining);
            return true;
        }
        let now = self.now;
        let Some(pi) = self.queues[i].launchable(now) else {
            return false;
        };
        let (pseq, waves, ns, empty) = {
            let p = &self.queues[i].packets[pi];
            let ns = if p.d.wg_ns == 0 {
                self.params.default_wg_ns
            } else {
                p.d.wg_ns
            };
            (p.pseq, p.d.waves_per_wg.max(1), ns, p.d.workgroups == 0)
        };
        if empty {
            // No work-groups: it completes as soon as it may start.
            let q = &mut self.queues[i];
            let p = &mut q.packets[pi];
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
            return true;
        }
        let Some(cu) = self.find_cu(i, waves) else {
            return false;
        };
        let q = &mut self.queues[i];
        let p = &mut q.packets[pi];
        p.launched += 1;
        p.start.get_or_insert(now);
        q.stats.wgs_launched += 1;
        self.start_wg(i, cu, pseq, waves, ns);
        true
    }
}
