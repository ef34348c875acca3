//! `preempt-lab run`: the experiment with real processes. It drives `kfdq demo --json` (a
//! subprocess: the phases alone, LP alone and one per configuration, each with real processes
//! under the shim and, for the controlled ones, a real kfdqd; on kfd-emu when the node has no
//! GPU) over repetitions, and turns each repetition's measurements into the [`RunResult`]s a
//! simulated seed gives, so the report is built by the same code as `sim`'s ([`Row::new`],
//! [`Report::new`]) and has the same columns and JSON shape.
//!
//! The workloads are kfdq demo's built-in ones (the `demo` scenario of `sim`) or the user's
//! commands, which print the line format of docs/demo.md ("Your own workloads").

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use kfdq::proto::Level;
use serde::Deserialize;

use crate::report::{Report, Row, RunInfo};
use crate::scenario::Scenario;
use crate::sim::{Control, RunResult};
use crate::workload::{Arrival, Workload};

/// What to run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// The kfdq binary (`None`: next to this executable, then `$PATH`).
    pub kfdq: Option<PathBuf>,
    /// Configurations to compare (the alone phases always run).
    pub controls: Vec<Control>,
    /// Repetitions of every phase (the spread is over them).
    pub repeat: u32,
    /// HP requests per phase.
    pub requests: u32,
    /// HP requests per second.
    pub rate: f64,
    /// The HP workload as one command line (`None`: kfdq demo's latency client).
    pub hp_command: Option<String>,
    /// The LP workload as one command line (`None`: kfdq demo's batch job).
    pub lp_command: Option<String>,
    /// Further arguments for `kfdq demo` (`--emulator`, `--preset`, `--workloads`, `--log-dir`).
    pub demo_args: Vec<String>,
}

/// Why a run gave no report; each says what to do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// Bad options.
    #[error("{0}")]
    Usage(String),
    /// No kfdq binary.
    #[error(
        "kfdq not found ({0}): `preempt-lab run` drives `kfdq demo`; build it (`cargo build -p kfdq --bins` puts it next to preempt-lab) or pass --kfdq PATH"
    )]
    NoKfdq(String),
    /// kfdq did not start.
    #[error("starting {0}: {1}")]
    Spawn(String, std::io::Error),
    /// The demo failed; its own error says why.
    #[error("kfdq demo failed ({status}):\n{error}")]
    Demo {
        /// Its exit status.
        status: String,
        /// Its last lines on stderr.
        error: String,
    },
    /// The demo's output was not the report this code reads.
    #[error(
        "{kfdq} demo --json printed no report this preempt-lab reads ({why}); use the kfdq of the same build (--kfdq PATH)"
    )]
    Report {
        /// The binary.
        kfdq: String,
        /// What was wrong.
        why: String,
    },
}

/// What a demo's report lacks for [`report`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReportError {
    /// The report has no repetition.
    #[error("no repetitions")]
    NoRepetitions,
    /// A repetition lacks a phase (numbered from 1).
    #[error("repetition {repetition} has no {phase} phase")]
    NoPhase {
        /// The repetition.
        repetition: usize,
        /// The phase.
        phase: String,
    },
    /// A repetition's alone phase has no HP request (numbered from 1).
    #[error("repetition {0} has no HP request in its alone phase")]
    NoAloneRequest(usize),
}

/// The `kfdq demo` phase of a configuration.
pub fn phase_of(control: Control) -> &'static str {
    match control {
        Control::Alone => "alone",
        Control::Native => "uncontrolled",
        Control::PriorityOnly => "priority",
        Control::Level(l) | Control::Edge(l) | Control::Hinted(l) => match l {
            Level::Hold => "level1",
            Level::Deactivate => "level2",
            Level::Suspend => "level3",
        },
    }
}

/// Where the kfdq binary is: `given`, else next to this executable, else on `$PATH`.
pub fn find_kfdq(given: Option<&Path>) -> Result<PathBuf, RunError> {
    if let Some(p) = given {
        return if p.is_file() {
            Ok(p.to_owned())
        } else {
            Err(RunError::NoKfdq(format!("no file {}", p.display())))
        };
    }
    let mut dirs: Vec<PathBuf> = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(Path::to_owned))
        .into_iter()
        .collect();
    if let Some(path) = std::env::var_os("PATH") {
        dirs.extend(std::env::split_paths(&path));
    }
    dirs.iter()
        .map(|d| d.join("kfdq"))
        .find(|p| p.is_file())
        .ok_or_else(|| {
            RunError::NoKfdq(format!(
                "looked next to preempt-lab and in $PATH: {}",
                dirs.iter()
                    .map(|d| d.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })
}

/// The arguments of `kfdq demo` for `opts`.
pub fn demo_args(opts: &RunOptions) -> Vec<String> {
    let phases: Vec<&str> = ["alone", "lp-alone"]
        .into_iter()
        .chain(opts.controls.iter().map(|&c| phase_of(c)))
        .collect();
    let mut a: Vec<String> = [
        "demo",
        "--json",
        "--phases",
        &phases.join(","),
        "--requests",
        &opts.requests.to_string(),
        "--rate",
        &opts.rate.to_string(),
        "--repeat",
        &opts.repeat.to_string(),
    ]
    .map(String::from)
    .to_vec();
    if let Some(c) = &opts.hp_command {
        a.extend(["--hp-command".into(), c.clone()]);
    }
    if let Some(c) = &opts.lp_command {
        a.extend(["--lp-command".into(), c.clone()]);
    }
    a.extend(opts.demo_args.iter().cloned());
    a
}

/// The part of `kfdq demo --json` a run reads (`DemoReport` in src/bin/kfdq/demo/report.rs).
#[derive(Debug, Deserialize)]
pub struct DemoJson {
    /// On the built-in emulator.
    pub emulator: bool,
    /// Its preset.
    pub preset: Option<String>,
    /// What a queue priority buys there.
    pub priority_note: String,
    /// Requests per phase.
    pub requests: u32,
    /// Requests per second.
    pub rate_per_s: f64,
    /// The HP command line as run.
    pub hp_command: Vec<String>,
    /// The LP command line as run.
    pub lp_command: Vec<String>,
    /// Every repetition's phases.
    pub runs: Vec<Vec<DemoPhase>>,
}

/// One phase of one repetition.
#[derive(Debug, Clone, Deserialize)]
pub struct DemoPhase {
    /// `alone`, `lp-alone`, `uncontrolled`, `priority`, `level1`..`level3`.
    pub phase: String,
    /// Its measured window, s.
    pub window_s: f64,
    /// Each HP request's latency, µs.
    #[serde(default)]
    pub hp_latency_us: Vec<f64>,
    /// LP units of work completed in the window.
    pub lp_done: Option<u64>,
    /// Device-wide preempts in the window (the emulator's count).
    pub preempts: Option<u64>,
    /// kfdqd's command -> shim ack, µs: p50 and max.
    pub preempt_rtt_us: Option<(f64, f64)>,
    /// The agent's own estimate of its device-wide preempts per second (on hardware).
    pub agent_preempts_per_s: Option<f64>,
}

impl DemoPhase {
    /// As a simulated run's result: latencies, LP units, the window, the preempts (the
    /// emulator's count, else the agent's estimate). Preemption latency is not measured the
    /// model's way; [`report`] puts kfdqd's command round trip in its columns.
    pub fn result(&self) -> RunResult {
        let elapsed_ns = (self.window_s.max(0.0) * 1e9) as u64;
        let preempts = self.preempts.unwrap_or_else(|| {
            (self.agent_preempts_per_s.unwrap_or(0.0) * self.window_s).round() as u64
        });
        RunResult {
            hp_latency_us: self.hp_latency_us.clone(),
            lp_kernels: self.lp_done.unwrap_or(0),
            elapsed_ns,
            device_preempts: preempts,
            preempt_latency_us: Vec::new(),
            reaction_us: Vec::new(),
            reactions_missed: 0,
            hp_busy_ns: None,
            hints_expired: 0,
            completions: self.hp_latency_us.len() as u64 + self.lp_done.unwrap_or(0),
            wg_events: 0,
            batch_events: 0,
            // A real run records no model timeline (its plots would need the workloads' own
            // timestamps).
            timeline: None,
        }
    }
}

fn phase<'a>(rep: &'a [DemoPhase], name: &str, i: usize) -> Result<&'a DemoPhase, ReportError> {
    rep.iter()
        .find(|p| p.phase == name)
        .ok_or_else(|| ReportError::NoPhase {
            repetition: i + 1,
            phase: name.into(),
        })
}

/// The report of a demo's repetitions for `controls`: every number computed as `sim`
/// computes a seed's, each repetition against its own alone phases.
pub fn report(
    demo: &DemoJson,
    kfdq: &Path,
    controls: &[Control],
    builtin: (bool, bool),
) -> Result<Report, ReportError> {
    if demo.runs.is_empty() {
        return Err(ReportError::NoRepetitions);
    }
    let each = |name: &str| -> Result<Vec<&DemoPhase>, ReportError> {
        demo.runs
            .iter()
            .enumerate()
            .map(|(i, r)| phase(r, name, i))
            .collect()
    };
    let results = |v: &[&DemoPhase]| v.iter().map(|p| p.result()).collect::<Vec<_>>();
    let hp_alone = results(&each("alone")?);
    let lp_alone = results(&each("lp-alone")?);
    if let Some(i) = hp_alone.iter().position(|r| r.hp_latency_us.is_empty()) {
        return Err(ReportError::NoAloneRequest(i + 1));
    }
    let mut rows = Vec::new();
    let mut completions = 0;
    for &c in controls {
        let phases = each(phase_of(c))?;
        let runs = results(&phases);
        completions += runs.iter().map(|r| r.completions).sum::<u64>();
        let mut row = Row::new(c, &runs, &hp_alone, &lp_alone);
        let rtt: Vec<(f64, f64)> = phases.iter().filter_map(|p| p.preempt_rtt_us).collect();
        if !rtt.is_empty() {
            let p50: Vec<f64> = rtt.iter().map(|r| r.0).collect();
            row.preempt_latency_p50_us = kfdq::stats::nearest_rank(&p50, 0.5).round();
            row.preempt_latency_p99_us = rtt.iter().map(|r| r.1).fold(0.0, f64::max).round();
        }
        rows.push(row);
    }
    completions += hp_alone
        .iter()
        .chain(&lp_alone)
        .map(|r| r.completions)
        .sum::<u64>();
    let mut sc = Scenario::demo(None);
    sc.name = "run".into();
    sc.requests = demo.requests as usize;
    sc.seeds = (1..=demo.runs.len() as u64).collect();
    sc.controls = controls.to_vec();
    if !builtin.0 {
        sc.hp = Workload::external(Arrival::Periodic {
            rate: demo.rate_per_s,
        });
    }
    if !builtin.1 {
        sc.lp = Workload::external(Arrival::ClosedLoop { depth: 0 });
    }
    let mut r = Report::new(&sc, &hp_alone, &lp_alone, rows, completions);
    r.run = Some(RunInfo {
        kfdq: kfdq.display().to_string(),
        hp_command: demo.hp_command.clone(),
        lp_command: demo.lp_command.clone(),
        emulator_preset: demo
            .emulator
            .then(|| demo.preset.clone().unwrap_or_default()),
        priority_note: demo.priority_note.clone(),
        rate_per_s: demo.rate_per_s,
    });
    Ok(r)
}

/// Runs the experiment: `kfdq demo` with the phases of `opts`, its progress passed on to
/// `progress` line by line as it comes, and the report.
pub fn run(opts: &RunOptions, mut progress: impl FnMut(&str)) -> Result<Report, RunError> {
    if opts.controls.is_empty() {
        return Err(RunError::Usage(
            "--controls is empty: name at least one of native, priority, l1, l2, l3".into(),
        ));
    }
    if let Some(c) = opts.controls.iter().find(|c| **c == Control::Alone) {
        return Err(RunError::Usage(format!(
            "{:?} is not a configuration to compare: the alone phases always run",
            c.name()
        )));
    }
    if let Some(c) = opts
        .controls
        .iter()
        .find(|c| matches!(c, Control::Edge(_) | Control::Hinted(_)))
    {
        return Err(RunError::Usage(format!(
            "{:?} is sim-only: kfdq demo's levels run the host path and release rule its kfdqd is built and configured with; use l1, l2 or l3",
            c.name()
        )));
    }
    if opts.repeat == 0 {
        return Err(RunError::Usage(
            "--repeat 0: at least 1 repetition (3 or more for a spread worth reading)".into(),
        ));
    }
    let kfdq = find_kfdq(opts.kfdq.as_deref())?;
    let mut child = Command::new(&kfdq)
        .args(demo_args(opts))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| RunError::Spawn(kfdq.display().to_string(), e))?;
    let stdout = child.stdout.take();
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        if let Some(mut out) = stdout {
            let _ = std::io::Read::read_to_string(&mut out, &mut text);
        }
        text
    });
    let mut tail: Vec<String> = Vec::new();
    if let Some(err) = child.stderr.take() {
        // Progress lines pass on as they come; the rest (its error) ends up in ours.
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            if line.starts_with("kfdq demo:") {
                progress(&line);
            }
            tail.push(line);
            if tail.len() > 20 {
                tail.remove(0);
            }
        }
    }
    let text = reader.join().unwrap_or_default();
    let status = child
        .wait()
        .map_err(|e| RunError::Spawn(kfdq.display().to_string(), e))?;
    if !status.success() {
        // Its error is what follows the progress lines.
        let from = tail
            .iter()
            .rposition(|l| l.starts_with("kfdq demo: ["))
            .map_or(0, |i| i + 1);
        return Err(RunError::Demo {
            status: status.to_string(),
            error: tail[from..].join("\n"),
        });
    }
    let bad = |why: String| RunError::Report {
        kfdq: kfdq.display().to_string(),
        why,
    };
    let demo: DemoJson = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
    report(
        &demo,
        &kfdq,
        &opts.controls,
        (opts.hp_command.is_none(), opts.lp_command.is_none()),
    )
    .map_err(|e| bad(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(phase: &str, lat: &[f64], lp: Option<u64>, preempts: u64) -> DemoPhase {
        DemoPhase {
            phase: phase.into(),
            window_s: 2.0,
            hp_latency_us: lat.to_vec(),
            lp_done: lp,
            preempts: Some(preempts),
            preempt_rtt_us: (phase == "level2").then_some((300.0, 900.0)),
            agent_preempts_per_s: None,
        }
    }

    fn demo(runs: Vec<Vec<DemoPhase>>) -> DemoJson {
        DemoJson {
            emulator: true,
            preset: Some("mi308x".into()),
            priority_note: String::new(),
            requests: 2,
            rate_per_s: 15.0,
            hp_command: vec!["hp".into()],
            lp_command: vec!["lp".into()],
            runs,
        }
    }

    #[test]
    fn repetitions_become_rows_as_seeds_do() {
        let rep = |alone: f64, l2: f64| {
            vec![
                p("alone", &[alone, alone], None, 1),
                p("lp-alone", &[], Some(20), 0),
                p("level2", &[l2, l2], Some(10), 40),
            ]
        };
        let controls = [Control::Level(Level::Deactivate)];
        let r = report(
            &demo(vec![rep(100.0, 150.0), rep(100.0, 300.0)]),
            Path::new("kfdq"),
            &controls,
            (true, true),
        )
        .unwrap();
        let row = &r.rows[0];
        assert_eq!(row.control, "level 2");
        assert_eq!((row.hp_p99_rel_min, row.hp_p99_rel_max), (1.5, 3.0));
        assert_eq!(row.lp_rel, 0.5);
        assert_eq!(row.preempts_per_s, 20.0);
        assert_eq!(
            (row.preempt_latency_p50_us, row.preempt_latency_p99_us),
            (300.0, 900.0)
        );
        assert_eq!(r.scenario.seeds, [1, 2]);
        assert_eq!(r.alone.lp_kernels_per_s, 10.0);
        assert!(r.table().contains("run on kfd-emu (mi308x)"));
        let missing = report(
            &demo(vec![rep(1.0, 1.0)]),
            Path::new("kfdq"),
            &[Control::Native],
            (true, true),
        );
        assert_eq!(
            missing.unwrap_err().to_string(),
            "repetition 1 has no uncontrolled phase"
        );
    }

    #[test]
    fn the_demo_is_asked_for_the_alone_phases_and_each_configuration() {
        let opts = RunOptions {
            kfdq: None,
            controls: vec![Control::Native, Control::Level(Level::Suspend)],
            repeat: 2,
            requests: 10,
            rate: 15.0,
            hp_command: Some("python3 hp.py".into()),
            lp_command: None,
            demo_args: vec!["--emulator".into()],
        };
        let a = demo_args(&opts).join(" ");
        assert_eq!(
            a,
            "demo --json --phases alone,lp-alone,uncontrolled,level3 --requests 10 --rate 15 --repeat 2 --hp-command python3 hp.py --emulator"
        );
    }
}
