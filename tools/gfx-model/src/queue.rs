//! One queue as the partition keeps it: its packets in order, the work-groups it has running
//! and saved, and its counters.

use std::collections::VecDeque;

use crate::QueueKey;
use crate::contention::Footprint;
use crate::dispatch::Dispatch;
use crate::stats::QueueStats;

/// `Packet::done` of a packet whose completion was reported.
pub(crate) const COMPLETED: u64 = u64::MAX;

/// A submitted packet and its progress.
#[derive(Debug, Clone)]
pub(crate) struct Packet {
    /// Its sequence number in its queue.
    pub(crate) pseq: u64,
    pub(crate) d: Dispatch,
    /// What one of its work-groups uses of shared resources.
    pub(crate) fp: Footprint,
    /// Work-groups launched.
    pub(crate) launched: u64,
    /// Work-groups ended ([`COMPLETED`] once its completion was reported).
    pub(crate) done: u64,
    pub(crate) submit: u64,
    /// When its first work-group started.
    pub(crate) start: Option<u64>,
}

/// Context-saved work-groups of one packet, waiting to be restored in order.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Saved {
    pub(crate) pseq: u64,
    /// Their time left once restored (alone on a CU, as a packet's `wg_ns`).
    pub(crate) remaining: u64,
    pub(crate) waves: u32,
    pub(crate) count: u64,
    pub(crate) fp: Footprint,
    /// DRAM demand of one, bytes per µs, as when it started.
    pub(crate) demand: u64,
    /// Their kernel's bandwidth share alone, permille (`Running::share`).
    pub(crate) share: u32,
}

/// A queue of the runlist.
#[derive(Debug, Clone)]
pub(crate) struct Queue {
    pub(crate) key: QueueKey,
    pub(crate) priority: u8,
    pub(crate) active: bool,
    /// In the resident window of an oversubscribed runlist (always, when it is not).
    pub(crate) resident: bool,
    /// CUs it may use (None: every CU).
    pub(crate) mask: Option<Vec<bool>>,
    pub(crate) packets: VecDeque<Packet>,
    pub(crate) next_pseq: u64,
    /// The first packet not fully launched: every earlier one has launched all its work-groups.
    pub(crate) launch_pseq: u64,
    pub(crate) saved: VecDeque<Saved>,
    /// Work-groups running.
    pub(crate) running: u64,
    /// DRAM demand of its running work-groups, bytes per µs (with contention).
    pub(crate) demand: u64,
    pub(crate) busy_since: u64,
    pub(crate) stats: QueueStats,
}

impl Queue {
    /// An empty queue.
    pub(crate) fn new(key: QueueKey, priority: u8, active: bool) -> Self {
        Queue {
            key,
            priority,
            active,
            resident: false,
            mask: None,
            packets: VecDeque::new(),
            next_pseq: 0,
            launch_pseq: 0,
            saved: VecDeque::new(),
            running: 0,
            demand: 0,
            busy_since: 0,
            stats: QueueStats::default(),
        }
    }

    pub(crate) fn packet_mut(&mut self, pseq: u64) -> Option<&mut Packet> {
        let front = self.packets.front()?.pseq;
        let i = usize::try_from(pseq.checked_sub(front)?).ok()?;
        self.packets.get_mut(i)
    }

    /// Index of the next packet that may launch a work-group now, if any.
    pub(crate) fn launchable(&self, now: u64) -> Option<usize> {
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

    /// Whether it has work-groups to launch now (saved ones, or a launchable packet's).
    pub(crate) fn has_work(&self, now: u64) -> bool {
        !self.saved.is_empty() || self.launchable(now).is_some()
    }

    /// Whether the dispatcher may launch from it: active and resident.
    pub(crate) fn mapped(&self) -> bool {
        self.active && self.resident
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet(pseq: u64, barrier: bool, submit: u64) -> Packet {
        Packet {
            pseq,
            d: Dispatch {
                tag: pseq,
                workgroups: 2,
                waves_per_wg: 1,
                wg_ns: 1,
                barrier,
            },
            fp: Footprint::default(),
            launched: 0,
            done: 0,
            submit,
            start: None,
        }
    }

    #[test]
    fn a_barrier_packet_waits_for_every_earlier_one_and_the_future_is_not_launchable() {
        let mut q = Queue::new(1, 7, true);
        q.packets.push_back(packet(0, false, 0));
        q.packets.push_back(packet(1, true, 0));
        q.packets.push_back(packet(2, false, 50));
        assert_eq!(q.launchable(0), Some(0));
        q.launch_pseq = 1;
        // Packet 0 launched but not done: the barrier packet waits.
        assert_eq!(q.launchable(0), None);
        q.packet_mut(0).unwrap().done = COMPLETED;
        assert_eq!(q.launchable(0), Some(1));
        q.launch_pseq = 2;
        // Submitted at 50: not before.
        assert!(!q.has_work(49));
        assert!(q.has_work(50));
        assert!(q.packet_mut(7).is_none());
    }
}
