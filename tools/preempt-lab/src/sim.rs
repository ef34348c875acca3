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

use std::collections::{BTreeMap, VecDeque};

use gfx_model::{Contention, Dispatch, Edit, Footprint, Params, Partition, Shape as GpuShape};
use kfdq::policy::{
    Observation, PartitionObs, Policy, PolicyConfig, ProcessObs, QueueObs, Release, Run,
};
use kfdq::proto::Level;
use kfdq::{GpuId, Pid, QueueId};
use serde::Serialize;

use crate::hint::Hints;
use crate::rng::Rng;
use crate::timeline::{Mark, Timeline};
use crate::workload::{Arrival, Workload};

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

    fn agent(self) -> bool {
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

fn rule_priority(cfg: &PolicyConfig, class: &str) -> u8 {
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

impl<'a> Sim<'a> {
    fn new(s: &'a Setup) -> Result<Sim<'a>, SetupError> {
        let mut cfg = s.policy.clone();
        for class in [&s.hp_class, &s.lp_class] {
            if !cfg.classes.iter().any(|c| &c.name == class) {
                let names: Vec<&str> = cfg.classes.iter().map(|c| c.name.as_str()).collect();
                return Err(SetupError::NoClass(class.clone(), names.join(", ")));
            }
        }
        if let Some(hp) = &s.hp
            && matches!(hp.arrival, Arrival::ClosedLoop { .. })
        {
            return Err(SetupError::Arrival(
                "the HP job needs open-loop arrivals (periodic or poisson): its latency is per request".into(),
            ));
        }
        if let Some(lp) = &s.lp
            && !matches!(lp.arrival, Arrival::ClosedLoop { .. })
        {
            return Err(SetupError::Arrival(
                "the LP job needs a closed loop (depth): its throughput is what it completes"
                    .into(),
            ));
        }
        for c in &mut cfg.classes {
            if c.name == s.lp_class {
                c.level = s.control.level();
            }
        }
        if let Control::Level(_) = s.control {
            // The old configuration: the fixed hysteresis (`hysteresis_ns`, 20 ms built in).
            cfg.release = Release::Hysteresis;
        }
        let policy = if s.control.agent() {
            Some(Policy::new(cfg.clone()).map_err(|e| SetupError::Policy(e.to_string()))?)
        } else {
            None
        };
        let (hp_prio, lp_prio) = if s.control.agent() {
            (
                rule_priority(&cfg, &s.hp_class),
                rule_priority(&cfg, &s.lp_class),
            )
        } else {
            (DEFAULT_PRIORITY, DEFAULT_PRIORITY)
        };
        let mut p = Partition::new(s.gpu, s.params);
        p.set_contention(s.contention);
        let mut edits = Vec::new();
        if s.hp.is_some() {
            edits.push(Edit::Add {
                queue: HP,
                priority: hp_prio,
                active: true,
            });
        }
        if s.lp.is_some() {
            edits.push(Edit::Add {
                queue: LP,
                priority: lp_prio,
                active: true,
            });
        }
        p.update_runlist(&edits, None);
        let depth = match s.lp.as_ref().map(|l| l.arrival) {
            Some(Arrival::ClosedLoop { depth }) => depth.max(1),
            _ => 0,
        };
        let window = cfg
            .classes
            .iter()
            .find(|c| c.name == s.lp_class)
            .and_then(|c| c.window)
            .filter(|_| s.control.agent());
        let mut rng = Rng::new(s.seed);
        let next_tick = policy
            .as_ref()
            .map(|_| (rng.next_f64() * s.host.activity_ns as f64) as u64);
        let mut sim = Sim {
            s,
            p,
            policy,
            rng,
            tag: 0,
            next_arrival: None,
            announced: VecDeque::new(),
            lead: if matches!(s.control, Control::Hinted(_)) {
                s.host.hint_lead_ns
            } else {
                0
            },
            hints: Hints::default(),
            next_request: 0,
            arrivals: BTreeMap::new(),
            hp_last: BTreeMap::new(),
            lp_limit: window.map_or(depth, |w| w.min(depth)),
            lp_in_flight: 0,
            lp_next_kernel: 0,
            held: false,
            hold_since: None,
            lp_active: true,
            reaction_from: None,
            hp_busy_since: None,
            hp_busy_ns: 0,
            next_tick,
            seen: (false, false),
            edges: matches!(s.control, Control::Edge(_) | Control::Hinted(_)),
            shim_hp_busy: false,
            fine_sample: None,
            reports: BTreeMap::new(),
            policy_due: None,
            commands: BTreeMap::new(),
            cmd_seq: 0,
            masks: BTreeMap::new(),
            r: RunResult {
                hp_latency_us: Vec::with_capacity(s.requests),
                lp_kernels: 0,
                elapsed_ns: 0,
                device_preempts: 0,
                preempt_latency_us: Vec::new(),
                reaction_us: Vec::new(),
                reactions_missed: 0,
                hp_busy_ns: None,
                completions: 0,
                hints_expired: 0,
                wg_events: 0,
                batch_events: 0,
                timeline: s.timeline.then(Timeline::default),
            },
        };
        sim.next_arrival = sim.gap_ns();
        sim.top_up_lp();
        Ok(sim)
    }

    fn gap_ns(&mut self) -> Option<u64> {
        match self.s.hp.as_ref()?.arrival {
            Arrival::Periodic { rate } => Some((1e9 / rate) as u64),
            Arrival::Poisson { rate } => Some(self.rng.exp_ns(1e9 / rate)),
            Arrival::ClosedLoop { .. } => None,
        }
    }

    fn dispatch(&mut self, k: crate::workload::Kernel) -> Dispatch {
        self.tag += 1;
        Dispatch {
            tag: self.tag,
            workgroups: k.workgroups,
            waves_per_wg: k.waves_per_wg,
            wg_ns: k.wg_ns,
            barrier: true,
        }
    }

    fn top_up_lp(&mut self) {
        let Some(lp) = self.s.lp.as_ref() else {
            return;
        };
        while !self.held && self.lp_in_flight < self.lp_limit {
            let k = lp.kernels[self.lp_next_kernel % lp.kernels.len()];
            self.lp_next_kernel += 1;
            let d = self.dispatch(k);
            self.p.submit_with(LP, d, footprint(&k));
            self.lp_in_flight += 1;
        }
    }

    fn hp_done(&self) -> bool {
        match self.s.hp {
            Some(_) => self.r.hp_latency_us.len() >= self.s.requests,
            None => self.p.now() >= self.s.duration_ns,
        }
    }

    fn run(&mut self) {
        let preempts_before = self.p.stats().device_preempts;
        while !self.hp_done() {
            let submit_at = self.arrivals.keys().next().copied();
            let candidates = [
                self.next_arrival.map(|a| a.saturating_sub(self.lead)),
                self.announced.front().copied(),
                self.hints.next_expiry(),
                submit_at,
                self.next_tick,
                self.fine_sample,
                self.reports.keys().next().map(|k| k.0),
                self.policy_due,
                self.commands.keys().next().map(|k| k.0),
                self.p.next_event(),
                self.s.hp.is_none().then_some(self.s.duration_ns),
            ];
            let Some(t) = candidates.into_iter().flatten().min() else {
                break;
            };
            let t = t.max(self.p.now());
            self.p.advance_to(t);
            self.completions(t);
            // Events due at or before `t` (the partition's clock can be ahead of one: a runlist
            // update moves it).
            let due = |e: Option<u64>| e.filter(|&e| e <= t);
            if let Some(a) = self
                .next_arrival
                .filter(|a| a.saturating_sub(self.lead) <= t)
            {
                // Announced: a hinted request's hint comes now, `lead` before it arrives.
                self.announced.push_back(a);
                if self.lead > 0 {
                    self.hints.begin(a, t, self.s.host.hint_timeout_ns);
                    self.raise_busy(t);
                }
                self.next_arrival = self.gap_ns().map(|g| a + g.max(1));
            }
            while let Some(&a) = self.announced.front() {
                if a > t {
                    break;
                }
                self.announced.pop_front();
                self.arrivals.insert(a + self.s.host.launch_ns, a);
            }
            if due(self.hints.next_expiry()).is_some() {
                self.r.hints_expired += self.hints.expire(t);
                self.idle_unless_busy(t);
            }
            while let Some((&at, &arrival)) = self.arrivals.iter().next() {
                if at > t {
                    break;
                }
                self.arrivals.remove(&at);
                self.submit_request(arrival);
            }
            while let Some(entry) = self.commands.first_entry() {
                if entry.key().0 > t {
                    break;
                }
                let cmd = entry.remove();
                self.apply(t, cmd);
            }
            if due(self.fine_sample).is_some() {
                self.fine_sample_hp(t);
            }
            let mut news = false;
            while let Some(entry) = self.reports.first_entry() {
                if entry.key().0 > t {
                    break;
                }
                let busy = entry.remove();
                news |= busy != self.seen.0;
                self.seen.0 = busy;
            }
            if let Some(tick) = due(self.next_tick) {
                self.next_tick = Some(tick + self.s.host.activity_ns);
                // Edge configurations sample the LP queue only; the HP queue reports its edges.
                let hp = if self.edges {
                    self.seen.0
                } else {
                    self.p.pending_packets(HP) > 0
                };
                let now = (hp, self.p.pending_packets(LP) > 0);
                news |= now != self.seen;
                self.seen = now;
            }
            if news || self.policy_due.is_some_and(|d| d <= t) {
                self.decide(t);
            }
        }
        self.r.elapsed_ns = self.p.now();
        if let Some(since) = self.hp_busy_since {
            self.hp_busy_ns += self.r.elapsed_ns.saturating_sub(since);
        }
        self.r.hp_busy_ns = self.s.hp.is_some().then_some(self.hp_busy_ns);
        self.r.device_preempts = self.p.stats().device_preempts - preempts_before;
        let stats = self.p.stats();
        self.r.wg_events = stats.wg_events;
        self.r.batch_events = stats.batch_events;
        if let Some(tl) = self.r.timeline.as_mut() {
            tl.end_ns = self.r.elapsed_ns;
        }
    }

    fn submit_request(&mut self, arrival: u64) {
        let Some(hp) = self.s.hp.as_ref() else {
            return;
        };
        let range = hp.request(self.next_request);
        self.next_request += 1;
        let t = self.p.now();
        if self.p.pending_packets(HP) == 0 {
            self.hp_busy_since = Some(t);
            if self.lp_on_gpu() && self.reaction_from.is_none() {
                self.reaction_from = Some(t);
            }
        }
        self.hints.work(arrival);
        if self.edges {
            self.raise_busy(t);
        }
        if let Some(tl) = self.r.timeline.as_mut() {
            tl.hp_launch_ns.push(t);
        }
        for i in range {
            let k = hp.kernels[i];
            let d = self.dispatch(k);
            self.p.submit_with(HP, d, footprint(&k));
        }
        self.hp_last.insert(self.tag, arrival);
    }

    /// The launch (or hint) that makes the shim's HP queue busy reports it; fine sampling
    /// starts.
    fn raise_busy(&mut self, t: u64) {
        if !self.shim_hp_busy {
            self.shim_hp_busy = true;
            self.report(t + self.s.host.edge_ns, true);
            self.fine_sample = Some(t + self.s.host.busy_sample_ns.max(1));
        }
    }

    /// A hint ended or expired: with no hint live and the HP queue drained, the shim reports
    /// the idle edge now rather than at its next sample.
    fn idle_unless_busy(&mut self, t: u64) {
        if self.shim_hp_busy && !self.hints.any() && self.p.pending_packets(HP) == 0 {
            self.shim_hp_busy = false;
            self.fine_sample = None;
            self.report(t + self.s.host.edge_ns, false);
        }
    }

    /// The shim's fine sample of a busy HP queue: drained (and no hint live) -> the idle edge
    /// is reported.
    fn fine_sample_hp(&mut self, t: u64) {
        self.idle_unless_busy(t);
        if self.shim_hp_busy {
            self.fine_sample = Some(t + self.s.host.busy_sample_ns.max(1));
        }
    }

    fn report(&mut self, at: u64, busy: bool) {
        self.cmd_seq += 1;
        self.reports.insert((at, self.cmd_seq), busy);
    }

    /// The LP job has work on the GPU: its queue is in the runlist with packets in it.
    fn lp_on_gpu(&self) -> bool {
        self.s.lp.is_some() && self.lp_active && self.p.pending_packets(LP) > 0
    }

    /// The LP job is off the GPU at `off_ns`: the reaction in progress, if any, ends.
    fn lp_off(&mut self, off_ns: u64) {
        if let Some(from) = self.reaction_from.take() {
            self.r
                .reaction_us
                .push(off_ns.saturating_sub(from) as f64 / 1e3);
        }
    }

    fn completions(&mut self, t: u64) {
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

    fn decide(&mut self, t: u64) {
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

    fn apply(&mut self, t: u64, cmd: Command) {
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
