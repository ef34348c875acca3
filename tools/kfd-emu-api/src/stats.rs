//! The HWS model's observable state, as the mount's `kfd-emu/stats.json` shows it (kfd-emu
//! writes it; tests read it).

use serde::{Deserialize, Serialize};

/// Snapshot of the whole emulator.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Stats {
    /// One per topology GPU node, in node order.
    pub partitions: Vec<PartitionStats>,
    /// Every queue of every process, ordered by (pid, queue_id).
    pub queues: Vec<QueueStats>,
    /// Every process with KFD state, ordered by pid.
    pub processes: Vec<ProcessStats>,
    /// The emulator's own threads that died ("name: panic message"); empty while it is sound.
    #[serde(default)]
    pub dead_threads: Vec<String>,
    /// Bytes of the largest FUSE message (request or reply, headers included) the emulator's
    /// `/dev/fuse` proxy carried; 0 without the proxy (`KFD_EMU_FUSE_PROXY=0`, not root).
    #[serde(default)]
    pub fuse_largest_message: u64,
    /// `dev/kfd` ioctls the proxy's reader thread answered itself (`reader_ioctl`); 0 without
    /// the proxy.
    #[serde(default)]
    pub fuse_reader_ioctls: u64,
    /// Such ioctls it passed on to the FUSE workers because another thread held the handle
    /// table or the state lock.
    #[serde(default)]
    pub fuse_reader_ioctls_passed_on: u64,
    /// DBG_TRAP SUSPEND_QUEUES and RESUME_QUEUES a proxy reader thread answered itself after
    /// handing its reading of `/dev/fuse` to the other (`handover`); 0 without the proxy.
    #[serde(default)]
    pub fuse_fast_ioctls: u64,
    /// Such requests passed on to the FUSE workers because the other reader thread was running
    /// one.
    #[serde(default)]
    pub fuse_fast_ioctls_passed_on: u64,
}

/// HWS model of one partition (topology GPU node).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct PartitionStats {
    /// Topology node number.
    pub node: u32,
    /// `gpu_id` of the node.
    pub gpu_id: u32,
    /// XCCs in the partition.
    pub num_xcc: u32,
    /// HQDs per XCC = queues that can be resident at once.
    pub num_cp_queues: u32,
    /// Queues that pass `QUEUE_IS_ACTIVE` (the runlist length).
    pub active_queues: u32,
    /// Active queues currently mapped to HQDs.
    pub resident_queues: u32,
    /// More active queues than `num_cp_queues`: residency is time-sliced.
    pub oversubscribed: bool,
    /// Device-wide preempts (runlist changes while a runlist was mapped).
    pub preempts: u64,
    /// Runlist submissions.
    pub runlist_updates: u64,
    /// Residency rotations of an oversubscribed runlist.
    pub rotations: u64,
    /// Waves context-saved by preempts and rotations (CWSR).
    pub waves_saved: u64,
    /// Saved waves restored.
    pub waves_restored: u64,
    /// Work-group starts and ends the partition model processed.
    pub workgroup_events: u64,
    /// GPU resets after an injected HWS preemption timeout (its queues then show `stopped`).
    #[serde(default)]
    pub resets: u64,
}

/// One user queue.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct QueueStats {
    /// Owning process (tgid).
    pub pid: u32,
    /// Per-process queue id.
    pub queue_id: u32,
    /// `gpu_id` of the queue's node.
    pub gpu_id: u32,
    /// `"compute_aql"`, `"compute_pm4"` or `"sdma"`.
    pub queue_type: String,
    /// Queue priority 0..=15.
    pub priority: u32,
    /// Low byte of the queue percentage.
    pub percentage: u32,
    /// The kernel's `QUEUE_IS_ACTIVE`.
    pub active: bool,
    /// Suspended by the debugger.
    pub suspended: bool,
    /// Currently mapped to an HQD by the HWS model.
    pub resident: bool,
    /// Last SET_CU_MASK words, `None` if never set.
    pub cu_mask: Option<Vec<u32>>,
    /// AQL packets completed by the CP model.
    pub packets_done: u64,
    /// Time during which at least one of its work-groups ran, in ns.
    pub busy_ns: u64,
    /// Its work-groups context-saved by preempts (CWSR).
    pub workgroups_saved: u64,
    /// Read index the CP model published.
    pub read_index: u64,
    /// Last write index the CP model read.
    pub write_index: u64,
    /// Pending exception bits (`KFD_EC_MASK`), e.g. EC_QUEUE_NEW after creation.
    pub exception_status: u64,
    /// Current ring base (0 after UPDATE_QUEUE with a null ring).
    pub ring_base_address: u64,
    /// Current ring size in bytes (after the 1024-byte minimum).
    pub ring_size: u32,
    /// The CP or SDMA engine stopped the queue: its memory could not be read or it held a
    /// packet the emulator does not model.
    #[serde(default)]
    pub stopped: bool,
    /// CLOCK_MONOTONIC times (µs) at which it stopped being runnable — deactivated
    /// (UPDATE_QUEUE) or suspended (DBG_TRAP SUSPEND_QUEUES) — the latest 1024.
    #[serde(default)]
    pub stopped_at_us: Vec<f64>,
    /// CLOCK_MONOTONIC times (µs) at which it became runnable again, the latest 1024.
    #[serde(default)]
    pub runnable_at_us: Vec<f64>,
}

/// One process with KFD state.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct ProcessStats {
    /// Process id (tgid).
    pub pid: u32,
    /// RUNTIME_ENABLE was called.
    pub runtime_enabled: bool,
    /// DBG_TRAP ENABLE is in effect.
    pub debug_enabled: bool,
    /// Debugger process when debugged by another process.
    pub debugger_pid: Option<u32>,
    /// Number of queues of the process.
    pub queues: u32,
    /// Events the process created (CREATE_EVENT) and has not destroyed.
    #[serde(default)]
    pub events: u32,
    /// WAIT_EVENTS calls of the process blocked right now.
    #[serde(default)]
    pub blocked_waits: u32,
    /// DESTROY_QUEUE calls of the process blocked right now on a debugger-suspended queue.
    #[serde(default)]
    pub blocked_destroys: u32,
    /// Open `dev/kfd` handles of the process.
    #[serde(default)]
    pub kfd_opens: u32,
    /// Kernel dispatches by kernel name, for dispatches whose code object was readable (real
    /// programs); the names are what `--kernel-times` takes.
    #[serde(default)]
    pub dispatches_by_kernel: std::collections::BTreeMap<String, u64>,
}
