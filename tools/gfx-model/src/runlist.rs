//! The runlist: the partition's queues in creation order, which of them the hardware scheduler
//! keeps resident (all active ones, or a rotating window of an oversubscribed runlist), and the
//! dispatcher's choice among the resident ones.

use crate::QueueKey;
use crate::params::{Arbitration, pipe_band};
use crate::queue::Queue;

/// The queues of a partition and their residency.
#[derive(Debug, Clone)]
pub(crate) struct Runlist {
    queues: Vec<Queue>,
    /// Active queues the hardware keeps resident.
    cap: usize,
    /// Position of the resident window among the active queues.
    rotation: usize,
    /// When the window last moved (or the runlist became oversubscribed).
    pub(crate) last_rotation: u64,
    /// Round-robin start of the dispatcher's next pick.
    rr: usize,
}

impl Runlist {
    /// An empty runlist keeping `cap` active queues resident.
    pub(crate) fn new(cap: u32) -> Self {
        Runlist {
            queues: Vec::new(),
            cap: cap as usize,
            rotation: 0,
            last_rotation: 0,
            rr: 0,
        }
    }

    /// Queues, in creation order.
    pub(crate) fn len(&self) -> usize {
        self.queues.len()
    }

    /// The position of `queue`.
    pub(crate) fn index(&self, queue: QueueKey) -> Option<usize> {
        self.queues.iter().position(|q| q.key == queue)
    }

    /// The queue named `queue`.
    pub(crate) fn get(&self, queue: QueueKey) -> Option<&Queue> {
        self.queues.iter().find(|q| q.key == queue)
    }

    /// The queue at position `i`.
    pub(crate) fn at(&self, i: usize) -> &Queue {
        &self.queues[i]
    }

    /// The queue at position `i`, to change.
    pub(crate) fn at_mut(&mut self, i: usize) -> &mut Queue {
        &mut self.queues[i]
    }

    /// Every queue, in creation order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Queue> {
        self.queues.iter()
    }

    /// Adds a queue unless one of that name exists.
    pub(crate) fn add(&mut self, queue: QueueKey, priority: u8, active: bool) {
        if self.index(queue).is_none() {
            self.queues.push(Queue::new(queue, priority, active));
        }
    }

    /// Removes the queue at position `i` (the round-robin keeps its place among the others).
    pub(crate) fn remove(&mut self, i: usize) {
        self.queues.remove(i);
        if self.rr > i {
            self.rr -= 1;
        }
    }

    /// Whether more queues are active than the hardware keeps resident.
    pub(crate) fn oversubscribed(&self) -> bool {
        self.queues.iter().filter(|q| q.active).count() > self.cap
    }

    /// Marks the active queues of the current window resident, every other one not.
    pub(crate) fn recompute_residency(&mut self) {
        let active: Vec<usize> = (0..self.queues.len())
            .filter(|&i| self.queues[i].active)
            .collect();
        let n = active.len();
        if n <= self.cap {
            self.rotation = 0;
        } else {
            self.rotation %= n;
        }
        for q in &mut self.queues {
            q.resident = false;
        }
        for (pos, &i) in active.iter().enumerate() {
            let rel = (pos + n - self.rotation) % n.max(1);
            self.queues[i].resident = rel < self.cap;
        }
    }

    /// Moves the resident window on by its size at time `now`; returns the queues that left
    /// it (the caller saves their work-groups).
    pub(crate) fn rotate(&mut self, now: u64) -> Vec<QueueKey> {
        let n = self.queues.iter().filter(|q| q.active).count();
        let before: Vec<bool> = self.queues.iter().map(|q| q.resident).collect();
        self.rotation = (self.rotation + self.cap) % n.max(1);
        self.last_rotation = now;
        self.recompute_residency();
        self.queues
            .iter()
            .zip(before)
            .filter(|(q, was)| *was && !q.resident)
            .map(|(q, _)| q.key)
            .collect()
    }

    /// Picks the next queue to launch from, among mapped queues with work at `now` that
    /// `blocked` does not exclude, by the arbitration rule; and whether it is the only one of
    /// its rank (then it keeps the dispatcher until it runs out of work or of room).
    pub(crate) fn pick(
        &self,
        arbitration: Arbitration,
        now: u64,
        blocked: &[bool],
    ) -> Option<(usize, bool)> {
        let n = self.queues.len();
        let eligible = |i: usize| {
            let q = &self.queues[i];
            q.mapped() && !blocked[i] && q.has_work(now)
        };
        let rank = |i: usize| -> u8 {
            let p = self.queues[i].priority;
            match arbitration {
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

    /// The queue at position `i` launched: the round-robin continues after it.
    pub(crate) fn launched(&mut self, i: usize) {
        self.rr = (i + 1) % self.queues.len().max(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dispatch::Dispatch;
    use crate::queue::Packet;

    /// A runlist of `n` active queues 0..n with the given priorities, each with one packet.
    fn runlist(cap: u32, priorities: &[u8]) -> Runlist {
        let mut r = Runlist::new(cap);
        for (k, &p) in priorities.iter().enumerate() {
            r.add(k as u64, p, true);
            r.at_mut(k).packets.push_back(Packet {
                pseq: 0,
                d: Dispatch::empty(0, false),
                fp: Default::default(),
                launched: 0,
                done: 0,
                submit: 0,
                start: None,
            });
        }
        r.recompute_residency();
        r
    }

    fn resident(r: &Runlist) -> Vec<bool> {
        r.iter().map(|q| q.resident).collect()
    }

    #[test]
    fn an_oversubscribed_runlist_rotates_its_window_over_the_active_queues() {
        let mut r = runlist(2, &[7, 7, 7, 7, 7]);
        assert!(r.oversubscribed());
        assert_eq!(resident(&r), [true, true, false, false, false]);
        assert_eq!(r.rotate(10), [0, 1]);
        assert_eq!(resident(&r), [false, false, true, true, false]);
        assert_eq!(r.last_rotation, 10);
        assert_eq!(r.rotate(20), [2, 3]);
        assert_eq!(resident(&r), [true, false, false, false, true]);
        // An inactive queue leaves the count; 4 active with room for 2 still rotate.
        r.at_mut(4).active = false;
        r.recompute_residency();
        assert!(r.oversubscribed());
        r.at_mut(3).active = false;
        r.at_mut(2).active = false;
        r.recompute_residency();
        assert!(!r.oversubscribed());
        assert_eq!(resident(&r), [true, true, false, false, false]);
    }

    #[test]
    fn pick_prefers_the_rank_then_takes_turns_and_says_when_a_queue_is_alone() {
        let none = [false; 4];
        // Pipe bands: 13 high, 8 and 9 medium, 3 low.
        let mut r = runlist(8, &[3, 8, 13, 9]);
        assert_eq!(r.pick(Arbitration::PipePriority, 0, &none), Some((2, true)));
        assert_eq!(r.pick(Arbitration::Equal, 0, &none), Some((0, false)));
        let blocked = [false, false, true, false];
        assert_eq!(
            r.pick(Arbitration::PipePriority, 0, &blocked),
            Some((1, false))
        );
        r.launched(1);
        assert_eq!(
            r.pick(Arbitration::PipePriority, 0, &blocked),
            Some((3, false))
        );
        assert_eq!(
            r.pick(Arbitration::StrictPriority, 0, &blocked),
            Some((3, true))
        );
        // Removing a queue before the round-robin's start keeps it on the same queue.
        r.remove(0);
        assert_eq!(
            r.pick(Arbitration::PipePriority, 0, &[false, true, false]),
            Some((2, false))
        );
        assert_eq!(r.index(3), Some(2));
    }
}
