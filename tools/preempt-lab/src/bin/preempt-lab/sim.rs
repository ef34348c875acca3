//! `preempt-lab sim`: a scenario over seeds (or a sweep) on the partition model, printed as a
//! table, CSV or JSON, with plots on request.

use std::time::Instant;

use kfdq::agent::AgentConfig;
use kfdq::policy::Release;
use preempt_lab::plot;
use preempt_lab::scenario::{Scenario, parse_control};
use preempt_lab::sweep::{self, Sweep, SweepReport};
use preempt_lab::workload::Shape;

use crate::calibration::apply_calibration;
use crate::cli::SimArgs;
use crate::print_report;
use crate::release::apply_release;

/// Runs `sim`.
pub fn run(args: SimArgs) -> Result<(), String> {
    let SimArgs {
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
    } = args;
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
            eprint!("\rpreempt-lab: {done}/{runs} runs ({value} {what}, seed {seed})        ");
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
