//! Running work-groups, kept in batches (the work-groups of one packet that start together and
//! end together), with the heap of their ends.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

use crate::QueueKey;
use crate::contention::Footprint;
use crate::slots::Placement;

/// Work-groups of one packet that started together and end together, with where they run.
#[derive(Debug, Clone)]
pub(crate) struct Running {
    pub(crate) queue: QueueKey,
    pub(crate) pseq: u64,
    pub(crate) waves: u32,
    /// Time of one work-group alone on a CU (the packet's, or a saved one's remaining).
    pub(crate) ns: u64,
    /// Its end: set when the dispatch pass that starts it is over ([`Batches::commit`]).
    pub(crate) end: u64,
    /// `ns` scales by this to `end` (permille; 1000 without contention).
    pub(crate) factor: u64,
    pub(crate) count: u64,
    pub(crate) cus: Placement,
    pub(crate) fp: Footprint,
    /// DRAM demand of one work-group, bytes per µs.
    pub(crate) demand: u64,
    /// Its kernel's bandwidth share alone, permille.
    pub(crate) share: u32,
}

/// The running batches, the batches a dispatch pass is starting, and the end events.
#[derive(Debug, Clone, Default)]
pub(crate) struct Batches {
    /// Running batches by the sequence number of their last work-group (launch order).
    running: BTreeMap<u64, Running>,
    /// (end, sequence number); entries of batches no longer running are skipped when popped.
    heap: BinaryHeap<Reverse<(u64, u64)>>,
    /// Batches started by the dispatch pass under way, keyed like `running`.
    pending: Vec<(u64, Running)>,
    /// Per queue, its batch in `pending` that a further work-group of the same packet joins.
    open: Vec<Option<usize>>,
    /// Work-groups started so far.
    next_seq: u64,
}

impl Batches {
    /// The earliest end of a running batch (or of one that was removed since: the caller
    /// steps to it and finds nothing).
    pub(crate) fn next_end(&self) -> Option<u64> {
        self.heap.peek().map(|Reverse((t, _))| *t)
    }

    /// A batch that ended by `now`, earliest first.
    pub(crate) fn pop_ended(&mut self, now: u64) -> Option<Running> {
        while let Some(Reverse((end, seq))) = self.heap.peek().copied() {
            if end > now {
                return None;
            }
            self.heap.pop();
            if let Some(r) = self.running.remove(&seq) {
                return Some(r);
            }
        }
        None
    }

    /// A dispatch pass over `queues` queues begins: no batch is open.
    pub(crate) fn begin_pass(&mut self, queues: usize) {
        self.open.clear();
        self.open.resize(queues, None);
    }

    /// Starts `r` for queue `i`: joins the batch the queue opened in this pass if `merge` and
    /// it has the same packet, size and time, else opens a new batch. Returns whether it opened
    /// one.
    pub(crate) fn start(&mut self, i: usize, merge: bool, r: Running) -> bool {
        self.next_seq += r.count;
        let seq = self.next_seq - 1;
        if merge
            && let Some(k) = self.open[i]
            && let (_, b) = &mut self.pending[k]
            && b.pseq == r.pseq
            && b.waves == r.waves
            && b.ns == r.ns
        {
            b.count += r.count;
            b.cus.extend(r.cus);
            self.pending[k].0 = seq;
            return false;
        }
        self.open[i] = Some(self.pending.len());
        self.pending.push((seq, r));
        true
    }

    /// The batches the pass under way started, to set their ends.
    pub(crate) fn pending_mut(&mut self) -> impl Iterator<Item = &mut Running> {
        self.pending.iter_mut().map(|(_, r)| r)
    }

    /// The pass is over: its batches run.
    pub(crate) fn commit(&mut self) {
        for (seq, r) in self.pending.drain(..) {
            self.heap.push(Reverse((r.end, seq)));
            self.running.insert(seq, r);
        }
    }

    /// Takes the running batches of the queues `which` selects, in launch order. Their end
    /// events stay in the heap unless `prune` (they are skipped when popped).
    pub(crate) fn take(&mut self, which: impl Fn(QueueKey) -> bool, prune: bool) -> Vec<Running> {
        let seqs: Vec<u64> = self
            .running
            .iter()
            .filter(|(_, r)| which(r.queue))
            .map(|(s, _)| *s)
            .collect();
        let taken = seqs
            .into_iter()
            .filter_map(|s| self.running.remove(&s))
            .collect();
        if prune {
            let running = &self.running;
            self.heap.retain(|Reverse((_, s))| running.contains_key(s));
        }
        taken
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(queue: QueueKey, pseq: u64, end: u64, count: u64) -> Running {
        Running {
            queue,
            pseq,
            waves: 1,
            ns: end,
            end,
            factor: 1000,
            count,
            cus: vec![(0, count as u32)],
            fp: Footprint::default(),
            demand: 0,
            share: 0,
        }
    }

    #[test]
    fn batches_of_one_pass_merge_run_and_end_in_order() {
        let mut b = Batches::default();
        b.begin_pass(2);
        assert!(b.start(0, true, batch(10, 0, 50, 2)));
        assert!(
            !b.start(0, true, batch(10, 0, 50, 3)),
            "same packet and end"
        );
        assert!(b.start(0, true, batch(10, 0, 60, 1)), "another end");
        assert!(b.start(1, false, batch(11, 0, 40, 1)));
        assert_eq!(b.next_end(), None, "nothing runs before the pass commits");
        b.commit();
        assert_eq!(b.next_end(), Some(40));
        assert_eq!(b.pop_ended(39).map(|r| r.queue), None);
        let r = b.pop_ended(55).unwrap();
        assert_eq!((r.queue, r.end), (11, 40));
        let r = b.pop_ended(55).unwrap();
        assert_eq!((r.count, r.cus.len()), (5, 2));
        // Taken without pruning, its end stays in the heap and pops as nothing.
        assert_eq!(b.take(|q| q == 10, false).len(), 1);
        assert_eq!(b.next_end(), Some(60));
        assert!(b.pop_ended(100).is_none());
        assert_eq!(b.next_end(), None);
    }
}
