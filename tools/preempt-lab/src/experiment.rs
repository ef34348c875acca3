//! Running a scenario: every configuration over every seed, plus each job alone per seed,
//! then the report — and, for plots, each configuration's latencies and one seed's timeline.

use crate::report::{Report, Row};
use crate::scenario::Scenario;
use crate::sim::{self, Control, RunResult, Setup, SetupError};
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
/// its timeline (the other seeds run as in [`run`]). The seeds of one configuration run on
/// threads of their own (each run is deterministic and alone with its inputs, so the report is
/// the same whatever the threads do); `progress` is told in seed order.
pub fn run_with_series(
    scenario: &Scenario,
    mut progress: impl FnMut(&str, u64),
) -> Result<(Report, Series), SetupError> {
    let mut completions = 0u64;
    let hp_alone = seeds(scenario, |seed| {
        scenario.setup(Control::Alone, seed, true, false)
    })?;
    completions += report_progress(&hp_alone, "hp alone", scenario, &mut progress);
    let lp_alone = seeds(scenario, |seed| {
        scenario.setup(Control::Alone, seed, false, true)
    })?;
    completions += report_progress(&lp_alone, "lp alone", scenario, &mut progress);
    let first = scenario.seeds.first().copied().unwrap_or(0);
    let mut rows = Vec::new();
    let mut configs = Vec::new();
    for &c in &scenario.controls {
        let mut runs = seeds(scenario, |seed| {
            let mut setup = scenario.setup(c, seed, true, true);
            setup.timeline = seed == first;
            setup
        })?;
        completions += report_progress(&runs, c.name(), scenario, &mut progress);
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

/// Runs the setup `setup` gives for every seed of `scenario`, at most as many at once as the
/// machine has cores; the results in seed order.
fn seeds(
    scenario: &Scenario,
    setup: impl Fn(u64) -> Setup + Sync,
) -> Result<Vec<RunResult>, SetupError> {
    let width = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut out = Vec::with_capacity(scenario.seeds.len());
    for chunk in scenario.seeds.chunks(width.max(1)) {
        let results: Vec<Result<RunResult, SetupError>> = std::thread::scope(|s| {
            let handles: Vec<_> = chunk
                .iter()
                .map(|&seed| {
                    let setup = &setup;
                    s.spawn(move || sim::run(&setup(seed)))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
                .collect()
        });
        for r in results {
            out.push(r?);
        }
    }
    Ok(out)
}

/// Tells `progress` of each seed's run, in seed order; returns the runs' completions.
fn report_progress(
    runs: &[RunResult],
    what: &str,
    scenario: &Scenario,
    progress: &mut impl FnMut(&str, u64),
) -> u64 {
    for &seed in &scenario.seeds {
        progress(what, seed);
    }
    runs.iter().map(|r| r.completions).sum()
}
