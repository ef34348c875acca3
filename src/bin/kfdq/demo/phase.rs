//! One phase of the demo: its processes (kfdqd with the phase's configuration, the batch job,
//! the latency client, each under the shim), their lines, and what the phase measured
//! (latency, the batch job's throughput, preempts, the reaction chain and its stages).
//! Split from `mod.rs`, which keeps the phases' order, the workloads and the report.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::super::{CliError, client};
use super::procs::{Child, Emulator, wait_until};
use super::report::{Latency, PhaseResult};
use super::{
    BATCH_CLASS, Env, Phase, agent_config, connected, cpu, held, lines, monotonic_us, procs,
    reaction, stages, traced,
};
use kfdq::proto::control::NodeStatus;

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
    fn run_hp(
        &self,
        agent: bool,
        groups: &[cpu::Group],
    ) -> Result<((f64, f64), HpOutcome, cpu::HostCpu), CliError> {
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
        let cpu0 = cpu::sample(groups);
        let go_us = monotonic_us();
        write_file(&go)?;
        let budget = Duration::from_secs_f64(60.0 + 10.0 * f64::from(args.requests) / args.rate);
        let out = c.finish(budget)?;
        let end_us = monotonic_us();
        let host_cpu = cpu::between(&cpu0, &cpu::sample(groups));
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
            host_cpu,
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

pub(super) fn run_phase(env: &Env<'_>, phase: Phase, tag: &str) -> Result<PhaseResult, CliError> {
    let run = PhaseRun::new(env, phase, tag)?;
    let agent = run.start_agent()?;
    let lp = if phase.lp() {
        Some(run.start_lp(agent.is_some())?)
    } else {
        None
    };
    let held = match (&agent, phase.held()) {
        (Some(_), true) => Some(held::hold(&run.sock)?),
        _ => None,
    };
    let preempts0 = env.emu.and_then(Emulator::preempts);
    let groups: Vec<cpu::Group> = [
        lp.as_ref().map(|c| (cpu::LP, c.pid())),
        agent.as_ref().map(|c| (cpu::KFDQD, c.pid())),
        env.emu.and_then(Emulator::pid).map(|p| (cpu::EMULATOR, p)),
    ]
    .into_iter()
    .flatten()
    .collect();
    let (window, hp, host_cpu) = if phase.hp() {
        let (window, hp, host_cpu) = run.run_hp(agent.is_some(), &groups)?;
        (window, Some(hp), host_cpu)
    } else {
        // The batch job alone, over as long as a latency phase takes.
        let cpu0 = cpu::sample(&groups);
        let start = monotonic_us();
        procs::pause(Duration::from_secs_f64(
            f64::from(env.args.requests) / env.args.rate,
        ))?;
        let host_cpu = cpu::between(&cpu0, &cpu::sample(&groups));
        ((start, monotonic_us()), None, host_cpu)
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
    if let Some(pid) = held {
        held::release(&run.sock, pid)?;
    }
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
            host_cpu,
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
    /// Cores the batch job, kfdqd and kfd-emu used in the window.
    host_cpu: cpu::HostCpu,
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
        host_cpu: m.host_cpu,
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
