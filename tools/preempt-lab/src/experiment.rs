//! Running a scenario: every configuration over every seed, plus each job alone per seed,
//! then the report — and, for plots, each configuration's latencies and one seed's timeline.

use crate::report::{Report, Row};
use crate::scenario::Scenario;
use crate::sim::{self, Control, RunResult, SetupError};
use crate::timeline::Timeline;

/// One configuration's data for plots.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigSeries {
    /// The configuration's name (as in the report's rows).
    pub control: String,
    /// HP request latencies of every seed, µs.
    pub hp_latency_us: Vec<f64>,
    /// The timeline of the representative seed (the scenario's first).
    pub timeline: Timeline,
}

/// What the plots show of a scenario's runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// The representative seed of the timelines.
    pub seed: u64,
    /// HP request latencies alone, every seed, µs.
    pub hp_alone_us: Vec<f64>,
    /// LP kernels per second alone (median over seeds, as in the report).
    pub lp_alone_per_s: f64,
    /// One per configuration, in the report's order.
    pub configs: Vec<ConfigSeries>,
}

/// Runs every configuration over every seed (plus each job alone per seed) and reports.
/// `progress` is told each run as it ends.
pub fn run(scenario: &Scenario, progress: impl FnMut(&str, u64)) -> Result<Report, SetupError> {
    run_with_series(scenario, progress).map(|(r, _)| r)
}

/// [`run`], also returning the data of the plots: the first seed of each configuration records
/// its timeline (the other seeds run as in [`run`]).
pub fn run_with_series(
    scenario: &Scenario,
    mut progress: impl FnMut(&str, u64),
) -> Result<(Report, Series), SetupError> {
    let mut hp_alone = Vec::new();
    let mut lp_alone = Vec::new();
    let mut completions = 0u64;
    for &seed in &scenario.seeds {
        let r = sim::run(&scenario.setup(Control::Alone, seed, true, false))?;
        completions += r.completions;
        hp_alone.push(r);
        progress("hp alone", seed);
        let r = sim::run(&scenario.setup(Control::Alone, seed, false, true))?;
        completions += r.completions;
        lp_alone.push(r);
        progress("lp alone", seed);
    }
    let first = scenario.seeds.first().copied().unwrap_or(0);
    let mut rows = Vec::new();
    let mut configs = Vec::new();
    for &c in &scenario.controls {
        let mut runs: Vec<RunResult> = Vec::new();
        for &seed in &scenario.seeds {
            let mut setup = scenario.setup(c, seed, true, true);
            setup.timeline = seed == first;
            let r = sim::run(&setup)?;
            completions += r.completions;
            runs.push(r);
            progress(c.name(), seed);
        }
        rows.push(Row::new(c, &runs, &hp_alone, &lp_alone));
        configs.push(ConfigSeries {
            control: c.name().into(),
            hp_latency_us: runs
                .iter()
                .flat_map(|r| r.hp_latency_us.iter().copied())
                .collect(),
            timeline: runs
                .iter_mut()
                .find_map(|r| r.timeline.take())
                .unwrap_or_default(),
        });
    }
    let report = Report::new(scenario, &hp_alone, &lp_alone, rows, completions);
    let series = Series {
        seed: first,
        hp_alone_us: hp_alone
            .iter()
            .flat_map(|r| r.hp_latency_us.iter().copied())
            .collect(),
        lp_alone_per_s: report.alone.lp_kernels_per_s,
        configs,
    };
    Ok((report, series))
}
