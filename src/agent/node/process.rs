//! The process table's entry: one GPU process the agent controls (through its shim or as its
//! tracer), what it reported (registry, activity) and what it has been sent.

use std::collections::{BTreeMap, VecDeque};
use std::time::Instant;

use super::super::conn::ConnId;
use super::super::identity::{Classified, Identity};
use super::super::kubernetes::cap::Cap;
use super::command::Command;
use super::why::Why;
use crate::ids::{GpuId, Pid, QueueId};
use crate::policy::{ProcessObs, QueueObs, Run};
use crate::proto::control::Control;
use crate::proto::{CuMask, Level, Registry};

/// Warnings kept per process.
const WARNINGS: usize = 5;

/// A command sent and not yet acknowledged.
#[derive(Debug, Clone, Copy)]
pub(super) struct Pending {
    pub(super) sent: Instant,
    pub(super) level: Option<Level>,
    pub(super) preempt: bool,
}

/// A process's commands waiting for their acks, in the order sent (a shim acknowledges in
/// order, and rarely has more than a few in flight): a vector that keeps its capacity, so a
/// command sent to a process that had one before allocates nothing.
#[derive(Debug, Default)]
pub(super) struct Pendings(Vec<(u64, Pending)>);

impl Pendings {
    /// Command `seq` waits for its ack (sequence numbers only grow).
    pub(super) fn insert(&mut self, seq: u64, p: Pending) {
        self.0.push((seq, p));
    }

    /// Command `seq` was acknowledged: it waits no more (`None`: it was not waiting).
    pub(super) fn remove(&mut self, seq: u64) -> Option<Pending> {
        let i = self.0.iter().position(|(s, _)| *s == seq)?;
        Some(self.0.remove(i).1)
    }

    /// The commands waiting.
    pub(super) fn values(&self) -> impl Iterator<Item = &Pending> {
        self.0.iter().map(|(_, p)| p)
    }

    /// Their sequence numbers, in the order sent.
    pub(super) fn keys(&self) -> impl Iterator<Item = u64> + '_ {
        self.0.iter().map(|(s, _)| *s)
    }

    /// How many wait.
    pub(super) fn len(&self) -> usize {
        self.0.len()
    }
}

/// One controlled process. Laid out in declaration order from a cache-line boundary
/// (`repr(C, align(64))`): the fields an edge decision touches come first, in the first
/// two lines (`layout::an_edge_decision_s_fields_are_in_the_first_two_lines`), so a decision
/// that changes 63 processes reads two lines of each instead of fields strewn over the
/// 900-byte entry.
#[derive(Debug)]
#[repr(C, align(64))]
pub(super) struct Proc {
    // Line 0: what an edge decision reads of every process it decides again.
    pub(super) conn: ConnId,
    pub(super) failed: Option<(Level, Instant)>,
    /// Direct edges: the watches sent to it, board -> the `AgentMsg::Watch` sent.
    pub(super) watches: BTreeMap<u32, crate::proto::AgentMsg>,
    /// The first partition it has queues on, from the registry (see [`Proc::first_gpu`]).
    first_gpu: GpuId,
    pub(super) applied: Run,
    /// Through its shim, or as its tracer (level 3 only).
    pub(super) via: Control,
    /// `AgentMsg::Edges` last sent (`None`: never).
    pub(super) edges_sent: Option<bool>,
    // Line 1: what it writes when its state changes, and the rest of its flags.
    /// Any queue busy (see [`Proc::any_busy`]).
    pub(super) busy_any: bool,
    /// Its busy queues are taken as idle: it reports edges and said nothing for
    /// [`crate::proto::BUSY_STALE`].
    pub(super) stale: bool,
    /// Direct edges: its run state was applied by its own watch (`ShimMsg::SelfLevel`), which
    /// also undoes it: the agent sends no release for it.
    pub(super) self_applied: bool,
    /// Direct edges: every busy process that preempts it writes a slot it watches (set before
    /// each reconcile step, `direct::direct_cover`).
    pub(super) watch_covers: bool,
    /// A tracer session being ended: out of the policy until the tracer confirms.
    pub(super) leaving: bool,
    pub(super) manual: Option<Level>,
    /// Direct edges: since when a preempt its watch should apply is awaited (the agent sends
    /// none unless it takes longer than `direct::SELF_GRACE`).
    pub(super) awaiting_self: Option<Instant>,
    /// Why it is in its run state (put in words by [`Proc::reason`] only when shown).
    pub(super) why: Option<Why>,
    // Line 2: read by the staleness check (of processes reporting edges) and when it has
    // queues behind its level.
    /// When its shim last said anything (`None`: nothing since hello).
    pub(super) last_heard: Option<Instant>,
    /// Registries received (to send a priority once per registry that shows it missing).
    pub(super) registry_gen: u64,
    /// `registry_gen` when the last preempt was sent (re-sent only for a newer registry).
    pub(super) preempt_gen: u64,
    pub(super) pending: Pendings,
    // The fields above are what an edge decision reads and writes of each process it
    // decides again (and its staleness check of every process): together at the start.
    pub(super) id: Identity,
    pub(super) requested: Option<String>,
    pub(super) classified: Classified,
    /// Its Kubernetes allocation's cap (`None`: it claims none).
    pub(super) cap: Option<Cap>,
    pub(super) class_override: Option<String>,
    pub(super) registry: Registry,
    pub(super) priority_sent: Option<(u32, u64)>,
    /// CU masks last sent, and the queues they were sent for.
    pub(super) cu_sent: Option<(Vec<CuMask>, Vec<QueueId>)>,
    /// In-flight window last sent (`None` in it: unbounded), and `registry_gen` then.
    pub(super) window_sent: Option<(Option<u32>, u64)>,
    pub(super) busy: BTreeMap<QueueId, bool>,
    /// Activity on unregistered queue ids was dropped (warned once).
    pub(super) activity_dropped: bool,
    pub(super) priority_override: Option<u32>,
    pub(super) warnings: VecDeque<String>,
    /// Its preemptions: preempt commands sent to it and levels its own watches applied.
    pub(super) preemptions: u64,
    /// Seconds it spent preempted, up to [`Proc::accounted`].
    pub(super) preempted_s: f64,
    /// Seconds any of its queues was busy, up to [`Proc::accounted`].
    pub(super) busy_s: f64,
    /// When its times were last accounted, and whether it was preempted and busy from then on
    /// (`None`: never).
    pub(super) accounted: Option<Accounted>,
    /// Direct edges (`direct.rs`): its own edge board and slot, as a writer.
    pub(super) writer: Option<(u32, u32)>,
    /// Direct edges: its slot was caught saying busy while it reported no busy queue; it gets
    /// no board again (its edges take the agent's path).
    pub(super) forged: bool,
    /// Its request hint (`hint.rs`).
    pub(super) hint: super::hint::Hint,
}

/// A process's state at its last time account.
#[derive(Debug, Clone, Copy)]
pub(super) struct Accounted {
    pub(super) at: Instant,
    pub(super) preempted: bool,
    pub(super) busy: bool,
}

impl Proc {
    /// Its (preempted, busy) seconds up to `now`.
    pub(super) fn times(&self, now: Instant) -> (f64, f64) {
        let (mut pre, mut busy) = (self.preempted_s, self.busy_s);
        if let Some(a) = self.accounted {
            let dt = now.saturating_duration_since(a.at).as_secs_f64();
            pre += if a.preempted { dt } else { 0.0 };
            busy += if a.busy { dt } else { 0.0 };
        }
        (pre, busy)
    }

    /// Accounts its times up to `now`; its state now counts from then on.
    pub(super) fn account(&mut self, now: Instant) {
        (self.preempted_s, self.busy_s) = self.times(now);
        let (preempted, busy) = self.account_state();
        self.accounted = Some(Accounted {
            at: now,
            preempted,
            busy,
        });
    }

    /// (preempted, busy) as its times count them.
    pub(super) fn account_state(&self) -> (bool, bool) {
        (self.applied != Run::Running, !self.stale && self.any_busy())
    }

    /// A process that just connected (or was just traced), running, nothing sent yet.
    pub(super) fn new(
        conn: ConnId,
        via: Control,
        id: Identity,
        requested: Option<String>,
        classified: Classified,
        cap: Option<Cap>,
    ) -> Proc {
        let mut p = Proc {
            conn,
            hint: Default::default(),
            via,
            leaving: false,
            id,
            requested,
            classified,
            cap,
            class_override: None,
            registry: Registry::default(),
            first_gpu: GpuId(u32::MAX),
            registry_gen: 0,
            priority_sent: None,
            preempt_gen: 0,
            cu_sent: None,
            window_sent: None,
            busy: BTreeMap::new(),
            activity_dropped: false,
            applied: Run::Running,
            manual: None,
            priority_override: None,
            why: None,
            pending: Pendings::default(),
            failed: None,
            warnings: VecDeque::new(),
            last_heard: None,
            edges_sent: None,
            busy_any: false,
            stale: false,
            preemptions: 0,
            preempted_s: 0.0,
            busy_s: 0.0,
            accounted: None,
            writer: None,
            forged: false,
            watches: BTreeMap::new(),
            self_applied: false,
            awaiting_self: None,
            watch_covers: false,
        };
        if let Some(r) = p.classified.refused.clone() {
            p.warn(r);
        }
        p
    }

    /// Why it is in its run state, in words ("connected" before its first decision).
    pub(super) fn reason(&self) -> String {
        self.why
            .as_ref()
            .map_or_else(|| "connected".into(), Why::text)
    }

    /// The class in effect (`kfdq class` wins over the classification).
    pub(super) fn class(&self) -> &str {
        self.class_override
            .as_deref()
            .unwrap_or(&self.classified.class)
    }

    /// Logs a warning and keeps the last few for `kfdq status`.
    pub(super) fn warn(&mut self, w: String) {
        tracing::warn!(pid = %self.id.pid, "{w}");
        if self.warnings.len() == WARNINGS {
            self.warnings.pop_front();
        }
        self.warnings.push_back(w);
    }

    /// Queue `qid` is busy: its process's request hint holds, or [`Proc::reported_busy`].
    pub(super) fn queue_busy(&self, qid: QueueId) -> bool {
        self.hint.holds() || self.reported_busy(qid)
    }

    /// Some queue is busy by the shim's reports (work, not a hint).
    pub(super) fn reported_any_busy(&self) -> bool {
        self.registry
            .queues
            .iter()
            .any(|q| self.reported_busy(q.queue_id))
    }

    /// The last activity sample of queue `qid`, else the registry's.
    pub(super) fn reported_busy(&self, qid: QueueId) -> bool {
        self.busy.get(&qid).copied().unwrap_or_else(|| {
            self.registry
                .queues
                .iter()
                .any(|q| q.queue_id == qid && q.busy)
        })
    }

    /// Any of its queues is busy (kept by [`Proc::refresh_busy`]).
    pub(super) fn any_busy(&self) -> bool {
        self.busy_any
    }

    /// Recomputes [`Proc::any_busy`] after a registry or an activity report.
    pub(super) fn refresh_busy(&mut self) {
        self.busy_any = self
            .registry
            .queues
            .iter()
            .any(|q| self.queue_busy(q.queue_id));
    }

    /// The first partition it has queues on (`u32::MAX` for none): commands go out in
    /// partition order.
    pub(super) fn first_gpu(&self) -> GpuId {
        self.first_gpu
    }

    /// Takes its shim's new registry (and counts it).
    pub(super) fn set_registry(&mut self, reg: Registry) {
        self.first_gpu = reg
            .queues
            .iter()
            .map(|q| q.gpu_id)
            .min()
            .unwrap_or(GpuId(u32::MAX));
        self.registry = reg;
        self.registry_gen += 1;
    }

    /// Whether its busy reports have gone stale at `now`: it reports edges (so its shim says
    /// "still busy" every [`crate::proto::BUSY_RENEW_PERIOD`]), some queue is busy, and it has
    /// said nothing for [`crate::proto::BUSY_STALE`] (stopped or hung while busy). Also when
    /// that will happen if nothing arrives.
    pub(super) fn staleness(&self, now: Instant) -> (bool, Option<Instant>) {
        if self.via != Control::Shim || self.edges_sent != Some(true) || !self.any_busy() {
            return (false, None);
        }
        let Some(heard) = self.last_heard else {
            return (false, None);
        };
        let at = heard + crate::proto::BUSY_STALE;
        (now >= at, (now < at).then_some(at))
    }

    /// [`Proc::observe`] into `obs`, reusing its allocations (a decision allocates nothing
    /// for the processes it already saw).
    pub(super) fn observe_into(&self, pid: Pid, obs: &mut ProcessObs) {
        obs.pid = pid;
        if obs.class != self.class() {
            obs.class.clear();
            obs.class.push_str(self.class());
        }
        obs.queues.clear();
        obs.queues
            .extend(self.registry.queues.iter().map(|q| QueueObs {
                queue_id: q.queue_id,
                gpu_id: q.gpu_id,
                busy: !self.stale && self.queue_busy(q.queue_id),
            }));
    }

    /// What the policy sees of it (no busy queue while its reports are [`Proc::stale`]).
    pub(super) fn observe(&self, pid: Pid) -> ProcessObs {
        ProcessObs {
            pid,
            class: self.class().to_owned(),
            queues: self
                .registry
                .queues
                .iter()
                .map(|q| QueueObs {
                    queue_id: q.queue_id,
                    gpu_id: q.gpu_id,
                    busy: !self.stale && self.queue_busy(q.queue_id),
                })
                .collect(),
        }
    }

    /// Records `cmd`, sent as `seq` at `now`, as waiting for its ack.
    pub(super) fn sent(&mut self, seq: u64, cmd: &Command, now: Instant) {
        let (level, preempt) = cmd.kind();
        if preempt && matches!(level, Some(Level::Deactivate | Level::Suspend)) {
            self.preempt_gen = self.registry_gen;
        }
        self.pending.insert(
            seq,
            Pending {
                sent: now,
                level,
                preempt,
            },
        );
    }
}

#[cfg(test)]
mod layout {
    use std::mem::offset_of;

    use super::Proc;

    /// The size of the field `f` projects to.
    fn size_of_field<F>(_: fn(&Proc) -> &F) -> usize {
        size_of::<F>()
    }

    /// The last 64-byte line (from the entry's start) a field of `size` at `offset` touches.
    fn last_line(offset: usize, size: usize) -> usize {
        (offset + size - 1) / 64
    }

    #[test]
    fn an_edge_decision_s_fields_are_in_the_first_two_lines() {
        assert_eq!(std::mem::align_of::<Proc>(), 64);
        macro_rules! line {
            ($f:ident) => {
                last_line(offset_of!(Proc, $f), size_of_field(|p| &p.$f))
            };
        }
        // Read for every process an edge decision decides again (`reconcile::run_state`,
        // `direct::self_handles`, `decide::tracer_level`, `edge.rs`).
        let line0 = [
            line!(conn),
            line!(failed),
            line!(watches),
            line!(first_gpu),
            line!(applied),
            line!(via),
        ];
        assert_eq!(line0, [0; 6]);
        // Read, and written when its state changes.
        let line1 = [
            line!(self_applied),
            line!(watch_covers),
            line!(awaiting_self),
            line!(why),
        ];
        assert!(line1.iter().all(|l| *l <= 1), "{line1:?}");
    }
}
