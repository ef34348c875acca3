//! The soak's invariants, checked against the emulator's truth every tick: no queue stays
//! preempted while no higher class works; `kfdq status --json` agrees with the kernel.

use std::time::{Duration, Instant};

use kfdq::proto::Level;

use super::common::soak::{Proc, agent_resources, cli_status, rank};
use super::{SAMPLE_GAP, Soak};

/// The soak's process with pid `pid`, if any.
fn class_of(procs: &[Proc], pid: u32) -> Option<&Proc> {
    procs.iter().find(|p| p.app.pid == pid)
}

/// A process the soak stopped, or continued less than `bound` ago (or not the soak's): its
/// queues may lag.
fn excused(procs: &[Proc], pid: u32, bound: Duration) -> bool {
    class_of(procs, pid).is_none_or(|p| {
        p.stopped_until.is_some() || p.continued.is_some_and(|c| c.elapsed() < bound)
    })
}

impl Soak<'_> {
    /// Invariant against the emulator's truth: no queue stays preempted while no higher class
    /// works. Also samples the agent's resources.
    pub(super) fn check_starvation(&mut self) {
        let stats = self.emu.stats();
        let now = Instant::now();
        let (t, procs, bound) = (&mut self.t, &self.procs, self.bound);
        let class_of = |pid: u32| class_of(procs, pid);
        // The highest rank that worked during this tick (its queues' busy time grew, or work is
        // queued), or that the soak stopped (a stopped process's last report may count as busy
        // until it goes stale): every class below it may be preempted.
        let mut busy_rank: Option<usize> = None;
        for q in &stats.queues {
            if let Some(p) = class_of(q.pid) {
                let prev = self.last_busy_ns.insert((q.pid, q.queue_id), q.busy_ns);
                if prev != Some(q.busy_ns) || q.write_index > q.read_index {
                    busy_rank = busy_rank.max(Some(rank(p.class)));
                }
            }
        }
        for p in procs {
            if p.stopped_until.is_some()
                || p.continued
                    .is_some_and(|c| c.elapsed() < Duration::from_secs(1))
            {
                busy_rank = busy_rank.max(Some(rank(p.class)));
            }
        }
        self.last_busy_ns
            .retain(|k, _| stats.queues.iter().any(|q| (q.pid, q.queue_id) == *k));
        let excused = |pid: u32| excused(procs, pid, bound);
        for q in &stats.queues {
            let key = (q.pid, q.queue_id);
            let higher_busy =
                class_of(q.pid).is_some_and(|p| busy_rank.is_some_and(|b| b > rank(p.class)));
            if (q.active && !q.suspended) || higher_busy || excused(q.pid) {
                self.starve_since.remove(&key);
                continue;
            }
            let since = *self.starve_since.entry(key).or_insert(now);
            if now - since > t.worst_starvation {
                t.worst_starvation = now - since;
                t.worst_detail = format!(
                    "queue {key:?} ({:?}) active {} suspended {}, busy rank {busy_rank:?}, agent stopped {:?}, at {:?}",
                    class_of(q.pid).map(|p| p.class),
                    q.active,
                    q.suspended,
                    self.agent_stopped_until.is_some(),
                    self.start.elapsed()
                );
            }
        }
        self.starve_since
            .retain(|k, _| stats.queues.iter().any(|q| (q.pid, q.queue_id) == *k));
        let (rss, fds) = agent_resources(&self.agent);
        (self.rss_max, self.fds_max) = (self.rss_max.max(rss), self.fds_max.max(fds));
    }

    /// Invariant against the emulator's truth, every 10 ticks while the agent runs and has had a
    /// bound to catch up: `kfdq status --json` agrees with the kernel on every queue.
    pub(super) fn check_agreement(&mut self) {
        if !(self.agent_stopped_until.is_none()
            && self.agent_back.elapsed() > self.bound
            && self.tick % 10 == 0)
        {
            return;
        }
        let Some(s) = cli_status(&self.agent) else {
            return;
        };
        let (t, procs, bound) = (&mut self.t, &self.procs, self.bound);
        let class_of = |pid: u32| class_of(procs, pid);
        let excused = |pid: u32| excused(procs, pid, bound);
        let stats = self.emu.stats();
        let now = Instant::now();
        t.checks += 1;
        if self.last_check.is_some_and(|c| now - c > SAMPLE_GAP * 3) {
            self.differ_since.clear();
            t.gaps += 1;
        }
        self.last_check = Some(now);
        for p in &s.processes {
            for q in &p.queues {
                let (pid, queue_id) = (p.pid.0, q.queue_id.0);
                let key = (pid, queue_id);
                let kernel = stats
                    .queues
                    .iter()
                    .find(|k| k.pid == pid && k.queue_id == queue_id);
                let agrees = match (kernel, q.preempted) {
                    // Gone from the kernel: the agent learns it from the exit.
                    (None, _) => true,
                    (Some(k), Some(Level::Deactivate)) => !k.active,
                    (Some(k), Some(Level::Suspend)) => k.suspended,
                    (Some(k), _) => k.active && !k.suspended,
                };
                if agrees || excused(pid) {
                    self.differ_since.remove(&key);
                } else {
                    let since = *self.differ_since.entry(key).or_insert(now);
                    if now - since > t.worst_disagreement {
                        t.worst_disagreement = now - since;
                        t.disagreement_detail = format!(
                            "queue {key:?} ({:?}, control {:?}): agent {:?}, kernel active {:?} suspended {:?}, at {:?}",
                            class_of(pid).map(|p| p.class),
                            p.control,
                            q.preempted,
                            kernel.map(|k| k.active),
                            kernel.map(|k| k.suspended),
                            self.start.elapsed()
                        );
                    }
                }
            }
        }
    }
}
