//! The node as `kfdq status` and a metrics scrape show it.

use std::time::Instant;

use super::NodeState;
use crate::ids::Pid;
use crate::policy::Run;
use crate::proto::Level;
use crate::proto::control::{
    CalibrationStatus, ClassStatus, NodeStatus, PartitionStatus, ProcessQueue, ProcessStatus,
};

/// A run state in words.
pub(super) fn level_name(run: Run) -> String {
    match run {
        Run::Running => "running".into(),
        Run::Preempted(Level::Hold) => "held (level 1)".into(),
        Run::Preempted(Level::Deactivate) => "deactivated (level 2)".into(),
        Run::Preempted(Level::Suspend) => "suspended (level 3)".into(),
    }
}

impl NodeState {
    /// Accounts each process's and each class's busy and preempted time up to `now` (a class
    /// is busy while any queue of any of its processes is). No input of a decision: the server
    /// calls it after a decision's commands are written ([`NodeState::decide_commands`]).
    pub fn account(&mut self, now: Instant) {
        self.count_sent(now);
        // Each class once (a class's many processes would cost the recorder a lookup each).
        let (mut busy, mut preempted): (Vec<&str>, Vec<&str>) = (Vec::new(), Vec::new());
        for p in self.procs.values_mut() {
            // A process in the state of its last account keeps counting from there (its
            // times are the same whenever they are summed up): only the changed are written.
            if p.accounted
                .is_none_or(|a| (a.preempted, a.busy) != p.account_state())
            {
                p.account(now);
            }
            let p: &super::process::Proc = p;
            let c = p.class();
            if !p.stale && p.any_busy() && !busy.contains(&c) {
                busy.push(c);
            }
            if p.applied != crate::policy::Run::Running && !preempted.contains(&c) {
                preempted.push(c);
            }
        }
        for (class, s) in self.rec.account(now, busy, preempted) {
            self.busy_periods.entry(class).or_default().push(s * 1e3);
        }
    }

    /// A Prometheus scrape of the node (text format, [`super::super::metrics::CONTENT_TYPE`]).
    pub fn metrics(&mut self, now: Instant) -> Result<String, std::fmt::Error> {
        self.account(now);
        super::super::metrics::render(&self.status(now), &self.rec)
    }
    /// The node as `kfdq status` shows it.
    pub fn status(&self, now: Instant) -> NodeStatus {
        let mut classes: Vec<ClassStatus> = self
            .cfg
            .policy
            .classes
            .iter()
            .map(|c| ClassStatus {
                name: c.name.clone(),
                rank: c.rank,
                priority: c.priority,
                level: c.level,
                hw_queues: c.hw_queues,
                control: self.cfg.control(&c.name),
                processes: 0,
                preempted: 0,
                busy_periods: self.busy_periods.get(&c.name).map_or(0, |s| s.len() as u64),
                busy_ms_p50: self
                    .busy_periods
                    .get(&c.name)
                    .map_or(0.0, |s| s.quantile(0.5)),
                busy_ms_p99: self
                    .busy_periods
                    .get(&c.name)
                    .map_or(0.0, |s| s.quantile(0.99)),
                busy_s: self.rec.busy_s(&c.name),
                preempted_s: self.rec.preempted_s(&c.name),
            })
            .collect();
        classes.sort_by_key(|c| std::cmp::Reverse(c.rank));
        let mut partitions: Vec<PartitionStatus> = self
            .partitions
            .iter()
            .map(|p| PartitionStatus {
                gpu_id: p.gpu_id,
                resident_slots: p.resident_slots,
                cus: p.cus,
                queues: 0,
                busy_queues: 0,
                preempts: self.preempts.on_partition(p.gpu_id),
            })
            .collect();
        let mut processes = Vec::new();
        for (pid, p) in &self.procs {
            if let Some(c) = classes.iter_mut().find(|c| c.name == p.class()) {
                c.processes += 1;
                c.preempted += u32::from(p.applied != Run::Running);
            }
            let queues: Vec<ProcessQueue> = p
                .registry
                .queues
                .iter()
                .map(|q| {
                    let held = p
                        .registry
                        .streams
                        .iter()
                        .any(|s| s.held && s.queue_id == Some(q.queue_id));
                    ProcessQueue {
                        queue_id: q.queue_id,
                        gpu_id: q.gpu_id,
                        priority: q.effective_priority,
                        busy: p.queue_busy(q.queue_id),
                        preempted: if q.suspended {
                            Some(Level::Suspend)
                        } else if q.deactivated {
                            Some(Level::Deactivate)
                        } else if held {
                            Some(Level::Hold)
                        } else {
                            None
                        },
                    }
                })
                .collect();
            for q in &queues {
                if let Some(part) = partitions.iter_mut().find(|x| x.gpu_id == q.gpu_id) {
                    part.queues += 1;
                    part.busy_queues += u32::from(q.busy);
                }
            }
            let times = p.times(now);
            processes.push(ProcessStatus {
                pid: *pid,
                control: p.via,
                uid: p.id.uid,
                exe: p.id.exe.clone(),
                class: p.class().to_owned(),
                class_reason: match (&p.class_override, &p.cap) {
                    (Some(_), Some(cap)) => format!("kfdq class, within {}", cap.source),
                    (Some(_), None) => "kfdq class".into(),
                    (None, _) => p.classified.reason.clone(),
                },
                state: level_name(p.applied),
                level: match p.applied {
                    Run::Running => None,
                    Run::Preempted(l) => Some(l),
                },
                reason: p.reason(),
                manual: p.manual,
                priority_override: p.priority_override,
                queues,
                warnings: p.warnings.iter().cloned().collect(),
                pod: p.cap.as_ref().and_then(|c| c.pod.clone()),
                preemptions: p.preemptions,
                preempted_ms: (times.0 * 1e3) as u64,
                busy_ms: (times.1 * 1e3) as u64,
            });
        }
        let mut counters = self.counters.clone();
        counters.preempts = self.preempts.total();
        counters.preempts_per_s = self.preempts.per_s(now);
        counters.decision_us_p50 = self.decision_us.quantile(0.5);
        counters.decision_us_p99 = self.decision_us.quantile(0.99);
        counters.decide_us_p50 = self.decide_us.quantile(0.5);
        counters.decide_us_p99 = self.decide_us.quantile(0.99);
        counters.ack_us_p50 = self.ack_us.quantile(0.5);
        counters.ack_us_max = self.ack_us.quantile(1.0);
        NodeStatus {
            agent_pid: Pid::this(),
            version: env!("CARGO_PKG_VERSION").into(),
            config: self.cfg.source.as_ref().map(|p| p.display().to_string()),
            uptime_s: now.duration_since(self.started).as_secs_f64(),
            priority_note: self.priority_note.clone(),
            partitions,
            classes,
            processes,
            left_alone: self.left_alone.values().cloned().collect(),
            counters,
            release: self
                .cfg
                .policy
                .release
                .describe(self.cfg.policy.hysteresis_ns),
            calibration: self.cfg.calibration.as_ref().map(|c| CalibrationStatus {
                file: c.file.display().to_string(),
                gfx_target: c.gfx_target.clone(),
                round_trip_ns: c.round_trip_ns,
                warning: c.warning.clone(),
            }),
        }
    }
}
