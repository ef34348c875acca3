//! What the queues' indices show, read under the registry lock (`queue.rs`): busy samples, work
//! no stream claims, and queues whose index memory is gone.

use super::State;
use super::warnings::{UNCLAIMED_GRACE, UNCLAIMED_WARNING};

impl State {
    /// Compute queues with work that no stream claims: submitted through a path around the
    /// shim's wrappers (a second copy of the runtime, a function it does not wrap, a program
    /// driving KFD itself). A queue counts once work has been on it unclaimed for
    /// [`UNCLAIMED_GRACE`] (a wrapped call attributes its queue when it returns); the first such
    /// queue is reported once per process. Returns true while a queue is still being watched
    /// (the caller then checks again within the grace).
    pub fn check_unclaimed(&mut self, now: std::time::Instant) -> bool {
        let mut watching = false;
        let mut report = None;
        for q in self
            .queues
            .iter_mut()
            .filter(|q| q.compute && !q.dying && !q.claimed)
        {
            if self.inflight.iter().any(|(_, qid)| *qid == q.id) {
                continue;
            }
            match q.unclaimed_work {
                None if q.read_indices().0 > 0 => {
                    q.unclaimed_work = Some(now);
                    watching = true;
                }
                Some(t) if now.duration_since(t) >= UNCLAIMED_GRACE => {
                    report.get_or_insert(q.id);
                }
                Some(_) => watching = true,
                None => {}
            }
        }
        if let Some(qid) = report {
            self.report_once(UNCLAIMED_WARNING, || {
                format!(
                    "{UNCLAIMED_WARNING} (first: queue {qid}): it was submitted through a path around the shim's \
                     wrappers (a second copy of the HIP runtime, a function the shim does not wrap, or code driving \
                     /dev/kfd itself); that work is preempted with the process at levels 2 and 3 but is not held at \
                     level 1 nor counted by the in-flight window (docs/shim.md, \"What is managed\")"
                )
            });
        }
        self.forget_unmapped();
        watching
    }

    /// Samples every live queue's activity: busy (write index > read index) transitions since
    /// the last sample, as (queue, busy).
    pub fn sample_busy(&mut self) -> Vec<(u32, bool)> {
        let mut out = Vec::new();
        for q in self.queues.iter_mut().filter(|q| !q.dying) {
            let (w, r) = q.read_indices();
            let busy = kfdq::kfd::aql::busy(w, r);
            if busy != q.busy {
                q.busy = busy;
                out.push((q.id, busy));
            }
        }
        self.forget_unmapped();
        out
    }

    /// Removes the queues whose index memory a read found unmapped (the runtime freed it without
    /// a DESTROY_QUEUE the hook saw), reporting each. Every caller of [`Self::indices`] calls
    /// this once it is done reading.
    pub fn forget_unmapped(&mut self) {
        let gone: Vec<u32> = self
            .queues
            .iter()
            .filter(|q| q.is_unmapped())
            .map(|q| q.id)
            .collect();
        for id in gone {
            self.remove_queue(id);
            self.report(format!(
                "queue {id}: its index memory is no longer readable, though no DESTROY_QUEUE of it \
                 passed the shim (the runtime freed it another way); the queue leaves the registry \
                 and kfdq no longer acts on it"
            ));
        }
    }
}
