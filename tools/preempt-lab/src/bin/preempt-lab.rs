//! `preempt-lab`: what each preemption level buys, simulated on the partition model with kfdq's
//! real policy. docs/experiments.md explains the model and the results.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::{Parser, Subcommand};
use kfdq::agent::AgentConfig;
use preempt_lab::scenario::{Scenario, parse_control};
use preempt_lab::workload::Shape;
use preempt_lab::{experiment, real_run};

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

#[derive(Subcommand)]
enum Cmd {
    /// Simulate a scenario over seeds and print the report.
    ///
    /// Example: `preempt-lab sim --scenario field --lp-wg-us 4000 --json`
    Sim {
        /// Built-in scenario (field: ResNet-18-like requests at 20/s next to a ResNet-50-batch-like loop;
        /// demo: kfdq demo's workloads, to set beside `preempt-lab run`).
        #[arg(long, default_value = "field")]
        scenario: String,
        /// Seeds: one run per configuration and seed (at least 1; 5 or more for a spread worth reading).
        #[arg(long, default_value_t = 5)]
        seeds: u64,
        /// HP requests per run.
        #[arg(long, default_value_t = 200)]
        requests: usize,
        /// The batch job's work-group time in µs (the parameter results depend on most;
        /// default: the scenario's, field 1000, demo 20000).
        #[arg(long)]
        lp_wg_us: Option<f64>,
        /// Configurations to compare, comma-separated: native, priority, l1, l2, l3.
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "native,priority,l1,l2,l3"
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
        /// The fixed cost of a device-wide preempt in µs (the model's preempt_fixed_ns).
        #[arg(long)]
        preempt_us: Option<u64>,
        /// Print the report as JSON (deterministic: the same arguments give the same bytes).
        #[arg(long, conflicts_with = "csv")]
        json: bool,
        /// Print the rows as CSV.
        #[arg(long)]
        csv: bool,
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
                    .collect::<Result<_, _>>()?,
                repeat,
                requests,
                rate,
                hp_command,
                lp_command,
                demo_args,
            };
            let report = real_run::run(&opts, |l| eprintln!("{l}")).map_err(|e| e.to_string())?;
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?
                );
            } else if csv {
                print!("{}", report.csv());
            } else {
                print!("{}", report.table());
            }
            Ok(())
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
            preempt_us,
            json,
            csv,
        } => {
            if seeds == 0 || requests == 0 {
                return Err("--seeds and --requests must be at least 1".into());
            }
            if let Some(v) = lp_wg_us
                && !(v.is_finite() && v > 0.0)
            {
                return Err(format!("--lp-wg-us {v} must be above 0"));
            }
            let mut sc = Scenario::named(&scenario, lp_wg_us)?;
            sc.seeds = (1..=seeds).collect();
            sc.requests = requests;
            sc.controls = controls
                .iter()
                .map(|c| parse_control(c))
                .collect::<Result<_, _>>()?;
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
            if let Some(v) = preempt_us {
                sc.params.preempt_fixed_ns = v * 1000;
            }
            let runs = sc.seeds.len() * (sc.controls.len() + 2);
            let mut done = 0;
            let t0 = Instant::now();
            let report = experiment::run(&sc, |what, seed| {
                done += 1;
                eprint!("\rpreempt-lab: {done}/{runs} runs ({what}, seed {seed})        ");
            })
            .map_err(|e| e.to_string())?;
            let secs = t0.elapsed().as_secs_f64();
            eprintln!(
                "\rpreempt-lab: {runs} runs in {secs:.1} s: {} dispatch completions, {:.2} M/s",
                report.completions,
                report.completions as f64 / secs / 1e6
            );
            if json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?
                );
            } else if csv {
                print!("{}", report.csv());
            } else {
                print!("{}", report.table());
            }
            Ok(())
        }
    }
}
