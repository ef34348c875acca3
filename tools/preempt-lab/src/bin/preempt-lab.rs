//! `preempt-lab`: what each preemption level buys, simulated on the partition model with kfdq's
//! real policy. docs/experiments.md explains the model and the results.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::{Parser, Subcommand};
use kfdq::agent::AgentConfig;
use kfdq::policy::{CostRelease, Release};
use preempt_lab::scenario::{Scenario, parse_control};
use preempt_lab::sweep::{self, Sweep, SweepReport};
use preempt_lab::workload::Shape;
use preempt_lab::{plot, real_run};

#[derive(Parser)]
#[command(
    name = "preempt-lab",
    version,
    about = "Preemption-level experiments for kfdq: HP tail latency and LP throughput per level",
    long_about = "Preemption-level experiments for kfdq.\n\n`sim` runs a scenario on the gfx942 partition model in virtual time, driven by kfdq's real policy \
                  and class configuration, and reports for native scheduling, priorities only and levels 1-3: the latency-critical job's \
                  P50/P99/max relative to running alone, the batch job's throughput relative to alone, device-wide preempts per second \
                  and preemption latency, over several seeds. docs/experiments.md explains the model and its parameters."
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

// Parsed once per process: the size difference between the variants costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Cmd {
    /// Simulate a scenario over seeds and print the report.
    ///
    /// Example: `preempt-lab sim --scenario field --lp-wg-us 4000 --json`
    Sim {
        /// Built-in scenario. field: measured shapes (the H100 traces of ResNet-18 batch-1
        /// inference, Poisson 20/s, next to ResNet-50 training, 8 in flight), contention terms at
        /// MI300X's 5.3 TB/s, the direct path's measured host side (edge 72 µs, decision 0,
        /// command 30 µs: docs/performance.md, "Reaction chain", "Stages"); decode: the same
        /// with an LLM decode step as the request; field-synthetic: the synthetic ResNet-18-like
        /// requests next to a ResNet-50-batch-like loop (`field` before issue 51); demo: kfdq
        /// demo's workloads, to set beside `preempt-lab run`; xsched-mi50: XSched's MI50 setup.
        #[arg(long, default_value = "field")]
        scenario: String,
        /// Seeds: one run per configuration and seed (at least 1; 5 or more for a spread worth reading).
        #[arg(long, default_value_t = 5)]
        seeds: u64,
        /// HP requests per run.
        #[arg(long, default_value_t = 200)]
        requests: usize,
        /// The batch job's work-group time in µs, for a built-in batch shape (the synthetic
        /// scenarios' parameter results depend on most; default: the scenario's,
        /// field-synthetic 1000, demo 20000).
        #[arg(long)]
        lp_wg_us: Option<f64>,
        /// Configurations to compare, comma-separated: native, priority, l1, l2, l3 (the shim's
        /// samples, fixed hysteresis: kfdq before issue 27), l1e, l2e, l3e (busy/idle edges, the
        /// classes' release rule), l1h, l2h, l3h (edges, and a request hint --hint-lead-us
        /// before each request's first launch).
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "native,priority,l1,l2,l3,l1e,l2e,l3e,l2h"
        )]
        controls: Vec<String>,
        /// Take the classes (and [agent] grace_period) from this kfdq.toml instead of the built-in ones.
        #[arg(long)]
        config: Option<PathBuf>,
        /// The HP job's class in that configuration.
        #[arg(long, default_value = "latency")]
        hp_class: String,
        /// The LP job's class in that configuration (its level is set by each configuration).
        #[arg(long, default_value = "batch")]
        lp_class: String,
        /// The shim's activity sampling period in µs (KFDQ_ACTIVITY_US).
        #[arg(long)]
        activity_us: Option<u64>,
        /// The agent's command trip to the shim in µs.
        #[arg(long)]
        command_us: Option<u64>,
        /// The agent's decision in µs.
        #[arg(long)]
        decision_us: Option<u64>,
        /// Edge configurations: launch (or drained sample) -> the agent, µs (default 50, a guess).
        #[arg(long)]
        edge_us: Option<u64>,
        /// Edge configurations: the shim's sampling period while the HP queue is busy, µs (default 100).
        #[arg(long)]
        busy_sample_us: Option<u64>,
        /// Hinted configurations: how long before a request's first launch its hint comes, µs
        /// (default 500).
        #[arg(long)]
        hint_lead_us: Option<u64>,
        /// Hinted configurations: a hint not followed by work within this expires, ms (default
        /// 10: five times the longest lead swept; a hint never followed by work then holds the
        /// batch job no longer than the cost rule's longest hold, 20 ms).
        #[arg(long)]
        hint_timeout_ms: Option<f64>,
        /// The release rule of the edge configurations: cost or hysteresis (default: the
        /// classes', the cost rule for the built-in ones; the sampled levels always use the
        /// fixed hysteresis).
        #[arg(long, value_name = "RULE")]
        release: Option<String>,
        /// The fixed hysteresis in ms (the sampled levels', and the edge ones' with --release hysteresis).
        #[arg(long)]
        hysteresis_ms: Option<f64>,
        /// Cost rule: C, one device-wide preempt and its restore, µs (default 200).
        #[arg(long)]
        round_trip_us: Option<f64>,
        /// Cost rule: k, round trips a release must be likely to buy (default 4).
        #[arg(long)]
        release_k: Option<f64>,
        /// Cost rule: epsilon, the accepted chance that the HP job is back within k round trips (default 0.1).
        #[arg(long)]
        release_epsilon: Option<f64>,
        /// Cost rule: the longest hold after an idle edge, ms (default 20).
        #[arg(long)]
        release_max_hold_ms: Option<f64>,
        /// The fixed cost of a device-wide preempt in µs (the model's preempt_fixed_ns).
        #[arg(long)]
        preempt_us: Option<u64>,
        /// A node's calibration (`kfdq bench --write FILE`, docs/hardware.md): its preempt and
        /// per-wave CWSR costs, its arbitration (unless `none`) and, for the cost release rule,
        /// its round trip C. The flags above (--preempt-us, --round-trip-us) still override.
        #[arg(long, value_name = "FILE")]
        calibration: Option<PathBuf>,
        /// Print the report as JSON (deterministic: the same arguments give the same bytes).
        #[arg(long, conflicts_with = "csv")]
        json: bool,
        /// Print the rows as CSV.
        #[arg(long)]
        csv: bool,
        /// Also write plots (SVG and PNG) into this directory: HP latency CDF per configuration,
        /// LP throughput over time with its preemptions (docs/experiments.md, "Plots").
        #[arg(long, value_name = "DIR")]
        plots: Option<PathBuf>,
        /// The HP job's dispatches from a trace file (CSV, or JSON if it ends in .json; format in
        /// docs/experiments.md); its arrivals stay the scenario's.
        #[arg(long, value_name = "FILE")]
        hp_trace: Option<PathBuf>,
        /// The LP job's dispatches from a trace file, run in a closed loop (--lp-wg-us is then unused).
        #[arg(long, value_name = "FILE")]
        lp_trace: Option<PathBuf>,
        /// The HP job's request rate per second (the scenario's arrival process stays).
        #[arg(long)]
        hp_rate: Option<f64>,
        /// Run once per value of one parameter: level, hp-rate, lp-size, lp-wg-us, arbitration,
        /// cu-split, dram-tbs, edge-us, release-k, release-epsilon, round-trip-us or hint-lead
        /// (µs: 0, 100, 250, 500, 1000, 2000), with its default values or KIND=V1,V2,... (e.g.
        /// cu-split=none,25/75).
        #[arg(long, value_name = "KIND[=VALUES]")]
        sweep: Option<String>,
        /// Turn on the model's contention terms (shared CUs and DRAM, docs/gfx-model.md) with
        /// this DRAM bandwidth of the partition in TB/s (MI300X: 5.3 for the whole GPU).
        #[arg(long, value_name = "TB/S")]
        dram_tbs: Option<f64>,
        /// The loaded-latency cap of the contention terms (default: the value fitted on the H100).
        #[arg(long, requires = "dram_tbs")]
        latency_cap: Option<f64>,
    },
    /// Hold the model against the H100 co-location measurements: every measured row replayed
    /// on gfx-model with the traced kernels, side by side with the error (docs/experiments.md).
    Validate {
        /// colocate.py's results (coloc.json).
        #[arg(long, default_value = "tools/preempt-lab/real-gpu/results")]
        results: PathBuf,
        /// The folder of the h100-*.csv traces.
        #[arg(long, default_value = "tools/preempt-lab/examples/traces")]
        traces: PathBuf,
    },
    /// The same experiment with real processes: `kfdq demo` runs the HP and LP workloads alone
    /// and under each configuration with a real kfdqd (on kfd-emu without a GPU), repeated;
    /// the report has sim's columns, each ratio against the same repetition's alone runs.
    ///
    /// Example: `preempt-lab run --repeat 3 --controls native,l2 -- --log-dir /tmp/logs`.
    /// Your own workloads print the line format of docs/demo.md ("Your own workloads").
    Run {
        /// Configurations to compare, comma-separated: native, priority, l1, l2, l3.
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "native,priority,l1,l2,l3"
        )]
        controls: Vec<String>,
        /// Repetitions of every phase (the spread is over them).
        #[arg(long, default_value_t = 3)]
        repeat: u32,
        /// HP requests per phase.
        #[arg(long, default_value_t = 60)]
        requests: u32,
        /// HP requests per second.
        #[arg(long, default_value_t = 15.0)]
        rate: f64,
        /// The HP workload as one command line (default: kfdq demo's latency client).
        #[arg(long, value_name = "\"CMD ARGS\"")]
        hp_command: Option<String>,
        /// The LP workload as one command line (default: kfdq demo's batch job).
        #[arg(long, value_name = "\"CMD ARGS\"")]
        lp_command: Option<String>,
        /// The kfdq binary (default: next to preempt-lab, then $PATH).
        #[arg(long, value_name = "PATH")]
        kfdq: Option<PathBuf>,
        /// Print the report as JSON.
        #[arg(long, conflicts_with = "csv")]
        json: bool,
        /// Print the rows as CSV.
        #[arg(long)]
        csv: bool,
        /// Further arguments for `kfdq demo` (--emulator, --preset, --workloads DIR, --log-dir DIR).
        #[arg(last = true, value_name = "DEMO ARGS")]
        demo_args: Vec<String>,
    },
    /// List the built-in workload shapes.
    Shapes,
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("preempt-lab: {e}");
            ExitCode::from(2)
        }
    }
}

fn run(cli: Cli) -> Result<(), String> {
    match cli.cmd {
        Cmd::Validate { results, traces } => {
            let v = preempt_lab::validate::run(&results, &traces, |what| {
                eprint!("\rpreempt-lab: replaying {what}                    ")
            })
            .map_err(|e| e.to_string())?;
            eprintln!();
            print!("{}", v.table());
            Ok(())
        }
        Cmd::Shapes => {
            for s in Shape::ALL {
                let w = preempt_lab::workload::Workload::new(
                    s,
                    None,
                    preempt_lab::workload::Arrival::ClosedLoop { depth: 1 },
                );
                let k = &w.kernels[0];
                println!(
                    "{:<16} {:>5} kernels x {:>6} work-groups x {} waves x {:>6.0} us; {:.2} ms alone on an MI308X partition",
                    s.name(),
                    w.kernels.len(),
                    k.workgroups,
                    k.waves_per_wg,
                    k.wg_ns as f64 / 1e3,
                    w.alone_ns(80 * 32) as f64 / 1e6
                );
            }
            Ok(())
        }
        Cmd::Run {
            controls,
            repeat,
            requests,
            rate,
            hp_command,
            lp_command,
            kfdq,
            json,
            csv,
            demo_args,
        } => {
            let opts = real_run::RunOptions {
                kfdq,
                controls: controls
                    .iter()
                    .map(|c| parse_control(c))
                    .collect::<Result<_, _>>()
                    .map_err(|e| e.to_string())?,
                repeat,
                requests,
                rate,
                hp_command,
                lp_command,
                demo_args,
            };
            let report = real_run::run(&opts, |l| eprintln!("{l}")).map_err(|e| e.to_string())?;
            print_report(&report, json, csv)
        }
        Cmd::Sim {
            scenario,
            seeds,
            requests,
            lp_wg_us,
            controls,
            config,
            hp_class,
            lp_class,
            activity_us,
            command_us,
            decision_us,
            edge_us,
            busy_sample_us,
            hint_lead_us,
            hint_timeout_ms,
            release,
            hysteresis_ms,
            round_trip_us,
            release_k,
            release_epsilon,
            release_max_hold_ms,
            preempt_us,
            calibration,
            json,
            csv,
            plots,
            hp_trace,
            lp_trace,
            hp_rate,
            sweep,
            dram_tbs,
            latency_cap,
        } => {
            if seeds == 0 || requests == 0 {
                return Err("--seeds and --requests must be at least 1".into());
            }
            if let Some(v) = lp_wg_us
                && !(v.is_finite() && v > 0.0)
            {
                return Err(format!("--lp-wg-us {v} must be above 0"));
            }
            let mut sc = Scenario::named(&scenario, lp_wg_us).map_err(|e| e.to_string())?;
            if lp_wg_us.is_some() && sc.lp.shape == Shape::Trace {
                return Err(format!(
                    "--lp-wg-us applies to a built-in batch shape; scenario {scenario} runs the measured training trace (use --scenario field-synthetic for the synthetic batch job)"
                ));
            }
            sc.seeds = (1..=seeds).collect();
            sc.requests = requests;
            sc.controls = controls
                .iter()
                .map(|c| parse_control(c))
                .collect::<Result<_, _>>()
                .map_err(|e| e.to_string())?;
            if let Some(path) = &config {
                let cfg = AgentConfig::load(path).map_err(|e| e.to_string())?;
                sc.policy = cfg.policy;
                sc.grace_period = cfg.grace_period;
                sc.classes_from = path.display().to_string();
            }
            sc.hp_class = hp_class;
            sc.lp_class = lp_class;
            if let Some(v) = activity_us {
                sc.host.activity_ns = v.max(1) * 1000;
            }
            if let Some(v) = command_us {
                sc.host.command_ns = v * 1000;
            }
            let calibration = calibration
                .as_deref()
                .map(|path| apply_calibration(&mut sc, path))
                .transpose()?;
            if let Some(v) = preempt_us {
                sc.params.preempt_fixed_ns = v * 1000;
            }
            if let Some(v) = decision_us {
                sc.host.decision_ns = v * 1000;
            }
            if let Some(v) = edge_us {
                sc.host.edge_ns = v * 1000;
            }
            if let Some(v) = busy_sample_us {
                sc.host.busy_sample_ns = v.max(1) * 1000;
            }
            if let Some(v) = hint_lead_us {
                sc.host.hint_lead_ns = v * 1000;
            }
            if let Some(ms) = hint_timeout_ms {
                if !(ms.is_finite() && ms > 0.0) {
                    return Err(format!(
                        "--hint-timeout-ms {ms} must be above 0 (a hint not followed by work expires after it)"
                    ));
                }
                sc.host.hint_timeout_ns = (ms * 1e6) as u64;
            }
            apply_release(
                &mut sc,
                release.as_deref(),
                hysteresis_ms,
                [
                    round_trip_us,
                    release_k,
                    release_epsilon,
                    release_max_hold_ms,
                ],
            )?;
            if let Some(cal) = &calibration
                && round_trip_us.is_none()
                && let Release::Cost(c) = &mut sc.policy.release
            {
                c.round_trip_ns = cal.first().model.preempt_round_trip_ns;
            }
            if let Some(r) = hp_rate {
                sc = Sweep::parse("hp-rate")
                    .and_then(|s| s.apply(&sc, &r.to_string()))
                    .map_err(|e| e.to_string())?;
            }
            if let Some(tbs) = dram_tbs {
                sc = Sweep::parse("dram-tbs")
                    .and_then(|s| s.apply(&sc, &tbs.to_string()))
                    .map_err(|e| e.to_string())?;
            }
            if let Some(cap) = latency_cap {
                if !(cap.is_finite() && cap >= 1.0) {
                    return Err(format!("--latency-cap {cap} must be at least 1"));
                }
                if let Some(c) = sc.contention.as_mut() {
                    c.latency_cap_permille = (cap * 1000.0).round() as u32;
                }
            }
            sc.apply_traces(hp_trace.as_deref(), lp_trace.as_deref())
                .map_err(|e| e.to_string())?;
            let sweep = sweep
                .as_deref()
                .map(Sweep::parse)
                .transpose()
                .map_err(|e| e.to_string())?;
            if let Some(sw) = &sweep {
                for v in &sw.values {
                    sw.apply(&sc, v).map_err(|e| e.to_string())?;
                }
            }
            if plots.is_some() {
                plot::font::ensure().map_err(|e| e.to_string())?;
            }
            let runs = sweep::runs(&sc, sweep.as_ref());
            let mut done = 0;
            let mut files = 0;
            let t0 = Instant::now();
            let mut points = sweep::run(
                &sc,
                sweep.as_ref(),
                |value, what, seed| {
                    done += 1;
                    eprint!(
                        "\rpreempt-lab: {done}/{runs} runs ({value} {what}, seed {seed})        "
                    );
                },
                |prefix, title, series| {
                    if let Some(dir) = &plots {
                        files += plot::write_all(dir, prefix, title, series)
                            .map_err(|e| e.to_string())?
                            .len();
                    }
                    Ok::<(), String>(())
                },
            )
            .map_err(|e| e.to_string())?;
            let secs = t0.elapsed().as_secs_f64();
            let completions: u64 = points.iter().map(|p| p.report.completions).sum();
            eprintln!(
                "\rpreempt-lab: {runs} runs in {secs:.1} s: {completions} dispatch completions, {:.2} M/s",
                completions as f64 / secs / 1e6
            );
            if let Some(dir) = &plots {
                let (prefix, title) = match &sweep {
                    Some(sw) => (
                        format!("{}-{}", sc.name, sw.kind.name()),
                        format!("{}, swept over {}", sc.name, sw.kind.name()),
                    ),
                    None => (sc.name.clone(), sc.name.clone()),
                };
                files += plot::write_tradeoff(dir, &prefix, &title, &points)
                    .map_err(|e| e.to_string())?
                    .len();
                eprintln!(
                    "preempt-lab: wrote {files} plot files into {}",
                    dir.display()
                );
            }
            if let Some(sw) = sweep {
                let r = SweepReport {
                    sweep: sw.kind,
                    points,
                };
                if json {
                    let j = serde_json::to_string_pretty(&r).map_err(|e| e.to_string())?;
                    println!("{j}");
                } else if csv {
                    print!("{}", r.csv());
                } else {
                    print!("{}", r.table());
                }
                return Ok(());
            }
            let report = points.remove(0).report;
            print_report(&report, json, csv)
        }
    }
}

/// The partition model's gfx target (`gfx_target_version`): the lab's partitions are gfx942.
const LAB_TARGET_VERSION: u32 = 90402;

/// `sim --calibration FILE`: the node's measured parameters; returns the file for the cost
/// rule's C (set once the release options are applied).
fn apply_calibration(
    sc: &mut Scenario,
    path: &std::path::Path,
) -> Result<kfdq_calibration::Calibration, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("--calibration {}: {e}", path.display()))?;
    let cal = kfdq_calibration::Calibration::parse(&text)
        .map_err(|e| format!("--calibration {}: {e}", path.display()))?;
    for (i, p) in cal.partitions.iter().enumerate() {
        if let Err(kfdq_calibration::CalibrationError::OtherGpu { line, .. }) =
            p.check_target(&text, i, LAB_TARGET_VERSION)
        {
            // Not "measure on a node of this kind": the lab models gfx942 partitions only.
            return Err(format!(
                "--calibration {}: line {line}: gfx_target_version = {}: the file was measured on {}, and the lab models gfx942 partitions only (gfx_target_version {LAB_TARGET_VERSION}): another kind's costs would be read as a gfx942's. Replay the file on the emulator of its kind instead (kfd-emu --preset mi210 --calibration FILE for gfx90a, docs/kfd-emulator.md), or give the lab its round trip by hand (sim --round-trip-us {:.0}), knowing the partition shape stays gfx942's",
                path.display(),
                p.node.gfx_target_version,
                p.node.gfx_target,
                p.model.preempt_round_trip_ns as f64 / 1e3
            ));
        }
    }
    let first = cal.first();
    sc.params = sc.params.calibrated(&first.model);
    // Say what was taken from the file (on stderr: stdout is the result).
    eprintln!(
        "preempt-lab: --calibration {}: {} ({}, {}), preempt_fixed_ns {}, save_wave_ns {}, restore_wave_ns {}, arbitration {}, C {} µs",
        path.display(),
        first.node.gpu_name,
        first.node.gfx_target,
        first.node.measured_with,
        first.model.preempt_fixed_ns,
        first.model.save_wave_ns,
        first.model.restore_wave_ns,
        first.model.arbitration.as_str(),
        first.model.preempt_round_trip_ns as f64 / 1e3
    );
    if let Some(w) = first.round_trip_disagreement(&text, 0) {
        eprintln!(
            "preempt-lab: warning: --calibration {}: {w}",
            path.display()
        );
    }
    Ok(cal)
}

/// The release rule options of `sim`: `--release`, `--hysteresis-ms` and the cost rule's
/// parameters (C µs, k, epsilon, max hold ms), each checked as the agent checks its file.
fn apply_release(
    sc: &mut Scenario,
    rule: Option<&str>,
    hysteresis_ms: Option<f64>,
    [round_trip_us, k, epsilon, max_hold_ms]: [Option<f64>; 4],
) -> Result<(), String> {
    match rule.map(str::trim) {
        None => {}
        Some("cost") => sc.policy.release = Release::Cost(CostRelease::default()),
        Some("hysteresis") => sc.policy.release = Release::Hysteresis,
        Some(other) => {
            return Err(format!(
                "--release {other:?}: use cost (the higher class's idle gaps against a preempt's cost) or hysteresis (a fixed hold)"
            ));
        }
    }
    if let Some(ms) = hysteresis_ms {
        if !(ms.is_finite() && ms >= 0.0) {
            return Err(format!("--hysteresis-ms {ms} must be 0 or more"));
        }
        sc.policy.hysteresis_ns = (ms * 1e6) as u64;
    }
    if [round_trip_us, k, epsilon, max_hold_ms]
        .iter()
        .all(Option::is_none)
    {
        return Ok(());
    }
    let c = sweep::cost_rule(sc).map_err(|e| format!("--round-trip-us/--release-*: {e}"))?;
    if let Some(v) = round_trip_us {
        if !(v.is_finite() && v >= 0.0) {
            return Err(format!("--round-trip-us {v} must be 0 or more"));
        }
        c.round_trip_ns = (v * 1e3) as u64;
    }
    if let Some(v) = k {
        c.k = v;
    }
    if let Some(v) = epsilon {
        c.epsilon = v;
    }
    if let Some(v) = max_hold_ms {
        if !(v.is_finite() && v >= 0.0) {
            return Err(format!("--release-max-hold-ms {v} must be 0 or more"));
        }
        c.max_hold_ns = (v * 1e6) as u64;
    }
    c.validate().map_err(|e| e.to_string())
}

/// Prints a report as JSON, CSV or the table.
fn print_report(report: &preempt_lab::report::Report, json: bool, csv: bool) -> Result<(), String> {
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(report).map_err(|e| e.to_string())?
        );
    } else if csv {
        print!("{}", report.csv());
    } else {
        print!("{}", report.table());
    }
    Ok(())
}
