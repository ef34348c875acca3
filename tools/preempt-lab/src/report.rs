//! Aggregation over seeds and the report's forms: a table for people, JSON and CSV for scripts.
//! Everything in a report follows from the seeds; the same seeds give byte-identical JSON
//! (the simulation's wall-clock speed is printed apart, never in the report).

use kfdq::stats::nearest_rank;
use serde::Serialize;

use crate::scenario::Scenario;
use crate::sim::{Control, RunResult};

fn median(v: &[f64]) -> f64 {
    nearest_rank(v, 0.5)
}

fn max(v: &[f64]) -> f64 {
    v.iter().copied().fold(0.0, f64::max)
}

fn min(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::INFINITY, f64::min)
}

/// Rounds to 4 decimals: reports compare across runs and machines, and the last bits of a
/// float carry nothing.
fn r4(x: f64) -> f64 {
    (x * 1e4).round() / 1e4
}

fn lp_per_s(r: &RunResult) -> f64 {
    if r.elapsed_ns == 0 {
        0.0
    } else {
        r.lp_kernels as f64 / (r.elapsed_ns as f64 / 1e9)
    }
}

/// One configuration over all seeds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    /// The configuration.
    pub control: String,
    /// HP P50 relative to alone (median over seeds of the per-seed ratio).
    pub hp_p50_rel: f64,
    /// HP P99 relative to alone.
    pub hp_p99_rel: f64,
    /// HP max relative to alone.
    pub hp_max_rel: f64,
    /// Smallest per-seed P99 ratio.
    pub hp_p99_rel_min: f64,
    /// Largest per-seed P99 ratio.
    pub hp_p99_rel_max: f64,
    /// LP throughput relative to alone (median over seeds).
    pub lp_rel: f64,
    /// Device-wide preempts per simulated second (median over seeds).
    pub preempts_per_s: f64,
    /// Preemption latency over every seed's preemptions, µs: P50.
    pub preempt_latency_p50_us: f64,
    /// Preemption latency P99, µs.
    pub preempt_latency_p99_us: f64,
    /// Reaction over every seed's episodes, µs: from the HP queue getting work while the LP job
    /// is on the GPU to the LP job off it (`RunResult::reaction_us`): P50.
    pub reaction_p50_us: f64,
    /// Reaction P99, µs.
    pub reaction_p99_us: f64,
    /// Episodes of every seed in which the HP queue drained before the LP job was off the GPU.
    pub reactions_missed: u64,
    /// Hints of every seed that expired before work followed them (hinted configurations).
    pub hints_expired: u64,
    /// Per seed: HP P99 in µs.
    pub hp_p99_us_per_seed: Vec<f64>,
}

impl Row {
    /// The names of [`Row::numbers`], as CSV columns.
    pub const COLUMNS: [&str; 11] = [
        "hp_p50_rel",
        "hp_p99_rel",
        "hp_max_rel",
        "hp_p99_rel_min",
        "hp_p99_rel_max",
        "lp_rel",
        "preempts_per_s",
        "preempt_latency_p50_us",
        "preempt_latency_p99_us",
        "reaction_p50_us",
        "reaction_p99_us",
    ];

    /// The row's figures in [`Row::COLUMNS`] order.
    pub fn numbers(&self) -> [f64; 11] {
        [
            self.hp_p50_rel,
            self.hp_p99_rel,
            self.hp_max_rel,
            self.hp_p99_rel_min,
            self.hp_p99_rel_max,
            self.lp_rel,
            self.preempts_per_s,
            self.preempt_latency_p50_us,
            self.preempt_latency_p99_us,
            self.reaction_p50_us,
            self.reaction_p99_us,
        ]
    }

    /// The row of `control` from its runs, one per seed, against the alone runs of the same
    /// seeds.
    pub fn new(
        control: Control,
        runs: &[RunResult],
        hp_alone: &[RunResult],
        lp_alone: &[RunResult],
    ) -> Row {
        let ratio = |q: f64| -> Vec<f64> {
            runs.iter()
                .zip(hp_alone)
                .map(|(r, a)| {
                    let base = nearest_rank(&a.hp_latency_us, q);
                    if base > 0.0 {
                        nearest_rank(&r.hp_latency_us, q) / base
                    } else {
                        0.0
                    }
                })
                .collect()
        };
        let p99 = ratio(0.99);
        let lp: Vec<f64> = runs
            .iter()
            .zip(lp_alone)
            .map(|(r, a)| {
                let base = lp_per_s(a);
                if base > 0.0 { lp_per_s(r) / base } else { 0.0 }
            })
            .collect();
        let pps: Vec<f64> = runs
            .iter()
            .map(|r| r.device_preempts as f64 / (r.elapsed_ns.max(1) as f64 / 1e9))
            .collect();
        let lat: Vec<f64> = runs
            .iter()
            .flat_map(|r| r.preempt_latency_us.iter().copied())
            .collect();
        let reaction: Vec<f64> = runs
            .iter()
            .flat_map(|r| r.reaction_us.iter().copied())
            .collect();
        Row {
            control: control.name().into(),
            hp_p50_rel: r4(median(&ratio(0.5))),
            hp_p99_rel: r4(median(&p99)),
            hp_max_rel: r4(median(&ratio(1.0))),
            hp_p99_rel_min: r4(min(&p99)),
            hp_p99_rel_max: r4(max(&p99)),
            lp_rel: r4(median(&lp)),
            preempts_per_s: r4(median(&pps)),
            preempt_latency_p50_us: r4(nearest_rank(&lat, 0.5)),
            preempt_latency_p99_us: r4(nearest_rank(&lat, 0.99)),
            reaction_p50_us: r4(nearest_rank(&reaction, 0.5)),
            reaction_p99_us: r4(nearest_rank(&reaction, 0.99)),
            reactions_missed: runs.iter().map(|r| r.reactions_missed).sum(),
            hints_expired: runs.iter().map(|r| r.hints_expired).sum(),
            hp_p99_us_per_seed: runs
                .iter()
                .map(|r| r4(nearest_rank(&r.hp_latency_us, 0.99)))
                .collect(),
        }
    }
}

/// The jobs alone (the baselines), medians over seeds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Baseline {
    /// HP P50 alone, µs.
    pub hp_p50_us: f64,
    /// HP P99 alone, µs.
    pub hp_p99_us: f64,
    /// HP max alone, µs.
    pub hp_max_us: f64,
    /// LP kernels per second alone.
    pub lp_kernels_per_s: f64,
    /// Fraction of the time the HP queue has work alone (median over seeds); `None` where not
    /// measured (`preempt-lab run`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hp_busy_fraction: Option<f64>,
}

impl Baseline {
    /// What temporal preemption can keep of the LP job at most: the time the HP job leaves the
    /// GPU, `1 - hp_busy_fraction` (before the preempts' own cost).
    pub fn lp_limit(&self) -> Option<f64> {
        self.hp_busy_fraction.map(|b| r4(1.0 - b))
    }

    /// The alone line of tables: HP P50 / P99 (/ max), LP rate, the HP busy fraction and LP
    /// limit where measured.
    pub fn line(&self, with_max: bool) -> String {
        let max = if with_max {
            format!(", max {:.2} ms", self.hp_max_us / 1e3)
        } else {
            String::new()
        };
        let busy = match (self.hp_busy_fraction, self.lp_limit()) {
            (Some(b), Some(l)) => format!("; HP busy {:.1} % (LP limit {l:.3})", b * 100.0),
            _ => String::new(),
        };
        format!(
            "alone: HP P50 {:.2} ms, P99 {:.2} ms{max}; LP {:.1} kernels/s{busy}",
            self.hp_p50_us / 1e3,
            self.hp_p99_us / 1e3,
            self.lp_kernels_per_s,
        )
    }
}

/// What `preempt-lab run` ran (absent from `sim` reports): the processes, not the model.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunInfo {
    /// The kfdq binary whose `demo` ran the phases.
    pub kfdq: String,
    /// The HP workload's command line as run.
    pub hp_command: Vec<String>,
    /// The LP workload's command line as run.
    pub lp_command: Vec<String>,
    /// On the built-in emulator (`kfd-emu`), with this preset; `None`: on /dev/kfd.
    pub emulator_preset: Option<String>,
    /// What a queue priority buys on the kernel it ran on.
    pub priority_note: String,
    /// Requests per second asked of the HP workload.
    pub rate_per_s: f64,
}

/// A scenario's results.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The scenario as run (workloads, classes' origin, parameters, seeds). For `run`: the
    /// matching `sim` scenario's, its seeds the repetitions.
    pub scenario: Scenario,
    /// The jobs alone.
    pub alone: Baseline,
    /// One row per configuration.
    pub rows: Vec<Row>,
    /// Dispatches completed over all runs (the simulation's work; for `run`: HP requests and
    /// LP units of work).
    pub completions: u64,
    /// For `run`: what ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run: Option<RunInfo>,
}

impl Report {
    /// The report of `scenario`'s runs.
    pub fn new(
        scenario: &Scenario,
        hp_alone: &[RunResult],
        lp_alone: &[RunResult],
        rows: Vec<Row>,
        completions: u64,
    ) -> Report {
        let per = |f: &dyn Fn(&RunResult) -> f64, v: &[RunResult]| {
            r4(median(&v.iter().map(f).collect::<Vec<_>>()))
        };
        Report {
            scenario: scenario.clone(),
            alone: Baseline {
                hp_p50_us: per(&|r| nearest_rank(&r.hp_latency_us, 0.5), hp_alone),
                hp_p99_us: per(&|r| nearest_rank(&r.hp_latency_us, 0.99), hp_alone),
                hp_max_us: per(&|r| nearest_rank(&r.hp_latency_us, 1.0), hp_alone),
                lp_kernels_per_s: per(&lp_per_s, lp_alone),
                hp_busy_fraction: hp_alone
                    .iter()
                    .map(|r| r.hp_busy_ns.map(|b| b as f64 / r.elapsed_ns.max(1) as f64))
                    .collect::<Option<Vec<f64>>>()
                    .filter(|v| !v.is_empty())
                    .map(|v| r4(median(&v))),
            },
            rows,
            completions,
            run: None,
        }
    }

    /// The first line of the table: the scenario, or for `run` the processes.
    fn title(&self) -> String {
        let s = &self.scenario;
        match &self.run {
            None => format!("scenario {}: {}", s.name, s.describe()),
            Some(r) => format!(
                "run on {}: HP `{}` ({}/s), LP `{}`, {} requests x {} repetitions; classes: {} ({} / {})\n\
                 preempt us: kfdqd's command -> the shim's ack (p50 / max), not the model's decision -> LP off the GPU",
                r.emulator_preset
                    .as_ref()
                    .map_or_else(|| "/dev/kfd".into(), |p| format!("kfd-emu ({p})")),
                r.hp_command.join(" "),
                r.rate_per_s,
                r.lp_command.join(" "),
                s.requests,
                s.seeds.len(),
                s.classes_from,
                s.hp_class,
                s.lp_class,
            ),
        }
    }

    /// The report as a table.
    pub fn table(&self) -> String {
        let mut out = format!("{}\n{}\n\n", self.title(), self.alone.line(true));
        out += &Report::table_header();
        out.push('\n');
        for r in &self.rows {
            out += &Report::table_row(r);
        }
        out
    }

    /// The table's column names (no newline).
    pub fn table_header() -> String {
        format!(
            "{:<13} {:>9} {:>9} {:>9} {:>15} {:>7} {:>11} {:>18} {:>19}",
            "config",
            "P50 x",
            "P99 x",
            "max x",
            "P99 x spread",
            "LP x",
            "preempts/s",
            "preempt us p50/99",
            "reaction us p50/99"
        )
    }

    /// One row of the table (with its newline).
    pub fn table_row(r: &Row) -> String {
        let [p50, p99, max, lo, hi, lp, pps, l50, l99, r50, r99] = r.numbers();
        let pair = |a: f64, b: f64| {
            if a > 0.0 {
                format!("{a:.0} / {b:.0}")
            } else {
                "-".into()
            }
        };
        format!(
            "{:<13} {p50:>8.2}x {p99:>8.2}x {max:>8.2}x {lo:>7.2}-{hi:<7.2} {lp:>7.3} {pps:>11.1} {:>18} {:>19}\n",
            r.control,
            pair(l50, l99),
            pair(r50, r99)
        )
    }

    /// The rows as CSV (header first).
    pub fn csv(&self) -> String {
        let mut out = format!("scenario,control,{}\n", Row::COLUMNS.join(","));
        for r in &self.rows {
            let nums: Vec<String> = r.numbers().iter().map(f64::to_string).collect();
            out += &format!("{},{},{}\n", self.scenario.name, r.control, nums.join(","));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn four_decimals() {
        assert_eq!(r4(1.234_56), 1.2346);
    }
}
