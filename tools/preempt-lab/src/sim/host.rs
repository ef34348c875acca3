//! The host side: the shim's reports reaching the agent, the policy's decisions, and the
//! commands that carry them to the LP queue.

use gfx_model::Edit;
use kfdq::policy::{Observation, PartitionObs, ProcessObs, QueueObs, Run};
use kfdq::proto::Level;
use kfdq::{Pid, QueueId};

use crate::timeline::Mark;

use super::{Command, GPU, HP, LP, Sim};

impl Sim<'_> {
    pub(super) fn report(&mut self, at: u64, busy: bool) {
        self.cmd_seq += 1;
        self.reports.insert((at, self.cmd_seq), busy);
    }

    /// The LP job has work on the GPU: its queue is in the runlist with packets in it.
    pub(super) fn lp_on_gpu(&self) -> bool {
        self.s.lp.is_some() && self.lp_active && self.p.pending_packets(LP) > 0
    }

    /// The LP job is off the GPU at `off_ns`: the reaction in progress, if any, ends.
    pub(super) fn lp_off(&mut self, off_ns: u64) {
        if let Some(from) = self.reaction_from.take() {
            self.r
                .reaction_us
                .push(off_ns.saturating_sub(from) as f64 / 1e3);
        }
    }

    pub(super) fn completions(&mut self, t: u64) {
        for c in self.p.take_completions() {
            self.r.completions += 1;
            if c.queue == HP {
                if let Some(arrival) = self.hp_last.remove(&c.tag) {
                    self.r.hp_latency_us.push((c.end_ns - arrival) as f64 / 1e3);
                    // The application's end of the request: its hint ends.
                    if self.hints.end(arrival) {
                        self.idle_unless_busy(t);
                    }
                }
                if self.p.pending_packets(HP) == 0 {
                    if let Some(since) = self.hp_busy_since.take() {
                        self.hp_busy_ns += c.end_ns.saturating_sub(since);
                    }
                    if self.reaction_from.take().is_some() {
                        self.r.reactions_missed += 1;
                    }
                }
            } else {
                self.r.lp_kernels += 1;
                if let Some(tl) = self.r.timeline.as_mut() {
                    tl.lp_done_ns.push(c.end_ns);
                }
                self.lp_in_flight = self.lp_in_flight.saturating_sub(1);
                if self.held && self.p.pending_packets(LP) == 0 {
                    if let Some(since) = self.hold_since.take() {
                        self.r.preempt_latency_us.push((t - since) as f64 / 1e3);
                    }
                    self.lp_off(t);
                }
                self.top_up_lp();
            }
        }
    }

    pub(super) fn decide(&mut self, t: u64) {
        let Some(policy) = self.policy.as_mut() else {
            return;
        };
        let parts = [PartitionObs {
            gpu_id: GPU,
            resident_slots: self.s.gpu.resident_queues,
            cus: self.s.gpu.cus(),
        }];
        let mut procs = Vec::new();
        if self.s.hp.is_some() {
            procs.push(ProcessObs {
                pid: Pid(HP as u32),
                class: self.s.hp_class.clone(),
                queues: vec![QueueObs {
                    queue_id: QueueId(1),
                    gpu_id: GPU,
                    busy: self.seen.0,
                }],
            });
        }
        if self.s.lp.is_some() {
            procs.push(ProcessObs {
                pid: Pid(LP as u32),
                class: self.s.lp_class.clone(),
                queues: vec![QueueObs {
                    queue_id: QueueId(1),
                    gpu_id: GPU,
                    busy: self.seen.1,
                }],
            });
        }
        let d = policy.decide(&Observation {
            now_ns: t,
            partitions: &parts,
            processes: &procs,
        });
        self.policy_due = d.next_ns.filter(|n| *n > t);
        let at = t + self.s.host.decision_ns + self.s.host.command_ns;
        for target in &d.targets {
            let queue = u64::from(target.pid.0);
            let mask = target.cu_masks.get(&GPU).cloned();
            if self.masks.get(&queue) != Some(&mask)
                && (mask.is_some() || self.masks.contains_key(&queue))
            {
                self.masks.insert(queue, mask.clone());
                self.cmd_seq += 1;
                self.commands
                    .insert((at, self.cmd_seq), Command::CuMask { queue, mask });
            }
        }
        for ch in d.changes {
            if u64::from(ch.pid.0) != LP {
                continue;
            }
            self.cmd_seq += 1;
            self.commands.insert(
                (at, self.cmd_seq),
                Command::Run {
                    from: ch.from,
                    to: ch.to,
                    decided: t,
                },
            );
        }
    }

    pub(super) fn apply(&mut self, t: u64, cmd: Command) {
        let (from, to, decided) = match cmd {
            Command::Run { from, to, decided } => (from, to, decided),
            Command::CuMask { queue, mask } => {
                self.p.update_runlist(&[Edit::SetCuMask(queue, mask)], None);
                return;
            }
        };
        let mut edits = Vec::new();
        if let Some(tl) = self.r.timeline.as_mut() {
            for (run, preempted) in [(from, false), (to, true)] {
                if let Run::Preempted(l) = run {
                    tl.marks.push(Mark {
                        at_ns: t,
                        level: match l {
                            Level::Hold => 1,
                            Level::Deactivate => 2,
                            Level::Suspend => 3,
                        },
                        preempted,
                    });
                }
            }
        }
        if let Run::Preempted(l) = from {
            match l {
                Level::Hold => {
                    self.held = false;
                    self.hold_since = None;
                }
                Level::Deactivate | Level::Suspend => {
                    edits.push(Edit::SetActive(LP, true));
                    self.lp_active = true;
                }
            }
        }
        let mut grace = None;
        let mut preempting = false;
        if let Run::Preempted(l) = to {
            match l {
                Level::Hold => {
                    self.held = true;
                    if self.p.pending_packets(LP) == 0 {
                        self.r.preempt_latency_us.push((t - decided) as f64 / 1e3);
                        self.lp_off(t);
                    } else {
                        self.hold_since = Some(decided);
                    }
                }
                Level::Deactivate => {
                    edits.push(Edit::SetActive(LP, false));
                    self.lp_active = false;
                    preempting = true;
                }
                Level::Suspend => {
                    edits.push(Edit::SetActive(LP, false));
                    self.lp_active = false;
                    preempting = true;
                    // The kernel sends 0 as 1 (0 would mean "infinite" to the CP).
                    let clocks = f64::from(self.s.grace_period.max(1)) * 1000.0;
                    grace = Some((clocks / self.s.host.gpu_clock_ghz) as u64);
                }
            }
        }
        if !edits.is_empty() {
            let cost = self.p.update_runlist(&edits, grace);
            if preempting {
                self.r
                    .preempt_latency_us
                    .push((cost.resume_ns.max(t) - decided) as f64 / 1e3);
                self.lp_off(cost.resume_ns.max(t));
            }
        }
        self.top_up_lp();
        // Released while the HP queue has work: the two share the GPU from now on.
        if self.reaction_from.is_none() && self.p.pending_packets(HP) > 0 && self.lp_on_gpu() {
            self.reaction_from = Some(t);
        }
    }
}
