//! Sampling: each tracee's queues' read and write indexes read through `/proc/<pid>/mem`, at
//! the activity period or, while a tracee whose class preempts others is busy, at
//! `BUSY_SAMPLE` (`periods.rs` decides which); and the queue set refreshed by
//! GET_QUEUE_SNAPSHOT.

use std::fs::File;
use std::os::unix::fs::FileExt;

use super::channel::Event;
use super::periods::{fine_period_applies, record};
use super::thread::Thread;
use super::tracee::Tracee;
use crate::kfd::debug::QueueSnapshot;
use crate::kfd::{EXCEPTION_QUEUE_NEW, QueueId};
use crate::proto::ShimMsg;

impl Thread {
    /// Whether a tracee is sampled at the fine period now: its class preempts others and one
    /// of its queues is busy.
    pub(super) fn fine_sampling(&self) -> bool {
        fine_period_applies(self.settings.activity) && self.tracees.values().any(Tracee::fine)
    }

    /// Reads each tracee's queues' indexes (with `fine`, only the tracees
    /// [`Tracee::fine`] names) and reports the queues whose busy state changed.
    pub(super) fn sample(&mut self, fine: bool) {
        let mut changes = Vec::new();
        for t in self.tracees.values_mut() {
            if t.leaving.is_some() || (fine && !t.fine()) {
                continue;
            }
            for q in &t.queues {
                let (Some(r), Some(w)) = (
                    read_u64(&t.mem, q.read_pointer_address),
                    read_u64(&t.mem, q.write_pointer_address),
                ) else {
                    continue;
                };
                let busy = crate::kfd::aql::busy(w, r);
                if record(&mut t.busy, q.queue_id.0, busy) {
                    changes.push((t.conn, q.queue_id.0, busy));
                }
            }
        }
        for (conn, queue_id, busy) in changes {
            self.emit(Event::Msg {
                conn,
                msg: ShimMsg::Activity {
                    queue_id: QueueId(queue_id),
                    busy,
                },
            });
        }
    }

    /// GET_QUEUE_SNAPSHOT of `pid` (clearing EC_QUEUE_NEW, so new queues can be suspended);
    /// reports a changed queue set as a registry.
    pub(super) fn refresh(&mut self, pid: u32) {
        let Some(kfd) = &self.kfd else { return };
        let snap = match kfd.queue_snapshot(pid, EXCEPTION_QUEUE_NEW) {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!(pid, "tracer: snapshot: {e}");
                return;
            }
        };
        let Some(t) = self.tracees.get_mut(&pid) else {
            return;
        };
        let ids = |v: &[QueueSnapshot]| v.iter().map(|q| q.queue_id).collect::<Vec<_>>();
        let changed = ids(&snap) != ids(&t.queues);
        t.idle_scans = if snap.is_empty() { t.idle_scans + 1 } else { 0 };
        if changed {
            t.suspended
                .retain(|q| snap.iter().any(|s| s.queue_id.0 == *q));
            t.busy
                .retain(|q, _| snap.iter().any(|s| s.queue_id.0 == *q));
            t.queues = snap;
            let (conn, reg) = (t.conn, t.registry(pid));
            self.emit(Event::Msg {
                conn,
                msg: ShimMsg::Registry(reg),
            });
        }
        if self.tracees.get(&pid).is_some_and(|t| t.idle_scans >= 2) {
            self.leave(pid, "it has no KFD queue any more".into());
        }
    }

    pub(super) fn refresh_all(&mut self) {
        let pids: Vec<u32> = self
            .tracees
            .iter()
            .filter(|(_, t)| t.leaving.is_none())
            .map(|(p, _)| *p)
            .collect();
        for pid in pids {
            self.refresh(pid);
        }
    }
}

fn read_u64(mem: &File, addr: u64) -> Option<u64> {
    let mut b = [0u8; 8];
    mem.read_exact_at(&mut b, addr).ok()?;
    Some(u64::from_le_bytes(b))
}
