//! The agent's model of the node and its executor: every connected GPU process (identity,
//! class, registry, activity), what it has been told (running, or preempted at a level), the
//! policy's decision, and the commands that bring the shims to it. No I/O: the server feeds it
//! messages and the time, and sends what it returns.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use super::config::AgentConfig;
use super::conn::ConnId;
use super::identity::{Classified, Identity, classify, may_set_class};
use super::metrics::Recorder;
use crate::policy::{Observation, PartitionObs, Policy, ProcessObs, QueueObs, Reason, Run};
use crate::proto::control::{
    ClassStatus, Control, Counters, LeftAlone, NodeStatus, PartitionStatus, ProcessQueue,
    ProcessStatus,
};
use crate::proto::{AgentMsg, CuMask, Level, Registry, Reply, Request, ShimMsg, Target};

/// How long a control request waits for the shims' acks.
pub const ACK_TIMEOUT: Duration = Duration::from_secs(5);
/// After a command failed, the same level is not retried on that process for this long.
const RETRY_AFTER: Duration = Duration::from_secs(5);
/// Latency samples kept.
const SAMPLES: usize = 4096;
/// Warnings kept per process.
const WARNINGS: usize = 5;

/// A message for a connection.
#[derive(Debug, Clone, PartialEq)]
pub enum Out {
    /// To a shim.
    Shim(ConnId, AgentMsg),
    /// To a control client.
    Control(ConnId, Reply),
    /// Stop tracing the process of tracer session `ConnId` (resume and detach it), for the
    /// reason given.
    Untrace(ConnId, String),
}

#[derive(Debug)]
struct Pending {
    sent: Instant,
    level: Option<Level>,
    preempt: bool,
}

#[derive(Debug)]
struct Proc {
    conn: ConnId,
    /// Through its shim, or as its tracer (level 3 only).
    via: Control,
    /// A tracer session being ended: out of the policy until the tracer confirms.
    leaving: bool,
    id: Identity,
    requested: Option<String>,
    classified: Classified,
    class_override: Option<String>,
    registry: Registry,
    /// Registries received (to send a priority once per registry that shows it missing).
    registry_gen: u64,
    priority_sent: Option<(u32, u64)>,
    /// `registry_gen` when the last preempt was sent (re-sent only for a newer registry).
    preempt_gen: u64,
    /// CU masks last sent, and the queues they were sent for.
    cu_sent: Option<(Vec<CuMask>, Vec<u32>)>,
    /// In-flight window last sent (`Some(None)`: unbounded was sent).
    window_sent: Option<Option<u32>>,
    busy: BTreeMap<u32, bool>,
    applied: Run,
    manual: Option<Level>,
    priority_override: Option<u32>,
    reason: String,
    pending: BTreeMap<u64, Pending>,
    failed: Option<(Level, Instant)>,
    warnings: VecDeque<String>,
}

impl Proc {
    fn class(&self) -> &str {
        self.class_override
            .as_deref()
            .unwrap_or(&self.classified.class)
    }

    fn warn(&mut self, w: String) {
        tracing::warn!(pid = self.id.pid, "{w}");
        if self.warnings.len() == WARNINGS {
            self.warnings.pop_front();
        }
        self.warnings.push_back(w);
    }

    fn queue_busy(&self, qid: u32) -> bool {
        self.busy.get(&qid).copied().unwrap_or_else(|| {
            self.registry
                .queues
                .iter()
                .any(|q| q.queue_id == qid && q.busy)
        })
    }
}

/// A control request waiting for shims' acks.
#[derive(Debug)]
struct Waiter {
    conn: ConnId,
    pid: u32,
    seqs: Vec<u64>,
    details: Vec<String>,
    failed: bool,
    deadline: Instant,
    /// Undo a manual preemption if its command fails.
    undo_manual: bool,
}

#[derive(Debug, Default)]
struct Samples(VecDeque<f64>);

impl Samples {
    fn push(&mut self, v: f64) {
        if self.0.len() == SAMPLES {
            self.0.pop_front();
        }
        self.0.push_back(v);
    }

    fn quantile(&self, q: f64) -> f64 {
        crate::stats::nearest_rank(&self.0, q)
    }
}

/// The node.
#[derive(Debug)]
pub struct Node {
    cfg: AgentConfig,
    policy: Policy,
    partitions: Vec<PartitionObs>,
    priority_note: String,
    procs: BTreeMap<u32, Proc>,
    left_alone: BTreeMap<u32, LeftAlone>,
    waiters: Vec<Waiter>,
    seq: u64,
    started: Instant,
    next_decide: Option<Instant>,
    counters: Counters,
    part_preempts: BTreeMap<u32, u64>,
    recent_preempts: VecDeque<(Instant, u32)>,
    decision_us: Samples,
    decide_us: Samples,
    ack_us: Samples,
    rec: Recorder,
}

fn level_name(run: Run) -> String {
    match run {
        Run::Running => "running".into(),
        Run::Preempted(Level::Hold) => "held (level 1)".into(),
        Run::Preempted(Level::Deactivate) => "deactivated (level 2)".into(),
        Run::Preempted(Level::Suspend) => "suspended (level 3)".into(),
    }
}

fn reason_text(r: &Reason) -> String {
    match r {
        Reason::Free => "no higher class busy".into(),
        Reason::Unpreemptible => "its class is never preempted".into(),
        Reason::HigherClassBusy(c) => format!("class {c} is busy"),
        Reason::Hysteresis(c) => format!("class {c} went idle less than the hysteresis ago"),
        Reason::StarvationGuard => "starvation guard: running its share".into(),
        Reason::ResidencyGuard(g) => {
            format!("residency guard: more active queues than slots on gpu {g:#x}")
        }
        Reason::RateLimited => "waiting for the minimum interval between preempts".into(),
    }
}

/// Device-wide preempts a level-2/3 command costs, per partition: only the queues it changes
/// count (those not yet at the level for a preempt, those at it for a release), as the shim
/// skips the others.
fn command_cost(level: Level, preempt: bool, reg: &Registry) -> BTreeMap<u32, u32> {
    let mut per: BTreeMap<u32, u32> = BTreeMap::new();
    for q in &reg.queues {
        let at_level = match level {
            Level::Deactivate => q.deactivated,
            Level::Suspend => q.suspended,
            Level::Hold => false,
        };
        if at_level != preempt {
            *per.entry(q.gpu_id).or_default() += 1;
        }
    }
    per.into_iter()
        .map(|(g, n)| (g, crate::policy::preempt_cost(Run::Preempted(level), n)))
        .filter(|(_, c)| *c > 0)
        .collect()
}

impl Node {
    /// A node with `cfg`, GPU partitions `partitions`, and a note on what a priority buys on
    /// this kernel.
    pub fn new(
        cfg: AgentConfig,
        partitions: Vec<PartitionObs>,
        priority_note: String,
        now: Instant,
    ) -> Result<Node, crate::policy::PolicyError> {
        Ok(Node {
            policy: Policy::new(cfg.policy.clone())?,
            cfg,
            partitions,
            priority_note,
            procs: BTreeMap::new(),
            left_alone: BTreeMap::new(),
            waiters: Vec::new(),
            seq: 0,
            started: now,
            next_decide: None,
            counters: Counters::default(),
            part_preempts: BTreeMap::new(),
            recent_preempts: VecDeque::new(),
            decision_us: Samples::default(),
            decide_us: Samples::default(),
            ack_us: Samples::default(),
            rec: Recorder::default(),
        })
    }

    /// The configuration in effect.
    pub fn config(&self) -> &AgentConfig {
        &self.cfg
    }

    /// Replaces the configuration (already validated); processes are classified again.
    pub fn reload(&mut self, cfg: AgentConfig) -> Result<(), crate::policy::PolicyError> {
        self.policy = Policy::new(cfg.policy.clone())?;
        self.cfg = cfg;
        for p in self.procs.values_mut() {
            p.classified = classify(&self.cfg, &p.id, p.requested.as_deref());
            if p.class_override
                .as_deref()
                .is_some_and(|c| self.cfg.class(c).is_none())
            {
                p.class_override = None;
            }
        }
        self.counters.reloads += 1;
        Ok(())
    }

    /// Counts a refused reload.
    pub fn reload_failed(&mut self) {
        self.counters.reload_failures += 1;
    }

    /// Counts a look for GPU processes without the shim.
    pub fn scanned(&mut self) {
        self.counters.tracer_scans += 1;
    }

    /// Counts an accepted connection.
    pub fn connected(&mut self) {
        self.counters.connections += 1;
    }

    /// Counts a malformed, oversized or truncated message.
    pub fn bad_message(&mut self) {
        self.counters.bad_messages += 1;
    }

    /// Records the latency of a decision that sent commands: from the wake-up to the commands
    /// written (`total`), and the decision alone (`compute`).
    pub fn record_decision(&mut self, total: Duration, compute: Duration) {
        self.decision_us.push(total.as_secs_f64() * 1e6);
        self.rec.decision(total.as_secs_f64());
        self.decide_us.push(compute.as_secs_f64() * 1e6);
    }

    /// When [`Node::decide`] must run again even if nothing arrives.
    pub fn deadline(&self) -> Option<Instant> {
        let w = self.waiters.iter().map(|w| w.deadline).min();
        match (self.next_decide, w) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The pid a shim connection belongs to.
    pub fn pid_of(&self, conn: ConnId) -> Option<u32> {
        self.procs
            .iter()
            .find(|(_, p)| p.conn == conn)
            .map(|(pid, _)| *pid)
    }

    /// A shim said hello on `conn`. `Err` is the refusal to send. A process the tracer
    /// controls is handed to its shim (the shim wins): `out` gets the [`Out::Untrace`].
    pub fn hello(
        &mut self,
        conn: ConnId,
        id: Identity,
        version: u32,
        class: Option<String>,
        claimed_pid: u32,
        out: &mut Vec<Out>,
    ) -> Result<(), String> {
        if version != crate::proto::VERSION {
            return Err(format!(
                "protocol version {version} is not the agent's {}: run a shim and an agent from the same kfdq release",
                crate::proto::VERSION
            ));
        }
        if id.pid == 0 {
            return Err(
                "the agent cannot tell which process this is (SO_PEERCRED gave no pid)".into(),
            );
        }
        if claimed_pid != id.pid {
            tracing::debug!(
                pid = id.pid,
                claimed_pid,
                "the shim's pid differs from SO_PEERCRED's (another pid namespace); using SO_PEERCRED's"
            );
        }
        if let Some(old) = self.procs.get(&id.pid)
            && old.via == Control::Tracer
        {
            out.push(Out::Untrace(
                old.conn,
                "its shim connected to the agent (the shim controls it from now on)".into(),
            ));
        }
        self.insert(conn, Control::Shim, id, class);
        Ok(())
    }

    /// The tracer took `id`'s process (a tracer session on `conn`), which asked for class
    /// `requested` in its environment.
    pub fn traced(&mut self, conn: ConnId, id: Identity, requested: Option<String>) {
        self.left_alone.remove(&id.pid);
        self.insert(conn, Control::Tracer, id, requested);
    }

    /// Whether a process found without the shim belongs to a class the tracer controls.
    /// Returns its class when it does.
    pub fn tracer_class(&self, id: &Identity, requested: Option<&str>) -> Option<String> {
        let c = classify(&self.cfg, id, requested);
        (self.cfg.control(&c.class) == Control::Tracer).then_some(c.class)
    }

    /// True when `pid` is connected through its shim or traced.
    pub fn knows(&self, pid: u32) -> bool {
        self.procs.contains_key(&pid)
    }

    /// The tracer could not take `pid` (of class `class`): shown by `kfdq status` until
    /// [`Node::forget_left_alone`] drops it.
    pub fn left_alone(&mut self, id: &Identity, class: String, reason: String) {
        self.left_alone.insert(
            id.pid,
            LeftAlone {
                pid: id.pid,
                exe: id.exe.clone(),
                class,
                reason,
            },
        );
    }

    /// Forgets the left-alone processes `keep` says no to (those that exited).
    pub fn forget_left_alone(&mut self, keep: impl Fn(u32) -> bool) {
        self.left_alone.retain(|pid, _| keep(*pid));
    }

    fn insert(&mut self, conn: ConnId, via: Control, id: Identity, class: Option<String>) {
        let classified = classify(&self.cfg, &id, class.as_deref());
        let pid = id.pid;
        tracing::info!(pid, uid = id.uid, exe = %id.exe, class = %classified.class, control = via.name(), "process connected ({})", classified.reason);
        let mut p = Proc {
            conn,
            via,
            leaving: false,
            id,
            requested: class,
            classified,
            class_override: None,
            registry: Registry::default(),
            registry_gen: 0,
            priority_sent: None,
            preempt_gen: 0,
            cu_sent: None,
            window_sent: None,
            busy: BTreeMap::new(),
            applied: Run::Running,
            manual: None,
            priority_override: None,
            reason: "connected".into(),
            pending: BTreeMap::new(),
            failed: None,
            warnings: VecDeque::new(),
        };
        if let Some(r) = p.classified.refused.clone() {
            p.warn(r);
        }
        self.procs.insert(pid, p);
    }

    /// A shim's connection (or a tracer session) ended: the process exited, or its shim
    /// stopped (it released everything on its side), or the tracer let it go. Forgets it.
    pub fn gone(&mut self, conn: ConnId, out: &mut Vec<Out>) {
        let Some(pid) = self.pid_of(conn) else {
            return;
        };
        self.procs.remove(&pid);
        self.policy.forget(pid);
        tracing::info!(pid, "disconnected; forgotten");
        let mut keep = Vec::new();
        for w in self.waiters.drain(..) {
            if w.pid == pid {
                out.push(Out::Control(
                    w.conn,
                    Reply::Error {
                        error: format!(
                            "process {pid} exited (or its shim disconnected) before it acknowledged"
                        ),
                    },
                ));
            } else {
                keep.push(w);
            }
        }
        self.waiters = keep;
    }

    /// A control client went away: drop its waiters.
    pub fn control_gone(&mut self, conn: ConnId) {
        self.waiters.retain(|w| w.conn != conn);
    }

    /// A message from the shim of `pid`. Returns whether a decision is due.
    pub fn shim_message(
        &mut self,
        pid: u32,
        msg: ShimMsg,
        now: Instant,
        out: &mut Vec<Out>,
    ) -> bool {
        let Some(p) = self.procs.get_mut(&pid) else {
            return false;
        };
        match msg {
            ShimMsg::Hello { .. } => {
                out.push(Out::Shim(
                    p.conn,
                    AgentMsg::Error {
                        detail: "hello is only the first message of a session".into(),
                    },
                ));
                false
            }
            ShimMsg::Registry(reg) => {
                p.busy
                    .retain(|q, _| reg.queues.iter().any(|r| r.queue_id == *q));
                p.registry = reg;
                p.registry_gen += 1;
                true
            }
            ShimMsg::Activity { queue_id, busy } => p.busy.insert(queue_id, busy) != Some(busy),
            ShimMsg::Ack { seq, ok, detail } => {
                tracing::debug!(pid, seq, ok, "ack: {detail}");
                let Some(cmd) = p.pending.remove(&seq) else {
                    out.push(Out::Shim(
                        p.conn,
                        AgentMsg::Error {
                            detail: format!("ack of unknown command {seq}"),
                        },
                    ));
                    return false;
                };
                let took = now.duration_since(cmd.sent).as_secs_f64();
                self.ack_us.push(took * 1e6);
                if ok
                    && cmd.preempt
                    && let Some(l) = cmd.level
                {
                    self.rec.preempt_acked(l, took);
                }
                let mut retry = false;
                if !ok {
                    self.counters.command_failures += 1;
                    p.warn(format!("command failed: {detail}"));
                    if cmd.preempt
                        && let Some(l) = cmd.level
                    {
                        // The shim did not reach the level: it is not preempted there, and the
                        // level is not retried on it for a while.
                        if p.applied == Run::Preempted(l) {
                            p.applied = Run::Running;
                        }
                        p.failed = Some((l, now));
                        retry = true;
                    }
                }
                self.settle_waiters(pid, seq, ok, &detail, out);
                retry
            }
        }
    }

    fn settle_waiters(&mut self, pid: u32, seq: u64, ok: bool, detail: &str, out: &mut Vec<Out>) {
        let mut i = 0;
        while i < self.waiters.len() {
            let w = &mut self.waiters[i];
            if w.pid == pid && w.seqs.contains(&seq) {
                w.seqs.retain(|s| *s != seq);
                w.details.push(detail.to_owned());
                w.failed |= !ok;
                if w.seqs.is_empty() {
                    let w = self.waiters.swap_remove(i);
                    if w.failed
                        && w.undo_manual
                        && let Some(p) = self.procs.get_mut(&pid)
                    {
                        p.manual = None;
                    }
                    let detail = w.details.join("; ");
                    out.push(Out::Control(
                        w.conn,
                        if w.failed {
                            Reply::Error { error: detail }
                        } else {
                            Reply::Done { detail }
                        },
                    ));
                    continue;
                }
            }
            i += 1;
        }
    }

    fn now_ns(&self, now: Instant) -> u64 {
        now.duration_since(self.started).as_nanos() as u64
    }

    fn send(
        &mut self,
        pid: u32,
        msg_of: impl FnOnce(u64) -> AgentMsg,
        level: Option<Level>,
        preempt: bool,
        now: Instant,
        out: &mut Vec<Out>,
    ) -> Option<u64> {
        let p = self.procs.get_mut(&pid)?;
        self.seq += 1;
        let seq = self.seq;
        p.pending.insert(
            seq,
            Pending {
                sent: now,
                level,
                preempt,
            },
        );
        if preempt && let Some(l) = level {
            self.rec.preempted(p.class(), l);
        }
        if let Some(l @ (Level::Deactivate | Level::Suspend)) = level {
            if preempt {
                p.preempt_gen = p.registry_gen;
            }
            for (gpu, c) in command_cost(l, preempt, &p.registry) {
                *self.part_preempts.entry(gpu).or_default() += u64::from(c);
                self.counters.preempts += u64::from(c);
                self.recent_preempts.push_back((now, c));
            }
        }
        self.counters.commands += 1;
        let msg = msg_of(seq);
        tracing::debug!(pid, "command {msg:?}");
        out.push(Out::Shim(p.conn, msg));
        Some(seq)
    }

    /// Decides what every process should be and returns the commands that get it there (in
    /// partition order, so a partition's commands go out back to back).
    pub fn decide(&mut self, now: Instant, out: &mut Vec<Out>) {
        self.counters.decisions += 1;
        self.account_busy(now);
        // Waiters past their deadline.
        let mut i = 0;
        while i < self.waiters.len() {
            if now >= self.waiters[i].deadline {
                let w = self.waiters.swap_remove(i);
                out.push(Out::Control(
                    w.conn,
                    Reply::Error {
                        error: format!(
                            "process {} did not acknowledge within {} s (its shim may be stuck in a GPU call); the request stays in effect",
                            w.pid,
                            ACK_TIMEOUT.as_secs()
                        ),
                    },
                ));
            } else {
                i += 1;
            }
        }
        // Tracer sessions whose class no longer takes processes without the shim.
        for p in self.procs.values_mut() {
            if p.via == Control::Tracer
                && !p.leaving
                && self.cfg.control(p.class()) != Control::Tracer
            {
                p.leaving = true;
                out.push(Out::Untrace(
                    p.conn,
                    format!("its class {} no longer has control = \"tracer\"", p.class()),
                ));
            }
        }
        let obs_procs: Vec<ProcessObs> = self
            .procs
            .iter()
            .filter(|(_, p)| p.manual.is_none() && !p.leaving)
            .map(|(pid, p)| ProcessObs {
                pid: *pid,
                class: p.class().to_owned(),
                queues: p
                    .registry
                    .queues
                    .iter()
                    .map(|q| QueueObs {
                        queue_id: q.queue_id,
                        gpu_id: q.gpu_id,
                        busy: p.queue_busy(q.queue_id),
                    })
                    .collect(),
            })
            .collect();
        let now_ns = self.now_ns(now);
        let decision = self.policy.decide(&Observation {
            now_ns,
            partitions: &self.partitions,
            processes: &obs_procs,
        });
        self.next_decide = decision
            .next_ns
            .map(|t| self.started + Duration::from_nanos(t));

        // Desired state per process: a manual preemption wins over the policy.
        let mut wanted: Vec<(u32, Run, String)> = decision
            .targets
            .iter()
            .map(|t| (t.pid, t.run, reason_text(&t.reason)))
            .collect();
        for (pid, p) in &self.procs {
            if let Some(l) = p.manual
                && !p.leaving
            {
                wanted.push((*pid, Run::Preempted(l), "kfdq suspend".into()));
            }
        }
        // The tracer has level 3 only: a traced process preempted at any level is suspended.
        for (pid, want, why) in &mut wanted {
            if let Run::Preempted(l) = *want
                && l != Level::Suspend
                && self
                    .procs
                    .get(pid)
                    .is_some_and(|p| p.via == Control::Tracer)
            {
                *want = Run::Preempted(Level::Suspend);
                why.push_str(" (level 3: the tracer's only level)");
            }
        }
        // Partition order: by the first partition each process has queues on.
        let first_gpu = |pid: u32| {
            self.procs
                .get(&pid)
                .and_then(|p| p.registry.queues.iter().map(|q| q.gpu_id).min())
                .unwrap_or(u32::MAX)
        };
        wanted.sort_by_key(|(pid, _, _)| (first_gpu(*pid), *pid));

        for (pid, want, why) in wanted {
            let Some(p) = self.procs.get_mut(&pid) else {
                continue;
            };
            let mut want = want;
            if let (Run::Preempted(l), Some((fl, at))) = (want, p.failed)
                && l == fl
            {
                if now.duration_since(at) < RETRY_AFTER {
                    want = Run::Running;
                    self.next_decide = Some(
                        self.next_decide
                            .map_or(at + RETRY_AFTER, |n| n.min(at + RETRY_AFTER)),
                    );
                } else {
                    p.failed = None;
                }
            }
            p.reason = why;
            let applied = p.applied;
            if applied != want {
                p.applied = want;
                if let Run::Preempted(l) = applied {
                    self.send(
                        pid,
                        |seq| AgentMsg::Release {
                            seq,
                            level: l,
                            target: Target::All,
                        },
                        Some(l),
                        false,
                        now,
                        out,
                    );
                }
                if let Run::Preempted(l) = want {
                    let grace = self.cfg.grace_period;
                    self.send(
                        pid,
                        |seq| AgentMsg::Preempt {
                            seq,
                            level: l,
                            target: Target::All,
                            grace_period: grace,
                        },
                        Some(l),
                        true,
                        now,
                        out,
                    );
                }
                continue;
            }
            // Reconcile: queues created since the process was preempted at level 2/3 are
            // preempted too (the shim skips those already at the level).
            if let Run::Preempted(l @ (Level::Deactivate | Level::Suspend)) = want {
                let behind = p.registry.queues.iter().any(|q| match l {
                    Level::Deactivate => !q.deactivated,
                    _ => !q.suspended,
                });
                let in_flight = p.pending.values().any(|c| c.preempt);
                if behind && !in_flight && p.registry_gen > p.preempt_gen {
                    let grace = self.cfg.grace_period;
                    self.send(
                        pid,
                        |seq| AgentMsg::Preempt {
                            seq,
                            level: l,
                            target: Target::All,
                            grace_period: grace,
                        },
                        Some(l),
                        true,
                        now,
                        out,
                    );
                }
            }
        }
        self.priorities(now, out);
        self.windows(now, out);
        // CU masks of classes with a CU share, once per registry that shows new queues.
        for t in &decision.targets {
            if t.cu_masks.is_empty() {
                continue;
            }
            let Some(p) = self.procs.get_mut(&t.pid) else {
                continue;
            };
            if p.via == Control::Tracer {
                continue;
            }
            let masks: Vec<CuMask> = t
                .cu_masks
                .iter()
                .map(|(g, w)| CuMask {
                    gpu_id: *g,
                    words: w.clone(),
                })
                .collect();
            // Each SET_CU_MASK is an UPDATE_QUEUE in amdkfd (a device-wide preempt): only
            // queues without the mask get it.
            let queues: Vec<u32> = p.registry.queues.iter().map(|q| q.queue_id).collect();
            let todo: Vec<u32> = match &p.cu_sent {
                Some((m, done)) if *m == masks => queues
                    .iter()
                    .copied()
                    .filter(|q| !done.contains(q))
                    .collect(),
                _ => queues.clone(),
            };
            if todo.is_empty() {
                continue;
            }
            p.cu_sent = Some((masks.clone(), queues));
            for q in p
                .registry
                .queues
                .iter()
                .filter(|q| todo.contains(&q.queue_id))
            {
                *self.part_preempts.entry(q.gpu_id).or_default() += 1;
                self.counters.preempts += 1;
                self.recent_preempts.push_back((now, 1));
            }
            self.send(
                t.pid,
                |seq| AgentMsg::SetCuMask {
                    seq,
                    target: Target::Queues(todo),
                    masks,
                },
                None,
                false,
                now,
                out,
            );
        }
        // Keep 10 s of preempts for the rate.
        while self
            .recent_preempts
            .front()
            .is_some_and(|(t, _)| now.duration_since(*t) > Duration::from_secs(10))
        {
            self.recent_preempts.pop_front();
        }
    }

    /// Level 0: the priority a process's queues should have, when the shim's own class band
    /// does not already give it (the agent moved it to another class, the class is not one of
    /// the shim's built-in bands, or a priority was set by hand).
    fn wanted_priority(&self, p: &Proc) -> Option<u32> {
        if let Some(v) = p.priority_override {
            return Some(v);
        }
        let class = p.class();
        let shim_class = p.registry.class.as_deref().or(p.requested.as_deref());
        let builtin_band = crate::policy::class::Class::parse(class).is_ok();
        if builtin_band && shim_class.is_some_and(|c| c.eq_ignore_ascii_case(class)) {
            return None;
        }
        self.cfg.rule(class).map(|r| u32::from(r.priority))
    }

    fn priorities(&mut self, now: Instant, out: &mut Vec<Out>) {
        let todo: Vec<(u32, u32)> = self
            .procs
            .iter()
            .filter(|(_, p)| p.via == Control::Shim)
            .filter_map(|(pid, p)| {
                let want = self.wanted_priority(p)?;
                let differs = p
                    .registry
                    .queues
                    .iter()
                    .any(|q| q.effective_priority != want);
                let in_flight = p.pending.values().any(|c| c.level.is_none());
                let sent = p.priority_sent == Some((want, p.registry_gen));
                (differs && !in_flight && !sent).then_some((*pid, want))
            })
            .collect();
        for (pid, priority) in todo {
            if let Some(p) = self.procs.get_mut(&pid) {
                p.priority_sent = Some((priority, p.registry_gen));
            }
            self.send(
                pid,
                |seq| AgentMsg::SetPriority {
                    seq,
                    target: Target::All,
                    priority,
                },
                None,
                false,
                now,
                out,
            );
        }
    }

    /// The class's in-flight window, sent once per process and whenever its class (or the
    /// configuration) changes it; a shim that never had one needs no "unbounded".
    fn windows(&mut self, now: Instant, out: &mut Vec<Out>) {
        let todo: Vec<(u32, Option<u32>)> = self
            .procs
            .iter()
            .filter(|(_, p)| p.registry_gen > 0 && p.via == Control::Shim)
            .filter_map(|(pid, p)| {
                let want = self.cfg.policy.class(p.class()).and_then(|c| c.window);
                let current = p.window_sent.unwrap_or(p.registry.window);
                (current != want).then_some((*pid, want))
            })
            .collect();
        for (pid, dispatches) in todo {
            if let Some(p) = self.procs.get_mut(&pid) {
                p.window_sent = Some(dispatches);
            }
            self.send(
                pid,
                |seq| AgentMsg::SetWindow { seq, dispatches },
                None,
                false,
                now,
                out,
            );
        }
    }

    /// Releases every preempted process (shutdown). Returns how many commands were sent.
    pub fn release_all(&mut self, now: Instant, out: &mut Vec<Out>) -> usize {
        let held: Vec<(u32, Level)> = self
            .procs
            .iter()
            .filter_map(|(pid, p)| match p.applied {
                Run::Preempted(l) => Some((*pid, l)),
                Run::Running => None,
            })
            .collect();
        for (pid, l) in &held {
            if let Some(p) = self.procs.get_mut(pid) {
                p.applied = Run::Running;
                p.manual = None;
            }
            self.send(
                *pid,
                |seq| AgentMsg::Release {
                    seq,
                    level: *l,
                    target: Target::All,
                },
                Some(*l),
                false,
                now,
                out,
            );
        }
        held.len()
    }

    /// Commands not yet acknowledged.
    pub fn unacknowledged(&self) -> usize {
        self.procs.values().map(|p| p.pending.len()).sum()
    }

    /// Runs a control request from `who` on control connection `conn`. The reply comes now,
    /// or once the shims acknowledged the commands it caused.
    pub fn control(
        &mut self,
        conn: ConnId,
        who: &Identity,
        req: Request,
        now: Instant,
        out: &mut Vec<Out>,
    ) {
        let reply = match self.control_inner(conn, who, req, now, out) {
            Ok(Some(detail)) => Reply::Done { detail },
            Ok(None) => return,
            Err(error) => Reply::Error { error },
        };
        out.push(Out::Control(conn, reply));
    }

    fn target(&self, who: &Identity, pid: u32) -> Result<&Proc, String> {
        let p = self.procs.get(&pid).ok_or_else(|| {
            format!(
                "no GPU process with pid {pid} is connected to the agent: `kfdq status` lists those it controls (a process is controlled when it runs under the shim, e.g. `kfdq run`, with KFDQ_SOCKET set to the agent's socket)"
            )
        })?;
        if !who.is_admin(&self.cfg) && who.uid != p.id.uid {
            return Err(format!(
                "permission: process {pid} belongs to uid {}, and uid {} may control only its own processes; root or members of the admin group{} control any",
                p.id.uid,
                who.uid,
                self.cfg
                    .admin_group
                    .as_ref()
                    .map(|(n, _)| format!(" ({n})"))
                    .unwrap_or_else(|| " (none configured: [agent] admin_group)".into())
            ));
        }
        Ok(p)
    }

    fn control_inner(
        &mut self,
        conn: ConnId,
        who: &Identity,
        req: Request,
        now: Instant,
        out: &mut Vec<Out>,
    ) -> Result<Option<String>, String> {
        let (pid, undo_manual, what) = match req {
            Request::Status => {
                out.push(Out::Control(
                    conn,
                    Reply::Status(Box::new(self.status(now))),
                ));
                return Ok(None);
            }
            Request::SetPriority { pid, priority } => {
                if priority > 15 {
                    return Err(format!(
                        "priority {priority} is out of range 0..=15 (KFD's queue priorities; 0-6 low, 7-10 medium, 11-15 high pipe)"
                    ));
                }
                let p = self.target(who, pid)?;
                if p.via == Control::Tracer {
                    return Err(format!(
                        "process {pid} runs without the shim: only a process itself may change its queues' priority (UPDATE_QUEUE); run it under the shim (kfdq run) to set one"
                    ));
                }
                if !who.is_admin(&self.cfg) {
                    let cap = self
                        .cfg
                        .class(&p.classified.entitled)
                        .map_or(0, |c| u32::from(c.max_priority));
                    if priority > cap {
                        return Err(format!(
                            "class cap: process {pid}'s class {} allows priorities up to {cap} for its users; root or the admin group may set more",
                            p.classified.entitled
                        ));
                    }
                }
                if let Some(p) = self.procs.get_mut(&pid) {
                    p.priority_override = Some(priority);
                    p.priority_sent = None;
                }
                (pid, false, format!("priority {priority}"))
            }
            Request::Suspend { pid, level } => {
                let p = self.target(who, pid)?;
                if p.via == Control::Tracer && level != Level::Suspend {
                    return Err(format!(
                        "process {pid} runs without the shim and is controlled through the tracer, which can only suspend its queues (level 3): use --level suspend, or run it under the shim (kfdq run) for levels 1 and 2"
                    ));
                }
                if let Some(p) = self.procs.get_mut(&pid) {
                    if p.manual == Some(level) {
                        return Ok(Some(format!(
                            "process {pid} is already preempted at {level:?} by hand"
                        )));
                    }
                    p.manual = Some(level);
                    p.failed = None;
                }
                (pid, true, format!("{level:?}"))
            }
            Request::Resume { pid } => {
                self.target(who, pid)?;
                if let Some(p) = self.procs.get_mut(&pid) {
                    if p.manual.is_none() {
                        return Ok(Some(format!(
                            "process {pid} was not preempted by hand; it is {} ({})",
                            level_name(p.applied),
                            p.reason
                        )));
                    }
                    p.manual = None;
                }
                (pid, false, "resume".into())
            }
            Request::SetClass { pid, class } => {
                let p = self.target(who, pid)?;
                may_set_class(&self.cfg, who, &p.classified.entitled, &class)?;
                if let Some(p) = self.procs.get_mut(&pid) {
                    p.class_override = Some(class.clone());
                    p.priority_override = None;
                    p.priority_sent = None;
                }
                (pid, false, format!("class {class}"))
            }
        };
        let before = self.seq;
        self.decide(now, out);
        let seqs: Vec<u64> = self
            .procs
            .get(&pid)
            .map(|p| p.pending.keys().copied().filter(|s| *s > before).collect())
            .unwrap_or_default();
        let state = self
            .procs
            .get(&pid)
            .map(|p| format!("{} ({})", level_name(p.applied), p.reason))
            .unwrap_or_default();
        if seqs.is_empty() {
            return Ok(Some(format!(
                "process {pid}: {what}; nothing to send, it is {state}"
            )));
        }
        self.waiters.push(Waiter {
            conn,
            pid,
            seqs,
            details: vec![format!("process {pid}: {what}; now {state}")],
            failed: false,
            deadline: now + ACK_TIMEOUT,
            undo_manual,
        });
        Ok(None)
    }

    /// Accounts each class's busy time up to `now` (a class is busy while any queue of any of
    /// its processes is).
    fn account_busy(&mut self, now: Instant) {
        let busy: Vec<&str> = self
            .procs
            .values()
            .filter(|p| p.registry.queues.iter().any(|q| p.queue_busy(q.queue_id)))
            .map(|p| p.class())
            .collect();
        self.rec.account_busy(now, busy);
    }

    /// A Prometheus scrape of the node (text format, [`super::metrics::CONTENT_TYPE`]).
    pub fn metrics(&mut self, now: Instant) -> Result<String, std::fmt::Error> {
        self.account_busy(now);
        super::metrics::render(&self.status(now), &self.rec)
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
                preempts: self.part_preempts.get(&p.gpu_id).copied().unwrap_or(0),
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
            processes.push(ProcessStatus {
                pid: *pid,
                control: p.via,
                uid: p.id.uid,
                exe: p.id.exe.clone(),
                class: p.class().to_owned(),
                class_reason: if p.class_override.is_some() {
                    "kfdq class".into()
                } else {
                    p.classified.reason.clone()
                },
                state: level_name(p.applied),
                level: match p.applied {
                    Run::Running => None,
                    Run::Preempted(l) => Some(l),
                },
                reason: p.reason.clone(),
                manual: p.manual,
                priority_override: p.priority_override,
                queues,
                warnings: p.warnings.iter().cloned().collect(),
            });
        }
        let window = self
            .recent_preempts
            .front()
            .map_or(0.0, |(t, _)| now.duration_since(*t).as_secs_f64())
            .clamp(1.0, 10.0);
        let mut counters = self.counters.clone();
        counters.preempts_per_s = self
            .recent_preempts
            .iter()
            .map(|(_, c)| f64::from(*c))
            .sum::<f64>()
            / window;
        counters.decision_us_p50 = self.decision_us.quantile(0.5);
        counters.decision_us_p99 = self.decision_us.quantile(0.99);
        counters.decide_us_p50 = self.decide_us.quantile(0.5);
        counters.decide_us_p99 = self.decide_us.quantile(0.99);
        counters.ack_us_p50 = self.ack_us.quantile(0.5);
        counters.ack_us_max = self.ack_us.quantile(1.0);
        NodeStatus {
            agent_pid: std::process::id(),
            version: env!("CARGO_PKG_VERSION").into(),
            config: self.cfg.source.as_ref().map(|p| p.display().to_string()),
            uptime_s: now.duration_since(self.started).as_secs_f64(),
            priority_note: self.priority_note.clone(),
            partitions,
            classes,
            processes,
            left_alone: self.left_alone.values().cloned().collect(),
            counters,
        }
    }
}
