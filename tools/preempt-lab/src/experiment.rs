//! Running a scenario: every configuration over every seed, plus each job alone per seed,
//! then the report.

use crate::report::{Report, Row};
use crate::scenario::Scenario;
use crate::sim::{self, Control, RunResult, SetupError};

/// Runs every configuration over every seed (plus each job alone per seed) and reports.
/// `progress` is told each run as it ends.
pub fn run(scenario: &Scenario, mut progress: impl FnMut(&str, u64)) -> Result<Report, SetupError> {
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
    let mut rows = Vec::new();
    for &c in &scenario.controls {
        let mut runs: Vec<RunResult> = Vec::new();
        for &seed in &scenario.seeds {
            let r = sim::run(&scenario.setup(c, seed, true, true))?;
            completions += r.completions;
            runs.push(r);
            progress(c.name(), seed);
        }
        rows.push(Row::new(c, &runs, &hp_alone, &lp_alone));
    }
    Ok(Report::new(
        scenario,
        &hp_alone,
        &lp_alone,
        rows,
        completions,
    ))
}
