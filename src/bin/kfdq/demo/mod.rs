//! `kfdq demo`, the main job: a latency client next to a batch job, alone, uncontrolled, with
//! priorities only and under each preemption level, with a real kfdqd and real processes under
//! the shim — on the built-in emulator when the node has no AMD GPU. docs/demo.md explains the
//! workloads, the phases and every column.

mod procs;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use clap::ValueEnum;
use serde::{Serialize, Serializer};

use self::procs::{Child, Emulator, wait_until};
use super::args::{DemoArgs, Phase};
use super::table::Table;
use super::{CliError, client, print_json};
use kfdq::kfd::Root;
use kfdq::proto::Level;

impl Serialize for Phase {
    /// As on the command line (`lp-alone`, `level1`, ...).
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.to_possible_value() {
            Some(v) => s.serialize_str(v.get_name()),
            None => Err(serde::ser::Error::custom("a demo phase without a name")),
        }
    }
}

impl Phase {
    const ALL: [Phase; 7] = [
        Phase::Alone,
        Phase::LpAlone,
        Phase::Uncontrolled,
        Phase::Priority,
        Phase::Level1,
        Phase::Level2,
        Phase::Level3,
    ];

    fn label(self) -> &'static str {
        match self {
            Phase::Alone => "HP alone",
            Phase::LpAlone => "LP alone",
            Phase::Uncontrolled => "HP+LP uncontrolled",
            Phase::Priority => "HP+LP priorities only",
            Phase::Level1 => "HP+LP level 1 (hold)",
            Phase::Level2 => "HP+LP level 2 (deactivate)",
            Phase::Level3 => "HP+LP level 3 (suspend)",
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
            Phase::Level2 => Some(Some(Level::Deactivate)),
            Phase::Level3 => Some(Some(Level::Suspend)),
        }
    }

    fn classes(self) -> bool {
        self != Phase::Uncontrolled
    }
}

/// The latency client's request: this many dispatches of this many work-groups (4 waves each)
/// of this long, on the null stream. 8 ms alone on an MI308X partition — the field's
/// ResNet-18 P99 was 2.65 ms, so the demo runs about 3x slower than the field.
const HP_KERNELS: u32 = 4;
const HP_WGS: u32 = 80;
const HP_WG_US: u32 = 2000;
/// The batch job: dispatches of 2560 work-groups of 20 ms (four rounds of the partition, 80 ms
/// a dispatch alone), 4 in flight, like a training loop of long GEMMs.
const LP_WGS: u32 = 2560;
const LP_WG_US: u32 = 20000;
const LP_IN_FLIGHT: u32 = 4;

/// Latency figures of one phase, µs.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Latency {
    /// Requests.
    pub n: usize,
    /// Median.
    pub p50_us: f64,
    /// 99th percentile (nearest rank).
    pub p99_us: f64,
    /// Maximum.
    pub max_us: f64,
}

/// One phase's numbers.
#[derive(Debug, Clone, Serialize)]
pub struct PhaseResult {
    /// Which phase.
    pub phase: Phase,
    /// Its label in the table.
    pub label: String,
    /// The measured window, seconds.
    pub window_s: f64,
    /// The latency client's requests.
    pub hp: Option<Latency>,
    /// HP P50 / P50 alone.
    pub hp_p50_rel: Option<f64>,
    /// HP P99 / P99 alone.
    pub hp_p99_rel: Option<f64>,
    /// HP max / max alone.
    pub hp_max_rel: Option<f64>,
    /// The batch job's dispatches completed per second in the window.
    pub lp_dispatches_per_s: Option<f64>,
    /// That relative to the batch job alone.
    pub lp_rel: Option<f64>,
    /// Agent command -> shim ack, µs (median, max): the control path of a preemption, the
    /// ioctl included.
    pub preempt_rtt_us: Option<(f64, f64)>,
    /// Device-wide preempts per second in the window, as the emulator counted them.
    pub preempts_per_s: Option<f64>,
    /// Device-wide preempts per second the agent's commands caused, by its own estimate.
    pub agent_preempts_per_s: Option<f64>,
}

/// The whole demo.
#[derive(Debug, Clone, Serialize)]
pub struct DemoReport {
    /// Ran on the built-in emulator.
    pub emulator: bool,
    /// Emulator preset.
    pub preset: Option<String>,
    /// What a queue priority buys on this kernel.
    pub priority_note: String,
    /// Requests per phase and per second.
    pub requests: u32,
    /// See `requests`.
    pub rate_per_s: f64,
    /// The workloads, in words.
    pub workloads: String,
    /// Phases in the order run.
    pub phases: Vec<PhaseResult>,
}

fn find_exe(name: &str, dir: Option<&Path>) -> Result<PathBuf, CliError> {
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
        "{name} not found (looked in {}); scripts/run.sh builds it, or pass its directory",
        tried.join(", ")
    )))
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

fn monotonic_us() -> f64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map(|t| t.tv_sec() as f64 * 1e6 + t.tv_nsec() as f64 / 1e3)
        .unwrap_or(0.0)
}

fn agent_config(dir: &Path, level: Option<Level>) -> Result<PathBuf, CliError> {
    let level = match level {
        None => String::new(),
        Some(Level::Hold) => "level = \"hold\"\n".into(),
        Some(Level::Deactivate) => "level = \"deactivate\"\n".into(),
        Some(Level::Suspend) => "level = \"suspend\"\n".into(),
    };
    let text = format!(
        "# kfdq demo: the latency client above the batch job\n[agent]\nsocket = \"{}\"\nhysteresis_ms = 20\nmin_preempt_interval_ms = 1\n\n[[class]]\nname = \"latency\"\nrank = 2\npriority = 13\nmatch = {{ env = true }}\n\n[[class]]\nname = \"batch\"\nrank = 0\npriority = 3\n{level}match = {{ env = true }}\n",
        dir.join("kfdq.sock").display()
    );
    let p = dir.join("kfdq.toml");
    std::fs::write(&p, text).map_err(|e| CliError::Output(format!("{}: {e}", p.display())))?;
    Ok(p)
}

struct Env<'a> {
    root: &'a Path,
    shim: PathBuf,
    kfdqd: PathBuf,
    latency: PathBuf,
    flood: PathBuf,
    logs: &'a Path,
    emu: Option<&'a Emulator>,
    args: &'a DemoArgs,
}

fn connected(sock: &Path, pid: u32) -> bool {
    client::status(sock).is_ok_and(|s| {
        s.processes
            .iter()
            .any(|p| p.pid == pid && !p.queues.is_empty())
    })
}

fn run_phase(env: &Env<'_>, phase: Phase, n: usize) -> Result<PhaseResult, CliError> {
    let dir = tempfile::Builder::new()
        .prefix("kfdq-demo-")
        .tempdir()
        .map_err(|e| CliError::Output(format!("temporary directory: {e}")))?;
    let log = |what: &str| {
        env.logs
            .join(format!("{n}-{phase:?}-{what}.log").to_lowercase())
    };
    let wait = Duration::from_secs(30);
    let mut agent = None;
    let sock = dir.path().join("kfdq.sock");
    if let Some(level) = phase.agent() {
        let cfg = agent_config(dir.path(), level)?;
        let mut cmd = Command::new(&env.kfdqd);
        cmd.arg("--config").arg(&cfg).arg("--root").arg(env.root);
        let child = Child::spawn("kfdqd", cmd, &log("kfdqd"))?;
        wait_until("kfdqd listening", wait, || client::status(&sock).is_ok())?;
        agent = Some(child);
    }
    let shim_env = |cmd: &mut Command, class: &str| {
        cmd.env("LD_PRELOAD", &env.shim)
            .env("KFDQ_ROOT", env.root)
            .env("KFDQ_STATE_DIR", dir.path());
        if phase.classes() {
            cmd.env("KFDQ_CLASS", class);
        }
        if agent.is_some() {
            cmd.env("KFDQ_SOCKET", &sock);
        }
    };
    let stop = dir.path().join("stop");
    let mut lp = None;
    if phase.lp() {
        let mut cmd = Command::new(&env.flood);
        cmd.args([
            LP_WG_US.to_string(),
            LP_WGS.to_string(),
            LP_IN_FLIGHT.to_string(),
        ])
        .env("KFDQ_TEST_STOP", &stop)
        .env("KFDQ_FLOOD_PROGRESS", "1");
        shim_env(&mut cmd, "batch");
        let mut c = Child::spawn("the batch job (kfdq-flood)", cmd, &log("lp"))?;
        c.wait_line("flooding", wait)?;
        if agent.is_some() {
            let pid = c.pid();
            wait_until("the batch job connecting to kfdqd", wait, || {
                connected(&sock, pid)
            })?;
        }
        lp = Some(c);
    }
    let preempts0 = env.emu.and_then(Emulator::preempts);
    let (window, hp) = if phase.hp() {
        let go = dir.path().join("go");
        let args = env.args;
        let mut cmd = Command::new(&env.latency);
        cmd.args([
            args.requests.to_string(),
            format!("{:.3}", 1000.0 / args.rate),
            HP_KERNELS.to_string(),
            HP_WG_US.to_string(),
            HP_WGS.to_string(),
        ])
        .env("KFDQ_TEST_GO", &go);
        shim_env(&mut cmd, "latency");
        let mut c = Child::spawn("the latency client (kfdq-latency)", cmd, &log("hp"))?;
        c.wait_line("CHECKPOINT ready", wait)?;
        if agent.is_some() {
            let pid = c.pid();
            wait_until("the latency client connecting to kfdqd", wait, || {
                connected(&sock, pid)
            })?;
        }
        std::fs::write(&go, b"").map_err(|e| CliError::Output(format!("{}: {e}", go.display())))?;
        let budget = Duration::from_secs_f64(60.0 + 10.0 * f64::from(args.requests) / args.rate);
        let lines = c.finish(budget)?;
        let mut lat: Vec<f64> = lines
            .iter()
            .filter_map(|l| l.strip_prefix("request "))
            .filter_map(|l| l.split_whitespace().nth(1)?.parse().ok())
            .collect();
        lat.sort_by(f64::total_cmp);
        let window = lines
            .iter()
            .find_map(|l| {
                let mut w = l.strip_prefix("window ")?.split_whitespace();
                Some((
                    w.next()?.parse::<f64>().ok()?,
                    w.next()?.parse::<f64>().ok()?,
                ))
            })
            .ok_or_else(|| CliError::Usage("the latency client printed no window line".into()))?;
        let hp = Latency {
            n: lat.len(),
            p50_us: quantile(&lat, 0.5),
            p99_us: quantile(&lat, 0.99),
            max_us: quantile(&lat, 1.0),
        };
        (window, Some(hp))
    } else {
        // The batch job alone, over as long as a latency phase takes.
        let start = monotonic_us();
        std::thread::sleep(Duration::from_secs_f64(
            f64::from(env.args.requests) / env.args.rate,
        ));
        ((start, monotonic_us()), None)
    };
    let window_s = (window.1 - window.0) / 1e6;
    let preempts = match (preempts0, env.emu.and_then(Emulator::preempts)) {
        (Some(a), Some(b)) if window_s > 0.0 => Some(b.saturating_sub(a) as f64 / window_s),
        _ => None,
    };
    let status = agent.as_ref().and_then(|_| client::status(&sock).ok());
    let mut lp_rate = None;
    if let Some(c) = lp {
        std::fs::write(&stop, b"")
            .map_err(|e| CliError::Output(format!("{}: {e}", stop.display())))?;
        let lines = c.finish(Duration::from_secs(120))?;
        let done = lines
            .iter()
            .filter_map(|l| l.strip_prefix("done ")?.trim().parse::<f64>().ok())
            .filter(|t| (window.0..=window.1).contains(t))
            .count();
        lp_rate = Some(done as f64 / window_s.max(1e-9));
    }
    if let Some(mut a) = agent {
        a.terminate();
    }
    let (rtt, agent_rate) = match &status {
        Some(s) if s.counters.commands > 0 => (
            Some((s.counters.ack_us_p50, s.counters.ack_us_max)),
            Some(s.counters.preempts as f64 / s.uptime_s.max(1e-9)),
        ),
        Some(_) => (None, Some(0.0)),
        None => (None, None),
    };
    Ok(PhaseResult {
        phase,
        label: phase.label().into(),
        window_s,
        hp,
        hp_p50_rel: None,
        hp_p99_rel: None,
        hp_max_rel: None,
        lp_dispatches_per_s: lp_rate,
        lp_rel: None,
        preempt_rtt_us: rtt,
        preempts_per_s: preempts,
        agent_preempts_per_s: agent_rate,
    })
}

fn relate(results: &mut [PhaseResult]) {
    let alone = results
        .iter()
        .find(|r| r.phase == Phase::Alone)
        .and_then(|r| r.hp);
    let lp_alone = results
        .iter()
        .find(|r| r.phase == Phase::LpAlone)
        .and_then(|r| r.lp_dispatches_per_s);
    for r in results {
        if let (Some(h), Some(a)) = (r.hp, alone) {
            r.hp_p50_rel = Some(h.p50_us / a.p50_us);
            r.hp_p99_rel = Some(h.p99_us / a.p99_us);
            r.hp_max_rel = Some(h.max_us / a.max_us);
        }
        if let (Some(l), Some(a)) = (r.lp_dispatches_per_s, lp_alone)
            && a > 0.0
        {
            r.lp_rel = Some(l / a);
        }
    }
}

fn opt(v: Option<f64>, f: impl Fn(f64) -> String) -> String {
    v.map_or_else(|| "-".into(), f)
}

fn render(r: &DemoReport) -> String {
    let mut t = Table::new(&[
        "PHASE",
        ">HP P50 ms",
        ">P99 ms",
        ">MAX ms",
        ">P50 x",
        ">P99 x",
        ">MAX x",
        ">LP disp/s",
        ">LP x",
        ">PREEMPT RTT µs",
        ">PREEMPTS/s",
    ]);
    for p in &r.phases {
        t.row(vec![
            p.label.clone(),
            opt(p.hp.map(|h| h.p50_us), |v| format!("{:.1}", v / 1e3)),
            opt(p.hp.map(|h| h.p99_us), |v| format!("{:.1}", v / 1e3)),
            opt(p.hp.map(|h| h.max_us), |v| format!("{:.1}", v / 1e3)),
            opt(p.hp_p50_rel, |v| format!("{v:.2}")),
            opt(p.hp_p99_rel, |v| format!("{v:.2}")),
            opt(p.hp_max_rel, |v| format!("{v:.2}")),
            opt(p.lp_dispatches_per_s, |v| format!("{v:.2}")),
            opt(p.lp_rel, |v| format!("{v:.2}")),
            p.preempt_rtt_us
                .map_or_else(|| "-".into(), |(a, b)| format!("{a:.0} / {b:.0}")),
            opt(p.preempts_per_s.or(p.agent_preempts_per_s), |v| {
                format!("{v:.1}")
            }),
        ]);
    }
    let mut out = format!(
        "kfdq demo{}: {} latency requests per phase at {}/s\n{}\npriorities: {}\n\n",
        if r.emulator {
            format!(
                " on the built-in emulator ({})",
                r.preset.as_deref().unwrap_or("?")
            )
        } else {
            String::new()
        },
        r.requests,
        r.rate_per_s,
        r.workloads,
        r.priority_note
    );
    out += &t.render();
    out += "\nx = relative to alone (HP: latency; LP: dispatches per second). PREEMPT RTT: agent command -> shim ack\n\
            (p50 / max), the ioctl included. PREEMPTS/s: device-wide preempts in the window (the emulator's\n\
            count; on hardware the agent's estimate). docs/demo.md explains every column.\n";
    out
}

/// Runs the demo.
pub(super) fn run(root: &Path, args: DemoArgs, json: bool) -> Result<(), CliError> {
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
    let phases: Vec<Phase> = if args.phases.is_empty() {
        Phase::ALL.to_vec()
    } else {
        args.phases.clone()
    };
    let use_emu = args.emulator || !root.join("dev/kfd").exists();
    let workloads = match (&args.workloads, use_emu) {
        (Some(d), _) => Some(d.clone()),
        (None, true) => None,
        (None, false) => {
            return Err(CliError::Usage(format!(
                "{} has a /dev/kfd: on a real GPU the demo needs workloads built for it (kfdq-latency and kfdq-flood with the same command line, built against your ROCm); pass --workloads DIR, or --emulator to run on the built-in emulator",
                root.display()
            )));
        }
    };
    let tmp = tempfile::Builder::new()
        .prefix("kfdq-demo-")
        .tempdir()
        .map_err(|e| CliError::Output(format!("temporary directory: {e}")))?;
    let logs = match &args.log_dir {
        Some(d) => {
            std::fs::create_dir_all(d)
                .map_err(|e| CliError::Output(format!("{}: {e}", d.display())))?;
            d.clone()
        }
        None => tmp.path().to_owned(),
    };
    let shim = super::run::find_shim(None)?;
    let kfdqd = find_exe("kfdqd", None)?;
    let latency = find_exe("kfdq-latency", workloads.as_deref())?;
    let flood = find_exe("kfdq-flood", workloads.as_deref())?;
    let emu = if use_emu {
        let kfd_emu = find_exe("kfd-emu", None)?;
        let mnt = tmp.path().join("emu");
        eprintln!(
            "kfdq demo: mounting the emulator ({}) at {}",
            args.preset,
            mnt.display()
        );
        Some(Emulator::mount(
            &kfd_emu,
            &args.preset,
            &mnt,
            &logs.join("kfd-emu.log"),
        )?)
    } else {
        None
    };
    let root_dir = emu
        .as_ref()
        .map_or_else(|| root.to_owned(), |e| e.root.clone());
    let env = Env {
        root: &root_dir,
        shim,
        kfdqd,
        latency,
        flood,
        logs: &logs,
        emu: emu.as_ref(),
        args: &args,
    };
    let mut results = Vec::new();
    for (i, phase) in phases.iter().enumerate() {
        eprint!(
            "kfdq demo: [{}/{}] {} ... ",
            i + 1,
            phases.len(),
            phase.label()
        );
        let t = std::time::Instant::now();
        let r = run_phase(&env, *phase, i + 1).inspect_err(|_| eprintln!("failed"))?;
        eprintln!(
            "{:.1} s{}",
            t.elapsed().as_secs_f64(),
            r.hp.map(|h| format!(", HP P99 {:.1} ms", h.p99_us / 1e3))
                .unwrap_or_default()
        );
        results.push(r);
    }
    relate(&mut results);
    let report = DemoReport {
        emulator: emu.is_some(),
        preset: emu.as_ref().map(|_| args.preset.clone()),
        priority_note: kfdq::doctor::priority_note(&Root::new(&root_dir)),
        requests: args.requests,
        rate_per_s: args.rate,
        workloads: format!(
            "HP: {HP_KERNELS} dispatches x {HP_WGS} work-groups x {} ms on the null stream per request (~8 ms alone; the field's ResNet-18: 2.65 ms, so time runs ~3x slower here). LP: dispatches of {LP_WGS} work-groups x {} ms, {LP_IN_FLIGHT} in flight (a ResNet-50 training loop).",
            HP_WG_US / 1000,
            LP_WG_US / 1000
        ),
        phases: results,
    };
    drop(emu);
    if json {
        print_json(&report)
    } else {
        print!("{}", render(&report));
        Ok(())
    }
}
