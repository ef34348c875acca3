//! Sweeps (`sim --sweep KIND[=V1,V2,...]`): one scenario run per value of one parameter, every
//! configuration over every seed at each, reported as the usual rows with the swept value in
//! front. Every knob is an existing parameter of the scenario, the policy's classes or release
//! rule, the host model or the partition model; nothing is modelled here.

use serde::Serialize;

use crate::experiment::{self, Series};
use crate::report::{Report, Row};
use crate::scenario::{Scenario, parse_control};
use crate::workload::{Arrival, Shape};
use gfx_model::{Arbitration, Contention};
use kfdq::policy::{CostRelease, Release};

mod error;
pub use error::{NotCostRule, RunError, SweepError};

pub use crate::scenario::LATENCY_CAP_PERMILLE;

/// What a sweep varies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SweepKind {
    /// The configuration (native, priority, levels 1-3): one row per value.
    Level,
    /// The HP job's request rate (requests/s; the arrival process stays).
    HpRate,
    /// Work-groups per LP dispatch (the batch size's proxy: 20480 for the field's batch 1024).
    LpSize,
    /// The LP work-group time, µs (the guessed parameter results depend on most).
    LpWgUs,
    /// The dispatcher's arbitration hypothesis (gfx-model `Arbitration`).
    Arbitration,
    /// CU masks from the classes' `cu_share`: HP/LP percent of the partition's CUs.
    CuSplit,
    /// The edge configurations' edge delay, µs (launch or drained sample -> the agent).
    EdgeUs,
    /// The cost release rule's `k` (round trips a release must be likely to buy).
    ReleaseK,
    /// The cost release rule's `epsilon`.
    ReleaseEpsilon,
    /// The cost release rule's `C`, µs (one device-wide preempt and its restore).
    RoundTripUs,
    /// The partition's DRAM bandwidth, TB/s, with the model's contention terms on (`none`: off).
    DramTbs,
    /// The hinted configurations' hint lead, µs (how long before a request's first launch its
    /// hint comes).
    HintLead,
}

impl SweepKind {
    /// Every kind, in `--help` order.
    pub const ALL: [SweepKind; 12] = [
        SweepKind::Level,
        SweepKind::HpRate,
        SweepKind::LpSize,
        SweepKind::LpWgUs,
        SweepKind::Arbitration,
        SweepKind::CuSplit,
        SweepKind::EdgeUs,
        SweepKind::ReleaseK,
        SweepKind::ReleaseEpsilon,
        SweepKind::RoundTripUs,
        SweepKind::DramTbs,
        SweepKind::HintLead,
    ];

    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            SweepKind::Level => "level",
            SweepKind::HpRate => "hp-rate",
            SweepKind::LpSize => "lp-size",
            SweepKind::LpWgUs => "lp-wg-us",
            SweepKind::Arbitration => "arbitration",
            SweepKind::CuSplit => "cu-split",
            SweepKind::EdgeUs => "edge-us",
            SweepKind::ReleaseK => "release-k",
            SweepKind::ReleaseEpsilon => "release-epsilon",
            SweepKind::RoundTripUs => "round-trip-us",
            SweepKind::DramTbs => "dram-tbs",
            SweepKind::HintLead => "hint-lead",
        }
    }

    /// The values swept when none are given.
    pub fn defaults(self) -> &'static [&'static str] {
        match self {
            SweepKind::Level => &[
                "native", "priority", "l1", "l2", "l3", "l1e", "l2e", "l3e", "l2h",
            ],
            SweepKind::HpRate => &["5", "10", "20", "40", "80"],
            SweepKind::LpSize => &["2560", "5120", "10240", "20480", "40960"],
            SweepKind::LpWgUs => &["250", "1000", "4000"],
            SweepKind::Arbitration => &["equal", "pipe", "strict"],
            SweepKind::CuSplit => &["none", "10/90", "25/75", "50/50"],
            SweepKind::EdgeUs => &["10", "50", "150", "300", "1000"],
            SweepKind::ReleaseK => &["1", "2", "4", "8", "16"],
            SweepKind::ReleaseEpsilon => &["0.02", "0.05", "0.1", "0.2", "0.4"],
            SweepKind::RoundTripUs => &["50", "200", "800", "2000"],
            SweepKind::DramTbs => &["none", "1.3", "2.65", "5.3"],
            SweepKind::HintLead => &["0", "100", "250", "500", "1000", "2000"],
        }
    }
}

/// A parsed `--sweep`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Sweep {
    /// What it varies.
    pub kind: SweepKind,
    /// The values, as given.
    pub values: Vec<String>,
}

impl Sweep {
    /// Parses `KIND` or `KIND=V1,V2,...`.
    pub fn parse(spec: &str) -> Result<Sweep, SweepError> {
        let (kind, values) = match spec.split_once('=') {
            Some((k, v)) => (k.trim(), Some(v)),
            None => (spec.trim(), None),
        };
        let kind = SweepKind::ALL
            .into_iter()
            .find(|k| k.name() == kind)
            .ok_or_else(|| SweepError::UnknownKind(kind.into()))?;
        let values: Vec<String> = match values {
            Some(v) => v
                .split(',')
                .map(|x| x.trim().to_string())
                .filter(|x| !x.is_empty())
                .collect(),
            None => kind.defaults().iter().map(|s| s.to_string()).collect(),
        };
        if values.is_empty() {
            return Err(SweepError::NoValues(kind));
        }
        Ok(Sweep { kind, values })
    }

    /// The scenario at one value of the sweep, from `base`.
    pub fn apply(&self, base: &Scenario, value: &str) -> Result<Scenario, SweepError> {
        let mut sc = base.clone();
        let bad = |rule: &'static str| SweepError::Value {
            kind: self.kind,
            value: value.into(),
            rule,
        };
        match self.kind {
            SweepKind::Level => sc.controls = vec![parse_control(value)?],
            SweepKind::HpRate => {
                let r: f64 = value
                    .parse()
                    .ok()
                    .filter(|r: &f64| r.is_finite() && *r > 0.0)
                    .ok_or_else(|| bad("is not a rate above 0 (requests/s)"))?;
                sc.hp.arrival = match sc.hp.arrival {
                    Arrival::Periodic { .. } => Arrival::Periodic { rate: r },
                    _ => Arrival::Poisson { rate: r },
                };
            }
            SweepKind::LpSize => {
                let n: u64 = value
                    .parse()
                    .ok()
                    .filter(|n| *n >= 1)
                    .ok_or_else(|| bad("is not a work-group count of at least 1"))?;
                if sc.lp.shape == Shape::Trace {
                    return Err(bad("applies to a built-in LP shape, not a trace file"));
                }
                for k in &mut sc.lp.kernels {
                    k.workgroups = n;
                }
            }
            SweepKind::LpWgUs => {
                let us: f64 = value
                    .parse()
                    .ok()
                    .filter(|x: &f64| x.is_finite() && *x > 0.0)
                    .ok_or_else(|| bad("is not a work-group time above 0 µs"))?;
                if sc.lp.shape == Shape::Trace {
                    return Err(bad("applies to a built-in LP shape, not a trace file"));
                }
                for k in &mut sc.lp.kernels {
                    k.wg_ns = ((us * 1000.0) as u64).max(1);
                }
            }
            SweepKind::Arbitration => {
                sc.params.arbitration = match value {
                    "equal" => Arbitration::Equal,
                    "pipe" => Arbitration::PipePriority,
                    "strict" => Arbitration::StrictPriority,
                    _ => return Err(bad("is not equal, pipe or strict")),
                }
            }
            SweepKind::DramTbs => {
                sc.contention = if value == "none" {
                    None
                } else {
                    let tbs: f64 = value
                        .parse()
                        .ok()
                        .filter(|x: &f64| x.is_finite() && *x > 0.0)
                        .ok_or_else(|| bad("is not none or a bandwidth above 0 (TB/s)"))?;
                    Some(Contention {
                        dram_bytes_per_us: (tbs * 1e6).round() as u64,
                        latency_cap_permille: sc
                            .contention
                            .map_or(LATENCY_CAP_PERMILLE, |c| c.latency_cap_permille),
                    })
                };
            }
            SweepKind::CuSplit => {
                let shares = if value == "none" {
                    None
                } else {
                    let (h, l) = value
                        .split_once('/')
                        .and_then(|(h, l)| Some((h.parse::<u16>().ok()?, l.parse::<u16>().ok()?)))
                        .filter(|(h, l)| *h >= 1 && *l >= 1 && h + l <= 100)
                        .ok_or_else(|| {
                            bad("is not none or HP/LP percent of the CUs (each at least 1, at most 100 together)")
                        })?;
                    Some((h * 10, l * 10))
                };
                for c in &mut sc.policy.classes {
                    if c.name == sc.hp_class {
                        c.cu_share_permille = shares.map(|s| s.0);
                    } else if c.name == sc.lp_class {
                        c.cu_share_permille = shares.map(|s| s.1);
                    } else if shares.is_some() {
                        // Another class with a share would take CUs before ours.
                        c.cu_share_permille = None;
                    }
                }
            }
            SweepKind::EdgeUs | SweepKind::HintLead => {
                let us: u64 = value
                    .parse()
                    .map_err(|_| bad("is not a whole number of µs"))?;
                if self.kind == SweepKind::EdgeUs {
                    sc.host.edge_ns = us * 1000;
                } else {
                    sc.host.hint_lead_ns = us * 1000;
                }
            }
            SweepKind::ReleaseK | SweepKind::ReleaseEpsilon | SweepKind::RoundTripUs => {
                let x: f64 = value
                    .parse()
                    .ok()
                    .filter(|x: &f64| x.is_finite())
                    .ok_or_else(|| bad("is not a number"))?;
                let c = cost_rule(&mut sc).map_err(|source| SweepError::NotCostRule {
                    kind: self.kind,
                    value: value.into(),
                    source,
                })?;
                match self.kind {
                    SweepKind::ReleaseK => c.k = x,
                    SweepKind::ReleaseEpsilon => c.epsilon = x,
                    _ => c.round_trip_ns = (x.max(0.0) * 1000.0) as u64,
                }
                c.validate().map_err(|source| SweepError::Release {
                    kind: self.kind,
                    value: value.into(),
                    source,
                })?;
            }
        }
        Ok(sc)
    }
}

/// The scenario's cost release rule, to change a parameter of it; an error when its classes use
/// the fixed hysteresis (the message says how to choose the cost rule).
pub fn cost_rule(sc: &mut Scenario) -> Result<&mut CostRelease, NotCostRule> {
    match &mut sc.policy.release {
        Release::Cost(c) => Ok(c),
        Release::Hysteresis => Err(NotCostRule {
            scenario: sc.name.clone(),
        }),
    }
}

/// Runs `sc` at every value of `sweep` (once, with an empty value, without one). Each
/// value's series goes to `on_series` with a file-name prefix and a title for its plots;
/// `progress` is told each run as it ends.
pub fn run<E>(
    sc: &Scenario,
    sweep: Option<&Sweep>,
    mut progress: impl FnMut(&str, &str, u64),
    mut on_series: impl FnMut(&str, &str, &Series) -> Result<(), E>,
) -> Result<Vec<Point>, RunError<E>> {
    let points: Vec<(String, Scenario)> = match sweep {
        Some(sw) => sw
            .values
            .iter()
            .map(|v| Ok((v.clone(), sw.apply(sc, v)?)))
            .collect::<Result<_, SweepError>>()?,
        None => vec![(String::new(), sc.clone())],
    };
    let mut out = Vec::new();
    for (value, point) in &points {
        let (report, series) =
            experiment::run_with_series(point, |what, seed| progress(value, what, seed))?;
        let (prefix, title) = match sweep {
            Some(sw) => (
                format!(
                    "{}-{}-{}",
                    point.name,
                    sw.kind.name(),
                    value.replace('/', "-")
                ),
                format!("{}, {} {value}", point.name, sw.kind.name()),
            ),
            None => (point.name.clone(), point.name.clone()),
        };
        on_series(&prefix, &title, &series).map_err(RunError::Series)?;
        out.push(Point {
            value: value.clone(),
            report,
        });
    }
    Ok(out)
}

/// Runs per scenario of [`run`]: each configuration and each job alone, per seed.
pub fn runs(sc: &Scenario, sweep: Option<&Sweep>) -> usize {
    let one = |c: usize| sc.seeds.len() * (c + 2);
    match sweep {
        Some(sw) if sw.kind == SweepKind::Level => sw.values.len() * one(1),
        Some(sw) => sw.values.len() * one(sc.controls.len()),
        None => one(sc.controls.len()),
    }
}

/// One value's results.
#[derive(Debug, Clone, Serialize)]
pub struct Point {
    /// The value.
    pub value: String,
    /// The scenario's report at that value.
    pub report: Report,
}

/// A sweep's results.
#[derive(Debug, Clone, Serialize)]
pub struct SweepReport {
    /// What was swept.
    pub sweep: SweepKind,
    /// One per value, in the order given.
    pub points: Vec<Point>,
}

impl SweepReport {
    /// The rows as a table: the swept value, then each configuration's row; each value's
    /// baseline (the jobs alone) on a line above its rows.
    pub fn table(&self) -> String {
        let mut out = String::new();
        if let Some(p) = self.points.first() {
            let s = &p.report.scenario;
            out += &format!(
                "scenario {} swept over {}: {}\n\n",
                s.name,
                self.sweep.name(),
                s.describe()
            );
        }
        out += &format!(
            "{:<12} {} {:>9}\n",
            self.sweep.name(),
            Report::table_header(),
            "limit-LP"
        );
        for p in &self.points {
            out += &format!("{:<12} {}\n", p.value, p.report.alone.line(false));
            let limit = p.report.alone.lp_limit();
            for r in &p.report.rows {
                let gap = limit.map_or_else(|| "-".into(), |l| format!("{:.3}", l - r.lp_rel));
                out += &format!(
                    "{:<12} {} {gap:>9}\n",
                    p.value,
                    Report::table_row(r).trim_end()
                );
            }
        }
        if self.sweep == SweepKind::CuSplit {
            out += &self.split_costs();
        }
        out
    }

    /// What a split costs the latency job (its `priority` row: the masks without preemption)
    /// beside what levels 2-3 without a split cost the batch job.
    fn split_costs(&self) -> String {
        let row = |value: &str, control: &str| {
            self.points
                .iter()
                .find(|p| p.value == value)
                .and_then(|p| p.report.rows.iter().find(|r| r.control == control))
        };
        let mut out = String::from("\nwhat a split costs, beside what preemption costs:\n");
        for p in self.points.iter().filter(|p| p.value != "none") {
            if let Some(r) = row(&p.value, "priority") {
                out += &format!(
                    "  split {:<6} the latency job P50 {:.2}x, P99 {:.2}x alone; the batch job keeps {:.3}\n",
                    p.value, r.hp_p50_rel, r.hp_p99_rel, r.lp_rel
                );
            }
        }
        for control in ["level 2", "level 3"] {
            if let Some(r) = row("none", control) {
                out += &format!(
                    "  {control}, no split: the latency job P50 {:.2}x, P99 {:.2}x; the batch job keeps {:.3}\n",
                    r.hp_p50_rel, r.hp_p99_rel, r.lp_rel
                );
            }
        }
        out
    }

    /// The rows as CSV (header first), the swept parameter and value before each row.
    pub fn csv(&self) -> String {
        let mut out = format!(
            "scenario,sweep,value,control,{},lp_limit\n",
            Row::COLUMNS.join(",")
        );
        for p in &self.points {
            let limit = p
                .report
                .alone
                .lp_limit()
                .map_or_else(String::new, |l| l.to_string());
            for r in &p.report.rows {
                let nums: Vec<String> = r.numbers().iter().map(f64::to_string).collect();
                out += &format!(
                    "{},{},{},{},{},{limit}\n",
                    p.report.scenario.name,
                    self.sweep.name(),
                    p.value,
                    r.control,
                    nums.join(",")
                );
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweeps_parse_and_apply_existing_knobs() {
        let base = Scenario::field_synthetic(1000.0);
        let s = Sweep::parse("hp-rate").unwrap();
        assert_eq!(s.values, ["5", "10", "20", "40", "80"]);
        let sc = s.apply(&base, "40").unwrap();
        assert_eq!(sc.hp.arrival, Arrival::Poisson { rate: 40.0 });
        let s = Sweep::parse("arbitration=equal,strict").unwrap();
        assert_eq!(
            s.apply(&base, "equal").unwrap().params.arbitration,
            Arbitration::Equal
        );
        assert!(
            s.apply(&base, "fifo")
                .unwrap_err()
                .to_string()
                .contains("equal, pipe or strict")
        );
        let s = Sweep::parse("cu-split").unwrap();
        let sc = s.apply(&base, "25/75").unwrap();
        let share = |sc: &Scenario, n: &str| {
            sc.policy
                .classes
                .iter()
                .find(|c| c.name == n)
                .unwrap()
                .cu_share_permille
        };
        assert_eq!(
            (share(&sc, "latency"), share(&sc, "batch")),
            (Some(250), Some(750))
        );
        assert_eq!(share(&s.apply(&base, "none").unwrap(), "latency"), None);
        assert!(s.apply(&base, "60/60").is_err());
        let sc = Sweep::parse("lp-size")
            .unwrap()
            .apply(&base, "5120")
            .unwrap();
        assert_eq!(sc.lp.kernels[0].workgroups, 5120);
        let sc = Sweep::parse("level").unwrap().apply(&base, "l2").unwrap();
        assert_eq!(sc.controls.len(), 1);
        assert!(
            Sweep::parse("size")
                .unwrap_err()
                .to_string()
                .contains("hp-rate, lp-size")
        );
        assert!(Sweep::parse("hp-rate=").is_err());
        let sc = Sweep::parse("release-k")
            .unwrap()
            .apply(&base, "8")
            .unwrap();
        assert!(matches!(sc.policy.release, Release::Cost(c) if c.k == 8.0));
        let e = Sweep::parse("release-epsilon")
            .unwrap()
            .apply(&base, "1.5")
            .unwrap_err()
            .to_string();
        assert!(e.contains("0 <= epsilon < 1"), "{e}");
        let demo = Scenario::named("demo", None).unwrap();
        let e = Sweep::parse("round-trip-us")
            .unwrap()
            .apply(&demo, "400")
            .unwrap_err()
            .to_string();
        assert!(e.contains("--release cost"), "{e}");
        assert_eq!(
            Sweep::parse("edge-us")
                .unwrap()
                .apply(&base, "300")
                .unwrap()
                .host
                .edge_ns,
            300_000
        );
        let s = Sweep::parse("hint-lead").unwrap();
        assert_eq!(s.values, ["0", "100", "250", "500", "1000", "2000"]);
        assert_eq!(s.apply(&base, "250").unwrap().host.hint_lead_ns, 250_000);
        assert!(s.apply(&base, "0.5").is_err());
        let s = Sweep::parse("dram-tbs").unwrap();
        assert_eq!(s.apply(&base, "none").unwrap().contention, None);
        let c = s.apply(&base, "5.3").unwrap().contention.unwrap();
        assert_eq!(
            (c.dram_bytes_per_us, c.latency_cap_permille),
            (5_300_000, LATENCY_CAP_PERMILLE)
        );
        assert!(
            s.apply(&base, "-1")
                .unwrap_err()
                .to_string()
                .contains("TB/s")
        );
    }
}
