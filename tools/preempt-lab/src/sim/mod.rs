//! One simulated run: an HP (latency-critical) job and an LP (batch) job on one gfx942
//! partition, in virtual time, with kfdq's policy deciding and a host model carrying its
//! decisions to the GPU.
//!
//! The host model, in the order a preemption takes. How the agent learns that the HP queue went
//! busy or idle depends on the configuration:
//! * **sampled** (`level N`, kfdq before issue 27): the shim samples its queues every
//!   `activity_ns` (a request that starts just after a sample is seen up to a period later),
//!   and lower classes resume after the fixed hysteresis;
//! * **edges** (`level N edge`): the launch that makes the HP queue busy reports it, reaching
//!   the agent `edge_ns` later; while busy, the shim samples it every `busy_sample_ns` and
//!   reports the first sample that finds it drained, `edge_ns` later; lower classes resume by
//!   the classes' release rule (the cost rule by default, docs/policy.md).
//!
//! * **hinted** (`level N hinted`, issue 51): as edges, and the latency process hints each
//!   request `hint_lead_ns` before its first launch: the hint raises the busy edge, and the idle
//!   edge waits for the request's end (or the hint's expiry, `hint_timeout_ns`, when no work
//!   follows it; [`crate::hint`]).
//!
//! Then the agent decides (`decision_ns`) and its command reaches the shim (`command_ns`); the
//! shim holds launches (level 1), or the runlist update deactivates or suspends the LP queue
//! (levels 2 and 3), which the partition model costs as a device-wide preempt with CWSR.
//!
//! The files: `setup` holds what a run is given and what it returns ([`Setup`],
//! [`HostParams`], [`Control`], [`RunResult`]); this file the simulation's state; `build` its
//! construction from a setup; `events` the event loop in virtual time (arrivals, launches,
//! completions, the shim's samples); `host` the agent and the commands it sends (reports,
//! decisions, their application to the LP queue).

mod build;
mod events;
mod host;
mod setup;

pub use setup::{Control, HostParams, RunResult, Setup, SetupError};

use std::collections::{BTreeMap, VecDeque};

use gfx_model::{Footprint, Partition};
use kfdq::GpuId;
use kfdq::policy::{Policy, PolicyConfig, Run};

use crate::hint::Hints;
use crate::rng::Rng;

const HP: u64 = 1;
const LP: u64 = 2;
const GPU: GpuId = GpuId(1);
/// The runtime's default queue priority (HIP's normal stream priority maps to KFD 7).
const DEFAULT_PRIORITY: u8 = 7;

#[derive(Debug, Clone)]
enum Command {
    /// The LP process moves between running and a preemption level.
    Run { from: Run, to: Run, decided: u64 },
    /// A process's queue gets the CU mask its class's `cu_share` gives it (None: every CU).
    CuMask { queue: u64, mask: Option<Vec<u32>> },
}

struct Sim<'a> {
    s: &'a Setup,
    p: Partition,
    policy: Option<Policy>,
    rng: Rng,
    tag: u64,
    // HP
    /// The next request's arrival not yet announced (hinted: its hint comes `lead` before it).
    next_arrival: Option<u64>,
    /// Announced requests not yet arrived.
    announced: VecDeque<u64>,
    /// How long before its arrival a request is announced: the hint lead (hinted), else 0.
    lead: u64,
    hints: Hints,
    next_request: usize,
    arrivals: BTreeMap<u64, u64>,
    /// Last tag of each request in flight -> its arrival.
    hp_last: BTreeMap<u64, u64>,
    // LP
    lp_limit: u32,
    lp_in_flight: u32,
    lp_next_kernel: usize,
    held: bool,
    hold_since: Option<u64>,
    /// The LP queue is in the runlist (not deactivated or suspended).
    lp_active: bool,
    // reactions and the HP busy time
    reaction_from: Option<u64>,
    hp_busy_since: Option<u64>,
    hp_busy_ns: u64,
    // agent
    next_tick: Option<u64>,
    seen: (bool, bool),
    /// Edge configurations: the shim's view of the HP queue (busy since its launch, until a
    /// fine sample finds it drained), the next fine sample, and the reports on their way to the
    /// agent ((arrival, sequence) -> busy).
    edges: bool,
    shim_hp_busy: bool,
    fine_sample: Option<u64>,
    reports: BTreeMap<(u64, u64), bool>,
    policy_due: Option<u64>,
    commands: BTreeMap<(u64, u64), Command>,
    cmd_seq: u64,
    /// The CU mask last sent per queue (policy targets repeat it every decision).
    masks: BTreeMap<u64, Option<Vec<u32>>>,
    r: RunResult,
}

/// What one work-group of a kernel uses of the shared CUs and DRAM.
pub fn footprint(k: &crate::workload::Kernel) -> Footprint {
    Footprint {
        cu_util_permille: k.cu_util_permille,
        dram_bytes: k.dram_bytes,
    }
}

pub(super) fn rule_priority(cfg: &PolicyConfig, class: &str) -> u8 {
    cfg.classes
        .iter()
        .find(|c| c.name == class)
        .map_or(DEFAULT_PRIORITY, |c| c.priority)
}

/// Runs `setup`.
pub fn run(setup: &Setup) -> Result<RunResult, SetupError> {
    let mut sim = Sim::new(setup)?;
    sim.run();
    Ok(sim.r)
}
