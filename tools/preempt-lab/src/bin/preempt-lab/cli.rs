//! The command line of `preempt-lab`: its subcommands and their arguments.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

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
pub struct Cli {
    #[command(subcommand)]
    pub cmd: Cmd,
}

// Parsed once per process: the size difference between the variants costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
pub enum Cmd {
    /// Simulate a scenario over seeds and print the report.
    ///
    /// Example: `preempt-lab sim --scenario field --lp-wg-us 4000 --json`
    Sim(SimArgs),
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

// `sim`'s arguments (the subcommand's help is the doc comment on `Cmd::Sim`).
#[derive(Args)]
pub struct SimArgs {
    /// Built-in scenario. field: measured shapes (the H100 traces of ResNet-18 batch-1
    /// inference, Poisson 20/s, next to ResNet-50 training, 8 in flight), contention terms at
    /// MI300X's 5.3 TB/s, the direct path's measured host side (edge 72 µs, decision 0,
    /// command 30 µs: docs/performance.md, "Reaction chain", "Stages"); decode: the same
    /// with an LLM decode step as the request; field-synthetic: the synthetic ResNet-18-like
    /// requests next to a ResNet-50-batch-like loop (`field` before issue 51); demo: kfdq
    /// demo's workloads, to set beside `preempt-lab run`; xsched-mi50: XSched's MI50 setup.
    #[arg(long, default_value = "field")]
    pub scenario: String,
    /// Seeds: one run per configuration and seed (at least 1; 5 or more for a spread worth reading).
    #[arg(long, default_value_t = 5)]
    pub seeds: u64,
    /// HP requests per run.
    #[arg(long, default_value_t = 200)]
    pub requests: usize,
    /// The batch job's work-group time in µs, for a built-in batch shape (the synthetic
    /// scenarios' parameter results depend on most; default: the scenario's,
    /// field-synthetic 1000, demo 20000).
    #[arg(long)]
    pub lp_wg_us: Option<f64>,
    /// Configurations to compare, comma-separated: native, priority, l1, l2, l3 (the shim's
    /// samples, fixed hysteresis: kfdq before issue 27), l1e, l2e, l3e (busy/idle edges, the
    /// classes' release rule), l1h, l2h, l3h (edges, and a request hint --hint-lead-us
    /// before each request's first launch).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "native,priority,l1,l2,l3,l1e,l2e,l3e,l2h"
    )]
    pub controls: Vec<String>,
    /// Take the classes (and [agent] grace_period) from this kfdq.toml instead of the built-in ones.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// The HP job's class in that configuration.
    #[arg(long, default_value = "latency")]
    pub hp_class: String,
    /// The LP job's class in that configuration (its level is set by each configuration).
    #[arg(long, default_value = "batch")]
    pub lp_class: String,
    /// The shim's activity sampling period in µs (KFDQ_ACTIVITY_US).
    #[arg(long)]
    pub activity_us: Option<u64>,
    /// The agent's command trip to the shim in µs.
    #[arg(long)]
    pub command_us: Option<u64>,
    /// The agent's decision in µs.
    #[arg(long)]
    pub decision_us: Option<u64>,
    /// Edge configurations: launch (or drained sample) -> the agent, µs (default 50, a guess).
    #[arg(long)]
    pub edge_us: Option<u64>,
    /// Edge configurations: the shim's sampling period while the HP queue is busy, µs (default 100).
    #[arg(long)]
    pub busy_sample_us: Option<u64>,
    /// Hinted configurations: how long before a request's first launch its hint comes, µs
    /// (default 500).
    #[arg(long)]
    pub hint_lead_us: Option<u64>,
    /// Hinted configurations: a hint not followed by work within this expires, ms (default
    /// 50: the product's per-class `hint_timeout_ms` default, docs/shim.md).
    #[arg(long)]
    pub hint_timeout_ms: Option<f64>,
    /// The release rule of the edge configurations: cost or hysteresis (default: the
    /// classes', the cost rule for the built-in ones; the sampled levels always use the
    /// fixed hysteresis).
    #[arg(long, value_name = "RULE")]
    pub release: Option<String>,
    /// The fixed hysteresis in ms (the sampled levels', and the edge ones' with --release hysteresis).
    #[arg(long)]
    pub hysteresis_ms: Option<f64>,
    /// Cost rule: C, one device-wide preempt and its restore, µs (default 200).
    #[arg(long)]
    pub round_trip_us: Option<f64>,
    /// Cost rule: k, round trips a release must be likely to buy (default 4).
    #[arg(long)]
    pub release_k: Option<f64>,
    /// Cost rule: epsilon, the accepted chance that the HP job is back within k round trips (default 0.1).
    #[arg(long)]
    pub release_epsilon: Option<f64>,
    /// Cost rule: the longest hold after an idle edge, ms (default 20).
    #[arg(long)]
    pub release_max_hold_ms: Option<f64>,
    /// The fixed cost of a device-wide preempt in µs (the model's preempt_fixed_ns).
    #[arg(long)]
    pub preempt_us: Option<u64>,
    /// A node's calibration (`kfdq bench --write FILE`, docs/hardware.md): its preempt and
    /// per-wave CWSR costs, its arbitration (unless `none`) and, for the cost release rule,
    /// its round trip C. The flags above (--preempt-us, --round-trip-us) still override.
    #[arg(long, value_name = "FILE")]
    pub calibration: Option<PathBuf>,
    /// Print the report as JSON (deterministic: the same arguments give the same bytes).
    #[arg(long, conflicts_with = "csv")]
    pub json: bool,
    /// Print the rows as CSV.
    #[arg(long)]
    pub csv: bool,
    /// Also write plots (SVG and PNG) into this directory: HP latency CDF per configuration,
    /// LP throughput over time with its preemptions (docs/experiments.md, "Plots").
    #[arg(long, value_name = "DIR")]
    pub plots: Option<PathBuf>,
    /// The HP job's dispatches from a trace file (CSV, or JSON if it ends in .json; format in
    /// docs/experiments.md); its arrivals stay the scenario's.
    #[arg(long, value_name = "FILE")]
    pub hp_trace: Option<PathBuf>,
    /// The LP job's dispatches from a trace file, run in a closed loop (--lp-wg-us is then unused).
    #[arg(long, value_name = "FILE")]
    pub lp_trace: Option<PathBuf>,
    /// The HP job's request rate per second (the scenario's arrival process stays).
    #[arg(long)]
    pub hp_rate: Option<f64>,
    /// Run once per value of one parameter: level, hp-rate, lp-size, lp-wg-us, arbitration,
    /// cu-split, dram-tbs, edge-us, release-k, release-epsilon, round-trip-us or hint-lead
    /// (µs: 0, 100, 250, 500, 1000, 2000), with its default values or KIND=V1,V2,... (e.g.
    /// cu-split=none,25/75).
    #[arg(long, value_name = "KIND[=VALUES]")]
    pub sweep: Option<String>,
    /// Turn on the model's contention terms (shared CUs and DRAM, docs/gfx-model.md) with
    /// this DRAM bandwidth of the partition in TB/s (MI300X: 5.3 for the whole GPU).
    #[arg(long, value_name = "TB/S")]
    pub dram_tbs: Option<f64>,
    /// The loaded-latency cap of the contention terms (default: the value fitted on the H100).
    #[arg(long, requires = "dram_tbs")]
    pub latency_cap: Option<f64>,
}
