//! What a simulated run is given (the setup, the host's timings, how kfdq controls the
//! LP job) and what it returns.

use gfx_model::{Contention, Params, Shape as GpuShape};
use kfdq::policy::PolicyConfig;
use kfdq::proto::Level;
use serde::Serialize;

use crate::timeline::Timeline;
use crate::workload::Workload;

/// The host side's timings. Each is a named parameter; docs/experiments.md gives its source or
/// the reason for the guess, and the scenarios show the sensitivity to the guessed ones.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct HostParams {
    /// From a request's arrival to its first packet in the ring (the application's launch
    /// call). Guess: 5 µs, a hipLaunchKernel on ROCm 6.
    pub launch_ns: u64,
    /// The shim's activity sampling period: `KFDQ_ACTIVITY_US`'s default, 2 ms (sampled
    /// configurations: every queue; edge configurations: the LP queue).
    pub activity_ns: u64,
    /// Edge configurations: from the launch that makes the HP queue busy (or the sample that
    /// finds it drained) to the agent's decision starting. Guess: 50 µs, an eventfd wake of the
    /// shim's control thread and one message on the agent's socket; the emulator's measured
    /// chain replaces it (docs/experiments.md).
    pub edge_ns: u64,
    /// Edge configurations: the shim's sampling period while the HP queue is busy, for its idle
    /// edge: 100 µs, the shim's fine sampling (issue 27's design).
    pub busy_sample_ns: u64,
    /// The agent's decision: measured 79 µs p50 (docs/performance.md, decision latency).
    pub decision_ns: u64,
    /// The command's trip to the shim and into its ioctl. Guess: 100 µs, a socket write and
    /// a wake-up on a busy node.
    pub command_ns: u64,
    /// GPU clock for the level-3 grace period (units of 1K clocks): 2.1 GHz, MI300X's peak
    /// engine clock.
    pub gpu_clock_ghz: f64,
    /// Hinted configurations: how long before a request's first launch its hint comes (the
    /// application's host work between knowing of a request and launching it). Default 500 µs,
    /// issue 51's target row (a server's parse, decode and copy is typically a millisecond or
    /// more); swept (`--sweep hint-lead`).
    pub hint_lead_ns: u64,
    /// Hinted configurations: a hint not followed by work within this expires (the product's
    /// per-class `hint_timeout_ms`). Default: the product's, `kfdq::proto::DEFAULT_HINT_TIMEOUT`
    /// (50 ms; docs/shim.md says why): the longest lead swept (2 ms) is far inside it, so no
    /// honest hint expires at either bound, and the lab shows what the product would.
    pub hint_timeout_ns: u64,
}

impl HostParams {
    /// The direct path's host side as measured on kfd-emu (docs/experiments.md, "With the
    /// direct path's host path"; docs/performance.md, "Reaction chain", "Stages", 27 November
    /// 2026): the launch's board edge wakes the batch job's watch thread 72 µs later
    /// (`launch_to_watcher` p50, median of four runs), no agent decision, and its first ioctl
    /// 30 µs after that (`watcher_to_ioctl`); the emulator's own ioctl path is left out.
    pub fn direct() -> Self {
        HostParams {
            edge_ns: 72_000,
            decision_ns: 0,
            command_ns: 30_000,
            ..HostParams::default()
        }
    }
}

impl Default for HostParams {
    fn default() -> Self {
        HostParams {
            launch_ns: 5_000,
            activity_ns: 2_000_000,
            edge_ns: 50_000,
            busy_sample_ns: 100_000,
            decision_ns: 80_000,
            command_ns: 100_000,
            gpu_clock_ghz: 2.1,
            hint_lead_ns: 500_000,
            hint_timeout_ns: kfdq::proto::DEFAULT_HINT_TIMEOUT.as_nanos() as u64,
        }
    }
}

/// What controls the two jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Control {
    /// The job alone (the baseline of every ratio).
    Alone,
    /// Both at the runtime's default priority, no agent.
    Native,
    /// The classes' priorities, the agent running, no preemption.
    PriorityOnly,
    /// The agent preempting the LP class at this level, told of the HP queue by the shim's
    /// samples, releasing after the fixed hysteresis (kfdq before issue 27).
    Level(Level),
    /// The agent preempting the LP class at this level, told of the HP queue's busy and idle
    /// edges, releasing by the classes' release rule (the cost rule unless the configuration
    /// sets `hysteresis_ms`).
    Edge(Level),
    /// [`Control::Edge`], and the latency process hints each request before its first launch
    /// (`HostParams::hint_lead_ns`), holding its busy edge until the request ends.
    Hinted(Level),
}

impl Control {
    /// Its name in tables.
    pub fn name(self) -> &'static str {
        match self {
            Control::Alone => "alone",
            Control::Native => "native",
            Control::PriorityOnly => "priority",
            Control::Level(Level::Hold) => "level 1",
            Control::Level(Level::Deactivate) => "level 2",
            Control::Level(Level::Suspend) => "level 3",
            Control::Edge(Level::Hold) => "level 1 edge",
            Control::Edge(Level::Deactivate) => "level 2 edge",
            Control::Edge(Level::Suspend) => "level 3 edge",
            Control::Hinted(Level::Hold) => "level 1 hinted",
            Control::Hinted(Level::Deactivate) => "level 2 hinted",
            Control::Hinted(Level::Suspend) => "level 3 hinted",
        }
    }

    pub(super) fn agent(self) -> bool {
        matches!(
            self,
            Control::PriorityOnly | Control::Level(_) | Control::Edge(_) | Control::Hinted(_)
        )
    }

    /// The level it preempts at, if it preempts.
    pub fn level(self) -> Option<Level> {
        match self {
            Control::Level(l) | Control::Edge(l) | Control::Hinted(l) => Some(l),
            _ => None,
        }
    }
}

/// One run's inputs.
#[derive(Debug, Clone)]
pub struct Setup {
    /// The latency-critical job (open-loop arrivals).
    pub hp: Option<Workload>,
    /// The batch job (closed loop).
    pub lp: Option<Workload>,
    /// What controls them.
    pub control: Control,
    /// The classes (from a `kfdq.toml` or kfdq's built-in ones); the LP class's level is
    /// replaced by the control's.
    pub policy: PolicyConfig,
    /// The HP job's class.
    pub hp_class: String,
    /// The LP job's class.
    pub lp_class: String,
    /// Level-3 grace period (units of 1K GPU clocks), `[agent] grace_period`.
    pub grace_period: u32,
    /// The partition.
    pub gpu: GpuShape,
    /// The partition model's parameters.
    pub params: Params,
    /// The model's contention terms, if on.
    pub contention: Option<Contention>,
    /// The host side.
    pub host: HostParams,
    /// HP requests to complete (with an HP job); the run ends with the last one.
    pub requests: usize,
    /// Simulated time of a run without an HP job.
    pub duration_ns: u64,
    /// Seed of the arrivals and the sampling phase.
    pub seed: u64,
    /// Record the run's [`Timeline`] (LP completions, preempts and releases) for plots.
    pub timeline: bool,
}

/// What a run measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunResult {
    /// HP request latencies (arrival to its last kernel's end), µs, in arrival order.
    pub hp_latency_us: Vec<f64>,
    /// LP kernels completed.
    pub lp_kernels: u64,
    /// Simulated time, ns.
    pub elapsed_ns: u64,
    /// Device-wide preempts (runlist updates while a queue was mapped).
    pub device_preempts: u64,
    /// Preemption latencies, µs: from the decision to the LP queue off the hardware (levels
    /// 2-3: the runlist update done; level 1: the LP queue drained).
    pub preempt_latency_us: Vec<f64>,
    /// Reactions, µs: from the HP queue getting work while the LP job is on the GPU (its launch,
    /// or an LP release while it is busy) to the LP job off the GPU, as above.
    pub reaction_us: Vec<f64>,
    /// Such episodes that ended (the HP queue drained) before the LP job was off the GPU.
    pub reactions_missed: u64,
    /// Time the HP queue had work (packets not yet completed), ns; `None` where not measured
    /// (`preempt-lab run`).
    pub hp_busy_ns: Option<u64>,
    /// Dispatches completed (both jobs): the simulation's unit of work.
    pub completions: u64,
    /// Hints that expired before work followed them (hinted configurations).
    pub hints_expired: u64,
    /// Work-group starts and ends the partition model accounted for.
    pub wg_events: u64,
    /// Batch starts and ends the partition model processed (its cost; a batch is work-groups
    /// that start together and end together).
    pub batch_events: u64,
    /// LP completions and preempt marks over time, when the setup asked for them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeline: Option<Timeline>,
}

/// Errors in a setup.
#[derive(Debug, thiserror::Error, PartialEq)]
#[non_exhaustive]
pub enum SetupError {
    /// The policy refused the configuration.
    #[error("{0}")]
    Policy(String),
    /// A class the jobs need is missing.
    #[error("class {0:?} is not in the configuration (its classes: {1})")]
    NoClass(String, String),
    /// A job with the wrong arrival kind.
    #[error("{0}")]
    Arrival(String),
}
