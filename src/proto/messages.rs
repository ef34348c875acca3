//! Message types of the control protocol.

use serde::{Deserialize, Serialize};

use crate::ids::{GpuId, Pid, QueueId};
pub use crate::policy::Level;

/// Which streams or queues a command addresses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "ids")]
pub enum Target {
    /// Every managed stream / queue of the process.
    All,
    /// Streams by the shim's stream id (see [`StreamInfo::stream_id`]).
    Streams(Vec<u64>),
    /// KFD queues by queue id.
    Queues(Vec<QueueId>),
}

/// A stream as the shim manages it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamInfo {
    /// Shim-assigned id, stable for the process's life. 0 is the null stream.
    pub stream_id: u64,
    /// What kind of stream.
    pub kind: StreamKind,
    /// The `hipStream_t` value (an address; 0 for the null stream).
    pub handle: u64,
    /// HIP priority the application asked for (-1 greatest .. 1 least), if any.
    pub hip_priority: Option<i32>,
    /// KFD queue backing it, once known.
    pub queue_id: Option<QueueId>,
    /// Library that created it (file name), when not the main program.
    pub creator: Option<String>,
    /// Held at level 1 right now.
    pub held: bool,
    /// Calls on this stream waiting in the shim for a level-1 release right now (0 in
    /// registries written before this field existed).
    #[serde(default)]
    pub held_calls: u32,
}

/// Stream kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StreamKind {
    /// The null (legacy default) stream.
    Null,
    /// A per-thread default stream (`hipStreamPerThread`, `_spt` entry points).
    PerThread,
    /// A stream the application or a library created.
    Created,
}

/// A KFD queue as the shim observed it through CREATE_QUEUE.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueInfo {
    /// KFD queue id.
    pub queue_id: QueueId,
    /// GPU node.
    pub gpu_id: GpuId,
    /// Priority the runtime asked for.
    pub requested_priority: u32,
    /// Priority in effect (after the class mapping).
    pub effective_priority: u32,
    /// Ring address.
    pub ring_base: u64,
    /// Ring bytes.
    pub ring_size: u32,
    /// Streams mapped onto it (more than one = shared queue, reported).
    pub streams: Vec<u64>,
    /// Deactivated by the shim (level 2).
    pub deactivated: bool,
    /// Suspended by the shim (level 3).
    pub suspended: bool,
    /// Busy (write index ahead of read index) at the last sample.
    pub busy: bool,
    /// Launches that waited at the in-flight window on this queue (see [`Registry::window`]).
    #[serde(default)]
    pub window_waits: u64,
    /// Waits that gave up because the queue's read index stalled (the launch went on).
    #[serde(default)]
    pub window_stalls: u64,
}

impl QueueInfo {
    /// Queue `queue_id` on `gpu_id` at these priorities, as a registry shows a queue that
    /// was just created: no ring known (address and size 0), no streams, nothing applied,
    /// idle, no window waits. Set the other fields with struct update syntax.
    pub fn new(
        queue_id: QueueId,
        gpu_id: GpuId,
        requested_priority: u32,
        effective_priority: u32,
    ) -> QueueInfo {
        QueueInfo {
            queue_id,
            gpu_id,
            requested_priority,
            effective_priority,
            ring_base: 0,
            ring_size: 0,
            streams: Vec::new(),
            deactivated: false,
            suspended: false,
            busy: false,
            window_waits: 0,
            window_stalls: 0,
        }
    }
}

/// The shim's whole view of its process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Registry {
    /// Process id.
    pub pid: Pid,
    /// Class name (`KFDQ_CLASS`), if any.
    pub class: Option<String>,
    /// Streams.
    pub streams: Vec<StreamInfo>,
    /// Queues.
    pub queues: Vec<QueueInfo>,
    /// Warnings the shim raised (clamped priorities, shared queues, errors that stopped control).
    pub warnings: Vec<String>,
    /// In-flight window: at most this many AQL packets outstanding per compute queue; a launch
    /// beyond it waits in its wrapper. `None`: unbounded.
    #[serde(default)]
    pub window: Option<u32>,
    /// Leases that ran out in this process (the shim released everything on its own; see
    /// [`AgentMsg::Welcome`]'s `lease_ms`).
    #[serde(default)]
    pub lease_expiries: u64,
    /// Releases of a queue (reactivate, resume) the kernel refused; the shim retries each with
    /// backoff until it holds.
    #[serde(default)]
    pub release_failures: u64,
}

/// The CUs a partition's queues may use.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CuMask {
    /// The partition.
    pub gpu_id: GpuId,
    /// Bit i of word i/32 = CU i (SET_CU_MASK's layout; 32 bits per word).
    pub words: Vec<u32>,
}

pub use crate::policy::class::MAX_WINDOW;

/// Messages from the shim to the agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "type")]
pub enum ShimMsg {
    /// First message.
    Hello {
        /// Protocol version ([`super::VERSION`]).
        version: u32,
        /// Process id.
        pid: Pid,
        /// Executable path.
        exe: String,
        /// `KFDQ_CLASS`.
        class: Option<String>,
        /// `KFDQ_PRIORITY`.
        priority: Option<u32>,
    },
    /// The registry changed (stream created, queue created or destroyed, mapping learned).
    Registry(Registry),
    /// A queue became busy or idle.
    Activity {
        /// Queue id.
        queue_id: QueueId,
        /// Busy now.
        busy: bool,
    },
    /// This line carries (`SCM_RIGHTS`) one end of a `SOCK_SEQPACKET` pair: the process's
    /// doorbell. While the agent has busy edges on for it, the launch that makes it busy sends
    /// one small message there instead of waking its control thread; the agent takes that as a
    /// busy edge of the process's queues and answers [`AgentMsg::Rang`]. The agent answers
    /// [`AgentMsg::DoorbellTaken`]; a launch before that rings nothing (the shim's next activity
    /// sample reports it).
    Doorbell {},
    /// The process applied (`level`) or undid (`None`) its subscription's level on its own,
    /// from the edge board ([`AgentMsg::Watch`]): no command of the agent's caused it. `ok`
    /// false: the kernel refused it (`detail` says why; the process runs).
    SelfLevel {
        /// The board it watched.
        board: u32,
        /// The level now applied by the watch; `None`: released.
        level: Option<Level>,
        /// Did it take effect.
        ok: bool,
        /// What happened.
        detail: String,
    },
    /// The process mapped its edge board ([`AgentMsg::BoardWriter`]) and sealed it against
    /// every later write (`F_SEAL_FUTURE_WRITE`): the agent checks the seal and only then
    /// passes the board to watchers.
    BoardSealed {
        /// The board.
        board: u32,
    },
    /// A request hint (docs/shim.md, "Request hints"): `on`, the application said a request
    /// is starting (`kfdq_request_begin`) and no hint of the process had been open; off, its
    /// last open hint ended (`kfdq_request_end`) or the shim expired it (`expired`: no work
    /// followed within the class's `hint_timeout_ms`). While on, the agent takes the process's
    /// queues as busy — for at most `hint_timeout_ms` without work, whatever the shim says
    /// (`src/agent/node/hint.rs`). Repeated while on, as busy reports are
    /// ([`super::BUSY_RENEW_PERIOD`]). Sent only to an agent that allowed hints
    /// ([`AgentMsg::Edges`]'s `hint_timeout_ms`).
    Hint {
        /// A hint is open.
        on: bool,
        /// Off because the shim expired it (not ended by the application).
        #[serde(default)]
        expired: bool,
    },
    /// Answer to a command.
    Ack {
        /// The command's `seq`.
        seq: u64,
        /// Did it take effect.
        ok: bool,
        /// What happened, or why not (names the rule and the fix).
        detail: String,
    },
}

/// Messages from the agent to the shim.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "type")]
pub enum AgentMsg {
    /// Answer to hello.
    Welcome {
        /// Protocol version.
        version: u32,
        /// Every preemption this agent orders holds only for this long unless renewed
        /// ([`AgentMsg::Renew`]): a shim whose lease runs out releases its process on its own
        /// (an agent that hangs cannot starve it). `None` (an agent before leases): no lease.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        lease_ms: Option<u32>,
    },
    /// The agent will not talk to this shim (version mismatch, not authorised).
    Refused {
        /// Why.
        reason: String,
    },
    /// Apply `level` to `target`.
    Preempt {
        /// Sequence number echoed in the ack.
        seq: u64,
        /// Level 1, 2 or 3.
        level: Level,
        /// What to preempt.
        target: Target,
        /// Level 3 grace period in units of 1K GPU clocks (0 = at once).
        #[serde(default)]
        grace_period: u32,
    },
    /// Undo `level` on `target`.
    Release {
        /// Sequence number echoed in the ack.
        seq: u64,
        /// Level 1, 2 or 3.
        level: Level,
        /// What to release.
        target: Target,
    },
    /// Set the KFD priority of queues (level 0).
    SetPriority {
        /// Sequence number echoed in the ack.
        seq: u64,
        /// Queues.
        target: Target,
        /// 0..=15.
        priority: u32,
    },
    /// The agent could not take a message (malformed, oversized, truncated); the session goes on.
    Error {
        /// What was wrong.
        detail: String,
    },
    /// Confine queues to CUs (a class's CU share), per partition.
    SetCuMask {
        /// Sequence number echoed in the ack.
        seq: u64,
        /// Queues.
        target: Target,
        /// One mask per partition; queues on other partitions are left alone.
        masks: Vec<CuMask>,
    },
    /// Bound the process's in-flight work: at most `dispatches` AQL packets outstanding per
    /// compute queue (`None`: unbounded). A class setting of preemptible classes.
    SetWindow {
        /// Sequence number echoed in the ack.
        seq: u64,
        /// The window, 1..=[`MAX_WINDOW`].
        dispatches: Option<u32>,
    },
    /// Ask for a [`ShimMsg::Registry`].
    Query {
        /// Sequence number echoed in the ack.
        seq: u64,
    },
    /// The process's preemptions hold for another lease ([`AgentMsg::Welcome`]'s `lease_ms`)
    /// from now. Not acknowledged.
    Renew {},
    /// Report busy edges at once (`on`): the process's class preempts others, so the launch that
    /// makes one of its queues busy wakes the shim's control thread, which reports the edge
    /// without waiting for the activity period, and samples every [`super::BUSY_SAMPLE_PERIOD`]
    /// while a queue is busy. Not acknowledged.
    Edges {
        /// Report edges (else: sample at the activity period only).
        on: bool,
        /// With `on`: request hints are allowed (`kfdq_request_begin`, [`ShimMsg::Hint`]), and
        /// a hint not followed by work expires after this many ms (the class's
        /// `hint_timeout_ms`). `None`: hints are refused (an agent before hints, or edges off).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        hint_timeout_ms: Option<u32>,
    },
    /// The doorbell of [`ShimMsg::Doorbell`] was taken: launches may ring it. Not acknowledged.
    DoorbellTaken {},
    /// The doorbell rang and was taken as a busy edge of every queue of the process: the shim
    /// samples now and reports the current state of each queue (an idle one included), so that
    /// an idle edge the agent read before the ring is said again after it. Not acknowledged.
    Rang {},
    /// This line carries (`SCM_RIGHTS`) a WRITABLE descriptor of edge board `board`
    /// (`super::board`): the launch that makes the process busy adds one to slot `slot` and
    /// wakes the board's watchers instead of ringing its doorbell; the control thread adds one
    /// again when every queue is idle. Not acknowledged.
    BoardWriter {
        /// The board (the process's own: one per writer).
        board: u32,
        /// The process's own slot.
        slot: u32,
    },
    /// This line carries (`SCM_RIGHTS`) a READ-ONLY descriptor of edge board `board`: while a
    /// watched slot is busy the process applies `level` to all its queues itself, and undoes
    /// it by `release` once every watched slot is idle. Replaces an earlier watch of the same
    /// board. The watch ends with the session, with [`AgentMsg::Unwatch`], and when the lease
    /// ([`AgentMsg::Welcome`]'s `lease_ms`, renewed by [`AgentMsg::Renew`]) runs out.
    /// Not acknowledged; the process says what it did with [`ShimMsg::SelfLevel`].
    Watch {
        /// The board.
        board: u32,
        /// The slots of the writers that preempt this process (their partitions overlap).
        slots: Vec<u32>,
        /// The level its class is preempted at.
        level: Level,
        /// Level 3 grace period in units of 1K GPU clocks (as [`AgentMsg::Preempt`]'s).
        #[serde(default)]
        grace_period: u32,
        /// When to release once every watched slot is idle (boxed: it is the largest field of
        /// any message, and every queued message is as large as the largest).
        release: Box<WatchRelease>,
        /// Least time between two changes of its level (the policy's
        /// `min_preempt_interval`), ns.
        min_interval_ns: u64,
    },
    /// Stop watching `board`, releasing what the watch applied. Not acknowledged.
    Unwatch {
        /// The board.
        board: u32,
    },
    /// The agent changed a board (cleared the slot of a writer that went away or went stale):
    /// watchers look again. Not acknowledged.
    BoardChanged {},
}

/// The release rule a watch applies (the policy's, `crate::policy::release`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "rule")]
pub enum WatchRelease {
    /// Release this long after the idle edge.
    Hysteresis {
        /// The hold, ns.
        hold_ns: u64,
    },
    /// The cost rule, with the process's round trip (the policy's `C` times the device-wide
    /// preempts its level costs it).
    Cost {
        /// The process's round trip, ns.
        round_trip_ns: u64,
        /// `k`.
        k: f64,
        /// `epsilon`.
        epsilon: f64,
        /// Cap, ns.
        max_hold_ns: u64,
        /// Gaps remembered.
        history: u32,
        /// Gaps before the history is trusted.
        min_history: u32,
    },
}
