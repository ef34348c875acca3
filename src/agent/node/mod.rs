//! The agent's model of the node and its executor: every connected GPU process (identity,
//! class, registry, activity), what it has been told (running, or preempted at a level), the
//! policy's decision, and the commands that bring the shims to it. No I/O: the server feeds it
//! messages and the time, and sends what it returns.
//!
//! * [`process`]: the process table's entry (what a process reported, what it was sent).
//! * [`shim`]: what shims report (registry, activity, acks).
//! * [`decide`]: a decision: the policy, what the node wants of each process, the commands.
//! * [`reconcile`]: one process's step, what was sent against what is wanted -> commands.
//! * [`command`]: the commands, built into messages and counted in preempts in one place.
//! * [`waiters`]: control requests waiting for acks, and their deadlines.
//! * [`control`]: control requests (who may do what).
//! * [`status`] and [`samples`]: what `kfdq status` and the metrics show.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use super::config::AgentConfig;
use super::conn::ConnId;
use super::identity::{Identity, classify};
use super::kubernetes::cap::{Claim, cap_of};
use super::metrics::Recorder;
use crate::allocation::AllocationFile;
use crate::ids::Pid;
use crate::policy::{PartitionObs, Policy};
use crate::proto::control::{Control, Counters, LeftAlone};
use crate::proto::{AgentMsg, Reply};

mod command;
mod control;
mod decide;
mod direct;
mod doorbell;
mod edge;
#[cfg(test)]
mod fixture;
mod hint;
mod process;
mod reconcile;
mod samples;
mod sent;
mod shim;
mod status;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_direct;
#[cfg(test)]
mod tests_edges;
#[cfg(test)]
mod tests_hint;
#[cfg(test)]
mod tests_kubernetes;
mod waiters;
mod why;

use command::Preempts;
pub use control::ControlError;
use process::Proc;
use samples::Samples;
pub use shim::UNREGISTERED_ACTIVITY;
pub use waiters::ACK_TIMEOUT;
use waiters::Waiters;

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
    /// To a shim, with a descriptor of edge board `board` (writable or read-only) passed with
    /// the line (direct edges, `direct.rs`).
    ShimBoard {
        /// The connection.
        conn: ConnId,
        /// The message (`AgentMsg::BoardWriter` or `AgentMsg::Watch`).
        msg: AgentMsg,
        /// The board.
        board: u32,
        /// A writable descriptor (the writer's) or a read-only one (a watcher's).
        writable: bool,
    },
    /// Set slot `slot` of edge board `board` idle (its writer went away or went stale).
    ClearSlot {
        /// The board.
        board: u32,
        /// The slot.
        slot: u32,
    },
    /// Look at slot `slot` of writer `pid`'s edge board: busy while the agent believes the
    /// writer idle (`idle`), for long, is forged: cleared, and told to the node
    /// (`NodeState::slot_checked`).
    CheckSlot {
        /// The writer.
        pid: Pid,
        /// Its board.
        board: u32,
        /// Its slot.
        slot: u32,
        /// The agent believes it idle.
        idle: bool,
    },
    /// Edge board `board` has no writer any more: the agent drops it.
    DropBoard {
        /// The board.
        board: u32,
    },
}

/// The node's state: its processes, the policy and what was sent to each (no I/O).
#[derive(Debug)]
pub struct NodeState {
    cfg: AgentConfig,
    policy: Policy,
    partitions: Vec<PartitionObs>,
    priority_note: String,
    procs: BTreeMap<Pid, Proc>,
    left_alone: BTreeMap<Pid, LeftAlone>,
    waiters: Waiters,
    seq: u64,
    started: Instant,
    next_decide: Option<Instant>,
    /// The earliest retry of a failed level the reconcile steps asked for (part of
    /// `next_decide`, kept apart so an edge decision can recompute it).
    retry_next: Option<Instant>,
    counters: Counters,
    preempts: Preempts,
    decision_us: Samples,
    decide_us: Samples,
    ack_us: Samples,
    rec: Recorder,
    /// Busy periods per class, ms (`kfdq status`).
    busy_periods: BTreeMap<String, Samples>,
    /// When the leases of the preempted processes are renewed next (`None`: none preempted).
    next_renew: Option<Instant>,
    /// The last decision's observation, rebuilt in place by the next (or patched by an edge
    /// decision).
    observed: Vec<crate::policy::ProcessObs>,
    /// The device plugin's allocations, as last read (the server reads the file).
    allocations: AllocationFile,
    /// Something other than a queue's busy edge changed since the last decision (a process
    /// came or went, a registry, a control request, a reload, a failed command): the next
    /// decision looks at everything.
    full_due: bool,
    /// Queue edges (pid, queue, busy) since the last decision, for the edge decision.
    edges_pending: Vec<(Pid, crate::ids::QueueId, bool)>,
    /// The edge decision's commands, per process: kept between
    /// decisions so an edge allocates nothing for them.
    edge_steps: Vec<edge::EdgeStep>,
    /// Direct edges: the boards and their slots (`direct.rs`).
    direct: direct::Direct,
    /// Commands sent whose bookkeeping (awaiting acks, preempts and class counts) is not done
    /// yet: done by [`NodeState::account`], after the decision's commands are written.
    sent_log: sent::SentLog,
    /// The edge decision's policy decision, kept between edges (its vectors keep their
    /// capacity).
    edge_decision: crate::policy::Decision,
    /// The processes that can be or go stale until the next full decision (busy edges on, or
    /// stale already): an edge decision checks these alone.
    stale_candidates: Vec<Pid>,
    /// The edge decision's patched queues, kept between edges.
    edge_buf: Vec<crate::policy::QueueEdge>,
}

impl NodeState {
    /// A node with `cfg`, GPU partitions `partitions`, and a note on what a priority buys on
    /// this kernel.
    pub fn new(
        cfg: AgentConfig,
        partitions: Vec<PartitionObs>,
        priority_note: String,
        now: Instant,
    ) -> Result<NodeState, crate::policy::PolicyError> {
        Ok(NodeState {
            policy: Policy::new(cfg.policy.clone())?,
            cfg,
            partitions,
            priority_note,
            procs: BTreeMap::new(),
            left_alone: BTreeMap::new(),
            waiters: Waiters::default(),
            seq: 0,
            started: now,
            next_decide: None,
            retry_next: None,
            counters: Counters::default(),
            preempts: Preempts::default(),
            decision_us: Samples::default(),
            decide_us: Samples::default(),
            ack_us: Samples::default(),
            rec: Recorder::default(),
            busy_periods: BTreeMap::new(),
            next_renew: None,
            observed: Vec::new(),
            allocations: AllocationFile::default(),
            full_due: true,
            edges_pending: Vec::new(),
            edge_steps: Vec::new(),
            direct: direct::Direct::default(),
            sent_log: sent::SentLog::default(),
            edge_decision: crate::policy::Decision::default(),
            edge_buf: Vec::new(),
            stale_candidates: Vec::new(),
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
        self.reclassify("the reloaded configuration");
        self.counters.reloads += 1;
        Ok(())
    }

    /// Replaces the device plugin's allocations (the file changed); the processes that claim
    /// one are classified again.
    pub fn set_allocations(&mut self, file: AllocationFile) {
        if file == self.allocations {
            return;
        }
        self.allocations = file;
        self.reclassify("the device plugin's allocations");
    }

    /// True when some process carries a `KFDQ_ALLOCATION` (the server then watches the file).
    pub fn has_claims(&self) -> bool {
        self.procs.values().any(|p| p.id.claim != Claim::None)
    }

    /// Classifies every process again (after `what` changed); a process it moves says so.
    fn reclassify(&mut self, what: &str) {
        self.full_due = true;
        for p in self.procs.values_mut() {
            let before = p.class().to_owned();
            let refused_before = p.classified.refused.clone();
            p.cap = cap_of(&self.cfg, &self.allocations, &p.id.claim);
            p.classified = classify(&self.cfg, &p.id, p.requested.as_deref(), p.cap.as_ref());
            let over_cap = |c: &str| {
                p.cap.as_ref().is_some_and(|cap| {
                    let rank = |n: &str| self.cfg.rule(n).map_or(0, |r| r.rank);
                    rank(c) > rank(&cap.class)
                })
            };
            if p.class_override
                .as_deref()
                .is_some_and(|c| self.cfg.class(c).is_none() || over_cap(c))
            {
                p.class_override = None;
            }
            // A process this moved says so in `kfdq status` (and the log).
            if p.class() != before {
                let note = format!(
                    "class {before} -> {} by {what} ({})",
                    p.class(),
                    p.classified.reason
                );
                p.warn(note);
            }
            if let Some(r) = p.classified.refused.clone()
                && refused_before.as_ref() != Some(&r)
            {
                p.warn(r);
            }
        }
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

    /// When [`NodeState::decide`] must run again even if nothing arrives.
    pub fn deadline(&self) -> Option<Instant> {
        [
            self.next_decide,
            self.waiters.deadline(),
            self.next_renew,
            self.direct.revisit,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// The lease every preemption carries, for the shims' welcome.
    pub fn lease_ms(&self) -> u32 {
        u32::try_from(self.cfg.lease.as_millis()).unwrap_or(u32::MAX)
    }

    /// The pid a shim connection belongs to.
    pub fn pid_of(&self, conn: ConnId) -> Option<Pid> {
        self.procs
            .iter()
            .find(|(_, p)| p.conn == conn)
            .map(|(pid, _)| *pid)
    }

    /// A connection was refused at accept: its uid held `[agent] max_connections_per_uid`.
    /// Returns how many were, so far.
    pub fn uid_connection_refused(&mut self) -> u64 {
        self.counters.uid_connections_refused += 1;
        self.counters.uid_connections_refused
    }

    /// The connection of `pid`'s session (its shim's or the tracer's).
    pub fn conn_of(&self, pid: Pid) -> Option<ConnId> {
        self.procs.get(&pid).map(|p| p.conn)
    }

    /// A shim said hello on `conn`. `Err` is the refusal to send. A process the tracer
    /// controls is handed to its shim (the shim wins): `out` gets the [`Out::Untrace`].
    pub fn hello(
        &mut self,
        conn: ConnId,
        id: Identity,
        version: u32,
        class: Option<String>,
        claimed_pid: Pid,
        out: &mut Vec<Out>,
    ) -> Result<(), HelloError> {
        if version != crate::proto::VERSION {
            return Err(HelloError::Version { version });
        }
        if id.pid == Pid(0) {
            return Err(HelloError::NoPid);
        }
        if claimed_pid != id.pid {
            tracing::debug!(
                pid = %id.pid,
                claimed_pid = %claimed_pid,
                "the shim's pid differs from SO_PEERCRED's (another pid namespace); using SO_PEERCRED's"
            );
        }
        match self.procs.get(&id.pid) {
            Some(old) if old.via == Control::Tracer => out.push(Out::Untrace(
                old.conn,
                "its shim connected to the agent (the shim controls it from now on)".into(),
            )),
            // An earlier session of this pid (a reconnect whose old connection is still
            // open, or a process that exited and whose pid was reused): it ends here, as if
            // its connection had closed — its board slot freed, its waiters told — and the
            // server closes that connection (`Server::hello`).
            Some(old) if old.conn != conn => {
                let (old_conn, same) = (old.conn, old.id.start == id.start);
                self.counters.replaced_sessions += 1;
                tracing::warn!(
                    pid = %id.pid,
                    "a second hello for this pid ({}): the earlier session (connection {old_conn}) is closed",
                    if same { "the same process" } else { "another process since" }
                );
                self.gone(old_conn, out);
            }
            _ => {}
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
        let cap = cap_of(&self.cfg, &self.allocations, &id.claim);
        let c = classify(&self.cfg, id, requested, cap.as_ref());
        (self.cfg.control(&c.class) == Control::Tracer).then_some(c.class)
    }

    /// True when `pid` is connected through its shim or traced.
    pub fn knows(&self, pid: Pid) -> bool {
        self.procs.contains_key(&pid)
    }

    /// The tracer could not take `pid` (of class `class`): shown by `kfdq status` until
    /// [`NodeState::forget_left_alone`] drops it.
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
    pub fn forget_left_alone(&mut self, keep: impl Fn(Pid) -> bool) {
        self.left_alone.retain(|pid, _| keep(*pid));
    }

    fn insert(&mut self, conn: ConnId, via: Control, id: Identity, class: Option<String>) {
        let cap = cap_of(&self.cfg, &self.allocations, &id.claim);
        let classified = classify(&self.cfg, &id, class.as_deref(), cap.as_ref());
        let pid = id.pid;
        tracing::info!(pid = %pid, uid = id.uid, exe = %id.exe, class = %classified.class, control = via.name(), "process connected ({})", classified.reason);
        let p = Proc::new(conn, via, id, class, classified, cap);
        self.procs.insert(pid, p);
        self.full_due = true;
    }

    /// A shim's connection (or a tracer session) ended: the process exited, or its shim
    /// stopped (it released everything on its side), or the tracer let it go. Forgets it.
    pub fn gone(&mut self, conn: ConnId, out: &mut Vec<Out>) {
        let Some(pid) = self.pid_of(conn) else {
            return;
        };
        if let Some(p) = self.procs.remove(&pid) {
            self.direct_gone(pid, &p, out);
        }
        self.policy.forget(pid);
        self.full_due = true;
        tracing::info!(pid = %pid, "disconnected; forgotten");
        self.waiters.process_gone(pid, out);
    }

    /// A control client went away: drop its waiters.
    pub fn control_gone(&mut self, conn: ConnId) {
        self.waiters.control_gone(conn);
    }

    fn now_ns(&self, now: Instant) -> u64 {
        now.duration_since(self.started).as_nanos() as u64
    }

    /// Commands not yet acknowledged.
    pub fn unacknowledged(&self) -> usize {
        self.procs.values().map(|p| p.pending.len()).sum::<usize>() + self.unrecorded()
    }
}

/// Why a shim's hello was refused (sent to it as [`crate::proto::AgentMsg::Refused`]'s reason).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HelloError {
    /// Another protocol version.
    #[error(
        "protocol version {version} is not the agent's {}: run a shim and an agent from the same kfdq release",
        crate::proto::VERSION
    )]
    Version {
        /// The shim's version.
        version: u32,
    },
    /// SO_PEERCRED gave no pid.
    #[error("the agent cannot tell which process this is (SO_PEERCRED gave no pid)")]
    NoPid,
    /// The process that opened the connection exited before it said hello (its pid may
    /// name another process now): nobody's session.
    #[error(
        "the process that connected (pid {pid}) exited before this hello (the pid is free or another process's now): connect from the process itself"
    )]
    Exited {
        /// The connecting process's pid.
        pid: Pid,
    },
}
