//! `kfdq demo`, the main job: a latency client next to a batch job, alone, uncontrolled, with
//! priorities only and under each preemption level, with a real kfdqd and real processes under
//! the shim — on the built-in emulator when the node has no AMD GPU. docs/demo.md explains the
//! workloads, the phases and every column.

mod cpu;
mod held;
mod interrupt;
mod lead;
mod lines;
mod phase;
mod preflight;
mod procs;
mod reaction;
mod report;
mod runtime;
mod setup;
mod shape;
mod stages;
mod words;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use self::procs::{Emulator, wait_until};
use self::report::{DemoReport, PhaseResult, aggregate, relate, render};
use self::runtime::Runtime;
use self::setup::{Programs, check_args, emulator, programs, workloads_text};
use super::args::{DemoArgs, Phase};
use super::{CliError, client, print_json};
use kfdq::kfd::Root;
use kfdq::proto::Level;
use kfdq::proto::control::NodeStatus;

impl Phase {
    const ALL: [Phase; 11] = [
        Phase::Alone,
        Phase::LpAlone,
        Phase::Uncontrolled,
        Phase::Priority,
        Phase::Level1,
        Phase::Level2,
        Phase::Level2Hinted,
        Phase::Level2Held,
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
            Phase::Level2Held => "HP+LP level 2, LP held off throughout",
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
            Phase::Level2
            | Phase::Level2Hinted
            | Phase::Level2Held
            | Phase::Level2Direct
            | Phase::Level2Traced => Some(Some(Level::Deactivate)),
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

    /// The batch job deactivated by hand throughout the latency client's run (`held.rs`).
    fn held(self) -> bool {
        self == Phase::Level2Held
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

/// Runs the demo.
pub(super) fn run(root: &Path, args: DemoArgs, json: bool) -> Result<(), CliError> {
    interrupt::install();
    check_args(&args)?;
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
    let Programs {
        runtime,
        hp,
        lp,
        shim,
        kfdqd,
        kfd_emu,
    } = programs(root, &args, use_emu, existing.is_some())?;
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
    let emu = emulator(kfd_emu, existing, &runtime, &args, &tmp_path, &logs)?;
    let root_dir = emu
        .as_ref()
        .map_or_else(|| root.to_owned(), |e| e.root.clone());
    let workloads_text = workloads_text(&hp, &lp, &runtime, &args)?;
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
    let runs = run_phases(&env, &phases)?;
    let report = demo_report(&env, &phases, runs, use_emu, workloads_text);
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

/// Every phase, `--repeat` times, with progress on stderr; each repetition's results related to
/// its own alone runs.
fn run_phases(env: &Env<'_>, phases: &[Phase]) -> Result<Vec<Vec<PhaseResult>>, CliError> {
    let args = env.args;
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
            let r = phase::run_phase(env, *phase, &tag).inspect_err(|_| eprintln!("failed"))?;
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
    Ok(runs)
}

/// The report: each phase's medians over the repetitions, and every repetition's results.
fn demo_report(
    env: &Env<'_>,
    phases: &[Phase],
    runs: Vec<Vec<PhaseResult>>,
    use_emu: bool,
    workloads: String,
) -> DemoReport {
    let args = env.args;
    let phases_med = (0..phases.len())
        .map(|i| aggregate(&runs.iter().map(|r| &r[i]).collect::<Vec<_>>()))
        .collect();
    DemoReport {
        emulator: env.emu.is_some(),
        // The preset of a mount the demo did not make is not known (`?`).
        preset: env.emu.filter(|_| use_emu).map(|_| args.preset.clone()),
        priority_note: kfdq::capability::priority_note(&Root::new(env.root)),
        requests: args.requests,
        rate_per_s: args.rate,
        workloads,
        runtime: env.runtime.describe(),
        hp_command: env.hp.argv.clone(),
        lp_command: env.lp.argv.clone(),
        repeat: args.repeat,
        request_shape: args.request_shape.name().into(),
        hint_lead_us: phases
            .iter()
            .any(|p| p.hinted())
            .then_some(env.hint_lead_us),
        phases: phases_med,
        runs,
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
