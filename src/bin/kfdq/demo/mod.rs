//! `kfdq demo`, the main job: a latency client next to a batch job, alone, uncontrolled, with
//! priorities only and under each preemption level, with a real kfdqd and real processes under
//! the shim — on the built-in emulator when the node has no AMD GPU. docs/demo.md explains the
//! workloads, the phases and every column.

mod interrupt;
mod lead;
mod lines;
mod preflight;
mod procs;
mod reaction;
mod report;
mod runtime;
mod shape;
mod stages;
mod words;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use self::procs::{Child, Emulator, wait_until};
use self::report::{DemoReport, Latency, PhaseResult, aggregate, relate, render};
use self::runtime::Runtime;
use super::args::{DemoArgs, DemoRuntime, Phase};
use super::{CliError, client, print_json};
use kfdq::kfd::Root;
use kfdq::proto::Level;
use kfdq::proto::control::NodeStatus;

impl Phase {
    const ALL: [Phase; 10] = [
        Phase::Alone,
        Phase::LpAlone,
        Phase::Uncontrolled,
        Phase::Priority,
        Phase::Level1,
        Phase::Level2,
        Phase::Level2Hinted,
        Phase::Level2Direct,
        Phase::Level3,
        Phase::Level3Direct,
    ];

    fn label(self) -> &'static str {
        match self {
            Phase::Alone => "HP alone",
            Phase::LpAlone => "LP alone",
            Phase::Uncontrolled => "HP+LP uncontrolled",
            Phase::Priority => "HP+LP priorities only",
            Phase::Level1 => "HP+LP level 1 (hold)",
            Phase::Level2 => "HP+LP level 2, agent's commands",
            Phase::Level2Hinted => "HP+LP level 2, agent's commands, HP hinted",
            Phase::Level2Direct => "HP+LP level 2, direct (default)",
            Phase::Level2Traced => "HP+LP level 2, HP traced (no shim)",
            Phase::Level3 => "HP+LP level 3, agent's commands",
            Phase::Level3Direct => "HP+LP level 3, direct (default)",
        }
    }

    fn hp(self) -> bool {
        self != Phase::LpAlone
    }

    fn lp(self) -> bool {
        self != Phase::Alone
    }

    /// `None`: no agent; `Some(level)`: the agent with the batch class at `level`.
    fn agent(self) -> Option<Option<Level>> {
        match self {
            Phase::Alone | Phase::LpAlone | Phase::Uncontrolled => None,
            Phase::Priority => Some(None),
            Phase::Level1 => Some(Some(Level::Hold)),
            Phase::Level2 | Phase::Level2Hinted | Phase::Level2Direct | Phase::Level2Traced => {
                Some(Some(Level::Deactivate))
            }
            Phase::Level3 | Phase::Level3Direct => Some(Some(Level::Suspend)),
        }
    }

    /// The agent's defaults: direct edges on (the other edge phases turn them off).
    fn direct(self) -> bool {
        matches!(self, Phase::Level2Direct | Phase::Level3Direct)
    }

    /// The latency client hints each request ($KFDQ_DEMO_HINT=1).
    fn hinted(self) -> bool {
        self == Phase::Level2Hinted
    }

    /// The latency client without the shim, controlled by the agent's tracer.
    fn traced(self) -> bool {
        self == Phase::Level2Traced
    }

    fn classes(self) -> bool {
        self != Phase::Uncontrolled
    }
}

/// The batch job: dispatches of 2560 work-groups of 20 ms (four rounds of the partition, 80 ms
/// a dispatch alone), 4 in flight, like a training loop of long GEMMs.
const LP_WGS: u32 = 2560;
const LP_WG_US: u32 = 20000;
const LP_IN_FLIGHT: u32 = 4;
/// The batch job's class in the demo's agent configuration.
const BATCH_CLASS: &str = "batch";

/// How to get the built-in workloads when they are missing.
const WORKLOADS_FIX: &str = "the built-in workloads are built by scripts/run.sh, which puts them beside kfdq in target/debug; or give their directory with --workloads DIR (built against your ROCm on a real GPU), or your own programs with --hp-command and --lp-command";
/// How to get kfdqd and kfd-emu when they are missing.
const PROGRAMS_FIX: &str = "install the kfdq package, or build the workspace (cargo build --release) and run target/release/kfdq";

/// Finds `name` in `dir`, else beside this `kfdq` and on `PATH`; `fix` says how to get it.
fn find_exe(name: &str, dir: Option<&Path>, fix: &str) -> Result<PathBuf, CliError> {
    let mut tried = Vec::new();
    let mut dirs: Vec<PathBuf> = Vec::new();
    match dir {
        Some(d) => dirs.push(d.to_owned()),
        None => {
            if let Some(d) = std::env::current_exe()
                .ok()
                .and_then(|e| e.parent().map(Path::to_owned))
            {
                dirs.push(d);
            }
            if let Some(path) = std::env::var_os("PATH") {
                dirs.extend(std::env::split_paths(&path));
            }
        }
    }
    for d in dirs {
        let p = d.join(name);
        if p.is_file() {
            return Ok(p);
        }
        tried.push(d.display().to_string());
    }
    Err(CliError::Usage(format!(
        "{name} not found (looked in {}); {fix}",
        tried.join(", ")
    )))
}

fn monotonic_us() -> f64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map(|t| t.tv_sec() as f64 * 1e6 + t.tv_nsec() as f64 / 1e3)
        .unwrap_or(0.0)
}

fn agent_config(dir: &Path, level: Option<Level>, phase: Phase) -> Result<PathBuf, CliError> {
    let level = match level {
        None => String::new(),
        Some(Level::Hold) => "level = \"hold\"\n".into(),
        Some(Level::Deactivate) => "level = \"deactivate\"\n".into(),
        Some(Level::Suspend) => "level = \"suspend\"\n".into(),
    };
    // The direct phases run the agent's defaults (busy edges, direct edges, the cost-aware
    // release rule); the others the agent's own path (direct edges off).
    let release = if phase.direct() {
        ""
    } else {
        "direct_edges = false\n"
    };
    // The traced phase: the latency class takes processes without the shim.
    let traced = if phase.traced() {
        "control = \"tracer\"\n"
    } else {
        ""
    };
    let text = format!(
        "# kfdq demo: the latency client above the batch job\n[agent]\nsocket = \"{}\"\n{release}min_preempt_interval_ms = 1\n\n[[class]]\nname = \"latency\"\nrank = 2\npriority = 13\n{traced}match = {{ env = true }}\n\n[[class]]\nname = \"batch\"\nrank = 0\npriority = 3\n{level}match = {{ env = true }}\n",
        dir.join("kfdq.sock").display()
    );
    let p = dir.join("kfdq.toml");
    std::fs::write(&p, text).map_err(|e| CliError::Output(format!("{}: {e}", p.display())))?;
    Ok(p)
}

/// A workload's command line as run, and whether it is the built-in one.
struct Workload {
    argv: Vec<String>,
    builtin: bool,
}

impl Workload {
    /// Its command on the phase's runtime; `dir` is the phase's directory.
    fn command(&self, env: &Env<'_>, dir: &Path) -> Command {
        let program = Path::new(&self.argv[0]);
        let mut binds = vec![dir, env.logs];
        binds.extend(env.shim.parent());
        binds.extend(program.parent().filter(|_| program.is_absolute()));
        env.runtime
            .command(&self.argv, env.emu.map(|e| e.root.as_path()), &binds)
    }
}

struct Env<'a> {
    root: &'a Path,
    shim: PathBuf,
    kfdqd: PathBuf,
    hp: Workload,
    lp: Workload,
    /// The request's dispatches (`$KFDQ_DEMO_KERNELS`, `shape::kernels_arg`).
    kernels: String,
    logs: &'a Path,
    emu: Option<&'a Emulator>,
    args: &'a DemoArgs,
    runtime: Runtime,
    /// `level2-hinted`: µs between a request's hint and its first launch (`lead.rs`).
    hint_lead_us: u32,
}

/// The agent sees a process of `class` with queues (the workload may be a process tree: a
/// shell, a Python launcher).
fn connected(sock: &Path, class: &str) -> bool {
    client::status(sock).is_ok_and(|s| has_class(&s, class))
}

/// [`connected`] in a status already read.
fn has_class(s: &NodeStatus, class: &str) -> bool {
    s.processes
        .iter()
        .any(|p| p.class == class && !p.queues.is_empty())
}

/// Waits until kfdqd's tracer controls a latency-class process (`level2-traced`); fails with
/// the tracer's reason when kfdqd left one alone (no right to ptrace it, for one).
fn traced(sock: &Path, wait: Duration) -> Result<(), CliError> {
    let mut why = None;
    let r = wait_until("the latency client taken by kfdqd's tracer", wait, || {
        let Ok(s) = client::status(sock) else {
            return false;
        };
        why = s
            .left_alone
            .iter()
            .find(|l| l.class == "latency")
            .map(|l| format!("pid {}: {}", l.pid, l.reason));
        why.is_some() || has_class(&s, "latency")
    });
    match why {
        Some(reason) => Err(CliError::Usage(format!(
            "level2-traced: kfdqd did not take the latency client without its shim ({reason})"
        ))),
        None => r,
    }
}

/// A workload that never said `ready`: the rule, after what happened.
fn ready_hint(e: CliError) -> CliError {
    CliError::Usage(format!(
        "{e}\n  a workload prints `ready` on stdout once its GPU queues exist ({})",
        lines::DOC
    ))
}

fn write_file(p: &Path) -> Result<(), CliError> {
    std::fs::write(p, b"").map_err(|e| CliError::Output(format!("{}: {e}", p.display())))
}

/// One phase's run: its temporary directory (the agent's socket and configuration, the
/// workloads' state and signal files) and where its logs go.
struct PhaseRun<'a> {
    env: &'a Env<'a>,
    phase: Phase,
    tag: &'a str,
    dir: tempfile::TempDir,
    sock: PathBuf,
    /// The reaction chain's timestamps (kfdq::chain), with an agent: one file per side (latency
    /// shim, kfdqd, batch shim).
    traces: Option<(PathBuf, PathBuf, PathBuf)>,
    /// The HIP runtime a workload said it runs on (its `runtime` line).
    runtime: std::cell::RefCell<Option<String>>,
}

/// How long a phase's processes may take to start and connect.
const START_WAIT: Duration = Duration::from_secs(30);

/// The latency client's measurement: its latency figures, every request's latency and, when
/// it printed them, its requests' starts.
type HpOutcome = (Latency, Vec<f64>, Option<Vec<f64>>);

impl<'a> PhaseRun<'a> {
    fn new(env: &'a Env<'a>, phase: Phase, tag: &'a str) -> Result<PhaseRun<'a>, CliError> {
        let dir = tempfile::Builder::new()
            .prefix("kfdq-demo-")
            .tempdir()
            .map_err(|e| CliError::Output(format!("temporary directory: {e}")))?;
        let sock = dir.path().join("kfdq.sock");
        let mut run = PhaseRun {
            env,
            phase,
            tag,
            dir,
            sock,
            traces: None,
            runtime: Default::default(),
        };
        run.traces = phase
            .agent()
            .map(|_| (run.trace("hp"), run.trace("kfdqd"), run.trace("lp")));
        Ok(run)
    }

    fn log(&self, what: &str) -> PathBuf {
        self.env
            .logs
            .join(format!("{}-{:?}-{what}.log", self.tag, self.phase).to_lowercase())
    }

    fn trace(&self, what: &str) -> PathBuf {
        let p = self
            .env
            .logs
            .join(format!("{}-{:?}-{what}.chain", self.tag, self.phase).to_lowercase());
        // A log directory used before: the file is appended to.
        let _ = std::fs::remove_file(&p);
        p
    }

    /// kfdqd with the phase's configuration, once it listens (`None`: a phase without agent).
    fn start_agent(&self) -> Result<Option<Child>, CliError> {
        let Some(level) = self.phase.agent() else {
            return Ok(None);
        };
        let cfg = agent_config(self.dir.path(), level, self.phase)?;
        let mut cmd = Command::new(&self.env.kfdqd);
        if let Some((_, t, _)) = &self.traces {
            cmd.env(kfdq::chain::ENV, t);
        }
        cmd.arg("--config")
            .arg(&cfg)
            .arg("--root")
            .arg(self.env.root);
        let mut child = Child::spawn("kfdqd", cmd, &self.log("kfdqd"))?;
        child.wait_up("listening on its socket", START_WAIT, || {
            client::status(&self.sock).is_ok()
        })?;
        Ok(Some(child))
    }

    /// A workload's environment: the shim, its class, the chain trace and the agent's socket.
    fn shim_env(&self, cmd: &mut Command, class: &str, agent: bool) {
        cmd.env("KFDQ_ROOT", self.env.runtime.workload_root(self.env.root));
        // The traced phase's latency client runs without the shim (its class is read from
        // its environment by the agent's scan).
        if !(self.phase.traced() && class != BATCH_CLASS) {
            self.env.runtime.preload(cmd, &self.env.shim);
            cmd.env("KFDQ_STATE_DIR", self.dir.path());
        }
        if let Some((hp, _, lp)) = &self.traces {
            cmd.env(kfdq::chain::ENV, if class == BATCH_CLASS { lp } else { hp });
        }
        if self.phase.classes() {
            cmd.env("KFDQ_CLASS", class);
        }
        if agent {
            cmd.env("KFDQ_SOCKET", &self.sock);
        }
    }

    /// The batch job, once ready (and connected, with an agent).
    fn start_lp(&self, agent: bool) -> Result<Child, CliError> {
        let stop = self.dir.path().join("stop");
        let mut cmd = self.env.lp.command(self.env, self.dir.path());
        cmd.env("KFDQ_DEMO_STOP", &stop)
            .env("KFDQ_TEST_STOP", &stop)
            .env("KFDQ_FLOOD_PROGRESS", "1");
        self.shim_env(&mut cmd, BATCH_CLASS, agent);
        let mut c = Child::spawn("the batch job (LP)", cmd, &self.log("lp"))?;
        c.wait_line("ready", lines::lp_ready, START_WAIT)
            .map_err(ready_hint)?;
        if agent {
            wait_until("the batch job connecting to kfdqd", START_WAIT, || {
                connected(&self.sock, BATCH_CLASS)
            })?;
        }
        Ok(c)
    }

    /// The latency client from its start to its end: the window it measured (CLOCK_MONOTONIC
    /// µs) and its requests.
    fn run_hp(&self, agent: bool) -> Result<((f64, f64), HpOutcome), CliError> {
        let go = self.dir.path().join("go");
        let args = self.env.args;
        let mut cmd = self.env.hp.command(self.env, self.dir.path());
        cmd.env("KFDQ_DEMO_GO", &go)
            .env("KFDQ_TEST_GO", &go)
            .env("KFDQ_DEMO_REQUESTS", args.requests.to_string())
            .env("KFDQ_DEMO_RATE", args.rate.to_string())
            .env("KFDQ_DEMO_SHAPE", args.request_shape.name())
            .env("KFDQ_DEMO_KERNELS", &self.env.kernels)
            .env_remove("KFDQ_DEMO_HINT");
        if self.phase.hinted() {
            cmd.env("KFDQ_DEMO_HINT", "1")
                .env("KFDQ_DEMO_HINT_LEAD_US", self.env.hint_lead_us.to_string());
        }
        self.shim_env(&mut cmd, "latency", agent);
        let mut c = Child::spawn("the latency client (HP)", cmd, &self.log("hp"))?;
        c.wait_line("ready", lines::hp_ready, START_WAIT)
            .map_err(ready_hint)?;
        if agent && self.phase.traced() {
            traced(&self.sock, START_WAIT)?;
        } else if agent {
            wait_until("the latency client connecting to kfdqd", START_WAIT, || {
                connected(&self.sock, "latency")
            })?;
        }
        let go_us = monotonic_us();
        write_file(&go)?;
        let budget = Duration::from_secs_f64(60.0 + 10.0 * f64::from(args.requests) / args.rate);
        let out = c.finish(budget)?;
        let end_us = monotonic_us();
        let hp = lines::parse_hp(&out)
            .map_err(|e| CliError::Usage(format!("the latency client (HP): {e}")))?;
        self.note_runtime(&out);
        if hp.latencies_us.is_empty() {
            return Err(CliError::Usage(format!(
                "the latency client (HP) printed no `request <i> <latency_us>` line: an HP workload prints one per timed request ({}); its stdout had {} lines (log {})",
                lines::DOC,
                out.len(),
                self.log("hp").display()
            )));
        }
        let lat = Latency::of(&hp.latencies_us);
        let starts: Option<Vec<f64>> = hp.starts_us.iter().copied().collect();
        Ok((
            hp.window.unwrap_or((go_us, end_us)),
            (lat, hp.latencies_us, starts),
        ))
    }

    /// Keeps the first `runtime` line a workload printed.
    fn note_runtime(&self, out: &[String]) {
        let mut r = self.runtime.borrow_mut();
        if r.is_none() {
            *r = lines::runtime(out);
        }
    }

    /// Stops the batch job; the units of work it completed inside `window`.
    fn finish_lp(&self, c: Child, window: (f64, f64)) -> Result<u64, CliError> {
        write_file(&self.dir.path().join("stop"))?;
        let out = c.finish(Duration::from_secs(120))?;
        self.note_runtime(&out);
        let done = lines::parse_lp(&out)
            .map_err(|e| CliError::Usage(format!("the batch job (LP): {e}")))?
            .into_iter()
            .filter(|t| (window.0..=window.1).contains(t))
            .count() as u64;
        if done == 0 && self.phase == Phase::LpAlone {
            return Err(CliError::Usage(format!(
                "the batch job (LP) alone printed no `done <t_us>` line inside the {:.1} s window: an LP workload prints one per unit of work completed, with CLOCK_MONOTONIC times ({}); log {}",
                (window.1 - window.0) / 1e6,
                lines::DOC,
                self.log("lp").display()
            )));
        }
        Ok(done)
    }
}

fn run_phase(env: &Env<'_>, phase: Phase, tag: &str) -> Result<PhaseResult, CliError> {
    let run = PhaseRun::new(env, phase, tag)?;
    let agent = run.start_agent()?;
    let lp = if phase.lp() {
        Some(run.start_lp(agent.is_some())?)
    } else {
        None
    };
    let preempts0 = env.emu.and_then(Emulator::preempts);
    let (window, hp) = if phase.hp() {
        let (window, hp) = run.run_hp(agent.is_some())?;
        (window, Some(hp))
    } else {
        // The batch job alone, over as long as a latency phase takes.
        let start = monotonic_us();
        procs::pause(Duration::from_secs_f64(
            f64::from(env.args.requests) / env.args.rate,
        ))?;
        ((start, monotonic_us()), None)
    };
    let preempts = match (preempts0, env.emu.and_then(Emulator::preempts)) {
        (Some(a), Some(b)) => Some(b.saturating_sub(a)),
        _ => None,
    };
    let status = agent.as_ref().and_then(|_| client::status(&run.sock).ok());
    if phase.hinted() && status.as_ref().is_some_and(|s| s.counters.hints == 0) {
        return Err(CliError::Usage(format!(
            "{}: kfdqd took no request hint from the latency client: with $KFDQ_DEMO_HINT=1 a workload calls kfdq_request_begin() $KFDQ_DEMO_HINT_LEAD_US µs before each request's first launch and kfdq_request_end() after it ({}; docs/shim.md, \"Request hints\"); log {}",
            phase.label(),
            lines::DOC,
            run.log("hp").display()
        )));
    }
    let starts = hp.as_ref().and_then(|h| h.2.as_deref());
    let reactions = reactions(env.emu, status.as_ref(), starts);
    let lp_done = lp.map(|c| run.finish_lp(c, window)).transpose()?;
    if let Some(mut a) = agent {
        a.terminate();
    }
    let runtime = run
        .runtime
        .borrow_mut()
        .take()
        .or_else(|| env.runtime.fallback_label(env.hp.builtin || env.lp.builtin));
    let stage_samples = match (&reactions, &run.traces) {
        (Some(r), Some((hp, agent, lp))) => {
            stages::samples(&r.pairs, &stages::Traces::read(hp, agent, lp))
        }
        _ => Vec::new(),
    };
    Ok(phase_result(
        phase,
        window,
        hp,
        Measured {
            status,
            reactions,
            stage_samples,
            lp_done,
            preempts,
            runtime,
        },
    ))
}

/// What a phase measured besides the latency client.
struct Measured {
    /// kfdqd's status at the end of the window (with an agent).
    status: Option<NodeStatus>,
    reactions: Option<reaction::Reactions>,
    stage_samples: Vec<(&'static str, Vec<f64>)>,
    /// The batch job's units of work inside the window.
    lp_done: Option<u64>,
    /// Device-wide preempts inside the window (the emulator's counters).
    preempts: Option<u64>,
    /// The HIP runtime the workloads ran on.
    runtime: Option<String>,
}

/// The phase's row from what it measured.
fn phase_result(
    phase: Phase,
    window: (f64, f64),
    hp: Option<HpOutcome>,
    m: Measured,
) -> PhaseResult {
    let window_s = (window.1 - window.0) / 1e6;
    let (rtt, agent_rate) = match &m.status {
        Some(s) if s.counters.commands > 0 => (
            Some((s.counters.ack_us_p50, s.counters.ack_us_max)),
            Some(s.counters.preempts as f64 / s.uptime_s.max(1e-9)),
        ),
        Some(_) => (None, Some(0.0)),
        None => (None, None),
    };
    let per_s = |n: u64| n as f64 / window_s.max(1e-9);
    let (hp, hp_latency_us) = hp.map_or((None, Vec::new()), |(l, v, _)| (Some(l), v));
    let reactions = m.reactions;
    PhaseResult {
        phase,
        label: phase.label().into(),
        window_s,
        hp,
        hp_p50_rel: None,
        hp_p99_rel: None,
        hp_max_rel: None,
        hp_p99_rel_min: None,
        hp_p99_rel_max: None,
        lp_dispatches_per_s: m.lp_done.map(per_s),
        lp_rel: None,
        preempt_rtt_us: rtt,
        preempts_per_s: m.preempts.filter(|_| window_s > 0.0).map(per_s),
        agent_preempts_per_s: agent_rate,
        reaction: reactions
            .as_ref()
            .filter(|r| !r.reaction_us.is_empty())
            .map(|r| Latency::of(&r.reaction_us)),
        reaction_found_stopped: reactions.as_ref().map(|r| r.found_stopped),
        reaction_not_stopped: reactions.as_ref().map(|r| r.not_stopped),
        reaction_us: reactions.map(|r| r.reaction_us).unwrap_or_default(),
        stages: stages::figures(&m.stage_samples),
        stage_samples: m.stage_samples,
        hp_latency_us,
        lp_done: m.lp_done,
        preempts: m.preempts,
        runtime: m.runtime,
        hints: m.status.as_ref().map(|s| s.counters.hints),
        hint_expiries: m.status.as_ref().map(|s| s.counters.hint_expiries),
    }
}

/// The reaction chain of a phase with an agent on the emulator, when the latency client printed
/// its requests' starts: each paired with the stop times of the batch class's compute queues
/// (the processes the agent put in class `batch`, read before the batch job is stopped).
fn reactions(
    emu: Option<&Emulator>,
    status: Option<&NodeStatus>,
    starts_us: Option<&[f64]>,
) -> Option<reaction::Reactions> {
    let batch: Vec<u32> = status?
        .processes
        .iter()
        .filter(|p| p.class == BATCH_CLASS)
        .map(|p| p.pid.0)
        .collect();
    let queues = emu?.queue_times(&batch)?;
    Some(reaction::pair(starts_us?, &queues))
}

/// A workload from `--hp-command` / `--lp-command`, or the built-in `name` with `args`.
fn workload(
    given: Option<&str>,
    (name, args): (&str, Vec<String>),
    dir: Option<&Path>,
    flag: &str,
) -> Result<Workload, CliError> {
    match given {
        Some(line) => {
            let argv = words::split(line).map_err(|e| CliError::Usage(format!("{flag}: {e}")))?;
            Ok(Workload {
                argv,
                builtin: false,
            })
        }
        None => Ok(Workload {
            argv: std::iter::once(find_exe(name, dir, WORKLOADS_FIX)?.display().to_string())
                .chain(args)
                .collect(),
            builtin: true,
        }),
    }
}

/// Runs the demo.
pub(super) fn run(root: &Path, args: DemoArgs, json: bool) -> Result<(), CliError> {
    interrupt::install();
    if args.requests < 2 {
        return Err(CliError::Usage(format!(
            "--requests {} is too few: at least 2 (P99 of fewer than 100 requests is close to the maximum)",
            args.requests
        )));
    }
    if !(args.rate.is_finite() && args.rate > 0.0 && args.rate <= 200.0) {
        return Err(CliError::Usage(format!(
            "--rate {} is out of range: above 0 and at most 200 requests per second",
            args.rate
        )));
    }
    if !(1..=100).contains(&args.repeat) {
        return Err(CliError::Usage(format!(
            "--repeat {} is out of range: 1 to 100 repetitions of every phase",
            args.repeat
        )));
    }
    let hint_lead_us = lead::lead_us(args.request_shape, args.hint_lead_us)?;
    let phases: Vec<Phase> = if args.phases.is_empty() {
        Phase::ALL.to_vec()
    } else {
        args.phases.clone()
    };
    let use_emu = args.emulator || !root.join("dev/kfd").exists();
    // GPUs the demo does not mount: what they cannot do is refused before anything starts.
    if !use_emu {
        preflight::check(root, &phases)?;
    }
    // A kfd-emu mount given as --root is the emulator too (its counters, the REACT columns).
    let existing = if use_emu {
        None
    } else {
        Emulator::existing(root)
    };
    let runtime = Runtime::resolve(&args, use_emu || existing.is_some())?;
    let builtin = args.hp_command.is_none() || args.lp_command.is_none();
    let workloads = match (&args.workloads, use_emu || existing.is_some()) {
        (Some(d), _) => Some(d.clone()),
        (None, true) => None,
        (None, false) if !builtin || runtime.kind == DemoRuntime::Hip => None,
        (None, false) => {
            return Err(CliError::Usage(format!(
                "{} has a /dev/kfd: on a real GPU the demo needs workloads built for it: give --hp-command and --lp-command (docs/demo.md, \"Your own workloads\"), or --workloads DIR with kfdq-latency and kfdq-flood built against your ROCm, or --emulator to run on the built-in emulator",
                root.display()
            )));
        }
    };
    let [hp_hip, lp_hip] = runtime::builtin(runtime.kind);
    let fakehip_hp_args: Vec<String> = [
        args.requests.to_string(),
        format!("{:.3}", 1000.0 / args.rate),
    ]
    .into_iter()
    .chain(args.request_shape.client_args()?)
    .collect();
    let hp = workload(
        args.hp_command.as_deref(),
        hp_hip.unwrap_or(("kfdq-latency", fakehip_hp_args)),
        workloads.as_deref(),
        "--hp-command",
    )?;
    let lp = workload(
        args.lp_command.as_deref(),
        lp_hip.unwrap_or_else(|| {
            (
                "kfdq-flood",
                vec![
                    LP_WG_US.to_string(),
                    LP_WGS.to_string(),
                    LP_IN_FLIGHT.to_string(),
                ],
            )
        }),
        workloads.as_deref(),
        "--lp-command",
    )?;
    // The programs first: an error naming a missing one leaves no directory behind.
    let shim = super::run::find_shim(None)?;
    let kfdqd = find_exe("kfdqd", None, PROGRAMS_FIX)?;
    let kfd_emu = if use_emu {
        Some(find_exe("kfd-emu", None, PROGRAMS_FIX)?)
    } else {
        None
    };
    let runtime = runtime.with_emulator(kfd_emu.as_deref());
    let tmp = tempfile::Builder::new()
        .prefix("kfdq-demo-")
        .tempdir()
        .map_err(|e| CliError::Output(format!("temporary directory: {e}")))?;
    let tmp_path = tmp.path().to_owned();
    let mut tmp = TempLogs {
        dir: Some(tmp),
        keep: args.log_dir.is_none(),
    };
    let logs = match &args.log_dir {
        Some(d) => {
            std::fs::create_dir_all(d)
                .map_err(|e| CliError::Output(format!("{}: {e}", d.display())))?;
            d.clone()
        }
        None => tmp_path.clone(),
    };
    let emu = if let Some(kfd_emu) = kfd_emu {
        let mnt = tmp_path.join("emu");
        eprintln!(
            "kfdq demo: mounting the emulator ({}) at {}",
            args.preset,
            mnt.display()
        );
        let kernel_times = runtime.kernel_times(&tmp_path)?;
        Some(Emulator::mount(
            &kfd_emu,
            &args.preset,
            &mnt,
            &logs.join("kfd-emu.log"),
            kernel_times.as_deref(),
        )?)
    } else {
        if let Some(e) = &existing {
            eprintln!(
                "kfdq demo: {} is a kfd-emu mount: the emulator's counters are read there",
                e.root.display()
            );
        }
        existing
    };
    let root_dir = emu
        .as_ref()
        .map_or_else(|| root.to_owned(), |e| e.root.clone());
    let workloads_text = match (hp.builtin, lp.builtin) {
        (true, true) if runtime.kind == DemoRuntime::Hip => {
            runtime::hipwork_text(args.request_shape).to_string()
        }
        (true, true) => format!(
            "HP: {}. LP: dispatches of {LP_WGS} work-groups x {} ms, {LP_IN_FLIGHT} in flight (a ResNet-50 training loop).",
            args.request_shape.describe()?,
            LP_WG_US / 1000
        ),
        _ => format!("HP: `{}`. LP: `{}`.", hp.argv.join(" "), lp.argv.join(" ")),
    };
    let env = Env {
        root: &root_dir,
        shim,
        kfdqd,
        hp,
        lp,
        kernels: shape::kernels_arg(&args.request_shape.dispatches()?),
        logs: &logs,
        emu: emu.as_ref(),
        args: &args,
        runtime,
        hint_lead_us,
    };
    let total = phases.len() * args.repeat as usize;
    let mut runs = Vec::new();
    for rep in 1..=args.repeat {
        let mut results = Vec::new();
        for (i, phase) in phases.iter().enumerate() {
            let k = (rep as usize - 1) * phases.len() + i + 1;
            eprint!("kfdq demo: [{k}/{total}] {} ... ", phase.label());
            let t = Instant::now();
            let tag = if args.repeat > 1 {
                format!("r{rep}-{}", i + 1)
            } else {
                (i + 1).to_string()
            };
            let r = run_phase(&env, *phase, &tag).inspect_err(|_| eprintln!("failed"))?;
            eprintln!(
                "{:.1} s{}",
                t.elapsed().as_secs_f64(),
                r.hp.map(|h| format!(", HP P99 {:.1} ms", h.p99_us / 1e3))
                    .unwrap_or_default()
            );
            results.push(r);
        }
        relate(&mut results);
        runs.push(results);
    }
    let phases_med = (0..phases.len())
        .map(|i| aggregate(&runs.iter().map(|r| &r[i]).collect::<Vec<_>>()))
        .collect();
    let report = DemoReport {
        emulator: emu.is_some(),
        // The preset of a mount the demo did not make is not known (`?`).
        preset: emu
            .as_ref()
            .filter(|_| use_emu)
            .map(|_| args.preset.clone()),
        priority_note: kfdq::capability::priority_note(&Root::new(&root_dir)),
        requests: args.requests,
        rate_per_s: args.rate,
        workloads: workloads_text,
        runtime: env.runtime.describe(),
        hp_command: env.hp.argv.clone(),
        lp_command: env.lp.argv.clone(),
        repeat: args.repeat,
        request_shape: args.request_shape.name().into(),
        hint_lead_us: phases.iter().any(|p| p.hinted()).then_some(hint_lead_us),
        phases: phases_med,
        runs,
    };
    drop(emu);
    // It worked: the temporary logs are not needed.
    tmp.keep = false;
    if json {
        print_json(&report)
    } else {
        print!("{}", render(&report));
        Ok(())
    }
}

/// The demo's temporary directory: removed when the demo succeeds, kept (and its path printed)
/// when it fails without `--log-dir`, because the error names log files in it.
struct TempLogs {
    dir: Option<tempfile::TempDir>,
    keep: bool,
}

impl Drop for TempLogs {
    fn drop(&mut self) {
        if self.keep
            && let Some(dir) = self.dir.take()
        {
            eprintln!(
                "kfdq demo: the logs are kept in {} (remove it when done; --log-dir DIR chooses the place)",
                dir.keep().display()
            );
        }
    }
}
