//! The demo's numbers: one phase's results, each repetition's ratios against its own alone
//! runs, the medians over repetitions with the P99 ratio's spread, and the table.

use serde::{Serialize, Serializer};

use super::super::args::Phase;
use super::super::table::Table;
use super::cpu::HostCpu;
use super::stages::{self, StageFigures, pool};
use clap::ValueEnum;
use kfdq::stats::{nearest_rank, nearest_rank_sorted};

impl Serialize for Phase {
    /// As on the command line (`lp-alone`, `level1`, ...).
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.to_possible_value() {
            Some(v) => s.serialize_str(v.get_name()),
            None => Err(serde::ser::Error::custom("a demo phase without a name")),
        }
    }
}

/// Latency figures of one phase, µs.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Latency {
    /// Requests.
    pub n: usize,
    /// Median (nearest rank: the lower one of an even count).
    pub p50_us: f64,
    /// 99th percentile (nearest rank).
    pub p99_us: f64,
    /// Maximum.
    pub max_us: f64,
}

impl Latency {
    /// The figures of `lat` (any order).
    pub fn of(lat: &[f64]) -> Latency {
        let mut s = lat.to_vec();
        s.sort_by(f64::total_cmp);
        Latency {
            n: s.len(),
            p50_us: nearest_rank_sorted(&s, 0.5),
            p99_us: nearest_rank_sorted(&s, 0.99),
            max_us: nearest_rank_sorted(&s, 1.0),
        }
    }
}

/// One phase's numbers (of one repetition, or the medians over repetitions).
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
    /// Smallest P99 ratio over the repetitions.
    pub hp_p99_rel_min: Option<f64>,
    /// Largest P99 ratio over the repetitions.
    pub hp_p99_rel_max: Option<f64>,
    /// The batch job's dispatches (units of work: its `done` lines) completed per second in
    /// the window.
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
    /// The reaction chain: an HP request's start -> the last of the batch job's queues
    /// stopped being runnable (the emulator's time), µs; `n` counts the requests paired
    /// (docs/demo.md, "Reaction").
    pub reaction: Option<Latency>,
    /// Requests that found the batch job already stopped at their start (not paired).
    pub reaction_found_stopped: Option<usize>,
    /// Requests that found it runnable and saw no stop before the next request (not paired).
    pub reaction_not_stopped: Option<usize>,
    /// Each paired request's reaction, µs (per repetition, in `runs`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub reaction_us: Vec<f64>,
    /// Where the paired reactions' time went, stage by stage (docs/demo.md, "Stages"); over
    /// every repetition in `phases`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stages: Vec<StageFigures>,
    /// The stages' samples behind `stages`.
    #[serde(skip)]
    pub stage_samples: Vec<(&'static str, Vec<f64>)>,
    /// Each request's latency in the order printed, µs (per repetition, in `runs`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hp_latency_us: Vec<f64>,
    /// The batch job's units completed in the window (per repetition).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lp_done: Option<u64>,
    /// Device-wide preempts in the window, the emulator's count (per repetition).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preempts: Option<u64>,
    /// The HIP runtime the workloads ran on, as they said (`HIP 6.4.43484
    /// (libamdhip64.so.6.4.43484)`), or `fakehip ...` for the built-in stand-ins; null when
    /// the workloads did not say.
    pub runtime: Option<String>,
    /// Request hints kfdqd took from the latency client (with an agent; summed over
    /// repetitions).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hints: Option<u64>,
    /// Of them, hints that expired (held `hint_timeout_ms` without work).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint_expiries: Option<u64>,
    /// Cores of this machine the batch job, kfdqd and kfd-emu used in the window (`cpu.rs`;
    /// docs/demo.md, "Host CPU"); medians over repetitions.
    pub host_cpu: HostCpu,
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
    /// The runtime the workloads ran on, in words (each phase's `runtime` names its version).
    pub runtime: String,
    /// The HP workload's command line as run.
    pub hp_command: Vec<String>,
    /// The LP workload's command line as run.
    pub lp_command: Vec<String>,
    /// How many times every phase ran.
    pub repeat: u32,
    /// The latency client's request (`--request-shape`).
    pub request_shape: String,
    /// How long before its first launch the latency client hints, µs (with `level2-hinted`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint_lead_us: Option<u32>,
    /// Phases in the order run: each number the median over the repetitions.
    pub phases: Vec<PhaseResult>,
    /// Every repetition's phases, with each request's latency.
    pub runs: Vec<Vec<PhaseResult>>,
}

/// Relates one repetition's phases to its own HP-alone and LP-alone phases.
pub fn relate(results: &mut [PhaseResult]) {
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
            r.hp_p99_rel_min = r.hp_p99_rel;
            r.hp_p99_rel_max = r.hp_p99_rel;
        }
        if let (Some(l), Some(a)) = (r.lp_dispatches_per_s, lp_alone)
            && a > 0.0
        {
            r.lp_rel = Some(l / a);
        }
    }
}

fn sum(reps: &[&PhaseResult], f: impl Fn(&PhaseResult) -> Option<usize>) -> Option<usize> {
    reps.iter().filter_map(|r| f(r)).reduce(|a, b| a + b)
}

fn median(v: impl Iterator<Item = f64>) -> Option<f64> {
    let v: Vec<f64> = v.collect();
    (!v.is_empty()).then(|| nearest_rank(&v, 0.5))
}

/// One phase over its repetitions (each already related): medians, and the P99 ratio's
/// smallest and largest value. The per-repetition details (latencies, counts) stay in `runs`.
pub fn aggregate(reps: &[&PhaseResult]) -> PhaseResult {
    let first = reps[0];
    let med = |f: &dyn Fn(&PhaseResult) -> Option<f64>| median(reps.iter().filter_map(|r| f(r)));
    let hp = reps.iter().any(|r| r.hp.is_some()).then(|| Latency {
        n: reps.iter().filter_map(|r| r.hp).map(|h| h.n).sum(),
        p50_us: med(&|r| r.hp.map(|h| h.p50_us)).unwrap_or(0.0),
        p99_us: med(&|r| r.hp.map(|h| h.p99_us)).unwrap_or(0.0),
        max_us: med(&|r| r.hp.map(|h| h.max_us)).unwrap_or(0.0),
    });
    let p99: Vec<f64> = reps.iter().filter_map(|r| r.hp_p99_rel).collect();
    PhaseResult {
        phase: first.phase,
        label: first.label.clone(),
        window_s: med(&|r| Some(r.window_s)).unwrap_or(0.0),
        hp,
        hp_p50_rel: med(&|r| r.hp_p50_rel),
        hp_p99_rel: med(&|r| r.hp_p99_rel),
        hp_max_rel: med(&|r| r.hp_max_rel),
        hp_p99_rel_min: p99.iter().copied().reduce(f64::min),
        hp_p99_rel_max: p99.iter().copied().reduce(f64::max),
        lp_dispatches_per_s: med(&|r| r.lp_dispatches_per_s),
        lp_rel: med(&|r| r.lp_rel),
        preempt_rtt_us: med(&|r| r.preempt_rtt_us.map(|x| x.0))
            .zip(med(&|r| r.preempt_rtt_us.map(|x| x.1))),
        preempts_per_s: med(&|r| r.preempts_per_s),
        agent_preempts_per_s: med(&|r| r.agent_preempts_per_s),
        reaction: reps.iter().any(|r| r.reaction.is_some()).then(|| Latency {
            n: reps.iter().filter_map(|r| r.reaction).map(|h| h.n).sum(),
            p50_us: med(&|r| r.reaction.map(|h| h.p50_us)).unwrap_or(0.0),
            p99_us: med(&|r| r.reaction.map(|h| h.p99_us)).unwrap_or(0.0),
            max_us: med(&|r| r.reaction.map(|h| h.max_us)).unwrap_or(0.0),
        }),
        reaction_found_stopped: sum(reps, |r| r.reaction_found_stopped),
        reaction_not_stopped: sum(reps, |r| r.reaction_not_stopped),
        reaction_us: Vec::new(),
        stages: stages::figures(&pool(reps.iter().map(|r| r.stage_samples.as_slice()))),
        stage_samples: Vec::new(),
        hp_latency_us: Vec::new(),
        lp_done: None,
        preempts: None,
        hints: reps.iter().filter_map(|r| r.hints).reduce(|a, b| a + b),
        hint_expiries: reps
            .iter()
            .filter_map(|r| r.hint_expiries)
            .reduce(|a, b| a + b),
        runtime: first.runtime.clone(),
        host_cpu: HostCpu {
            lp: med(&|r| r.host_cpu.lp),
            kfdqd: med(&|r| r.host_cpu.kfdqd),
            emulator: med(&|r| r.host_cpu.emulator),
        },
    }
}

/// The header's runtime: the words, and the versions the phases' workloads named.
fn runtime_line(r: &DemoReport) -> String {
    let mut named: Vec<&str> = r
        .phases
        .iter()
        .filter_map(|p| p.runtime.as_deref())
        .collect();
    named.dedup();
    if named.is_empty() {
        r.runtime.clone()
    } else {
        format!("{} ({})", r.runtime, named.join("; "))
    }
}

fn opt(v: Option<f64>, f: impl Fn(f64) -> String) -> String {
    v.map_or_else(|| "-".into(), f)
}

/// The report as a table for people.
pub fn render(r: &DemoReport) -> String {
    let mut cols = vec![
        "PHASE",
        ">HP P50 ms",
        ">P99 ms",
        ">MAX ms",
        ">P50 x",
        ">P99 x",
        ">MAX x",
    ];
    if r.repeat > 1 {
        cols.push(">P99 x SPREAD");
    }
    cols.extend([
        ">LP disp/s",
        ">LP x",
        ">PREEMPT RTT µs",
        ">PREEMPTS/s",
        ">REACT P50 µs",
        ">P99 µs",
    ]);
    let mut t = Table::new(&cols);
    for p in &r.phases {
        let mut row = vec![
            p.label.clone(),
            opt(p.hp.map(|h| h.p50_us), |v| format!("{:.1}", v / 1e3)),
            opt(p.hp.map(|h| h.p99_us), |v| format!("{:.1}", v / 1e3)),
            opt(p.hp.map(|h| h.max_us), |v| format!("{:.1}", v / 1e3)),
            opt(p.hp_p50_rel, |v| format!("{v:.2}")),
            opt(p.hp_p99_rel, |v| format!("{v:.2}")),
            opt(p.hp_max_rel, |v| format!("{v:.2}")),
        ];
        if r.repeat > 1 {
            row.push(match (p.hp_p99_rel_min, p.hp_p99_rel_max) {
                (Some(a), Some(b)) => format!("{a:.2}-{b:.2}"),
                _ => "-".into(),
            });
        }
        row.extend([
            opt(p.lp_dispatches_per_s, |v| format!("{v:.2}")),
            opt(p.lp_rel, |v| format!("{v:.2}")),
            p.preempt_rtt_us
                .map_or_else(|| "-".into(), |(a, b)| format!("{a:.0} / {b:.0}")),
            opt(p.preempts_per_s.or(p.agent_preempts_per_s), |v| {
                format!("{v:.1}")
            }),
            opt(p.reaction.map(|h| h.p50_us), |v| format!("{v:.0}")),
            opt(p.reaction.map(|h| h.p99_us), |v| format!("{v:.0}")),
        ]);
        t.row(row);
    }
    let mut out = format!(
        "kfdq demo{}: {} latency requests per phase at {}/s{}\n{}\nruntime: {}\npriorities: {}\n\n",
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
        if r.repeat > 1 {
            format!(", {} repetitions (medians)", r.repeat)
        } else {
            String::new()
        },
        r.workloads,
        runtime_line(r),
        r.priority_note
    );
    out += &t.render();
    out += "\nx = relative to alone (HP: latency; LP: dispatches per second). PREEMPT RTT: agent command -> shim ack\n\
            (p50 / max), the ioctl included. PREEMPTS/s: device-wide preempts in the window (the emulator's\n\
            count; on hardware the agent's estimate). REACT: an HP request's start -> the last batch queue\n\
            stopped (the emulator's time; requests that found the batch job running). docs/demo.md explains\n\
            every column.\n";
    if let Some(lead) = r.hint_lead_us {
        out += &hinted_line(r, lead);
    }
    out += &render_host_cpu(r);
    out += &render_stages(r);
    out
}

/// Whose host work the latency client shared the machine with: a line per phase.
fn render_host_cpu(r: &DemoReport) -> String {
    let cores = |v: Option<f64>| opt(v, |c| format!("{c:.2}"));
    let mut out = String::from(
        "\nHost CPU in each window, cores of this machine (the batch job / kfdqd / kfd-emu; docs/demo.md, \"Host CPU\"):\n",
    );
    for p in &r.phases {
        let c = &p.host_cpu;
        out += &format!(
            "  {}: {} / {} / {}\n",
            p.label,
            cores(c.lp),
            cores(c.kfdqd),
            cores(c.emulator)
        );
    }
    out
}

/// The hinted phases' lead, and how many of their requests found the batch job already
/// stopped at their first launch (the hint's effect) against those that waited for it.
fn hinted_line(r: &DemoReport, lead: u32) -> String {
    let mut out =
        format!("HP hinted: kfdq_request_begin() {lead} µs before each request's first launch");
    for p in r.phases.iter().filter(|p| p.phase == Phase::Level2Hinted) {
        if let (Some(found), Some(waited)) = (p.reaction_found_stopped, p.reaction.map(|h| h.n)) {
            out += &format!(
                "; {found} requests found the batch job stopped at their first launch, {waited} waited for it"
            );
        }
    }
    out + ".\n"
}

/// Where the reactions' time went: a row per stage, each phase's p50 / p99 (µs).
fn render_stages(r: &DemoReport) -> String {
    let with: Vec<&PhaseResult> = r.phases.iter().filter(|p| !p.stages.is_empty()).collect();
    if with.is_empty() {
        return String::new();
    }
    let mut cols = vec!["STAGE".to_string()];
    cols.extend(
        with.iter()
            .map(|p| format!(">{} (n {})", p.label, p.stages[0].n)),
    );
    let mut t = Table::new(&cols.iter().map(String::as_str).collect::<Vec<_>>());
    // A row per stage any phase has (the agent's path and the direct path have different
    // stages), in the order they first come; a phase without the stage shows "-".
    let mut names: Vec<&str> = Vec::new();
    for s in with.iter().flat_map(|p| &p.stages) {
        if !names.contains(&s.stage) {
            names.push(s.stage);
        }
    }
    for name in names {
        let mut row = vec![name.to_string()];
        row.extend(with.iter().map(|p| {
            p.stages.iter().find(|s| s.stage == name).map_or_else(
                || "-".into(),
                |s| format!("{:.0} / {:.0}", s.p50_us, s.p99_us),
            )
        }));
        t.row(row);
    }
    format!(
        "\nWhere the reaction's time goes, µs p50 / p99 (the paired requests whose chain every side recorded;\n\
         edge = launch -> the agent read the edge, decision = -> its command written, command = -> stopped;\n\
         docs/demo.md, \"Stages\"):\n{}",
        t.render()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn phase(phase: Phase, hp: Option<&[f64]>, lp: Option<f64>) -> PhaseResult {
        PhaseResult {
            phase,
            label: format!("{phase:?}"),
            window_s: 1.0,
            hp: hp.map(Latency::of),
            hp_p50_rel: None,
            hp_p99_rel: None,
            hp_max_rel: None,
            hp_p99_rel_min: None,
            hp_p99_rel_max: None,
            lp_dispatches_per_s: lp,
            lp_rel: None,
            preempt_rtt_us: None,
            preempts_per_s: None,
            agent_preempts_per_s: None,
            reaction: None,
            reaction_found_stopped: None,
            reaction_not_stopped: None,
            reaction_us: Vec::new(),
            stages: Vec::new(),
            stage_samples: Vec::new(),
            hp_latency_us: hp.map(<[f64]>::to_vec).unwrap_or_default(),
            lp_done: None,
            preempts: None,
            runtime: None,
            hints: None,
            hint_expiries: None,
            host_cpu: HostCpu::default(),
        }
    }

    #[test]
    fn the_stage_table_matches_each_phase_s_stages_by_name() {
        let fig = |stage: &'static str, p50_us: f64| StageFigures {
            stage,
            n: 3,
            min_us: p50_us,
            p10_us: p50_us,
            p50_us,
            p99_us: p50_us * 2.0,
            max_us: p50_us * 2.0,
        };
        let mut agent = phase(Phase::Level2, Some(&[1.0]), Some(1.0));
        agent.stages = vec![fig("edge_to_agent", 300.0), fig("ioctl_to_stop", 120.0)];
        let mut direct = phase(Phase::Level2Direct, Some(&[1.0]), Some(1.0));
        direct.stages = vec![fig("ioctl_to_stop", 130.0), fig("launch_to_watcher", 85.0)];
        let r = DemoReport {
            emulator: true,
            preset: None,
            priority_note: String::new(),
            requests: 3,
            rate_per_s: 1.0,
            workloads: String::new(),
            runtime: String::new(),
            hp_command: Vec::new(),
            lp_command: Vec::new(),
            repeat: 1,
            request_shape: "synthetic".into(),
            hint_lead_us: None,
            phases: vec![agent, direct],
            runs: Vec::new(),
        };
        let text = render_stages(&r);
        let row = |name: &str| -> Vec<String> {
            let line = text
                .lines()
                .find(|l| l.starts_with(name))
                .unwrap_or_else(|| panic!("no row {name} in\n{text}"));
            line.split_whitespace().skip(1).map(String::from).collect()
        };
        assert_eq!(row("edge_to_agent"), ["300", "/", "600", "-"]);
        assert_eq!(row("ioctl_to_stop"), ["120", "/", "240", "130", "/", "260"]);
        assert_eq!(row("launch_to_watcher"), ["-", "85", "/", "170"]);
    }

    #[test]
    fn each_repetition_is_related_to_its_own_alone_and_the_medians_keep_the_spread() {
        let rep = |alone: f64, shared: f64| {
            let mut v = vec![
                phase(Phase::Alone, Some(&[alone, alone]), None),
                phase(Phase::LpAlone, None, Some(10.0)),
                phase(Phase::Level2, Some(&[shared, shared]), Some(5.0)),
            ];
            v[2].reaction = Some(Latency::of(&[shared * 10.0]));
            v[2].reaction_found_stopped = Some(1);
            relate(&mut v);
            v
        };
        let reps = [rep(10.0, 20.0), rep(10.0, 40.0), rep(20.0, 20.0)];
        let l2: Vec<&PhaseResult> = reps.iter().map(|r| &r[2]).collect();
        assert_eq!(l2[1].hp_p99_rel, Some(4.0));
        assert_eq!(l2[2].lp_rel, Some(0.5));
        let a = aggregate(&l2);
        assert_eq!(a.hp_p99_rel, Some(2.0));
        assert_eq!((a.hp_p99_rel_min, a.hp_p99_rel_max), (Some(1.0), Some(4.0)));
        assert_eq!(a.hp.map(|h| h.n), Some(6));
        assert!(a.hp_latency_us.is_empty());
        // The reactions: medians over the repetitions, the unpaired requests summed.
        assert_eq!(a.reaction.map(|r| (r.n, r.p50_us)), Some((3, 200.0)));
        assert_eq!(a.reaction_found_stopped, Some(3));
        assert_eq!(a.reaction_not_stopped, None);
        let table = render(&DemoReport {
            emulator: true,
            preset: None,
            priority_note: String::new(),
            requests: 2,
            rate_per_s: 1.0,
            workloads: String::new(),
            runtime: String::new(),
            hp_command: Vec::new(),
            lp_command: Vec::new(),
            repeat: 1,
            request_shape: "synthetic".into(),
            hint_lead_us: None,
            phases: vec![a],
            runs: Vec::new(),
        });
        let row = table.lines().find(|l| l.starts_with("Level2")).unwrap();
        assert!(
            table.contains("REACT P50") && row.trim_end().ends_with("200"),
            "{table}"
        );
    }
}
