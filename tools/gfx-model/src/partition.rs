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

/// Context-saved work-groups of one packet, waiting to be restored in order.
#[derive(Debug, Clone, Copy)]
struct Saved {
    pseq: u64,
    remaining: u64,
    waves: u32,
    count: u64,
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
    /// The first packet not fully launched: every earlier one has launched all its work-groups.
    launch_pseq: u64,
    saved: VecDeque<Saved>,
    running: u64,
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
        let front = self.packets.front()?.pseq;
        let i = usize::try_from(self.launch_pseq.checked_sub(front)?).ok()?;
        let p = self.packets.get(i)?;
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

/// Work-groups of one packet that started together and end together, with where they run.
#[derive(Debug, Clone)]
struct Running {
    queue: QueueKey,
    pseq: u64,
    waves: u32,
    end: u64,
    count: u64,
    /// (CU, work-groups on it).
    cus: Vec<(u32, u32)>,
}

/// One GPU partition: queues, runlist, CUs and the work-groups running on them.
#[derive(Debug, Clone)]
pub struct Partition {
    shape: Shape,
    params: Params,
    now: u64,
    queues: Vec<Queue>,
    cu_free: Vec<u32>,
    /// Bit c: CU c has a free wave slot (so a search for room skips full CUs a word at a time).
    room: Vec<u64>,
    free_total: u64,
    slots_per_cu: u32,
    cu_cursor: usize,
    /// Running batches by the sequence number of their last work-group (launch order).
    running: BTreeMap<u64, Running>,
    heap: BinaryHeap<Reverse<(u64, u64)>>,
    /// Whether a dispatch turn may place several work-groups at once (false: one at a time).
    batching: bool,
    /// Batches started by the dispatch pass under way, keyed like `running`.
    pending: Vec<(u64, Running)>,
    /// Per queue, its batch in `pending` that a further work-group of the same packet joins.
    open: Vec<Option<usize>>,
    /// Scratch of `place`: per CU, how many work-groups of the size being placed it can take;
    /// the CUs by that number; and the first by free slots for `fit_waves`-wave work-groups.
    fits: Vec<u32>,
    fit_counts: Vec<u64>,
    fit_of: Vec<u32>,
    fit_waves: u32,
    /// Placement lists of ended batches, kept for new ones.
    spare_cus: Vec<Vec<(u32, u32)>>,
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
            room: (0..cus.div_ceil(64))
                .map(|w| {
                    let bits = (cus - w * 64).min(64);
                    if bits == 64 {
                        u64::MAX
                    } else {
                        (1u64 << bits) - 1
                    }
                })
                .collect(),
            free_total: u64::from(slots) * cus as u64,
            slots_per_cu: slots,
            cu_cursor: 0,
            running: BTreeMap::new(),
            heap: BinaryHeap::new(),
            batching: true,
            pending: Vec::new(),
            open: Vec::new(),
            fits: Vec::new(),
            fit_counts: Vec::new(),
            fit_of: Vec::new(),
            fit_waves: 0,
            spare_cus: Vec::new(),
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
    pub fn queue_load(&self, queue: QueueKey) -> Option<(u64, u64)> {
        let q = self.queues.iter().find(|q| q.key == queue)?;
        Some((q.running, q.saved.iter().map(|s| s.count).sum()))
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

    fn free(&mut self, r: &mut Running) {
        self.account_occupancy();
        let mut cus = std::mem::take(&mut r.cus);
        // The room bits are gathered per word (a list mostly runs in CU order, so the word
        // rarely changes).
        let (mut word, mut bits) = (0usize, 0u64);
        for &(cu, n) in &cus {
            let cu = cu as usize;
            self.cu_free[cu] += n * r.waves;
            if cu / 64 != word {
                self.room[word] |= bits;
                (word, bits) = (cu / 64, 0);
            }
            bits |= 1 << (cu % 64);
        }
        self.room[word] |= bits;
        cus.clear();
        self.spare_cus.push(cus);
        self.free_total += r.count * u64::from(r.waves);
        self.note_occupancy();
        self.stats.batch_events += 1;
    }

    fn finish(&mut self, mut r: Running) {
        self.free(&mut r);
        let now = self.now;
        let Some(i) = self.index(r.queue) else {
            return;
        };
        let q = &mut self.queues[i];
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
            let Some(mut r) = self.running.remove(&seq) else {
                continue;
            };
            self.free(&mut r);
            let now = self.now;
            if let Some(i) = self.index(r.queue) {
                let q = &mut self.queues[i];
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
                        launch_pseq: 0,
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
                        if let Some(mut r) = self.running.remove(&s) {
                            self.free(&mut r);
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

    /// Picks the next queue to launch from, among resident, active, unblocked queues with work,
    /// by the arbitration rule; and whether it is the only one of its rank (then it keeps the
    /// dispatcher until it runs out of work or of room).
    fn pick(&self) -> Option<(usize, bool)> {
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
        let mut alone = true;
        let rr = if n == 0 { 0 } else { self.rr % n };
        for i in (rr..n).chain(0..rr) {
            if !eligible(i) {
                continue;
            }
            let r = rank(i);
            match best {
                Some((b, _)) if r < b => {}
                Some((b, _)) if r == b => alone = false,
                _ => {
                    best = Some((r, i));
                    alone = true;
                }
            }
        }
        best.map(|(_, i)| (i, alone))
    }

    /// Places up to `want` work-groups of `waves` waves for queue `i` on the CUs its mask
    /// allows, exactly where the dispatcher would put them one after the other: each on the next
    /// CU, from the cursor on, that has room, so a pass around the CUs gives each CU with room
    /// one work-group. Returns how many were placed and where.
    fn place(&mut self, i: usize, waves: u32, want: u64) -> (u64, Vec<(u32, u32)>) {
        if want == 0 || u64::from(waves) > self.free_total || waves > self.slots_per_cu {
            return (0, Vec::new());
        }
        // Occupancy is integrated up to now before the slots change (splitting it is exact).
        self.account_occupancy();
        let n = self.cu_free.len();
        let start = self.cu_cursor;
        let mask = self.queues[i].mask.as_deref();
        let allowed = |c: usize| mask.is_none_or(|m| m[c]);
        let mut cus = self.spare_cus.pop().unwrap_or_default();
        if want == 1 {
            // One work-group: the first CU from the cursor with room.
            let (room, cu_free) = (&self.room, &self.cu_free);
            let fits = |c: usize| cu_free[c] >= waves && allowed(c);
            let Some(c) = first_with_room(room, start, n, fits)
                .or_else(|| first_with_room(room, 0, start, fits))
            else {
                self.spare_cus.push(cus);
                return (0, Vec::new());
            };
            self.cu_free[c] -= waves;
            self.set_room(c);
            self.free_total -= u64::from(waves);
            self.cu_cursor = if c + 1 == n { 0 } else { c + 1 };
            cus.push((c as u32, 1));
            return (1, cus);
        }
        // How many work-groups of this size each CU can take (a table by free slots, so no
        // division per CU), and fit_counts[v]: the CUs that can take exactly v.
        if self.fit_waves != waves {
            self.fit_waves = waves;
            self.fit_of = (0..=self.slots_per_cu).map(|f| f / waves).collect();
        }
        let most = (self.slots_per_cu / waves) as usize;
        self.fit_counts.clear();
        self.fit_counts.resize(most + 1, 0);
        self.fits.clear();
        // Counted in runs of equal values: CUs mostly have the same room.
        let (mut run_fit, mut run_len) = (0u32, 0u64);
        for (c, &free) in self.cu_free.iter().enumerate() {
            let f = if allowed(c) {
                self.fit_of[free as usize]
            } else {
                0
            };
            self.fits.push(f);
            if f != run_fit {
                self.fit_counts[run_fit as usize] += run_len;
                (run_fit, run_len) = (f, 0);
            }
            run_len += 1;
        }
        self.fit_counts[run_fit as usize] += run_len;
        // Whole passes: pass k places one work-group on each CU with room for more than k.
        let mut left = want;
        let mut passes = 0u32;
        let mut in_pass = n as u64 - self.fit_counts[0];
        while in_pass > 0 && left >= in_pass {
            left -= in_pass;
            passes += 1;
            in_pass -= self.fit_counts[passes as usize];
        }
        // Then a partial pass of `left` work-groups, unless every CU is full.
        let mut partial = if in_pass > 0 { left } else { 0 };
        let placed = want - left + partial;
        if placed == 0 {
            self.spare_cus.push(cus);
            return (0, Vec::new());
        }
        // The last work-group goes to the partial pass's last CU, or else to the last CU (from
        // the cursor on) that took a whole pass's work-group.
        let mut last = None;
        // CUs left full lose their room bit; the bits are gathered per word (CU order).
        let (mut word, mut full) = (start / 64, 0u64);
        cus.reserve(n);
        for range in [start..n, 0..start] {
            for c in range {
                let f = self.fits[c];
                let mut give = f.min(passes);
                if partial > 0 && f > passes {
                    partial -= 1;
                    give += 1;
                    if partial == 0 {
                        last = Some(c);
                    }
                }
                if give > 0 {
                    self.cu_free[c] -= give * waves;
                    if c / 64 != word {
                        self.room[word] &= !full;
                        (word, full) = (c / 64, 0);
                    }
                    full |= u64::from(self.cu_free[c] == 0) << (c % 64);
                    cus.push((c as u32, give));
                }
            }
        }
        self.room[word] &= !full;
        let last = last.unwrap_or_else(|| {
            (start..n)
                .chain(0..start)
                .rev()
                .find(|&c| self.fits[c] >= passes)
                .unwrap_or(start)
        });
        self.free_total -= placed * u64::from(waves);
        self.cu_cursor = if last + 1 == n { 0 } else { last + 1 };
        (placed, cus)
    }

    /// Updates CU `c`'s bit in `room` after its free slots changed.
    fn set_room(&mut self, c: usize) {
        let bit = 1u64 << (c % 64);
        if self.cu_free[c] > 0 {
            self.room[c / 64] |= bit;
        } else {
            self.room[c / 64] &= !bit;
        }
    }

    /// Launches work-groups while slots and eligible queues allow.
    fn dispatch(&mut self) {
        if self.unmapping || self.now < self.stall_until {
            return;
        }
        let n = self.queues.len();
        self.blocked.clear();
        self.blocked.resize(n, false);
        self.open.clear();
        self.open.resize(n, None);
        while let Some((i, alone)) = self.pick() {
            let limit = if self.batching && alone { u64::MAX } else { 1 };
            let (launched, blocked) = self.launch(i, limit);
            if launched {
                self.rr = (i + 1) % n.max(1);
            }
            if blocked || !launched {
                self.blocked[i] = true;
            }
        }
        for (seq, r) in self.pending.drain(..) {
            self.heap.push(Reverse((r.end, seq)));
            self.running.insert(seq, r);
        }
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
        cus: Vec<(u32, u32)>,
    ) {
        self.note_occupancy();
        let used = self.used_slots();
        self.stats.peak_occupied_slots = self
            .stats
            .peak_occupied_slots
            .max(u32::try_from(used).unwrap_or(u32::MAX));
        self.stats.wg_events += count;
        let now = self.now;
        let end = now + ns.max(1);
        let q = &mut self.queues[i];
        if q.running == 0 {
            q.busy_since = now;
        }
        q.running += count;
        let key = q.key;
        self.next_seq += count;
        let seq = self.next_seq - 1;
        if self.batching
            && let Some(k) = self.open[i]
            && let (_, b) = &mut self.pending[k]
            && b.pseq == pseq
            && b.waves == waves
            && b.end == end
        {
            b.count += count;
            b.cus.extend(cus);
            self.pending[k].0 = seq;
            return;
        }
        self.stats.batch_events += 1;
        self.open[i] = Some(self.pending.len());
        self.pending.push((
            seq,
            Running {
                queue: key,
                pseq,
                waves,
                end,
                count,
                cus,
            },
        ));
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
            let (pseq, waves, ns, todo, saved) = match self.queues[i].saved.front() {
                Some(s) => (s.pseq, s.waves, s.remaining, s.count, true),
                None => {
                    let Some(pi) = self.queues[i].launchable(now) else {
                        return (launched, false);
                    };
                    let p = &self.queues[i].packets[pi];
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
            let (n, cus) = self.place(i, waves, want);
            if n == 0 {
                return (launched, true);
            }
            let q = &mut self.queues[i];
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
        let q = &mut self.queues[i];
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

/// The first CU in `lo..hi` whose bit in `room` is set and that `fits` accepts.
fn first_with_room(
    room: &[u64],
    lo: usize,
    hi: usize,
    fits: impl Fn(usize) -> bool,
) -> Option<usize> {
    let mut c = lo;
    while c < hi {
        let word = room[c / 64] >> (c % 64);
        if word == 0 {
            c = (c / 64 + 1) * 64;
            continue;
        }
        let candidate = c + word.trailing_zeros() as usize;
        if candidate >= hi {
            return None;
        }
        if fits(candidate) {
            return Some(candidate);
        }
        c = candidate + 1;
    }
    None
}
