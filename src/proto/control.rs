//! The control side of the protocol: what `kfdq` (the CLI, or any script) asks the agent, and
//! the agent's answers. Same socket and framing as the shims; a connection that does not open
//! with a shim's hello is a control connection, one request line answered by one reply line,
//! as many times as the client likes.

use serde::{Deserialize, Serialize};

use super::Level;
use crate::ids::{GpuId, Pid, QueueId};

/// A control request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "type")]
pub enum Request {
    /// The whole node: partitions, classes, processes, counters.
    Status,
    /// Set the KFD queue priority (0..=15) of every queue of a process (level 0).
    SetPriority {
        /// Target process.
        pid: Pid,
        /// 0..=15.
        priority: u32,
    },
    /// Preempt a process at `level` until [`Request::Resume`] (overrides the policy).
    Suspend {
        /// Target process.
        pid: Pid,
        /// Level 1, 2 or 3.
        level: Level,
    },
    /// Undo [`Request::Suspend`]: the policy decides for the process again.
    Resume {
        /// Target process.
        pid: Pid,
    },
    /// Move a process to another class (until it exits).
    SetClass {
        /// Target process.
        pid: Pid,
        /// Class name from the agent's configuration.
        class: String,
    },
    /// What class a process of the requester would get if it asked for `class`
    /// (`KFDQ_CLASS`) and ran `exe`: `kfdq run` asks before it executes the command (the
    /// command keeps the requester's pid, user, groups and cgroup). Changes nothing; the
    /// process is classified again from the kernel's view when its shim connects.
    Classify {
        /// The class asked for (`None`: what the rules give).
        #[serde(default)]
        class: Option<String>,
        /// The executable the process will run (`None`: the requester's own).
        #[serde(default)]
        exe: Option<String>,
    },
}

/// The agent's answer to a [`Request`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "type")]
pub enum Reply {
    /// Answer to [`Request::Status`].
    Status(Box<NodeStatus>),
    /// The request took effect.
    Done {
        /// What happened.
        detail: String,
    },
    /// The request was refused or failed; nothing changed.
    Error {
        /// Why, naming the rule broken and the fix.
        error: String,
    },
    /// Answer to [`Request::Classify`].
    Class(Box<ClassAnswer>),
}

/// The class a process would get ([`Request::Classify`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClassAnswer {
    /// The class it would be in.
    pub class: String,
    /// Why (the matching rule, the default class, or `KFDQ_CLASS=...`).
    pub reason: String,
    /// The class asked for was not granted: why, with the fix.
    #[serde(default)]
    pub refused: Option<String>,
    /// The class's KFD queue priority.
    pub priority: u8,
    /// How the class is preempted (`None`: never).
    #[serde(default)]
    pub level: Option<Level>,
    /// The class's hardware queues per priority pool (`None`: the shim's default).
    #[serde(default)]
    pub hw_queues: Option<u32>,
}

/// The agent's view of the node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct NodeStatus {
    /// Agent process id.
    pub agent_pid: Pid,
    /// kfdq version of the agent.
    pub version: String,
    /// Configuration file in effect (`None`: the built-in defaults).
    pub config: Option<String>,
    /// Seconds since the agent started.
    pub uptime_s: f64,
    /// What a queue priority buys on this kernel.
    pub priority_note: String,
    /// GPU partitions.
    pub partitions: Vec<PartitionStatus>,
    /// Configured classes, highest rank first.
    pub classes: Vec<ClassStatus>,
    /// Connected GPU processes, by pid.
    pub processes: Vec<ProcessStatus>,
    /// GPU processes of a tracer class the agent could not take, and why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub left_alone: Vec<LeftAlone>,
    /// Counters since start.
    pub counters: Counters,
    /// The release rule in effect, in words (the cost rule with its C; empty from an agent
    /// before this field).
    #[serde(default)]
    pub release: String,
    /// `[agent] calibration` in effect (`None`: C is the configuration's or the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calibration: Option<CalibrationStatus>,
}

/// The calibration file the cost rule's C comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CalibrationStatus {
    /// The file, as the configuration names it.
    pub file: String,
    /// The GPU kind it was measured on (`gfx942`).
    pub gfx_target: String,
    /// Its `preempt_round_trip_ns`: the cost rule's C.
    pub round_trip_ns: u64,
    /// Why its round trip disagrees with its own fit, if it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
}

/// One GPU partition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionStatus {
    /// Topology gpu_id.
    pub gpu_id: GpuId,
    /// Queues the hardware keeps resident.
    pub resident_slots: u32,
    /// Compute units.
    pub cus: u32,
    /// Queues of connected processes on it.
    pub queues: u32,
    /// Of those, busy at the last report.
    pub busy_queues: u32,
    /// Device-wide preempts kfdq caused on it, by the agent's commands and the processes'
    /// own watches (an estimate: one per level-3 preempt or release, one per queue for level 2).
    pub preempts: u64,
}

/// One class.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClassStatus {
    /// Name.
    pub name: String,
    /// Rank (higher runs first).
    pub rank: u8,
    /// KFD priority of its queues.
    pub priority: u8,
    /// How it is preempted (`None`: never).
    pub level: Option<Level>,
    /// Hardware queues per priority pool `kfdq run --class` gives its processes
    /// (`GPU_MAX_HW_QUEUES`); `None`: the shim's default for the class name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hw_queues: Option<u32>,
    /// How the agent controls its processes that run without the shim.
    #[serde(default)]
    pub control: Control,
    /// Connected processes in it.
    pub processes: u32,
    /// Of those, preempted now.
    pub preempted: u32,
    /// Its busy periods (edge to edge) the agent saw, up to the last 4096.
    #[serde(default)]
    pub busy_periods: u64,
    /// Their median length, ms.
    #[serde(default)]
    pub busy_ms_p50: f64,
    /// Their 99th percentile, ms.
    #[serde(default)]
    pub busy_ms_p99: f64,
    /// Time it was busy since the agent started, s.
    #[serde(default)]
    pub busy_s: f64,
    /// Time it had a process preempted since the agent started, s (what protecting the
    /// classes above cost it).
    #[serde(default)]
    pub preempted_s: f64,
}

/// How the agent controls a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Control {
    /// Through its shim session (every level).
    #[default]
    Shim,
    /// As its ptrace tracer, through the debugger API (level 3 only): processes of classes
    /// with `control = "tracer"` that run without the shim.
    Tracer,
}

impl Control {
    /// Lower-case name, as the configuration spells it.
    pub fn name(self) -> &'static str {
        match self {
            Control::Shim => "shim",
            Control::Tracer => "tracer",
        }
    }
}

/// A GPU process of a tracer class the agent could not take.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeftAlone {
    /// Process id.
    pub pid: Pid,
    /// Executable.
    pub exe: String,
    /// Its class.
    pub class: String,
    /// Why (names the rule and the fix).
    pub reason: String,
}

/// One connected GPU process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessStatus {
    /// Process id (from the socket's credentials, or the one the tracer seized).
    pub pid: Pid,
    /// Through its shim or as its tracer.
    #[serde(default)]
    pub control: Control,
    /// Its user.
    pub uid: u32,
    /// Executable.
    pub exe: String,
    /// Class in effect.
    pub class: String,
    /// Why that class (the matching rule).
    pub class_reason: String,
    /// `running`, or the level it is preempted at.
    pub state: String,
    /// The level it is preempted at (`None`: running), as `state` says in words.
    #[serde(default)]
    pub level: Option<Level>,
    /// Why (the policy's reason, or `kfdq suspend`).
    pub reason: String,
    /// Preempted by hand (`kfdq suspend`) at this level.
    pub manual: Option<Level>,
    /// Priority set by hand (`kfdq set-priority`).
    pub priority_override: Option<u32>,
    /// Its queues.
    pub queues: Vec<ProcessQueue>,
    /// Warnings (failed commands, refused class).
    pub warnings: Vec<String>,
    /// The Kubernetes container that holds its allocation (`None`: no allocation, or the
    /// device plugin does not know the container yet).
    #[serde(default)]
    pub pod: Option<crate::allocation::PodRef>,
    /// Its preemptions: preempt commands sent to it and levels its own watches applied.
    #[serde(default)]
    pub preemptions: u64,
    /// Milliseconds it spent preempted, at any level.
    #[serde(default)]
    pub preempted_ms: u64,
    /// Milliseconds any of its queues was busy.
    #[serde(default)]
    pub busy_ms: u64,
}

/// One queue of a connected process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessQueue {
    /// KFD queue id.
    pub queue_id: QueueId,
    /// Partition.
    pub gpu_id: GpuId,
    /// Priority in effect (0 for a traced process: a queue's priority cannot be read from
    /// outside its process).
    pub priority: u32,
    /// Busy at the last report.
    pub busy: bool,
    /// Held, deactivated or suspended by the shim right now (its registry).
    pub preempted: Option<Level>,
}

/// Counters since the agent started.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Counters {
    /// Policy decisions taken.
    pub decisions: u64,
    /// Commands sent to shims.
    pub commands: u64,
    /// Commands a shim answered with a failure.
    pub command_failures: u64,
    /// Device-wide preempts kfdq's commands caused (estimate, see [`PartitionStatus`]).
    pub preempts: u64,
    /// Device-wide preempts per second over the last 10 s.
    pub preempts_per_s: f64,
    /// Malformed, oversized or truncated messages answered with an error.
    pub bad_messages: u64,
    /// Looks for GPU processes without the shim (only with a `control = "tracer"` class).
    #[serde(default)]
    pub tracer_scans: u64,
    /// Connections accepted.
    pub connections: u64,
    /// Decision latency (first message of the triggering batch read -> commands written), µs:
    /// median and 99th percentile of the last 4096 decisions that sent commands.
    pub decision_us_p50: f64,
    /// See `decision_us_p50`.
    pub decision_us_p99: f64,
    /// The agent's own share of it (policy and executor, no socket I/O), µs, median.
    pub decide_us_p50: f64,
    /// See `decide_us_p50`, 99th percentile.
    pub decide_us_p99: f64,
    /// Command round trip (sent -> shim's ack), µs, median of the last 4096.
    pub ack_us_p50: f64,
    /// See `ack_us_p50`, maximum of the last 4096.
    pub ack_us_max: f64,
    /// Configuration reloads (SIGHUP) accepted.
    pub reloads: u64,
    /// Configuration reloads refused (the old configuration stayed).
    pub reload_failures: u64,
    /// Leases that ran out in shims (each released its process on its own: the agent did not
    /// renew in time).
    #[serde(default)]
    pub lease_expiries: u64,
    /// Busy edges received from processes of preempting classes (their launches' reports and
    /// their fine samples while busy).
    #[serde(default)]
    pub busy_edges: u64,
    /// Doorbells taken (`ShimMsg::Doorbell`: shims whose launches report busy edges
    /// themselves).
    #[serde(default)]
    pub doorbells: u64,
    /// Doorbell rings taken as busy edges (processes of preempting classes; `ShimMsg::Doorbell`).
    #[serde(default)]
    pub doorbell_edges: u64,
    /// Doorbell rings ignored: the process's class preempts nobody (busy edges off for it).
    #[serde(default)]
    pub doorbell_ignored: u64,
    /// Busy queues taken as idle because their process said nothing for
    /// [`crate::proto::BUSY_STALE`] (stopped or hung while busy).
    #[serde(default)]
    pub stale_busy: u64,
    /// Releases (reactivate, resume) the kernel refused in shims; each shim retries with
    /// backoff until the release holds.
    #[serde(default)]
    pub release_failures: u64,
    /// Of `decisions`, those taken from queues' busy edges alone (only what the edges changed,
    /// docs/agent.md); the others looked at every process.
    #[serde(default)]
    pub edge_decisions: u64,
    /// Preemptions a subscribed process applied on its own from the edge board (direct
    /// edges, docs/agent.md): the agent sent no command for them.
    #[serde(default)]
    pub direct_preempts: u64,
    /// Releases a subscribed process applied on its own (the board idle for the release
    /// rule's hold, its subscription ended, or the writer's slot cleared).
    #[serde(default)]
    pub direct_releases: u64,
    /// Board slots the agent cleared: the writer went away or its reports went stale while
    /// busy.
    #[serde(default)]
    pub direct_cleared: u64,
    /// Subscriptions sent (a process told to watch a board, or its watch changed).
    #[serde(default)]
    pub direct_subscriptions: u64,
    /// Board slots the agent cleared as forged: busy for long while their writer reported no
    /// busy queue (the writer gets no board again).
    #[serde(default)]
    pub direct_forged: u64,
    /// Queues the shims reported that the kernel does not list for their process (ignored).
    #[serde(default)]
    pub unlisted_queues: u64,
    /// Shim sessions ended by a second hello for the same pid (a reconnect over an open
    /// connection, or a reused pid): the earlier connection closed, its board slot freed.
    #[serde(default)]
    pub replaced_sessions: u64,
    /// Activity reports dropped: for a queue id beyond what the process's registry lists and
    /// the few unregistered ids the agent keeps for it (docs/agent.md, "The agent's
    /// resources").
    #[serde(default)]
    pub activity_dropped: u64,
    /// Connections refused at accept: their uid held `[agent] max_connections_per_uid`.
    #[serde(default)]
    pub uid_connections_refused: u64,
    /// Request hints taken (`ShimMsg::Hint` from a process whose class preempts others;
    /// docs/shim.md, "Request hints").
    #[serde(default)]
    pub hints: u64,
    /// Request hints ignored: the process's class preempts nobody.
    #[serde(default)]
    pub hints_ignored: u64,
    /// Request hints that expired: held `hint_timeout_ms` without work (never followed by
    /// work, or never ended), by the agent's bound or the shim's.
    #[serde(default)]
    pub hint_expiries: u64,
}
